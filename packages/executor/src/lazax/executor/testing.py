"""Helpers for testing lazax against torch on the CPU (the oracle).

- ``fallback_counts()``: the ``aten::<op>`` CPU-fallback counters now.
- ``no_cpu_fallback()``: a context manager that fails if its body sent any op through
  the CPU fallback, naming the ops.
- ``to_device(value, device)``: tensors, also inside lists and tuples, moved to
  ``device``; anything else as is.
- ``check_against_cpu(fn, *args, **tolerances)``: ``fn`` on lazax copies of ``args``
  matches ``fn`` on the CPU (``torch.testing.assert_close``, dtypes included, NaNs
  equal), with no CPU fallback; returns the lazax result on the CPU.
"""

from __future__ import annotations

from contextlib import contextmanager

import torch

from . import metrics

__all__ = ["check_against_cpu", "fallback_counts", "no_cpu_fallback", "to_device"]


def fallback_counts() -> dict[str, int]:
    return {
        name: metrics.counter_value(name)
        for name in metrics.counter_names()
        if name.startswith("aten::")
    }


@contextmanager
def no_cpu_fallback():
    before = fallback_counts()
    yield
    after = fallback_counts()
    fell_back = sorted(name for name in after if after[name] != before.get(name))
    if fell_back:
        raise AssertionError(f"ops ran through the CPU fallback: {fell_back}")


def to_device(value, device):
    if isinstance(value, torch.Tensor):
        return value.to(device)
    if isinstance(value, (list, tuple)):
        return type(value)(to_device(v, device) for v in value)
    return value


def check_against_cpu(fn, *args, **tolerances):
    expected = fn(*args)
    with no_cpu_fallback():
        got = to_device(fn(*to_device(args, "lazax")), "cpu")
    torch.testing.assert_close(got, expected, equal_nan=True, **tolerances)
    return got
