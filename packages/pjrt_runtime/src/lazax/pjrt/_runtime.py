"""The runtime interface the executor talks to, implemented over jaxlib's PJRT clients.

Contract (the narrow interface; a second implementation must stay possible):
- ``devices`` / ``default_device``: the platform's devices, ``default_device`` index 0.
- ``to_device(array, device)``: host numpy array -> device buffer (asynchronous).
- ``to_host(buffer)``: device buffer -> numpy array (waits for the buffer).
- ``compile(fn, arg_specs, device)``: a jax-traceable function and its argument specs
  ``(shape, dtype name)`` -> an executable for ``device``. Nothing runs.
- ``execute(executable, args)``: runs asynchronously; returns a tuple of buffers that
  are futures. Errors raised synchronously propagate; an asynchronous failure surfaces
  when a result is waited on.
- ``wait(buffers)``: block until they are ready (re-raising their error, if any).
- ``fail_next(stage, error)``: a test hook that makes the next ``compile``, ``execute``,
  ``to_device`` or ``to_host`` raise ``error`` before doing anything.
jax runs with ``jax_enable_x64`` so int64 and float64 stay what torch made them.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import jax
import numpy as np
from jax.sharding import SingleDeviceSharding

from ._platform import jax_devices, platform_from_env

__all__ = ["Executable", "PjrtRuntime", "STAGES", "numpy_dtype"]

jax.config.update("jax_enable_x64", True)

STAGES = ("compile", "execute", "to_device", "to_host")

_NP_DTYPES: dict[str, Any] = {}


def numpy_dtype(name: str):
    """The numpy (or ml_dtypes) dtype for a dtype name such as ``"bfloat16"``."""
    dt = _NP_DTYPES.get(name)
    if dt is None:
        dt = _NP_DTYPES[name] = np.dtype(jax.numpy.dtype(name))
    return dt


class Executable:
    """A compiled program bound to one device."""

    __slots__ = ("compiled", "device", "num_outputs", "text")

    def __init__(self, compiled: Any, device: Any, num_outputs: int) -> None:
        self.compiled = compiled
        self.device = device
        self.num_outputs = num_outputs

    def as_text(self) -> str:
        """The optimized HLO, for debugging."""
        return self.compiled.as_text()


class PjrtRuntime:
    """``lazax``'s runtime over jax/PJRT (see the module docstring)."""

    def __init__(self, platform: str | None = None) -> None:
        self.platform = platform or platform_from_env()
        self.devices = jax_devices(self.platform)
        self.default_device = self.devices[0]
        self._faults: dict[str, BaseException] = {}
        self._shardings = {d: SingleDeviceSharding(d) for d in self.devices}

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
    def device_kind(self) -> str:
        return f"{self.platform}:{self.default_device.device_kind}:{len(self.devices)}"

    def to_device(self, array: np.ndarray, device: Any = None) -> jax.Array:
        self._check_fault("to_device")
        return jax.device_put(array, self._shardings[device or self.default_device])

    def to_host(self, buffer: jax.Array) -> np.ndarray:
        self._check_fault("to_host")
        return np.asarray(buffer)

    def compile(
        self,
        fn: Callable[..., Sequence[jax.Array]],
        arg_specs: Sequence[tuple[tuple[int, ...], str]],
        device: Any = None,
    ) -> Executable:
        self._check_fault("compile")
        sharding = self._shardings[device or self.default_device]
        avals = [
            jax.ShapeDtypeStruct(shape, numpy_dtype(dtype), sharding=sharding)
            for shape, dtype in arg_specs
        ]
        lowered = jax.jit(fn).lower(*avals)
        num_outputs = len(lowered.out_info)
        return Executable(lowered.compile(), device or self.default_device, num_outputs)

    def execute(self, executable: Executable, args: Sequence[Any]) -> tuple[jax.Array, ...]:
        self._check_fault("execute")
        return tuple(executable.compiled(*args))

    def wait(self, buffers: Sequence[jax.Array]) -> None:
        jax.block_until_ready(list(buffers))
