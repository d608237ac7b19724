"""torch's type promotion and compute-dtype rules, shared by the elementwise families
(``elementwise``, ``unary``, ``activations``) and ``foreach``.

Contract: registers no lowering. It ports, on numpy dtypes, what torch's
TensorIterator decides before a kernel runs:

- ``result_type``: ``torch.result_type`` (dimensioned tensors, then 0-dim tensors, then
  Python numbers, by category), computed from the operands and never taken from
  ``ctx.dtype``: for an in-place op ``ctx.dtype`` is the destination's dtype, not the
  one torch computes in (``x_f32.add_(y_f64)`` adds in float64).
- ``opmath``/``compute_dtype``: float16/bfloat16 arithmetic runs in float32 (torch's
  "opmath") and is rounded once by the output cast; ``floating`` promotes integer and
  bool inputs of float math to the default float dtype.
- ``cast_operands``: the operands cast as torch's kernels see them (first to the result
  dtype, so a Python 0.1 next to a bf16 tensor is bf16(0.1), then to opmath).
- ``to_dtype`` converts Python numbers as torch's scalar conversion does; ``round_to``
  emulates kernels that round each half-precision step; ``fit`` broadcasts a rule's
  result to the output shape.
"""

from __future__ import annotations

import functools

import jax.numpy as jnp
import numpy as np
import torch
from jax import lax

__all__ = [
    "BOOL",
    "I64",
    "PY_NUMBER",
    "cast",
    "cast_operands",
    "compute_dtype",
    "fit",
    "floating_dtype",
    "is_number",
    "kind",
    "opmath",
    "result_type",
    "round_to",
    "to_dtype",
]

BOOL = np.dtype(bool)
_F32 = np.dtype("float32")
I64 = np.dtype("int64")
_LOW_PRECISION = (np.dtype(jnp.bfloat16), np.dtype(jnp.float16))
PY_NUMBER = (bool, int, float, complex)

# -- promotion --------------------------------------------------------------------------


def kind(dtype) -> int:
    """0 bool, 1 integer, 2 floating, 3 complex: torch's promotion categories."""
    if dtype == BOOL:
        return 0
    if jnp.issubdtype(dtype, jnp.integer):
        return 1
    if jnp.issubdtype(dtype, jnp.floating):
        return 2
    return 3


@functools.cache
def _promote(a: np.dtype, b: np.dtype) -> np.dtype:
    """``torch.promote_types`` on numpy dtypes (jax's lattice differs, e.g. uint64)."""
    promoted = torch.promote_types(getattr(torch, a.name), getattr(torch, b.name))
    return np.dtype(jnp.dtype(str(promoted).removeprefix("torch.")))


def _default_float() -> np.dtype:
    """torch's default float dtype (what Python floats and int true division become)."""
    return np.dtype(str(torch.get_default_dtype()).removeprefix("torch."))


def _number_dtype(value) -> np.dtype:
    """The dtype torch gives a Python number when it takes part in promotion."""
    if isinstance(value, bool):
        return BOOL
    if isinstance(value, int):
        return I64
    if isinstance(value, float):
        return _default_float()
    return np.dtype("complex128" if _default_float() == np.float64 else "complex64")


def _combine(higher, lower):
    """torch's ``combine_categories``: a higher-priority operand keeps its dtype unless a
    lower-priority one is of a higher category."""
    if higher is None:
        return lower
    if lower is None:
        return higher
    kh, kl = kind(higher), kind(lower)
    if kh == 3:
        return higher
    if kl == 3:
        if kh == 2:
            return np.dtype("complex128" if higher == np.float64 else "complex64")
        return lower
    if kh == 2:
        return higher
    if kh == 0 or kl == 2:
        return _promote(higher, lower)
    return higher


def result_type(*operands) -> np.dtype:
    """``torch.result_type`` over jax arrays and Python numbers (``None`` is skipped).

    0-dim arrays rank as 0-dim tensors; lifted Scalars are 0-dim arrays whose dtype
    the tensor layer already chose to match the tensors, so this ranking agrees."""
    dim = zero = wrapped = None
    for x in operands:
        if x is None:
            continue
        if isinstance(x, PY_NUMBER):
            d = _number_dtype(x)
            wrapped = d if wrapped is None else _promote(wrapped, d)
        elif x.ndim == 0:
            zero = x.dtype if zero is None else _promote(zero, x.dtype)
        else:
            dim = x.dtype if dim is None else _promote(dim, x.dtype)
    return _combine(dim, _combine(zero, wrapped))


def opmath(dtype) -> np.dtype:
    """The dtype torch does arithmetic in for ``dtype`` (float32 for half types)."""
    return _F32 if dtype in _LOW_PRECISION else np.dtype(dtype)


def floating_dtype(dtype) -> np.dtype:
    """Integer and bool inputs of float math (``sqrt``, true division) become float."""
    return _default_float() if kind(dtype) < 2 else np.dtype(dtype)


def compute_dtype(*operands, floating: bool = False) -> np.dtype:
    """The dtype arithmetic on ``operands`` runs in: promoted, then opmath."""
    dtype = result_type(*operands)
    return opmath(floating_dtype(dtype) if floating else dtype)


def to_dtype(x, dtype):
    """``x`` (a jax array or a Python number) as an array of ``dtype``.

    Python numbers convert through numpy's int64/float64 so that out-of-range ints
    wrap and floats round once, as torch's scalar conversion does."""
    if isinstance(x, PY_NUMBER):
        return jnp.asarray(np.asarray(x).astype(dtype))
    return x if x.dtype == dtype else cast(x, dtype)


def cast(x, dtype):
    """``x.astype(dtype)``, except bool to a float or complex type: a select of 1 or 0.

    XLA's simplifier rewrites ``convert(pred) * y`` into ``select(pred, y, 0)``, which
    turns ``False * nan`` into 0 and ``False * -2`` into +0 (torch gives nan and -0);
    it does not touch a select of constants. ``test_fuzz_regressions`` pins this."""
    if x.dtype == jnp.bool_ and jnp.issubdtype(dtype, jnp.inexact):
        return jnp.where(x, jnp.ones((), dtype), jnp.zeros((), dtype))
    return x.astype(dtype)


def round_to(x, dtype):
    """Round a float32 ``x`` to ``dtype``'s precision, staying float32 (emulates torch
    kernels that do half-precision arithmetic step by step). ``reduce_precision``, not
    a cast pair, because XLA may drop f32->bf16->f32 conversions as excess precision."""
    dtype = np.dtype(dtype)
    if dtype not in _LOW_PRECISION:
        return x
    info = jnp.finfo(dtype)
    return lax.reduce_precision(x, exponent_bits=info.nexp, mantissa_bits=info.nmant)


def cast_operands(*xs, floating=False, exact=False):
    """(dtype, compute dtype, operands cast to it) for a TensorIterator-style op.

    torch first casts every operand to the result dtype (so a Python 0.1 next to a
    bf16 tensor becomes bf16(0.1)), then computes in opmath. Kernels that read a scalar
    operand at full opmath precision instead (``mul``, ``div``) pass ``exact``."""
    dtype = result_type(*xs)
    if floating:
        dtype = floating_dtype(dtype)
    compute = opmath(dtype)
    if exact or compute == dtype:
        return dtype, compute, [to_dtype(x, compute) for x in xs]
    return dtype, compute, [to_dtype(to_dtype(x, dtype), compute) for x in xs]


def is_number(value, number) -> bool:
    """True when ``value`` is the Python number ``number`` (not a lifted array)."""
    return isinstance(value, PY_NUMBER) and value == number


def fit(ctx, x):
    """Broadcast to the output shape (a rule over scalars can come out smaller)."""
    shape = ctx.shape
    return x if x.shape == shape else jnp.broadcast_to(x, shape)
