"""Counters and timed metrics, in the shape of torch_xla's ``debug.metrics``.

Contract: ``counter(name)`` / ``bump(name, n)`` count events; ``timed(name)`` is a
context manager that adds one sample (seconds) to metric ``name``. ``counter_value``
of an unknown name is None (as torch_xla); ``metric_data(name)`` is
``(count, total_seconds, recent_samples)``. ``recompile_reports()`` says why each
recent recompile happened; ``compiles_by_name()`` counts and times the compiles of each
program name (``metrics_report`` lists them, most compiled first).
Metrics are seconds unless recorded with another unit (``record(name, n, unit=)``):
``OutboundData`` / ``InboundData`` are the bytes of each transfer to / from the device
(torch_xla's names, said from the host's side),
``InputOutputAliasCount`` the donated inputs of each compiled program (outputs that
reuse an input's buffer). Counters beside the compile and execute ones:
``CreateCompileHandles`` (executables compiled), ``CreateDataHandles`` (device buffers
made by transfers and executions), ``ScalarReads`` (``.item()``, ``bool(t)`` and other
reads of one element to the host: each a sync), ``CreateOpSharding`` (distinct
layouts given to ``mark_sharding``), ``CreateXlaTensor`` / ``DestroyXlaTensor``
(lazax tensors made and freed), ``ReplicateShardedData`` (reads to the host of a value
held over several devices: split, or replicated over a mesh); ``ExecuteReplicatedTime``
times the runs of programs over a mesh (SPMD) a second time, ``LazyTracing`` each op's
time in lazax's dispatch (tracing it; in eager mode, running it too; an op a handler
dispatches in turn is a sample of its own, inside its caller's). These carry
torch_xla's names for the same facts, as ``CompileTime`` and ``TransferToDeviceTime`` do.
The per-op ones (``LazyTracing``, ``CreateXlaTensor``, ``DestroyXlaTensor``) cost
~0.6 us of a traced op's ~8.6 us, so they are kept only while ``op_metrics()`` is on
(``set_op_metrics(True)``, ``LAZAX_OP_METRICS=1``, or importing the torch_xla package);
off, the code that keeps them is not installed, and they count nothing.
``ExecuteTime`` (and its kin: ``EagerOpExecuteTime``, ``ExecuteReplicatedTime``) is by
default the time a run's dispatch takes (a run is asynchronous: the host's side of it);
with device timing on (``set_device_timing(True)``, or ``LAZAX_DEVICE_TIMING=1`` read at
the first run; on under the torch_xla package) it runs from the dispatch to the
device's end, as torch_xla times it. A run not over when its dispatch returns then
goes to ``record_when_done(names, start, wait)``: one sample per name of the time from
``start`` until ``wait()`` returns, taken by a daemon thread (``wait`` blocks until the
run's outputs are ready and returns False when it cannot tell: its outputs were donated
to a later run, whose end then stands for its own); one that ended within its dispatch
goes to ``record_run(names, seconds)``, under the same lock. Off by default because
each watched run hands the GIL to that thread and back: +45-85 us per run on the
2-core CPU (a cached 100-op sync 118 -> 163 us and 131-143 -> 178-199 us, a small
model's dynamo call 115 -> 165 us and 122-135 -> 196-222 us, in two sessions).
Reading a metric (``metric_names``, ``metric_data``, the reports) first waits for the
runs already dispatched, so their samples are all there (as after torch_xla's
``wait_device_ops``); ``clear_all`` drops the samples of runs still going.
``traced_op_counts()``: how many times each op (``aten::add``, an in-place op under its
functional name, no overload) was traced onto a lazax tensor, eager ops included; ops
that ran through the CPU fallback are the ``aten::<op>`` counters instead. An
``lx.compile`` region traces on every call (as torch_xla's); a dynamo graph traces on
its first call and then replays, tracing nothing. ``clear_all`` resets everything.
Counter bumps are a dict update: cheap enough for per-op paths.
"""

from __future__ import annotations

import atexit
import os
import threading
import time
from collections import deque
from collections.abc import Callable
from contextlib import contextmanager
from queue import SimpleQueue

from .config import settings

__all__ = [
    "add_recompile_report",
    "bump",
    "clear_all",
    "compiles_by_name",
    "counter_names",
    "counter_value",
    "device_timing",
    "metric_data",
    "metric_names",
    "metric_unit",
    "metrics_report",
    "record",
    "record_compile",
    "record_run",
    "record_when_done",
    "recompile_reports",
    "set_device_timing",
    "op_metrics",
    "set_op_metrics",
    "on_op_metrics",
    "short_metrics_report",
    "timed",
    "traced_op_counts",
    "TRACED_OPS",
]

_COUNTERS: dict[str, int] = {}
_METRICS: dict[str, list] = {}  # name -> [count, total, deque of recent samples]
_SAMPLES_KEPT = 1024
_RECOMPILES: deque = deque(maxlen=_SAMPLES_KEPT)  # why each recompile happened, newest last
_UNITS: dict[str, str] = {}  # metric name -> "bytes" or "count" (default: seconds)
_COMPILES: dict[str, list] = {}  # program name -> [compiles, total seconds]
# op name -> times traced; bumped inline by the tracing hot path (a dict update per op).
TRACED_OPS: dict[str, int] = {}


def bump(name: str, n: int = 1) -> None:
    _COUNTERS[name] = _COUNTERS.get(name, 0) + n


def record(name: str, value: float, unit: str = "seconds") -> None:
    """One sample of metric ``name``: seconds, or ``unit`` "bytes" / "count"."""
    entry = _METRICS.get(name)
    if entry is None:
        entry = _METRICS[name] = [0, 0.0, deque(maxlen=_SAMPLES_KEPT)]
        if unit != "seconds":
            _UNITS[name] = unit
    entry[0] += 1
    entry[1] += value
    entry[2].append(value)


def metric_unit(name: str) -> str:
    """``"seconds"``, ``"bytes"`` or ``"count"``: what metric ``name``'s samples hold."""
    return _UNITS.get(name, "seconds")


@contextmanager
def timed(name: str):
    start = time.perf_counter()
    try:
        yield
    finally:
        record(name, time.perf_counter() - start)


def counter_names() -> list[str]:
    return sorted(_COUNTERS)


def counter_value(name: str) -> int | None:
    return _COUNTERS.get(name)


def metric_names() -> list[str]:
    _settle()
    return sorted(_METRICS)


def metric_data(name: str) -> tuple[int, float, list[float]] | None:
    _settle()
    entry = _METRICS.get(name)
    if entry is None:
        return None
    return entry[0], entry[1], list(entry[2])


# The completion watcher (``record_when_done``): one daemon thread, started at the first
# execution, takes (names, start, wait, generation) in dispatch order. The dispatching
# thread alone counts what it queued (``queued``), the watcher alone what it recorded
# (``recorded``): the hot path takes no lock. ``_DONE`` guards the recording against
# ``clear_all`` and wakes a reader that waits (``readers``).
_WATCH: dict = {"queue": None, "queued": 0, "recorded": 0, "generation": 0, "readers": 0}
_DONE = threading.Condition()
_DEVICE_TIMING: list = [None]  # None: not read from the environment yet


def device_timing() -> bool:
    """Whether runs are timed to the device's end (see the module docstring)."""
    on = _DEVICE_TIMING[0]
    if on is None:
        on = _DEVICE_TIMING[0] = settings().device_timing
    return on


def set_device_timing(enabled: bool) -> None:
    """Time each graph's run to the device's end (True) or its dispatch (False)."""
    _DEVICE_TIMING[0] = bool(enabled)


# Per-op metrics: off unless asked for, and then installed, not tested per op.
_OP_METRICS: list = [None]  # None: not read from the environment yet
_OP_METRICS_LISTENERS: list[Callable[[bool], None]] = []


def op_metrics() -> bool:
    """Whether the per-op metrics are kept (see the module docstring)."""
    on = _OP_METRICS[0]
    if on is None:
        on = _OP_METRICS[0] = settings().op_metrics
    return on


def set_op_metrics(enabled: bool) -> None:
    """Keep (True) or stop keeping (False) ``LazyTracing``, ``CreateXlaTensor`` and
    ``DestroyXlaTensor``."""
    _OP_METRICS[0] = bool(enabled)
    for listener in _OP_METRICS_LISTENERS:
        listener(_OP_METRICS[0])


def on_op_metrics(listener: Callable[[bool], None]) -> None:
    """``listener(on)`` now and whenever the per-op metrics are turned on or off: the
    tracing hot path installs its counting code only while they are on."""
    _OP_METRICS_LISTENERS.append(listener)
    listener(op_metrics())


def record_when_done(names: tuple[str, ...], start: float, wait: Callable[[], bool]) -> None:
    """Add one sample to each metric in ``names``: the seconds from ``start``
    (``time.perf_counter``) until ``wait()`` returns (see the module docstring)."""
    watch = _WATCH
    queue = watch["queue"]
    if queue is None:
        queue = watch["queue"] = SimpleQueue()
        thread = threading.Thread(target=_watch, args=(queue,), name="lazax-timing", daemon=True)
        thread.start()
        # At exit, before jax's own teardown (atexit runs last-registered first): a daemon
        # thread still inside a wait of the runtime's C++ when the interpreter ends is
        # unwound by force, which aborts the process ("exception not rethrown").
        atexit.register(_stop_watcher, queue, thread)
    watch["queued"] += 1
    queue.put((names, start, wait, watch["generation"]))


def record_run(names: tuple[str, ...], seconds: float) -> None:
    """A run timed by its caller: one sample per name, under the watcher's lock once the
    watcher exists (it records the same names: an unlocked ``count += 1`` from two
    threads can lose one)."""
    if _WATCH["queue"] is None:
        for name in names:
            record(name, seconds)
        return
    with _DONE:
        for name in names:
            record(name, seconds)


def _watch(queue: SimpleQueue) -> None:
    unknown: list = []  # entries whose outputs were donated before the wait
    while True:
        if unknown and queue.empty():
            # Nothing later to stand for their end (the donating run failed to
            # dispatch, or is not queued yet): they ended no later than now.
            _finish(unknown, time.perf_counter())
            unknown = []
        entry = queue.get()
        if entry is None:  # _stop_watcher
            _finish(unknown, time.perf_counter())
            return
        try:
            known = entry[2]()
        except Exception:  # a failed execution: its error surfaces where its outputs are used
            known = True
        unknown.append(entry)
        if known:  # the device ran programs in order of their data: the earlier ones ended too
            _finish(unknown, time.perf_counter())
            unknown = []


def _finish(entries: list, end: float) -> None:
    with _DONE:
        for names, start, _, generation in entries:
            if generation == _WATCH["generation"]:
                for name in names:
                    record(name, end - start)
        _WATCH["recorded"] += len(entries)
        if _WATCH["readers"]:
            _DONE.notify_all()


def _settle() -> None:
    """Wait until every execution dispatched so far has its sample."""
    target = _WATCH["queued"]
    if _WATCH["recorded"] < target:
        with _DONE:
            _WATCH["readers"] += 1
            try:
                while _WATCH["recorded"] < target:
                    _DONE.wait()
            finally:
                _WATCH["readers"] -= 1


def _stop_watcher(queue: SimpleQueue, thread: threading.Thread) -> None:
    # The executions still running end first (a minute at most: a program that never
    # ends would otherwise hold up the exit). Runs after this one (other exit handlers)
    # are timed at their dispatch: no thread is left to wait for them.
    _DEVICE_TIMING[0] = False
    queue.put(None)
    thread.join(timeout=60)


def _forget_watcher() -> None:
    # A forked child has no watcher thread and none of its parent's executions, and the
    # lock may have been held by that thread at the fork.
    global _DONE
    _DONE = threading.Condition()
    _WATCH.update(queue=None, queued=0, recorded=0, readers=0)


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_forget_watcher)


def add_recompile_report(text: str) -> None:
    _RECOMPILES.append(text)
    # The log keeps the latest 1024; the counter says how many were ever made, so a
    # reader can tell which are new after old ones were dropped.
    bump("RecompileReports")


def recompile_reports() -> list[str]:
    """Why each recent recompile happened (the latest 1024), oldest first."""
    return list(_RECOMPILES)


def record_compile(name: str, seconds: float) -> None:
    entry = _COMPILES.get(name)
    if entry is None:
        entry = _COMPILES[name] = [0, 0.0]
    entry[0] += 1
    entry[1] += seconds


def compiles_by_name() -> dict[str, tuple[int, float]]:
    """Program name -> (compiles, total seconds), most compiled first."""
    ordered = sorted(_COMPILES.items(), key=lambda item: (-item[1][0], item[0]))
    return {name: (count, total) for name, (count, total) in ordered}


def traced_op_counts() -> dict[str, int]:
    """Op name (``aten::add``) -> how many times it was traced, by name."""
    return dict(sorted(TRACED_OPS.items()))


def clear_all() -> None:
    with _DONE:  # executions still running were dispatched before: not recorded
        _WATCH["generation"] += 1
    TRACED_OPS.clear()
    _COUNTERS.clear()
    _METRICS.clear()
    _UNITS.clear()
    _RECOMPILES.clear()
    _COMPILES.clear()


def _fmt_bytes(n: float) -> str:
    if n < 1024:
        return f"{n:.0f}B"
    for unit in ("KB", "MB", "GB"):
        n /= 1024
        if n < 1024 or unit == "GB":
            return f"{n:.2f}{unit}"


def _fmt(name: str, value: float) -> str:
    unit = _UNITS.get(name)
    if unit == "bytes":
        return _fmt_bytes(value)
    if unit == "count":
        return f"{value:g}"
    return _fmt_seconds(value)


def _fmt_seconds(s: float) -> str:
    if s >= 1:
        return f"{s:.3f}s"
    if s >= 1e-3:
        return f"{s * 1e3:.3f}ms"
    return f"{s * 1e6:.1f}us"


def metrics_report() -> str:
    """Every metric (count, total, median, ...) and every counter, as text."""
    _settle()
    lines = []
    for name in metric_names():
        count, total, samples = metric_data(name)
        ordered = sorted(samples)
        median = ordered[len(ordered) // 2] if ordered else 0.0
        lines.append(f"Metric: {name}")
        lines.append(f"  TotalSamples: {count}")
        lines.append(f"  Accumulator: {_fmt(name, total)}")
        lines.append(f"  Median: {_fmt(name, median)} (over the last {len(ordered)})")
    for name in counter_names():
        lines.append(f"Counter: {name}")
        lines.append(f"  Value: {_COUNTERS[name]}")
    by_name = compiles_by_name()
    if by_name:
        lines.append("Compiles by program name:")
        for name, (count, total) in by_name.items():
            lines.append(f"  {name}: {count} compile(s), {_fmt_seconds(total)}")
    return "\n".join(lines) + ("\n" if lines else "")


_SHORT = ("CompileTime", "ExecuteTime", "EagerOpCompileTime", "EagerOpExecuteTime")


def short_metrics_report() -> str:
    """Compile/execute metrics and CPU-fallback counters only."""
    lines = []
    for name in _SHORT:
        data = metric_data(name)
        if data:
            lines.append(f"Metric: {name}: {data[0]} samples, {_fmt_seconds(data[1])} total")
    for name in counter_names():
        if "::" in name or name in ("CachedCompile", "UncachedCompile"):
            lines.append(f"Counter: {name}: {_COUNTERS[name]}")
    return "\n".join(lines) + ("\n" if lines else "")
