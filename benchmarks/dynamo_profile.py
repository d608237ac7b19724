"""Where a dynamo call's time goes: ``python -m benchmarks.dynamo_profile``.

Prints, for the standard decoder: (1) the first training step of
``torch.compile(loss, backend="lazax")`` split into XLA compile time (``CompileTime``)
and the rest (dynamo's tracing, AOTAutograd's, lazax's capture); (2) the host time of
one steady inference call (device idle before it), split into the bridge, the jax
execute call inside it, and the rest (dynamo's guards, AOTAutograd's wrappers); (3) the
same split for one steady call of the whole-step recipe (``training._whole_step``
under ``torch.compile``: two graphs a step) on the overhead-bound ``decoder_small``.
Medians of 30 calls; figures for the README's notes on dynamo.
"""

from __future__ import annotations

import contextlib
import copy
import statistics
import time

import torch

import lazax.dynamo
import lazax.executor
import lazax.modes as lx

from .training import _train_step, _whole_step, _with_sync
from .workloads import make_workload


@contextlib.contextmanager
def _timing(cls, name: str, into: list):
    """Within: each call of ``cls.name`` appends its duration to ``into``."""
    original = getattr(cls, name)

    def timed(self, *args):
        start = time.perf_counter()
        result = original(self, *args)
        into.append(time.perf_counter() - start)
        return result

    setattr(cls, name, timed)
    try:
        yield
    finally:
        setattr(cls, name, original)


def _timed_bridge(bridge_s: list, execute_s: list) -> contextlib.ExitStack:
    stack = contextlib.ExitStack()
    stack.enter_context(_timing(lazax.dynamo.GraphBridge, "__call__", bridge_s))
    stack.enter_context(_timing(type(lazax.executor.EXECUTOR.runtime), "execute", execute_s))
    return stack


def main() -> None:
    work = make_workload("decoder")
    dev = lx.device()
    model = copy.deepcopy(work.model).to(dev)
    train = _with_sync(
        _train_step(
            model,
            work.make_optimizer(model.parameters()),
            torch.compile(work.loss, backend="lazax"),
        )
    )
    data = [tuple(t.to(dev) for t in b) for b in work.batches]
    lx.sync(wait=True)
    start = time.perf_counter()
    train(*data[0]).item()
    first = time.perf_counter() - start
    _, compile_s, _ = lx.metrics.metric_data("CompileTime")
    print(
        f"first dynamo training step {first:.2f} s: XLA compiles {compile_s:.2f} s, "
        f"dynamo/AOTAutograd/lazax tracing {first - compile_s:.2f} s"
    )

    torch._dynamo.reset()
    served = torch.compile(copy.deepcopy(work.model).eval().to(dev), backend="lazax")
    tokens = [b[0].to(dev) for b in work.batches]
    bridge_s, execute_s, call_s = [], [], []
    with torch.no_grad(), _timed_bridge(bridge_s, execute_s):
        for i in range(33):
            lx.sync_tensors([served(tokens[i % 4])], wait=True)  # device idle
            start = time.perf_counter()
            out = served(tokens[i % 4])
            call_s.append(time.perf_counter() - start)
            lx.sync_tensors([out], wait=True)
    # Every other bridge/execute sample is the idle call timed above; skip 3 warm-ups.
    call = statistics.median(call_s[3:])
    bridge = statistics.median(bridge_s[7::2])
    execute = statistics.median(execute_s[7::2])
    print(
        f"steady inference call {call * 1e3:.2f} ms on the host: jax execute call "
        f"{execute * 1e3:.2f} ms, rest of the bridge {(bridge - execute) * 1e3:.2f} ms, "
        f"dynamo guards + AOTAutograd wrappers {(call - bridge) * 1e3:.2f} ms"
    )

    whole_step_split(dev)


def whole_step_split(dev) -> None:
    """(3): host time of one steady whole-step call (device idle before it)."""
    torch._dynamo.reset()
    work = make_workload("decoder_small")
    model = copy.deepcopy(work.model).to(dev)
    step = torch.compile(
        _whole_step(model, work.make_optimizer(model.parameters()), work.loss), backend="lazax"
    )
    data = [tuple(t.to(dev) for t in b) for b in work.batches]
    bridge_s, execute_s, rows = [], [], []
    with _timed_bridge(bridge_s, execute_s):
        for i in range(33):
            lx.wait_device_ops()
            del bridge_s[:], execute_s[:]
            start = time.perf_counter()
            step(*data[i % 4])
            rows.append((time.perf_counter() - start, len(bridge_s), sum(bridge_s), sum(execute_s)))
    call, graphs, bridge, execute = (statistics.median(col) for col in zip(*rows[3:]))
    print(
        f"steady whole-step call (decoder_small, {graphs:.0f} graphs) {call * 1e3:.2f} ms on "
        f"the host: jax execute calls {execute * 1e3:.2f} ms, rest of the bridge "
        f"{(bridge - execute) * 1e3:.2f} ms, dynamo guards + AOTAutograd wrappers + "
        f"the eager optimizer glue {(call - bridge) * 1e3:.2f} ms"
    )


if __name__ == "__main__":
    main()
