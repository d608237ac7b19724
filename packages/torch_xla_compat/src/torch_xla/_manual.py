"""torch_xla's manual sharding, over lazax's (``lx.enable_manual_sharding``,
``lx.disable_manual_sharding``, ``lx.manual_mesh``).

Contract:
- ``full_to_shard_shape(t)`` (``_XLAC._spmd_full_to_shard_shape``): each device's piece
  of the sharded ``t``, as one tensor that holds a value per device, laid out as ``t``
  is (``lx.get_sharding``); ``RuntimeError`` (torch_xla's type) when ``t`` has no
  sharding lazax knows (one device, or pending work whose layout XLA picks).
- ``shard_to_full_shape(t, op_sharding, full_shape, dtype)``
  (``_XLAC._spmd_shard_to_full_shape``): the tensor of ``full_shape`` whose pieces the
  devices hold in ``t``, laid out as ``op_sharding`` says (torch_xla's replicated
  ``OpSharding`` is the whole value on every device of ``t``'s mesh); ``RuntimeError``
  when ``t`` does not hold a value per device, or for a ``dtype`` not ``t``'s.
- ``mark_manual(t, mesh)`` (``xs._mark_manual_sharding``): ``t`` itself when it already
  holds a value per device; a pending value becomes one held whole by every device of
  ``mesh``; data already on the device raises ``RuntimeError``, as torch_xla refuses to
  mark it.
"""

from __future__ import annotations

import lazax.modes as lx

from ._sharded import unwrap

__all__ = ["full_to_shard_shape", "mark_manual", "shard_to_full_shape"]


def full_to_shard_shape(t):
    t = unwrap(t)
    sharding = lx.get_sharding(t)
    if sharding is None:
        raise RuntimeError(
            "_spmd_full_to_shard_shape: the tensor has no sharding (mark it with "
            "xs.mark_sharding first)"
        )
    return lx.enable_manual_sharding(t, sharding.mesh, sharding.partition_spec)


def shard_to_full_shape(t, op_sharding, full_shape, dtype):
    t = unwrap(t)
    mesh = lx.manual_mesh(t)
    if mesh is None:
        raise RuntimeError(
            "_spmd_shard_to_full_shape: the tensor is not in manual sharding (it holds one "
            "value, not one per device); enable_manual_sharding it first"
        )
    if dtype != t.dtype:
        raise RuntimeError(f"_spmd_shard_to_full_shape: the tensor is {t.dtype}, not {dtype}")
    if op_sharding.mesh is not None and op_sharding.mesh != mesh:
        raise RuntimeError(
            f"_spmd_shard_to_full_shape: the tensor's pieces are on {mesh}, but the "
            f"sharding is over {op_sharding.mesh}"
        )
    spec = op_sharding.partition_spec
    if spec is None:
        spec = (None,) * len(full_shape)
    return lx.disable_manual_sharding(t, mesh, spec, tuple(full_shape))


def mark_manual(t, mesh):
    t = unwrap(t)
    if lx.manual_mesh(t) is not None:
        return t
    if lx.holds_device_data(t):
        raise RuntimeError(
            "_mark_manual_sharding: the tensor's data is already on the device; mark the "
            "result of an op (or use enable_manual_sharding)"
        )
    return lx.enable_manual_sharding(t, mesh, (None,) * t.dim())
