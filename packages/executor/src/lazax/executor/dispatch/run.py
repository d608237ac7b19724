"""Running one op on lazax tensors: arguments to one IR node, outputs to tensors.

Contract of ``run_plan(plan, args, kwargs)`` (the tracing hot path: no device work, no
meta kernel on a spec-cache hit):
1. Scan the arguments into the spec-cache key and the operand list (tensors, and Python
   scalars in torch ``Scalar`` slots other than 0 and +-1, which become scalar
   parameters). A CPU tensor with dimensions raises torch's device-mismatch error, and
   so do tensors on two lazax devices (checked only once one lives off ``lazax:0``;
   the outputs live where the operands do). Equal numbers of one number list (a
   ``Scalar[]``: the per-tensor values of a ``_foreach_*`` op, bit for bit equal) share
   one scalar parameter. Why: XLA's CPU compiler emits one kernel for identical fused
   computations, and each tensor's update of AdamW's foreach path read its own element
   of the numbers (its bias corrections, all equal), which made every update a kernel of
   its own to compile (24 layers of 12 parameters: 1,095 kernels; 518 with the numbers
   shared). The price: a list whose numbers become equal, or stop being equal, is
   another graph, compiled once more.
2. Build one IR node (its hash from the cached base hash and the operands' hashes) and
   the output tensors; in-place ops write into their first argument (through views).
3. In eager mode, run the op's new values at once (``EXECUTOR.run_new``) and hand out
   tensors holding the results; an in-place op syncs the storage it wrote. View
   outputs are not run: their IR folds into the next op.
A node deeper than ``EXECUTOR.pending_depth_warning`` ops warns once per process: a
pending graph that never gets synced grows until its compile explodes.
"""

from __future__ import annotations

import warnings

import numpy as np
import torch

from lazax import ir
from lazax.pjrt import numpy_dtype

from ..barrier.checks import CHECKS, restored_if_check_fails, trace_site
from ..barrier.executor import EXECUTOR
from ..metrics import TRACED_OPS
from ..ops.manual import MANUAL
from ..state.layout import Layout
from ..state.rng import RNG
from ..state.storage import DEVICES_IN_USE
from ..state.values import ir_value, write
from ..tensor.lazy import LazyTensor, new_alias, new_tensor
from ..tensor.moves import to_device_index
from ..tensor.transfer import from_cpu
from .fallback import fallback
from .plans import FALLBACK, INPLACE, LIST_SLOT, SCALAR_SLOT, VIEW, NeedsFallback, OpPlan

__all__ = ["apply_eager_sync", "run_in_place", "run_plan", "upload"]


_NP_SCALAR: dict[str, type] = {}


def _device_mismatch(t: torch.Tensor) -> RuntimeError:
    return RuntimeError(
        f"Expected all tensors to be on the same device, but found at least two devices, "
        f"lazax:0 and {t.device}!"
    )


def _scan(value, slot: int, operands: list, lists: list | None = None):
    """Key for one argument; appends its operands (see step 2), and to ``lists`` the
    ``(start, end)`` of the operands a number list (``Scalar[]``) added."""
    t = type(value)
    if t is LazyTensor:
        operands.append(value)
        return value._lz_key
    if t is float or t is int:
        if slot and value != 0 and value != 1 and value != -1:
            operands.append(value)
            return t
        # Kept in the key by value, with its type: 12 == 12.0 == True as dict keys, but
        # arange(12) is int64 and arange(12.0) float32.
        return (t, value) if slot or t is float else value
    if t is bool:
        return (bool, value)
    if t is list or t is tuple:
        inner = SCALAR_SLOT if slot == LIST_SLOT else 0
        start = len(operands)
        key = tuple([_scan(v, inner, operands) for v in value])
        if inner and lists is not None and len(operands) - start > 1:
            lists.append((start, len(operands)))
        return key
    if isinstance(value, torch.Tensor):
        if value.dim() == 0:  # 0-dim CPU tensors mix with device tensors, as for cuda
            lazy = upload(value)
            operands.append(lazy)
            return lazy._lz_key
        raise _device_mismatch(value)
    return value


def _listed(lists: list) -> dict:
    """Operand position -> the parameters made so far for its number list, by value."""
    out: dict = {}
    for start, end in lists:
        made: dict = {}
        for k in range(start, end):
            out[k] = made
    return out


def upload(cpu: torch.Tensor) -> LazyTensor:
    t = new_tensor(from_cpu(cpu), Layout(tuple(cpu.shape), cpu.dtype))
    t._lz_from_host = True  # a 0-dim CPU tensor: it follows the op's device (_one_device)
    return t


def _one_device(operands: list, index: int) -> int:
    """The device every tensor operand is on (``index``, a factory's, if none), or
    torch's error for tensors on two devices. Uploaded 0-dim CPU tensors follow it, as
    they do a cuda op's device. Only once a tensor lives off ``lazax:0``."""
    found = None
    for o in operands:
        if type(o) is LazyTensor and not getattr(o, "_lz_from_host", False):
            here = o._lz_storage.device_index
            if found is None:
                found = here
            elif here != found:
                low, high = sorted((found, here))
                raise RuntimeError(
                    f"Expected all tensors to be on the same device, but found at least "
                    f"two devices, lazax:{low} and lazax:{high}!"
                )
    index = index if found is None else found
    if index:
        for i, o in enumerate(operands):
            if type(o) is LazyTensor and getattr(o, "_lz_from_host", False):
                operands[i] = to_device_index(o, index)
    return index


def run_in_place(plan: OpPlan, args: tuple, kwargs: dict):
    """An in-place op (``plan.kind == INPLACE``), traced by ``run_plan``; in eager mode the
    storages it wrote then run at once. The sync runs here, once ``run_plan`` has
    returned: its frame held the op's new IR, which the donation decision would count
    as holders of the buffers being overwritten (no donation, with no error to say so)."""
    if not EXECUTOR.eager:
        return run_plan(plan, args, kwargs)
    written: list = []
    result = run_plan(plan, args, kwargs, written)
    if written:  # (storages, their values before the write if the op checks values)
        storages, before = written
        if before is None:
            EXECUTOR.sync_storages(storages, hold_manual=True)
        else:
            with restored_if_check_fails(before):
                EXECUTOR.sync_storages(storages, hold_manual=True)
    return result


def run_plan(
    plan: OpPlan, args: tuple, kwargs: dict, written: list | None = None, device_index: int = 0
):
    """Trace one op (see the module docstring). ``written``: for an in-place op in eager
    mode (``run_in_place``), receives what to sync and what a failed check restores;
    ``device_index``: a factory's device (an op with tensor operands takes theirs)."""
    operands: list = []
    lists: list = []
    slots = plan.slots
    key = []
    n_slots = len(slots)
    for i, a in enumerate(args):
        if type(a) is LazyTensor:  # the common case, inlined
            operands.append(a)
            key.append(a._lz_key)
        else:
            key.append(_scan(a, slots[i] if i < n_slots else 0, operands, lists))
    if kwargs:
        kw_slots = plan.kw_slots
        key.append(
            tuple([(k, _scan(v, kw_slots.get(k, 0), operands, lists)) for k, v in kwargs.items()])
        )
    key = tuple(key)
    info = plan.cache.get(key)
    if info is None or info is FALLBACK:
        if info is FALLBACK:
            return fallback(plan.func, args, kwargs)
        try:
            info = plan.infer(key, args, kwargs, operands)
        except NeedsFallback:
            return fallback(plan.func, args, kwargs)
    TRACED_OPS[plan.op_name] = TRACED_OPS.get(plan.op_name, 0) + 1
    index = device_index
    if DEVICES_IN_USE.several:
        index = _one_device(operands, index)
    values = []
    scalar_dtypes = info.scalar_dtypes
    j = 0
    listed = _listed(lists) if lists else None
    for k, o in enumerate(operands):
        if type(o) is LazyTensor:
            if o._lz_view is None:
                values.append(o._lz_storage.value)
            else:
                values.append(ir_value(o))
        else:
            name = scalar_dtypes[j]
            j += 1
            np_type = _NP_SCALAR.get(name)
            if np_type is None:
                np_type = _NP_SCALAR[name] = numpy_dtype(name).type
            try:
                scalar = np_type(o)
            except OverflowError:  # wrap like torch does (uint8 + 300)
                scalar = np.asarray(o).astype(numpy_dtype(name))[()]
            if listed is not None and k in listed:  # one parameter per value of a list
                same = (name, scalar.tobytes())
                parameter = listed[k].get(same)
                if parameter is None:
                    parameter = listed[k][same] = ir.scalar_parameter(name, scalar)
                values.append(parameter)
            else:
                values.append(ir.scalar_parameter(name, scalar))
    if plan.random:
        values.append(_seed_parameter())
    node = ir.Node(info.node_op, tuple(values), info.attrs, info.specs, info.base_hash)
    if info.checked and CHECKS.enabled:
        node.data = trace_site()  # named if a device-side check of this op fails
    if node.depth > EXECUTOR.pending_depth_warning:
        _warn_unbounded_graph(node.depth)
    outputs = node.outputs
    kind = plan.kind
    if kind == INPLACE:
        target = args[0]
        targets = target if isinstance(target, (list, tuple)) else (target,)
        before = None
        if info.checked and written is not None:  # what a failed check puts back
            before = [(t._lz_storage, t._lz_storage.value) for t in targets]
        for t, v in zip(targets, outputs):
            write(t, v)
        if written is not None:  # run_in_place syncs them, after this frame is gone
            written[:] = [[t._lz_storage for t in targets], before]
        return target if plan.returns_self else None
    layouts = info.layouts
    if not layouts:  # every output masked off (convolution_backward's output_mask)
        return _rebuild(info.result, [])
    if kind == VIEW:
        # Views are not run even in eager mode: a view of device data computes nothing
        # new, and its IR folds into the graph of the next op that reads it (torch's
        # eager views are free too). Reading it (print, .cpu()) still syncs it.
        storage = args[plan.alias_source]._lz_storage
        made = [new_alias(v, lay, storage) for v, lay in zip(outputs, layouts)]
        return made[0] if info.result == 0 else _rebuild(info.result, made)
    eager = EXECUTOR.eager
    if MANUAL.active:  # a value that differs per device waits for disable_manual_sharding
        single = MANUAL.one_mesh([v.node for v in values], plan.op_name) is None
        if not single and torch.is_grad_enabled():
            _check_one_value_operands(operands, values, plan.op_name)
        eager = single and eager
    if eager:
        # Run first, then hand out tensors that hold the results: no pending IR to
        # register and settle, nothing to donate (no tensor holds the outputs yet), and
        # a failure leaves nothing behind.
        ran = EXECUTOR.run_new(outputs, index)
        made = [new_tensor(v, lay, index) for v, lay in zip(ran, layouts)]
    elif len(outputs) == 1:
        made = [new_tensor(node, layouts[0], index)]
    else:
        made = [new_tensor(v, lay, index) for v, lay in zip(outputs, layouts)]
    result = info.result
    if result == 0:
        return made[0]
    return _rebuild(result, made)


def _check_one_value_operands(operands: list, values: list, op_name: str) -> None:
    """An op on per-device values whose other operand holds one value and requires grad:
    its gradient would hold one value per device. Where that gradient flows on into the
    graph (the operand was computed), autograd would add it to the gradients of the
    operand's other uses, and no later step could tell the parts apart: refused. A
    parameter (or a view of one) gets a gradient that cannot be read: warned."""
    for o, v in zip(operands, values):
        if type(o) is not LazyTensor or not o.requires_grad or MANUAL.of(v.node) is not None:
            continue
        base = o._base if o._base is not None else o
        advice = (
            "pass it to enable_manual_sharding(t, mesh, (None,) * t.dim()) first, which "
            "sums its gradient over the devices (lx.shard_map does that for its arguments)"
        )
        if base.grad_fn is not None:
            raise ValueError(
                f"{op_name}: an operand of shape {tuple(o.shape)} holds one value and "
                f"requires grad, and is used on each device's own values inside manual "
                f"sharding without entering it; {advice}"
            )
        warnings.warn(
            f"lazax: a tensor that requires grad (shape {tuple(o.shape)}) is used on each "
            f"device's own values inside manual sharding without entering it, so its "
            f"gradient will hold one value per device, which cannot be read; {advice}",
            UserWarning,
            stacklevel=5,
        )
        return


def _warn_unbounded_graph(depth: int) -> None:
    """Once per process: a pending graph this deep means nothing syncs it."""
    warnings.warn(
        f"lazax: the pending graph is now {depth} ops deep and still growing, so nothing "
        f"is syncing it: a loop without lazax.modes.sync() (or one that only reads a "
        f"value such as loss.item(), which runs just that value's graph)? Call sync() "
        f"once per step, or the compile time of the eventual graph explodes. "
        f"(LAZAX_PENDING_GRAPH_WARN_DEPTH, now {EXECUTOR.pending_depth_warning}, sets "
        f"when this warning comes.)",
        RuntimeWarning,
        stacklevel=4,
    )
    EXECUTOR.pending_depth_warning = 1 << 62  # said once


def _seed_parameter() -> ir.Node:
    """The seed operand of a random op: a runtime parameter, never part of the hash."""
    seed = ir.scalar_parameter("int64", np.int64(RNG.next_key()))
    if RNG.recorder is not None:
        RNG.recorder.append(seed)
    return seed


def _rebuild(template, made: list):
    if type(template) is int:
        return made[template]
    kind, inner = template
    if kind == "const":
        return inner
    return kind(_rebuild(t, made) for t in inner)


def apply_eager_sync(tensors) -> None:
    """Eager mode: run just these new values now, without blocking (a value that differs
    per device stays pending)."""
    EXECUTOR.sync_tensors_graph(tensors, wait=False, sync_ltc_data=False, hold_manual=True)
