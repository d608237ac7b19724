"""lazax.pjrt: devices, transfers, compile and asynchronous execute over jaxlib's PJRT.

The platform comes from ``PJRT_DEVICE`` (CPU by default; CUDA and TPU through the
``lazax-pjrt[cuda]`` / ``[tpu]`` extras). ``runtime()`` returns the process-wide
runtime, created on first use. Imports no torch.
"""

from __future__ import annotations

import os
import warnings

from ._interface import Runtime
from ._null import NullProgram, NullRuntime
from ._padding import padded, padded_shape, trim
from ._per_process import PROCESS_AXIS, processes_mesh
from ._platform import PLATFORMS, PlatformUnavailableError, platform_from_env
from ._processes import (
    ProcessLostError,
    SplitAcrossProcessesError,
    barrier,
    exchange,
    from_process_local,
    is_initialized,
    local_part,
    spans_processes,
)
from ._processes import initialize as _join
from ._runtime import (
    STAGES,
    DeviceOutOfMemory,
    Executable,
    PjrtRuntime,
    is_out_of_memory,
    numpy_dtype,
)
from ._version import __version__
from ._watchdog import WATCHDOG, Watchdog

__all__ = [
    "PLATFORMS",
    "PROCESS_AXIS",
    "STAGES",
    "DeviceOutOfMemory",
    "Executable",
    "NullProgram",
    "NullRuntime",
    "PjrtRuntime",
    "PlatformUnavailableError",
    "Runtime",
    "ProcessLostError",
    "SplitAcrossProcessesError",
    "WATCHDOG",
    "Watchdog",
    "__version__",
    "barrier",
    "exchange",
    "from_process_local",
    "initialize_distributed",
    "is_distributed",
    "is_out_of_memory",
    "local_part",
    "numpy_dtype",
    "padded",
    "padded_shape",
    "platform_from_env",
    "processes_mesh",
    "runtime",
    "runtime_started",
    "set_runtime",
    "spans_processes",
    "trim",
]

_RUNTIME: PjrtRuntime | None = None


def runtime_started() -> bool:
    """Whether ``runtime()`` has created the process's runtime (asking ``runtime()``
    would create it; a process of a distributed job must join the job first)."""
    return _RUNTIME is not None


def runtime() -> PjrtRuntime:
    """The process-wide runtime for ``PJRT_DEVICE``, created on first call."""
    global _RUNTIME
    if _RUNTIME is None:
        _warn_if_launched_unjoined()
        _RUNTIME = PjrtRuntime()
    return _RUNTIME


def initialize_distributed(
    coordinator_address: str, num_processes: int, process_id: int, **options
) -> None:
    """Join this process to a job of ``num_processes`` (jax's distributed runtime, its
    coordinator at ``coordinator_address``, run by process 0); ``options``:
    ``local_device_ids``, ``timeout_s`` (how long to wait for every process to join),
    ``heartbeat_timeout_s`` (after how long without a heartbeat a process counts as
    dead). Before the runtime's first use; on the CPU, collectives over gloo."""
    if _RUNTIME is not None:
        raise RuntimeError(
            "lazax: the distributed runtime must start before anything uses a device, "
            "and this process already has; call lazax.modes.distributed.initialize() "
            "first thing in the script (before moving a model or tensor to lazax)"
        )
    _join(coordinator_address, num_processes, process_id, platform=platform_from_env(), **options)


def is_distributed() -> bool:
    """Whether this process is one of several in a job (jax's distributed runtime)."""
    return is_initialized()


_warned: list[bool] = []


def _warn_if_launched_unjoined() -> None:
    """A launcher (torchrun, mpirun) started several processes that never joined: each
    would run the whole job alone, on every device of its host."""
    try:
        world = int(os.environ.get("WORLD_SIZE", "1"))
    except ValueError:
        return
    if world > 1 and not is_initialized() and not _warned:
        _warned.append(True)
        warnings.warn(
            f"lazax: WORLD_SIZE={world}, but this process did not join the other "
            f"processes: each runs alone on all of its host's devices. Call "
            f"lazax.modes.distributed.initialize() first thing in the script.",
            RuntimeWarning,
            stacklevel=3,
        )


def set_runtime(new: Runtime | None):
    """Replace the process-wide runtime (tests; another implementation); returns the old."""
    global _RUNTIME
    old, _RUNTIME = _RUNTIME, new
    return old
