"""Eager mode: every op runs at once, through the same machine as lazy mode.

Contract: eager mode is one boolean on the graph executor (``EXECUTOR.eager``). The
tensor layer reads it wherever a tensor gets a new IR value and then syncs just those
tensors (``apply_eager_sync``; a functional op runs its outputs first and makes its
tensors from the results, ``EXECUTOR.run_new``): the same lowering and the same LRU
cache, so an op compiles once per input shape (``EagerOpCompileTime``) and afterwards
only executes (``EagerOpExecuteTime``). ``LAZAX_USE_EAGER_MODE=1`` turns it on at import.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager

from lazax.executor import EXECUTOR

__all__ = ["eager_mode", "eager_mode_context", "is_eager_mode"]


def eager_mode(enable: bool) -> None:
    """Turn eager mode on or off for this process."""
    EXECUTOR.eager = bool(enable)


def is_eager_mode() -> bool:
    return EXECUTOR.eager


@contextmanager
def eager_mode_context(enable: bool) -> Iterator[bool]:
    """Set eager mode for the ``with`` body; yields the previous setting and restores it
    however the body ends."""
    saved = EXECUTOR.eager
    with EXECUTOR.mode(eager=bool(enable)):
        yield saved
