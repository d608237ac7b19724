"""Global tensors of a job of several processes, built from and read as process parts.

Contract:
- ``global_tensor(local, mesh, partition_spec, global_shape=None)``: one lazax tensor
  laid out over ``mesh`` (which may span processes) from each process's own part
  ``local`` (a CPU tensor, or a lazax one, read first): the data-parallel batch that a
  ``DistributedSampler`` gives each process. jax's ``make_array_from_process_local_data``
  semantics: along a dimension split over processes, the processes' parts are placed
  in process order; a dimension not split over processes holds the same data in every
  process. ``global_shape`` defaults to the parts put end to end. The spec is checked
  as ``mark_sharding`` checks it (``ValueError``), every process must call it with the
  same ``mesh``, spec and shapes, and the result is as sharded as if ``mark_sharding``
  had placed it (in a job of one process, a dimension that does not divide is held
  padded, as ``mark_sharding`` holds it; across processes it must divide).
- ``local_part(t)``: this process's block of ``t``'s value as a new CPU tensor (runs
  ``t``'s pending work first): the inverse of ``global_tensor`` for a split dimension,
  the whole value for a replicated one. ``ValueError`` when this process's pieces are
  not one block (an axis order that interleaves processes).
"""

from __future__ import annotations

import torch

from lazax import ir

from ..barrier.executor import EXECUTOR
from ..state.dtypes import dtype_name
from ..state.layout import Layout
from ..tensor.lazy import LazyTensor, new_tensor
from ..tensor.transfer import from_cpu, host_tensor, to_cpu, to_numpy
from .sharding import normalize, owning, register_mesh

__all__ = ["global_tensor", "local_part"]


def global_tensor(local: torch.Tensor, mesh, partition_spec, global_shape=None) -> LazyTensor:
    if not isinstance(local, torch.Tensor):
        raise TypeError(f"global_tensor takes a tensor, but got {type(local).__name__}")
    if type(local) is LazyTensor:
        local = to_cpu(local)
    spec = normalize(mesh, partition_spec, tuple(local.shape), divides=False)
    runtime = EXECUTOR.runtime
    named = runtime.named_sharding(mesh.jax_mesh, spec)
    if global_shape is not None:
        global_shape = tuple(int(n) for n in global_shape)
    if runtime.process_count == 1 and global_shape in (None, tuple(local.shape)):
        # One process holds every part: its part is the value, split as mark_sharding
        # splits it (padded where a dimension does not divide), in one upload.
        register_mesh(named.mesh, mesh)
        return new_tensor(from_cpu(local, sharding=named), Layout(tuple(local.shape), local.dtype))
    try:
        buffer = runtime.global_array(to_numpy(local), named, global_shape)
    except ValueError as err:
        raise ValueError(
            f"global_tensor: this process's part of shape {tuple(local.shape)} does not "
            f"fit partition_spec {tuple(partition_spec)} over {mesh} "
            f"(global_shape {global_shape}): {err}"
        ) from None
    shape = tuple(buffer.shape)
    normalize(mesh, spec, shape)  # the global shape divides as mark_sharding's
    register_mesh(named.mesh, mesh)
    value = ir.device_data(ir.TensorSpec(shape, dtype_name(local.dtype)), buffer)
    return new_tensor(value, Layout(shape, local.dtype))


def local_part(t: torch.Tensor) -> torch.Tensor:
    t = owning(t, "local_part")
    storage = t._lz_storage
    EXECUTOR.sync_storages([storage])
    runtime = EXECUTOR.runtime
    buffer = storage.value.node.data
    try:
        array = runtime.local_part(buffer)
    except ValueError as err:
        raise ValueError(f"local_part: {err}") from None
    if runtime.process_count == 1:  # the whole value (held padded if split unevenly)
        return host_tensor(buffer, t.dtype, storage.spec.shape, read=lambda _: array)
    return host_tensor(buffer, t.dtype, array.shape, read=lambda _: array)
