"""Antialiased resizing: ``_upsample_bilinear2d_aa`` and ``_upsample_bicubic2d_aa``
(``F.interpolate(mode="bilinear"/"bicubic", antialias=True)``), each with its backward.

Contract: follows torch's CPU separable antialias kernel (Pillow's resampling). Along
each resized axis, output ``i`` reads the inputs ``xmin .. xmin + xsize - 1`` around
``center = scale * (i + 0.5)`` within ``support = (taps / 2) * max(scale, 1)`` (2 taps:
triangle filter, 4: Keys cubic with ``a = -0.5``), weighted by the filter at
``(j - center + 0.5) / max(scale, 1)`` and normalized to sum 1; ``scale`` is torch's
``area_pixel_compute_scale`` (``(in - 1) / (out - 1)`` with ``align_corners``, else
``1 / scales_x`` when given, else ``in / out``). The weights are computed at trace time
in numpy, in the kernel's precision (float32 for float32 inputs, float64 for float64),
with its casts; the sums run over the taps in order in that precision. The forward
resizes the width first, then the height, skipping an axis whose size does not change
(as the CPU kernel does); the backward rules are the ``jax.vjp`` of the resize of both
axes (the CPU backward kernel does not skip either), so they agree by construction.
Dtypes as the CPU kernels: float32/float64 only; float16/bfloat16 raise torch's "not
implemented" errors; uint8 forward (a fixed-point kernel of its own) runs through the
CPU fallback.
"""

from __future__ import annotations

import jax.numpy as jnp
import numpy as np
import torch

from ._arguments import RunOnCpu, argument_check
from ._nn_common import vjp_of
from ._registry import lowering

aten = torch.ops.aten

_NAMES = {torch.float16: "Half", torch.bfloat16: "BFloat16", torch.uint8: "Byte"}


def _triangle(x):
    x = np.abs(x)
    return np.where(x < 1, 1 - x, 0).astype(x.dtype)


def _keys_cubic(x):
    a = x.dtype.type(-0.5)
    x = np.abs(x)
    near = ((a + 2) * x - (a + 3)) * x * x + 1
    far = ((a * x - 5 * a) * x + 8 * a) * x - 4 * a
    return np.where(x < 1, near, np.where(x < 2, far, 0)).astype(x.dtype)


_FILTERS = {2: _triangle, 4: _keys_cubic}


def _scale(in_size, out_size, align_corners, scale, dt):
    """torch's area_pixel_compute_scale, in ``dt``."""
    if align_corners:
        return dt(in_size - 1) / dt(out_size - 1) if out_size > 1 else dt(0)
    if scale is not None and scale > 0:
        return dt(1.0 / scale)
    return dt(in_size) / dt(out_size)


def _weights(in_size, out_size, align_corners, scale, taps, dt):
    """Per output: the first input read (``xmin``, (out,)), how many it reads
    (``xsize``, (out,)) and the normalized weights of the inputs from there ((out,
    width), zero past the inputs it reads)."""
    s = _scale(in_size, out_size, align_corners, scale, dt)
    support = dt(taps * 0.5 * s) if s >= 1 else dt(taps * 0.5)
    width = int(np.ceil(support)) * 2 + 1
    invscale = dt(1.0 / np.float64(s)) if s >= 1 else dt(1)
    i = np.arange(out_size, dtype=np.float64)
    center = (np.float64(s) * (i + 0.5)).astype(dt)
    lo = np.trunc(np.float64(1) * (center - support) + 0.5).astype(np.int64)
    hi = np.trunc(np.float64(1) * (center + support) + 0.5).astype(np.int64)
    xmin = np.maximum(lo, 0)
    xsize = np.clip(np.minimum(hi, in_size) - xmin, 0, width)
    j = np.arange(width)
    offset = (xmin[:, None] + j[None, :]).astype(dt) - center[:, None]
    arg = ((offset.astype(np.float64) + 0.5) * np.float64(invscale)).astype(dt)
    w = np.where(j[None, :] < xsize[:, None], _FILTERS[taps](arg), dt(0)).astype(dt)
    total = np.zeros(out_size, dt)
    for k in range(width):  # the kernel's running sum, in order
        total = (total + w[:, k]).astype(dt)
    safe = np.where(total != 0, total, dt(1)).astype(dt)
    w = np.where(total[:, None] != 0, (w / safe[:, None]).astype(dt), w)
    return xmin, xsize, w


def _resize_axis(x, axis, out_size, align_corners, scale, taps):
    dt = np.float64 if x.dtype == jnp.float64 else np.float32
    in_size = x.shape[axis]
    xmin, xsize, w = _weights(in_size, out_size, align_corners, scale, taps, dt)
    shape = (out_size,) + (1,) * (x.ndim - axis - 1)
    out = None
    for k in range(w.shape[1]):
        reads = k < xsize
        if not np.any(reads):
            continue  # a tap no output reads
        src = np.minimum(xmin + k, in_size - 1)
        term = jnp.asarray(w[:, k], x.dtype).reshape(shape) * jnp.take(x, src, axis=axis)
        if not np.all(reads):  # outputs past their inputs read nothing (not even 0 * inf)
            term = jnp.where(reads.reshape(shape), term, jnp.zeros((), x.dtype))
        out = term if out is None else out + term
    if out is None:
        out_shape = x.shape[:axis] + (out_size,) + x.shape[axis + 1 :]
        out = jnp.zeros(out_shape, x.dtype)
    return out


def _resize(x, out_hw, align_corners, scales, taps, skip_same):
    """Width first, then height, as the CPU kernel."""
    for axis, j in ((x.ndim - 1, 1), (x.ndim - 2, 0)):
        if skip_same and x.shape[axis] == out_hw[j]:
            continue
        x = _resize_axis(x, axis, out_hw[j], align_corners, scales[j], taps)
    return x


def _aa_rules(name, taps):
    op = getattr(aten, name).default
    backward_op = getattr(aten, name + "_backward").default

    @argument_check(op)
    def check(x, output_size, align_corners, scales_h=None, scales_w=None):
        if x.dtype == torch.uint8:
            raise RunOnCpu("uint8 antialiased resizing: the CPU kernel's fixed-point sums")
        if x.dtype in _NAMES:
            raise RuntimeError(
                f"\"compute_index_ranges_weights\" not implemented for '{_NAMES[x.dtype]}'"
            )

    @argument_check(backward_op)
    def backward_check(grad, output_size, input_size, align_corners, scales_h=None, scales_w=None):
        if grad.dtype in _NAMES:
            raise RuntimeError(
                f"\"{name[1:]}_backward_cpu\" not implemented for '{_NAMES[grad.dtype]}'"
            )

    @lowering(op)
    def forward(ctx, x, output_size, align_corners, scales_h=None, scales_w=None):
        out_hw = tuple(ctx.shape[-2:])
        return _resize(x, out_hw, align_corners, (scales_h, scales_w), taps, skip_same=True)

    @lowering(backward_op)
    def backward(ctx, grad, output_size, input_size, align_corners, scales_h=None, scales_w=None):
        out_hw = tuple(grad.shape[-2:])
        zeros = jnp.zeros(tuple(input_size), grad.dtype)

        def resize(xx):
            return _resize(xx, out_hw, align_corners, (scales_h, scales_w), taps, skip_same=False)

        return vjp_of(resize, zeros, grad)

    return forward, backward


_aa_rules("_upsample_bilinear2d_aa", 2)
_aa_rules("_upsample_bicubic2d_aa", 4)
