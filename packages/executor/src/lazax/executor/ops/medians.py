"""Order statistics that skip NaN or count repeats: nanmedian, mode.

Contract:
- ``nanmedian(x)``: the lower median of ``x``'s non-NaN elements (the ``(m - 1) // 2``-th
  smallest of ``m``), NaN when every element is NaN or ``x`` is empty.
- ``nanmedian.dim(x, dim, keepdim)``: the same along ``dim``, with the index of that
  element; a row of NaN only gives NaN and the index of one of its NaN (lazax: the
  first; torch's CPU kernel: whichever its selection leaves there). Among equal values
  the index is the one a stable sort puts at the median's place (torch's selection
  picks any of them; the values always agree).
- ``mode(x, dim, keepdim)``: the most frequent value along ``dim`` and an index of it.
  As torch's CPU kernel (a sort, then a scan of the runs of equal values): among values
  equally frequent the smallest wins; the index is the last occurrence of that value
  (what torch's sort leaves last in the run for rows short enough to be insertion
  sorted; for longer rows its unstable sort may leave another one there). Every NaN is
  a run of its own (NaN != NaN), ``-0.0`` and ``0.0`` are one run whose value is the
  element last in it. A 0-dim ``x`` is its own mode, index 0.
"""

from __future__ import annotations

import jax.numpy as jnp
import torch
from jax import lax

from ._registry import lowering
from .reductions import _kth

aten = torch.ops.aten


def _is_float(x) -> bool:
    return jnp.issubdtype(x.dtype, jnp.floating)


@lowering(aten.nanmedian.default)
def nanmedian(ctx, x):
    flat = x.reshape(-1)
    if flat.size == 0:
        return jnp.full((), jnp.nan, ctx.dtype)
    ordered = jnp.sort(flat)  # NaN last
    if not _is_float(x):
        return ordered[(flat.size - 1) // 2]
    numbers = jnp.sum(~jnp.isnan(flat))
    return ordered[jnp.maximum(numbers - 1, 0) // 2]


@lowering(aten.nanmedian.dim)
def nanmedian_dim(ctx, x, dim, keepdim=False):
    if x.ndim == 0:
        return x, jnp.zeros((), jnp.int64)
    axis = dim % x.ndim
    if _is_float(x):
        numbers = jnp.sum(~jnp.isnan(x), axis, keepdims=True)
        k = jnp.maximum(numbers - 1, 0) // 2
    else:
        k = (x.shape[axis] - 1) // 2
    values, index = _kth(x, axis, k)
    return values.reshape(ctx.out[0][0]), index.reshape(ctx.out[1][0])


@lowering(aten.mode.default)
def mode(ctx, x, dim=-1, keepdim=False):
    if x.ndim == 0:
        return x, jnp.zeros((), jnp.int64)
    axis = dim % x.ndim
    moved = jnp.moveaxis(x, axis, -1)
    order = jnp.argsort(moved, axis=-1, stable=True)
    ordered = jnp.take_along_axis(moved, order, axis=-1)
    differs = ordered[..., 1:] != ordered[..., :-1]  # NaN differs from everything
    edge = jnp.ones(ordered.shape[:-1] + (1,), jnp.bool_)
    starts = jnp.concatenate([edge, differs], axis=-1)
    ends = jnp.concatenate([differs, edge], axis=-1)
    position = lax.broadcasted_iota(jnp.int64, ordered.shape, ordered.ndim - 1)
    run_start = lax.cummax(jnp.where(starts, position, 0), axis=ordered.ndim - 1)
    frequency = jnp.where(ends, position - run_start + 1, 0)
    # The first run (smallest value) of the highest frequency, at its last element.
    best = jnp.argmax(frequency, axis=-1, keepdims=True)
    values = jnp.take_along_axis(ordered, best, axis=-1)[..., 0]
    index = jnp.take_along_axis(order, best, axis=-1)[..., 0]
    return values.reshape(ctx.out[0][0]), index.astype(jnp.int64).reshape(ctx.out[1][0])
