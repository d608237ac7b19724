"""Choosing the PJRT platform.

Contract: ``platform_from_env()`` reads ``PJRT_DEVICE`` (``CPU`` when unset; ``CUDA``,
``TPU``; case-insensitive) and returns jax's backend name. ``jax_devices(platform)``
returns that platform's devices, or raises ``PlatformUnavailableError`` at once, naming
the extra that installs the plugin, when jaxlib has no plugin for it. On the CPU,
``CPU_NUM_DEVICES=N`` (torch_xla's variable; set before the first device is used) asks
jax's CPU client for N devices; it wins over XLA's
``--xla_force_host_platform_device_count``. Set after jax's CPU client started, it
cannot change the count, and a warning says so.
"""

from __future__ import annotations

import os
import warnings

import jax

__all__ = ["PLATFORMS", "PlatformUnavailableError", "jax_devices", "platform_from_env"]

# PJRT_DEVICE value -> (jax backend name, the extra that brings its plugin)
PLATFORMS: dict[str, tuple[str, str | None]] = {
    "CPU": ("cpu", None),
    "CUDA": ("cuda", "cuda"),
    "GPU": ("cuda", "cuda"),
    "TPU": ("tpu", "tpu"),
}


class PlatformUnavailableError(RuntimeError):
    """The requested PJRT platform has no plugin installed (or no device)."""


def platform_from_env() -> str:
    raw = os.environ.get("PJRT_DEVICE", "CPU").strip().upper() or "CPU"
    if raw not in PLATFORMS:
        raise PlatformUnavailableError(
            f"PJRT_DEVICE={raw!r} is not a platform lazax knows; expected one of "
            f"{', '.join(sorted(PLATFORMS))}."
        )
    return PLATFORMS[raw][0]


def _cpu_device_count_from_env() -> None:
    raw = os.environ.get("CPU_NUM_DEVICES", "").strip()
    if not raw:
        return
    try:
        count = int(raw)
    except ValueError:
        count = 0
    if count < 1:
        raise ValueError(f"CPU_NUM_DEVICES={raw!r}: expected a whole number of devices, 1 or more.")
    try:
        jax.config.update("jax_num_cpu_devices", count)
    except RuntimeError:
        # jax's CPU client already started (jax code ran before lazax's first device).
        warnings.warn(
            f"CPU_NUM_DEVICES={count} is ignored: jax's CPU client had already started "
            f"with {jax.local_device_count('cpu')} devices. Set it before anything uses a "
            f"device (or set XLA_FLAGS=--xla_force_host_platform_device_count={count} "
            f"before jax starts).",
            stacklevel=3,
        )


def jax_devices(platform: str) -> list:
    if platform == "cpu":
        _cpu_device_count_from_env()
    try:
        devices = jax.devices(platform)
    except RuntimeError as err:
        extra = next((e for b, e in PLATFORMS.values() if b == platform and e), None)
        hint = f" Install its plugin with `pip install 'lazax-pjrt[{extra}]'`." if extra else ""
        raise PlatformUnavailableError(
            f"PJRT platform {platform!r} is not available in this process: {err}.{hint}"
        ) from err
    if not devices:
        raise PlatformUnavailableError(f"PJRT platform {platform!r} reports no devices.")
    return devices
