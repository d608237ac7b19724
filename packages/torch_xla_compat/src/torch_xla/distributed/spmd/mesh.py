"""torch_xla's meshes over lazax's devices.

Contract:
- ``Mesh(device_ids, mesh_shape, axis_names=None)``: an ``lx.Mesh`` (so every lazax
  function takes it) with torch_xla's methods and checks (see the package docstring);
  ``axis_names`` is None when none were given, as torch_xla's (lazax names the axes
  ``axis0``, ... in its shardings); ``get_op_sharding(spec)``: an ``_XLAC.OpSharding``.
- ``HybridMesh(*, ici_mesh_shape, dcn_mesh_shape=None, axis_names=None)``: a ``Mesh`` of
  shape ``ici * dcn`` (axis by axis) over every device of the job, for slices joined by
  the data-centre network: each slice's devices fill an ``ici_mesh_shape`` block, and the
  blocks are laid out by ``dcn_mesh_shape``. On TPUs the devices of a block follow the
  chips' torus (``xr.global_runtime_device_attributes()``: ``coords``, ``core_on_chip``,
  ``slice_index``), ordered by jax's ``mesh_utils``; elsewhere consecutive device ids
  make a slice.
- ``get_1d_mesh(axis_name=None)``: every global device on one axis.
- ``set_global_mesh(mesh)`` / ``get_global_mesh()`` (None until set).
"""

from __future__ import annotations

import numpy as np
from jax.experimental import mesh_utils

import lazax.modes as lx

from ... import runtime as xr
from ..._cpu_shards import OpSharding
from ...core import xla_model as xm

__all__ = ["HybridMesh", "Mesh", "get_1d_mesh", "get_global_mesh", "set_global_mesh"]

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
        # None when none were given, as torch_xla's; shardings use jax_mesh's names.
        self.axis_names = names

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

    def get_op_sharding(self, partition_spec) -> OpSharding:
        """XLA's sharding of a tensor over this mesh (``_XLAC.OpSharding``)."""
        return OpSharding(self, partition_spec)


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


class _Chip:
    """What jax's ``mesh_utils`` reads of a device, from one of
    ``xr.global_runtime_device_attributes()``."""

    platform = "tpu"

    def __init__(self, attributes: dict) -> None:
        self.id = int(str(attributes["name"]).rpartition(":")[2])
        self.coords = tuple(attributes["coords"])
        self.core_on_chip = int(attributes.get("core_on_chip", 0))
        self.slice_index = int(attributes.get("slice_index", 0))
        self.device_kind = attributes.get("device_kind", "TPU")


def _blocks(ids: np.ndarray, ici: tuple, dcn: tuple) -> np.ndarray:
    """Consecutive ids as ``prod(dcn)`` slices, each an ``ici`` block, the blocks laid
    out by ``dcn``: axis k of the result is ``dcn[k]`` blocks of ``ici[k]``."""
    n = len(ici)
    grid = ids.reshape(*dcn, *ici)
    order = [a for k in range(n) for a in (k, n + k)]  # (dcn0, ici0, dcn1, ici1, ...)
    return grid.transpose(order).reshape([d * i for d, i in zip(dcn, ici)])


def _torus_ids(ici: tuple, dcn: tuple) -> np.ndarray:
    chips = [_Chip(a) for a in xr.global_runtime_device_attributes()]
    if int(np.prod(dcn)) > 1:
        grid = mesh_utils.create_hybrid_device_mesh(ici, dcn, chips)
    else:
        grid = mesh_utils.create_device_mesh(ici, chips)
    return np.vectorize(lambda chip: chip.id, otypes=[int])(grid)


class HybridMesh(Mesh):
    """torch_xla's mesh over slices joined by the data-centre network (DCN), each slice's
    devices joined by the chips' own links (ICI). Order the axes from the least to the
    most communication (``("replica", "data", "model")``): an axis of ``dcn_mesh_shape``
    above 1 crosses slices."""

    def __init__(self, *, ici_mesh_shape, dcn_mesh_shape=None, axis_names=None) -> None:
        ici = tuple(int(n) for n in ici_mesh_shape)
        dcn = tuple(int(n) for n in dcn_mesh_shape) if dcn_mesh_shape is not None else None
        dcn = dcn or (1,) * len(ici)
        assert len(ici) == len(dcn), (
            f"ici_mesh_shape {ici} and dcn_mesh_shape {dcn} must have the same length"
        )
        count = xr.global_runtime_device_count()
        size = int(np.prod(ici) * np.prod(dcn))
        assert size == count, (
            f"the hybrid mesh {ici} x {dcn} has {size} devices, but the job has {count}"
        )
        if xm.xla_device_hw(lx.device()) == "TPU":
            ids = _torus_ids(ici, dcn)
        else:
            ids = _blocks(np.arange(count), ici, dcn)
        self.ici_mesh_shape, self.dcn_mesh_shape = ici, dcn
        super().__init__(ids.reshape(-1), ids.shape, axis_names)
