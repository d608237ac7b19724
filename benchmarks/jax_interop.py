"""Tensors to JAX and back: what ``lx.to_jax`` / ``lx.from_jax`` cost by size.

    python -m benchmarks.jax_interop [--repeats 200]

For a 1 KiB and a 64 MiB float32 tensor (device data, nothing pending), the median time
of ``lx.from_jax(lx.to_jax(t))`` over ``--repeats`` round trips, and their ratio: with
no copy either way it does not grow with the size (the target is under 5x). For scale,
the median of ``t.cpu()`` (a copy to the host) of each.
"""

from __future__ import annotations

import argparse
import statistics
import time

import torch

import lazax.modes as lx


def _median_s(fn, repeats: int) -> float:
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        fn()
        times.append(time.perf_counter() - start)
    return statistics.median(times)


def measure(repeats: int) -> dict:
    out = {}
    for label, numel in (("1KiB", 256), ("64MiB", 16 << 20)):
        t = torch.ones(numel).to(lx.device())
        lx.sync(wait=True)
        round_trip = lambda t=t: lx.from_jax(lx.to_jax(t))  # noqa: E731
        out[f"round_trip_{label}_us"] = 1e6 * _median_s(round_trip, repeats)
        out[f"to_host_{label}_us"] = 1e6 * _median_s(t.cpu, max(3, repeats // 20))
    out["round_trip_ratio"] = out["round_trip_64MiB_us"] / out["round_trip_1KiB_us"]
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=200)
    args = parser.parse_args()
    result = measure(args.repeats)
    for key, value in result.items():
        print(f"{key}: {value:.2f}")


if __name__ == "__main__":
    main()
