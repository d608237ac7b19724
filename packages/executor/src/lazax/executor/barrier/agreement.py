"""Every process of a job compiles the same program, or none runs it.

A program whose inputs are laid out over several processes' devices runs only when
every process runs it, and runs the same collectives in the same order. A process that
traced something else (a branch on its rank, a ``.item()`` in one process only, which
syncs a graph the others never build) would wait in a collective that never comes, or
exchange the wrong buffers.

Contract:
- ``describe(graph)``: one line per node, operands first (op, output specs, and the
  user's line for ops that keep it), to name the first node where two processes
  differ.
- ``agree(runtime, key, lines, graph_name, site, error)``: before a process compiles a
  cross-process program, it tells the others its cache key and description, and learns
  theirs (the k-th such compile of every process meets the k-th of the others). ``error``:
  the ``GraphsDifferError`` class raised (``CollectiveGraphsDiffer`` for a graph with
  collectives, which the barrier then runs cut at them: ``collective_cut``).
  Returns when all keys are equal; else raises ``GraphsDifferError`` (a RuntimeError)
  naming the first differing node and the processes, in every process, before
  anything is compiled or run; ``TimeoutError`` (with what to look for) when a process
  does not reach its k-th compile within ``timeout_s`` (``LAZAX_DISTRIBUTED_TIMEOUT``,
  300 s by default): it is dead, stuck, or compiles fewer programs.
  Only compiles meet: a process that runs a program the others already compiled in
  step with it is not checked again (that is where the cost is: each meeting is a
  round trip to the coordinator, ~0.5 ms here).
"""

from __future__ import annotations

from collections.abc import Callable

from lazax import ir, pjrt

from ..config import settings

__all__ = ["CollectiveGraphsDiffer", "GraphsDifferError", "agree", "describe", "timeout_s"]


class GraphsDifferError(RuntimeError):
    """The processes of a job traced different programs for the same step."""


class CollectiveGraphsDiffer(GraphsDifferError):
    """Graphs with collectives between the processes differ: every process learns it
    at the same meeting, and runs its graph cut at the collectives instead."""


_MET = {"count": 0}


def timeout_s() -> float:
    return settings().distributed_timeout_s


def describe(graph: ir.Graph) -> list[str]:
    lines = []
    for node in ir.post_order(graph.roots):
        specs = ", ".join(map(str, node.specs))
        line = f"{node.op} -> {specs}"
        site = node.data if isinstance(node.data, tuple) and len(node.data) == 3 else None
        if site is not None:
            line += f"  (traced at {site[0]}:{site[1]} in {site[2]})"
        lines.append(line)
    return lines


def agree(
    runtime,
    key,
    lines: Callable[[], list[str]] | list[str] | None,
    graph_name: str | None = None,
    site: str = "",
    error: type[GraphsDifferError] = GraphsDifferError,
) -> None:
    _MET["count"] += 1
    k = _MET["count"]
    me = runtime.process_index
    described = lines() if callable(lines) else list(lines or ())
    payload = "\n".join([repr(key), site, *described]).encode()
    what = f"graph {graph_name!r}" if graph_name else "a graph"
    try:
        everyone = pjrt.exchange(f"graph{k}", payload, timeout_s(), f"before compiling {what}")
    except TimeoutError as err:
        raise TimeoutError(
            f"lazax: process {me} is about to compile {what}, its cross-process program "
            f"number {k}, and {err}. Each process must build the same programs in the "
            f"same order: a process that died, hangs, or skipped a sync (a read, "
            f"print or .item() in one process only syncs a graph the others never "
            f"build) leaves the others waiting here. The wait is "
            f"LAZAX_DISTRIBUTED_TIMEOUT seconds."
        ) from None
    mine = everyone[me].decode().split("\n")
    for other, data in enumerate(everyone):
        theirs = data.decode().split("\n")
        if theirs[0] == mine[0]:
            continue
        raise error(_difference(me, mine, other, theirs, what, k))


def _difference(me: int, mine: list, other: int, theirs: list, what: str, k: int) -> str:
    (here_site, *mine), (there_site, *theirs) = mine[1:], theirs[1:]
    at = next(
        (i for i, (a, b) in enumerate(zip(mine, theirs)) if a != b), min(len(mine), len(theirs))
    )
    here = mine[at] if at < len(mine) else "(the graph ends here)"
    there = theirs[at] if at < len(theirs) else "(the graph ends here)"
    if here == there:  # the same nodes: the inputs' layouts or the outputs taken differ
        where = (
            "their ops are the same, but an op's arguments (an index, a size, a Python "
            "number traced as a constant: 0 and 1 are), the inputs' shardings or the "
            "outputs taken differ"
        )
    else:
        where = (
            f"node {at} (operands first) is\n  {here}\nin process {me}, but\n  {there}\n"
            f"in process {other}"
        )
    return (
        f"lazax: process {me} (synced at {here_site or '?'}) and process {other} (synced "
        f"at {there_site or '?'}) traced different programs for their "
        f"cross-process program number {k} ({what}): {where}. Every process must "
        f"trace the same ops in the same order; a branch on the process index or rank, "
        f"or a read (.item(), print) in one process only, changes a graph. Nothing was "
        f"compiled or run."
    )
