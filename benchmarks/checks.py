"""``python -m benchmarks.checks``: what device-side checks cost (issue 21's target).

Trains the standard decoder (an embedding and a cross-entropy: both checked) and the
CNN (a checked cross-entropy) in each lazax mode, with ``LAZAX_CHECKS=1`` and
``LAZAX_CHECKS=0``, each run in a worker process of its own (``benchmarks._worker``),
the two settings interleaved ``--rounds`` times so that drift on a noisy machine hits
both alike. Prints steps/s (median of the rounds) and off/on ratios; writes them to
``benchmarks/results/<name>.json``. Run nothing else meanwhile.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
from pathlib import Path

from tqdm import tqdm

from .__main__ import _measure, _parse, _sizes

ROOT = Path(__file__).resolve().parent


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--models", default="decoder,cnn")
    parser.add_argument("--modes", default="lazy,compile,dynamo")
    parser.add_argument("--steps", type=int, default=30)
    parser.add_argument("--warmup", type=int, default=3)
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--name", default="cpu-2core-checks")
    args = parser.parse_args(argv)
    sizes = _sizes(_parse([]))
    models, modes = args.models.split(","), args.modes.split(",")
    results: dict = {}
    total = len(models) * len(modes) * 2 * args.rounds * (args.steps + args.warmup)
    with tqdm(total=total, unit="step") as bar:
        for model in models:
            for mode in modes:
                runs: dict[str, list[float]] = {"on": [], "off": []}
                for _ in range(args.rounds):
                    for setting, flag in (("on", "1"), ("off", "0")):
                        bar.set_description(f"{model} {mode} checks {setting}")
                        spec = {
                            "workload": model, "sizes": sizes[model], "phase": "training",
                            "mode": mode, "warmup": args.warmup, "steps": args.steps,
                        }  # fmt: skip
                        env = {**os.environ, "LAZAX_CHECKS": flag}
                        result = _measure(spec, bar, env)
                        if "steps_per_s" in result:
                            runs[setting].append(result["steps_per_s"])
                on, off = (statistics.median(runs[s]) if runs[s] else None for s in runs)
                results[f"{model}/{mode}"] = {
                    "checks_on_steps_per_s": on,
                    "checks_off_steps_per_s": off,
                    "on_over_off": (on / off) if on and off else None,
                }
    print(f"\n{'workload':<20} {'checks on':>10} {'checks off':>11} {'on/off':>7}")
    for key, row in results.items():
        on, off, ratio = row.values()
        print(f"{key:<20} {on or 0:>10.1f} {off or 0:>11.1f} {ratio or 0:>7.3f}")
    out = ROOT / "results" / f"{args.name}.json"
    out.write_text(json.dumps({"sizes": sizes, "results": results}, indent=1) + "\n")
    print(f"written {out}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
