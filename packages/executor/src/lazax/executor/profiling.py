"""lazax's phases as named spans in the profilers a user already runs.

Contract: ``span(kind, name)`` is a context manager. While ``jax.profiler`` traces
(``jax.profiler.trace``, a profiler server) it is a ``jax.profiler.TraceAnnotation``;
while ``torch.profiler`` records it is a ``record_function``; both when both run. The
span is named ``lazax::<kind> <name>`` (``lazax::execute my_step``), so Perfetto,
TensorBoard and ``key_averages()`` show a sync, compile, execution or read to the host
by the program it belongs to. ``name`` may be a callable, called only when a profiler
is on: naming a lazy sync walks the user's frames, which an unprofiled step must not
pay. With no profiler on, ``span`` returns one shared do-nothing context (two flag
reads, ~0.4 us measured).

The kinds the executor uses: ``sync`` (a graph from collection to dispatch),
``compile`` (a cache miss: lowering and XLA), ``execute`` (dispatching a program; the
device work itself is XLA's, named ``jit_<name>`` in jax's trace), ``to_host`` (a read
that waits for its value) and ``replay`` (a dynamo graph's call).
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable

import torch
from jax.profiler import TraceAnnotation

__all__ = ["profiling", "span"]

_NULL = contextlib.nullcontext()
_jax_tracing = TraceAnnotation.is_enabled
_torch_recording = torch._C._autograd._profiler_enabled


def profiling() -> bool:
    """Whether a jax or torch profiler is recording now."""
    return _jax_tracing() or _torch_recording()


class _Span:
    __slots__ = ("label", "jax_on", "torch_on", "_jax", "_torch")

    def __init__(self, label: str, jax_on: bool, torch_on: bool) -> None:
        self.label = label
        self.jax_on = jax_on
        self.torch_on = torch_on

    def __enter__(self):
        if self.jax_on:
            self._jax = TraceAnnotation(self.label)
            self._jax.__enter__()
        if self.torch_on:
            self._torch = torch.autograd.profiler.record_function(self.label)
            self._torch.__enter__()
        return self

    def __exit__(self, *exc) -> None:
        if self.torch_on:
            self._torch.__exit__(*exc)
        if self.jax_on:
            self._jax.__exit__(*exc)


def span(kind: str, name: str | Callable[[], str] | None = None):
    """A span ``lazax::<kind> <name>`` in whichever profiler records now (see above)."""
    jax_on = _jax_tracing()
    torch_on = _torch_recording()
    if not (jax_on or torch_on):
        return _NULL
    if callable(name):
        name = name()
    label = f"lazax::{kind} {name}" if name else f"lazax::{kind}"
    return _Span(label, jax_on, torch_on)
