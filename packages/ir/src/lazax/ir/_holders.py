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
from collections import Counter
from collections.abc import Mapping
from itertools import compress, repeat
from operator import add, attrgetter, gt, sub

from ._graph import Graph
from ._node import DEVICE_DATA, Node

__all__ = ["holder_count", "private_parameters", "refcounts_reliable"]

_getrefcount = getattr(sys, "getrefcount", None)
_NODE = attrgetter("node")


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


def _expected_node_references(graph: Graph, dropped: Mapping[int, int]) -> list[int]:
    """Per node of ``graph.reached``, the references the graph and the caller account
    for (besides the ``reached`` list and the offset): the edge of its first visit (or
    the roots tuple), its revisits (from the edge signature: no second walk), the parameters
    list, one per ``Value`` object of it (an edge through a Value holds the Value, not
    the node), and what the caller drops."""
    revisits = Counter(graph.edge_signature)
    expected = list(map(add, map(revisits.get, range(len(graph.reached)), repeat(0)), repeat(1)))
    for position in graph.parameter_positions:
        expected[position] += 1
    positions = graph.positions
    value_edges = graph.value_edges
    if value_edges:
        # In C (map, zip, Counter): a decoder's graph has hundreds of value edges.
        via_values = Counter(map(positions.__getitem__, map(id, map(_NODE, value_edges))))
        distinct = dict(zip(map(id, value_edges), value_edges)).values()
        holding = Counter(map(positions.__getitem__, map(id, map(_NODE, distinct))))
        via_values.subtract(holding)
        for position, net in via_values.items():
            expected[position] -= net
    for key, count in dropped.items():
        position = positions.get(key)
        if position is not None:
            expected[position] += count
    return expected


def _held_outside(objs: list, expected: list[int]):
    """The objects of ``objs`` that something outside the graph holds; None if a count
    is below what the graph alone accounts for."""
    counts = list(map(_getrefcount, objs))  # each also held once by ``objs``
    outside = list(map(sub, counts, expected))
    base = _OFFSET + 1
    if min(outside, default=base) < base:
        return None
    return list(compress(objs, map(gt, outside, repeat(base))))


def _value_objects(graph: Graph, dropped: Mapping[int, int]) -> tuple[list, list[int]]:
    """The distinct Value objects and what accounts for each: its edges and roots
    occurrences, held once more each by ``graph.value_edges``, and what is dropped."""
    occurrences = Counter(map(id, graph.value_edges))
    values = list(dict(zip(map(id, graph.value_edges), graph.value_edges)).values())
    keys = list(map(id, values))
    twice = map(add, map(occurrences.__getitem__, keys), map(occurrences.__getitem__, keys))
    expected = list(map(add, twice, map(dropped.get, keys, repeat(0))))
    return values, expected


def _reachable_from(live: list) -> set[int]:
    reachable: set[int] = set()
    while live:
        obj = live.pop()
        node = obj if type(obj) is Node else obj.node
        if id(node) not in reachable:
            reachable.add(id(node))
            live.extend(node.operands)
    return reachable


def _candidates(graph: Graph, dropped: Mapping[int, int]) -> bool:
    """Whether any device-data parameter is held by nothing but the graph's own edges
    and lists: a necessary condition, from the walk's edge signature (no second walk),
    so that the common sync with nothing to donate costs a few microseconds."""
    revisits = Counter(graph.edge_signature)
    params = graph.parameters
    positions = graph.parameter_positions
    for k in range(len(params)):  # not enumerate: its cached tuple would hold ``p``
        p = params[k]
        if p.op != DEVICE_DATA:
            continue
        # The edge of its first visit (or, for a root, the roots tuple), the edges of
        # its revisits, the reached and parameters lists, and this frame's ``p``.
        expected = 1 + revisits[positions[k]] + 3 + dropped.get(id(p), 0)
        if _getrefcount(p) - _OFFSET <= expected:
            return True
    return False


def private_parameters(graph: Graph, dropped: Mapping[int, int]) -> list[int]:
    if _OFFSET is None or not _candidates(graph, dropped):
        return []
    live = _held_outside(graph.reached, _expected_node_references(graph, dropped))
    if live is None:
        return []  # the accounting does not hold here: donate nothing
    if graph.value_edges:
        values, expected = _value_objects(graph, dropped)
        live_values = _held_outside(values, expected)
        del values
        if live_values is None:
            return []
        live += live_values
    reachable = _reachable_from(live)
    private = []
    params = graph.parameters
    for i in range(len(params)):
        p = params[i]
        if p.op != DEVICE_DATA or p.data is None or id(p) in reachable:
            continue
        # The payload: held by this leaf only (not by a second leaf, a cache, a user).
        if list(map(_getrefcount, [p.data]))[0] - _OFFSET - 1 == 1:
            private.append(i)
    return private
