"""``LazyTensor``: a torch tensor on ``lazax:N`` that holds device data or pending IR.

Contract:
- Every ``LazyTensor`` shares a ``Storage`` (``state.storage``) with its aliases. A
  tensor that is not a view (``_lz_view is None``) reads ``storage.value``; a view has
  ``_lz_view = (size, stride, offset)`` and caches its IR (``state.values``).
- ``_lz_key`` is the tensor's key for the per-op spec cache: shape, dtype, stride,
  storage offset and storage size. Strides are torch's for views; other tensors are
  contiguous.
- ``holds_device_data(t)``: its storage holds a device buffer, not pending IR.
- ``new_tensor``, ``new_alias``, ``rebind`` and ``attach`` make and point tensors;
  ``resize_to`` and ``set_metadata`` change torch's metadata of one. While the per-op
  metrics are on (``metrics.op_metrics``), each tensor made counts ``CreateXlaTensor``
  and each one freed ``DestroyXlaTensor`` (torch_xla's names: the difference is how
  many are alive).
Reads to the host (``repr``, ``tolist``, ``numpy``) are given by ``transfer``.
DLPack (``__dlpack__``, ``__dlpack_device__``) exports the tensor's buffer as jax
exports it (syncing what is pending): where the platform can export it (CPU, CUDA) the
consumer shares its memory, elsewhere jax's error says why not. An exported buffer is
never donated (PJRT refuses), so a later write to the tensor gives it a new buffer and
leaves the export as it was. ``jnp.asarray(t)`` reads the buffer the same way
(``__jax_array__``).
"""

from __future__ import annotations

import torch

from lazax import ir

from .. import metrics
from ..config import DEVICE_NAME
from ..ops.pseudo import contiguous_strides, view_gather
from ..state.layout import Layout, layout_over
from ..state.storage import Storage
from .transfer import jax_value, to_cpu

__all__ = [
    "LazyTensor",
    "storage_of",
    "attach",
    "new_alias",
    "new_tensor",
    "rebind",
    "resize_to",
    "set_metadata",
    "share_content",
]


class LazyTensor(torch.Tensor):
    """A tensor on a lazax device. Created by lazax, never directly by users."""

    __torch_function__ = torch._C._disabled_torch_function_impl
    _lz_storage = None  # (a carrier of torch metadata only, ``set_metadata``, has none)

    def __repr__(self, *, tensor_contents=None) -> str:
        cpu = to_cpu(self)
        body = torch._tensor_str._str(cpu, tensor_contents=tensor_contents)
        # torch prints no device for CPU tensors; say where this one lives.
        suffix = f"device='{self.device}'"
        if body.endswith(")"):
            return body[:-1] + f", {suffix})"
        return body

    @property
    def is_xla(self) -> bool:
        # torch's own ``is_xla`` asks for its XLA dispatch key, which no lazax tensor
        # has; under ``LAZAX_DEVICE_NAME=xla`` the tensor is on ``xla`` all the same.
        return DEVICE_NAME == "xla"

    def tolist(self):
        return to_cpu(self).tolist()

    @property
    def data(self):
        return _TENSOR_DATA.__get__(self)

    @data.setter
    def data(self, new) -> None:
        # torch moves the tensor metadata (shape, dtype, strides) and checks the types;
        # what the tensor reads is lazax's own and moves with it (``module.half()`` and
        # ``module.to(dtype)`` on lazax go through here).
        _TENSOR_DATA.__set__(self, new)
        if type(new) is LazyTensor:
            share_content(self, new)

    def numpy(self, *, force: bool = False):
        if force:
            return to_cpu(self.detach()).resolve_conj().resolve_neg().numpy()
        raise TypeError(
            f"can't convert {self.device} device type tensor to numpy. "
            f"Use Tensor.cpu() to copy the tensor to host memory first."
        )

    def __coerce_same_metadata_as_tangent__(self, expected_metadata, expected_type=None):
        # AOTAutograd asks tensor subclasses to match the plain tensor it traced the
        # backward with; to torch's tracers a lazax tensor is that plain device tensor.
        if expected_type is None or expected_type is torch.Tensor:
            return self
        return None

    def __array__(self, dtype=None):
        return self.numpy()

    def __dlpack__(self, **kwargs):
        if self.requires_grad:  # torch's own rule and message
            raise RuntimeError("Can't export tensors that require gradient, use tensor.detach()")
        return jax_value(self).__dlpack__(**kwargs)

    def __dlpack_device__(self):
        return jax_value(self).__dlpack_device__()

    def __jax_array__(self):
        # jnp.asarray(t) and jnp.array(t): the tensor's buffer (lx.to_jax).
        return jax_value(self)


def share_content(t: LazyTensor, source: LazyTensor) -> None:
    """Make ``t`` read what ``source`` reads: the same storage, through the same view
    (``t``'s torch metadata is the caller's to set). ``.data = ...`` and ``set_``."""
    t._lz_storage = source._lz_storage
    t._lz_view = source._lz_view
    t._lz_value = source._lz_value
    t._lz_seen = source._lz_seen
    t._lz_key = source._lz_key
    if source._lz_view is not None:
        source._lz_storage.add_view(t)


# By torch's fixed name for the backend, which means PrivateUse1 whatever it is renamed to
# (this module is imported before ``device.register`` renames it; "xla" parsed before the
# rename would be torch's own XLA type). They print as ``lazax:N`` (or ``xla:N``).
_DEVICES = [torch.device("privateuseone", i) for i in range(64)]

_TENSOR_DATA = torch._C.TensorBase.data

_make_wrapper = torch.Tensor._make_wrapper_subclass

_bump = metrics.bump
_COUNTING = [False]  # the per-op metrics are on (``metrics.op_metrics``)


def _count_destroyed(self) -> None:
    # Counted as ``CreateXlaTensor`` when made: live tensors are the difference.
    if self._lz_storage is not None and _bump is not None:  # (None at shutdown)
        _bump("DestroyXlaTensor")


def _count_tensors(on: bool) -> None:
    """Count tensors made and freed only while the per-op metrics are on: a finalizer
    on every tensor is paid at each free, so it is installed then and only then."""
    _COUNTING[0] = on
    if on:
        LazyTensor.__del__ = _count_destroyed
    elif "__del__" in LazyTensor.__dict__:
        del LazyTensor.__del__


metrics.on_op_metrics(_count_tensors)


def new_tensor(value: ir.Value, layout: Layout, device_index: int = 0) -> LazyTensor:
    """A fresh (non-view) tensor whose storage holds ``value``."""
    t = _make_wrapper(LazyTensor, layout.shape, dtype=layout.dtype, device=_DEVICES[device_index])
    if _COUNTING[0]:
        _bump("CreateXlaTensor")
    t._lz_storage = Storage(value, device_index)
    t._lz_view = None
    t._lz_value = None
    t._lz_seen = 0
    t._lz_key = layout.mkey
    return t


def new_alias(value: ir.Value, layout: Layout, storage: Storage) -> LazyTensor:
    """A tensor sharing ``storage``; a view when ``layout.view`` is set (or when it
    reads the storage as another dtype)."""
    if layout.view is None and layout.dtype_name != storage.spec.dtype:  # layout_over, inline
        layout = layout_over(layout, storage)
    if layout.view is None:
        t = torch.Tensor._make_wrapper_subclass(
            LazyTensor,
            layout.shape,
            dtype=layout.dtype,
            device=_DEVICES[storage.device_index],
            requires_grad=False,
        )
    else:
        t = torch.Tensor._make_wrapper_subclass(
            LazyTensor,
            layout.shape,
            layout.stride,
            layout.offset,
            dtype=layout.dtype,
            device=_DEVICES[storage.device_index],
            requires_grad=False,
        )
    if _COUNTING[0]:
        _bump("CreateXlaTensor")
    attach(t, value, layout, storage)
    return t


def attach(t: LazyTensor, value: ir.Value | None, layout: Layout, storage: Storage) -> None:
    """Point ``t`` at ``storage``, presented with ``layout`` (as ``layout_over`` gives
    it); ``value``: the view's IR (unused for a tensor that is not a view)."""
    t._lz_storage = storage
    t._lz_view = layout.view
    t._lz_seen = storage.version
    t._lz_key = layout.mkey
    if layout.view is None:
        t._lz_value = None
    else:
        t._lz_value = value
        storage.add_view(t)


def rebind(storage: Storage, layout: Layout) -> LazyTensor:
    """A tensor over ``storage`` presented with ``layout`` (``Layout(*t._lz_key)`` of
    some tensor ``t`` whose storage had this storage's shape)."""
    value = storage.value
    layout = layout_over(layout, storage)
    if layout.view is not None:
        value = view_gather(value, layout.view, layout.dtype_name)
    return new_alias(value, layout, storage)


_SET_STORAGE = torch.ops.aten.set_.source_Storage_storage_offset


def set_metadata(t: LazyTensor, size: tuple, stride: tuple, offset: int) -> None:
    """Give ``t`` torch's metadata ``size``/``stride``/``offset`` (what ``t.shape`` and
    ``t.stride()`` report), by the Meta kernel of ``set_`` on a data-less storage of
    the size they need (a lazax tensor has no data pointer)."""
    extent = offset + sum((n - 1) * s for n, s in zip(size, stride)) + 1
    carrier = _make_wrapper(
        LazyTensor, (0 if 0 in size else extent,), dtype=t.dtype, device=t.device
    )
    _SET_STORAGE._op_dk(
        torch._C.DispatchKey.Meta, t, carrier.untyped_storage(), offset, size, stride
    )


def resize_to(t: LazyTensor, shape: tuple[int, ...], value: ir.Value) -> None:
    """Resize ``t`` in place (an ``out=`` tensor of the wrong shape, as torch resizes
    it): contiguous ``shape``, and a fresh storage holding ``value`` (of that shape and
    ``t``'s dtype). Other aliases of the old storage keep it, as after torch's
    reallocation. torch's metadata is changed by the Meta kernel of ``set_``, on the
    storage of a wrapper of the new size (a lazax tensor has no data pointer)."""
    if t._lz_view is not None:
        raise RuntimeError(
            f"lazax cannot resize a view (shape {list(t.shape)}) to {list(shape)}; pass a "
            f"tensor that is not a view, or one of the right shape."
        )
    set_metadata(t, tuple(shape), contiguous_strides(tuple(shape)), 0)
    t._lz_storage = Storage(value, t._lz_storage.device_index)
    t._lz_view = None
    t._lz_value = None
    t._lz_seen = 0
    t._lz_key = Layout(tuple(shape), t.dtype).mkey


def holds_device_data(t: torch.Tensor) -> bool:
    """Whether ``t``'s value lies in device memory (True) or is IR that the next sync
    runs (False). A view answers for the storage it views."""
    if type(t) is not LazyTensor:
        raise TypeError(f"holds_device_data takes a lazax tensor, but got a {t.device} tensor")
    return t._lz_storage.value.node.op == ir.DEVICE_DATA


def storage_of(t: LazyTensor) -> Storage:
    """The ``Storage`` that ``t`` shares with its aliases (views, ``.detach()``, tied
    parameters): its ``value`` is the IR of the whole base (device data once synced)."""
    if type(t) is not LazyTensor:
        raise TypeError(f"storage_of takes a lazax tensor, but got a {t.device} tensor")
    return t._lz_storage
