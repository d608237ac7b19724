"""``torch_xla.distributed.spmd.xla_sharding``: sharding with gradients, and torch_xla's
``XLAShardedTensor``.

Contract:
- ``MarkShardingFunction.apply(t, mesh, partition_spec)``: an autograd function that
  shards ``t`` (``lx.mark_sharding``) and shards its gradient the same way in backward;
  ``mark_sharding_with_gradients(t, mesh, partition_spec)`` is that, returning the
  sharded tensor.
- ``ShardingSpec(mesh, partition_spec, minibatch=False)``: ``can_apply(t)`` (one spec
  entry per dimension); called with a tensor, its ``lx.Sharding`` or None: what
  ``pl.MpDeviceLoader``'s ``input_sharding`` takes. With ``minibatch``, a batch whose
  first dimension does not divide over this process's devices is a ``RuntimeError``
  (torch_xla's); without it, such a batch is split unevenly (held padded).
- ``XLAPatchedLinear.apply(input, weight, bias=None)``: ``F.linear`` as an autograd
  function whose forward and backward are einsums over the feature dimension, with no
  transpose or flattening of the batch dimensions (torch_xla's reason: a sharding
  annotation on the input survives an einsum, not a reshape); values and gradients
  are ``F.linear``'s. ``xla_patched_nn_linear_forward(m, input)``: a module's
  forward through it.
- ``apply_backward_optimization_barrier(module)``: in ``module``'s backward, the
  gradients it receives and the gradients its parameters hold so far pass through an
  optimization barrier (``xm.optimization_barrier_``) first, so XLA does not fuse or
  reorder the module's backward with what came before it (torch_xla's tool against a
  scheduler that would keep every layer's gradient computation alive at once). Values
  are unchanged; returns the hook's handle.
- ``enable_manual_sharding(t, partition_spec, *, mesh=None)``: shards ``t`` in place as
  ``partition_spec`` over ``mesh`` (the global mesh when None; ``xs.mark_sharding``),
  then gives each device's piece of it (every split must divide), as one
  tensor that holds a value per device (``lx.enable_manual_sharding``; its sharding
  reads ``"{manual}"``); ``disable_manual_sharding(t, partition_spec, full_shape, *,
  mesh=None)``: the pieces put back together (``lx.disable_manual_sharding``). Both
  return an ``XLAShardedTensor``. ``_mark_manual_sharding(t)``: ``_manual.mark_manual``
  over the global mesh (every device on one axis when none is set).
- ``XLAShardedTensor``, ``XLAShard``, ``ShardingType``: ``torch_xla._sharded``'s (a
  sharded lazax tensor seen as its global value and its per-device shards).
"""

from __future__ import annotations

import torch

import lazax.modes as lx

from ..._manual import mark_manual
from ..._sharded import ShardingType, XLAShard, XLAShardedTensor, unwrap
from ...core.xla_model import optimization_barrier_
from .mesh import get_1d_mesh, get_global_mesh

__all__ = [
    "MarkShardingFunction",
    "ShardingSpec",
    "ShardingType",
    "XLAShard",
    "XLAPatchedLinear",
    "XLAShardedTensor",
    "apply_backward_optimization_barrier",
    "disable_manual_sharding",
    "enable_manual_sharding",
    "mark_sharding_with_gradients",
    "xla_patched_nn_linear_forward",
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
        if not self.can_apply(t):
            return None
        if self.minibatch and t.dim() and t.shape[0] % lx.device_count():
            # torch_xla's rule (and words): each host's part of the batch is split
            # over its own devices, evenly.
            raise RuntimeError(
                f"When minibatch is configured, the per-host batch size must be divisible "
                f"by local runtime device count. Per host input data shape "
                f"{list(t.shape)}, local_runtime_device_count {lx.device_count()}"
            )
        return lx.Sharding(self.mesh, self.partition_spec)


class MarkShardingFunction(torch.autograd.Function):
    """Shard the value forward and its gradient backward, over the same mesh and spec
    (``lx.sharding_constraint``: a torch op, which AOTAutograd and dynamo trace)."""

    @staticmethod
    def forward(ctx, t, mesh, partition_spec):
        ctx.mesh, ctx.spec = mesh, tuple(partition_spec)
        return lx.sharding_constraint(t, mesh, ctx.spec)

    @staticmethod
    def backward(ctx, grad):
        return lx.sharding_constraint(grad, ctx.mesh, ctx.spec), None, None


def mark_sharding_with_gradients(t, mesh, partition_spec):
    return MarkShardingFunction.apply(unwrap(t), mesh, tuple(partition_spec))


class XLAPatchedLinear(torch.autograd.Function):
    """``F.linear(input, weight, bias)`` through einsums, forward and backward."""

    @staticmethod
    def forward(ctx, input, weight, bias=None):
        ctx.save_for_backward(input, weight)
        ctx.has_bias = bias is not None
        out = torch.einsum("...i,oi->...o", input, weight)
        return out + bias if bias is not None else out

    @staticmethod
    def backward(ctx, grad):
        input, weight = ctx.saved_tensors
        grad_input = grad_weight = grad_bias = None
        if ctx.needs_input_grad[0]:
            grad_input = torch.einsum("...o,oi->...i", grad, weight)
        if ctx.needs_input_grad[1]:
            grad_weight = torch.einsum("...o,...i->oi", grad, input)
        if ctx.has_bias and ctx.needs_input_grad[2]:
            grad_bias = torch.einsum("...o->o", grad)
        return grad_input, grad_weight, grad_bias


def xla_patched_nn_linear_forward(m, input):
    """A ``torch.nn.Linear``'s forward through ``XLAPatchedLinear``."""
    return XLAPatchedLinear.apply(input, m.weight, m.bias)


def apply_backward_optimization_barrier(module: torch.nn.Module):
    """Put an optimization barrier in front of ``module``'s backward (see the module
    docstring); returns the hook's handle (``.remove()`` takes it away)."""

    def barrier(mod, grad_output):
        grads = tuple(g.clone() if g is not None else None for g in grad_output)
        held = [p.grad for p in mod.parameters() if p.grad is not None]
        optimization_barrier_([g for g in grads if g is not None] + held)
        return grads

    return module.register_full_backward_pre_hook(barrier)


def _mesh(mesh, what: str):
    mesh = mesh if mesh is not None else get_global_mesh()
    if mesh is None:
        raise ValueError(f"{what}: no mesh given and no global mesh set")
    return mesh


def enable_manual_sharding(t, partition_spec, *, mesh=None) -> XLAShardedTensor:
    """Each device's piece of ``t``, one value per device (see the module docstring)."""
    mesh = _mesh(mesh, "enable_manual_sharding")
    t = unwrap(t)
    lx.mark_sharding(t, mesh, tuple(partition_spec))  # t itself is sharded, as torch_xla's
    return XLAShardedTensor(lx.enable_manual_sharding(t, mesh, tuple(partition_spec)))


def disable_manual_sharding(t, partition_spec, full_shape, *, mesh=None) -> XLAShardedTensor:
    """The pieces of ``t`` put back together (see the module docstring)."""
    mesh = _mesh(mesh, "disable_manual_sharding")
    out = lx.disable_manual_sharding(unwrap(t), mesh, tuple(partition_spec), tuple(full_shape))
    return XLAShardedTensor(out)


def _mark_manual_sharding(t) -> XLAShardedTensor:
    """``t`` as a value per device (see the module docstring)."""
    mesh = get_global_mesh() or get_1d_mesh()
    return XLAShardedTensor(mark_manual(t, mesh))
