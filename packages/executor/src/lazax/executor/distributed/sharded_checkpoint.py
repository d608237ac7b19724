"""Checkpoints of a job of several processes: each process writes the pieces it owns.

torch.distributed.checkpoint's shape (``save(state_dict, path)``, ``load(state_dict,
path)`` in place), for lazax tensors laid out over meshes that may span processes.

Contract:
- ``save(state_dict, path)``: every process calls it with the same structure (nested
  dicts and lists: a model's and an optimizer's state dicts). Pending values run first,
  as one graph. For each lazax tensor, every distinct piece of its layout is written
  once, by the lowest process holding it: a replicated tensor by process 0 only, a
  tensor split by rows across processes by each process for its own rows. Non-lazax
  values (CPU tensors, numbers, strings) are written by process 0. Files:
  ``path/layout.pt`` (process 0: the structure, shapes, dtypes, values) and
  ``path/pieces-<k>.pt`` (process k's pieces, with their offsets). Returns once every
  process has written (a barrier). In one process, the whole state in two files.
- ``load(state_dict, path)``: every process calls it with a state dict of the same
  structure (the model and optimizer built as when saving; an optimizer's state exists
  after its first step). Each lazax tensor gets the saved value in its current layout,
  each device reading only the pieces it holds (no process assembles a whole sharded
  tensor); CPU tensors are copied in place; other values replace the state dict's.
  Raises ``KeyError`` for entries the checkpoint lacks, ``ValueError`` for a shape or
  dtype that differs, before changing anything.
- Loaded with ``torch.load(weights_only=True)``: the files hold only tensors, numbers,
  strings, tuples, lists and dicts.
"""

from __future__ import annotations

import os

import numpy as np
import torch

from lazax import ir, pjrt

from ..barrier.executor import EXECUTOR
from ..state.dtypes import dtype_name
from ..state.values import ir_value
from ..tensor.lazy import LazyTensor
from ..tensor.transfer import host_tensor, to_numpy

__all__ = ["load", "save"]

_FORMAT = "lazax-sharded-checkpoint/1"
_SAVES = {"count": 0}


def _leaves(obj, path=()):
    """(path, leaf) for every leaf of nested dicts and lists, in order (a tuple, such as
    AdamW's ``betas``, is one value)."""
    if isinstance(obj, dict):
        for key, value in obj.items():
            yield from _leaves(value, (*path, key))
    elif isinstance(obj, list):
        for k, value in enumerate(obj):
            yield from _leaves(value, (*path, k))
    else:
        yield path, obj


def _owned_pieces(buffer, me: int, value_shape: tuple):
    """(offsets, array) for each piece of ``buffer`` this process writes, of the value
    of ``value_shape`` it holds (a buffer split unevenly holds it padded: the padding
    is no part of any piece)."""
    sharding = getattr(buffer, "sharding", None)
    if sharding is None or len(sharding.device_set) == 1:
        if me == 0:
            yield (0,) * buffer.ndim, pjrt.trim(np.asarray(buffer), value_shape)
        return
    shape = buffer.shape
    owners: dict[tuple, int] = {}
    for device, index in sharding.devices_indices_map(shape).items():
        block = tuple(s.indices(n)[:2] for s, n in zip(index, shape))
        owners[block] = min(owners.get(block, device.process_index), device.process_index)
    written = set()
    for shard in buffer.addressable_shards:
        block = tuple(s.indices(n)[:2] for s, n in zip(shard.index, shape))
        if owners[block] == me and block not in written:
            written.add(block)
            offsets = tuple(lo for lo, _ in block)
            # The part of the piece inside the value (none of it: all padding).
            inside = tuple(max(0, min(hi, n) - lo) for (lo, hi), n in zip(block, value_shape))
            if all(inside):
                yield offsets, pjrt.trim(np.asarray(shard.data), inside)


def save(state_dict, path) -> None:
    runtime = EXECUTOR.runtime
    me = runtime.process_index
    leaves = list(_leaves(state_dict))
    tensors = [leaf for _, leaf in leaves if type(leaf) is LazyTensor]
    EXECUTOR.sync_tensors_graph(tensors, wait=False)
    layout, pieces = {}, {}
    for key, leaf in leaves:
        if type(leaf) is LazyTensor:
            buffer = ir_value(leaf).node.data
            runtime.wait([buffer])
            layout[key] = {"shape": tuple(leaf.shape), "dtype": str(leaf.dtype)}
            pieces[key] = [
                (offsets, host_tensor(buffer, leaf.dtype, array.shape, read=lambda _, a=array: a))
                for offsets, array in _owned_pieces(buffer, me, tuple(leaf.shape))
            ]
        else:
            layout[key] = {"value": leaf}
    os.makedirs(path, exist_ok=True)
    torch.save(pieces, os.path.join(path, f"pieces-{me}.pt"))
    if me == 0:
        record = {"format": _FORMAT, "processes": runtime.process_count, "entries": layout}
        torch.save(record, os.path.join(path, "layout.pt"))
    if runtime.process_count > 1:
        _SAVES["count"] += 1
        pjrt.barrier(f"checkpoint/{_SAVES['count']}", 1800)


def _region(pieces: list, block: tuple, dtype: torch.dtype) -> torch.Tensor:
    """The saved values of ``block`` ((start, stop) per dimension), from the pieces."""
    out = torch.empty(tuple(hi - lo for lo, hi in block), dtype=dtype)
    covered = 0
    for offsets, piece in pieces:
        src, dst = [], []
        for (lo, hi), start, n in zip(block, offsets, piece.shape):
            a, b = max(lo, start), min(hi, start + n)
            if a >= b:
                break
            src.append(slice(a - start, b - start))
            dst.append(slice(a - lo, b - lo))
        else:
            out[tuple(dst)] = piece[tuple(src)]
            covered += out[tuple(dst)].numel()
    if covered != out.numel():
        raise ValueError(f"the checkpoint holds {covered} of the {out.numel()} values of {block}")
    return out


def load(state_dict, path) -> None:
    record = torch.load(os.path.join(path, "layout.pt"), weights_only=True)
    if record.get("format") != _FORMAT:
        raise ValueError(f"{path} is not a lazax sharded checkpoint ({record.get('format')!r})")
    entries = record["entries"]
    leaves = list(_leaves(state_dict))
    missing = [key for key, _ in leaves if key not in entries]
    if missing:
        raise KeyError(f"the checkpoint at {path} has no entries for {missing}")
    for key, leaf in leaves:
        saved = entries[key]
        if not isinstance(leaf, torch.Tensor):
            continue
        value = saved.get("value")
        if "shape" in saved:
            held = f"{saved['dtype']}{list(saved['shape'])}"
        elif isinstance(value, torch.Tensor):
            held = f"{value.dtype}{list(value.shape)}"
        else:
            raise ValueError(f"{key}: the checkpoint holds a {type(value).__name__}, not a tensor")
        if held != f"{leaf.dtype}{list(leaf.shape)}":
            raise ValueError(
                f"{key}: the checkpoint holds {held}, but the state dict's tensor is "
                f"{leaf.dtype}{list(leaf.shape)}"
            )
    files = [
        torch.load(os.path.join(path, f"pieces-{k}.pt"), weights_only=True, mmap=True)
        for k in range(record["processes"])
    ]
    for key, leaf in leaves:
        saved = entries[key]
        if "value" in saved:
            value = saved["value"]
            if isinstance(leaf, torch.Tensor):
                with torch.no_grad():
                    leaf.copy_(value)
            else:
                _replace(state_dict, key, value)
            continue
        pieces = [p for f in files for p in f.get(key, ())]
        if type(leaf) is LazyTensor:
            _load_lazax(leaf, pieces)
        else:
            with torch.no_grad():
                leaf.copy_(_region(pieces, tuple((0, n) for n in leaf.shape), leaf.dtype))


def _load_lazax(t: LazyTensor, pieces: list) -> None:
    runtime = EXECUTOR.runtime
    EXECUTOR.sync_tensors_graph([t], wait=False)
    current = ir_value(t).node.data
    sharding = getattr(current, "sharding", None)
    shape = tuple(t.shape)

    def read(index):
        block = tuple(s.indices(n)[:2] for s, n in zip(index, shape))
        return to_numpy(_region(pieces, block, t.dtype))

    if sharding is not None and len(sharding.device_set) > 1:
        if current.shape == shape:
            buffer = runtime.from_callback(shape, sharding, read)
        else:  # held padded (split unevenly, within this process's devices)
            whole = to_numpy(_region(pieces, tuple((0, n) for n in shape), t.dtype))
            buffer = runtime.place(runtime.to_device(whole), sharding, shape)
        value = ir.device_data(ir.TensorSpec(shape, dtype_name(t.dtype)), buffer)
        storage = t._lz_storage
        if t._lz_view is None and storage.spec.shape == shape:
            storage.set(value)
            return
    whole = _region(pieces, tuple((0, n) for n in shape), t.dtype)
    with torch.no_grad():
        t.copy_(whole.to(t.device))


def _replace(root, key: tuple, value) -> None:
    node = root
    for part in key[:-1]:
        node = node[part]
    node[key[-1]] = value
