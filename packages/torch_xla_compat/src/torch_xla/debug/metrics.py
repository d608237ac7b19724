"""``torch_xla.debug.metrics`` (``met``): lazax's counters and timed metrics.

Contract: ``counter_names()``, ``counter_value(name)`` (None if never counted),
``metric_names()``, ``metric_data(name)`` -> ``(count, total_seconds, samples)`` or None,
``metrics_report()``, ``short_metrics_report(counter_names=None, metric_names=None)``,
``clear_all()``, ``clear_counters()``, ``clear_metrics()``: lazax.modes.metrics. The
names torch_xla's users read exist with the same meaning: ``CompileTime``,
``ExecuteTime``, ``CachedCompile``, ``UncachedCompile``, ``TransferToDeviceTime``,
``TransferFromDeviceTime`` and ``aten::<op>`` for each op that ran on the CPU
(``executed_fallback_ops()`` lists them, with custom ops' ``lib::op``). lazax keeps
no per-op ``xla::<op>`` counters (it counts graphs, not ops).
``short_metrics_report``'s name filters are accepted; lazax's short report is fixed.
"""

from lazax.modes import metrics as _metrics

__all__ = [
    "clear_all",
    "clear_counters",
    "clear_metrics",
    "counter_names",
    "counter_value",
    "executed_fallback_ops",
    "metric_data",
    "metric_names",
    "metrics_report",
    "short_metrics_report",
]

counter_names = _metrics.counter_names
counter_value = _metrics.counter_value
metric_names = _metrics.metric_names
metric_data = _metrics.metric_data
metrics_report = _metrics.metrics_report
clear_all = _metrics.clear_all


def short_metrics_report(counter_names=None, metric_names=None) -> str:
    """Compile and execute times, and the ops that ran on the CPU."""
    return _metrics.short_metrics_report()


def clear_counters() -> None:
    """lazax clears counters and metrics together."""
    _metrics.clear_all()


def clear_metrics() -> None:
    _metrics.clear_all()


def executed_fallback_ops() -> list[str]:
    """The ops that ran through the CPU fallback: their counters' names (``aten::<op>``,
    or a custom op's qualified name such as ``mylib::op``)."""
    return sorted(n for n in _metrics.counter_names() if "::" in n)
