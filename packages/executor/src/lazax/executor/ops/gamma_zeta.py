"""The incomplete gamma, polygamma, Hurwitz zeta and scaled complementary error
functions: ``igamma``/``igammac``, ``polygamma``, ``special_zeta``, ``special_erfcx``.

Contract (see ``_registry``): dtypes follow ``_promotion`` (``torch.result_type``;
integer and bool inputs become the default float dtype); float16/bfloat16 math runs in
float32 and is rounded once by the output cast. jax's functions do the arithmetic;
each rule then spells out the values torch's CPU kernels (``ATen/native/Math.h``) give
at the edges of the domain, where jax's differ:

- ``igamma(a, x)``/``igammac(a, x)`` (regularized P and Q): NaN for ``a < 0`` or
  ``x < 0``; at ``a == 0`` P is 1 (Q is 0) for ``x > 0``, NaN otherwise; at ``x == 0``
  P is 0 (Q is 1), even for a NaN ``a``; ``a == inf`` gives P = 0 (Q = 1) unless ``x``
  is infinite too (NaN); ``x == inf`` gives P = 1 (Q = 0), even for a NaN ``a``.
  Q uses torch's series ``-expm1(a log x - lgamma(1 + a)) - x**a / gamma(a) * sum``
  where torch does (``x <= 1.1``, small ``a``; ``lgamma(1 + a)`` by its Taylor series
  below 1/2): jax's Q there cancels (up to 5e-3 relative error in float32).
- ``polygamma(n, x)``: ``n == 0`` is ``digamma`` (``special``'s rule); ``n == 1`` is
  torch's trigamma (the reflection ``pi**2 / sin(pi x)**2`` below 1/2, six recurrence
  steps, then the asymptotic series), so its huge finite values near the poles match;
  ``n >= 2`` is ``(-1)**(n+1) n! zeta(n+1, x)`` with this module's zeta, so
  ``(-1)**(n+1) * inf`` at the poles (``x`` a non-positive integer or ``-inf``).
- ``special_zeta(x, q)``: inf at ``x == 1``, NaN for ``x < 1``, inf at a non-positive
  integer ``q`` (and ``q == -inf``); ``x == inf`` gives inf for ``q < 1`` (a term
  ``|q + k| < 1``) and 1 at ``q == 1``. For ``q < 0`` (integer ``x``) the first
  ``ceil(-q)`` terms are summed in a ``fori_loop`` bounded by their largest count on
  the device, then jax's zeta at ``q + ceil(-q)`` (jax's own is wrong for ``q < 0``;
  below ``-2**20`` it is still used: torch's CPU loops ``|q|`` times there).
- ``special_erfcx(x)``: ``exp(x**2) erfc(x)``: jax's ``erfcx`` below a threshold (8 in
  float32, 25 in float64), above it torch's 5-term continued fraction (jax's underflows
  to 0 in a window below its own overflow point) and ``1 / (sqrt(pi) x)`` beyond
  ``5e7``; ``2 exp(x**2) - erfcx(-x)`` (inf when that overflows) for negative x.
"""

from __future__ import annotations

import math

import jax.numpy as jnp
import jax.scipy.special as jsp
import torch
from jax import lax

from ._promotion import cast_operands, fit, to_dtype
from ._registry import lowering
from .special import _float, digamma

aten = torch.ops.aten


def _binary_float(*xs):
    return jnp.broadcast_arrays(*cast_operands(*xs, floating=True)[2])


def _const(value, like):
    return jnp.full((), value, like.dtype)


# -- incomplete gamma -------------------------------------------------------------------


def _igamma(fn, at_a0, at_x0, at_a_inf, at_x_inf):
    def rule(ctx, self, other):
        a, x = _binary_float(self, other)
        nan = _const(jnp.nan, a)
        # torch's checks, in its order: the where-chain applies the first one last.
        out = fn(a, x)
        out = jnp.where(jnp.isinf(x), _const(at_x_inf, a), out)
        out = jnp.where(jnp.isinf(a), jnp.where(jnp.isinf(x), nan, _const(at_a_inf, a)), out)
        out = jnp.where(x == 0, _const(at_x0, a), out)
        out = jnp.where(a == 0, jnp.where(x > 0, _const(at_a0, a), nan), out)
        return fit(ctx, jnp.where((x < 0) | (a < 0), nan, out))

    return rule


def _riemann_zeta(k: int) -> float:
    """zeta(k) for an integer k >= 2: 63 terms, then the Euler-Maclaurin tail from 64
    (its next term is below 1e-17 of the sum)."""
    m = 64
    head = math.fsum(n ** -float(k) for n in range(1, m))
    tail = (
        m ** (1.0 - k) / (k - 1)
        + m ** -float(k) / 2
        + k * m ** (-k - 1.0) / 12
        - k * (k + 1) * (k + 2) * m ** (-k - 3.0) / 720
        + k * (k + 1) * (k + 2) * (k + 3) * (k + 4) * m ** (-k - 5.0) / 30240
    )
    return head + tail


# lgamma(1 + a) = -euler_gamma a + sum_k (-1)**k zeta(k) / k a**k, for |a| <= 1/2.
_LGAMMA1P = [0.0, -0.5772156649015329] + [(-1) ** k * _riemann_zeta(k) / k for k in range(2, 51)]


def _lgamma1p(a):
    """``lgamma(1 + a)`` to full relative precision near 0 (XLA's lgamma is accurate
    only absolutely near 1, which Q's series for small ``a`` cannot afford)."""
    small = jnp.abs(a) <= 0.5
    s = jnp.where(small, a, jnp.zeros((), a.dtype))
    taylor = jnp.zeros_like(s)
    for c in reversed(_LGAMMA1P):
        taylor = taylor * s + c
    return jnp.where(small, taylor, lax.lgamma(1 + a))


def _gammaincc(a, x):
    """Q, with torch's cancellation-free series (DLMF 8.7.3) where torch uses it (x <=
    1.1, small a): jax's ``1 - P`` there loses up to 5e-3 relatively in float32."""
    logx = jnp.log(x)
    series = (x <= 1.1) & jnp.where(x <= 0.5, -0.4 / logx >= a, x * 1.1 >= a)
    xs = jnp.where(series, x, jnp.zeros((), x.dtype))
    fac, total = jnp.ones_like(xs), jnp.zeros_like(xs)
    for n in range(1, 31):  # 1.1**30 / 30! is far below float64's epsilon
        fac = fac * (-xs / n)
        total = total + fac / (a + n)
    head = -jnp.expm1(a * logx - _lgamma1p(a))
    value = head - jnp.exp(a * logx - lax.lgamma(a)) * total
    return jnp.where(series, value, jsp.gammaincc(a, x))


lowering(aten.igamma.default)(_igamma(jsp.gammainc, 1.0, 0.0, 0.0, 1.0))
lowering(aten.igammac.default)(_igamma(_gammaincc, 0.0, 1.0, 1.0, 0.0))


# -- Hurwitz zeta and polygamma ---------------------------------------------------------


_MAX_SHIFT = 2.0**20  # q below -2**20: jax's value (torch's CPU loops |q| times)


def _zeta(x, q):
    """torch's ``zeta(x, q)`` on arrays of one float dtype."""
    inf, nan = _const(jnp.inf, x), _const(jnp.nan, x)
    # jax's series is wrong for q < 0 (defined there for integer x): sum the first
    # ceil(-q) terms here, in a loop bounded on the device, and hand jax q + m > 0.
    shift = (q < 0) & (q > -_MAX_SHIFT) & (q != jnp.floor(q)) & (x == jnp.floor(x))
    m = jnp.where(shift, jnp.ceil(-q), jnp.zeros((), q.dtype))

    def term(k, total):
        k = k.astype(q.dtype)
        return total + jnp.where(k < m, jnp.power(q + k, -x), jnp.zeros((), q.dtype))

    head = lax.fori_loop(
        jnp.zeros((), jnp.int32), jnp.max(m, initial=0).astype(jnp.int32), term, jnp.zeros_like(q)
    )
    out = head + jsp.zeta(x, q + m)
    out = jnp.where((x == jnp.inf) & (q < 1), inf, out)  # some |q + k| < 1
    out = jnp.where((x == jnp.inf) & (q == 1), _const(1.0, x), out)
    out = jnp.where((q <= 0) & (q == jnp.floor(q)), inf, out)
    out = jnp.where(x < 1, nan, out)
    return jnp.where(x == 1, inf, out)


@lowering(aten.special_zeta.default, aten.special_zeta.self_scalar, aten.special_zeta.other_scalar)
def special_zeta(ctx, self, other):
    """The Hurwitz zeta function ``sum_k (k + q) ** -x``."""
    x, q = _binary_float(self, other)
    return fit(ctx, _zeta(x, q))


def _trigamma(x):
    """torch's CPU trigamma: reflection below 1/2, six steps up, asymptotic series."""
    pi = _const(math.pi, x)
    one = _const(1.0, x)
    reflect = x < 0.5
    sin_pi_x = jnp.sin(pi * x)
    result = jnp.where(reflect, -(pi * pi) / (sin_pi_x * sin_pi_x), jnp.zeros((), x.dtype))
    x = jnp.where(reflect, one - x, x)
    for _ in range(6):
        result = result + one / (x * x)
        x = x + one
    ixx = one / (x * x)
    series = ixx * (_const(1 / 6, x) - ixx * (_const(1 / 30, x) - ixx * _const(1 / 42, x)))
    result = result + (one + one / (2 * x) + series) / x
    return jnp.where(reflect, -result, result)


@lowering(aten.polygamma.default)
def polygamma(ctx, n, self):
    """The ``n``-th derivative of digamma (``n`` a Python int >= 0)."""
    if n == 0:
        return digamma(ctx, self)
    x = _float(self)
    if n == 1:
        return _trigamma(x)
    # (-1)**(n+1) n! in float64 (inf past 170!), rounded once to x's dtype, as torch's.
    factor = (1.0 if n % 2 else -1.0) * math.exp(math.lgamma(n + 1))
    return to_dtype(factor, x.dtype) * _zeta(_const(n + 1, x), x)


# -- erfcx ------------------------------------------------------------------------------

_ISPI = 0.56418958354775628694807945156  # 1 / sqrt(pi)


def _erfcx_large(x):
    """erfcx for large positive x: torch's 5-term continued fraction, then 1 / (x sqrt pi)."""
    ispi = _const(_ISPI, x)
    huge = x > 5e7
    x = jnp.where(huge, _const(1.0, x), x)  # keeps x**4 finite on the unused branch
    xx = x * x
    cf = ispi * (xx * (xx + 4.5) + 2) / (x * (xx * (xx + 5) + 3.75))
    return cf, huge


@lowering(aten.special_erfcx.default)
def special_erfcx(ctx, self):
    """``exp(x**2) * erfc(x)`` without overflow: see the module docstring."""
    x = _float(self)
    threshold = 8.0 if x.dtype.itemsize <= 4 else 25.0
    ax = jnp.abs(x)
    small = ax < threshold
    positive = jsp.erfcx(jnp.where(small, ax, jnp.zeros((), x.dtype)))
    cf, huge = _erfcx_large(jnp.where(small, _const(threshold, x), ax))
    positive = jnp.where(small, positive, cf)
    positive = jnp.where(huge, _const(_ISPI, x) / ax, positive)
    negative = 2 * jnp.exp(x * x) - positive
    negative = jnp.where(x < -26.7, _const(jnp.inf, x), negative)
    out = jnp.where(x >= 0, positive, negative)
    return jnp.where(jnp.isnan(x), x, out)
