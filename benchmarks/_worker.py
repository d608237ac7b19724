"""One measurement in a process of its own: ``python -m benchmarks._worker '<json>'``.

The JSON names the workload (and its sizes), the phase (training or inference), the
mode, warm-up and timed steps. The worker prints ``tick`` after each step (the parent's
progress bar) and, last, ``result <json>``: the runner's figures plus the resident
memory when the run started and, where the device reports it, the device's peak bytes.
A process per mode keeps modes from sharing a compilation cache or memory; the parent
reads the process's peak resident memory from the kernel when it exits.
"""

from __future__ import annotations

import json
import resource
import sys


def main(spec_text: str) -> int:
    spec = json.loads(spec_text)
    from .inference import INFERENCE_RUNNERS
    from .training import TRAINING_RUNNERS
    from .workloads import make_workload

    runners = TRAINING_RUNNERS if spec["phase"] == "training" else INFERENCE_RUNNERS
    work = make_workload(spec["workload"], spec.get("sizes"))
    if spec["mode"] not in ("torch_cpu", "jax"):
        import lazax.modes  # noqa: F401  (registers the device before the run is timed)
    start_kb = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss

    def tick() -> None:
        print("tick", flush=True)

    result = runners[spec["mode"]](work, spec["warmup"], spec["steps"], tick)
    result["items_per_s"] = result["steps_per_s"] * work.items_per_step
    result["unit"] = work.unit
    result["start_rss_mb"] = start_kb / 1024
    result["device_peak_mb"] = _device_peak_mb()
    if "lazax.modes" in sys.modules:
        from lazax.modes import metrics

        result["persistent_hits"] = metrics.counter_value("PersistentCacheHit") or 0
        result["persistent_misses"] = metrics.counter_value("PersistentCacheMiss") or 0
    print("result " + json.dumps(result), flush=True)
    return 0


def _device_peak_mb() -> float | None:
    import jax

    stats = jax.devices()[0].memory_stats()  # None on the CPU
    if not stats or "peak_bytes_in_use" not in stats:
        return None
    return stats["peak_bytes_in_use"] / 2**20


if __name__ == "__main__":
    sys.exit(main(sys.argv[1]))
