"""Argument checks: torch's CPU validation that the meta kernels skip.

lazax infers output specs with torch's meta kernels, so most bad calls raise torch's own
errors. Some CPU kernels check more than their meta kernels (``uniform_``'s range,
``multinomial``'s sample count, convolution's dilation); the op's family registers those
checks here, in the words of the CPU kernel.

Contract:
- ``@argument_check(aten.x.overload, ...)`` registers ``fn(*args, **kwargs)`` for those
  overloads, called with the aten op's own arguments (lazax tensors: their shape, dtype
  and strides; nothing is read from the device). It raises the CPU kernel's exception
  type and message, or returns.
- It runs once per spec-cache key, on a miss, once the meta kernel has accepted the
  call (so it needs only the checks the meta kernel lacks): a hit costs nothing. So it
  may only depend on what the key holds: shapes, dtypes, strides and the arguments that
  are not lifted (int, bool and float attribute slots), never on a Python number in a
  torch ``Scalar`` slot (a parameter that changes without a miss) nor on tensor values
  (those are device-side checks).
- A check registered for a functional overload also covers its in-place form (the plan
  is found by the functional's name). An ``out=`` overload has checks of its own (see
  ``dispatch.out_checks``): register them under the ``out=`` overload.

The reverse also happens: a meta kernel that refuses what the CPU kernel computes
(``_grouped_mm``'s takes bfloat16 only, CUDA's rule; the CPU kernel takes float32).
``@output_specs(aten.x.overload)`` registers ``fn(*args, **kwargs)`` that lazax calls
instead of the meta kernel, with the same meta arguments: it returns the outputs as
meta tensors, raising the CPU kernel's errors itself. Same key rules as a check.

Two more things a check may say about a call:
- raise ``RunOnCpu(reason)``: lazax runs this call, and every later one with the same
  key, through the CPU fallback (``linalg_cholesky_ex(check_errors=True)``: torch's
  kernel raises ``torch.linalg.LinAlgError`` from the values, which only a host read
  of them can do, as on CUDA).
- ``@layout_arguments(aten.x.overload)`` registers ``fn(*args, **kwargs)``, called with
  the meta arguments (shape, dtype, strides) on a miss, that returns a dict of plain
  values (bool, int, str): the node keeps them as attributes and the rule receives them
  as keyword arguments. For the CPU kernels whose *values* depend on an input's strides
  (``_linalg_det`` factors ``A``'s transpose when ``A`` is contiguous and real, and its
  backward reads that factorization on the same premise). Same key rules as a check.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch

__all__ = [
    "RunOnCpu",
    "argument_check",
    "argument_check_for",
    "layout_arguments",
    "layout_arguments_for",
    "output_specs",
    "output_specs_for",
    "scalar_type_name",
    "type_meta_name",
]

_CHECKS: dict[str, Callable[..., None]] = {}
_SPECS: dict[str, Callable[..., Any]] = {}
_LAYOUTS: dict[str, Callable[..., dict]] = {}


class RunOnCpu(Exception):
    """Raised by an argument check: this call runs through the CPU fallback."""


def _registrar(table: dict, what: str, ops: tuple):
    """A decorator that files its function in ``table`` under each of ``ops``' names."""

    def register(fn: Callable) -> Callable:
        for op in ops:
            name = op if isinstance(op, str) else op.name()
            if name in table:
                raise RuntimeError(f"op {name} already has {what}")
            table[name] = fn
        return fn

    return register


def argument_check(*ops: Any):
    """Register the decorated function as the argument check of ``ops``."""
    return _registrar(_CHECKS, "an argument check", ops)


def argument_check_for(name: str) -> Callable[..., None] | None:
    """The check registered for the overload named ``name`` (``"aten::uniform"``)."""
    return _CHECKS.get(name)


def output_specs(*ops: Any):
    """Register the decorated function as the output specs of ``ops``, in place of
    their meta kernel."""
    return _registrar(_SPECS, "output specs", ops)


def output_specs_for(name: str) -> Callable[..., Any] | None:
    """The output specs registered for the overload named ``name``, if any."""
    return _SPECS.get(name)


def layout_arguments(*ops: Any):
    """Register the decorated function as the layout arguments of ``ops``."""
    return _registrar(_LAYOUTS, "layout arguments", ops)


def layout_arguments_for(name: str) -> Callable[..., dict] | None:
    """The layout arguments registered for the overload named ``name``, if any."""
    return _LAYOUTS.get(name)


# How torch's C++ messages print a dtype: as a ``ScalarType`` ("Long") or as a
# ``TypeMeta`` (the C++ type: "long int").
_SCALAR_TYPE = {
    torch.float16: "Half",
    torch.bfloat16: "BFloat16",
    torch.float32: "Float",
    torch.float64: "Double",
    torch.complex64: "ComplexFloat",
    torch.complex128: "ComplexDouble",
    torch.uint8: "Byte",
    torch.int8: "Char",
    torch.int16: "Short",
    torch.int32: "Int",
    torch.int64: "Long",
    torch.bool: "Bool",
}
_TYPE_META = {
    torch.float16: "c10::Half",
    torch.bfloat16: "c10::BFloat16",
    torch.float32: "float",
    torch.float64: "double",
    torch.complex64: "c10::complex<float>",
    torch.complex128: "c10::complex<double>",
    torch.uint8: "unsigned char",
    torch.int8: "signed char",
    torch.int16: "short int",
    torch.int32: "int",
    torch.int64: "long int",
    torch.bool: "bool",
}


def scalar_type_name(dtype: torch.dtype) -> str:
    """``dtype`` as C++ ``ScalarType`` prints it: ``torch.int64`` -> ``"Long"``."""
    return _SCALAR_TYPE.get(dtype, str(dtype))


def type_meta_name(dtype: torch.dtype) -> str:
    """``dtype`` as a C++ ``TypeMeta`` prints it: ``torch.float32`` -> ``"float"``."""
    return _TYPE_META.get(dtype, str(dtype))
