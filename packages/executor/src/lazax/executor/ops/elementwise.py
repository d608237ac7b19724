"""Elementwise lowerings: arithmetic (``add`` ... ``pow``, ``atan2``), ``maximum``/
``minimum``/``fmax``/``fmin``, comparisons, logical and bitwise ops, and
``where``/``masked_fill``/``clamp``/``lerp``/``addcmul``/``addcdiv``.

Contract (see ``_registry``): a rule gets the aten op's arguments in schema order with
tensors as jax arrays. A Python number may sit in any Tensor or Scalar slot: Python
``x + 2.5`` reaches aten as ``add.Tensor(x, 2.5)``, and a Scalar argument other than
0/+-1 arrives lifted, as a 0-dim array already in torch's compute dtype. Every rule
computes in torch's precision, by ``_promotion``'s rules:

- The dtype follows ``torch.result_type`` of the operands, not ``ctx.dtype``.
- float16/bfloat16 arithmetic runs in float32 and is rounded once by the output cast
  (torch's "opmath"). Comparisons, clamps and selections round nothing, so they work in
  the promoted dtype itself, as torch does (``bf16_x == 0.1`` compares with bf16(0.1)).
- Formulas follow torch's CPU kernels (floor division, ``remainder``, ``lerp``'s two
  branches, the pow fast paths) so that results agree with the CPU to the ulp in most
  cases.

Rules are plain module-level functions so ``foreach.py`` can reuse them with a per-item
context. Errors torch raises at run time from values (integer division by zero,
negative integer powers of integers) are not reproduced: the result there is
unspecified.
"""

from __future__ import annotations

import jax.numpy as jnp
import torch
from jax import lax

from ._promotion import (
    BOOL,
    I64,
    PY_NUMBER,
    cast_operands,
    compute_dtype,
    fit,
    is_number,
    kind,
    result_type,
    round_to,
    to_dtype,
)
from ._registry import lowering

aten = torch.ops.aten


def _promoted_binary(name, fn, overloads, doc):
    """Register ``aten.<name>``'s ``overloads`` as ``fn`` of both operands cast to their
    promoted dtype (no opmath: selections, comparisons and bit ops round nothing)."""

    def rule(ctx, self, other):
        dtype = result_type(self, other)
        return fit(ctx, fn(to_dtype(self, dtype), to_dtype(other, dtype)))

    rule.__name__ = rule.__qualname__ = name
    rule.__doc__ = doc
    packet = getattr(aten, name)
    return lowering(*(getattr(packet, overload) for overload in overloads))(rule)


# -- arithmetic -------------------------------------------------------------------------


@lowering(aten.add.Tensor, aten.add.Scalar)
def add(ctx, self, other, alpha=1):
    """``self + alpha * other`` (``bool + bool`` is logical or, as in torch); ``other``
    and ``alpha`` are rounded to the result dtype first, as torch's kernel does."""
    dtype, compute, (a, b) = cast_operands(self, other)
    if not is_number(alpha, 1):
        b = to_dtype(to_dtype(alpha, dtype), compute) * b
    return fit(ctx, a + b)


@lowering(aten.sub.Tensor, aten.sub.Scalar)
def sub(ctx, self, other, alpha=1):
    """``self - alpha * other`` (scalars rounded as in ``add``)."""
    dtype, compute, (a, b) = cast_operands(self, other)
    if not is_number(alpha, 1):
        b = to_dtype(to_dtype(alpha, dtype), compute) * b
    return fit(ctx, a - b)


@lowering(aten.rsub.Tensor, aten.rsub.Scalar)
def rsub(ctx, self, other, alpha=1):
    """``other - alpha * self``."""
    return sub(ctx, other, self, alpha)


@lowering(aten.mul.Tensor, aten.mul.Scalar)
def mul(ctx, self, other):
    """``self * other`` (``bool * bool`` is logical and); a scalar keeps opmath
    precision (torch's kernel reads it unrounded)."""
    _, _, (a, b) = cast_operands(self, other, exact=True)
    return fit(ctx, a * b)


def _rem(a, b):
    """C's ``%``/``fmod`` (the dividend's sign), broadcasting like jnp."""
    return lax.rem(*jnp.broadcast_arrays(a, b))


def _div_floor_float(a, b, steps):
    """torch's vectorized ``div_floor_floating``: floor of the exact quotient via fmod,
    each step rounded to ``steps`` (bf16 tensors divide step by step in bf16)."""
    r = lambda v: round_to(v, steps)  # noqa: E731
    quotient = r(a / b)
    mod = _rem(a, b)  # exact: no rounding
    # torch's fixup: when a / b overflows, (a - mod) / b would be wrong; use a.
    base = jnp.where(jnp.isinf(quotient) & ~jnp.isinf(a), a, r(a - mod))
    div = r(base / b)
    div = jnp.where((mod != 0) & ((b < 0) != (mod < 0)), r(div - 1), div)
    floor = jnp.floor(div)
    floor = jnp.where(div - floor > 0.5, r(floor + 1), floor)
    # A zero quotient keeps the sign of the true quotient; b == 0 gives IEEE a / b.
    floor = jnp.where(div == 0, jnp.copysign(jnp.zeros_like(div), quotient), floor)
    return jnp.where(b == 0, quotient, floor)


def _div_floor_int(a, b):
    """Python floor division: truncate, then step down when the signs differ."""
    quot = lax.div(*jnp.broadcast_arrays(a, b))
    return jnp.where(((a < 0) != (b < 0)) & (_rem(a, b) != 0), quot - 1, quot)


@lowering(aten.div.Tensor, aten.div.Scalar, aten.div.Tensor_mode, aten.div.Scalar_mode)
def div(ctx, self, other, rounding_mode=None):
    """True division (integers divide as float), or rounded toward zero / down.

    Note: XLA turns ``x / scalar`` into ``x * (1 / scalar)``, which can differ from
    torch's exact quotient by one ulp."""
    if rounding_mode is None:
        _, _, (a, b) = cast_operands(self, other, floating=True, exact=True)
        return fit(ctx, a / b)
    # torch reads a scalar divisor at opmath precision and divides in opmath; a tensor
    # divisor of a half type goes through bf16/f16 vector arithmetic, rounding each step.
    scalar_divisor = isinstance(other, PY_NUMBER) or other.size == 1
    dtype, compute, (a, b) = cast_operands(self, other, exact=scalar_divisor)
    steps = compute if scalar_divisor else dtype
    if kind(dtype) < 2:
        if dtype == BOOL:
            a, b = a.astype(I64), b.astype(I64)
        if rounding_mode == "trunc":
            out = lax.div(*jnp.broadcast_arrays(a, b))
        else:
            out = _div_floor_int(a, b)
    elif rounding_mode == "trunc":
        out = jnp.trunc(round_to(a / b, steps))
    else:
        out = _div_floor_float(a, b, steps)
    return fit(ctx, out)


@lowering(aten.floor_divide.default, aten.floor_divide.Scalar)
def floor_divide(ctx, self, other):
    """``div(self, other, rounding_mode='floor')``, which torch's kernel is."""
    return div(ctx, self, other, "floor")


@lowering(aten.remainder.Tensor, aten.remainder.Scalar, aten.remainder.Scalar_Tensor)
def remainder(ctx, self, other):
    """Python's ``%``: the result takes the divisor's sign (fmod, then shift by b)."""
    _, _, (a, b) = cast_operands(self, other)
    mod = _rem(a, b)
    return fit(ctx, jnp.where((mod != 0) & ((mod < 0) != (b < 0)), mod + b, mod))


@lowering(aten.fmod.Tensor, aten.fmod.Scalar)
def fmod(ctx, self, other):
    """C's ``fmod`` / ``%``: the result takes the dividend's sign."""
    _, _, (a, b) = cast_operands(self, other)
    return fit(ctx, _rem(a, b))


def _int_pow(a, b):
    """torch's ``powi``: exact, wrapping integer power; negative exponents give 0 except
    for bases 1 and -1."""
    bits = jnp.iinfo(a.dtype).bits
    e = jnp.where(b < 0, 0, b)
    acc = jnp.ones_like(a * e)
    base = jnp.broadcast_to(a, acc.shape)
    for _ in range(bits):
        acc = jnp.where((e & 1) == 1, acc * base, acc)
        base = base * base
        e = e >> 1
    one, minus_one = jnp.ones_like(acc), -jnp.ones_like(acc)
    odd = (b & 1) == 1
    negative = jnp.where(a == 1, one, jnp.where(a == -1, jnp.where(odd, minus_one, one), 0))
    return jnp.where(b < 0, negative, acc)


@lowering(aten.pow.Tensor_Tensor, aten.pow.Tensor_Scalar, aten.pow.Scalar)
def pow(ctx, self, exponent):
    """``self ** exponent`` for any mix of arrays and numbers.

    One body for the three overloads: the tensor layer maps ``pow_.Scalar`` (tensor
    base, Scalar exponent) onto ``pow.Scalar`` (Scalar base, tensor exponent), so the
    rule must not assume which argument is the tensor. A scalar exponent takes torch's
    fast paths (x*x for 2, sqrt for 0.5, ...), whose roundings differ from ``pow``."""
    dtype = result_type(self, exponent)
    if kind(dtype) < 2:
        dtype = I64 if dtype == BOOL else dtype
        return fit(ctx, _int_pow(to_dtype(self, dtype), to_dtype(exponent, dtype)))
    _, dtype, (a, e) = cast_operands(self, exponent)  # a bf16 tensor's exponent is bf16 too
    if is_number(exponent, 0) or is_number(self, 1):
        return jnp.ones(ctx.shape, dtype)
    if is_number(exponent, 1):
        return fit(ctx, a)
    if is_number(exponent, -1):
        return fit(ctx, 1 / a)
    if e.ndim == 0:
        # Each fast path reads ``a`` only where it is taken (1 elsewhere): jax's
        # derivative of the rule (a layer loop's backward is one) would otherwise
        # multiply the zero gradient of an untaken sqrt(-x) or 1/0 into a NaN.
        def taken(path):
            return jnp.where(path, a, jnp.ones_like(a))

        out = jnp.where(e == 2, a * a, jnp.power(a, e))
        out = jnp.where(e == 3, a * a * a, out)
        out = jnp.where(e == 0.5, jnp.sqrt(taken(e == 0.5)), out)
        out = jnp.where(e == -0.5, 1 / jnp.sqrt(taken(e == -0.5)), out)
        out = jnp.where(e == -2, 1 / jnp.square(taken(e == -2)), out)
        return fit(ctx, jnp.where(e == -1, 1 / taken(e == -1), out))
    return fit(ctx, jnp.power(a, e))


@lowering(aten.atan2.default)
def atan2(ctx, self, other):
    """``atan2(self, other)`` in float."""
    _, _, (a, b) = cast_operands(self, other, floating=True)
    return fit(ctx, jnp.arctan2(a, b))


def _binary_select(name, fn):
    """A rule picking one of two operands elementwise with ``fn``, in the promoted
    dtype (nothing is rounded, so no opmath)."""
    doc = f"``jnp.{fn.__name__}`` in the promoted dtype (selects, never rounds)."
    return _promoted_binary(name, fn, ("default",), doc)


maximum = _binary_select("maximum", jnp.maximum)  # NaN wins
minimum = _binary_select("minimum", jnp.minimum)
fmax = _binary_select("fmax", jnp.fmax)  # NaN loses
fmin = _binary_select("fmin", jnp.fmin)


# -- comparisons, logic, bits -----------------------------------------------------------


def _compare(name, fn):
    """Register ``aten.<name>`` (.Tensor, .Scalar) as ``fn`` in the promoted dtype."""
    doc = f"``{name}`` in the promoted dtype (torch casts a scalar to it first)."
    return _promoted_binary(name, fn, ("Tensor", "Scalar"), doc)


eq = _compare("eq", jnp.equal)
ne = _compare("ne", jnp.not_equal)
lt = _compare("lt", jnp.less)
le = _compare("le", jnp.less_equal)
gt = _compare("gt", jnp.greater)
ge = _compare("ge", jnp.greater_equal)


def _truth(x):
    """``x`` as bool: nonzero is true."""
    return x if x.dtype == BOOL else x != 0


def _logical(name, fn):
    """Register ``aten.<name>`` as ``fn`` of the operands' truth values."""

    def rule(ctx, self, other):
        return fit(ctx, fn(_truth(self), _truth(other)))

    rule.__name__ = rule.__qualname__ = name
    rule.__doc__ = f"``{name}`` of the inputs' truth values (nonzero is true)."
    return lowering(getattr(aten, name).default)(rule)


logical_and = _logical("logical_and", jnp.logical_and)
logical_or = _logical("logical_or", jnp.logical_or)
logical_xor = _logical("logical_xor", jnp.logical_xor)


@lowering(aten.logical_not.default)
def logical_not(ctx, self):
    """``self == 0``."""
    return ~_truth(self)


def _bitwise(name, fn):
    """Register ``aten.<name>`` (.Tensor, .Scalar, .Scalar_Tensor) as ``fn`` in the
    promoted integer/bool dtype."""
    doc = f"``{name}`` of integers or bools in the promoted dtype."
    return _promoted_binary(name, fn, ("Tensor", "Scalar", "Scalar_Tensor"), doc)


bitwise_and = _bitwise("bitwise_and", jnp.bitwise_and)
bitwise_or = _bitwise("bitwise_or", jnp.bitwise_or)
bitwise_xor = _bitwise("bitwise_xor", jnp.bitwise_xor)


@lowering(aten.bitwise_not.default)
def bitwise_not(ctx, self):
    """``~self`` (logical not for bools)."""
    return jnp.invert(self)


# -- selection --------------------------------------------------------------------------


@lowering(aten.where.self, aten.where.ScalarSelf, aten.where.ScalarOther, aten.where.Scalar)
def where(ctx, condition, self, other):
    """``condition ? self : other`` in the promoted dtype of ``self`` and ``other``."""
    dtype = result_type(self, other)
    out = jnp.where(_truth(condition), to_dtype(self, dtype), to_dtype(other, dtype))
    return fit(ctx, out)


@lowering(aten.masked_fill.Scalar, aten.masked_fill.Tensor)
def masked_fill(ctx, self, mask, value):
    """``mask ? value : self``; the value is cast to ``self``'s dtype (no promotion)."""
    return fit(ctx, jnp.where(_truth(mask), to_dtype(value, self.dtype), self))


@lowering(aten.clamp.default, aten.clamp.Tensor)
def clamp(ctx, self, min=None, max=None):
    """``min(max(x, min), max)`` in the promoted dtype; NaN anywhere gives NaN and
    ``min > max`` gives ``max``, as torch."""
    dtype = result_type(self, min, max)
    x = to_dtype(self, dtype)
    if min is not None:
        x = jnp.maximum(x, to_dtype(min, dtype))
    if max is not None:
        x = jnp.minimum(x, to_dtype(max, dtype))
    return fit(ctx, x)


@lowering(aten.clamp_min.default, aten.clamp_min.Tensor)
def clamp_min(ctx, self, min):
    """``clamp(self, min=min)``."""
    return clamp(ctx, self, min, None)


@lowering(aten.clamp_max.default, aten.clamp_max.Tensor)
def clamp_max(ctx, self, max):
    """``clamp(self, max=max)``."""
    return clamp(ctx, self, None, max)


@lowering(aten.lerp.Scalar, aten.lerp.Tensor)
def lerp(ctx, self, end, weight):
    """torch's two-branch lerp: ``self + w * (end - self)`` for |w| < 0.5, else
    ``end - (end - self) * (1 - w)`` (exact at both ends)."""
    dtype = compute_dtype(self, end)
    s, e, w = to_dtype(self, dtype), to_dtype(end, dtype), to_dtype(weight, dtype)
    diff = e - s
    return fit(ctx, jnp.where(jnp.abs(w) < 0.5, s + w * diff, e - diff * (1 - w)))


def _addc(ctx, self, tensor1, tensor2, value, combine):
    """``self + value * combine(tensor1, tensor2)``, scaling ``tensor1`` first as torch
    associates it."""
    dtype = compute_dtype(self, tensor1, tensor2)
    t = to_dtype(tensor1, dtype)
    if not is_number(value, 1):
        t = to_dtype(value, dtype) * t
    return fit(ctx, to_dtype(self, dtype) + combine(t, to_dtype(tensor2, dtype)))


@lowering(aten.addcmul.default)
def addcmul(ctx, self, tensor1, tensor2, value=1):
    return _addc(ctx, self, tensor1, tensor2, value, jnp.multiply)


@lowering(aten.addcdiv.default)
def addcdiv(ctx, self, tensor1, tensor2, value=1):
    return _addc(ctx, self, tensor1, tensor2, value, jnp.divide)
