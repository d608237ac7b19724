"""Storages: the buffer a tensor and its views share, and the set of pending ones.

Contract:
- A ``Storage`` holds the IR value of a whole base tensor (contiguous, shape
  ``storage.spec.shape``) and a version bumped on every write. A device-data leaf means
  "materialised"; anything else is pending work, and the storage is then in ``PENDING``
  (a weak set) for ``sync()``.
- Views over a storage (tensors of the tensor layer) cache their own IR for the version
  they were made at; a write drops that cache (``StaleView``: the spec only), so IR kept
  past its use neither keeps old device data alive nor keeps it from being donated.
- Threads: a sync may run in one thread while another traces. A sync hands its results
  back through ``Storage.settle``, which keeps a result only if the storage still holds
  the IR that was run: a write made meanwhile (``set``, under ``COMMIT_LOCK``) wins.
- A sync target (what a sync's result replaces) is a ``Storage`` or a view tensor:
  ``is_storage`` tells them apart.
- ``free()`` gives up a storage's memory (its device data or pending work) until the
  next write: it then holds ``lazax::freed``, which no sync of everything computes
  (FSDP2's reshard frees the all-gathered parameters this way).
- A storage lives on one device (``device_index``, ``lazax:N``); ``by_device`` groups
  storages into one graph per device. ``DEVICES_IN_USE.several`` turns true at the first
  storage off ``lazax:0``, and only then do per-op paths check devices.
"""

from __future__ import annotations

import threading
import weakref

from lazax import ir

from ..ops.pseudo import FREED, freed

__all__ = [
    "COMMIT_LOCK",
    "DEVICES_IN_USE",
    "PENDING",
    "REVERTED",
    "StaleView",
    "Storage",
    "by_device",
    "is_storage",
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
                if s.value.node.op == FREED:
                    continue  # its memory was given up (``Storage.free``): nothing to keep
                if REVERTED and REVERTED.get(s) is s.value:
                    continue  # put back by a failed check: only a read runs it again
                live.append(s)
        return live

    def restore(self, storages: list) -> None:
        """Put back storages that a failed sync did not materialise."""
        with COMMIT_LOCK:
            self.refs[:0] = [weakref.ref(s) for s in storages]


PENDING = _PendingStorages()


class _DevicesInUse:
    """Whether any storage was ever made on a device other than ``lazax:0``. Until one
    is, nothing on the per-op path looks at device indices (one attribute read)."""

    several = False


DEVICES_IN_USE = _DevicesInUse()


def by_device(storages: list) -> list[tuple[int, list]]:
    """``storages`` grouped by device index, in first-seen order: one graph each."""
    if not DEVICES_IN_USE.several:
        return [(0, storages)]
    groups: dict[int, list] = {}
    for s in storages:
        groups.setdefault(s.device_index, []).append(s)
    return list(groups.items())


# Storages a failed device-side check put back on their pending IR (``Storage.revert``),
# with that IR: ``sync()`` of everything skips them while they still hold it.
REVERTED: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()


class StaleView:
    """What a view holds instead of IR once its storage changed: the spec it re-reads
    with (``ir_value`` builds a new ``view_gather``; nothing reads this as IR)."""

    __slots__ = ("spec",)

    def __init__(self, spec: ir.TensorSpec) -> None:
        self.spec = spec


class Storage:
    """The base buffer that a tensor and all its views share."""

    __slots__ = ("value", "version", "spec", "device_index", "views", "leaf_id", "__weakref__")

    def __init__(self, value: ir.Value, device_index: int = 0) -> None:
        self.value = value
        self.version = 0
        self.spec = value.spec
        self.device_index = device_index
        if device_index:
            DEVICES_IN_USE.several = True
        self.views: list | None = None  # weak references to the views over it
        node = value.node
        # The id of the device-data node it last held (from creation or a sync), never
        # a reference: a sync that donates that node's buffer writes this storage's new
        # value over it (``donation.output_order``); a stale id only costs a copy.
        self.leaf_id = id(node)
        if node.op != ir.DEVICE_DATA:
            self.leaf_id = 0
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
        else:  # new device data (re-laid out, copied in): the leaf a sync may donate
            self.leaf_id = id(value.node)

    def settle(self, pending: ir.Value, result: ir.Value, bump: bool = True) -> bool:
        """A sync computed ``result`` from ``pending``: keep it, unless the storage was
        written since (another thread's write wins; its IR still reads ``pending``, so
        nothing is lost). ``bump``: make views re-read the materialised base."""
        with COMMIT_LOCK:
            if self.value is not pending:
                return False
            self.value = result
            self.leaf_id = id(result.node)
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

    def free(self) -> None:
        """Give up the memory: the storage holds ``lazax::freed`` (no device data, no
        pending work), which ``sync()`` of everything leaves alone; the next write gives
        it content again (torch's ``untyped_storage().resize_(0)``, FSDP2's reshard)."""
        value = freed(self.spec)
        with COMMIT_LOCK:
            self.value = value
            self.version += 1
            if self.views is not None:
                self._drop_view_ir()

    @property
    def pending(self) -> bool:
        return self.value.node.op != ir.DEVICE_DATA


def is_storage(target) -> bool:
    """Whether a sync target is a whole ``Storage`` (else it is a view tensor)."""
    return type(target) is Storage
