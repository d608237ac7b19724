"""``index_reduce`` (``Tensor.index_reduce``: "prod", "mean", "amax", "amin").

Contract: ``index_reduce(self, dim, index, source, reduce, include_self=True)`` reduces
each slice ``source[..., i, ...]`` (along ``dim``) into ``self[..., index[i], ...]``, as
torch's CPU kernel: with ``include_self=False`` a slot some index names starts from the
reduction's identity (1; -inf/+inf, or the integer type's lowest/highest) instead of its
own value; "mean" divides the sum by the count of values reduced into the slot (itself
included when ``include_self``), floor division for integer dtypes, and leaves a slot no
index names as it was. Sums and products run in the input's dtype, as the CPU kernel
(which adds/multiplies in place); the order of repeated indices' updates is XLA's.
A NaN in "amax"/"amin" wins (the CPU kernel propagates it). Errors as the CPU kernel:
an out-of-range (or negative) index raises ``IndexError: index out of range in self``
(a device-side check); the shape check the meta kernel skips is ``index_add``'s; bool
raises torch's "not implemented". Its backward is composed by torch of ops lowered
elsewhere (gather, index_select, scatter, where, ...).
"""

from __future__ import annotations

import jax.numpy as jnp
import torch

from ._arguments import argument_check
from ._bounds import IN_SELF, check_index
from ._registry import lowering
from .indexing import check_index_add

aten = torch.ops.aten

_KIND = {"prod": "multiply", "amax": "max", "amin": "min"}


@argument_check(aten.index_reduce.default)
def check_index_reduce(x, dim, index, source, reduce, *, include_self=True):
    if x.dtype == torch.bool:
        raise NotImplementedError("\"index_func_\" not implemented for 'Bool'")
    check_index_add(x, dim, index, source)


def _identity(reduce, dtype):
    if reduce == "prod":
        return jnp.ones((), dtype)
    if jnp.issubdtype(dtype, jnp.floating):
        return jnp.asarray(-jnp.inf if reduce == "amax" else jnp.inf, dtype)
    info = jnp.iinfo(dtype)
    return jnp.asarray(info.min if reduce == "amax" else info.max, dtype)


@lowering(aten.index_reduce.default, checked=True)
def index_reduce(ctx, x, dim, index, source, reduce, *, include_self=True):
    flat = x.reshape(1) if x.ndim == 0 else x
    d = dim % flat.ndim
    check_index(ctx, index, flat.shape[d], "IndexError", IN_SELF)
    src = source.reshape(1) if source.ndim == 0 else source
    src = src.astype(x.dtype)
    where = (slice(None),) * d + (index.reshape(-1),)
    if index.size == 0:
        return x.reshape(ctx.shape)
    if not include_self or reduce == "mean":
        touched = jnp.zeros(flat.shape, jnp.bool_).at[where].set(True)
    if reduce == "mean":
        zero = jnp.zeros((), x.dtype)
        total = flat if include_self else jnp.where(touched, zero, flat)
        total = total.at[where].add(src)
        ones = jnp.ones(src.shape, x.dtype)
        count = jnp.zeros(flat.shape, x.dtype).at[where].add(ones)
        if include_self:
            count = count + 1
        count = jnp.maximum(count, jnp.ones((), x.dtype))
        if jnp.issubdtype(x.dtype, jnp.integer):
            mean = jnp.floor_divide(total, count)
        else:
            mean = total / count
        return jnp.where(touched, mean, flat).reshape(ctx.shape)
    base = flat if include_self else jnp.where(touched, _identity(reduce, x.dtype), flat)
    return getattr(base.at[where], _KIND[reduce])(src).reshape(ctx.shape)
