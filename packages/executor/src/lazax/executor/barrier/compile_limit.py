"""A limit on new programs, for serving: after warm-up, nothing may compile.

Contract: ``CompileLimits`` holds the limits in force (``limited(limit)`` adds one for a
block, however the block ends; ``active``: any is). ``check(why, name, frame)`` is
called by the compile stage, while a limit is active, before a program is lowered: it
counts the compile against every limit in force and raises ``CompileLimitExceeded``
when one is spent, naming the program, the user's line and what changed since the last
program compiled at that site (``RecompileLog.explain``), before anything compiles,
runs or is recorded, so every tensor keeps its value. A program
found in the persistent cache counts too (it was not in this process's memory).

Why: the most common complaint about XLA in serving is a compile in the middle of
traffic, found only as a latency spike; torch_xla's ``max_different_graphs`` bounds one
compiled region, vLLM asserts that serving compiles nothing after its warm-up. This is
the same promise for any mode and any code: a region that must compile nothing says so
and is told at once, at the call that would have compiled.
"""

from __future__ import annotations

import threading
from contextlib import contextmanager

from .. import metrics

__all__ = ["CompileLimitExceeded", "CompileLimits"]


class CompileLimitExceeded(RuntimeError):
    """A program would compile inside ``compile_limit(limit)`` after ``limit`` had."""


class _Limit:
    __slots__ = ("limit", "compiled")

    def __init__(self, limit: int) -> None:
        self.limit = limit
        self.compiled: list[str] = []  # what compiled inside it, for the message


class CompileLimits:
    def __init__(self) -> None:
        self._active: list[_Limit] = []
        self._lock = threading.Lock()

    @contextmanager
    def limited(self, limit: int):
        if isinstance(limit, bool) or not isinstance(limit, int) or limit < 0:
            raise ValueError(f"compile_limit takes a count of programs >= 0, but got {limit!r}")
        entry = _Limit(limit)
        with self._lock:
            self._active.append(entry)
        try:
            yield
        finally:
            with self._lock:
                self._active.remove(entry)

    @property
    def active(self) -> bool:
        return bool(self._active)

    def check(self, why: str, name: str | None, frame: str) -> None:
        with self._lock:
            spent = [entry for entry in self._active if len(entry.compiled) >= entry.limit]
            if not spent:
                for entry in self._active:
                    entry.compiled.append(name or "a graph")
                return
        metrics.bump("CompileLimitExceeded")
        entry = spent[0]
        before = (
            f"{entry.limit} already compiled inside it ({', '.join(entry.compiled)})"
            if entry.limit
            else "it allows none"
        )
        raise CompileLimitExceeded(
            f"lazax: {name or 'a graph'} would compile a new program inside "
            f"compile_limit({entry.limit}), and {before}. Why it is new: {why}"
            f"{f' (at {frame})' if frame else ''}. Nothing ran: "
            f"every tensor keeps its value. Run this shape once during warm-up (pad or "
            f"bucket varying shapes so that warm-up can cover them all), or raise the limit."
        )
