"""lazax.pjrt: devices, transfers, compile and asynchronous execute over jaxlib's PJRT.

The platform comes from ``PJRT_DEVICE`` (CPU by default; CUDA and TPU through the
``lazax-pjrt[cuda]`` / ``[tpu]`` extras). ``runtime()`` returns the process-wide
runtime, created on first use. Imports no torch.
"""

from __future__ import annotations

from ._platform import PLATFORMS, PlatformUnavailableError, platform_from_env
from ._runtime import (
    STAGES,
    DeviceOutOfMemory,
    Executable,
    PjrtRuntime,
    is_out_of_memory,
    numpy_dtype,
)
from ._version import __version__

__all__ = [
    "PLATFORMS",
    "STAGES",
    "DeviceOutOfMemory",
    "Executable",
    "PjrtRuntime",
    "PlatformUnavailableError",
    "__version__",
    "is_out_of_memory",
    "numpy_dtype",
    "platform_from_env",
    "runtime",
    "set_runtime",
]

_RUNTIME: PjrtRuntime | None = None


def runtime() -> PjrtRuntime:
    """The process-wide runtime for ``PJRT_DEVICE``, created on first call."""
    global _RUNTIME
    if _RUNTIME is None:
        _RUNTIME = PjrtRuntime()
    return _RUNTIME


def set_runtime(new: PjrtRuntime | None):
    """Replace the process-wide runtime (tests; another implementation); returns the old."""
    global _RUNTIME
    old, _RUNTIME = _RUNTIME, new
    return old
