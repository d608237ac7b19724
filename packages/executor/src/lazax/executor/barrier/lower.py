"""Lowering a graph: IR nodes -> one jax function, ready for ``runtime.compile``.

Contract: ``lower(graph, order=None)`` returns ``(fn, arg_specs)`` (its text, without
compiling: ``text.lowered_text``). ``fn(*args)`` takes the graph's
parameters as ``fn.packing`` (``arguments.Packing``) arranges them (device data one by
one, Python numbers packed in one array per dtype) and returns the roots' values, in
order, or in ``order`` (root indices; ``donation.output_order``), and then
``fn.positions[k]`` is where root ``k`` is among the outputs (None: in order);
``arg_specs`` are those arguments' ``(shape, dtype name)``. A root that holds a value
per device (manual sharding, ``ops.manual``) raises ``LoweringError``; with ``stacked``
(a program's text only) it is returned as the program carries it, ``(devices, *piece)``.
A root split unevenly over a mesh (a ``lazax::shard`` root, or a root given a sharding
in ``layouts``, root index -> jax sharding) is returned padded
(``lazax.pjrt.padded_shape``), constrained to that sharding: jax holds no uneven array,
and the storage keeps its split. The function keeps no reference to IR nodes (a cached
executable must not keep a graph alive): each node is turned into a small instruction
(rule, attributes, operand slots) first.

Node attributes are ``(args, kwargs)`` templates in aten order, with ``("%", k)``
standing for operand ``k``. Every output is cast to the dtype in the node's spec.
Random rules get ``ctx.key`` from the node's last operand (an int64 seed parameter).
``ctx.unread`` tells a multi-output rule which of its outputs nothing in this graph
reads (the graph's hash covers which outputs are read, so the program may differ).
``fn.per_process`` is True when a node's rule is a collective between the job's
processes (``Lowering.collective``): the program must be compiled as one every process
runs on its own values.

Device-side checks (``barrier.checks``): when ``CHECKS.enabled`` at the time jax traces ``fn``
(the compile), the ``ctx.check`` calls of checked rules add one last output, an int64
array ``(n, 2)`` of (any bad, first bad value) per check, and ``fn.checks`` lists, per
row, ``(position in graph.reached of the node, error name, message)``. Without checks
``fn.checks`` is empty and the outputs are the roots' alone.
"""

from __future__ import annotations

from typing import Any

import jax
import jax.numpy as jnp
from jax.lax import with_sharding_constraint

from lazax import ir
from lazax.pjrt import numpy_dtype, padded, padded_shape

from ..ops import LoweringContext, get_lowering
from ..ops.manual import MANUAL_ENTER, MANUAL_EXIT, distinct_meshes, enter, exit_, per_device
from ..ops.sharding import CONSTRAINTS, SHARD_OP
from .arguments import Packing
from .checks import CHECKS

__all__ = ["LoweringError", "lower"]


class LoweringError(RuntimeError):
    """No rule, or a rule that failed, for a node of the graph being compiled."""


def _fill(template: Any, operands: list) -> Any:
    if type(template) is tuple:
        if len(template) == 2 and template[0] == "%" and type(template[1]) is int:
            return operands[template[1]]
        return tuple(_fill(t, operands) for t in template)
    if type(template) is list:
        return [_fill(t, operands) for t in template]
    return template


def _decode(value: Any) -> Any:
    """Attribute encodings back to values a rule takes (a dtype becomes a numpy dtype,
    a complex scalar a Python complex)."""
    if type(value) is tuple:
        if len(value) == 2 and value[0] == "dtype":
            return jnp.dtype(value[1])
        if len(value) == 3 and value[0] == "complex":
            return complex(value[1], value[2])
    return value


def _instruction(node: ir.Node):
    rule = get_lowering(node.op)
    if rule is None:
        raise LoweringError(
            f"no lowering for {node.op} while compiling a graph; the tensor layer should "
            f"have sent it to the CPU fallback. Please report this."
        )
    args_t, kwargs_t = node.attrs
    out = tuple((s.shape, numpy_dtype(s.dtype)) for s in node.specs)
    return rule, args_t, kwargs_t, out, node.op


def _run(instr, operands: list, checks: list | None = None, unread: frozenset = frozenset()):
    rule, args_t, kwargs_t, out, name = instr
    ctx = LoweringContext(out, checks=checks, unread=unread)
    if rule.random:
        seed = operands.pop()
        ctx.key = jax.random.key(seed)
    args = [_decode(a) for a in _fill(args_t, operands)]
    kwargs = {k: _decode(v) for k, v in _fill(kwargs_t, operands)}
    try:
        result = rule.fn(ctx, *args, **kwargs)
    except Exception as err:
        raise LoweringError(f"lowering of {name} failed: {type(err).__name__}: {err}") from err
    results = result if isinstance(result, (tuple, list)) else (result,)
    if len(results) != len(out):
        raise LoweringError(
            f"lowering of {name} returned {len(results)} outputs, but torch gives {len(out)}"
        )
    fixed = []
    for r, (shape, dtype) in zip(results, out):
        r = jnp.asarray(r)
        if r.dtype != dtype:
            r = r.astype(dtype)
        if r.shape != shape:
            raise LoweringError(
                f"lowering of {name} produced shape {r.shape}, but torch gives {shape}"
            )
        fixed.append(r)
    return fixed


_MANUAL_OPS = frozenset((MANUAL_ENTER, MANUAL_EXIT))


def _run_manual(manual: tuple, instr, operands: list, unread: frozenset) -> list:
    """One node that manual sharding touches (``_manual_step``), as ``jax.shard_map``
    calls (``ops.manual``). Device-side checks are not made inside: a check's flag
    would itself differ per device."""
    kind = manual[0]
    if kind == "enter":
        return [enter(operands[0], manual[1])]
    if kind == "exit":
        return [exit_(operands[0], manual[1], manual[2], manual[3])]
    _, mesh, flags = manual
    return per_device(
        lambda own: _run(instr, own, None, unread), mesh, operands, flags, len(instr[3])
    )


def _read_outputs(graph: ir.Graph) -> dict[int, set[int]]:
    """Per multi-output node (by id), the indices of its outputs something reads."""
    read: dict[int, set[int]] = {}
    for node in graph.nodes:
        for v in node.operands:
            if len(v.node.specs) > 1:
                read.setdefault(id(v.node), set()).add(v.index)
    for r in graph.roots:
        if len(r.node.specs) > 1:
            read.setdefault(id(r.node), set()).add(r.index)
    return read


def _padded_roots(graph: ir.Graph, layouts) -> dict[int, object]:
    """Root index -> the sharding it is returned padded for (see the contract)."""
    out = {}
    for k, r in enumerate(graph.roots):
        sharding = layouts.get(k) if layouts else None
        if sharding is None and r.node.op == SHARD_OP:
            sharding = CONSTRAINTS[r.node.attrs[0][1]]
        if sharding is not None and padded_shape(r.spec.shape, sharding) != r.spec.shape:
            out[k] = sharding
    return out


def _manual_step(node: ir.Node, operand_slots: list, mesh_of: dict):
    """How ``node`` runs if manual sharding touches it (``ops.manual``): ``("enter",
    sharding)``, ``("exit", sharding, per-device operand, summed)`` or ``("per_device",
    mesh, per-device flag per operand)``; None for an op on single values. Records the
    mesh of its per-device output in ``mesh_of`` (slot -> jax mesh)."""
    if node.op == MANUAL_ENTER:
        sharding = CONSTRAINTS[node.attrs[0][1]]
        return ("enter", sharding), sharding.mesh
    meshes = [mesh_of.get(s) for s, _ in operand_slots]
    if node.op == MANUAL_EXIT:
        _, key, summed = node.attrs[0]
        return ("exit", CONSTRAINTS[key], meshes[0] is not None, summed), None
    distinct = distinct_meshes(meshes)
    if not distinct:
        return None, None
    if len(distinct) > 1:
        raise LoweringError(
            f"{node.op} takes per-device values of two meshes (enable_manual_sharding "
            f"over different meshes); disable_manual_sharding one of them first"
        )
    (mesh,) = distinct
    return ("per_device", mesh, [m is not None for m in meshes]), mesh


def lower(graph: ir.Graph, order: list[int] | None = None, layouts=None, stacked=False):
    slot_of: dict[int, int] = {}
    for i, p in enumerate(graph.parameters):
        slot_of[id(p)] = i
    program = []
    next_slot = len(graph.parameters)
    positions = graph.positions
    read = _read_outputs(graph)
    mesh_of: dict[int, object] = {}  # slot -> the mesh of its per-device value
    for node in graph.nodes:
        if id(node) in slot_of:
            continue
        operand_slots = []
        for v in node.operands:
            operand_slots.append((slot_of[id(v.node)], v.index))
        manual = None
        if node.op in _MANUAL_OPS or mesh_of:
            manual, mesh = _manual_step(node, operand_slots, mesh_of)
            if mesh is not None:
                mesh_of[next_slot] = mesh
        instr = _instruction(node) if node.op not in _MANUAL_OPS else None
        checked = positions[id(node)] if instr and instr[0].checked and not manual else None
        n_out = len(node.specs)
        unread = frozenset(range(n_out)) - read.get(id(node), set()) if n_out > 1 else frozenset()
        program.append((instr, operand_slots, next_slot, checked, unread, manual))
        slot_of[id(node)] = next_slot
        next_slot += 1
    roots = [(slot_of[id(r.node)], r.index) for r in graph.roots]
    if not stacked and any(s in mesh_of for s, _ in roots):
        raise LoweringError(
            "a value that differs per device (computed from enable_manual_sharding's "
            "result) cannot leave the program; disable_manual_sharding it first"
        )
    pads = _padded_roots(graph, layouts)
    # Per output, the sharding it is padded for (None: returned as computed).
    out_pads = [pads.get(k) for k in range(len(roots))]
    positions = None
    if order is not None:
        roots = [roots[k] for k in order]
        out_pads = [out_pads[k] for k in order]
        positions = [0] * len(order)
        for position, k in enumerate(order):
            positions[k] = position
    packing = Packing(graph.parameters)
    per_process = any(instr is not None and instr[0].collective for instr, *_ in program)

    def fn(*args):
        env: list = [(p,) for p in packing.unpack(args)] + [None] * len(program)
        enabled = CHECKS.enabled
        rows: list = []
        fn.checks = []  # filled anew by each trace
        for instr, operand_slots, slot, position, unread, manual in program:
            operands = [env[s][i] for s, i in operand_slots]
            if manual is not None:
                env[slot] = _run_manual(manual, instr, operands, unread)
                continue
            checks = [] if enabled and position is not None else None
            env[slot] = _run(instr, operands, checks, unread)
            for bad, value, error, message in checks or ():
                rows.append(jnp.stack([bad.astype(jnp.int64), value]))
                fn.checks.append((position, error, message))
        outputs = tuple(env[s][i] for s, i in roots)
        if pads:
            outputs = tuple(
                x if p is None else with_sharding_constraint(padded(x, p), p)
                for x, p in zip(outputs, out_pads)
            )
        return (*outputs, jnp.stack(rows)) if rows else outputs

    fn.checks = []
    fn.packing = packing
    fn.positions = positions
    fn.per_process = per_process
    return fn, packing.arg_specs
