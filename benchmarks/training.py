"""Training-step throughput of the decoder: torch CPU, each lazax mode, pure JAX.

Each runner returns steps/s (median over timed steps after warm-up), time to the first
step (which includes compilation), and its compile count where it has one. Tokens/s is
steps/s times batch times sequence length.
"""

from __future__ import annotations

import copy
import statistics
import time

import jax
import torch

import lazax.modes as lx

from .jax_decoder import make_jax_train_step
from .models import Decoder, DecoderConfig, lm_loss, make_tokens

__all__ = ["run_compile", "run_dynamo", "run_eager", "run_jax", "run_lazy", "run_torch_cpu"]

LR = 1e-3


def _timed_steps(step, warmup: int, steps: int, progress=None) -> dict:
    start = time.perf_counter()
    step(0)
    first = time.perf_counter() - start
    for i in range(1, warmup):
        step(i)
        if progress:
            progress()
    samples = []
    for i in range(steps):
        t0 = time.perf_counter()
        step(warmup + i)
        samples.append(time.perf_counter() - t0)
        if progress:
            progress()
    return {"first_step_s": first, "steps_per_s": 1.0 / statistics.median(samples)}


def _batches(cfg: DecoderConfig, n: int) -> list[torch.Tensor]:
    return [make_tokens(cfg, seed) for seed in range(n)]


def _model_loss(model, tokens):
    return lm_loss(model(tokens), tokens)


def _train_step(model, opt, loss_fn=_model_loss):
    """The plain torch training step every mode runs; returns the loss tensor."""

    def step(tokens):
        opt.zero_grad()
        loss = loss_fn(model, tokens)
        loss.backward()
        opt.step()
        return loss

    return step


def run_torch_cpu(model: Decoder, warmup: int, steps: int, progress=None) -> dict:
    model = copy.deepcopy(model)
    train = _train_step(model, torch.optim.AdamW(model.parameters(), lr=LR))
    data = _batches(model.cfg, 4)
    return _timed_steps(lambda i: train(data[i % len(data)]).item(), warmup, steps, progress)


def _run_lazax(
    model: Decoder, warmup, steps, progress, *, eager: bool, wrap, in_flight: bool, loss_fn=None
):
    """One lazax mode: ``wrap`` turns the torch step into the mode's step (adds
    ``sync()``, or ``compile``); ``in_flight`` keeps one step running while the next
    is traced (waiting on the previous loss), else each step waits for its own loss."""
    with lx.eager_mode_context(eager):
        dev = lx.device()
        model = copy.deepcopy(model).to(dev)
        opt = torch.optim.AdamW(model.parameters(), lr=LR)
        train = wrap(_train_step(model, opt, loss_fn or _model_loss))
        data = [t.to(dev) for t in _batches(model.cfg, 4)]
        lx.sync(wait=True)
        compiles = lx.metrics.counter_value("UncachedCompile") or 0
        last = []

        def step(i):
            loss = train(data[i % len(data)])
            if not in_flight:
                loss.item()
                return
            if last:
                last.pop().item()
            last.append(loss)

        result = _timed_steps(step, warmup, steps, progress)
        if last:
            last.pop().item()
        result["compiles"] = (lx.metrics.counter_value("UncachedCompile") or 0) - compiles
    return result


def _with_sync(train):
    def step(tokens):
        loss = train(tokens)
        lx.sync()
        return loss

    return step


def run_lazy(model: Decoder, warmup: int, steps: int, progress=None) -> dict:
    """Lazy mode, ``sync()`` after each step."""
    return _run_lazax(model, warmup, steps, progress, eager=False, wrap=_with_sync, in_flight=True)


def run_eager(model: Decoder, warmup: int, steps: int, progress=None) -> dict:
    """Every op runs at once (compiled once per op shape); no sync needed."""
    return _run_lazax(model, warmup, steps, progress, eager=True, wrap=lambda f: f, in_flight=False)


def run_compile(model: Decoder, warmup: int, steps: int, progress=None) -> dict:
    """``lx.compile(step)`` with eager mode on outside it: one graph per step."""
    return _run_lazax(model, warmup, steps, progress, eager=True, wrap=lx.compile, in_flight=True)


def run_dynamo(model: Decoder, warmup: int, steps: int, progress=None) -> dict:
    """``torch.compile(loss, backend="lazax")``: forward and backward graphs executed by
    hash; the optimizer step is lazy, ``sync()`` after each step."""
    import lazax.dynamo  # noqa: F401  (registers the backend; the entry point would too)

    torch._dynamo.reset()
    loss_fn = torch.compile(_model_loss, backend="lazax")
    return _run_lazax(
        model,
        warmup,
        steps,
        progress,
        eager=False,
        wrap=_with_sync,
        in_flight=True,
        loss_fn=loss_fn,
    )


def run_jax(model: Decoder, warmup: int, steps: int, progress=None) -> dict:
    train_step, state = make_jax_train_step(model, lr=LR)
    data = [jax.numpy.asarray(t.numpy()) for t in _batches(model.cfg, 4)]
    holder = [state, None]

    def step(i):
        new_state, loss = train_step(holder[0], data[i % len(data)])
        if holder[1] is not None:
            holder[1].block_until_ready()  # same one-step-in-flight policy as lazax
        holder[0], holder[1] = new_state, loss

    result = _timed_steps(step, warmup, steps, progress)
    holder[1].block_until_ready()
    result["compiles"] = 1
    return result
