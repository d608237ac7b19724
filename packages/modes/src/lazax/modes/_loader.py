"""``lx.DeviceLoader``: batches already on the device, the next ones loaded and moved
while the step runs.

    loader = lx.DeviceLoader(DataLoader(dataset, batch_size=64), prefetch=2)
    for x, y in loader:          # x, y are lazax tensors
        loss = step(x, y)

Contract: ``DeviceLoader(loader, device=None, prefetch=2, sharding=None, sync=True)``
wraps any iterable of batches. Each ``iter()`` starts one background thread that takes batches
from ``iter(loader)`` (so the loader's own work, decoding or collating, also runs
there), moves every tensor in them to ``device`` (the current lazax device when None)
and keeps up to ``prefetch`` moved batches ready; the loop gets them in order.
- A batch may be a tensor or any nesting of tuples, named tuples, lists, dicts (and
  other mappings) and dataclasses; the same structure comes back with each CPU tensor
  replaced by a lazax tensor of its values (detached). Other leaves, and tensors already
  on lazax, come back as they are.
- ``sharding``: an ``lx.Sharding(mesh, spec)`` for every tensor leaf (``spec`` names
  the leading dimensions, the rest are not split: ``("data",)`` splits the batch
  dimension of images and labels alike), or a function ``tensor -> Sharding | None``.
  A sharded leaf is built as ``global_tensor(leaf, mesh, spec)``: with several
  processes each process's loader gives its own part of the global batch (a
  ``DistributedSampler``'s), and every process must give parts of one shape.
- ``sync``: asking for the next batch (and for the end) first runs ``lx.sync()``, as
  torch_xla's ``MpDeviceLoader`` marks a step: a CUDA-style loop gets one graph per
  step without a ``lx.sync()`` of its own, and the step's program runs while the loop
  takes the next batch. ``sync=False`` leaves cutting the trace to the loop.
- The thread ends when the source ends, when the loop breaks or the iterator is
  closed (``close()``), or when the iterator is garbage collected; a break joins it
  before going on. An error in the source (or in a move) is raised by the loop at the
  batch where it happened, with its own type and traceback.
Why a thread: the batch's host work and its transfer then overlap the step, whose
device work runs in XLA's threads and whose tracing only needs the GIL part of the time.
The moves never touch the graph being traced (a moved leaf is device data at once), so
the step's programs are the same with or without the loader.
"""

from __future__ import annotations

import copy
import dataclasses
import queue
import threading
import weakref
from collections.abc import Mapping, MutableMapping

import torch

from lazax.executor import (
    DEVICE_NAME,
    Layout,
    LazyTensor,
    Sharding,
    from_cpu,
    global_tensor,
    new_tensor,
)
from lazax.executor import sync as _sync

__all__ = ["DeviceLoader"]

_POLL_S = 0.05  # how often a blocked thread looks whether it should stop
_JOIN_S = 30.0  # the longest a break waits for the source's current batch


class DeviceLoader:
    """Batches of ``loader`` on the lazax device, prefetched (see the module docstring)."""

    def __init__(
        self, loader, device=None, prefetch: int = 2, sharding=None, sync: bool = True
    ) -> None:
        if not isinstance(prefetch, int) or prefetch < 1:
            raise ValueError(f"prefetch must be a positive number of batches, got {prefetch!r}")
        if device is None:
            device = torch.device(DEVICE_NAME, torch.accelerator.current_device_index())
        device = torch.device(device)
        if device.type != DEVICE_NAME:
            raise ValueError(f"DeviceLoader moves batches to a lazax device, not {device}")
        if not (sharding is None or isinstance(sharding, Sharding) or callable(sharding)):
            raise TypeError(
                f"sharding must be an lx.Sharding(mesh, spec) or a function tensor -> "
                f"Sharding | None, got {type(sharding).__name__}"
            )
        self.loader = loader
        self.device = device
        self.prefetch = prefetch
        self.sharding = sharding
        self.sync = sync

    def __iter__(self) -> _DeviceIterator:
        move = _Mover(self.device.index or 0, self.sharding)
        return _DeviceIterator(iter(self.loader), move, self.prefetch, self.sync)

    def __len__(self) -> int:
        return len(self.loader)


class _Failure:
    """An error of the source, handed to the loop."""

    __slots__ = ("error",)

    def __init__(self, error: BaseException) -> None:
        self.error = error


_END = object()


class _DeviceIterator:
    def __init__(self, source, move, prefetch: int, sync: bool) -> None:
        self._ready: queue.Queue = queue.Queue(maxsize=prefetch)
        self._stop = threading.Event()
        # The thread holds the source, never this iterator: dropping the iterator (a
        # break) is what stops it.
        self._thread = threading.Thread(
            target=_produce,
            args=(source, move, self._ready, self._stop),
            name="lazax-device-loader",
            daemon=True,
        )
        self._thread.start()
        self._close = weakref.finalize(self, _shut_down, self._ready, self._stop, self._thread)
        self._done = False
        self._sync = sync
        self._started = False

    def __iter__(self) -> _DeviceIterator:
        return self

    def __next__(self):
        if self._done:
            raise StopIteration
        if self._sync and self._started:
            _sync()  # the step that used the previous batch: one graph, run meanwhile
        self._started = True
        item = self._ready.get()
        if item is _END:
            self.close()
            raise StopIteration
        if type(item) is _Failure:
            self.close()
            raise item.error
        return item

    def close(self) -> None:
        """Stop the background thread (and wait for it); the loop then ends."""
        self._done = True
        self._close()


def _put(ready: queue.Queue, stop: threading.Event, item) -> bool:
    while not stop.is_set():
        try:
            ready.put(item, timeout=_POLL_S)
            return True
        except queue.Full:
            continue
    return False


def _produce(source, move, ready: queue.Queue, stop: threading.Event) -> None:
    try:
        for batch in source:
            if stop.is_set() or not _put(ready, stop, move(batch)):
                return
        last = _END
    except BaseException as error:  # the loop raises it
        last = _Failure(error)
    finally:
        del source  # a DataLoader's iterator shuts its workers down here
    _put(ready, stop, last)


def _shut_down(ready: queue.Queue, stop: threading.Event, thread: threading.Thread) -> None:
    stop.set()
    while True:  # free a put that waits for room
        try:
            ready.get_nowait()
        except queue.Empty:
            break
    if thread is not threading.current_thread():
        thread.join(_JOIN_S)


# -- moving one batch ---------------------------------------------------------------


class _Mover:
    """A batch with every CPU tensor moved to lazax device ``index`` (or sharded)."""

    def __init__(self, index: int, sharding) -> None:
        self.index = index
        self.sharding = sharding

    def __call__(self, batch):
        return _map(self._leaf, batch)

    def _leaf(self, t: torch.Tensor) -> torch.Tensor:
        if type(t) is LazyTensor:
            return t
        t = t.detach()
        sharding = self.sharding(t) if callable(self.sharding) else self.sharding
        if sharding is not None:
            return global_tensor(t, sharding.mesh, _spec(sharding.partition_spec, t.dim()))
        # device data at once: nothing pending that a sync of the step would pick up
        return new_tensor(from_cpu(t, self.index), Layout(tuple(t.shape), t.dtype), self.index)


def _spec(spec, ndim: int) -> tuple:
    """``spec`` for a leaf of ``ndim`` dimensions: unnamed trailing dimensions are not
    split; trailing ``None`` entries past the leaf's dimensions are dropped."""
    spec = tuple(spec)
    spec += (None,) * (ndim - len(spec))
    while len(spec) > ndim and spec[-1] is None:
        spec = spec[:-1]
    return spec


def _map(fn, obj):
    if isinstance(obj, torch.Tensor):
        return fn(obj)
    if isinstance(obj, (str, bytes)):
        return obj
    if dataclasses.is_dataclass(obj) and not isinstance(obj, type):
        out = copy.copy(obj)  # keeps fields not set by __init__; works when frozen
        for field in dataclasses.fields(obj):
            object.__setattr__(out, field.name, _map(fn, getattr(obj, field.name)))
        return out
    if isinstance(obj, Mapping):
        moved = {key: _map(fn, value) for key, value in obj.items()}
        if isinstance(obj, MutableMapping):  # may carry more than its items (torch's way)
            out = copy.copy(obj)
            out.update(moved)
            return out
        return type(obj)(moved)
    if isinstance(obj, tuple) and hasattr(obj, "_fields"):  # a named tuple
        return type(obj)(*(_map(fn, value) for value in obj))
    if isinstance(obj, (list, tuple)):
        items = [_map(fn, value) for value in obj]
        if all(a is b for a, b in zip(items, obj)):
            return obj
        return type(obj)(items)
    return obj
