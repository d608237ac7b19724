"""Registering the ``lazax`` device with torch.

Contract: ``register()`` (idempotent, done at import of ``lazax.executor``) renames
torch's PrivateUse1 backend to ``lazax`` and registers a Python device module, so that
``torch.device("lazax:0")``, ``tensor.to("lazax")``, ``torch.randn(..., device="lazax")``
and ``torch.manual_seed`` reach lazax (the RNG: ``state.rng``).

Backward on the calling thread: torch's autograd engine runs the backward of a tensor on
an accelerator in a worker thread of that device, so every backward op lazax traces
would hand the GIL to that thread and back, and cost ~25% of a small model's step.
``register()`` turns multithreaded backward off for the importing thread
(``torch.autograd.set_multithreading_enabled(False)``, torch's public switch; thread
local): backward runs where ``.backward()`` is called, as on the CPU. Other threads keep
torch's default (correct, slower); ``set_multithreading_enabled(True)`` restores it.

The device module answers what torch's generic code asks an accelerator's module
(``torch.get_device_module("lazax")``): ``is_available``, ``is_initialized``, ``init``,
``device_count``, ``current_device`` / ``set_device`` / ``device(i)``,
``synchronize``, streams and events (``Stream``, ``Event``, ``current_stream``,
``default_stream``, ``set_stream``, ``stream(s)``: ``tensor.streams``), memory
(``memory_allocated``, ``max_memory_allocated``, ``memory_reserved``,
``max_memory_reserved``, ``memory_stats``, ``reset_peak_memory_stats``,
``mem_get_info``, ``empty_cache``: ``tensor.accelerator``), the RNG and AMP's dtypes.
``register()`` also points ``torch.accelerator`` at lazax (``tensor.accelerator``).
"""

from __future__ import annotations

import torch
from torch.utils import backend_registration

from lazax import pjrt

from ..barrier.executor import EXECUTOR
from ..config import DEVICE_NAME
from ..state.rng import RNG
from . import accelerator
from .streams import Event, Stream, set_index, started, synchronize

__all__ = ["device", "register"]

_registered = False


class _LazaxDeviceModule:
    """What torch looks up as ``torch.lazax`` (device count, seeding, ...)."""

    Stream = Stream
    Event = Event
    device = accelerator.DeviceContext

    @staticmethod
    def is_available() -> bool:
        return True

    @staticmethod
    def is_initialized() -> bool:
        return started()  # the PJRT client starts at first use (or init())

    # torch.utils.checkpoint replays a device's RNG in the recomputation only where the
    # device's module says ``_initialized`` (CUDA's flag): without it, dropout inside a
    # checkpointed block drew a new mask in the backward and the gradients were wrong
    _initialized = property(lambda self: started())

    @staticmethod
    def init() -> None:
        EXECUTOR.runtime  # noqa: B018  (starts the PJRT client now)

    @staticmethod
    def device_count() -> int:
        return len(pjrt.runtime().devices)

    @staticmethod
    def current_device() -> int:
        return accelerator.index_of(None)

    @staticmethod
    def set_device(device) -> None:
        set_index(accelerator.index_of(device))

    @staticmethod
    def get_device_name(device=None) -> str:
        return EXECUTOR.runtime.device_kind()

    @staticmethod
    def current_stream(device=None) -> Stream:
        return accelerator.current_stream(device)

    @staticmethod
    def default_stream(device=None) -> Stream:
        return accelerator.current_stream(device)

    @staticmethod
    def set_stream(stream) -> None:
        accelerator.set_stream(stream)

    @staticmethod
    def stream(stream):
        """``with torch.lazax.stream(s):``: ``s``'s device is current in the block."""
        return accelerator.DeviceContext(None if stream is None else stream.device_index)

    @staticmethod
    def memory_stats(device=None) -> dict:
        return accelerator.memory_stats(device)

    @staticmethod
    def memory_allocated(device=None) -> int:
        return accelerator.memory_stats(device)["allocated_bytes.all.current"]

    @staticmethod
    def max_memory_allocated(device=None) -> int:
        return accelerator.memory_stats(device)["allocated_bytes.all.peak"]

    @staticmethod
    def memory_reserved(device=None) -> int:
        return accelerator.memory_stats(device)["reserved_bytes.all.current"]

    @staticmethod
    def max_memory_reserved(device=None) -> int:
        return accelerator.memory_stats(device)["reserved_bytes.all.peak"]

    @staticmethod
    def reset_peak_memory_stats(device=None) -> None:
        accelerator.reset_peak(device)

    @staticmethod
    def mem_get_info(device=None) -> tuple[int, int]:
        return accelerator.memory_info(device)

    @staticmethod
    def empty_cache() -> None:
        accelerator.empty_cache()

    @staticmethod
    def _is_in_bad_fork() -> bool:
        return False

    @staticmethod
    def manual_seed(seed: int) -> None:
        RNG.manual_seed(seed)

    @staticmethod
    def manual_seed_all(seed: int) -> None:
        RNG.manual_seed(seed)

    @staticmethod
    def seed() -> None:
        RNG.manual_seed(torch.initial_seed())

    @staticmethod
    def initial_seed() -> int:
        return RNG.seed

    @staticmethod
    def get_rng_state(device=DEVICE_NAME) -> torch.Tensor:
        return RNG.get_state()

    @staticmethod
    def set_rng_state(state: torch.Tensor, device=DEVICE_NAME) -> None:
        RNG.set_state(state)

    @staticmethod
    def get_amp_supported_dtype() -> list[torch.dtype]:
        return [torch.bfloat16, torch.float16]

    @staticmethod
    def synchronize(device=None) -> None:
        accelerator.index_of(device)  # torch's checks of the argument
        synchronize()


def register() -> None:
    global _registered
    if _registered:
        return
    if torch._C._get_privateuse1_backend_name() == DEVICE_NAME:
        _registered = True
        return
    if DEVICE_NAME == "xla":
        _register_as_xla()
    else:
        backend_registration._setup_privateuseone_for_python_backend(
            DEVICE_NAME, backend_module=_LazaxDeviceModule()
        )
    accelerator.install()
    torch.autograd.set_multithreading_enabled(False)
    _registered = True


def _register_as_xla() -> None:
    """PrivateUse1 renamed ``xla`` (``LAZAX_DEVICE_NAME=xla``): what
    ``_setup_privateuseone_for_python_backend`` does, without its generated tensor
    methods, since ``torch.Tensor.is_xla`` exists already (it asks for torch's own XLA
    key, which a lazax tensor has not: ``LazyTensor.is_xla`` answers instead)."""
    torch.utils.rename_privateuse1_backend(DEVICE_NAME)
    torch._register_device_module(DEVICE_NAME, _LazaxDeviceModule())
    torch._C._acc.register_python_privateuseone_hook(backend_registration._DummyPrivateUse1Hook())
    torch._C._acc.register_python_privateuseone_device_guard(
        backend_registration._DummyDeviceGuard()
    )


def device(index: int = 0) -> torch.device:
    """``torch.device("lazax:<index>")`` (``xla:<index>`` under ``LAZAX_DEVICE_NAME=xla``)."""
    return torch.device(DEVICE_NAME, index)
