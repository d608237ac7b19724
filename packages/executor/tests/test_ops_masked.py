"""masked_scatter (+ backward), put, max_unpool, the batch-norm forms and mode match
torch's CPU kernels with no CPU fallback, in the cases OpInfo's samples miss: a
Hugging-Face-style embedding merge with gradients, put with negative and repeated
indices, the device-side errors, the running statistics of the batch-norm forms."""

import pytest
import torch
import torch.nn.functional as F

from lazax.executor.testing import DEVICE_NAME, check_against_cpu, no_cpu_fallback

aten = torch.ops.aten


def _merge(embeddings, image_features, input_ids, weight):
    # LLaVA-style: the image token's embeddings are replaced by the image features.
    inputs_embeds = embeddings[input_ids] * weight
    mask = (input_ids == 7).unsqueeze(-1).expand_as(inputs_embeds)
    merged = inputs_embeds.masked_scatter(mask, image_features)
    return merged


def _merge_grads(embeddings, image_features, input_ids, weight):
    leaves = [t.detach().requires_grad_() for t in (embeddings, image_features, weight)]
    merged = _merge(leaves[0], leaves[1], input_ids, leaves[2])
    scale = torch.linspace(-1, 1, merged.numel(), device=merged.device).view(merged.shape)
    (merged * scale).sum().backward()
    return merged.detach(), *(leaf.grad for leaf in leaves)


def test_masked_scatter_embedding_merge_with_gradients():
    torch.manual_seed(0)
    embeddings = torch.randn(10, 6)
    input_ids = torch.tensor([[1, 7, 7, 3, 2], [7, 7, 4, 5, 9]])
    image_features = torch.randn(4, 6)  # one row per image token
    weight = torch.randn(6)
    check_against_cpu(_merge_grads, embeddings, image_features, input_ids, weight)


def test_masked_scatter_broadcast_mask_and_extra_source():
    x = torch.randn(2, 3, 4)
    mask = torch.tensor([True, False, True, True])
    check_against_cpu(lambda t, m, s: t.masked_scatter(m, s), x, mask, torch.randn(30))
    check_against_cpu(
        lambda t, m, s: t.masked_scatter(m, s), x, torch.zeros(4, dtype=torch.bool), torch.randn(0)
    )


def test_masked_scatter_backward_op():
    grad = torch.randn(2, 3)
    mask = torch.tensor([[True, False, True], [False, True, True]])
    for sizes in ([2, 2], [7], [1, 5]):
        check_against_cpu(lambda g, m, s=sizes: aten.masked_scatter_backward(g, m, s), grad, mask)


def test_masked_scatter_short_source_raises():
    x = torch.zeros(2, 3, device=DEVICE_NAME)
    mask = torch.ones(2, 3, dtype=torch.bool, device=DEVICE_NAME)
    with pytest.raises(RuntimeError, match="Number of elements of source < number of ones"):
        x.masked_scatter(mask, torch.ones(4, device=DEVICE_NAME)).cpu()
    with pytest.raises(RuntimeError, match="only supports boolean masks"):
        x.masked_scatter(mask.to(torch.uint8), torch.ones(6, device=DEVICE_NAME)).cpu()


def test_put_negative_and_repeated_indices():
    x = torch.randn(3, 4)
    index = torch.tensor([[0, -1], [5, -12], [5, 5]])
    source = torch.randn(3, 2)
    check_against_cpu(lambda t, i, s: t.put(i, s, accumulate=True), x, index, source)
    distinct = torch.tensor([0, -1, 5, -12])
    check_against_cpu(lambda t, i, s: t.put(i, s), x, distinct, torch.randn(4))
    check_against_cpu(lambda t, i, s: t.clone().put_(i, s, accumulate=True), x, index, source)
    flags = torch.tensor([True, False, False])
    check_against_cpu(
        lambda t, i, s: t.put(i, s, accumulate=True), flags, torch.tensor([1, 1]), flags[:2]
    )


def test_put_errors():
    x = torch.zeros(5, device=DEVICE_NAME)
    with pytest.raises(IndexError, match="tried to access index 7 on a tensor of 5 elements"):
        x.put(torch.tensor([1, 7], device=DEVICE_NAME), torch.ones(2, device=DEVICE_NAME)).cpu()
    with pytest.raises(IndexError, match="Expected source and index to have the same number"):
        x.put(torch.tensor([1, 2], device=DEVICE_NAME), torch.ones(1, device=DEVICE_NAME))


def test_max_unpool_invalid_index_raises():
    x = torch.ones(1, 1, 2, 2, device=DEVICE_NAME)
    index = torch.tensor([[[[0, 1], [2, 99]]]], device=DEVICE_NAME)
    with pytest.raises(RuntimeError, match="Found an invalid max index: 99"):
        F.max_unpool2d(x, index, 2).cpu()


def _batch_norm_forms(x, weight, bias, mean, var):
    a = aten._native_batch_norm_legit(x, weight, bias, mean, var, True, 0.2, 1e-5)
    b = aten._batch_norm_with_update(x, weight, bias, mean, var, 0.2, 1e-5)
    c = aten._batch_norm_no_update(x, weight, bias, mean, var, 0.2, 1e-5)
    return (*a, *b, *c, mean.clone(), var.clone())


def test_batch_norm_forms_update_running_stats():
    torch.manual_seed(1)
    args = (torch.randn(4, 3, 5), torch.randn(3), torch.randn(3), torch.randn(3), torch.rand(3))
    expected = _batch_norm_forms(*[a.clone() for a in args])
    with no_cpu_fallback():
        got = _batch_norm_forms(*[a.to(DEVICE_NAME) for a in args])
    for e, g in zip(expected, got):
        assert e.dtype == g.dtype
        torch.testing.assert_close(g.cpu(), e)


def test_mode_ties_and_nan():
    rows = torch.tensor([[1, 2, 2, 1, 3, 3], [5, 4, 4, 5, 0, 0], [7, 7, 7, 1, 1, 9]])
    check_against_cpu(lambda t: torch.mode(t, 1), rows)
    check_against_cpu(lambda t: torch.mode(t, 0, keepdim=True), rows)
    nan = float("nan")
    check_against_cpu(lambda t: torch.mode(t), torch.tensor([1.0, nan, nan, 2, 2]))
    check_against_cpu(lambda t: torch.nanmedian(t, 1), torch.tensor([[3.0, nan, 1], [nan] * 3]))
