"""Helpers for testing lazax against torch on the CPU (the oracle).

- ``fallback_counts()``: the ``aten::<op>`` CPU-fallback counters now.
- ``no_cpu_fallback()``: a context manager that fails if its body sent any op through
  the CPU fallback, naming the ops.
- ``to_device(value, device)``: tensors, also inside lists and tuples, moved to
  ``device``; anything else as is.
- ``check_against_cpu(fn, *args, **tolerances)``: ``fn`` on lazax copies of ``args``
  matches ``fn`` on the CPU (``torch.testing.assert_close``, dtypes included, NaNs
  equal), with no CPU fallback; returns the lazax result on the CPU.
- ``deferred_check(fn, *args, **tolerances)``: the same comparison, kept for later:
  runs ``fn`` on clones of ``args`` (so an in-place ``fn`` leaves them intact) and on
  lazax copies, and keeps the lazax result unsynced. It does not watch the CPU fallback
  (wrap it in ``no_cpu_fallback()`` for that).
- ``deferred_grad_check(fn, *args, **tolerances)``: ``deferred_check`` of ``fn``'s
  outputs and of the gradients, w.r.t. its float arguments, of a fixed random weighted
  sum of its float outputs that need a gradient.
- ``comparing_deferred_checks()``: a context manager that forgets the checks deferred
  before it; on a clean exit it runs the lazax results of those deferred in its body as
  one graph, then compares each as ``check_against_cpu`` does, a failure naming the
  line of its ``deferred_check`` call; with none deferred it does nothing.
- ``null_runtime()``: a context manager that runs its body on a ``lazax.pjrt.NullRuntime``
  (nothing compiled by XLA, nothing computed: values are zeros) with a fresh compile
  stage; it yields the runtime, whose ``programs`` and ``executions`` say what the
  executor asked for. Work pending before the block runs first, on the real runtime.
"""

from __future__ import annotations

import sys
from contextlib import contextmanager

import torch

from lazax import pjrt

from . import metrics, sync_tensors_graph
from .barrier.compile import CompileStage
from .barrier.executor import EXECUTOR
from .config import DEVICE_NAME

__all__ = [
    "check_against_cpu",
    "comparing_deferred_checks",
    "deferred_check",
    "deferred_grad_check",
    "fallback_counts",
    "no_cpu_fallback",
    "null_runtime",
    "to_device",
]


def fallback_counts() -> dict[str, int]:
    return {name: metrics.counter_value(name) for name in metrics.counter_names() if "::" in name}


@contextmanager
def no_cpu_fallback():
    before = fallback_counts()
    yield
    after = fallback_counts()
    fell_back = sorted(name for name in after if after[name] != before.get(name))
    if fell_back:
        raise AssertionError(f"ops ran through the CPU fallback: {fell_back}")


def _map_tensors(fn, value):
    """``fn`` applied to the tensors in ``value``, also inside lists and tuples."""
    if isinstance(value, torch.Tensor):
        return fn(value)
    if isinstance(value, (list, tuple)):
        return type(value)(_map_tensors(fn, v) for v in value)
    return value


def _tensors_in(value) -> list[torch.Tensor]:
    """The tensors in ``value``, also inside lists and tuples, in order."""
    if isinstance(value, torch.Tensor):
        return [value]
    if isinstance(value, (list, tuple)):
        return [t for v in value for t in _tensors_in(v)]
    return []


def to_device(value, device):
    return _map_tensors(lambda t: t.to(device), value)


def check_against_cpu(fn, *args, **tolerances):
    expected = fn(*args)
    with no_cpu_fallback():
        got = to_device(fn(*to_device(args, DEVICE_NAME)), "cpu")
    torch.testing.assert_close(got, expected, equal_nan=True, **tolerances)
    return got


_DEFERRED: list = []  # (line of the deferred_check call, lazax result, CPU result, tolerances)


def deferred_check(fn, *args, **tolerances) -> None:
    _defer(fn, args, tolerances, sys._getframe(1).f_lineno)


def _defer(fn, args, tolerances, line: int) -> None:
    expected = fn(*_map_tensors(lambda t: t.clone(), list(args)))
    got = fn(*to_device(list(args), DEVICE_NAME))
    _DEFERRED.append((line, got, expected, tolerances))


def _with_gradients(fn, seed: int = 7):
    """``fn``'s outputs, then the gradients of a seeded random weighted sum of its float
    outputs that need one, w.r.t. its float arguments (each made a leaf)."""

    def run(*xs):
        leaves = [x.detach().requires_grad_() if x.is_floating_point() else x for x in xs]
        out = fn(*leaves)
        outs = out if isinstance(out, tuple) else (out,)
        floats = [o for o in outs if o.is_floating_point() and o.requires_grad]
        total = 0
        for i, o in enumerate(floats):
            g = torch.Generator().manual_seed(seed + i)
            weight = torch.randn(o.shape, generator=g).to(o.device)
            total = total + (o.float() * weight).sum()
        total.backward()
        return outs + tuple(x.grad for x in leaves if x.is_floating_point())

    return run


def deferred_grad_check(fn, *args, **tolerances) -> None:
    _defer(_with_gradients(fn), args, tolerances, sys._getframe(1).f_lineno)


@contextmanager
def comparing_deferred_checks():
    _DEFERRED.clear()
    yield
    pending = list(_DEFERRED)
    _DEFERRED.clear()
    if not pending:
        return
    sync_tensors_graph(_tensors_in([got for _, got, _, _ in pending]), wait=True)
    for line, got, expected, tolerances in pending:
        torch.testing.assert_close(
            to_device(got, "cpu"),
            expected,
            equal_nan=True,
            msg=lambda m, line=line: f"check at line {line}: {m}",
            **tolerances,
        )


@contextmanager
def null_runtime():
    """The body on a ``NullRuntime`` with a fresh compile stage (see the module
    docstring); the real runtime and compile stage are back afterwards."""
    EXECUTOR.sync(wait=True)  # nothing pending from before gets computed as zeros
    real = EXECUTOR.runtime
    null = pjrt.NullRuntime(real.platform)
    saved_runtime = pjrt.set_runtime(null)
    saved_compiler = EXECUTOR.compiler
    EXECUTOR.compiler = CompileStage()
    try:
        yield null
    finally:
        pjrt.set_runtime(saved_runtime)
        EXECUTOR.compiler = saved_compiler
