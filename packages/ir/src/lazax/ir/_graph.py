"""Graphs: the nodes reachable from some output values, in post-order.

Contract: ``collect(roots)`` walks once and returns a ``Graph`` holding
- ``nodes``: every reachable node, operands before users (post-order), each once;
- ``parameters``: the parameter leaves in first-visit order (the program's inputs);
- ``reached``: every reachable node once, in the walk's (breadth-first) order, roots
  first; ``parameter_positions``: each parameter's index in ``reached``;
  ``edge_signature``: per edge, the ``reached`` index of a node seen before (a
  negative number for a first visit): with it, how many edges reach a node is counted
  without walking the graph again; ``positions``: ``id(node)`` -> index in ``reached``;
  ``value_edges``: the ``Value`` objects (outputs >= 1) on edges and among the roots,
  once per occurrence;
- ``hash``: a key that is equal for two collections exactly when they compute the same
  function of their parameters: it covers the roots' Merkle hashes, which outputs are
  taken, and how edges share nodes (so ``a + a`` and ``a + b`` differ even when ``a``
  and ``b`` have the same spec), plus whatever ``salt`` the caller adds (the device).
The walk is iterative (deep graphs do not hit Python's recursion limit) and costs
O(nodes + edges); it is on the cached-sync hot path.
"""

from __future__ import annotations

from collections.abc import Sequence

from ._node import DEVICE_DATA, SCALAR, Node, Value
from ._stable import stable_hash

__all__ = ["Graph", "collect", "dump", "post_order"]

_PARAMETER_OPS = frozenset((DEVICE_DATA, SCALAR))


class Graph:
    """The result of ``collect``: roots, parameters, hash, and (on demand) post-order."""

    __slots__ = (
        "roots",
        "parameters",
        "hash",
        "reached",
        "parameter_positions",
        "edge_signature",
        "positions",
        "value_edges",
        "_nodes",
    )

    def __init__(
        self,
        roots: tuple,
        parameters: list[Node],
        key: int,
        reached: list[Node],
        parameter_positions: list[int],
        edge_signature: list[int],
        positions: dict[int, int],
        value_edges: list[Value],
    ) -> None:
        self.roots = roots
        self.parameters = parameters
        self.hash = key
        self.reached = reached
        self.parameter_positions = parameter_positions
        self.edge_signature = edge_signature
        self.positions = positions
        self.value_edges = value_edges
        self._nodes: list[Node] | None = None

    @property
    def nodes(self) -> list[Node]:
        """Every reachable node, operands first, each once (computed on first use: a
        cache hit never needs it)."""
        if self._nodes is None:
            self._nodes = post_order(self.roots)
        return self._nodes


_NEW_NODE = -(1 << 40)  # edge signature entry: the edge reaches a node seen first here


def collect(roots: Sequence[Value], salt: object = None) -> Graph:
    """Walk the graph under ``roots`` once (see the module docstring).

    The walk is breadth-first over a list that grows as it is read: one dict lookup per
    edge and nothing else allocated, since this loop is most of a cached sync's cost.
    Its edge signature records, per edge, whether the target is new (and if it is a
    parameter, which one) or which earlier node it is; with the roots' Merkle hashes
    that fixes the graph, sharing included.
    """
    position: dict[int, int] = {}
    order: list[Node] = []
    parameters: list[Node] = []
    param_positions: list[int] = []
    sig: list[int] = []
    value_edges: list[Value] = []
    add_sig = sig.append
    get_position = position.get
    for root in roots:
        if type(root) is Node:
            top = root
        else:
            top = root.node
            value_edges.append(root)
        placed = get_position(id(top))
        if placed is not None:
            add_sig(placed)
            continue
        position[id(top)] = len(order)
        order.append(top)
        if not top.operands and top.op in _PARAMETER_OPS:
            param_positions.append(len(order) - 1)
            parameters.append(top)
    for node in order:  # grows while it is read
        for value in node.operands:
            if type(value) is Node:
                child = value
            else:
                child = value.node
                value_edges.append(value)
            placed = get_position(id(child))
            if placed is not None:
                add_sig(placed)
                continue
            position[id(child)] = len(order)
            order.append(child)
            if not child.operands and child.op in _PARAMETER_OPS:
                add_sig(-1 - len(parameters))
                param_positions.append(len(order) - 1)
                parameters.append(child)
            else:
                add_sig(_NEW_NODE)
    key = hash(
        (
            tuple([(r.hash, r.index) for r in roots]),
            tuple(sig),
            # An int salt is taken as already hashed (callers that sync often pass one).
            salt if type(salt) is int else (stable_hash(salt) if salt is not None else 0),
        )
    )
    return Graph(tuple(roots), parameters, key, order, param_positions, sig, position, value_edges)


def post_order(roots: Sequence[Value]) -> list[Node]:
    """Every node reachable from ``roots``, operands first, each once (iterative DFS:
    deep graphs do not hit the recursion limit)."""
    placed: set[int] = set()
    nodes: list[Node] = []
    for root in roots:
        top = root if type(root) is Node else root.node
        if id(top) in placed:
            continue
        stack = [top]
        iters = [iter(top.operands)]
        while iters:
            for value in iters[-1]:
                child = value if type(value) is Node else value.node
                if id(child) in placed:
                    continue
                if child.operands:
                    stack.append(child)
                    iters.append(iter(child.operands))
                    break
                placed.add(id(child))
                nodes.append(child)
            else:
                iters.pop()
                node = stack.pop()
                if id(node) not in placed:
                    placed.add(id(node))
                    nodes.append(node)
    return nodes


def _fmt_value(value: object, operands: list[str]) -> str:
    if type(value) is tuple:
        if len(value) == 2 and value[0] == "%" and type(value[1]) is int:
            return operands[value[1]]
        inner = ", ".join(_fmt_value(v, operands) for v in value)
        return f"({inner},)" if len(value) == 1 else f"({inner})"
    return repr(value)


def _fmt_call(node: Node, operands: list[str]) -> str:
    """Arguments as a call. Attributes shaped ``(args, ((name, value), ...))`` with
    ``("%", k)`` standing for operand ``k`` (the tensor layer's convention) print as
    ``op(args..., name=value)``; anything else prints operands, then attributes."""
    attrs = node.attrs
    if (
        len(attrs) == 2
        and type(attrs[0]) is tuple
        and type(attrs[1]) is tuple
        and all(type(kv) is tuple and len(kv) == 2 and type(kv[0]) is str for kv in attrs[1])
    ):
        parts = [_fmt_value(a, operands) for a in attrs[0]]
        parts += [f"{k}={_fmt_value(v, operands)}" for k, v in attrs[1]]
        return ", ".join(parts)
    return ", ".join(operands + [repr(a) for a in attrs])


def dump(graph: Graph) -> str:
    """A readable, Python-like listing of ``graph``: one line per node."""
    names: dict[int, str] = {}
    lines = [
        f"# graph {graph.hash & 0xFFFFFFFFFFFFFFFF:016x}: {len(graph.parameters)} parameters, "
        f"{len(graph.nodes)} nodes, {len(graph.roots)} outputs"
    ]
    param_index = {id(p): i for i, p in enumerate(graph.parameters)}

    def ref(v: Value) -> str:
        base = names[id(v.node)]
        return base if len(v.node.specs) == 1 else f"{base}[{v.index}]"

    for i, node in enumerate(graph.nodes):
        specs = ", ".join(map(str, node.specs))
        if id(node) in param_index:
            name = f"p{param_index[id(node)]}"
            names[id(node)] = name
            lines.append(f"{name} = {node.op}()  # {specs}")
            continue
        name = f"v{i}"
        names[id(node)] = name
        call = _fmt_call(node, [ref(v) for v in node.operands])
        lines.append(f"{name} = {node.op}({call})  # {specs}")
    lines.append(f"return ({', '.join(ref(r) for r in graph.roots)},)")
    return "\n".join(lines)
