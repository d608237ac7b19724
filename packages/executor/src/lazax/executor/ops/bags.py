"""``nn.EmbeddingBag`` (``F.embedding_bag``): ``_embedding_bag`` and its backward.

Contract (see ``_registry``): bag ``b`` holds the indices from ``offsets[b]`` up to the
next offset (the last bag to the end, or to the extra offset that
``include_last_offset`` adds); an index equal to ``padding_idx`` takes no part (it is
not counted in a bag's size and gets no gradient); an empty bag gives zeros. ``mode``
0 sums (each row scaled by ``per_sample_weights`` when given), 1 averages, 2 takes the
per-column maximum. Besides the result, torch's kernel returns bookkeeping for its
backward whose shapes its meta kernel fixes and whose values the CPU kernel fills as
below (they are compared by torch's own tests): ``offset2bag`` (each index's bag;
empty in the sum mode without padding), ``bag_size`` (indices counted per bag, zeros
in the sum mode), ``max_indices`` (the row each maximum came from in mode 2, the
bag sizes in mode 1, zeros in mode 0). The backward scatters the gradient to the rows
the forward read, divided by an index's count in the batch with
``scale_grad_by_freq``. ``offsets[0]`` other than 0 raises torch's error (a device-side
check). Indices out of range are not checked, as torch's CPU kernel does not check
them: their rows read as zeros and take no gradient.
"""

from __future__ import annotations

import jax.numpy as jnp
import torch
from jax import lax

from ._arguments import output_specs
from ._nn_common import acc_dtype
from ._registry import lowering

aten = torch.ops.aten

_SUM, _MEAN, _MAX = 0, 1, 2
_FIRST_OFFSET = (
    "offsets[0] has to be 0, i.e., the first sequence in the mini-batch has to start "
    "from position 0. However, got {value}"
)


def _bag_of_each_index(indices, offsets, bags: int):
    """Each index's bag: the last offset at or before its position."""
    position = lax.iota(offsets.dtype, indices.shape[0])
    return jnp.searchsorted(offsets[:bags], position, side="right") - 1


def _bags(offsets, include_last_offset: bool) -> int:
    return offsets.shape[0] - 1 if include_last_offset else offsets.shape[0]


def _fast_sum(weight, mode, per_sample_weights, padding_idx) -> bool:
    """The CPU kernel's path that keeps no ``offset2bag``: a sum without padding over
    float32 or half weights."""
    return mode == _SUM and padding_idx < 0 and weight.dtype != torch.float64


@output_specs(aten._embedding_bag.default, aten._embedding_bag_forward_only.default)
def embedding_bag_specs(
    weight, indices, offsets, scale_grad_by_freq=False, mode=_SUM, sparse=False,
    per_sample_weights=None, include_last_offset=False, padding_idx=-1,
):  # fmt: skip
    # The meta kernel's bookkeeping shapes are not the CPU kernel's; take the result's
    # from it (and its argument checks), the others as the CPU kernel makes them.
    out = aten._embedding_bag.default(
        weight, indices, offsets, scale_grad_by_freq, mode, sparse, per_sample_weights,
        include_last_offset, padding_idx,
    )[0]  # fmt: skip
    bags = _bags(offsets, include_last_offset)
    kept = 0 if _fast_sum(weight, mode, per_sample_weights, padding_idx) else indices.shape[0]
    index = dict(dtype=indices.dtype, device="meta")
    per_column = (bags, weight.shape[1]) if mode == _MAX else (bags,)
    return (
        out,
        torch.empty(kept, **index),
        torch.empty(bags, **index),
        torch.empty(per_column, **index),
    )


@lowering(aten._embedding_bag.default, aten._embedding_bag_forward_only.default, checked=True)
def embedding_bag(
    ctx,
    weight,
    indices,
    offsets,
    scale_grad_by_freq=False,
    mode=_SUM,
    sparse=False,
    per_sample_weights=None,
    include_last_offset=False,
    padding_idx=-1,
):
    if offsets.shape[0]:
        ctx.check(offsets[:1] != 0, offsets[:1], "RuntimeError", _FIRST_OFFSET)
    bags = _bags(offsets, include_last_offset)
    bag = _bag_of_each_index(indices, offsets, bags)
    acc = acc_dtype(weight.dtype)
    # An index past the last bag's end (include_last_offset) or a padding index counts
    # nowhere: its bag is sent past the end, where the scatters drop it.
    counted = indices != padding_idx
    if include_last_offset:
        counted = counted & (lax.iota(offsets.dtype, indices.shape[0]) < offsets[-1])
    target = jnp.where(counted, bag, bags)
    rows = jnp.take(weight, indices, axis=0, mode="fill", fill_value=0).astype(acc)
    size = jnp.zeros((bags,), jnp.int64).at[target].add(1, mode="drop")
    if mode == _MAX:
        low = jnp.full((bags, weight.shape[1]), -jnp.inf, acc)
        best = low.at[target].max(rows, mode="drop")
        out = jnp.where(size[:, None] > 0, best, 0)
        # The row of the first index in the bag that reached the maximum, per column.
        hit = (rows == best[jnp.clip(target, 0, bags - 1)]) & counted[:, None]
        order = jnp.where(hit, lax.iota(jnp.int64, indices.shape[0])[:, None], indices.shape[0])
        first = jnp.full((bags, weight.shape[1]), indices.shape[0], jnp.int64)
        first = first.at[target].min(order, mode="drop")
        argmax = jnp.take(indices, jnp.clip(first, 0, max(indices.shape[0] - 1, 0)), mode="fill")
        max_indices = jnp.where(size[:, None] > 0, argmax, 0)
    else:
        if per_sample_weights is not None:
            rows = rows * per_sample_weights.astype(acc)[:, None]
        out = jnp.zeros((bags, weight.shape[1]), acc).at[target].add(rows, mode="drop")
        if mode == _MEAN:
            out = out / jnp.maximum(size, 1)[:, None].astype(acc)
        max_indices = size if mode == _MEAN else jnp.zeros(ctx.out[3][0], jnp.int64)
    offset2bag = bag if ctx.out[1][0][0] else jnp.zeros((0,), jnp.int64)
    bag_size = jnp.zeros_like(size) if mode == _SUM else size
    return out, offset2bag, bag_size, max_indices


@lowering(aten._embedding_bag_backward.default)
def embedding_bag_backward(
    ctx,
    grad,
    indices,
    offsets,
    offset2bag,
    bag_size,
    maximum_indices,
    num_weights,
    scale_grad_by_freq,
    mode,
    sparse,
    per_sample_weights,
    padding_idx=-1,
):
    acc = acc_dtype(ctx.dtype)
    g = grad.astype(acc)
    dim = g.shape[1]
    zeros = jnp.zeros((num_weights, dim), acc)
    if mode == _MAX:
        columns = lax.broadcasted_iota(jnp.int64, maximum_indices.shape, 1)
        filled = (bag_size > 0)[:, None] & (maximum_indices != padding_idx)
        return zeros.at[maximum_indices, columns].add(jnp.where(filled, g, 0), mode="drop")
    bags = g.shape[0]
    # offsets may hold the extra last offset; the bag of each index does not depend on it.
    bag = _bag_of_each_index(indices, offsets, min(bags, offsets.shape[0]))
    counted = indices != padding_idx
    rows = g[jnp.clip(bag, 0, bags - 1)]
    if mode == _MEAN:
        size = jnp.zeros((bags,), jnp.int64).at[jnp.where(counted, bag, bags)].add(1, mode="drop")
        rows = rows / jnp.maximum(size, 1)[jnp.clip(bag, 0, bags - 1)][:, None].astype(acc)
    if per_sample_weights is not None:
        rows = rows * per_sample_weights.astype(acc)[:, None]
    rows = jnp.where(counted[:, None], rows, 0)
    if scale_grad_by_freq:
        counts = jnp.zeros((num_weights,), acc).at[indices].add(1, mode="drop")
        rows = rows / jnp.maximum(counts[jnp.clip(indices, 0, num_weights - 1)], 1)[:, None]
    return zeros.at[indices].add(rows, mode="drop")


@lowering(aten._embedding_bag_per_sample_weights_backward.default)
def embedding_bag_per_sample_weights_backward(
    ctx, grad, weight, indices, offsets, offset2bag, mode, padding_idx=-1
):
    """Each index's weight's gradient: its bag's gradient dotted with the row it read
    (zero for a padding index)."""
    acc = acc_dtype(ctx.dtype)
    bag = _bag_of_each_index(indices, offsets, min(grad.shape[0], offsets.shape[0]))
    rows = jnp.take(weight, indices, axis=0, mode="fill", fill_value=0).astype(acc)
    dots = jnp.sum(grad.astype(acc)[jnp.clip(bag, 0, grad.shape[0] - 1)] * rows, axis=1)
    return jnp.where(indices != padding_idx, dots, 0)
