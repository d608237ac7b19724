"""What lazax's profiler spans cost when no profiler records: an A/B in one process.

    python -m benchmarks.span_cost [--rounds 4]

Alternates rounds of lazy (40 steps) and eager (15 steps) training of ``decoder_small``
with the spans as built (``lazax.executor.profiling.span``: two flag reads per sync,
execution and host read) and with ``span`` replaced by a bare ``nullcontext`` in every
module that uses it; prints the median steps/s of each. docs/profiling.md quotes it.
"""

from __future__ import annotations

import argparse
import contextlib
import statistics

import lazax.executor.barrier.compile as compile_stage
import lazax.executor.barrier.execute as execute_stage
import lazax.executor.barrier.executor as barrier
import lazax.executor.profiling as profiling
import lazax.executor.replay.capture as replay
import lazax.executor.tensor.transfer as transfer

from . import training
from .workloads import make_workload

_USERS = (barrier, execute_stage, compile_stage, transfer, replay)
_NULL = contextlib.nullcontext()


def _no_span(kind, name=None):
    return _NULL


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rounds", type=int, default=4)
    args = parser.parse_args()
    work = make_workload("decoder_small")
    runs = {(mode, side): [] for mode in ("lazy", "eager") for side in ("spans", "none")}
    for _ in range(args.rounds):
        for side in ("spans", "none"):
            for module in _USERS:
                module.span = profiling.span if side == "spans" else _no_span
            runs[("lazy", side)].append(training.run_lazy(work, 3, 40)["steps_per_s"])
            runs[("eager", side)].append(training.run_eager(work, 2, 15)["steps_per_s"])
    for (mode, side), samples in runs.items():
        print(f"{mode:<6} {side:<6} median {statistics.median(samples):6.1f} steps/s  {samples}")


if __name__ == "__main__":
    main()
