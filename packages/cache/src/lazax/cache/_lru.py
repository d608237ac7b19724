"""The in-memory LRU computation cache.

Contract: a mapping from a key (the graph hash, an int) to a compiled entry, holding at
most ``capacity`` entries. ``get`` counts a hit or a miss and marks the entry most
recently used; ``put`` inserts and, when full, evicts the least recently used entry,
counting the eviction and calling every eviction hook with ``(key, entry)``. Hooks run
after the entry is removed; an exception in a hook propagates to the caller of ``put``.
The capacity defaults to ``LAZAX_COMPILATION_CACHE_SIZE`` (2048 when unset).
Thread-safe: every method holds the cache's lock (eviction hooks run under it).
"""

from __future__ import annotations

import os
import threading
from collections import OrderedDict
from collections.abc import Callable, Hashable, Iterator
from dataclasses import dataclass
from typing import Any

__all__ = ["CacheStats", "ComputationCache", "default_capacity"]

ENV_CAPACITY = "LAZAX_COMPILATION_CACHE_SIZE"
DEFAULT_CAPACITY = 2048


def default_capacity() -> int:
    """Capacity from ``LAZAX_COMPILATION_CACHE_SIZE``, or 2048."""
    raw = os.environ.get(ENV_CAPACITY)
    if raw is None or raw.strip() == "":
        return DEFAULT_CAPACITY
    try:
        value = int(raw)
    except ValueError:
        raise ValueError(
            f"{ENV_CAPACITY} must be a positive integer, but it is {raw!r}. "
            f"Unset it to use the default of {DEFAULT_CAPACITY} entries."
        ) from None
    if value < 1:
        raise ValueError(f"{ENV_CAPACITY} must be at least 1, but it is {value}.")
    return value


@dataclass
class CacheStats:
    hits: int = 0
    misses: int = 0
    evictions: int = 0


class ComputationCache:
    """An LRU map from graph hash to compiled computation (see the module docstring)."""

    def __init__(self, capacity: int | None = None) -> None:
        self.capacity = default_capacity() if capacity is None else capacity
        if self.capacity < 1:
            raise ValueError(f"cache capacity must be at least 1, but got {self.capacity}")
        self.stats = CacheStats()
        self._entries: OrderedDict[Hashable, Any] = OrderedDict()
        self._eviction_hooks: list[Callable[[Hashable, Any], None]] = []
        # Re-entrant: an eviction hook may read the cache.
        self._lock = threading.RLock()

    def get(self, key: Hashable) -> Any | None:
        """The entry for ``key`` (now most recently used), or None; counts hit/miss."""
        with self._lock:
            entry = self._entries.get(key)
            if entry is None:
                self.stats.misses += 1
                return None
            self._entries.move_to_end(key)
            self.stats.hits += 1
            return entry

    def peek(self, key: Hashable) -> Any | None:
        """The entry for ``key`` without touching counters or recency."""
        return self._entries.get(key)

    def put(self, key: Hashable, entry: Any) -> None:
        """Insert ``entry`` as most recently used, evicting the oldest when full."""
        if entry is None:
            raise ValueError("a cache entry cannot be None")
        with self._lock:
            self._entries[key] = entry
            self._entries.move_to_end(key)
            self._evict_down_to(self.capacity)

    def on_evict(self, hook: Callable[[Hashable, Any], None]) -> Callable[[], None]:
        """Call ``hook(key, entry)`` on every eviction; returns a function that removes it."""
        self._eviction_hooks.append(hook)
        return lambda: self._eviction_hooks.remove(hook)

    def resize(self, capacity: int) -> None:
        """Change the capacity, evicting the oldest entries if it shrinks."""
        if capacity < 1:
            raise ValueError(f"cache capacity must be at least 1, but got {capacity}")
        with self._lock:
            self.capacity = capacity
            self._evict_down_to(capacity)

    def evict_oldest(self, count: int) -> None:
        """Evict the ``count`` least recently used entries (counted, hooks called); the
        capacity stays."""
        with self._lock:
            self._evict_down_to(max(0, len(self._entries) - count))

    def _evict_down_to(self, size: int) -> None:
        while len(self._entries) > size:
            old_key, old_entry = self._entries.popitem(last=False)
            self.stats.evictions += 1
            for hook in self._eviction_hooks:
                hook(old_key, old_entry)

    def clear(self) -> None:
        """Drop every entry (not counted as evictions) and keep the counters."""
        with self._lock:
            self._entries.clear()

    def keys(self) -> Iterator[Hashable]:
        """Keys from least to most recently used."""
        with self._lock:
            return iter(list(self._entries))

    def __contains__(self, key: Hashable) -> bool:
        return key in self._entries

    def __len__(self) -> int:
        return len(self._entries)
