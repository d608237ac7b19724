"""Math lowerings (``ops/mathops.py``, ``ops/distances.py``) against torch's CPU kernels.

Contract: every case runs the same function on CPU tensors and on their ``lazax``
copies, and the lazax result (moved back to the CPU) must equal the CPU one to
``torch.testing.assert_close``'s defaults (or the tolerance a case names), dtype
included, with no CPU fallback of any aten op on the way (the ``no_fallback`` fixture).
Covered: bit shifts (out-of-range and negative amounts, signed/unsigned), gcd/lcm sign
conventions, frexp's special values, isin (promotion, NaN, -0, both algorithms),
cross/dist/renorm/cdist with broadcasting and their gradients, complex/polar,
block_diag, unsafe_split, narrow_copy, mvlgamma, repeat_interleave with
``output_size``; and torch's errors for what the CPU kernels reject.
"""

from __future__ import annotations

import math
import warnings

import pytest
import torch

import lazax.modes as lx
from lazax.executor.testing import deferred_check as check
from lazax.executor.testing import fallback_counts

F32, F64, BF16, F16 = torch.float32, torch.float64, torch.bfloat16, torch.float16
I64, I32, I16, I8, U8, BOOL = (
    torch.int64,
    torch.int32,
    torch.int16,
    torch.int8,
    torch.uint8,
    torch.bool,
)
NAN, INF = float("nan"), float("inf")


def randn(*shape, dtype=F32, seed=0):
    g = torch.Generator().manual_seed(seed)
    return torch.randn(*shape, generator=g).to(dtype)


def randint(low, high, *shape, dtype=I64, seed=0):
    g = torch.Generator().manual_seed(seed)
    return torch.randint(low, high, shape, generator=g).to(dtype)


def grads(fn):
    """``fn``'s input gradients for the output gradient ``g`` (the last argument)."""

    def run(*args):
        *inputs, g = args
        inputs = [x.detach().requires_grad_() for x in inputs]
        return torch.autograd.grad(fn(*inputs), inputs, g)

    return run


# -- shifts -----------------------------------------------------------------------------

_SHIFT_VALUES = {
    I64: [1, -1, 5, -8, 2**62, -(2**63), 0, 7],
    I32: [1, -1, 5, -8, 2**30, -(2**31), 0, 7],
    I8: [-8, 8, 127, -128, 1, -1, 0, 3],
    U8: [1, 255, 128, 0, 7, 64, 3, 200],
}
_SHIFT_AMOUNTS = {
    I64: [0, 1, 63, 64, 65, -1, 100, 2],
    I32: [0, 1, 31, 32, -1, 33, 5, 2],
    I8: [1, 7, 8, -1, 9, 100, -100, 0],
    U8: [7, 8, 9, 0, 1, 200, 255, 3],
}


@pytest.mark.parametrize("dtype", [I64, I32, I8, U8])
@pytest.mark.parametrize("op", ["lshift", "rshift"])
def test_shifts_tensor(dtype, op, no_fallback):
    """Shift amounts in range, at and past the width, and negative."""
    x = torch.tensor(_SHIFT_VALUES[dtype], dtype=dtype)
    s = torch.tensor(_SHIFT_AMOUNTS[dtype], dtype=dtype)
    fn = torch.bitwise_left_shift if op == "lshift" else torch.bitwise_right_shift
    check(fn, x, s)
    check(lambda a, b: a << b if op == "lshift" else a >> b, x, s)
    check(lambda a, b: fn(a[:, None], b[None, :]), x, s)  # broadcast


@pytest.mark.parametrize("amount", [0, 1, 2, 7, 8, 63, 64, 70, -1, 300])
def test_shifts_scalar(amount, no_fallback):
    """Python shift amounts (lifted and not) for int64, int8 and uint8."""
    for dtype in (I64, I8, U8):
        x = torch.tensor(_SHIFT_VALUES[dtype], dtype=dtype)
        check(lambda a: a << amount, x)
        check(lambda a: a >> amount, x)
        check(lambda a: torch.bitwise_right_shift(a, amount), x)
    check(lambda a: torch.bitwise_left_shift(3, a), torch.tensor([0, 1, 2, 62, 63, 64]))
    check(lambda a: torch.bitwise_right_shift(-300, a), torch.tensor([0, 1, 2, 8, 63, 64]))


def test_shift_promotion_and_inplace(no_fallback):
    """int8 << int64 promotes to int64; bool << int is int64; in-place forms."""
    a, b = torch.tensor([1, -2, 3], dtype=I8), torch.tensor([1, 2, 10])
    check(lambda x, y: x << y, a, b)
    check(lambda x: (x > 0) << 2, a)
    check(lambda x, y: x.clone().bitwise_left_shift_(y), b, b)
    check(lambda x: x.clone().bitwise_right_shift_(1), b)
    check(lambda x, y: x.clone().__ilshift__(y), b, b)  # x <<= y
    check(lambda x: x.clone().__irshift__(2), b)  # x >>= 2


@pytest.mark.parametrize("op", [torch.bitwise_left_shift, torch.bitwise_right_shift])
def test_shift_rejects_floats_and_bools(op):
    for dtype in (F32, BOOL):
        x = torch.ones(3, dtype=dtype)
        with pytest.raises(NotImplementedError) as cpu:
            op(x, x)
        with pytest.raises(NotImplementedError) as got:
            op(x.to(lx.device()), x.to(lx.device()))
        assert str(got.value) == str(cpu.value)


# -- gcd, lcm ---------------------------------------------------------------------------


@pytest.mark.parametrize("dtype", [I64, I32, I16, I8, U8])
@pytest.mark.parametrize("op", [torch.gcd, torch.lcm])
def test_gcd_lcm(dtype, op, no_fallback):
    """Signs, zeros, coprimes and wrapping extremes."""
    info = torch.iinfo(dtype)
    a = [0, -4, 6, -9, 0, 12, 100, info.min, info.max, 35, 1, 17]
    b = [0, 6, -4, 0, -7, 18, 3, 6, info.max, 14, info.min, -17]
    x, y = torch.tensor(a).to(dtype), torch.tensor(b).to(dtype)
    check(op, x, y)
    check(op, randint(-50, 50, 4, 6, dtype=dtype), randint(-50, 50, 6, dtype=dtype, seed=1))


def test_gcd_promotion(no_fallback):
    check(torch.gcd, torch.tensor([200, 0, 255], dtype=U8), torch.tensor([-6, 7, 85], dtype=I8))
    check(torch.lcm, torch.tensor([12, 18]), torch.tensor(8))


def test_gcd_rejects_floats():
    x = torch.ones(2)
    with pytest.raises(NotImplementedError, match='"gcd_cpu" not implemented'):
        torch.gcd(x.to(lx.device()), x.to(lx.device()))


# -- frexp, complex, polar, mvlgamma ----------------------------------------------------

_FREXP_VALUES = [0.0, -0.0, INF, -INF, NAN, 1e-40, -3e-45, -3.5, 1.0, 0.5, 1e38, 3.0e-39, 7.0]


@pytest.mark.parametrize("dtype", [F32, F64, BF16, F16])
def test_frexp(dtype, no_fallback):
    """Mantissa and int32 exponent, also for subnormals, zeros, infinities, NaN."""
    x = torch.tensor(_FREXP_VALUES, dtype=dtype)
    check(lambda t: tuple(torch.frexp(t)), x)
    check(lambda t: tuple(torch.frexp(t)), randn(5, 7, dtype=dtype) * 1000)
    if dtype == F64:
        check(lambda t: tuple(torch.frexp(t)), torch.tensor([1e-310, -5e-324, 1e300], dtype=F64))


def test_complex_polar(no_fallback):
    """complex/polar values (broadcast) and their gradients."""
    re, im = randn(3, 4), randn(4, seed=1)
    check(torch.complex, re, im)
    check(torch.complex, re.double(), im.double())
    check(torch.complex, torch.tensor([NAN, INF, -0.0]), torch.tensor([1.0, -INF, 0.0]))
    check(torch.polar, re.abs(), im)
    check(torch.polar, torch.tensor([0.0, 2.0, INF]), torch.tensor([1.0, -math.pi, 0.5]))
    g = torch.complex(randn(3, 4, seed=2), randn(3, 4, seed=3))
    check(grads(torch.complex), re, randn(3, 4, seed=4), g)
    check(grads(torch.polar), re.abs() + 0.1, randn(3, 4, seed=5), g)


def test_complex_rejects_mixed_dtypes():
    a, b = torch.ones(2), torch.ones(2, dtype=F64)
    with pytest.raises(RuntimeError, match="Expected object of scalar type Float"):
        torch.complex(a.to(lx.device()), b.to(lx.device()))


@pytest.mark.parametrize("p", [1, 2, 5])
def test_mvlgamma(p, no_fallback):
    x = randn(4, 5).abs() + (p - 1) / 2 + 0.01
    check(lambda t: torch.mvlgamma(t, p), x)
    check(lambda t: torch.mvlgamma(t, p), x.to(BF16))
    check(lambda t: torch.mvlgamma(t, p), torch.tensor([3, 4, 10]))
    check(grads(lambda t: torch.mvlgamma(t, p)), x, randn(4, 5, seed=1))


def test_mvlgamma_rejects_p0():
    with pytest.raises(RuntimeError, match="p has to be greater than or equal to 1"):
        torch.mvlgamma(torch.ones(2).to(lx.device()), 0)


# -- isin -------------------------------------------------------------------------------


@pytest.mark.parametrize("invert", [False, True])
def test_isin(invert, no_fallback):
    """Tensor/Tensor, Tensor/Scalar, Scalar/Tensor; promotion, NaN and -0."""
    e = randint(-10, 10, 3, 5)
    t = torch.tensor([1, 2, 3, -4, 7])
    check(lambda a, b: torch.isin(a, b, invert=invert), e, t)
    check(lambda a, b: torch.isin(a, b, invert=invert), e, t.reshape(5, 1).float() + 0.5)
    check(lambda a: torch.isin(a, 3, invert=invert), e)
    check(lambda a: torch.isin(a, 2.5, invert=invert), e)
    check(lambda b: torch.isin(3, b, invert=invert), t)
    check(lambda b: torch.isin(3.5, b, invert=invert), t)
    f = torch.tensor([1.0, NAN, -0.0, 0.0, INF, 2.0])
    check(lambda a, b: torch.isin(a, b, invert=invert), f, torch.tensor([NAN, 0.0, INF]))
    check(lambda a, b: torch.isin(a, b, invert=invert), f.to(BF16), torch.tensor([2.0, -0.0]))
    check(lambda a, b: torch.isin(a, b, invert=invert), e, torch.tensor([], dtype=I64))
    u = torch.arange(10)
    check(lambda a, b: torch.isin(a, b, assume_unique=True, invert=invert), u, u[::3] + 1)


def test_isin_sorted_path(no_fallback):
    """Inputs large enough for the sort-based algorithm (NaN and -0 included)."""
    e = randint(-3000, 3000, 2000).float()
    e[::7] = NAN
    e[::11] = -0.0
    t = randint(-3000, 3000, 1500, seed=1).float()
    t[::13] = NAN
    t[::17] = 0.0
    check(torch.isin, e, t)
    check(lambda a, b: torch.isin(a, b, invert=True), e.long(), t.nan_to_num().long())


# -- block_diag, unsafe_split, narrow_copy, repeat_interleave ---------------------------


def test_block_diag(no_fallback):
    check(lambda *ts: torch.block_diag(*ts), randn(2, 3), randn(4, seed=1), torch.tensor(5.0))
    check(lambda *ts: torch.block_diag(*ts), randint(0, 9, 2, 2), randn(1, 3, dtype=F64))
    check(lambda *ts: torch.block_diag(*ts), torch.ones(0), torch.ones(2, 0), randn(1, 2))
    check(lambda *ts: torch.block_diag(*ts), randn(2, 2), torch.complex(randn(2), randn(2)))
    check(lambda *ts: torch.block_diag(*ts), torch.tensor([[True]]), torch.tensor([False, True]))
    check(grads(lambda a, b: torch.block_diag(a, b)), randn(2, 3), randn(2, seed=1), randn(3, 5))


def test_unsafe_split(no_fallback):
    x = randn(5, 6)
    check(lambda t: tuple(torch.unsafe_split(t, 2)), x)
    check(lambda t: tuple(torch.unsafe_split(t, 4, dim=1)), x)
    check(lambda t: tuple(torch.unsafe_split_with_sizes(t, [1, 0, 4])), x)
    check(lambda t: tuple(torch.unsafe_split_with_sizes(t, [3, 3], dim=-1)), x.to(BF16))
    check(grads(lambda t: torch.unsafe_split(t, 2)[1]), x, randn(2, 6, seed=1))


def test_narrow_copy(no_fallback):
    x = randn(4, 6)
    check(lambda t: torch.narrow_copy(t, 0, 1, 2), x)
    check(lambda t: torch.narrow_copy(t, -1, -4, 3), x)
    check(lambda t: torch.narrow_copy(t, 1, 6, 0), x)
    check(lambda t: torch.narrow_copy(t, 0, 2, 2), randint(0, 9, 4, 2, dtype=I8))


@pytest.mark.parametrize("dtype", [I64, I32])
def test_repeat_interleave_output_size(dtype, no_fallback):
    r = torch.tensor([1, 2, 0, 3], dtype=dtype)
    check(lambda t: torch.repeat_interleave(t, output_size=6), r)
    check(lambda t: torch.repeat_interleave(t, output_size=0), torch.zeros(3, dtype=dtype))
    x = randn(4, 3)
    check(lambda a, t: torch.repeat_interleave(a, t, dim=0, output_size=6), x, r)
    check(lambda a, t: torch.repeat_interleave(a, t, dim=1, output_size=3), x, r[:3])


def test_repeat_interleave_without_output_size_falls_back():
    """No output_size: the length depends on the values, so the CPU computes it."""
    r = torch.tensor([1, 2, 0, 3])
    before = fallback_counts().get("aten::repeat_interleave", 0)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # the fallback's notice
        got = torch.repeat_interleave(r.to(lx.device())).cpu()
    torch.testing.assert_close(got, torch.repeat_interleave(r))
    assert fallback_counts().get("aten::repeat_interleave", 0) == before + 1


def test_repeat_interleave_value_errors():
    """A sum other than output_size, and negative repeats, raise torch's errors."""
    d = lx.device()
    with pytest.raises(RuntimeError, match="allocated size does not match required size"):
        torch.repeat_interleave(torch.tensor([1, 2]).to(d), output_size=4).cpu()
    with pytest.raises(RuntimeError, match="repeats can not be negative"):
        torch.repeat_interleave(torch.tensor([2, -1, 2]).to(d), output_size=3).cpu()


# -- cross, dist, renorm ----------------------------------------------------------------


def test_linalg_cross(no_fallback):
    a, b = randn(4, 3), randn(4, 3, seed=1)
    check(torch.linalg.cross, a, b)
    check(lambda x, y: torch.linalg.cross(x, y, dim=0), randn(3, 5), randn(3, 1, seed=1))
    check(lambda x, y: torch.cross(x, y, dim=1), randn(2, 3, 4), randn(1, 3, 4, seed=1))
    check(torch.linalg.cross, randint(-5, 5, 2, 3), randint(-5, 5, 2, 3, seed=1))
    check(torch.linalg.cross, randn(8, 3, dtype=BF16), randn(8, 3, dtype=BF16, seed=1))
    check(torch.linalg.cross, torch.tensor([NAN, INF, 1.0]), torch.tensor([1.0, 2.0, 3.0]))
    check(grads(torch.linalg.cross), a, b, randn(4, 3, seed=2))


def test_cross_rejects_mixed_dtypes():
    with pytest.raises(RuntimeError, match="expected scalar type Long but found Float"):
        torch.linalg.cross(torch.ones(3, dtype=I64).to(lx.device()), torch.ones(3).to(lx.device()))


@pytest.mark.parametrize("p", [2, 0, 1, 3, 0.5, 1.5, INF, -INF])
def test_dist(p, no_fallback):
    a, b = randn(3, 4), randn(4, seed=1)
    check(lambda x, y: torch.dist(x, y, p), a, b)
    check(lambda x, y: torch.dist(x, y, p), a.double(), b)
    check(lambda x, y: torch.dist(x, y, p), a.to(BF16), b.to(BF16))
    c = a.clone()
    c[0, 0] = b[0]  # a zero difference
    if p != 0:  # torch has no gradient for p=0
        check(grads(lambda x, y: torch.dist(x, y, p)), c, b, torch.tensor(0.7))


def test_dist_edge_values(no_fallback):
    a = torch.tensor([0.0, INF, 1.0])
    check(torch.dist, a, torch.tensor([0.0, 1.0, 1.0]))
    check(torch.dist, torch.tensor([NAN, 1.0]), torch.tensor([0.0, 1.0]))
    check(lambda x, y: torch.dist(x, y, 0), a, a)
    check(torch.dist, torch.complex(randn(4), randn(4, seed=1)), torch.complex(randn(4), randn(4)))


@pytest.mark.parametrize(("p", "dim", "maxnorm"), [(2, 0, 1.0), (1, 1, 0.5), (3, -1, 2.0)])
def test_renorm(p, dim, maxnorm, no_fallback):
    x = randn(4, 5, 3) * 2
    check(lambda t: torch.renorm(t, p, dim, maxnorm), x)
    check(lambda t: torch.renorm(t, p, dim, maxnorm), x.to(BF16))
    check(lambda t: t.clone().renorm_(p, dim, maxnorm), x.double())
    check(grads(lambda t: torch.renorm(t, p, dim, maxnorm)), x, randn(4, 5, 3, seed=1))


def test_renorm_edge_values(no_fallback):
    check(lambda t: torch.renorm(t, INF, 0, 0.5), randn(3, 4))
    check(lambda t: torch.renorm(t, 2, 1, 0), randn(3, 4))
    check(lambda t: torch.renorm(t, 1.5, 0, 1.0), torch.tensor([[0.0, 0.0], [NAN, 1.0]]))


# -- cdist ------------------------------------------------------------------------------

_CDIST_P = [0.0, 0.5, 1.0, 1.5, 2.0, 3.0, INF]


@pytest.mark.parametrize("p", _CDIST_P)
def test_cdist(p, no_fallback):
    """Direct kernel: values (batched, broadcast batch) and both gradients."""
    a, b = randn(2, 4, 3), randn(5, 3, seed=1)
    b[1] = a[0, 2]  # a zero distance
    check(lambda x, y: torch.cdist(x, y, p), a, b)
    check(lambda x, y: torch.cdist(x, y, p), a.double(), b.double())
    check(lambda x, y: torch.cdist(x, y, p), randn(3, 1, 4, 2), randn(2, 6, 2, seed=1))
    if p != 0:
        check(grads(lambda x, y: torch.cdist(x, y, p)), a, b, randn(2, 4, 5, seed=2))
        check(
            grads(lambda x, y: torch.cdist(x, y, p)),
            randn(3, 1, 4, 2),
            randn(2, 6, 2, seed=1),
            randn(3, 2, 4, 6, seed=2),
        )


@pytest.mark.parametrize("mode", [None, "use_mm_for_euclid_dist", "donot_use_mm_for_euclid_dist"])
def test_cdist_compute_modes(mode, no_fallback):
    """p=2 with each compute mode, small and large (> 25 rows: the matmul path)."""
    kw = {} if mode is None else {"compute_mode": mode}
    for r1, r2 in ((4, 5), (30, 7)):
        a, b = randn(2, r1, 8), randn(2, r2, 8, seed=1)
        check(lambda x, y: torch.cdist(x, y, **kw), a, b, atol=1e-4, rtol=1e-4)
        check(
            grads(lambda x, y: torch.cdist(x, y, **kw)),
            a,
            b,
            randn(2, r1, r2, seed=2),
            atol=1e-4,
            rtol=1e-4,
        )
    check(
        lambda x, y: torch.cdist(x, y, compute_mode="use_mm_for_euclid_dist"),
        randn(6, 4, dtype=BF16),
        randn(5, 4, dtype=BF16, seed=1),
    )


def test_cdist_edge_shapes_and_values(no_fallback):
    check(torch.cdist, torch.empty(0, 3), randn(4, 3))
    check(torch.cdist, randn(3, 0), randn(4, 0))
    check(grads(torch.cdist), randn(1, 4, 5), randn(0, 3, 5), torch.ones(0, 4, 3))
    check(grads(lambda x, y: torch.cdist(x, y, 3.0)), randn(2, 5), randn(0, 5), torch.ones(2, 0))
    check(lambda x, y: torch.cdist(x, y, 1.0), torch.tensor([[NAN, 1.0], [INF, 0.0]]), randn(3, 2))


def test_cdist_rejects_bf16_direct():
    a = torch.ones(3, 2, dtype=BF16).to(lx.device())
    with pytest.raises(NotImplementedError, match="\"cdist\" not implemented for 'BFloat16'"):
        torch.cdist(a, a, p=1.0)


def test_no_fallback_counters():
    """The counters name none of these ops after a run of each."""
    d = lx.device()
    x, y = randn(4, 3).to(d), randn(4, 3, seed=1).to(d)
    i = randint(-9, 9, 5).to(d)
    results = [
        torch.isin(i, i[:2]),
        torch.linalg.cross(x, y),
        *torch.unsafe_split(x, 2),
        i << 2,
        i >> i.abs(),
        torch.block_diag(x, y),
        torch.dist(x, y),
        torch.renorm(x, 2, 0, 1.0),
        torch.cdist(x, y),
        torch.gcd(i, i + 1),
        torch.lcm(i, i + 1),
        *torch.frexp(x),
        torch.complex(x, y),
        torch.polar(x, y),
        torch.narrow_copy(x, 0, 1, 2),
        torch.mvlgamma(x.abs() + 2, 2),
        torch.repeat_interleave(i.abs(), output_size=int(i.abs().sum().cpu())),
    ]
    for r in results:
        r.cpu()
    names = set(lx.metrics.counter_names())
    ours = {
        "aten::isin",
        "aten::linalg_cross",
        "aten::unsafe_split",
        "aten::__lshift__",
        "aten::__rshift__",
        "aten::block_diag",
        "aten::dist",
        "aten::renorm",
        "aten::_cdist_forward",
        "aten::gcd",
        "aten::lcm",
        "aten::frexp",
        "aten::complex",
        "aten::polar",
        "aten::narrow_copy",
        "aten::mvlgamma",
    }
    assert not names & ours, names & ours
