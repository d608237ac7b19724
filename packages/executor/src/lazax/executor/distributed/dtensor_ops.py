"""DTensor's own ops on lazax tensors.

Contract: ``install()`` (from ``fsdp.install``, as the "lazax" process group is made)
registers ``_dtensor::shard_dim_alltoall`` (``redistribute`` from ``Shard(i)`` to
``Shard(j)``) with torch's semantics: every process's ``input`` joined along
``gather_dim`` in rank order, then this process's equal piece along ``shard_dim``. torch
has no kernel for it on a device of its own (only CUDA's and a CPU path that DTensor
takes itself), so lazax tensors would reach the CPU fallback, which cannot run a
collective. It is an all-gather (``_c10d_functional.all_gather_into_tensor``, which the
process group runs) and a slice: each process receives every piece, where an all-to-all
would send each only its own; the tensors that DTensor reshards are small enough here.
"""

from __future__ import annotations

import torch
from torch.distributed.distributed_c10d import _resolve_process_group

from ..dispatch.special import register_special

__all__ = ["install"]

_INSTALLED: list = []


def _shard_dim_alltoall(args, kwargs):
    values = dict(zip(("input", "gather_dim", "shard_dim", "group_name"), args), **kwargs)
    group = values["group_name"]
    if isinstance(group, str):
        group = _resolve_process_group(group)
    size, rank = group.size(), group.rank()
    gather_dim, shard_dim = values["gather_dim"], values["shard_dim"]
    functional = torch.ops._c10d_functional
    stacked = functional.all_gather_into_tensor(values["input"], size, group.group_name)
    stacked = functional.wait_tensor(stacked)  # the pieces one after another along dim 0
    # Slices and clone, not chunk / narrow / contiguous: called from inside lazax's
    # dispatch, those composite ops would reach it whole and run on the CPU fallback.
    rows = stacked.shape[0] // size
    whole = torch.cat([stacked[k * rows : (k + 1) * rows] for k in range(size)], gather_dim)
    piece = whole.shape[shard_dim] // size
    mine = (slice(None),) * shard_dim + (slice(rank * piece, (rank + 1) * piece),)
    return whole[mine].clone()


def install() -> None:
    if _INSTALLED:
        return
    register_special({torch.ops._dtensor.shard_dim_alltoall.default: _shard_dim_alltoall})
    _INSTALLED.append(True)
