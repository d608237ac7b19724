"""torch.special's Bessel and Airy functions: ``special_bessel_j0``/``j1``/``y0``/``y1``,
``special_modified_bessel_i0``/``i1``/``k0``/``k1``,
``special_scaled_modified_bessel_k0``/``k1`` (``exp(x) k(x)``),
``special_spherical_bessel_j0`` (``sin(x) / x``) and ``special_airy_ai``.

Contract (see ``_registry``): dtypes follow ``_promotion`` (integer and bool inputs
become the default float dtype; float16/bfloat16 math runs in float32 and is rounded
once by the output cast). Each rule evaluates the approximation torch's CPU kernel uses
(``ATen/native/Math.h``, after Cephes): rational functions (Horner) on each interval
and Chebyshev series (Clenshaw) for the modified functions, in the input's dtype,
with the coefficients of ``_bessel_tables``; every branch is computed and one picked
per element with ``jnp.where``. torch's edge values follow: ``y0``/``y1``/``k0``/``k1``
(scaled too) are ``-inf``/``-inf``/``inf``/``inf`` at 0 and NaN below; ``j1`` and
``i1`` are odd (``-0`` stays ``-0``); ``j0(x) = 1 - x**2 / 4`` below ``1e-5``;
``spherical_bessel_j0`` is 0 at +-inf and a Taylor polynomial below 1/2; ``airy_ai``
is NaN at +-inf and 0 above 103.892; between -2.09 and 2.09 it sums torch's power
series, term by term until each element's term falls below the dtype's epsilon (a
``while_loop`` that stops when every element has).
"""

from __future__ import annotations

import math

import jax.numpy as jnp
import torch
from jax import lax

from . import _bessel_tables as T
from ._registry import lowering
from .special import _float

aten = torch.ops.aten

_SQRT_2_OVER_PI = 0.797884560802865355879892119868763737
_TWO_OVER_PI = 0.636619772367581343075535053490057448
_PI_4, _3PI_4 = 0.785398163397448309615660845819875721, 2.356194490192344928846982537459627163


def _polevl(z, coefficients):
    """Horner's rule, the highest power's coefficient first."""
    out = jnp.zeros_like(z)
    for c in coefficients:
        out = out * z + c
    return out


def _chbevl(y, coefficients):
    """Clenshaw's recurrence for a Chebyshev series, as torch writes it: ``(a - p) / 2``."""
    p = q = jnp.zeros_like(y)
    a = jnp.full_like(y, coefficients[0])
    for c in coefficients[1:]:
        p, q = q, a
        a = y * q - p + c
    return 0.5 * (a - p)


def _unary(op):
    def register(fn):
        def rule(ctx, self):
            x = _float(self)
            return jnp.where(jnp.isnan(x), x, fn(x))  # every branch's NaN, as torch's

        rule.__name__ = rule.__qualname__ = fn.__name__
        rule.__doc__ = fn.__doc__
        return lowering(op)(rule)

    return register


def _where_safe(mask, x, value):
    """``x`` where ``mask``, else a harmless ``value`` (for the branch not taken)."""
    return jnp.where(mask, x, jnp.full((), value, x.dtype))


# -- J and Y ----------------------------------------------------------------------------


def _asymptotic(x, table, phase, y_kind):
    """The large-x form: ``(P cos(x - phase) - 5/x Q sin(x - phase)) sqrt(2 / (pi x))``
    (``y_kind``: ``P sin + 5/x Q cos``); ``table`` names the P/Q rational functions."""
    x = _where_safe(x > 5, x, 10.0)
    if table in ("J0", "Y0"):
        z = 25.0 / (x * x)
    else:
        w = 5.0 / x
        z = w * w
    prefix = {"J0": "BESSEL_J0", "J1": "BESSEL_J1", "Y0": "BESSEL_Y0", "Y1": "BESSEL_Y1"}[table]
    p = _polevl(z, getattr(T, prefix + "_PP")) / _polevl(z, getattr(T, prefix + "_PQ"))
    q = _polevl(z, getattr(T, prefix + "_QP")) / _polevl(z, getattr(T, prefix + "_QQ"))
    s, c = jnp.sin(x - phase), jnp.cos(x - phase)
    if y_kind:
        out = p * s + 5.0 / x * q * c
    else:
        out = p * c - 5.0 / x * q * s
    return out * _SQRT_2_OVER_PI / jnp.sqrt(x)


def _j0(x):
    x = jnp.abs(x)
    xx = x * x
    small = (xx - 5.78318596294678452118) * (xx - 30.4712623436620863991)
    small = small * _polevl(xx, T.BESSEL_J0_RP) / _polevl(xx, T.BESSEL_J0_RQ)
    small = jnp.where(x < 1e-5, 1.0 - xx / 4.0, small)
    return jnp.where(x <= 5, small, _asymptotic(x, "J0", _PI_4, False))


def _j1(x):
    negative = x < 0
    x = jnp.where(negative, -x, x)
    xx = x * x
    small = _polevl(xx, T.BESSEL_J1_RP) / _polevl(xx, T.BESSEL_J1_RQ) * x
    small = small * (xx - 14.6819706421238932572) * (xx - 49.2184563216946036703)
    out = jnp.where(x <= 5, small, _asymptotic(x, "J1", _3PI_4, False))
    return jnp.where(negative, -out, out)


def _y_edges(x, out):
    out = jnp.where(x < 0, jnp.full((), jnp.nan, x.dtype), out)
    return jnp.where(x == 0, jnp.full((), -jnp.inf, x.dtype), out)


@_unary(aten.special_bessel_j0.default)
def special_bessel_j0(x):
    """Bessel function of the first kind of order 0."""
    return _j0(x)


@_unary(aten.special_bessel_j1.default)
def special_bessel_j1(x):
    """Bessel function of the first kind of order 1 (odd)."""
    return _j1(x)


@_unary(aten.special_bessel_y0.default)
def special_bessel_y0(x):
    """Bessel function of the second kind of order 0: -inf at 0, NaN below."""
    s = _where_safe(x > 0, x, 1.0)
    xx = s * s
    small = _polevl(xx, T.BESSEL_Y0_YP) / _polevl(xx, T.BESSEL_Y0_YQ)
    small = small + _TWO_OVER_PI * jnp.log(s) * _j0(s)
    return _y_edges(x, jnp.where(x <= 5, small, _asymptotic(x, "Y0", _PI_4, True)))


@_unary(aten.special_bessel_y1.default)
def special_bessel_y1(x):
    """Bessel function of the second kind of order 1: -inf at 0, NaN below."""
    s = _where_safe(x > 0, x, 1.0)
    xx = s * s
    small = s * (_polevl(xx, T.BESSEL_Y1_YP) / _polevl(xx, T.BESSEL_Y1_YQ))
    small = small + _TWO_OVER_PI * (_j1(s) * jnp.log(s) - 1.0 / s)
    return _y_edges(x, jnp.where(x <= 5, small, _asymptotic(x, "Y1", _3PI_4, True)))


@_unary(aten.special_spherical_bessel_j0.default)
def special_spherical_bessel_j0(x):
    """``sin(x) / x``: a Taylor polynomial below 1/2, 0 at +-inf."""
    xx = x * x
    poly = 1.0 / 6227020800.0
    for c in (-1.0 / 39916800.0, 1.0 / 362880.0, -1.0 / 5040.0, 1.0 / 120.0, -1.0 / 6.0):
        poly = c + xx * poly
    poly = 1.0 + xx * poly
    s = _where_safe(jnp.abs(x) >= 0.5, x, 1.0)
    out = jnp.where(jnp.abs(x) < 0.5, poly, jnp.sin(s) / s)
    return jnp.where(jnp.isinf(x), jnp.zeros((), x.dtype), out)


# -- I and K ----------------------------------------------------------------------------


def _i0(x):
    ax = jnp.abs(x)
    small = jnp.exp(ax) * _chbevl(ax / 2.0 - 2.0, T.MODIFIED_BESSEL_I0_A)
    big = _where_safe(ax > 8, ax, 16.0)
    large = jnp.exp(ax) * _chbevl(32.0 / big - 2.0, T.MODIFIED_BESSEL_I0_B) / jnp.sqrt(big)
    return jnp.where(ax <= 8, small, jnp.where(ax > 8, large, ax + x))  # NaN kept


def _i1(x):
    ax = jnp.abs(x)
    small = _chbevl(ax / 2.0 - 2.0, T.MODIFIED_BESSEL_I1_A) * ax * jnp.exp(ax)
    big = _where_safe(ax > 8, ax, 16.0)
    large = jnp.exp(ax) * _chbevl(32.0 / big - 2.0, T.MODIFIED_BESSEL_I1_B) / jnp.sqrt(big)
    out = jnp.where(ax <= 8, small, jnp.where(ax > 8, large, ax + x))
    return jnp.where(x < 0, -out, out)


def _k(x, order, scaled):
    """``k0``/``k1`` (times ``exp(x)`` when ``scaled``): inf at 0, NaN below."""
    a = T.MODIFIED_BESSEL_K0_A if order == 0 else T.MODIFIED_BESSEL_K1_A
    b = T.MODIFIED_BESSEL_K0_B if order == 0 else T.MODIFIED_BESSEL_K1_B
    s = _where_safe((x > 0) & (x <= 2), x, 1.0)
    series = _chbevl(s * s - 2.0, a)
    if order == 0:
        small = series - jnp.log(0.5 * s) * _i0(s)
    else:
        small = jnp.log(0.5 * s) * _i1(s) + series / s
    if scaled:
        small = small * jnp.exp(s)
    big = _where_safe(x > 2, x, 4.0)
    large = _chbevl(8.0 / big - 2.0, b)
    large = large / jnp.sqrt(big) if scaled else jnp.exp(-big) * large / jnp.sqrt(big)
    out = jnp.where(x <= 2, small, jnp.where(x > 2, large, x))  # NaN kept
    out = jnp.where(x < 0, jnp.full((), jnp.nan, x.dtype), out)
    return jnp.where(x == 0, jnp.full((), jnp.inf, x.dtype), out)


@_unary(aten.special_modified_bessel_i0.default)
def special_modified_bessel_i0(x):
    """Modified Bessel function of the first kind of order 0."""
    return _i0(x)


@_unary(aten.special_modified_bessel_i1.default)
def special_modified_bessel_i1(x):
    """Modified Bessel function of the first kind of order 1 (odd)."""
    return _i1(x)


@_unary(aten.special_modified_bessel_k0.default)
def special_modified_bessel_k0(x):
    """Modified Bessel function of the second kind of order 0."""
    return _k(x, 0, False)


@_unary(aten.special_modified_bessel_k1.default)
def special_modified_bessel_k1(x):
    """Modified Bessel function of the second kind of order 1."""
    return _k(x, 1, False)


@_unary(aten.special_scaled_modified_bessel_k0.default)
def special_scaled_modified_bessel_k0(x):
    """``exp(x) * k0(x)``."""
    return _k(x, 0, True)


@_unary(aten.special_scaled_modified_bessel_k1.default)
def special_scaled_modified_bessel_k1(x):
    """``exp(x) * k1(x)``."""
    return _k(x, 1, True)


# -- Airy -------------------------------------------------------------------------------


def _airy_series(x):
    """torch's power series ``0.355 f - 0.259 g``, each element summed until its term
    falls below epsilon (at most 200 steps)."""
    eps = float(jnp.finfo(x.dtype).eps)
    z = x * x * x
    one = jnp.ones_like(x)

    def cond(state):
        i, *_, t = state
        return (i < 200) & jnp.any(t > eps)

    def body(state):
        i, f, g, m, n, k, t = state
        live = t > eps
        m2 = m * z
        k2 = k + 1.0
        m2 = m2 / k2
        n2 = n * z
        k2 = k2 + 1.0
        n2 = n2 / k2
        m2 = m2 / k2
        f2 = f + m2
        k2 = k2 + 1.0
        n2 = n2 / k2
        g2 = g + n2
        t2 = jnp.abs(m2 / f2)
        keep = [jnp.where(live, new, old) for new, old in ((f2, f), (g2, g), (m2, m))]
        rest = [jnp.where(live, new, old) for new, old in ((n2, n), (k2, k), (t2, t))]
        return (i + 1, *keep, *rest)

    state = (jnp.zeros((), jnp.int32), one, x, one, x, one, one)
    _, f, g, *_ = lax.while_loop(cond, body, state)
    return 0.355028053887817239260 * f - 0.258819403792806798405 * g


@_unary(aten.special_airy_ai.default)
def special_airy_ai(x):
    """The Airy function Ai: asymptotic forms beyond -2.09 and 2.09, else the series."""
    ispi = 5.64189583547756286948e-01
    # x < -2.09: the oscillating asymptotic form.
    neg = _where_safe(x < -2.09, x, -4.0)
    zeta = -2.0 * neg * jnp.sqrt(-neg) / 3.0
    z = 1.0 / zeta
    zz = z * z
    f = zz * _polevl(zz, T.AIRY_AI_AFN) / _polevl(zz, T.AIRY_AI_AFD)
    g = z * _polevl(zz, T.AIRY_AI_AGN) / _polevl(zz, T.AIRY_AI_AGD)
    t = zeta + 0.25 * math.pi
    negative = ispi / jnp.sqrt(jnp.sqrt(-neg)) * (jnp.sin(t) * (1.0 + f) - jnp.cos(t) * g)
    # x >= 2.09: the decaying form.
    pos = _where_safe(x >= 2.09, x, 4.0)
    zeta = 2.0 * pos * jnp.sqrt(pos) / 3.0
    ratio = _polevl(1.0 / zeta, T.AIRY_AI_AN) / _polevl(1.0 / zeta, T.AIRY_AI_AD)
    positive = ispi * ratio / (2.0 * jnp.sqrt(jnp.sqrt(pos)) * jnp.exp(zeta))
    # torch also sums the series up to 8.32, then returns the decaying form there.
    middle = _airy_series(_where_safe((x >= -2.09) & (x < 2.09), x, 0.0))
    out = jnp.where(x < -2.09, negative, jnp.where(x >= 2.09, positive, middle))
    out = jnp.where(x > 103.892, jnp.zeros((), x.dtype), out)
    return jnp.where(jnp.isinf(x), jnp.full((), jnp.nan, x.dtype), out)
