"""``torch_xla.runtime`` (``xr``): the runtime's shape, over lazax.

Contract:
- ``device_type()``: ``"CPU"``, ``"CUDA"`` or ``"TPU"``: the platform lazax runs on, from
  ``PJRT_DEVICE`` as lazax reads it (``GPU`` reads as ``CUDA``); ``set_device_type(name)``
  sets ``PJRT_DEVICE``; once a device was used, another platform raises ``RuntimeError``.
  Without ``PJRT_DEVICE``, ``PJRT_SELECT_DEFAULT_DEVICE=0`` makes ``device_type()`` None
  (no platform chosen, as torch_xla) until a device is used; lazax then runs on the CPU.
- Processes: lazax runs one process per host (or per torchrun worker) over all its
  devices, so torch_xla's replicas are lazax's processes: ``world_size()`` is
  ``lx.process_count()`` (1 after ``use_spmd()``, as in torch_xla), ``global_ordinal()``
  is ``lx.process_index()``, ``local_ordinal()`` the launcher's ``LOCAL_RANK`` (0 alone).
- ``global_runtime_device_count()`` / ``global_device_count()``: every process's
  devices; ``addressable_device_count()`` / ``addressable_runtime_device_count()`` /
  ``local_device_count()``: this process's.
- ``global_runtime_device_attributes()``: one dict per device of the job, in global
  order: its ``name`` (``"TPU:3"``, as ``_XLAC._xla_get_all_devices()``), and the
  ``coords``, ``core_on_chip``, ``slice_index`` and ``device_kind`` jax reports for it
  (TPUs have them; a CPU device has only its name). ``runtime_device_attributes(name)``:
  the dict of one of them.
- ``use_spmd(auto=False)`` records SPMD mode (``is_spmd()``) and sets ``XLA_USE_SPMD=1``
  as torch_xla does; lazax shards in every mode, so nothing else changes.
  ``XLA_USE_SPMD=1`` at import does the same.
- ``initialize_cache(path, readonly=False)``: lazax's persistent compilation cache
  (``lx.set_persistent_cache_dir``); call it before anything runs on the device.
"""

from __future__ import annotations

import os

import lazax.modes as lx

from . import _XLAC

__all__ = [
    "addressable_device_count",
    "addressable_runtime_device_count",
    "device_type",
    "global_device_count",
    "global_runtime_device_attributes",
    "global_ordinal",
    "global_runtime_device_count",
    "host_index",
    "initialize_cache",
    "is_spmd",
    "local_device_count",
    "local_ordinal",
    "local_process_count",
    "process_count",
    "process_index",
    "runtime_device_attributes",
    "set_device_type",
    "use_spmd",
    "world_size",
]

_SPMD = [os.environ.get("XLA_USE_SPMD", "0").strip() not in ("", "0")]
_NAMES = {"CPU": "CPU", "CUDA": "CUDA", "GPU": "CUDA", "TPU": "TPU"}


def device_type() -> str | None:
    """The platform: "CPU", "CUDA" or "TPU"; None while none is chosen (see the module
    docstring)."""
    raw = os.environ.get("PJRT_DEVICE", "").strip().upper()
    if not raw:
        no_default = os.environ.get("PJRT_SELECT_DEFAULT_DEVICE", "1").strip() == "0"
        if no_default and not _XLAC._xla_runtime_is_initialized():
            return None
        raw = "CPU"
    return _NAMES.get(raw, raw)


def set_device_type(pjrt_device: str) -> None:
    """Choose the platform (``PJRT_DEVICE``); only before anything used a device."""
    wanted = _NAMES.get(pjrt_device.strip().upper(), pjrt_device.strip().upper())
    if _XLAC._xla_runtime_is_initialized() and wanted != device_type():
        raise RuntimeError(
            f"Can't change device type to {pjrt_device!r} after the runtime is initialized "
            f"(it runs on {device_type()})"
        )
    os.environ["PJRT_DEVICE"] = pjrt_device


def use_spmd(auto: bool = False) -> None:
    """Turn SPMD mode on: ``world_size()`` is 1 from now on. As torch_xla's, it sets
    ``XLA_USE_SPMD=1`` (and ``XLA_AUTO_SPMD=1`` if ``auto``) for child processes."""
    _SPMD[0] = True
    os.environ["XLA_USE_SPMD"] = "1"
    if auto:
        os.environ["XLA_AUTO_SPMD"] = "1"


def is_spmd() -> bool:
    """Whether ``use_spmd()`` was called (or ``XLA_USE_SPMD`` set)."""
    return _SPMD[0]


def world_size() -> int:
    """How many replicas (processes) the job has; 1 in SPMD mode."""
    return 1 if is_spmd() else lx.process_count()


def global_ordinal() -> int:
    """This process's index in the job."""
    return lx.process_index()


def local_ordinal() -> int:
    """This process's index on its host (torchrun's ``LOCAL_RANK``)."""
    return int(os.environ.get("LOCAL_RANK", "0")) if lx.process_count() > 1 else 0


def process_index() -> int:
    return lx.process_index()


def process_count() -> int:
    return lx.process_count()


def host_index() -> int:
    """This host's index (one process per host unless a launcher started more)."""
    per_host = int(os.environ.get("LOCAL_WORLD_SIZE", "1")) if lx.process_count() > 1 else 1
    return lx.process_index() // max(per_host, 1)


def local_process_count() -> int:
    return int(os.environ.get("LOCAL_WORLD_SIZE", "1")) if lx.process_count() > 1 else 1


def global_runtime_device_count() -> int:
    """Every process's devices together."""
    return lx.global_device_count()


_ATTRIBUTES = ("coords", "core_on_chip", "slice_index", "device_kind")


def global_runtime_device_attributes() -> list[dict]:
    """Each device of the job: its name and what jax knows of where it sits."""
    count = lx.global_device_count()
    devices = lx.Mesh(range(count), (count,)).jax_mesh.devices.reshape(-1)
    out = []
    for name, device in zip(_XLAC._xla_get_all_devices(), devices):
        attributes = {"name": name}
        for key in _ATTRIBUTES:
            value = getattr(device, key, None)
            if value is not None:
                attributes[key] = list(value) if key == "coords" else value
        out.append(attributes)
    return out


def runtime_device_attributes(device: str) -> dict:
    """The attributes of ``device`` (``"TPU:3"``, or ``"xla:3"``, a local index)."""
    kind, _, index = str(device).rpartition(":")
    every = global_runtime_device_attributes()
    if kind in ("xla", "lazax"):
        return every[int(index)]
    for attributes in every:
        if attributes["name"] == str(device):
            return attributes
    raise ValueError(f"no device named {device!r}; the job has {[a['name'] for a in every]}")


def global_device_count() -> int:
    return lx.global_device_count()


def addressable_device_count() -> int:
    """This process's devices."""
    return lx.device_count()


def addressable_runtime_device_count() -> int:
    return lx.device_count()


def local_device_count() -> int:
    return lx.device_count()


def initialize_cache(path: str, readonly: bool = False) -> None:
    """Keep compiled programs in ``path`` across runs (lazax's persistent cache)."""
    lx.set_persistent_cache_dir(path, read_only=readonly)
