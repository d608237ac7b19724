"""``PjrtRuntime``'s executions, the waits on their results, and the device memory
they take.

Contract: ``ExecuteMethods`` is a mixin of ``PjrtRuntime`` (``_runtime``), whose
docstring describes each member of the interface; it reads the runtime's ``memory``
(its ``MemoryTracker``), ``default_device`` and ``process_count``, and calls its
``_check_fault``. It owns:
- ``execute``: dispatch, asynchronous; a synchronous failure gives every donated
  argument back to the memory count (nothing was consumed), out of device memory is
  ``DeviceOutOfMemory``, and a donating program that allocates more than is free is
  refused before it runs.
- the waits (``is_ready``, ``wait``, ``wait_all``, ``done_handle`` / ``wait_done``):
  under the watchdog, and, under a job of several processes, watching the others
  (``ProcessLostError``).
- memory: ``memory_stats`` (the plugin's where it has them, else the runtime's count),
  ``reset_peak_memory_stats``, ``memory_maps``.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import jax

from ._executable import DeviceOutOfMemory, Executable, is_out_of_memory
from ._per_process import to_global, to_local
from ._processes import peers_watched, wait_watched
from ._watchdog import WATCHDOG

__all__ = ["ExecuteMethods"]

# A donating program that allocates more than this is checked against free memory first.
_CHECK_FREE_ABOVE = 64 << 20


def _host_available_bytes() -> int | None:
    """The kernel's estimate of memory available to this process (Linux), else None."""
    try:
        with open("/proc/meminfo", "rb") as meminfo:
            for line in meminfo:
                if line.startswith(b"MemAvailable:"):
                    return int(line.split()[1]) * 1024
    except (OSError, ValueError, IndexError):
        return None
    return None


class ExecuteMethods:
    """``PjrtRuntime``'s executions, waits and memory (see the module docstring)."""

    def execute(self, executable: Executable, args: Sequence[Any]) -> tuple[jax.Array, ...]:
        memory = self.memory
        if executable.donate:
            if executable.need_bytes > _CHECK_FREE_ABOVE:
                self._check_room(executable, args)
            memory.release([args[i] for i in executable.donate])
        try:
            self._check_fault("execute")
            WATCHDOG.program = executable.name
            # Dispatch can block (a CPU program that runs inline, a full queue).
            with WATCHDOG.waiting("a program's dispatch"):
                if executable.mesh is None:
                    outputs = tuple(executable.compiled(*args))
                else:
                    mesh = executable.mesh
                    wrapped = [to_global(a, mesh) for a in args]
                    outputs = tuple(to_local(o) for o in executable.compiled(*wrapped))
        except BaseException as err:
            if executable.donate:  # not consumed: a synchronous failure donates nothing
                memory.track([args[i] for i in executable.donate if not args[i].is_deleted()])
            if is_out_of_memory(err):
                raise DeviceOutOfMemory(str(err), executable, args) from err
            raise
        footprints = executable.footprints
        if footprints is None:
            footprints = executable.footprints = memory.footprints(outputs)
        memory.track(outputs, executable.temp_bytes, footprints)
        return outputs

    def _check_room(self, executable: Executable, args) -> None:
        """A donating program that cannot fit raises before it runs: some plugins (the
        CPU's) consume donated buffers even when the execution then fails."""
        stats = self.memory_stats(executable.device)
        if "bytes_limit" in stats:
            free = stats["bytes_limit"] - stats["bytes_in_use"]
        else:
            free = _host_available_bytes()
        if free is not None and executable.need_bytes > free:
            raise DeviceOutOfMemory(
                f"RESOURCE_EXHAUSTED: the program needs {executable.need_bytes} bytes "
                f"(new outputs and scratch) and {free} are free; not run, nothing donated",
                executable,
                args,
            )

    def memory_stats(self, device: Any = None) -> dict[str, Any]:
        device = device or self.default_device
        stats = None
        try:
            stats = device.memory_stats()
        except Exception:  # a plugin without statistics
            stats = None
        if stats and "bytes_in_use" in stats:
            out = {"source": "pjrt", **stats}
            base = self.memory.pjrt_peak_base.get(device)
            if base is not None and "peak_bytes_in_use" in stats:
                # PJRT's peak cannot be reset; after a reset report the peak since then.
                out["peak_bytes_in_use"] = max(stats["bytes_in_use"], self.memory.peak(device))
            return out
        return self.memory.stats(device)

    def reset_peak_memory_stats(self, device: Any = None) -> None:
        self.memory.reset_peak(device or self.default_device)

    def memory_maps(self) -> tuple[int, int] | None:
        try:
            with open("/proc/self/maps", "rb") as maps:
                count = maps.read().count(b"\n")
            with open("/proc/sys/vm/max_map_count", "rb") as limit:
                return count, int(limit.read())
        except (OSError, ValueError):
            return None

    def is_ready(self, buffer: jax.Array) -> bool:
        """Whether ``buffer``'s value has been computed (never waits)."""
        return buffer.is_ready()

    def wait(self, buffers: Sequence[jax.Array]) -> None:
        waiting = WATCHDOG.waiting(lambda: f"{len(buffers)} value(s) to be computed")
        if self.process_count > 1:
            with peers_watched(), waiting:
                wait_watched(list(buffers))
                jax.block_until_ready(list(buffers))
            return
        with waiting:
            jax.block_until_ready(list(buffers))

    def done_handle(self, buffer: jax.Array) -> jax.Array:
        """A second reference to ``buffer``'s (first) device buffer, to wait on with
        ``wait_done``: holding it leaves ``buffer``'s reference count as it was (the
        executor's donation reads it) and does not stop ``buffer``'s donation."""
        return buffer.addressable_data(0)

    def wait_done(self, handle: jax.Array) -> bool:
        """Block until ``handle`` (``done_handle``) is computed: its execution has ended;
        False, without waiting, when its buffer was donated before or while waiting. No
        watchdog: a thread that times executions calls it, never a waiting user."""
        if handle.is_deleted():
            return False
        try:
            handle.block_until_ready()
        except Exception:
            if handle.is_deleted():
                return False
            raise
        return True

    def wait_all(self) -> None:
        live = [b for b in self.memory.live_buffers() if not b.is_deleted()]
        if live:
            self.wait(live)
