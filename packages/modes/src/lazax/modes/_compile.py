"""``compile()``: a traced region over the same machine, one graph per call.

Contract of a region (``lx.compile(fn)``, ``@lx.compile``, ``@lx.compile(...)`` or
``with lx.compile(name=...)``), per entry:
1. Save the eager flag, allow-execution, the graph name and the layer-loop flag; turn
   eager off, and automatic layer loops on if ``scan_layers`` says so.
2. Flush what is already pending under the graph name ``<name>_clear_pending`` (data
   loading must not leak into the step graph), then name the graph ``<name>``.
3. Allow execution only if ``full_graph`` is False; open the graph-count session
   (``max_different_graphs``) that belongs to the function, or for the ``with`` form to
   its name, so it persists across entries.
4. Run the body. On a normal exit, sync the region's graph (still named, still counted,
   timed as ``CompileTime``/``ExecuteTime`` whatever eager mode is outside), then
   restore everything. If the body raises, restore everything and leave its pending work
   pending: running it would run the partial graph that ``full_graph`` refused, and
   nothing is lost (the next sync runs whatever is still alive).
"""

from __future__ import annotations

import functools

from lazax.executor import EXECUTOR, GraphCountSession

__all__ = ["CompiledRegion", "compile"]

# Graph-count sessions by owner: a function object, or the name of a ``with`` block.
_SESSIONS: dict[object, GraphCountSession] = {}


class CompiledRegion:
    """A compiled region: call it (a wrapped function) or enter it (``with``)."""

    def __init__(
        self, fn, full_graph: bool, name: str | None, max_different_graphs, scan_layers=None
    ) -> None:
        self.fn = fn
        self.scan_layers = scan_layers
        self.full_graph = full_graph
        self.name = name if name is not None else getattr(fn, "__name__", None)
        self.max_different_graphs = max_different_graphs
        self._modes: list = []  # the mode of each entry, innermost last (recursion)
        if fn is not None:
            functools.update_wrapper(self, fn)

    # -- decorator / wrapper -----------------------------------------------------------
    def __call__(self, *args, **kwargs):
        if self.fn is None:
            if len(args) == 1 and not kwargs and callable(args[0]):
                return CompiledRegion(
                    args[0], self.full_graph, self.name, self.max_different_graphs, self.scan_layers
                )
            raise TypeError(
                "this compile() region wraps no function: use it as a decorator, "
                "`compile(fn)`, or in a `with` statement"
            )
        with self:
            return self.fn(*args, **kwargs)

    # -- the region ----------------------------------------------------------------------
    def _session(self) -> GraphCountSession | None:
        if self.max_different_graphs is None:
            return None
        owner = self.fn if self.fn is not None else ("with", self.name)
        session = _SESSIONS.get(owner)
        if session is None or session.limit != self.max_different_graphs:
            label = self.name or "<unnamed>"
            session = _SESSIONS[owner] = GraphCountSession(label, self.max_different_graphs)
        return session

    def __enter__(self) -> CompiledRegion:
        ex = EXECUTOR
        flush_name = self.name + "_clear_pending" if self.name is not None else ex.graph_name
        # Every flag listed is restored when the region ends, whichever set it last.
        mode = ex.mode(
            eager=False,
            graph_name=flush_name,
            allow_execution=ex.allow_execution,
            graph_count_session=ex.graph_count_session,
            scan_layers=ex.scan_layers if self.scan_layers is None else self.scan_layers,
        )
        mode.__enter__()
        self._modes.append(mode)
        try:
            ex.sync()  # what was queued before the region is not part of its graph
            ex.graph_name = self.name
            ex.allow_execution = not self.full_graph
            ex.graph_count_session = self._session()
        except BaseException:
            self._modes.pop().__exit__(None, None, None)
            raise
        return self

    def __exit__(self, exc_type, exc, tb) -> None:
        try:
            if exc_type is None:
                EXECUTOR.allow_execution = True  # the region's own sync
                EXECUTOR.sync()
        finally:
            self._modes.pop().__exit__(None, None, None)


def compile(
    fn=None,
    *,
    full_graph: bool = False,
    name: str | None = None,
    max_different_graphs: int | None = None,
    scan_layers: bool | None = None,
):
    """Trace ``fn`` (or a ``with`` block) as one graph per call.

    ``full_graph=True``: any execution inside (``.item()``, ``print``, a data-dependent
    branch, a CPU-fallback op) raises ``RuntimeError`` naming your file and line, after a
    report on stderr. ``name`` defaults to ``fn.__name__``. ``max_different_graphs=N``:
    raise, before compiling, when the region would trace an (N+1)-th different graph.
    ``scan_layers=True``: a loop over a ``ModuleList`` of identical layers in the region
    (a Hugging Face decoder's) compiles as one XLA loop, with no change to the model
    (``lx.scan_layers``; None: as ``LAZAX_SCAN_LAYERS`` says).
    """
    if max_different_graphs is not None and max_different_graphs < 1:
        raise ValueError(f"max_different_graphs must be at least 1, but got {max_different_graphs}")
    return CompiledRegion(fn, full_graph, name, max_different_graphs, scan_layers)
