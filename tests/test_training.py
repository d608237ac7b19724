"""Real models train in lazy mode and match plain torch on the CPU, step for step.

Also pins the compile counters the design promises: from the third step on a training
step is one cached graph, and a learning-rate change compiles nothing.
"""

import copy

import pytest
import torch
import torch.nn.functional as F

import lazax.modes as lx
from benchmarks.models import MLP, Decoder, DecoderConfig, lm_loss, make_batch, make_tokens

SMALL = DecoderConfig(vocab=64, d_model=32, n_heads=4, n_layers=2, seq=16, batch=4)


def counter(name):
    return lx.metrics.counter_value(name) or 0


def _mlp_step(model, opt, x, y):
    opt.zero_grad()
    loss = F.cross_entropy(model(x), y)
    loss.backward()
    opt.step()
    return loss


def _decoder_step(model, opt, tokens):
    opt.zero_grad()
    loss = lm_loss(model(tokens), tokens)
    loss.backward()
    opt.step()
    return loss


def _train(model, make_opt, batches, step, device, on_step=None):
    model = model.to(device)
    opt = make_opt(model.parameters())
    losses = []
    for i, batch in enumerate(batches):
        batch = [b.to(device) for b in batch]
        losses.append(step(model, opt, *batch))
        if device != "cpu":
            lx.sync()
        if on_step:
            on_step(i, opt)
    return [loss.item() for loss in losses], model


@pytest.mark.parametrize(
    "make_opt",
    [
        lambda p: torch.optim.AdamW(p, lr=1e-2),
        lambda p: torch.optim.SGD(p, lr=0.1, momentum=0.9),
    ],
    ids=["adamw", "sgd"],
)
def test_mlp_trains_like_cpu(make_opt, no_fallback):
    torch.manual_seed(0)
    model = MLP()
    batches = [make_batch(16, 32, 10, seed) for seed in range(10)]
    cpu_losses, cpu_model = _train(copy.deepcopy(model), make_opt, batches, _mlp_step, "cpu")
    lx_losses, lx_model = _train(copy.deepcopy(model), make_opt, batches, _mlp_step, lx.device())
    torch.testing.assert_close(lx_losses, cpu_losses, rtol=1e-4, atol=1e-5)
    for p_cpu, p_lx in zip(cpu_model.parameters(), lx_model.parameters()):
        torch.testing.assert_close(p_lx.cpu(), p_cpu, rtol=1e-4, atol=1e-5)


def _lower_lr_at_step_5(i, opt):
    if i == 5:
        for group in opt.param_groups:
            group["lr"] = 1e-3


def test_decoder_trains_like_cpu_and_compiles_once(no_fallback):
    torch.manual_seed(0)
    model = Decoder(SMALL)
    batches = [(make_tokens(SMALL, seed),) for seed in range(10)]

    def make_opt(p):
        return torch.optim.AdamW(p, lr=3e-3)

    cpu_losses, _ = _train(
        copy.deepcopy(model), make_opt, batches, _decoder_step, "cpu", _lower_lr_at_step_5
    )
    seen = []

    def on_step(i, opt):
        seen.append((counter("UncachedCompile"), counter("CachedCompile")))
        _lower_lr_at_step_5(i, opt)  # a new learning rate must not recompile

    lx_losses, _ = _train(
        copy.deepcopy(model), make_opt, batches, _decoder_step, lx.device(), on_step
    )
    torch.testing.assert_close(lx_losses, cpu_losses, rtol=1e-4, atol=1e-5)
    uncached = [u for u, _ in seen]
    cached = [c for _, c in seen]
    # From the third step on: no new compile, one cached graph per step.
    assert uncached[2:] == [uncached[2]] * (len(seen) - 2), seen
    assert [b - a for a, b in zip(cached[2:], cached[3:])] == [1] * (len(seen) - 3), seen


def test_print_in_the_middle_of_a_step(capsys, no_fallback):
    torch.manual_seed(0)
    model = MLP()
    x, y = make_batch(8, 32, 10, 0)
    cpu_model = copy.deepcopy(model)
    lx_model = copy.deepcopy(model).to(lx.device())
    cpu_opt = torch.optim.SGD(cpu_model.parameters(), lr=0.1)
    lx_opt = torch.optim.SGD(lx_model.parameters(), lr=0.1)

    cpu_loss = _mlp_step(cpu_model, cpu_opt, x, y)
    lx_opt.zero_grad()
    loss = F.cross_entropy(lx_model(x.to(lx.device())), y.to(lx.device()))
    print(loss)  # forces a sync of the loss's graph halfway through the step
    loss.backward()
    lx_opt.step()
    lx.sync()
    printed = capsys.readouterr().out
    assert printed.startswith("tensor(") and "device='lazax:0'" in printed
    assert float(printed.split("(")[1].split(",")[0]) == pytest.approx(cpu_loss.item(), rel=1e-4)
    for p_cpu, p_lx in zip(cpu_model.parameters(), lx_model.parameters()):
        torch.testing.assert_close(p_lx.cpu(), p_cpu, rtol=1e-4, atol=1e-5)
