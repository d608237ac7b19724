"""The benchmark's chart: throughput per mode, one panel per model and phase, with the
pure-JAX ceiling drawn across each panel. Written as a PNG beside the JSON.

matplotlib is the field's plotting library and is only needed here (the ``bench`` nox
session installs it); without it the chart is skipped with a note.
"""

from __future__ import annotations

from pathlib import Path

__all__ = ["write_chart"]


def write_chart(report: dict, path: Path) -> bool:
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        print("matplotlib is not installed: no chart (nox -s bench installs it)")
        return False
    phases = [p for p in ("training", "inference") if report.get(p)]
    models = list(dict.fromkeys(m for p in phases for m in report[p]))
    if not phases:
        return False
    fig, axes = plt.subplots(
        len(phases), len(models), figsize=(4.6 * len(models), 3.4 * len(phases)), squeeze=False
    )
    for row, phase in enumerate(phases):
        for col, model in enumerate(models):
            _panel(axes[row][col], phase, model, report[phase].get(model, {}))
    fig.suptitle(f"lazax modes on {report['device']} ({report['machine']})", fontsize=10)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return True


def _panel(ax, phase: str, model: str, rows: dict) -> None:
    rows = {m: r for m, r in rows.items() if "steps_per_s" in r}
    modes = list(rows)
    values = [rows[m]["steps_per_s"] for m in modes]
    colors = ["#999999" if m in ("torch_cpu", "jax") else "#3b75af" for m in modes]
    ax.bar(modes, values, color=colors)
    if "jax" in rows:
        ceiling = rows["jax"]["steps_per_s"]
        ax.axhline(ceiling, color="#c0392b", linestyle="--", linewidth=1)
        ax.text(-0.4, ceiling, "pure JAX", color="#c0392b", va="bottom", fontsize=8)
    ax.set_title(f"{model} {phase}", fontsize=10)
    ax.set_ylabel("steps/s" if phase == "training" else "calls/s")
    ax.tick_params(axis="x", labelrotation=30, labelsize=8)
