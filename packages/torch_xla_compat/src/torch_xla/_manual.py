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
- ``spmd_all_reduce(reduce_type, t, scale, groups)`` (``_XLAC._xla_spmd_all_reduce``):
  inside manual sharding, each device gets the ``reduce_type`` (``"sum"``, ``"max"``,
  ``"min"``) of the values of the devices in its group, times ``scale``
  (``lx.manual_all_reduce``); ``groups`` (lists of device ids) must be the rows of some
  of the mesh's axes (``RuntimeError`` otherwise, as for a ``t`` that holds one value).
  ``spmd_reduce_scatter(reduce_type, t, scale, scatter_dim, shard_count, groups)``
  (``_XLAC._xla_spmd_reduce_scatter``): the groups' sum, of which each device keeps its
  part along ``scatter_dim``, times ``scale`` (``lx.manual_reduce_scatter``);
  ``shard_count`` must be the groups' size, and each group a row in the mesh's order
  (its i-th device keeps part i).
- ``mark_manual(t, mesh)`` (``xs._mark_manual_sharding``): ``t`` itself when it already
  holds a value per device; a pending value becomes one held whole by every device of
  ``mesh``; data already on the device raises ``RuntimeError``, as torch_xla refuses to
  mark it.
"""

from __future__ import annotations

import itertools

import numpy as np

import lazax.modes as lx

from ._sharded import unwrap

__all__ = [
    "full_to_shard_shape",
    "mark_manual",
    "shard_to_full_shape",
    "spmd_all_reduce",
    "spmd_reduce_scatter",
]


def full_to_shard_shape(t):
    t = unwrap(t)
    sharding = lx.get_sharding(t)
    if sharding is None:
        raise RuntimeError(
            "_spmd_full_to_shard_shape: the tensor has no sharding (mark it with "
            "xs.mark_sharding first)"
        )
    return lx.enable_manual_sharding(t, sharding.mesh, sharding.partition_spec)


def _manual_mesh(t, what: str):
    """The mesh over which ``t`` holds a value per device, or ``RuntimeError``."""
    mesh = lx.manual_mesh(t)
    if mesh is None:
        raise RuntimeError(
            f"{what}: the tensor is not in manual sharding (it holds one value, not one per "
            f"device); enable_manual_sharding it first"
        )
    return mesh


def shard_to_full_shape(t, op_sharding, full_shape, dtype):
    t = unwrap(t)
    mesh = _manual_mesh(t, "_spmd_shard_to_full_shape")
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


def _axes_of_groups(mesh, groups, ordered: bool = False) -> tuple:
    """The mesh axes whose rows are ``groups`` (device ids; with ``ordered``, each in the
    row's order, which decides the part each device keeps), or ``RuntimeError``."""
    key = tuple if ordered else frozenset
    wanted = {key(int(d) for d in g) for g in groups}
    grid = np.array(mesh.device_ids).reshape(mesh.mesh_shape)
    names = mesh.jax_mesh.axis_names
    n = len(mesh.mesh_shape)
    for count in range(1, n + 1):
        for axes in itertools.combinations(range(n), count):
            rest = [a for a in range(n) if a not in axes]
            size = int(np.prod([mesh.mesh_shape[a] for a in axes]))
            rows = grid.transpose(rest + list(axes)).reshape(-1, size)
            if {key(int(d) for d in r) for r in rows} == wanted:
                return tuple(names[a] for a in axes)
    raise RuntimeError(
        f"the groups {groups} are not the rows of any of the mesh's "
        f"axes ({mesh}); lazax reduces along mesh axes"
    )


def _manual_operand(t, what: str, reduce_type: str, kinds: tuple):
    t = unwrap(t)
    mesh = _manual_mesh(t, what)
    if reduce_type not in kinds:
        raise RuntimeError(f"{what}: lazax reduces with {' or '.join(kinds)}, not {reduce_type!r}")
    return t, mesh


def spmd_all_reduce(reduce_type: str, t, scale: float, groups):
    t, mesh = _manual_operand(t, "_xla_spmd_all_reduce", reduce_type, ("sum", "max", "min"))
    out = lx.manual_all_reduce(t, _axes_of_groups(mesh, groups), op=reduce_type)
    return out if scale == 1.0 else out * scale


def spmd_reduce_scatter(reduce_type: str, t, scale: float, scatter_dim, shard_count, groups):
    t, mesh = _manual_operand(t, "_xla_spmd_reduce_scatter", reduce_type, ("sum",))
    axes = _axes_of_groups(mesh, groups, ordered=True)
    size = int(np.prod([mesh.size(a) for a in axes]))
    if int(shard_count) != size:
        raise RuntimeError(
            f"_xla_spmd_reduce_scatter: shard_count is {shard_count}, but each group has "
            f"{size} devices"
        )
    out = lx.manual_reduce_scatter(t, int(scatter_dim), axes)
    return out if scale == 1.0 else out * scale
