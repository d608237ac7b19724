"""Ops the tensor layer handles itself: transfers, copies, reads and factories.

Contract: ``SPECIAL`` maps aten overloads to handlers ``(args, kwargs) -> result``.
- ``copy_``: into a lazax tensor from a lazax or CPU tensor (broadcast, dtype cast), in
  place and through views; into a CPU tensor from a lazax one (a read).
- ``_to_copy``: to CPU reads the value (syncs); on lazax it is a dtype conversion.
- ``_local_scalar_dense`` (``.item()``): syncs and reads one element.
- The PrivateUse1 factory kernels (``empty``, ``empty_strided``, ``_copy_from``) are
  registered with ``torch.library`` so that ``torch.randn(..., device="lazax")`` and
  ``t.to("lazax")`` create lazax tensors.
"""

from __future__ import annotations

import warnings

import torch

from lazax import ir

from ._amp_ops import AMP_HANDLERS, composed
from ._barrier import EXECUTOR
from ._dispatch import run_plan
from ._dtypes import dtype_name
from ._fused_optim import FUSED_OPTIMIZER_HANDLERS
from ._plans import FUNCTIONAL, OpPlan
from ._storages import SET_STORAGE_HANDLERS
from ._tensor import Layout, LazyTensor, ir_value, new_tensor, resize_to, write
from ._transfer import from_cpu, to_cpu

__all__ = ["SPECIAL", "aten_overload", "copy_into", "register_kernels", "resize_out"]

aten = torch.ops.aten


def _cast_broadcast(value: ir.Value, shape: tuple, dtype: str) -> ir.Value:
    spec = ir.TensorSpec(shape, dtype)
    return ir.Node("lazax::copy_to", (value,), ((("%", 0), shape, dtype), ()), (spec,)).outputs[0]


def copy_into(dst: LazyTensor, src: torch.Tensor) -> None:
    """``dst.copy_(src)`` for a lazax ``dst``: broadcast, cast, write (through views)."""
    _copy_((dst, src), {})


def _copy_(args, kwargs):
    dst, src = args[0], args[1]
    if type(dst) is not LazyTensor:
        dst.copy_(to_cpu(src))
        return dst
    if type(src) is LazyTensor:
        value = ir_value(src)
    else:  # a CPU tensor, or a Python number (``x.copy_(2)``, as torch accepts)
        src = src if isinstance(src, torch.Tensor) else torch.tensor(src)
        value = from_cpu(src, dst._lz_storage.device_index)
    shape = tuple(dst.shape)
    dtype = dtype_name(dst.dtype)
    if value.spec.shape != shape:
        broadcast = torch.broadcast_shapes(value.spec.shape, shape)  # torch's error
        if broadcast != shape:
            raise RuntimeError(
                f"output with shape {list(shape)} doesn't match the broadcast shape "
                f"{list(broadcast)}"
            )
    if value.spec != ir.TensorSpec(shape, dtype):
        value = _cast_broadcast(value, shape, dtype)
    write(dst, value)
    if EXECUTOR.eager:
        del value  # a holder of the new IR, to the donation decision
        EXECUTOR.sync_storages([dst._lz_storage])
    return dst


def resize_out(out: LazyTensor, value: LazyTensor) -> None:
    """An ``out=`` tensor of another shape than the result: torch resizes it (and warns
    when it had elements); then it holds the result, cast to its dtype."""
    if out.numel() != 0:
        warnings.warn(
            f"An output with one or more elements was resized since it had shape "
            f"{list(out.shape)}, which does not match the required output shape "
            f"{list(value.shape)}. This behavior is deprecated, and in a future PyTorch "
            f"release outputs will not be resized unless they have zero elements. You can "
            f"explicitly reuse an out tensor t by resizing it, inplace, to zero elements "
            f"with t.resize_(0).",
            UserWarning,
            stacklevel=4,
        )
    shape = tuple(value.shape)
    src = ir_value(value)
    dtype = dtype_name(out.dtype)
    if src.spec.dtype != dtype:
        src = _cast_broadcast(src, shape, dtype)
    resize_to(out, shape, src)
    if EXECUTOR.eager:
        EXECUTOR.sync_storages([out._lz_storage])


_TO_COPY_PLAN = OpPlan(aten._to_copy.default, "aten::_to_copy", FUNCTIONAL)


def _to_copy(args, kwargs):
    src = args[0]
    device = kwargs.get("device")
    if device is not None and torch.device(device).type == "cpu":
        out = to_cpu(src)
        dtype = kwargs.get("dtype")
        if dtype is not None and dtype != out.dtype:
            out = out.to(dtype)
        return out
    kwargs = {k: v for k, v in kwargs.items() if k in ("dtype",) and v is not None}
    return run_plan(_TO_COPY_PLAN, args, kwargs)


def _local_scalar_dense(args, kwargs):
    return to_cpu(args[0]).item()


def _batch_norm_written(*args):
    # native_batch_norm updates running_mean/running_var in place although its schema
    # does not say so; run the functional form and write the new statistics back.
    # In eager mode the whole op (output, statistics, running stats) is one sync.
    outs, written = _batch_norm_lazily(*args)
    return [*outs, *written], outs


_native_batch_norm = composed(_batch_norm_written)


def _batch_norm_lazily(x, weight, bias, running_mean, running_var, training, momentum, eps):
    if not training:
        outs = aten._native_batch_norm_legit_no_training(
            x, weight, bias, running_mean, running_var, momentum, eps
        )
        return outs, []
    if running_mean is None or running_var is None:
        return aten._native_batch_norm_legit.no_stats(x, weight, bias, True, momentum, eps), []
    out, mean, rstd, new_mean, new_var = aten._native_batch_norm_legit_functional(
        x, weight, bias, running_mean, running_var, True, momentum, eps
    )
    copy_into(running_mean, new_mean)
    copy_into(running_var, new_var)
    return (out, mean, rstd), [running_mean, running_var]


SPECIAL = {
    aten.native_batch_norm.default: _native_batch_norm,
    aten.copy_.default: _copy_,
    aten._to_copy.default: _to_copy,
    aten._local_scalar_dense.default: _local_scalar_dense,
    **SET_STORAGE_HANDLERS,
    **AMP_HANDLERS,
    **FUSED_OPTIMIZER_HANDLERS,
}

# -- factory kernels for the PrivateUse1 key ----------------------------------------


def _index(device) -> int:
    return 0 if device is None or torch.device(device).index is None else torch.device(device).index


def _empty(size, dtype=None, layout=None, device=None, pin_memory=None, memory_format=None):
    dtype = dtype or torch.get_default_dtype()
    spec = ir.TensorSpec(tuple(size), dtype_name(dtype))
    node = ir.Node("aten::empty.memory_format", (), (((), ()), ()), (spec,))
    return new_tensor(node.outputs[0], Layout(tuple(size), dtype), _index(device))


def _empty_strided(size, stride, dtype=None, layout=None, device=None, pin_memory=None):
    return _empty(size, dtype=dtype, device=device)


def _copy_from(src, dst, non_blocking=False):
    return _copy_((dst, src), {})


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
)


def _factory(func):
    from ._fallback import fallback
    from .ops import get_lowering

    rule = get_lowering(func)
    if rule is not None:
        plan = OpPlan(func, func.name(), FUNCTIONAL, rule.random)
        return lambda *args, **kwargs: run_plan(plan, args, kwargs)
    return lambda *args, **kwargs: fallback(func, args, kwargs)


def aten_overload(name: str):
    """``"arange.start"`` -> ``torch.ops.aten.arange.start`` (no overload: ``default``)."""
    packet, _, overload = name.partition(".")
    return getattr(getattr(torch.ops.aten, packet), overload or "default")


_LIBRARY = None


def register_kernels() -> None:
    """lazax's kernels registered with torch's dispatcher: the PrivateUse1 factories, and
    the composite ``out=`` overloads torch gets wrong on subclasses (``_composite_out``)."""
    from ._composite_out import composite_out_kernels

    global _LIBRARY
    if _LIBRARY is not None:
        return
    lib = torch.library.Library("aten", "IMPL")
    lib.impl("empty.memory_format", _empty, "PrivateUse1")
    lib.impl("empty_strided", _empty_strided, "PrivateUse1")
    lib.impl("_copy_from", _copy_from, "PrivateUse1")
    for name in _FACTORIES:
        lib.impl(name, _factory(aten_overload(name)), "PrivateUse1")
    for name, kernel in composite_out_kernels():
        lib.impl(name, kernel, "AutogradPrivateUse1")
    _LIBRARY = lib
