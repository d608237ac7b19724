"""Loss lowerings: nll_loss (1-D and 2-D), mse_loss, binary_cross_entropy (plain and
with logits), smooth_l1_loss and huber_loss, with their backward; soft_margin_loss.

Contract: ``reduction`` is torch's enum: 0 none, 1 mean, 2 sum. float16/bfloat16
inputs are upcast to float32 (``_nn_common.acc_dtype``) for the per-element losses and
their sums, as torch's CPU kernels do, and cast to torch's output dtype once at the
end. ``nll_loss`` gives ignored targets weight 0 and returns ``total_weight`` as its
second output; ``binary_cross_entropy`` clamps its logs at -100 as torch does. The
smooth L1/Huber backward rules are the ``jax.vjp`` of the forward rule, so the two
agree by construction.
"""

from __future__ import annotations

import math

import jax
import jax.numpy as jnp
import torch

from ._nn_common import acc_dtype, vjp_of
from ._promotion import opmath, round_to
from ._registry import lowering

aten = torch.ops.aten


def _nll_terms(x, target, weight, ignore_index):
    """(per-target weight, safe target, class axis): weight 0 where target is ignored."""
    axis = 0 if x.ndim == 1 else 1
    valid = target != ignore_index
    safe = jnp.where(valid, target, 0)
    if weight is not None:
        w = jnp.take(weight.astype(acc_dtype(x.dtype)), safe)
    else:
        w = jnp.ones(target.shape, acc_dtype(x.dtype))
    return jnp.where(valid, w, 0), safe, axis


@lowering(aten.nll_loss_forward.default, aten.nll_loss2d_forward.default, checked=True)
def nll_loss_forward(ctx, x, target, weight, reduction, ignore_index):
    w, safe, axis = _nll_terms(x, target, weight, ignore_index)
    classes = x.shape[axis]
    bad = (target != ignore_index) & ((target < 0) | (target >= classes))
    ctx.check(bad, target, "IndexError", "Target {value} is out of bounds.")
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
    acc = acc_dtype(ctx.dtype)
    d = x.astype(acc) - target.astype(acc)
    return _reduce(d * d, reduction)


@lowering(aten.mse_loss_backward.default)
def mse_loss_backward(ctx, grad, x, target, reduction):
    acc = acc_dtype(ctx.dtype)
    d = x.astype(acc) - target.astype(acc)
    n = math.prod(jnp.broadcast_shapes(x.shape, target.shape))
    norm = 2.0 / n if reduction == 1 else 2.0
    return jnp.broadcast_to(norm * d * grad.astype(acc), ctx.shape)


@lowering(aten.binary_cross_entropy_with_logits.default)
def bce_with_logits(ctx, x, target, weight=None, pos_weight=None, reduction=1):
    acc = acc_dtype(ctx.dtype)
    x, target = x.astype(acc), target.astype(acc)
    log_sig = jax.nn.log_sigmoid(x)
    if pos_weight is not None:
        log_sig = log_sig * ((pos_weight.astype(acc) - 1) * target + 1)
    losses = (1 - target) * x - log_sig
    if weight is not None:
        losses = losses * weight.astype(acc)
    return _reduce(losses, reduction)


@lowering(aten.binary_cross_entropy.default, checked=True)
def binary_cross_entropy(ctx, x, target, weight=None, reduction=1):
    outside = ~((x >= 0) & (x <= 1))  # NaN too, as torch's check reads
    ctx.check(outside, None, "RuntimeError", "all elements of input should be between 0 and 1")
    acc = acc_dtype(ctx.dtype)
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
    acc = acc_dtype(ctx.dtype)
    x, target = x.astype(acc), target.astype(acc)
    gx = grad.astype(acc) * (x - target) / jnp.maximum((1 - x) * x, 1e-12)
    if weight is not None:
        gx = gx * weight.astype(acc)
    if reduction == 1:
        gx = gx / x.size
    return jnp.broadcast_to(gx, ctx.shape)


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
    return _smooth_l1(x, target, reduction, beta, False, acc_dtype(ctx.dtype))


@lowering(aten.huber_loss.default)
def huber_loss(ctx, x, target, reduction=1, delta=1.0):
    return _smooth_l1(x, target, reduction, delta, True, acc_dtype(ctx.dtype))


@lowering(aten.smooth_l1_loss_backward.default)
def smooth_l1_loss_backward(ctx, grad, x, target, reduction, beta):
    acc = acc_dtype(ctx.dtype)
    gx = vjp_of(lambda xx: _smooth_l1(xx, target, reduction, beta, False, acc), x.astype(acc), grad)
    return jnp.broadcast_to(gx, ctx.shape)


@lowering(aten.huber_loss_backward.default)
def huber_loss_backward(ctx, grad, x, target, reduction, delta):
    acc = acc_dtype(ctx.dtype)
    gx = vjp_of(lambda xx: _smooth_l1(xx, target, reduction, delta, True, acc), x.astype(acc), grad)
    return jnp.broadcast_to(gx, ctx.shape)


@lowering(aten.soft_margin_loss.default)
def soft_margin_loss(ctx, x, target, reduction=1):
    """``log1p(exp(-x * target))``, reduced; torch composes it of tensor ops, so a
    half-precision input rounds each step to its dtype."""
    dtype = ctx.dtype
    step = lambda v: round_to(v, dtype)  # noqa: E731
    a, t = x.astype(opmath(dtype)), target.astype(opmath(dtype))
    losses = step(jnp.log1p(step(jnp.exp(step(-a * t)))))
    return _reduce(losses, reduction)
