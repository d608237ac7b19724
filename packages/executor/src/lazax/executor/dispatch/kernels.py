"""lazax's kernels registered with torch's dispatcher.

Contract: ``register_kernels()`` (idempotent, at import of ``lazax.executor``) registers
the PrivateUse1 factory kernels (``empty``, ``empty_strided``, ``_copy_from`` and the
factories in ``_FACTORIES``) with ``torch.library``, so that
``torch.randn(..., device="lazax")`` and ``t.to("lazax")`` create lazax tensors, and
the composite ``out=`` overloads torch gets wrong on subclasses (``composite_out``).
"""

from __future__ import annotations

import torch

from lazax import ir

from ..ops import get_lowering
from ..ops.rnn import gru_cell_backward_specs, gru_cell_specs
from ..state.dtypes import dtype_name
from ..state.layout import Layout
from ..tensor.lazy import new_tensor
from ..tensor.streams import current_index
from .composite_out import composite_out_kernels
from .fallback import fallback
from .plans import FUNCTIONAL, OpPlan, aten_overload
from .run import run_plan
from .special import copy_from

__all__ = ["register_kernels"]


def _index(device) -> int:
    """``device``'s index; with none given (``device="lazax"``), the current device's
    (``torch.accelerator.set_device_index``), as cuda's factories do."""
    index = None if device is None else torch.device(device).index
    return current_index() if index is None else index


def _empty(size, dtype=None, layout=None, device=None, pin_memory=None, memory_format=None):
    dtype = dtype or torch.get_default_dtype()
    spec = ir.TensorSpec(tuple(size), dtype_name(dtype))
    node = ir.Node("aten::empty.memory_format", (), (((), ()), ()), (spec,))
    return new_tensor(node.outputs[0], Layout(tuple(size), dtype), _index(device))


def _empty_strided(size, stride, dtype=None, layout=None, device=None, pin_memory=None):
    """torch's strides kept: a contiguous tensor, or a strided view of a flat one as
    large as the strides reach (AOTAutograd gives a tangent the strides its backward
    graph was traced with this way, and that graph's views rely on them)."""
    size, stride = tuple(size), tuple(stride)
    if stride == _contiguous_strides(size) or 0 in size:
        return _empty(size, dtype=dtype, device=device)
    reach = 1 + sum((n - 1) * s for n, s in zip(size, stride))
    return _empty((reach,), dtype=dtype, device=device).as_strided(size, stride)


def _contiguous_strides(size) -> tuple:
    strides, step = [], 1
    for n in reversed(size):
        strides.append(step)
        step *= max(n, 1)
    return tuple(reversed(strides))


# Factories whose CPU-side composite would build ``empty`` and fill it through an
# ``out=`` kernel that resizes it (a lazax tensor cannot be resized in place): give them
# a PrivateUse1 kernel that builds the value directly.
_FACTORIES = (
    "arange",
    "arange.start",
    "arange.start_step",
    "linspace",
    "logspace",
    "eye",
    "eye.m",
    "randperm",
    "full",
    "tril_indices",
    "triu_indices",
    "_efficientzerotensor",
    "kaiser_window",  # torch's composite fills through a DispatchStub
    "kaiser_window.periodic",
    "kaiser_window.beta",
)


def _factory(func):
    rule = get_lowering(func)
    if rule is not None:
        plan = OpPlan(func, func.name(), FUNCTIONAL, rule.random)
        return lambda *args, **kwargs: run_plan(
            plan, args, kwargs, device_index=_index(kwargs.get("device"))
        )
    # Every factory listed has a rule today; one added without a rule is built on the
    # host and uploaded (no device input to read, nothing to sync): counted, but not the
    # silent CPU work LAZAX_FALLBACK warns about.
    return lambda *args, **kwargs: fallback(func, args, kwargs, notice=False)


_LIBRARY = None


def register_kernels() -> None:
    """lazax's kernels registered with torch's dispatcher: the PrivateUse1 factories, and
    the composite ``out=`` overloads torch gets wrong on subclasses (``composite_out``)."""
    global _LIBRARY
    if _LIBRARY is not None:
        return
    lib = torch.library.Library("aten", "IMPL")
    lib.impl("empty.memory_format", _empty, "PrivateUse1")
    lib.impl("empty_strided", _empty_strided, "PrivateUse1")
    lib.impl("_copy_from", copy_from, "PrivateUse1")
    for name in _FACTORIES:
        lib.impl(name, _factory(aten_overload(name)), "PrivateUse1")
    # torch has meta kernels for the fused LSTM cell, not the GRU's (a CUDA-only op):
    # without them dynamo cannot fake nn.GRU on a lazax tensor.
    lib.impl("_thnn_fused_gru_cell", gru_cell_specs, "Meta")
    lib.impl("_thnn_fused_gru_cell_backward", gru_cell_backward_specs, "Meta")
    for name, kernel in composite_out_kernels():
        lib.impl(name, kernel, "AutogradPrivateUse1")
    _LIBRARY = lib
