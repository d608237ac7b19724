"""examples/torch_xla_script.py, a torch_xla-style training script, runs unchanged:
it trains (the loss falls), logs through step closures, and writes a CPU checkpoint."""

import subprocess
import sys
from pathlib import Path

import torch

ROOT = Path(__file__).resolve().parents[3]


def test_the_torch_xla_example_script_trains_unchanged(tmp_path):
    ckpt = tmp_path / "mnist.pt"
    done = subprocess.run(
        [sys.executable, str(ROOT / "examples" / "torch_xla_script.py"), "--ckpt", str(ckpt)],
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    out = done.stdout
    assert "replica 0 of 1 on CPU" in out and "step   4 loss" in out
    summary = next(line for line in out.splitlines() if line.startswith("epochs 2"))
    first, last = float(summary.split()[4]), float(summary.split()[7])
    assert last < first * 0.6, summary
    # one step's program (SGD's momentum buffers start as device zeros), then cached
    assert "Counter: UncachedCompile\n  Value: 1\n" in out
    state = torch.load(ckpt)
    assert all(t.device.type == "cpu" for t in state.values())
    assert set(state) >= {"conv1.weight", "fc2.bias"}
