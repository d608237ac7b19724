"""An optimizer's first step compiles no graph of its own (``dispatch.optimizer_state``).

torch.optim makes Adam's and AdamW's moments inside the first ``step()`` with
``zeros_like(p)``; lazax makes those on the device as inputs, so the first step's graph
is the steady step's: one compile for a training loop, with values equal to the CPU's.
SGD's momentum buffer (a copy of the first gradient in torch) starts as zeros on the
device, which the later steps' formula turns into that gradient.
"""

from __future__ import annotations

import copy

import pytest
import torch
import torch.nn.functional as F

import lazax.modes as lx

DEV = lx.device()


def _uncached() -> int:
    return lx.metrics.counter_value("UncachedCompile") or 0


def _train_beside_the_cpu(kind: str, options: dict, width: int, steps: int = 4, lazax_only=None):
    """``steps`` steps of one model on the CPU and a copy on lazax, each by its own
    ``torch.optim.<kind>(**options)`` (``lazax_only``: more options for lazax's, which
    the CPU refuses); the two models, optimizers and the compiles. Each
    test gives its own ``width`` (the hidden size): a graph another test compiled first
    would be found in the process's cache and counted as no compile."""
    torch.manual_seed(0)
    reference = torch.nn.Sequential(
        torch.nn.Linear(12, width),
        torch.nn.GELU(),
        torch.nn.LayerNorm(width),
        torch.nn.Linear(width, 5),
    )
    model = copy.deepcopy(reference).to(DEV)  # left pending: the first sync is the step's
    optimizers = [
        getattr(torch.optim, kind)(reference.parameters(), **options),
        getattr(torch.optim, kind)(model.parameters(), **options, **(lazax_only or {})),
    ]
    batches = [(torch.randn(6, 12), torch.randint(0, 5, (6,))) for _ in range(steps)]
    before = _uncached()
    for x, y in batches:
        for m, opt, (a, b) in (
            (reference, optimizers[0], (x, y)),
            (model, optimizers[1], (x.to(DEV), y.to(DEV))),
        ):
            opt.zero_grad()
            F.cross_entropy(m(a), b).backward()
            opt.step()
        lx.sync()
    for p, q in zip(reference.parameters(), model.parameters(), strict=True):
        torch.testing.assert_close(q.detach().cpu(), p.detach(), rtol=1e-5, atol=1e-6)
    return reference, model, optimizers, _uncached() - before


ADAMS = {
    "AdamW": {},
    "Adam": {},
    "AdamW-foreach-off": {"foreach": False},
    "Adamax": {},
    "AdamW-fused": {"fused": True},  # its step count: a 0-dim tensor on the device
    "Adam-capturable": {},  # (lazax's alone: the CPU cannot capture)
}


@pytest.mark.parametrize("name", ADAMS)
def test_a_training_loop_compiles_one_graph_and_matches_the_cpu(name):
    kind = name.partition("-")[0]
    options = {"lr": 1e-2} | ADAMS[name]
    width = 24 + list(ADAMS).index(name)
    lazax_only = {"capturable": True} if name.endswith("capturable") else None
    _, model, optimizers, compiles = _train_beside_the_cpu(kind, options, width, 4, lazax_only)
    assert compiles == 1
    state = optimizers[1].state[next(model.parameters())]
    assert state["exp_avg"].device == DEV


SGDS = {
    "foreach": {"momentum": 0.9},
    "for-loop": {"momentum": 0.9, "foreach": False},
    "nesterov": {"momentum": 0.9, "nesterov": True, "weight_decay": 1e-3},
}


@pytest.mark.parametrize("name", SGDS)
def test_sgd_with_momentum_compiles_one_graph_and_keeps_torchs_buffers(name):
    options = {"lr": 0.1} | SGDS[name]
    width = 40 + list(SGDS).index(name)
    reference, model, optimizers, compiles = _train_beside_the_cpu("SGD", options, width)
    assert compiles == 1
    for p, q in zip(reference.parameters(), model.parameters(), strict=True):
        cpu, ours = (opt.state[t]["momentum_buffer"] for opt, t in zip(optimizers, (p, q)))
        assert ours.device == DEV
        torch.testing.assert_close(ours.cpu(), cpu, rtol=1e-5, atol=1e-6)


def test_sgd_buffer_after_one_step_is_the_gradient():
    options = {"lr": 0.1, "momentum": 0.9}
    _, model, optimizers, _ = _train_beside_the_cpu("SGD", options, width=48, steps=1)
    for p in model.parameters():
        assert torch.equal(optimizers[1].state[p]["momentum_buffer"].cpu(), p.grad.cpu())


def test_sgd_with_dampening_keeps_torchs_first_step():
    # Dampening applies from the second step on: a zero buffer would dampen the first.
    options = {"lr": 0.1, "momentum": 0.9, "dampening": 0.5}
    _, _, _, compiles = _train_beside_the_cpu("SGD", options, width=49)
    assert compiles == 2  # torch's first step (a copy of the gradient), then the steady one


class _MakesState(torch.optim.Optimizer):
    """Makes a buffer per parameter in its step, and does nothing else."""

    def __init__(self, params):
        super().__init__(params, {})

    def step(self, closure=None):
        for group in self.param_groups:
            for p in group["params"]:
                self.state[p]["buffer"] = torch.zeros_like(p, dtype=torch.float64)


def test_state_made_in_a_step_is_device_data_and_nothing_else_is():
    w = torch.nn.Parameter(torch.randn(3, 4).to(DEV))
    lx.sync()
    opt = _MakesState([w])
    lx.metrics.clear_all()
    opt.step()
    buffer = opt.state[w]["buffer"]
    assert lx.holds_device_data(buffer)  # made at once, no graph ran
    assert lx.metrics.metric_data("ExecuteTime") is None
    assert buffer.dtype == torch.float64 and buffer.shape == (3, 4)
    assert torch.equal(buffer.cpu(), torch.zeros(3, 4, dtype=torch.float64))
    outside = torch.zeros_like(w)  # not in a step: an op of the pending graph
    assert not lx.holds_device_data(outside)
    pending = w * 2  # a parameter's pending value: traced as usual
    assert not lx.holds_device_data(torch.zeros_like(pending))
