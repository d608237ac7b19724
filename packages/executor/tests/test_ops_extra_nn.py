"""Lowerings of nn ops that ran on the CPU fallback (``ops/weight_norm.py``,
``ops/antialias.py``, ``ops/unfold_backward.py``, ``ops/index_reduce.py``,
``ops/ctc.py``) against torch's CPU kernels.

Contract: every case runs the same function on CPU tensors and on their ``lazax``
copies, and the lazax result (moved back to the CPU) must equal the CPU one to
``torch.testing.assert_close``'s defaults (or the stated tolerance), dtype included,
with no CPU fallback of any aten op on the way (the ``no_fallback`` fixture), except
where a case says the fallback is by design. Covered, forward and gradients (the
backward ops autograd calls): weight normalization (``_weight_norm_interface``, both
``nn.utils`` APIs, first and last dim, half types), antialiased bilinear/bicubic
resizing (down and up, ``align_corners`` both ways, explicit scales), the backward of
``Tensor.unfold``, ``index_reduce`` (every reduction, ``include_self`` both ways) and
``F.ctc_loss`` (list and tensor lengths, padded and concatenated targets, every
reduction, ``zero_infinity``).
"""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

from lazax.executor.config import DEVICE_NAME
from lazax.executor.testing import deferred_check as check
from lazax.executor.testing import deferred_grad_check as check_grads
from lazax.executor.testing import fallback_counts

F32, BF16, F16, F64 = torch.float32, torch.bfloat16, torch.float16, torch.float64


def randn(*shape, dtype=F32, seed=0):
    """Seeded normal samples of ``dtype``."""
    g = torch.Generator().manual_seed(seed)
    return torch.randn(shape, generator=g).to(dtype)


BF16_TOL = {"atol": 2e-2, "rtol": 2e-2}
F16_TOL = {"atol": 2e-3, "rtol": 2e-3}


def _tol(dtype):
    return {BF16: BF16_TOL, F16: F16_TOL}.get(dtype, {})


# -- weight normalization --------------------------------------------------------------


@pytest.mark.parametrize("dtype", [F32, BF16, F16, F64])
@pytest.mark.parametrize(
    "shape,dim", [((4, 3, 2), 0), ((4, 3, 2), 2), ((5, 7), 0), ((5, 7), 1), ((6,), 0)]
)
def test_weight_norm_interface(shape, dim, dtype, no_fallback):
    v = randn(*shape, dtype=dtype)
    gshape = [1] * len(shape)
    gshape[dim] = shape[dim]
    g = randn(*gshape, dtype=dtype, seed=1)
    check_grads(lambda v, g: torch._weight_norm_interface(v, g, dim), v, g, **_tol(dtype))


@pytest.mark.parametrize("dim", [0, 1])
def test_weight_norm_module(dim, no_fallback):
    def run(x, weight):
        lin = torch.nn.Linear(5, 4, bias=False).to(x.device)
        with torch.no_grad():
            lin.weight.copy_(weight)
        m = torch.nn.utils.parametrizations.weight_norm(lin, dim=dim)
        out = m(x)
        out.sum().backward()
        p = m.parametrizations.weight
        return out, p.original0.grad, p.original1.grad

    check(run, randn(3, 5), randn(4, 5, seed=2))


@pytest.mark.filterwarnings("ignore::FutureWarning")
def test_weight_norm_old_api_conv(no_fallback):
    def run(x, weight):
        conv = torch.nn.Conv1d(3, 4, 3, bias=False).to(x.device)
        with torch.no_grad():
            conv.weight.copy_(weight)
        m = torch.nn.utils.weight_norm(conv)
        out = m(x)
        (out * out).sum().backward()
        return out, m.weight_g.grad, m.weight_v.grad

    check(run, randn(2, 3, 8), randn(4, 3, 3, seed=3))


def test_weight_norm_zero_row(no_fallback):
    v = randn(3, 4)
    v[1] = 0
    check_grads(lambda v, g: torch._weight_norm_interface(v, g, 0), v, randn(3, 1, seed=1))


def test_weight_norm_bad_dim():
    v, g = randn(4, 3, 2), randn(1, 3, 1)
    with pytest.raises(RuntimeError, match="fused kernels can only be applied"):
        torch._weight_norm_interface(v.to(DEVICE_NAME), g.to(DEVICE_NAME), 1)


# -- antialiased resizing --------------------------------------------------------------


@pytest.mark.parametrize("mode", ["bilinear", "bicubic"])
@pytest.mark.parametrize("align_corners", [False, True])
@pytest.mark.parametrize(
    "in_hw,out_hw",
    [
        ((9, 7), (4, 3)),
        ((16, 16), (5, 7)),
        ((5, 6), (11, 13)),
        ((8, 9), (8, 4)),
        ((7, 5), (1, 1)),
        ((3, 40), (2, 6)),
    ],
)
@pytest.mark.parametrize("dtype", [F32, F64])
def test_interpolate_antialias(mode, align_corners, in_hw, out_hw, dtype, no_fallback):
    x = randn(2, 3, *in_hw, dtype=dtype)

    def fn(t):
        return F.interpolate(t, size=out_hw, mode=mode, align_corners=align_corners, antialias=True)

    check_grads(fn, x)


@pytest.mark.parametrize("mode", ["bilinear", "bicubic"])
@pytest.mark.parametrize("scale", [0.3, 0.5, 1.7, (0.45, 2.5)])
def test_interpolate_antialias_scale_factor(mode, scale, no_fallback):
    x = randn(1, 2, 13, 10)

    def fn(t):
        return F.interpolate(t, scale_factor=scale, mode=mode, antialias=True)

    def fn_recompute(t):
        return F.interpolate(
            t, scale_factor=scale, mode=mode, antialias=True, recompute_scale_factor=True
        )

    check_grads(fn, x)
    check_grads(fn_recompute, x)


def test_interpolate_antialias_unbatched_channels_last(no_fallback):
    x = randn(2, 4, 12, 9).contiguous(memory_format=torch.channels_last)
    check_grads(lambda t: F.interpolate(t, size=(5, 4), mode="bilinear", antialias=True), x)


@pytest.mark.parametrize("dtype", [BF16, F16])
def test_interpolate_antialias_half_errors(dtype):
    x = randn(1, 1, 6, 6, dtype=dtype).to(DEVICE_NAME)
    with pytest.raises(RuntimeError, match="compute_index_ranges_weights"):
        F.interpolate(x, size=(3, 3), mode="bilinear", antialias=True)
    g = randn(1, 1, 3, 3, dtype=dtype).to(DEVICE_NAME)
    with pytest.raises(RuntimeError, match="upsample_bicubic2d_aa_backward_cpu"):
        torch.ops.aten._upsample_bicubic2d_aa_backward(g, [3, 3], [1, 1, 6, 6], False)


@pytest.mark.filterwarnings("ignore:lazax")
def test_interpolate_antialias_uint8_runs_on_cpu():
    # By design: torch's uint8 kernel sums in fixed point; lazax sends it to the CPU.
    x = (randn(1, 3, 9, 8) * 60 + 100).clamp(0, 255).to(torch.uint8)
    check(lambda t: F.interpolate(t, size=(4, 5), mode="bilinear", antialias=True), x)


# -- Tensor.unfold's backward ----------------------------------------------------------


@pytest.mark.parametrize("dtype", [F32, BF16, F64])
@pytest.mark.parametrize(
    "shape,dim,size,step",
    [
        ((10, 6), 0, 3, 2),
        ((10, 6), 1, 2, 3),
        ((10, 6), -1, 6, 1),
        ((3, 11, 4), 1, 4, 1),
        ((3, 11, 4), 1, 5, 5),
        ((3, 11, 4), 1, 3, 7),
        ((3, 11, 4), 2, 1, 1),
        ((7,), 0, 7, 3),
        ((7,), 0, 0, 2),
        ((2, 0, 5), 2, 2, 1),
    ],
)
def test_unfold_backward(shape, dim, size, step, dtype, no_fallback):
    check_grads(lambda t: t.unfold(dim, size, step), randn(*shape, dtype=dtype), **_tol(dtype))


@pytest.mark.parametrize("size", [0, 1])
def test_unfold_backward_scalar(size, no_fallback):
    check_grads(lambda t: t.unfold(0, size, 1), torch.tensor(2.5))


def test_unfold_backward_op_direct(no_fallback):
    g = randn(4, 3, 5, 2)
    check(lambda t: torch.ops.aten.unfold_backward(t, [4, 6, 5], 1, 2, 2), g)


# -- index_reduce ----------------------------------------------------------------------

REDUCES = ["prod", "mean", "amax", "amin"]


@pytest.mark.filterwarnings("ignore:index_reduce")
@pytest.mark.parametrize("reduce", REDUCES)
@pytest.mark.parametrize("include_self", [True, False])
@pytest.mark.parametrize("dim", [0, 1, -1])
def test_index_reduce(reduce, include_self, dim, no_fallback):
    x = randn(5, 4, 3)
    n = 6
    shape = list(x.shape)
    shape[dim] = n
    source = randn(*shape, seed=1)
    index = torch.tensor([0, 2, 2, 1, 2, 0])[:n] % x.shape[dim]

    def fn(t, s):
        return t.index_reduce(dim, index.to(t.device), s, reduce, include_self=include_self)

    check_grads(fn, x, source)


@pytest.mark.filterwarnings("ignore:index_reduce")
@pytest.mark.parametrize("reduce", REDUCES)
@pytest.mark.parametrize("include_self", [True, False])
@pytest.mark.parametrize("dtype", [BF16, torch.int64, torch.uint8, F64])
def test_index_reduce_dtypes(reduce, include_self, dtype, no_fallback):
    x = (randn(7, 3) * 4).to(dtype)
    source = (randn(5, 3, seed=1) * 4).to(dtype)
    index = torch.tensor([6, 0, 6, 3, 6])

    def fn(t, s):
        return t.index_reduce(0, index.to(t.device), s, reduce, include_self=include_self)

    check(fn, x, source, **_tol(dtype))


@pytest.mark.filterwarnings("ignore:index_reduce")
@pytest.mark.parametrize("reduce", REDUCES)
def test_index_reduce_ties_nan_inplace_scalar(reduce, no_fallback):
    x = torch.tensor([[1.0, 2.0], [3.0, float("nan")], [0.0, -1.0]])
    source = torch.tensor([[1.0, 2.0], [float("nan"), 5.0], [3.0, 2.0]])
    index = torch.tensor([0, 1, 0])
    check(lambda t, s: t.index_reduce_(0, index.to(t.device), s, reduce), x, source)
    check(lambda t, s: t.index_reduce(0, index.to(t.device)[:0], s[:0], reduce), x, source)
    check_grads(
        lambda t, s: t.index_reduce(0, torch.tensor(0, device=t.device), s, reduce),
        torch.tensor(3.0),
        torch.tensor(-2.0),
    )


@pytest.mark.filterwarnings("ignore:index_reduce")
def test_index_reduce_errors():
    x, s = randn(5, 3).to(DEVICE_NAME), randn(2, 3).to(DEVICE_NAME)
    with pytest.raises(IndexError, match="index out of range in self"):
        x.index_reduce(0, torch.tensor([0, 5], device=DEVICE_NAME), s, "amax").cpu()
    with pytest.raises(IndexError, match="index out of range in self"):
        x.index_reduce(0, torch.tensor([0, -1], device=DEVICE_NAME), s, "amax").cpu()
    with pytest.raises(RuntimeError, match="source tensor shape must match"):
        x.index_reduce(
            0, torch.tensor([0], device=DEVICE_NAME), randn(1, 5).to(DEVICE_NAME), "prod"
        )
    with pytest.raises(NotImplementedError, match="not implemented for 'Bool'"):
        b = torch.ones(3, dtype=torch.bool, device=DEVICE_NAME)
        b.index_reduce(0, torch.tensor([0], device=DEVICE_NAME), b[:1], "amax")


# -- CTC loss --------------------------------------------------------------------------


def _ctc_case(t_max, n, c, target_lengths, input_lengths, seed=0, repeats=False):
    log_probs = randn(t_max, n, c, seed=seed).log_softmax(-1)
    g = torch.Generator().manual_seed(seed + 1)
    width = max(target_lengths) if target_lengths else 0
    targets = torch.randint(1, c, (n, max(width, 1)), generator=g)
    if repeats:
        targets[:, 1::2] = targets[:, 0::2][:, : targets[:, 1::2].shape[1]]
    return log_probs, targets


@pytest.mark.filterwarnings("ignore:lazax")  # the by-design fallback below
@pytest.mark.parametrize("reduction", ["mean", "sum", "none"])
@pytest.mark.parametrize("dtype", [F32, F64])
@pytest.mark.parametrize("lengths", ["list", "tensor"])
@pytest.mark.parametrize("layout", ["padded", "concatenated"])
def test_ctc_loss(reduction, dtype, lengths, layout):
    input_lengths, target_lengths = [12, 9, 12, 5], [5, 3, 0, 2]
    log_probs, targets = _ctc_case(12, 4, 6, target_lengths, input_lengths, repeats=True)
    log_probs = log_probs.to(dtype)
    if layout == "concatenated":
        targets = torch.cat([targets[i, :k] for i, k in enumerate(target_lengths)])

    def fn(lp, tg):
        il, tl = input_lengths, target_lengths
        if lengths == "tensor":
            il, tl = torch.tensor(il, device=lp.device), torch.tensor(tl, device=lp.device)
        return F.ctc_loss(lp, tg, il, tl, reduction=reduction)

    before = fallback_counts()
    check_grads(fn, log_probs, targets)
    after = fallback_counts()
    fell_back = sorted(k for k in after if after[k] != before.get(k))
    # By design: with tensor lengths and 1-D targets log_alpha's width is a value of
    # target_lengths, so the forward runs on the CPU (the backward does not).
    by_design = ["aten::_ctc_loss"] if (lengths, layout) == ("tensor", "concatenated") else []
    assert fell_back == by_design


@pytest.mark.parametrize("zero_infinity", [False, True])
def test_ctc_loss_impossible(zero_infinity, no_fallback):
    # Sample 0 cannot align (5 labels with repeats need > 4 frames); sample 1 can.
    log_probs = randn(4, 2, 5).log_softmax(-1)
    targets = torch.tensor([[1, 1, 2, 2, 3], [2, 3, 0, 0, 0]])

    def fn(lp, tg):
        return F.ctc_loss(lp, tg, [4, 4], [5, 2], reduction="none", zero_infinity=zero_infinity)

    check_grads(fn, log_probs, targets)


@pytest.mark.parametrize("blank", [0, 3, 5])
def test_ctc_loss_blank_unbatched_one_frame(blank, no_fallback):
    log_probs = randn(7, 6).log_softmax(-1)
    targets = torch.tensor([1, 4, 2]) if blank != 4 else torch.tensor([1, 3, 2])
    targets = torch.where(targets == blank, (targets + 1) % 6, targets)
    check_grads(lambda lp, tg: F.ctc_loss(lp, tg, (7,), (3,), blank=blank), log_probs, targets)
    one = randn(1, 2, 4, seed=3).log_softmax(-1)
    tg = torch.tensor([[1], [2]])
    check_grads(lambda lp, t: F.ctc_loss(lp, t, [1, 1], [1, 0], reduction="none"), one, tg)


def test_ctc_loss_zero_input_length(no_fallback):
    log_probs = randn(5, 3, 4).log_softmax(-1)
    targets = torch.tensor([[1, 2], [3, 1], [2, 2]])

    def fn(lp, tg):
        return F.ctc_loss(lp, tg, [0, 0, 5], [0, 1, 2], reduction="none")

    check_grads(fn, log_probs, targets)


def test_ctc_loss_op_outputs(no_fallback):
    # log_alpha where the CPU kernel writes it (within each input length and extended
    # target), and the backward op straight.
    log_probs, targets = _ctc_case(9, 3, 5, [4, 2, 3], [9, 7, 8], seed=4)
    il, tl = [9, 7, 8], [4, 2, 3]

    def fn(lp, tg):
        nll, alpha = torch.ops.aten._ctc_loss(lp, tg, il, tl, 0, False)
        parts = [alpha[b, : il[b], : 2 * tl[b] + 1] for b in range(3)]
        grad = torch.ops.aten._ctc_loss_backward(
            torch.tensor([1.0, -2.0, 0.5], device=lp.device), lp, tg, il, tl, nll, alpha, 0, False
        )
        return nll, *parts, grad

    check(fn, log_probs, targets)


def test_ctc_loss_tensor_overload(no_fallback):
    log_probs, targets = _ctc_case(6, 2, 4, [3, 2], [6, 5], seed=5)

    def fn(lp, tg):
        il = torch.tensor([6, 5], device=lp.device)
        tl = torch.tensor([3, 2], device=lp.device)
        nll, alpha = torch.ops.aten._ctc_loss.Tensor(lp, tg, il, tl, 0, False)
        grad = torch.ops.aten._ctc_loss_backward.Tensor(
            torch.ones(2, device=lp.device), lp, tg, il, tl, nll, alpha, 0, False
        )
        return nll, grad

    check(fn, log_probs, targets)


def test_ctc_loss_errors():
    lp = randn(5, 2, 4).log_softmax(-1).to(DEVICE_NAME)
    tg = torch.tensor([[1, 2], [3, 1]], device=DEVICE_NAME)
    with pytest.raises(RuntimeError, match="input_lengths to have value at most 5"):
        F.ctc_loss(lp, tg, [6, 5], [2, 2])
    with pytest.raises(RuntimeError, match="blank must be in label range"):
        F.ctc_loss(lp, tg, [5, 5], [2, 2], blank=4)
    with pytest.raises(NotImplementedError, match="not implemented for 'BFloat16'"):
        F.ctc_loss(lp.bfloat16(), tg, [5, 5], [2, 2])
