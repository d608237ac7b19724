"""The CNN's ceiling: ``benchmarks.models.CNN`` and its SGD step written in pure JAX.

Contract: ``make_jax_cnn_train_step(torch_model, lr, momentum)`` returns
``(step, state)``; ``step(state, images, labels) -> (state, loss)`` is one
``jax.jit``-compiled training step: the same layers and initial weights as the torch
model, batch norm in training mode (batch statistics, running statistics updated with
torch's momentum and unbiased variance), cross entropy, and torch's SGD with momentum.
``make_jax_cnn_forward(torch_model)`` returns the jitted inference forward (running
statistics) and its parameters.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp

from .models import CNN

__all__ = ["make_jax_cnn_forward", "make_jax_cnn_train_step"]

_BN_MOMENTUM, _BN_EPS = 0.1, 1e-5
_CONV_BN = ("stem", "block1.a", "block1.b", "down", "block2.a", "block2.b")


def _conv(x, w, stride):
    return jax.lax.conv_general_dilated(
        x, w, (stride, stride), ((1, 1), (1, 1)), dimension_numbers=("NCHW", "OIHW", "NCHW")
    )


def _bn(x, p, stats, name, training):
    w, b = p[f"{name}.1.weight"], p[f"{name}.1.bias"]
    if training:
        mean = x.mean(axis=(0, 2, 3))
        var = x.var(axis=(0, 2, 3))
        n = x.shape[0] * x.shape[2] * x.shape[3]
        new = {
            f"{name}.1.running_mean": (1 - _BN_MOMENTUM) * stats[f"{name}.1.running_mean"]
            + _BN_MOMENTUM * mean,
            f"{name}.1.running_var": (1 - _BN_MOMENTUM) * stats[f"{name}.1.running_var"]
            + _BN_MOMENTUM * var * n / (n - 1),
        }
    else:
        mean, var = stats[f"{name}.1.running_mean"], stats[f"{name}.1.running_var"]
        new = {}
    inv = jax.lax.rsqrt(var + _BN_EPS)
    y = (x - mean[None, :, None, None]) * (inv * w)[None, :, None, None] + b[None, :, None, None]
    return y, new


def _forward(p, stats, images, training):
    new_stats = {}

    def conv_bn(x, name, stride=1):
        y, new = _bn(_conv(x, p[f"{name}.0.weight"], stride), p, stats, name, training)
        new_stats.update(new)
        return y

    def block(x, name):
        h = jax.nn.relu(conv_bn(x, f"{name}.a"))
        return jax.nn.relu(x + conv_bn(h, f"{name}.b"))

    x = jax.nn.relu(conv_bn(images, "stem"))
    x = jax.lax.reduce_window(x, -jnp.inf, jax.lax.max, (1, 1, 2, 2), (1, 1, 2, 2), "VALID")
    x = block(x, "block1")
    x = block(jax.nn.relu(conv_bn(x, "down", stride=2)), "block2")
    logits = x.mean(axis=(2, 3)) @ p["head.weight"].T + p["head.bias"]
    return logits, new_stats


def _loss(p, stats, images, labels):
    logits, new_stats = _forward(p, stats, images, training=True)
    logp = jax.nn.log_softmax(logits, axis=-1)
    return -jnp.take_along_axis(logp, labels[:, None], axis=-1).mean(), new_stats


def _state_of(model: CNN):
    params = {k: jnp.asarray(v.detach().numpy()) for k, v in model.named_parameters()}
    stats = {
        k: jnp.asarray(v.numpy())
        for k, v in model.named_buffers()
        if k.endswith(("running_mean", "running_var"))
    }
    return params, stats


def make_jax_cnn_train_step(model: CNN, lr: float = 0.05, momentum: float = 0.9):
    params, stats = _state_of(model)

    def step(state, images, labels):
        p, buf, s = state
        (loss, new_s), grads = jax.value_and_grad(_loss, has_aux=True)(p, s, images, labels)
        new_buf = {k: momentum * buf[k] + grads[k] for k in p}
        new_p = {k: p[k] - lr * new_buf[k] for k in p}
        return (new_p, new_buf, new_s), loss

    zeros = {k: jnp.zeros_like(x) for k, x in params.items()}
    return jax.jit(step), (params, zeros, stats)


def make_jax_cnn_forward(model: CNN):
    params, stats = _state_of(model)

    def forward(state, images):
        return _forward(state[0], state[1], images, training=False)[0]

    return jax.jit(forward), (params, stats)
