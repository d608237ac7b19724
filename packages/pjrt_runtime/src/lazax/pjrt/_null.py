"""A runtime that compiles nothing and computes nothing: for tests of what lies above.

Contract: ``NullRuntime`` is a ``PjrtRuntime`` (same devices, transfers, placement and
shardings: buffers are real jax arrays on real devices) whose ``compile`` never calls
XLA: it traces the jax function to its output shapes (``jax.eval_shape``) and records
the program (``programs``: name, argument specs, donated indices, output specs); and
whose ``execute`` runs nothing: it returns zero-filled buffers of the output specs on the
executable's device (or sharding) and counts the run (``executions``). Values are
therefore wrong by design; what a test of the executor can check on it is what the
executor decides: how many graphs it compiles and runs, under which names and keys,
what it donates, what it reports, in milliseconds instead of XLA's compile time.
A donated argument is not consumed. Device-side checks never fail (their flags read 0).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import jax
import numpy as np

from ._runtime import Executable, PjrtRuntime, numpy_dtype

__all__ = ["NullProgram", "NullRuntime"]


@dataclass(frozen=True)
class NullProgram:
    """What ``NullRuntime.compile`` was asked to build."""

    name: str | None
    arg_specs: tuple
    donate: tuple[int, ...]
    out_specs: tuple  # (shape, numpy dtype) per output
    out_shardings: tuple | None  # per output, when compiled for a mesh

    # What ``Executable`` asks of a compiled program.
    def memory_analysis(self):
        raise NotImplementedError("a NullRuntime program has no memory analysis")

    def as_text(self) -> str:
        return f"(not compiled: NullRuntime program {self.name})"


class NullRuntime(PjrtRuntime):
    """See the module docstring."""

    def __init__(self, platform: str | None = None) -> None:
        super().__init__(platform)
        self.programs: list[NullProgram] = []
        self.executions = 0

    def _compile(
        self,
        fn: Callable,
        arg_specs,
        device,
        arg_shardings,
        donate,
        name,
        keep_source=False,
        mesh=None,
    ) -> Executable:
        self._check_fault("compile")
        avals = [jax.ShapeDtypeStruct(shape, numpy_dtype(dtype)) for shape, dtype in arg_specs]
        outs = jax.eval_shape(fn, *avals)
        out_specs = tuple((tuple(o.shape), np.dtype(o.dtype)) for o in outs)
        shardings = None
        if arg_shardings is not None and mesh is None:
            mesh_sharding = next((s for s in arg_shardings if hasattr(s, "mesh")), None)
            if mesh_sharding is not None:  # outputs replicated over the mesh
                shardings = (self.named_sharding(mesh_sharding.mesh, ()),) * len(out_specs)
        program = NullProgram(name, tuple(arg_specs), tuple(donate), out_specs, shardings)
        self.programs.append(program)
        self._compiled = True
        target = device or self.default_device
        executable = Executable(program, target, len(out_specs), tuple(donate))
        if keep_source:
            executable.source = f"(not lowered: NullRuntime program {name})"
        return executable

    def execute(self, executable: Executable, args: Sequence[Any]) -> tuple[jax.Array, ...]:
        self._check_fault("execute")
        self.executions += 1
        program: NullProgram = executable.compiled
        if program.out_shardings is not None:
            places = program.out_shardings
        else:
            places = (self._shardings[executable.device],) * len(program.out_specs)
        return tuple(
            jax.device_put(np.zeros(shape, dtype), place)
            for (shape, dtype), place in zip(program.out_specs, places)
        )
