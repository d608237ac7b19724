"""``scan_layers``: a stack of identical layers as one XLA loop.

Contract of ``scan_layers(layers, x, *args, checkpoint=False, **kwargs)``:
- Computes ``for layer in layers: x = layer(x, *args, **kwargs)`` and returns the last
  ``x``. ``args``/``kwargs`` (tensors, nested in tuples, lists and dicts, and other
  values) are the same for every layer. A
  layer may return a tuple or list: its first element is the next ``x`` (the rest is
  dropped, as a decoder's attention weights are).
- On lazax tensors it is one ``call_jax`` node whose function is ``lax.scan`` over the
  layers' stacked parameters and buffers: the program holds one layer's code whatever
  the depth, and its backward (``jax.vjp`` of the scan) is a loop too. Gradients reach
  every layer's own ``Parameter`` through the stacking; nothing is renamed, so the
  optimizer, ``state_dict`` and checkpoints see the usual parameters. The layers'
  parameters and buffers become the rows of one stacked tensor per name, made on the
  device at the first call (``stacking``): the loop reads that tensor, each layer's
  gradient is a row of the stacked gradient, an optimizer's state made during its
  step is rows too, and its foreach ops run once per stacked tensor, so a training
  step's program does not grow with depth. Tensors that cannot move (pending or sharded
  ones) are stacked by an op of the program instead. On CPU tensors it is the plain
  loop.
- ``checkpoint=True`` wraps each step in ``jax.checkpoint``: the backward recomputes
  each layer's forward from its input instead of keeping its activations.
- The layers must be structurally identical: the same module type, parameter and buffer
  names, shapes and dtypes (else ``ValueError`` naming the first layer that differs and
  how), and the same computation: each layer is traced (not run) on stand-ins, and a
  layer whose graph differs from the first's (a Python ``if`` on the layer's index, a
  different config) raises ``ValueError`` naming the first op that differs. What a
  layer's trace makes besides its inputs (random ops' seeds, Python numbers, tensors it
  creates) is fed to the loop per layer, so dropout draws what the unrolled loop draws.
- Refused (``ValueError``): a layer that writes a parameter or buffer in place
  (batch norm's running statistics in training), or reads a value on the host while it
  is traced (``.item()``, ``print``). Device-side checks of ops inside the loop
  (an index out of range) are not made.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import jax
import numpy as np
import torch

from lazax import ir

from ..barrier.executor import EXECUTOR
from ..interop.calls import call_jax
from ..state.values import ir_value
from ..tensor.lazy import LazyTensor
from .functions import as_tensor, body_of, refusing
from .stacking import stack_layers
from .structure import first_difference, placeholders

__all__ = ["Loop", "prepare_loop", "scan_layers"]


def _first(out):
    return out[0] if isinstance(out, (tuple, list)) else out


def _trace(layer, index: int, stand_ins: dict, x_in, args_in, kwargs_in):
    """One layer's traced output graph on the stand-ins, and its output's other
    elements (a tuple's after the first)."""
    guard = refusing(f"scan_layers' layer {index}")
    with torch.no_grad(), EXECUTOR.mode(eager=False, capture_guard=guard):
        out = torch.func.functional_call(layer, stand_ins, (x_in, *args_in), kwargs_in)
    y = _first(out)
    if type(y) is not LazyTensor or y.shape != x_in.shape or y.dtype != x_in.dtype:
        got = f"{y.dtype}{list(y.shape)}" if isinstance(y, torch.Tensor) else type(y).__name__
        raise ValueError(
            f"lazax.scan_layers: layer {index} returned {got} for an input "
            f"{x_in.dtype}{list(x_in.shape)}; a loop needs each layer to return the "
            f"next input (or a tuple whose first element is it)"
        )
    rest = tuple(out[1:]) if isinstance(out, (tuple, list)) else None
    return ir.collect([ir_value(y)]), (type(out), rest) if rest is not None else None


def _written(stand_ins: dict, leaves: dict) -> list[str]:
    return [
        name
        for name, t in stand_ins.items()
        if t._lz_storage.value is not leaves[name] or t._lz_view is not None
    ]


# (graph hash, roles, checkpoint, carries) -> the scan function: one object per loop,
# so call_jax finds its node again (it caches by function).
_SCANS: dict[tuple, object] = {}


def _scan_function(graph: ir.Graph, roles: tuple, checkpoint: bool, carries: bool):
    key = (graph.hash, roles, checkpoint, carries)
    found = _SCANS.get(key)
    if found is not None:
        return found
    body = body_of(graph, roles)

    def scan(x, params, extras, per_layer, shared):
        def step(carry, sliced):
            layer_params, layer_consts = sliced
            by_role = {
                "x": [carry],
                "param": layer_params,
                "extra": extras,
                "layer": layer_consts,
                "shared": shared,
            }
            y = body(by_role)[0].astype(carry.dtype)
            return y, (y if carries else None)

        if checkpoint:
            step = jax.checkpoint(step)
        y, ys = jax.lax.scan(step, x, (list(params), list(per_layer)))
        return ys if carries else y

    scan.__qualname__ = f"scan_layers[{graph.hash & 0xFFFF:04x}]"
    _SCANS[key] = scan
    return scan


def _same(values: list) -> bool:
    first = values[0]
    if isinstance(first, np.generic):
        return all(v == first for v in values[1:])
    return all(v is first for v in values[1:])


@dataclass
class Loop:
    """A prepared loop: its scan function and the tensors it takes besides ``x``."""

    scan: Any
    params: list  # one stacked tensor per parameter or buffer name
    extras: list  # the tensors every layer takes
    per_layer: list  # stacked: what each layer's trace made (seeds, numbers, tensors)
    shared: list  # what every layer's trace made alike
    output: Any  # None: layers return a tensor; else (tuple or list, the other elements)

    def run(self, x: torch.Tensor) -> torch.Tensor:
        """The loop's output (every layer's, stacked, if it was prepared so)."""
        return call_jax(self.scan, x, self.params, self.extras, self.per_layer, self.shared)


def prepare_loop(layers: list, x, args: tuple, kwargs: dict, checkpoint: bool, carries: bool):
    """The loop over ``layers`` called as ``layer(x, *args, **kwargs)`` (``ValueError``
    when they cannot run as one; see the module docstring). ``carries``: the loop
    returns every layer's output, stacked, instead of the last."""
    first_difference(layers)  # raises on a structural difference
    device = x._lz_storage.device_index
    leaves, tree = torch.utils._pytree.tree_flatten((args, kwargs))
    stand_ins, x_in, leaves_in = placeholders(layers[0], x, leaves, device)
    args_in, kwargs_in = torch.utils._pytree.tree_unflatten(leaves_in, tree)
    values = {name: t._lz_storage.value for name, t in stand_ins.items()}
    graphs, output = [], None
    for i, layer in enumerate(layers):
        graph, output = _trace(layer, i, stand_ins, x_in, args_in, kwargs_in)
        written = _written(stand_ins, values)
        if written:
            raise ValueError(
                f"lazax.scan_layers: layer {i} writes {written} in place (batch norm's "
                f"running statistics in training do); a loop over layers cannot carry "
                f"such writes: run these layers unrolled, or in eval mode"
            )
        if graphs and graph.hash != graphs[0].hash:
            raise ValueError(
                f"lazax.scan_layers: layer {i} does not compute what layer 0 does "
                f"({_op_difference(graphs[0], graph)}); only identical layers run as a "
                f"loop"
            )
        graphs.append(graph)
    by_leaf = {id(leaf): ("param", k) for k, leaf in enumerate(values.values())}
    by_leaf[id(ir_value(x_in))] = ("x", 0)
    tensors_in = [t for t in leaves_in if isinstance(t, LazyTensor)]
    for k, t in enumerate(tensors_in):
        by_leaf[id(ir_value(t))] = ("extra", k)
    roles, per_layer, shared = [], [], []
    for position, leaf in enumerate(graphs[0].parameters):
        role = by_leaf.get(id(leaf))
        if role is None:
            column = [g.parameters[position] for g in graphs]
            if _same([c.data for c in column]):
                role = ("shared", len(shared))
                shared.append(as_tensor(leaf, device))
            else:
                role = ("layer", len(per_layer))
                per_layer.append(torch.stack([as_tensor(c, device) for c in column]))
        roles.append(role)
    scan = _scan_function(graphs[0], tuple(roles), checkpoint, carries)
    names = list(stand_ins)
    del graphs, stand_ins, x_in, leaves_in, args_in, kwargs_in, values, by_leaf, tensors_in
    states = [dict(layer.named_parameters()) | dict(layer.named_buffers()) for layer in layers]
    params = [stack_layers([state[name] for state in states]) for name in names]
    extras = [t for t in leaves if isinstance(t, torch.Tensor)]
    return Loop(scan, params, extras, per_layer, shared, output)


def scan_layers(layers, x: torch.Tensor, *args, checkpoint: bool = False, **kwargs):
    """Run ``x`` through ``layers`` as one loop (see the module docstring)."""
    layers = list(layers)
    if not layers:
        raise ValueError("lazax.scan_layers: no layers to run")
    if type(x) is not LazyTensor:
        for layer in layers:
            x = _first(layer(x, *args, **kwargs))
        return x
    return prepare_loop(layers, x, args, kwargs, checkpoint, carries=False).run(x)


def _op_difference(a: ir.Graph, b: ir.Graph) -> str:
    ops_a = [f"{n.op} -> {', '.join(map(str, n.specs))}" for n in a.nodes]
    ops_b = [f"{n.op} -> {', '.join(map(str, n.specs))}" for n in b.nodes]
    for k, (p, q) in enumerate(zip(ops_a, ops_b)):
        if p != q:
            return f"op {k} is {q}, where layer 0 has {p}"
    return f"it has {len(ops_b)} ops, layer 0 has {len(ops_a)}"
