"""torch_xla's ``OpSharding`` handle and the global tensor built from per-device CPU
shards (``_XLAC._global_tensor_from_cpu_shards``), over lazax's public sharding API.

Contract:
- ``OpSharding(mesh, partition_spec)``: what torch_xla's ``Mesh.get_op_sharding(spec)``
  returns, XLA's sharding of a tensor over a mesh; lazax keeps the mesh and the spec.
  torch_xla's own constructor ``OpSharding([], [], [], ShardingType.REPLICATED)`` makes
  a replicated sharding over no mesh in particular (``mesh`` and ``partition_spec``
  None); any other use of it raises ``RuntimeError``.
- ``global_tensor_from_cpu_shards(shards, op_sharding, global_shape=None)``: one lazax
  tensor, laid out as ``op_sharding`` says, from one CPU shard per device of the mesh
  (in device-id order; devices that hold the same piece give equal shards, the first
  one is taken). Its value is the shards put together, cut to ``global_shape`` (default:
  all of it); the shards may carry padding at the high end of a split dimension, as
  torch_xla's uneven shards do, but only as much as an uneven split makes
  (``lazax.pjrt.padded_shape``: each piece is the dimension divided by its devices,
  rounded up). ``RuntimeError`` (torch_xla's type) for a wrong number of shards, shards
  of different shapes, or a shape the shards do not make.
"""

from __future__ import annotations

import numpy as np
import torch

import lazax.modes as lx

__all__ = ["OpSharding", "global_tensor_from_cpu_shards"]


class OpSharding:
    """A tensor's layout over a mesh, as torch_xla's ``_XLAC.OpSharding``."""

    def __init__(self, mesh, partition_spec=None, replication_groups=None, sharding_type=None):
        if sharding_type is not None:  # torch_xla's (tiles, groups, replication, type)
            if int(sharding_type) != 0 or list(mesh) or list(partition_spec or ()):
                raise RuntimeError(
                    "OpSharding(tile_assignment, group_assignment, replication_groups, "
                    "type) makes a replicated sharding here (empty lists, type "
                    "REPLICATED); build any other with Mesh.get_op_sharding(spec)"
                )
            mesh, partition_spec = None, None  # replicated over whatever mesh it meets
        self.mesh = mesh
        self.partition_spec = None if partition_spec is None else tuple(partition_spec)

    def _names(self) -> tuple:
        """The spec with every axis as its name (jax's mesh names)."""
        names = self.mesh.jax_mesh.axis_names
        out = []
        for entry in self.partition_spec:
            if entry is None:
                out.append(None)
                continue
            axes = entry if isinstance(entry, tuple) else (entry,)
            axes = tuple(names[a] if isinstance(a, int) else a for a in axes)
            out.append(axes[0] if len(axes) == 1 else axes)
        return tuple(out)

    def tiles(self, device_id: int) -> tuple[int, ...]:
        """Which piece, per tensor dimension, the device ``device_id`` holds."""
        names = list(self.mesh.jax_mesh.axis_names)
        grid = np.array(self.mesh.device_ids).reshape(self.mesh.mesh_shape)
        coords = [int(c[0]) for c in np.nonzero(grid == device_id)]
        out = []
        for entry in self._names():
            axes = () if entry is None else (entry if isinstance(entry, tuple) else (entry,))
            idx = [names.index(a) for a in axes]
            sizes = [self.mesh.mesh_shape[i] for i in idx]
            out.append(int(np.ravel_multi_index([coords[i] for i in idx], sizes)) if idx else 0)
        return tuple(out)

    def ways(self) -> tuple[int, ...]:
        """How many pieces each tensor dimension is split into."""
        names = list(self.mesh.jax_mesh.axis_names)
        out = []
        for entry in self._names():
            axes = () if entry is None else (entry if isinstance(entry, tuple) else (entry,))
            out.append(int(np.prod([self.mesh.mesh_shape[names.index(a)] for a in axes])))
        return tuple(out)

    def __repr__(self) -> str:
        return f"OpSharding({self.mesh!r}, {self.partition_spec})"


def global_tensor_from_cpu_shards(shards, op_sharding: OpSharding, global_shape=None):
    mesh = op_sharding.mesh
    if mesh is None:
        raise RuntimeError(
            "_global_tensor_from_cpu_shards needs an OpSharding over a mesh "
            "(Mesh.get_op_sharding(spec)), not a bare replicated one"
        )
    count = len(mesh.device_ids)
    if len(shards) != count:
        raise RuntimeError(
            f"expected one CPU shard per device of the mesh ({count}), but got {len(shards)}"
        )
    shape = tuple(shards[0].shape)
    if any(tuple(s.shape) != shape for s in shards):
        raise RuntimeError(
            f"every shard must have the same shape, but got {[tuple(s.shape) for s in shards]}"
        )
    ways = op_sharding.ways()
    spec = op_sharding._names()
    if all(w == 1 for w in ways):  # replicated: XLA's sharding says no rank
        ways, spec = (1,) * len(shape), (None,) * len(shape)
    if len(ways) != len(shape):
        raise RuntimeError(
            f"the sharding splits {len(ways)} dimensions, but the shards have {len(shape)}"
        )
    held = tuple(n * w for n, w in zip(shape, ways))
    if global_shape is None:
        global_shape = held
    global_shape = tuple(int(n) for n in global_shape)
    # The shape each piece of ``global_shape`` has, split this way (rounded up).
    pieces = tuple(-(-n // w) if w else n for n, w in zip(global_shape, ways))
    if len(global_shape) != len(shape) or pieces != shape:
        raise RuntimeError(
            f"shards of shape {shape}, split {ways} ways per dimension, do not make a "
            f"tensor of shape {global_shape} (its pieces would be {pieces})"
        )
    whole = torch.empty(held, dtype=shards[0].dtype)
    for device_id, shard in zip(sorted(mesh.device_ids), shards):
        tile = op_sharding.tiles(device_id) if any(w > 1 for w in ways) else (0,) * len(shape)
        where = tuple(slice(t * n, (t + 1) * n) for t, n in zip(tile, shape))
        whole[where] = shard
    value = whole[tuple(slice(0, n) for n in global_shape)].contiguous()
    return lx.distributed.global_tensor(value, mesh, spec)
