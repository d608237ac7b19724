"""What a compile gives back: ``Executable`` (a compiled program bound to a device,
with XLA's memory analysis of it), and the out-of-memory error its runs raise.

Contract: ``Executable(compiled, device, num_outputs, donate)`` reads XLA's memory
analysis once (outputs, the part of them written over donated inputs, scratch) where
the backend reports it; ``need_bytes`` is what a run allocates. ``name`` (the program's
name, its XLA module ``jit_<name>``), ``source`` (the StableHLO, when kept),
``annotations`` (the caller's), ``persistent`` and ``load_failures`` (the persistent
tier's outcome) are set by whoever compiles it. ``DeviceOutOfMemory`` carries the
program's and its arguments' bytes; ``is_out_of_memory(err)`` tells XLA's
``RESOURCE_EXHAUSTED`` whatever type jax wrapped it in. ``numpy_dtype(name)``: the numpy
(or ml_dtypes) dtype of a dtype name.
"""

from __future__ import annotations

from typing import Any

import jax
import numpy as np

__all__ = ["DeviceOutOfMemory", "Executable", "is_out_of_memory", "numpy_dtype"]

_NP_DTYPES: dict[str, Any] = {}


def numpy_dtype(name: str):
    """The numpy (or ml_dtypes) dtype for a dtype name such as ``"bfloat16"``."""
    dt = _NP_DTYPES.get(name)
    if dt is None:
        dt = _NP_DTYPES[name] = np.dtype(jax.numpy.dtype(name))
    return dt


def is_out_of_memory(err: BaseException) -> bool:
    """XLA's out-of-memory status, whatever exception type jax wraps it in."""
    return "RESOURCE_EXHAUSTED" in str(err)


class DeviceOutOfMemory(RuntimeError):
    """An execution (or transfer) ran out of device memory; nothing was consumed.

    ``executable`` and ``args`` are the program and its arguments when an execution
    failed (None for a transfer), so the caller can say what did not fit."""

    def __init__(self, message: str, executable=None, args=()) -> None:
        super().__init__(message)
        self.executable = executable
        self.args_nbytes = [getattr(a, "nbytes", 0) for a in args]
        self.output_bytes = executable.output_bytes if executable else 0
        self.alias_bytes = executable.alias_bytes if executable else 0
        self.temp_bytes = executable.temp_bytes if executable else 0


class Executable:
    """A compiled program bound to one device."""

    __slots__ = (
        "compiled",
        "device",
        "num_outputs",
        "text",
        "persistent",
        "load_failures",
        "donate",
        "output_bytes",
        "alias_bytes",
        "temp_bytes",
        "annotations",
        "footprints",
        "name",
        "source",
        "mesh",
        "__weakref__",  # the map guard checks whether an evicted program was freed
    )

    def __init__(
        self, compiled: Any, device: Any, num_outputs: int, donate: tuple[int, ...] = ()
    ) -> None:
        self.compiled = compiled
        self.device = device
        self.num_outputs = num_outputs
        self.donate = donate
        # From XLA's memory analysis: its outputs, the part of them written over donated
        # inputs, and the scratch it needs while it runs.
        try:
            analysis = compiled.memory_analysis()
            self.output_bytes = int(analysis.output_size_in_bytes)
            self.alias_bytes = int(analysis.alias_size_in_bytes)
            self.temp_bytes = int(analysis.temp_size_in_bytes)
        except Exception:  # not every backend reports it
            self.output_bytes = self.alias_bytes = self.temp_bytes = 0
        # With a persistent cache: "hit" (loaded, not compiled) or "miss"; else None.
        self.persistent: str | None = None
        # Persistent-cache entries that could not be read (and were compiled instead).
        self.load_failures: list[str] = []
        # Whatever the caller keeps with the program (the executor: its checks).
        self.annotations: Any = None
        # Per output, the bytes it holds on each device: fixed by the program (its
        # output shapes and shardings), measured on its first execution.
        self.footprints: tuple | None = None
        # The program's name (its XLA module is ``jit_<name>``), or None.
        self.name: str | None = None
        # The StableHLO jax lowered, when ``compile(keep_source=True)`` (graph dumps).
        self.source: str | None = None
        # A program every process runs on its own values (``_per_process``): the mesh of
        # one device per process its arguments and results are wrapped over; else None.
        self.mesh = None

    @property
    def need_bytes(self) -> int:
        """What a run allocates: new outputs and scratch."""
        return self.output_bytes - self.alias_bytes + self.temp_bytes

    def as_text(self) -> str:
        """The optimized HLO, for debugging."""
        return self.compiled.as_text()
