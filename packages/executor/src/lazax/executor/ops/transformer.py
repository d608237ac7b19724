"""torch's fused transformer inference ops, the "fast path" ``nn.MultiheadAttention`` and
``nn.TransformerEncoderLayer`` take in eval mode without grad:
``_native_multi_head_attention`` and ``_transformer_encoder_layer_fwd``.

Contract: each computes what torch's CPU kernel computes, composed here in jax:
- Attention: ``q, k, v`` are the input projections by ``qkv_weight``/``qkv_bias`` (its
  three row blocks), ``q`` scaled by ``1/sqrt(head_dim)`` after its bias; the scores
  ``q k^T`` are masked and soft-maxed over the keys, multiply ``v``, and the heads,
  concatenated, go through the output projection.
- Masks: any nonzero (or True) entry masks its position out (torch turns a float mask
  into a bool one, so a float mask's finite nonzero entries mask too). ``mask_type``
  0: one (T, T) mask for every batch and head; 1: a (B, T) key padding mask; 2 or
  None: broadcast to (B, H, T, T). A query whose keys are all masked gives NaN, as on
  the CPU.
- ``need_weights``: the second output is the attention weights, (B, T, T) averaged over
  heads with ``average_attn_weights``, else (B, H, T, T); without it the second output
  is ``None``, as the CPU kernel returns (torch's meta kernel says an empty tensor:
  ``output_specs`` corrects it).
- Encoder layer: the attention block, then the feed-forward block (ReLU, or exact GELU
  with ``use_gelu``), each added to its input, with layer norm after each (before
  each with ``norm_first``); an empty input comes back as a copy.
- Products at full float32 precision; float16/bfloat16 compute in float32 and round once
  at the end (torch's CPU kernel rounds after each step: close, not equal).
No gradients: torch takes these paths only where nothing needs one.
"""

from __future__ import annotations

import math

import jax.numpy as jnp
import torch
from jax import lax

from ._arguments import output_specs
from ._registry import lowering

aten = torch.ops.aten


def _compute_dtype(dtype):
    return jnp.promote_types(dtype, jnp.float32)


def _linear(x, weight, bias):
    out = jnp.matmul(x, weight.T.astype(x.dtype), precision=lax.Precision.HIGHEST)
    return out + bias.astype(x.dtype)


def _layer_norm(x, weight, bias, eps):
    mean = jnp.mean(x, -1, keepdims=True)
    centered = x - mean
    var = jnp.mean(centered * centered, -1, keepdims=True)
    return centered * lax.rsqrt(var + eps) * weight.astype(x.dtype) + bias.astype(x.dtype)


def _masked_out(mask, mask_type, batch, heads, length):
    """The mask as bool (True: masked out), broadcastable to (B, H, T, T)."""
    masked = mask != 0
    if mask_type == 0:
        return masked.reshape(1, 1, length, length)
    if mask_type == 1:
        return masked.reshape(batch, 1, 1, length)
    return masked


def _attention(
    query, key, value, num_head, qkv_weight, qkv_bias, proj_weight, proj_bias, mask, mask_type
):
    """The attention output (B, T, D) and weights (B, H, T, T), in the compute dtype."""
    batch, length, dim = query.shape
    head_dim = dim // num_head
    weights, biases = jnp.split(qkv_weight, 3, axis=0), jnp.split(qkv_bias, 3, axis=0)
    q, k, v = (_linear(x, w, b) for x, w, b in zip((query, key, value), weights, biases))
    q = q * jnp.asarray(1.0 / math.sqrt(head_dim), q.dtype)

    def heads(x):  # (B, T, D) -> (B, H, T, head_dim)
        return x.reshape(batch, -1, num_head, head_dim).transpose(0, 2, 1, 3)

    q, k, v = heads(q), heads(k), heads(v)
    scores = jnp.matmul(q, jnp.swapaxes(k, -1, -2), precision=lax.Precision.HIGHEST)
    if mask is not None:
        hidden = _masked_out(mask, mask_type, batch, num_head, length)
        scores = jnp.where(hidden, -jnp.inf, scores)
    # Plain softmax: a fully masked row is NaN (0/0), as in torch's CPU kernel.
    shifted = scores - jnp.max(scores, -1, keepdims=True)
    exp = jnp.exp(shifted)
    attn = exp / jnp.sum(exp, -1, keepdims=True)
    context = jnp.matmul(attn, v, precision=lax.Precision.HIGHEST)
    context = context.transpose(0, 2, 1, 3).reshape(batch, length, dim)
    return _linear(context, proj_weight, proj_bias), attn


@output_specs(aten._native_multi_head_attention.default)
def native_multi_head_attention_specs(
    query, key, value, embed_dim, num_head, qkv_weight, qkv_bias, proj_weight, proj_bias,
    mask=None, need_weights=True, average_attn_weights=True, mask_type=None,
):  # fmt: skip
    out, weights = aten._native_multi_head_attention.default(
        query, key, value, embed_dim, num_head, qkv_weight, qkv_bias, proj_weight, proj_bias,
        mask, need_weights, average_attn_weights, mask_type,
    )  # fmt: skip
    return out, weights if need_weights else None


@lowering(aten._native_multi_head_attention.default)
def native_multi_head_attention(
    ctx, query, key, value, embed_dim, num_head, qkv_weight, qkv_bias, proj_weight, proj_bias,
    mask=None, need_weights=True, average_attn_weights=True, mask_type=None,
):  # fmt: skip
    dtype = _compute_dtype(query.dtype)
    cast = [t.astype(dtype) for t in (query, key, value)]
    out, attn = _attention(
        *cast, num_head, qkv_weight, qkv_bias, proj_weight, proj_bias, mask, mask_type
    )
    if not need_weights:
        return out
    if average_attn_weights:
        attn = jnp.sum(attn, 1) / num_head
    return out, attn


@lowering(aten._transformer_encoder_layer_fwd.default)
def transformer_encoder_layer_fwd(
    ctx, src, embed_dim, num_heads, qkv_weight, qkv_bias, proj_weight, proj_bias, use_gelu,
    norm_first, eps, norm_weight_1, norm_bias_1, norm_weight_2, norm_bias_2,
    ffn_weight_1, ffn_bias_1, ffn_weight_2, ffn_bias_2, mask=None, mask_type=None,
):  # fmt: skip
    if src.size == 0:
        return src
    x = src.astype(_compute_dtype(src.dtype))

    def attention_block(h):
        out, _ = _attention(
            h, h, h, num_heads, qkv_weight, qkv_bias, proj_weight, proj_bias, mask, mask_type
        )
        return out

    def feed_forward(h):
        h = _linear(h, ffn_weight_1, ffn_bias_1)
        if use_gelu:
            h = h * 0.5 * (1 + lax.erf(h * (1 / math.sqrt(2))))
        else:
            h = jnp.maximum(h, 0)
        return _linear(h, ffn_weight_2, ffn_bias_2)

    if norm_first:
        x = x + attention_block(_layer_norm(x, norm_weight_1, norm_bias_1, eps))
        x = x + feed_forward(_layer_norm(x, norm_weight_2, norm_bias_2, eps))
    else:
        x = _layer_norm(x + attention_block(x), norm_weight_1, norm_bias_1, eps)
        x = _layer_norm(x + feed_forward(x), norm_weight_2, norm_bias_2, eps)
    return x
