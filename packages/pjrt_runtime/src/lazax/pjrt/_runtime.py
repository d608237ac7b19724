"""The runtime interface the executor talks to, implemented over jaxlib's PJRT clients.

Contract (the narrow interface; a second implementation must stay possible):
- ``devices`` / ``default_device``: the platform's devices in this process (its
  addressable ones), ``default_device`` index 0; ``global_devices``: every process's
  (the same list as ``devices`` unless jax's distributed runtime joined processes),
  ``process_index`` / ``process_count``: this process's place in that job.
- ``to_device(array, device)``: host numpy array -> device buffer (asynchronous).
- ``adopt(buffer)``: a ``jax.Array`` made outside lazax, as a buffer of this runtime:
  the same object (no copy, its sharding kept) when all its devices are this
  process's, else a copy on the default device; counted in ``memory_stats`` either way.
- ``copy(buffer)``: a new buffer of the same value on the same devices (asynchronous).
- ``zeros_like(buffer, dtype=None)``: a new buffer of zeros laid out as ``buffer`` (its
  shape, devices and sharding), of ``dtype`` (a name such as ``"bfloat16"``) or
  ``buffer``'s (asynchronous).
- ``stack(buffers)``: a new buffer whose rows are ``buffers`` (one shape, dtype and
  device), on their device (asynchronous).
- ``to_host(buffer)``: device buffer -> numpy array (waits for the buffer);
  ``SplitAcrossProcessesError`` for a value split over several processes' devices
  (a replicated one reads back whole).
- ``compile(fn, arg_specs, device, arg_shardings, donate)``: a jax-traceable function
  and its argument specs ``(shape, dtype name)`` -> an executable for ``device``, or,
  with ``arg_shardings`` (one jax sharding per argument), an SPMD program that XLA's
  partitioner splits over their mesh. ``donate``: indices of arguments whose buffers
  the program may write its outputs over (jax's ``donate_argnums``); the caller
  guarantees nothing reads them afterwards. Nothing runs. The executable's
  ``annotations`` attribute is the caller's to keep anything with the program.
  ``per_process=True``: a program every process of the job runs on its own values (its
  collectives reduce over ``PROCESS_AXIS``, ``_per_process``), on ``device``'s place
  among each process's devices; it takes and returns this process's buffers as any
  program does, and every process must run it at the same point.
- ``program_text(fn, arg_specs, device, arg_shardings, name, form="hlo")``: the text
  of the program ``compile`` would build from the same arguments, without compiling:
  XLA's HLO before its optimizations (``"hlo"``, shardings as XLA reads them) or
  jax's StableHLO (``"stablehlo"``).
- ``mesh(device_ids, shape, axis_names)`` (ids index ``global_devices``),
  ``named_sharding(mesh, spec)``, ``place(buffer, sharding, shape=None)`` (a device
  buffer re-laid out, asynchronously; onto a sharding that spans processes, each
  process builds its pieces from its own copy; given the value's ``shape``, the buffer
  may hold it padded and the result is padded as ``sharding`` needs, ``_padding``; a
  numpy array goes to the devices directly), and ``shard_shapes(buffer)`` (global
  device index -> the shape of the piece that device holds).
- Several processes (``_processes.JobMethods``): ``global_array``, ``from_callback``,
  ``local_part``. Under a job of several processes, every wait watches
  the others and raises ``ProcessLostError`` when one is gone.
- ``execute(executable, args)``: runs asynchronously; returns a tuple of buffers that
  are futures. Errors raised synchronously propagate, and then no donated argument has
  been consumed; an asynchronous failure surfaces when a result is waited on. Running
  out of device memory raises ``DeviceOutOfMemory`` (with the program's input, output
  and scratch bytes), here and in ``to_device``.
- ``memory_stats(device)``: bytes in use and peak (``bytes_in_use``,
  ``peak_bytes_in_use``, ``bytes_limit`` where known, ``num_allocs``,
  ``largest_alloc_size``, ``source``): the plugin's own statistics where it reports
  them (GPU, TPU), else this runtime's count of the buffers it handed out and that are
  still alive, with each execution's temporaries in the peak (``source: "lazax"``).
  ``reset_peak_memory_stats(device)`` starts a new peak from what is in use now.
- ``release_caches()``: drop what jax caches on its own side (traces, executables of
  programs lazax no longer holds); a program that never repeats a shape needs it to
  stay bounded.
- ``memory_maps()``: ``(mappings the process holds, the OS's limit)``, or None where
  the OS does not say (Linux only). XLA's CPU executables hold their JIT code in
  mappings of their own (one or more per kernel), and a process past the limit dies in
  LLVM ("Unable to allocate section memory"), so the executor watches this.
- ``is_ready(buffer)``: whether its value is computed (never blocks).
- ``wait(buffers)``: block until they are ready (re-raising their error, if any).
  ``wait_all()``: block until every buffer this runtime handed out that is still alive
  is ready, that is until every execution whose results anyone can read has finished.
  ``done_handle(buffer)`` / ``wait_done(handle)``: for a thread that times
  executions, a second reference to a result's buffer, which neither changes the
  result's reference count nor stops its donation, and a wait on it (False for a
  donated buffer).
- ``fail_next(stage, error)``: a test hook that makes the next ``compile``, ``execute``,
  ``to_device`` or ``to_host`` raise ``error`` before doing anything.
Where it lives: this module owns ``PjrtRuntime`` itself (devices, the test hook,
transfers, placement); its compiling comes from ``_compiler.CompileMethods``, its
executions, waits and memory from ``_execution.ExecuteMethods``, a job's methods from
``_processes.JobMethods``, and ``Executable`` with the out-of-memory error from
``_executable`` (re-exported here).
jax runs with ``jax_enable_x64`` so int64 and float64 stay what torch made them.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
from jax.sharding import Mesh, NamedSharding, PartitionSpec, SingleDeviceSharding

from ._compiler import CompileMethods
from ._executable import DeviceOutOfMemory, Executable, is_out_of_memory, numpy_dtype
from ._execution import ExecuteMethods
from ._memory import MemoryTracker
from ._padding import padded, padded_shape, trim
from ._platform import jax_devices, platform_from_env
from ._processes import (
    JobMethods,
    SplitAcrossProcessesError,
    peers_watched,
    place_across,
    spans_processes,
    wait_watched,
)
from ._watchdog import WATCHDOG

__all__ = [
    "DeviceOutOfMemory",
    "Executable",
    "PjrtRuntime",
    "STAGES",
    "is_out_of_memory",
    "numpy_dtype",
]

jax.config.update("jax_enable_x64", True)

STAGES = ("compile", "execute", "to_device", "to_host")


def _read_of(buffer: jax.Array) -> str:
    return f"a {tuple(buffer.shape)} {buffer.dtype} value to reach the host"


class PjrtRuntime(CompileMethods, ExecuteMethods, JobMethods):
    """``lazax``'s runtime over jax/PJRT (see the module docstring)."""

    def __init__(self, platform: str | None = None) -> None:
        self.platform = platform or platform_from_env()
        self.global_devices = jax_devices(self.platform)
        # Under jax's distributed runtime the platform lists every process's devices:
        # this process places and reads only on its own.
        self.process_index = jax.process_index()
        self.process_count = jax.process_count()
        self.devices = [d for d in self.global_devices if d.process_index == self.process_index]
        # A device's place in ``global_devices`` (what a Mesh's ids and shard_shapes use;
        # jax's own ids are not 0..n-1 across processes).
        self._global_index = {d: k for k, d in enumerate(self.global_devices)}
        self.default_device = self.devices[0]
        self._faults: dict[str, BaseException] = {}
        self._compiled = False
        # (directory, read_only) once use_persistent_cache() has been called.
        self.persistent_cache: tuple[str, bool] | None = None
        self._shardings = {d: SingleDeviceSharding(d) for d in self.devices}
        self.memory = MemoryTracker(self.devices)

    # -- test hook -------------------------------------------------------------
    def fail_next(self, stage: str, error: BaseException | None = None) -> None:
        if stage not in STAGES:
            raise ValueError(f"stage must be one of {STAGES}, but got {stage!r}")
        self._faults[stage] = error or RuntimeError(f"injected {stage} failure")

    def _check_fault(self, stage: str) -> None:
        if self._faults:
            error = self._faults.pop(stage, None)
            if error is not None:
                raise error

    # -- devices and transfers ---------------------------------------------------
    def device_kind(self) -> str:
        return f"{self.platform}:{self.default_device.device_kind}:{len(self.devices)}"

    def _allocate(self, make: Callable[[], jax.Array]) -> jax.Array:
        """``make()``'s new buffer, counted; running out of device memory raises
        ``DeviceOutOfMemory``. (The ``to_device`` fault of ``fail_next`` applies.)"""
        self._check_fault("to_device")
        try:
            buffer = make()
        except Exception as err:
            if is_out_of_memory(err):
                raise DeviceOutOfMemory(str(err)) from err
            raise
        self.memory.track((buffer,))
        return buffer

    def to_device(self, array: np.ndarray, device: Any = None) -> jax.Array:
        sharding = self._shardings[device or self.default_device]
        return self._allocate(lambda: jax.device_put(array, sharding))

    def copy(self, buffer: jax.Array) -> jax.Array:
        """A new buffer of ``buffer``'s value, on its devices (one it may donate)."""
        return self._allocate(lambda: jnp.array(buffer, copy=True))

    def zeros_like(self, buffer: jax.Array, dtype: Any = None) -> jax.Array:
        kind = buffer.dtype if dtype is None else numpy_dtype(dtype)
        return self._allocate(lambda: jnp.zeros(buffer.shape, kind, device=buffer.sharding))

    def stack(self, buffers: Sequence[jax.Array]) -> jax.Array:
        """One new buffer holding ``buffers`` (of one shape and dtype, on one device) as
        its rows, on that device (asynchronous)."""
        return self._allocate(lambda: jnp.stack(buffers))

    def adopt(self, buffer: jax.Array) -> jax.Array:
        if not isinstance(buffer, jax.Array):
            raise TypeError(f"expected a jax.Array, got {type(buffer).__name__}")
        if not buffer.sharding.device_set <= set(self.global_devices):
            buffer = self.to_device(buffer, self.default_device)
        self.memory.track((buffer,))
        return buffer

    def to_host(self, buffer: jax.Array) -> np.ndarray:
        self._check_fault("to_host")
        if self.process_count > 1:
            if not (buffer.is_fully_addressable or buffer.is_fully_replicated):
                raise SplitAcrossProcessesError(
                    f"the {tuple(buffer.shape)} value is split over several processes' "
                    f"devices ({buffer.sharding}): this process holds only its pieces"
                )
            with peers_watched(), WATCHDOG.waiting(lambda: _read_of(buffer)):
                wait_watched((buffer,))
                return np.asarray(buffer)
        with WATCHDOG.waiting(lambda: _read_of(buffer)):
            return np.asarray(buffer)

    # -- SPMD ------------------------------------------------------------------------
    def mesh(self, device_ids: Sequence[int], shape: Sequence[int], axis_names) -> Mesh:
        devices = np.array([self.global_devices[i] for i in device_ids], dtype=object)
        return Mesh(devices.reshape(tuple(shape)), tuple(axis_names))

    def named_sharding(self, mesh: Mesh, spec: Sequence[Any]) -> NamedSharding:
        return NamedSharding(mesh, PartitionSpec(*spec))

    def place(self, buffer: Any, sharding: Any, shape=None) -> jax.Array:
        self._check_fault("to_device")
        if shape is not None:  # the value's shape: ``buffer`` may hold it padded
            target = padded_shape(shape, sharding)
            if tuple(buffer.shape) != target:
                if self.process_count > 1 and spans_processes(sharding):
                    raise ValueError(
                        f"a {tuple(shape)} value cannot be split unevenly over several "
                        f"processes' devices ({sharding}); split dimensions that divide"
                    )
                buffer = padded(trim(buffer, shape), sharding)
        if self.process_count > 1 and spans_processes(sharding):
            if getattr(buffer, "sharding", None) is None or (
                buffer.sharding.device_set != sharding.device_set
            ):
                # jax moves no buffer between processes' devices: every process builds
                # its own pieces from its own copy.
                placed = place_across(buffer, sharding)
                self.memory.track((placed,))
                return placed
        placed = jax.device_put(buffer, sharding)
        if placed is not buffer:
            self.memory.track((placed,))
        return placed

    def single_device(self, device: Any = None) -> Any:
        return self._shardings[device or self.default_device]

    def shard_shapes(self, buffer: jax.Array) -> dict[int, tuple[int, ...]]:
        index = self._global_index
        return {index[s.device]: tuple(s.data.shape) for s in buffer.addressable_shards}
