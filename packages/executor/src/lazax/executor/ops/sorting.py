"""Sorting and searching: sort (stable or not), topk, searchsorted, bucketize,
nonzero_static.

Contract: values and int64 indices as torch returns them. Ties in ``topk`` and in a
non-stable sort may come back in another index order than torch's CPU kernel (torch
documents none); ``sort(stable=True)`` matches exactly. ``nonzero_static`` lists the
first ``size`` nonzero positions in row-major order, padded with ``fill_value``
(``nonzero``, whose length is the data's, is ``nonzero_static`` after a host read of
the count: ``hooks.data_dependent``).
"""

from __future__ import annotations

import math

import jax
import jax.numpy as jnp
import torch
from jax import lax

from ._arguments import argument_check
from ._registry import lowering

aten = torch.ops.aten


def _sort(ctx, x, dim, descending):
    if x.ndim == 0:
        return x, jnp.zeros((), jnp.int64)
    axis = dim % max(x.ndim, 1)
    # Stable, so ties keep their order as in torch's CPU sort; NaN sorts as the largest.
    order = jnp.argsort(x, axis=axis, stable=True, descending=descending)
    return jnp.take_along_axis(x, order, axis=axis), order


@lowering(aten.sort.default)
def sort(ctx, x, dim=-1, descending=False):
    return _sort(ctx, x, dim, descending)


@lowering(aten.sort.stable)
def sort_stable(ctx, x, *, stable=None, dim=-1, descending=False):
    return _sort(ctx, x, dim, descending)


@lowering(aten.topk.default)
def topk(ctx, x, k, dim=-1, largest=True, sorted=True):
    if x.ndim == 0:
        return x, jnp.zeros((), jnp.int64)
    axis = dim % max(x.ndim, 1)
    moved = jnp.moveaxis(x, axis, -1)
    if largest and jnp.issubdtype(x.dtype, jnp.floating):
        _, order = lax.top_k(moved, k)
    elif not largest and jnp.issubdtype(x.dtype, jnp.floating):
        _, order = lax.top_k(-moved, k)
    else:
        order = jnp.argsort(moved, axis=-1, stable=True, descending=largest)[..., :k]
    values = jnp.take_along_axis(moved, order, axis=-1)
    return jnp.moveaxis(values, -1, axis), jnp.moveaxis(order.astype(jnp.int64), -1, axis)


# -- searchsorted / bucketize / diag_embed ---------------------------------------------


def _searchsorted(seq, values, right, sorter=None):
    if sorter is not None:
        seq = jnp.take_along_axis(seq, sorter, axis=-1)
    values = jnp.asarray(values)
    side = "right" if right else "left"
    if seq.ndim == 1:
        return jnp.searchsorted(seq, values, side=side)
    # One sorted row per leading index of values (torch's batched form).
    rows = seq.reshape(-1, seq.shape[-1])
    found = jax.vmap(lambda s, v: jnp.searchsorted(s, v, side=side))(
        rows, values.reshape(rows.shape[0], -1)
    )
    return found.reshape(values.shape)


@lowering(aten.searchsorted.Tensor, aten.searchsorted.Scalar)
def searchsorted(ctx, seq, values, *, out_int32=False, right=False, side=None, sorter=None):
    if math.prod(ctx.shape) == 0 or seq.shape[-1] == 0:
        # Nothing to search, or an empty sequence: every value goes at position 0.
        return jnp.zeros(ctx.shape, ctx.dtype)
    return _searchsorted(seq, values, right or side == "right", sorter)


@argument_check(aten.bucketize.Tensor, aten.bucketize.Scalar)
def check_bucketize(values, boundaries, *, out_int32=False, right=False):
    if boundaries.dim() != 1:
        raise RuntimeError(
            f"boundaries tensor must be 1 dimension, but got dim({boundaries.dim()})"
        )


@lowering(aten.bucketize.Tensor, aten.bucketize.Scalar)
def bucketize(ctx, values, boundaries, *, out_int32=False, right=False):
    return _searchsorted(boundaries, values, right)


@lowering(aten.nonzero_static.default)
def nonzero_static(ctx, x, *, size, fill_value=-1):
    if x.ndim == 0:
        return jnp.zeros(ctx.shape, jnp.int64)
    if x.size == 0:  # jnp.nonzero pads an empty input with 0, not fill_value
        return jnp.full(ctx.shape, fill_value, jnp.int64)
    found = jnp.nonzero(x != 0, size=size, fill_value=fill_value)
    return jnp.stack(found, axis=-1).astype(jnp.int64)
