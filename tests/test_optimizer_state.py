"""An optimizer's first step compiles no graph of its own (``dispatch.optimizer_state``).

torch.optim makes Adam's and AdamW's moments inside the first ``step()`` with
``zeros_like(p)``; lazax makes those on the device as inputs, so the first step's graph
is the steady step's: one compile for a training loop, with values equal to the CPU's.
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


@pytest.mark.parametrize("name", ["AdamW", "Adam", "AdamW-foreach-off", "Adamax"])
def test_a_training_loop_compiles_one_graph_and_matches_the_cpu(name):
    torch.manual_seed(0)
    reference = torch.nn.Sequential(
        torch.nn.Linear(12, 24), torch.nn.GELU(), torch.nn.LayerNorm(24), torch.nn.Linear(24, 5)
    )
    model = copy.deepcopy(reference).to(DEV)  # left pending: the first sync is the step's
    kind, _, foreach = name.partition("-")
    options = {"lr": 1e-2} | ({"foreach": False} if foreach else {})
    optimizers = [getattr(torch.optim, kind)(m.parameters(), **options) for m in (reference, model)]
    batches = [(torch.randn(6, 12), torch.randint(0, 5, (6,))) for _ in range(4)]
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
    assert _uncached() - before == 1
    for p, q in zip(reference.parameters(), model.parameters(), strict=True):
        torch.testing.assert_close(q.detach().cpu(), p.detach(), rtol=1e-5, atol=1e-6)
    state = optimizers[1].state[next(model.parameters())]
    assert state["exp_avg"].device == DEV


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
