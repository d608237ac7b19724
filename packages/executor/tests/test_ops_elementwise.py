"""Elementwise lowerings (``ops/elementwise.py``) against torch's CPU kernels.

Contract: every case runs the same function on CPU tensors and on their ``lazax``
copies, and the lazax result (moved back to the CPU) must equal the CPU one to
``torch.testing.assert_close``'s defaults, dtype included, with no CPU fallback of any
aten op on the way (the ``no_fallback`` fixture). Covered: dtype promotion (int/float,
bf16, 0-dim tensors, Python scalars in Tensor and Scalar slots), broadcasting,
non-contiguous inputs, in-place forms through views, NaN/inf edge values, and autograd
through the activations' backward ops.
"""

from __future__ import annotations

import math

import pytest
import torch
import torch.nn.functional as F

from lazax.executor.testing import deferred_check as check

F32, F64, BF16, F16 = torch.float32, torch.float64, torch.bfloat16, torch.float16
I64, I32, U8, BOOL = torch.int64, torch.int32, torch.uint8, torch.bool
NAN, INF = float("nan"), float("inf")


def randn(*shape, dtype=F32, seed=0):
    """Seeded normal samples of ``dtype``."""
    g = torch.Generator().manual_seed(seed)
    return torch.randn(*shape, generator=g).to(dtype)


def randint(low, high, *shape, dtype=I64, seed=0, nonzero=False):
    """Seeded integers in [low, high), optionally without zeros."""
    g = torch.Generator().manual_seed(seed)
    x = torch.randint(low, high, shape, generator=g)
    if nonzero:
        x = torch.where(x == 0, torch.ones_like(x), x)
    return x.to(dtype)


# -- binary arithmetic -------------------------------------------------------------------

_BINARY = {
    "add": torch.add,
    "sub": torch.sub,
    "mul": torch.mul,
    "div": torch.div,
    "div_trunc": lambda a, b: torch.div(a, b, rounding_mode="trunc"),
    "div_floor": lambda a, b: torch.div(a, b, rounding_mode="floor"),
    "floor_divide": torch.floor_divide,
    "remainder": torch.remainder,
    "fmod": torch.fmod,
    "maximum": torch.maximum,
    "minimum": torch.minimum,
    "fmax": torch.fmax,
    "fmin": torch.fmin,
    "add_alpha": lambda a, b: torch.add(a, b, alpha=3),
    "sub_alpha": lambda a, b: torch.sub(a, b, alpha=-1),
    "rsub": lambda a, b: torch.rsub(a, b, alpha=2),
}

_OPERANDS = {
    "f32": lambda: (randn(3, 4), randn(3, 4, seed=1)),
    "i64": lambda: (randint(-20, 20, 3, 4), randint(-6, 6, 3, 4, seed=1, nonzero=True)),
    "i64_f32": lambda: (randint(-20, 20, 3, 4), randn(4, seed=1)),
    # 64 elements: torch's vectorized bf16 path (its scalar tail rounds differently).
    "bf16": lambda: (randn(4, 16, dtype=BF16), randn(4, 16, dtype=BF16, seed=1)),
    "f32_0dim_f64": lambda: (randn(3, 4), torch.tensor(0.7, dtype=F64)),
    "0dim_i32_f16_bcast": lambda: (torch.tensor(5, dtype=I32), randn(2, 1, 4, dtype=F16)),
}


# Every op on same-dtype operands; the promotion mixes for a sample of ops.
_BINARY_CASES = [(op, o) for op in _BINARY for o in ("f32", "i64")]
_BINARY_CASES += [
    (op, "bf16")
    for op in ("add_alpha", "sub_alpha", "rsub", "mul", "div", "div_trunc", "div_floor", "fmod")
]
_BINARY_CASES += [
    (op, o)
    for op in ("add_alpha", "div", "div_floor", "remainder", "maximum", "rsub")
    for o in ("i64_f32", "f32_0dim_f64", "0dim_i32_f16_bcast")
]


@pytest.mark.parametrize(("op", "operands"), _BINARY_CASES)
def test_binary(op, operands, no_fallback):
    """Each binary op on same-dtype and on promoting operand pairs."""
    check(_BINARY[op], *_OPERANDS[operands]())


@pytest.mark.parametrize("op", ["div_floor", "div_trunc", "remainder", "fmod"])
def test_rounding_division_signs(op, no_fallback):
    """floor/trunc division, remainder and fmod over every sign mix."""
    # Every sign combination, exact multiples, and a zero divisor for floats.
    a = torch.tensor([7.0, -7.0, 7.0, -7.0, 6.0, -6.0, 0.0, -0.0, 5.5, 1.0, -1.0, 0.0])
    b = torch.tensor([2.0, 2.0, -2.0, -2.0, 3.0, 3.0, 3.0, -3.0, 0.1, 0.0, 0.0, 0.0])
    check(_BINARY[op], a, b)
    check(_BINARY[op], a.long()[:9], b.long()[:9].clamp(min=1) * b.sign().long()[:9])


def test_non_contiguous_and_broadcast(no_fallback):
    """Transposed and strided inputs, broadcasting, 0-dim tensors."""
    check(lambda a, b: a.t() * b, randn(4, 3), randn(3, 4, seed=1))
    check(lambda a, b: a[:, ::2] - b[1], randn(3, 8), randn(2, 4, seed=1))
    check(lambda a, b: torch.add(a.t(), b.t(), alpha=0.5), randn(4, 3), randn(1, 3, seed=1))
    check(lambda a, b: a + b, torch.tensor(2.0), torch.tensor(3.0, dtype=F64))


_SCALAR_CASES = {
    "f32 * 2.5": (lambda x: x * 2.5, F32),
    "2.5 - f32": (lambda x: 2.5 - x, F32),
    "f32 + 1": (lambda x: x + 1, F32),
    "i64 / 3": (lambda x: x / 3, I64),
    "i64 * 2.5": (lambda x: x * 2.5, I64),
    "i64 // -3": (lambda x: x // -3, I64),
    "i64 % 3": (lambda x: x % 3, I64),
    "7 % i64": (lambda x: 7 % torch.where(x == 0, 1, x), I64),
    "u8 + 3": (lambda x: x.abs().to(U8) + 3, I64),
    "bool + 5": (lambda x: (x > 0) + 5, I64),
    "f32 ** 2": (lambda x: x**2, F32),
    "f32 ** 3": (lambda x: x**3, F32),
    "f32 ** 0.5": (lambda x: x.abs() ** 0.5, F32),
    "f32 ** -0.5": (lambda x: x.abs() ** -0.5, F32),
    "f32 ** -1": (lambda x: x**-1, F32),
    "f32 ** -2": (lambda x: x**-2, F32),
    "f32 ** 0": (lambda x: x**0, F32),
    "f32 ** 1.7": (lambda x: x.abs() ** 1.7, F32),
    "2 ** f32": (lambda x: 2**x, F32),
    "1 ** f32": (lambda x: 1**x, F32),
    "2.5 ** i64": (lambda x: 2.5**x, I64),
    "2 ** i64": (lambda x: 2 ** x.abs(), I64),
    "i64 ** 3": (lambda x: x**3, I64),
    "i64 ** i64": (lambda x: x ** (x.flip(0) + 2), I64),
    "i64 ** 2.5": (lambda x: x.abs() ** 2.5, I64),
    "f32 pow_ 2": (lambda x: x.clone().pow_(2), F32),
    "bf16 * 0.1": (lambda x: x * 0.1, BF16),
    "bf16 / 3": (lambda x: x / 3, BF16),
    "f64 + 0.1": (lambda x: x + 0.1, F64),
    "f32 div floor 0.3": (lambda x: torch.div(x, 0.3, rounding_mode="floor"), F32),
    "f32 add alpha": (lambda x: x.add(x.flip(0), alpha=2.5), F32),
    "f32 sub Scalar": (lambda x: torch.ops.aten.sub.Scalar(x, 2.5, 1.5), F32),
    "f32 atan2": (lambda x: torch.atan2(x, x.flip(1)), F32),
    "i64 atan2": (lambda x: torch.atan2(x, x.flip(1)), I64),
}


@pytest.mark.parametrize("case", list(_SCALAR_CASES))
def test_scalar_operands(case, no_fallback):
    """Python numbers next to tensors: promotion, int true division, pow paths."""
    fn, dtype = _SCALAR_CASES[case]
    x = randint(-6, 6, 3, 4).to(dtype) if dtype == I64 else randn(3, 4, dtype=dtype)
    check(fn, x)


def test_int_pow_wraps_like_torch(no_fallback):
    """Integer pow wraps on overflow and handles negative exponents."""
    base = torch.tensor([3, -3, 2, -1, 1, 0, 7, -1])
    exp = torch.tensor([40, 41, 64, -3, -5, 0, 25, 70])
    check(torch.pow, base, exp)


def test_changing_scalar_reuses_rule(no_fallback):
    """New Python scalar values give the same results (lifted scalars)."""
    x = randn(5)
    for lr in (0.1, 0.2, 0.3):
        check(lambda t, lr=lr: t.mul(lr).add(3.5), x)


# -- unary -------------------------------------------------------------------------------


def _domain(name, dtype):
    """Inputs inside ``name``'s domain, in ``dtype``."""
    x = randn(4, 5, dtype=F32)
    if name in ("log", "log2", "log10", "sqrt", "rsqrt"):
        x = x.abs() + 0.1
    elif name in ("log1p",):
        x = x.abs()
    elif name in ("asin", "acos", "atanh", "erfinv"):
        x = torch.tanh(x) * 0.95
    elif name == "acosh":
        x = x.abs() + 1.0
    elif name == "logit":
        x = torch.sigmoid(x)
    elif name == "reciprocal":
        x = x + torch.where(x >= 0, 0.5, -0.5)
    if dtype in (I64, I32):
        x = (x * 4).round()
    return x.to(dtype)


_FLOAT_UNARY = (
    "exp exp2 expm1 log log2 log10 log1p sqrt rsqrt reciprocal sin cos tan asin acos atan "
    "sinh cosh tanh asinh acosh atanh sigmoid erf erfc erfinv logit"
).split()
_INT_UNARY = "neg abs sign sgn floor ceil round trunc".split()


# Every op in float32; in bf16 and int64 (one shared code path per family) a sample.
_UNARY_CASES = [(name, F32) for name in _FLOAT_UNARY + _INT_UNARY + ["frac"]]
_UNARY_CASES += [(n, BF16) for n in "exp log sqrt sigmoid tanh erf logit frac round".split()]
_UNARY_CASES += [(n, I64) for n in _INT_UNARY + ["sqrt", "sigmoid", "reciprocal"]]


@pytest.mark.parametrize(("name", "dtype"), _UNARY_CASES, ids=str)
def test_unary(name, dtype, no_fallback):
    """Each unary op against the CPU."""
    fn = getattr(torch, name)
    kw = {"rtol": 2e-6, "atol": 1e-5} if dtype == F32 else {}
    check(fn, _domain(name, dtype), **kw)


def test_unary_edges(no_fallback):
    """NaN, infinities and signed zeros; round(decimals); logit eps; 0-dim."""
    x = torch.tensor([NAN, INF, -INF, -0.0, 0.0, -2.5, 2.5, 0.5, -0.5, 1.5])
    for fn in (torch.sign, torch.sgn, torch.abs, torch.neg, torch.round, torch.floor):
        check(fn, x)
    check(torch.sign, torch.tensor([True, False]))
    check(lambda t: t.round(decimals=2), randn(10) * 100)
    check(lambda t: t.round(decimals=-1), randn(10) * 100)
    check(lambda t: t.round(decimals=1), randn(10, dtype=BF16) * 10)
    check(lambda t: torch.logit(t, eps=0.1), torch.tensor([0.0, 0.05, 0.5, 0.97, 1.0]))
    check(torch.exp, torch.tensor(1.5))  # 0-dim
    check(lambda t: t.t().exp(), randn(3, 4))


# -- comparisons, logic, bits, predicates -------------------------------------------------

_COMPARE = ["eq", "ne", "lt", "le", "gt", "ge"]


@pytest.mark.parametrize("name", _COMPARE)
def test_compare(name, no_fallback):
    """Comparisons across dtypes, scalars, 0-dim tensors and bf16 scalar rounding."""
    fn = getattr(torch, name)
    a = torch.tensor([1.0, 2.0, NAN, INF, -1.0, 0.5])
    b = torch.tensor([1.0, 3.0, NAN, INF, 0.0, 0.5])
    check(fn, a, b)
    check(fn, a, 0.5)
    check(fn, randint(-3, 3, 6), a)
    check(fn, randint(-3, 3, 6), 2.5)
    check(fn, randint(-3, 3, 2, 3), torch.tensor(1))
    # bf16 with a Python float compares against bf16(0.1), as torch does.
    check(fn, torch.tensor([0.10009765625, 0.099609375], dtype=BF16), 0.1)
    check(lambda x: fn(x.t(), x[0]), randn(3, 3))


@pytest.mark.parametrize("name", ["logical_and", "logical_or", "logical_xor"])
def test_logical(name, no_fallback):
    """Logical ops on floats (NaN is true), ints and bools."""
    fn = getattr(torch, name)
    check(fn, torch.tensor([0.0, 1.5, NAN, 0.0]), torch.tensor([0, 0, 3, 2]))
    check(fn, torch.tensor([True, False, True]), torch.tensor([True, True, False]))
    check(lambda x: torch.logical_not(x), torch.tensor([0.0, 2.0, NAN]))


@pytest.mark.parametrize("name", ["bitwise_and", "bitwise_or", "bitwise_xor"])
def test_bitwise(name, no_fallback):
    """Bitwise ops on ints, uint8, bools and scalars."""
    fn = getattr(torch, name)
    a, b = randint(-50, 50, 8), randint(-50, 50, 8, seed=1)
    check(fn, a, b)
    check(fn, a, 6)
    check(fn, a.to(U8), b.to(U8))
    check(fn, a > 0, b > 0)
    check(lambda x: fn(5, x), a)
    check(torch.bitwise_not, a)
    check(torch.bitwise_not, a > 0)


def test_predicates(no_fallback):
    """isnan/isinf/isfinite/isposinf/isneginf and nan_to_num."""
    x = torch.tensor([NAN, INF, -INF, 1.0, -0.0])
    for fn in (torch.isnan, torch.isinf, torch.isfinite, torch.isposinf, torch.isneginf):
        check(fn, x)
        check(fn, randint(-3, 3, 4))
    check(torch.nan_to_num, x)
    check(lambda t: torch.nan_to_num(t, nan=1.5, posinf=9.0, neginf=-9.0), x)
    check(torch.nan_to_num, x.to(BF16))
    check(torch.nan_to_num, randint(-3, 3, 4))


def _close_each(x, y, **kwargs):
    """torch.allclose of each pair of elements: isclose as allclose reaches it."""
    x, y = torch.broadcast_tensors(x, y)
    x, y = x.reshape(-1), y.reshape(-1)
    close = [torch.allclose(x[i], y[i], **kwargs) for i in range(x.numel())]
    return torch.tensor(close, device=x.device)


def test_isclose(no_fallback):
    """torch's closeness formula, as aten.isclose (allclose's) and torch.isclose (which
    torch decomposes) reach lazax: tolerances, NaN, infinities, half types rounded step
    by step, integers (subtracted as integers), bools, broadcasting."""
    a = torch.tensor([1.0, 1.0, NAN, INF, -INF, INF, 0.0, 1e-9, 100.0, -3.0])
    b = torch.tensor([1.0, 1.0 + 1e-6, NAN, INF, INF, 1e30, 1e-8, 0.0, 101.0, -3.1])
    cases = [
        (a, b, {}),
        (a, b, {"equal_nan": True}),
        (a, b, {"rtol": 0.02}),
        (a, b, {"atol": 0.2}),
        (a, b, {"rtol": 0.0, "atol": 0.0}),
        (a.to(BF16), (a + 0.004).to(BF16), {"rtol": 1e-2}),
        (a.to(F16), (a * 1.001).to(F16), {"rtol": 1e-3}),
        (torch.tensor([2**62, -(2**62), 5, 7]), torch.tensor([-(2**62), 2**62, 6, 9]), {"atol": 1}),
        (torch.tensor([True, False, True]), torch.tensor([True, True, False]), {}),
        (randn(3, 4), randn(4, seed=1), {"atol": 0.5}),
        (randn(3, 4, dtype=F64), randn(4, seed=1, dtype=F64), {"atol": 0.5}),
    ]
    for x, y, kwargs in cases:
        check(lambda p, q, kw=kwargs: torch.isclose(p, q, **kw), x, y)
        check(lambda p, q, kw=kwargs: _close_each(p, q, **kw), x, y)


# -- selection ---------------------------------------------------------------------------


def test_where(no_fallback):
    """where with tensors and scalars on either side, promotion, broadcasting."""
    x, y = randn(3, 4), randn(3, 4, seed=1)
    check(lambda a, b: torch.where(a > 0, a, b), x, y)
    check(lambda a: torch.where(a > 0, a, 0.5), x)
    check(lambda a: torch.where(a > 0, 1.5, a), x)
    check(lambda a: torch.where(a > 0, 1.5, 2), x)
    check(lambda a, b: torch.where(a > 0, a, b), x, randint(-3, 3, 4))
    check(lambda a, b: torch.where(a > 0, a, b), randint(-3, 3, 3, 4), y.to(BF16))
    check(lambda a: torch.ops.aten.where.ScalarOther(a > 0, a, 2.5), x)
    check(lambda a: torch.ops.aten.where.ScalarSelf(a > 0, 2.5, a), randint(-3, 3, 4))
    check(lambda a: torch.ops.aten.where.Scalar(a > 0, 2.5, 3), x)
    check(lambda a, b: torch.where(b > 0, a, 0.0), x[0], y)  # condition broadcasts


def test_masked_fill(no_fallback):
    """masked_fill with Python and tensor values (cast to self's dtype)."""
    x = randn(3, 4)
    check(lambda a: a.masked_fill(a > 0, 2.5), x)
    check(lambda a: a.masked_fill(a > 0, -1), x)
    check(lambda a: a.masked_fill(a[0] > 0, torch.tensor(7.0)), x)
    check(lambda a: a.masked_fill(a > 0, 2.7), randint(-3, 3, 5))
    check(lambda a: a.masked_fill(a > 0, 0.1), x.to(BF16))
    check(lambda a: a.clone().masked_fill_(a < 0, 0.0), x)


def test_clamp(no_fallback):
    """clamp/clamp_min/clamp_max: NaN, min > max, tensor bounds, int promotion."""
    x = torch.tensor([NAN, -3.0, -0.5, 0.0, 0.5, 3.0, INF])
    check(lambda a: a.clamp(-1.0, 1.0), x)
    check(lambda a: a.clamp(min=0.25), x)
    check(lambda a: a.clamp(max=-0.25), x)
    check(lambda a: a.clamp(2.0, 1.0), x)  # min > max gives max
    check(lambda a: a.clamp(min=0.5), randint(-3, 3, 5))  # int clamped by float: float
    check(lambda a: a.clamp(-2, 2), randint(-5, 5, 5))
    check(lambda a, lo, hi: a.clamp(lo, hi), x, torch.full((7,), -1.0), torch.tensor(NAN))
    check(lambda a, lo: a.clamp(min=lo), randn(3, 4), randn(4, seed=1))
    check(lambda a, hi: torch.clamp_max(a, hi), randn(3, 4), randn(3, 1, seed=1))
    check(lambda a: torch.clamp_min(a, 0.1), x)
    check(lambda a: torch.clamp_max(a, 0.1), x.to(BF16))
    check(lambda a: a.clone().clamp_(min=0), x)


def test_lerp_addcmul_addcdiv(no_fallback):
    """lerp (both branches), addcmul and addcdiv."""
    a, b, c = randn(3, 4), randn(3, 4, seed=1), randn(3, 4, seed=2)
    check(lambda x, y: torch.lerp(x, y, 0.3), a, b)
    check(lambda x, y: torch.lerp(x, y, 0.7), a, b)
    check(lambda x, y: torch.lerp(x, y, 1), a, b)
    check(lambda x, y, w: torch.lerp(x, y, w), a, b, torch.sigmoid(c) * 1.6 - 0.3)
    check(lambda x, y, w: torch.lerp(x, y, w), a, b[0], torch.tensor(0.6))
    check(lambda x, y: torch.lerp(x, y, 0.3), a.to(BF16), b.to(BF16))
    check(lambda x, y, z: torch.addcmul(x, y, z, value=0.3), a, b, c)
    check(lambda x, y, z: torch.addcmul(x, y, z), a, b, c[0])
    check(
        lambda x, y, z: torch.addcmul(x, y, z, value=2),
        *(randint(-5, 5, 4, seed=s) for s in (0, 1, 2)),
    )
    check(lambda x, y, z: torch.addcdiv(x, y, z, value=-0.3), a, b, c)
    check(lambda x, y, z: torch.addcdiv(x, y, z), a.to(BF16), b.to(BF16), c.to(BF16))
    check(lambda x, y, z: x.clone().addcdiv_(y, z, value=0.5), a, b, c.abs() + 1)


# -- in place ----------------------------------------------------------------------------


def test_in_place(no_fallback):
    """In-place ops, through views and with a wider compute dtype."""

    def ops(x, y):
        x = x.clone()
        x.add_(y)
        x.mul_(0.5)
        x[:, 1].mul_(2)  # through a view: writes back into x
        x[0].sub_(y[1], alpha=3)
        x.t().div_(4.0)
        x.clamp_(-1.0, 1.0)
        x.sigmoid_()
        return x

    check(ops, randn(3, 4), randn(3, 4, seed=1))

    def int_ops(x):
        x = x.clone()
        x.add_(3)
        x.remainder_(4)
        x.mul_(x)
        x.bitwise_and_(6)
        return x

    check(int_ops, randint(-9, 9, 3, 4))

    def promote_in_place(x, y):
        return x.clone().add_(y)  # float32 destination, float64 compute

    check(promote_in_place, randn(4), randn(4, dtype=F64, seed=1))
    check(lambda x: x.clone().pow_(3), randn(4))
    check(lambda x: x.clone().lerp_(x.flip(0), 0.3), randn(4))


# -- activations -------------------------------------------------------------------------

_ACTIVATIONS = {
    "relu": F.relu,
    "relu6": F.relu6,
    "gelu": F.gelu,
    "gelu_tanh": lambda x: F.gelu(x, approximate="tanh"),
    "silu": F.silu,
    "mish": F.mish,
    "hardtanh": lambda x: F.hardtanh(x, -0.5, 2.0),
    "leaky_relu": lambda x: F.leaky_relu(x, 0.2),
    "elu": lambda x: F.elu(x, alpha=1.3),
    # In place: backward from the output (elu_backward is_result, leaky self_is_result).
    "elu_inplace": lambda x: F.elu(x * 1, alpha=1.3, inplace=True),
    "leaky_relu_inplace": lambda x: F.leaky_relu(x * 1, 0.2, inplace=True),
    "selu": F.selu,
    "celu": lambda x: F.celu(x, alpha=0.7),
    "softplus": lambda x: F.softplus(x, beta=2.0, threshold=3.0),
    "hardsigmoid": F.hardsigmoid,
    "hardswish": F.hardswish,
    "threshold": lambda x: F.threshold(x, 0.1, -2.0),
    "sigmoid": torch.sigmoid,
    "tanh": torch.tanh,
    "logit": lambda x: torch.logit(torch.sigmoid(x) * 0.9 + 0.05, eps=0.1),
}


def _activation_input(dtype=F32):
    """Samples plus both sides of every activation's kinks (64 values)."""
    # Both sides of every kink (+-3 for the hard ones, 0, the softplus threshold).
    kinks = torch.tensor([-3.5, -3.0, -1.0, 0.0, 1.0, 1.6, 3.0, 3.5])
    x = torch.cat([randn(56) * 3, kinks])  # 64: torch's vectorized bf16 path
    return x.to(dtype)


_ACTIVATION_CASES = [(name, F32) for name in _ACTIVATIONS]
_ACTIVATION_CASES += [(n, BF16) for n in "gelu gelu_tanh silu mish elu softplus threshold".split()]


@pytest.mark.parametrize(("name", "dtype"), _ACTIVATION_CASES, ids=str)
def test_activation(name, dtype, no_fallback):
    """Each activation forward."""
    check(_ACTIVATIONS[name], _activation_input(dtype))


@pytest.mark.parametrize("name", list(_ACTIVATIONS))
def test_activation_backward(name, no_fallback):
    """Each activation's gradient (its backward op) against the CPU's."""
    fn = _ACTIVATIONS[name]
    x = _activation_input()
    g = randn(x.shape[0], seed=3)

    def grad(inp, grad_out):
        inp = inp.detach().requires_grad_()
        fn(inp).backward(grad_out)  # no sum(): only this family's ops are involved
        return inp.grad

    check(grad, x, g)


def test_activation_in_place(no_fallback):
    """inplace=True activations."""
    check(lambda x: F.relu(x.clone(), inplace=True), _activation_input())
    check(lambda x: F.leaky_relu(x.clone(), 0.1, inplace=True), _activation_input())
    check(lambda x: F.hardtanh(x.clone(), inplace=True), _activation_input())
    check(lambda x: F.silu(x.clone(), inplace=True), _activation_input())


def test_gelu_matches_math():
    """GELU against an independent float64 reference."""
    # An independent reference for the erf form (the test above only compares kernels).
    x = torch.linspace(-4, 4, 17, dtype=F64)
    expected = torch.tensor([v * 0.5 * (1 + math.erf(v / math.sqrt(2))) for v in x.tolist()])
    torch.testing.assert_close(F.gelu(x.to("lazax")).cpu(), expected.to(F64))
