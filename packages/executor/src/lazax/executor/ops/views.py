"""View ops (their outputs alias their input) and reshapes.

The rules compute values only; aliasing, strides and write-back are the tensor layer's
(``state.values``). ``view``/``_unsafe_view``/``reshape`` are plain reshapes of the
logical value.
"""

from __future__ import annotations

import jax.numpy as jnp
import torch
from jax import lax

from ._registry import lowering
from .core import _positions
from .pseudo import contiguous_strides

aten = torch.ops.aten


@lowering(aten.detach.default, aten.alias.default, aten.lift_fresh.default)
def identity(ctx, x):
    return x


@lowering(
    aten.view.default,
    aten._unsafe_view.default,
    aten.reshape.default,
    aten._reshape_alias.default,
    aten.view_copy.default,
)
def view(ctx, x, *args):
    return x.reshape(ctx.shape)


@lowering(aten.t.default)
def t(ctx, x):
    return x.T if x.ndim == 2 else x


@lowering(aten.transpose.int)
def transpose(ctx, x, dim0, dim1):
    if x.ndim == 0:
        return x
    return jnp.swapaxes(x, dim0, dim1)


@lowering(aten.permute.default)
def permute(ctx, x, dims):
    return jnp.transpose(x, [d % max(x.ndim, 1) for d in dims]) if x.ndim else x


@lowering(aten.expand.default)
def expand(ctx, x, size, implicit=False):
    return jnp.broadcast_to(x, ctx.shape)


@lowering(aten.unsqueeze.default, aten.squeeze.default, aten.squeeze.dim, aten.squeeze.dims)
def unsqueeze(ctx, x, *dims):
    return x.reshape(ctx.shape)


@lowering(aten.slice.Tensor)
def slice_(ctx, x, dim=0, start=None, end=None, step=1):
    if x.ndim == 0:
        return x
    dim %= x.ndim
    n = x.shape[dim]
    start = 0 if start is None else start
    end = n if end is None else end
    start = max(0, min(n, start + n if start < 0 else start))
    end = max(start, min(n, end + n if end < 0 else end))
    return lax.slice_in_dim(x, start, end, step, axis=dim)


@lowering(aten.select.int)
def select(ctx, x, dim, index):
    dim %= x.ndim
    index = index + x.shape[dim] if index < 0 else index
    return lax.index_in_dim(x, index, axis=dim, keepdims=False)


@lowering(aten.split.Tensor, aten.split_with_sizes.default, aten.split.sizes)
def split(ctx, x, split_size, dim=0):
    dim %= max(x.ndim, 1)
    outs, start = [], 0
    for shape, _ in ctx.out:
        n = shape[dim]
        outs.append(lax.slice_in_dim(x, start, start + n, axis=dim))
        start += n
    return tuple(outs)


@lowering(aten.unbind.int)
def unbind(ctx, x, dim=0):
    dim %= x.ndim
    return tuple(lax.index_in_dim(x, i, axis=dim, keepdims=False) for i in range(x.shape[dim]))


@lowering(aten.diagonal.default)
def diagonal(ctx, x, offset=0, dim1=0, dim2=1):
    return jnp.diagonal(x, offset, dim1, dim2)


@lowering(aten.as_strided.default)
def as_strided(ctx, x, size, stride, storage_offset=None):

    # Strides here are relative to this tensor's own contiguous layout.
    flat = x.reshape(-1)
    return flat[_positions(size, stride, storage_offset or 0)].reshape(size)


@lowering(aten.unfold.default)
def unfold(ctx, x, dimension, size, step):
    if x.ndim == 0:  # torch: a 0-dim tensor unfolds into one window of its one element
        return jnp.broadcast_to(x, ctx.shape)
    dim = dimension % x.ndim
    count = ctx.shape[dim]
    pieces = [lax.slice_in_dim(x, i * step, i * step + size, axis=dim) for i in range(count)]
    stacked = jnp.stack(pieces, axis=dim)  # [..., count, size, ...]
    return jnp.moveaxis(stacked, dim + 1, -1)


@lowering(aten.view_as_real.default)
def view_as_real(ctx, x):
    return jnp.stack([x.real, x.imag], axis=-1)


@lowering(aten.view_as_complex.default)
def view_as_complex(ctx, x):
    # The last dimension (of size 2) holds the real and imaginary parts.
    return lax.complex(x[..., 0], x[..., 1]).astype(ctx.dtype)


# -- backward of views, and the functional "scatter" forms --------------------------


def _slice_index(shape, dim, start, end, step):
    n = shape[dim]
    start = 0 if start is None else start
    end = n if end is None else end
    start = max(0, min(n, start + n if start < 0 else start))
    end = max(start, min(n, end + n if end < 0 else end))
    index = [slice(None)] * len(shape)
    index[dim] = slice(start, end, step)
    return tuple(index)


@lowering(aten.slice_backward.default)
def slice_backward(ctx, grad, input_sizes, dim, start, end, step):
    dim %= len(input_sizes)
    zeros = jnp.zeros(ctx.shape, ctx.dtype)
    return zeros.at[_slice_index(ctx.shape, dim, start, end, step)].set(grad.astype(ctx.dtype))


@lowering(aten.slice_scatter.default)
def slice_scatter(ctx, x, src, dim=0, start=None, end=None, step=1):
    dim %= max(x.ndim, 1)
    return x.at[_slice_index(x.shape, dim, start, end, step)].set(src.astype(x.dtype))


def _select_index(shape, dim, index):
    dim %= len(shape)
    index = index + shape[dim] if index < 0 else index
    where = [slice(None)] * len(shape)
    where[dim] = index
    return tuple(where)


@lowering(aten.select_backward.default)
def select_backward(ctx, grad, input_sizes, dim, index):
    zeros = jnp.zeros(ctx.shape, ctx.dtype)
    return zeros.at[_select_index(ctx.shape, dim, index)].set(grad.astype(ctx.dtype))


@lowering(aten.select_scatter.default)
def select_scatter(ctx, x, src, dim, index):
    return x.at[_select_index(x.shape, dim, index)].set(src.astype(x.dtype))


@lowering(aten.diagonal_backward.default)
def diagonal_backward(ctx, grad, input_sizes, offset, dim1, dim2):
    return diagonal_scatter(ctx, jnp.zeros(ctx.shape, ctx.dtype), grad, offset, dim1, dim2)


@lowering(aten.diagonal_scatter.default)
def diagonal_scatter(ctx, x, src, offset=0, dim1=0, dim2=1):

    # Positions of the diagonal inside x's contiguous layout, as torch's strides say.
    strides = contiguous_strides(x.shape)
    dim1, dim2 = dim1 % x.ndim, dim2 % x.ndim
    start = offset * strides[dim2] if offset >= 0 else -offset * strides[dim1]
    length = src.shape[-1]
    rest = [d for d in range(x.ndim) if d not in (dim1, dim2)]
    size = tuple(x.shape[d] for d in rest) + (length,)
    stride = tuple(strides[d] for d in rest) + (strides[dim1] + strides[dim2],)
    flat = x.reshape(-1).at[_positions(size, stride, start)].set(src.astype(x.dtype).reshape(-1))
    return flat.reshape(x.shape)
