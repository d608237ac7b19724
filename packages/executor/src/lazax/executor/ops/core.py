"""Lowerings the tensor layer itself relies on: copies, casts, factories, view I/O.

``lazax::view_gather`` / ``lazax::view_scatter`` read and write a strided view of a
contiguous base, given the view's (size, stride, storage offset): a contiguous block
becomes a slice or ``dynamic_update_slice``; anything else a gather/scatter over the
flat positions torch's strides describe.
"""

from __future__ import annotations

import math

import jax.numpy as jnp
import numpy as np
import torch
from jax import lax

from ._promotion import cast
from ._registry import lowering
from .pseudo import COPY_TO, FREED, OPTIMIZATION_BARRIER, VIEW_GATHER, VIEW_SCATTER

aten = torch.ops.aten


def _contiguous(size, stride) -> bool:
    expected = 1
    for n, s in reversed(list(zip(size, stride))):
        if n != 1 and s != expected:
            return False
        expected *= n
    return True


def _positions(size, stride, offset) -> np.ndarray:
    index = np.full((), offset, dtype=np.int64)
    for n, s in zip(size, stride):
        index = index[..., None] + np.arange(n, dtype=np.int64) * s
    return index.reshape(-1)


def _as_units(flat, dtype):
    """``flat`` (1-d) read as elements of ``dtype``: how torch lays out a view that
    reinterprets its storage (``.real``/``.imag``/``view_as_real`` of a complex tensor,
    ``x.view(torch.int32)`` of a float32 one)."""
    if flat.dtype == dtype:
        return flat
    # XLA bitcasts no bool: a bool is its byte (0 or 1), as in torch's storage.
    if flat.dtype == jnp.bool_:
        return _as_units(flat.astype(jnp.uint8), dtype)
    if dtype == jnp.bool_:
        return _as_units(flat, jnp.uint8) != 0
    if jnp.issubdtype(flat.dtype, jnp.complexfloating) and not jnp.issubdtype(
        dtype, jnp.complexfloating
    ):
        return _as_units(jnp.stack([flat.real, flat.imag], axis=-1).reshape(-1), dtype)
    if jnp.issubdtype(dtype, jnp.complexfloating) and not jnp.issubdtype(
        flat.dtype, jnp.complexfloating
    ):  # XLA bitcasts no complex: a complex element is its (real, imaginary) pair
        pairs = _as_units(flat, jnp.finfo(dtype).dtype).reshape(-1, 2)
        return lax.complex(pairs[:, 0], pairs[:, 1]).astype(dtype)
    return lax.bitcast_convert_type(flat, dtype).reshape(-1)


def _from_units(units, dtype, shape):
    """The inverse of ``_as_units``: the storage (of ``dtype`` and ``shape``) again."""
    if units.dtype == dtype:
        return units.reshape(shape)
    if units.dtype == jnp.bool_:
        units = units.astype(jnp.uint8)
    if dtype == jnp.bool_:
        return _from_units(units, jnp.uint8, shape) != 0
    if jnp.issubdtype(units.dtype, jnp.complexfloating):
        pairs = jnp.stack([units.real, units.imag], axis=-1).reshape(-1)
        return _from_units(pairs, dtype, shape)
    if jnp.issubdtype(dtype, jnp.complexfloating):
        part = jnp.finfo(dtype).dtype
        pairs = _as_units(units, part).reshape(-1, 2)
        return lax.complex(pairs[:, 0], pairs[:, 1]).astype(dtype).reshape(shape)
    ratio = jnp.dtype(dtype).itemsize // units.dtype.itemsize
    if ratio > 1:
        units = units.reshape(-1, ratio)
    return lax.bitcast_convert_type(units, dtype).reshape(shape)


@lowering(aten.view.dtype)
def view_dtype(ctx, x, dtype):
    # torch reinterprets the bytes of each row (the last dimension is contiguous)
    return _as_units(x.reshape(-1), ctx.dtype).reshape(ctx.shape)


@lowering(VIEW_GATHER)
def view_gather(ctx, base, size, stride, offset):
    flat = _as_units(base.reshape(-1), ctx.dtype)
    n = math.prod(size)
    if _contiguous(size, stride):
        return lax.slice(flat, (offset,), (offset + n,)).reshape(size)
    return flat[_positions(size, stride, offset)].reshape(size)


@lowering(VIEW_SCATTER)
def view_scatter(ctx, base, value, size, stride, offset):
    # ``value`` has the view's dtype; unlike the base's, it reinterprets the storage.
    flat = _as_units(base.reshape(-1), value.dtype)
    value = value.reshape(-1)
    if _contiguous(size, stride):
        flat = lax.dynamic_update_slice(flat, value, (offset,))
    else:
        flat = flat.at[_positions(size, stride, offset)].set(value)
    return _from_units(flat, base.dtype, base.shape)


@lowering(COPY_TO)
def copy_to(ctx, value, shape, dtype):
    return jnp.broadcast_to(cast(value, ctx.dtype), shape)


@lowering(FREED)
def freed(ctx):
    return jnp.zeros(ctx.shape, ctx.dtype)


@lowering(OPTIMIZATION_BARRIER)
def optimization_barrier(ctx, value):
    return lax.optimization_barrier(value)


# The functional form of ``copy_`` (AOTAutograd writes a traced ``.grad`` this way):
# ``src`` (a tensor, or a number as in ``x.copy_(-1)``) broadcast to ``self``'s shape,
# in ``self``'s dtype.
@lowering(aten.copy.default)
def copy(ctx, self, src, non_blocking=False):
    return copy_to(ctx, jnp.asarray(src), ctx.shape, ctx.dtype)


@lowering(aten._to_copy.default, aten.clone.default, aten.lift_fresh_copy.default)
def to_copy(ctx, x, **kwargs):
    return cast(x, ctx.dtype)


# AOTAutograd graphs cast a Python float argument (a 0-dim CPU float64 tensor) this way.
@lowering(torch.ops.prims.convert_element_type.default)
def convert_element_type(ctx, x, dtype):
    return cast(x, ctx.dtype)


@lowering(
    aten.empty.memory_format,
    aten.empty_strided.default,
    aten.empty_like.default,
    aten.new_empty.default,
    aten.new_empty_strided.default,
    aten.zeros_like.default,
    aten.new_zeros.default,
    aten.zero.default,
)
def zeros(ctx, *args, **kwargs):
    return jnp.zeros(ctx.shape, ctx.dtype)


@lowering(aten.ones_like.default, aten.new_ones.default)
def ones(ctx, *args, **kwargs):
    return jnp.ones(ctx.shape, ctx.dtype)


@lowering(aten.full_like.default)
def full_like(ctx, x, fill_value, **kwargs):
    return jnp.full(ctx.shape, fill_value, ctx.dtype)


@lowering(aten.full.default)
def full(ctx, size, fill_value, **kwargs):
    return jnp.full(ctx.shape, jnp.asarray(fill_value).astype(ctx.dtype), ctx.dtype)


@lowering(aten.new_full.default)
def new_full(ctx, x, size, fill_value, **kwargs):
    return jnp.full(ctx.shape, fill_value, ctx.dtype)


@lowering(aten.fill.Scalar, aten.fill.Tensor)
def fill(ctx, x, value):
    return jnp.full(ctx.shape, jnp.asarray(value).astype(ctx.dtype), ctx.dtype)


@lowering(aten._efficientzerotensor.default)
def efficient_zero_tensor(ctx, size, **kwargs):
    # torch's autograd makes these for zero gradients (sgn's backward at real inputs);
    # on lazax they are plain zeros.
    return jnp.zeros(ctx.shape, ctx.dtype)


@lowering(aten.scalar_tensor.default)
def scalar_tensor(ctx, value, **kwargs):
    return jnp.asarray(value).astype(ctx.dtype)
