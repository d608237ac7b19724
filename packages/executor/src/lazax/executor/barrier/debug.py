"""The debug analyzer: what happens when execution is not allowed, and graph-count limits.

Contract:
- ``unexpected_execution(cause, graph_name, graph)`` writes an unexpected-execution
  report to stderr (the cause, the graph name, the graph hash, the number of graph
  inputs and outputs, and the Python frames that triggered it, innermost first, as
  ``function (file:line)``) and returns the ``RuntimeError`` to raise, naming the user's
  innermost frame outside lazax and torch. This is how ``compile(full_graph=True)`` is
  enforced: there is no strict-mode code path, in any process.
- ``GraphCountSession(name, limit).check(graph)`` remembers the graphs a compiled region
  runs and raises before compiling a graph that differs from all ``limit`` already seen,
  naming the first differing node as it is now and as it was expected.
"""

from __future__ import annotations

import os
import sys
import traceback

import torch

from lazax import ir

__all__ = [
    "GraphCountSession",
    "unexpected_execution",
    "user_frames",
    "user_location",
    "user_site",
]

_TORCH_ROOT = os.path.dirname(os.path.abspath(torch.__file__)) + os.sep
_STDLIB_ROOT = os.path.dirname(os.path.abspath(os.__file__)) + os.sep
_LAZAX_PART = os.sep + "lazax" + os.sep  # every lazax package lives under .../lazax/


def _is_library(filename: str) -> bool:
    """Frames of lazax, torch or the standard library: not where the user's code is."""
    path = os.path.abspath(filename)
    return _LAZAX_PART in path or path.startswith((_TORCH_ROOT, _STDLIB_ROOT))


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


def _summary(graph: ir.Graph) -> list[tuple[str, str]]:
    return [(n.op, ", ".join(map(str, n.specs))) for n in graph.nodes]


class GraphCountSession:
    """At most ``limit`` different graphs for one compiled region (see module docstring)."""

    def __init__(self, name: str, limit: int) -> None:
        if limit < 1:
            raise ValueError(f"max_different_graphs must be at least 1, but got {limit}")
        self.name = name
        self.limit = limit
        self.seen: dict[int, list[tuple[str, str]]] = {}

    def check(self, graph: ir.Graph) -> None:
        if graph.hash in self.seen:
            return
        now = _summary(graph)
        if len(self.seen) >= self.limit:
            expected = next(iter(self.seen.values()))
            index = next(
                (i for i, (a, b) in enumerate(zip(now, expected)) if a != b),
                min(len(now), len(expected)),
            )
            got = f"{now[index][0]} -> {now[index][1]}" if index < len(now) else "(no node)"
            want = (
                f"{expected[index][0]} -> {expected[index][1]}"
                if index < len(expected)
                else "(no node)"
            )
            raise RuntimeError(
                f"lazax: compiled region {self.name!r} traced a new graph, but "
                f"max_different_graphs={self.limit} different graph(s) were already seen. "
                f"First difference at node {index}: now {got}; expected {want}. A new input "
                f"shape or dtype makes a new graph: keep shapes fixed (pad or bucket them), "
                f"or raise max_different_graphs."
            )
        self.seen[graph.hash] = now
