"""FSDP2 (``torch.distributed.fsdp.fully_shard``) over lazax tensors.

Contract: ``install()`` (called as the "lazax" process group is made) lets FSDP2 free
and re-allocate an unsharded parameter's memory on lazax. FSDP2 does so through the
torch storage (``untyped_storage().resize_``), which a lazax tensor does not own: its
value is XLA's buffer, not a torch storage's memory. On lazax a free is
``Storage.free``: the all-gather output drops its device data or pending IR (the graph
that read it keeps what it read) and no sync computes it, so between steps FSDP2 holds
only sharded state; the re-allocation is a no-op, since the next all-gather writes the
whole output (in place, which its views, the unsharded parameters, see). Tensors of
other devices keep torch's behaviour. It also registers
FSDP2's copy ops (``fsdp::all_gather_copy_in``, ``fsdp::split_with_sizes_copy``,
``fsdp::chunk_cat``, torch's semantics) as lazax views and copies, traced like any op,
where they would otherwise run on the CPU fallback, and DTensor's own ops
(``dtensor_ops``). And ``fully_shard`` of a module still on the CPU moves its
parameters and buffers to lazax itself, as it does to cuda: torch moves them with
``tensor.data = tensor.to(device)``, which a lazax tensor (a wrapper subclass) cannot
replace a CPU tensor's data with; they are swapped in place instead
(``torch.utils.swap_tensors``, what torch does for subclasses itself), so the module,
its optimizer-to-be and any other holder see the moved tensor.
"""

from __future__ import annotations

import torch
from torch.utils._python_dispatch import is_traceable_wrapper_subclass

from ..config import DEVICE_NAME
from ..dispatch.special import register_special
from ..tensor.lazy import LazyTensor
from . import dtensor_ops

__all__ = ["install"]

_to_copy = torch.ops.aten._to_copy.default

_TORCH: dict = {}


def _alloc_storage(tensor: torch.Tensor) -> None:
    if type(tensor) is not LazyTensor:
        _TORCH["alloc"](tensor)


def _free_storage(tensor: torch.Tensor) -> None:
    if type(tensor) is not LazyTensor:
        _TORCH["free"](tensor)
    else:
        tensor._lz_storage.free()


def _move_states_to_device(params, buffers, device) -> None:
    if device.type != DEVICE_NAME:
        return _TORCH["move"](params, buffers, device)
    rest = []
    for tensor in (*params, *buffers):
        if tensor.device.type in (DEVICE_NAME, "meta") or is_traceable_wrapper_subclass(tensor):
            rest.append(tensor)  # torch's own way (a DTensor: its checks and messages)
            continue
        with torch.no_grad():  # no autograd edge: swap_tensors needs sole ownership
            moved = tensor.to(device)
            if isinstance(tensor, torch.nn.Parameter):
                moved = torch.nn.Parameter(moved, requires_grad=tensor.requires_grad)
        torch.utils.swap_tensors(tensor, moved)
    return _TORCH["move"](rest, [], device)


def _pieces(t: torch.Tensor, sizes, dim: int = 0) -> list:
    """``t`` split along ``dim`` into pieces of ``sizes``: lazax views."""
    out, start = [], 0
    for size in sizes:
        out.append(t[(slice(None),) * dim + (slice(start, start + size),)])
        start += size
    return out


def _all_gather_copy_in(args, kwargs):
    # torch's input is the rank's slice of the output (NCCL gathers in place); here it
    # is its own tensor: the slice's offset is the rank's, which would make each
    # process's graph differ, and the all-gather writes the whole output anyway.
    inputs, output, sizes, numel, rank = args
    with torch.no_grad():
        flat = [t.reshape(-1) for t in inputs]
        # (below autograd here: aten::to would reach the CPU fallback; _to_copy does not)
        flat = [f if f.dtype == output.dtype else _to_copy(f, dtype=output.dtype) for f in flat]
        mine = torch.cat(flat)
        if mine.numel() < numel:
            mine = torch.cat([mine, mine.new_zeros(numel - mine.numel())])
    return mine, output


def _split_with_sizes_copy(args, kwargs):
    output, sizes, *rest = args
    dim = rest[0] if rest else kwargs.get("dim", 0)
    with torch.no_grad():
        for out, piece in zip(kwargs["out"], _pieces(output, sizes, dim)):
            out.copy_(piece)


def _chunk_cat(args, kwargs):
    tensors, dim, chunks = args[:3]
    out = kwargs["out"] if "out" in kwargs else args[3]
    rows = []
    for t in tensors:
        pad = -t.shape[dim] % chunks
        if pad:  # padded with zeros along dim to a multiple of the chunks, as torch's
            t = torch.cat([t, t.new_zeros((*t.shape[:dim], pad, *t.shape[dim + 1 :]))], dim)
        rows.append(t.reshape(*t.shape[:dim], chunks, -1))
    with torch.no_grad():
        out.copy_(torch.cat(rows, dim + 1).reshape(out.shape))


def install() -> None:
    """Once, when the "lazax" process group is made (FSDP2 needs one): torch's FSDP
    modules take about 2 s to import, which ``import lazax`` does not pay."""
    if _TORCH:
        return
    dtensor_ops.install()
    from torch.distributed.fsdp._fully_shard import _fsdp_init, _fsdp_param, _fsdp_param_group

    ops = torch.ops.fsdp
    register_special(
        {
            ops.all_gather_copy_in.default: _all_gather_copy_in,
            ops.split_with_sizes_copy.default: _split_with_sizes_copy,
            ops.chunk_cat.default: _chunk_cat,
        }
    )
    _TORCH.update(
        alloc=_fsdp_param.alloc_storage,
        free=_fsdp_param.free_storage,
        move=_fsdp_init._move_states_to_device,
    )
    _fsdp_init._move_states_to_device = _move_states_to_device
    _fsdp_param.alloc_storage = _alloc_storage
    _fsdp_param.free_storage = _free_storage
    _fsdp_param_group.alloc_storage = _alloc_storage
