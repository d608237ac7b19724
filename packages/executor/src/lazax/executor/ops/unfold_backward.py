"""The backward of ``Tensor.unfold(dim, size, step)``: ``unfold_backward``.

Contract: ``unfold_backward(grad_in, input_sizes, dim, size, step)`` returns the
gradient of an ``input_sizes`` input, whose element ``w * step + k`` along ``dim`` sums
``grad_in``'s window ``w``, position ``k`` (the window axis stands at ``dim``, the
position axis last, as ``unfold`` made them). Computed densely, without a scatter, as
an overlap-add: the window positions are cut into ``ceil(size / step)`` blocks of
``step``; within one block the windows do not overlap, so each block is one reshape
placed at its offset (``lax.pad``, negative high padding cropping what runs past the
end), and the blocks are summed. float16/bfloat16 sums run in float32
(``_nn_common.acc_dtype``) and are rounded once, where torch's CPU kernel adds in the
input dtype (a difference of rounding only where windows overlap). A 0-dim input (whose
unfold has one element or none) gets the sum of ``grad_in`` (in torch's output shape,
``(0,)`` for an empty unfold).
"""

from __future__ import annotations

import math

import jax.numpy as jnp
import torch
from jax import lax

from ._nn_common import acc_dtype
from ._registry import lowering

aten = torch.ops.aten


@lowering(aten.unfold_backward.default)
def unfold_backward(ctx, grad_in, input_sizes, dim, size, step):
    acc = acc_dtype(grad_in.dtype)
    g = grad_in.astype(acc)
    input_sizes = tuple(int(s) for s in input_sizes)
    if not input_sizes:  # torch's meta kernel says (0,) when size is 0
        return jnp.broadcast_to(jnp.sum(g), ctx.shape)
    dim = dim % len(input_sizes)
    length = input_sizes[dim]
    g = jnp.moveaxis(g, dim, -2)  # (rest..., windows, size)
    rest, windows = g.shape[:-2], g.shape[-2]
    blocks = math.ceil(size / step) if size else 0
    if blocks == 0 or windows == 0:
        return jnp.zeros(input_sizes, acc)
    g = jnp.pad(g, [(0, 0)] * (g.ndim - 1) + [(0, blocks * step - size)])
    g = g.reshape(*rest, windows, blocks, step)
    zero = jnp.zeros((), acc)
    total = None
    for q in range(blocks):
        piece = g[..., q, :].reshape(*rest, windows * step)
        low = q * step
        high = length - low - windows * step
        config = [(0, 0, 0)] * len(rest) + [(low, high, 0)]
        placed = lax.pad(piece, zero, config)
        total = placed if total is None else total + placed
    return jnp.moveaxis(total, -1, dim)
