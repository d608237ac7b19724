"""Which parameters of a graph nothing else can reach: the question donation asks.

Contract: ``holder_counts(objs)`` is, per object of the list ``objs``, the number of
references to it besides the list's. ``holder_count(obj, calls=1)`` is the number of
references to ``obj`` besides the call's own argument (None where counts cannot be
trusted); ``calls`` says through how many Python calls, this one included, the caller
passed ``obj`` down from the frame whose holders it means to count.
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

Python calls: CPython 3.11+ runs a Python-to-Python call inside the caller's frame loop
and moves the arguments into the callee; where a custom eval-frame function is
installed (torch.compile installs one, and a failed dynamo trace leaves it installed for
the rest of the process) calls are not inlined and each one keeps an extra reference to
every argument on the caller's stack until it returns. ``holder_count`` measures what one
call adds, per call, with a probe passed the same way, and discounts it ``calls`` times.
``private_parameters`` counts nodes no call receives, so it needs no such correction.
"""

from __future__ import annotations

import sys
from collections import Counter
from collections.abc import Mapping
from itertools import compress, repeat
from operator import add, and_, attrgetter, eq, gt, le, not_, sub

from ._graph import Graph
from ._node import DEVICE_DATA, Node

__all__ = ["holder_count", "holder_counts", "private_parameters", "refcounts_reliable"]

_getrefcount = getattr(sys, "getrefcount", None)
_NODE = attrgetter("node")
_OP = attrgetter("op")
_DATA = attrgetter("data")


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


def _count_through_a_call(obj) -> int:
    return list(map(_getrefcount, [obj]))[0]


def _reference_per_call() -> int:
    """What passing an argument through one Python call adds to its count right now: 0
    where the interpreter inlines calls, 1 where it does not."""
    probe = object()
    # Inlined: the probe's holders are ``probe`` here and the callee's parameter; the
    # list adds one.
    return _count_through_a_call(probe) - _OFFSET - 3


def holder_count(obj, calls: int = 1) -> int | None:
    """How many references to ``obj`` exist besides the argument of this call; None
    where reference counts cannot be trusted. The caller's own variables count, and so
    does each parameter ``obj`` passed through on its way here; ``calls`` is how many
    calls that way took, this one included (each may hold one more reference on an
    interpreter that does not inline calls)."""
    if _OFFSET is None:
        return None
    return list(map(_getrefcount, [obj]))[0] - _OFFSET - 2 - calls * _reference_per_call()


def holder_counts(objs: list) -> list[int] | None:
    """Per object of ``objs``, how many references to it exist besides one from this
    list (a list the caller built for the question: an object listed twice counts its
    second listing); None where counts cannot be trusted. The objects are not passed
    through a call, so no call adds to their counts."""
    if _OFFSET is None:
        return None
    return list(map(sub, map(_getrefcount, objs), repeat(_OFFSET + 1)))


def refcounts_reliable() -> bool:
    """Whether ``private_parameters`` can answer anything but "none" here."""
    return _OFFSET is not None


class _Structure:
    """What a graph's shape fixes, so per graph hash (the hash covers how edges share
    nodes): per ``reached`` node, the references its edges make (the first visit or the
    roots tuple, the revisits, the parameters list, less the edges that go through a
    ``Value`` object, which hold the Value and not the node); per parameter, the same
    plus the two lists; per value edge, its node's position."""

    __slots__ = ("node_base", "param_base", "edge_nodes")

    def __init__(self, graph: Graph) -> None:
        revisits = Counter(graph.edge_signature)
        node_base = list(
            map(add, map(revisits.get, range(len(graph.reached)), repeat(0)), repeat(1))
        )
        for position in graph.parameter_positions:
            node_base[position] += 1
        nodes = map(_NODE, graph.value_edges)
        self.edge_nodes = list(map(graph.positions.__getitem__, map(id, nodes)))
        for position in self.edge_nodes:
            node_base[position] -= 1
        self.node_base = node_base
        # A parameter: its edges, and the reached and parameters lists.
        self.param_base = [3 + revisits.get(p, 0) for p in graph.parameter_positions]


_STRUCTURES: dict[int, _Structure] = {}
_STRUCTURES_KEPT = 512


def _structure(graph: Graph) -> _Structure:
    found = _STRUCTURES.get(graph.hash)
    if found is not None and (
        len(found.node_base) == len(graph.reached)
        and len(found.edge_nodes) == len(graph.value_edges)
        and len(found.param_base) == len(graph.parameters)
    ):
        return found
    if len(_STRUCTURES) >= _STRUCTURES_KEPT:
        _STRUCTURES.clear()  # ever-new graphs: start over rather than grow
    found = _STRUCTURES[graph.hash] = _Structure(graph)
    return found


def _expected_node_references(
    graph: Graph, structure: _Structure, node_of_value: dict, dropped: Mapping[int, int]
) -> list[int]:
    """Per node of ``graph.reached``, the references the graph and the caller account
    for (besides the ``reached`` list and the offset): the structure's, one per distinct
    ``Value`` object of it (``node_of_value``: id of each distinct Value -> its node's
    position; which Value objects are distinct is not fixed by the shape), and what the
    caller drops."""
    expected = structure.node_base.copy()
    for position, count in Counter(node_of_value.values()).items():
        expected[position] += count
    positions = graph.positions
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


def _value_objects(edge_ids: list[int], distinct: dict, dropped: Mapping[int, int]):
    """The distinct Value objects and what accounts for each: its edges and roots
    occurrences, held once more each by ``graph.value_edges``, and what is dropped."""
    occurrences = Counter(edge_ids)
    keys = list(distinct)
    twice = map(add, map(occurrences.__getitem__, keys), map(occurrences.__getitem__, keys))
    return list(distinct.values()), list(map(add, twice, map(dropped.get, keys, repeat(0))))


def _reachable_from(live: list) -> set[int]:
    reachable: set[int] = set()
    while live:
        obj = live.pop()
        node = obj if type(obj) is Node else obj.node
        if id(node) not in reachable:
            reachable.add(id(node))
            live.extend(node.operands)
    return reachable


def _candidates(graph: Graph, structure: _Structure) -> bool:
    """Whether any device-data parameter is held by nothing but the graph's own edges
    and lists: a necessary condition, from counts alone, so that the common sync with
    nothing to donate stops here. (What the caller drops never holds a parameter: it
    drops pending values.)"""
    params = graph.parameters
    counts = map(sub, map(_getrefcount, params), repeat(_OFFSET))
    unheld = map(le, counts, structure.param_base)
    device_data = map(eq, map(_OP, params), repeat(DEVICE_DATA))
    return any(map(and_, unheld, device_data))


def private_parameters(graph: Graph, dropped: Mapping[int, int]) -> list[int]:
    if _OFFSET is None or not graph.parameters:
        return []
    structure = _structure(graph)
    if not _candidates(graph, structure):
        return []
    edge_ids = list(map(id, graph.value_edges))
    node_of_value = dict(zip(edge_ids, structure.edge_nodes))
    expected = _expected_node_references(graph, structure, node_of_value, dropped)
    live = _held_outside(graph.reached, expected)
    if live is None:
        return []  # the accounting does not hold here: donate nothing
    if edge_ids:
        values, expected = _value_objects(edge_ids, dict(zip(edge_ids, graph.value_edges)), dropped)
        live_values = _held_outside(values, expected)
        del values
        if live_values is None:
            return []
        live += live_values
    return _unreached_with_own_payload(graph.parameters, _reachable_from(live))


def _unreached_with_own_payload(params: list, reachable: set[int]) -> list[int]:
    """Indices of the device-data parameters not in ``reachable`` whose payload only
    they hold (not a second leaf, a cache, a user)."""
    alone = map(eq, map(sub, map(_getrefcount, map(_DATA, params)), repeat(_OFFSET)), repeat(1))
    device_data = map(eq, map(_OP, params), repeat(DEVICE_DATA))
    unreached = map(not_, map(reachable.__contains__, map(id, params)))
    keep = map(and_, map(and_, alone, device_data), unreached)
    return list(compress(range(len(params)), keep))
