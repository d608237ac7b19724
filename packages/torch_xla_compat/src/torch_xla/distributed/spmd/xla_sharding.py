"""``torch_xla.distributed.spmd.xla_sharding``: sharding with gradients, and torch_xla's
``XLAShardedTensor`` name.

Contract:
- ``MarkShardingFunction.apply(t, mesh, partition_spec)``: an autograd function that
  shards ``t`` (``lx.mark_sharding``) and shards its gradient the same way in backward;
  ``mark_sharding_with_gradients(t, mesh, partition_spec)`` is that, returning the
  sharded tensor.
- ``XLAShardedTensor``: torch_xla wraps sharded tensors in it; lazax's sharded tensor is
  a plain tensor, so no tensor is one and making one raises ``NotImplementedError``.
"""

from __future__ import annotations

import torch

import lazax.modes as lx

__all__ = ["MarkShardingFunction", "XLAShardedTensor", "mark_sharding_with_gradients"]


class MarkShardingFunction(torch.autograd.Function):
    """Shard the value forward and its gradient backward, over the same mesh and spec."""

    @staticmethod
    def forward(ctx, t, mesh, partition_spec):
        ctx.mesh, ctx.spec = mesh, tuple(partition_spec)
        out = t.clone()  # a new tensor: autograd records this function as its producer
        lx.mark_sharding(out, mesh, ctx.spec)
        return out

    @staticmethod
    def backward(ctx, grad):
        grad = grad.clone()
        lx.mark_sharding(grad, ctx.mesh, ctx.spec)
        return grad, None, None


def mark_sharding_with_gradients(t, mesh, partition_spec):
    return MarkShardingFunction.apply(t, mesh, tuple(partition_spec))


class XLAShardedTensor(torch.Tensor):
    """torch_xla's wrapper of a sharded tensor; lazax shards plain tensors."""

    def __new__(cls, *args, **kwargs):
        raise NotImplementedError(
            "XLAShardedTensor: a sharded lazax tensor is a plain tensor "
            "(xs.mark_sharding returns it); lx.get_sharding(t) says how it is sharded"
        )
