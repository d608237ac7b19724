"""torch_xla's top-level functions over lazax (``torch_xla.device()``, ``sync()``...).

Contract (torch_xla 2.9's documented behaviour, on the ``lazax`` device):
- ``device(index=None)``: ``torch.device("lazax:<index>")`` (index 0 when None);
  ``devices()``: every device of this process; ``device_count()``: how many.
- ``sync(wait=False, reset_scope=True)``: cut the trace (``lx.sync``), then run the step
  closures queued by ``xm.add_step_closure`` in order (torch_xla's ``mark_step``).
- ``compile(f=None, full_graph=False, name=None, max_different_graphs=None)``:
  ``lx.compile``: a decorator, a wrapper or a ``with`` block; one graph per call.
- ``step()``: a ``with`` block that syncs on entry (pending work is not part of it)
  and on exit, even when the body raises.
- ``manual_seed(seed, device=None)``: the device RNG's seed (random ops on the device
  repeat after it); CPU's RNG is not touched, as in torch_xla.
- ``launch(fn, args=(), start_method="spawn", debug_single_process=False)``: under
  torchrun, ``fn(local_ordinal, *args)`` in this process; otherwise
  ``xmp.spawn``'s single process (lazax drives every local device from one process).
- ``add_step_closure(closure, args=(), run_async=False)``: ``closure(*args)`` after the
  next ``sync()`` (its tensors then hold values).
"""

from __future__ import annotations

import contextlib
import os

import torch

import lazax.modes as lx

__all__ = [
    "add_step_closure",
    "compile",
    "device",
    "device_count",
    "devices",
    "launch",
    "manual_seed",
    "step",
    "sync",
]

_CLOSURES: list = []


def device(index: int | None = None) -> torch.device:
    """The lazax device ``index`` (0 when None), torch_xla's ``xla:<index>``."""
    return lx.device(0 if index is None else int(index))


def devices() -> list[torch.device]:
    """Every device of this process."""
    return [lx.device(i) for i in range(lx.device_count())]


def device_count() -> int:
    """How many devices this process drives."""
    return lx.device_count()


def add_step_closure(closure, args=(), run_async: bool = False) -> None:
    """Run ``closure(*args)`` after the next ``sync()``/``mark_step()`` (in order).
    ``run_async`` is accepted; closures run in the syncing thread either way."""
    _CLOSURES.append((closure, tuple(args)))


def sync(wait: bool = False, reset_scope: bool = True) -> None:
    """torch_xla's ``sync``/``mark_step``: run the pending graph, then step closures."""
    lx.sync(wait=wait)
    while _CLOSURES:
        closure, args = _CLOSURES.pop(0)
        closure(*args)


def compile(
    f=None,
    full_graph: bool = False,
    name: str | None = None,
    max_different_graphs: int | None = None,
):
    """torch_xla.compile: ``f`` traced as one graph per call (``lx.compile``)."""
    return lx.compile(
        f, full_graph=bool(full_graph), name=name, max_different_graphs=max_different_graphs
    )


@contextlib.contextmanager
def step():
    """``with torch_xla.step():``: the block's work is one step, synced at its end."""
    sync()
    try:
        yield
    finally:
        sync()


def manual_seed(seed: int, device=None) -> None:
    """Seed the device's random number generator (not the CPU's)."""
    torch.get_device_module("lazax").manual_seed(int(seed))


def launch(fn, args=(), start_method: str = "spawn", debug_single_process: bool = False):
    """Run ``fn(index, *args)``: under torchrun in this process with its local rank,
    otherwise once, in this process (``xmp.spawn`` with the one process lazax uses)."""
    if "TORCHELASTIC_RUN_ID" in os.environ or "LOCAL_RANK" in os.environ:
        return fn(int(os.environ.get("LOCAL_RANK", "0")), *args)
    return fn(0, *args)
