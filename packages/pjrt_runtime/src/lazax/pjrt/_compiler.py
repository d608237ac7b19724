"""``PjrtRuntime``'s compiling: jax function and argument specs -> ``Executable``.

Contract: ``CompileMethods`` is a mixin of ``PjrtRuntime`` (``_runtime``), whose
docstring describes each member of the interface; it reads the runtime's ``platform``,
``devices``, ``default_device``, ``_shardings`` (device -> its single-device sharding),
``persistent_cache`` and ``_compiled`` (set here at the first compile), and calls its
``_check_fault``. It owns:
- ``compile`` (one device, an SPMD mesh, or ``per_process``) and ``program_text``, which
  lower the function the same way (``_lower``), so the text is that of the program
  ``compile`` would build; ``_compile`` is what a second implementation replaces
  (``NullRuntime``) to compile nothing while keeping ``compile``'s handling of names,
  meshes and ``per_process``.
- what besides the program changes an executable (``compile_options``, ``versions``),
  for the caller's cache key.
- jax's persistent compilation cache (``use_persistent_cache``), before the first
  compile only, and each compile's outcome on the executable (``persistent``: hit or
  miss; ``load_failures``).
- ``release_caches``: jax's own trace, lowering and compilation caches.
"""

from __future__ import annotations

import os
import warnings
from collections.abc import Callable, Sequence
from typing import Any

import jax
import jaxlib

from ._executable import Executable, numpy_dtype
from ._per_process import per_process as per_process_program
from ._per_process import processes_mesh, replicated
from ._version import __version__

__all__ = ["CompileMethods"]

# jax's warning when XLA declines a donated buffer (costs memory, never results).
_UNUSABLE_DONATION = "Some donated buffers were not usable"

# jax tells of a persistent-cache hit only through its monitoring events: a compile
# that raised the count was loaded, not compiled.
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


class CompileMethods:
    """``PjrtRuntime``'s compiling (see the module docstring)."""

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

    def release_caches(self) -> None:
        """Drop jax's own trace, lowering and compilation caches (executables returned
        by ``compile`` stay valid: their holders keep them)."""
        jax.clear_caches()
