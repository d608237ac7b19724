"""Helpers for tests that train in every mode or read the program lazax hands XLA.

- ``MODES``: the four ways to run a step (``"lazy"``, ``"eager"``, ``"compile"``,
  ``"dynamo"``).
- ``train_in_mode(model, batches, mode, optimizer, device)``: one step per ``(x, y)``
  batch (``F.mse_loss``) in ``mode``; with ``device=None``, plain torch (the CPU
  oracle). The losses, as floats. ``"dynamo"`` is ``torch.compile(backend="lazax")``.
- ``last_program(run)``: the StableHLO text lazax hands XLA for the last graph that
  ``run()`` syncs.
- ``recompile_mark()`` / ``recompile_reports_since(mark)``: the recompile reports made
  after a mark, correct even once the bounded log has dropped old ones (a long test
  process fills it: every eager op shape after an op's first is reported).
"""

from __future__ import annotations

import torch
import torch.nn.functional as F

from lazax import executor as lx_exec

from ._compile import compile as compile_region
from ._eager import eager_mode_context

__all__ = ["MODES", "last_program", "recompile_mark", "recompile_reports_since", "train_in_mode"]

MODES = ("lazy", "eager", "compile", "dynamo")


def train_in_mode(model, batches, mode: str, optimizer, device=None) -> list[float]:
    forward = model
    if mode == "dynamo":
        torch._dynamo.reset()
        forward = torch.compile(model, backend="lazax")  # found by its entry point

    def step(x, y):
        optimizer.zero_grad(set_to_none=True)
        loss = F.mse_loss(forward(x), y)
        loss.backward()
        optimizer.step()
        return loss

    run = compile_region(step) if mode == "compile" else step
    losses = []
    for x, y in batches:
        if device is None:
            losses.append(step(x, y).item())
            continue
        x, y = x.to(device), y.to(device)
        if mode == "eager":
            with eager_mode_context(True):
                loss = step(x, y)
        else:
            loss = run(x, y)
            lx_exec.sync()
        losses.append(loss.item())
    return losses


def last_program(run) -> str:
    graphs = []
    lx_exec.EXECUTOR.graph_hooks.append(lambda name, graph: graphs.append(graph))
    try:
        run()
    finally:
        lx_exec.EXECUTOR.graph_hooks.pop()
    return lx_exec.lowered_text(graphs[-1])


def recompile_mark() -> int:
    """How many recompile reports were made so far: a mark for
    ``recompile_reports_since``."""
    return lx_exec.metrics.counter_value("RecompileReports") or 0


def recompile_reports_since(mark: int) -> list[str]:
    """The recompile reports made since ``mark``, oldest first."""
    made = recompile_mark() - mark
    return lx_exec.metrics.recompile_reports()[-made:] if made else []
