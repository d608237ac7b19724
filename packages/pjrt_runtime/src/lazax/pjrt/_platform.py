"""Choosing the PJRT platform.

Contract: ``platform_from_env()`` reads ``PJRT_DEVICE`` (``CPU`` when unset; ``CUDA``,
``TPU``; case-insensitive) and returns jax's backend name. ``jax_devices(platform)``
returns that platform's devices, or raises ``PlatformUnavailableError`` at once, naming
the extra that installs the plugin, when jaxlib has no plugin for it.
"""

from __future__ import annotations

import os

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


def jax_devices(platform: str) -> list:
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
