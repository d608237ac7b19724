"""Indexing ops: cat/stack, advanced indexing (index, index_put), index_select,
gather/scatter (+ reductions), index_add/fill/copy, take (shape-making ops and
factories live in ``shapes.py``, sorting in ``sorting.py``).

Contract:
- In aten's index lists ``None`` means "this dimension whole" (a full slice), never a
  new axis; integer index tensors follow numpy's placement rule, as torch does.
- Boolean masks in ``index`` have a data-dependent shape: torch's meta kernel cannot
  size the output, so such calls never reach this rule. ``index_put`` with a single
  boolean mask (the only tensor index) is lowered as a ``where``; masks mixed with
  integer index tensors become ``nonzero`` indices sized by those tensors; a mix whose
  count nothing fixes (several masks alone) raises ``NotImplementedError``.
- Out-of-range indices raise as on the CPU, with torch's type and message, through
  device-side checks (``_bounds``; XLA itself clamps or drops them).
- Writes with repeated indices and no accumulation keep one of the written values, as
  torch's CPU kernels promise no order either.
"""

from __future__ import annotations

import jax.numpy as jnp
import torch
from jax import lax

from ._arguments import argument_check
from ._bounds import IN_SELF, bounds_message, check_index
from ._registry import lowering

aten = torch.ops.aten


def _dim(dim, ndim):
    return dim % max(ndim, 1)


# -- cat / stack -----------------------------------------------------------------------


@lowering(aten.cat.default)
def cat(ctx, tensors, dim=0):
    # torch skips legacy empty 1-d tensors (shape (0,)) when concatenating n-d ones.
    kept = [t for t in tensors if not (t.ndim == 1 and t.shape[0] == 0)]
    if not kept:
        return jnp.zeros(ctx.shape, ctx.dtype)
    return jnp.concatenate([t.astype(ctx.dtype) for t in kept], _dim(dim, kept[0].ndim))


@lowering(aten.stack.default)
def stack(ctx, tensors, dim=0):
    return jnp.stack([t.astype(ctx.dtype) for t in tensors], dim % (tensors[0].ndim + 1))


# -- advanced indexing -----------------------------------------------------------------


def _is_mask(i) -> bool:
    return i is not None and i.dtype in (jnp.bool_, jnp.uint8)


def _key(indices):
    return tuple(slice(None) if i is None else i for i in indices)


def _check_indices(ctx, x, indices):
    """torch numbers the dimension among the index tensors (``x[:, i]``: dimension 0)."""
    k = 0
    for position, i in enumerate(indices):
        if i is None:
            continue
        if not _is_mask(i):
            size = x.shape[position]
            check_index(ctx, i, size, "IndexError", bounds_message(k, size), negative=True)
        k += 1


@lowering(aten.index.Tensor, checked=True)
def index(ctx, x, indices):
    _check_indices(ctx, x, indices)
    if any(_is_mask(i) for i in indices):
        raise NotImplementedError("lazax: boolean-mask indexing has a data-dependent shape")
    return x[_key(indices)]


lowering(aten._unsafe_index.Tensor)(index)  # the same rule, unchecked (upsampling)


def _put_mask(x, indices, values, accumulate):
    """``x[..., mask, ...] = values`` (or ``+=``) with one mask and full slices around."""
    position = 0  # the first dimension the mask covers
    mask = None
    for i in indices:
        if i is None:
            position += 1
        else:
            mask = i != 0
            break
    k = mask.ndim
    region = x.shape[position : position + k]
    post = x.ndim - position - k
    # values line up (from the right) with pre + (K,) + post, K = number of true entries.
    k_axis = values.ndim - 1 - post
    if k_axis >= 0 and values.shape[k_axis] != 1:
        # The j-th true entry (row-major, as nonzero orders them) takes values[j].
        rank = jnp.cumsum(mask.reshape(-1).astype(jnp.int64)) - 1
        rank = jnp.maximum(rank, 0).reshape(region)
        v = jnp.take(values, rank, axis=k_axis)
    elif k_axis >= 0:
        v = values.reshape(values.shape[:k_axis] + (1,) * k + values.shape[k_axis + 1 :])
    else:
        v = values
    v = jnp.broadcast_to(v.astype(x.dtype), x.shape)
    m = mask.reshape((1,) * position + region + (1,) * post)
    if accumulate:
        return x + jnp.where(m, v, jnp.zeros((), x.dtype))
    return jnp.where(m, v, x)


def _masks_as_indices(indices):
    """Masks mixed with integer index tensors, as the integer tensors nonzero() gives.

    The count of true entries is data-dependent; torch requires it to match the other
    index tensors' (broadcast) last dimension, so that dimension sizes the expansion.
    """
    others = [i for i in indices if i is not None and not _is_mask(i)]
    shape = jnp.broadcast_shapes(*(o.shape for o in others))
    if not shape or shape[-1] == 1:
        raise NotImplementedError(
            "lazax: index_put mixing a boolean mask with index tensors that do not fix "
            "the number of selected elements"
        )
    expanded = []
    for i in indices:
        if _is_mask(i):
            expanded.extend(jnp.nonzero(i != 0, size=shape[-1]))
        else:
            expanded.append(i)
    return expanded


@lowering(aten.index_put.default, checked=True)
def index_put(ctx, x, indices, values, accumulate=False):
    _check_indices(ctx, x, indices)
    masks = [i for i in indices if _is_mask(i)]
    if masks:
        if len(masks) == 1 and all(i is None or _is_mask(i) for i in indices):
            return _put_mask(x, indices, values, accumulate)
        indices = _masks_as_indices(indices)
    at = x.at[_key(indices)]
    values = values.astype(x.dtype)
    return _update(at, "add" if accumulate else "set", x.dtype)(values)


lowering(aten._unsafe_index_put.default)(index_put)  # unchecked


@lowering(aten.index_select.default, checked=True)
def index_select(ctx, x, dim, idx):
    check_index(ctx, idx, x.shape[_dim(dim, x.ndim)] if x.ndim else 1, "IndexError", IN_SELF)
    if x.ndim == 0:
        return jnp.take(x.reshape(1), idx.reshape(-1), axis=0).reshape(ctx.shape)
    return jnp.take(x, idx.reshape(-1), axis=_dim(dim, x.ndim)).reshape(ctx.shape)


@lowering(aten.take.default, checked=True)
def take(ctx, x, idx):
    message = f"out of range: tried to access index {{value}} on a tensor of {x.size} elements."
    check_index(ctx, idx, x.size, "IndexError", message, negative=True)
    return jnp.take(x.reshape(-1), idx)


def _along(x, dim, idx):
    """The index tuple that addresses ``x[..., idx, ...]`` along ``dim`` (``idx`` 1-d)."""
    return (slice(None),) * _dim(dim, x.ndim) + (idx.reshape(-1),)


def _check_along(ctx, x, dim, idx, error, message=None, negative=False, prefix=""):
    """An index along ``dim`` of ``x`` (a 0-d ``x`` counts as size 1)."""
    d = _dim(dim, x.ndim)
    size = x.shape[d] if x.ndim else 1
    check_index(ctx, idx, size, error, message or bounds_message(d, size, prefix), negative)


@argument_check(aten.index_add.default)
def check_index_add(x, dim, index, source, *, alpha=1):
    """``index_add``'s shape check, which the meta kernel skips."""
    self_sizes, source_sizes = list(x.shape), list(source.shape)
    if source.dim() != 0 and x.dim() != 0:
        d = dim % x.dim()
        del self_sizes[d]
        if d < len(source_sizes):
            del source_sizes[d]
    if self_sizes != source_sizes:
        raise RuntimeError(
            "source tensor shape must match self tensor shape, excluding the specified "
            f"dimension. Got self.shape = {list(x.shape)} source.shape = {list(source.shape)}"
        )


@lowering(aten.index_add.default, checked=True)
def index_add(ctx, x, dim, idx, source, *, alpha=1):
    _check_along(ctx, x, dim, idx, "IndexError", IN_SELF)
    flat = x.reshape(1) if x.ndim == 0 else x
    source = source.reshape(1) if source.ndim == 0 else source
    if not (type(alpha) in (int, float) and alpha == 1):
        source = source * alpha
    add = _update(flat.at[_along(flat, dim, idx)], "add", x.dtype)
    return add(source.astype(x.dtype)).reshape(ctx.shape)


@lowering(aten.index_copy.default, checked=True)
def index_copy(ctx, x, dim, idx, source):
    _check_along(ctx, x, dim, idx, "IndexError", prefix="index_copy_(): ")
    flat = x.reshape(1) if x.ndim == 0 else x
    source = source.reshape(1) if source.ndim == 0 else source
    return flat.at[_along(flat, dim, idx)].set(source.astype(x.dtype)).reshape(ctx.shape)


@lowering(aten.index_fill.int_Scalar, aten.index_fill.int_Tensor, checked=True)
def index_fill(ctx, x, dim, idx, value):
    _check_along(ctx, x, dim, idx, "IndexError", negative=True)
    flat = x.reshape(1) if x.ndim == 0 else x
    value = jnp.asarray(value).astype(x.dtype)
    return flat.at[_along(flat, dim, idx)].set(value).reshape(ctx.shape)


# -- gather / scatter ------------------------------------------------------------------


def _grid(idx, dim):
    """Index tuple for gather/scatter: ``idx`` along ``dim``, positions elsewhere."""
    coords = [lax.broadcasted_iota(jnp.int64, idx.shape, d) for d in range(idx.ndim)]
    coords[dim] = idx
    return tuple(coords)


def _as_1d(*arrays):
    return [a.reshape(1) if a.ndim == 0 else a for a in arrays]


@lowering(aten.gather.default, checked=True)
def gather(ctx, x, dim, idx, sparse_grad=False):
    _check_along(ctx, x, dim, idx, "RuntimeError")
    if idx.size == 0:  # torch takes an empty index of any rank: nothing is read
        return jnp.zeros(ctx.shape, x.dtype)
    x1, idx1 = _as_1d(x, idx)
    return x1[_grid(idx1, _dim(dim, x1.ndim))].reshape(ctx.shape)


def _src(src, idx, dtype):
    """``src`` cut to ``idx``'s shape (torch only reads that corner), or a scalar."""
    src = jnp.asarray(src).astype(dtype)
    if src.ndim == 0:
        return jnp.broadcast_to(src, idx.shape)
    return src[tuple(slice(0, n) for n in idx.shape)]


_AT = {
    None: "set",
    "add": "add",
    "sum": "add",
    "multiply": "multiply",
    "prod": "multiply",
    "amax": "max",
    "amin": "min",
}


# XLA has no add or multiply on bool; torch's bool sum is "any", its product "all".
_BOOL_UPDATE = {"add": "max", "multiply": "min"}


def _update(at, kind: str, dtype):
    """``at.<kind>``, ``add``/``multiply`` read as or/and on bool."""
    if dtype == jnp.bool_:
        kind = _BOOL_UPDATE.get(kind, kind)
    return getattr(at, kind)


def _scatter(ctx, x, dim, idx, src, reduce=None, include_self=True):
    _check_along(ctx, x, dim, idx, "RuntimeError")
    if idx.size == 0:  # an empty index of any rank writes nothing
        return x.reshape(ctx.shape)
    x1, idx1 = _as_1d(x, idx)
    grid = _grid(idx1, _dim(dim, x1.ndim))
    src = _src(src, idx1, x.dtype)
    if not include_self or reduce == "mean":
        touched = jnp.zeros(x1.shape, jnp.bool_).at[grid].set(True)
    if reduce == "mean":
        total = x1 if include_self else jnp.where(touched, jnp.zeros((), x.dtype), x1)
        total = total.at[grid].add(src)
        count = jnp.zeros(x1.shape, x.dtype).at[grid].add(jnp.ones((), x.dtype))
        if include_self:
            count = count + 1
        count = jnp.maximum(count, 1)
        if jnp.issubdtype(x.dtype, jnp.integer):
            mean = jnp.floor_divide(total, count)
        else:
            mean = total / count
        return jnp.where(touched, mean, x1).reshape(ctx.shape)
    base = x1
    if not include_self:
        # Touched positions start from the reduction's identity instead of self.
        if reduce in ("sum", "add"):
            identity = jnp.zeros((), x.dtype)
        elif reduce in ("prod", "multiply"):
            identity = jnp.ones((), x.dtype)
        elif jnp.issubdtype(x.dtype, jnp.floating):
            identity = jnp.asarray(-jnp.inf if reduce == "amax" else jnp.inf, x.dtype)
        else:
            info = jnp.iinfo(x.dtype) if x.dtype != jnp.bool_ else None
            if info is None:
                identity = jnp.asarray(reduce == "amin", x.dtype)
            else:
                identity = jnp.asarray(info.min if reduce == "amax" else info.max, x.dtype)
        base = jnp.where(touched, identity, x1)
    return _update(base.at[grid], _AT[reduce], x.dtype)(src).reshape(ctx.shape)


@lowering(aten.scatter.src, aten.scatter.value, checked=True)
def scatter(ctx, x, dim, idx, src):
    return _scatter(ctx, x, dim, idx, src)


@lowering(aten.scatter.reduce, aten.scatter.value_reduce, checked=True)
def scatter_reduce_legacy(ctx, x, dim, idx, src, *, reduce):
    return _scatter(ctx, x, dim, idx, src, reduce)


@lowering(aten.scatter_add.default, checked=True)
def scatter_add(ctx, x, dim, idx, src):
    return _scatter(ctx, x, dim, idx, src, "add")


@lowering(aten.scatter_reduce.two, checked=True)
def scatter_reduce(ctx, x, dim, idx, src, reduce, *, include_self=True):
    return _scatter(ctx, x, dim, idx, src, reduce, include_self)
