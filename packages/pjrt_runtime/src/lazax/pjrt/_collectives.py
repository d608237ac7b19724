"""Collectives over the job's processes, on buffers each process holds on its own device.

Contract: every function is called by every process of the job, in the same order, with
buffers of the same shape and dtype (what torch.distributed asks of its users); each
runs one XLA program over a mesh of one device per process (the first device of each),
whose collectives XLA inserts, and returns this process's result as a buffer on its
first device (asynchronously, as any execution).
- ``all_reduce(buffer, op)``: the elementwise reduction of every process's buffer; ``op``
  one of ``REDUCE_OPS`` (``"avg"``: the sum divided by the process count).
- ``all_gather(buffer)``: every process's buffer stacked, process order (shape
  ``(processes, *shape)``).
- ``broadcast(buffer, source)``: process ``source``'s buffer.
- ``reduce_scatter(buffer, op)``: ``buffer`` is ``(processes, *shape)``; process k gets
  the reduction over processes of row k.
"""

from __future__ import annotations

import functools

import jax
import jax.numpy as jnp
from jax.sharding import NamedSharding, PartitionSpec

from ._per_process import PROCESS_AXIS as _AXIS
from ._per_process import processes_mesh as _mesh

__all__ = ["REDUCE_OPS", "all_gather", "all_reduce", "broadcast", "reduce_scatter"]


def _combine(op: str, stacked, count: int):
    if op == "sum":
        return stacked.sum(axis=0, dtype=stacked.dtype)
    if op == "avg":
        total = stacked.sum(axis=0, dtype=stacked.dtype)
        if jnp.issubdtype(stacked.dtype, jnp.integer):
            return total // count
        return total / count
    if op == "product":
        return stacked.prod(axis=0, dtype=stacked.dtype)
    if op == "min":
        return stacked.min(axis=0)
    if op == "max":
        return stacked.max(axis=0)
    bitwise = {"band": jnp.bitwise_and, "bor": jnp.bitwise_or, "bxor": jnp.bitwise_xor}[op]
    return functools.reduce(bitwise, [stacked[k] for k in range(count)])


REDUCE_OPS = ("sum", "avg", "product", "min", "max", "band", "bor", "bxor")


def _stacked(buffer: jax.Array) -> jax.Array:
    """``(processes, *shape)`` over the mesh: row k is process k's buffer."""
    mesh = _mesh()
    mine = mesh.devices[jax.process_index()]
    piece = jax.device_put(buffer, mine)[None]
    sharding = NamedSharding(mesh, PartitionSpec(_AXIS))
    return jax.make_array_from_single_device_arrays((mesh.size, *buffer.shape), sharding, [piece])


@functools.cache
def _program(kind: str, op: str, arg: int):
    mesh = _mesh()
    count = mesh.size
    replicated = NamedSharding(mesh, PartitionSpec())
    if kind == "all_reduce":
        return jax.jit(lambda g: _combine(op, g, count), out_shardings=replicated)
    if kind == "all_gather":
        return jax.jit(lambda g: g, out_shardings=replicated)
    if kind == "broadcast":
        return jax.jit(lambda g: g[arg], out_shardings=replicated)
    # reduce_scatter: the reduction, split by rows over the processes.
    split = NamedSharding(mesh, PartitionSpec(_AXIS))
    return jax.jit(lambda g: _combine(op, g, count), out_shardings=split)


def _local(result: jax.Array) -> jax.Array:
    return result.addressable_data(0)


def all_reduce(buffer: jax.Array, op: str = "sum") -> jax.Array:
    if op not in REDUCE_OPS:
        raise ValueError(f"reduce op {op!r} is not one of {REDUCE_OPS}")
    return _local(_program("all_reduce", op, 0)(_stacked(buffer)))


def all_gather(buffer: jax.Array) -> jax.Array:
    return _local(_program("all_gather", "", 0)(_stacked(buffer)))


def broadcast(buffer: jax.Array, source: int) -> jax.Array:
    return _local(_program("broadcast", "", int(source))(_stacked(buffer)))


def reduce_scatter(buffer: jax.Array, op: str = "sum") -> jax.Array:
    if op not in REDUCE_OPS:
        raise ValueError(f"reduce op {op!r} is not one of {REDUCE_OPS}")
    return _local(_program("reduce_scatter", op, 0)(_stacked(buffer)))[0]
