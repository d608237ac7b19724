"""Optimizer state made as device data, so that an optimizer's first step traces the
same graph as its later ones.

Contract: torch.optim creates a parameter's state inside its first ``step()``
(``torch.zeros_like(p)`` for Adam's and AdamW's moments). Traced lazily, those zeros are
ops of the first step's graph, where every later step reads the state as inputs: two
graphs to compile for one training step (the second as large as the first). While an
optimizer steps (torch.optim's global step hooks, registered by
``register_optimizer_hooks``), ``zeros_like(p)`` of one of its parameters that holds
device data is made at once on the device, laid out as ``p`` (its devices, its
sharding; ``runtime.zeros_like``), and enters the graph as an input: the first step's
graph is the later steps' graph, compiled once. Anything else (a zeros_like of another
tensor, of a parameter still pending, of a view, with another device or layout asked
for, while a graph is captured for replay) is traced as usual. An optimizer step that
raises leaves its parameters marked until its next step (only their zeros_like is
affected: device data instead of an op of the same value).

``torch.optim.SGD`` with momentum makes its buffer in the first step differently: as a
copy of the gradient, where later steps compute ``buf * momentum + (1 - dampening) *
grad``. With ``dampening == 0`` (the default) the later steps' formula over a zero
buffer gives the gradient itself, so before an SGD step (no closure) each parameter
with a gradient and no buffer yet gets a zero buffer made as above: the first step runs
the later steps' graph, and the buffer after it holds the gradient, as torch's does (a
gradient of ``-0.0`` becomes ``+0.0``, the only difference). Other dampening, a
``differentiable`` group, an SGD subclass or a parameter that is not device data: as
torch.optim does it.

Fused and capturable Adam (and the others with those flags) count their steps in a
0-dim tensor on the device, made by ``torch.zeros((), device=p.device)``: ``empty``
then ``zero_``. A 0-dim tensor (not a view) zeroed while an optimizer steps is given an
uploaded zero as its value, an input of the graph as its later values are.

``zeros_like`` of a row of a stacked storage of device data (``foreach_rows.row_of``:
the parameters of ``lx.scan_layers``' layers) is a row of stacked zeros made on the
device: the ``k``-th zeros a row asks for in one step is a row of its storage's ``k``-th
stacked zeros, so each kind of state (Adam's two moments, SGD's momentum) of every row is
one stacked storage, which the optimizer's foreach ops update at once.
"""

from __future__ import annotations

import torch
from torch.optim.optimizer import (
    register_optimizer_step_post_hook,
    register_optimizer_step_pre_hook,
)

from lazax import ir

from .. import metrics
from ..barrier.executor import EXECUTOR
from ..state.dtypes import dtype_name
from ..state.layout import Layout
from ..tensor.lazy import LazyTensor, new_tensor
from ..tensor.transfer import from_cpu
from .foreach_rows import row_of, whole_of

__all__ = ["register_optimizer_hooks", "state_scalar_zero", "state_zeros"]

aten = torch.ops.aten

# id(optimizer) -> ids of its parameters, while its step() runs.
_STEPPING: dict[int, frozenset[int]] = {}
_HOOKS: list = []


def _before_step(optimizer, args, kwargs) -> None:
    _STEPPING[id(optimizer)] = frozenset(
        id(p) for group in optimizer.param_groups for p in group["params"]
    )
    _ROW_ZEROS.clear()
    _ROW_TAKEN.clear()
    closure = args[1] if len(args) > 1 else kwargs.get("closure")  # args[0]: the optimizer
    if type(optimizer) is torch.optim.SGD and closure is None:
        _zero_momentum_buffers(optimizer)


def _zero_momentum_buffers(optimizer) -> None:
    """Give SGD's parameters that have a gradient and no momentum buffer a zero one."""
    for group in optimizer.param_groups:
        if group["momentum"] == 0 or group["dampening"] != 0 or group["differentiable"]:
            continue
        for p in group["params"]:
            if type(p.grad) is not LazyTensor or p.grad.dtype != p.dtype:
                continue
            state = optimizer.state[p]  # (torch's _init_group makes this entry too)
            if state.get("momentum_buffer") is None:
                buffer = _zeros_laid_out_as(p, p.dtype)
                if buffer is not None:
                    state["momentum_buffer"] = buffer


def _after_step(optimizer, args, kwargs) -> None:
    _STEPPING.pop(id(optimizer), None)
    _ROW_ZEROS.clear()
    _ROW_TAKEN.clear()


def register_optimizer_hooks() -> None:
    """Register the step hooks with torch.optim (idempotent)."""
    if not _HOOKS:
        _HOOKS.append(register_optimizer_step_pre_hook(_before_step))
        _HOOKS.append(register_optimizer_step_post_hook(_after_step))


def _stepping(p) -> bool:
    return any(id(p) in ids for ids in _STEPPING.values())


def _made_on_device(args, kwargs) -> LazyTensor | None:
    p = args[0]
    if len(args) > 1 or not _stepping(p) or kwargs.get("layout") not in (None, torch.strided):
        return None
    device = kwargs.get("device")
    if device is not None and torch.device(device) != p.device:
        return None
    if kwargs.get("memory_format") not in (None, torch.preserve_format, torch.contiguous_format):
        return None
    return _zeros_laid_out_as(p, kwargs.get("dtype") or p.dtype)


# (id of a stacked storage, dtype name) -> the stacked zeros made for its rows in this
# step, in the order asked; (id of the storage, dtype name, row) -> how many of them the
# row took.
_ROW_ZEROS: dict = {}
_ROW_TAKEN: dict = {}


def _zeros_laid_out_as(p, dtype) -> LazyTensor | None:
    """Zeros of ``p``'s shape and ``dtype``, made now on ``p``'s devices with its
    sharding; None where ``p`` is not the whole of a storage that holds device data,
    or a row of one (``_row_of_zeros``)."""
    if type(p) is not LazyTensor or EXECUTOR.capture_guard is not None:
        return None
    if p._lz_view is not None:
        return _row_of_zeros(p, dtype)
    storage = p._lz_storage
    if storage.pending or p._lz_key != Layout(tuple(p.shape), p.dtype).mkey:
        return None
    name = dtype_name(dtype)
    buffer = EXECUTOR.runtime.zeros_like(storage.value.node.data, name)
    metrics.bump("CreateDataHandles")
    spec = ir.TensorSpec(tuple(p.shape), name)
    return new_tensor(ir.device_data(spec, buffer), Layout(spec.shape, dtype), storage.device_index)


def _row_of_zeros(p, dtype) -> LazyTensor | None:
    """For row ``i`` of a stacked storage of device data (``foreach_rows.row_of``): row
    ``i`` of stacked zeros made now on its device. The ``k``-th zeros of one dtype a row
    asks for in one optimizer step is a row of the ``k``-th such stacked zeros (Adam's
    ``exp_avg`` then ``exp_avg_sq``), so the state of every row is one stacked storage
    per kind, and the optimizer's foreach updates it once (``foreach_rows``)."""
    row = row_of(p)
    if row is None or row[0].pending:
        return None
    storage, index, _ = row
    kind = (id(storage), dtype_name(dtype))
    taken = _ROW_TAKEN.get((*kind, index), 0)
    made = _ROW_ZEROS.setdefault(kind, [])
    if taken == len(made):
        whole = _zeros_laid_out_as(whole_of(storage, p.dtype), dtype)
        if whole is None:
            return None
        made.append(whole)
    _ROW_TAKEN[(*kind, index)] = taken + 1
    return aten.select.int(made[taken], 0, index)


def state_zeros(handler):
    """``aten.zeros_like``'s handler, making an optimizer's state on the device first."""

    def run(args, kwargs):
        if _STEPPING:
            made = _made_on_device(args, kwargs)
            if made is not None:
                return made
        return handler(args, kwargs)

    return run


def state_scalar_zero(handler):
    """``aten.zero_``'s handler: while an optimizer steps, a whole 0-dim tensor is
    zeroed by an upload (device data) rather than by an op of the step's graph."""

    def run(args, kwargs):
        if _STEPPING and EXECUTOR.capture_guard is None:
            t = args[0]
            if type(t) is LazyTensor and t.dim() == 0 and t._lz_view is None:
                storage = t._lz_storage
                if t._lz_key == Layout((), t.dtype).mkey:
                    zero = torch.zeros((), dtype=t.dtype)
                    storage.set(from_cpu(zero, storage.device_index))
                    return t
        return handler(args, kwargs)

    return run
