"""A torch function of tensors as a JAX function: traced once on stand-ins.

Contract of ``trace(fn, tensors, what)``:
- Runs ``fn(*stand_ins)`` in lazy mode with autograd off, where the stand-ins are
  lazax tensors of ``tensors``' specs over leaves without data; nothing may run or read
  the host (``ValueError`` naming ``what``). ``fn`` returns a tensor or a (nested)
  tuple or list of tensors.
- Returns a ``Traced``: ``body``, a JAX function ``body({"inputs": [...], "consts":
  [...]}) -> list`` of the flattened outputs (one object per traced computation:
  ``body_of``), ``consts``, the tensors the trace made besides its inputs (random ops'
  seeds, Python numbers, tensors ``fn`` created), to be passed as ``"consts"``,
  ``outputs`` (their shapes and dtypes) and ``rebuild(outputs)``, the outputs in
  ``fn``'s structure.
- The body is lazax's own lowering of the traced graph, so it computes what the same
  ops compute outside; device-side checks inside it are not made.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import jax.numpy as jnp
import torch

from lazax import ir

from ..barrier.executor import EXECUTOR
from ..barrier.lower import lower
from ..config import DEVICE_NAME
from ..state.dtypes import dtype_name, torch_dtype
from ..state.layout import Layout
from ..state.values import ir_value
from ..tensor.lazy import LazyTensor, new_tensor

__all__ = ["Traced", "as_tensor", "body_of", "refusing", "stand_in", "trace"]


def stand_in(t: torch.Tensor, device: int) -> LazyTensor:
    """A lazax tensor of ``t``'s spec over a leaf without data (nothing may run it)."""
    spec = ir.TensorSpec(tuple(t.shape), dtype_name(t.dtype))
    return new_tensor(ir.device_data(spec, None), Layout(spec.shape, t.dtype), device)


def as_tensor(leaf: ir.Node, device: int) -> torch.Tensor:
    """A graph's parameter leaf (device data, or a Python number) as a lazax tensor."""
    spec = leaf.specs[0]
    if leaf.op == ir.SCALAR:
        return torch.tensor(leaf.data, dtype=torch_dtype(spec.dtype)).to(
            torch.device(DEVICE_NAME, device)
        )
    return new_tensor(leaf, Layout(spec.shape, torch_dtype(spec.dtype)), device)


# (graph hash, roles) -> a JAX function of the graph's parameters arranged by role.
_BODIES: dict[tuple, Callable] = {}


def body_of(graph: ir.Graph, roles: tuple) -> Callable:
    """``body(by_role) -> outputs``: the graph lowered once, its parameters taken from
    ``by_role[kind][k]`` for each ``(kind, k)`` in ``roles`` (one per parameter)."""
    key = (graph.hash, roles)
    found = _BODIES.get(key)
    if found is not None:
        return found
    lowered, _ = lower(graph)
    packing = lowered.packing
    count = len(graph.roots)

    def body(by_role: dict) -> list:
        values = [by_role[kind][k] for kind, k in roles]
        args = [values[i] for i in packing.singles]
        for dtype, slots in packing.packs:
            args.append(jnp.stack([jnp.asarray(values[i], dtype) for i in slots]))
        return list(lowered(*args)[:count])  # device-side check rows, if any, dropped

    _BODIES[key] = body
    return body


def refusing(what: str):
    """A capture guard: raises ``ValueError`` naming ``what`` on any run or host read."""

    def refuse(doing: str) -> None:
        raise ValueError(
            f"lazax: {what} made {doing} while it was traced; a function run inside an "
            f"XLA loop or branch cannot read values on the host (.item(), print, a "
            f"Python if on a tensor)"
        )

    return refuse


def _flatten(out, leaves: list):
    if isinstance(out, torch.Tensor):
        leaves.append(out)
        return None
    if isinstance(out, (tuple, list)):
        return (type(out), [_flatten(o, leaves) for o in out])
    raise TypeError(f"expected tensors, or tuples and lists of them, but got {type(out)}")


def _unflatten(tree, leaves):
    if tree is None:
        return next(leaves)
    kind, items = tree
    return kind(_unflatten(t, leaves) for t in items)


@dataclass
class Traced:
    body: Callable  # body({"inputs": [...], "consts": [...]}) -> list of outputs
    consts: list
    outputs: list  # the stand-in outputs' (shape, dtype)
    tree: Any

    def rebuild(self, outputs):
        return _unflatten(self.tree, iter(outputs))


def trace(fn: Callable, tensors: list, what: str) -> Traced:
    device = next((t._lz_storage.device_index for t in tensors if type(t) is LazyTensor), 0)
    stand_ins = [stand_in(t, device) for t in tensors]
    with torch.no_grad(), EXECUTOR.mode(eager=False, capture_guard=refusing(what)):
        out = fn(*stand_ins)
    leaves: list = []
    tree = _flatten(out, leaves)
    graph = ir.collect([ir_value(t) for t in leaves])
    by_leaf = {id(ir_value(t)): k for k, t in enumerate(stand_ins)}
    roles, consts = [], []
    for leaf in graph.parameters:
        k = by_leaf.get(id(leaf))
        if k is None:
            roles.append(("consts", len(consts)))
            consts.append(as_tensor(leaf, device))
        else:
            roles.append(("inputs", k))
    outputs = [(tuple(t.shape), t.dtype) for t in leaves]
    return Traced(body_of(graph, tuple(roles)), consts, outputs, tree)
