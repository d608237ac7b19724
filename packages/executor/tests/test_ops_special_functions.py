"""Special-function lowerings (``ops/gamma_zeta.py``, ``ops/bessel.py``,
``ops/polynomials.py``) against torch's CPU kernels, at the values torch's OpInfo
samples miss.

Contract: every case runs the same function on CPU tensors and on their ``lazax``
copies, and the lazax result must equal the CPU one to ``torch.testing.assert_close``'s
defaults (or the tolerance a case names), dtype included, with no CPU fallback (the
``no_fallback`` fixture). Covered: NaN, infinities, signed zeros, negative and
out-of-domain arguments, poles, large arguments (erfcx's overflow window), float64,
bfloat16 and integer inputs.
"""

from __future__ import annotations

import pytest
import torch

from lazax.executor.testing import deferred_check as check

F32, F64, BF16, I64 = torch.float32, torch.float64, torch.bfloat16, torch.int64
NAN, INF = float("nan"), float("inf")
SPECIAL = [-INF, -2.0, -1.5, -0.0, 0.0, 0.5, 1.0, 1.5, 2.0, 3.0, INF, NAN]


def pairs(values):
    """Every (a, b) of ``values`` as two flat float64 tensors."""
    a = torch.tensor(values, dtype=F64)
    return a.repeat_interleave(len(values)), a.repeat(len(values))


def randn(*shape, dtype=F32, seed=0):
    g = torch.Generator().manual_seed(seed)
    return torch.randn(*shape, generator=g).to(dtype)


# -- gamma_zeta -------------------------------------------------------------------------


@pytest.mark.parametrize("dtype", [F32, F64])
@pytest.mark.parametrize("fn", [torch.igamma, torch.igammac, torch.special.zeta])
def test_binary_special_values(fn, dtype, no_fallback):
    a, b = pairs(SPECIAL)
    check(fn, a.to(dtype), b.to(dtype))


@pytest.mark.parametrize("fn", [torch.igamma, torch.igammac])
def test_incomplete_gamma_values(fn, no_fallback):
    a = torch.tensor([0.1, 0.5, 1.0, 2.5, 7.0, 30.0, 0.001])
    x = torch.tensor([0.01, 0.5, 1.0, 3.0, 6.5, 29.0, 0.2])
    check(fn, a, x, rtol=1e-4, atol=1e-6)
    check(fn, a.double(), x.double())
    check(fn, a.to(BF16), x.to(BF16))
    check(fn, a[:, None], x[None, :], rtol=1e-4, atol=1e-6)  # broadcast


def test_igammac_small_a(no_fallback):
    """Q for small a and x <= 1.1 (torch's cancellation-free series; jax's 1 - P there
    was off by up to 5e-3 in float32)."""
    a = torch.tensor([0.000939, 0.00116, 0.00123, 0.0005, 0.01, 0.3, 0.9])
    x = torch.tensor([0.937, 0.767, 1.06, 0.2, 0.05, 0.45, 1.0])
    check(torch.igammac, a, x, rtol=3e-4, atol=0.0)
    check(torch.igammac, a.double(), x.double(), rtol=1e-10, atol=0.0)


def test_zeta_values(no_fallback):
    x = torch.tensor([1.5, 2.0, 3.0, 4.5, 10.0])
    q = torch.tensor([0.5, 1.0, 2.0, -2.5, 7.0])
    check(torch.special.zeta, x, q)
    check(torch.special.zeta, x.double(), q.double())
    check(lambda t: torch.special.zeta(t, 2.0), x)
    check(lambda t: torch.special.zeta(3.0, t), q)
    check(torch.special.zeta, torch.tensor([2, 3, 4]), torch.tensor([1, 2, 3]))


@pytest.mark.parametrize("n", [0, 1, 2, 3, 5])
@pytest.mark.parametrize("dtype", [F32, F64])
def test_polygamma(n, dtype, no_fallback):
    x = torch.tensor(
        [-INF, -3.0, -1.0, -2.5, -0.0, 0.0, 1e-30, -1e-30, 0.25, 1.0, 7.5, 100.0, INF, NAN]
    )
    check(lambda t: torch.polygamma(n, t), x.to(dtype))
    check(lambda t: torch.polygamma(n, t), randn(3, 4, dtype=dtype).abs() + 0.1)
    check(lambda t: torch.polygamma(n, t), torch.tensor([1, 2, 5]))


@pytest.mark.parametrize("dtype", [F32, F64])
def test_erfcx(dtype, no_fallback):
    grid = torch.linspace(-30, 30, 6001, dtype=F64)
    extra = [-INF, INF, NAN, -0.0, 0.0, 7.99, 8.0, 9.3, 24.99, 25.0, 26.6, 60.0, 1e8, -1e8]
    x = torch.cat([grid, torch.tensor(extra, dtype=F64)]).to(dtype)
    check(torch.special.erfcx, x)
    check(torch.special.erfcx, torch.tensor([-3, 0, 2, 40]))


def test_zeta_negative_q(no_fallback):
    """jax's series is wrong for q < 0: the rule sums the first ceil(-q) terms."""
    x = torch.tensor([2.0, 3.0, 4.0, 5.0, 6.0, 2.5])
    q = torch.tensor([-8.478, -1.7658, -4.3228, -0.5, -30.25, -1.5])
    check(torch.special.zeta, x, q)
    check(torch.special.zeta, x.double(), q.double())
    check(lambda t: torch.polygamma(3, t), q)


# -- bessel -----------------------------------------------------------------------------

BESSEL = [
    torch.special.bessel_j0,
    torch.special.bessel_j1,
    torch.special.bessel_y0,
    torch.special.bessel_y1,
    torch.special.modified_bessel_i0,
    torch.special.modified_bessel_i1,
    torch.special.modified_bessel_k0,
    torch.special.modified_bessel_k1,
    torch.special.scaled_modified_bessel_k0,
    torch.special.scaled_modified_bessel_k1,
    torch.special.spherical_bessel_j0,
    torch.special.airy_ai,
]
EDGES = [-INF, -200.0, -30.0, -8.5, -2.1, -2.0, -1.0, -1e-6, -0.0, 0.0, 1e-6, 0.3, 1.0]
EDGES += [2.0, 2.1, 4.99, 5.0, 5.01, 8.0, 8.5, 30.0, 104.0, 700.0, 1e5, INF, NAN]


@pytest.mark.parametrize("dtype", [F32, F64])
@pytest.mark.parametrize("fn", BESSEL, ids=lambda f: f.__name__)
def test_bessel(fn, dtype, no_fallback):
    grid = torch.linspace(-12, 12, 2401, dtype=F64)
    x = torch.cat([grid, torch.tensor(EDGES, dtype=F64)]).to(dtype)
    check(fn, x, atol=1e-6 if dtype == F32 else 1e-12, rtol=1e-5 if dtype == F32 else 1e-10)
    check(fn, torch.tensor([-3, 0, 1, 7]))


# -- polynomials ------------------------------------------------------------------------

S = torch.special
POLYNOMIALS = [
    S.chebyshev_polynomial_t,
    S.chebyshev_polynomial_u,
    S.chebyshev_polynomial_v,
    S.chebyshev_polynomial_w,
    S.shifted_chebyshev_polynomial_t,
    S.shifted_chebyshev_polynomial_u,
    S.shifted_chebyshev_polynomial_v,
    S.shifted_chebyshev_polynomial_w,
    S.hermite_polynomial_h,
    S.hermite_polynomial_he,
    S.laguerre_polynomial_l,
    S.legendre_polynomial_p,
]
XS = [-INF, -3.0, -1.0, -0.7, -0.0, 0.0, 1e-9, 0.3, 0.5, 0.999, 1.0, 1.5, 4.0, INF, NAN]
NS = [-5.0, -1.0, 0.0, 1.0, 2.0, 3.0, 5.0, 7.0, 9.0, 12.0, 40.0, 2.7, NAN, INF, -INF]


@pytest.mark.parametrize("dtype", [F32, F64])
@pytest.mark.parametrize("fn", POLYNOMIALS, ids=lambda f: f.__name__)
def test_polynomial_edges(fn, dtype, no_fallback):
    x = torch.tensor(XS, dtype=F64).repeat_interleave(len(NS))
    n = torch.tensor(NS, dtype=F64).repeat(len(XS))
    tol = {"rtol": 1e-4, "atol": 1e-5} if dtype == F32 else {"rtol": 1e-9, "atol": 1e-12}
    check(fn, x.to(dtype), n.to(dtype), **tol)
    finite = n.isfinite()
    check(fn, x[finite].to(dtype), n[finite].to(I64), **tol)


@pytest.mark.parametrize("fn", POLYNOMIALS, ids=lambda f: f.__name__)
def test_polynomial_large_n(fn, no_fallback):
    """Large n (the trigonometric forms, Hermite's NaN limit), broadcasting, scalars."""
    x = torch.linspace(-1.2, 1.2, 25, dtype=F64)
    n = torch.tensor([0, 1, 6, 7, 9, 30, 100, 129, 600], dtype=I64)
    check(fn, x[:, None], n[None, :], rtol=1e-7, atol=1e-7)
    check(lambda t: fn(t, 5), x)
    check(lambda t: fn(0.25, t), n)
    check(fn, torch.tensor([0, 1, 2, 3]), torch.tensor([3, 2, 1, 4]))
