"""Grouped matrix products on the device, against torch on the CPU, with no CPU
fallback: ``_grouped_mm`` in its four layouts (float32 and bfloat16, empty groups, rows
past the last offset), its gradients, its errors, and transformers'
``grouped_mm_fallback`` ops; and the routing ops a mixture of experts uses around them
(top-k, one-hot, sort, histc on int32, cumsum, index_add_)."""

import pytest
import torch
import torch.nn.functional as F

from lazax.executor.testing import check_against_cpu, deferred_check, no_cpu_fallback

DEV = "lazax"

torch.manual_seed(0)
OFFS = torch.tensor([3, 7, 10], dtype=torch.int32)
EMPTY_GROUP = torch.tensor([3, 3, 10], dtype=torch.int32)
TOL = {"rtol": 1e-5, "atol": 1e-5}


def grouped(a, b, offs=None):
    return torch._grouped_mm(a, b, offs=offs)


CASES = {
    "rows_2d_3d": (grouped, torch.randn(10, 8), torch.randn(3, 8, 4), OFFS),
    "rows_empty_group": (grouped, torch.randn(10, 8), torch.randn(3, 8, 4), EMPTY_GROUP),
    "rows_transposed_weight": (
        lambda a, b, o: grouped(a, b.transpose(-2, -1), o),
        torch.randn(10, 8),
        torch.randn(3, 4, 8),
        OFFS,
    ),
    # K past the last offset (10 of 12) is ignored.
    "contraction_2d_2d": (grouped, torch.randn(8, 12), torch.randn(12, 4), OFFS),
    "columns_3d_2d": (grouped, torch.randn(3, 5, 8), torch.randn(8, 12), OFFS * 6 // 5),
    "batched_3d_3d": (grouped, torch.randn(3, 5, 8), torch.randn(3, 8, 4)),
    "bfloat16": (grouped, torch.randn(10, 8).bfloat16(), torch.randn(3, 8, 8).bfloat16(), OFFS),
    "out_dtype_bfloat16": (
        lambda a, b, o: torch._grouped_mm(a, b, offs=o, out_dtype=torch.bfloat16),
        torch.randn(10, 8).bfloat16(),
        torch.randn(3, 8, 8).bfloat16(),
        OFFS,
    ),
}


def test_grouped_mm_layouts_match_the_cpu():
    with no_cpu_fallback():
        for fn, *args in CASES.values():
            deferred_check(fn, *args, **TOL)


def test_rows_past_the_last_offset_are_zero():
    """torch leaves them uninitialized; lazax gives zeros (nothing to compare)."""
    a, b = torch.randn(10, 8), torch.randn(3, 8, 4)
    offs = torch.tensor([3, 7, 8], dtype=torch.int32)
    with no_cpu_fallback():
        got = grouped(a.to(DEV), b.to(DEV), offs.to(DEV)).cpu()
    torch.testing.assert_close(got[:8], grouped(a, b, offs)[:8], **TOL)
    assert got[8:].eq(0).all()


@pytest.mark.parametrize(
    ("a", "b", "offs"),
    [
        (torch.randn(10, 8), torch.randn(3, 8, 4), OFFS),
        (torch.randn(3, 5, 8), torch.randn(3, 8, 4), None),
    ],
    ids=["ragged_rows", "batched"],
)
def test_grouped_mm_gradients_match_the_cpu(a, b, offs):
    """The backward of a ragged-row product is a ragged-row product (the input's
    gradient) and a ragged contraction (the weights')."""
    cotangent = torch.randn(grouped(a, b, offs).shape)
    ea, eb = a.clone().requires_grad_(), b.clone().requires_grad_()
    (grouped(ea, eb, offs) * cotangent).sum().backward()
    with no_cpu_fallback():
        la, lb = a.to(DEV).requires_grad_(), b.to(DEV).requires_grad_()
        lo = offs.to(DEV) if offs is not None else None
        (grouped(la, lb, lo) * cotangent.to(DEV)).sum().backward()
        grads = la.grad.cpu(), lb.grad.cpu()
    torch.testing.assert_close(grads, (ea.grad, eb.grad), **TOL)


def test_grouped_mm_raises_torch_errors():
    a, b = torch.randn(10, 8), torch.randn(3, 8, 4)
    with pytest.raises(RuntimeError, match="Float32, BFloat16 or Float16 matrix, got Double"):
        grouped(a.double().to(DEV), b.double().to(DEV), OFFS.to(DEV))
    with pytest.raises(RuntimeError, match="provide offsets if there is a 2d matrix"):
        grouped(a.to(DEV), b.to(DEV))
    with pytest.raises(RuntimeError, match="contraction dimension"):
        grouped(a.to(DEV), torch.randn(3, 7, 4).to(DEV), OFFS.to(DEV))


def test_transformers_grouped_mm_ops():
    moe = pytest.importorskip("transformers.integrations.moe")
    assert moe is not None  # importing it registers the ops
    ops = torch.ops.transformers
    x, w, grad = torch.randn(10, 8), torch.randn(3, 8, 4), torch.randn(10, 4)
    with no_cpu_fallback():
        deferred_check(lambda *a: ops.grouped_mm_fallback(*a), x, w, EMPTY_GROUP, **TOL)
        deferred_check(lambda *a: ops.grouped_mm_fallback_backward(*a), x, w, OFFS, grad, **TOL)


def test_routing_ops_of_a_mixture_of_experts():
    """transformers' grouped path, step by step, as one program."""
    experts, top_k = 4, 2

    def route(logits, hidden, weights):
        probs = torch.softmax(logits, dim=-1)
        top_w, top_i = torch.topk(probs, top_k, dim=-1)
        ids, perm = torch.sort(top_i.reshape(-1))
        # On the device histc takes the int32 ids (CUDA's path), on the CPU floats.
        counts_input = ids.int() if ids.device.type == DEV else ids.float()
        counts = torch.histc(counts_input, bins=experts, min=0, max=experts - 1)
        offsets = torch.cumsum(counts, dim=0, dtype=torch.int32)
        out = torch._grouped_mm(hidden[perm // top_k], weights, offs=offsets)
        out = out * top_w.reshape(-1)[perm, None]
        mask = F.one_hot(top_i, num_classes=experts).sum(1)
        combined = torch.zeros(hidden.shape[0], weights.shape[-1], device=hidden.device)
        combined.index_add_(0, perm // top_k, out)
        return combined, mask

    logits, hidden, weights = torch.randn(6, experts), torch.randn(6, 8), torch.randn(4, 8, 4)
    check_against_cpu(route, logits, hidden, weights, **TOL)
