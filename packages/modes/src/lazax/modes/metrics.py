"""Counters and timed metrics (torch_xla's ``debug.metrics`` shape).

``counter_names()``, ``counter_value(name)`` (None if never bumped), ``metric_names()``,
``metric_data(name)`` -> ``(count, total_seconds, recent_samples)``, ``metrics_report()``,
``short_metrics_report()``, ``clear_all()``. Names: ``CompileTime``, ``ExecuteTime``,
``EagerOpCompileTime``, ``EagerOpExecuteTime``, ``CachedCompile``, ``UncachedCompile``,
``TransferToDeviceTime``, ``TransferFromDeviceTime``, ``CacheEvictions``, and
``aten::<op>`` for every op that ran through the CPU fallback; ``OutboundData`` /
``InboundData`` (bytes per transfer to / from the device), ``InputOutputAliasCount``
(donated inputs per compiled program), ``CreateCompileHandles`` /
``CreateDataHandles`` (executables and device buffers made), ``ScalarReads`` (host
reads of one element: ``.item()``, ``if t:``), ``LazyTracing`` (the time of each op on a
lazax tensor in lazax's dispatch: tracing it, and in eager mode running it),
``CreateXlaTensor`` / ``DestroyXlaTensor`` (lazax tensors made and freed: the
difference is how many are alive). ``metric_unit(name)``: "seconds", "bytes" or "count".
``recompile_reports()``: why each recent recompile happened (a graph name or code
location compiling a graph again), e.g. "input 0 shape changed from (8, 128) to
(8, 96) at train.py:42 (in step)"; ``LAZAX_DEBUG_RECOMPILES=1`` prints them as they
happen. ``compiles_by_name()``: program name -> (compiles, seconds), most compiled
first; ``metrics_report()`` ends with the same list. ``traced_op_counts()``: op name
(``aten::add``; an in-place op by its functional name) -> how many times it was traced
onto a lazax tensor (eager ops too; a replayed region traces nothing).
``ExecuteTime`` / ``EagerOpExecuteTime`` time each run from its dispatch;
``set_device_timing(True)`` (or ``LAZAX_DEVICE_TIMING=1``; on under the torch_xla
package) times it to the device's end instead, at 45-85 us per run on a 2-core CPU, and
then reading a metric waits for the runs already dispatched. ``device_timing()`` says
which. The per-op metrics (``LazyTracing``, ``CreateXlaTensor``, ``DestroyXlaTensor``)
are kept only while ``op_metrics()`` is on: ``set_op_metrics(True)``,
``LAZAX_OP_METRICS=1``, or importing the torch_xla package; off (the default) the code
that keeps them is not installed, saving ~0.6 us of a traced op's ~8.6 us.
"""

from lazax.executor.metrics import (
    clear_all,
    compiles_by_name,
    counter_names,
    counter_value,
    device_timing,
    metric_data,
    metric_names,
    metric_unit,
    metrics_report,
    op_metrics,
    recompile_reports,
    set_device_timing,
    set_op_metrics,
    short_metrics_report,
    traced_op_counts,
)

__all__ = [
    "clear_all",
    "compiles_by_name",
    "counter_names",
    "counter_value",
    "device_timing",
    "metric_data",
    "metric_names",
    "metric_unit",
    "metrics_report",
    "op_metrics",
    "recompile_reports",
    "set_device_timing",
    "set_op_metrics",
    "short_metrics_report",
    "traced_op_counts",
]
