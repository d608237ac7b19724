"""The stacked parameters of a loop over identical layers.

Contract of ``stack_layers(tensors)``: one parameter (or buffer) of every layer, in
layer order, as the one stacked tensor (``torch.stack(tensors)``'s value) that the
layers' loop takes, differentiable: the gradient of the stacked tensor reaches each
layer's own tensor.

- Tensors that are already the rows ``0 .. n-1`` of one stacked storage, in order, are
  passed as that storage: no stack in the program. Their gradients are the rows of the
  stacked gradient (views of it).
- Otherwise, the layers' tensors are moved into one stacked storage first when they
  can be (``rehome``): every tensor a leaf (a parameter, or a buffer) that is the whole
  of a storage holding device data on one device, unsharded, no two of them alike, no
  graph being captured for replay, and not under ``torch.inference_mode`` (whose tensors
  cannot become a parameter's data). The stack is made at once on the device; each
  tensor stays the same object (the optimizer, ``state_dict`` and checkpoints see it as
  before), its ``.data`` now row ``i`` of the stack. A tensor that aliased one of them
  without being a view of it (a ``detach()`` kept from before, or what an earlier
  ``state_dict()`` returned) keeps the old value from then on.
- Anything else (pending or sharded tensors, rows out of order, a tensor that is not a
  leaf) is stacked by an op of the program, as before: ``_StackLayers``, whose backward
  gives layer ``i`` the row of the stacked gradient at an index the program reads at
  run time.

Why rows: the gradients of rows are rows, ``zeros_like`` of a row during an optimizer
step is a row of a stacked zero buffer (``dispatch.optimizer_state``), and a foreach op
over complete rows runs once on the stacked storages (``dispatch.foreach_rows``). So
an optimizer's update of a loop's layers is one computation per parameter name, not
one per layer: the program of a training step stops growing with depth.
"""

from __future__ import annotations

import jax
import torch

from lazax import ir

from .. import metrics
from ..barrier.executor import EXECUTOR
from ..dispatch.foreach_rows import row_of, whole_of
from ..interop.calls import call_jax
from ..state.dtypes import dtype_name
from ..state.layout import Layout
from ..tensor.lazy import LazyTensor, new_tensor

__all__ = ["rehome", "stack_layers"]

aten = torch.ops.aten


def stack_layers(tensors: list) -> torch.Tensor:
    """The loop's stacked input for one parameter or buffer name (see the contract)."""
    storage = _rows_storage(tensors)
    if storage is None and rehome(tensors):
        storage = _rows_storage(tensors)
    if storage is not None:
        return _WholeOfRows.apply(storage, *tensors)
    return _StackLayers.apply(*tensors)


def _rows_storage(tensors: list):
    """The storage whose rows ``0 .. n-1`` ``tensors`` are, in order; else None."""
    found = None
    for i, t in enumerate(tensors):
        row = row_of(t)
        if row is None or row[1] != i or row[2] != len(tensors):
            return None
        if found is None:
            found = row[0]
        elif row[0] is not found:
            return None
    return found


def _movable(t) -> bool:
    if type(t) is not LazyTensor or not t.is_leaf or t._lz_view is not None:
        return False
    storage = t._lz_storage
    if storage.pending or t._lz_key != Layout(tuple(t.shape), t.dtype).mkey:
        return False
    return len(storage.value.node.data.sharding.device_set) == 1


def rehome(tensors: list) -> bool:
    """Move ``tensors`` (one parameter or buffer per layer) into one stacked storage
    made now on the device, each becoming its row; False (nothing moved) where they
    cannot be."""
    if EXECUTOR.capture_guard is not None or len(tensors) < 2:
        return False
    if torch.is_inference_mode_enabled():  # its tensors cannot become a Parameter's data
        return False
    if not all(_movable(t) for t in tensors):
        return False
    storages = {id(t._lz_storage) for t in tensors}
    devices = {t._lz_storage.device_index for t in tensors}
    if len(storages) != len(tensors) or len(devices) != 1:
        return False
    first = tensors[0]
    buffer = EXECUTOR.runtime.stack([t._lz_storage.value.node.data for t in tensors])
    metrics.bump("CreateDataHandles")
    spec = ir.TensorSpec((len(tensors), *first.shape), dtype_name(first.dtype))
    whole = new_tensor(ir.device_data(spec, buffer), Layout(spec.shape, first.dtype), *devices)
    with torch.no_grad():
        for i, t in enumerate(tensors):
            t.data = aten.select.int(whole, 0, i)
    return True


class _WholeOfRows(torch.autograd.Function):
    """The whole stacked storage of ``rows`` (no op); its gradient's rows, as views,
    are theirs."""

    @staticmethod
    def forward(ctx, storage, *rows):
        ctx.count = len(rows)
        return whole_of(storage, rows[0].dtype)

    @staticmethod
    def backward(ctx, grad):
        rows = tuple(aten.select.int(grad, 0, i) for i in range(ctx.count))
        return (None, *rows)


def _rows(stacked, indices):
    """The rows of ``stacked`` at ``indices`` (0-dim arrays: read at run time)."""
    return [jax.lax.dynamic_index_in_dim(stacked, i, 0, keepdims=False) for i in indices]


_INDICES: dict = {}  # (device, i) -> a 0-dim int32 tensor holding i, on that device


def _index(device: torch.device, i: int) -> torch.Tensor:
    found = _INDICES.get((device, i))
    if found is None:
        found = _INDICES[(device, i)] = torch.tensor(i, dtype=torch.int32).to(device)
    return found


class _StackLayers(torch.autograd.Function):
    """``torch.stack`` of one parameter (or buffer) of every layer, whose backward gives
    layer ``i`` the row of the stacked gradient at an index the program reads at run
    time (a 0-dim device tensor holding ``i``) instead of a slice at a fixed offset.

    Why: XLA's CPU compiler emits one kernel for identical fused computations, and a
    constant offset made each layer's gradient row, and everything fused with it (the
    optimizer's update of that parameter), a kernel of its own: 24 layers of 12
    parameters compiled ~280 kernels more than 2 layers. With the index an input, every
    layer's update is the same kernel."""

    @staticmethod
    def forward(ctx, *tensors):
        ctx.device = tensors[0].device
        return torch.stack(tensors)

    @staticmethod
    def backward(ctx, grad):
        # One node for every layer's row: a node per layer cost a call per parameter
        # and layer on every step's trace.
        wanted = [i for i, needed in enumerate(ctx.needs_input_grad) if needed]
        rows = iter(call_jax(_rows, grad, [_index(ctx.device, i) for i in wanted]))
        return tuple(next(rows) if needed else None for needed in ctx.needs_input_grad)
