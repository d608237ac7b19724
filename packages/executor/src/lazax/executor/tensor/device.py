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
"""

from __future__ import annotations

import torch
from torch.utils.backend_registration import _setup_privateuseone_for_python_backend

from lazax import pjrt

from ..barrier.executor import EXECUTOR
from ..config import DEVICE_NAME
from ..state.rng import RNG

__all__ = ["device", "register"]

_registered = False


class _LazaxDeviceModule:
    """What torch looks up as ``torch.lazax`` (device count, seeding, ...)."""

    @staticmethod
    def is_available() -> bool:
        return True

    @staticmethod
    def device_count() -> int:
        return len(pjrt.runtime().devices)

    @staticmethod
    def current_device() -> int:
        return 0

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
    def get_rng_state(device="lazax") -> torch.Tensor:
        return RNG.get_state()

    @staticmethod
    def set_rng_state(state: torch.Tensor, device="lazax") -> None:
        RNG.set_state(state)

    @staticmethod
    def get_amp_supported_dtype() -> list[torch.dtype]:
        return [torch.bfloat16, torch.float16]

    @staticmethod
    def synchronize(device=None) -> None:
        EXECUTOR.sync(wait=True)


def register() -> None:
    global _registered
    if _registered:
        return
    if torch._C._get_privateuse1_backend_name() == DEVICE_NAME:
        _registered = True
        return
    _setup_privateuseone_for_python_backend(DEVICE_NAME, backend_module=_LazaxDeviceModule())
    torch.autograd.set_multithreading_enabled(False)
    _registered = True


def device(index: int = 0) -> torch.device:
    """``torch.device("lazax:<index>")``."""
    return torch.device(DEVICE_NAME, index)
