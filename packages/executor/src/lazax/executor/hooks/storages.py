"""torch storages for lazax tensors: what ``torch.save`` writes and ``torch.load`` reads.

Contract:
- A lazax tensor pickles as a cuda tensor does: ``torch._utils._rebuild_tensor_v2`` over
  a storage whose location is ``lazax:N`` (a ``Parameter``: ``_rebuild_parameter`` around
  that). Files load with ``weights_only=True`` (nothing but torch's own rebuild functions
  is named), honour ``map_location`` exactly as for cuda (``"cpu"``, a
  ``torch.device``, a dict, a callable), and tensors sharing a lazax ``Storage`` (tied
  weights, views) share one storage record.
- A *carrier* is a torch ``UntypedStorage`` on the lazax device that stands for one
  lazax ``Storage``. It owns no memory: its data pointer is a token (never
  dereferenced) under which ``_CARRIERS`` finds what it stands for. torch reads one the
  way it reads any device storage (``storage.cpu()``: ``set_`` on an empty lazax tensor,
  then ``copy_`` to the host), so ``torch.save`` copies one storage at a time to the host.
- ``torch.load``: the deserializer registered for locations ``lazax[:N]`` (also the
  target of ``map_location=lazax``) turns the storage's host bytes into a carrier; the
  first ``set_`` on it uploads them as that tensor's dtype (and its shape, where the
  tensor covers the whole storage), and every later ``set_`` on the same carrier aliases
  that upload. The host bytes are dropped after the upload.
- A lazax tensor's own torch storage (``t.untyped_storage()``, data-less) stands for
  ``t``'s lazax ``Storage`` once Python asked for it (``install`` wraps
  ``untyped_storage`` to note it), for as long as that torch storage lives:
  ``u.set_(t.untyped_storage(), offset, size, stride)`` makes ``u`` a tensor over that
  storage, sharing writes both ways, as on the CPU (its byte 0 is the base's; same
  element size only).
- ``set_`` of a lazax tensor to any other storage raises (torch's device error for a
  storage on another device).
"""

from __future__ import annotations

import collections
import json
import math
import threading
import weakref

import torch

from lazax import ir

from ..barrier.executor import EXECUTOR
from ..config import DEVICE_NAME
from ..dispatch.special import register_special
from ..distributed.sharding import Mesh, as_sharding, mark_sharding
from ..ops.pseudo import contiguous_strides, view_gather
from ..state.dtypes import torch_dtype
from ..state.layout import Layout, layout_over
from ..state.storage import Storage
from ..tensor.lazy import LazyTensor, attach, set_metadata
from ..tensor.transfer import from_cpu

__all__ = ["SET_STORAGE_HANDLERS", "install"]


class _Carrier:
    """What one carrier stands for: a lazax ``Storage`` (held weakly when the carrier
    was made to save it, strongly once a load uploaded into it), or, before a loaded
    carrier's first ``set_``, the host bytes ``torch.load`` read."""

    __slots__ = ("storage", "saved", "host", "device_index", "sharding", "lock", "__weakref__")

    def __init__(self, device_index: int) -> None:
        self.storage: Storage | None = None
        self.saved = None  # weakref.ref to the Storage a save carrier stands for
        self.host: torch.UntypedStorage | None = None
        self.device_index = device_index
        self.sharding: dict | None = None  # how the saved value was sharded
        self.lock = threading.Lock()

    def target(self) -> Storage | None:
        if self.saved is not None:
            return self.saved()
        return self.storage


_CARRIERS: dict[int, _Carrier] = {}  # token (the carrier's data_ptr) -> what it stands for
_SAVE_CARRIERS: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()  # Storage -> carrier
_DEVICES = {}


def _device(index: int) -> torch.device:
    device = _DEVICES.get(index)
    if device is None:
        device = _DEVICES[index] = torch.device(DEVICE_NAME, index)
    return device


def _new_carrier(entry: _Carrier, nbytes: int) -> torch.UntypedStorage:
    # The token is the entry's address: unique while the entry lives, and the entry
    # lives exactly as long as the carrier (the finalizer below).
    token = id(entry)
    carrier = torch._C._construct_storage_from_data_pointer(
        token, _device(entry.device_index), nbytes
    )
    _CARRIERS[token] = entry
    weakref.finalize(carrier, _CARRIERS.pop, token, None)
    return carrier


def _storage_nbytes(storage: Storage) -> int:
    spec = storage.spec
    return math.prod(spec.shape) * torch_dtype(spec.dtype).itemsize


def carrier_of(storage: Storage) -> torch.UntypedStorage:
    """The carrier that stands for ``storage`` (one per storage while it lives)."""
    carrier = _SAVE_CARRIERS.get(storage)
    if carrier is None:
        entry = _Carrier(storage.device_index)
        entry.saved = weakref.ref(storage)
        carrier = _SAVE_CARRIERS[storage] = _new_carrier(entry, _storage_nbytes(storage))
    return carrier


# -- pickling ---------------------------------------------------------------------


def reduce_tensor(t: LazyTensor, proto):
    """``LazyTensor.__reduce_ex__``: the form torch gives a cuda tensor."""
    hooks = collections.OrderedDict()  # torch never saves hooks either
    if isinstance(t, torch.nn.Parameter):
        return (torch._utils._rebuild_parameter, (t.detach(), t.requires_grad, hooks))
    if t._lz_storage.pending:
        # torch.save reads the storages one at a time: run everything pending now, as
        # one graph, rather than one program per storage then.
        EXECUTOR.sync()
    size, stride, offset = t._lz_view or (tuple(t.shape), contiguous_strides(tuple(t.shape)), 0)
    typed = torch.storage.TypedStorage(
        wrap_storage=carrier_of(t._lz_storage), dtype=t.dtype, _internal=True
    )
    return (
        torch._utils._rebuild_tensor_v2,
        (typed, offset, torch.Size(size), tuple(stride), t.requires_grad, hooks),
    )


# -- set_ on a carrier --------------------------------------------------------------


def _carrier_entry(source) -> _Carrier | None:
    if not isinstance(source, torch.UntypedStorage) or source.device.type != DEVICE_NAME:
        return None
    try:
        token = source.data_ptr()
    except RuntimeError:  # a lazax tensor's own (data-less) storage
        return None
    return _CARRIERS.get(token)


def _upload(entry: _Carrier, dtype: torch.dtype, size, stride, offset) -> Storage:
    """The loaded bytes on the device, as ``dtype``: shaped as the first tensor set_ on
    them where it covers them all in order, else flat."""
    host = entry.host
    itemsize = dtype.itemsize
    if host is None or host.nbytes() % itemsize:
        raise RuntimeError(
            f"lazax cannot read a storage of {0 if host is None else host.nbytes()} bytes "
            f"as {dtype}: the bytes are not there or not a whole number of elements."
        )
    flat = torch.empty(0, dtype=torch.uint8).set_(host).view(dtype)
    whole = offset == 0 and math.prod(size) == flat.numel()
    whole = whole and tuple(stride) == contiguous_strides(tuple(size))
    values = flat.view(tuple(size)) if whole else flat
    storage = Storage(from_cpu(values, entry.device_index), entry.device_index)
    entry.storage = storage
    entry.host = None
    return storage


def _point_at(t: LazyTensor, storage: Storage, size, stride, offset) -> None:
    """``t`` becomes a tensor over ``storage`` with torch's (size, stride, offset)."""
    layout = layout_over(
        Layout(tuple(size), t.dtype, tuple(stride), offset, storage.spec.shape), storage
    )
    value = None
    if layout.view is not None:
        value = view_gather(storage.value, layout.view, layout.dtype_name)
    attach(t, value, layout, storage)


# -- set_ on a lazax tensor's own storage ---------------------------------------------

# A torch storage's address (``_cdata``) -> the lazax Storage it stands for. An entry
# lives exactly as long as that torch storage (torch keeps a storage's Python object
# while the storage lives; its finalizer drops the entry), so a reused address is never
# taken for an old one; and a tensor given another lazax Storage is given another torch
# storage too (``set_metadata``), so an entry never goes stale.
_OWNED: dict[int, Storage] = {}
_UNTYPED_STORAGE = torch.Tensor.untyped_storage


def _untyped_storage(t):
    """``LazyTensor.untyped_storage``: torch's own, noted as standing for ``t``'s."""
    storage = _UNTYPED_STORAGE(t)
    owned = getattr(t, "_lz_storage", None)  # None: a bare wrapper (set_metadata's)
    key = storage._cdata
    if owned is not None and key not in _OWNED:
        _OWNED[key] = owned
        weakref.finalize(storage, _OWNED.pop, key, None)
    return storage


def _owned(source) -> Storage | None:
    if not isinstance(source, torch.UntypedStorage):
        return None
    return _OWNED.get(source._cdata)


def _checked_layout(t, nbytes: int, offset, size, stride) -> tuple[tuple, tuple]:
    itemsize = t.element_size()
    if size is None:
        size = (nbytes // itemsize,)
    if stride is None or len(stride) == 0:
        stride = contiguous_strides(tuple(size))
    size, stride = tuple(size), tuple(stride)
    needed = 0 if 0 in size else (offset + sum((n - 1) * s for n, s in zip(size, stride)) + 1)
    if needed * itemsize > nbytes:
        raise RuntimeError(  # torch's message
            f"setStorage: sizes {list(size)}, strides {list(stride)}, storage offset "
            f"{offset}, and itemsize {itemsize} requiring a storage size of "
            f"{needed * itemsize} are out of bounds for storage of size {nbytes}"
        )
    return size, stride


def _set_owned(t, source, storage: Storage, offset, size, stride):
    if storage.device_index != t._lz_storage.device_index:
        raise RuntimeError(  # torch's message
            f'Attempted to set the storage of a tensor on device "{t.device}" to a '
            f'storage on different device "{source.device}".  This is no longer '
            f"allowed; the devices must match."
        )
    if torch_dtype(storage.spec.dtype).itemsize != t.element_size():
        raise RuntimeError(
            f"lazax can set_ a {t.dtype} tensor only to a storage of elements of its size, "
            f"and this storage holds {storage.spec.dtype}; view the source tensor as "
            f"{t.dtype} first, or copy it."
        )
    size, stride = _checked_layout(t, _storage_nbytes(storage), offset, size, stride)
    set_metadata(t, size, stride, offset)
    _point_at(t, storage, size, stride, offset)
    return t


def _set_storage(t, source, offset=0, size=None, stride=None):
    entry = _carrier_entry(source)
    if entry is None:
        if isinstance(source, torch.UntypedStorage) and source.device.type != DEVICE_NAME:
            raise RuntimeError(  # torch's message
                f'Attempted to set the storage of a tensor on device "{t.device}" to a '
                f'storage on different device "{source.device}".  This is no longer '
                f"allowed; the devices must match."
            )
        owned = _owned(source)
        if owned is not None:
            return _set_owned(t, source, owned, offset, size, stride)
        raise RuntimeError(
            "lazax can set_ a tensor to a storage that torch.load made on the lazax device, "
            "or to a lazax tensor's t.untyped_storage(); this storage is neither."
        )
    size, stride = _checked_layout(t, source.nbytes(), offset, size, stride)
    set_metadata(t, size, stride, offset)
    with entry.lock:
        storage = entry.target()
        if storage is None:
            storage = _upload(entry, t.dtype, size, stride, offset)
    _point_at(t, storage, size, stride, offset)
    if entry.sharding is not None and t._lz_view is None:
        saved, entry.sharding = entry.sharding, None
        _reshard(t, saved)
    return t


def _set_source_storage(args, kwargs):
    return _set_storage(*args, **kwargs)


SET_STORAGE_HANDLERS = {
    torch.ops.aten.set_.source_Storage: _set_source_storage,
    torch.ops.aten.set_.source_Storage_storage_offset: _set_source_storage,
}


# -- torch.load ---------------------------------------------------------------------


# A sharded storage's location: "lazax:0" + _SHARDED + JSON of its mesh and spec.
_SHARDED = "#sharding="


def _sharding_of(storage: Storage) -> dict | None:
    node = storage.value.node
    if node.op != ir.DEVICE_DATA:
        return None
    sharding = as_sharding(getattr(node.data, "sharding", None), len(storage.spec.shape))
    if sharding is None:
        return None
    mesh = sharding.mesh
    return {
        "devices": list(mesh.device_ids),
        "shape": list(mesh.mesh_shape),
        "axes": list(mesh.jax_mesh.axis_names),
        "spec": [list(e) if isinstance(e, tuple) else e for e in sharding.partition_spec],
    }


def _reshard(t: LazyTensor, saved: dict) -> None:
    """Shard a loaded tensor as it was saved, where this process has the mesh's devices;
    otherwise it stays on one device (replicated)."""
    if max(saved["devices"]) >= torch.get_device_module(DEVICE_NAME).device_count():
        return
    mesh = Mesh(saved["devices"], saved["shape"], saved["axes"])
    spec = tuple(tuple(e) if isinstance(e, list) else e for e in saved["spec"])
    mark_sharding(t, mesh, spec)


def _validate_index(location: str) -> int:
    device = torch.device(location)
    index = device.index or 0
    count = torch.get_device_module(DEVICE_NAME).device_count()
    if index >= count:
        raise RuntimeError(
            f"Attempting to deserialize object on {DEVICE_NAME} device {index} but "
            f"torch.{DEVICE_NAME}.device_count() is {count}. Please use torch.load with "
            f"map_location to map your storages to an existing device."
        )
    return index


def _tag(storage) -> str | None:
    # torch's own tag for the PrivateUse1 device says "lazax:N"; a sharded storage adds
    # its sharding, so that a load can restore it.
    entry = _carrier_entry(storage)
    target = entry.target() if entry is not None else None
    saved = _sharding_of(target) if target is not None else None
    if saved is None:
        return None
    return f"{DEVICE_NAME}:{entry.device_index}{_SHARDED}{json.dumps(saved)}"


def _restore(storage, location: str):
    if not location.startswith(DEVICE_NAME):
        return None
    if storage.device.type == DEVICE_NAME:
        return storage
    location, _, sharding = location.partition(_SHARDED)
    map_location = torch.serialization._serialization_tls.map_location
    if sharding and isinstance(map_location, dict) and location in map_location:
        # torch looked the full location up in the dict; the user named the device
        return torch.serialization.default_restore_location(storage, map_location[location])
    entry = _Carrier(_validate_index(location))
    entry.sharding = json.loads(sharding) if sharding else None
    entry.host = storage if storage.device.type == "cpu" else storage.cpu()
    return _new_carrier(entry, storage.nbytes())


_installed = False


def install() -> None:
    """Register the pickled form and the deserializer with torch (idempotent)."""
    global _installed
    if _installed:
        return
    LazyTensor.__reduce_ex__ = reduce_tensor
    LazyTensor.untyped_storage = _untyped_storage
    register_special(SET_STORAGE_HANDLERS)
    # Before torch's own entry for the PrivateUse1 device (11), which would allocate a
    # torch storage on the device: a lazax tensor has none.
    torch.serialization.register_package(10.5, _tag, _restore)
    _installed = True
