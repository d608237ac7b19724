"""Convolution (plain and transposed, any groups/stride/dilation/padding) and its
backward, reflection/replication padding with its backward, and pixel (un)shuffle.

Contract: a convolution accumulates float16/bfloat16 inputs in float32
(``_nn_common.acc_dtype``) and 32/64-bit ones at full (``HIGHEST``) precision, as
torch's CPU kernels do, and is cast to torch's output dtype once at the end; its
backward is the exact adjoint of the forward (``jax.vjp``) and returns only the
gradients ``output_mask`` asks for. Bad stride, padding, dilation or groups raise the CPU
kernel's error when the call is traced. Padding's backward is the ``jax.vjp`` of its
forward. ``int[n]`` arguments may be one int or a 1-list, as torch allows.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import torch
from jax import lax

from ._arguments import argument_check
from ._nn_common import acc_dtype, expand, vjp_of
from ._registry import lowering

aten = torch.ops.aten


# -- convolution -----------------------------------------------------------------------


def _conv_dims(n_spatial):
    spatial = "DHW"[3 - n_spatial :]
    return ("NC" + spatial, "OI" + spatial, "NC" + spatial)


def _conv_fn(stride, padding, dilation, transposed, output_padding, groups, n, acc):
    """``(x, w) -> out`` for aten.convolution's arguments (no bias), computing in ``acc``."""
    stride, padding = expand(stride, n), expand(padding, n)
    dilation, output_padding = expand(dilation, n), expand(output_padding, n)
    dims = _conv_dims(n)
    precision = lax.Precision.HIGHEST if jnp.dtype(acc).itemsize >= 4 else None

    def conv(x, w):
        if not transposed:
            return lax.conv_general_dilated(
                x,
                w,
                window_strides=stride,
                padding=[(p, p) for p in padding],
                rhs_dilation=dilation,
                dimension_numbers=dims,
                feature_group_count=groups,
                precision=precision,
                preferred_element_type=acc,
            )
        # A transposed convolution is the gradient of a convolution: dilate the input by
        # the stride, pad by the kernel's reach, and convolve with the flipped kernel
        # whose in/out channels are swapped within each group.
        c_in, c_out_g = w.shape[0], w.shape[1]
        k = w.shape[2:]
        w2 = w.reshape((groups, c_in // groups, c_out_g) + k).swapaxes(1, 2)
        w2 = jnp.flip(w2.reshape((groups * c_out_g, c_in // groups) + k), tuple(range(2, 2 + n)))
        pads = [
            (d * (kk - 1) - p, d * (kk - 1) - p + op)
            for kk, p, d, op in zip(k, padding, dilation, output_padding, strict=True)
        ]
        return lax.conv_general_dilated(
            x,
            w2,
            window_strides=[1] * n,
            padding=pads,
            lhs_dilation=stride,
            rhs_dilation=dilation,
            dimension_numbers=dims,
            feature_group_count=groups,
            precision=precision,
            preferred_element_type=acc,
        )

    return conv


@argument_check(aten.convolution.default)
def check_convolution(x, w, bias, stride, padding, dilation, transposed, output_padding, groups):
    """``_convolution``'s checks, in its order, that the meta kernel skips."""
    if w.dim() < 3:
        raise RuntimeError("weight should have at least three dimensions")
    if groups <= 0:
        raise RuntimeError("non-positive groups is not supported")
    n = w.dim() - 2
    if any(p < 0 for p in expand(padding, n)):
        raise RuntimeError("negative padding is not supported")
    if any(p < 0 for p in expand(output_padding, n)):
        raise RuntimeError("negative output_padding is not supported")
    if any(s <= 0 for s in expand(stride, n)):
        raise RuntimeError("non-positive stride is not supported")
    if any(d < 1 for d in expand(dilation, n)):
        raise RuntimeError("dilation should be greater than zero")


@lowering(aten.convolution.default)
def convolution(ctx, x, w, bias, stride, padding, dilation, transposed, output_padding, groups):
    n = x.ndim - 2
    acc = acc_dtype(ctx.dtype)
    conv = _conv_fn(stride, padding, dilation, transposed, output_padding, groups, n, acc)
    out = conv(x, w)
    if bias is not None:
        out = out + bias.astype(acc).reshape((1, -1) + (1,) * n)
    return out


@lowering(aten.convolution_backward.default)
def convolution_backward(
    ctx,
    grad,
    x,
    w,
    bias_sizes,
    stride,
    padding,
    dilation,
    transposed,
    output_padding,
    groups,
    output_mask,
):
    n = x.ndim - 2
    acc = acc_dtype(x.dtype)
    conv = _conv_fn(stride, padding, dilation, transposed, output_padding, groups, n, acc)
    # The exact adjoint of the forward convolution; XLA drops the unused half.
    _, vjp = jax.vjp(conv, x.astype(acc), w.astype(acc))
    gx, gw = vjp(grad.astype(acc))
    outs = []
    if output_mask[0]:
        outs.append(gx)
    if output_mask[1]:
        outs.append(gw)
    if output_mask[2]:
        outs.append(jnp.sum(grad.astype(acc), (0,) + tuple(range(2, grad.ndim))))
    return tuple(outs)


# -- reflection / replication padding -------------------------------------------------


def _mode_pad(x, padding, mode):
    """torch's reflection/replication pad; a negative pad crops that side."""
    if mode == "edge":
        # Output i reads input clamp(i - before): torch's index map, which also covers
        # a crop of the whole axis followed by a pad (every output reads the last input).
        for j in range(len(padding) // 2):
            dim = x.ndim - 1 - j
            before, after = padding[2 * j], padding[2 * j + 1]
            size = x.shape[dim]
            index = jnp.clip(jnp.arange(size + before + after) - before, 0, size - 1)
            x = jnp.take(x, index, axis=dim)
        return x
    # Reflection: crop the negative sides, then reflect-pad the others (the same map).
    config = [(0, 0)] * x.ndim
    crop = [slice(None)] * x.ndim
    for j in range(len(padding) // 2):
        dim = x.ndim - 1 - j
        before, after = padding[2 * j], padding[2 * j + 1]
        crop[dim] = slice(max(-before, 0), x.shape[dim] - max(-after, 0))
        config[dim] = (max(before, 0), max(after, 0))
    return jnp.pad(x[tuple(crop)], config, mode=mode)


def _pad_rules(mode):
    def forward(ctx, x, padding):
        return _mode_pad(x, padding, mode)

    def backward(ctx, grad, x, padding):
        acc = acc_dtype(x.dtype)
        return vjp_of(lambda xx: _mode_pad(xx, padding, mode), x.astype(acc), grad)

    return forward, backward


for _torch_mode, _jax_mode in (("reflection", "reflect"), ("replication", "edge")):
    for _name in ("1d", "2d", "3d"):
        _fwd, _bwd = _pad_rules(_jax_mode)
        lowering(getattr(aten, f"{_torch_mode}_pad{_name}").default)(_fwd)
        lowering(getattr(aten, f"{_torch_mode}_pad{_name}_backward").default)(_bwd)


# -- pixel shuffle ---------------------------------------------------------------------


@lowering(aten.pixel_shuffle.default)
def pixel_shuffle(ctx, x, r):
    *lead, c, h, w = x.shape
    y = x.reshape(*lead, c // (r * r), r, r, h, w)
    k = len(lead)
    y = jnp.transpose(y, tuple(range(k)) + (k, k + 3, k + 1, k + 4, k + 2))
    return y.reshape(ctx.shape)


@lowering(aten.pixel_unshuffle.default)
def pixel_unshuffle(ctx, x, r):
    *lead, c, h, w = x.shape
    y = x.reshape(*lead, c, h // r, r, w // r, r)
    k = len(lead)
    y = jnp.transpose(y, tuple(range(k)) + (k, k + 2, k + 4, k + 1, k + 3))
    return y.reshape(ctx.shape)
