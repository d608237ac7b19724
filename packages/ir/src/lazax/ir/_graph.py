"""Graphs: the nodes reachable from some output values, in post-order.

Contract: ``collect(roots)`` walks once and returns a ``Graph`` holding
- ``nodes``: every reachable node, operands before users (post-order), each once;
- ``parameters``: the parameter leaves in first-visit order (the program's inputs);
- ``hash``: a key that is equal for two collections exactly when they compute the same
  function of their parameters: it covers the roots' Merkle hashes, which outputs are
  taken, and how edges share nodes (so ``a + a`` and ``a + b`` differ even when ``a``
  and ``b`` have the same spec), plus whatever ``salt`` the caller adds (the device).
The walk is iterative (deep graphs do not hit Python's recursion limit) and costs
O(nodes + edges); it is on the cached-sync hot path.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from ._node import Node, Value
from ._stable import stable_hash

__all__ = ["Graph", "collect", "dump", "post_order"]


@dataclass(frozen=True, slots=True)
class Graph:
    roots: tuple[Value, ...]
    nodes: list[Node]
    parameters: list[Node]
    hash: int


def collect(roots: Sequence[Value], salt: object = None) -> Graph:
    """Walk the graph under ``roots`` (see the module docstring)."""
    position: dict[int, int] = {}
    nodes: list[Node] = []
    parameters: list[Node] = []
    # Edge signature: for each edge to an already-placed node, that node's position;
    # for each first visit of a parameter, its parameter index (negative).
    shape_sig: list[int] = []
    for root in roots:
        top = root.node
        if id(top) in position:
            shape_sig.append(position[id(top)])
            continue
        stack: list[tuple[Node, int]] = [(top, 0)]
        while stack:
            node, next_operand = stack[-1]
            operands = node.operands
            if next_operand < len(operands):
                stack[-1] = (node, next_operand + 1)
                child = operands[next_operand].node
                placed = position.get(id(child))
                if placed is not None:
                    shape_sig.append(placed)
                elif child.operands:
                    stack.append((child, 0))
                else:
                    position[id(child)] = len(nodes)
                    nodes.append(child)
                    if child.is_parameter:
                        shape_sig.append(-1 - len(parameters))
                        parameters.append(child)
                continue
            stack.pop()
            position[id(node)] = len(nodes)
            nodes.append(node)
            if not operands and node.is_parameter:
                shape_sig.append(-1 - len(parameters))
                parameters.append(node)
    key = hash(
        (
            tuple([(r.hash, r.index) for r in roots]),
            tuple(shape_sig),
            stable_hash(salt) if salt is not None else 0,
        )
    )
    return Graph(tuple(roots), nodes, parameters, key)


def post_order(roots: Sequence[Value]) -> list[Node]:
    """Every node reachable from ``roots``, operands first, each once."""
    return collect(roots).nodes


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
