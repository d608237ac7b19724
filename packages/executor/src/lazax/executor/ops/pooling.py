"""Pooling and upsampling: max pooling with indices (2-D, 3-D), average pooling (2-D,
3-D), adaptive average pooling, and nearest / nearest-exact / (bi/tri)linear
upsampling (1-D to 3-D), each with its backward.

Contract: float16/bfloat16 inputs are upcast to float32 (``_nn_common.acc_dtype``) for
the window sums and interpolation, as torch's CPU kernels do, and cast to torch's
output dtype once at the end. Index geometry (pool windows, ``ceil_mode``'s last
window, the average's divisor, upsampling sources and weights) follows torch's CPU
formulas, computed at trace time in the input's float precision. Max pooling follows
torch's kernels: the first maximum in window order wins, NaN counting as the maximum
(the last NaN, as torch's ``val > max || isnan(val)`` scan leaves it). Where nothing
reads the indices (``ctx.unread``: inference) the values come from XLA's plain max
window instead, JAX's program for max pooling: equal to torch's except that a window
holding both zeros may give +0.0 where torch gives the first one's sign, and a NaN
comes back as XLA's NaN. Max pooling's backward scatters through the saved indices;
the other backward rules are the ``jax.vjp`` of their forward rule, so the two agree
by construction.
"""

from __future__ import annotations

import math

import jax.numpy as jnp
import numpy as np
import torch
from jax import lax

from ._nn_common import acc_dtype, expand, vjp_of
from ._registry import lowering

aten = torch.ops.aten


# -- max pooling -----------------------------------------------------------------------


def _pool_params(n, kernel_size, stride, padding, dilation):
    kernel = expand(kernel_size, n)
    stride = expand(stride, n) if stride else kernel  # torch: no stride means the kernel
    return kernel, stride, expand(padding, n), expand(dilation, n)


def _max_pool(ctx, x, n, kernel_size, stride, padding, dilation):
    """(values, flat indices into each input plane), for n spatial dims (the last n).

    One variadic ``reduce_window`` over (value, index) pairs: XLA compiles it in a
    fraction of a second, where stacking every kernel offset's slice and taking an
    argmax took seconds for a 3x3x3 kernel and minutes for a batch of them.
    """
    kernel, stride, padding, dilation = _pool_params(n, kernel_size, stride, padding, dilation)
    out_size = tuple(ctx.shape[-n:])
    in_size = x.shape[-n:]
    lead = x.shape[:-n]
    if jnp.issubdtype(x.dtype, jnp.floating):
        lowest = jnp.array(-jnp.inf, x.dtype)
    else:
        lowest = jnp.array(jnp.iinfo(x.dtype).min, x.dtype)
    # Pad low by `padding` and high as far as the last window reaches (ceil_mode).
    pads = []
    for i in range(n):
        reach = (out_size[i] - 1) * stride[i] + (kernel[i] - 1) * dilation[i] + 1
        pads.append((padding[i], max(0, reach - in_size[i] - padding[i])))
    plane = jnp.arange(math.prod(in_size), dtype=jnp.int64).reshape(in_size)
    positions = jnp.broadcast_to(plane, x.shape)
    # Padding never wins a tie: it has the largest index.
    beyond = jnp.array(jnp.iinfo(jnp.int64).max, jnp.int64)

    def first_max(a, b):
        # torch's scan in window order keeps the first of equal maxima and moves to
        # every NaN: the smallest index among equals, the largest among NaNs.
        (va, ia), (vb, ib) = a, b
        nan_a, nan_b = jnp.isnan(va), jnp.isnan(vb)
        take_b = (
            (vb > va) | (nan_b & ~nan_a) | ((vb == va) & (ib < ia)) | (nan_a & nan_b & (ib > ia))
        )
        return jnp.where(take_b, vb, va), jnp.where(take_b, ib, ia)

    ones = (1,) * len(lead)
    window = {
        "window_dimensions": ones + tuple(kernel),
        "window_strides": ones + tuple(stride),
        "padding": [(0, 0)] * len(lead) + pads,
        "window_dilation": ones + tuple(dilation),
    }
    if 1 in ctx.unread:
        # Nothing reads the indices (inference): a plain max window, the program JAX's
        # max pooling compiles to, far faster than the pairwise reduction. Its values
        # may differ from torch's in the sign of a zero and in a NaN's bits.
        values = lax.reduce_window(x, lowest, lax.max, **window)
        return values, jnp.zeros(values.shape, jnp.int64)
    return lax.reduce_window((x, positions), (lowest, beyond), first_max, **window)


@lowering(aten.max_pool2d_with_indices.default)
def max_pool2d_with_indices(ctx, x, kernel_size, stride=(), padding=0, dilation=1, ceil_mode=False):
    return _max_pool(ctx, x, 2, kernel_size, stride, padding, dilation)


@lowering(aten.max_pool3d_with_indices.default)
def max_pool3d_with_indices(ctx, x, kernel_size, stride=(), padding=0, dilation=1, ceil_mode=False):
    return _max_pool(ctx, x, 3, kernel_size, stride, padding, dilation)


def _max_pool_backward(ctx, grad, x, indices, spatial):
    # Each output's gradient goes to the input position its index names (summed when
    # windows overlap), within its own (batch, channel) plane.
    lead = math.prod(x.shape[:-spatial])
    plane = math.prod(x.shape[-spatial:])
    acc = acc_dtype(ctx.dtype)
    g = grad.reshape(lead, -1).astype(acc)
    idx = indices.reshape(lead, -1)
    rows = lax.broadcasted_iota(jnp.int64, idx.shape, 0)
    return jnp.zeros((lead, plane), acc).at[rows, idx].add(g).reshape(x.shape)


@lowering(aten.max_pool2d_with_indices_backward.default)
def max_pool2d_with_indices_backward(
    ctx, grad, x, kernel_size, stride, padding, dilation, ceil_mode, indices
):
    return _max_pool_backward(ctx, grad, x, indices, 2)


@lowering(aten.max_pool3d_with_indices_backward.default)
def max_pool3d_with_indices_backward(
    ctx, grad, x, kernel_size, stride, padding, dilation, ceil_mode, indices
):
    return _max_pool_backward(ctx, grad, x, indices, 3)


# -- average pooling -------------------------------------------------------------------


def _avg_pool(x, n, out_size, kernel_size, stride, padding, include_pad, divisor, acc):
    kernel, stride, padding, _ = _pool_params(n, kernel_size, stride, padding, 1)
    lead = x.ndim - n
    in_size = x.shape[-n:]
    # Past the padded input on the high side, where ceil_mode's last window may reach.
    extra = [
        max(0, (o - 1) * s + k - i - 2 * p)
        for o, s, k, i, p in zip(out_size, stride, kernel, in_size, padding, strict=True)
    ]
    pads = [(p, p + e) for p, e in zip(padding, extra, strict=True)]
    window, strides = (1,) * lead + tuple(kernel), (1,) * lead + tuple(stride)
    xp = jnp.pad(x.astype(acc), [(0, 0)] * lead + pads)
    # A numpy init value keeps reduce_window a recognised (differentiable) sum.
    sums = lax.reduce_window(xp, np.array(0, acc), lax.add, window, strides, "VALID")
    sums = sums[(Ellipsis,) + tuple(slice(0, o) for o in out_size)]
    if divisor:
        return sums / divisor
    # torch's divisor: the window's size within input + padding (count_include_pad), or
    # within the input only; never the part past the padding.
    ones = jnp.ones(in_size, acc)
    if include_pad:
        ones = jnp.pad(ones, [(p, p) for p in padding], constant_values=1)
        ones = jnp.pad(ones, [(0, e) for e in extra])
    else:
        ones = jnp.pad(ones, pads)
    counts = lax.reduce_window(ones, np.array(0, acc), lax.add, tuple(kernel), stride, "VALID")
    return sums / counts[tuple(slice(0, o) for o in out_size)]


def _avg_pool_rule(n):
    def forward(
        ctx,
        x,
        kernel_size,
        stride=(),
        padding=0,
        ceil_mode=False,
        count_include_pad=True,
        divisor_override=None,
    ):
        out_size = tuple(ctx.shape[-n:])
        acc = acc_dtype(x.dtype)
        return _avg_pool(
            x, n, out_size, kernel_size, stride, padding, count_include_pad, divisor_override, acc
        )

    def backward(
        ctx,
        grad,
        x,
        kernel_size,
        stride,
        padding,
        ceil_mode,
        count_include_pad,
        divisor_override,
    ):
        out_size = tuple(grad.shape[-n:])
        acc = acc_dtype(x.dtype)

        def pool(xx):
            return _avg_pool(
                xx,
                n,
                out_size,
                kernel_size,
                stride,
                padding,
                count_include_pad,
                divisor_override,
                acc,
            )

        return vjp_of(pool, x.astype(acc), grad)

    return forward, backward


_avg2d, _avg2d_backward = _avg_pool_rule(2)
_avg3d, _avg3d_backward = _avg_pool_rule(3)
lowering(aten.avg_pool2d.default)(_avg2d)
lowering(aten.avg_pool2d_backward.default)(_avg2d_backward)
lowering(aten.avg_pool3d.default)(_avg3d)
lowering(aten.avg_pool3d_backward.default)(_avg3d_backward)


def _adaptive_avg_pool(x, out_size, acc):
    """Each output averages input[floor(k*I/O) : ceil((k+1)*I/O)] along each axis."""
    n = len(out_size)
    out = x.astype(acc)
    for j, o in enumerate(out_size):
        axis = x.ndim - n + j
        i = x.shape[axis]
        member = np.zeros((o, i), np.float32)
        for k in range(o):
            member[k, (k * i) // o : -(-((k + 1) * i) // o)] = 1
        summed = jnp.tensordot(
            out, jnp.asarray(member, acc), ((axis,), (1,)), precision=lax.Precision.HIGHEST
        )
        summed = jnp.moveaxis(summed, -1, axis)
        counts = jnp.asarray(member.sum(1), acc).reshape((o,) + (1,) * (x.ndim - axis - 1))
        out = summed / counts
    return out


@lowering(aten._adaptive_avg_pool2d.default, aten._adaptive_avg_pool3d.default)
def adaptive_avg_pool(ctx, x, output_size):
    n = len(output_size)
    return _adaptive_avg_pool(x, tuple(ctx.shape[-n:]), acc_dtype(x.dtype))


@lowering(aten._adaptive_avg_pool2d_backward.default)
def adaptive_avg_pool2d_backward(ctx, grad, x):
    acc = acc_dtype(x.dtype)
    return vjp_of(lambda xx: _adaptive_avg_pool(xx, grad.shape[-2:], acc), x.astype(acc), grad)


@lowering(aten._adaptive_avg_pool3d_backward.default)
def adaptive_avg_pool3d_backward(ctx, grad, x):
    acc = acc_dtype(x.dtype)
    return vjp_of(lambda xx: _adaptive_avg_pool(xx, grad.shape[-3:], acc), x.astype(acc), grad)


# -- upsampling ------------------------------------------------------------------------


def _scale(in_size, out_size, scale, dt):
    """torch's compute_scales_value: 1/scale when given, else in/out, in ``dt``."""
    if scale is not None and scale > 0:
        return dt(1.0 / scale)
    return dt(in_size) / dt(out_size)


def source_coordinates(i, o, scale, align_corners, dt):
    """torch's ``area_pixel_compute_source_index`` for the ``o`` outputs of an axis of
    ``i`` inputs, unclamped, in ``dt`` (linear modes clamp it at 0, cubic does not)."""
    dst = np.arange(o).astype(dt)
    if align_corners:
        return (dt(i - 1) / dt(o - 1) if o > 1 else dt(0)) * dst
    return _scale(i, o, scale, dt) * (dst + dt(0.5)) - dt(0.5)


def _nearest(x, out_size, scales, exact, acc):
    n = len(out_size)
    dt = np.float64 if acc == jnp.float64 else np.float32
    for j, o in enumerate(out_size):
        axis = x.ndim - n + j
        i = x.shape[axis]
        s = _scale(i, o, scales[j], dt)
        dst = np.arange(o).astype(dt)
        src = np.floor((dst + dt(0.5)) * s) if exact else np.floor(dst * s)
        x = jnp.take(x, np.minimum(src.astype(np.int64), i - 1), axis=axis)
    return x


def _linear(x, out_size, align_corners, scales, acc):
    """Separable (bi/tri)linear interpolation with torch's source indices and weights."""
    n = len(out_size)
    dt = np.float64 if acc == jnp.float64 else np.float32
    x = x.astype(acc)
    for j, o in enumerate(out_size):
        axis = x.ndim - n + j
        i = x.shape[axis]
        src = source_coordinates(i, o, scales[j], align_corners, dt)
        if not align_corners:
            src = np.maximum(src, dt(0))
        i0 = np.minimum(np.floor(src).astype(np.int64), i - 1)
        i1 = np.minimum(i0 + 1, i - 1)
        l1 = np.clip(src - i0.astype(dt), 0, 1)
        shape = (o,) + (1,) * (x.ndim - axis - 1)
        l1 = jnp.asarray(l1, acc).reshape(shape)
        x = (1 - l1) * jnp.take(x, i0, axis=axis) + l1 * jnp.take(x, i1, axis=axis)
    return x


def _upsample_backward(ctx, grad, output_size, input_size, scales, n, resample):
    """The gradient of ``resample(x, out_size, scales, acc)`` for an ``input_size`` x."""
    acc = acc_dtype(ctx.dtype)
    zeros = jnp.zeros(tuple(input_size), acc)
    out = tuple(output_size)
    s = _pad_scales(scales, n)
    return vjp_of(lambda xx: resample(xx, out, s, acc), zeros, grad.astype(acc))


def _nearest_rules(n, exact):
    def forward(ctx, x, output_size, *scales):
        return _nearest(x, tuple(ctx.shape[-n:]), _pad_scales(scales, n), exact, acc_dtype(x.dtype))

    def backward(ctx, grad, output_size, input_size, *scales):
        def resample(xx, out, s, acc):
            return _nearest(xx, out, s, exact, acc)

        return _upsample_backward(ctx, grad, output_size, input_size, scales, n, resample)

    return forward, backward


def _linear_rules(n):
    def forward(ctx, x, output_size, align_corners, *scales):
        out = tuple(ctx.shape[-n:])
        return _linear(x, out, align_corners, _pad_scales(scales, n), acc_dtype(x.dtype))

    def backward(ctx, grad, output_size, input_size, align_corners, *scales):
        def resample(xx, out, s, acc):
            return _linear(xx, out, align_corners, s, acc)

        return _upsample_backward(ctx, grad, output_size, input_size, scales, n, resample)

    return forward, backward


def _pad_scales(scales, n):
    return list(scales) + [None] * (n - len(scales))


for _n, _name in ((1, "1d"), (2, "2d"), (3, "3d")):
    for _exact, _prefix in ((False, "upsample_nearest"), (True, "_upsample_nearest_exact")):
        _fwd, _bwd = _nearest_rules(_n, _exact)
        lowering(getattr(aten, _prefix + _name).default)(_fwd)
        lowering(getattr(aten, _prefix + _name + "_backward").default)(_bwd)
for _n, _op in ((1, "upsample_linear1d"), (2, "upsample_bilinear2d"), (3, "upsample_trilinear3d")):
    _fwd, _bwd = _linear_rules(_n)
    lowering(getattr(aten, _op).default)(_fwd)
    lowering(getattr(aten, _op + "_backward").default)(_bwd)
