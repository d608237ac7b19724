"""Manual sharding in the IR: values that differ per device, inside a lazy graph.

Contract:
- ``MANUAL_ENTER`` (``lazax::manual_enter``): one operand, a value of the full shape;
  attributes ``((("%", 0), key), ())`` with ``key`` a ``CONSTRAINTS`` key (a mesh and a
  partition spec). Its output is the piece of the value each device of the mesh holds
  (the local shape): a *per-device* value, one on each device. Every value computed
  from a per-device value is per-device too.
- ``MANUAL_EXIT`` (``lazax::manual_exit``): one operand, a per-device value (or a value
  that is one value everywhere, which every device then holds); attributes
  ``((("%", 0), key, summed), ())``. Its output is the full value whose pieces the
  devices hold, laid out as ``key`` says; with ``summed``, the devices that hold the same
  piece (the mesh axes the spec does not split) add theirs (the gradient of an enter),
  else their values are taken to agree and any one is kept.
- ``MANUAL_ALL_REDUCE`` (``lazax::manual_all_reduce``): one operand, a per-device value;
  attributes ``((("%", 0), axes, op), ())``: every device gets the ``op`` (``"sum"``,
  ``"mean"``, ``"max"``, ``"min"``) of the values of the devices that differ from it only
  along the mesh ``axes`` (jax's ``psum`` and kin). ``MANUAL_ALL_GATHER`` (attributes
  ``axes, dim``): those devices' values put together along ``dim``, in mesh order;
  ``MANUAL_REDUCE_SCATTER`` (``axes, dim, op``: ``"sum"`` or ``"mean"``): their sum,
  of which each device keeps its part along ``dim``; ``MANUAL_PERMUTE`` (``axis,
  pairs``): each ``(source, destination)`` pair of positions along ``axis`` sends the
  source's value to the destination, and a device that receives none gets zeros
  (jax's ``all_gather(tiled=True)``, ``psum_scatter``, ``ppermute``). All of them are
  lowered inside ``per_device`` only.
- ``MANUAL.of(node)``: the jax mesh of the per-device value that ``node`` computes, or
  None (one value). Known per node once asked (weakly: it dies with the node);
  ``MANUAL.active`` turns true at the first enter, and until then nothing asks.
- Lowering (``barrier.lower``): a per-device value of local shape ``s`` is carried as a
  global array of shape ``(devices, *s)``, its first dimension split over every mesh
  axis, so each device holds its own value as a ``(1, *s)`` piece. ``enter``, ``exit``
  and ``per_device`` are the ``jax.shard_map`` calls that convert to and from that form
  and run an op on it (jax lowers each as a manual computation; XLA inlines them). A
  random op draws the same numbers on every device (one key, as torch's DDP ranks
  seeded alike draw the same): the devices that hold copies of one piece must agree,
  or a disable would keep one copy while the gradient averaged them all.
"""

from __future__ import annotations

import weakref

import jax
from jax.sharding import PartitionSpec

from lazax import ir

from ._registry import lowering
from .sharding import CONSTRAINTS

__all__ = [
    "MANUAL",
    "MANUAL_ALL_GATHER",
    "MANUAL_ALL_REDUCE",
    "MANUAL_ENTER",
    "MANUAL_EXIT",
    "MANUAL_PERMUTE",
    "MANUAL_REDUCE_SCATTER",
    "distinct_meshes",
    "enter",
    "exit_",
    "per_device",
]

MANUAL_ENTER = "lazax::manual_enter"
MANUAL_EXIT = "lazax::manual_exit"
MANUAL_ALL_REDUCE = "lazax::manual_all_reduce"
MANUAL_ALL_GATHER = "lazax::manual_all_gather"
MANUAL_REDUCE_SCATTER = "lazax::manual_reduce_scatter"
MANUAL_PERMUTE = "lazax::manual_permute"

_UNKNOWN = object()


def distinct_meshes(meshes) -> list:
    """The meshes among ``meshes`` (None: a value that is one value), each once."""
    out = []
    for m in meshes:
        if m is not None and m not in out:
            out.append(m)
    return out


class _ManualValues:
    """Which nodes compute per-device values (see the contract)."""

    def __init__(self) -> None:
        self.active = False
        self._mesh_of: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()

    def of(self, node: ir.Node):
        known = self._mesh_of
        found = known.get(node, _UNKNOWN)
        if found is not _UNKNOWN:
            return found
        # Post-order over the nodes not yet known; a region is walked once.
        stack = [node]
        while stack:
            top = stack[-1]
            if top in known:
                stack.pop()
                continue
            if top.op == MANUAL_ENTER:
                known[top] = CONSTRAINTS[top.attrs[0][1]].mesh
                stack.pop()
                continue
            if top.op == MANUAL_EXIT or not top.operands:
                known[top] = None
                stack.pop()
                continue
            unknown = [v.node for v in top.operands if v.node not in known]
            if unknown:
                stack.extend(unknown)
                continue
            known[top] = next(
                (m for m in (known[v.node] for v in top.operands) if m is not None), None
            )
            stack.pop()
        return known[node]

    def split(self, storages) -> tuple[list, list]:
        """``storages`` (pending) as (those of single values, those of per-device ones)."""
        single, per_device_values = [], []
        for s in storages:
            (single if self.of(s.value.node) is None else per_device_values).append(s)
        return single, per_device_values

    def meshes(self, nodes) -> list:
        """The distinct meshes of the per-device values among ``nodes``."""
        return distinct_meshes(self.of(n) for n in nodes)

    def one_mesh(self, nodes, what: str):
        """The mesh of the per-device values among ``nodes`` (None: none is); an op
        that mixes two meshes raises ``ValueError`` naming ``what``."""
        meshes = self.meshes(nodes)
        if len(meshes) > 1:
            raise ValueError(
                f"{what}: its operands differ per device over two meshes (each is computed "
                f"from an enable_manual_sharding over its own mesh); "
                f"disable_manual_sharding one of them first"
            )
        return meshes[0] if meshes else None


MANUAL = _ManualValues()


def _every_axis(mesh) -> PartitionSpec:
    return PartitionSpec(tuple(mesh.axis_names))


def _unsplit_axes(sharding) -> tuple:
    used = set()
    for entry in sharding.spec:
        if entry is not None:
            used.update(entry if isinstance(entry, tuple) else (entry,))
    return tuple(a for a in sharding.mesh.axis_names if a not in used)


def enter(x, sharding):
    """The full value ``x`` -> its pieces, as a per-device value."""
    mesh = sharding.mesh
    return jax.shard_map(
        lambda a: a[None],
        mesh=mesh,
        in_specs=(sharding.spec,),
        out_specs=_every_axis(mesh),
        check_vma=False,
    )(x)


def exit_(x, sharding, per_device_value: bool, summed: bool):
    """A per-device value (or, not ``per_device_value``, one value) -> the full value
    whose pieces the devices hold, laid out as ``sharding``."""
    mesh = sharding.mesh
    copies = _unsplit_axes(sharding) if summed else ()

    def body(a):
        a = a[0] if per_device_value else a
        return jax.lax.psum(a, copies) if copies else a

    return jax.shard_map(
        body,
        mesh=mesh,
        in_specs=(_every_axis(mesh) if per_device_value else PartitionSpec(),),
        out_specs=sharding.spec,
        check_vma=False,
    )(x)


def per_device(run, mesh, operands: list, flags: list, n_out: int) -> list:
    """``run(operands) -> outputs`` on each device's own values: an operand with its flag
    set is per-device, any other is the same on every device."""
    every = _every_axis(mesh)

    def body(*args):
        own = [a[0] if f else a for a, f in zip(args, flags)]
        return tuple(r[None] for r in run(own))

    out = jax.shard_map(
        body,
        mesh=mesh,
        in_specs=tuple(every if f else PartitionSpec() for f in flags),
        out_specs=(every,) * n_out,
        check_vma=False,
    )(*operands)
    return list(out)


_REDUCTIONS = {"sum": jax.lax.psum, "mean": jax.lax.pmean, "max": jax.lax.pmax, "min": jax.lax.pmin}


@lowering(MANUAL_ALL_REDUCE)
def _all_reduce(ctx, x, axes, op):
    return _REDUCTIONS[op](x, tuple(axes))


@lowering(MANUAL_ALL_GATHER)
def _all_gather(ctx, x, axes, dim):
    return jax.lax.all_gather(x, tuple(axes), axis=dim, tiled=True)


@lowering(MANUAL_REDUCE_SCATTER)
def _reduce_scatter(ctx, x, axes, dim, op):
    out = jax.lax.psum_scatter(x, tuple(axes), scatter_dimension=dim, tiled=True)
    if op == "mean":
        out = out / jax.lax.psum(1, tuple(axes))
    return out


@lowering(MANUAL_PERMUTE)
def _permute(ctx, x, axis, pairs):
    return jax.lax.ppermute(x, axis, perm=[tuple(p) for p in pairs])
