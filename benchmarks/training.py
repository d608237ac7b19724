"""Training-step throughput of a workload: torch CPU, each lazax mode, pure JAX.

Each runner takes a ``Workload`` and returns steps/s (median over timed steps after
warm-up), the time of the first step (compilation included) and its compile count
where it has one. Items/s (tokens, images) is steps/s times the workload's items per
step. Lazy, compile and the dynamo modes keep one step in flight (the next step is traced while
the previous one runs, waiting on the previous loss); eager waits on each step's loss.
"""

from __future__ import annotations

import copy
import statistics
import time

import jax
import torch

import lazax.modes as lx

from .workloads import Workload

__all__ = [
    "TRAINING_RUNNERS",
    "run_compile",
    "run_dynamo",
    "run_dynamo_step",
    "run_eager",
    "run_jax",
    "run_lazy",
    "run_torch_cpu",
    "run_torch_cpu_1thread",
    "timed_steps",
]


def timed_steps(step, warmup: int, steps: int, progress=None) -> dict:
    start = time.perf_counter()
    step(0)
    first = time.perf_counter() - start
    if progress:
        progress()
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


def _train_step(model, opt, loss_fn):
    """The plain torch training step every mode runs; returns the loss tensor."""

    def step(*batch):
        opt.zero_grad()
        loss = loss_fn(model, *batch)
        loss.backward()
        opt.step()
        return loss

    return step


def _whole_step(model, opt, loss_fn):
    """The README's recipe for ``torch.compile`` of a whole training step: forward and
    backward in a function of their own (the loss leaves it detached), then the
    optimizer's step and ``zero_grad``; dynamo captures two graphs."""

    def forward_backward(*batch):
        loss = loss_fn(model, *batch)
        loss.backward()
        return loss.detach()

    def step(*batch):
        value = forward_backward(*batch)
        opt.step()
        opt.zero_grad()
        return value

    return step


def run_torch_cpu(work: Workload, warmup: int, steps: int, progress=None) -> dict:
    model = copy.deepcopy(work.model)
    train = _train_step(model, work.make_optimizer(model.parameters()), work.loss)
    data = work.batches
    return timed_steps(lambda i: train(*data[i % len(data)]).item(), warmup, steps, progress)


def run_torch_cpu_1thread(work: Workload, warmup: int, steps: int, progress=None) -> dict:
    """Plain torch on the CPU with one intra-op thread: a host-bound reference."""
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        return run_torch_cpu(work, warmup, steps, progress)
    finally:
        torch.set_num_threads(threads)


def _run_lazax(
    work: Workload, warmup, steps, progress, *, eager, wrap, in_flight, loss_fn=None,
    make_step=_train_step,
):  # fmt: skip
    """One lazax mode: ``wrap`` turns the torch step into the mode's step (adds
    ``sync()``, or ``compile``); ``in_flight`` keeps one step running while the next
    is traced (waiting on the previous loss), else each step waits for its own loss."""
    with lx.eager_mode_context(eager):
        dev = lx.device()
        model = copy.deepcopy(work.model).to(dev)
        opt = work.make_optimizer(model.parameters())
        train = wrap(make_step(model, opt, loss_fn or work.loss))
        data = [tuple(t.to(dev) for t in batch) for batch in work.batches]
        lx.sync(wait=True)
        compiles = lx.metrics.counter_value("UncachedCompile") or 0
        last = []

        def step(i):
            loss = train(*data[i % len(data)])
            if not in_flight:
                loss.item()
                return
            if last:
                last.pop().item()
            last.append(loss)

        result = timed_steps(step, warmup, steps, progress)
        if last:
            last.pop().item()
        result["compiles"] = (lx.metrics.counter_value("UncachedCompile") or 0) - compiles
    return result


def _with_sync(train):
    def step(*batch):
        loss = train(*batch)
        lx.sync()
        return loss

    return step


def run_lazy(work: Workload, warmup: int, steps: int, progress=None) -> dict:
    """Lazy mode, ``sync()`` after each step."""
    return _run_lazax(work, warmup, steps, progress, eager=False, wrap=_with_sync, in_flight=True)


def run_eager(work: Workload, warmup: int, steps: int, progress=None) -> dict:
    """Every op runs at once (compiled once per op shape); no sync needed."""
    return _run_lazax(work, warmup, steps, progress, eager=True, wrap=lambda f: f, in_flight=False)


def run_compile(work: Workload, warmup: int, steps: int, progress=None) -> dict:
    """``lx.compile(step)`` with eager mode on outside it: one graph per step."""
    return _run_lazax(work, warmup, steps, progress, eager=True, wrap=lx.compile, in_flight=True)


def run_dynamo(work: Workload, warmup: int, steps: int, progress=None) -> dict:
    """``torch.compile(loss, backend="lazax")``: forward and backward graphs executed by
    hash; the optimizer step is lazy, ``sync()`` after each step."""
    torch._dynamo.reset()
    loss_fn = torch.compile(work.loss, backend="lazax")
    return _run_lazax(
        work, warmup, steps, progress, eager=False, wrap=_with_sync, in_flight=True,
        loss_fn=loss_fn,
    )  # fmt: skip


def run_dynamo_step(work: Workload, warmup: int, steps: int, progress=None) -> dict:
    """``torch.compile(step, backend="lazax")`` of the whole step (``_whole_step``):
    forward with backward, and the optimizer's update, replayed as two graphs."""
    torch._dynamo.reset()
    return _run_lazax(
        work, warmup, steps, progress, eager=False, in_flight=True,
        wrap=lambda step: torch.compile(step, backend="lazax"), make_step=_whole_step,
    )  # fmt: skip


def run_jax(work: Workload, warmup: int, steps: int, progress=None) -> dict:
    train_step, state = work.jax_train_step()
    data = [tuple(jax.numpy.asarray(t.numpy()) for t in batch) for batch in work.batches]
    holder = [state, None]

    def step(i):
        new_state, loss = train_step(holder[0], *data[i % len(data)])
        if holder[1] is not None:
            holder[1].block_until_ready()  # same one-step-in-flight policy as lazax
        holder[0], holder[1] = new_state, loss

    result = timed_steps(step, warmup, steps, progress)
    holder[1].block_until_ready()
    result["compiles"] = 1
    return result


TRAINING_RUNNERS = {
    "torch_cpu": run_torch_cpu,
    "torch_cpu_1thread": run_torch_cpu_1thread,
    "lazy": run_lazy,
    "eager": run_eager,
    "compile": run_compile,
    "dynamo": run_dynamo,
    "dynamo_step": run_dynamo_step,
    "jax": run_jax,
}
