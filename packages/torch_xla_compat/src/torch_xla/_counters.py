"""Counters torch_xla keeps that lazax has not: ``MarkStep`` (one per
``torch_xla.sync()`` / ``xm.mark_step()``) and counters a script bumps itself
(``torch_xla._XLAC._xla_increment_counter``).

Contract: ``bump(name, n=1)``; ``value(name)`` (None if never bumped); ``names()``;
``clear()``. ``torch_xla.debug.metrics`` reports them beside lazax's own counters and
clears them with them. A leaf module: it imports nothing of the package.
"""

from __future__ import annotations

__all__ = ["bump", "clear", "names", "value"]

_COUNTS: dict[str, int] = {}


def bump(name: str, n: int = 1) -> None:
    _COUNTS[name] = _COUNTS.get(name, 0) + int(n)


def value(name: str) -> int | None:
    return _COUNTS.get(name)


def names() -> list[str]:
    return list(_COUNTS)


def clear() -> None:
    _COUNTS.clear()
