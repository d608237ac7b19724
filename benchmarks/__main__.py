"""``python -m benchmarks``: lazax side by side with torch CPU and pure JAX, in one run.

Prints a table and writes every figure to ``benchmarks/results/<name>.json``. Ratios
are what to quote (this is a noisy 2-core machine: run nothing else meanwhile).
"""

from __future__ import annotations

import argparse
import json
import platform
import sys
from datetime import datetime, timezone
from pathlib import Path

import jax
import torch
from tqdm import tqdm

from . import inference, micro, training
from .models import Decoder, DecoderConfig

RESULTS = Path(__file__).resolve().parent / "results"
RUNNERS = {
    "torch_cpu": training.run_torch_cpu,
    "lazy": training.run_lazy,
    "eager": training.run_eager,
    "compile": training.run_compile,
    "dynamo": training.run_dynamo,
    "jax": training.run_jax,
}


def _parse(argv):
    p = argparse.ArgumentParser(prog="python -m benchmarks", description=__doc__)
    p.add_argument(
        "--modes",
        default="torch_cpu,lazy,eager,compile,dynamo,jax",
        help="training modes, comma list of " + ",".join(RUNNERS),
    )
    p.add_argument(
        "--inference-modes",
        default="torch_cpu,lazy,dynamo,jax",
        help="decoder inference modes (empty: none), comma list of "
        + ",".join(inference.INFERENCE_RUNNERS),
    )
    p.add_argument("--steps", type=int, default=10, help="timed steps per mode")
    p.add_argument("--warmup", type=int, default=3, help="untimed steps (the first compiles)")
    p.add_argument("--vocab", type=int, default=1024)
    p.add_argument("--d-model", type=int, default=256)
    p.add_argument("--heads", type=int, default=4)
    p.add_argument("--layers", type=int, default=2)
    p.add_argument("--seq", type=int, default=128)
    p.add_argument("--batch", type=int, default=8)
    p.add_argument("--skip-micro", action="store_true")
    p.add_argument("--name", default="latest", help="results file name (without .json)")
    return p.parse_args(argv)


def main(argv=None) -> int:
    args = _parse(argv)
    cfg = DecoderConfig(args.vocab, args.d_model, args.heads, args.layers, args.seq, args.batch)
    modes = [m for m in args.modes.split(",") if m]
    unknown = set(modes) - set(RUNNERS)
    if unknown:
        print(f"unknown modes {sorted(unknown)}; choose from {sorted(RUNNERS)}", file=sys.stderr)
        return 2
    inference_modes = [m for m in args.inference_modes.split(",") if m]
    unknown = set(inference_modes) - set(inference.INFERENCE_RUNNERS)
    if unknown:
        print(
            f"unknown inference modes {sorted(unknown)}; choose from "
            f"{sorted(inference.INFERENCE_RUNNERS)}",
            file=sys.stderr,
        )
        return 2
    report = {
        "when": datetime.now(timezone.utc).isoformat(timespec="seconds"),
        "machine": f"{platform.machine()}, {platform.processor() or 'cpu'}, "
        f"{len(__import__('os').sched_getaffinity(0))} cores",
        "device": str(jax.devices()[0]),
        "torch": torch.__version__,
        "jax": jax.__version__,
        "config": cfg.__dict__,
    }
    if not args.skip_micro:
        print("micro-benchmarks ...", flush=True)
        report["tracing"] = micro.tracing()
        report["cached_sync"] = micro.cached_sync()
        report["eager_op"] = micro.eager_op()
    torch.manual_seed(0)
    model = Decoder(cfg)
    report["decoder"] = {}
    total = len(modes) * (args.steps + args.warmup - 1)
    with tqdm(total=total, desc="decoder training", unit="step") as bar:
        for mode in modes:
            bar.set_postfix_str(mode)
            r = RUNNERS[mode](model, args.warmup, args.steps, bar.update)
            r["tokens_per_s"] = r["steps_per_s"] * cfg.batch * cfg.seq
            report["decoder"][mode] = r
    if inference_modes:
        report["inference"] = {}
        total = len(inference_modes) * (args.steps + args.warmup - 1)
        with tqdm(total=total, desc="decoder inference", unit="call") as bar:
            for mode in inference_modes:
                bar.set_postfix_str(mode)
                runner = inference.INFERENCE_RUNNERS[mode]
                r = runner(model, args.warmup, args.steps, bar.update)
                r["tokens_per_s"] = r["steps_per_s"] * cfg.batch * cfg.seq
                report["inference"][mode] = r
    for table in ("decoder", "inference"):
        rows = report.get(table, {})
        ceiling = rows.get("jax", {}).get("steps_per_s")
        for r in rows.values():
            if ceiling:
                r["vs_jax"] = r["steps_per_s"] / ceiling
            if "lazy" in rows:
                r["vs_lazy"] = r["steps_per_s"] / rows["lazy"]["steps_per_s"]
    RESULTS.mkdir(exist_ok=True)
    out = RESULTS / f"{args.name}.json"
    out.write_text(json.dumps(report, indent=2) + "\n")
    print(format_report(report))
    print(f"\nwritten: {out.relative_to(Path.cwd()) if out.is_relative_to(Path.cwd()) else out}")
    return 0


def format_report(report: dict) -> str:
    lines = [
        f"machine: {report['machine']}; device {report['device']}; "
        f"torch {report['torch']}, jax {report['jax']}"
    ]
    if "tracing" in report:
        t = report["tracing"]
        lines.append(
            f"tracing: {t['lazax_lazy_us_per_op']:.1f} us/op lazy vs "
            f"{t['torch_cpu_us_per_op']:.1f} us/op torch CPU = {t['ratio']:.2f}x "
            f"(target <= {t['target_ratio']:.0f}x)"
        )
        s = report["cached_sync"]
        lines.append(
            f"cached sync ({s['graph_nodes']} nodes): {s['lazax_sync_us']:.1f} us vs direct jax "
            f"call {s['jax_direct_call_us']:.1f} us after the same tracing "
            f"({s['jax_direct_call_hot_loop_us']:.1f} us in a hot loop) = {s['ratio']:.2f}x "
            f"(budget {s['budget_us']:.0f} us: {'met' if s['within_budget'] else 'missed'})"
        )
    if "eager_op" in report:
        e = report["eager_op"]
        lines.append(
            f"eager op (cached): {e['lazax_eager_us']:.1f} us vs direct jitted jax call "
            f"{e['jax_direct_call_us']:.1f} us = {e['ratio']:.2f}x (target <= 3x)"
        )
    for table, title, unit in (
        ("decoder", "training", "steps/s"),
        ("inference", "inference", "calls/s"),
    ):
        if not report.get(table):
            continue
        lines.append("")
        lines.append(
            f"{title:<12} {unit:>9} {'tokens/s':>10} {'first call':>11} "
            f"{'compiles':>9} {'vs jax':>7} {'vs lazy':>8}"
        )
        for mode, r in report[table].items():
            vs = f"{r['vs_jax']:.2f}x" if "vs_jax" in r else "-"
            vs_lazy = f"{r['vs_lazy']:.2f}x" if "vs_lazy" in r else "-"
            lines.append(
                f"{mode:<12} {r['steps_per_s']:>9.2f} {r['tokens_per_s']:>10.0f} "
                f"{r['first_step_s']:>10.2f}s {r.get('compiles', '-')!s:>9} {vs:>7} "
                f"{vs_lazy:>8}"
            )
    decoder, served = report["decoder"], report.get("inference", {})
    if "vs_lazy" in decoder.get("eager", {}):
        lines.append(f"eager / lazy steps/s: {decoder['eager']['vs_lazy']:.2f} (target >= 0.85)")
    if "vs_lazy" in decoder.get("compile", {}):
        lines.append(
            f"compile(step) under eager / lazy steps/s: "
            f"{decoder['compile']['vs_lazy']:.2f} (target: within 10%)"
        )
    if "vs_jax" in decoder.get("dynamo", {}):
        lines.append(f"dynamo training / jax: {decoder['dynamo']['vs_jax']:.2f} (target >= 0.9)")
    if "vs_jax" in served.get("dynamo", {}):
        lines.append(f"dynamo inference / jax: {served['dynamo']['vs_jax']:.2f} (target >= 0.95)")
    return "\n".join(lines)


if __name__ == "__main__":
    sys.exit(main())
