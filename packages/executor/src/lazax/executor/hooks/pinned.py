"""Pinned host memory for the lazax accelerator: ``pin_memory()``, ``is_pinned()`` and
``DataLoader(pin_memory=True)``.

Contract: after ``install()``, for a CPU tensor and the lazax device (``device=None``,
the current accelerator, or ``"lazax[:N]"``):
- ``t.pin_memory()`` returns ``t`` itself if it is pinned, else a pinned copy (same
  size, strides and values; autograd records the copy as for cuda);
- ``t.is_pinned()`` says whether ``t``'s storage was made by ``pin_memory()`` (a view of
  a pinned tensor is pinned; a storage stops being pinned when it is freed).
A device of another type goes to torch's own kernels. A lazax tensor is never pinned,
and pinning one raises torch's error for a device tensor. Creating a pinned tensor directly
(``torch.empty(..., pin_memory=True)``) stays unsupported (torch asks a C++ allocator
for it, which a Python backend cannot register).

What "pinned" means here: torch asks the accelerator's C++ hooks for a pinned allocator,
which a backend written in Python cannot give, so lazax answers at the two ops
instead (their CPU kernels, ``torch.library``). PJRT owns how a host buffer reaches the
device: on the CPU platform the device's memory is host memory, and on GPU/TPU PJRT
stages the copy itself; a transfer (``non_blocking=True`` or not) copies the source
before it returns, so a pinned buffer refilled by the DataLoader's pin thread never
changes a tensor already moved. Pinned storages are plain host memory kept in a
registry by address, dropped when torch frees them.
"""

from __future__ import annotations

import threading
import weakref

import torch

from ..config import DEVICE_NAME
from ..dispatch.special import register_special

__all__ = ["install", "is_pinned_storage"]

# Address of a pinned storage's data -> its byte size. An entry lives exactly as long
# as the storage (its finalizer drops it), so a freed address reused by a new
# allocation is never taken for pinned.
_PINNED: dict[int, int] = {}
_LOCK = threading.Lock()  # the DataLoader pins in a thread of its own
_COMPOSITE = torch._C.DispatchKey.CompositeExplicitAutograd


def _for_lazax(device) -> bool:
    return device is None or torch.device(device).type == DEVICE_NAME


def is_pinned_storage(storage: torch.UntypedStorage) -> bool:
    return storage.nbytes() > 0 and storage.data_ptr() in _PINNED


def _forget(address: int) -> None:
    with _LOCK:
        _PINNED.pop(address, None)


def _is_pinned(self: torch.Tensor, device=None) -> bool:
    if not _for_lazax(device):
        return torch.ops.aten.is_pinned.default._op_dk(_COMPOSITE, self, device)
    return is_pinned_storage(self.untyped_storage())


def _pin_memory(self: torch.Tensor, device=None) -> torch.Tensor:
    if not _for_lazax(device):
        return torch.ops.aten._pin_memory.default._op_dk(_COMPOSITE, self, device)
    out = torch.empty_strided(self.size(), self.stride(), dtype=self.dtype)
    out.copy_(self)
    storage = out.untyped_storage()
    if storage.nbytes() > 0:  # an empty storage has no address to remember
        address = storage.data_ptr()
        with _LOCK:
            _PINNED[address] = storage.nbytes()
        # The storage's Python object lives as long as torch's storage does.
        weakref.finalize(storage, _forget, address)
    return out


def _lazax_is_pinned(args, kwargs) -> bool:
    return False  # device memory, as a cuda tensor's


def _lazax_pin_memory(args, kwargs):
    raise RuntimeError(f"cannot pin '{args[0].type()}' only dense CPU tensors can be pinned")


_LIBRARY = None


def install() -> None:
    """Register the CPU kernels of ``is_pinned`` and ``_pin_memory`` (idempotent)."""
    global _LIBRARY
    if _LIBRARY is not None:
        return
    lib = torch.library.Library("aten", "IMPL")
    lib.impl("is_pinned", _is_pinned, "CPU")
    lib.impl("_pin_memory", _pin_memory, "CPU")
    register_special(
        {
            torch.ops.aten.is_pinned.default: _lazax_is_pinned,
            torch.ops.aten._pin_memory.default: _lazax_pin_memory,
        }
    )
    _LIBRARY = lib
