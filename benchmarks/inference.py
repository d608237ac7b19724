"""Inference throughput of the decoder (forward, no grad): torch CPU, lazax, pure JAX.

Each runner returns forward passes per second (median over timed calls after warm-up)
and the time of the first call (compilation included). Every runner keeps one call in
flight, as a serving loop would: it waits on the previous call's logits, not its own.
"""

from __future__ import annotations

import copy

import jax
import torch

import lazax.modes as lx

from .jax_decoder import make_jax_forward
from .models import Decoder
from .training import _batches, _timed_steps

__all__ = ["INFERENCE_RUNNERS"]


def _run_torch_cpu(model: Decoder, warmup: int, steps: int, progress=None) -> dict:
    data = _batches(model.cfg, 4)
    with torch.no_grad():
        return _timed_steps(lambda i: model(data[i % len(data)]), warmup, steps, progress)


def _run_lazax(model: Decoder, warmup, steps, progress, *, dynamo: bool) -> dict:
    dev = lx.device()
    model = copy.deepcopy(model).to(dev)
    forward = model
    if dynamo:
        import lazax.dynamo  # noqa: F401

        torch._dynamo.reset()
        forward = torch.compile(model, backend="lazax")
    data = [t.to(dev) for t in _batches(model.cfg, 4)]
    lx.sync(wait=True)
    compiles = lx.metrics.counter_value("UncachedCompile") or 0
    last = []

    def step(i):
        logits = forward(data[i % len(data)])
        if not dynamo:
            lx.sync()
        if last:
            lx.sync_tensors([last.pop()], wait=True)
        last.append(logits)

    with torch.no_grad():
        result = _timed_steps(step, warmup, steps, progress)
    lx.sync_tensors([last.pop()], wait=True)
    result["compiles"] = (lx.metrics.counter_value("UncachedCompile") or 0) - compiles
    return result


def _run_jax(model: Decoder, warmup: int, steps: int, progress=None) -> dict:
    forward, params = make_jax_forward(model)
    data = [jax.numpy.asarray(t.numpy()) for t in _batches(model.cfg, 4)]
    last = []

    def step(i):
        logits = forward(params, data[i % len(data)])
        if last:
            last.pop().block_until_ready()
        last.append(logits)

    result = _timed_steps(step, warmup, steps, progress)
    last.pop().block_until_ready()
    result["compiles"] = 1
    return result


INFERENCE_RUNNERS = {
    "torch_cpu": _run_torch_cpu,
    "lazy": lambda m, w, s, p=None: _run_lazax(m, w, s, p, dynamo=False),
    "dynamo": lambda m, w, s, p=None: _run_lazax(m, w, s, p, dynamo=True),
    "jax": _run_jax,
}
