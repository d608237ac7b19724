"""Which parameters of a graph nothing else can reach: the question donation asks.

Contract: ``holder_count(obj)`` is the number of references to ``obj`` besides the
call's own argument (None where counts cannot be trusted).
``private_parameters(graph, dropped)`` returns the indices (into ``graph.parameters``)
of the ``device_data`` leaves that, once the caller lets go of the graph and of the
references it names in ``dropped``, no Python object can reach: neither the leaf, nor
any node or value between it and the roots, nor the leaf's payload (held by that leaf
alone). ``dropped`` maps ``id(obj)`` to how many references to ``obj`` the caller holds
and is about to drop (the roots list it built, the storages that the results replace).
Everything else that holds a node of the graph (another tensor's pending IR, a view's
cached value, a graph a hook kept) makes that node, and everything under it, reachable.

How: CPython's reference counts are the ground truth of "what holds it". For every node
and every ``Value`` object of the graph the expected count is the references the graph
itself makes (operand tuples, the roots tuple, ``Value`` objects pointing at their
node, the ``reached`` and ``parameters`` lists) plus ``dropped``; any count above that
is a holder outside the graph. A count below it means the accounting is wrong for this
interpreter: then nothing is private (donation is an optimisation; a wrong "yes" would
corrupt a user's data, a wrong "no" costs memory). The offset that ``sys.getrefcount``
adds is measured once, at import, the way it is used here.
"""

from __future__ import annotations

import sys
from collections.abc import Mapping

from ._graph import Graph
from ._node import DEVICE_DATA, Node

__all__ = ["holder_count", "private_parameters", "refcounts_reliable"]

_getrefcount = getattr(sys, "getrefcount", None)


def _measure_offset() -> int | None:
    """What ``list(map(getrefcount, objs))`` adds to the true count of holders, or None
    if this interpreter's counts cannot be trusted (no refcounts, or they vary)."""
    if _getrefcount is None:
        return None
    offsets = set()
    for holders in (1, 2, 3):
        probe = object()
        lists = [[probe] for _ in range(holders)]
        del probe
        offsets.add(list(map(_getrefcount, lists[0]))[0] - holders)
        extra = [lists[0][0]]  # one more holder must count as one more
        offsets.add(list(map(_getrefcount, extra))[0] - holders - 1)
    return offsets.pop() if len(offsets) == 1 else None


_OFFSET = _measure_offset()


def holder_count(obj) -> int | None:
    """How many references to ``obj`` exist besides the argument of this call; None
    where reference counts cannot be trusted. The caller's own variables count."""
    if _OFFSET is None:
        return None
    return list(map(_getrefcount, [obj]))[0] - _OFFSET - 2


def refcounts_reliable() -> bool:
    """Whether ``private_parameters`` can answer anything but "none" here."""
    return _OFFSET is not None


def _graph_references(graph: Graph) -> tuple[dict[int, int], list]:
    """(id -> references the graph itself makes, the Value objects met). A function of
    its own so that no loop variable still holds a node when the counts are read."""
    edges: dict[int, int] = {}
    values: dict[int, object] = {}  # Value objects (outputs >= 1) met on edges or roots
    for node in graph.reached:
        for v in node.operands:
            key = id(v)
            edges[key] = edges.get(key, 0) + 1
            if type(v) is not Node:
                values[key] = v
    for r in graph.roots:
        key = id(r)
        edges[key] = edges.get(key, 0) + 1
        if type(r) is not Node:
            values[key] = r
    for v in values.values():  # a Value object holds its node
        key = id(v.node)
        edges[key] = edges.get(key, 0) + 1
    for p in graph.parameters:  # the parameters list
        edges[id(p)] = edges.get(id(p), 0) + 1
    return edges, list(values.values())


def _held_outside(objs: list, edges: dict[int, int], dropped: Mapping[int, int]):
    """The objects of ``objs`` held by something outside the graph; None if a count is
    below what the graph alone accounts for."""
    counts = list(map(_getrefcount, objs))  # each also held once by ``objs``
    live = []
    base = _OFFSET + 1
    get_edges = edges.get
    get_dropped = dropped.get
    for i, count in enumerate(counts):
        key = id(objs[i])
        outside = count - base - get_edges(key, 0) - get_dropped(key, 0)
        if outside > 0:
            live.append(objs[i])
        elif outside < 0:
            return None
    return live


def _reachable_from(live: list) -> set[int]:
    reachable: set[int] = set()
    while live:
        obj = live.pop()
        node = obj if type(obj) is Node else obj.node
        if id(node) not in reachable:
            reachable.add(id(node))
            live.extend(node.operands)
    return reachable


def private_parameters(graph: Graph, dropped: Mapping[int, int]) -> list[int]:
    if _OFFSET is None:
        return []
    edges, value_list = _graph_references(graph)
    live_nodes = _held_outside(graph.reached, edges, dropped)
    live_values = _held_outside(value_list, edges, dropped) if value_list else []
    if live_nodes is None or live_values is None:
        return []  # the accounting does not hold here: donate nothing
    reachable = _reachable_from(live_nodes + live_values)
    private = []
    for i, p in enumerate(graph.parameters):
        if p.op != DEVICE_DATA or p.data is None or id(p) in reachable:
            continue
        # The payload: held by this leaf only (not by a second leaf, a cache, a user).
        if list(map(_getrefcount, [p.data]))[0] - _OFFSET - 1 == 1:
            private.append(i)
    return private
