"""Random lowerings: repeatable after ``torch.manual_seed``, fresh on every call, with the
right shape/dtype/distribution, and no CPU fallback: randn/rand/randint (normal_,
uniform_, random_), bernoulli, exponential_ and friends, normal with tensor parameters,
multinomial, and dropout (whose backward reuses the forward's mask)."""

import pytest
import torch
import torch.nn.functional as F

import lazax.executor  # noqa: F401  (registers the lazax device)

DEV = "lazax"


N = 4000


def test_randn_repeats_after_seed_and_differs_between_calls(no_fallback):
    torch.manual_seed(0)
    a = torch.randn(N, device=DEV).cpu()
    b = torch.randn(N, device=DEV).cpu()
    torch.manual_seed(0)
    again = torch.randn(N, device=DEV).cpu()
    torch.testing.assert_close(again, a, rtol=0, atol=0)
    assert not torch.equal(a, b)
    assert a.dtype == torch.float32 and a.shape == (N,)
    assert abs(a.mean().item()) < 0.1 and abs(a.std().item() - 1) < 0.1


@pytest.mark.parametrize("seed", [0, 2**63 - 1, 2**63, 2**64 - 1])
def test_the_rng_state_round_trips_every_seed_torch_takes(seed):
    torch.manual_seed(seed)
    state = torch.lazax.get_rng_state()
    a = torch.randn(8, device=DEV).cpu()
    torch.manual_seed(1)
    torch.lazax.set_rng_state(state)
    torch.testing.assert_close(torch.randn(8, device=DEV).cpu(), a, rtol=0, atol=0)


def test_the_rng_state_is_cuda_s_philox_layout_whose_offset_moves_the_draws():
    # torch's DTensor reads and sets state[8:].view(int64) (the offset) so that each
    # shard of a random op draws its own part; lazax's counter is that offset.
    torch.manual_seed(5)
    state = torch.lazax.get_rng_state()
    assert state.dtype == torch.uint8 and state.shape == (16,)
    assert state[:8].view(torch.int64).item() == 5 and state[8:].view(torch.int64).item() == 0
    torch.randn(4, device=DEV)
    assert torch.lazax.get_rng_state()[8:].view(torch.int64).item() == 1
    moved = state.clone()
    moved[8:] = torch.tensor([1], dtype=torch.int64).view(torch.uint8)
    torch.lazax.set_rng_state(moved)
    second = torch.randn(4, device=DEV).cpu()
    torch.lazax.set_rng_state(state)
    torch.randn(4, device=DEV)
    torch.testing.assert_close(torch.randn(4, device=DEV).cpu(), second, rtol=0, atol=0)


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16, torch.float64])
def test_normal_and_uniform(no_fallback, dtype):
    x = torch.empty(N, dtype=dtype, device=DEV)
    n = x.normal_(2.0, 3.0).cpu().double()
    assert x.dtype == dtype
    assert abs(n.mean().item() - 2) < 0.3 and abs(n.std().item() - 3) < 0.3
    u = torch.empty(N, dtype=dtype, device=DEV).uniform_(-1.0, 3.0).cpu().double()
    assert u.min() >= -1 and u.max() <= 3 and abs(u.mean().item() - 1) < 0.15
    r = torch.rand(2, 3, dtype=dtype, device=DEV)
    assert r.shape == (2, 3) and r.dtype == dtype


def test_randint_and_random_(no_fallback):
    r = torch.randint(3, 7, (N,), device=DEV).cpu()
    assert r.dtype == torch.int64 and r.min() == 3 and r.max() == 6
    r = torch.empty(N, dtype=torch.int32, device=DEV).random_(5).cpu()
    assert r.dtype == torch.int32 and r.min() == 0 and r.max() == 4
    f = torch.empty(N, device=DEV).random_().cpu()
    assert f.min() >= 0 and f.max() <= 2**24 and torch.equal(f, f.round())
    b = torch.empty(N, dtype=torch.bool, device=DEV).random_().cpu()
    assert 0.4 < b.float().mean() < 0.6
    u8 = torch.empty(N, dtype=torch.uint8, device=DEV).random_(250, None).cpu()
    assert u8.min() >= 250 and u8.max() <= 255


def test_like_factories_and_randperm(no_fallback):
    x = torch.zeros(N, dtype=torch.bfloat16, device=DEV)
    n = torch.randn_like(x)
    assert n.dtype == torch.bfloat16 and n.device == x.device
    n = n.cpu().double()
    assert abs(n.mean().item()) < 0.1 and abs(n.std().item() - 1) < 0.1
    u = torch.rand_like(x, dtype=torch.float64).cpu()
    assert u.dtype == torch.float64 and u.min() >= 0 and u.max() < 1
    r = torch.randint_like(x, 3, 7).cpu()
    assert r.dtype == torch.bfloat16 and r.min() == 3 and r.max() == 6
    r = torch.randint_like(torch.zeros(N, dtype=torch.int32, device=DEV), 5).cpu()
    assert r.dtype == torch.int32 and r.min() == 0 and r.max() == 4
    assert not torch.equal(torch.randn_like(x).cpu(), torch.randn_like(x).cpu())
    for dtype in (torch.int64, torch.float32):
        p = torch.randperm(50, dtype=dtype, device=DEV).cpu()
        assert p.dtype == dtype and sorted(p.tolist()) == list(range(50))
    assert torch.randperm(0, device=DEV).shape == (0,)


def test_bernoulli(no_fallback):
    m = torch.empty(N, device=DEV).bernoulli_(0.25).cpu()
    assert set(m.unique().tolist()) <= {0.0, 1.0} and abs(m.mean().item() - 0.25) < 0.05
    p = torch.tensor([0.0, 1.0]).repeat(N // 2).to(DEV)
    torch.testing.assert_close(torch.bernoulli(p).cpu(), p.cpu())
    t = torch.zeros(N, device=DEV).bernoulli_(torch.empty(N, device=DEV).fill_(0.75)).cpu()
    assert abs(t.mean().item() - 0.75) < 0.05


def test_other_distributions(no_fallback):
    e = torch.empty(N, device=DEV).exponential_(2.0).cpu()
    assert e.min() >= 0 and abs(e.mean().item() - 0.5) < 0.05
    g = torch.empty(N, device=DEV).geometric_(0.5).cpu()
    assert g.min() >= 1 and torch.equal(g, g.round()) and abs(g.mean().item() - 2) < 0.15
    ln = torch.empty(N, device=DEV).log_normal_(0.0, 0.5).cpu()
    assert ln.min() > 0 and abs(ln.log().mean().item()) < 0.05
    c = torch.empty(N, device=DEV).cauchy_(1.0, 0.1).cpu()
    assert abs(c.median().item() - 1) < 0.02
    mean = torch.arange(4.0).repeat(N // 4).to(DEV)
    n = torch.normal(mean, 0.1).cpu()
    assert (n - mean.cpu()).abs().max() < 1
    n = torch.normal(mean, torch.empty(N, device=DEV).fill_(0.1)).cpu()
    assert abs((n - mean.cpu()).std().item() - 0.1) < 0.02


def test_multinomial(no_fallback):
    probs = torch.tensor([[0.0, 0.2, 0.8], [0.5, 0.5, 0.0]]).to(DEV)
    draws = torch.multinomial(probs, N, replacement=True).cpu()
    assert draws.shape == (2, N) and draws.dtype == torch.int64
    assert (draws[0] != 0).all() and (draws[1] != 2).all()
    assert abs((draws[0] == 2).float().mean().item() - 0.8) < 0.05
    picks = torch.multinomial(torch.ones(6, device=DEV), 6).cpu()
    assert sorted(picks.tolist()) == list(range(6))


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_dropout_forward_and_backward(no_fallback, dtype):
    p = 0.25
    x = (torch.rand(N) + 1).to(dtype).to(DEV).requires_grad_()
    y = F.dropout(x, p, training=True)
    (y * 3).sum().backward()
    xc, yc, gc = x.detach().cpu(), y.detach().cpu(), x.grad.cpu()
    kept = yc != 0
    assert abs(kept.float().mean().item() - (1 - p)) < 0.05
    scale = 1 / (1 - p)
    torch.testing.assert_close(yc[kept], xc[kept] * scale)
    # The gradient goes through exactly the kept elements, scaled the same way.
    torch.testing.assert_close(gc, torch.where(kept, 3 * scale, 0.0).to(dtype))


def test_native_dropout_edges(no_fallback):
    x = torch.randn(100, device=DEV)
    out, mask = torch.ops.aten.native_dropout(x, 0.5, False)
    assert mask.dtype == torch.bool and mask.cpu().all()
    torch.testing.assert_close(out.cpu(), x.cpu())
    out, mask = torch.ops.aten.native_dropout(x, 1.0, True)
    assert not mask.cpu().any() and not out.cpu().any()
    torch.testing.assert_close(F.dropout(x, 0.0).cpu(), x.cpu())
    g = torch.ops.aten.native_dropout_backward(x, x > 0, 2.0).cpu()
    xc = x.cpu()
    torch.testing.assert_close(g, torch.where(xc > 0, 2 * xc, 0.0))
    flags = x > 0.5  # a bool grad gives float32 grad * mask * scale, unrounded
    g = torch.ops.aten.native_dropout_backward(flags, x > 0, 2.0)
    assert g.dtype == torch.float32
    torch.testing.assert_close(g.cpu(), torch.where(xc > 0.5, 2.0, 0.0))
