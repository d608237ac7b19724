"""torch_xla's device is ``xla``: ``torch.device("xla:0")`` is lazax's device when
``torch_xla`` is imported before lazax (lazax's ``LAZAX_DEVICE_NAME``); imported after
it, the device keeps lazax's name and one warning says why. Fresh interpreters: the name
is fixed once per process."""

import os
import subprocess
import sys
import textwrap


def _run(script: str, **env) -> subprocess.CompletedProcess:
    environ = {k: v for k, v in os.environ.items() if k != "LAZAX_DEVICE_NAME"}
    environ.update(env)
    return subprocess.run(
        [sys.executable, "-W", "always", "-c", textwrap.dedent(script)],
        env=environ,
        capture_output=True,
        text=True,
        timeout=300,
    )


def test_torch_xla_first_names_the_device_xla():
    done = _run(
        """
        import torch
        import torch_xla
        import torch_xla.core.xla_model as xm

        dev = torch_xla.device()
        assert dev == torch.device("xla:0") == xm.xla_device() and dev.type == "xla"
        t = torch.ones(2, 3, device="xla")
        assert t.device == dev and xm.is_xla_tensor(t) and t.is_xla
        assert not xm.is_xla_tensor(torch.ones(2))
        model = torch.nn.Linear(3, 1).to(dev)
        model(t).sum().backward()
        assert model.weight.grad.device.type == "xla"
        fn = torch.compile(lambda a: a * 2 + 1, backend="openxla")
        assert fn(t).device == dev
        print("OK")
        """
    )
    assert done.returncode == 0 and done.stdout.strip().endswith("OK"), done.stderr[-3000:]
    assert "imported before torch_xla" not in done.stderr


def test_lazax_first_keeps_its_name_and_warns():
    done = _run(
        """
        import torch
        import lazax.modes
        import torch_xla

        assert torch_xla.device() == torch.device("lazax:0")
        print("OK")
        """
    )
    assert done.returncode == 0 and done.stdout.strip().endswith("OK"), done.stderr[-3000:]
    assert "lazax was imported before torch_xla" in done.stderr


def test_the_users_own_lazax_device_name_wins():
    done = _run("import torch_xla; print(torch_xla.device())", LAZAX_DEVICE_NAME="lazax")
    assert done.returncode == 0 and done.stdout.strip() == "lazax:0", done.stderr[-3000:]


def test_the_name_does_not_reach_child_processes_that_import_lazax_alone():
    done = _run(
        """
        import os, subprocess, sys
        import torch_xla

        assert torch_xla.device().type == "xla" and "LAZAX_DEVICE_NAME" not in os.environ
        child = "import lazax.modes as lx; print(lx.device())"
        print(subprocess.run([sys.executable, "-c", child], capture_output=True,
                             text=True, check=True).stdout.strip())
        """
    )
    assert done.returncode == 0 and done.stdout.strip() == "lazax:0", done.stderr[-3000:]
