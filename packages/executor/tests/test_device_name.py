"""``LAZAX_DEVICE_NAME``: the device type's name, read once when lazax is imported.

Each case runs in a fresh interpreter: torch renames its PrivateUse1 backend once per
process, so the switch cannot be tried twice in this one.
"""

import os
import subprocess
import sys
import textwrap

import pytest

_XLA_SCRIPT = textwrap.dedent(
    """
    import io
    import torch
    import lazax.executor as le

    assert le.DEVICE_NAME == "xla"
    assert le.device(0) == torch.device("xla:0")  # torch parses "xla" as lazax's device
    x = torch.randn(3, 4, device="xla")
    assert type(x) is le.LazyTensor and x.device.type == "xla" and x.is_xla
    assert torch.ones(2).to("xla").device == torch.device("xla", 0)

    # autograd records xla tensors (it asks the device's guard for a stream) and an
    # optimizer steps them.
    model = torch.nn.Linear(4, 2).to("xla")
    opt = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)
    for _ in range(2):
        opt.zero_grad()
        model(x).pow(2).mean().backward()
        opt.step()
    assert model.weight.grad.device.type == "xla"
    expected = model.weight.cpu()

    buf = io.BytesIO()
    torch.save(model.state_dict(), buf)
    buf.seek(0)
    loaded = torch.load(buf)
    assert loaded["weight"].device.type == "xla"
    torch.testing.assert_close(loaded["weight"].cpu(), expected)

    with torch.autocast("xla", dtype=torch.bfloat16):
        assert model(x).dtype == torch.bfloat16
    torch.xla.manual_seed(0)  # the device module is torch.xla
    print("OK")
    """
)


def _run(script: str, name: str | None) -> subprocess.CompletedProcess:
    env = dict(os.environ)
    env.pop("LAZAX_DEVICE_NAME", None)
    if name is not None:
        env["LAZAX_DEVICE_NAME"] = name
    return subprocess.run(
        [sys.executable, "-c", script], env=env, capture_output=True, text=True, timeout=300
    )


def test_xla_names_the_device_for_tensors_autograd_optimizers_and_checkpoints():
    proc = _run(_XLA_SCRIPT, "xla")
    assert proc.returncode == 0 and proc.stdout.strip().endswith("OK"), proc.stderr[-3000:]


def test_default_name_is_lazax():
    script = (
        "import torch, lazax.executor as le\n"
        "assert le.DEVICE_NAME == 'lazax'\n"
        "assert torch.ones(2, device='lazax').device == torch.device('lazax:0')\n"
        "print('OK')\n"
    )
    proc = _run(script, None)
    assert proc.returncode == 0 and proc.stdout.strip().endswith("OK"), proc.stderr[-3000:]


@pytest.mark.parametrize("name", ["cuda", "XLA-ish"])
def test_other_names_are_refused_at_import(name):
    proc = _run("import lazax.executor", name)
    assert proc.returncode != 0
    assert "LAZAX_DEVICE_NAME" in proc.stderr and "lazax, xla" in proc.stderr
