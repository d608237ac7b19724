"""Refusing to import beside a real torch_xla, torch_xla's environment variables, and
``torch.compile(backend="openxla")`` on lazax (training equal to the CPU)."""

import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
import torch
import torch.nn.functional as F
import torch_xla
import torch_xla.core.xla_model as xm
import torch_xla.debug.metrics as met
from torch_xla import _env

ROOT = Path(__file__).resolve().parents[3]


def _import_with(path: Path):
    env = {**os.environ, "PYTHONPATH": f"{path}{os.pathsep}{os.environ.get('PYTHONPATH', '')}"}
    return subprocess.run(
        [sys.executable, "-c", "import torch_xla"], capture_output=True, text=True, env=env
    )


def test_import_refuses_beside_a_torch_xla_distribution(tmp_path):
    info = tmp_path / "torch_xla-2.9.0.dist-info"
    info.mkdir()
    (info / "METADATA").write_text("Metadata-Version: 2.1\nName: torch_xla\nVersion: 2.9.0\n")
    done = _import_with(tmp_path)
    assert done.returncode != 0
    assert "ImportError" in done.stderr and "real torch_xla is installed" in done.stderr
    assert "torch_xla 2.9.0" in done.stderr


def test_import_refuses_beside_a_torch_xla_extension_elsewhere(tmp_path):
    other = tmp_path / "elsewhere"
    (other / "torch_xla").mkdir(parents=True)
    (other / "torch_xla" / "_XLAC.cpython-311-x86_64-linux-gnu.so").write_bytes(b"")
    script = f"import sys; sys.path.append({str(other)!r}); import torch_xla"
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True)
    assert done.returncode != 0 and "_XLAC" in done.stderr


def test_import_alone_is_fine():
    done = subprocess.run(
        [sys.executable, "-c", "import torch_xla; print(torch_xla.__version__)"],
        capture_output=True,
        text=True,
    )
    assert done.returncode == 0, done.stderr[-2000:]


def test_environment_variables_are_mapped_and_ignored_ones_warn():
    environ = {"PT_XLA_DEBUG_LEVEL": "2", "XLA_PERSISTENT_CACHE_PATH": "/tmp/c"}
    assert _env.apply(environ) == []
    assert environ["LAZAX_DEBUG_RECOMPILES"] == "1"
    assert environ["LAZAX_PERSISTENT_CACHE_DIR"] == "/tmp/c"
    kept = {"PT_XLA_DEBUG": "1", "LAZAX_DEBUG_RECOMPILES": "0", "XLA_USE_EAGER_DEBUG_MODE": "0"}
    _env.apply(kept)
    assert kept["LAZAX_DEBUG_RECOMPILES"] == "0"  # the user's own lazax setting wins
    assert kept["LAZAX_USE_EAGER_MODE"] == "0"
    with pytest.warns(UserWarning, match="XLA_USE_BF16 is set but has no effect"):
        assert _env.apply({"XLA_USE_BF16": "1"}) == ["XLA_USE_BF16"]


def test_pt_xla_debug_level_prints_recompile_explanations():
    script = textwrap.dedent(
        """
        import torch, torch_xla
        for n in (4, 6):
            (torch.ones(n, device=torch_xla.device()) * 2).cpu()
        """
    )
    env = {**os.environ, "PT_XLA_DEBUG_LEVEL": "1"}
    env.pop("LAZAX_DEBUG_RECOMPILES", None)
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, env=env)
    assert done.returncode == 0, done.stderr[-2000:]
    assert "lazax: recompile of" in done.stderr and "changed from" in done.stderr


def test_the_environment_table_in_the_docs_lists_every_variable():
    text = (ROOT / "docs" / "torch_xla.md").read_text(encoding="utf-8")
    for name in [*_env.HONOURED, *_env.MAPPED, *_env.IGNORED]:
        assert f"`{name}`" in text, name


def _train(device, compiled: bool):
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(5, 8), torch.nn.ReLU(), torch.nn.Linear(8, 2))
    model = model.to(device)
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    forward = torch.compile(model, backend="openxla") if compiled else model
    gen = torch.Generator().manual_seed(3)
    losses = []
    for _ in range(3):
        x, y = torch.randn(4, 5, generator=gen), torch.randn(4, 2, generator=gen)
        opt.zero_grad()
        loss = F.mse_loss(forward(x.to(device)), y.to(device))
        loss.backward()
        opt.step()
        if compiled:
            xm.mark_step()
        losses.append(loss.item())
    return losses, [p.detach().cpu() for p in model.parameters()]


def test_openxla_backend_is_lazax_and_trains_as_the_cpu():
    torch._dynamo.reset()
    want_losses, want = _train(torch.device("cpu"), compiled=False)
    met.clear_all()
    losses, got = _train(torch_xla.device(), compiled=True)
    assert (met.counter_value("DynamoExtractCompiledGraph") or 0) >= 2  # forward, backward
    torch.testing.assert_close(losses, want_losses, rtol=1e-4, atol=1e-5)
    for a, b in zip(got, want):
        torch.testing.assert_close(a, b, rtol=1e-4, atol=1e-5)


def test_the_entry_point_names_the_lazax_backend():
    from importlib.metadata import entry_points

    (point,) = [p for p in entry_points(group="torch_dynamo_backends") if p.name == "openxla"]
    assert point.value == "torch_xla._dynamo:openxla_backend"
    backend = point.load()
    compiled = torch.compile(lambda x: x.sin() * 2, backend=backend)
    x = torch.randn(5)
    torch.testing.assert_close(compiled(x.to(torch_xla.device())).cpu(), x.sin() * 2)
