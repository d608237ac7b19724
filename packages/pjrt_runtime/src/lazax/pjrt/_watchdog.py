"""A watchdog for waits that never end: a stuck step says what it waits for.

Contract: ``WATCHDOG.waiting(what)`` is a context manager around a wait of the runtime
(a wait for buffers, a read to the host, a collective, a meeting of the job's
processes). While ``WATCHDOG.limit_s`` is None (the default; ``LAZAX_WATCHDOG_S``
unset or 0) it is one shared do-nothing context. Once set, the wait is registered and a
daemon thread (started at the first registered wait) looks every ``min(1, limit/4)``
seconds; a wait older than the limit is printed to stderr once, with what it waits for
(``what``: text, or a callable called then, so a caller can say what is still missing),
the thread, and the program the runtime dispatched last, and the wait goes on. Nothing
is raised: a slow compile or a long first step is not an error, only a thing to see.
"""

from __future__ import annotations

import contextlib
import os
import sys
import threading
import time
from collections.abc import Callable

__all__ = ["WATCHDOG", "Watchdog"]

_NULL = contextlib.nullcontext()


def _limit_from_environment() -> float | None:
    raw = os.environ.get("LAZAX_WATCHDOG_S", "").strip()
    if not raw:
        return None
    try:
        seconds = float(raw)
    except ValueError:
        raise ValueError(
            f"LAZAX_WATCHDOG_S must be a number of seconds (0: off), but got {raw!r}"
        ) from None
    return seconds if seconds > 0 else None


class Watchdog:
    """See the module docstring."""

    def __init__(self, limit_s: float | None = None) -> None:
        self.limit_s = limit_s
        # The name of the program the runtime dispatched last (set at each execution).
        self.program: str | None = None
        self._waits: dict[int, list] = {}  # token -> [start, what, thread name, told]
        self._lock = threading.Lock()
        self._next = 0
        self._thread: threading.Thread | None = None

    def waiting(self, what: str | Callable[[], str]):
        """Register a wait for the length of the block (see the module docstring)."""
        if self.limit_s is None:
            return _NULL
        return self._registered(what)

    @contextlib.contextmanager
    def _registered(self, what):
        with self._lock:
            token = self._next
            self._next += 1
            self._waits[token] = [time.monotonic(), what, threading.current_thread().name, False]
            if self._thread is None or not self._thread.is_alive():
                self._thread = threading.Thread(
                    target=self._watch, name="lazax-watchdog", daemon=True
                )
                self._thread.start()
        try:
            yield
        finally:
            with self._lock:
                del self._waits[token]

    def _watch(self) -> None:
        while True:
            limit = self.limit_s
            time.sleep(min(1.0, (limit or 4.0) / 4))
            if limit is None:
                continue
            now = time.monotonic()
            with self._lock:
                late = [w for w in self._waits.values() if not w[3] and now - w[0] > limit]
                for wait in late:
                    wait[3] = True
            for start, what, thread, _ in late:
                self._tell(now - start, what, thread)

    def _tell(self, seconds: float, what, thread: str) -> None:
        try:
            said = what() if callable(what) else what
        except Exception as err:  # the report must not kill the watchdog
            said = f"(cannot say: {err!r})"
        last = self.program
        program = f"; the last program dispatched: {last}" if last else ""
        print(
            f"lazax watchdog: {thread} has waited {seconds:.1f} s for {said}{program}. "
            f"Still waiting (LAZAX_WATCHDOG_S={self.limit_s:g}; unset it to stop these).",
            file=sys.stderr,
            flush=True,
        )


WATCHDOG = Watchdog(_limit_from_environment())
