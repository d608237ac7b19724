"""Registering the ``lazax`` device with torch, and the device RNG state.

Contract: ``register()`` (idempotent, done at import of ``lazax.executor``) renames
torch's PrivateUse1 backend to ``lazax`` and registers a Python device module, so that
``torch.device("lazax:0")``, ``tensor.to("lazax")``, ``torch.randn(..., device="lazax")``
and ``torch.manual_seed`` reach lazax. The device RNG is a (seed, counter) pair:
every random op takes the next counter value, so results are new on each call and
repeatable after ``torch.manual_seed``.

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

__all__ = ["DEVICE_NAME", "RNG", "device", "register"]

DEVICE_NAME = "lazax"

_registered = False


class _RngState:
    __slots__ = ("seed", "counter", "recorder")

    def __init__(self) -> None:
        self.seed = 0
        self.counter = 0
        # While a graph is captured for replay (the dynamo bridge), the seed parameters
        # it takes are listed here, so each replay can feed fresh ones.
        self.recorder: list | None = None

    def manual_seed(self, seed: int) -> None:
        self.seed = int(seed) & 0xFFFF_FFFF_FFFF_FFFF
        self.counter = 0

    def next_key(self) -> int:
        """A 63-bit value that differs per call and depends on the seed."""
        self.counter += 1
        mixed = (self.seed * 0x9E3779B97F4A7C15 + self.counter * 0xBF58476D1CE4E5B9) & (
            (1 << 63) - 1
        )
        return mixed

    def get_state(self) -> torch.Tensor:
        return torch.tensor([self.seed, self.counter], dtype=torch.int64)

    def set_state(self, state: torch.Tensor) -> None:
        seed, counter = (int(v) for v in state.tolist())
        self.seed, self.counter = seed, counter


RNG = _RngState()


class _LazaxDeviceModule:
    """What torch looks up as ``torch.lazax`` (device count, seeding, ...)."""

    @staticmethod
    def is_available() -> bool:
        return True

    @staticmethod
    def device_count() -> int:
        from lazax import pjrt

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
        from ._barrier import EXECUTOR

        EXECUTOR.sync(wait=True)


def register() -> None:
    global _registered
    if _registered:
        return
    from torch.utils.backend_registration import _setup_privateuseone_for_python_backend

    if torch._C._get_privateuse1_backend_name() == DEVICE_NAME:
        _registered = True
        return
    _setup_privateuseone_for_python_backend(DEVICE_NAME, backend_module=_LazaxDeviceModule())
    torch.autograd.set_multithreading_enabled(False)
    _registered = True


def device(index: int = 0) -> torch.device:
    """``torch.device("lazax:<index>")``."""
    return torch.device(DEVICE_NAME, index)
