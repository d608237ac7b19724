"""One-argument math lowerings: exp/log, roots, trig and hyperbolic functions,
``sigmoid``, ``erf``; ``neg``/``abs``/``sign``/``sgn``; rounding (``floor``, ``ceil``,
``trunc``, ``round``, ``frac``); ``logit``; and the float predicates (``isnan``,
``isinf``, ``isfinite``, ``isposinf``, ``isneginf``), ``isclose`` and ``nan_to_num``; the complex
conjugate (``conj_physical``, and ``_conj``, torch's conjugate view, as a new tensor
holding the conjugate: lazax tensors carry no conjugate bit, so writes through
``x.conj()`` do not reach ``x``, as with the CPU fallback before).

Contract (see ``_registry``): math on floats computes in opmath (float16/bfloat16 in
float32, rounded once by the output cast); integer and bool inputs of float math
become the default float dtype (``_promotion.compute_dtype(..., floating=True)``).
``neg``/``abs``/``sign``/``sgn`` and ``floor``/``ceil``/``trunc``/``round`` round
nothing, so they work in the input's own dtype (``frac`` and ``round(decimals=)``
compute in opmath); rounding ops keep integer inputs as they are (rounding an integer
is a copy in torch); the predicates are false (true for ``isfinite``) for integers. Formulas
follow torch's CPU kernels (``sigmoid``'s ``1 / (1 + exp(-x))``, ``round``'s half to
even, ``logit``'s per-step rounding). The rules ``foreach.py`` reuses are in ``UNARY``
by aten name.
"""

from __future__ import annotations

import jax.numpy as jnp
import torch
from jax import lax

from ._promotion import BOOL, compute_dtype, floating_dtype, kind, opmath, round_to, to_dtype
from ._registry import lowering

aten = torch.ops.aten

__all__ = ["UNARY", "logistic"]


def logistic(x):
    """torch's CPU sigmoid formula, ``1 / (1 + exp(-x))``."""
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
    "sigmoid": logistic,
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
    return self if self.dtype == BOOL else jnp.abs(self)


@_unary("sign")
def sign(ctx, self):
    """-1, 0 or 1; NaN gives 0 as in torch (``jnp.sign`` gives NaN); bools unchanged."""
    if self.dtype == BOOL:
        return self
    if kind(self.dtype) == 1:
        return jnp.sign(self)
    return (self > 0).astype(self.dtype) - (self < 0).astype(self.dtype)


@_unary("sgn")
def sgn(ctx, self):
    """``sign`` for real inputs; ``x / |x|`` (0 at 0) for complex ones."""
    if kind(self.dtype) == 3:
        magnitude = jnp.abs(self)
        return jnp.where(magnitude == 0, 0, self / jnp.where(magnitude == 0, 1, magnitude))
    return sign(ctx, self)


def _integer_identity(fn):
    """A rounding rule: ``fn`` for floats, the input itself for integers and bools."""

    def rule(ctx, self):
        if kind(self.dtype) < 2:
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
    return self if kind(self.dtype) < 2 else jnp.round(self)


@lowering(aten.round.decimals)
def round_decimals(ctx, self, decimals=0):
    """torch's kernel: ``nearbyint(x * 10**d) / 10**d`` (``x / 10**-d`` when d < 0)."""
    if kind(self.dtype) < 2:
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
    dtype = floating_dtype(self.dtype)
    x = to_dtype(self, opmath(dtype))
    if eps is not None and eps >= 0:
        lo = to_dtype(eps, dtype)
        hi = to_dtype(1 - lo.astype(x.dtype), dtype)
        x = jnp.clip(x, lo.astype(x.dtype), hi.astype(x.dtype))
    return jnp.log(round_to(x / round_to(1 - x, dtype), dtype))


# -- float predicates -------------------------------------------------------------------


@lowering(aten.isnan.default)
def isnan(ctx, self):
    """NaN test (false for integers)."""
    return jnp.isnan(self) if kind(self.dtype) >= 2 else jnp.zeros(self.shape, bool)


@lowering(aten.isinf.default)
def isinf(ctx, self):
    """Infinity test (false for integers)."""
    return jnp.isinf(self) if kind(self.dtype) >= 2 else jnp.zeros(self.shape, bool)


@lowering(aten.isfinite.default)
def isfinite(ctx, self):
    """Finiteness test (true for integers)."""
    return jnp.isfinite(self) if kind(self.dtype) >= 2 else jnp.ones(self.shape, bool)


@lowering(aten.isclose.default)
def isclose(ctx, self, other, rtol=1e-05, atol=1e-08, equal_nan=False):
    """torch's formula: equal, or finite ``|self - other| <= atol + |rtol * other|``,
    each step rounded to the operands' dtype as torch's tensor ops round it; integer and
    bool operands compute in the default float dtype; NaNs are close to each other with
    ``equal_nan``."""
    close = self == other
    if equal_nan and kind(self.dtype) >= 2:
        close = close | (jnp.isnan(self) & jnp.isnan(other))
    steps = floating_dtype(self.dtype)
    compute = opmath(steps)
    x, y = to_dtype(self, compute), to_dtype(other, compute)
    allowed = round_to(
        to_dtype(atol, compute) + jnp.abs(round_to(to_dtype(rtol, compute) * y, steps)), steps
    )
    actual = jnp.abs(round_to(x - y, steps))
    return close | (jnp.isfinite(actual) & (actual <= allowed))


@lowering(aten.isposinf.default)
def isposinf(ctx, self):
    """``x == +inf``."""
    return self == jnp.inf if kind(self.dtype) == 2 else jnp.zeros(self.shape, bool)


@lowering(aten.isneginf.default)
def isneginf(ctx, self):
    """``x == -inf``."""
    return self == -jnp.inf if kind(self.dtype) == 2 else jnp.zeros(self.shape, bool)


@lowering(aten.nan_to_num.default)
def nan_to_num(ctx, self, nan=None, posinf=None, neginf=None):
    """NaN -> ``nan`` (0), +-inf -> ``posinf``/``neginf`` (the dtype's max/min)."""
    if kind(self.dtype) != 2:
        return self
    info = jnp.finfo(self.dtype)
    nan = to_dtype(0.0 if nan is None else nan, self.dtype)
    posinf = to_dtype(float(info.max) if posinf is None else posinf, self.dtype)
    neginf = to_dtype(float(info.min) if neginf is None else neginf, self.dtype)
    out = jnp.where(self == jnp.inf, posinf, self)
    out = jnp.where(self == -jnp.inf, neginf, out)
    return jnp.where(jnp.isnan(self), nan, out)


@lowering(aten._conj_physical.default, aten.conj_physical.default)
def conj_physical(ctx, x):
    return jnp.conj(x)


@lowering(aten._conj.default, copies=True)
def conj(ctx, x):
    return jnp.conj(x)
