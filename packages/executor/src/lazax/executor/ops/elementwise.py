"""Elementwise lowerings: arithmetic, unary math, comparisons, logic and bitwise ops,
``where``/``masked_fill``/``clamp``/``lerp``/``addcmul``, activations and the backward
ops autograd calls for them.

Contract (see ``_registry``): a rule gets the aten op's arguments in schema order with
tensors as jax arrays. A Python number may sit in any Tensor or Scalar slot: Python
``x + 2.5`` reaches aten as ``add.Tensor(x, 2.5)``, and a Scalar argument other than
0/+-1 arrives lifted, as a 0-dim array already in torch's compute dtype. Every rule
computes in torch's precision:

- The dtype follows ``torch.result_type`` (``result_type`` below: dimensioned tensors,
  then 0-dim tensors, then Python numbers, by category), computed from the operands and
  not taken from ``ctx.dtype``: for an in-place op ``ctx.dtype`` is the destination's
  dtype, not the one torch computes in (``x_f32.add_(y_f64)`` adds in float64).
- float16/bfloat16 arithmetic runs in float32 and is rounded once by the output cast
  (torch's "opmath"). Comparisons, clamps and selections round nothing, so they work in
  the promoted dtype itself, as torch does (``bf16_x == 0.1`` compares with bf16(0.1)).
- Formulas follow torch's CPU kernels (floor division, ``remainder``, ``lerp``'s two
  branches, the pow fast paths, each activation and backward) so that results agree
  with the CPU to the ulp in most cases.

Rules are plain module-level functions so ``foreach.py`` can reuse them with a per-item
context; the one-argument math rules are also in ``UNARY`` by aten name. Errors torch
raises at run time from values (integer division by zero, negative integer powers of
integers) are not reproduced: the result there is unspecified.
"""

from __future__ import annotations

import functools
import math

import jax.numpy as jnp
import numpy as np
import torch
from jax import lax

from ._registry import lowering

aten = torch.ops.aten

__all__ = ["UNARY", "compute_dtype", "opmath", "result_type", "to_dtype"]

_BOOL = np.dtype(bool)
_F32 = np.dtype("float32")
_I64 = np.dtype("int64")
_LOW_PRECISION = (np.dtype(jnp.bfloat16), np.dtype(jnp.float16))
_PY_NUMBER = (bool, int, float, complex)

# -- dtypes -----------------------------------------------------------------------------


def _kind(dtype) -> int:
    """0 bool, 1 integer, 2 floating, 3 complex: torch's promotion categories."""
    if dtype == _BOOL:
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
        return _BOOL
    if isinstance(value, int):
        return _I64
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
    kh, kl = _kind(higher), _kind(lower)
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
        if isinstance(x, _PY_NUMBER):
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


def _floating(dtype) -> np.dtype:
    """Integer and bool inputs of float math (``sqrt``, true division) become float."""
    return _default_float() if _kind(dtype) < 2 else np.dtype(dtype)


def compute_dtype(*operands, floating: bool = False) -> np.dtype:
    """The dtype arithmetic on ``operands`` runs in: promoted, then opmath."""
    dtype = result_type(*operands)
    return opmath(_floating(dtype) if floating else dtype)


def to_dtype(x, dtype):
    """``x`` (a jax array or a Python number) as an array of ``dtype``.

    Python numbers convert through numpy's int64/float64 so that out-of-range ints
    wrap and floats round once, as torch's scalar conversion does."""
    if isinstance(x, _PY_NUMBER):
        return jnp.asarray(np.asarray(x).astype(dtype))
    return x if x.dtype == dtype else x.astype(dtype)


def _round_to(x, dtype):
    """Round a float32 ``x`` to ``dtype``'s precision, staying float32 (emulates torch
    kernels that do half-precision arithmetic step by step). ``reduce_precision``, not
    a cast pair, because XLA may drop f32->bf16->f32 conversions as excess precision."""
    dtype = np.dtype(dtype)
    if dtype not in _LOW_PRECISION:
        return x
    info = jnp.finfo(dtype)
    return lax.reduce_precision(x, exponent_bits=info.nexp, mantissa_bits=info.nmant)


def _operands(*xs, floating=False, exact=False):
    """(dtype, compute dtype, operands cast to it) for a TensorIterator-style op.

    torch first casts every operand to the result dtype (so a Python 0.1 next to a
    bf16 tensor becomes bf16(0.1)), then computes in opmath. Kernels that read a scalar
    operand at full opmath precision instead (``mul``, ``div``) pass ``exact``."""
    dtype = result_type(*xs)
    if floating:
        dtype = _floating(dtype)
    compute = opmath(dtype)
    if exact or compute == dtype:
        return dtype, compute, [to_dtype(x, compute) for x in xs]
    return dtype, compute, [to_dtype(to_dtype(x, dtype), compute) for x in xs]


def _is(value, number) -> bool:
    """True when ``value`` is the Python number ``number`` (not a lifted array)."""
    return isinstance(value, _PY_NUMBER) and value == number


def _fit(ctx, x):
    """Broadcast to the output shape (a rule over scalars can come out smaller)."""
    shape = ctx.shape
    return x if x.shape == shape else jnp.broadcast_to(x, shape)


# -- arithmetic -------------------------------------------------------------------------


@lowering(aten.add.Tensor, aten.add.Scalar)
def add(ctx, self, other, alpha=1):
    """``self + alpha * other`` (``bool + bool`` is logical or, as in torch); ``other``
    and ``alpha`` are rounded to the result dtype first, as torch's kernel does."""
    dtype, compute, (a, b) = _operands(self, other)
    if not _is(alpha, 1):
        b = to_dtype(to_dtype(alpha, dtype), compute) * b
    return _fit(ctx, a + b)


@lowering(aten.sub.Tensor, aten.sub.Scalar)
def sub(ctx, self, other, alpha=1):
    """``self - alpha * other`` (scalars rounded as in ``add``)."""
    dtype, compute, (a, b) = _operands(self, other)
    if not _is(alpha, 1):
        b = to_dtype(to_dtype(alpha, dtype), compute) * b
    return _fit(ctx, a - b)


@lowering(aten.rsub.Tensor, aten.rsub.Scalar)
def rsub(ctx, self, other, alpha=1):
    """``other - alpha * self``."""
    return sub(ctx, other, self, alpha)


@lowering(aten.mul.Tensor, aten.mul.Scalar)
def mul(ctx, self, other):
    """``self * other`` (``bool * bool`` is logical and); a scalar keeps opmath
    precision (torch's kernel reads it unrounded)."""
    _, _, (a, b) = _operands(self, other, exact=True)
    return _fit(ctx, a * b)


def _rem(a, b):
    """C's ``%``/``fmod`` (the dividend's sign), broadcasting like jnp."""
    return lax.rem(*jnp.broadcast_arrays(a, b))


def _div_floor_float(a, b, steps):
    """torch's vectorized ``div_floor_floating``: floor of the exact quotient via fmod,
    each step rounded to ``steps`` (bf16 tensors divide step by step in bf16)."""
    r = lambda v: _round_to(v, steps)  # noqa: E731
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
        _, _, (a, b) = _operands(self, other, floating=True, exact=True)
        return _fit(ctx, a / b)
    # torch reads a scalar divisor at opmath precision and divides in opmath; a tensor
    # divisor of a half type goes through bf16/f16 vector arithmetic, rounding each step.
    scalar_divisor = isinstance(other, _PY_NUMBER) or other.size == 1
    dtype, compute, (a, b) = _operands(self, other, exact=scalar_divisor)
    steps = compute if scalar_divisor else dtype
    if _kind(dtype) < 2:
        if dtype == _BOOL:
            a, b = a.astype(_I64), b.astype(_I64)
        if rounding_mode == "trunc":
            out = lax.div(*jnp.broadcast_arrays(a, b))
        else:
            out = _div_floor_int(a, b)
    elif rounding_mode == "trunc":
        out = jnp.trunc(_round_to(a / b, steps))
    else:
        out = _div_floor_float(a, b, steps)
    return _fit(ctx, out)


@lowering(aten.floor_divide.default, aten.floor_divide.Scalar)
def floor_divide(ctx, self, other):
    """``div(self, other, rounding_mode='floor')``, which torch's kernel is."""
    return div(ctx, self, other, "floor")


@lowering(aten.remainder.Tensor, aten.remainder.Scalar, aten.remainder.Scalar_Tensor)
def remainder(ctx, self, other):
    """Python's ``%``: the result takes the divisor's sign (fmod, then shift by b)."""
    _, _, (a, b) = _operands(self, other)
    mod = _rem(a, b)
    return _fit(ctx, jnp.where((mod != 0) & ((mod < 0) != (b < 0)), mod + b, mod))


@lowering(aten.fmod.Tensor, aten.fmod.Scalar)
def fmod(ctx, self, other):
    """C's ``fmod`` / ``%``: the result takes the dividend's sign."""
    _, _, (a, b) = _operands(self, other)
    return _fit(ctx, _rem(a, b))


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
    if _kind(dtype) < 2:
        dtype = _I64 if dtype == _BOOL else dtype
        return _fit(ctx, _int_pow(to_dtype(self, dtype), to_dtype(exponent, dtype)))
    _, dtype, (a, e) = _operands(self, exponent)  # a bf16 tensor's exponent is bf16 too
    if _is(exponent, 0) or _is(self, 1):
        return jnp.ones(ctx.shape, dtype)
    if _is(exponent, 1):
        return _fit(ctx, a)
    if _is(exponent, -1):
        return _fit(ctx, 1 / a)
    if e.ndim == 0:
        out = jnp.where(e == 2, a * a, jnp.power(a, e))
        out = jnp.where(e == 3, a * a * a, out)
        out = jnp.where(e == 0.5, jnp.sqrt(a), out)
        out = jnp.where(e == -0.5, 1 / jnp.sqrt(a), out)
        out = jnp.where(e == -2, 1 / (a * a), out)
        return _fit(ctx, jnp.where(e == -1, 1 / a, out))
    return _fit(ctx, jnp.power(a, e))


@lowering(aten.atan2.default)
def atan2(ctx, self, other):
    """``atan2(self, other)`` in float."""
    _, _, (a, b) = _operands(self, other, floating=True)
    return _fit(ctx, jnp.arctan2(a, b))


def _binary_select(name, fn):
    """A rule picking one of two operands elementwise with ``fn``, in the promoted
    dtype (nothing is rounded, so no opmath)."""

    def rule(ctx, self, other):
        dtype = result_type(self, other)
        return _fit(ctx, fn(to_dtype(self, dtype), to_dtype(other, dtype)))

    rule.__name__ = rule.__qualname__ = name
    rule.__doc__ = f"``jnp.{fn.__name__}`` in the promoted dtype (selects, never rounds)."
    return lowering(getattr(aten, name).default)(rule)


maximum = _binary_select("maximum", jnp.maximum)  # NaN wins
minimum = _binary_select("minimum", jnp.minimum)
fmax = _binary_select("fmax", jnp.fmax)  # NaN loses
fmin = _binary_select("fmin", jnp.fmin)


# -- unary ------------------------------------------------------------------------------


def _sigmoid(x):
    """torch's CPU formula, ``1 / (1 + exp(-x))``."""
    return 1 / (1 + jnp.exp(-x))


_FLOAT_UNARY = {
    "exp": jnp.exp,
    "exp2": jnp.exp2,
    "expm1": jnp.expm1,
    "log": jnp.log,
    "log2": jnp.log2,
    "log10": jnp.log10,
    "log1p": jnp.log1p,
    "sqrt": jnp.sqrt,
    "rsqrt": lax.rsqrt,
    "reciprocal": lambda x: 1 / x,
    "sin": jnp.sin,
    "cos": jnp.cos,
    "tan": jnp.tan,
    "asin": jnp.arcsin,
    "acos": jnp.arccos,
    "atan": jnp.arctan,
    "sinh": jnp.sinh,
    "cosh": jnp.cosh,
    "tanh": jnp.tanh,
    "asinh": jnp.arcsinh,
    "acosh": jnp.arccosh,
    "atanh": jnp.arctanh,
    "sigmoid": _sigmoid,
    "erf": lax.erf,
    "erfc": lax.erfc,
    "erfinv": lax.erf_inv,
}

UNARY: dict = {}  # aten name -> rule(ctx, x), for foreach.py


def _float_unary(name, fn):
    """A rule applying ``fn`` in float (ints and bools promote), in opmath."""

    def rule(ctx, self):
        return fn(to_dtype(self, compute_dtype(self, floating=True)))

    rule.__name__ = rule.__qualname__ = name
    rule.__doc__ = f"``{name}`` in float (integers and bools become float32), opmath."
    return rule


for _name, _fn in _FLOAT_UNARY.items():
    UNARY[_name] = lowering(getattr(aten, _name).default)(_float_unary(_name, _fn))


def _unary(name):
    """Register the decorated rule for ``aten.<name>.default`` and in ``UNARY``."""

    def register(fn):
        UNARY[name] = fn
        return lowering(getattr(aten, name).default)(fn)

    return register


@_unary("neg")
def neg(ctx, self):
    """``-self``."""
    return -self


@_unary("abs")
def abs(ctx, self):
    """``|self|`` (integers stay integers)."""
    return self if self.dtype == _BOOL else jnp.abs(self)


@_unary("sign")
def sign(ctx, self):
    """-1, 0 or 1; NaN gives 0 as in torch (``jnp.sign`` gives NaN); bools unchanged."""
    if self.dtype == _BOOL:
        return self
    if _kind(self.dtype) == 1:
        return jnp.sign(self)
    return (self > 0).astype(self.dtype) - (self < 0).astype(self.dtype)


@_unary("sgn")
def sgn(ctx, self):
    """``sign`` for real inputs; ``x / |x|`` (0 at 0) for complex ones."""
    if _kind(self.dtype) == 3:
        magnitude = jnp.abs(self)
        return jnp.where(magnitude == 0, 0, self / jnp.where(magnitude == 0, 1, magnitude))
    return sign(ctx, self)


def _integer_identity(fn):
    """A rounding rule: ``fn`` for floats, the input itself for integers and bools."""

    def rule(ctx, self):
        if _kind(self.dtype) < 2:
            return self  # rounding an integer is a copy in torch
        return fn(self)

    return rule


for _name, _fn in (("floor", jnp.floor), ("ceil", jnp.ceil), ("trunc", jnp.trunc)):
    _rule = _integer_identity(_fn)
    _rule.__name__ = _rule.__qualname__ = _name
    _rule.__doc__ = f"``{_name}`` of a float; integers unchanged."
    UNARY[_name] = lowering(getattr(aten, _name).default)(_rule)


@_unary("round")
def round(ctx, self):
    """Round half to even (torch's ``nearbyint``); integers unchanged."""
    return self if _kind(self.dtype) < 2 else jnp.round(self)


@lowering(aten.round.decimals)
def round_decimals(ctx, self, decimals=0):
    """torch's kernel: ``nearbyint(x * 10**d) / 10**d`` (``x / 10**-d`` when d < 0)."""
    if _kind(self.dtype) < 2:
        return self
    dtype = opmath(self.dtype)
    x = self.astype(dtype)
    if decimals == 0:
        return jnp.round(x)
    scale = to_dtype(10.0 ** (decimals if decimals > 0 else -decimals), dtype)
    if decimals > 0:
        return jnp.round(x * scale) / scale
    return jnp.round(x / scale) * scale


@_unary("frac")
def frac(ctx, self):
    """``x - trunc(x)``."""
    x = to_dtype(self, opmath(self.dtype))
    return x - jnp.trunc(x)


@lowering(aten.logit.default)
def logit(ctx, self, eps=None):
    """``log(z / (1 - z))`` with z = x clamped to [eps, 1 - eps] when eps is given.

    torch's (MKL) kernel does the clamp and the quotient in the input dtype, so for
    half types each step is rounded to it here too."""
    dtype = _floating(self.dtype)
    x = to_dtype(self, opmath(dtype))
    if eps is not None and eps >= 0:
        lo = to_dtype(eps, dtype)
        hi = to_dtype(1 - lo.astype(x.dtype), dtype)
        x = jnp.clip(x, lo.astype(x.dtype), hi.astype(x.dtype))
    return jnp.log(_round_to(x / _round_to(1 - x, dtype), dtype))


# -- comparisons, logic, bits -----------------------------------------------------------


def _compare(name, fn):
    """Register ``aten.<name>`` (.Tensor, .Scalar) as ``fn`` in the promoted dtype."""

    def rule(ctx, self, other):
        dtype = result_type(self, other)
        return _fit(ctx, fn(to_dtype(self, dtype), to_dtype(other, dtype)))

    rule.__name__ = rule.__qualname__ = name
    rule.__doc__ = f"``{name}`` in the promoted dtype (torch casts a scalar to it first)."
    packet = getattr(aten, name)
    return lowering(packet.Tensor, packet.Scalar)(rule)


eq = _compare("eq", jnp.equal)
ne = _compare("ne", jnp.not_equal)
lt = _compare("lt", jnp.less)
le = _compare("le", jnp.less_equal)
gt = _compare("gt", jnp.greater)
ge = _compare("ge", jnp.greater_equal)


def _truth(x):
    """``x`` as bool: nonzero is true."""
    return x if x.dtype == _BOOL else x != 0


def _logical(name, fn):
    """Register ``aten.<name>`` as ``fn`` of the operands' truth values."""

    def rule(ctx, self, other):
        return _fit(ctx, fn(_truth(self), _truth(other)))

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

    def rule(ctx, self, other):
        dtype = result_type(self, other)
        return _fit(ctx, fn(to_dtype(self, dtype), to_dtype(other, dtype)))

    rule.__name__ = rule.__qualname__ = name
    rule.__doc__ = f"``{name}`` of integers or bools in the promoted dtype."
    packet = getattr(aten, name)
    return lowering(packet.Tensor, packet.Scalar, packet.Scalar_Tensor)(rule)


bitwise_and = _bitwise("bitwise_and", jnp.bitwise_and)
bitwise_or = _bitwise("bitwise_or", jnp.bitwise_or)
bitwise_xor = _bitwise("bitwise_xor", jnp.bitwise_xor)


@lowering(aten.bitwise_not.default)
def bitwise_not(ctx, self):
    """``~self`` (logical not for bools)."""
    return jnp.invert(self)


@lowering(aten.isnan.default)
def isnan(ctx, self):
    """NaN test (false for integers)."""
    return jnp.isnan(self) if _kind(self.dtype) >= 2 else jnp.zeros(self.shape, bool)


@lowering(aten.isinf.default)
def isinf(ctx, self):
    """Infinity test (false for integers)."""
    return jnp.isinf(self) if _kind(self.dtype) >= 2 else jnp.zeros(self.shape, bool)


@lowering(aten.isfinite.default)
def isfinite(ctx, self):
    """Finiteness test (true for integers)."""
    return jnp.isfinite(self) if _kind(self.dtype) >= 2 else jnp.ones(self.shape, bool)


@lowering(aten.isposinf.default)
def isposinf(ctx, self):
    """``x == +inf``."""
    return self == jnp.inf if _kind(self.dtype) == 2 else jnp.zeros(self.shape, bool)


@lowering(aten.isneginf.default)
def isneginf(ctx, self):
    """``x == -inf``."""
    return self == -jnp.inf if _kind(self.dtype) == 2 else jnp.zeros(self.shape, bool)


@lowering(aten.nan_to_num.default)
def nan_to_num(ctx, self, nan=None, posinf=None, neginf=None):
    """NaN -> ``nan`` (0), +-inf -> ``posinf``/``neginf`` (the dtype's max/min)."""
    if _kind(self.dtype) != 2:
        return self
    info = jnp.finfo(self.dtype)
    nan = to_dtype(0.0 if nan is None else nan, self.dtype)
    posinf = to_dtype(float(info.max) if posinf is None else posinf, self.dtype)
    neginf = to_dtype(float(info.min) if neginf is None else neginf, self.dtype)
    out = jnp.where(self == jnp.inf, posinf, self)
    out = jnp.where(self == -jnp.inf, neginf, out)
    return jnp.where(jnp.isnan(self), nan, out)


# -- selection --------------------------------------------------------------------------


@lowering(aten.where.self, aten.where.ScalarSelf, aten.where.ScalarOther, aten.where.Scalar)
def where(ctx, condition, self, other):
    """``condition ? self : other`` in the promoted dtype of ``self`` and ``other``."""
    dtype = result_type(self, other)
    out = jnp.where(_truth(condition), to_dtype(self, dtype), to_dtype(other, dtype))
    return _fit(ctx, out)


@lowering(aten.masked_fill.Scalar, aten.masked_fill.Tensor)
def masked_fill(ctx, self, mask, value):
    """``mask ? value : self``; the value is cast to ``self``'s dtype (no promotion)."""
    return _fit(ctx, jnp.where(_truth(mask), to_dtype(value, self.dtype), self))


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
    return _fit(ctx, x)


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
    return _fit(ctx, jnp.where(jnp.abs(w) < 0.5, s + w * diff, e - diff * (1 - w)))


@lowering(aten.addcmul.default)
def addcmul(ctx, self, tensor1, tensor2, value=1):
    """``self + value * tensor1 * tensor2`` (torch's association)."""
    dtype = compute_dtype(self, tensor1, tensor2)
    t = to_dtype(tensor1, dtype)
    if not _is(value, 1):
        t = to_dtype(value, dtype) * t
    return _fit(ctx, to_dtype(self, dtype) + t * to_dtype(tensor2, dtype))


@lowering(aten.addcdiv.default)
def addcdiv(ctx, self, tensor1, tensor2, value=1):
    """``self + value * tensor1 / tensor2`` (torch's association)."""
    dtype = compute_dtype(self, tensor1, tensor2)
    t = to_dtype(tensor1, dtype)
    if not _is(value, 1):
        t = to_dtype(value, dtype) * t
    return _fit(ctx, to_dtype(self, dtype) + t / to_dtype(tensor2, dtype))


# -- activations ------------------------------------------------------------------------


def _act(x):
    """The input of an activation, in its opmath dtype."""
    return to_dtype(x, opmath(x.dtype))


def _scalar(value, like):
    """A Scalar argument (Python number or lifted array) in ``like``'s dtype."""
    return to_dtype(value, like.dtype)


_SQRT1_2 = math.sqrt(0.5)
_GELU_TANH_BETA = math.sqrt(2.0) * (2.0 / math.sqrt(math.pi)) * 0.5  # sqrt(2 / pi)
_GELU_PDF_BETA = (2.0 / math.sqrt(math.pi)) * _SQRT1_2 * 0.5  # 1 / sqrt(2 pi)
_GELU_KAPPA = 0.044715


@lowering(aten.relu.default)
def relu(ctx, self):
    """``max(x, 0)``; NaN stays NaN."""
    return jnp.maximum(self, jnp.zeros((), self.dtype))


@lowering(aten.gelu.default)
def gelu(ctx, self, approximate="none"):
    """Exact (erf) or tanh-approximated GELU, torch's formulas."""
    x = _act(self)
    if approximate == "tanh":
        inner = _GELU_TANH_BETA * (x + _GELU_KAPPA * (x * x * x))
        return 0.5 * x * (1 + jnp.tanh(inner))
    return x * 0.5 * (1 + lax.erf(x * _SQRT1_2))


@lowering(aten.silu.default)
def silu(ctx, self):
    """``x / (1 + exp(-x))``."""
    x = _act(self)
    return x / (1 + jnp.exp(-x))


@lowering(aten.mish.default)
def mish(ctx, self):
    """``x * tanh(log1p(exp(x)))``."""
    x = _act(self)
    return x * jnp.tanh(jnp.log1p(jnp.exp(x)))


@lowering(aten.hardtanh.default)
def hardtanh(ctx, self, min_val=-1, max_val=1):
    """``clamp(x, min_val, max_val)`` in ``x``'s dtype (what torch's kernel calls)."""
    return jnp.minimum(jnp.maximum(self, _scalar(min_val, self)), _scalar(max_val, self))


@lowering(aten.leaky_relu.default)
def leaky_relu(ctx, self, negative_slope=0.01):
    """``x > 0 ? x : x * negative_slope``."""
    x = _act(self)
    return jnp.where(x > 0, x, x * _scalar(negative_slope, x))


@lowering(aten.elu.default)
def elu(ctx, self, alpha=1, scale=1, input_scale=1):
    """``x <= 0 ? expm1(x * input_scale) * alpha * scale : x * scale`` (selu and celu
    reach here too)."""
    x = _act(self)
    negcoef = _scalar(alpha, x) * _scalar(scale, x)
    neg = jnp.expm1(x * _scalar(input_scale, x)) * negcoef
    return jnp.where(x <= 0, neg, x * _scalar(scale, x))


@lowering(aten.celu.default)
def celu(ctx, self, alpha=1.0):
    """``elu(x, alpha, 1, 1 / alpha)``."""
    x = _act(self)
    a = _scalar(alpha, x)
    return elu(ctx, x, a, 1, 1 / a)


@lowering(aten.softplus.default)
def softplus(ctx, self, beta=1, threshold=20):
    """``x * beta > threshold ? x : log1p(exp(x * beta)) / beta``."""
    x = _act(self)
    b = _scalar(beta, x)
    xb = x * b
    return jnp.where(xb > _scalar(threshold, x), x, jnp.log1p(jnp.exp(xb)) / b)


def _relu6_of_x_plus_3(x):
    """``min(max(x + 3, 0), 6)``, the hard activations' core."""
    return jnp.minimum(jnp.maximum(x + 3, 0), 6)


@lowering(aten.hardsigmoid.default)
def hardsigmoid(ctx, self):
    """``min(max(x + 3, 0), 6) / 6``."""
    return _relu6_of_x_plus_3(_act(self)) / 6


@lowering(aten.hardswish.default)
def hardswish(ctx, self):
    """``x * min(max(x + 3, 0), 6) / 6``."""
    x = _act(self)
    return x * _relu6_of_x_plus_3(x) / 6


@lowering(aten.threshold.default)
def threshold(ctx, self, threshold, value):
    """``x <= threshold ? value : x``, compared in opmath (an unrounded threshold)."""
    x = _act(self)
    return jnp.where(x <= _scalar(threshold, x), _scalar(value, x), x)


# -- activation backward ----------------------------------------------------------------


def _grad_inputs(grad, x):
    """A backward op's gradient and saved tensor, promoted together, in opmath."""
    dtype = compute_dtype(grad, x)
    return to_dtype(grad, dtype), to_dtype(x, dtype)


@lowering(aten.threshold_backward.default)
def threshold_backward(ctx, grad_output, self, threshold):
    """``self <= threshold ? 0 : grad`` (relu's backward too), compared in opmath."""
    g, x = _grad_inputs(grad_output, self)
    return _fit(ctx, jnp.where(x <= _scalar(threshold, x), jnp.zeros((), g.dtype), g))


@lowering(aten.gelu_backward.default)
def gelu_backward(ctx, grad_output, self, approximate="none"):
    """d gelu / dx * grad, torch's formulas for both variants."""
    dy, x = _grad_inputs(grad_output, self)
    if approximate == "tanh":
        x_sq = x * x
        tanh_inner = jnp.tanh(_GELU_TANH_BETA * (x + _GELU_KAPPA * (x_sq * x)))
        left_derivative = 0.5 * (1 + tanh_inner)
        inner_derivative = _GELU_TANH_BETA * (1 + 3 * _GELU_KAPPA * x_sq)
        right_derivative = (0.5 * x) * (1 - tanh_inner * tanh_inner) * inner_derivative
        return _fit(ctx, dy * (left_derivative + right_derivative))
    cdf = 0.5 * (1 + lax.erf(x * _SQRT1_2))
    pdf = _GELU_PDF_BETA * jnp.exp(x * x * -0.5)
    return _fit(ctx, dy * (cdf + x * pdf))


@lowering(aten.silu_backward.default)
def silu_backward(ctx, grad_output, self):
    """``grad * s * (1 + x * (1 - s))`` with s = sigmoid(x)."""
    dy, x = _grad_inputs(grad_output, self)
    s = _sigmoid(x)
    return _fit(ctx, dy * s * (1 + x * (1 - s)))


@lowering(aten.mish_backward.default)
def mish_backward(ctx, grad_output, self):
    """``grad * (t + x * sigmoid(x) * (1 - t^2))`` with t = tanh(softplus(x))."""
    dy, x = _grad_inputs(grad_output, self)
    t = jnp.tanh(jnp.log1p(jnp.exp(x)))
    return _fit(ctx, dy * (t + x * _sigmoid(x) * (1 - t * t)))


@lowering(aten.sigmoid_backward.default)
def sigmoid_backward(ctx, grad_output, output):
    """``grad * (1 - y) * y`` from sigmoid's output y."""
    dy, y = _grad_inputs(grad_output, output)
    return _fit(ctx, dy * (1 - y) * y)


@lowering(aten.tanh_backward.default)
def tanh_backward(ctx, grad_output, output):
    """``grad * (1 - y * y)`` from tanh's output y."""
    dy, y = _grad_inputs(grad_output, output)
    return _fit(ctx, dy * (1 - y * y))


@lowering(aten.leaky_relu_backward.default)
def leaky_relu_backward(ctx, grad_output, self, negative_slope, self_is_result):
    """``x > 0 ? grad : grad * negative_slope`` (same test on input or output)."""
    dy, x = _grad_inputs(grad_output, self)
    return _fit(ctx, jnp.where(x > 0, dy, dy * _scalar(negative_slope, dy)))


@lowering(aten.hardtanh_backward.default)
def hardtanh_backward(ctx, grad_output, self, min_val, max_val):
    """``grad`` strictly inside (min_val, max_val), else 0."""
    dy, x = _grad_inputs(grad_output, self)
    outside = (x <= _scalar(min_val, x)) | (x >= _scalar(max_val, x))
    return _fit(ctx, jnp.where(outside, jnp.zeros((), dy.dtype), dy))


@lowering(aten.elu_backward.default)
def elu_backward(ctx, grad_output, alpha, scale, input_scale, is_result, self_or_result):
    """elu's derivative from its input, or from its output when ``is_result``."""
    dy, b = _grad_inputs(grad_output, self_or_result)
    negcoef = _scalar(alpha, dy) * _scalar(scale, dy)
    negiptcoef = _scalar(input_scale, dy)
    if is_result:
        neg = dy * negiptcoef * (b + negcoef)
    else:
        neg = dy * negiptcoef * negcoef * jnp.exp(b * negiptcoef)
    return _fit(ctx, jnp.where(b <= 0, neg, dy * _scalar(scale, dy)))


@lowering(aten.softplus_backward.default)
def softplus_backward(ctx, grad_output, self, beta, threshold):
    """``x * beta > threshold ? grad : grad * z / (z + 1)`` with z = exp(x * beta)."""
    dy, x = _grad_inputs(grad_output, self)
    xb = x * _scalar(beta, x)
    z = jnp.exp(xb)
    return _fit(ctx, jnp.where(xb > _scalar(threshold, x), dy, dy * z / (z + 1)))


@lowering(aten.hardsigmoid_backward.default)
def hardsigmoid_backward(ctx, grad_output, self):
    """``grad / 6`` for -3 < x < 3 (torch multiplies by 1/6), else 0."""
    dy, x = _grad_inputs(grad_output, self)
    inside = (x > -3) & (x < 3)
    return _fit(ctx, jnp.where(inside, dy * to_dtype(1.0 / 6.0, dy.dtype), 0))


@lowering(aten.hardswish_backward.default)
def hardswish_backward(ctx, grad_output, self):
    """0 up to -3, ``grad * (x / 3 + 0.5)`` below 3, ``grad`` from 3 (torch's kinks)."""
    dy, x = _grad_inputs(grad_output, self)
    out = jnp.where(x < 3, dy * (x / 3 + 0.5), dy)
    return _fit(ctx, jnp.where(x <= -3, jnp.zeros((), dy.dtype), out))


@lowering(aten.logit_backward.default)
def logit_backward(ctx, grad_output, self, eps=None):
    """``grad / (x * (1 - x))``; outside [0, 1] NaN (no eps) or 0 outside
    [eps, 1 - eps]."""
    dy, x = _grad_inputs(grad_output, self)
    grad = dy / (x * (1 - x))
    if eps is None or eps < 0:
        return _fit(ctx, jnp.where((x < 0) | (x > 1), jnp.nan, grad))
    return _fit(ctx, jnp.where((x < eps) | (x > 1 - eps), jnp.zeros((), dy.dtype), grad))
