"""Tensors and ``jax.Array``s, both ways, without a copy.

Contract:
- ``to_jax(t)``: a lazax tensor's value as a ``jax.Array`` on its device(s), its
  sharding kept: what is pending is synced first (not waited for), nothing goes through
  the host. It is the value *now*: a later write to ``t`` gives ``t`` a new buffer and
  leaves the array as it was (lazax never donates a buffer something else holds). A
  tensor that is not a view hands out its own buffer; a view, a new one; a tensor
  split unevenly over a mesh (held padded), a new one of its own shape (JAX then lays
  it out as it can: replicated).
- ``from_jax(a)``: a ``jax.Array`` as a lazax tensor, sharing its buffer (no copy) when
  its devices are lazax's (the same jax client), else copied to the default device.
  While the caller keeps ``a``, writes to the tensor give it new buffers and ``a`` stays
  as it was; once nothing else holds ``a``, lazax may reuse it for the tensor's next
  value (donation), as it does its own.
- Both raise ``TypeError`` for the wrong kind of argument, naming what to pass.
"""

from __future__ import annotations

import jax
import torch

from lazax import ir

from ..barrier.executor import EXECUTOR
from ..state.dtypes import torch_dtype
from ..state.layout import Layout
from ..tensor.lazy import LazyTensor, new_tensor
from ..tensor.transfer import jax_value

__all__ = ["from_jax", "to_jax"]


def to_jax(t: torch.Tensor) -> jax.Array:
    """``t``'s value as a ``jax.Array`` (see the module docstring)."""
    if type(t) is not LazyTensor:
        where = f"a tensor on {t.device}" if isinstance(t, torch.Tensor) else type(t).__name__
        raise TypeError(
            f"lazax.to_jax expects a tensor on a lazax device, got {where}; move it "
            f"there first (t.to(lx.device())), or use jax.numpy.asarray(t.numpy()) for "
            f"a CPU tensor"
        )
    return jax_value(t)


def from_jax(a: jax.Array) -> torch.Tensor:
    """``a`` as a lazax tensor (see the module docstring)."""
    if not isinstance(a, jax.Array):
        raise TypeError(
            f"lazax.from_jax expects a jax.Array, got {type(a).__name__}; for a numpy "
            f"array use torch.from_numpy(x).to(lx.device())"
        )
    runtime = EXECUTOR.runtime
    buffer = runtime.adopt(a)
    devices = buffer.sharding.device_set
    index = 0
    if len(devices) == 1:
        (device,) = devices
        if device in runtime.devices:
            index = runtime.devices.index(device)
    name = buffer.dtype.name
    spec = ir.TensorSpec(tuple(buffer.shape), name)
    return new_tensor(ir.device_data(spec, buffer), Layout(spec.shape, torch_dtype(name)), index)
