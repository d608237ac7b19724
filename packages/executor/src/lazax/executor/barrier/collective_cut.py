"""A graph with collectives that the processes traced differently: run it in pieces.

A graph holding collectives between the job's processes compiles as one program every
process runs (``ops.collectives``), which needs the same graph in every process. torch's
own code does not always trace one: DTensor takes this process's chunk of a replicated
value by its rank, a scatter's source stacks its inputs where the others have none. Then
the processes agree (``agreement``) that their graphs differ, and each runs its graph
cut at the collectives instead, the way torch's eager collectives run:

Contract: ``run_cut(run_graph, roots)`` returns the values of ``roots`` (device data,
in order). ``run_graph(values)`` is the barrier's (compile or find, then execute). For
each collective, in the order the processes issued them (the same in every process, as
torch requires), its operands are computed first (a program of this process only, with
every earlier collective's result as device data), then the collective alone on them
(the same small program in every process); last, the rest of the graph, with every
collective's result as device data (this process's own program). Nothing is
recomputed: each piece reads what the ones before it produced. ``tag_collective(node)``
records a collective node's issue order when it is traced. ``CutKeys``: the cache keys
of graphs the processes agreed to cut (the last 1024), which each process then cuts
without meeting again, as each runs a program it compiled in step with the others.
"""

from __future__ import annotations

import itertools
import weakref
from collections.abc import Callable

from lazax import ir

from ..ops import get_lowering

__all__ = [
    "PENDING_COLLECTIVES",
    "CutKeys",
    "holds_collective",
    "is_collective",
    "run_cut",
    "tag_collective",
]

# Tags collective nodes with their issue order (``node.data``), process-wide.
_SEQUENCE = itertools.count()

# The collective nodes traced and not yet gone. A graph holding one donates what the
# graph itself says (``donation.agreed``), not what this process alone still holds: a
# graph's cache key includes its donation, and processes that looked up different keys
# for the same program would have one compile (and wait for the others to agree) while
# another ran.
PENDING_COLLECTIVES: weakref.WeakSet = weakref.WeakSet()


def holds_collective(graph: ir.Graph) -> bool:
    """Whether ``graph`` holds a collective still pending (cheap: the pending few are
    looked up among the graph's nodes)."""
    positions = graph.positions
    return any(id(node) in positions for node in PENDING_COLLECTIVES)


def tag_collective(node: ir.Node) -> None:
    """A collective node just traced: its issue order, and pending until it is gone."""
    node.data = next(_SEQUENCE)
    PENDING_COLLECTIVES.add(node)


def is_collective(node: ir.Node) -> bool:
    rule = get_lowering(node.op) if node.operands else None
    return rule is not None and rule.collective


class _Rebuilder:
    """Copies of the graph's nodes with some nodes' values replaced (by device data)."""

    def __init__(self) -> None:
        self.replaced: dict[int, list] = {}  # id(node) -> its new output values
        self._copies: dict[int, ir.Node] = {}

    def value(self, v):
        node = v.node
        new = self.replaced.get(id(node))
        if new is not None:
            return new[v.index]
        return self.node(node).outputs[v.index]

    def node(self, node: ir.Node) -> ir.Node:
        if not node.operands:
            return node
        copy = self._copies.get(id(node))
        if copy is None:
            # Operands first, without recursion: graphs are thousands of nodes deep.
            for n in ir.post_order([node]):
                if n.operands and id(n) not in self._copies and id(n) not in self.replaced:
                    operands = tuple(self.value(o) for o in n.operands)
                    self._copies[id(n)] = ir.Node(n.op, operands, n.attrs, n.specs, data=n.data)
            copy = self._copies[id(node)]
        return copy


class CutKeys:
    """The keys of graphs cut before, oldest first, bounded (every process evicts the
    same ones in the same order)."""

    KEPT = 1024

    def __init__(self) -> None:
        self._keys: dict = {}

    def __contains__(self, key) -> bool:
        return key in self._keys

    def add(self, key) -> None:
        if len(self._keys) >= self.KEPT:
            del self._keys[next(iter(self._keys))]
        self._keys[key] = None


_LEAVES = (ir.DEVICE_DATA, ir.SCALAR)  # the leaves a program takes as its arguments


def _issue_order(node: ir.Node) -> int:
    return node.data if type(node.data) is int else -1


def run_cut(run_graph: Callable, roots: list) -> list:
    collectives = [n for n in ir.post_order(roots) if is_collective(n)]
    collectives.sort(key=_issue_order)
    rebuilt = _Rebuilder()
    for node in collectives:
        operands = [rebuilt.value(o) for o in node.operands]
        # A leaf that is not data is computed too: a factory's (``torch.empty`` on the
        # receiving side of a broadcast, where the sender's operand is device data).
        pending = [o for o in operands if o.node.op not in _LEAVES]
        computed = iter(run_graph(pending) if pending else ())
        ready = tuple(o if o.node.op in _LEAVES else next(computed) for o in operands)
        alone = ir.Node(node.op, ready, node.attrs, node.specs)
        rebuilt.replaced[id(node)] = run_graph(list(alone.outputs))
    return run_graph([rebuilt.value(r) for r in roots])
