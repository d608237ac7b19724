"""The compile stage: a cache key in, an executable out.

Contract of ``CompileStage``:
- ``lookup(key)``: the cached executable under a memory key (``keys.memory_key``), or
  None.
- ``compile(key, lower_fn, ...)``: on a miss, lower (``lower_fn() -> (fn, arg_specs)``),
  compile through the runtime (timed; SPMD over ``arg_shardings``; ``donate``: argument
  indices whose buffers the outputs may take over), and keep the executable under
  ``key``, with a ``Program`` as its ``annotations``. ``arg_shardings`` and ``donate``
  are per parameter of the graph; the program's arguments pack its Python numbers
  (``arguments``). A program over several processes' devices is compiled only once every
  process agrees on it (``agreement``). ``name`` is the program's name in XLA's dumps
  and profiles; it is not part of the key (a graph compiled under one name and met
  under another keeps its first name). A graph with collectives between the processes
  (``lower``'s ``fn.per_process``) compiles as a program each process runs on its own
  values, once every process agrees on it too; if they differ, ``cut_if_differ``
  raises ``CollectiveGraphsDiffer`` (the barrier runs the graph cut at its collectives),
  else ``GraphsDifferError``. Running the executable is the execute stage's.
  Given the graph's ``GraphFacts``, every compile is told to the recompile log (a
  compile after the first of a name has a report), counted by name
  (``metrics.compiles_by_name``), and dumped while ``dumps.directory`` is set
  (``LAZAX_DUMP_DIR``: ``dump``). The compile is a profiler span ``lazax::compile``.
- The persistent tier (``LAZAX_PERSISTENT_CACHE_DIR``) is set up at the first use of the
  runtime; its hits, misses and unreadable entries are counted.
- An eviction from the LRU is counted; every capacity's worth of them lets jax drop its
  own caches (see ``_on_evict``); the map guard watches the OS's mapping limit, and a
  compile that fails for lack of mappings or memory raises ``MemoryMapsExhausted``
  before any tensor changes; inside ``limits.limited(n)`` (``compile_limit``) a
  compile past the ``n``-th raises ``CompileLimitExceeded`` before it is lowered.
Both the barrier and a captured graph's replay compile here.
"""

from __future__ import annotations

import warnings
from time import perf_counter

from lazax import cache as lazax_cache
from lazax import ir, pjrt

from .. import metrics
from ..config import settings
from ..profiling import span
from .agreement import CollectiveGraphsDiffer, GraphsDifferError, agree
from .compile_limit import CompileLimits
from .dump import GraphDumps
from .keys import GraphFacts, KeyParts, RecompileLog
from .map_guard import MapGuard

__all__ = ["CompileStage", "Program"]


class Program:
    """What the executor keeps with an executable (its ``annotations``): the
    device-side checks its last output flags (None: none), how a run's parameters
    become its arguments (``arguments.Packing``), and where each root is among its
    outputs (``lower``'s ``fn.positions``; None: in order)."""

    __slots__ = ("checks", "packing", "positions")

    def __init__(self, checks, packing, positions=None) -> None:
        self.checks = checks
        self.packing = packing
        self.positions = positions


class CompileStage:
    """The runtime, the computation cache and what keys and fills it."""

    def __init__(self) -> None:
        self._cache: lazax_cache.ComputationCache | None = None
        self._evicted = 0
        self._salt: str | None = None
        self._salt_hash: int | None = None
        self._keys: KeyParts | None = None
        self._persistent_checked = False
        self.recompiles = RecompileLog()
        self.map_guard = MapGuard()
        self.limits = CompileLimits()  # compile_limit(n) blocks in force
        self.dumps = GraphDumps(settings().dump_dir)

    @property
    def runtime(self) -> pjrt.PjrtRuntime:
        runtime = pjrt.runtime()
        if not self._persistent_checked:
            self._persistent_checked = True
            path, read_only = lazax_cache.persistent_cache_settings()
            if path is not None:
                self.set_persistent_cache_dir(path, read_only, runtime)
        return runtime

    def set_persistent_cache_dir(self, path, read_only: bool = False, runtime=None) -> bool:
        """Use ``path`` as the persistent tier (see ``lazax.cache``); False (with a
        warning) if it cannot be used. Before the first compile only."""
        self._persistent_checked = True
        where = lazax_cache.prepare_directory(path, read_only)
        if where is None:
            return False
        (runtime or pjrt.runtime()).use_persistent_cache(str(where), read_only)
        return True

    # -- keys ------------------------------------------------------------------------
    @property
    def device_salt(self) -> str:
        """What the graph hash adds for the device: platform, device kind and count."""
        if self._salt is None:
            self._salt = self.runtime.device_kind()
        return self._salt

    @property
    def device_salt_hash(self) -> int:
        if self._salt_hash is None:
            self._salt_hash = ir.stable_hash(self.device_salt)
        return self._salt_hash

    @property
    def keys(self) -> KeyParts:
        """Builds the cache keys (see ``keys``)."""
        if self._keys is None:
            self._keys = KeyParts(self.runtime, self.device_salt_hash)
        return self._keys

    # -- the cache ---------------------------------------------------------------------
    @property
    def cache(self) -> lazax_cache.ComputationCache:
        if self._cache is None:
            self._cache = lazax_cache.ComputationCache()
            self._cache.on_evict(self._on_evict)
            self._evicted = 0
        return self._cache

    def lookup(self, key):
        """The executable kept under ``key``, or None."""
        return self.cache.get(key)

    def _on_evict(self, key, entry) -> None:
        metrics.bump("CacheEvictions")
        # jax keeps its own traces and executables of every graph lazax lowered (keyed
        # by shape, and weakly on objects its own caches keep alive): an evicted graph's
        # executable is not freed until those go too. Every capacity's worth of
        # evictions (a program that keeps making new shapes), let jax drop them; lazax's
        # cached executables are its own references and stay valid.
        self._evicted += 1
        if self._evicted >= max(64, self._cache.capacity):
            self._evicted = 0
            self.runtime.release_caches()

    def reset_cache(self, capacity: int | None = None) -> None:
        """Drop every compiled computation (tests, or a new cache size)."""
        self._cache = None
        if capacity is not None:
            self.cache.resize(capacity)

    # -- compiling ---------------------------------------------------------------------
    def compile_executable(
        self,
        fn,
        arg_specs,
        arg_shardings=None,
        donate=(),
        name=None,
        keep_source=False,
        device=None,
        per_process=False,
    ):
        """``runtime.compile``, with the persistent tier's outcome counted:
        ``PersistentCacheHit`` / ``PersistentCacheMiss``, and each unreadable entry
        (corrupt, truncated, foreign) as ``PersistentCacheLoadFailure`` and a warning."""
        entry = self.runtime.compile(
            fn,
            arg_specs,
            device=device,
            arg_shardings=arg_shardings,
            donate=donate,
            name=name,
            keep_source=keep_source,
            per_process=per_process,
        )
        if entry.persistent == "hit":
            metrics.bump("PersistentCacheHit")
        elif entry.persistent == "miss":
            metrics.bump("PersistentCacheMiss")
        for failure in entry.load_failures:
            metrics.bump("PersistentCacheLoadFailure")
            warnings.warn(f"lazax: recompiled after {failure}", RuntimeWarning, stacklevel=3)
        return entry

    def compile(
        self,
        key,
        lower_fn,
        *,
        timer: str = "CompileTime",
        arg_shardings=None,
        donate=(),
        lines=None,
        name=None,
        site: tuple[str | None, str] = (None, ""),
        facts: GraphFacts | None = None,
        shardings=None,
        report_as: str | None = None,
        device=None,
        cut_if_differ: bool = False,
    ):
        """Lower, compile and keep under ``key`` (see the module's contract). ``lines``:
        the graph's description (or a callable giving it) that a job's processes
        compare; ``site``: (graph name, user frame), named if they disagree. ``facts``
        (``keys.GraphFacts``): what explains and dumps this compile; with it, the
        compile is told to the recompile log under ``report_as`` (default: ``name``),
        with ``shardings`` (the key's form) and ``donate``. ``device``: the one device an
        unsharded program runs on (None: the default one)."""
        runtime = self.runtime
        if arg_shardings is not None and runtime.process_count > 1:
            if any(pjrt.spans_processes(s) for s in arg_shardings):
                agree(runtime, key, lines, *site)
        named_key = why = None
        report_site = report_as or name or "a graph"
        if facts is not None:
            named_key = self.keys.cache_key(facts, shardings, donate)
        if self.limits.active:  # refused before anything is recorded or compiled
            reason = None
            if facts is not None:
                reason = self.recompiles.explain(report_site, facts, named_key, shardings, donate)
            self.limits.check(reason or f"first compile of {report_site}", report_site, site[1])
        if facts is not None:
            why = self.recompiles.on_compile(
                report_site, facts, named_key, site[1], shardings, donate
            )
            why = why or f"first compile of {report_site}"
        dumps = self.dumps
        self.map_guard.before_compile(runtime)
        start = perf_counter()
        with span("compile", name), metrics.timed(timer):
            fn, arg_specs = lower_fn()
            packing = fn.packing  # parameter positions -> argument positions
            per_process = fn.per_process  # collectives between the processes inside
            if per_process and arg_shardings is None:  # (with them: the runtime refuses)
                if runtime.process_count > 1:
                    differ = CollectiveGraphsDiffer if cut_if_differ else GraphsDifferError
                    agree(runtime, key, lines, *site, error=differ)
            if arg_shardings is not None:
                arg_shardings = packing.shardings(arg_shardings)
            try:
                entry = self.compile_executable(
                    fn,
                    arg_specs,
                    arg_shardings,
                    packing.donated(donate),
                    name,
                    keep_source=dumps.directory is not None,
                    device=device,
                    per_process=per_process,
                )
            except Exception as err:
                if not self.map_guard.out_of_maps(err):
                    raise
                raise self.map_guard.exhausted(
                    f"XLA could not compile {name or 'a graph'} ({err})"
                ) from err
        seconds = perf_counter() - start
        metrics.record_compile(name or "unnamed", seconds)
        metrics.bump("CreateCompileHandles")
        metrics.record("InputOutputAliasCount", len(donate), unit="count")
        # The device-side checks the trace found (``lower``): one more output.
        entry.annotations = Program(list(fn.checks) or None, packing, fn.positions)
        self.cache.put(key, entry)
        self.map_guard.after_compile(key, seconds, self.cache, runtime)
        if dumps.directory is not None:
            dumps.write(self.runtime, name or "unnamed", entry, facts, named_key, why, seconds)
        return entry
