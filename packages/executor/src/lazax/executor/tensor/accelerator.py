"""``torch.accelerator`` on lazax: what torch's generic code calls for the current
accelerator, answered by lazax.

Contract: after ``install()`` (at registration: lazax is then the current accelerator,
as torch picks a registered PrivateUse1 backend first):
- ``current_device_index`` / ``set_device_index`` / ``device_index(i)``: the current
  lazax device index (``streams``: per thread, checked against the device count);
- ``synchronize(device)``: runs what is pending and waits for it (``streams``);
- ``current_stream(device)`` / ``set_stream(stream)``: the device's one ordered stream
  (a ``streams.Stream``); ``torch.Stream`` and ``torch.Event`` are lazax's subclasses,
  which behave as torch's own for other device types;
- ``memory_stats`` (and through it ``memory_allocated``, ``max_memory_allocated``,
  ``memory_reserved``, ``max_memory_reserved``), ``reset_peak_memory_stats``,
  ``get_memory_info``, ``empty_cache``: the runtime's memory statistics for the device
  (``lx.memory_stats``'s source: the PJRT plugin's where it reports them, else lazax's
  count of its live buffers); lazax keeps no cache of free blocks, so reserved equals
  allocated and ``empty_cache`` has nothing to free.
A device of another type raises torch's ``ValueError``. Why patch: torch's C++ side
asks a device guard and an allocator that a backend written in Python cannot register
(its guard answers device 0 and has no synchronize); ``torch.accelerator``'s Python
functions are where every caller passes, so they are replaced there (and in
``torch.accelerator.memory``, whose functions call each other).
"""

from __future__ import annotations

import os
import warnings
from collections import OrderedDict

import torch
import torch.accelerator
import torch.accelerator.memory

from ..barrier.executor import EXECUTOR
from ..config import DEVICE_NAME
from .streams import Event, Stream, current_index, set_index, synchronize

__all__ = ["DeviceContext", "index_of", "install", "memory_info", "memory_stats", "reset_peak"]


def index_of(device=None, optional: bool = True) -> int:
    """The lazax device index ``device`` names (None, an int, ``"lazax:1"``, a
    ``torch.device``): torch's ``_get_device_index`` rules, for lazax."""
    if isinstance(device, int):
        return device
    if isinstance(device, str):
        device = torch.device(device)
    if isinstance(device, torch.device):
        if device.type != DEVICE_NAME:
            raise ValueError(  # torch's message
                f"{device.type} doesn't match the current accelerator {DEVICE_NAME}."
            )
        if device.index is not None:
            return device.index
    if not optional:
        raise ValueError(
            f"Expected a torch.device with a specified index or an integer, but got:{device}"
        )
    return current_index()


class DeviceContext:
    """``with torch.lazax.device(i):`` / ``torch.accelerator.device_index(i)``: device
    ``i`` is current in the block (None: no change)."""

    def __init__(self, device, /) -> None:
        self.index = None if device is None else index_of(device)
        self.previous = -1

    def __enter__(self):
        if self.index is not None:
            self.previous = current_index()
            set_index(self.index)
        return self

    def __exit__(self, *exc_info) -> bool:
        if self.index is not None:
            set_index(self.previous)
        return False


def _device(index: int) -> torch.device:
    return torch.device(DEVICE_NAME, index)


def current_stream(device=None, /) -> Stream:
    return Stream(_device(index_of(device)))


def set_stream(stream, /) -> None:
    set_index(stream.device_index)


# -- memory -------------------------------------------------------------------------


def _raw(device) -> dict:
    runtime = EXECUTOR.runtime
    index = index_of(device)
    if not 0 <= index < len(runtime.devices):
        raise RuntimeError(
            f"lazax device index {index} is out of range: this process has "
            f"{len(runtime.devices)} device(s)."
        )
    return runtime.memory_stats(runtime.devices[index])


def memory_stats(device=None, /) -> OrderedDict:
    """torch's flat memory statistics (``allocated_bytes.all.current``...)."""
    raw = _raw(device)
    current = int(raw["bytes_in_use"])
    peak = int(raw.get("peak_bytes_in_use", current))
    stats = OrderedDict()
    for kind in ("allocated_bytes", "reserved_bytes", "active_bytes", "requested_bytes"):
        stats[f"{kind}.all.current"] = current
        stats[f"{kind}.all.peak"] = peak
    stats["num_alloc_retries"] = 0
    stats["num_ooms"] = 0
    return stats


def reset_peak(device=None, /) -> None:
    runtime = EXECUTOR.runtime
    runtime.reset_peak_memory_stats(runtime.devices[index_of(device)])


def memory_info(device=None, /) -> tuple[int, int]:
    """``(free, total)`` bytes: the device's limit where the plugin gives one, else the
    host's memory (the CPU platform's device memory)."""
    raw = _raw(device)
    if "bytes_limit" in raw:
        total = int(raw["bytes_limit"])
        return total - int(raw["bytes_in_use"]), total
    page = os.sysconf("SC_PAGE_SIZE")
    return os.sysconf("SC_AVPHYS_PAGES") * page, os.sysconf("SC_PHYS_PAGES") * page


def empty_cache() -> None:
    """Nothing to free: a lazax buffer is released when no tensor holds it."""


# -- torch.accelerator ----------------------------------------------------------------


def _current_device_index() -> int:
    return current_index()


def _set_device_index(device, /) -> None:
    set_index(index_of(device, optional=False))


def _deprecated(function, name: str):
    def call(*args):
        warnings.warn(f"Use `{name}` instead.", FutureWarning, stacklevel=2)
        return function(*args)

    return call


def _synchronize(device=None, /) -> None:
    index_of(device)  # torch's checks of the argument
    synchronize()


def _reset_accumulated(device=None, /) -> None:
    index_of(device)  # lazax keeps no accumulated counts


_PATCHES = {
    "current_device_index": _current_device_index,
    "current_device_idx": _deprecated(_current_device_index, "current_device_index"),
    "set_device_index": _set_device_index,
    "set_device_idx": _deprecated(_set_device_index, "set_device_index"),
    "device_index": DeviceContext,
    "current_stream": current_stream,
    "set_stream": set_stream,
    "synchronize": _synchronize,
}
_MEMORY_PATCHES = {
    "memory_stats": memory_stats,
    "reset_peak_memory_stats": reset_peak,
    "reset_accumulated_memory_stats": _reset_accumulated,
    "get_memory_info": memory_info,
    "empty_cache": empty_cache,
}

_installed = False


def install() -> None:
    """Point ``torch.accelerator``'s functions and ``torch.Stream`` / ``torch.Event`` at
    lazax's (idempotent)."""
    global _installed
    if _installed:
        return
    for name, function in _PATCHES.items():
        setattr(torch.accelerator, name, function)
    for name, function in _MEMORY_PATCHES.items():
        setattr(torch.accelerator, name, function)
        setattr(torch.accelerator.memory, name, function)
    torch.Stream = Stream
    torch.Event = Event
    _installed = True
