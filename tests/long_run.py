"""Long runs in a process of their own, reporting memory as they go (JSON on stdout).

    python tests/long_run.py train  --mode lazy --steps 10000 --checkpoints 1000,10000
    python tests/long_run.py shapes --shapes 5000 --checkpoints 500,5000

``train``: the MLP training loop (SGD with momentum) in one mode: ``lazy`` (``sync()``
per step), ``eager``, ``compile`` (``lx.compile`` around the step) or ``dynamo``
(``torch.compile`` of the model; backward and optimizer lazy). ``shapes``: one small
graph per distinct input shape, each result checked against torch on the CPU, so the
LRU cache (``LAZAX_COMPILATION_CACHE_SIZE``, set it before this starts) evicts on every
step once full.

At each checkpoint it records the host RSS (after ``gc.collect()`` and glibc's
``malloc_trim``), the lazax tensors
alive, the storages with pending work and the cache's entries; in ``train`` also the
loss, which must be finite. The run is one process so that the numbers are its own,
not a test session's.
"""

from __future__ import annotations

import argparse
import ctypes
import gc
import json
import math
import os
import sys

import torch

import lazax.dynamo  # noqa: F401
import lazax.executor as lx_exec
import lazax.modes as lx
from benchmarks.models import MLP, make_batch


def rss_bytes() -> int:
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")


def _trim_heap() -> None:
    """Hand freed heap pages back to the OS (glibc), so that RSS counts memory in use,
    not what the allocator keeps cached after frees."""
    try:
        ctypes.CDLL("libc.so.6").malloc_trim(0)
    except (OSError, AttributeError):  # not glibc: RSS as it is
        pass


def snapshot(step: int, **extra) -> dict:
    gc.collect()
    _trim_heap()
    live = sum(1 for o in gc.get_objects() if type(o) is lx_exec.LazyTensor)
    return {
        "step": step,
        "rss_mb": rss_bytes() / 2**20,
        "live_lazax_tensors": live,
        "cache_entries": len(lx_exec.EXECUTOR.cache),
        **extra,
    }


def train(mode: str, steps: int, checkpoints: set[int]) -> list[dict]:
    torch.manual_seed(0)
    dev = lx.device()
    model = MLP(32, 64, 10).to(dev)
    opt = torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9)
    forward = torch.compile(model, backend="lazax") if mode == "dynamo" else model

    def step(x, y):
        opt.zero_grad()
        loss = torch.nn.functional.cross_entropy(forward(x), y)
        loss.backward()
        opt.step()
        return loss

    if mode == "compile":
        step = lx.compile(step, name="mlp_step")
    lx.eager_mode(mode == "eager")
    batches = [make_batch(32, 32, 10, seed) for seed in range(8)]
    reports = []
    for i in range(1, steps + 1):
        x, y = batches[i % len(batches)]
        loss = step(x.to(dev), y.to(dev))
        if mode in ("lazy", "dynamo"):
            lx.sync()
        if i in checkpoints:
            value = loss.item()
            if not math.isfinite(value):
                raise AssertionError(f"step {i}: loss {value}")
            reports.append(snapshot(i, loss=value))
    return reports


def shapes(count: int, checkpoints: set[int]) -> list[dict]:
    reports = []
    for n in range(1, count + 1):
        x = torch.linspace(-1.0, 1.0, n)
        got = (torch.tanh(x.to(lx.device()) * 3.0) + 1.0).sum().item()
        want = (torch.tanh(x * 3.0) + 1.0).sum().item()
        if abs(got - want) > 1e-5 * max(1.0, abs(want)):
            raise AssertionError(f"shape ({n},): got {got}, expected {want}")
        if n in checkpoints:
            reports.append(snapshot(n))
    return reports


def main(argv: list[str]) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("what", choices=["train", "shapes"])
    parser.add_argument("--mode", default="lazy", choices=["lazy", "eager", "compile", "dynamo"])
    parser.add_argument("--steps", type=int, default=10_000)
    parser.add_argument("--shapes", type=int, default=5_000)
    parser.add_argument("--checkpoints", default="1000,10000")
    args = parser.parse_args(argv)
    checkpoints = {int(c) for c in args.checkpoints.split(",")}
    if args.what == "train":
        reports = train(args.mode, args.steps, checkpoints)
    else:
        reports = shapes(args.shapes, checkpoints)
    counters = {
        name: lx.metrics.counter_value(name)
        for name in ("UncachedCompile", "CachedCompile", "CacheEvictions")
    }
    print(json.dumps({"checkpoints": reports, "counters": counters}))


if __name__ == "__main__":
    main(sys.argv[1:])
