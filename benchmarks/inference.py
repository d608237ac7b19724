"""Inference throughput of a workload (forward, no grad): torch CPU, lazax, pure JAX.

Each runner returns forward passes per second (median over timed calls after warm-up)
and the time of the first call (compilation included). Every runner keeps one call in
flight, as a serving loop would: it waits on the previous call's output, not its own.
"""

from __future__ import annotations

import copy

import jax
import torch

import lazax.modes as lx

from .training import timed_steps
from .workloads import Workload

__all__ = ["INFERENCE_RUNNERS"]


def _inputs(work: Workload) -> list[torch.Tensor]:
    return [batch[0] for batch in work.batches]  # the model's input, not the labels


def _run_torch_cpu(work: Workload, warmup: int, steps: int, progress=None) -> dict:
    model, data = copy.deepcopy(work.model).eval(), _inputs(work)
    with torch.no_grad():
        return timed_steps(lambda i: model(data[i % len(data)]), warmup, steps, progress)


def _run_lazax(work: Workload, warmup, steps, progress, *, dynamo: bool) -> dict:
    dev = lx.device()
    model = copy.deepcopy(work.model).eval().to(dev)
    forward = model
    if dynamo:
        torch._dynamo.reset()
        forward = torch.compile(model, backend="lazax")
    data = [t.to(dev) for t in _inputs(work)]
    lx.sync(wait=True)
    compiles = lx.metrics.counter_value("UncachedCompile") or 0
    last = []

    def step(i):
        out = forward(data[i % len(data)])
        if not dynamo:
            lx.sync()
        if last:
            lx.sync_tensors([last.pop()], wait=True)
        last.append(out)

    with torch.no_grad():
        result = timed_steps(step, warmup, steps, progress)
    lx.sync_tensors([last.pop()], wait=True)
    result["compiles"] = (lx.metrics.counter_value("UncachedCompile") or 0) - compiles
    return result


def _run_jax(work: Workload, warmup: int, steps: int, progress=None) -> dict:
    forward, params = work.jax_forward()
    data = [jax.numpy.asarray(t.numpy()) for t in _inputs(work)]
    last = []

    def step(i):
        out = forward(params, data[i % len(data)])
        if last:
            last.pop().block_until_ready()
        last.append(out)

    result = timed_steps(step, warmup, steps, progress)
    last.pop().block_until_ready()
    result["compiles"] = 1
    return result


INFERENCE_RUNNERS = {
    "torch_cpu": _run_torch_cpu,
    "lazy": lambda w, warmup, steps, p=None: _run_lazax(w, warmup, steps, p, dynamo=False),
    "dynamo": lambda w, warmup, steps, p=None: _run_lazax(w, warmup, steps, p, dynamo=True),
    "jax": _run_jax,
}
