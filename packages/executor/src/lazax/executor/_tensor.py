"""The tensor layer: a torch tensor on ``lazax:N`` that holds device data or pending IR.

Contract:
- Every ``LazyTensor`` shares a ``Storage`` with its aliases. The storage holds the IR
  value of the whole base tensor (contiguous, shape ``storage.spec.shape``) and a
  version bumped on every write. A device-data leaf means "materialised"; anything else
  is pending work, and the storage is then in ``PENDING`` (a weak set) for ``sync()``.
- A tensor that is not a view (``_lz_view is None``) reads ``storage.value``. A view has
  ``_lz_view = (size, stride, offset)`` into the base's contiguous layout (as torch would
  report them) and caches its own IR value for the storage version it was made at;
  after the base is written it re-reads through a ``lazax::view_gather`` node. A tensor
  that is not a view keeps no IR of its own (``_lz_value`` is None), and a view's cached
  IR is dropped (``StaleView``: its spec only) when its storage changes: IR kept past
  its use would keep old device data alive, and keep it from being donated.
- ``write(t, value)`` replaces ``t``'s content: for a view, through a
  ``lazax::view_scatter`` into the base, so the base and every other view see it.
- ``_lz_key`` is the tensor's key for the per-op spec cache: shape, dtype, stride,
  storage offset and storage size. Strides are torch's for views; other tensors are
  contiguous.
- Threads: a sync may run in one thread while another traces. A sync hands its results
  back through ``Storage.settle``, which keeps a result only if the storage still holds
  the IR that was run: a write made meanwhile (``set``, under ``COMMIT_LOCK``) wins.
"""

from __future__ import annotations

import math
import threading
import weakref

import torch

from lazax import ir

from ._device import DEVICE_NAME
from ._dtypes import dtype_name

__all__ = [
    "COMMIT_LOCK",
    "PENDING",
    "Layout",
    "StaleView",
    "LazyTensor",
    "Storage",
    "attach",
    "contiguous_strides",
    "ir_value",
    "layout_over",
    "new_alias",
    "new_tensor",
    "rebind",
    "resize_to",
    "set_metadata",
    "write",
]


# Guards a storage's value against a sync running in another thread: a sync replaces a
# storage's pending IR by its result only if nobody wrote the storage meanwhile
# (``Storage.settle``), and that test-and-set must not interleave with ``Storage.set``.
COMMIT_LOCK = threading.Lock()


class _PendingStorages:
    """Weak references to storages that were given pending IR since the last sync.

    A plain list of ``weakref.ref`` (no callbacks): appending is the cheapest way to
    register on the per-op path; dead or already-synced entries are dropped when the
    list is read or compacted. Safe with several tracing threads: the list object is
    never replaced, and readers cut the prefix they have read out of it in place
    (``del refs[:n]`` is one step under the GIL), so an append racing a ``take`` lands
    after the cut and is kept for the next one.
    """

    __slots__ = ("refs", "compact_at")

    def __init__(self) -> None:
        self.refs: list = []
        self.compact_at = 4096

    def add(self, storage) -> None:
        refs = self.refs
        refs.append(weakref.ref(storage))
        if len(refs) >= self.compact_at:
            with COMMIT_LOCK:
                n = len(refs)
                refs[:n] = [r for r in refs[:n] if (s := r()) is not None and s.pending]
                self.compact_at = max(4096, 2 * len(refs))

    def take(self) -> list:
        """The live pending storages, each once, in registration order; forgets them."""
        refs = self.refs
        with COMMIT_LOCK:
            n = len(refs)
            taken = refs[:n]
            del refs[:n]
        seen: set[int] = set()
        live = []
        for r in taken:
            s = r()
            if s is not None and s.pending and id(s) not in seen:
                seen.add(id(s))
                if REVERTED and REVERTED.get(s) is s.value:
                    continue  # put back by a failed check: only a read runs it again
                live.append(s)
        return live

    def restore(self, storages: list) -> None:
        """Put back storages that a failed sync did not materialise."""
        with COMMIT_LOCK:
            self.refs[:0] = [weakref.ref(s) for s in storages]


PENDING = _PendingStorages()
# Storages a failed device-side check put back on their pending IR (``Storage.revert``),
# with that IR: ``sync()`` of everything skips them while they still hold it.
REVERTED: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()


def contiguous_strides(shape: tuple[int, ...]) -> tuple[int, ...]:
    strides = []
    acc = 1
    for size in reversed(shape):
        strides.append(acc)
        acc *= max(size, 1)
    return tuple(reversed(strides))


class StaleView:
    """What a view holds instead of IR once its storage changed: the spec it re-reads
    with (``ir_value`` builds a new ``view_gather``; nothing reads this as IR)."""

    __slots__ = ("spec",)

    def __init__(self, spec: ir.TensorSpec) -> None:
        self.spec = spec


class Storage:
    """The base buffer that a tensor and all its views share."""

    __slots__ = ("value", "version", "spec", "device_index", "views", "__weakref__")

    def __init__(self, value: ir.Value, device_index: int = 0) -> None:
        self.value = value
        self.version = 0
        self.spec = value.spec
        self.device_index = device_index
        self.views: list | None = None  # weak references to the views over it
        if value.node.op != ir.DEVICE_DATA:
            PENDING.add(self)

    def add_view(self, t) -> None:
        if self.views is None:
            self.views = []
        self.views.append(weakref.ref(t))

    def _drop_view_ir(self) -> None:
        """The views' cached IR is stale (the version moved): let it go. Under
        ``COMMIT_LOCK``."""
        live = []
        for ref in self.views:
            view = ref()
            # Still a view of this storage (an in-place view op can make it whole)?
            if view is not None and view._lz_view is not None and view._lz_storage is self:
                live.append(ref)
                cached = view._lz_value
                if type(cached) is not StaleView and view._lz_seen != self.version:
                    view._lz_value = StaleView(cached.spec)
        self.views = live or None

    def set(self, value: ir.Value) -> None:
        with COMMIT_LOCK:
            self.value = value
            self.version += 1
            if self.views is not None:
                self._drop_view_ir()
        if value.node.op != ir.DEVICE_DATA:
            PENDING.add(self)

    def settle(self, pending: ir.Value, result: ir.Value, bump: bool = True) -> bool:
        """A sync computed ``result`` from ``pending``: keep it, unless the storage was
        written since (another thread's write wins; its IR still reads ``pending``, so
        nothing is lost). ``bump``: make views re-read the materialised base."""
        with COMMIT_LOCK:
            if self.value is not pending:
                return False
            self.value = result
            if bump:
                self.version += 1
                if self.views is not None:
                    self._drop_view_ir()
            return True

    def revert(self, result: ir.Value, pending: ir.Value) -> bool:
        """Undo ``settle``: hold ``pending`` again (a device-side check failed in the
        graph that computed ``result``), unless the storage was written since. It is
        left out of ``PENDING.take``: ``sync()`` leaves it alone, so one bad tensor kept
        by the user (or by a traceback) does not fail every later sync; reading it, or
        anything computed from it, runs the bad op again."""
        with COMMIT_LOCK:
            if self.value is not result:
                return False
            self.value = pending
            self.version += 1
            if self.views is not None:
                self._drop_view_ir()
            REVERTED[self] = pending
        return True

    @property
    def pending(self) -> bool:
        return self.value.node.op != ir.DEVICE_DATA


class Layout:
    """How to present one op output as a torch tensor (precomputed per spec-cache entry)."""

    __slots__ = ("shape", "dtype", "dtype_name", "stride", "offset", "view", "mkey", "numel")

    def __init__(
        self,
        shape: tuple[int, ...],
        dtype: torch.dtype,
        stride: tuple[int, ...] | None = None,
        offset: int = 0,
        storage_shape: tuple[int, ...] | None = None,
    ) -> None:
        self.shape = shape
        self.dtype = dtype
        self.dtype_name = dtype_name(dtype)
        self.numel = math.prod(shape)
        contiguous = contiguous_strides(shape)
        self.stride = contiguous if stride is None else stride
        self.offset = offset
        if storage_shape is None:
            storage_shape = shape
        # A "view" unless it is the whole base, same shape, in contiguous order: such an
        # alias (detach, alias, a no-op view) reads the storage's value directly.
        full = shape == storage_shape and self.stride == contiguous and offset == 0
        self.view = None if full else (shape, self.stride, offset)
        self.mkey = (shape, dtype, self.stride, offset, storage_shape)


class LazyTensor(torch.Tensor):
    """A tensor on a lazax device. Created by lazax, never directly by users."""

    __torch_function__ = torch._C._disabled_torch_function_impl

    def __repr__(self, *, tensor_contents=None) -> str:
        from ._transfer import to_cpu

        cpu = to_cpu(self)
        body = torch._tensor_str._str(cpu, tensor_contents=tensor_contents)
        # torch prints no device for CPU tensors; say where this one lives.
        suffix = f"device='{self.device}'"
        if body.endswith(")"):
            return body[:-1] + f", {suffix})"
        return body

    def tolist(self):
        from ._transfer import to_cpu

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
            self._lz_storage = new._lz_storage
            self._lz_view = new._lz_view
            self._lz_value = new._lz_value
            self._lz_seen = new._lz_seen
            self._lz_key = new._lz_key
            if new._lz_view is not None:
                new._lz_storage.add_view(self)

    def numpy(self, *, force: bool = False):
        if force:
            from ._transfer import to_cpu

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


_DEVICES = [torch.device(DEVICE_NAME, i) for i in range(64)]
_TENSOR_DATA = torch._C.TensorBase.data
_make_wrapper = torch.Tensor._make_wrapper_subclass


def new_tensor(value: ir.Value, layout: Layout, device_index: int = 0) -> LazyTensor:
    """A fresh (non-view) tensor whose storage holds ``value``."""
    t = _make_wrapper(LazyTensor, layout.shape, dtype=layout.dtype, device=_DEVICES[device_index])
    t._lz_storage = Storage(value, device_index)
    t._lz_view = None
    t._lz_value = None
    t._lz_seen = 0
    t._lz_key = layout.mkey
    return t


_REINTERPRETING: dict[tuple, Layout] = {}


def layout_over(layout: Layout, storage: Storage) -> Layout:
    """``layout`` as presented over ``storage``: as it is, or as a view where it is the
    whole storage read as another dtype of the same size (``x.view(torch.int32)`` of a
    float32 ``x``), which must re-read the base's bytes, not its value."""
    if layout.view is None and layout.dtype_name != storage.spec.dtype:
        return _reinterpreting(layout)
    return layout


def _reinterpreting(layout: Layout) -> Layout:
    found = _REINTERPRETING.get(layout.mkey)
    if found is None:
        found = Layout(layout.shape, layout.dtype, layout.stride, layout.offset)
        found.view = (layout.shape, layout.stride, layout.offset)
        found.mkey = layout.mkey
        _REINTERPRETING[layout.mkey] = found
    return found


def new_alias(value: ir.Value, layout: Layout, storage: Storage) -> LazyTensor:
    """A tensor sharing ``storage``; a view when ``layout.view`` is set (or when it
    reads the storage as another dtype)."""
    if layout.view is None and layout.dtype_name != storage.spec.dtype:  # layout_over, inline
        layout = _reinterpreting(layout)
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


def ir_value(t: LazyTensor) -> ir.Value:
    """The IR value of ``t``'s current content."""
    storage = t._lz_storage
    view = t._lz_view
    if view is None:
        return storage.value
    if t._lz_seen != storage.version:
        t._lz_value = view_gather(storage.value, view, t._lz_value.spec.dtype)
        t._lz_seen = storage.version
    return t._lz_value


def write(t: LazyTensor, value: ir.Value) -> None:
    """Replace the content of ``t`` (shape and dtype already ``t``'s) by ``value``."""
    storage = t._lz_storage
    view = t._lz_view
    if view is None:
        storage.set(value)
        t._lz_seen = storage.version
        return
    storage.set(view_scatter(storage.value, view, value))
    t._lz_value = value
    t._lz_seen = storage.version


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


# -- the two view pseudo-ops (lowered in ops/views.py) -----------------------------


def view_gather(base: ir.Value, view: tuple, dtype: str) -> ir.Value:
    size, stride, offset = view
    spec = ir.TensorSpec(size, dtype)
    return ir.Node(
        "lazax::view_gather", (base,), ((("%", 0), size, stride, offset), ()), (spec,)
    ).outputs[0]


def view_scatter(base: ir.Value, view: tuple, value: ir.Value) -> ir.Value:
    size, stride, offset = view
    return ir.Node(
        "lazax::view_scatter",
        (base, value),
        ((("%", 0), ("%", 1), size, stride, offset), ()),
        (base.spec,),
    ).outputs[0]
