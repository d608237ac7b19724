"""Writes docs/fallbacks.md: which of torch's OpInfo ops still run on the CPU on lazax.

    python tools/fallbacks.py            # every OpInfo, float32, forward, lazy mode

For each OpInfo of torch's database that has a float32 sample, its first such sample
runs once on lazax (lazy mode, then a sync) with ``LAZAX_FALLBACK=silent``; the CPU
fallback counters that moved (``aten::<op>``) are what that op still runs on the CPU.
Ops whose sample raises are listed apart (docs/coverage.md says why they fail). The
page lists each fallback op with the OpInfos that reach it. One sample per op: an op may
fall back for other arguments too (``bincount`` with ``out=``, sparse layouts).
"""

from __future__ import annotations

import os
import sys
import time
import warnings
from collections import defaultdict
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
PAGE = ROOT / "docs" / "fallbacks.md"


def _moved(value, device):
    import torch

    if isinstance(value, torch.Tensor):
        return value.detach().to(device)
    if isinstance(value, (list, tuple)):
        return type(value)(_moved(v, device) for v in value)
    if isinstance(value, dict):
        return {k: _moved(v, device) for k, v in value.items()}
    return value


def survey() -> tuple[dict[str, set[str]], list[str], int]:
    """(fallback counter -> OpInfo names reaching it, OpInfos whose sample raised, tried)."""
    os.environ["LAZAX_FALLBACK"] = "silent"
    warnings.filterwarnings("ignore")
    import torch
    from torch.testing._internal.common_methods_invocations import op_db

    import lazax.modes as lx

    dev = lx.device()
    reached: dict[str, set[str]] = defaultdict(set)
    raised: list[str] = []
    tried = 0
    for info in op_db:
        name = info.name + (f".{info.variant_test_name}" if info.variant_test_name else "")
        if torch.float32 not in info.supported_dtypes("cpu"):
            continue
        sample = next(iter(info.sample_inputs("cpu", torch.float32)), None)
        if sample is None:
            continue
        tried += 1
        before = {n: lx.metrics.counter_value(n) for n in lx.metrics.counter_names()}
        try:
            args = _moved((sample.input, *sample.args), dev)
            out = info.op(*args, **_moved(sample.kwargs, dev))
            lx.sync(wait=True)
            del out
        except Exception:
            raised.append(name)
            continue
        for counter in lx.metrics.counter_names():
            if "::" in counter and lx.metrics.counter_value(counter) != before.get(counter):
                reached[counter].add(name)
    return reached, raised, tried


def write(reached: dict[str, set[str]], raised: list[str], tried: int, seconds: float) -> None:
    import torch

    lines = [
        "# What still runs on the CPU",
        "",
        "Written by `python tools/fallbacks.py` (do not edit by hand). Each OpInfo of",
        "torch's database with a float32 sample ran its first sample once on lazax (lazy",
        "mode); an op below is an aten op lazax has no lowering for that this sample",
        "reached, so it ran on the CPU (counted as `aten::<op>`, and warned about once:",
        "[cuda_scripts.md](cuda_scripts.md#no-silent-cpu-work)). One sample per OpInfo:",
        "other arguments of an op may fall back too. What fails outright:",
        "[coverage.md](coverage.md).",
        "",
        f"torch {torch.__version__}; {tried} OpInfos tried, {len(reached)} ops fell back, "
        f"{len(raised)} samples raised; the run took {seconds:.0f} s.",
        "",
        "| falls back | reached from (OpInfo) |",
        "|---|---|",
    ]
    for counter in sorted(reached):
        lines.append(f"| `{counter}` | {', '.join(sorted(reached[counter]))} |")
    if not reached:
        lines.append("| (none) | |")
    lines += ["", f"Samples that raised ({len(raised)}): {', '.join(sorted(raised)) or 'none'}."]
    PAGE.write_text("\n".join(lines) + "\n")


def main() -> None:
    sys.path.insert(0, str(ROOT))
    start = time.perf_counter()
    reached, raised, tried = survey()
    write(reached, raised, tried, time.perf_counter() - start)
    print(f"{PAGE}: {len(reached)} fallback ops from {tried} OpInfos")


if __name__ == "__main__":
    main()
