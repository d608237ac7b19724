"""nn ops: softmax/log_softmax (+ _safe_softmax), layer/group norm, batch norm (its
functional and inference forms, and its backward), embedding, losses (nll, mse, binary
cross entropy, smooth L1/Huber), convolution (plain and transposed), max/avg/adaptive
pooling, upsampling (nearest, nearest-exact, (bi/tri)linear), reflection/replication
padding and pixel (un)shuffle, each with its backward.

Contract: rules compute in torch's precision: float16/bfloat16 inputs are upcast to
float32 for the reductions inside (softmax sums, normalisation moments, loss sums,
convolution accumulation), as torch's CPU kernels do, and cast to torch's output dtype
once at the end. Loss ``reduction`` is torch's enum: 0 none, 1 mean, 2 sum.
Multi-output backward ops return only the outputs torch returns (``output_mask`` says
which; layer norm also drops the weight/bias gradient when that parameter is absent).
Backward rules of ops that are linear or piecewise-smooth in their input (pooling,
upsampling, padding, smooth L1) are the ``jax.vjp`` of the forward rule, so the two
agree by construction. Index geometry (pool windows, upsampling sources) follows
torch's CPU formulas, computed at trace time in the input's float precision.

``native_batch_norm`` itself is deliberately not lowered: in training it updates
``running_mean``/``running_var`` in place although its schema does not say so, which a
functional rule cannot express. ``_native_batch_norm_legit_functional`` (lowered here)
returns the updated statistics for whoever maps the op onto it.
"""

from __future__ import annotations

import itertools
import math

import jax
import jax.numpy as jnp
import numpy as np
import torch
from jax import lax

from ._registry import lowering

aten = torch.ops.aten


def _acc(dtype):
    dtype = jnp.dtype(dtype)
    if jnp.issubdtype(dtype, jnp.floating) and dtype.itemsize < 4:
        return jnp.float32
    return dtype


def _at_least_1d(x):
    return x.reshape(1) if x.ndim == 0 else x


# -- softmax ---------------------------------------------------------------------------


def _softmax(x, dim, acc):
    x = _at_least_1d(x).astype(acc)
    dim %= x.ndim
    shifted = x - jnp.max(x, dim, keepdims=True)
    e = jnp.exp(shifted)
    return e / jnp.sum(e, dim, keepdims=True)


def _log_softmax(x, dim, acc):
    x = _at_least_1d(x).astype(acc)
    dim %= x.ndim
    shifted = x - jnp.max(x, dim, keepdims=True)
    return shifted - jnp.log(jnp.sum(jnp.exp(shifted), dim, keepdims=True))


@lowering(aten._softmax.default)
def softmax(ctx, x, dim, half_to_float):
    return _softmax(x, dim, _acc(ctx.dtype)).reshape(ctx.shape)


@lowering(aten._safe_softmax.default)
def safe_softmax(ctx, x, dim, dtype=None):
    # As torch's: rows that are entirely -inf (fully masked attention) give 0, not NaN.
    out = _softmax(x, dim, _acc(ctx.dtype))
    x1 = _at_least_1d(x)
    masked = jnp.all(x1 == -jnp.inf, dim % x1.ndim, keepdims=True)
    return jnp.where(masked, 0, out).reshape(ctx.shape)


@lowering(aten._log_softmax.default)
def log_softmax(ctx, x, dim, half_to_float):
    return _log_softmax(x, dim, _acc(ctx.dtype)).reshape(ctx.shape)


@lowering(aten._softmax_backward_data.default)
def softmax_backward(ctx, grad, output, dim, input_dtype):
    acc = _acc(ctx.dtype)
    g = _at_least_1d(grad).astype(acc)
    y = _at_least_1d(output).astype(acc)
    dim %= g.ndim
    return (y * (g - jnp.sum(g * y, dim, keepdims=True))).reshape(ctx.shape)


@lowering(aten._log_softmax_backward_data.default)
def log_softmax_backward(ctx, grad, output, dim, input_dtype):
    acc = _acc(ctx.dtype)
    g = _at_least_1d(grad).astype(acc)
    y = _at_least_1d(output).astype(acc)
    dim %= g.ndim
    return (g - jnp.exp(y) * jnp.sum(g, dim, keepdims=True)).reshape(ctx.shape)


# -- layer norm ------------------------------------------------------------------------


@lowering(aten.native_layer_norm.default)
def native_layer_norm(ctx, x, normalized_shape, weight, bias, eps):
    acc = _acc(x.dtype)
    axes = tuple(range(x.ndim - len(normalized_shape), x.ndim))
    xf = x.astype(acc)
    mean = jnp.mean(xf, axes, keepdims=True)
    centered = xf - mean
    var = jnp.mean(centered * centered, axes, keepdims=True)
    rstd = lax.rsqrt(var + eps)
    out = centered * rstd
    if weight is not None:
        out = out * weight.astype(acc)
    if bias is not None:
        out = out + bias.astype(acc)
    return out, mean.reshape(ctx.out[1][0]), rstd.reshape(ctx.out[2][0])


@lowering(aten.native_layer_norm_backward.default)
def native_layer_norm_backward(
    ctx, grad, x, normalized_shape, mean, rstd, weight, bias, output_mask
):
    acc = _acc(x.dtype)
    lead = x.ndim - len(normalized_shape)
    axes = tuple(range(lead, x.ndim))
    g = grad.astype(acc)
    xhat = (x.astype(acc) - mean.astype(acc)) * rstd.astype(acc)
    outs = []
    if output_mask[0]:
        gxhat = g * weight.astype(acc) if weight is not None else g
        gx = gxhat - jnp.mean(gxhat, axes, keepdims=True)
        gx = gx - xhat * jnp.mean(gxhat * xhat, axes, keepdims=True)
        outs.append(gx * rstd.astype(acc))
    # torch returns no weight/bias gradient when that parameter is absent.
    if output_mask[1] and weight is not None:
        outs.append(jnp.sum(g * xhat, tuple(range(lead))))
    if output_mask[2] and bias is not None:
        outs.append(jnp.sum(g, tuple(range(lead))))
    return tuple(outs)


# -- batch norm (backward and the functional/inference forms) --------------------------


def _bn_axes(x):
    return (0,) + tuple(range(2, x.ndim))


def _per_channel(v, x):
    """A (C,) vector shaped to broadcast over (N, C, ...)."""
    return v.reshape((1, -1) + (1,) * (x.ndim - 2))


def _bn_forward(x, weight, bias, mean, invstd, acc):
    out = (x.astype(acc) - _per_channel(mean, x)) * _per_channel(invstd, x)
    if weight is not None:
        out = out * _per_channel(weight.astype(acc), x)
    if bias is not None:
        out = out + _per_channel(bias.astype(acc), x)
    return out


def _batch_stats(x, eps, acc):
    xf = x.astype(acc)
    axes = _bn_axes(x)
    mean = jnp.mean(xf, axes)
    centered = xf - _per_channel(mean, x)
    var = jnp.mean(centered * centered, axes)
    return mean, var, lax.rsqrt(var + eps)


@lowering(aten._native_batch_norm_legit_no_training.default)
def batch_norm_no_training(ctx, x, weight, bias, running_mean, running_var, momentum, eps):
    acc = _acc(x.dtype)
    invstd = lax.rsqrt(running_var.astype(acc) + eps)
    out = _bn_forward(x, weight, bias, running_mean.astype(acc), invstd, acc)
    # torch returns empty save_mean/save_invstd here.
    return (out,) + tuple(jnp.zeros(s, d) for s, d in ctx.out[1:])


@lowering(aten._native_batch_norm_legit.no_stats)
def batch_norm_no_stats(ctx, x, weight, bias, training, momentum, eps):
    acc = _acc(x.dtype)
    mean, _, invstd = _batch_stats(x, eps, acc)
    return _bn_forward(x, weight, bias, mean, invstd, acc), mean, invstd


@lowering(aten._native_batch_norm_legit_functional.default)
def batch_norm_functional(ctx, x, weight, bias, running_mean, running_var, training, momentum, eps):
    acc = _acc(x.dtype)
    if not training:
        invstd = lax.rsqrt(running_var.astype(acc) + eps)
        out = _bn_forward(x, weight, bias, running_mean.astype(acc), invstd, acc)
        empty = tuple(jnp.zeros(s, d) for s, d in ctx.out[1:3])
        return (out,) + empty + (running_mean, running_var)
    mean, var, invstd = _batch_stats(x, eps, acc)
    n = x.size // x.shape[1]
    unbiased = var * (n / max(n - 1, 1))
    new_mean = (1 - momentum) * running_mean.astype(acc) + momentum * mean
    new_var = (1 - momentum) * running_var.astype(acc) + momentum * unbiased
    out = _bn_forward(x, weight, bias, mean, invstd, acc)
    return out, mean, invstd, new_mean, new_var


@lowering(aten.native_batch_norm_backward.default)
def native_batch_norm_backward(
    ctx,
    grad,
    x,
    weight,
    running_mean,
    running_var,
    save_mean,
    save_invstd,
    train,
    eps,
    output_mask,
):
    acc = _acc(x.dtype)
    axes = _bn_axes(x)
    g = grad.astype(acc)
    xf = x.astype(acc)
    if train:
        mean, invstd = save_mean.astype(acc), save_invstd.astype(acc)
    else:
        mean = running_mean.astype(acc)
        invstd = lax.rsqrt(running_var.astype(acc) + eps)
    w = weight.astype(acc) if weight is not None else jnp.ones_like(mean)
    xhat = (xf - _per_channel(mean, x)) * _per_channel(invstd, x)
    sum_g = jnp.sum(g, axes)
    sum_gx = jnp.sum(g * xhat, axes)
    outs = []
    if output_mask[0]:
        scale = _per_channel(invstd * w, x)
        if train:
            n = x.size // x.shape[1]
            gx = g - _per_channel(sum_g / n, x) - xhat * _per_channel(sum_gx / n, x)
            outs.append(gx * scale)
        else:
            outs.append(g * scale)
    if output_mask[1]:
        outs.append(sum_gx)
    if output_mask[2]:
        outs.append(sum_g)
    return tuple(outs)


# -- embedding -------------------------------------------------------------------------


@lowering(aten.embedding.default)
def embedding(ctx, weight, indices, padding_idx=-1, scale_grad_by_freq=False, sparse=False):
    return jnp.take(weight, indices, axis=0)


@lowering(aten.embedding_dense_backward.default)
def embedding_dense_backward(ctx, grad, indices, num_weights, padding_idx, scale_grad_by_freq):
    acc = _acc(ctx.dtype)
    idx = indices.reshape(-1)
    g = grad.reshape((idx.shape[0], -1)).astype(acc)
    if padding_idx >= 0:
        g = jnp.where((idx == padding_idx)[:, None], 0, g)
    if scale_grad_by_freq:
        counts = jnp.zeros((num_weights,), acc).at[idx].add(1)
        g = g / counts[idx][:, None]
    return jnp.zeros((num_weights, g.shape[1]), acc).at[idx].add(g)


# -- losses ----------------------------------------------------------------------------


def _nll_terms(x, target, weight, ignore_index):
    """(per-target weight, safe target, class axis): weight 0 where target is ignored."""
    axis = 0 if x.ndim == 1 else 1
    valid = target != ignore_index
    safe = jnp.where(valid, target, 0)
    if weight is not None:
        w = jnp.take(weight.astype(_acc(x.dtype)), safe)
    else:
        w = jnp.ones(target.shape, _acc(x.dtype))
    return jnp.where(valid, w, 0), safe, axis


@lowering(aten.nll_loss_forward.default, aten.nll_loss2d_forward.default)
def nll_loss_forward(ctx, x, target, weight, reduction, ignore_index):
    w, safe, axis = _nll_terms(x, target, weight, ignore_index)
    picked = jnp.take_along_axis(x, jnp.expand_dims(safe, axis), axis=axis)
    losses = -jnp.squeeze(picked, axis).astype(w.dtype) * w
    total_weight = jnp.sum(w)
    if reduction == 0:
        return losses, jnp.zeros(ctx.out[1][0], ctx.out[1][1])
    total = jnp.sum(losses)
    return (total / total_weight if reduction == 1 else total), total_weight


@lowering(aten.nll_loss_backward.default, aten.nll_loss2d_backward.default)
def nll_loss_backward(ctx, grad, x, target, weight, reduction, ignore_index, total_weight):
    w, safe, axis = _nll_terms(x, target, weight, ignore_index)
    g = grad.astype(w.dtype)
    if reduction == 1:
        g = g / total_weight.astype(w.dtype)
    coef = jnp.where(w != 0, -w * g, 0)
    hot = jax.nn.one_hot(safe, x.shape[axis], dtype=w.dtype, axis=axis)
    return hot * jnp.expand_dims(coef, axis)


def _reduce(losses, reduction):
    if reduction == 0:
        return losses
    return jnp.mean(losses) if reduction == 1 else jnp.sum(losses)


@lowering(aten.mse_loss.default)
def mse_loss(ctx, x, target, reduction=1):
    acc = _acc(ctx.dtype)
    d = x.astype(acc) - target.astype(acc)
    return _reduce(d * d, reduction)


@lowering(aten.mse_loss_backward.default)
def mse_loss_backward(ctx, grad, x, target, reduction):
    acc = _acc(ctx.dtype)
    d = x.astype(acc) - target.astype(acc)
    n = math.prod(jnp.broadcast_shapes(x.shape, target.shape))
    norm = 2.0 / n if reduction == 1 else 2.0
    return jnp.broadcast_to(norm * d * grad.astype(acc), ctx.shape)


@lowering(aten.binary_cross_entropy_with_logits.default)
def bce_with_logits(ctx, x, target, weight=None, pos_weight=None, reduction=1):
    acc = _acc(ctx.dtype)
    x, target = x.astype(acc), target.astype(acc)
    log_sig = jax.nn.log_sigmoid(x)
    if pos_weight is not None:
        log_sig = log_sig * ((pos_weight.astype(acc) - 1) * target + 1)
    losses = (1 - target) * x - log_sig
    if weight is not None:
        losses = losses * weight.astype(acc)
    return _reduce(losses, reduction)


@lowering(aten.binary_cross_entropy.default)
def binary_cross_entropy(ctx, x, target, weight=None, reduction=1):
    acc = _acc(ctx.dtype)
    x, target = x.astype(acc), target.astype(acc)
    # torch clamps the logs at -100 so that 0 * log(0) stays finite.
    log_x = jnp.maximum(jnp.log(x), -100)
    log_1mx = jnp.maximum(jnp.log1p(-x), -100)
    losses = -(target * log_x + (1 - target) * log_1mx)
    if weight is not None:
        losses = losses * weight.astype(acc)
    return _reduce(losses, reduction)


@lowering(aten.binary_cross_entropy_backward.default)
def binary_cross_entropy_backward(ctx, grad, x, target, weight=None, reduction=1):
    acc = _acc(ctx.dtype)
    x, target = x.astype(acc), target.astype(acc)
    gx = grad.astype(acc) * (x - target) / jnp.maximum((1 - x) * x, 1e-12)
    if weight is not None:
        gx = gx * weight.astype(acc)
    if reduction == 1:
        gx = gx / x.size
    return jnp.broadcast_to(gx, ctx.shape)


# -- convolution -----------------------------------------------------------------------


def _conv_dims(n_spatial):
    spatial = "DHW"[3 - n_spatial :]
    return ("NC" + spatial, "OI" + spatial, "NC" + spatial)


def _expand(v, n):
    """An ``int[n]`` argument as a list of n: torch also accepts one int, or a 1-list."""
    if isinstance(v, int):
        return [v] * n
    return list(v) * n if len(v) == 1 else list(v)


def _conv_fn(stride, padding, dilation, transposed, output_padding, groups, n, acc):
    """``(x, w) -> out`` for aten.convolution's arguments (no bias), computing in ``acc``."""
    stride, padding = _expand(stride, n), _expand(padding, n)
    dilation, output_padding = _expand(dilation, n), _expand(output_padding, n)
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


@lowering(aten.convolution.default)
def convolution(ctx, x, w, bias, stride, padding, dilation, transposed, output_padding, groups):
    n = x.ndim - 2
    acc = _acc(ctx.dtype)
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
    acc = _acc(x.dtype)
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


# -- max pooling -----------------------------------------------------------------------


def _pool_params(n, kernel_size, stride, padding, dilation):
    kernel = _expand(kernel_size, n)
    stride = _expand(stride, n) if stride else kernel  # torch: no stride means the kernel
    return kernel, stride, _expand(padding, n), _expand(dilation, n)


def _max_pool(ctx, x, n, kernel_size, stride, padding, dilation):
    """(values, flat indices into each input plane), for n spatial dims (the last n)."""
    kernel, stride, padding, dilation = _pool_params(n, kernel_size, stride, padding, dilation)
    out_size = tuple(ctx.shape[-n:])
    in_size = x.shape[-n:]
    lead = x.shape[:-n]
    if jnp.issubdtype(x.dtype, jnp.floating):
        lowest = -jnp.inf
    else:
        lowest = jnp.iinfo(x.dtype).min
    # Pad low by `padding` and high as far as the last window reaches (ceil_mode).
    pads = []
    for i in range(n):
        reach = (out_size[i] - 1) * stride[i] + (kernel[i] - 1) * dilation[i] + 1
        pads.append((padding[i], max(0, reach - in_size[i] - padding[i])))
    xp = jnp.pad(x, [(0, 0)] * len(lead) + pads, constant_values=lowest)
    candidates, positions = [], []
    for offset in itertools.product(*(range(k) for k in kernel)):
        start = [o * d for o, d in zip(offset, dilation, strict=True)]
        limit = [s + (o - 1) * st + 1 for s, o, st in zip(start, out_size, stride, strict=True)]
        candidates.append(
            lax.slice(
                xp,
                (0,) * len(lead) + tuple(start),
                tuple(lead) + tuple(limit),
                (1,) * len(lead) + tuple(stride),
            )
        )
        flat = jnp.zeros(out_size, jnp.int64)
        for i in range(n):
            coord = lax.broadcasted_iota(jnp.int64, out_size, i) * stride[i]
            flat = flat * in_size[i] + coord + start[i] - padding[i]
        positions.append(flat)
    stacked = jnp.stack(candidates)
    # The first maximum in window order wins, NaN counting as the maximum (torch's rule).
    best = jnp.argmax(stacked, axis=0)[None]
    values = jnp.take_along_axis(stacked, best, axis=0)[0]
    where = jnp.stack(positions).reshape((len(positions),) + (1,) * len(lead) + out_size)
    indices = jnp.take_along_axis(jnp.broadcast_to(where, stacked.shape), best, axis=0)[0]
    return values, indices


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
    acc = _acc(ctx.dtype)
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


def _vjp(fn, primal, grad):
    """The gradient of linear-in-``primal`` (or any) ``fn`` at ``primal``, for ``grad``."""
    _, pullback = jax.vjp(fn, primal)
    return pullback(grad.astype(primal.dtype))[0]


# -- group norm ------------------------------------------------------------------------


def _group_norm(x, weight, bias, n, c, group, eps, acc):
    """(out, mean, rstd) over (N, group, C/group * HxW) blocks, in ``acc``."""
    xg = x.astype(acc).reshape(n, group, -1)
    mean = jnp.mean(xg, -1, keepdims=True)
    centered = xg - mean
    rstd = lax.rsqrt(jnp.mean(centered * centered, -1, keepdims=True) + eps)
    out = (centered * rstd).reshape(n, c, -1)
    if weight is not None:
        out = out * weight.astype(acc)[None, :, None]
    if bias is not None:
        out = out + bias.astype(acc)[None, :, None]
    return out.reshape(x.shape), mean[..., 0], rstd[..., 0]


@lowering(aten.native_group_norm.default)
def native_group_norm(ctx, x, weight, bias, n, c, hxw, group, eps):
    return _group_norm(x, weight, bias, n, c, group, eps, _acc(x.dtype))


@lowering(aten.native_group_norm_backward.default)
def native_group_norm_backward(ctx, grad, x, mean, rstd, weight, n, c, hxw, group, output_mask):
    acc = _acc(x.dtype)
    g = grad.astype(acc).reshape(n, c, -1)
    mean = mean.astype(acc).reshape(n, group, 1)
    rstd = rstd.astype(acc).reshape(n, group, 1)
    xhat = ((x.astype(acc).reshape(n, group, -1) - mean) * rstd).reshape(n, c, -1)
    outs = []
    if output_mask[0]:
        # Layer norm's formula, per (sample, group) block.
        gxhat = g * weight.astype(acc)[None, :, None] if weight is not None else g
        gxhat, xh = gxhat.reshape(n, group, -1), xhat.reshape(n, group, -1)
        gx = gxhat - jnp.mean(gxhat, -1, keepdims=True)
        gx = gx - xh * jnp.mean(gxhat * xh, -1, keepdims=True)
        outs.append((gx * rstd).reshape(x.shape))
    if output_mask[1]:
        outs.append(jnp.sum(g * xhat, (0, 2)))
    if output_mask[2]:
        outs.append(jnp.sum(g, (0, 2)))
    return tuple(outs)


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
        acc = _acc(x.dtype)
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
        acc = _acc(x.dtype)

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

        return _vjp(pool, x.astype(acc), grad)

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
    return _adaptive_avg_pool(x, tuple(ctx.shape[-n:]), _acc(x.dtype))


@lowering(aten._adaptive_avg_pool2d_backward.default)
def adaptive_avg_pool2d_backward(ctx, grad, x):
    acc = _acc(x.dtype)
    return _vjp(lambda xx: _adaptive_avg_pool(xx, grad.shape[-2:], acc), x.astype(acc), grad)


@lowering(aten._adaptive_avg_pool3d_backward.default)
def adaptive_avg_pool3d_backward(ctx, grad, x):
    acc = _acc(x.dtype)
    return _vjp(lambda xx: _adaptive_avg_pool(xx, grad.shape[-3:], acc), x.astype(acc), grad)


# -- upsampling ------------------------------------------------------------------------


def _scale(in_size, out_size, scale, dt):
    """torch's compute_scales_value: 1/scale when given, else in/out, in ``dt``."""
    if scale is not None and scale > 0:
        return dt(1.0 / scale)
    return dt(in_size) / dt(out_size)


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
        dst = np.arange(o).astype(dt)
        if align_corners:
            s = dt(i - 1) / dt(o - 1) if o > 1 else dt(0)
            src = s * dst
        else:
            s = _scale(i, o, scales[j], dt)
            src = np.maximum(s * (dst + dt(0.5)) - dt(0.5), dt(0))
        i0 = np.minimum(np.floor(src).astype(np.int64), i - 1)
        i1 = np.minimum(i0 + 1, i - 1)
        l1 = np.clip(src - i0.astype(dt), 0, 1)
        shape = (o,) + (1,) * (x.ndim - axis - 1)
        l1 = jnp.asarray(l1, acc).reshape(shape)
        x = (1 - l1) * jnp.take(x, i0, axis=axis) + l1 * jnp.take(x, i1, axis=axis)
    return x


def _nearest_rules(n, exact):
    def forward(ctx, x, output_size, *scales):
        return _nearest(x, tuple(ctx.shape[-n:]), _pad_scales(scales, n), exact, _acc(x.dtype))

    def backward(ctx, grad, output_size, input_size, *scales):
        acc = _acc(ctx.dtype)
        zeros = jnp.zeros(tuple(input_size), acc)
        out = tuple(output_size)
        s = _pad_scales(scales, n)
        return _vjp(lambda xx: _nearest(xx, out, s, exact, acc), zeros, grad.astype(acc))

    return forward, backward


def _linear_rules(n):
    def forward(ctx, x, output_size, align_corners, *scales):
        out = tuple(ctx.shape[-n:])
        return _linear(x, out, align_corners, _pad_scales(scales, n), _acc(x.dtype))

    def backward(ctx, grad, output_size, input_size, align_corners, *scales):
        acc = _acc(ctx.dtype)
        zeros = jnp.zeros(tuple(input_size), acc)
        out = tuple(output_size)
        s = _pad_scales(scales, n)
        return _vjp(lambda xx: _linear(xx, out, align_corners, s, acc), zeros, grad.astype(acc))

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


# -- reflection / replication padding -------------------------------------------------


def _mode_pad(x, padding, mode):
    config = [(0, 0)] * x.ndim
    for j in range(len(padding) // 2):
        config[x.ndim - 1 - j] = (padding[2 * j], padding[2 * j + 1])
    return jnp.pad(x, config, mode=mode)


def _pad_rules(mode):
    def forward(ctx, x, padding):
        return _mode_pad(x, padding, mode)

    def backward(ctx, grad, x, padding):
        acc = _acc(x.dtype)
        return _vjp(lambda xx: _mode_pad(xx, padding, mode), x.astype(acc), grad)

    return forward, backward


for _torch_mode, _jax_mode in (("reflection", "reflect"), ("replication", "edge")):
    for _name in ("1d", "2d", "3d"):
        _fwd, _bwd = _pad_rules(_jax_mode)
        lowering(getattr(aten, f"{_torch_mode}_pad{_name}").default)(_fwd)
        lowering(getattr(aten, f"{_torch_mode}_pad{_name}_backward").default)(_bwd)


# -- smooth L1 / Huber -----------------------------------------------------------------


def _smooth_l1(x, target, reduction, beta, huber, acc):
    d = jnp.abs(x.astype(acc) - target.astype(acc))
    if beta == 0:
        losses = d
    elif huber:
        losses = jnp.where(d < beta, 0.5 * d * d, beta * (d - 0.5 * beta))
    else:
        losses = jnp.where(d < beta, 0.5 * d * d / beta, d - 0.5 * beta)
    return _reduce(losses, reduction)


@lowering(aten.smooth_l1_loss.default)
def smooth_l1_loss(ctx, x, target, reduction=1, beta=1.0):
    return _smooth_l1(x, target, reduction, beta, False, _acc(ctx.dtype))


@lowering(aten.huber_loss.default)
def huber_loss(ctx, x, target, reduction=1, delta=1.0):
    return _smooth_l1(x, target, reduction, delta, True, _acc(ctx.dtype))


@lowering(aten.smooth_l1_loss_backward.default)
def smooth_l1_loss_backward(ctx, grad, x, target, reduction, beta):
    acc = _acc(ctx.dtype)
    gx = _vjp(lambda xx: _smooth_l1(xx, target, reduction, beta, False, acc), x.astype(acc), grad)
    return jnp.broadcast_to(gx, ctx.shape)


@lowering(aten.huber_loss_backward.default)
def huber_loss_backward(ctx, grad, x, target, reduction, delta):
    acc = _acc(ctx.dtype)
    gx = _vjp(lambda xx: _smooth_l1(xx, target, reduction, delta, True, acc), x.astype(acc), grad)
    return jnp.broadcast_to(gx, ctx.shape)


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
