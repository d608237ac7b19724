"""``torch_xla.distributed.spmd`` (``xs``): SPMD sharding over ``lx.Mesh``.

Contract:
- ``Mesh(device_ids, mesh_shape, axis_names=None)``: an ``lx.Mesh`` (so every lazax
  function takes it) with torch_xla's methods: ``size()`` (devices), ``shape()``
  (axis name -> size, in order), ``get_axis_name_idx(name)``, ``get_logical_mesh()``
  (the device ids as a numpy array of ``mesh_shape``). ``device_ids`` may be a numpy
  array; ``mesh.device_ids.tolist()`` lists them, as torch_xla's array does. A mesh
  torch_xla refuses raises its ``AssertionError`` with its words
  (device ids as many as the mesh's size, unique, below it; axis names one per
  dimension, unique; the mesh over every device of the job: ``lx.Mesh`` takes part of
  them, torch_xla's does not).
- ``mark_sharding(t, mesh, partition_spec)``: ``lx.mark_sharding``; entries are None,
  an axis index or name, or a tuple of them; ``mesh`` None means the global mesh.
  Returns an ``XLAShardedTensor`` around ``t`` (``t`` itself is sharded in place; an
  ``XLAShardedTensor`` given is unwrapped). ``clear_sharding(t)``: ``lx.clear_sharding``,
  returns ``t``.
- ``get_1d_mesh(axis_name=None)``: every global device on one axis.
- ``set_global_mesh(mesh)`` / ``get_global_mesh()`` (None until set).
- ``MarkShardingFunction``, ``mark_sharding_with_gradients``, ``ShardingSpec``,
  ``XLAPatchedLinear``, ``xla_patched_nn_linear_forward``,
  ``ShardingType``, ``XLAShard``, ``XLAShardedTensor``: ``xla_sharding``.
"""

from __future__ import annotations

import numpy as np

import lazax.modes as lx

from ..._sharded import unwrap
from .xla_sharding import (
    MarkShardingFunction,
    ShardingSpec,
    ShardingType,
    XLAPatchedLinear,
    XLAShard,
    XLAShardedTensor,
    mark_sharding_with_gradients,
    xla_patched_nn_linear_forward,
)

__all__ = [
    "MarkShardingFunction",
    "Mesh",
    "ShardingSpec",
    "ShardingType",
    "XLAPatchedLinear",
    "XLAShard",
    "XLAShardedTensor",
    "clear_sharding",
    "get_1d_mesh",
    "get_global_mesh",
    "mark_sharding",
    "mark_sharding_with_gradients",
    "set_global_mesh",
    "xla_patched_nn_linear_forward",
]

_GLOBAL: list = [None]


class _DeviceIds(tuple):
    """lazax's tuple of device ids, with the ``tolist()`` of torch_xla's numpy array."""

    def tolist(self) -> list[int]:
        return list(self)


class Mesh(lx.Mesh):
    """torch_xla's ``Mesh`` as an ``lx.Mesh``."""

    def __init__(self, device_ids, mesh_shape, axis_names=None) -> None:
        ids = [int(i) for i in np.asarray(device_ids).reshape(-1)]
        shape = tuple(int(n) for n in mesh_shape)
        names = tuple(axis_names) if axis_names is not None else None
        _check(ids, shape, names)
        super().__init__(ids, shape, names)
        self.device_ids = _DeviceIds(self.device_ids)

    def size(self, axis=None) -> int:  # torch_xla: size() is the device count
        if axis is None:
            return len(self.device_ids)
        return super().size(axis)

    def shape(self) -> dict:
        names = self.axis_names or tuple(range(len(self.mesh_shape)))
        return dict(zip(names, self.mesh_shape))

    def get_axis_name_idx(self, name) -> int | None:
        if not self.axis_names or name not in self.axis_names:
            return None
        return list(self.axis_names).index(name)

    def get_logical_mesh(self) -> np.ndarray:
        return np.array(self.device_ids).reshape(self.mesh_shape)


def _check(ids: list, shape: tuple, names) -> None:
    """torch_xla's checks of a mesh, in its words and with its ``AssertionError``
    (lazax's own checks, a ``ValueError``, follow)."""
    size = int(np.prod(shape, dtype=np.int64))
    assert len(ids) == size, f"Number of device IDs ({len(ids)}) must match mesh size ({size})"
    assert len(set(ids)) == len(ids), f"Device IDs must be unique: {ids}"
    assert all(0 <= i < size for i in ids), f"Device IDs must be less than mesh size ({size})"
    if names is not None:
        assert len(names) == len(shape), (
            f"Number of axis names ({len(names)}) must match mesh dimensions ({len(shape)})"
        )
        assert len(set(names)) == len(names), f"Axis names must be unique: {names}"
    count = lx.global_device_count()
    assert size == count, (
        f"Number of device IDs ({size}) must match the global number of devices ({count})"
    )


def get_1d_mesh(axis_name: str | None = None) -> Mesh:
    """Every device of the job on one mesh axis."""
    count = lx.global_device_count()
    return Mesh(range(count), (count,), (axis_name,) if axis_name else None)


def set_global_mesh(mesh: Mesh) -> None:
    _GLOBAL[0] = mesh


def get_global_mesh() -> Mesh | None:
    return _GLOBAL[0]


def mark_sharding(t, mesh=None, partition_spec=()) -> XLAShardedTensor:
    """Shard ``t`` over ``mesh`` (the global mesh when None), in place; returns it as an
    ``XLAShardedTensor``."""
    mesh = mesh if mesh is not None else get_global_mesh()
    if mesh is None:
        raise ValueError("mark_sharding: no mesh given and no global mesh set")
    t = unwrap(t)
    lx.mark_sharding(t, mesh, tuple(partition_spec))
    return XLAShardedTensor(t)


def clear_sharding(t):
    """``t`` back on one device; returns ``t``."""
    lx.clear_sharding(unwrap(t))
    return t
