"""``torch_xla.debug.metrics`` (``met``): lazax's counters and timed metrics.

Contract: ``counter_names()``, ``counter_value(name)`` (None if never counted),
``metric_names()``, ``metric_data(name)`` -> ``(count, accumulator, samples)`` or None,
``metrics_report()``, ``short_metrics_report(counter_names=None, metric_names=None)``,
``clear_all()``, ``clear_counters()``, ``clear_metrics()``: lazax.modes.metrics. As in
torch_xla, a time metric's accumulator and samples are nanoseconds (lazax keeps
seconds). The names torch_xla's users read exist with the same meaning:
``CompileTime``, ``ExecuteTime``, ``CachedCompile``, ``UncachedCompile``,
``TransferToDeviceTime``, ``TransferFromDeviceTime``, ``MarkStep`` (one per
``torch_xla.sync()``) and ``aten::<op>`` for each op that ran on the CPU
(``executed_fallback_ops()`` lists them, with custom ops' ``lib::op``); counters bumped
with ``torch_xla._XLAC._xla_increment_counter`` are reported beside them. ``xla::<op>``:
how many times lazax traced the op (``lx.metrics.traced_op_counts``; ``t += 2`` counts as
``xla::add``, as torch_xla's functionalized ``add_``); a dynamo graph that replays traces
nothing, so its ops are not counted again. ``DynamoSyncInputExecuteTime`` is a counter
in torch_xla (the dynamo bridge ran its inputs' pending IR first) and a timed metric in
lazax: both are reported, the counter being the metric's count of samples.
``short_metrics_report(counter_names, metric_names)``: the full report's entries of
those names (torch_xla's default lists where None) and the CPU-fallback counters.
"""

from lazax.modes import metrics as _metrics

from .. import _counters

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

metric_names = _metrics.metric_names


def _op_counters() -> dict[str, int]:
    """``xla::<op>`` -> times traced (a namespace other than aten's is kept: ``xla::ns::op``)."""
    return {
        "xla::" + name.removeprefix("aten::"): count
        for name, count in _metrics.traced_op_counts().items()
    }


# Events torch_xla counts and lazax times: the counter is the metric's sample count.
_TIMED_EVENTS = ("DynamoSyncInputExecuteTime",)


def _event_counters() -> dict[str, int]:
    counts = {}
    for name in _TIMED_EVENTS:
        data = _metrics.metric_data(name)
        if data is not None:
            counts[name] = data[0]
    return counts


def counter_names() -> list[str]:
    names = list(_metrics.counter_names()) + list(_op_counters()) + list(_event_counters())
    return names + _counters.names()


def counter_value(name: str) -> int | None:
    own = _counters.value(name)
    if own is not None:
        return own
    if name.startswith("xla::"):
        return _op_counters().get(name)
    if name in _TIMED_EVENTS:
        return _event_counters().get(name)
    return _metrics.counter_value(name)


# Timers whose names do not end in "Time" (lazax keeps every timer in seconds).
_OTHER_TIMERS = ("RunCachedGraphInputData", "RunCachedGraphOutputData")


def metric_data(name: str):
    data = _metrics.metric_data(name)
    if data is None or not (name.endswith("Time") or name in _OTHER_TIMERS):
        return data
    count, total, samples = data
    return count, total * 1e9, [s * 1e9 for s in samples]


def _own_counters() -> str:
    counts = {**_op_counters(), **_event_counters()}
    counts.update({n: _counters.value(n) for n in _counters.names()})
    return "".join(f"Counter: {n}\n  Value: {v}\n" for n, v in counts.items())


def metrics_report() -> str:
    return _metrics.metrics_report() + _own_counters()


# torch_xla's default short report: its step-level times and counters.
_SHORT_METRICS = (
    "CompileTime",
    "ExecuteTime",
    "ExecuteReplicatedTime",
    "TransferToDeviceTime",
    "TransferFromDeviceTime",
)
_SHORT_COUNTERS = ("CachedCompile", "MarkStep", "DynamoSyncInputExecuteTime")


def _blocks(report: str):
    """``(kind, name, text)`` of each ``Metric:``/``Counter:`` entry of a full report."""
    blocks, current = [], None
    for line in report.splitlines(keepends=True):
        if line.startswith(("Metric: ", "Counter: ")):
            kind, _, name = line.partition(": ")
            current = [kind, name.strip(), line]
            blocks.append(current)
        elif line.startswith("  ") and current is not None:
            current[2] += line
        else:
            current = None  # a section that is not an entry (compiles by name)
    return blocks


def short_metrics_report(counter_names=None, metric_names=None) -> str:
    """The entries of ``metrics_report()`` named by ``metric_names`` and ``counter_names``
    (torch_xla's defaults where None: compile, execute and transfer times,
    ``CachedCompile``, ``MarkStep`` and ``DynamoSyncInputExecuteTime``), and every op that
    ran on the CPU (``aten::<op>``)."""
    metrics = set(_SHORT_METRICS if metric_names is None else metric_names)
    counters = set(_SHORT_COUNTERS if counter_names is None else counter_names)
    keep = []
    for kind, name, text in _blocks(metrics_report()):
        wanted = metrics if kind == "Metric" else counters
        if name in wanted or (kind == "Counter" and name in executed_fallback_ops()):
            keep.append(text)
    return "".join(keep)


def clear_all() -> None:
    _metrics.clear_all()
    _counters.clear()


def clear_counters() -> None:
    """lazax clears counters and metrics together."""
    clear_all()


def clear_metrics() -> None:
    clear_all()


def executed_fallback_ops() -> list[str]:
    """The ops that ran through the CPU fallback: their counters' names (``aten::<op>``,
    or a custom op's qualified name such as ``mylib::op``)."""
    return sorted(n for n in _metrics.counter_names() if "::" in n)
