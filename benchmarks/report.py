"""The benchmark's ratios, its table and its targets (printed, never asserted).

Contract: ``add_ratios(report)`` adds to every measured row ``vs_jax`` (steps/s against
pure JAX on the same model and phase), ``vs_lazy``, ``first_vs_jax`` (time to the first
step against JAX's, both including compilation) and, for eager training,
``vs_compile``, and ``vs_torch_1thread`` where plain torch ran with one thread (the
host-bound reference of the small decoder). ``format_report(report)`` is the text
printed at the end of a run.
"""

from __future__ import annotations

__all__ = ["TARGETS", "add_ratios", "format_report"]

LAZAX_MODES = ("lazy", "eager", "compile", "dynamo", "dynamo_step")

# (phase, model, mode, figure, at least) -- the issues' targets, checked on each run.
TARGETS = [
    ("training", "decoder", "lazy", "vs_jax", 0.95),
    ("training", "decoder", "compile", "vs_jax", 0.95),
    ("training", "decoder", "dynamo", "vs_jax", 0.95),
    ("training", "decoder", "eager", "vs_compile", 0.85),
    ("training", "cnn", "eager", "vs_compile", 0.10),
    ("inference", "decoder", "dynamo", "vs_jax", 0.95),
    ("training", "decoder_bf16", "lazy", "vs_jax", 0.9),
    ("training", "decoder_bf16", "compile", "vs_jax", 0.9),
    ("training", "decoder_bf16", "dynamo", "vs_jax", 0.9),
    # Issue 22: where the host is the speed, and the CNN's programs.
    ("training", "decoder_small", "dynamo_step", "vs_jax", 0.25),
    ("training", "decoder_small", "lazy", "vs_torch_1thread", 0.6),
    ("training", "decoder_small", "eager", "vs_lazy", 0.5),
    ("training", "decoder_deep", "dynamo_step", "vs_jax", 0.8),
    ("training", "cnn", "lazy", "vs_jax", 0.95),
    ("training", "cnn", "compile", "vs_jax", 0.95),
    ("training", "cnn", "dynamo", "vs_jax", 0.95),
    ("inference", "cnn", "lazy", "vs_jax", 0.95),
]
_FIGURE = {
    "vs_jax": "of pure JAX",
    "vs_compile": "of compile",
    "vs_lazy": "of lazy",
    "vs_torch_1thread": "of torch CPU with one thread",
}
FIRST_STEP_LIMIT = 1.5  # time to first step, at most this times pure JAX's
# Peak memory above the baseline, at most this times the training state (issue 17);
# eager: at most torch CPU's multiple.
MEMORY_LIMIT = {"lazy": 1.25, "compile": 1.25, "dynamo": 1.25}


def add_ratios(report: dict) -> None:
    for phase in ("training", "inference"):
        for rows in report.get(phase, {}).values():
            ok = {m: r for m, r in rows.items() if "steps_per_s" in r}
            jax_row, lazy = ok.get("jax"), ok.get("lazy")
            one_thread = ok.get("torch_cpu_1thread")
            for r in ok.values():
                if one_thread:
                    r["vs_torch_1thread"] = r["steps_per_s"] / one_thread["steps_per_s"]
                if jax_row:
                    r["vs_jax"] = r["steps_per_s"] / jax_row["steps_per_s"]
                    r["first_vs_jax"] = r["first_step_s"] / jax_row["first_step_s"]
                if lazy:
                    r["vs_lazy"] = r["steps_per_s"] / lazy["steps_per_s"]
            if phase == "training" and "eager" in ok and "compile" in ok:
                ok["eager"]["vs_compile"] = (
                    ok["eager"]["steps_per_s"] / ok["compile"]["steps_per_s"]
                )


def _micro_lines(report: dict) -> list[str]:
    lines = []
    if "tracing" in report:
        t = report["tracing"]
        lines.append(
            f"tracing: {t['lazax_lazy_us_per_op']:.1f} us/op lazy vs "
            f"{t['torch_cpu_us_per_op']:.1f} us/op torch CPU = {t['ratio']:.2f}x "
            f"(target <= {t['target_ratio']:.0f}x: {'met' if t['ratio'] <= 3 else 'missed'})"
        )
    if "cached_sync" in report:
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
            f"{e['jax_direct_call_us']:.1f} us = {e['ratio']:.2f}x "
            f"(target <= 3x: {'met' if e['ratio'] <= 3 else 'missed'})"
        )
    return lines


def _table(phase: str, model: str, rows: dict) -> list[str]:
    unit = next((r["unit"] for r in rows.values() if "unit" in r), "items")
    head = "steps/s" if phase == "training" else "calls/s"
    lines = [
        "",
        f"{model + ' ' + phase:<20} {head:>8} {unit + '/s':>10} {'first step':>11} "
        f"{'compiles':>8} {'peak MB':>8} {'run MB':>7} {'vs jax':>7} {'vs lazy':>8}",
    ]
    for mode, r in rows.items():
        if "error" in r:
            lines.append(f"{mode:<20} {r['error']}")
            continue
        vs_jax, vs_lazy = (f"{r[k]:.2f}x" if k in r else "-" for k in ("vs_jax", "vs_lazy"))
        lines.append(
            f"{mode:<20} {r['steps_per_s']:>8.2f} {r['items_per_s']:>10.0f} "
            f"{r['first_step_s']:>10.2f}s {r.get('compiles', '-')!s:>8} "
            f"{r['peak_rss_mb']:>8.0f} {r['run_rss_mb']:>7.0f} {vs_jax:>7} {vs_lazy:>8}"
        )
    return lines


def _target_lines(report: dict) -> list[str]:
    lines = ["", "targets:"]
    for phase, model, mode, key, least in TARGETS:
        r = report.get(phase, {}).get(model, {}).get(mode, {})
        if key in r:
            what = _FIGURE[key]
            verdict = "met" if r[key] >= least else "MISSED"
            lines.append(f"  {model} {phase} {mode}: {r[key]:.2f} {what} (>= {least}): {verdict}")
    for model, rows in report.get("training", {}).items():
        for mode in LAZAX_MODES:
            r = rows.get(mode, {})
            if "first_vs_jax" in r:
                verdict = "met" if r["first_vs_jax"] <= FIRST_STEP_LIMIT else "MISSED"
                lines.append(
                    f"  {model} training {mode}: first step {r['first_vs_jax']:.2f}x pure JAX's "
                    f"(<= {FIRST_STEP_LIMIT}x): {verdict}"
                )
    training = report.get("training", {})
    for mode in LAZAX_MODES:
        low = training.get("decoder_bf16", {}).get(mode, {}).get("steps_per_s")
        full = training.get("decoder", {}).get(mode, {}).get("steps_per_s")
        if low and full:
            verdict = "met" if low >= full else "MISSED"
            lines.append(
                f"  decoder training {mode}: bf16 autocast {low / full:.2f}x float32 steps/s "
                f"(>= 1.0): {verdict}"
            )
    return lines + _memory_targets(report)


def format_report(report: dict) -> str:
    lines = [
        f"machine: {report['machine']}; device {report['device']}; "
        f"torch {report['torch']}, jax {report['jax']}"
    ]
    lines += _micro_lines(report)
    for phase in ("training", "inference"):
        for model, rows in report.get(phase, {}).items():
            lines += _table(phase, model, rows)
    restart = report.get("restart")
    if restart and "error" not in restart:
        lines.append(
            f"\nrestart with a persistent cache (lazy decoder training): first step "
            f"{restart['cold_first_step_s']:.2f} s cold, {restart['warm_first_step_s']:.2f} s "
            f"warm ({restart['warm_persistent_hits']} executables loaded, "
            f"{restart['warm_persistent_misses']} compiled)"
        )
    lines += _memory_lines(report)
    lines += _target_lines(report)
    return "\n".join(lines)


def _memory_lines(report: dict) -> list[str]:
    rows = report.get("memory")
    if not rows:
        return []
    from .memory import table

    return ["", "peak memory above the baseline, as a multiple of the training state:", table(rows)]


def _memory_targets(report: dict) -> list[str]:
    lines = []
    by = {(r["model"], r["mode"]): r for r in report.get("memory", []) if "error" not in r}
    for (model, mode), r in sorted(by.items()):
        ratio = r["peak_mb"] / r["state_mb"]
        if mode in MEMORY_LIMIT:
            limit, what = MEMORY_LIMIT[mode], ""
        elif mode == "eager" and (model, "torch_cpu") in by:
            cpu = by[(model, "torch_cpu")]
            limit, what = cpu["peak_mb"] / cpu["state_mb"], " (torch CPU's)"
        else:
            continue
        verdict = "met" if ratio <= limit else "MISSED"
        lines.append(
            f"  {model} memory {mode}: {ratio:.2f}x the state (<= {limit:.2f}x{what}): {verdict}"
        )
        device = r.get("device_peak_mb")
        if device is not None:
            lines[-1] += f"; device count {device / r['state_mb']:.2f}x"
    return lines
