"""Uneven splits: a value whose split dimension does not divide over its mesh axes.

jax refuses such an array (``device_put`` and jit's output shardings raise
``IndivisibleError``), while XLA partitions uneven shardings inside a program. So a value
split unevenly is held padded: its buffer's split dimensions are rounded up to a
multiple of their devices, zeros after the value, so each device holds an equal piece
(torch_xla's layout too: the last pieces are zero-padded, some may be all padding).

Contract:
- ``padded_shape(shape, sharding)``: the buffer shape that holds a value of ``shape``
  laid out by ``sharding`` (``shape`` itself for a sharding that splits nothing
  unevenly, and for anything but a ``NamedSharding``).
- ``trim(array, shape)``: the value of a buffer (device or numpy) that holds ``shape``
  padded: a slice of its leading corner (``array`` itself when nothing is padded).
- ``padded(array, sharding)``: a jax or numpy array (unpadded value) padded with zeros
  to ``padded_shape(array.shape, sharding)``; works inside a traced function and outside.
"""

from __future__ import annotations

import math
from typing import Any

import jax.numpy as jnp
import numpy as np
from jax.sharding import NamedSharding

__all__ = ["padded", "padded_shape", "trim"]


def padded_shape(shape, sharding: Any) -> tuple[int, ...]:
    shape = tuple(shape)
    if not isinstance(sharding, NamedSharding):
        return shape
    sizes = dict(zip(sharding.mesh.axis_names, sharding.mesh.devices.shape))
    out = list(shape)
    for dim, entry in enumerate(tuple(sharding.spec)[: len(shape)]):
        if entry is None:
            continue
        axes = entry if isinstance(entry, tuple) else (entry,)
        ways = math.prod(sizes[a] for a in axes)
        out[dim] = -(-shape[dim] // ways) * ways
    return tuple(out)


def trim(array, shape):
    shape = tuple(shape)
    if tuple(array.shape) == shape:
        return array
    return array[tuple(slice(0, n) for n in shape)]


def padded(array, sharding: Any):
    target = padded_shape(array.shape, sharding)
    if target == tuple(array.shape):
        return array
    widths = [(0, t - n) for t, n in zip(target, array.shape)]
    # Host data is padded on the host: it then goes to each device in one transfer.
    return (np.pad if isinstance(array, np.ndarray) else jnp.pad)(array, widths)
