"""A CUDA training script runs with ``device="cuda"`` changed to ``lx.device()``: the
host-side parts torch's generic code asks of an accelerator, each against the CPU (or
against what CUDA does where the CPU has no counterpart).

- pinned memory: ``pin_memory()``, ``is_pinned()``, ``DataLoader(pin_memory=True,
  num_workers=2)`` training equal to the CPU, ``non_blocking=True`` copies;
- ``torch.accelerator`` and ``torch.lazax``: device index, synchronize, streams and
  events with ordered semantics, memory statistics;
- aliasing: ``set_`` (tensor and storage forms) shares storage as on the CPU;
  ``data_ptr()`` raises instead of answering 0.
"""

import pytest
import torch
import torch.nn as nn
from torch.utils.data import DataLoader, TensorDataset

import lazax.modes as lx
from lazax.executor.hooks import pinned

DEV = lx.device()


# -- pinned memory -----------------------------------------------------------------


def test_pin_memory_gives_a_pinned_copy_as_on_cuda():
    x = torch.randn(4, 3)
    assert not x.is_pinned()
    p = x.pin_memory()
    assert p.is_pinned() and p is not x and not x.is_pinned()
    assert p.data_ptr() != x.data_ptr()
    torch.testing.assert_close(p, x, rtol=0, atol=0)
    assert p.pin_memory() is p  # already pinned: the tensor itself
    assert p[1:].is_pinned() and p.t().is_pinned()  # views of a pinned storage
    strided = torch.randn(3, 4).t()
    pinned_strided = strided.pin_memory()
    assert pinned_strided.stride() == strided.stride() and pinned_strided.is_pinned()
    assert torch.empty(0).pin_memory().shape == (0,)
    # autograd records the copy, as torch does
    w = torch.randn(3, requires_grad=True)
    w.pin_memory().sum().backward()
    assert w.grad.tolist() == [1.0, 1.0, 1.0]


def test_a_freed_pinned_storage_is_forgotten():
    p = torch.randn(64).pin_memory()
    address = p.untyped_storage().data_ptr()
    view = p[3:]
    del p
    assert address in pinned._PINNED  # the view keeps the storage
    del view
    assert address not in pinned._PINNED


def test_lazax_tensors_are_not_pinned_and_refuse_pinning():
    t = torch.ones(3, device=DEV)
    assert not t.is_pinned()
    with pytest.raises(RuntimeError, match=r"only dense CPU tensors can be pinned"):
        t.pin_memory()


def test_non_blocking_copies_from_pinned_memory_stay_correct():
    p = torch.arange(6.0).pin_memory()
    on_device = p.to(DEV, non_blocking=True)
    p.add_(100)  # the pin thread reuses its buffers: the copy already made is kept
    assert on_device.cpu().tolist() == [0.0, 1.0, 2.0, 3.0, 4.0, 5.0]
    back = torch.empty(6).pin_memory()
    back.copy_(on_device * 2, non_blocking=True)
    lx.wait_device_ops()
    assert back.tolist() == [0.0, 2.0, 4.0, 6.0, 8.0, 10.0]


def _model():
    torch.manual_seed(0)
    return nn.Sequential(nn.Linear(8, 16), nn.ReLU(), nn.Linear(16, 1))


def _train(device, loader):
    model = _model().to(device)
    opt = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)
    losses = []
    for x, y in loader:
        if device != "cpu":
            assert x.is_pinned() and y.is_pinned()
        x, y = x.to(device, non_blocking=True), y.to(device, non_blocking=True)
        loss = nn.functional.mse_loss(model(x), y)
        opt.zero_grad()
        loss.backward()
        opt.step()
        losses.append(loss.detach())
    return [float(v) for v in losses], [p.detach().cpu() for p in model.parameters()]


def _dataset():
    g = torch.Generator().manual_seed(1)
    x = torch.randn(48, 8, generator=g)
    return TensorDataset(x, x.sum(1, keepdim=True).sin())


@pytest.mark.parametrize("device_arg", [{}, {"pin_memory_device": "lazax"}], ids=["", "device"])
def test_a_pinned_memory_dataloader_with_workers_trains_as_on_the_cpu(device_arg):
    data = _dataset()
    cpu_losses, cpu_params = _train("cpu", DataLoader(data, batch_size=8))
    loader = DataLoader(data, batch_size=8, pin_memory=True, num_workers=2, **device_arg)
    losses, params = _train(DEV, loader)
    torch.testing.assert_close(losses, cpu_losses, rtol=1e-5, atol=1e-6)
    for got, want in zip(params, cpu_params):
        torch.testing.assert_close(got, want, rtol=1e-5, atol=1e-6)
