"""``torch_xla.debug.profiler`` (``xp``) over JAX's profiler.

Contract:
- ``start_server(port, only_on_master=True)``: ``jax.profiler.start_server(port)``
  (TensorBoard's profile plugin captures from it); returns the server; on a replica that
  is not the master with ``only_on_master``, starts nothing and returns None.
- ``start_trace(log_dir)`` / ``stop_trace()``: ``jax.profiler.start_trace`` / ``stop_trace``.
- ``trace(service_addr, logdir, duration_ms=1000, ...)``: captures ``duration_ms`` of
  THIS process into ``logdir`` (a trace lazax's syncs, compiles and executions appear
  in); ``service_addr`` is accepted, but another process's server is not reached.
  ``trace_detached(...)`` does the same in a background thread.
- ``Trace(name, **kwargs)``: a named span (``jax.profiler.TraceAnnotation``), usable as
  ``with`` block; ``StepTrace(name, step_num=None, **kwargs)``: a step span
  (``StepTraceAnnotation``) that marks the step (``xm.mark_step``) at its end, as
  torch_xla's does. ``trace_me(name)``: a decorator wrapping a function in ``Trace``.
"""

from __future__ import annotations

import functools
import threading
import time

import jax

from .. import _api, runtime

__all__ = [
    "StepTrace",
    "Trace",
    "start_server",
    "start_trace",
    "stop_trace",
    "trace",
    "trace_detached",
    "trace_me",
]


def start_server(port: int, only_on_master: bool = True):
    """Start JAX's profiler server on ``port``."""
    if only_on_master and runtime.global_ordinal() != 0:
        return None
    return jax.profiler.start_server(port)


def start_trace(log_dir: str) -> None:
    jax.profiler.start_trace(log_dir)


def stop_trace() -> None:
    jax.profiler.stop_trace()


def trace(service_addr: str, logdir: str, duration_ms: int = 1000, *args, **kwargs) -> None:
    """Capture ``duration_ms`` of this process's activity into ``logdir`` (blocks)."""
    jax.profiler.start_trace(logdir)
    try:
        time.sleep(duration_ms / 1000)
    finally:
        jax.profiler.stop_trace()


def trace_detached(service_addr: str, logdir: str, duration_ms: int = 1000, *args, **kwargs):
    """``trace`` in a background thread; returns the thread."""
    thread = threading.Thread(target=trace, args=(service_addr, logdir, duration_ms), daemon=True)
    thread.start()
    return thread


class Trace:
    """A named span in the profile: ``with xp.Trace("forward"): ...``."""

    def __init__(self, name: str, **kwargs) -> None:
        self.name = name
        self._annotation = self._make(name, kwargs)

    @staticmethod
    def _make(name, kwargs):
        return jax.profiler.TraceAnnotation(name, **kwargs)

    def __enter__(self):
        self._annotation.__enter__()
        return self

    def __exit__(self, exc_type, exc, tb):
        return self._annotation.__exit__(exc_type, exc, tb)


class StepTrace(Trace):
    """A training step's span; the step is marked (synced) when the block ends."""

    def __init__(self, name: str, step_num: int | None = None, **kwargs) -> None:
        if step_num is not None:
            kwargs["step_num"] = step_num
        super().__init__(name, **kwargs)

    @staticmethod
    def _make(name, kwargs):
        return jax.profiler.StepTraceAnnotation(name, **kwargs)

    def __exit__(self, exc_type, exc, tb):
        try:
            if exc_type is None:
                _api.sync()
        finally:
            result = super().__exit__(exc_type, exc, tb)
        return result


def trace_me(name: str):
    """Decorator: every call of the function is a ``Trace(name)`` span."""

    def decorate(fn):
        @functools.wraps(fn)
        def wrapper(*args, **kwargs):
            with Trace(name):
                return fn(*args, **kwargs)

        return wrapper

    return decorate
