"""Collectives between the devices inside manual sharding (``distributed.manual``).

Each takes a tensor that holds a value per device (``ValueError`` for one that holds one
value, or for axes the mesh does not have) and returns one, traced into the graph
(``ops.manual``; jax's collectives inside a ``shard_map``), with autograd. ``axes`` are
mesh axis names or indices, one or several (None: every axis); the devices that take
part together are those that differ only along ``axes`` (one *row* of the mesh), taken
in mesh order whatever order ``axes`` lists them in. A ``"mean"`` of integers raises
``RuntimeError``, as torch's ``mean`` does.

Contract:
- ``manual_all_reduce(t, axes=None, op="sum")``: each device gets the ``op``
  (``"sum"``, ``"mean"``, ``"max"``, ``"min"``) of its row's values (``psum`` and kin).
  A max or min shares the gradient among the devices that hold it, as ``torch.amax``
  does among ties.
- ``manual_all_gather(t, dim, axes=None)``: each device gets its row's values put
  together along ``dim`` (``all_gather(tiled=True)``); the gradient is the
  reduce-scatter of the gradient.
- ``manual_reduce_scatter(t, dim, axes=None, op="sum")``: the sum (or ``"mean"``) of
  the row's values, of which each device keeps its part along ``dim`` (which must
  divide by the row's size; ``psum_scatter``); the gradient is the all-gather of the
  gradient (divided by the row's size for a mean).
- ``manual_permute(t, axis, pairs)``: along one mesh ``axis``, each ``(source,
  destination)`` pair of positions sends the source's value to the destination; a
  device that receives none gets zeros (``ppermute``); each position is a source at
  most once and a destination at most once. ``manual_shift(t, axis, offset=1)`` sends
  each device's value ``offset`` positions along ``axis``, around the ring (a ring
  attention step). The gradient goes the other way.
"""

from __future__ import annotations

import math

import torch

from lazax import ir

from ..ops.manual import (
    MANUAL_ALL_GATHER,
    MANUAL_ALL_REDUCE,
    MANUAL_PERMUTE,
    MANUAL_REDUCE_SCATTER,
)
from ..state.layout import Layout
from ..state.values import ir_value
from ..tensor.lazy import LazyTensor, new_tensor
from .manual import manual_mesh
from .sharding import Mesh

__all__ = [
    "manual_all_gather",
    "manual_all_reduce",
    "manual_permute",
    "manual_reduce_scatter",
    "manual_shift",
]


def _per_device(t, what: str) -> Mesh:
    mesh = manual_mesh(t) if type(t) is LazyTensor else None
    if mesh is None:
        raise ValueError(
            f"{what}: the tensor holds one value, not one per device; call it between "
            f"enable_manual_sharding and disable_manual_sharding"
        )
    return mesh


def _axes(mesh: Mesh, axes, what: str) -> tuple:
    """``axes`` as names, in mesh order (the order a row's devices are taken in)."""
    names = tuple(mesh.jax_mesh.axis_names)
    if axes is None:
        return names
    given = (axes,) if isinstance(axes, (str, int)) else tuple(axes)
    n = len(names)
    out = tuple(names[a] if type(a) is int and -n <= a < n else a for a in given)
    if not out or any(a not in names for a in out) or len(set(out)) != len(out):
        raise ValueError(
            f"{what}: axes {axes} must name distinct axes of the mesh, whose axes are {names}"
        )
    return tuple(a for a in names if a in out)


def _row(mesh: Mesh, axes: tuple) -> int:
    """How many devices one row along ``axes`` holds."""
    return math.prod(mesh.size(a) for a in axes)


def _dim(t: torch.Tensor, dim: int, what: str) -> int:
    if not -t.dim() <= dim < t.dim():
        raise IndexError(
            f"{what}: Dimension out of range (expected to be in range of "
            f"[{-t.dim()}, {t.dim() - 1}], but got {dim})"
        )
    return dim % t.dim()


def _collective(t: LazyTensor, op: str, attrs: tuple, shape: tuple) -> LazyTensor:
    value = ir_value(t.contiguous())
    spec = ir.TensorSpec(shape, value.spec.dtype)
    node = ir.Node(op, (value,), ((("%", 0), *attrs), ()), (spec,))
    # A value per device: it stays pending, in eager mode too, until a disable.
    return new_tensor(node, Layout(shape, t.dtype), t._lz_storage.device_index)


def _grown(shape: tuple, dim: int, size: int) -> tuple:
    return tuple(n * size if d == dim else n for d, n in enumerate(shape))


def _shrunk(shape: tuple, dim: int, size: int) -> tuple:
    return tuple(n // size if d == dim else n for d, n in enumerate(shape))


def _mean_dtype(t: torch.Tensor, what: str) -> None:
    if not (t.dtype.is_floating_point or t.dtype.is_complex):
        name = str(t.dtype).replace("torch.", "").capitalize()
        raise RuntimeError(
            f"{what}: a mean could not infer its output dtype. Input dtype must be either a "
            f"floating point or complex dtype. Got: {name}"
        )


class _AllReduce(torch.autograd.Function):
    @staticmethod
    def forward(ctx, t, axes, op):
        out = _collective(t, MANUAL_ALL_REDUCE, (axes, op), tuple(t.shape))
        ctx.axes, ctx.op = axes, op
        if op in ("max", "min"):
            ctx.save_for_backward(t, out)
        return out

    @staticmethod
    def backward(ctx, grad):
        if ctx.op in ("sum", "mean"):  # every device's value reached every device's result
            shape = tuple(grad.shape)
            return _collective(grad, MANUAL_ALL_REDUCE, (ctx.axes, ctx.op), shape), None, None
        t, out = ctx.saved_tensors
        held = (t == out).to(grad.dtype)  # the devices whose value was the max (min)
        shape = tuple(t.shape)
        total = _collective(grad, MANUAL_ALL_REDUCE, (ctx.axes, "sum"), shape)
        holders = _collective(held, MANUAL_ALL_REDUCE, (ctx.axes, "sum"), shape)
        return total * held / holders, None, None


class _AllGather(torch.autograd.Function):
    @staticmethod
    def forward(ctx, t, axes, dim, size):
        ctx.axes, ctx.dim, ctx.size = axes, dim, size
        return _collective(t, MANUAL_ALL_GATHER, (axes, dim), _grown(t.shape, dim, size))

    @staticmethod
    def backward(ctx, grad):
        shape = _shrunk(grad.shape, ctx.dim, ctx.size)
        out = _collective(grad, MANUAL_REDUCE_SCATTER, (ctx.axes, ctx.dim, "sum"), shape)
        return out, None, None, None


class _ReduceScatter(torch.autograd.Function):
    @staticmethod
    def forward(ctx, t, axes, dim, size, op):
        ctx.axes, ctx.dim, ctx.size, ctx.op = axes, dim, size, op
        shape = _shrunk(t.shape, dim, size)
        return _collective(t, MANUAL_REDUCE_SCATTER, (axes, dim, op), shape)

    @staticmethod
    def backward(ctx, grad):
        out = _collective(
            grad, MANUAL_ALL_GATHER, (ctx.axes, ctx.dim), _grown(grad.shape, ctx.dim, ctx.size)
        )
        return (out / ctx.size if ctx.op == "mean" else out), None, None, None, None


class _Permute(torch.autograd.Function):
    @staticmethod
    def forward(ctx, t, axis, pairs):
        ctx.axis, ctx.pairs = axis, pairs
        return _collective(t, MANUAL_PERMUTE, (axis, pairs), tuple(t.shape))

    @staticmethod
    def backward(ctx, grad):
        back = tuple((d, s) for s, d in ctx.pairs)
        return _collective(grad, MANUAL_PERMUTE, (ctx.axis, back), tuple(grad.shape)), None, None


def manual_all_reduce(t: torch.Tensor, axes=None, op: str = "sum") -> torch.Tensor:
    """The ``op`` of the values of each device's row (see the module's contract)."""
    mesh = _per_device(t, "manual_all_reduce")
    if op not in ("sum", "mean", "max", "min"):
        raise ValueError(f"manual_all_reduce: op is 'sum', 'mean', 'max' or 'min', not {op!r}")
    if op == "mean":
        _mean_dtype(t, "manual_all_reduce")
    return _AllReduce.apply(t, _axes(mesh, axes, "manual_all_reduce"), op)


def manual_all_gather(t: torch.Tensor, dim: int, axes=None) -> torch.Tensor:
    """Each device's row's values put together along ``dim`` (module's contract)."""
    mesh = _per_device(t, "manual_all_gather")
    axes = _axes(mesh, axes, "manual_all_gather")
    return _AllGather.apply(t, axes, _dim(t, dim, "manual_all_gather"), _row(mesh, axes))


def manual_reduce_scatter(t: torch.Tensor, dim: int, axes=None, op: str = "sum") -> torch.Tensor:
    """Each device's part along ``dim`` of its row's sum (module's contract)."""
    mesh = _per_device(t, "manual_reduce_scatter")
    if op not in ("sum", "mean"):
        raise ValueError(f"manual_reduce_scatter: op is 'sum' or 'mean', not {op!r}")
    if op == "mean":
        _mean_dtype(t, "manual_reduce_scatter")
    axes = _axes(mesh, axes, "manual_reduce_scatter")
    dim = _dim(t, dim, "manual_reduce_scatter")
    size = _row(mesh, axes)
    if t.shape[dim] % size:
        raise ValueError(
            f"manual_reduce_scatter: dimension {dim} of size {t.shape[dim]} does not divide "
            f"over the {size} devices of mesh axes {axes}"
        )
    return _ReduceScatter.apply(t, axes, dim, size, op)


def manual_permute(t: torch.Tensor, axis, pairs) -> torch.Tensor:
    """Values sent along one mesh axis, source to destination (module's contract)."""
    mesh = _per_device(t, "manual_permute")
    (axis,) = _axes(mesh, (axis,), "manual_permute")
    size = mesh.size(axis)
    pairs = tuple((int(s), int(d)) for s, d in pairs)
    sources, destinations = [s for s, _ in pairs], [d for _, d in pairs]
    if (
        any(not 0 <= p < size for p in sources + destinations)
        or len(set(sources)) != len(sources)
        or len(set(destinations)) != len(destinations)
    ):
        raise ValueError(
            f"manual_permute: pairs {list(pairs)} must be (source, destination) positions in "
            f"[0, {size}) along mesh axis {axis!r}, each a source once and a destination once"
        )
    return _Permute.apply(t, axis, pairs)


def manual_shift(t: torch.Tensor, axis, offset: int = 1) -> torch.Tensor:
    """Each device's value sent ``offset`` positions along ``axis``, around the ring."""
    mesh = _per_device(t, "manual_shift")
    (name,) = _axes(mesh, (axis,), "manual_shift")
    size = mesh.size(name)
    return manual_permute(t, name, [(i, (i + offset) % size) for i in range(size)])
