"""torch_xla.utils.checkpoint over lazax: torch's checkpointing on the device, gradients
as on the CPU without checkpointing; the device RNG replayed in the recomputation."""

import pytest
import torch
import torch_xla
from torch_xla.utils.checkpoint import checkpoint, checkpoint_sequential

import lazax.modes as lx

DEV = lx.device().type


def _blocks(dropout=0.0):
    torch.manual_seed(0)
    return torch.nn.Sequential(
        *[
            torch.nn.Sequential(torch.nn.Linear(8, 8), torch.nn.Tanh(), torch.nn.Dropout(dropout))
            for _ in range(3)
        ]
    )


def _data():
    g = torch.Generator().manual_seed(1)
    return torch.randn(5, 8, generator=g), torch.randn(5, 8, generator=g)


def _grads(model, run, x, y):
    loss = torch.nn.functional.mse_loss(run(model, x), y)
    loss.backward()
    torch_xla.sync()
    return loss.detach().cpu(), [p.grad.cpu() for p in model.parameters()]


def _cpu_grads():
    x, y = _data()
    return _grads(_blocks(), lambda m, v: m(v), x, y)


def _each_block(use_reentrant, **kwargs):
    def run(model, x):
        for block in model:
            x = checkpoint(block, x, use_reentrant=use_reentrant, **kwargs)
        return x

    return run


def _assert_same(got, want):
    torch.testing.assert_close(got[0], want[0], rtol=1e-5, atol=1e-6)
    for g, w in zip(got[1], want[1]):
        torch.testing.assert_close(g, w, rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("use_reentrant", [False, True])
def test_checkpoint_each_block_gives_the_cpus_gradients(use_reentrant):
    dev = torch_xla.device()
    x, y = _data()
    x = x.to(dev).requires_grad_(use_reentrant)  # reentrant needs an input that requires grad
    got = _grads(_blocks().to(dev), _each_block(use_reentrant), x, y.to(dev))
    assert all(g.device.type == "cpu" for g in got[1])  # copied back by _grads
    _assert_same(got, _cpu_grads())


@pytest.mark.parametrize("use_reentrant", [False, True])
def test_checkpoint_sequential_gives_the_cpus_gradients(use_reentrant):
    dev = torch_xla.device()
    x, y = _data()
    x = x.to(dev).requires_grad_(use_reentrant)

    def run(model, v):
        return checkpoint_sequential(model, 2, v, use_reentrant=use_reentrant)

    _assert_same(_grads(_blocks().to(dev), run, x, y.to(dev)), _cpu_grads())
    with pytest.raises(ValueError, match="Unexpected keyword arguments: spam"):  # as torch's
        checkpoint_sequential(_blocks().to(dev), 2, x, use_reentrant=use_reentrant, spam=1)


def test_checkpoint_recomputes_in_the_backward():
    calls = []

    def block(v):
        calls.append(v.device.type)
        return torch.tanh(v) * 2

    v = torch.randn(3, device=torch_xla.device(), requires_grad=True)
    checkpoint(block, v, use_reentrant=False).sum().backward()
    torch_xla.sync()
    assert calls == [DEV, DEV]  # forward, then the recomputation in the backward
    torch.testing.assert_close(v.grad.cpu(), 2 * (1 - torch.tanh(v.detach().cpu()) ** 2))


def test_use_reentrant_left_out_is_torchs_choice():
    # torch warns (2.13) or raises; the same function here gives the same answer
    cpu = torch.randn(3, requires_grad=True)
    with pytest.warns(UserWarning, match="use_reentrant") as seen:
        try:
            torch.utils.checkpoint.checkpoint(torch.tanh, cpu)
            torch_raised = None
        except Exception as error:  # a later torch refuses a missing use_reentrant
            torch_raised = type(error)
        warnings_torch = len(seen)
        v = torch.randn(3, device=torch_xla.device(), requires_grad=True)
        if torch_raised is None:
            checkpoint(torch.tanh, v)
        else:
            with pytest.raises(torch_raised):
                checkpoint(torch.tanh, v)
    assert len(seen) == 2 * warnings_torch


def test_dropout_replays_the_device_rng_in_the_recomputation():
    dev = torch_xla.device()
    x, y = _data()

    def grads(run):
        model = _blocks(dropout=0.5).to(dev)
        torch_xla.manual_seed(7)
        return _grads(model, run, x.to(dev).requires_grad_(), y.to(dev))

    plain = grads(lambda m, v: m(v))
    _assert_same(grads(_each_block(False)), plain)
    _assert_same(grads(_each_block(True)), plain)
    _assert_same(grads(lambda m, v: checkpoint_sequential(m, 3, v, use_reentrant=False)), plain)
    # without preserve_rng_state the recomputation draws new masks: the check above can fail
    other = grads(_each_block(False, preserve_rng_state=False))
    assert not all(torch.equal(g, w) for g, w in zip(other[1], plain[1]))
