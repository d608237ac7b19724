"""Elementwise math torch has kernels for and jax has building blocks for: ``deg2rad``/
``rad2deg``, ``hypot``, ``copysign``, ``signbit``, ``sinc``, ``heaviside``,
``nextafter``, ``ldexp``, ``xlogy``/``special_xlog1py``/``special_entr``,
``logaddexp``/``logaddexp2``, ``lgamma``/``digamma``, the Bessel functions ``i0``,
``special_i0e``/``special_i1``/``special_i1e``, ``special_log_ndtr``,
``special_ndtri`` and ``angle``.

Contract (see ``_registry``): dtypes follow ``_promotion`` (``torch.result_type``;
integer and bool inputs of float math become the default float dtype); float16/
bfloat16 math runs in float32 and is rounded once by the output cast. Each rule spells
out torch's CPU kernel's corner cases (NaN, infinities, zeros and their signs) where
jax's function differs (``digamma(+-0)`` is ``-+inf``; ``xlogy(0, y)`` is 0 unless
``y`` is NaN; ``logaddexp(inf, inf)`` is inf).
"""

from __future__ import annotations

import math

import jax.numpy as jnp
import jax.scipy.special as jsp
import torch
from jax import lax

from ._promotion import BOOL, cast_operands, compute_dtype, fit, kind, result_type, to_dtype
from ._registry import lowering

aten = torch.ops.aten


def _float(x):
    """``x`` in the dtype its float math runs in (ints promote; halves in float32)."""
    return to_dtype(x, compute_dtype(x, floating=True))


def _float_unary(op, fn, doc):
    def rule(ctx, self):
        return fn(_float(self))

    rule.__name__ = rule.__qualname__ = op.__name__.split(".")[0]
    rule.__doc__ = doc
    return lowering(op)(rule)


_float_unary(aten.i0.default, jsp.i0, "Modified Bessel function of order 0.")
_float_unary(aten.special_i0e.default, jsp.i0e, "``exp(-|x|) * i0(x)``.")
_float_unary(aten.special_ndtri.default, jsp.ndtri, "Inverse of the normal CDF.")


@lowering(aten.lgamma.default)
def lgamma(ctx, self):
    """``log|gamma(x)|`` (inf at the poles); exactly 0 at 1 and 2, as torch's libm."""
    x = _float(self)
    return jnp.where((x == 1) | (x == 2), jnp.zeros((), x.dtype), lax.lgamma(x))


def _odd_bessel(fn):
    def rule(ctx, self):
        x = _float(self)
        return jnp.where(x == 0, jnp.zeros((), x.dtype), fn(x))  # +0 at -0, as torch

    return rule


lowering(aten.special_i1.default)(_odd_bessel(jsp.i1))
lowering(aten.special_i1e.default)(_odd_bessel(jsp.i1e))


@lowering(aten.special_log_ndtr.default)
def special_log_ndtr(ctx, self):
    """log of the normal CDF: jax's (an asymptotic series) below -1, torch's
    ``log1p(-erfc(x / sqrt 2) / 2)`` above (jax's loses digits for x > 6). Not
    ``special_erfcx``: jax's float32 erfcx gives 0 for x in [9.19, 9.42]."""
    x = _float(self)
    high = jnp.log1p(-lax.erfc(x * to_dtype(math.sqrt(0.5), x.dtype)) / 2)
    return jnp.where(x < -1, jsp.log_ndtr(x), high)


@lowering(aten.digamma.default)
def digamma(ctx, self):
    """``psi(x)``; torch gives ``copysign(inf, -x)`` at +-0 (jax gives NaN)."""
    x = _float(self)
    pole = jnp.copysign(jnp.full((), jnp.inf, x.dtype), -x)
    return jnp.where(x == 0, pole, jsp.digamma(x))


def _scaled(factor):
    def rule(ctx, self):
        x = _float(self)
        return x * to_dtype(factor, x.dtype)

    return rule


lowering(aten.deg2rad.default)(_scaled(math.pi / 180))
lowering(aten.rad2deg.default)(_scaled(180 / math.pi))


@lowering(aten.sinc.default)
def sinc(ctx, self):
    """``sin(pi x) / (pi x)``, 1 at 0."""
    x = _float(self)
    product = to_dtype(math.pi, x.dtype) * x
    safe = jnp.where(x == 0, jnp.ones((), x.dtype), product)
    return jnp.where(x == 0, jnp.ones((), x.dtype), jnp.sin(safe) / safe)


@lowering(aten.signbit.default)
def signbit(ctx, self):
    """The sign bit (set for -0.0 and negative NaNs); ``x < 0`` for integers."""
    if self.dtype == BOOL:
        return jnp.zeros(self.shape, bool)
    if kind(self.dtype) == 1:
        return self < 0
    return jnp.signbit(self)


@lowering(aten.angle.default)
def angle(ctx, self):
    """The argument: ``pi`` for negative reals, 0 otherwise, NaN kept; complex
    ``atan2(imag, real)``."""
    if kind(self.dtype) == 3:
        return jnp.angle(self)
    x = _float(self)
    out = jnp.where(x < 0, to_dtype(math.pi, x.dtype), jnp.zeros((), x.dtype))
    return jnp.where(jnp.isnan(x), x, out)


# -- binary -----------------------------------------------------------------------------


def _binary_float(*xs):
    return cast_operands(*xs, floating=True)[2]


@lowering(aten.hypot.default)
def hypot(ctx, self, other):
    """``sqrt(a**2 + b**2)`` without overflow."""
    a, b = _binary_float(self, other)
    return fit(ctx, jnp.hypot(a, b))


@lowering(aten.copysign.Tensor, aten.copysign.Scalar)
def copysign(ctx, self, other):
    """``|a|`` with ``b``'s sign bit (-0.0 counts as negative)."""
    a, b = _binary_float(self, other)
    return fit(ctx, jnp.copysign(a, b))


@lowering(aten.nextafter.default)
def nextafter(ctx, self, other):
    """The next float after ``a`` towards ``b``, in the promoted dtype itself."""
    dtype = result_type(self, other)
    return fit(
        ctx, lax.nextafter(*jnp.broadcast_arrays(to_dtype(self, dtype), to_dtype(other, dtype)))
    )


@lowering(aten.heaviside.default)
def heaviside(ctx, self, values):
    """``values`` where ``x == 0``, else ``x > 0`` (NaN gives 0)."""
    dtype = result_type(self, values)
    x, v = to_dtype(self, dtype), to_dtype(values, dtype)
    return fit(ctx, jnp.where(x == 0, v, (x > 0).astype(dtype)))


@lowering(aten.ldexp.Tensor)
def ldexp(ctx, self, other):
    """``self * 2.0 ** other``, the power in the promoted float dtype (float64 ``self``
    with int exponents of 200 stays finite, as on the CPU)."""
    a, exponent = _binary_float(self, other)
    return fit(ctx, a * jnp.exp2(exponent))


def _xlog(fn):
    def rule(ctx, self, other):
        x, y = _binary_float(self, other)
        out = jnp.where(x == 0, jnp.zeros((), x.dtype), x * fn(y))
        return fit(ctx, jnp.where(jnp.isnan(y), y, out))

    return rule


lowering(aten.xlogy.Tensor, aten.xlogy.Scalar_Self, aten.xlogy.Scalar_Other)(_xlog(jnp.log))
lowering(
    aten.special_xlog1py.default,
    aten.special_xlog1py.self_scalar,
    aten.special_xlog1py.other_scalar,
)(_xlog(jnp.log1p))


@lowering(aten.special_entr.default)
def special_entr(ctx, self):
    """``-x log x`` for x > 0, 0 at 0, -inf below, NaN kept."""
    x = _float(self)
    out = jnp.where(x > 0, -x * jnp.log(jnp.where(x > 0, x, 1)), jnp.zeros((), x.dtype))
    out = jnp.where(x < 0, jnp.full((), -jnp.inf, x.dtype), out)
    return jnp.where(jnp.isnan(x), x, out)


def _logaddexp(exp, scale):
    def rule(ctx, self, other):
        a, b = _binary_float(self, other)
        m = jnp.maximum(a, b)
        out = m + jnp.log1p(exp(-jnp.abs(a - b))) * scale
        return fit(ctx, jnp.where(jnp.isinf(a) & (a == b), a, out))

    return rule


lowering(aten.logaddexp.default)(_logaddexp(jnp.exp, 1))
lowering(aten.logaddexp2.default)(_logaddexp(jnp.exp2, 1 / math.log(2)))
