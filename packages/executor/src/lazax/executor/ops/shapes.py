"""Shape-making ops and factories: triu/tril, arange, linspace/logspace, tril_indices/
triu_indices, kaiser_window, flip, rot90, roll, repeat, constant_pad_nd, diag_embed,
channel_shuffle.

Contract (as every op family, see ``_registry``): each rule computes the aten op's
result for the output spec torch infers. ``arange`` scalars arrive as plain Python
numbers (the tensor layer never lifts them: they decide the length, which comes from
torch's meta kernel). ``linspace``/``logspace`` follow torch's CPU kernel: the first
half counts up from ``start``, the second down from ``end`` (so both ends are exact),
integer results step in float64 and truncate. ``tril_indices``/``triu_indices`` are
computed on the device from the row lengths (no constant the size of the result).
``kaiser_window`` is torch's CPU kernel's formula (the other windows are composites of
ops lowered elsewhere): ``i0(beta * sqrt(|1 - ((n - a) / a)^2|)) / i0(beta)`` with
``a = (N - 1) / 2`` over ``N + 1`` points when periodic (the last dropped), in the
result's precision (float32 for half types).
"""

from __future__ import annotations

import jax.numpy as jnp
import jax.scipy.special as jsp
import torch
from jax import lax

from ._promotion import opmath, round_to
from ._registry import lowering

aten = torch.ops.aten


def _dim(dim, ndim):
    return dim % max(ndim, 1)


# -- shapes and factories --------------------------------------------------------------


@lowering(aten.triu.default)
def triu(ctx, x, diagonal=0):
    return jnp.triu(x, diagonal)


@lowering(aten.tril.default)
def tril(ctx, x, diagonal=0):
    return jnp.tril(x, diagonal)


def _arange(ctx, start, step):
    dtype = jnp.dtype(ctx.dtype)
    if jnp.issubdtype(dtype, jnp.integer):
        # torch accumulates an integer arange in int64: float start and step are
        # truncated first (arange(2.1, -2.9, -1.0, dtype=int64) is 2, 1, 0, -1).
        start, step, compute = int(start), int(step), jnp.int64
    elif dtype == jnp.float64:
        compute = jnp.float64
    else:
        compute = jnp.float32
    i = lax.iota(compute, ctx.shape[0])
    return jnp.asarray(start).astype(compute) + jnp.asarray(step).astype(compute) * i


@lowering(aten.arange.default)
def arange(ctx, end, **kwargs):
    return _arange(ctx, 0, 1)


@lowering(aten.arange.start)
def arange_start(ctx, start, end, **kwargs):
    return _arange(ctx, start, 1)


@lowering(aten.arange.start_step)
def arange_start_step(ctx, start, end, step=1, **kwargs):
    return _arange(ctx, start, step)


def _spaced(ctx, start, end, steps):
    """torch's ``linspace`` values: ``start`` and ``end`` first converted to the result
    dtype (``Scalar::to``: rounded, or wrapped for integers), then stepped in float64
    for an integer result, else in the result's own precision, each step rounded to it
    (half types compute in float32). torch's CPU kernel also steps per SIMD chunk, which
    can move an integer result by one; that is not reproduced."""
    out = jnp.dtype(ctx.dtype)
    integral = jnp.issubdtype(out, jnp.integer) or out == jnp.bool_
    compute = jnp.dtype(jnp.float64) if integral else opmath(out)
    start = jnp.asarray(start).astype(out).astype(compute)
    end = jnp.asarray(end).astype(out).astype(compute)
    if steps == 1:
        return jnp.broadcast_to(start, (1,))
    r = lambda v: round_to(v, out)  # noqa: E731
    i = lax.iota(compute, steps)
    step = r((end - start) / (steps - 1))
    up = r(start + r(step * i))
    down = r(end - r(step * (steps - 1 - i)))
    return jnp.where(i < steps // 2, up, down)


@lowering(
    aten.linspace.default,
    aten.linspace.Tensor_Tensor,
    aten.linspace.Tensor_Scalar,
    aten.linspace.Scalar_Tensor,
)
def linspace(ctx, start, end, steps, **kwargs):
    return _spaced(ctx, start, end, steps)


@lowering(aten.kaiser_window.default, aten.kaiser_window.periodic, aten.kaiser_window.beta)
def kaiser_window(ctx, window_length, periodic=True, beta=12.0, **kwargs):
    out = jnp.dtype(ctx.dtype)
    if window_length <= 1:  # torch: empty, or one 1
        return jnp.ones((window_length,), out)
    n = window_length + 1 if periodic else window_length
    compute = opmath(out)
    points = lax.iota(out, n).astype(compute)  # torch's arange, in the result dtype
    alpha = jnp.asarray((n - 1) / 2.0, compute)
    b = jnp.asarray(beta, compute)
    ratio = (points - alpha) / alpha
    window = jsp.i0(b * jnp.sqrt(jnp.abs(1 - ratio * ratio))) / jsp.i0(b)
    return window[:window_length].astype(out)


@lowering(
    aten.logspace.default,
    aten.logspace.Tensor_Tensor,
    aten.logspace.Tensor_Scalar,
    aten.logspace.Scalar_Tensor,
)
def logspace(ctx, start, end, steps, base=10.0, **kwargs):
    """``base ** linspace``, the power taken in float64 as torch's ``std::pow(double,
    ...)``."""
    if steps == 1:  # torch: base ** start, start not rounded to the result dtype
        exponent = jnp.asarray(start).astype(jnp.float64).reshape(1)
    else:
        exponent = _spaced(ctx, start, end, steps).astype(jnp.float64)
    return jnp.power(jnp.asarray(base).astype(jnp.float64), exponent)


def _triangle_indices(ctx, first, count):
    """``(2, N)`` row and column indices of a triangle whose row ``r`` holds ``count[r]``
    columns starting at ``first[r]``, in row-major order."""
    n = ctx.shape[1]
    if n == 0:
        return jnp.zeros((2, 0), ctx.dtype)
    ends = jnp.cumsum(count)
    k = lax.iota(jnp.int64, n)
    r = jnp.searchsorted(ends, k, side="right")
    c = first[r] + k - (ends[r] - count[r])
    return jnp.stack([r, c]).astype(ctx.dtype)


@lowering(aten.tril_indices.default)
def tril_indices(ctx, row, col, offset=0, **kwargs):
    rows = lax.iota(jnp.int64, row)
    count = jnp.clip(rows + 1 + offset, 0, col)
    return _triangle_indices(ctx, jnp.zeros_like(rows), count)


@lowering(aten.triu_indices.default)
def triu_indices(ctx, row, col, offset=0, **kwargs):
    rows = lax.iota(jnp.int64, row)
    first = jnp.clip(rows + offset, 0, col)
    return _triangle_indices(ctx, first, col - first)


@lowering(aten.rot90.default)
def rot90(ctx, x, k=1, dims=(0, 1)):
    """Rotate by ``k`` quarter turns from ``dims[0]`` towards ``dims[1]``."""
    return jnp.rot90(x, k, tuple(_dim(d, x.ndim) for d in dims))


@lowering(aten.channel_shuffle.default)
def channel_shuffle(ctx, x, groups):
    """(N, C, *) -> (N, groups, C / groups, *), the two group dims swapped, back."""
    n, c, *rest = x.shape
    grouped = x.reshape(n, groups, c // groups, *rest)
    return jnp.swapaxes(grouped, 1, 2).reshape(x.shape)


@lowering(aten.flip.default)
def flip(ctx, x, dims):
    if x.ndim == 0:
        return x
    return jnp.flip(x, tuple(_dim(d, x.ndim) for d in dims))


@lowering(aten.roll.default)
def roll(ctx, x, shifts, dims=()):
    if x.ndim == 0:
        return x
    if not dims:
        return jnp.roll(x.reshape(-1), shifts[0]).reshape(x.shape)
    return jnp.roll(x, tuple(shifts), tuple(_dim(d, x.ndim) for d in dims))


@lowering(aten.repeat.default)
def repeat(ctx, x, repeats):
    lead = len(repeats) - x.ndim
    return jnp.tile(x.reshape((1,) * lead + x.shape), tuple(repeats))


@lowering(aten.constant_pad_nd.default)
def constant_pad_nd(ctx, x, pad, value=0):
    config = [(0, 0, 0)] * x.ndim
    # pad lists (low, high) pairs from the last dimension backwards; negative crops.
    for j in range(len(pad) // 2):
        config[x.ndim - 1 - j] = (pad[2 * j], pad[2 * j + 1], 0)
    return lax.pad(x, jnp.asarray(value).astype(x.dtype), config)


@lowering(aten.diag_embed.default)
def diag_embed(ctx, x, offset=0, dim1=-2, dim2=-1):
    n = x.shape[-1]
    square = x[..., :, None] * jnp.eye(n, dtype=x.dtype)
    k = abs(offset)
    # Shift the diagonal by padding: above it (offset > 0) or below it.
    pads = [(0, k), (k, 0)] if offset >= 0 else [(k, 0), (0, k)]
    square = jnp.pad(square, [(0, 0)] * (x.ndim - 1) + pads)
    ndim = x.ndim + 1
    return jnp.moveaxis(square, (-2, -1), (dim1 % ndim, dim2 % ndim))
