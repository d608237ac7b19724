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
``TensorToData`` reports ``TransferToDeviceTime``'s samples (lazax converts and
transfers in one timed step). ``InboundData`` / ``OutboundData`` (bytes of each
transfer), ``InputOutputAliasCount`` (donated inputs per compiled program),
``CreateCompileHandles`` and ``CreateDataHandles`` (executables and device buffers
made), ``CreateXlaTensor`` / ``DestroyXlaTensor`` (lazax tensors made and freed) and
``LazyTracing`` (each op's time in lazax's dispatch) are lazax's own, under torch_xla's
names; importing this package keeps the last three (``lx.metrics.set_op_metrics``),
which lazax alone keeps only on request, unless ``LAZAX_OP_METRICS`` is set.
``ExecuteTime`` runs, as torch_xla's, from a program's dispatch to the device's end:
importing this package turns on lazax's device timing (``lx.metrics.set_device_timing``)
unless ``LAZAX_DEVICE_TIMING`` is set; reading a metric then waits for the programs
already dispatched. A host read of one element (``.item()``, ``if t:``) counts as
``aten::_local_scalar_dense``, a CPU fallback in torch_xla, where its users look for it.
Batch norm counts as ``xla::native_batch_norm``, torch_xla's lowering of every
``_native_batch_norm_legit*`` op lazax traces.
``short_metrics_report(counter_names, metric_names)``: the full report's entries of
those names (torch_xla's default lists where None) and the CPU-fallback counters.
"""

import os

from lazax.modes import metrics as _metrics

from .. import _counters

if "LAZAX_DEVICE_TIMING" not in os.environ:  # the user's choice wins
    _metrics.set_device_timing(True)
if "LAZAX_OP_METRICS" not in os.environ:  # torch_xla keeps them always
    _metrics.set_op_metrics(True)

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

# Ops torch_xla lowers (and counts) under another name than the one lazax traces.
_TORCH_XLA_OP_NAMES = {
    "_native_batch_norm_legit": "native_batch_norm",
    "_native_batch_norm_legit_functional": "native_batch_norm",
    "_native_batch_norm_legit_no_training": "native_batch_norm",
}


def _op_counters() -> dict[str, int]:
    """``xla::<op>`` -> times traced (a namespace other than aten's is kept: ``xla::ns::op``)."""
    counts: dict[str, int] = {}
    for name, count in _metrics.traced_op_counts().items():
        op = name.removeprefix("aten::")
        key = "xla::" + _TORCH_XLA_OP_NAMES.get(op, op)
        counts[key] = counts.get(key, 0) + count
    return counts


# A read of one element to the host (``.item()``, ``if t:``) is a CPU fallback of
# ``_local_scalar_dense`` in torch_xla, where users look for it; lazax counts the same
# reads as ``ScalarReads``.
_SCALAR_READ = "aten::_local_scalar_dense"


def _fallback_counters() -> dict[str, int]:
    counts = {n: _metrics.counter_value(n) for n in _metrics.counter_names() if "::" in n}
    reads = _metrics.counter_value("ScalarReads")
    if reads:
        counts[_SCALAR_READ] = counts.get(_SCALAR_READ, 0) + reads
    return counts


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
    names = [n for n in _metrics.counter_names() if "::" not in n]
    names += list(_fallback_counters()) + list(_op_counters()) + list(_event_counters())
    return names + [n for n in _counters.names() if n not in names]


def _lazax_counter(name: str) -> int | None:
    if name.startswith("xla::"):
        return _op_counters().get(name)
    if name in _TIMED_EVENTS:
        return _event_counters().get(name)
    if name == _SCALAR_READ:
        return _fallback_counters().get(name)
    return _metrics.counter_value(name)


def counter_value(name: str) -> int | None:
    """lazax's count, plus what ``_xla_increment_counter`` added to that name."""
    own, counted = _counters.value(name), _lazax_counter(name)
    if own is None:
        return counted
    return own + (counted or 0)


# torch_xla times a CPU tensor's conversion to device data (``TensorToData``) around
# its transfer (``TransferToDeviceTime``); lazax converts and transfers in one step,
# timed once, which both names report.
_SAME_SAMPLES = {"TensorToData": "TransferToDeviceTime"}


def metric_names() -> list[str]:
    names = _metrics.metric_names()
    return sorted(names + [n for n, of in _SAME_SAMPLES.items() if of in names])


def metric_data(name: str):
    """``(count, accumulator, samples)``: nanoseconds for a timer (lazax keeps seconds),
    bytes or counts for the others."""
    name = _SAME_SAMPLES.get(name, name)
    data = _metrics.metric_data(name)
    if data is None or _metrics.metric_unit(name) != "seconds":
        return data
    count, total, samples = data
    return count, total * 1e9, [s * 1e9 for s in samples]


def _own_counters(lazax: set) -> str:
    """The counters lazax's report lacks; ``lazax``: the names it has."""
    counts = {**_op_counters(), **_event_counters()}
    reads = _fallback_counters().get(_SCALAR_READ)
    if reads is not None:  # lazax's own report lists the other fallbacks
        counts[_SCALAR_READ] = reads
    counts.update({n: _counters.value(n) for n in _counters.names() if n not in lazax})
    return "".join(f"Counter: {n}\n  Value: {v}\n" for n, v in counts.items())


def _same_samples(report: str) -> str:
    """The report's entry of each metric in ``_SAME_SAMPLES``, under torch_xla's name."""
    extra = []
    for kind, name, text in _blocks(report):
        for alias, of in _SAME_SAMPLES.items():
            if kind == "Metric" and name == of:
                extra.append(text.replace(f"Metric: {of}", f"Metric: {alias}", 1))
    return "".join(extra)


def metrics_report() -> str:
    report = _metrics.metrics_report()
    lazax = set(_metrics.counter_names())
    for name in _counters.names():  # a script's bumps of a counter lazax keeps too
        if name in lazax:
            old = f"Counter: {name}\n  Value: {_metrics.counter_value(name)}\n"
            report = report.replace(old, f"Counter: {name}\n  Value: {counter_value(name)}\n")
    return report + _same_samples(report) + _own_counters(lazax)


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
    or a custom op's qualified name such as ``mylib::op``), and
    ``aten::_local_scalar_dense`` once a value was read to the host as a number."""
    return sorted(_fallback_counters())
