"""The benchmark's ceiling: the same decoder and AdamW step written in pure JAX.

Contract: ``make_jax_train_step(torch_model, lr)`` returns ``(step, state)`` where
``step(state, tokens) -> (state, loss)`` is one ``jax.jit``-compiled training step of
the same architecture as ``benchmarks.models.Decoder`` (same shapes, same initial
weights taken from the torch model, AdamW with torch's defaults). It is what XLA can do
with no tracing at all; lazax's modes are measured as a fraction of it.
``make_jax_forward(torch_model)`` returns ``(forward, params)``: the jitted inference
``forward(params, tokens) -> logits``.
"""

from __future__ import annotations

import math

import jax
import jax.numpy as jnp
import numpy as np

from .models import Decoder

__all__ = ["make_jax_forward", "make_jax_train_step"]


def _layer_norm(x, w, b, eps=1e-5):
    mean = x.mean(-1, keepdims=True)
    var = ((x - mean) ** 2).mean(-1, keepdims=True)
    return (x - mean) * jax.lax.rsqrt(var + eps) * w + b


def _linear(x, p, name, bias=True, low=None):
    w = p[f"{name}.weight"]
    if low is not None:  # autocast: a linear runs in the low precision, bias included
        x, w = x.astype(low), w.astype(low)
    y = x @ w.T
    if not bias:
        return y
    b = p[f"{name}.bias"]
    return y + (b.astype(low) if low is not None else b)


def _matmul(a, b, low):
    if low is not None:
        a, b = a.astype(low), b.astype(low)
    return a @ b


def _softmax32(x, low):
    # torch's CUDA autocast policy: softmax (and log_softmax) compute in float32
    return jax.nn.softmax(x.astype(jnp.float32) if low is not None else x, axis=-1)


def _forward(p, tokens, n_layers, n_heads, mask, low=None):
    b, t = tokens.shape
    x = p["tok.weight"][tokens] + p["pos.weight"][jnp.arange(t)]
    d = x.shape[-1]
    hd = d // n_heads
    for i in range(n_layers):
        pre = f"blocks.{i}"
        h = _layer_norm(x, p[f"{pre}.ln1.weight"], p[f"{pre}.ln1.bias"])
        q, k, v = jnp.split(_linear(h, p, f"{pre}.attn.qkv", low=low), 3, axis=-1)

        def heads(z):
            return z.reshape(b, t, n_heads, hd).transpose(0, 2, 1, 3)

        q, k, v = heads(q), heads(k), heads(v)
        scores = _matmul(q, k.transpose(0, 1, 3, 2), low) / math.sqrt(hd)
        scores = jnp.where(mask[:t, :t], -jnp.inf, scores)
        attn = _softmax32(scores, low)
        out = _matmul(attn, v, low).transpose(0, 2, 1, 3).reshape(b, t, d)
        x = x + _linear(out, p, f"{pre}.attn.proj", low=low)
        h = _layer_norm(x, p[f"{pre}.ln2.weight"], p[f"{pre}.ln2.bias"])
        h = jax.nn.gelu(_linear(h, p, f"{pre}.mlp.0", low=low), approximate=False)
        x = x + _linear(h, p, f"{pre}.mlp.2", low=low)
    x = _layer_norm(x, p["ln_f.weight"], p["ln_f.bias"])
    return _linear(x, p, "head", bias=False, low=low)


def _loss(p, tokens, n_layers, n_heads, mask, low=None):
    logits = _forward(p, tokens, n_layers, n_heads, mask, low)[:, :-1]
    targets = tokens[:, 1:]
    # cross_entropy takes log_softmax in the logits' dtype; nll_loss runs in float32
    logp = jax.nn.log_softmax(logits, axis=-1).astype(jnp.float32)
    return -jnp.take_along_axis(logp, targets[..., None], axis=-1).mean()


def _params_and_mask(model: Decoder):
    cfg = model.cfg
    params = {k: jnp.asarray(v.detach().cpu().numpy()) for k, v in model.named_parameters()}
    mask = jnp.asarray(np.triu(np.ones((cfg.seq, cfg.seq), dtype=bool), 1))
    return params, mask


def make_jax_forward(model: Decoder):
    cfg = model.cfg
    params, mask = _params_and_mask(model)

    def forward(p, tokens):
        return _forward(p, tokens, cfg.n_layers, cfg.n_heads, mask)

    return jax.jit(forward), params


def make_jax_train_step(model: Decoder, lr: float = 1e-3, low=None):
    """``low``: a dtype (``jnp.bfloat16``) to run the step as torch's autocast does on
    CUDA: linears and matmuls in it, softmax and norms in float32, weights and the
    optimizer in float32."""
    cfg = model.cfg
    params, mask = _params_and_mask(model)
    b1, b2, eps, wd = 0.9, 0.999, 1e-8, 1e-2

    def step(state, tokens):
        p, m, v, count = state
        loss, grads = jax.value_and_grad(_loss)(p, tokens, cfg.n_layers, cfg.n_heads, mask, low)
        count = count + 1
        bc1 = 1 - b1**count
        bc2 = 1 - b2**count
        new_p, new_m, new_v = {}, {}, {}
        for k in p:
            g = grads[k]
            new_m[k] = b1 * m[k] + (1 - b1) * g
            new_v[k] = b2 * v[k] + (1 - b2) * g * g
            param = p[k] * (1 - lr * wd)
            denom = jnp.sqrt(new_v[k] / bc2) + eps
            new_p[k] = param - (lr / bc1) * new_m[k] / denom
        return (new_p, new_m, new_v, count), loss

    zeros = {k: jnp.zeros_like(x) for k, x in params.items()}
    state = (params, zeros, dict(zeros), jnp.zeros((), jnp.float32))
    return jax.jit(step), state
