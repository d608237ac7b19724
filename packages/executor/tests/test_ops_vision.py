"""nn/vision lowerings (``ops/vision.py``, ``ops/sampling.py``) against torch's CPU kernels.

Contract: every case runs the same function on CPU tensors and on their ``lazax``
copies, and the lazax result (moved back to the CPU) must equal the CPU one to
``torch.testing.assert_close``'s defaults (or the stated tolerance), dtype included,
with no CPU fallback of any aten op on the way (the ``no_fallback`` fixture), except
where a case says the fallback is by design. Covered, forward and gradients (the
backward ops autograd calls): PReLU, unfold/fold (im2col/col2im), adaptive max pooling
with indices (2-D, 3-D), bicubic upsampling, grid sampling (every mode, padding mode
and ``align_corners``), ``F.bilinear`` (``_trilinear``) and ``F.embedding`` with
``max_norm`` (``embedding_renorm_``), in float32 and bfloat16, batched and not, with
odd and non-square sizes.
"""

from __future__ import annotations

import copy

import pytest
import torch
import torch.nn.functional as F

import lazax.modes as lx
from lazax.executor.testing import deferred_check as check
from lazax.executor.testing import deferred_grad_check as check_grads

F32, BF16 = torch.float32, torch.bfloat16


def randn(*shape, dtype=F32, seed=0):
    """Seeded normal samples of ``dtype``."""
    g = torch.Generator().manual_seed(seed)
    return torch.randn(*shape, generator=g).to(dtype)


# Looser than the defaults for bfloat16: lazax sums in float32 where torch's CPU kernel
# may round partial sums to bfloat16.
BF16_TOL = {"atol": 2e-2, "rtol": 2e-2}


def _tol(dtype):
    return BF16_TOL if dtype == BF16 else {}


# -- PReLU -----------------------------------------------------------------------------


@pytest.mark.parametrize("dtype", [F32, BF16])
@pytest.mark.parametrize(
    "x_shape,w_shape", [((2, 3, 5, 4), (3,)), ((3, 7), (1,)), ((4,), (1,)), ((2, 5), (5,))]
)
def test_prelu(x_shape, w_shape, dtype, no_fallback):
    x, w = randn(*x_shape, dtype=dtype), randn(*w_shape, dtype=dtype, seed=1)
    check_grads(F.prelu, x, w, **_tol(dtype))


def test_prelu_module_zero_and_nan(no_fallback):
    x = torch.tensor([[-1.0, 0.0, 2.0, float("nan"), -0.0, -3.5]])
    check_grads(lambda t, w: F.prelu(t, w), x, torch.tensor([0.25]))


# -- unfold / fold ---------------------------------------------------------------------

_UNFOLD = [
    dict(kernel_size=2),
    dict(kernel_size=(2, 3), dilation=(1, 2), padding=1, stride=(2, 1)),
    dict(kernel_size=3, padding=(0, 2), stride=2),
]


@pytest.mark.parametrize("dtype", [F32, BF16])
@pytest.mark.parametrize("batched", [True, False])
@pytest.mark.parametrize("kw", _UNFOLD)
def test_unfold(kw, batched, dtype, no_fallback):
    x = randn(*((2,) if batched else ()), 3, 7, 6, dtype=dtype)
    check_grads(lambda t: F.unfold(t, **kw), x, **_tol(dtype))


@pytest.mark.parametrize("dtype", [F32, BF16])
@pytest.mark.parametrize("batched", [True, False])
@pytest.mark.parametrize("kw", _UNFOLD)
def test_fold(kw, batched, dtype, no_fallback):
    out = (7, 6)
    cols = F.unfold(randn(1, 3, *out), **kw)  # the column count for this geometry
    x = randn(*((2,) if batched else ()), *cols.shape[1:], dtype=dtype)
    check_grads(lambda t: F.fold(t, out, **kw), x, **_tol(dtype))


def test_unfold_fold_modules(no_fallback):
    x = randn(2, 2, 5, 9)
    check_grads(lambda t: torch.nn.Fold((5, 9), 3, padding=1)(torch.nn.Unfold(3, padding=1)(t)), x)


# -- adaptive max pooling --------------------------------------------------------------


@pytest.mark.parametrize("dtype", [F32, BF16])
@pytest.mark.parametrize(
    "shape,out", [((2, 3, 7, 5), (3, 4)), ((3, 9, 6), (4, 6)), ((1, 2, 5, 5), 1), ((2, 4, 4), 8)]
)
def test_adaptive_max_pool2d(shape, out, dtype, no_fallback):
    x = randn(*shape, dtype=dtype)
    check_grads(lambda t: F.adaptive_max_pool2d(t, out, return_indices=True), x, **_tol(dtype))


@pytest.mark.parametrize("dtype", [F32, BF16])
@pytest.mark.parametrize(
    "shape,out", [((2, 3, 4, 5, 7), (2, 3, 4)), ((2, 5, 3, 6), (3, 2, 4)), ((1, 1, 3, 3, 3), 1)]
)
def test_adaptive_max_pool3d(shape, out, dtype, no_fallback):
    x = randn(*shape, dtype=dtype)
    check_grads(lambda t: F.adaptive_max_pool3d(t, out, return_indices=True), x, **_tol(dtype))


def test_adaptive_max_pool_ties_nan_inf(no_fallback):
    """torch's pick: the first of equal maxima, the last NaN, the first of all -inf."""
    x = torch.tensor(
        [[[1.0, 3.0, 3.0, 0.0], [3.0, 2.0, float("nan"), 1.0], [float("nan"), 0.0, 5.0, 5.0]]]
    )
    x = torch.cat([x, torch.full((1, 3, 4), float("-inf"))])
    check_grads(lambda t: F.adaptive_max_pool2d(t, (2, 3), return_indices=True), x)


# -- bicubic upsampling ----------------------------------------------------------------


@pytest.mark.parametrize("dtype", [F32, BF16])
@pytest.mark.parametrize("align_corners", [False, True])
@pytest.mark.parametrize(
    "shape,kw",
    [
        ((2, 3, 5, 4), dict(scale_factor=2)),
        ((1, 2, 7, 5), dict(size=(4, 9))),
        ((2, 3, 6, 6), dict(scale_factor=(0.5, 1.7))),
        ((1, 1, 1, 3), dict(size=(3, 1))),
        ((3, 5, 4), dict(size=(6, 7))),
    ],
)
def test_upsample_bicubic(shape, kw, align_corners, dtype, no_fallback):
    x = randn(*shape, dtype=dtype)
    if len(shape) == 3:  # no batch: through the module on a batch of one

        def fn(t):
            return F.interpolate(t[None], mode="bicubic", align_corners=align_corners, **kw)[0]
    else:

        def fn(t):
            return F.interpolate(t, mode="bicubic", align_corners=align_corners, **kw)

    check_grads(fn, x, **_tol(dtype))


def test_upsample_bicubic_recompute_scale(no_fallback):
    x = randn(1, 2, 5, 7)
    check_grads(
        lambda t: F.interpolate(t, scale_factor=1.3, mode="bicubic", recompute_scale_factor=True),
        x,
    )


# -- grid sampling ---------------------------------------------------------------------


@pytest.mark.parametrize("align_corners", [False, True])
@pytest.mark.parametrize("padding_mode", ["zeros", "border", "reflection"])
@pytest.mark.parametrize("mode", ["bilinear", "nearest", "bicubic"])
def test_grid_sample(mode, padding_mode, align_corners, no_fallback):
    x = randn(2, 3, 7, 5)
    # Reaching well past the border, so every padding mode matters.
    grid = torch.rand(2, 4, 6, 2, generator=torch.Generator().manual_seed(3)) * 3.2 - 1.6

    def fn(t, g):
        return F.grid_sample(
            t, g, mode=mode, padding_mode=padding_mode, align_corners=align_corners
        )

    # Far outside a border, bicubic's grid gradient is a sum that cancels to ~0 (torch
    # and lazax leave different float residue): an absolute tolerance for it.
    check_grads(fn, x, grid, atol=5e-5 if mode == "bicubic" else 1e-5, rtol=1e-5)


def test_grid_sample_one_pixel_and_input_only_grad(no_fallback):
    x = randn(1, 2, 1, 4)
    grid = torch.rand(1, 3, 3, 2, generator=torch.Generator().manual_seed(4)) * 2 - 1

    def input_grad_only(t):
        return F.grid_sample(t, grid.to(t.device), padding_mode="reflection", align_corners=True)

    check_grads(input_grad_only, x)
    check_grads(
        lambda t, g: F.grid_sample(t, g, padding_mode="border", align_corners=True), x, grid
    )


@pytest.mark.filterwarnings("ignore:lazax. aten..grid_sampler_2d has no lowering")
def test_grid_sample_half_types_take_the_fallback():
    """bfloat16 grid sampling is left to the CPU fallback by design (see ``sampling``)."""
    x, grid = randn(1, 2, 4, 4, dtype=BF16), randn(1, 3, 3, 2, dtype=BF16).clamp(-1, 1)
    before = lx.metrics.counter_value("aten::grid_sampler_2d") or 0
    check(lambda t, g: F.grid_sample(t, g, align_corners=False), x, grid)
    assert (lx.metrics.counter_value("aten::grid_sampler_2d") or 0) == before + 1


# -- F.bilinear (_trilinear) -----------------------------------------------------------


@pytest.mark.parametrize("dtype", [F32, BF16])
@pytest.mark.parametrize(
    "n,in1,in2,out,bias", [((4,), 3, 5, 6, True), ((2, 3), 4, 2, 1, False), ((), 3, 3, 2, True)]
)
def test_bilinear(n, in1, in2, out, bias, dtype, no_fallback):
    a, b = randn(*n, in1, dtype=dtype), randn(*n, in2, dtype=dtype, seed=1)
    w = randn(out, in1, in2, dtype=dtype, seed=2)
    if bias:
        check_grads(F.bilinear, a, b, w, randn(out, dtype=dtype, seed=3), **_tol(dtype))
    else:
        check_grads(F.bilinear, a, b, w, **_tol(dtype))


def test_bilinear_module(no_fallback):
    torch.manual_seed(0)
    layer = torch.nn.Bilinear(3, 4, 5)
    a, b = randn(6, 3), randn(6, 4, seed=1)

    def fn(x, y):
        return copy.deepcopy(layer).to(x.device)(x, y)

    check(fn, a, b)


# -- F.embedding(max_norm=...) (embedding_renorm_) -------------------------------------


@pytest.mark.parametrize("dtype", [F32, BF16])
@pytest.mark.parametrize("norm_type", [2.0, 1.0, 3.0, float("inf")])
def test_embedding_max_norm(norm_type, dtype, no_fallback):
    weight = randn(10, 4, dtype=dtype) * 2
    indices = torch.tensor([[1, 2, 2], [5, 9, 1]])

    def fn(w, i):
        out = F.embedding(i, w, max_norm=1.5, norm_type=norm_type)
        return out, w  # the renormalised rows of the weight, in place

    check(fn, weight, indices)


def test_embedding_renorm_in_place_and_grad(no_fallback):
    indices = torch.tensor([0, 3, 3, 7], dtype=torch.int32)

    def fn(w, i):
        with torch.no_grad():
            torch.embedding_renorm_(w, i, 0.8, 2.0)
        leaf = w.detach().requires_grad_()
        F.embedding(i.long(), leaf, max_norm=0.5).pow(2).sum().backward()
        return w, leaf, leaf.grad

    check(fn, randn(8, 3) * 3, indices)


# -- no fallback anywhere --------------------------------------------------------------


def test_no_fallback_counters():
    """After these ops, no ``aten::<op>`` fallback counter names any of them."""
    dev = lx.device()
    lx.metrics.clear_all()
    x = randn(2, 3, 6, 5).to(dev).requires_grad_()
    grid = (torch.rand(2, 3, 4, 2) * 2 - 1).to(dev).requires_grad_()
    outs = [
        F.prelu(x, torch.full((3,), 0.2, device=dev)),
        F.fold(F.unfold(x, 2), (6, 5), 2),
        F.adaptive_max_pool2d(x, (4, 3)),
        F.adaptive_max_pool3d(x[None], (2, 3, 2))[0],
        F.interpolate(x, scale_factor=1.5, mode="bicubic"),
        F.grid_sample(x, grid, mode="bicubic", padding_mode="reflection", align_corners=False),
        F.bilinear(x.flatten(1)[:, :4], x.flatten(1)[:, 4:7], torch.ones(2, 4, 3, device=dev)),
    ]
    sum(o.sum() for o in outs).backward()
    F.embedding(torch.tensor([1, 2], device=dev), torch.ones(4, 3, device=dev), max_norm=1.0)
    x.grad.cpu()
    ops = (
        "_prelu_kernel", "im2col", "col2im", "adaptive_max_pool", "upsample_bicubic2d",
        "grid_sampler_2d", "_trilinear", "embedding_renorm",
    )  # fmt: skip
    left = [
        n for n in lx.metrics.counter_names() if n.startswith("aten::") and any(o in n for o in ops)
    ]
    assert not left, left
