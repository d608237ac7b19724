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
jax runs with ``jax_enable_x64`` so int64 and float64 stay what torch made them.
"""

from __future__ import annotations

import os
import warnings
from collections.abc import Callable, Sequence
from typing import Any

import jax
import jax.numpy as jnp
import jaxlib
import numpy as np
from jax.sharding import Mesh, NamedSharding, PartitionSpec, SingleDeviceSharding

from ._executable import DeviceOutOfMemory, Executable, is_out_of_memory, numpy_dtype
from ._memory import MemoryTracker
from ._padding import padded, padded_shape, trim
from ._per_process import per_process as per_process_program
from ._per_process import processes_mesh, replicated, to_global, to_local
from ._platform import jax_devices, platform_from_env
from ._processes import (
    JobMethods,
    SplitAcrossProcessesError,
    peers_watched,
    place_across,
    spans_processes,
    wait_watched,
)
from ._version import __version__
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

# jax's warning when XLA declines a donated buffer (costs memory, never results).
_UNUSABLE_DONATION = "Some donated buffers were not usable"
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


def _read_of(buffer: jax.Array) -> str:
    return f"a {tuple(buffer.shape)} {buffer.dtype} value to reach the host"


_PERSISTENT_EVENTS = {"hits": 0}
_listening = False


def _listen_to_persistent_cache() -> None:
    global _listening
    if _listening:
        return

    def on_event(event: str, **kwargs) -> None:
        if event == "/jax/compilation_cache/cache_hits":
            _PERSISTENT_EVENTS["hits"] += 1

    jax.monitoring.register_event_listener(on_event)
    _listening = True


class PjrtRuntime(JobMethods):
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

    # -- interface ---------------------------------------------------------------
    def compile_options(self) -> tuple[tuple[str, object], ...]:
        """Everything besides the program that changes what ``compile`` produces: read on
        every call (a user may change a jax option between two compiles)."""
        config = jax.config
        return (
            ("x64", config.jax_enable_x64),
            ("matmul_precision", config.jax_default_matmul_precision),
            ("xla_flags", os.environ.get("XLA_FLAGS", "")),
            ("platform", self.platform),
        )

    def versions(self) -> dict[str, str]:
        """The versions of what turns a jax function into an executable."""
        return {"jax": jax.__version__, "jaxlib": jaxlib.__version__, "lazax-pjrt": __version__}

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

    def use_persistent_cache(self, path: str, read_only: bool = False) -> None:
        """Keep compiled executables in ``path`` across processes, through jax's own
        persistent compilation cache (serialized executables; a corrupt or foreign
        entry is a warning there and a recompile). ``read_only``: load, never write.
        Must come before this runtime's first compile."""
        if self._compiled:
            raise RuntimeError(
                "lazax: the persistent compilation cache must be set before the first "
                "compile; set LAZAX_PERSISTENT_CACHE_DIR, or call set_persistent_cache_dir "
                "before running anything on the device."
            )
        from jax.experimental.compilation_cache import compilation_cache

        _listen_to_persistent_cache()
        jax.config.update("jax_compilation_cache_dir", str(path))
        jax.config.update("jax_persistent_cache_min_compile_time_secs", 0.0)
        # Every lazax graph is worth keeping (-1: no size floor, and no filesystem-based
        # override of it); read-only: no entry is big enough to be written.
        jax.config.update("jax_persistent_cache_min_entry_size_bytes", 2**62 if read_only else -1)
        # XLA's side caches live under the cache directory and their paths enter the
        # compile options, hence the key: a cache copied or mounted elsewhere would never
        # hit. lazax keeps keys independent of where the directory is.
        jax.config.update("jax_persistent_cache_enable_xla_caches", "none")
        compilation_cache.reset_cache()  # jax may have opened a cache (or none) already
        self.persistent_cache = (str(path), read_only)

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

    def compile(
        self,
        fn: Callable[..., Sequence[jax.Array]],
        arg_specs: Sequence[tuple[tuple[int, ...], str]],
        device: Any = None,
        arg_shardings: Sequence[Any] | None = None,
        donate: tuple[int, ...] = (),
        name: str | None = None,
        keep_source: bool = False,
        per_process: bool = False,
    ) -> Executable:
        mesh = None
        if per_process:
            if arg_shardings is not None:
                raise ValueError(
                    "lazax: a graph with collectives between the job's processes (on each "
                    "process's own tensors) also reads tensors laid out over a mesh "
                    "(mark_sharding); collectives take each process's own tensor, on "
                    "lx.device()"
                )
            target = device or self.default_device
            mesh = processes_mesh(self.devices.index(target))
            fn = per_process_program(fn, mesh)
            arg_shardings = [replicated(mesh)] * len(arg_specs)
        executable = self._compile(
            fn, arg_specs, device, arg_shardings, donate, name, keep_source, mesh
        )
        executable.name = name
        executable.mesh = mesh
        return executable

    def program_text(
        self,
        fn: Callable[..., Sequence[jax.Array]],
        arg_specs: Sequence[tuple[tuple[int, ...], str]],
        device: Any = None,
        arg_shardings: Sequence[Any] | None = None,
        name: str | None = None,
        form: str = "hlo",
    ) -> str:
        """The text of the program ``compile`` would build from the same arguments,
        without compiling it: XLA's HLO before its optimizations (``"hlo"``, with the
        shardings as XLA reads them) or jax's StableHLO (``"stablehlo"``)."""
        if form not in ("hlo", "stablehlo"):
            raise ValueError(f"lazax: a program's text is 'hlo' or 'stablehlo', not {form!r}")
        lowered = self._lower(fn, arg_specs, device, arg_shardings, (), name)
        return lowered.compiler_ir("hlo").as_hlo_text() if form == "hlo" else lowered.as_text()

    def _lower(self, fn, arg_specs, device, arg_shardings, donate, name, mesh=None):
        if name:
            # jax names the XLA module (dumps, profiles) after the function:
            # ``jit_<name>``, not every program ``jit_fn``.
            inner = fn

            def fn(*args):
                return inner(*args)

            fn.__name__ = fn.__qualname__ = name
        jit_options = {}
        if arg_shardings is None:
            arg_shardings = [self._shardings[device or self.default_device]] * len(arg_specs)
            if device is not None:  # a program with no inputs would run on the default
                jit_options["out_shardings"] = self._shardings[device]
        elif mesh is not None:
            jit_options["out_shardings"] = replicated(mesh)
        avals = [
            jax.ShapeDtypeStruct(shape, numpy_dtype(dtype), sharding=sharding)
            for (shape, dtype), sharding in zip(arg_specs, arg_shardings)
        ]
        with warnings.catch_warnings():
            # The caller donates only arguments that an output can take over; where XLA
            # still declines one (a layout it prefers), that costs memory, not results.
            warnings.filterwarnings("ignore", message=_UNUSABLE_DONATION)
            return jax.jit(fn, donate_argnums=tuple(donate), **jit_options).lower(*avals)

    def _compile(
        self, fn, arg_specs, device, arg_shardings, donate, name, keep_source=False, mesh=None
    ) -> Executable:
        self._check_fault("compile")
        lowered = self._lower(fn, arg_specs, device, arg_shardings, donate, name, mesh)
        num_outputs = len(lowered.out_info)
        self._compiled = True
        target = device or self.default_device
        source = lowered.as_text() if keep_source else None
        if self.persistent_cache is None:
            executable = Executable(lowered.compile(), target, num_outputs, tuple(donate))
            executable.source = source
            return executable
        hits = _PERSISTENT_EVENTS["hits"]
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            compiled = lowered.compile()
        failures = []
        for w in caught:
            if "persistent compilation cache" in str(w.message):
                failures.append(str(w.message))
            elif _UNUSABLE_DONATION not in str(w.message):
                warnings.warn_explicit(w.message, w.category, w.filename, w.lineno)
        executable = Executable(compiled, target, num_outputs, tuple(donate))
        executable.source = source
        executable.persistent = "hit" if _PERSISTENT_EVENTS["hits"] > hits else "miss"
        executable.load_failures = failures
        return executable

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

    def release_caches(self) -> None:
        """Drop jax's own trace, lowering and compilation caches (executables returned
        by ``compile`` stay valid: their holders keep them)."""
        jax.clear_caches()

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
