"""The persistent tier: a second process compiles nothing; broken entries never break
a run. Each run is a fresh Python process training the same MLP."""

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
SCRIPT = """
import json, torch, torch.nn.functional as F, warnings
import lazax.modes as lx
from benchmarks.models import MLP, make_batch
warnings.simplefilter("always")
torch.manual_seed(0)
dev = lx.device()
model = MLP(16, 32, 4).to(dev)
opt = torch.optim.SGD(model.parameters(), lr=0.1)
losses = []
for step in range(3):
    x, y = make_batch(8 if step < 2 else 4, 16, 4, step)  # two graphs: two batch sizes
    opt.zero_grad()
    loss = F.cross_entropy(model(x.to(dev)), y.to(dev))
    loss.backward()
    opt.step()
    lx.sync()
    losses.append(loss.item())
names = ("PersistentCacheHit", "PersistentCacheMiss", "PersistentCacheLoadFailure",
         "UncachedCompile")
print(json.dumps({"losses": losses, **{n: lx.metrics.counter_value(n) or 0 for n in names}}))
"""


def _run(cache_dir, read_only=False):
    env = {**os.environ, "LAZAX_PERSISTENT_CACHE_DIR": str(cache_dir), "PYTHONPATH": str(ROOT)}
    env["LAZAX_PERSISTENT_CACHE_READ_ONLY"] = "1" if read_only else "0"
    done = subprocess.run(
        [sys.executable, "-c", SCRIPT], env=env, capture_output=True, text=True, cwd=ROOT
    )
    assert done.returncode == 0, done.stderr[-3000:]
    return json.loads(done.stdout.strip().splitlines()[-1]), done.stderr


@pytest.fixture(scope="module")
def warm(tmp_path_factory):
    cache_dir = tmp_path_factory.mktemp("lazax-cache") / "compiled"
    first, _ = _run(cache_dir)
    return cache_dir, first


def test_a_second_process_compiles_nothing(warm):
    cache_dir, first = warm
    assert first["PersistentCacheMiss"] == first["UncachedCompile"] > 0
    assert first["PersistentCacheHit"] == 0
    assert (cache_dir.stat().st_mode & 0o777) == 0o700  # created private to the user
    second, _ = _run(cache_dir)
    assert second["PersistentCacheMiss"] == 0
    assert second["PersistentCacheHit"] == second["UncachedCompile"] == first["UncachedCompile"]
    assert second["losses"] == first["losses"]


def test_corrupt_and_truncated_entries_warn_and_recompile(warm, tmp_path):
    # The two lazax graphs of the script (batches of 8, then of 4) are the two entries.
    cache_dir, first = warm
    copy = tmp_path / "copy"
    copy.mkdir(mode=0o700)
    entries = sorted(p for p in cache_dir.iterdir() if p.is_file())
    for p in entries:
        (copy / p.name).write_bytes(p.read_bytes())
    big = sorted((copy / p.name for p in entries), key=lambda p: p.stat().st_size)[-2:]
    big[0].write_bytes(b"not an executable" * 10)
    data = big[1].read_bytes()
    big[1].write_bytes(data[: len(data) // 3])
    run, stderr = _run(copy)  # another directory: keys do not depend on where it is
    assert run["PersistentCacheLoadFailure"] == 2
    assert "lazax: recompiled after" in stderr
    assert run["losses"] == first["losses"]


def test_an_unusable_directory_warns_and_runs_without_it(warm, tmp_path):
    _, first = warm
    not_a_dir = tmp_path / "file"
    not_a_dir.write_text("x")
    run, stderr = _run(not_a_dir)
    assert "cannot be used" in stderr
    assert run["PersistentCacheHit"] == run["PersistentCacheMiss"] == 0
    assert run["losses"] == first["losses"]


def test_read_only_loads_but_never_writes(warm, tmp_path):
    cache_dir, first = warm
    before = sorted(p.name for p in cache_dir.iterdir())
    run, _ = _run(cache_dir, read_only=True)
    assert run["PersistentCacheHit"] == first["UncachedCompile"]
    empty = tmp_path / "empty"
    empty.mkdir()
    fresh, _ = _run(empty, read_only=True)
    assert fresh["PersistentCacheMiss"] == fresh["UncachedCompile"] > 0
    assert list(empty.iterdir()) == []
    assert sorted(p.name for p in cache_dir.iterdir()) == before


@pytest.mark.skipif(os.geteuid() == 0, reason="root reads any directory, whatever its mode")
def test_an_unreadable_directory_warns_and_runs_without_it(warm, tmp_path):
    _, first = warm
    locked = tmp_path / "locked"
    locked.mkdir(mode=0o000)
    try:
        run, stderr = _run(locked)
    finally:
        locked.chmod(0o700)
    assert "cannot be used" in stderr
    assert run["losses"] == first["losses"]
