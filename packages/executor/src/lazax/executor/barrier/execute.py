"""The execute stage: an executable and its arguments in, output buffers out.

Contract of ``execute(runtime, entry, values, ...)``: arrange the parameters' values as
the program's arguments (``arguments``) and run the executable asynchronously
(the outputs are futures), timed as ``timer``; count the donated buffers
(``DonatedBuffers``); turn the runtime's out-of-memory error into
``torch.OutOfMemoryError`` naming ``what`` and, where the caller has it, the graph's
inputs (``oom``). A program with device-side checks returns their flags as its last
output: ``queue_checks`` hands them to ``CHECKS`` with what to do if one failed
(``kept``: the results stay, or ``"reverted"`` with ``undo``). Nothing here touches a
tensor: the barrier and the replay hand the results back themselves.
"""

from __future__ import annotations

from time import perf_counter

from lazax import ir, pjrt

from .. import metrics
from .checks import CHECKS
from .oom import out_of_memory

__all__ = ["execute", "queue_checks"]


def execute(
    runtime,
    entry,
    values: list,
    *,
    timer: str = "ExecuteTime",
    donated: int = 0,
    what=None,
    graph: ir.Graph | None = None,
) -> list:
    """The output buffers of one execution. ``values``: the graph's parameters' values, in
    its parameter order (packed here as the program takes them); ``what``: a callable
    naming the program for an out-of-memory error (called only then); ``graph``: its IR,
    for the inputs' sizes."""
    args = entry.annotations.packing.arrange(values)
    start = perf_counter()  # not metrics.timed: a context manager costs per op here
    try:
        outputs = runtime.execute(entry, args)
    except pjrt.DeviceOutOfMemory as err:
        raise out_of_memory(err, what() if what else "a graph", graph, runtime) from err
    metrics.record(timer, perf_counter() - start)
    if donated:
        metrics.bump("DonatedBuffers", donated)
    return outputs


def queue_checks(entry, outputs: list, sites, graph_name, kept: str, undo=None) -> None:
    """Queue the device-side checks of an execution of ``entry`` (its last output is
    their flags). ``sites``: (op, where it was traced) for each check; a callable
    computing them is called only if the program has checks."""
    checks = entry.annotations.checks
    if not checks:
        return
    if callable(sites):
        sites = sites(checks)
    CHECKS.queue(outputs[-1], checks, sites, graph_name, kept, undo)
