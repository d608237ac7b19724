"""nn/vision ops: PReLU (``_prelu_kernel`` + backward), im2col/col2im (``F.unfold`` /
``F.fold``), adaptive max pooling with indices (2-D, 3-D, + backward), bicubic
upsampling (+ backward), ``_trilinear`` (``F.bilinear``; its backward is composed of
``_trilinear`` calls) and ``embedding_renorm`` (``F.embedding(max_norm=...)``).
``grid_sampler_2d`` lives in ``sampling``.

Contract: float16/bfloat16 inputs are computed in float32 (``_nn_common.acc_dtype``)
and cast to torch's output dtype once at the end, as torch's CPU kernels accumulate.
Index geometry (unfold windows, adaptive windows ``[floor(k*I/O), ceil((k+1)*I/O))``,
bicubic sources and weights) is computed at trace time with torch's CPU formulas, in
the input's float precision (float32 for half types). Bicubic follows torch's generic
CPU kernel: cubic convolution with A = -0.75, taps clamped to the border, the width
interpolated first, and weights stored in the input's dtype (rounded to bfloat16 for a
bfloat16 input). Adaptive max pooling picks torch's element: the first maximum in
window order, or the last NaN. ``col2im`` and the bicubic backward are the ``jax.vjp``
of their (linear) forward; adaptive max pooling's backward scatters through the saved
indices. ``embedding_renorm`` rescales every row the indices touch whose p-norm
exceeds ``max_norm`` by ``max_norm / (norm + 1e-7)`` (the norm rounded to the
weight's dtype and the scale computed in float64, as torch's kernel reads them).
"""

from __future__ import annotations

import math

import jax.numpy as jnp
import numpy as np
import torch
from jax import lax

from ._nn_common import acc_dtype, vjp_of
from ._registry import lowering
from .pooling import _max_pool_backward, _pad_scales, source_coordinates

aten = torch.ops.aten


# -- PReLU -----------------------------------------------------------------------------


@lowering(aten._prelu_kernel.default)
def prelu_kernel(ctx, x, weight):
    acc = acc_dtype(ctx.dtype)
    xa = x.astype(acc)
    return jnp.where(xa > 0, xa, weight.astype(acc) * xa)


@lowering(aten._prelu_kernel_backward.default)
def prelu_kernel_backward(ctx, grad, x, weight):
    acc = acc_dtype(ctx.dtype)
    g, xa, w = grad.astype(acc), x.astype(acc), weight.astype(acc)
    positive = xa > 0
    grad_input = jnp.where(positive, g, w * g)
    grad_weight = jnp.where(positive, jnp.zeros((), acc), xa * g)
    return (
        jnp.broadcast_to(grad_input, ctx.out[0][0]),
        jnp.broadcast_to(grad_weight, ctx.out[1][0]),
    )


# -- im2col / col2im -------------------------------------------------------------------


def _im2col(x, kernel_size, dilation, padding, stride):
    """(N, C, H, W) -> (N, C*kh*kw, L), columns in torch's (c, ki, kj) order."""
    n, c, h, w = x.shape
    (kh, kw), (dh, dw) = kernel_size, dilation
    (ph, pw), (sh, sw) = padding, stride
    oh = (h + 2 * ph - (dh * (kh - 1) + 1)) // sh + 1
    ow = (w + 2 * pw - (dw * (kw - 1) + 1)) // sw + 1
    xp = jnp.pad(x, ((0, 0), (0, 0), (ph, ph), (pw, pw)))
    cols = []
    for i in range(kh):
        for j in range(kw):
            start = (0, 0, i * dh, j * dw)
            limit = (n, c, i * dh + (oh - 1) * sh + 1, j * dw + (ow - 1) * sw + 1)
            cols.append(lax.slice(xp, start, limit, (1, 1, sh, sw)))
    return jnp.stack(cols, axis=2).reshape(n, c * kh * kw, oh * ow)


@lowering(aten.im2col.default)
def im2col(ctx, x, kernel_size, dilation, padding, stride):
    batched = x.ndim == 4
    out = _im2col(x if batched else x[None], kernel_size, dilation, padding, stride)
    return out if batched else out[0]


@lowering(aten.col2im.default)
def col2im(ctx, cols, output_size, kernel_size, dilation, padding, stride):
    batched = cols.ndim == 3
    cols = cols if batched else cols[None]
    acc = acc_dtype(ctx.dtype)
    n, ckk = cols.shape[:2]
    c = ckk // (kernel_size[0] * kernel_size[1])
    image = jnp.zeros((n, c, *output_size), acc)
    out = vjp_of(lambda im: _im2col(im, kernel_size, dilation, padding, stride), image, cols)
    return out if batched else out[0]


# -- adaptive max pooling --------------------------------------------------------------


def _adaptive_windows(i, o):
    """(positions (o, k), valid (o, k)): the members of each of ``o`` adaptive windows
    over ``i`` inputs, padded to the widest window ``k`` (clamped, marked invalid)."""
    starts = np.array([(j * i) // o for j in range(o)], np.int64)
    ends = np.array([-(-((j + 1) * i) // o) for j in range(o)], np.int64)
    width = int((ends - starts).max())
    pos = starts[:, None] + np.arange(width)[None, :]
    return np.minimum(pos, i - 1), pos < ends[:, None]


def _adaptive_max_pool(x, out_size):
    n = len(out_size)
    in_size = x.shape[-n:]
    lead = x.ndim - n
    index, valid, flat = [], None, None
    widths = []
    for j, (i, o) in enumerate(zip(in_size, out_size, strict=True)):
        pos, ok = _adaptive_windows(i, o)
        widths.append(pos.shape[1])
        shape = [1] * (2 * n)
        shape[2 * j], shape[2 * j + 1] = pos.shape
        pos, ok = pos.reshape(shape), ok.reshape(shape)
        index.append(pos)
        valid = ok if valid is None else valid & ok
        stride = math.prod(in_size[j + 1 :])
        flat = pos * stride if flat is None else flat + pos * stride
    # (..., O1, K1, O2, K2, ...) -> (..., O1, O2, ..., K1*K2*...): window order last.
    vals = x[(Ellipsis, *index)]
    perm = list(range(lead)) + [lead + 2 * j for j in range(n)]
    perm += [lead + 2 * j + 1 for j in range(n)]
    window = math.prod(widths)
    vals = jnp.transpose(vals, perm).reshape(*x.shape[:lead], *out_size, window)
    inner = [2 * j for j in range(n)] + [2 * j + 1 for j in range(n)]
    full = np.broadcast_shapes(valid.shape, flat.shape)
    valid = np.transpose(np.broadcast_to(valid, full), inner).reshape(*out_size, window)
    flat = np.transpose(np.broadcast_to(flat, full), inner).reshape(*out_size, window)
    if jnp.issubdtype(x.dtype, jnp.floating):
        lowest = jnp.array(-jnp.inf, x.dtype)
        nan = jnp.isnan(vals) & valid
        # torch's scan keeps the first of equal maxima and moves to every NaN.
        first_max = jnp.argmax(jnp.where(valid & ~nan, vals, lowest), axis=-1)
        last_nan = window - 1 - jnp.argmax(nan[..., ::-1], axis=-1)
        pick = jnp.where(jnp.any(nan, axis=-1), last_nan, first_max)
    else:
        lowest = jnp.array(jnp.iinfo(x.dtype).min, x.dtype)
        pick = jnp.argmax(jnp.where(valid, vals, lowest), axis=-1)
    values = jnp.take_along_axis(vals, pick[..., None], axis=-1)[..., 0]
    flat = jnp.broadcast_to(jnp.asarray(flat, jnp.int64), vals.shape)
    indices = jnp.take_along_axis(flat, pick[..., None], axis=-1)[..., 0]
    return values, indices


@lowering(aten.adaptive_max_pool2d.default, aten.adaptive_max_pool3d.default)
def adaptive_max_pool(ctx, x, output_size):
    n = len(output_size)
    return _adaptive_max_pool(x, tuple(ctx.shape[-n:]))


@lowering(aten.adaptive_max_pool2d_backward.default)
def adaptive_max_pool2d_backward(ctx, grad, x, indices):
    return _max_pool_backward(ctx, grad, x, indices, 2)


@lowering(aten.adaptive_max_pool3d_backward.default)
def adaptive_max_pool3d_backward(ctx, grad, x, indices):
    return _max_pool_backward(ctx, grad, x, indices, 3)


# -- bicubic upsampling ----------------------------------------------------------------

_A = -0.75  # torch's cubic convolution coefficient


def cubic_weights(t0, t1, t2, t3, dt):
    """The cubic convolution weights at distances ``t0`` (in (1, 2)), ``t1``, ``t2``
    (in [0, 1]) and ``t3`` (in (1, 2)), torch's two polynomials with A = -0.75."""
    a = dt(_A)

    def near(x):  # |x| <= 1
        return ((a + dt(2)) * x - (a + dt(3))) * x * x + dt(1)

    def far(x):  # 1 < |x| < 2
        return ((a * x - dt(5) * a) * x + dt(8) * a) * x - dt(4) * a

    return far(t0), near(t1), near(t2), far(t3)


def _bicubic(x, out_size, align_corners, scales, acc, weight_dtype):
    """torch's generic CPU bicubic: per axis (width first), four clamped taps."""
    dt = np.float64 if acc == jnp.float64 else np.float32
    x = x.astype(acc)
    for j in (1, 0):
        axis = x.ndim - 2 + j
        i, o = x.shape[axis], out_size[j]
        src = source_coordinates(i, o, scales[j], align_corners, dt)
        base = np.minimum(np.floor(src).astype(np.int64), i - 1)
        t = np.clip(src - base.astype(dt), dt(0), dt(1)).astype(dt)
        rest = dt(1) - t
        weights = cubic_weights(t + dt(1), t, rest, rest + dt(1), dt)
        shape = (o,) + (1,) * (x.ndim - axis - 1)
        out = None
        for k in range(4):
            tap = np.clip(base - 1 + k, 0, i - 1)
            w = jnp.asarray(weights[k], acc).astype(weight_dtype).astype(acc).reshape(shape)
            term = jnp.take(x, tap, axis=axis) * w
            out = term if out is None else out + term
        x = out
    return x


@lowering(aten.upsample_bicubic2d.default)
def upsample_bicubic2d(ctx, x, output_size, align_corners, scales_h=None, scales_w=None):
    out = tuple(ctx.shape[-2:])
    return _bicubic(x, out, align_corners, [scales_h, scales_w], acc_dtype(x.dtype), x.dtype)


@lowering(aten.upsample_bicubic2d.vec)
def upsample_bicubic2d_vec(ctx, x, output_size, align_corners, scale_factors):
    out = tuple(ctx.shape[-2:])
    scales = _pad_scales(scale_factors if output_size is None and scale_factors else [], 2)
    return _bicubic(x, out, align_corners, scales, acc_dtype(x.dtype), x.dtype)


@lowering(aten.upsample_bicubic2d_backward.default)
def upsample_bicubic2d_backward(
    ctx, grad, output_size, input_size, align_corners, scales_h=None, scales_w=None
):
    acc = acc_dtype(ctx.dtype)
    out = tuple(output_size)
    scales = [scales_h, scales_w]

    def resample(xx):
        return _bicubic(xx, out, align_corners, scales, acc, acc)

    return vjp_of(resample, jnp.zeros(tuple(input_size), acc), grad.astype(acc))


# -- _trilinear (F.bilinear) -----------------------------------------------------------

_LETTERS = "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ"


@lowering(aten._trilinear.default)
def trilinear(ctx, i1, i2, i3, expand1, expand2, expand3, sumdim, unroll_dim=1):
    """sum over ``sumdim`` of i1 * i2 * i3, each unsqueezed at its ``expand`` dims.

    One einsum: a size-1 dim of an operand (its expanded dims among them) broadcasts,
    so it takes no subscript there; the output's size-1 dims come back by reshape.
    """
    acc = acc_dtype(ctx.dtype)
    total = i1.ndim + len(expand1)
    operands, subscripts = [], []
    sizes = [1] * total
    for t, expand in ((i1, expand1), (i2, expand2), (i3, expand3)):
        for d in sorted(expand):
            t = jnp.expand_dims(t, d)
        sizes = [b if b != 1 else a for a, b in zip(sizes, t.shape, strict=True)]
        keep = [d for d in range(total) if t.shape[d] != 1]
        operands.append(t.reshape([t.shape[d] for d in keep]).astype(acc))
        subscripts.append("".join(_LETTERS[d] for d in keep))
    out = "".join(_LETTERS[d] for d in range(total) if d not in sumdim and sizes[d] != 1)
    spec = ",".join(subscripts) + "->" + out
    result = jnp.einsum(spec, *operands, precision=lax.Precision.HIGHEST)
    return result.reshape(ctx.shape)


# -- embedding_renorm_ -----------------------------------------------------------------


@lowering(aten.embedding_renorm.default)
def embedding_renorm(ctx, weight, indices, max_norm, norm_type):
    acc = acc_dtype(weight.dtype)
    w = weight.astype(acc)
    a = jnp.abs(w)
    p = float(norm_type)
    if p == math.inf:
        norm = jnp.max(a, axis=1)
    elif p == -math.inf:
        norm = jnp.min(a, axis=1)
    elif p == 0:
        norm = jnp.sum((a != 0).astype(acc), axis=1)
    elif p == 1:
        norm = jnp.sum(a, axis=1)
    elif p == 2:
        norm = jnp.sqrt(jnp.sum(a * a, axis=1))
    else:
        norm = jnp.sum(a**p, axis=1) ** (1.0 / p)
    # torch reads the row's norm (in the weight's dtype) as a double, scales in double.
    norm = norm.astype(weight.dtype).astype(jnp.float64)
    touched = jnp.zeros(weight.shape[0], jnp.bool_).at[indices.reshape(-1)].set(True)
    rescale = touched & (norm > max_norm)
    scale = (max_norm / (norm + 1e-7)).astype(acc)
    return jnp.where(rescale[:, None], w * scale[:, None], w)
