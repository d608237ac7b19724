"""Every device index, as on cuda: a tensor made on or moved to ``lazax:N`` lives and runs
on device N (its buffer is there); a graph of tensors on one device compiles and runs
for that device, in every mode; tensors on two lazax devices in one op raise torch's
error; ``.to(lazax:M)`` and ``copy_`` copy between devices; a 0-dim CPU tensor follows
the op's device; ``lx.memory_allocated(N)`` counts device N."""

from __future__ import annotations

import copy

import pytest
import torch
import torch.nn as nn

import lazax.modes as lx
from lazax.modes.testing import MODES, train_in_mode

pytestmark = pytest.mark.skipif(
    lx.device_count() < 3, reason="needs 3 devices (the root conftest.py sets XLA_FLAGS)"
)


def where(t: torch.Tensor) -> int:
    """The index of the device holding ``t``'s buffer."""
    (device,) = lx.to_jax(t).devices()
    return device.id  # one process: jax's ids are lazax's indices


def test_factories_and_uploads_live_on_their_device():
    d2 = lx.device(2)
    for t in (
        torch.ones(3, device=d2) * 2,
        torch.arange(4, device=d2),  # a program with no inputs
        torch.full((2,), 3.0, device=d2),
        torch.randn(2, device=d2),
        torch.tensor([1.0, 2.0]).to(d2),
        torch.empty(2, device=d2).fill_(1.0),
    ):
        assert t.device == d2
        assert where(t) == 2


@pytest.mark.parametrize("mode", MODES)
def test_a_model_on_lazax_1_trains_as_on_the_cpu(mode):
    torch.manual_seed(0)
    cpu = nn.Sequential(nn.Linear(6, 16), nn.Tanh(), nn.Linear(16, 3))
    model = copy.deepcopy(cpu).to(lx.device(1))
    g = torch.Generator().manual_seed(1)
    batches = [(torch.randn(8, 6, generator=g), torch.randn(8, 3, generator=g)) for _ in range(3)]
    expected = train_in_mode(cpu, batches, "cpu", torch.optim.AdamW(cpu.parameters(), lr=1e-2))
    opt = torch.optim.AdamW(model.parameters(), lr=1e-2)
    got = train_in_mode(model, batches, mode, opt, device=lx.device(1))
    torch.testing.assert_close(got, expected, rtol=1e-4, atol=1e-5)
    for p in list(model.parameters()) + [opt.state[p]["exp_avg"] for p in model.parameters()]:
        assert p.device == lx.device(1) and where(p) == 1


def test_tensors_on_two_devices_raise_torchs_error_at_the_op():
    a = torch.ones(3, device=lx.device(0))
    b = torch.ones(3, device=lx.device(1))
    message = (
        "Expected all tensors to be on the same device, but found at least two devices, "
        "lazax:0 and lazax:1!"
    )
    with pytest.raises(RuntimeError, match=message):
        a + b
    with pytest.raises(RuntimeError, match=message):
        b.add_(a)
    torch.testing.assert_close(b.cpu(), torch.ones(3))  # nothing written


def test_moves_and_copies_between_devices():
    a = torch.arange(6.0, device=lx.device(1)).reshape(2, 3)
    b = a.to(lx.device(2))
    assert b.device == lx.device(2) and where(b) == 2
    c = a.t().to(lx.device(0), torch.float64)  # a view, with a dtype change
    assert c.device == lx.device(0) and c.dtype == torch.float64 and where(c) == 0
    torch.testing.assert_close(c.cpu(), torch.arange(6.0).reshape(2, 3).t().double())
    z = torch.zeros(2, 3, device=lx.device(2))
    z.copy_(a)
    assert where(z) == 2
    torch.testing.assert_close(z.cpu(), a.cpu())
    a.add_(1)  # the copies are copies
    torch.testing.assert_close(b.cpu(), torch.arange(6.0).reshape(2, 3))


def test_a_zero_dim_cpu_tensor_follows_the_ops_device():
    x = torch.ones(3, device=lx.device(2))
    y = x * torch.tensor(4.0)
    assert y.device == lx.device(2) and where(y) == 2
    torch.testing.assert_close(y.cpu(), torch.full((3,), 4.0))


def test_memory_is_counted_on_its_device():
    before = [lx.memory_allocated(lx.device(i)) for i in range(3)]
    t = torch.ones(1 << 16, device=lx.device(2)) + 1
    lx.sync()
    after = [lx.memory_allocated(lx.device(i)) for i in range(3)]
    assert after[2] - before[2] >= t.numel() * 4
    assert after[0] == before[0] and after[1] == before[1]
    del t


def test_a_factory_without_an_index_uses_the_current_device():
    with torch.accelerator.device_index(2):
        t = torch.ones(3, device="lazax")
    assert t.device == lx.device(2) and where(t) == 2
    assert torch.zeros(1, device="lazax").device == lx.device(0)  # restored after the block
