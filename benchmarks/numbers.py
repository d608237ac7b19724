"""Python numbers in a long traced graph: compile time against ``jax.jit``.

    python -m benchmarks.numbers [--ops 2000] [--with-jax-args]

A chain of ``n`` elementwise ops over a 64x64 tensor, each with two Python numbers
(``y = y * a + b``, numbers that are never 0 or +-1, so lazax lifts each out of the
program). Prints, from one process:
- lazax lazy mode's first call (trace, compile, run, wait) and its second call with
  every number changed (which must compile nothing: ``UncachedCompile`` is printed);
- ``jax.jit`` of the same Python function, the numbers baked in as constants: its first
  call (the ceiling the target is measured against), and with ``--with-jax-args`` the
  same function taking the numbers as ``2n`` scalar arguments (what one program
  parameter per number costs XLA; 42 s at 2,000 ops on the 2-core CPU).
"""

from __future__ import annotations

import argparse
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


def jax_first_call(n: int, as_arguments: bool) -> float:
    numbers = _numbers(n, 0)
    x = jnp.ones((64, 64), jnp.float32)
    start = time.perf_counter()
    if as_arguments:
        f = jax.jit(lambda x, *nums: _chain(x, nums))
        f(x, *[np.float32(v) for v in numbers]).block_until_ready()
    else:
        jax.jit(lambda x: _chain(x, numbers))(x).block_until_ready()
    return time.perf_counter() - start


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--ops", type=int, default=2000)
    parser.add_argument("--with-jax-args", action="store_true")
    args = parser.parse_args()
    result = lazax_first_calls(args.ops)
    result["jax_jit_first_s"] = jax_first_call(args.ops, as_arguments=False)
    if args.with_jax_args:
        result["jax_jit_numbers_as_arguments_first_s"] = jax_first_call(args.ops, True)
    result["lazax_over_jax"] = result["lazax_first_s"] / result["jax_jit_first_s"]
    for key, value in result.items():
        print(f"{key}: {value:.3f}" if isinstance(value, float) else f"{key}: {value}")


if __name__ == "__main__":
    main()
