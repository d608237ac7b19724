"""torch.special's orthogonal polynomials ``P_n(x)``, ``x`` and ``n`` both tensors (or
one a Scalar), broadcast: ``special_chebyshev_polynomial_t/u/v/w``, their
``special_shifted_chebyshev_polynomial_*`` (of ``2x - 1``),
``special_hermite_polynomial_h``/``he``, ``special_laguerre_polynomial_l`` and
``special_legendre_polynomial_p``.

Contract (see ``_registry``): ``x`` and ``n`` are promoted together
(``torch.result_type``, integer and bool to the default float dtype) and ``n`` is then
truncated to an integer as torch's CPU kernel does (``static_cast<int64_t>``: NaN,
+-inf and values out of int64's range act as a negative ``n``). Per element, in
torch's order (``ATen/native/Math.h``): ``n < 0`` gives 0; the values at the ends of
the interval (``|x| == 1``; ``x`` 0 or 1 for the shifted ones; ``x == 0`` for Laguerre)
are torch's closed forms; for Chebyshev inside the interval and ``n`` above a threshold
(6, 8, 8, 8; shifted 6, 6, 6, 4) torch's trigonometric forms (``cos(n acos x)``, ...,
with its fallbacks where the denominator is degenerate, quirks included); Hermite gives
NaN above ``n`` = 128 (float32) or 512 (float64); everything else runs torch's
three-term recurrence. The recurrence is one ``lax.while_loop`` over all elements: each
element steps until its own ``n`` (or until its value is NaN, where torch stops too),
and the loop ends when none is left: its trip count is the largest ``n`` among the
elements that need it, found on the device (no host read of ``n``). Elements torch
computes in closed form do not lengthen it.
"""

from __future__ import annotations

import jax.numpy as jnp
import torch
from jax import lax

from ._promotion import cast_operands, fit
from ._registry import lowering

aten = torch.ops.aten
_I64 = jnp.int64


def _operands(x, n):
    """``x`` and ``n`` in their promoted float dtype, broadcast, and ``n`` as int64."""
    x, n = jnp.broadcast_arrays(*cast_operands(x, n, floating=True)[2])
    valid = jnp.isfinite(n) & (jnp.abs(n) < 2.0**63)
    return x, jnp.where(valid, n, -1).astype(_I64)


def _recurrence(steps, p, q, step):
    """Run ``r = step(j, p, q); p, q = q, r`` for ``j = 1 .. steps`` per element (fewer
    where ``q`` turns NaN); returns the last ``q``."""

    def live(j, q):
        return (j <= steps) & ~jnp.isnan(q)

    def cond(state):
        j, _, q = state
        return jnp.any(live(j, q))

    def body(state):
        j, p, q = state
        on = live(j, q)
        r = step(j.astype(q.dtype), p, q)
        return j + 1, jnp.where(on, q, p), jnp.where(on, r, q)

    return lax.while_loop(cond, body, (jnp.ones((), _I64), p, q))[2]


def _c(value, x):
    """``value`` (a Python number or an int64 array) in ``x``'s dtype, broadcast."""
    return jnp.broadcast_to(jnp.asarray(value).astype(x.dtype), x.shape)


def _assemble(x, n, q0, looped, cases):
    """torch's chain: ``cases`` (mask, value) in its order, then ``n`` 0 and 1, then the
    recurrence (``looped``)."""
    out = jnp.where(n == 1, q0, looped)
    out = jnp.where(n == 0, _c(1, x), out)
    for mask, value in reversed(cases):
        out = jnp.where(mask, value, out)
    return jnp.where(n < 0, _c(0, x), out)


# -- Chebyshev --------------------------------------------------------------------------

_KINDS = {"t": (6, 6), "u": (8, 6), "v": (8, 6), "w": (8, 4)}


def _chebyshev(kind, shifted):
    def rule(ctx, x, n):
        x, n = _operands(x, n)
        y = x + x - 1.0 if shifted else x
        at_one = x == 1
        at_minus_one = (x == 0) if shifted else (x == -1)
        even = n % 2 == 0
        one, odd_sign = _c(1, x), jnp.where(even, _c(1, x), _c(-1, x))
        n1, n21 = _c(n + 1, x), _c(n + n + 1, x)
        if kind == "t":
            q0, ends = y, jnp.where(at_one, one, odd_sign)
        elif kind == "u":
            q0, ends = y + y, jnp.where(at_one, n1, odd_sign * n1)
        elif kind == "v":
            q0, ends = y + y - 1.0, jnp.where(at_one, one, odd_sign * n21)
        else:
            q0, ends = y + y + 1.0, jnp.where(at_one, n21, odd_sign)
        inside = (jnp.abs(y) < 1) & (n > _KINDS[kind][1 if shifted else 0])
        theta = jnp.arccos(jnp.where(inside, y, jnp.zeros((), y.dtype)))
        nf = n.astype(x.dtype)
        if kind == "t":
            trig = jnp.cos(nf * theta)
        elif kind == "u":
            s = jnp.sin(theta)
            degenerate = (nf + 1) * jnp.cos((nf + 1) * theta) / y
            trig = jnp.where(s != 0, jnp.sin((nf + 1) * theta) / s, degenerate)
        elif kind == "v":
            good = jnp.sin(theta / 2) != 1
            trig = jnp.where(good, jnp.cos((nf + 0.5) * theta) / jnp.cos(theta / 2), odd_sign * n21)
        else:
            good = jnp.cos(theta / 2) != 1
            fallback = odd_sign if shifted else jnp.where(x > 0, n21, odd_sign)
            trig = jnp.where(good, jnp.sin((nf + 0.5) * theta) / jnp.sin(theta / 2), fallback)
        edge = at_one | at_minus_one
        steps = jnp.where(edge | inside, 0, n - 1)
        looped = _recurrence(steps, _c(1, x), q0, lambda j, p, q: (y + y) * q - p)
        return fit(ctx, _assemble(x, n, q0, looped, [(edge, ends), (inside, trig)]))

    prefix = "special_shifted_chebyshev_polynomial_" if shifted else "special_chebyshev_polynomial_"
    rule.__name__ = rule.__qualname__ = prefix + kind
    rule.__doc__ = f"{'Shifted ' if shifted else ''}Chebyshev polynomial of the kind {kind}."
    return rule


def _register(name, rule):
    packet = getattr(aten, name)
    lowering(packet.default, packet.x_scalar, packet.n_scalar)(rule)


for _kind in "tuvw":
    _register(f"special_chebyshev_polynomial_{_kind}", _chebyshev(_kind, False))
    _register(f"special_shifted_chebyshev_polynomial_{_kind}", _chebyshev(_kind, True))


# -- Hermite, Laguerre, Legendre --------------------------------------------------------


def _hermite(physicists):
    def rule(ctx, x, n):
        x, n = _operands(x, n)
        limit = 128 if x.dtype.itemsize <= 4 else 512
        q0 = x + x if physicists else x
        too_big = n > limit
        steps = jnp.where(too_big, 0, n - 1)
        if physicists:  # k = 2j
            step = lambda j, p, q: (x + x) * q - (j + j) * p  # noqa: E731
        else:
            step = lambda j, p, q: x * q - j * p  # noqa: E731
        looped = _recurrence(steps, _c(1, x), q0, step)
        nan = _c(jnp.nan, x)
        out = _assemble(x, n, q0, jnp.where(too_big, nan, looped), [])
        return fit(ctx, out)

    rule.__name__ = rule.__qualname__ = "special_hermite_polynomial_" + (
        "h" if physicists else "he"
    )
    rule.__doc__ = "Hermite polynomial (physicists' H or probabilists' He); NaN past torch's limit."
    return rule


_register("special_hermite_polynomial_h", _hermite(True))
_register("special_hermite_polynomial_he", _hermite(False))


def special_laguerre_polynomial_l(ctx, x, n):
    """Laguerre polynomial; 1 at ``x == 0``."""
    x, n = _operands(x, n)
    q0 = 1.0 - x
    zero = x == 0
    steps = jnp.where(zero, 0, n - 1)
    looped = _recurrence(
        steps, _c(1, x), q0, lambda j, p, q: (((j + j) + (1.0 - x)) * q - j * p) / (j + 1)
    )
    return fit(ctx, _assemble(x, n, q0, looped, [(zero, _c(1, x))]))


def special_legendre_polynomial_p(ctx, x, n):
    """Legendre polynomial; +-1 at ``|x| == 1``."""
    x, n = _operands(x, n)
    edge = jnp.abs(x) == 1
    ends = jnp.where((x > 0) | (n % 2 == 0), _c(1, x), _c(-1, x))
    steps = jnp.where(edge, 0, n - 1)
    looped = _recurrence(
        steps, _c(1, x), x, lambda j, p, q: ((j + j + 1) * x * q - j * p) / (j + 1)
    )
    return fit(ctx, _assemble(x, n, x, looped, [(edge, ends)]))


_register("special_laguerre_polynomial_l", special_laguerre_polynomial_l)
_register("special_legendre_polynomial_p", special_legendre_polynomial_p)
