"""Keeping the process under the OS's limit on memory mappings.

Contract: ``MapGuard.after_compile(cache, runtime)`` is called after every compile that
enters the cache. Every ``CHECK_EVERY`` compiles it reads ``runtime.memory_maps()``
(about 0.2 ms on Linux; a runtime without it, or an OS that does not say, turns the
guard off). Past ``HIGH_WATER`` of the limit it first lets jax drop its own caches; if
the process is still past it, it evicts the least recently used executables, in
proportion, down to ``LOW_WATER``, counts ``MemoryMapEvictions`` and warns once.

Why: each XLA CPU executable keeps its JIT code in mappings of its own (about 13 for a
small graph, one or more per kernel), and Linux allows 65,530 per process by default
(``vm.max_map_count``). A cache of 2,048 executables of real graphs can pass that, and
then LLVM aborts the process ("Unable to allocate section memory"): no Python error, the
user's work gone. Dropping the oldest executables costs a recompile if they come back.
"""

from __future__ import annotations

import warnings

from .. import metrics

__all__ = ["MapGuard"]

CHECK_EVERY = 16
HIGH_WATER = 0.5
LOW_WATER = 0.35


class MapGuard:
    def __init__(self) -> None:
        self.compiles = 0
        self.enabled = True
        self.warned = False

    def after_compile(self, cache, runtime) -> None:
        self.compiles += 1
        if not self.enabled or self.compiles % CHECK_EVERY:
            return
        reading = getattr(runtime, "memory_maps", lambda: None)()
        if reading is None:
            self.enabled = False
            return
        count, limit = reading
        if count <= HIGH_WATER * limit:
            return
        runtime.release_caches()
        count, limit = runtime.memory_maps()
        if count <= HIGH_WATER * limit:
            return
        # Mappings not held by executables (libraries, heaps) stay: evict a share of
        # the cache as large as the share of mappings to shed.
        entries = len(cache)
        drop = min(entries, 1 + int(entries * (count - LOW_WATER * limit) / count))
        cache.evict_oldest(drop)
        runtime.release_caches()
        metrics.bump("MemoryMapEvictions", drop)
        if not self.warned:
            self.warned = True
            warnings.warn(
                f"lazax: the process holds {count} memory mappings, near the OS limit of "
                f"{limit} (vm.max_map_count); each compiled CPU graph keeps its code in "
                f"several. Evicted the {drop} least recently used of {entries} cached "
                f"graphs (they recompile if used again). To keep more, raise "
                f"vm.max_map_count; to avoid this, lower LAZAX_COMPILATION_CACHE_SIZE.",
                RuntimeWarning,
                stacklevel=2,
            )
