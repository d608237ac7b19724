"""``torch_xla._XLAC``: the few functions of torch_xla's C++ extension that scripts and
torch_xla's own tests call, each answered by lazax's public API. Everything else of
``_XLAC`` (IR dumps, tensor ids, graph hashes, SPMD shape conversions) does not exist:
an ``AttributeError`` names it rather than a made-up value.

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
"""

from __future__ import annotations

import os

import torch

import lazax.modes as lx

from . import _api, _counters
from ._sharded import sharding_type, spec_text, unwrap

__all__ = [
    "_get_xla_sharding_spec",
    "_get_xla_sharding_type",
    "_init_computation_client",
    "_xla_get_all_devices",
    "_xla_get_default_device",
    "_xla_increment_counter",
    "_xla_runtime_is_initialized",
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
