"""nn ops: softmax/log_softmax (+ _safe_softmax), layer/group norm, batch norm (its
functional and inference forms, and its backward) and embedding, each with its
backward.

Contract: rules compute in torch's precision: float16/bfloat16 inputs are upcast to
float32 (``_nn_common.acc_dtype``) for the reductions inside (softmax sums,
normalisation moments, embedding gradient sums), as torch's CPU kernels do, and cast
to torch's output dtype once at the end. Multi-output backward ops return only the
outputs torch returns (``output_mask`` says which; layer norm also drops the
weight/bias gradient when that parameter is absent).

``native_batch_norm`` itself is deliberately not lowered: in training it updates
``running_mean``/``running_var`` in place although its schema does not say so, which a
functional rule cannot express. ``_native_batch_norm_legit_functional`` (lowered here)
returns the updated statistics for whoever maps the op onto it.
"""

from __future__ import annotations

import jax.numpy as jnp
import torch
from jax import lax

from ._arguments import output_specs
from ._bounds import IN_SELF, check_index
from ._nn_common import acc_dtype
from ._registry import lowering

aten = torch.ops.aten


def _at_least_1d(x):
    return x.reshape(1) if x.ndim == 0 else x


# -- softmax ---------------------------------------------------------------------------


def _shifted(x, dim):
    """``x`` minus its max along ``dim`` (an empty ``x`` as it is: no max to take)."""
    if x.size == 0:
        return x
    return x - jnp.max(x, dim, keepdims=True)


def _softmax(x, dim, acc):
    x = _at_least_1d(x).astype(acc)
    dim %= x.ndim
    e = jnp.exp(_shifted(x, dim))
    return e / jnp.sum(e, dim, keepdims=True)


def _log_softmax(x, dim, acc):
    x = _at_least_1d(x).astype(acc)
    dim %= x.ndim
    shifted = _shifted(x, dim)
    return shifted - jnp.log(jnp.sum(jnp.exp(shifted), dim, keepdims=True))


@lowering(aten._softmax.default)
def softmax(ctx, x, dim, half_to_float):
    return _softmax(x, dim, acc_dtype(ctx.dtype)).reshape(ctx.shape)


@lowering(aten._safe_softmax.default)
def safe_softmax(ctx, x, dim, dtype=None):
    # As torch's: rows that are entirely -inf (fully masked attention) give 0, not NaN.
    out = _softmax(x, dim, acc_dtype(ctx.dtype))
    x1 = _at_least_1d(x)
    masked = jnp.all(x1 == -jnp.inf, dim % x1.ndim, keepdims=True)
    return jnp.where(masked, 0, out).reshape(ctx.shape)


@lowering(aten._log_softmax.default)
def log_softmax(ctx, x, dim, half_to_float):
    return _log_softmax(x, dim, acc_dtype(ctx.dtype)).reshape(ctx.shape)


def _softmax_grads(ctx, grad, output, dim):
    acc = acc_dtype(ctx.dtype)
    g = _at_least_1d(grad).astype(acc)
    return g, _at_least_1d(output).astype(acc), dim % g.ndim


@lowering(aten._softmax_backward_data.default)
def softmax_backward(ctx, grad, output, dim, input_dtype):
    g, y, dim = _softmax_grads(ctx, grad, output, dim)
    return (y * (g - jnp.sum(g * y, dim, keepdims=True))).reshape(ctx.shape)


@lowering(aten._log_softmax_backward_data.default)
def log_softmax_backward(ctx, grad, output, dim, input_dtype):
    g, y, dim = _softmax_grads(ctx, grad, output, dim)
    return (g - jnp.exp(y) * jnp.sum(g, dim, keepdims=True)).reshape(ctx.shape)


# -- layer norm ------------------------------------------------------------------------


@lowering(aten.native_layer_norm.default)
def native_layer_norm(ctx, x, normalized_shape, weight, bias, eps):
    acc = acc_dtype(x.dtype)
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
    acc = acc_dtype(x.dtype)
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
    acc = acc_dtype(x.dtype)
    invstd = lax.rsqrt(running_var.astype(acc) + eps)
    out = _bn_forward(x, weight, bias, running_mean.astype(acc), invstd, acc)
    # torch returns empty save_mean/save_invstd here.
    return (out,) + tuple(jnp.zeros(s, d) for s, d in ctx.out[1:])


@lowering(aten._native_batch_norm_legit.no_stats)
def batch_norm_no_stats(ctx, x, weight, bias, training, momentum, eps):
    acc = acc_dtype(x.dtype)
    mean, _, invstd = _batch_stats(x, eps, acc)
    return _bn_forward(x, weight, bias, mean, invstd, acc), mean, invstd


@lowering(aten._native_batch_norm_legit_functional.default)
def batch_norm_functional(ctx, x, weight, bias, running_mean, running_var, training, momentum, eps):
    acc = acc_dtype(x.dtype)
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


@output_specs(aten.native_batch_norm_backward.default)
def native_batch_norm_backward_specs(*args):
    # The meta kernel gives all three gradients; the CPU kernel leaves the ones
    # ``output_mask`` turns off undefined (None), as the rule below does (a BatchNorm
    # whose input needs no gradient: the first layer of a model).
    outs = aten.native_batch_norm_backward.default(*args)
    return tuple(o if wanted else None for o, wanted in zip(outs, args[-1]))


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
    acc = acc_dtype(x.dtype)
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


@lowering(aten.embedding.default, checked=True)
def embedding(ctx, weight, indices, padding_idx=-1, scale_grad_by_freq=False, sparse=False):
    check_index(ctx, indices, weight.shape[0], "IndexError", IN_SELF)
    return jnp.take(weight, indices, axis=0)


@lowering(aten.embedding_dense_backward.default)
def embedding_dense_backward(ctx, grad, indices, num_weights, padding_idx, scale_grad_by_freq):
    acc = acc_dtype(ctx.dtype)
    idx = indices.reshape(-1)
    g = grad.reshape((idx.shape[0], -1)).astype(acc)
    if padding_idx >= 0:
        g = jnp.where((idx == padding_idx)[:, None], 0, g)
    if scale_grad_by_freq:
        counts = jnp.zeros((num_weights,), acc).at[idx].add(1)
        g = g / counts[idx][:, None]
    return jnp.zeros((num_weights, g.shape[1]), acc).at[idx].add(g)


# -- group norm ------------------------------------------------------------------------


def _group_norm(x, weight, bias, n, c, hxw, group, eps, acc):
    """(out, mean, rstd) over (N, group, C/group * HxW) blocks, in ``acc``. Sizes are
    spelled out (no -1): a batch of 0 is legal."""
    xg = x.astype(acc).reshape(n, group, (c // group) * hxw)
    mean = jnp.mean(xg, -1, keepdims=True)
    centered = xg - mean
    rstd = lax.rsqrt(jnp.mean(centered * centered, -1, keepdims=True) + eps)
    out = (centered * rstd).reshape(n, c, hxw)
    if weight is not None:
        out = out * weight.astype(acc)[None, :, None]
    if bias is not None:
        out = out + bias.astype(acc)[None, :, None]
    return out.reshape(x.shape), mean[..., 0], rstd[..., 0]


@lowering(aten.native_group_norm.default)
def native_group_norm(ctx, x, weight, bias, n, c, hxw, group, eps):
    return _group_norm(x, weight, bias, n, c, hxw, group, eps, acc_dtype(x.dtype))


@lowering(aten.native_group_norm_backward.default)
def native_group_norm_backward(ctx, grad, x, mean, rstd, weight, n, c, hxw, group, output_mask):
    acc = acc_dtype(x.dtype)
    block = (c // group) * hxw
    g = grad.astype(acc).reshape(n, c, hxw)
    mean = mean.astype(acc).reshape(n, group, 1)
    rstd = rstd.astype(acc).reshape(n, group, 1)
    xhat = ((x.astype(acc).reshape(n, group, block) - mean) * rstd).reshape(n, c, hxw)
    outs = []
    if output_mask[0]:
        # Layer norm's formula, per (sample, group) block.
        gxhat = g * weight.astype(acc)[None, :, None] if weight is not None else g
        gxhat, xh = gxhat.reshape(n, group, block), xhat.reshape(n, group, block)
        gx = gxhat - jnp.mean(gxhat, -1, keepdims=True)
        gx = gx - xh * jnp.mean(gxhat * xh, -1, keepdims=True)
        outs.append((gx * rstd).reshape(x.shape))
    if output_mask[1]:
        outs.append(jnp.sum(g * xhat, (0, 2)))
    if output_mask[2]:
        outs.append(jnp.sum(g, (0, 2)))
    return tuple(outs)
