"""torch's control-flow operators after ``import lazax.modes`` alone: torch runs them
through dynamo even outside ``torch.compile``, and lazax teaches dynamo its tensor when
dynamo is imported, not when lazax is. A fresh process, so nothing else has imported
``lazax.dynamo`` first; and ``torch._higher_order_ops.map``, which lowers to one
``lax.map``, equal to the CPU with its gradient in every mode."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap

import pytest
import torch
from torch._higher_order_ops.map import map as hop_map

import lazax.modes as lx

DEV = lx.device()
WHERE = ["lazy", "compile", "dynamo"]

_FRESH = textwrap.dedent(
    """
    import json, sys
    import torch
    from torch._higher_order_ops.map import map as hop_map
    from torch._higher_order_ops.scan import scan
    from torch._higher_order_ops.while_loop import while_loop

    import lazax.modes as lx

    report = {"dynamo_at_import": "torch._dynamo" in sys.modules}
    dev = lx.device()

    def cond(x):
        return torch.cond(x.sum() > 0, lambda v: v.sin() * 2, lambda v: v.cos() - 1, (x,))

    def loop(x):
        zero = torch.zeros((), dtype=torch.int64, device=x.device)
        return while_loop(lambda i, v: i < 3, lambda i, v: (i + 1, v * 2 + 1), (zero, x))[1]

    def scanned(x):
        return scan(lambda c, v: (c + v, c * v), x[0], x)[1]

    def mapped(x):
        return hop_map(lambda v: v.exp() * 2 + 1, x)

    ops = {"cond": cond, "while_loop": loop, "scan": scanned, "map": mapped}
    for where in ("lazy", "compile", "dynamo"):
        if where == "dynamo":
            # torch.compile(backend="lazax") is the first to import lazax.dynamo
            report["backend_imported_before_dynamo_mode"] = "lazax.dynamo" in sys.modules
        for name, fn in ops.items():
            for sign in (1.0, -1.0):
                x = torch.randn(4, 3).abs() * sign
                try:
                    if where == "lazy":
                        out = fn(x.to(dev))
                    elif where == "compile":
                        out = lx.compile(fn, full_graph=True)(x.to(dev))
                    else:
                        out = torch.compile(fn, backend="lazax", fullgraph=True)(x.to(dev))
                    torch.testing.assert_close(out.cpu(), fn(x))
                    report[f"{where} {name} {sign}"] = "ok"
                except Exception as e:
                    report[f"{where} {name} {sign}"] = f"{type(e).__name__}: {e}"[:500]
    print(json.dumps(report))
    """
)


def test_control_flow_after_import_lazax_modes_alone_in_every_mode():
    env = {**os.environ, "PYTHONWARNINGS": "ignore"}
    done = subprocess.run(
        [sys.executable, "-c", _FRESH], capture_output=True, text=True, timeout=600, env=env
    )
    assert done.returncode == 0, done.stderr[-4000:]
    report = json.loads(done.stdout.strip().splitlines()[-1])
    # Nothing of dynamo is loaded by importing lazax: a program that never compiles does
    # not pay for it.
    assert report.pop("dynamo_at_import") is False
    assert report.pop("backend_imported_before_dynamo_mode") is False
    failed = {case: result for case, result in report.items() if result != "ok"}
    assert not failed, failed
    assert len(report) == 3 * 4 * 2


def _mapped(x, w):
    return hop_map(lambda row, w: (row @ w).tanh() + row.sum(), x, w)


@pytest.mark.parametrize("where", WHERE)
def test_map_equals_the_cpu_with_gradients(where):
    torch.manual_seed(2)
    x = torch.randn(5, 3, requires_grad=True)
    w = torch.randn(3, 3, requires_grad=True)
    expected = _mapped(x, w)
    expected.square().sum().backward()
    xl = x.detach().to(DEV).requires_grad_()
    wl = w.detach().to(DEV).requires_grad_()
    if where == "lazy":
        out = _mapped(xl, wl)
    elif where == "compile":
        out = lx.compile(_mapped, full_graph=True)(xl, wl)
    else:
        torch._dynamo.reset()
        out = torch.compile(_mapped, backend="lazax", fullgraph=True)(xl, wl)
    torch.testing.assert_close(out.detach().cpu(), expected.detach(), rtol=1e-5, atol=1e-6)
    out.square().sum().backward()
    torch.testing.assert_close(xl.grad.cpu(), x.grad, rtol=1e-4, atol=1e-5)
    torch.testing.assert_close(wl.grad.cpu(), w.grad, rtol=1e-4, atol=1e-5)


def test_map_is_one_loop_in_the_program():
    x = torch.randn(6, 3).to(DEV)
    w = torch.randn(3, 3).to(DEV)
    program = lx.program_text([_mapped(x, w)], form="stablehlo")
    # One loop over the rows, not six copies of the body.
    assert program.count("stablehlo.while") == 1, program
    assert program.count("stablehlo.dot_general") == 1, program
