"""The execute stage: an executable and its arguments in, output buffers out.

Contract of ``execute(runtime, entry, values, ...)``: arrange the parameters' values as
the program's arguments (``arguments``) and run the executable asynchronously
(the outputs are futures), timed as ``timer`` (and as ``ExecuteReplicatedTime`` for
an ``spmd`` program, over a mesh) from the dispatch; with ``metrics.device_timing()``
to the device's end: a program that ran within its dispatch (a small one on the CPU)
is timed at once, one still running is left to ``metrics.record_when_done``'s thread,
which waits on a second reference to the first output's buffer
(``runtime.done_handle``: the output's own reference count, which decides its
donation, stays as it was; a donated one is not waited on);
return the outputs in the graph's root
order (a program compiled with ``lower(graph, order)`` returns them in ``order``:
``entry.annotations.positions``), any device-side check flags last; count the output
buffers (``CreateDataHandles``) and the donated ones (``DonatedBuffers``); turn the
runtime's out-of-memory error into ``torch.OutOfMemoryError`` naming ``what`` and,
where the caller has it, the graph's inputs (``oom``). The dispatch is a profiler span
``lazax::execute <program name>``. Nothing here touches a tensor or reads the program's
device-side checks (its last output, when ``entry.annotations.checks``): the barrier
and the replay queue those and hand the results back themselves.
"""

from __future__ import annotations

from functools import partial
from time import perf_counter

from lazax import ir, pjrt

from .. import metrics
from ..profiling import span
from .oom import out_of_memory

__all__ = ["execute"]


def execute(
    runtime,
    entry,
    values: list,
    *,
    timer: str = "ExecuteTime",
    donated: int = 0,
    what=None,
    graph: ir.Graph | None = None,
    spmd: bool = False,
) -> list:
    """The output buffers of one execution. ``values``: the graph's parameters' values, in
    its parameter order (packed here as the program takes them); ``what``: a callable
    naming the program for an out-of-memory error (called only then); ``graph``: its IR,
    for the inputs' sizes."""
    packing = entry.annotations.packing
    args = packing.arrange(values)
    start = perf_counter()  # not metrics.timed: a context manager costs per op here
    try:
        with span("execute", entry.name):
            outputs = runtime.execute(entry, args)
    except pjrt.DeviceOutOfMemory as err:
        # The sizes the runtime reports are per argument: name the parameters behind them.
        inputs = None if graph is None else [graph.parameters[i] for i in packing.singles]
        raise out_of_memory(err, what() if what else "a graph", graph, runtime, inputs) from err
    # ExecuteReplicatedTime: a program over a mesh, torch_xla's name for such a run.
    timers = (timer, "ExecuteReplicatedTime") if spmd else (timer,)
    if outputs and metrics.device_timing() and not runtime.is_ready(outputs[0]):
        handle = runtime.done_handle(outputs[0])
        metrics.record_when_done(timers, start, partial(runtime.wait_done, handle))
    else:
        metrics.record_run(timers, perf_counter() - start)
    metrics.bump("CreateDataHandles", len(outputs))
    if donated:
        metrics.bump("DonatedBuffers", donated)
    positions = entry.annotations.positions
    if positions is not None:  # (donation.output_order)
        outputs = [outputs[p] for p in positions] + list(outputs[len(positions) :])
    return outputs
