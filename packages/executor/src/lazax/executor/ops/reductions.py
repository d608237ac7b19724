"""Reductions: sum/nansum/mean/prod, amax/amin/aminmax, max/min (+indices),
argmax/argmin, var/std, any/all, count_nonzero, logsumexp, cumsum/cumprod/logcumsumexp,
cummax/cummin, median/kthvalue, vector norms.

Contract: every rule reduces with ``keepdims=True`` and reshapes to the output shape
torch's meta kernel gave (``ctx.shape``), so ``keepdim``, 0-dim inputs and "no dims
means all dims" need no case of their own. Sums and moments of float16/bfloat16 inputs
accumulate in float32, as torch's CPU kernels do; integer and bool sums accumulate in
the output dtype torch picked (int64). Index outputs are int64: max/min/argmax/argmin
point at the first extreme value, cummax/cummin at the latest (torch's rules), NaN
counting as the largest. A Scalar norm order other than 0/+-1 is a run-time parameter,
so the norm picks its formula with ``where`` (2, +-inf, or the general p-norm).
"""

from __future__ import annotations

import jax.numpy as jnp
import numpy as np
import torch
from jax import lax

from ._arguments import argument_check, type_meta_name
from ._registry import lowering

aten = torch.ops.aten


def _axes(x, dim):
    """Normalised reduction axes; ``None`` (all) for no dim or an empty dim list."""
    if dim is None:
        return None
    if isinstance(dim, int):
        dim = [dim]
    if len(dim) == 0:
        return None
    if x.ndim == 0:
        return ()
    return tuple(sorted({d % x.ndim for d in dim}))


def _low(dtype) -> bool:
    dtype = jnp.dtype(dtype)
    return jnp.issubdtype(dtype, jnp.floating) and dtype.itemsize < 4


def _acc(dtype):
    """The dtype torch accumulates ``dtype`` results in."""
    return jnp.float32 if _low(dtype) else jnp.dtype(dtype)


@lowering(aten.sum.default, aten.sum.dim_IntList)
def sum_(ctx, x, dim=None, keepdim=False, *, dtype=None):
    return jnp.sum(x.astype(_acc(ctx.dtype)), _axes(x, dim), keepdims=True).reshape(ctx.shape)


@lowering(aten.mean.default, aten.mean.dim)
def mean(ctx, x, dim=None, keepdim=False, *, dtype=None):
    return jnp.mean(x.astype(_acc(ctx.dtype)), _axes(x, dim), keepdims=True).reshape(ctx.shape)


@lowering(aten.prod.default, aten.prod.dim_int)
def prod(ctx, x, dim=None, keepdim=False, *, dtype=None):
    return jnp.prod(x.astype(_acc(ctx.dtype)), _axes(x, dim), keepdims=True).reshape(ctx.shape)


@lowering(aten.amax.default, aten.max.default)
def amax(ctx, x, dim=(), keepdim=False):
    return jnp.max(x, _axes(x, dim), keepdims=True).reshape(ctx.shape)


@lowering(aten.amin.default, aten.min.default)
def amin(ctx, x, dim=(), keepdim=False):
    return jnp.min(x, _axes(x, dim), keepdims=True).reshape(ctx.shape)


@argument_check(aten.aminmax.out)
def check_aminmax_out(x, *, dim=None, keepdim=False, min, max):
    """The structured kernel's out dtype check (the meta kernel casts instead)."""
    for out in (min, max):
        if out.dtype != x.dtype:
            raise RuntimeError(
                f"Expected out tensor to have dtype {type_meta_name(x.dtype)}, but got "
                f"{type_meta_name(out.dtype)} instead"
            )


@lowering(aten.aminmax.default)
def aminmax(ctx, x, *, dim=None, keepdim=False):
    axes = _axes(x, dim)
    lo = jnp.min(x, axes, keepdims=True).reshape(ctx.out[0][0])
    hi = jnp.max(x, axes, keepdims=True).reshape(ctx.out[1][0])
    return lo, hi


def _arg(x, dim, largest: bool):
    """Index of the first max (min) along ``dim`` (flattened when None), keepdims."""
    if x.dtype == jnp.bool_:
        x = x.astype(jnp.int8)
    if dim is None:
        x = x.reshape(-1)
        axis = 0
    elif x.ndim == 0:
        return jnp.zeros((), jnp.int64)
    else:
        axis = dim % x.ndim
    # jnp.argmax/argmin return the first extreme and treat NaN as extreme, like torch.
    fn = jnp.argmax if largest else jnp.argmin
    return fn(x, axis=axis, keepdims=True)


@lowering(aten.argmax.default)
def argmax(ctx, x, dim=None, keepdim=False):
    return _arg(x, dim, True).reshape(ctx.shape)


@lowering(aten.argmin.default)
def argmin(ctx, x, dim=None, keepdim=False):
    return _arg(x, dim, False).reshape(ctx.shape)


def _extreme_dim(ctx, x, dim, largest):
    index = _arg(x, dim, largest)
    if x.ndim == 0:
        return x, index
    values = jnp.take_along_axis(x, index, axis=dim % x.ndim)
    return values.reshape(ctx.out[0][0]), index.reshape(ctx.out[1][0])


@lowering(aten.max.dim)
def max_dim(ctx, x, dim, keepdim=False):
    return _extreme_dim(ctx, x, dim, True)


@lowering(aten.min.dim)
def min_dim(ctx, x, dim, keepdim=False):
    return _extreme_dim(ctx, x, dim, False)


def _moments(x, dim, correction, out_dtype):
    """(var, mean) with keepdims, in the accumulation dtype of ``out_dtype``."""
    axes = _axes(x, dim)
    acc = _acc(out_dtype)
    x = x.astype(jnp.promote_types(acc, x.dtype)) if jnp.iscomplexobj(x) else x.astype(acc)
    n = x.size if axes is None else int(np.prod([x.shape[a] for a in axes], dtype=np.int64))
    mean = jnp.mean(x, axes, keepdims=True)
    centered = x - mean
    if jnp.iscomplexobj(centered):
        squares = (centered.real * centered.real + centered.imag * centered.imag).astype(acc)
    else:
        squares = centered * centered
    correction = 1 if correction is None else correction
    # torch divides by max(0, N - correction): 0/0 gives NaN, x/0 gives inf.
    denominator = jnp.maximum(jnp.asarray(n - correction, acc), 0)
    var = jnp.sum(squares, axes, keepdims=True) / denominator
    return var, mean


@lowering(aten.var.correction)
def var(ctx, x, dim=None, *, correction=None, keepdim=False):
    return _moments(x, dim, correction, ctx.dtype)[0].reshape(ctx.shape)


@lowering(aten.std.correction)
def std(ctx, x, dim=None, *, correction=None, keepdim=False):
    return jnp.sqrt(_moments(x, dim, correction, ctx.dtype)[0]).reshape(ctx.shape)


@lowering(aten.var_mean.correction)
def var_mean(ctx, x, dim=None, *, correction=None, keepdim=False):
    v, m = _moments(x, dim, correction, ctx.dtype)
    return v.reshape(ctx.out[0][0]), m.reshape(ctx.out[1][0])


@lowering(aten.std_mean.correction)
def std_mean(ctx, x, dim=None, *, correction=None, keepdim=False):
    v, m = _moments(x, dim, correction, ctx.dtype)
    return jnp.sqrt(v).reshape(ctx.out[0][0]), m.reshape(ctx.out[1][0])


@lowering(aten.any.default, aten.any.dim, aten.any.dims)
def any_(ctx, x, dim=None, keepdim=False):
    return jnp.any(x != 0, _axes(x, dim), keepdims=True).reshape(ctx.shape)


@lowering(aten.all.default, aten.all.dim, aten.all.dims)
def all_(ctx, x, dim=None, keepdim=False):
    return jnp.all(x != 0, _axes(x, dim), keepdims=True).reshape(ctx.shape)


@lowering(aten.logsumexp.default)
def logsumexp(ctx, x, dim, keepdim=False):
    axes = _axes(x, dim)
    x = x.astype(_acc(ctx.dtype))
    top = jnp.max(x, axes, keepdims=True)
    # An infinite max would give inf - inf = NaN; torch shifts by 0 there instead.
    top = jnp.where(jnp.isinf(top), 0, top)
    out = jnp.log(jnp.sum(jnp.exp(x - top), axes, keepdims=True)) + top
    return out.reshape(ctx.shape)


def _scan(fn, ctx, x, dim):
    x = x.astype(_acc(ctx.dtype))
    if x.ndim == 0:
        return x
    return fn(x, axis=dim % x.ndim)


@lowering(aten.cumsum.default)
def cumsum(ctx, x, dim, *, dtype=None):
    return _scan(jnp.cumsum, ctx, x, dim)


@lowering(aten.cumprod.default)
def cumprod(ctx, x, dim, *, dtype=None):
    return _scan(jnp.cumprod, ctx, x, dim)


def _vector_norm(ctx, x, p, dim):
    axes = _axes(x, dim)
    acc = _acc(ctx.dtype)
    a = jnp.abs(x).astype(acc)

    def total(v):
        return jnp.sum(v, axes, keepdims=True)

    # Empty reductions are fine for the max/min norms too, as in torch's 2-norm.
    biggest = jnp.max(a, axes, keepdims=True, initial=0)
    smallest = jnp.min(a, axes, keepdims=True, initial=jnp.inf)
    if p is None:
        p = 2
    if isinstance(p, (int, float)):
        # 0, 1 and -1 arrive as plain numbers (so do infinities from an int/float slot).
        if p == 0:
            return total((a != 0).astype(acc))
        if p == 1:
            return total(a)
        if p == 2:
            return jnp.sqrt(total(a * a))
        if p == float("inf"):
            return biggest
        if p == float("-inf"):
            return smallest
        return total(a**p) ** (1.0 / p)
    # A Scalar ord other than 0/+-1 is a traced 0-dim parameter: choose at run time.
    p = p.astype(acc)
    general = total(a**p) ** (1 / p)
    out = jnp.where(p == 2, jnp.sqrt(total(a * a)), general)
    out = jnp.where(p == jnp.inf, biggest, out)
    return jnp.where(p == -jnp.inf, smallest, out)


@lowering(aten.linalg_vector_norm.default)
def linalg_vector_norm(ctx, x, ord=2, dim=None, keepdim=False, *, dtype=None):
    return _vector_norm(ctx, x, ord, dim).reshape(ctx.shape)


@lowering(aten.norm.Scalar, aten.norm.ScalarOpt_dim)
def norm(ctx, x, p=2, dim=None, keepdim=False):
    return _vector_norm(ctx, x, p, dim).reshape(ctx.shape)


@lowering(aten.nansum.default)
def nansum(ctx, x, dim=None, keepdim=False, *, dtype=None):
    x = x.astype(_acc(ctx.dtype))
    return jnp.sum(jnp.where(jnp.isnan(x), 0, x), _axes(x, dim), keepdims=True).reshape(ctx.shape)


@lowering(aten.count_nonzero.default, aten.count_nonzero.dim_IntList)
def count_nonzero(ctx, x, dim=None):
    return jnp.sum(x != 0, _axes(x, dim), dtype=jnp.int64, keepdims=True).reshape(ctx.shape)


@lowering(aten.logcumsumexp.default)
def logcumsumexp(ctx, x, dim):
    x = x.astype(_acc(ctx.dtype))
    if x.ndim == 0:
        return x
    return lax.cumlogsumexp(x, axis=dim % x.ndim)


def _cum_extreme(ctx, x, dim, largest):
    """(running max/min, index of it): ties and NaN take the later index, as torch."""
    if x.ndim == 0:
        return x, jnp.zeros((), jnp.int64)
    axis = dim % x.ndim
    index = lax.broadcasted_iota(jnp.int64, x.shape, axis)

    def pick(a, b):
        (va, ia), (vb, ib) = a, b
        better = vb >= va if largest else vb <= va
        if jnp.issubdtype(x.dtype, jnp.floating):
            better = jnp.isnan(vb) | (~jnp.isnan(va) & better)
        return jnp.where(better, vb, va), jnp.where(better, ib, ia)

    return lax.associative_scan(pick, (x, index), axis=axis)


@lowering(aten.cummax.default)
def cummax(ctx, x, dim):
    return _cum_extreme(ctx, x, dim, True)


@lowering(aten.cummin.default)
def cummin(ctx, x, dim):
    return _cum_extreme(ctx, x, dim, False)


def _kth(x, axis, k):
    """(k-th smallest along axis, its index), keepdims; ``k`` an int or a keepdims array."""
    order = jnp.argsort(x, axis=axis, stable=True)
    if isinstance(k, int):
        pos = lax.slice_in_dim(order, k, k + 1, axis=axis)
    else:
        pos = jnp.take_along_axis(order, k.astype(order.dtype), axis=axis)
    return jnp.take_along_axis(x, pos, axis=axis), pos


@lowering(aten.median.default)
def median(ctx, x):
    flat = x.reshape(-1)
    value = jnp.sort(flat)[(flat.shape[0] - 1) // 2]
    if jnp.issubdtype(x.dtype, jnp.floating):
        # NaN sorts last; torch's median is NaN when any element is.
        value = jnp.where(jnp.any(jnp.isnan(flat)), jnp.nan, value)
    return value


@lowering(aten.median.dim)
def median_dim(ctx, x, dim, keepdim=False):
    if x.ndim == 0:
        return x, jnp.zeros((), jnp.int64)
    axis = dim % x.ndim
    k = (x.shape[axis] - 1) // 2
    if jnp.issubdtype(x.dtype, jnp.floating):
        # With NaN in a row torch returns NaN and the position of that row's first NaN,
        # which a stable sort puts right after the numbers.
        numbers = jnp.sum(~jnp.isnan(x), axis, keepdims=True)
        k = jnp.where(numbers < x.shape[axis], numbers, k)
    values, index = _kth(x, axis, k)
    return values.reshape(ctx.out[0][0]), index.reshape(ctx.out[1][0])


@lowering(aten.kthvalue.default)
def kthvalue(ctx, x, k, dim=-1, keepdim=False):
    if x.ndim == 0:
        return x, jnp.zeros((), jnp.int64)
    values, index = _kth(x, dim % x.ndim, k - 1)
    return values.reshape(ctx.out[0][0]), index.reshape(ctx.out[1][0])
