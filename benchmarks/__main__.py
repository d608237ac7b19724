"""``python -m benchmarks``: every lazax mode side by side with torch CPU and pure JAX.

Runs, on the default device: the micro-benchmarks of the hot paths (in this process),
then each (model, phase, mode) in a process of its own (``_worker``), so that modes
share neither a compilation cache nor memory and each one's peak memory can be read.
Shows a progress bar, prints a table with ratios and the targets, and writes every
figure to ``benchmarks/results/<name>.json`` and a chart to ``<name>.png``. Ratios are
what to quote (a noisy machine: run nothing else meanwhile).
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import subprocess
import sys
import tempfile
from datetime import datetime, timezone
from pathlib import Path

import jax
import torch
from tqdm import tqdm

from . import memory, micro
from .chart import write_chart
from .inference import INFERENCE_RUNNERS
from .report import add_ratios, format_report
from .training import TRAINING_RUNNERS
from .workloads import WORKLOADS

# Models with an inference row; the modes a model is measured in when not all.
INFERENCE_MODELS = ("decoder", "cnn")
MODEL_MODES = {
    "decoder_deep": ("torch_cpu", "lazy", "compile", "dynamo", "dynamo_step", "jax"),
}
ONE_THREAD_MODELS = ("decoder_small",)  # torch_cpu_1thread: the host-bound reference

RESULTS = Path(__file__).resolve().parent / "results"
ROOT = Path(__file__).resolve().parent.parent


def _csv(text: str, known, what: str) -> list[str]:
    items = [x for x in text.split(",") if x]
    unknown = sorted(set(items) - set(known))
    if unknown:
        raise SystemExit(f"unknown {what} {unknown}; choose from {sorted(known)}")
    return items


def _parse(argv):
    p = argparse.ArgumentParser(prog="python -m benchmarks", description=__doc__)
    p.add_argument(
        "--models",
        default="decoder,decoder_bf16,cnn,decoder_small,decoder_deep",
        help="comma list of " + ",".join(WORKLOADS),
    )
    p.add_argument(
        "--modes",
        default="torch_cpu,torch_cpu_1thread,lazy,eager,compile,dynamo,dynamo_step,jax",
        help="training modes, comma list of " + ",".join(TRAINING_RUNNERS),
    )
    p.add_argument(
        "--inference-modes",
        default="torch_cpu,lazy,dynamo,jax",
        help="inference modes (empty: none), comma list of " + ",".join(INFERENCE_RUNNERS),
    )
    p.add_argument("--steps", type=int, default=10, help="timed steps per mode")
    p.add_argument("--warmup", type=int, default=3, help="untimed steps (the first compiles)")
    p.add_argument("--vocab", type=int, default=1024, help="decoder vocabulary")
    p.add_argument("--d-model", type=int, default=256, help="decoder width")
    p.add_argument("--heads", type=int, default=4, help="decoder attention heads")
    p.add_argument("--layers", type=int, default=2, help="decoder layers")
    p.add_argument("--seq", type=int, default=128, help="decoder sequence length")
    p.add_argument("--batch", type=int, default=8, help="decoder batch")
    p.add_argument("--cnn-width", type=int, default=16, help="CNN channels (doubled after)")
    p.add_argument("--cnn-image", type=int, default=32, help="CNN image side")
    p.add_argument("--cnn-batch", type=int, default=32, help="CNN batch")
    p.add_argument("--skip-micro", action="store_true")
    p.add_argument(
        "--memory-models",
        default="mlp,decoder",
        help="peak-memory table (benchmarks.memory), comma list of mlp,decoder; empty: none",
    )
    p.add_argument(
        "--skip-restart",
        action="store_true",
        help="skip the cold/warm first step of lazy decoder training with a persistent cache",
    )
    p.add_argument("--name", default="latest", help="results file name (without suffix)")
    return p.parse_args(argv)


def _sizes(args) -> dict:
    decoder = {
        "vocab": args.vocab, "d_model": args.d_model, "n_heads": args.heads,
        "n_layers": args.layers, "seq": args.seq, "batch": args.batch,
    }  # fmt: skip
    return {
        "decoder": decoder,
        "decoder_bf16": decoder,
        "decoder_small": {},  # fixed sizes (workloads.SMALL_DECODER)
        "decoder_deep": {},
        "cnn": {"width": args.cnn_width, "image": args.cnn_image, "batch": args.cnn_batch},
    }


def _measure(spec: dict, bar, env: dict | None = None) -> dict:
    """Run one worker; its progress ticks move ``bar``; peak RSS from the kernel."""
    proc = subprocess.Popen(
        [sys.executable, "-m", "benchmarks._worker", json.dumps(spec)],
        cwd=ROOT,
        stdout=subprocess.PIPE,
        text=True,
        env=env,
    )
    result = None
    for line in proc.stdout:
        if line.startswith("tick"):
            bar.update()
        elif line.startswith("result "):
            result = json.loads(line[len("result ") :])
    _, status, usage = os.wait4(proc.pid, 0)
    proc.returncode = os.waitstatus_to_exitcode(status)
    if proc.returncode != 0 or result is None:
        return {"error": f"worker exited with {proc.returncode}"}
    result["peak_rss_mb"] = usage.ru_maxrss / 1024
    result["run_rss_mb"] = result["peak_rss_mb"] - result.pop("start_rss_mb")
    return result


def _restart(sizes: dict, bar) -> dict:
    """Lazy decoder training started twice on one persistent cache directory: the first
    step's time cold (compiles and fills it) and warm (loads what the first run wrote)."""
    bar.set_description("decoder restart (persistent cache)")
    spec = {
        "workload": "decoder", "sizes": sizes, "phase": "training", "mode": "lazy",
        "warmup": 1, "steps": 2,
    }  # fmt: skip
    with tempfile.TemporaryDirectory(prefix="lazax-bench-cache-") as cache_dir:
        env = {**os.environ, "LAZAX_PERSISTENT_CACHE_DIR": cache_dir}
        cold, warm = _measure(spec, bar, env), _measure(spec, bar, env)
    if "error" in cold or "error" in warm:
        return {"error": cold.get("error") or warm.get("error")}
    return {
        "cold_first_step_s": cold["first_step_s"],
        "warm_first_step_s": warm["first_step_s"],
        "warm_persistent_hits": warm.get("persistent_hits", 0),
        "warm_persistent_misses": warm.get("persistent_misses", 0),
    }


def main(argv=None) -> int:
    args = _parse(argv)
    models = _csv(args.models, WORKLOADS, "models")
    phases = [
        ("training", _csv(args.modes, TRAINING_RUNNERS, "modes")),
        ("inference", _csv(args.inference_modes, INFERENCE_RUNNERS, "inference modes")),
    ]
    sizes = _sizes(args)
    report = {
        "when": datetime.now(timezone.utc).isoformat(timespec="seconds"),
        "machine": f"{platform.machine()}, {platform.processor() or 'cpu'}, "
        f"{len(os.sched_getaffinity(0))} cores",
        "device": str(jax.devices()[0]),
        "torch": torch.__version__,
        "jax": jax.__version__,
        "steps": args.steps,
        "warmup": args.warmup,
        "sizes": {m: sizes[m] for m in models},
    }
    if not args.skip_micro:
        print("micro-benchmarks ...", flush=True)
        report["tracing"] = micro.tracing()
        report["cached_sync"] = micro.cached_sync()
        report["eager_op"] = micro.eager_op()
    jobs = [
        (phase, model, mode)
        for phase, modes in phases
        for model in models
        if phase == "training" or model in INFERENCE_MODELS
        for mode in modes
        if mode in MODEL_MODES.get(model, (mode,))
        and (mode != "torch_cpu_1thread" or model in ONE_THREAD_MODELS)
    ]
    restart = not args.skip_restart and "decoder" in models
    total = len(jobs) * (args.warmup + args.steps) + (2 * (1 + 2) if restart else 0)
    with tqdm(total=total, unit="step") as bar:
        for phase, model, mode in jobs:
            bar.set_description(f"{model} {phase} {mode}")
            spec = {
                "workload": model, "sizes": sizes[model], "phase": phase, "mode": mode,
                "warmup": args.warmup, "steps": args.steps,
            }  # fmt: skip
            report.setdefault(phase, {}).setdefault(model, {})[mode] = _measure(spec, bar)
        if restart:
            report["restart"] = _restart(sizes["decoder"], bar)
    memory_models = _csv(args.memory_models, memory.MODELS, "memory models")
    if memory_models:
        report["memory"] = []
        for model in memory_models:
            for mode in memory.MODES:
                print(f"memory: {model} {mode} ...", flush=True)
                report["memory"].append(memory.run(model, mode))
    add_ratios(report)
    RESULTS.mkdir(exist_ok=True)
    out = RESULTS / f"{args.name}.json"
    out.write_text(json.dumps(report, indent=2) + "\n")
    print(format_report(report))
    written = [out]
    if write_chart(report, RESULTS / f"{args.name}.png"):
        written.append(RESULTS / f"{args.name}.png")
    cwd = Path.cwd()
    print(
        "\nwritten: "
        + ", ".join(str(p.relative_to(cwd) if p.is_relative_to(cwd) else p) for p in written)
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
