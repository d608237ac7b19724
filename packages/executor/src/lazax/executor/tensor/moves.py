"""Copies between lazax devices: ``t.to("lazax:1")`` from ``lazax:0``.

Contract: ``to_device_index(src, index)`` is a new tensor on ``lazax:index`` holding
``src``'s value (its shape, dtype and values; contiguous, as ``.to`` gives): ``src``'s
pending work is synced on its own device first, then its buffer is copied device to
device (asynchronously, no host round trip), and counted in ``index``'s memory.
"""

from __future__ import annotations

from lazax import ir

from ..barrier.executor import EXECUTOR
from ..state.layout import Layout
from ..state.values import ir_value
from .lazy import LazyTensor, new_tensor

__all__ = ["to_device_index"]


def to_device_index(src: LazyTensor, index: int) -> LazyTensor:
    """See the module docstring."""
    EXECUTOR.sync_tensors_graph([src])
    value = ir_value(src)
    runtime = EXECUTOR.runtime
    copied = runtime.place(
        value.node.data, runtime.single_device(runtime.devices[index]), value.spec.shape
    )
    layout = Layout(tuple(src.shape), src.dtype)
    return new_tensor(ir.device_data(value.spec, copied), layout, index)
