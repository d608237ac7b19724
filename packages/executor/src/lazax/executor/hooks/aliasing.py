"""Aliasing as on the CPU: ``set_`` shares storage, ``data_ptr()`` never answers 0.

Contract, after ``install()``:
- ``b.set_(a)`` (both lazax, on one device, of one dtype): ``b`` takes ``a``'s size,
  strides and offset and shares ``a``'s lazax ``Storage``, so a write through either
  (``b.mul_(2)``) is seen by the other, pending or materialised, as on the CPU.
  Tensors on different devices or of different dtypes raise torch's errors.
  ``b.set_(a, offset, size, stride)`` and ``b.set_(a.untyped_storage(), ...)`` go
  through the storage form (``hooks.storages``); ``b.set_()`` gives ``b`` a new empty
  storage. ``b.is_set_to(a)`` says whether ``b`` is ``a``'s storage with ``a``'s
  metadata.
- ``t.data_ptr()`` raises ``RuntimeError``: a lazax tensor's memory is a PJRT buffer
  that XLA owns and that a write replaces, so no address stays valid for it. The
  buffer is shared through DLPack (``t.__dlpack__()``, ``torch.utils.dlpack``) or
  ``lx.to_jax``; ``t.cpu()`` reads it. ``copy.deepcopy`` works as before: torch's
  ``Tensor.__deepcopy__`` reads ``data_ptr() == 0`` as "a wrapper with no data", which
  is answered for it alone.
- ``t.record_stream(s)`` does nothing: PJRT keeps a buffer alive until every program
  using it has finished, which is what cuda's caching allocator needs to be told.
"""

from __future__ import annotations

import threading

import torch

from ..dispatch.special import register_special
from ..state.layout import Layout
from ..state.storage import Storage
from ..tensor.lazy import LazyTensor, attach, set_metadata, share_content
from ..tensor.transfer import from_cpu

__all__ = ["install"]

aten = torch.ops.aten


def _devices_must_match(t, source) -> None:
    raise RuntimeError(  # torch's message
        f'Attempted to set the storage of a tensor on device "{t.device}" to a storage on '
        f'different device "{source.device}".  This is no longer allowed; the devices '
        f"must match."
    )


def _set_tensor(args, kwargs):
    t, source = args[0], args[1]
    if type(t) is not LazyTensor or type(source) is not LazyTensor or t.device != source.device:
        _devices_must_match(t, source)
    if t.dtype != source.dtype:
        # torch's own error, word for word: the CPU check on two empty tensors
        torch.empty(0, dtype=t.dtype).set_(torch.empty(0, dtype=source.dtype))
    if t is source:
        return t
    set_metadata(t, tuple(source.shape), tuple(source.stride()), source.storage_offset())
    # What ``source`` reads, shared (as ``LazyTensor.data``'s setter shares it).
    share_content(t, source)
    return t


def _set_empty(args, kwargs):
    t = args[0]
    set_metadata(t, (0,), (1,), 0)
    index = t._lz_storage.device_index
    value = from_cpu(torch.empty(0, dtype=t.dtype), index)
    attach(t, None, Layout((0,), t.dtype), Storage(value, index))
    return t


def _record_stream(args, kwargs) -> None:
    return None


def _is_set_to(args, kwargs) -> bool:
    t, other = args[0], args[1]
    return (
        type(other) is LazyTensor
        and t._lz_storage is other._lz_storage
        and t.storage_offset() == other.storage_offset()
        and t.shape == other.shape
        and t.stride() == other.stride()
    )


# -- set_'s composite form and data_ptr, as methods of LazyTensor ---------------------

_TENSOR_SET = torch.Tensor.set_
_TENSOR_DEEPCOPY = torch.Tensor.__deepcopy__
_IN_DEEPCOPY = threading.local()


def _set_(self, source=None, *args, **kwargs):
    if source is None and not args and not kwargs:
        return _TENSOR_SET(self)
    if type(source) is LazyTensor and (args or kwargs):
        # set_(tensor, offset, size, stride) is torch's composite over the source's
        # storage, read in C++: let the storage form find whose storage it is.
        source.untyped_storage()
    return _TENSOR_SET(self, source, *args, **kwargs)


def _data_ptr(self) -> int:
    if getattr(_IN_DEEPCOPY, "depth", 0):
        return 0  # torch's deepcopy asking whether this wrapper holds data
    raise RuntimeError(
        f"lazax: cannot give the data pointer of a {self.device} tensor: its memory is a "
        f"PJRT buffer that XLA owns and that a write replaces, so no address stays valid "
        f"(lazax will not answer 0). Read the values with t.cpu(), share the buffer with "
        f"torch.utils.dlpack / t.__dlpack__() or lx.to_jax(t), and tell tensors that "
        f"share memory apart with t.is_set_to(u) or lazax.executor.storage_of(t)."
    )


def _deepcopy(self, memo):
    _IN_DEEPCOPY.depth = getattr(_IN_DEEPCOPY, "depth", 0) + 1
    try:
        return _TENSOR_DEEPCOPY(self, memo)
    finally:
        _IN_DEEPCOPY.depth -= 1


_installed = False


def install() -> None:
    global _installed
    if _installed:
        return
    register_special(
        {
            aten.set_.source_Tensor: _set_tensor,
            aten.set_.default: _set_empty,
            aten.is_set_to.default: _is_set_to,
            aten.record_stream.default: _record_stream,
        }
    )
    LazyTensor.set_ = _set_
    LazyTensor.data_ptr = _data_ptr
    LazyTensor.__deepcopy__ = _deepcopy
    _installed = True
