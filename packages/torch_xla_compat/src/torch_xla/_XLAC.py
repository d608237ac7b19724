"""``torch_xla._XLAC``: the few functions of torch_xla's C++ extension that scripts and
torch_xla's own tests call, each answered by lazax's public API. Everything else of
``_XLAC`` (tensor ids, graph hashes, C++ handles) does not exist: an ``AttributeError``
names it rather than a made-up value.

Contract:
- ``_xla_runtime_is_initialized()``: lazax's runtime has started (a device was used);
  ``_init_computation_client()`` starts it (the device module's ``init``).
- ``_xla_get_all_devices()``: every device of the job as torch_xla's runtime names them
  (``"CPU:0"``, ...); ``_xla_get_default_device()``: ``"xla:0"`` (``lazax:0`` when lazax
  was imported first).
- ``_xla_sync_multi(tensors, devices, wait=True, sync_xla_data=True)``: run the pending
  work those tensors need (``lx.sync_tensors``); ``_xla_wait_device_ops(devices=[])``.
- ``_xla_increment_counter(name, n)``: bump a counter that ``met`` reports.
- ``_get_xla_sharding_spec(t)``: the tensor's sharding in XLA's HloSharding text, as
  torch_xla prints it: ``""`` unsharded, ``"{replicated}"``,
  ``"{devices=[2,4]0,1,2,3,4,5,6,7}"``, with `` last_tile_dim_replicate`` when mesh
  axes are left out of the spec; ``_get_xla_sharding_type(t)``: XLA's
  ``OpSharding.Type`` number of it (``xs.ShardingType``), None unsharded. Both take an
  ``XLAShardedTensor`` too.
- ``OpSharding`` (``Mesh.get_op_sharding``) and ``_global_tensor_from_cpu_shards(shards,
  op_sharding, global_shape=None)``: a sharded tensor from one CPU shard per device
  (``_cpu_shards``).
- ``_spmd_full_to_shard_shape(t)`` / ``_spmd_shard_to_full_shape(t, op_sharding,
  full_shape, dtype)``: into and out of manual sharding (``_manual``); a tensor in it
  has the sharding ``"{manual}"`` (``ShardingType.MANUAL``); ``_xla_spmd_all_reduce(
  reduce_type, t, scale, groups)`` and ``_xla_spmd_reduce_scatter(reduce_type, t, scale,
  scatter_dim, shard_count, groups)`` reduce across its devices (``lx.manual_all_reduce``,
  ``lx.manual_reduce_scatter``).
- ``_get_xla_tensors_hlo(tensors)``: the HLO (before XLA's optimizations) of the
  program that computes these tensors, with its shardings, as the next sync would
  compile it (``lx.program_text``); nothing runs. The instruction names are XLA's as
  jax lowers the program, not torch_xla's (``%p0.1``, ``%custom-call.1``).
  ``_get_xla_tensors_text(tensors)``: the same program as lazax's IR, one line per op
  (``lx.program_text(form="lazax")``), not torch_xla's IR text.
- ``_get_xla_tensor_debug_info(t)``: torch_xla's text about a tensor, from what lazax
  knows of it: its device, shape (``f32[5,3]``), sharding, and either ``IR: pending``
  with ``XLAData: None`` (its value is IR the next sync runs) or ``IR: None`` and the
  data block: ``XLAData`` (``Data Device: CPU:0``, ``Data Shape``) or, sharded,
  ``XLAShardedData`` (``Data Device: SPMD:0`` as torch_xla names the SPMD device,
  ``Data Shape``, ``OpSharding``, ``NumShards``). lazax has no tensor ids or data
  handles, so those lines are left out. Reads nothing from the device.
"""

from __future__ import annotations

import os

import torch

import lazax.modes as lx

from . import _api, _counters
from ._cpu_shards import OpSharding
from ._cpu_shards import global_tensor_from_cpu_shards as _global_tensor_from_cpu_shards
from ._manual import full_to_shard_shape as _spmd_full_to_shard_shape
from ._manual import shard_to_full_shape as _spmd_shard_to_full_shape
from ._manual import spmd_all_reduce as _xla_spmd_all_reduce
from ._manual import spmd_reduce_scatter as _xla_spmd_reduce_scatter
from ._sharded import sharding_type, spec_text, unwrap

__all__ = [
    "OpSharding",
    "_get_xla_sharding_spec",
    "_global_tensor_from_cpu_shards",
    "_get_xla_sharding_type",
    "_get_xla_tensor_debug_info",
    "_get_xla_tensors_hlo",
    "_get_xla_tensors_text",
    "_init_computation_client",
    "_spmd_full_to_shard_shape",
    "_spmd_shard_to_full_shape",
    "_xla_get_all_devices",
    "_xla_get_default_device",
    "_xla_increment_counter",
    "_xla_runtime_is_initialized",
    "_xla_spmd_all_reduce",
    "_xla_spmd_reduce_scatter",
    "_xla_sync_multi",
    "_xla_wait_device_ops",
]


def _xla_runtime_is_initialized() -> bool:
    return bool(torch.get_device_module(_api.DEVICE_TYPE).is_initialized())


def _init_computation_client() -> None:
    torch.get_device_module(_api.DEVICE_TYPE).init()


def _xla_get_all_devices() -> list[str]:
    kind = os.environ.get("PJRT_DEVICE", "CPU").strip().upper() or "CPU"
    kind = "CUDA" if kind == "GPU" else kind
    return [f"{kind}:{i}" for i in range(lx.global_device_count())]


def _xla_get_default_device() -> str:
    return str(lx.device(0))


def _xla_sync_multi(tensors, devices=(), wait: bool = True, sync_xla_data: bool = True):
    lx.sync_tensors([unwrap(t) for t in tensors], wait=wait)


def _xla_wait_device_ops(devices=()) -> None:
    lx.wait_device_ops()


def _xla_increment_counter(name: str, n: int = 1) -> None:
    _counters.bump(name, n)


def _get_xla_sharding_spec(t) -> str:
    return spec_text(t)


def _get_xla_sharding_type(t) -> int | None:
    return sharding_type(t)


def _get_xla_tensors_hlo(tensors) -> str:
    return lx.program_text([unwrap(t) for t in tensors], form="hlo")


def _get_xla_tensors_text(tensors) -> str:
    return lx.program_text([unwrap(t) for t in tensors], form="lazax")


# XLA's primitive type names, as its shapes print them (f32[5,3]).
_XLA_TYPES = {
    torch.float32: "f32",
    torch.float64: "f64",
    torch.float16: "f16",
    torch.bfloat16: "bf16",
    torch.int64: "s64",
    torch.int32: "s32",
    torch.int16: "s16",
    torch.int8: "s8",
    torch.uint8: "u8",
    torch.bool: "pred",
    torch.complex64: "c64",
    torch.complex128: "c128",
}


def _xla_shape(t: torch.Tensor) -> str:
    kind = _XLA_TYPES.get(t.dtype, str(t.dtype).removeprefix("torch."))
    return f"{kind}[{','.join(str(n) for n in t.shape)}]"


def _get_xla_tensor_debug_info(t) -> str:
    t = unwrap(t)
    spec = spec_text(t)
    lines = ["XLATensor {", f"Device: {t.device}", f"XLA Shape: {_xla_shape(t)}"]
    lines.append(f"ShardingSpec: {spec or 'None'}")
    if not lx.holds_device_data(t):
        lines += ["IR: pending (runs at the next sync)", "XLAData: None"]
    elif spec:
        sharding = lx.get_sharding(t)
        lines += ["IR: None", "XLAShardedData: ", "  Data Device: SPMD:0"]
        lines += [f"  Data Shape: {_xla_shape(t)}", f"  OpSharding: {spec}"]
        lines.append(f"  NumShards: {len(sharding.mesh.device_ids)}")
    else:
        kind = _xla_get_all_devices()[0].partition(":")[0]
        lines += ["IR: None", "XLAData: ", f"  Data Device: {kind}:{t.device.index or 0}"]
        lines.append(f"  Data Shape: {_xla_shape(t)}")
    lines += ["Tensor on host: None", "}"]
    return "\n".join(lines) + "\n"
