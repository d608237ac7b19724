"""The executor's process-wide flags and its compile stage, as the modes and tools set
and read them.

Contract: ``ExecutorFlags`` holds the flags the modes set (``MODE_FLAGS``: eager, allow
execution, graph name, capture guard, graph-count session, scan layers), changed for a
block with ``mode(**flags)`` and restored however the block ends; the compile stage
(``compiler``) and what of it the modes reach (runtime, cache, persistent tier, graph
dumps); and how a compiled program is named (``program_name``) and where a compile was
asked for (``compile_site``). ``barrier.executor.GraphExecutor`` builds the barrier on it.
"""

from __future__ import annotations

from contextlib import contextmanager

from lazax import pjrt

from ..config import settings
from .compile import CompileStage
from .debug import user_location, user_site

__all__ = ["MODE_FLAGS", "ExecutorFlags"]

# The flags ``GraphExecutor.mode`` may change for the length of a block.
MODE_FLAGS = (
    "eager",
    "allow_execution",
    "graph_name",
    "capture_guard",
    "graph_count_session",
    "scan_layers",
)


class ExecutorFlags:
    """The flags the modes set and the compile stage (``compiler``) every graph goes
    through."""

    def __init__(self) -> None:
        config = settings()
        self.eager = config.eager
        # Loops over a ModuleList of identical layers run as one XLA loop
        # (``loops.auto``): lx.compile(scan_layers=True), or LAZAX_SCAN_LAYERS=1.
        self.scan_layers = config.scan_layers
        self.allow_execution = True
        self.graph_name: str | None = None
        # Called with (graph_name, graph) before each graph runs (tests, tools).
        self.graph_hooks: list = []
        # The graph-count limit of the compiled region being traced, if any.
        self.graph_count_session = None
        # Set while a graph is captured for replay (the dynamo bridge): called with a
        # description before anything would run or read device data, so that a capture
        # never bakes a value computed during tracing into the replayed graph.
        self.capture_guard = None
        # A node deeper than this warns (once): its graph has gone unsynced too long.
        self.pending_depth_warning = config.pending_graph_warn_depth
        self.compiler = CompileStage()

    @contextmanager
    def mode(self, **flags):
        """``with EXECUTOR.mode(eager=False, capture_guard=refuse): ...``: set these
        flags (``MODE_FLAGS``) for the block; each is restored on the way out, however
        the block ends."""
        unknown = set(flags) - set(MODE_FLAGS)
        if unknown:
            raise TypeError(f"unknown mode flags {sorted(unknown)}; known: {MODE_FLAGS}")
        saved = {name: getattr(self, name) for name in flags}
        for name, value in flags.items():
            setattr(self, name, value)
        try:
            yield self
        finally:
            for name, value in saved.items():
                setattr(self, name, value)

    def compile_limit(self, limit: int):
        """``with EXECUTOR.compile_limit(0): ...``: at most ``limit`` new programs
        compile inside the block; the next raises ``CompileLimitExceeded`` (see
        ``compile_limit``)."""
        return self.compiler.limits.limited(limit)

    # -- what the compile stage owns, as the modes and tools read it ------------------
    @property
    def runtime(self) -> pjrt.PjrtRuntime:
        return self.compiler.runtime

    @property
    def cache(self):
        return self.compiler.cache

    def reset_cache(self, capacity: int | None = None) -> None:
        """Drop every compiled computation (tests, or a new cache size)."""
        self.compiler.reset_cache(capacity)

    def set_persistent_cache_dir(self, path, read_only: bool = False) -> bool:
        """Use ``path`` as the persistent tier (see ``lazax.cache``). Before the first
        compile only."""
        return self.compiler.set_persistent_cache_dir(path, read_only)

    @contextmanager
    def dump_graphs(self, path):
        """``with EXECUTOR.dump_graphs(dir): ...``: every graph compiled in the block is
        written to ``dir`` (``barrier.dump``; ``None``: none); the setting before the
        block (``LAZAX_DUMP_DIR``'s) comes back after it."""
        dumps = self.compiler.dumps
        saved = dumps.directory
        dumps.directory = path
        try:
            yield dumps.directory
        finally:
            dumps.directory = saved

    def compile_site(self) -> tuple[str, str]:
        """(site, frame) of a compile: the graph name if set, else the user's code
        location; the frame is the user's innermost one outside lazax and torch."""
        frame = user_location()
        return (self.graph_name or frame), frame

    def program_name(self, roots, eager: bool) -> str:
        """A compiled graph's name: the graph name (``lx.compile``'s), else an eager
        op's aten name, else where the user's code synced (``train.py:42:step``)."""
        if self.graph_name:
            return self.graph_name
        if eager:
            return roots[0].node.op
        return user_site()
