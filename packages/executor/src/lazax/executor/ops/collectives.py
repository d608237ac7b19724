"""torch's functional collectives (``torch.ops._c10d_functional``) as nodes of the graph.

Contract: the rules lower ``all_reduce``, ``all_gather_into_tensor``,
``reduce_scatter_tensor`` (and their ``_coalesced`` forms), ``all_to_all_single``
(equal splits) and ``broadcast`` to jax's collectives over ``lazax.pjrt.PROCESS_AXIS``.
They are ``collective`` rules: a graph holding one is compiled as a program that every
process of the job runs on its own values (``lazax.pjrt``'s ``per_process``), so the
collectives of a traced step run inside its program, between the processes' devices.
The group is the whole job (the "lazax" process group refuses any other), so the group
name is not read; ``group_size`` is the job's process count, which the output shapes
torch infers already carry. Reductions: ``sum``, ``avg`` (integers: floor division,
as the sum divided by the count), ``product``, ``min``, ``max``, ``band``, ``bor``,
``bxor``; another raises ``ValueError`` naming them.
``lazax::group_gather(input, groups, group_size)``: within each group of processes of
``groups`` (a partition of the job into groups of ``group_size``, flattened, each
group's ranks in its rank order), every member's ``input`` stacked:
``(group_size, *input.shape)``, as one all-gather per group (``distributed.subgroups``
builds a sub-group's collectives on it).
"""

from __future__ import annotations

import functools

import jax.numpy as jnp
import torch
from jax import lax

from lazax.pjrt import PROCESS_AXIS

from ._registry import lowering

__all__ = ["REDUCTIONS"]

REDUCTIONS = ("sum", "avg", "product", "min", "max", "band", "bor", "bxor")

_BITWISE = {"band": jnp.bitwise_and, "bor": jnp.bitwise_or, "bxor": jnp.bitwise_xor}


def _check(reduce_op: str) -> str:
    op = reduce_op.lower()
    if op not in REDUCTIONS:
        raise ValueError(
            f"lazax's collectives support the reductions {', '.join(REDUCTIONS)}; got {reduce_op!r}"
        )
    return op


def _gathered(x):
    """Every process's ``x``, stacked in process order: ``(processes, *x.shape)``."""
    return lax.all_gather(x, PROCESS_AXIS)


def _reduce(x, reduce_op: str):
    op = _check(reduce_op)
    if x.dtype == jnp.bool_:  # sum and max are "any", product and min "all"
        as_int = x.astype(jnp.int8)
        if op in ("sum", "max", "bor", "avg"):
            return lax.pmax(as_int, PROCESS_AXIS).astype(jnp.bool_)
        if op in ("product", "min", "band"):
            return lax.pmin(as_int, PROCESS_AXIS).astype(jnp.bool_)
        return (lax.psum(as_int, PROCESS_AXIS) % 2).astype(jnp.bool_)  # bxor
    if op == "sum":
        return lax.psum(x, PROCESS_AXIS)
    if op == "avg":
        total = lax.psum(x, PROCESS_AXIS)
        count = lax.axis_size(PROCESS_AXIS)
        return total // count if jnp.issubdtype(x.dtype, jnp.integer) else total / count
    if op == "min":
        return lax.pmin(x, PROCESS_AXIS)
    if op == "max":
        return lax.pmax(x, PROCESS_AXIS)
    stacked = _gathered(x)
    if op == "product":
        return stacked.prod(axis=0, dtype=x.dtype)
    return functools.reduce(_BITWISE[op], list(stacked))


def _scatter(x, reduce_op: str):
    """Process k's row block ``k`` of the reduction over processes."""
    op = _check(reduce_op)
    if op == "sum" and x.dtype != jnp.bool_:
        return lax.psum_scatter(x, PROCESS_AXIS, scatter_dimension=0, tiled=True)
    whole = _reduce(x, op)
    rows = x.shape[0] // lax.axis_size(PROCESS_AXIS)
    start = lax.axis_index(PROCESS_AXIS) * rows
    return lax.dynamic_slice_in_dim(whole, start, rows, axis=0)


def _gather(x):
    return lax.all_gather(x, PROCESS_AXIS, axis=0, tiled=True)


if torch.distributed.is_available():
    _c10d = torch.ops._c10d_functional

    @lowering(_c10d.all_reduce.default, collective=True)
    def _all_reduce(ctx, x, reduce_op, group_name):
        return _reduce(x, reduce_op)

    @lowering(_c10d.all_reduce_coalesced.default, collective=True)
    def _all_reduce_coalesced(ctx, xs, reduce_op, group_name):
        return [_reduce(x, reduce_op) for x in xs]

    @lowering(_c10d.all_gather_into_tensor.default, collective=True)
    def _all_gather(ctx, x, group_size, group_name):
        return _gather(x)

    @lowering(_c10d.all_gather_into_tensor_coalesced.default, collective=True)
    def _all_gather_coalesced(ctx, xs, group_size, group_name):
        return [_gather(x) for x in xs]

    @lowering(_c10d.reduce_scatter_tensor.default, collective=True)
    def _reduce_scatter(ctx, x, reduce_op, group_size, group_name):
        return _scatter(x, reduce_op)

    @lowering(_c10d.reduce_scatter_tensor_coalesced.default, collective=True)
    def _reduce_scatter_coalesced(ctx, xs, reduce_op, group_size, group_name):
        return [_scatter(x, reduce_op) for x in xs]

    @lowering(_c10d.all_to_all_single.default, collective=True)
    def _all_to_all(ctx, x, output_split_sizes, input_split_sizes, group_name):
        for sizes in (output_split_sizes, input_split_sizes):
            if sizes is not None and len(set(sizes)) > 1:
                raise NotImplementedError(
                    f"lazax's all_to_all_single takes equal splits; got split sizes {sizes}"
                )
        return lax.all_to_all(x, PROCESS_AXIS, split_axis=0, concat_axis=0, tiled=True)

    @lowering(_c10d.broadcast.default, collective=True)
    def _broadcast(ctx, x, src, group_name):
        return _gathered(x)[src]


_LIB = torch.library.Library("lazax", "FRAGMENT")
_LIB.define("group_gather(Tensor input, int[] groups, int group_size) -> Tensor")


def _group_gather_fake(input, groups, group_size):
    return input.new_empty((group_size, *input.shape))


torch.library.register_fake("lazax::group_gather", _group_gather_fake, lib=_LIB)


@lowering(torch.ops.lazax.group_gather.default, collective=True)
def _group_gather(ctx, x, groups, group_size):
    parts = [list(groups[k : k + group_size]) for k in range(0, len(groups), group_size)]
    return lax.all_gather(x, PROCESS_AXIS, axis_index_groups=parts)
