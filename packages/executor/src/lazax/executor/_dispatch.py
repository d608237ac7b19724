"""``LazyTensor.__torch_dispatch__``: every aten op on a lazax tensor lands here.

Contract, per call (the tracing hot path: no device work, no meta kernel on a hit):
1. Find the op's handler (built once per overload): a special rule (copies, transfers,
   reads), an ``OpPlan`` when a lowering exists (in-place ops use their functional
   rule and write back), else the CPU fallback.
2. Scan the arguments into the spec-cache key and the operand list (tensors, and Python
   scalars in torch ``Scalar`` slots other than 0 and +-1, which become scalar
   parameters). A CPU tensor with dimensions raises torch's device-mismatch error.
3. Build one IR node (its hash from the cached base hash and the operands' hashes) and
   the output tensors; in-place ops write into their first argument (through views).
4. In eager mode, run the op's new values at once (``EXECUTOR.run_new``) and hand out
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

from ._barrier import EXECUTOR
from ._checks import CHECKS, restored_if_check_fails, trace_site
from ._device import RNG
from ._fallback import fallback
from ._out_checks import checked_out
from ._plans import (
    FALLBACK,
    FUNCTIONAL,
    INPLACE,
    LIST_SLOT,
    SCALAR_SLOT,
    VIEW,
    NeedsFallback,
    OpPlan,
)
from ._tensor import Layout, LazyTensor, ir_value, new_alias, new_tensor, write
from ._transfer import from_cpu
from .ops import get_lowering

__all__ = ["apply_eager_sync", "dispatch", "run_plan"]

aten = torch.ops.aten
_HANDLERS: dict = {}
_NP_SCALAR: dict[str, type] = {}


def _device_mismatch(t: torch.Tensor) -> RuntimeError:
    return RuntimeError(
        f"Expected all tensors to be on the same device, but found at least two devices, "
        f"lazax:0 and {t.device}!"
    )


def _scan(value, slot: int, operands: list):
    """Key for one argument; appends its operands (see step 2)."""
    t = type(value)
    if t is LazyTensor:
        operands.append(value)
        return value._lz_key
    if t is float or t is int:
        if slot and value != 0 and value != 1 and value != -1:
            operands.append(value)
            return t
        return (t, value) if slot else value
    if t is list or t is tuple:
        inner = SCALAR_SLOT if slot == LIST_SLOT else 0
        return tuple([_scan(v, inner, operands) for v in value])
    if isinstance(value, torch.Tensor):
        if value.dim() == 0:  # 0-dim CPU tensors mix with device tensors, as for cuda
            lazy = _upload(value)
            operands.append(lazy)
            return lazy._lz_key
        raise _device_mismatch(value)
    return value


def _upload(cpu: torch.Tensor) -> LazyTensor:
    return new_tensor(from_cpu(cpu), Layout(tuple(cpu.shape), cpu.dtype))


def run_plan(plan: OpPlan, args: tuple, kwargs: dict):
    operands: list = []
    slots = plan.slots
    key = []
    n_slots = len(slots)
    for i, a in enumerate(args):
        if type(a) is LazyTensor:  # the common case, inlined
            operands.append(a)
            key.append(a._lz_key)
        else:
            key.append(_scan(a, slots[i] if i < n_slots else 0, operands))
    if kwargs:
        kw_slots = plan.kw_slots
        key.append(tuple([(k, _scan(v, kw_slots.get(k, 0), operands)) for k, v in kwargs.items()]))
    key = tuple(key)
    info = plan.cache.get(key)
    if info is None or info is FALLBACK:
        if info is FALLBACK:
            return fallback(plan.func, args, kwargs)
        try:
            info = plan.infer(key, args, kwargs, operands)
        except NeedsFallback:
            return fallback(plan.func, args, kwargs)
    values = []
    scalar_dtypes = info.scalar_dtypes
    j = 0
    for o in operands:
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
        if info.checked and EXECUTOR.eager:  # what a failed check puts back
            before = [(t._lz_storage, t._lz_storage.value) for t in targets]
        for t, v in zip(targets, outputs):
            write(t, v)
        if EXECUTOR.eager:
            # This frame's references to the new IR would read as holders of the old
            # buffer, and keep the sync from donating it.
            del values, node, outputs, v
            storages = [t._lz_storage for t in targets]
            if not info.checked:
                EXECUTOR.sync_storages(storages)
            else:
                with restored_if_check_fails(before):
                    EXECUTOR.sync_storages(storages)
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
    first = operands[0] if operands else None
    index = first._lz_storage.device_index if type(first) is LazyTensor else 0
    if EXECUTOR.eager:
        # Run first, then hand out tensors that hold the results: no pending IR to
        # register and settle, nothing to donate (no tensor holds the outputs yet), and
        # a failure leaves nothing behind.
        made = [new_tensor(v, lay, index) for v, lay in zip(EXECUTOR.run_new(outputs), layouts)]
    elif len(outputs) == 1:
        made = [new_tensor(node, layouts[0], index)]
    else:
        made = [new_tensor(v, lay, index) for v, lay in zip(outputs, layouts)]
    result = info.result
    if result == 0:
        return made[0]
    return _rebuild(result, made)


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
    """Eager mode: run just these new values now, without blocking."""
    EXECUTOR.sync_tensors_graph(tensors, wait=False, sync_ltc_data=False)


# -- handlers ------------------------------------------------------------------------


def _is_out(arg) -> bool:
    return arg.kwarg_only and arg.alias_info is not None and arg.alias_info.is_write


def _signature(func, drop_out: bool) -> tuple:
    """Argument names and types, without alias annotations (and without out= args)."""
    return tuple(
        (a.name, str(a.type), a.kwarg_only)
        for a in func._schema.arguments
        if not (drop_out and _is_out(a))
    )


# In-place ops whose functional form has another name.
_FUNCTIONAL_NAMES = {"normal": ("normal_functional",)}


def _functional_counterpart(func, drop_out: bool = False):
    """The functional overload taking the same arguments: ``add_.Tensor`` ->
    ``add.Tensor``, ``pow_.Tensor`` -> ``pow.Tensor_Tensor``, ``add.out`` -> ``add.Tensor``.
    Matching by signature, not by overload name, so that a rule is never fed its
    arguments in another order (``pow_.Scalar`` is not ``pow.Scalar``)."""
    name = func._schema.name.split("::")[1]
    base = name if drop_out else (name[:-1] if name.endswith("_") else None)
    if base is None:
        return None
    wanted = _signature(func, drop_out)
    for packet_name in (base, *_FUNCTIONAL_NAMES.get(base, ())):
        packet = getattr(aten, packet_name, None)
        if packet is None:
            continue
        for overload in packet.overloads():
            candidate = getattr(packet, overload)
            if candidate is func or any(_is_out(a) for a in candidate._schema.arguments):
                continue
            if _signature(candidate, False) == wanted:
                return candidate
    return None


def _run_out(func, plan: OpPlan, args: tuple, kwargs: dict):
    """An ``out=`` overload: the functional rule, then a copy into each out tensor."""
    out_names = [a.name for a in func._schema.arguments if _is_out(a)]
    outs = [kwargs[n] for n in out_names]
    result = run_plan(plan, args, {k: v for k, v in kwargs.items() if k not in out_names})
    return write_outs(outs, result if isinstance(result, (tuple, list)) else (result,))


def write_outs(outs: list, results) -> torch.Tensor | tuple:
    """Each result into its ``out=`` tensor (resized as torch resizes it); the outs."""
    from ._special import copy_into, resize_out

    for out, value in zip(outs, results):
        if tuple(out.shape) != tuple(value.shape):
            resize_out(out, value)
        else:
            copy_into(out, value)
    return outs[0] if len(outs) == 1 else tuple(outs)


# Ops that alias their input although their schema does not say so: torch's composite
# out= kernels (kron.out, ...) write through an _unsafe_view of the out tensor.
_UNDECLARED_VIEWS = {"aten::_unsafe_view"}


def _is_view(func) -> bool:
    if func._schema.name in _UNDECLARED_VIEWS:
        return True
    returns = func._schema.returns
    return bool(returns) and all(
        r.alias_info is not None and not r.alias_info.is_write for r in returns
    )


def _mutates(func) -> bool:
    return any(a.alias_info is not None and a.alias_info.is_write for a in func._schema.arguments)


# Ops whose index tensors may live on the CPU, as torch allows for cuda tensors
# (``x[torch.tensor([0, 2])] = y`` on the device): uploaded before the op runs.
_CPU_INDICES_OK = {
    "aten::index",
    "aten::index_put",
    "aten::index_put_",
    "aten::_index_put_impl_",
    "aten::_unsafe_index",
    "aten::_unsafe_index_put",
}


def _upload_indices(handler):
    def run(args, kwargs):
        indices = args[1]
        if any(type(i) is not LazyTensor and isinstance(i, torch.Tensor) for i in indices):
            moved = [
                _upload(i) if isinstance(i, torch.Tensor) and type(i) is not LazyTensor else i
                for i in indices
            ]
            args = (args[0], moved, *args[2:])
        return handler(args, kwargs)

    return run


def make_handler(func):
    handler = _make_handler(func)
    if func._schema.name in _CPU_INDICES_OK:
        return _upload_indices(handler)
    return handler


def _make_handler(func):
    from ._special import SPECIAL

    special = SPECIAL.get(func)
    if special is not None:
        return special
    if _mutates(func):
        arguments = func._schema.arguments
        first = arguments[0]
        if any(_is_out(a) for a in arguments):
            functional = _functional_counterpart(func, drop_out=True)
            rule = get_lowering(functional) if functional is not None else None
            if rule is None or _is_view(functional):
                return checked_out(func, lambda args, kwargs: fallback(func, args, kwargs))
            plan = OpPlan(functional, functional.name(), FUNCTIONAL, rule.random)
            return checked_out(func, lambda args, kwargs: _run_out(func, plan, args, kwargs), plan)
        inplace_self = first.alias_info is not None and first.alias_info.is_write
        functional = _functional_counterpart(func) if inplace_self else None
        rule = get_lowering(functional) if functional is not None else None
        if rule is None:
            return lambda args, kwargs: fallback(func, args, kwargs)
        if torch.Tag.inplace_view in func.tags:
            return _inplace_view_handler(func, _make_handler(functional))
        plan = OpPlan(func, functional.name(), INPLACE, rule.random)
        return lambda args, kwargs: run_plan(plan, args, kwargs)
    rule = get_lowering(func)
    if rule is None:
        return lambda args, kwargs: fallback(func, args, kwargs)
    plan = OpPlan(func, func.name(), VIEW if _is_view(func) else FUNCTIONAL, rule.random)
    return lambda args, kwargs: run_plan(plan, args, kwargs)


def _inplace_view_handler(func, view_handler):
    """``t_``, ``transpose_``, ``squeeze_``, ``unsqueeze_``, ``as_strided_``: change
    ``self``'s shape and strides, never its data. The view op gives the lazax view;
    the op itself, below the Python dispatch key, gives the torch metadata (torch's
    own composite kernel, so torch's checks and errors)."""

    def run(args, kwargs):
        self = args[0]
        view = view_handler(args, kwargs)
        with torch._C._DisableTorchDispatch():
            func(*args, **kwargs)
        was_view = self._lz_view is not None
        self._lz_view = view._lz_view
        self._lz_value = view._lz_value
        self._lz_seen = view._lz_seen
        self._lz_key = view._lz_key
        if self._lz_view is not None and not was_view:
            self._lz_storage.add_view(self)
        return self

    return run


# An op reads storages' IR; a sync decides from who holds that IR what it may donate.
# Ops and syncs of several threads (the autograd engine runs backward on a thread of
# its own) take turns, so that no op reads IR between a decision and its hand-back.
_acquire = EXECUTOR.sync_lock.acquire
_release = EXECUTOR.sync_lock.release


def dispatch(cls, func, types, args=(), kwargs=None):
    # Keyed by id: OpOverload.__hash__ is Python code, and overloads live forever.
    handler = _HANDLERS.get(id(func))
    if handler is None:
        handler = _HANDLERS[id(func)] = make_handler(func)
    _acquire()
    try:
        return handler(args, kwargs or {})
    finally:
        _release()


LazyTensor.__torch_dispatch__ = classmethod(dispatch)
