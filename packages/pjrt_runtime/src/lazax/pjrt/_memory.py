"""The runtime's own count of device memory: the buffers it handed out that are alive.

Contract: ``MemoryTracker(devices)`` is told of every buffer the runtime creates
(``track(buffers, temp_bytes, footprints)``: transfers and execution outputs, with the
executing program's scratch bytes and, from a program, its outputs' ``footprints()``
measured once) and of every buffer an execution consumes by donation
(``release(buffers)``). A tracked buffer stops counting when it is donated or when its
Python object dies, whichever comes first. Per device it keeps the bytes in use, the
peak (an execution peaks at what was in use, plus its temporaries, plus its outputs
that did not take over a donated input: the order XLA allocates in), the number of live
buffers and the largest one. This is what ``memory_stats`` reports where the plugin has
no statistics of its own (the CPU); where it has (GPU, TPU), the plugin's figures are
the truth and this count only backs a peak reset.
"""

from __future__ import annotations

import threading
import weakref
from collections import deque
from typing import Any

__all__ = ["MemoryTracker"]


class _DeviceCount:
    __slots__ = ("in_use", "peak", "allocs", "largest")

    def __init__(self) -> None:
        self.in_use = 0
        self.peak = 0
        self.allocs = 0
        self.largest = 0


class MemoryTracker:
    """Live bytes per device of the buffers one runtime created (see module doc)."""

    def __init__(self, devices) -> None:
        self.counts = {d: _DeviceCount() for d in devices}
        # id(buffer) -> (weakref, ((device, bytes), ...)).
        self._live: dict[int, tuple] = {}
        # Keys of buffers that died. A weakref callback runs wherever the last reference
        # goes, even inside ``track`` holding the lock (a collection triggered by an
        # allocation): it only appends here (atomic), and the next call drains it.
        self._died: deque[int] = deque()
        self._lock = threading.Lock()
        # Devices whose PJRT peak was reset (PJRT's own peak cannot be).
        self.pjrt_peak_base: dict[Any, bool] = {}

    @staticmethod
    def _footprint(buffer) -> tuple:
        sharding = buffer.sharding
        devices = sharding.device_set
        if len(devices) == 1:
            return ((next(iter(devices)), buffer.nbytes),)
        shard = sharding.shard_shape(buffer.shape)
        size = buffer.dtype.itemsize
        for n in shard:
            size *= n
        return tuple((d, size) for d in devices)

    def footprints(self, buffers) -> tuple:
        """Per buffer, the (device, bytes) it holds: what ``track`` can be given for
        buffers shaped and placed alike (a program's outputs on every execution)."""
        return tuple(map(self._footprint, buffers))

    def track(self, buffers, temp_bytes: int = 0, footprints=None) -> None:
        live = self._live
        counts = self.counts
        died = self._died.append
        added: dict = {}
        if footprints is None:
            footprints = map(self._footprint, buffers)
        with self._lock:
            self._drain()
            for buffer, footprint in zip(buffers, footprints):
                key = id(buffer)
                if key in live:
                    continue
                live[key] = (weakref.ref(buffer, lambda _ref, key=key: died(key)), footprint)
                for device, size in footprint:
                    added[device] = added.get(device, 0) + size
                    count = counts.get(device)
                    if count is not None:
                        count.allocs += 1
                        if size > count.largest:
                            count.largest = size
            for device, size in added.items():
                count = counts.get(device)
                if count is None:
                    continue
                # The program's scratch is live while it runs, beside its outputs.
                top = count.in_use + size + temp_bytes
                if top > count.peak:
                    count.peak = top
                count.in_use += size
            if temp_bytes and not added:
                for count in counts.values():
                    count.peak = max(count.peak, count.in_use + temp_bytes)

    def _drain(self) -> None:
        """Forget the buffers that died since the last call. Under ``_lock``."""
        died = self._died
        while died:
            self._forget(died.popleft())

    def _forget(self, key: int) -> None:
        entry = self._live.pop(key, None)
        if entry is None:
            return
        for device, size in entry[1]:
            count = self.counts.get(device)
            if count is not None:
                count.in_use -= size
                count.allocs -= 1

    def release(self, buffers) -> None:
        """These buffers are consumed (donated): their memory now holds outputs."""
        with self._lock:
            self._drain()
            for buffer in buffers:
                self._forget(id(buffer))

    def live_buffers(self) -> list:
        """Every tracked buffer still alive (strong references: the caller's to drop)."""
        with self._lock:
            self._drain()
            refs = [entry[0] for entry in self._live.values()]
        return [b for b in (ref() for ref in refs) if b is not None]

    def peak(self, device) -> int:
        with self._lock:
            self._drain()
        count = self.counts.get(device)
        return count.peak if count is not None else 0

    def reset_peak(self, device) -> None:
        with self._lock:
            self._drain()
            count = self.counts.get(device)
            if count is not None:
                count.peak = count.in_use
            self.pjrt_peak_base[device] = True

    def stats(self, device) -> dict[str, Any]:
        with self._lock:
            self._drain()
        count = self.counts.get(device) or _DeviceCount()
        return {
            "source": "lazax",
            "bytes_in_use": count.in_use,
            "peak_bytes_in_use": max(count.peak, count.in_use),
            "num_allocs": count.allocs,
            "largest_alloc_size": count.largest,
        }
