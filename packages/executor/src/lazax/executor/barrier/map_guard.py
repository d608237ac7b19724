"""Keeping the process under the OS's limit on memory mappings.

Contract of ``MapGuard`` (one per compile stage):
- ``before_compile(runtime)`` raises ``MemoryMapsExhausted`` when the last shedding could
  not make room for one more program (the mappings are held outside the cache), before
  anything is lowered: every tensor keeps its value.
- ``after_compile(key, seconds, cache, runtime)`` is called after every compile that
  enters the cache. It reads ``runtime.memory_maps()`` (count, limit) often enough that
  no run of programs can cross the limit between two readings, and rarely enough that
  reading costs at most ``READ_BUDGET`` of the time spent compiling (the kernel writes
  one line per mapping: ~2 us each, 0.1 s at 50,000). What the count grew by since the
  last reading is what the programs compiled in between hold, shared in proportion to
  their compile times (one program each, when programs are large). Past ``HIGH_WATER``
  of the limit, less the room the next program needs (twice the largest of the last
  programs), it lets jax drop its own caches, then evicts the least recently used
  programs until what they hold brings the count to ``LOW_WATER``; it counts
  ``MemoryMapEvictions`` and warns once. It reads again after evicting: if the evicted
  programs did not free what they held, it says who holds them
  (``MemoryMapsHeldElsewhere``), and if the count stays within one program of the limit
  the next compile raises.
- ``out_of_maps(err)``: whether a compile failed for lack of mappings or memory (the
  stage raises ``exhausted(...)`` from it).

Why: each XLA CPU executable keeps its JIT code in mappings of its own (two for a
one-op graph, ~13 for a small one, 450 for 150 matmuls, 1,000-2,400 for a decoder
forward), and Linux allows 65,530 per process by default (``vm.max_map_count``). Past
it LLVM fails ("Cannot allocate memory") and the process dies: no Python error, the
user's work gone. Counting programs instead of mappings failed when programs grew: a
guard reading every 16 compiles let 16 programs of 2,000 mappings cross the limit.
Evicting a program frees its mappings (measured: lazy and dynamo programs alike, since
neither the replay nor jax keeps an evicted executable); dropping it costs a recompile if
it comes back.
"""

from __future__ import annotations

import gc
import types
import warnings
import weakref
from collections import deque

from .. import metrics

__all__ = ["MapGuard", "MemoryMapsExhausted"]

HIGH_WATER = 0.5
LOW_WATER = 0.35
READ_BUDGET = 0.05  # share of compile time the readings may take
SECONDS_PER_MAPPING_READ = 2e-6  # /proc/self/maps, measured on Linux 6
SMALLEST_ROOM = 64  # the room kept for a next program before any was measured

# Phrases of compile failures that mean the process ran out of mappings or memory.
_OUT_OF_MAPS = ("Cannot allocate memory", "Unable to allocate section memory", "RESOURCE_EXHAUSTED")


class MemoryMapsExhausted(RuntimeError):
    """A compile cannot be made: the process is at the OS's limit on memory mappings
    (or out of memory) and evicting lazax's programs did not make room."""


class MapGuard:
    def __init__(self) -> None:
        self.enabled = True
        self.warned = False
        self.count: int | None = None  # at the last reading
        self.limit: int | None = None
        self.held: dict = {}  # key -> mappings its program added
        self.recent: deque[int] = deque(maxlen=16)  # mappings of the last programs
        self._unread: list[tuple[object, float]] = []  # (key, compile seconds)
        self._full: str | None = None  # why the next compile must raise

    def room(self) -> int:
        """What the next program may add: twice the largest recent one."""
        return 2 * max(self.recent, default=SMALLEST_ROOM // 2)

    def before_compile(self, runtime) -> None:
        if self._full is None:
            return
        if self._read(runtime) and self.count + self.room() < self.limit:
            self._full = None  # the user freed programs (or raised the limit)
            return
        raise self.exhausted(self._full)

    def after_compile(self, key, seconds: float, cache, runtime) -> None:
        if not self.enabled:
            return
        self._unread.append((key, max(seconds, 1e-6)))
        if self.count is not None and not self._due():
            return
        before = self.count
        if not self._read(runtime):
            return
        if before is not None:
            self._attribute(self.count - before)
        self._unread.clear()
        if self.count + self.room() > HIGH_WATER * self.limit:
            self._shed(cache, runtime)

    def _due(self) -> bool:
        """Whether to read now: the programs since the last reading took enough compile
        time to pay for it, or they might, each as large as the largest recent one,
        have brought the count near the high-water mark."""
        spent = sum(s for _, s in self._unread)
        if spent * READ_BUDGET >= SECONDS_PER_MAPPING_READ * self.count:
            return True
        growth = len(self._unread) * self.room()
        return self.count + growth + self.room() > HIGH_WATER * self.limit

    def _read(self, runtime) -> bool:
        reading = getattr(runtime, "memory_maps", lambda: None)()
        if reading is None:
            self.enabled = False
            return False
        self.count, self.limit = reading
        return True

    def _attribute(self, grown: int) -> None:
        grown = max(grown, 0)
        total = sum(s for _, s in self._unread)
        for key, seconds in self._unread:
            share = round(grown * seconds / total)
            self.held[key] = share
            self.recent.append(share)

    def _shed(self, cache, runtime) -> None:
        runtime.release_caches()
        self._read(runtime)
        if self.count + self.room() <= HIGH_WATER * self.limit:
            return
        keys = list(cache.keys())[:-1]  # the newest runs next: keep it
        known = [self.held[k] for k in keys if k in self.held]
        unknown = sum(known) // len(known) if known else SMALLEST_ROOM
        need = self.count - LOW_WATER * self.limit
        drop, expected = 0, 0
        while drop < len(keys) and expected < need:
            expected += self.held.get(keys[drop], unknown)
            drop += 1
        evicted = [_ref(cache.peek(k)) for k in keys[:drop]]
        before = self.count
        cache.evict_oldest(drop)
        for k in keys[:drop]:
            self.held.pop(k, None)
        self._forget_gone(cache)
        runtime.release_caches()
        gc.collect()
        self._read(runtime)
        metrics.bump("MemoryMapEvictions", drop)
        freed = before - self.count
        holders = ""
        if expected and freed < expected // 2:
            holders = _holders([r() for r in evicted if r is not None and r() is not None])
            if holders:
                metrics.bump("MemoryMapsHeldElsewhere")
                warnings.warn(
                    f"lazax: evicted {drop} programs holding about {expected} memory "
                    f"mappings, but only {freed} were freed: {holders}",
                    RuntimeWarning,
                    stacklevel=4,
                )
        if self.count + self.room() >= self.limit:
            self._full = (
                f"after evicting {drop} programs the process still holds {self.count} "
                f"memory mappings, and the next program may need {self.room()} more"
                + (f" ({holders})" if holders else "")
            )
        self._warn_once(drop, len(keys) + 1, expected, freed)

    def _forget_gone(self, cache) -> None:
        if len(self.held) > 2 * len(cache) + 16:  # evicted by capacity meanwhile
            self.held = {k: v for k, v in self.held.items() if k in cache}

    def _warn_once(self, drop: int, entries: int, expected: int, freed: int) -> None:
        if self.warned or not drop:
            return
        self.warned = True
        warnings.warn(
            f"lazax: the process holds {self.count + freed} memory mappings, near the OS "
            f"limit of {self.limit} (vm.max_map_count); each compiled CPU program keeps "
            f"its code in its own (this process's last ones: up to {max(self.recent)}). "
            f"Evicted the {drop} least recently used of {entries} cached programs "
            f"(about {expected} mappings; they recompile if used again). To keep more, "
            f"raise vm.max_map_count; to avoid this, lower LAZAX_COMPILATION_CACHE_SIZE.",
            RuntimeWarning,
            stacklevel=5,
        )

    @staticmethod
    def out_of_maps(err: BaseException) -> bool:
        text = str(err)
        return any(phrase in text for phrase in _OUT_OF_MAPS)

    def exhausted(self, why: str) -> MemoryMapsExhausted:
        limit = f"{self.limit}" if self.limit else "a limited number of"
        return MemoryMapsExhausted(
            f"lazax: cannot compile another program: {why}. The OS allows {limit} memory "
            f"mappings per process (vm.max_map_count), and each compiled CPU program "
            f"keeps its code in its own. Every tensor keeps its value. Raise the limit "
            f"(sysctl -w vm.max_map_count=262144), lower LAZAX_COMPILATION_CACHE_SIZE, "
            f"or compile fewer distinct programs (sync at the same points each step; "
            f"bucket varying shapes)."
        )


def _ref(entry):
    try:
        return weakref.ref(entry)
    except TypeError:
        return None


def _holders(alive: list) -> str:
    """Who still holds evicted programs, by type, for the warning and the error: the
    object that refers to one, or for a plain container (a list, a dict) the objects
    that hold the container."""
    if not alive:
        return ""
    skip = (types.FrameType, types.FunctionType)
    kinds: dict[str, int] = {}
    for entry in alive:
        for holder in gc.get_referrers(entry):
            if holder is alive or isinstance(holder, skip):
                continue
            name = type(holder).__qualname__
            if isinstance(holder, (list, dict, tuple, set)):
                owners = [
                    type(o).__qualname__
                    for o in gc.get_referrers(holder)
                    if o is not alive and not isinstance(o, (*skip, list)) and type(o) is not dict
                ]
                name = f"a {name} in {' / '.join(sorted(set(owners)))}" if owners else name
            kinds[name] = kinds.get(name, 0) + 1
    named = ", ".join(f"{n} ({c})" for n, c in sorted(kinds.items(), key=lambda t: -t[1]))
    return f"{len(alive)} of them are still referenced, by {named or 'objects gc does not track'}"
