"""Counters and timed metrics (torch_xla's ``debug.metrics`` shape).

``counter_names()``, ``counter_value(name)`` (None if never bumped), ``metric_names()``,
``metric_data(name)`` -> ``(count, total_seconds, recent_samples)``, ``metrics_report()``,
``short_metrics_report()``, ``clear_all()``. Names: ``CompileTime``, ``ExecuteTime``,
``EagerOpCompileTime``, ``EagerOpExecuteTime``, ``CachedCompile``, ``UncachedCompile``,
``TransferToDeviceTime``, ``TransferFromDeviceTime``, ``CacheEvictions``, and
``aten::<op>`` for every op that ran through the CPU fallback.
"""

from lazax.executor.metrics import (
    clear_all,
    counter_names,
    counter_value,
    metric_data,
    metric_names,
    metrics_report,
    short_metrics_report,
)

__all__ = [
    "clear_all",
    "counter_names",
    "counter_value",
    "metric_data",
    "metric_names",
    "metrics_report",
    "short_metrics_report",
]
