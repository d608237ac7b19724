"""torch_xla's top-level functions over lazax (``torch_xla.device()``, ``sync()``...).

Contract (torch_xla 2.9's documented behaviour, on the ``lazax`` device):
- ``device(index=None)``: ``torch.device("xla:<index>")`` (index 0 when None;
  ``IndexError`` past the last device);
  ``devices()``: every device of this process; ``device_count()``: how many;
  ``real_devices()``: their hardware names (``"CPU:0"``...).
- ``sync(wait=False, reset_scope=True)``: cut the trace (``lx.sync``), then run the step
  closures queued by ``xm.add_step_closure`` in order (torch_xla's ``mark_step``);
  counted as ``MarkStep`` in ``met``.
- ``compile(f=None, full_graph=False, name=None, max_different_graphs=None)``:
  ``lx.compile``: a decorator, a wrapper or a ``with`` block; one graph per call. A
  decorated method binds ``self``. Its errors begin in torch_xla's words ("Unexpected
  execution happens inside the compiled function, exiting", "Maximum number of
  different graphs allowed per function exceeded: N"), then lazax's explanation; the
  graph-count error then says, in torch_xla's IR words (``[] aten::add,
  xla_shape=f32[10]{0}, dynamic_dims: ()``), the operation where the new trace left the
  traces seen (``Got:``, or ``Reached the end of the function at:``) and what they have
  there (``Expected:`` / ``Expected either of:``), as torch_xla's detector does.
- ``step()``: a ``with`` block that syncs on entry (pending work is not part of it)
  and on exit, even when the body raises.
- ``manual_seed(seed, device=None)``: the device RNG's seed (random ops on the device
  repeat after it); CPU's RNG is not touched, as in torch_xla.
- ``launch(fn, args=(), start_method="spawn", debug_single_process=False)``: under
  torchrun, ``fn(local_ordinal, *args)`` in this process; otherwise
  ``xmp.spawn``'s single process (lazax drives every local device from one process).
- ``add_step_closure(closure, args=(), run_async=False)``: ``closure(*args)`` after the
  next ``sync()`` (its tensors then hold values).
"""

from __future__ import annotations

import contextlib
import functools
import os

import torch

import lazax.modes as lx

from . import _counters

__all__ = [
    "DEVICE_TYPE",
    "add_step_closure",
    "compile",
    "device",
    "device_count",
    "devices",
    "launch",
    "manual_seed",
    "real_devices",
    "step",
    "sync",
]

# "xla" when torch_xla was imported before lazax (``_env``), else lazax's own "lazax".
DEVICE_TYPE = lx.device_type()  # asks without starting the runtime (see xla_backend)

_CLOSURES: list = []


def device(index: int | None = None) -> torch.device:
    """The lazax device ``index`` (0 when None), torch_xla's ``xla:<index>``."""
    index = 0 if index is None else int(index)
    if not 0 <= index < lx.device_count():  # torch_xla's error for a device it lacks
        raise IndexError(f"device index {index} out of range: {lx.device_count()} devices")
    return lx.device(index)


def devices() -> list[torch.device]:
    """Every device of this process."""
    return [lx.device(i) for i in range(lx.device_count())]


def real_devices() -> list[str]:
    """The hardware devices, as torch_xla names them (``"CPU:0"``, ...)."""
    kind = os.environ.get("PJRT_DEVICE", "CPU").strip().upper() or "CPU"
    kind = "CUDA" if kind == "GPU" else kind
    return [f"{kind}:{i}" for i in range(lx.device_count())]


def device_count() -> int:
    """How many devices this process drives."""
    return lx.device_count()


def add_step_closure(closure, args=(), run_async: bool = False) -> None:
    """Run ``closure(*args)`` after the next ``sync()``/``mark_step()`` (in order).
    ``run_async`` is accepted; closures run in the syncing thread either way."""
    _CLOSURES.append((closure, tuple(args)))


def sync(wait: bool = False, reset_scope: bool = True) -> None:
    """torch_xla's ``sync``/``mark_step``: run the pending graph, then step closures."""
    lx.sync(wait=wait)
    _counters.bump("MarkStep")
    while _CLOSURES:
        closure, args = _CLOSURES.pop(0)
        closure(*args)


# lazax's words -> torch_xla's, put first so that a torch_xla user recognizes the error
_WORDS = (
    (
        "where execution is not allowed",
        "Unexpected execution happens inside the compiled function, exiting",
    ),
    (
        "max_different_graphs=",
        "Maximum number of different graphs allowed per function exceeded: {limit}",
    ),
)


# lazax's dtype names -> XLA's primitive type names, as torch_xla prints its IR
_XLA_TYPES = {
    "bool": "pred",
    "int8": "s8",
    "int16": "s16",
    "int32": "s32",
    "int64": "s64",
    "uint8": "u8",
    "uint16": "u16",
    "uint32": "u32",
    "uint64": "u64",
    "float16": "f16",
    "bfloat16": "bf16",
    "float32": "f32",
    "float64": "f64",
    "complex64": "c64",
    "complex128": "c128",
    "float8_e4m3fn": "f8e4m3fn",
    "float8_e5m2": "f8e5m2",
}


def _xla_shape(spec) -> str:
    dims = ",".join(map(str, spec.shape))
    layout = "{" + ",".join(map(str, reversed(range(len(spec.shape))))) + "}" if spec.shape else ""
    return f"{_XLA_TYPES.get(spec.dtype, spec.dtype)}[{dims}]{layout}"


def _ir_line(op) -> str:
    """One operation as torch_xla's IR text names it: ``[] aten::add, xla_shape=f32[10]{0},
    dynamic_dims: ()`` (the overload name dropped, as torch_xla's IR has none)."""
    if op is None:
        return "(the end of the function)"
    shapes = [_xla_shape(spec) for spec in op.specs]
    shape = shapes[0] if len(shapes) == 1 else "(" + ", ".join(shapes) + ")"
    return f"[] {op.op.split('.')[0]}, xla_shape={shape}, dynamic_dims: ()"


def _graph_limit_words(err: lx.GraphLimitExceeded) -> str:
    """torch_xla's report of its dynamic-shape detector: where the new trace left the
    traces already seen (lazax compares the operations of the graphs as the same trie)."""
    lines = [f"Maximum number of different graphs allowed per function exceeded: {err.limit}"]
    if err.got is not None:
        lines.append(f"Got: {_ir_line(err.got)}")
    elif err.index > 0:
        lines.append(
            f"Reached the end of the function at: {_ir_line(err.operations[err.index - 1])}"
        )
    if len(err.expected) == 1:
        lines.append(f"Expected: {_ir_line(err.expected[0])}")
    else:
        lines.append("Expected either of:")
        lines += [f"  - {_ir_line(op)}" for op in err.expected]
    return "\n".join(lines)


def _in_torch_xla_words(err: RuntimeError, limit) -> RuntimeError:
    text = str(err)
    if isinstance(err, lx.GraphLimitExceeded):
        return RuntimeError(f"{_graph_limit_words(err)}\n{text}")
    for marker, words in _WORDS:
        if marker in text:
            return RuntimeError(f"{words.format(limit=limit)}\n{text}")
    return err


class _Region:
    """``lx.compile``'s region whose errors start in torch_xla's words. A wrapped
    function stays a function (so a decorated method binds ``self``)."""

    def __init__(self, region, limit, options) -> None:
        self._region, self._limit, self._options = region, limit, options

    def __enter__(self):
        self._region.__enter__()
        return self

    def __exit__(self, exc_type, exc, tb):
        try:
            self._region.__exit__(exc_type, exc, tb)
        except RuntimeError as err:
            translated = _in_torch_xla_words(err, self._limit)
            if translated is err:
                raise
            raise translated from err
        if isinstance(exc, RuntimeError):
            translated = _in_torch_xla_words(exc, self._limit)
            if translated is not exc:
                raise translated
        return False

    def __call__(self, *args, **kwargs):
        if self._region.fn is None:  # @torch_xla.compile(full_graph=True) on a function
            if len(args) == 1 and not kwargs and callable(args[0]):
                return compile(args[0], **self._options)
            raise TypeError("this torch_xla.compile() block wraps no function")
        with self:
            return self._region.fn(*args, **kwargs)


def compile(
    f=None,
    full_graph: bool = False,
    name: str | None = None,
    max_different_graphs: int | None = None,
):
    """torch_xla.compile: ``f`` traced as one graph per call (``lx.compile``); with no
    ``f``, a ``with`` block. Errors begin with torch_xla's words, then lazax's."""
    region = lx.compile(
        f, full_graph=bool(full_graph), name=name, max_different_graphs=max_different_graphs
    )
    options = dict(full_graph=full_graph, name=name, max_different_graphs=max_different_graphs)
    wrapped = _Region(region, max_different_graphs, options)
    if f is None:
        return wrapped

    @functools.wraps(f)
    def compiled(*args, **kwargs):
        return wrapped(*args, **kwargs)

    return compiled


@contextlib.contextmanager
def step():
    """``with torch_xla.step():``: the block's work is one step, synced at its end."""
    sync()
    try:
        yield
    finally:
        sync()


def manual_seed(seed: int, device=None) -> None:
    """Seed the device's random number generator (not the CPU's)."""
    torch.get_device_module(DEVICE_TYPE).manual_seed(int(seed))


def launch(fn, args=(), start_method: str = "spawn", debug_single_process: bool = False):
    """Run ``fn(index, *args)``: under torchrun in this process with its local rank,
    otherwise once, in this process (``xmp.spawn`` with the one process lazax uses)."""
    if "TORCHELASTIC_RUN_ID" in os.environ or "LOCAL_RANK" in os.environ:
        return fn(int(os.environ.get("LOCAL_RANK", "0")), *args)
    return fn(0, *args)
