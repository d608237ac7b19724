"""torch's legacy DLPack export for lazax tensors.

Contract: after ``install()``, ``torch.utils.dlpack.to_dlpack(t)`` (and
``torch.to_dlpack``) of a lazax tensor returns the capsule of ``t.__dlpack__()``: its
buffer as jax exports it (``tensor.lazy``), instead of torch's C export, which knows no
lazax memory and would describe address 0. Other tensors go to torch's own function.
A script that bound ``to_dlpack`` before lazax was imported keeps torch's.
"""

from __future__ import annotations

import torch
import torch.utils.dlpack

from ..tensor.lazy import LazyTensor

__all__ = ["install"]


def install() -> None:
    original = torch.utils.dlpack.to_dlpack
    if getattr(original, "_lazax", False):
        return

    def to_dlpack(tensor):
        if type(tensor) is LazyTensor:
            return tensor.__dlpack__()
        return original(tensor)

    to_dlpack._lazax = True
    to_dlpack.__doc__ = original.__doc__
    torch.utils.dlpack.to_dlpack = to_dlpack
    if getattr(torch, "to_dlpack", None) is original:
        torch.to_dlpack = to_dlpack
