"""torch.utils.checkpoint on lazax: the same values and gradients as on the CPU, and a
recomputation that reaches XLA behind optimization barriers, as jax.checkpoint's does
(without them XLA merges it back into the forward and no memory is saved)."""

from __future__ import annotations

import copy

import pytest
import torch
import torch.nn.functional as F
from torch.utils.checkpoint import checkpoint

import lazax.modes as lx
from lazax.modes.testing import last_program

DEV = lx.device()


class Stack(torch.nn.Module):
    """Linear + GELU blocks, each optionally under torch.utils.checkpoint."""

    def __init__(self, width: int = 32, depth: int = 8, reentrant: bool | None = None):
        super().__init__()
        self.blocks = torch.nn.ModuleList(
            torch.nn.Sequential(torch.nn.Linear(width, width), torch.nn.GELU())
            for _ in range(depth)
        )
        self.reentrant = reentrant  # None: no checkpointing

    def forward(self, x):
        for block in self.blocks:
            if self.reentrant is None:
                x = block(x)
            else:
                x = checkpoint(block, x, use_reentrant=self.reentrant)
        return x


def _step(model, opt, x, y):
    opt.zero_grad(set_to_none=True)
    loss = F.mse_loss(model(x), y)
    loss.backward()
    opt.step()
    return loss


@pytest.mark.parametrize("mode", ["lazy", "eager", "compile"])
@pytest.mark.parametrize("reentrant", [False, True], ids=["non_reentrant", "reentrant"])
def test_checkpointed_training_matches_cpu(mode, reentrant):
    torch.manual_seed(0)
    ref = Stack(16, 4, reentrant)
    model = copy.deepcopy(ref).to(DEV)
    ref_opt = torch.optim.SGD(ref.parameters(), lr=0.05)
    opt = torch.optim.SGD(model.parameters(), lr=0.05)
    # The reentrant form needs an input that requires grad to run the backward at all.
    x = torch.randn(8, 16, requires_grad=reentrant)
    y = torch.randn(8, 16)
    for _ in range(3):
        ref_loss = _step(ref, ref_opt, x, y)
        xd = x.detach().to(DEV).requires_grad_(reentrant)

        def step(xd=xd):
            return _step(model, opt, xd, y.to(DEV))

        if mode == "eager":
            with lx.eager_mode_context(True):
                loss = step()
        elif mode == "compile":
            loss = lx.compile(step)()
        else:
            loss = step()
            lx.sync()
        torch.testing.assert_close(loss.cpu(), ref_loss.detach(), rtol=1e-5, atol=1e-6)
    for p_ref, p in zip(ref.parameters(), model.parameters()):
        torch.testing.assert_close(p.cpu(), p_ref.detach(), rtol=1e-5, atol=1e-6)


def _lowered_program(reentrant, input_grad: bool) -> str:
    """The StableHLO that lazax hands XLA for one lazy training step of the stack."""
    torch.manual_seed(0)
    model = Stack(32, 8, reentrant).to(DEV)
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    x = torch.randn(16, 32).to(DEV).requires_grad_(input_grad)
    y = torch.randn(16, 32).to(DEV)
    lx.sync()
    return last_program(lambda: lx.compile(lambda: _step(model, opt, x, y), name="probe")())


def test_the_recomputation_reaches_xla_behind_optimization_barriers():
    # What jax.checkpoint hands XLA too: the recomputed forward (8 blocks: 8 more dot
    # ops than the step without checkpointing) on inputs behind optimization barriers,
    # which XLA's common-subexpression elimination does not see through. (XLA's CPU
    # pipeline drops the barriers before it merges, for jax.checkpoint as for lazax: on
    # the CPU the optimized program recomputes nothing; GPU and TPU keep them.)
    for reentrant in (False, True):
        # The reentrant form needs an input that requires grad (one more dot: its grad).
        plain = _lowered_program(None, input_grad=reentrant)
        assert plain.count("optimization_barrier") == 0
        text = _lowered_program(reentrant, input_grad=reentrant)
        assert text.count("stablehlo.dot_general") == plain.count("stablehlo.dot_general") + 8
        assert text.count("stablehlo.optimization_barrier") == 8, reentrant


@pytest.mark.parametrize("reentrant", [False, True])
def test_dropout_inside_a_checkpoint_draws_the_same_mask_in_the_recomputation(reentrant):
    # torch replays a device's RNG only where its module says `_initialized`: without it
    # the backward's recomputation drew a new mask and the gradients were wrong (silently)
    block = torch.nn.Sequential(torch.nn.Linear(16, 16), torch.nn.Dropout(0.5)).to(DEV)
    x = torch.randn(8, 16).to(DEV).requires_grad_()  # reentrant needs an input that does
    grads = []
    for checkpointed in (False, True):
        # the same seed for both runs: equal masks when the RNG is replayed
        torch.manual_seed(3)
        torch.get_device_module(DEV.type).manual_seed(3)
        block.zero_grad()
        out = checkpoint(block, x, use_reentrant=reentrant) if checkpointed else block(x)
        out.square().sum().backward()
        grads.append(block[0].weight.grad.cpu())
    torch.testing.assert_close(grads[1], grads[0])
