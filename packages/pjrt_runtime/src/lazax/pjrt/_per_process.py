"""Programs every process of the job runs on its own values, with collectives between
them: a traced training step with torch.distributed's collectives in it.

Contract:
- ``PROCESS_AXIS``: the name of the mesh axis a collective's lowering reduces or gathers
  over (``jax.lax.psum(x, PROCESS_AXIS)``, ...) inside such a program.
- ``processes_mesh(local_index=0)``: a mesh of one device per process, each process's
  local device ``local_index``, in process order (one process: a mesh of one device).
- ``per_process(fn, mesh)``: ``fn`` as a program over ``mesh`` in which each device
  computes on its own process's values: every argument and result is unsplit, and the
  body sees one process's value (``shard_map``, manual over the axis). jax's view of an
  argument or result is "replicated", which it is not (each device holds its own
  process's value): such arrays are made by ``to_global`` and read back only by
  ``to_local``, one process's piece, never as one global value.
- ``to_global(buffer, mesh)``: this process's buffer (or host number/array) as the
  argument such a program takes, without a copy when it is on this process's device of
  the mesh; ``to_local(array)``: a result as this process's buffer.
Every process must run the same program at the same point (as any collective asks):
the executor agrees on it before compiling (``barrier.agreement``).
"""

from __future__ import annotations

import functools

import jax
import numpy as np
from jax.sharding import Mesh, NamedSharding, PartitionSpec

__all__ = ["PROCESS_AXIS", "per_process", "processes_mesh", "replicated", "to_global", "to_local"]

PROCESS_AXIS = "processes"


@functools.cache
def processes_mesh(local_index: int = 0) -> Mesh:
    by_process: dict[int, list] = {}
    for device in jax.devices():
        by_process.setdefault(device.process_index, []).append(device)
    count = jax.process_count()
    try:
        chosen = [sorted(by_process[k], key=lambda d: d.id)[local_index] for k in range(count)]
    except (KeyError, IndexError):
        raise ValueError(
            f"collectives over the job's processes need local device {local_index} in "
            f"every process; some process has fewer devices"
        ) from None
    return Mesh(np.array(chosen), (PROCESS_AXIS,))


def replicated(mesh: Mesh) -> NamedSharding:
    return NamedSharding(mesh, PartitionSpec())


def per_process(fn, mesh: Mesh):
    def body(*args):
        return fn(*args)

    body.__name__ = body.__qualname__ = getattr(fn, "__name__", "per_process")
    # check_vma off: the results are declared unsplit (P()) though each device's differ;
    # that is this module's convention (see the contract), not a replication.
    return jax.shard_map(
        body, mesh=mesh, in_specs=PartitionSpec(), out_specs=PartitionSpec(), check_vma=False
    )


def to_global(buffer, mesh: Mesh) -> jax.Array:
    mine = mesh.devices[jax.process_index()]
    if not isinstance(buffer, jax.Array) or buffer.devices() != {mine}:
        buffer = jax.device_put(buffer, mine)
    return jax.make_array_from_single_device_arrays(buffer.shape, replicated(mesh), [buffer])


def to_local(array: jax.Array) -> jax.Array:
    return array.addressable_data(0)
