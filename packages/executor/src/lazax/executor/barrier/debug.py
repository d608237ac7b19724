"""The debug analyzer: what happens when execution is not allowed, and graph-count limits.

Contract:
- ``unexpected_execution(cause, graph_name, graph)`` writes an unexpected-execution
  report to stderr (the cause, the graph name, the graph hash, the number of graph
  inputs and outputs, and the Python frames that triggered it, innermost first, as
  ``function (file:line)``) and returns the ``RuntimeError`` to raise, naming the user's
  innermost frame outside lazax and torch. This is how ``compile(full_graph=True)`` is
  enforced: there is no strict-mode code path, in any process.
- ``GraphCountSession(name, limit).check(graph)`` remembers the graphs a compiled region
  runs and raises ``GraphLimitExceeded`` (a ``RuntimeError``) before compiling a graph
  that differs from all ``limit`` already seen, naming where its operations leave the
  seen graphs (compared as a trie, as torch_xla's detector does), the operation it has
  there and every operation the seen graphs have there.
- The user's frame (``user_site``, ``user_location``: a program's default name, where
  an error points) is the innermost one outside lazax, torch, the standard library and
  the folders given to ``register_library_path`` (a library over lazax).
"""

from __future__ import annotations

import os
import sys
import traceback
from typing import NamedTuple

import torch

from lazax import ir

__all__ = [
    "register_library_path",
    "GraphCountSession",
    "GraphLimitExceeded",
    "TracedOp",
    "unexpected_execution",
    "user_frames",
    "user_location",
    "user_site",
]

_TORCH_ROOT = os.path.dirname(os.path.abspath(torch.__file__)) + os.sep
_STDLIB_ROOT = os.path.dirname(os.path.abspath(os.__file__)) + os.sep
_LAZAX_PART = os.sep + "lazax" + os.sep  # every lazax package lives under .../lazax/


_LIBRARY_ROOTS = [_TORCH_ROOT, _STDLIB_ROOT]
# File name -> whether it is a library's (``checks.trace_site``'s per-op cache): emptied
# when a library registers, so a file seen before is asked again.
LIBRARY_FILES: dict[str, bool] = {}


def register_library_path(path: str) -> None:
    """Frames of files under ``path`` are a library's, not its user's: programs and
    errors name the first frame outside it (a library over lazax, as torch_xla's API
    is, registers its folder on import, before its first op)."""
    root = os.path.join(os.path.abspath(path), "")
    if root not in _LIBRARY_ROOTS:
        _LIBRARY_ROOTS.append(root)
        LIBRARY_FILES.clear()


def _is_library(filename: str) -> bool:
    """Frames of lazax, torch, the standard library or a registered library: not where
    the user's code is."""
    path = os.path.abspath(filename)
    return _LAZAX_PART in path or path.startswith(tuple(_LIBRARY_ROOTS))


def user_frames() -> list[traceback.FrameSummary]:
    """The current Python stack, innermost first."""
    return list(reversed(traceback.extract_stack()[:-1]))


def _user_frame():
    """The innermost frame outside lazax, torch and the standard library, or None."""
    return next((f for f in user_frames() if not _is_library(f.filename)), None)


def user_location() -> str:
    """``file:line (in function)`` of the innermost frame outside lazax and torch."""
    user = _user_frame()
    return f"{user.filename}:{user.lineno} (in {user.name})" if user else "<unknown>"


def user_site() -> str:
    """``file:line:function`` of the innermost frame outside lazax and torch (the file's
    base name): a program's name when nothing names it."""
    user = _user_frame()
    return f"{os.path.basename(user.filename)}:{user.lineno}:{user.name}" if user else "lazax"


def unexpected_execution(cause: str, graph_name: str | None, graph: ir.Graph | None):
    frames = user_frames()
    user = next((f for f in frames if not _is_library(f.filename)), None)
    lines = [
        "lazax: unexpected execution inside a compiled region (execution not allowed)",
        f"  cause: {cause}",
        f"  graph name: {graph_name or '<unnamed>'}",
    ]
    if graph is not None:
        lines.append(f"  graph hash: {graph.hash & 0xFFFFFFFFFFFFFFFF:016x}")
        lines.append(f"  graph inputs: {len(graph.parameters)}, outputs: {len(graph.roots)}")
    lines.append("  python frames (innermost first):")
    lines += [f"    {f.name} ({f.filename}:{f.lineno})" for f in frames]
    print("\n".join(lines), file=sys.stderr)
    where = f" at {user.filename}:{user.lineno} (in {user.name})" if user else ""
    return RuntimeError(
        f"lazax: {cause} happened inside the compiled region "
        f"{graph_name or '<unnamed>'!r}{where}, where execution is not allowed "
        f"(full_graph=True). Nothing of the partial graph ran. Move the .item()/print/"
        f"data-dependent branch/CPU-fallback op out of the region, or pass "
        f"full_graph=False to let it run there."
    )


class TracedOp(NamedTuple):
    """One operation of a traced graph as the graph-count limit reports it: the op's
    name (``aten::mul.Tensor``) and the shapes and dtypes of its outputs."""

    op: str
    specs: tuple[ir.TensorSpec, ...]

    def __str__(self) -> str:
        return f"{self.op} -> {', '.join(map(str, self.specs))}"


class GraphLimitExceeded(RuntimeError):
    """A compiled region traced a graph unlike the ``limit`` it has already run.

    Its operations (graph inputs left out) are compared with those of the graphs seen,
    as one trie: ``operations`` are the new graph's; ``index`` is the first position
    where it leaves every seen graph that shares its longest prefix; ``got`` is its
    operation there (None: the new graph ends there) and ``expected`` lists, in the
    order they were first seen, what those graphs have there (None for one that ends
    there)."""

    def __init__(
        self, message: str, name: str, limit: int, operations: tuple, index: int, expected
    ) -> None:
        super().__init__(message)
        self.name = name
        self.limit = limit
        self.operations: tuple[TracedOp, ...] = operations
        self.index = index
        self.expected: tuple[TracedOp | None, ...] = expected

    @property
    def got(self) -> TracedOp | None:
        return self.operations[self.index] if self.index < len(self.operations) else None


def _operations(graph: ir.Graph) -> tuple[TracedOp, ...]:
    inputs = {id(node) for node in graph.parameters}
    return tuple(TracedOp(n.op, tuple(n.specs)) for n in graph.nodes if id(n) not in inputs)


def _common_prefix(a: tuple, b: tuple) -> int:
    return next((i for i, (x, y) in enumerate(zip(a, b)) if x != y), min(len(a), len(b)))


def _where_it_leaves(now: tuple, seen) -> tuple[int, tuple]:
    """The first position where ``now`` leaves the seen graphs of its longest common
    prefix, and what those graphs hold there (None where one ends), each once."""
    prefixes = [(_common_prefix(now, ops), ops) for ops in seen]
    index = max(length for length, _ in prefixes)
    expected: list = []
    for length, ops in prefixes:
        there = ops[index] if index < len(ops) else None
        if length == index and there not in expected:
            expected.append(there)
    return index, tuple(expected)


def _describe(op) -> str:
    return "(the end of the graph)" if op is None else str(op)


class GraphCountSession:
    """At most ``limit`` different graphs for one compiled region (see module docstring)."""

    def __init__(self, name: str, limit: int) -> None:
        if limit < 1:
            raise ValueError(f"max_different_graphs must be at least 1, but got {limit}")
        self.name = name
        self.limit = limit
        # graph hash -> its operations; graphs whose operations are equal (they differ in
        # their inputs only) share one entry of the trie but count as graphs of their own
        self.seen: dict[int, tuple[TracedOp, ...]] = {}

    def check(self, graph: ir.Graph) -> None:
        if graph.hash in self.seen:
            return
        now = _operations(graph)
        if len(self.seen) >= self.limit:
            raise self._exceeded(now)
        self.seen[graph.hash] = now

    def _exceeded(self, now: tuple) -> GraphLimitExceeded:
        index, expected = _where_it_leaves(now, list(self.seen.values()))
        got = now[index] if index < len(now) else None
        if got is None and expected == (None,):
            where = (
                f"Its operations equal a seen graph's ({len(now)} operations); its inputs "
                f"differ (their number, shapes or dtypes)."
            )
        else:
            wanted = "; ".join(_describe(op) for op in expected)
            either = "either of " if len(expected) > 1 else ""
            where = (
                f"First difference at operation {index}: now {_describe(got)}; "
                f"expected {either}{wanted}."
            )
        message = (
            f"lazax: compiled region {self.name!r} traced a new graph, but "
            f"max_different_graphs={self.limit} different graph(s) were already seen. "
            f"{where} A new input shape or dtype makes a new graph: keep shapes fixed "
            f"(pad or bucket them), or raise max_different_graphs."
        )
        return GraphLimitExceeded(message, self.name, self.limit, now, index, expected)
