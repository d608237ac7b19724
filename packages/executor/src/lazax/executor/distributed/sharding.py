"""SPMD sharding: annotations on lazax tensors that XLA's partitioner carries out.

Contract:
- ``Mesh(device_ids, mesh_shape, axis_names)``: a logical grid of this runtime's devices
  (jax's ``Mesh``); its ``key`` is a stable string, so a constraint hashes the same in
  every process. Shardings name its axes by ``jax_mesh.axis_names`` (``axis0``, ... when
  none were given), which lazax reads; ``axis_names`` is what the mesh shows its user
  (the same, unless a subclass says otherwise: torch_xla's answers None).
- ``mark_sharding(t, mesh, partition_spec)``: one entry per dimension of ``t``: ``None``
  (not split), a mesh axis name or index, or a tuple of them. Checked at the call
  (``ValueError`` naming the axis or dimension). Device data is re-laid out at once
  (each device then holds only its piece; a dimension that does not divide over its
  axes is held padded with zeros to a multiple of them, as torch_xla pads it, within
  one process's devices: ``lazax.pjrt.padded_shape``); pending IR gets a sharding-constraint node
  (``lazax::shard``, ``ops.sharding``), which is part of the graph hash. Each distinct
  layout (a mesh object and a spec) makes one jax sharding, kept in ``mesh.shardings``
  and counted as ``CreateOpSharding``.
- ``clear_sharding(t)``: ``t`` back on its single device (it syncs ``t`` first).
- ``keep_layout(src, out)``: ``out``, a pending copy of ``src`` (its ``clone``), gets a
  constraint to ``src``'s layout when ``src`` (not a view) is laid out over a mesh:
  device data split or replicated over one (not held padded), or a constraint itself.
  So a clone's sharding is known before the sync, as torch_xla's clone keeps the
  sharding spec and DTensor's clone its placements.
- ``get_sharding(t)``: a ``Sharding(mesh, partition_spec)`` or None (single device, or
  pending IR whose layout XLA has not chosen yet); ``shard_shapes(t)``: device id ->
  the shape of the piece that device holds (padding included); ``shards(t)``: each
  piece (``Shard``: device, where it lies in the value, its buffer, its replica id).
The barrier's side (input placement, the cache-key part) is ``barrier.placement``.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch

from lazax import ir

from .. import metrics
from ..barrier.executor import EXECUTOR
from ..ops.manual import MANUAL, MANUAL_EXIT
from ..ops.sharding import ACTIVE, CONSTRAINTS, SHARD_OP
from ..tensor.lazy import LazyTensor

__all__ = [
    "Mesh",
    "Sharding",
    "as_sharding",
    "clear_sharding",
    "constraint",
    "get_sharding",
    "keep_layout",
    "lazax_mesh",
    "mark_sharding",
    "mesh_by_key",
    "normalize",
    "owning",
    "register_mesh",
    "Shard",
    "shard_shapes",
    "shards",
]

_MESHES: dict[object, Mesh] = {}  # jax mesh -> the lazax Mesh made for it
_BY_KEY: dict[str, Mesh] = {}  # mesh key -> the first Mesh made with it


class Mesh:
    """A logical grid of devices, as torch_xla's ``Mesh``: ``Mesh(range(8), (2, 4),
    ("data", "model"))``."""

    def __init__(self, device_ids, mesh_shape, axis_names=None) -> None:
        device_ids = [int(i) for i in device_ids]
        mesh_shape = tuple(int(d) for d in mesh_shape)
        if axis_names is None:
            axis_names = tuple(f"axis{i}" for i in range(len(mesh_shape)))
        axis_names = tuple(axis_names)
        count = len(EXECUTOR.runtime.global_devices)  # every process's
        if math.prod(mesh_shape) != len(device_ids):
            raise ValueError(
                f"a mesh of shape {mesh_shape} needs {math.prod(mesh_shape)} devices, but "
                f"{len(device_ids)} device ids were given"
            )
        if len(axis_names) != len(mesh_shape) or len(set(axis_names)) != len(axis_names):
            raise ValueError(
                f"axis_names must name each of the {len(mesh_shape)} mesh dimensions once, "
                f"but got {axis_names}"
            )
        bad = [i for i in device_ids if not 0 <= i < count]
        if bad or len(set(device_ids)) != len(device_ids):
            raise ValueError(
                f"device ids must be distinct and in [0, {count}) (the job has {count} "
                f"devices, every process's; on the CPU, "
                f"XLA_FLAGS=--xla_force_host_platform_device_count=N before jax starts "
                f"gives N per process), but got {device_ids}"
            )
        self.device_ids = tuple(device_ids)
        self.mesh_shape = mesh_shape
        self.axis_names = axis_names
        self.jax_mesh = EXECUTOR.runtime.mesh(device_ids, mesh_shape, axis_names)
        self.key = f"mesh{mesh_shape}{axis_names}{self.device_ids}"
        # The names shardings use, as a plain tuple (dynamo reads it while tracing).
        self.axis_keys = tuple(self.jax_mesh.axis_names)
        self.shardings: dict[tuple, object] = {}  # normalized spec -> its jax sharding
        _MESHES.setdefault(self.jax_mesh, self)
        _BY_KEY.setdefault(self.key, self)

    def __eq__(self, other) -> bool:
        # The same devices in the same grid with the same axis names is the same mesh,
        # whichever object describes it (get_sharding returns the first one made).
        return isinstance(other, Mesh) and self.key == other.key

    def __hash__(self) -> int:
        return hash(self.key)

    def size(self, axis: str) -> int:
        return self.mesh_shape[self.jax_mesh.axis_names.index(axis)]

    def __repr__(self) -> str:
        return (
            f"Mesh(device_ids={list(self.device_ids)}, mesh_shape={self.mesh_shape}, "
            f"axis_names={self.axis_names})"
        )


@dataclass(frozen=True)
class Sharding:
    mesh: Mesh
    partition_spec: tuple


def normalize(mesh: Mesh, spec, shape, divides: bool = True) -> tuple:
    """``spec`` with every axis as a name, checked against ``mesh`` and ``shape`` (with
    ``divides``: each split dimension divides over its axes' devices)."""
    spec = tuple(spec)
    if len(spec) != len(shape):
        raise ValueError(
            f"partition_spec {spec} has {len(spec)} entries, but the tensor has "
            f"{len(shape)} dimensions (shape {tuple(shape)}): give one entry per dimension"
        )
    # The names shardings use: a subclass may show the user other ``axis_names``
    # (torch_xla's Mesh answers None when none were given).
    names_of_axes = mesh.jax_mesh.axis_names
    used: set[str] = set()
    names = []
    for dim, entry in enumerate(spec):
        if entry is None:
            names.append(None)
            continue
        axes = entry if isinstance(entry, tuple) else (entry,)
        resolved = []
        for axis in axes:
            if isinstance(axis, int) and 0 <= axis < len(names_of_axes):
                axis = names_of_axes[axis]
            if axis not in names_of_axes:
                raise ValueError(
                    f"partition_spec {spec} names mesh axis {axis!r}, but the mesh's axes "
                    f"are {names_of_axes}"
                )
            if axis in used:
                raise ValueError(f"partition_spec {spec} uses mesh axis {axis!r} twice")
            used.add(axis)
            resolved.append(axis)
        ways = math.prod(mesh.size(a) for a in resolved)
        if divides and shape[dim] % ways:
            raise ValueError(
                f"dimension {dim} of size {shape[dim]} does not divide across mesh axes "
                f"{tuple(resolved)} ({ways} devices); pad it to a multiple of {ways} or "
                f"split another dimension"
            )
        names.append(resolved[0] if len(resolved) == 1 else tuple(resolved))
    return tuple(names)


def owning(t, what: str) -> LazyTensor:
    if type(t) is not LazyTensor:
        raise TypeError(f"{what} takes a lazax tensor, but got a {t.device} tensor")
    if t._lz_view is not None:
        raise ValueError(
            f"{what} takes a tensor that is its storage's whole value, not a view "
            f"(shape {tuple(t.shape)}, stride {t.stride()}); shard the base, or a .clone()"
        )
    return t


def mark_sharding(t: torch.Tensor, mesh: Mesh, partition_spec) -> torch.Tensor:
    t = owning(t, "mark_sharding")
    runtime = EXECUTOR.runtime
    # A dimension that does not divide is held padded (``lazax.pjrt.padded_shape``),
    # within this process's devices; jax builds no uneven array across processes.
    spec = normalize(mesh, partition_spec, tuple(t.shape), runtime.process_count > 1)
    storage = t._lz_storage
    if MANUAL.active and storage.pending and MANUAL.of(storage.value.node) is not None:
        raise ValueError(
            "mark_sharding: the tensor holds a value per device (inside manual sharding), "
            "which has no layout; disable_manual_sharding it first"
        )
    key, named = constraint(mesh, spec)
    if storage.pending:
        _constrain(storage, key)
    else:
        buffer = runtime.place(storage.value.node.data, named, storage.spec.shape)
        storage.set(ir.device_data(storage.spec, buffer))
    return t


def _constrain(storage, key: str) -> None:
    node = ir.Node(SHARD_OP, (storage.value,), ((("%", 0), key), ()), (storage.spec,))
    storage.set(node.outputs[0])


def keep_layout(src, out) -> None:
    """Constrain ``out`` (a pending copy of ``src``) to ``src``'s layout (see the
    contract); anything else is left as it is."""
    if type(src) is not LazyTensor or type(out) is not LazyTensor or src._lz_view is not None:
        return
    if out._lz_view is not None or not out._lz_storage.pending:
        return  # (an eager op: already run, laid out as XLA chose)
    node = src._lz_storage.value.node
    if node.op == SHARD_OP:
        _constrain(out._lz_storage, node.attrs[0][1])
        return
    if node.op != ir.DEVICE_DATA or tuple(getattr(node.data, "shape", ())) != tuple(src.shape):
        return  # pending work, or a value held padded (an uneven split)
    # The layout as a (mesh, spec) pair: the mesh found by the buffer's jax mesh, which
    # another Mesh object over the same grid may have made (its own ``shardings``).
    layout = as_sharding(getattr(node.data, "sharding", None), src.dim())
    if layout is not None:
        key, _ = constraint(layout.mesh, layout.partition_spec)
        _constrain(out._lz_storage, key)


def constraint(mesh: Mesh, spec: tuple) -> tuple[str, object]:
    """The constraint key (``CONSTRAINTS``) and the jax sharding of ``spec`` (normalized)
    over ``mesh``; each distinct layout makes one sharding (jax compares them often)."""
    named = mesh.shardings.get(spec)
    if named is None:
        named = mesh.shardings[spec] = EXECUTOR.runtime.named_sharding(mesh.jax_mesh, spec)
        metrics.bump("CreateOpSharding")
    register_mesh(named.mesh, mesh)
    key = f"{mesh.key}{spec}"
    CONSTRAINTS[key] = named
    return key, named


def mesh_by_key(key: str) -> Mesh | None:
    """The first ``Mesh`` made with this ``key`` in the process (None: none was)."""
    return _BY_KEY.get(key)


def lazax_mesh(jax_mesh) -> Mesh | None:
    """The ``Mesh`` that made ``jax_mesh`` (None: not one of lazax's)."""
    return _MESHES.get(jax_mesh)


def clear_sharding(t: torch.Tensor) -> torch.Tensor:
    t = owning(t, "clear_sharding")
    storage = t._lz_storage
    EXECUTOR.sync_storages([storage])
    runtime = EXECUTOR.runtime
    single = runtime.single_device(runtime.devices[storage.device_index])
    buffer = runtime.place(storage.value.node.data, single, storage.spec.shape)
    storage.set(ir.device_data(storage.spec, buffer))
    return t


def as_sharding(named, ndim: int) -> Sharding | None:
    if named is None or not hasattr(named, "spec") or len(named.device_set) == 1:
        return None
    mesh = _MESHES.get(named.mesh)
    if mesh is None:
        return None
    spec = tuple(named.spec)
    return Sharding(mesh, spec + (None,) * (ndim - len(spec)))


def get_sharding(t: torch.Tensor) -> Sharding | None:
    node = t._lz_storage.value.node
    if node.op in (SHARD_OP, MANUAL_EXIT):  # a constraint, or manual sharding's end
        return as_sharding(CONSTRAINTS[node.attrs[0][1]], t.dim())
    if node.op == ir.DEVICE_DATA:
        return as_sharding(getattr(node.data, "sharding", None), t.dim())
    return None


def shard_shapes(t: torch.Tensor) -> dict[int, tuple[int, ...]]:
    storage = t._lz_storage
    EXECUTOR.sync_storages([storage])
    return EXECUTOR.runtime.shard_shapes(storage.value.node.data)


@dataclass(frozen=True)
class Shard:
    """One device's piece of a tensor's value (``shards``)."""

    device: int  # the device's global index (a mesh's device id)
    index: tuple  # one slice per dimension: where the piece lies in the value
    data: object  # the piece as the device holds it (a jax.Array), padding included
    replica_id: int  # which copy of that piece, over the devices that hold it


def shards(t: torch.Tensor) -> list[Shard]:
    """This process's pieces of ``t`` (synced), in device order. A piece of a value split
    unevenly is held padded: ``data`` is the device's whole piece, ``index`` the part of
    the value in it (empty slices for a piece that is all padding)."""
    storage = t._lz_storage
    EXECUTOR.sync_storages([storage])
    buffer = storage.value.node.data
    shape = storage.spec.shape
    index_of = {d: i for i, d in enumerate(EXECUTOR.runtime.global_devices)}
    out = []
    for piece in buffer.addressable_shards:
        index = tuple(
            slice(min(s.start or 0, n), min(n if s.stop is None else s.stop, n), 1)
            for s, n in zip(piece.index, shape)
        )
        out.append(Shard(index_of[piece.device], index, piece.data, int(piece.replica_id)))
    return sorted(out, key=lambda p: p.device)


def register_mesh(jax_mesh, mesh: Mesh) -> None:
    """A sharding over ``jax_mesh`` now exists: ``get_sharding`` names it by ``mesh``,
    and every sync looks at placements from now on."""
    _MESHES.setdefault(jax_mesh, mesh)
    ACTIVE["active"] = True
