"""Device memory, in the shape torch users know from ``torch.cuda``.

Contract: every function takes ``device`` as None (``lazax:0``), an index, a
``torch.device`` or a string such as ``"lazax:1"``, and reads the runtime's memory
statistics for it: the PJRT plugin's own where it reports them (GPU, TPU), else lazax's
count of the device buffers it holds that are still alive, with each execution's
scratch memory in the peak (the CPU). ``memory_stats(device)["source"]`` says which.
- ``memory_allocated`` / ``max_memory_allocated``: bytes in use now / at the peak since
  the start or the last ``reset_peak_memory_stats``.
- ``memory_stats``: torch's key names (``allocated_bytes.all.current``,
  ``allocated_bytes.all.peak``, ``num_alloc``...) plus the source's own.
- ``memory_info``: ``bytes_used``, ``peak_bytes_used`` and, where the device says,
  ``bytes_limit`` (torch_xla's ``get_memory_info`` names).
"""

from __future__ import annotations

from lazax import executor as _executor

__all__ = [
    "max_memory_allocated",
    "memory_allocated",
    "memory_info",
    "memory_stats",
    "reset_peak_memory_stats",
]


def _runtime_device(device):
    runtime = _executor.EXECUTOR.runtime
    if device is None:
        index = 0
    elif isinstance(device, int):
        index = device
    else:  # a torch.device or a string such as "lazax:1"
        if isinstance(device, str):
            kind, _, number = device.partition(":")
            index = int(number) if number else 0
        else:
            kind, index = device.type, device.index or 0
        if kind != _executor.device(0).type:
            raise ValueError(
                f"Expected a lazax device, but got: {device} (use torch.cuda for cuda "
                f"memory, psutil for the host's)"
            )
    if not 0 <= index < len(runtime.devices):
        raise RuntimeError(
            f"lazax device index {index} is out of range: this process has "
            f"{len(runtime.devices)} device(s)."
        )
    return runtime, runtime.devices[index]


def _raw(device) -> dict:
    runtime, target = _runtime_device(device)
    return runtime.memory_stats(target)


def _peak(raw: dict) -> int:
    return int(raw.get("peak_bytes_in_use", raw["bytes_in_use"]))


def memory_stats(device=None) -> dict:
    """The device's memory statistics (see the module docstring)."""
    raw = _raw(device)
    stats = {
        "allocated_bytes.all.current": raw["bytes_in_use"],
        "allocated_bytes.all.peak": _peak(raw),
        "num_alloc": raw.get("num_allocs", 0),
        "largest_alloc_size": raw.get("largest_alloc_size", 0),
    }
    if "bytes_limit" in raw:
        stats["bytes_limit"] = raw["bytes_limit"]
    stats.update(raw)
    return stats


def memory_allocated(device=None) -> int:
    """Bytes of device memory in use now."""
    return int(_raw(device)["bytes_in_use"])


def max_memory_allocated(device=None) -> int:
    """Peak bytes in use since the start or the last ``reset_peak_memory_stats``."""
    raw = _raw(device)
    return _peak(raw)


def reset_peak_memory_stats(device=None) -> None:
    """Start a new peak from what is in use now."""
    runtime, target = _runtime_device(device)
    runtime.reset_peak_memory_stats(target)


def memory_info(device=None) -> dict:
    """``bytes_used``, ``peak_bytes_used`` and, where known, ``bytes_limit``."""
    raw = _raw(device)
    info = {
        "bytes_used": int(raw["bytes_in_use"]),
        "peak_bytes_used": _peak(raw),
    }
    if "bytes_limit" in raw:
        info["bytes_limit"] = int(raw["bytes_limit"])
    return info
