"""``torch_xla.distributed.spmd.xla_sharding``: sharding with gradients, and torch_xla's
``XLAShardedTensor``.

Contract:
- ``MarkShardingFunction.apply(t, mesh, partition_spec)``: an autograd function that
  shards ``t`` (``lx.mark_sharding``) and shards its gradient the same way in backward;
  ``mark_sharding_with_gradients(t, mesh, partition_spec)`` is that, returning the
  sharded tensor.
- ``ShardingSpec(mesh, partition_spec, minibatch=False)``: ``can_apply(t)`` (one spec
  entry per dimension); called with a tensor, its ``lx.Sharding`` or None: what
  ``pl.MpDeviceLoader``'s ``input_sharding`` takes.
- ``XLAShardedTensor``, ``XLAShard``, ``ShardingType``: ``torch_xla._sharded``'s (a
  sharded lazax tensor seen as its global value and its per-device shards).
"""

from __future__ import annotations

import torch

import lazax.modes as lx

from ..._sharded import ShardingType, XLAShard, XLAShardedTensor, unwrap

__all__ = [
    "MarkShardingFunction",
    "ShardingSpec",
    "ShardingType",
    "XLAShard",
    "XLAShardedTensor",
    "mark_sharding_with_gradients",
]


class ShardingSpec:
    """torch_xla's ``ShardingSpec(mesh, partition_spec, minibatch=False)``: how to shard
    each input tensor it ``can_apply`` to (one spec entry per dimension). Called with a
    tensor it gives the ``lx.Sharding`` (None where it does not apply), which is what
    ``pl.MpDeviceLoader(..., input_sharding=)`` takes. ``minibatch`` (each process loads
    its part of the batch) changes nothing in one process, and is refused in several."""

    def __init__(self, mesh, partition_spec, minibatch: bool = False) -> None:
        if minibatch and lx.process_count() > 1:
            raise NotImplementedError(
                "ShardingSpec(minibatch=True) over several processes: give each process "
                "its part with lx.DeviceLoader"
            )
        self.mesh = mesh
        self.partition_spec = tuple(partition_spec)
        self.minibatch = minibatch

    def can_apply(self, t) -> bool:
        return isinstance(t, torch.Tensor) and t.dim() == len(self.partition_spec)

    def __call__(self, t):
        return lx.Sharding(self.mesh, self.partition_spec) if self.can_apply(t) else None


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
    return MarkShardingFunction.apply(unwrap(t), mesh, tuple(partition_spec))
