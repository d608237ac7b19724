"""Streams, events and the current device of the lazax accelerator, as torch's generic
code uses them (``torch.accelerator``, ``torch.lazax``, ``torch.Stream``,
``torch.Event``).

Contract:
- One ordered stream per device. lazax runs a process's work in the order it was
  traced (each sync's program reads what earlier ones wrote), so every ``Stream`` of a
  device is that one stream: ``wait_stream`` / ``wait_event`` have nothing to add.
- ``synchronize()``: runs everything pending (one sync), waits until every program
  dispatched so far has finished, and raises a failed device-side check, as
  ``lx.wait_device_ops()``; ``Stream.synchronize`` is the same. ``Stream.query()``:
  nothing pending and everything dispatched finished.
- ``Event(enable_timing=True).record()`` cuts the trace (runs what is pending, as
  ``lx.sync()``; not where nothing may run: inside ``compile(full_graph=True)`` or a
  capture) and marks the buffers still being computed then; ``query`` /
  ``synchronize`` look at or wait for those, and a background thread notes when they
  are ready, so ``start.elapsed_time(end)`` is the milliseconds of device work between
  the two records (torch's errors when not timed or not recorded). An event without
  timing (libraries order their streams with these: FSDP2 several times a step) cuts
  nothing, so the step stays one graph: ``synchronize`` runs what is pending and waits
  for everything dispatched, ``query`` is whether that is done already.
- ``current_index()`` / ``set_index(i)``: the current device index, per thread as for
  cuda (the DataLoader's pin thread sets it to the main thread's); setting it never
  starts the runtime (``started()``), and is checked against the device count once
  the runtime has started.
``Stream`` and ``Event`` subclass ``torch.Stream`` / ``torch.Event`` (``tensor.device``
puts them in ``torch``'s place) and behave exactly as those for other device types.
"""

from __future__ import annotations

import queue
import threading
import time

import torch

from lazax import pjrt

from ..barrier.executor import EXECUTOR
from ..config import DEVICE_NAME
from ..ops.pseudo import FREED
from ..state.storage import PENDING

__all__ = ["Event", "Stream", "current_index", "idle", "set_index", "started", "synchronize"]

_CURRENT = threading.local()


def current_index() -> int:
    return getattr(_CURRENT, "index", 0)


def started() -> bool:
    """Whether the PJRT runtime has started. Asking ``EXECUTOR.runtime`` would start it,
    and a process of a distributed job must join the job first (``torch.cuda.set_device
    (local_rank)`` before ``init_process_group`` is the usual order)."""
    return pjrt.runtime_started()


def set_index(index: int) -> None:
    if index < 0:  # torch: a no-op for a negative index
        return
    if started():  # checked against the devices once there are devices to count
        count = len(EXECUTOR.runtime.devices)
        if index >= count:
            raise RuntimeError(
                f"Invalid device index {index}: this process has {count} lazax device(s)"
            )
    _CURRENT.index = index


def synchronize() -> None:
    """Run what is pending and wait for every program dispatched so far."""
    EXECUTOR.sync(wait=True)
    EXECUTOR.runtime.wait_all()
    EXECUTOR.read_checks()


def _pending() -> bool:
    return any(
        (s := ref()) is not None and s.pending and s.value.node.op != FREED
        for ref in list(PENDING.refs)
    )


def _running() -> list:
    """The live buffers not yet computed (strong references, for the caller to drop)."""
    runtime = EXECUTOR.runtime
    return [b for b in runtime.memory.live_buffers() if not b.is_deleted() and not b.is_ready()]


def idle() -> bool:
    return not _pending() and not _running()


def _wait(buffers: list) -> None:
    # A buffer may be donated to a later program meanwhile: that program ran after
    # this one, and the buffer can no longer be waited for (skipped).
    live = [b for b in buffers if not b.is_deleted()]
    if live:
        try:
            EXECUTOR.runtime.wait(live)
        except RuntimeError:
            if not any(b.is_deleted() for b in live):
                raise


def _is_lazax(obj) -> bool:
    return obj.device.type == DEVICE_NAME


class Stream(torch.Stream):
    """A lazax stream: the device's one ordered stream (see the module docstring)."""

    def synchronize(self) -> None:
        if not _is_lazax(self):
            return super().synchronize()
        synchronize()

    def query(self) -> bool:
        if not _is_lazax(self):
            return super().query()
        return idle()

    def record_event(self, event=None):
        if not _is_lazax(self):
            return super().record_event(event)
        event = Event(self.device) if event is None else event
        event.record(self)
        return event


class Event(torch.Event):
    """A lazax event: a point in the device's stream (see the module docstring)."""

    def __init__(self, device=None, *, enable_timing=False, blocking=False, interprocess=False):
        self._lz_timing = bool(enable_timing)
        self._lz_recorded = False
        self._lz_lazy = False  # recorded without timing, not synchronized since
        self._lz_buffers: list = []
        self._lz_done = threading.Event()
        self._lz_time: float | None = None

    def record(self, stream=None) -> None:
        super().record(stream)
        if not _is_lazax_event(self):
            return
        self._lz_recorded = True
        if not self._lz_timing:
            self._lz_lazy = True  # cuts nothing (see the module's contract)
            return
        if EXECUTOR.allow_execution and EXECUTOR.capture_guard is None:
            EXECUTOR.sync()  # what was traced before the record is dispatched now
        self._lz_buffers = _running()
        self._lz_done.clear()
        self._lz_time = None
        _timer().put((self, list(self._lz_buffers)))

    def query(self) -> bool:
        if not _is_lazax_event(self):
            return super().query()
        if self._lz_lazy:
            return idle()
        self._lz_buffers = [b for b in self._lz_buffers if not b.is_deleted() and not b.is_ready()]
        return not self._lz_buffers

    def synchronize(self) -> None:
        if not _is_lazax_event(self):
            return super().synchronize()
        if self._lz_lazy:
            self._lz_lazy = False
            return synchronize()
        _wait(self._lz_buffers)
        self._lz_buffers = []
        if self._lz_timing and self._lz_recorded:
            self._lz_done.wait()
        EXECUTOR.read_checks(wait=False)

    def wait(self, stream=None) -> None:
        if not _is_lazax_event(self):
            return super().wait(stream)
        # one ordered stream: later work already runs after this event's

    def elapsed_time(self, end_event) -> float:
        if not _is_lazax_event(self):
            return super().elapsed_time(end_event)
        if not (self._lz_timing and getattr(end_event, "_lz_timing", False)):
            raise RuntimeError("Both events must be created with argument 'enable_timing=True'.")
        if not (self._lz_recorded and end_event._lz_recorded):
            raise RuntimeError("Both events must be recorded before calculating elapsed time.")
        self.synchronize()
        end_event.synchronize()
        return (end_event._lz_time - self._lz_time) * 1000.0


def _is_lazax_event(event: Event) -> bool:
    # An event takes its device from the stream of its first record (torch's rule);
    # before that, from the device it was made for (the current accelerator if none).
    return event.device is None or event.device.type == DEVICE_NAME


# -- when timed events complete ---------------------------------------------------

_TIMER: list = []  # the one queue, once its thread is started
_TIMER_LOCK = threading.Lock()


def _timer() -> queue.SimpleQueue:
    with _TIMER_LOCK:
        if not _TIMER:
            events: queue.SimpleQueue = queue.SimpleQueue()
            threading.Thread(
                target=_stamp, args=(events,), name="lazax-events", daemon=True
            ).start()
            _TIMER.append(events)
        return _TIMER[0]


def _stamp(events: queue.SimpleQueue) -> None:
    # Events are stamped in the order they were recorded: a later event of the one
    # stream never completes before an earlier one.
    while True:
        event, buffers = events.get()
        try:
            _wait(buffers)
        except BaseException:  # the error is the synchronizing thread's to raise
            pass
        event._lz_time = time.perf_counter()
        event._lz_done.set()
        del event, buffers
