"""Masked and flat-index writes: masked_scatter (+ backward), the masked index ops of
torch's padding/upsampling decompositions, put, max_unpool2d/3d.

Contract:
- ``masked_scatter(self, mask, source)``: ``self`` and ``mask`` broadcast together;
  where ``mask`` is true the output takes the consecutive elements of ``source`` (read
  flat, row-major, as many as there are true entries), elsewhere ``self``. The output
  shape is static: the ``k``-th true entry (``cumsum(mask) - 1``) gathers
  ``source.flatten()[k]``. A ``source`` with fewer elements than ``mask`` has true
  entries raises torch's ``RuntimeError("Number of elements of source < number of ones
  in mask")`` through a device-side check (``ctx.check``; the gather index is clamped,
  so the program itself stays in bounds; with ``LAZAX_CHECKS=0`` those entries hold the
  last element of ``source``). A ``uint8`` mask raises the CPU kernel's error (the
  meta kernel accepts it).
- ``masked_scatter_backward(grad, mask, sizes)``: ``grad.masked_select(mask)`` (mask
  and grad broadcast) written into the first entries of a zero buffer of
  ``prod(sizes)`` elements, viewed as ``sizes``. More selected elements than that:
  torch's CPU kernel raises (a view's shape error), lazax drops the extra ones (autograd
  never asks for it: ``sizes`` is the source's, which the forward checked).
- ``_unsafe_masked_index(self, mask, indices, fill)``: ``where(mask, self[indices],
  fill)`` with each index tensor clamped to ``[0, size - 1]`` of its dimension (torch's
  decomposition does the same: the masked-out entries may point anywhere); ``self``
  with no elements gives ``fill`` everywhere. ``None`` in ``indices`` is a whole
  dimension, as in ``index``.
- ``_unsafe_masked_index_put_accumulate(self, mask, indices, values)``:
  ``index_put(self, indices, where(mask, values, 0), accumulate=True)``, indices
  clamped to ``[-size, size - 1]`` (negative ones wrap), as torch's decomposition.
- ``put(self, index, source, accumulate)``: ``self.flatten()[index] = source`` (or
  ``+=``), negative indices wrap; out-of-range ones raise torch's ``IndexError``
  through a device-side check. Repeated indices without ``accumulate`` keep one of the
  written values (torch promises no order either). The CPU kernel's argument errors
  (a non-long index, another dtype in ``source``, element counts that differ) are
  raised with its words before tracing.
- ``max_unpool2d(self, indices, output_size)`` / ``max_unpool3d(self, indices,
  output_size, stride, padding)``: each plane (the leading ``N, C`` or ``C``
  dimensions) is a zero buffer of ``prod(output_size)`` elements in which
  ``self``'s values are written at their flat ``indices``; an index outside
  ``[0, prod(output_size))`` raises torch's ``RuntimeError("Found an invalid max
  index: ...")`` through a device-side check (the write itself drops it). Repeated
  indices keep one of the values.
"""

from __future__ import annotations

import math

import jax.numpy as jnp
import torch

from ._arguments import argument_check, scalar_type_name
from ._bounds import check_index
from ._registry import lowering
from .indexing import _key, _update

aten = torch.ops.aten


# -- masked_scatter ---------------------------------------------------------------------


@argument_check(aten.masked_scatter.default)
def _check_masked_scatter(x, mask, source):
    if mask.dtype != torch.bool:
        raise RuntimeError(
            "masked_scatter_ only supports boolean masks, but got mask with dtype "
            f"{scalar_type_name(mask.dtype)}"
        )


@lowering(aten.masked_scatter.default, checked=True)
def masked_scatter(ctx, x, mask, source):
    shape = ctx.shape
    x = jnp.broadcast_to(x, shape)
    flat_mask = jnp.broadcast_to(mask != 0, shape).reshape(-1)
    if flat_mask.size == 0:
        return x
    rank = jnp.cumsum(flat_mask.astype(jnp.int64)) - 1
    ctx.check(
        rank[-1] >= source.size,
        None,
        "RuntimeError",
        "Number of elements of source < number of ones in mask",
    )
    if source.size == 0:  # nothing to read: any true entry is the error above
        return x
    taken = jnp.take(source.reshape(-1), jnp.clip(rank, 0, source.size - 1))
    return jnp.where(flat_mask, taken.astype(x.dtype), x.reshape(-1)).reshape(shape)


@lowering(aten.masked_scatter_backward.default)
def masked_scatter_backward(ctx, grad, mask, sizes):
    numel = math.prod(sizes)
    full = jnp.broadcast_shapes(grad.shape, mask.shape)
    flat_grad = jnp.broadcast_to(grad, full).reshape(-1)
    flat_mask = jnp.broadcast_to(mask != 0, full).reshape(-1)
    out = jnp.zeros((numel,), ctx.dtype)
    if flat_mask.size == 0 or numel == 0:
        return out.reshape(ctx.shape)
    rank = jnp.cumsum(flat_mask.astype(jnp.int64)) - 1
    # Unselected entries go to ``numel`` (out of bounds): the scatter drops them.
    target = jnp.where(flat_mask, rank, numel)
    out = out.at[target].set(flat_grad.astype(ctx.dtype), mode="drop")
    return out.reshape(ctx.shape)


# -- the masked index ops of torch's decompositions -------------------------------------


@lowering(aten._unsafe_masked_index.default)
def unsafe_masked_index(ctx, x, mask, indices, fill):
    fill = jnp.asarray(fill).astype(ctx.dtype)
    if x.size == 0:
        return jnp.broadcast_to(fill, ctx.shape)
    clamped = [
        None if i is None else jnp.clip(i, 0, x.shape[position] - 1)
        for position, i in enumerate(indices)
    ]
    taken = x[_key(clamped)].astype(ctx.dtype)
    return jnp.broadcast_to(jnp.where(mask != 0, taken, fill), ctx.shape)


@lowering(aten._unsafe_masked_index_put_accumulate.default)
def unsafe_masked_index_put_accumulate(ctx, x, mask, indices, values):
    if x.size == 0:
        return x
    clamped = [
        None if i is None else jnp.clip(i, -x.shape[position], x.shape[position] - 1)
        for position, i in enumerate(indices)
    ]
    values = jnp.where(mask != 0, values.astype(x.dtype), jnp.zeros((), x.dtype))
    return _update(x.at[_key(clamped)], "add", x.dtype)(values)


# -- put ----------------------------------------------------------------------------------


@argument_check(aten.put.default)
def _check_put(x, index, source, accumulate=False):
    if index.dtype != torch.int64:
        raise RuntimeError(
            f"put_(): Expected a long tensor for index, but got {scalar_type_name(index.dtype)}"
        )
    if x.dtype != source.dtype:
        raise RuntimeError(
            "put_(): self and source expected to have the same dtype, but got "
            f"self.dtype = {scalar_type_name(x.dtype)} and "
            f"source.dtype = {scalar_type_name(source.dtype)}"
        )
    if source.numel() != index.numel():
        raise IndexError(
            "put_(): Expected source and index to have the same number of elements, but "
            f"got source.numel() = {source.numel()}, index.numel() = {index.numel()}"
        )


@lowering(aten.put.default, checked=True)
def put(ctx, x, index, source, accumulate=False):
    n = x.size
    message = f"out of range: tried to access index {{value}} on a tensor of {n} elements."
    check_index(ctx, index, n, "IndexError", message, negative=True)
    if index.size == 0:
        return x
    flat = index.reshape(-1)
    flat = jnp.where(flat < 0, flat + n, flat)
    at = x.reshape(-1).at[flat]
    values = source.reshape(-1).astype(x.dtype)
    out = _update(at, "add" if accumulate else "set", x.dtype)(values, mode="drop")
    return out.reshape(x.shape)


# -- max_unpool ---------------------------------------------------------------------------


def _unpool(ctx, x, indices, output_size):
    spatial = len(output_size)
    planes = x.shape[: x.ndim - spatial]
    size = math.prod(output_size)
    sizes = "x".join(str(s) for s in output_size)
    message = f"Found an invalid max index: {{value}} (output volumes are of size {sizes})"
    check_index(ctx, indices, size, "RuntimeError", message)
    count = math.prod(planes)
    values = x.reshape(count, -1).astype(ctx.dtype)
    where = indices.reshape(count, -1)
    where = jnp.where(where < 0, size, where)  # dropped (``.at`` would wrap it)
    rows = jnp.arange(count)[:, None]
    out = jnp.zeros((count, size), ctx.dtype)
    out = out.at[rows, where].set(values, mode="drop")
    return out.reshape(ctx.shape)


@lowering(aten.max_unpool2d.default, checked=True)
def max_unpool2d(ctx, x, indices, output_size):
    return _unpool(ctx, x, indices, tuple(output_size))


@lowering(aten.max_unpool3d.default, checked=True)
def max_unpool3d(ctx, x, indices, output_size, stride, padding):
    return _unpool(ctx, x, indices, tuple(output_size))
