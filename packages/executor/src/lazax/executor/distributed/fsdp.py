"""FSDP2 (``torch.distributed.fsdp.fully_shard``) over lazax tensors.

Contract: ``install()`` (called as the "lazax" process group is made) lets FSDP2 free
and re-allocate an unsharded parameter's memory on lazax. FSDP2 does so through the
torch storage (``untyped_storage().resize_``), which a lazax tensor does not own: its
value is XLA's buffer, not a torch storage's memory. On lazax both are no-ops: the
all-gather output keeps its value until the next all-gather writes it (in place, which
its views, the unsharded parameters, see), so reshard-after-forward does not yet free
device memory. Tensors of other devices keep torch's behaviour.
"""

from __future__ import annotations

import torch

from ..tensor.lazy import LazyTensor

__all__ = ["install"]

_TORCH: dict = {}


def _alloc_storage(tensor: torch.Tensor) -> None:
    if type(tensor) is not LazyTensor:
        _TORCH["alloc"](tensor)


def _free_storage(tensor: torch.Tensor) -> None:
    if type(tensor) is not LazyTensor:
        _TORCH["free"](tensor)


def install() -> None:
    """Once, when the "lazax" process group is made (FSDP2 needs one): torch's FSDP
    modules take about 2 s to import, which ``import lazax`` does not pay."""
    if _TORCH:
        return
    from torch.distributed.fsdp._fully_shard import _fsdp_param, _fsdp_param_group

    _TORCH.update(alloc=_fsdp_param.alloc_storage, free=_fsdp_param.free_storage)
    _fsdp_param.alloc_storage = _alloc_storage
    _fsdp_param.free_storage = _free_storage
    _fsdp_param_group.alloc_storage = _alloc_storage
