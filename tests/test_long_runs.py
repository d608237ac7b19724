"""Long runs keep memory flat: training in each mode, and a loop over ever-new shapes
with a small cache. Each runs in a process of its own (``long_run.py``).

CI runs them short (``LAZAX_LONG_RUN_STEPS`` training steps, ``LAZAX_LONG_RUN_SHAPES``
shapes); ``nox -s soak`` runs the full lengths (10,000 steps per mode, 5,000 shapes with
a cache of 64). Flat means: host RSS at the last checkpoint within 5% of the RSS at the
first (taken at a tenth of the run, once everything is compiled and warm; for the
shapes, once the cache has been full for a while), the same
number of live lazax tensors at both, and the cache holding no more than it must.
"""

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
STEPS = int(os.environ.get("LAZAX_LONG_RUN_STEPS", "1500"))
SHAPES = int(os.environ.get("LAZAX_LONG_RUN_SHAPES", "300"))
CACHE_SIZE = 64
REPORT = os.environ.get("LAZAX_LONG_RUN_REPORT")  # append each run's JSON here


def _run(*args: str, env_extra: dict | None = None, script: str = "long_run.py") -> dict:
    env = {**os.environ, "PYTHONPATH": str(ROOT), **(env_extra or {})}
    env.pop("LAZAX_USE_EAGER_MODE", None)
    done = subprocess.run(
        [sys.executable, str(ROOT / "tests" / script), *args],
        env=env,
        capture_output=True,
        text=True,
        cwd=ROOT,
    )
    assert done.returncode == 0, done.stderr[-4000:]
    result = json.loads(done.stdout.strip().splitlines()[-1])
    if REPORT:
        with open(REPORT, "a") as f:
            f.write(json.dumps({"args": args, **result}) + "\n")
    return result


def _assert_flat(first: dict, last: dict) -> None:
    growth = last["rss_mb"] / first["rss_mb"] - 1.0
    assert growth <= 0.05, f"host RSS grew {growth:.1%}: {first} -> {last}"
    assert last["live_lazax_tensors"] == first["live_lazax_tensors"], (first, last)


@pytest.mark.parametrize("mode", ["lazy", "eager", "compile", "dynamo"])
def test_training_memory_stays_flat(mode):
    checkpoints = f"{STEPS // 10},{STEPS}"
    result = _run("train", "--mode", mode, "--steps", str(STEPS), "--checkpoints", checkpoints)
    first, last = result["checkpoints"]
    _assert_flat(first, last)
    assert last["loss"] < first["loss"]  # it trained
    # Nothing new compiles after warm-up: the cache holds the first tenth's entries.
    assert last["cache_entries"] == first["cache_entries"]


def test_ever_new_shapes_with_a_small_cache_stay_bounded_and_right():
    # The first checkpoint once the cache has been full for a while.
    checkpoints = f"{max(SHAPES // 10, 2 * CACHE_SIZE)},{SHAPES}"
    result = _run(
        "shapes",
        "--shapes",
        str(SHAPES),
        "--checkpoints",
        checkpoints,
        env_extra={"LAZAX_COMPILATION_CACHE_SIZE": str(CACHE_SIZE)},
    )
    first, last = result["checkpoints"]
    assert first["cache_entries"] == last["cache_entries"] == CACHE_SIZE
    assert result["counters"]["CacheEvictions"] >= SHAPES - 2 * CACHE_SIZE
    _assert_flat(first, last)


@pytest.mark.skipif(
    not os.environ.get("LAZAX_LONG_RUN_MAPS"),
    reason="~21 minutes: nox -s soak (LAZAX_LONG_RUN_MAPS=1)",
)
def test_programs_past_the_mapping_limit_evict_instead_of_killing_the_process():
    result = _run("--tokens", "64", script="long_run_maps.py")
    assert result["lazy_equal"] and result["dynamo_equal"], result
    # The programs together held more than the limit allows: the guard had to evict,
    # and the process never came near the limit.
    assert result["evictions"] > 0, result
    assert result["peak_maps"] < 0.75 * result["limit"], result
