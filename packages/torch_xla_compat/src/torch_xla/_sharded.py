"""torch_xla's ``XLAShardedTensor`` over lazax: a view of a sharded lazax tensor as its
global value and its per-device shards.

Contract:
- ``XLAShardedTensor(t)``: a tensor subclass around the lazax tensor ``t`` (its
  ``global_tensor``; an ``XLAShardedTensor`` given is unwrapped). Its shape, dtype,
  device, ``requires_grad`` and ``grad`` are ``t``'s (``requires_grad=`` sets ``t``'s),
  and every torch op on it runs on ``t``, autograd included: a result on the device
  comes back wrapped, anything else (``.cpu()``, a Python number) as is. An in-place op
  writes ``t``.
- ``.sharding_spec``: XLA's HloSharding text of ``t`` (``""`` unsharded, ``"{manual}"``
  for a value per device: manual sharding);
  ``.sharding_type``: a ``ShardingType`` (XLA's ``OpSharding.Type`` values), None unsharded.
- ``.local_shards``: one ``XLAShard`` per device of this process that holds a piece, in
  device order: ``data`` (a new CPU tensor of that device's piece), ``indices`` (a list
  of ``slice(start, stop, 1)``, one per dimension, or ``...`` when every device holds the
  whole value), ``replica_id`` (which copy of that piece, counted over the devices that
  hold it), ``shard_device`` (``"xla:<id>"``, the mesh's device id), ``unpadded_data``
  (``data`` without its padding: a dimension that does not divide over its devices is
  held zero-padded, as torch_xla pads it, and ``indices`` cover the value's part only).
- ``.load_local_shards_(shards)``: writes those pieces back into ``t`` in place (the
  values stay on their devices, the sharding is kept); ``RuntimeError`` for a replicated
  or unsharded ``t``, a list that is not one shard per local device, or a shard of the
  wrong shape.
- ``unwrap(t)``, ``spec_text(t)``, ``sharding_type(t)``: what ``_XLAC`` answers with.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass

import jax
import numpy as np
import torch
from torch.utils._pytree import tree_map

import lazax.modes as lx

__all__ = [
    "ShardingType",
    "XLAShard",
    "XLAShardedTensor",
    "sharding_type",
    "spec_text",
    "unwrap",
]


class ShardingType(enum.IntEnum):
    """XLA's ``OpSharding.Type`` numbers, which torch_xla's enum uses; lazax makes
    REPLICATED, TILED, PARTIAL (tiled with replicated copies) and MANUAL."""

    REPLICATED = 0
    MAXIMAL = 1
    TUPLE = 2
    TILED = 3
    MANUAL = 4
    PARTIAL = 5
    UNKNOWN = 6


def unwrap(t):
    return t.global_tensor if isinstance(t, XLAShardedTensor) else t


def _layout(t):
    """(tiles per tensor dim, mesh axes in tile order, copies of each tile), or None."""
    sharding = lx.get_sharding(unwrap(t))
    if sharding is None:
        return None
    mesh, names = sharding.mesh, list(sharding.mesh.jax_mesh.axis_names)
    used, tiles = [], []
    for entry in sharding.partition_spec:
        axes = () if entry is None else (entry if isinstance(entry, tuple) else (entry,))
        idx = [a if isinstance(a, int) else names.index(a) for a in axes]
        used += idx
        tiles.append(int(np.prod([mesh.mesh_shape[i] for i in idx], dtype=np.int64)))
    rest = [i for i in range(len(names)) if i not in used]
    replicas = int(np.prod([mesh.mesh_shape[i] for i in rest], dtype=np.int64))
    return mesh, tiles, used + rest, replicas


def spec_text(t) -> str:
    """``t``'s sharding as torch_xla prints XLA's HloSharding (see ``_XLAC``)."""
    if lx.manual_mesh(unwrap(t)) is not None:  # a value per device (``_manual``)
        return "{manual}"
    layout = _layout(t)
    if layout is None:
        return ""
    mesh, tiles, order, replicas = layout
    if all(n == 1 for n in tiles):
        return "{replicated}"
    # The mesh's device ids, its axes ordered as the tensor's dims take them, the axes
    # the spec leaves out last: XLA's tile assignment.
    grid = np.array(mesh.device_ids).reshape(mesh.mesh_shape).transpose(order)
    ids = ",".join(str(int(i)) for i in grid.reshape(-1))
    if replicas == 1:
        return "{devices=[" + ",".join(map(str, tiles)) + "]" + ids + "}"
    dims = ",".join(map(str, tiles + [replicas]))
    return "{devices=[" + dims + "]" + ids + " last_tile_dim_replicate}"


def sharding_type(t) -> int | None:
    if lx.manual_mesh(unwrap(t)) is not None:
        return int(ShardingType.MANUAL)
    layout = _layout(t)
    if layout is None:
        return None
    _, tiles, _, replicas = layout
    if all(n == 1 for n in tiles):
        return int(ShardingType.REPLICATED)
    return int(ShardingType.PARTIAL if replicas > 1 else ShardingType.TILED)


@dataclass
class XLAShard:
    """One device's piece of a sharded tensor, as torch_xla's ``XLAShard``."""

    data: torch.Tensor
    indices: object  # a list of slices, one per dimension, or ``...``
    shard_device: str
    replica_id: int

    @property
    def unpadded_data(self) -> torch.Tensor:
        if self.indices is Ellipsis:
            return self.data
        return self.data[tuple(slice(0, s.stop - s.start) for s in self.indices)]

    @property
    def global_ordinal(self) -> int:
        return int(self.shard_device.split(":")[-1])


def _pieces(t):
    """``t``'s pieces (``lx.shards``) and its ``lx.Sharding`` (None on one device)."""
    return lx.shards(t), lx.get_sharding(t)


def _indices(index, shape):
    if all(s.start == 0 and s.stop == n for s, n in zip(index, shape)):
        return Ellipsis
    return list(index)


def _host(t: torch.Tensor):
    """A CPU tensor as numpy, bfloat16 included (numpy has no bfloat16 of its own)."""
    t = t.detach().contiguous()
    if t.dtype == torch.bfloat16:
        return t.view(torch.int16).numpy().view(jax.numpy.bfloat16)
    return t.numpy()


class XLAShardedTensor(torch.Tensor):
    """A sharded lazax tensor seen as torch_xla's ``XLAShardedTensor`` (module
    docstring). ``xs.mark_sharding`` returns one."""

    global_tensor: torch.Tensor

    @staticmethod
    def __new__(cls, elem, *args, **kwargs):
        elem = unwrap(elem)
        if "requires_grad" in kwargs:
            elem.requires_grad_(kwargs["requires_grad"])
        # The wrapper itself is no autograd leaf: its torch functions (requires_grad,
        # grad, backward included) are the global tensor's.
        r = torch.Tensor._make_wrapper_subclass(
            cls, elem.size(), strides=elem.stride(), dtype=elem.dtype, device=elem.device
        )
        r.global_tensor = elem
        return r

    def __repr__(self, *, tensor_contents=None) -> str:
        return f"XLAShardedTensor({self.global_tensor})"

    @property
    def sharding_spec(self) -> str:
        return spec_text(self.global_tensor)

    @property
    def sharding_type(self) -> ShardingType | None:
        kind = sharding_type(self.global_tensor)
        return None if kind is None else ShardingType(kind)

    @property
    def local_shards(self) -> list[XLAShard]:
        pieces, _ = _pieces(self.global_tensor)
        shape = tuple(self.global_tensor.shape)
        out = []
        for piece in pieces:
            # from_jax shares the device buffer; .cpu() copies it to a tensor of its own.
            data = lx.from_jax(piece.data).cpu()
            index = _indices(piece.index, shape)
            out.append(XLAShard(data, index, f"xla:{piece.device}", piece.replica_id))
        return out

    def load_local_shards_(self, shards) -> None:
        t = self.global_tensor
        pieces, sharding = _pieces(t)
        kind = sharding_type(t)
        if sharding is None or kind == ShardingType.REPLICATED:
            raise RuntimeError(
                "load_local_shards_: the tensor is not split over devices (replicated "
                "or unsharded); write it with copy_ instead"
            )
        if len(shards) != len(pieces):
            raise RuntimeError(
                f"load_local_shards_: {len(shards)} shards given, but this process's "
                f"{len(pieces)} devices each hold one"
            )
        arrays = []
        for shard, piece in zip(shards, pieces):
            if tuple(shard.data.shape) != tuple(piece.data.shape):
                raise RuntimeError(
                    f"load_local_shards_: the shard for device {piece.device} has shape "
                    f"{tuple(shard.data.shape)}, but that device holds "
                    f"{tuple(piece.data.shape)}"
                )
            arrays.append(jax.device_put(_host(shard.data), piece.data.device))
        # The pieces as held: a value split unevenly is held padded, the padding cut off.
        tiles = _layout(t)[1]
        shape = tuple(n * size for n, size in zip(tiles, pieces[0].data.shape))
        layout = jax.sharding.NamedSharding(
            sharding.mesh.jax_mesh, jax.sharding.PartitionSpec(*sharding.partition_spec)
        )
        whole = jax.make_array_from_single_device_arrays(shape, layout, arrays)
        with torch.no_grad():
            t.copy_(lx.from_jax(whole)[tuple(slice(0, n) for n in t.shape)])
        # copy_ leaves t pending; keep the layout it had rather than XLA's choice.
        lx.mark_sharding(t, sharding.mesh, sharding.partition_spec)

    def apply_sharding(self, mesh, partition_spec) -> XLAShardedTensor:
        """Shard the global tensor over ``mesh`` (``lx.mark_sharding``); returns self."""
        lx.mark_sharding(self.global_tensor, mesh, tuple(partition_spec))
        return self

    def clear_sharding(self) -> XLAShardedTensor:
        lx.clear_sharding(self.global_tensor)
        return self

    # Every torch function and tensor method runs on the global tensor, so autograd,
    # in-place writes and ops mixing plain lazax tensors with this one are the global
    # tensor's (lazax's own dispatch sees only lazax tensors). Dispatch is the fallback
    # for what reaches it without passing through a torch function.
    @classmethod
    def __torch_function__(cls, func, types, args=(), kwargs=None):
        out = func(*tree_map(unwrap, args), **tree_map(unwrap, kwargs or {}))
        return _wrap_all(out)

    @classmethod
    def __torch_dispatch__(cls, func, types, args=(), kwargs=None):
        out = func(*tree_map(unwrap, args), **tree_map(unwrap, kwargs or {}))
        return _wrap_all(out)


def _wrap_all(out):
    # Lists and tuples of results (split; max's values and indices), but not a
    # torch.Size, which a tree map would turn into a plain tuple.
    if type(out) is tuple or type(out) is list or hasattr(out, "n_fields"):
        return type(out)([_wrap(x) for x in out])
    return _wrap(out)


def _wrap(x):
    """A result on the device as an ``XLAShardedTensor``; anything else as it is."""
    if isinstance(x, torch.Tensor) and not isinstance(x, XLAShardedTensor):
        if x.device.type == lx.device().type:
            return XLAShardedTensor(x)
    return x
