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
- ``HybridMesh(*, ici_mesh_shape, dcn_mesh_shape=None, axis_names=None)``,
  ``get_1d_mesh(axis_name=None)`` (every global device on one axis),
  ``set_global_mesh(mesh)`` / ``get_global_mesh()`` (None until set): ``mesh``.
- ``enable_manual_sharding``, ``disable_manual_sharding``, ``_mark_manual_sharding``
  (manual sharding), ``MarkShardingFunction``, ``mark_sharding_with_gradients``, ``ShardingSpec``,
  ``apply_backward_optimization_barrier``,
  ``XLAPatchedLinear``, ``xla_patched_nn_linear_forward``,
  ``ShardingType``, ``XLAShard``, ``XLAShardedTensor``: ``xla_sharding``.
"""

from __future__ import annotations

import torch

import lazax.modes as lx

from ..._sharded import unwrap
from .mesh import HybridMesh, Mesh, get_1d_mesh, get_global_mesh, set_global_mesh
from .xla_sharding import (
    MarkShardingFunction,
    ShardingSpec,
    ShardingType,
    XLAPatchedLinear,
    XLAShard,
    XLAShardedTensor,
    _mark_manual_sharding,
    apply_backward_optimization_barrier,
    disable_manual_sharding,
    enable_manual_sharding,
    mark_sharding_with_gradients,
    xla_patched_nn_linear_forward,
)

__all__ = [
    "HybridMesh",
    "MarkShardingFunction",
    "Mesh",
    "ShardingSpec",
    "ShardingType",
    "XLAPatchedLinear",
    "XLAShard",
    "XLAShardedTensor",
    "_mark_manual_sharding",
    "apply_backward_optimization_barrier",
    "clear_sharding",
    "disable_manual_sharding",
    "enable_manual_sharding",
    "get_1d_mesh",
    "get_global_mesh",
    "mark_sharding",
    "mark_sharding_with_gradients",
    "set_global_mesh",
    "xla_patched_nn_linear_forward",
]


def mark_sharding(t, mesh=None, partition_spec=()) -> XLAShardedTensor:
    """Shard ``t`` over ``mesh`` (the global mesh when None), in place; returns it as an
    ``XLAShardedTensor`` (while dynamo traces: ``t`` itself, constrained in the graph)."""
    mesh = mesh if mesh is not None else get_global_mesh()
    if mesh is None:
        raise ValueError("mark_sharding: no mesh given and no global mesh set")
    if torch.compiler.is_compiling():
        return lx.mark_sharding(t, mesh, tuple(partition_spec))
    t = unwrap(t)
    lx.mark_sharding(t, mesh, tuple(partition_spec))
    return XLAShardedTensor(t)


def clear_sharding(t):
    """``t`` back on one device; returns ``t``."""
    lx.clear_sharding(unwrap(t))
    return t
