"""nn.EmbeddingBag on the device against the CPU: every mode, padding, per-sample
weights, the extra last offset, 2-D input, gradients; torch's offsets[0] error."""

import itertools

import pytest
import torch
import torch.nn.functional as F

DEV = "lazax"
INDICES = torch.tensor([1, 2, 4, 5, 4, 3, 9, 4])


def _run(device, weight, indices, offsets, **kwargs):
    w = weight.clone().to(device).requires_grad_()
    psw = kwargs.pop("per_sample_weights", None)
    if psw is not None:
        psw = psw.clone().to(device).requires_grad_()
    offsets = None if offsets is None else offsets.to(device)
    out = F.embedding_bag(indices.to(device), w, offsets, per_sample_weights=psw, **kwargs)
    scale = torch.arange(out.numel(), dtype=out.dtype, device=device).reshape(out.shape)
    (out * scale).sum().backward()
    grads = [w.grad] + ([psw.grad] if psw is not None else [])
    return [t.cpu() for t in (out, *grads)]


CASES = [
    (mode, last, pad, weighted)
    for mode, last, pad, weighted in itertools.product(
        ("sum", "mean", "max"), (False, True), (None, 4), (False, True)
    )
    if not (weighted and mode != "sum")
]


@pytest.mark.parametrize(("mode", "last", "pad", "weighted"), CASES, ids=str)
def test_embedding_bag_matches_the_cpu(mode, last, pad, weighted, no_fallback):
    weight = torch.randn(10, 3, generator=torch.Generator().manual_seed(0))
    offsets = torch.tensor([0, 3, 3, 8]) if last else torch.tensor([0, 3, 3, 5])  # an empty bag
    kwargs = dict(mode=mode, include_last_offset=last, padding_idx=pad)
    if weighted:
        kwargs["per_sample_weights"] = torch.rand(8, generator=torch.Generator().manual_seed(1))
    expected = _run("cpu", weight, INDICES, offsets, **kwargs)
    got = _run(DEV, weight, INDICES, offsets, **kwargs)
    for a, b in zip(got, expected):
        torch.testing.assert_close(a, b, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("mode", ["sum", "mean", "max"])
def test_embedding_bag_module_2d_input_and_bfloat16(mode, no_fallback):
    torch.manual_seed(0)
    bag = torch.nn.EmbeddingBag(12, 4, mode=mode)
    lz = torch.nn.EmbeddingBag(12, 4, mode=mode).to(DEV)
    lz.load_state_dict(bag.state_dict())
    x = torch.randint(0, 12, (5, 3))
    torch.testing.assert_close(lz(x.to(DEV)).cpu(), bag(x))
    x = torch.randint(0, 12, (6,))
    half = bag.to(torch.bfloat16)(x, torch.tensor([0, 2]))
    torch.testing.assert_close(
        lz.to(torch.bfloat16)(x.to(DEV), torch.tensor([0, 2]).to(DEV)).cpu(), half
    )


def test_scale_grad_by_freq_divides_by_each_index_count(no_fallback):
    # torch documents the inverse frequency of each index in the batch; its CPU kernel
    # gives some rows another index's count (5 and 9 below get 1/3), CUDA's the count.
    idx, offsets = INDICES, torch.tensor([0, 3, 3, 5])
    w = torch.ones(10, 1, device=DEV, requires_grad=True)
    out = F.embedding_bag(idx.to(DEV), w, offsets.to(DEV), mode="sum", scale_grad_by_freq=True)
    out.backward(torch.ones_like(out))
    counts = torch.bincount(idx, minlength=10).float()
    expected = torch.where(counts > 0, counts / counts.clamp(min=1), 0.0)
    torch.testing.assert_close(w.grad.cpu().reshape(-1), expected)


def test_offsets_must_start_at_zero():
    w = torch.randn(10, 3)
    with pytest.raises(RuntimeError, match=r"offsets\[0\] has to be 0") as cpu:
        F.embedding_bag(torch.tensor([1, 2]), w, torch.tensor([1]))
    with pytest.raises(RuntimeError) as lazax:
        F.embedding_bag(torch.tensor([1, 2]).to(DEV), w.to(DEV), torch.tensor([1]).to(DEV)).cpu()
    assert str(lazax.value).split("\n")[0] == str(cpu.value).split("\n")[0]
