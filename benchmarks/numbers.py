"""Python numbers in a long traced graph: compile time against ``jax.jit``.

    python -m benchmarks.numbers [--ops 2000] [--with-jax-args]

A chain of ``n`` elementwise ops over a 64x64 tensor, each with two Python numbers
(``y = y * a + b``, numbers that are never 0 or +-1, so lazax lifts each out of the
program). Prints, from one process, after a short warm-up of each (what any first call in a process
pays once):
- lazax lazy mode's first call (trace, compile, run, wait) and its second call with
  every number changed (which must compile nothing: ``UncachedCompile`` is printed);
- ``jax.jit`` of the same Python function taking the numbers as one packed array, each
  a static slice of it (the program lazax lowers the graph to, without lazax);
- ``jax.jit`` of the same function with the numbers baked in as constants: its first
  call, in a process of its own under a memory cap (``--jax-memory-gb``, default 12):
  on the 2-core AMD EPYC machine of 2026-12-07, XLA's CPU compiler ran out of memory
  on it from ~500 ops on (22 GB at 600), where earlier machines compiled 2,000 ops in
  2.75-5.4 s, so a failure is reported, not waited for;
- with ``--with-jax-args`` the function taking the numbers as ``2n`` scalar arguments
  (what one program parameter per number costs XLA; 42 s at 2,000 ops).
"""

from __future__ import annotations

import argparse
import resource
import subprocess
import sys
import time

import jax
import jax.numpy as jnp
import numpy as np
import torch

import lazax.modes as lx


def _numbers(n: int, seed: int) -> list[float]:
    rng = np.random.default_rng(seed)
    return [float(v) for v in rng.uniform(1.01, 1.5, size=2 * n)]


def _chain(y, numbers):
    for k in range(0, len(numbers), 2):
        y = y * numbers[k] + numbers[k + 1]
    return y


def warm_up() -> None:
    """A short chain of another shape through lazax and through jax: what every first
    call in a process pays once (torch's dispatch, lazax's op rules, jax's tracing
    machinery) is out of the figures compared."""
    (_chain(torch.ones(8, 8).to(lx.device()), [1.5, 2.5])).cpu()
    jax.jit(lambda x: _chain(x, [1.5, 2.5]))(jnp.ones((8, 8))).block_until_ready()


def lazax_first_calls(n: int) -> dict:
    x = torch.ones(64, 64).to(lx.device())
    lx.sync(wait=True)
    out = {}
    for label, seed in (("first", 0), ("changed", 1)):
        before = lx.metrics.counter_value("UncachedCompile") or 0
        start = time.perf_counter()
        y = _chain(x, _numbers(n, seed))
        lx.sync(wait=True)
        y.cpu()
        out[f"lazax_{label}_s"] = time.perf_counter() - start
        out[f"lazax_{label}_compiles"] = (lx.metrics.counter_value("UncachedCompile") or 0) - before
    return out


def jax_first_call(n: int, how: str) -> float:
    """``how``: ``baked`` (constants), ``packed`` (one array, sliced), ``arguments``."""
    numbers = _numbers(n, 0)
    x = jnp.ones((64, 64), jnp.float32)
    start = time.perf_counter()
    if how == "arguments":
        f = jax.jit(lambda x, *nums: _chain(x, nums))
        f(x, *[np.float32(v) for v in numbers]).block_until_ready()
    elif how == "packed":
        f = jax.jit(lambda x, pack: _chain(x, [pack[k] for k in range(2 * n)]))
        f(x, np.array(numbers, np.float32)).block_until_ready()
    else:
        jax.jit(lambda x: _chain(x, numbers))(x).block_until_ready()
    return time.perf_counter() - start


def jax_baked_apart(n: int, memory_gb: float) -> float | str:
    """``jax_first_call(n, "baked")`` in a process of its own, its address space capped:
    the seconds, or why it failed."""
    code = (
        "import resource, sys; "
        f"resource.setrlimit(resource.RLIMIT_AS, ({int(memory_gb * 2**30)}, "
        f"{resource.RLIM_INFINITY})); "
        "from benchmarks.numbers import jax_first_call, warm_up; "
        f"warm_up(); print(jax_first_call({n}, 'baked'))"
    )
    try:
        done = subprocess.run(
            [sys.executable, "-c", code], capture_output=True, text=True, timeout=600
        )
    except subprocess.TimeoutExpired:
        return "did not finish in 600 s"
    if done.returncode != 0:
        if "bad_alloc" in done.stderr or "MemoryError" in done.stderr:
            return f"out of memory (over {memory_gb:g} GB)"
        return f"failed (exit {done.returncode}): {done.stderr.strip().splitlines()[-1:]}"
    return float(done.stdout.strip().splitlines()[-1])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--ops", type=int, default=2000)
    parser.add_argument("--with-jax-args", action="store_true")
    parser.add_argument("--jax-memory-gb", type=float, default=12.0)
    args = parser.parse_args()
    warm_up()
    result = lazax_first_calls(args.ops)
    result["jax_jit_packed_first_s"] = jax_first_call(args.ops, "packed")
    result["lazax_over_jax_packed"] = result["lazax_first_s"] / result["jax_jit_packed_first_s"]
    baked = jax_baked_apart(args.ops, args.jax_memory_gb)
    result["jax_jit_baked_first_s"] = baked
    if isinstance(baked, float):
        result["lazax_over_jax_baked"] = result["lazax_first_s"] / baked
    if args.with_jax_args:
        result["jax_jit_numbers_as_arguments_first_s"] = jax_first_call(args.ops, "arguments")
    for key, value in result.items():
        print(f"{key}: {value:.3f}" if isinstance(value, float) else f"{key}: {value}")


if __name__ == "__main__":
    main()
