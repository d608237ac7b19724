"""The CPU fallback: ops with no lowering still run, on the CPU, and are counted.

Contract: ``fallback(func, args, kwargs)`` bumps the counter named by the op's schema
(``aten::<op>``; a custom op's own namespace, ``mylib::<op>``), counts as
an execution (refused inside ``compile(full_graph=True)``), reads every lazax argument
to the CPU (syncing it), runs torch's CPU kernel, writes every argument the op mutates
back into its lazax tensor (through views), and uploads the new outputs. Outputs that
alias a mutated argument come back as that argument. A program never fails only
because an op has no lowering; it is slower, and the counter says which op.

No silent CPU work (``LAZAX_FALLBACK``, read at each fallback): ``warn`` (the default)
warns the first time each op falls back in the process (a ``UserWarning`` naming the op,
the user's file and line that called it, the counter, and the switch); ``silent`` only
counts; ``error`` raises ``RuntimeError`` at the call, before anything runs. A factory
of ``dispatch.kernels`` with no rule (none today: ``full``, ``linspace``, ``randperm``...
are lowered) is built on the host with ``notice=False``: counted, never warned about or
refused (no device input to read).
"""

from __future__ import annotations

import warnings

import torch

from .. import metrics
from ..barrier.checks import trace_site
from ..barrier.executor import EXECUTOR
from ..config import settings
from ..state.layout import Layout
from ..state.values import write
from ..tensor.lazy import LazyTensor, new_tensor, resize_to
from ..tensor.transfer import from_cpu, to_cpu

__all__ = ["fallback", "forget_warnings"]


def _to_cpu_arg(value):
    if type(value) is LazyTensor:
        return to_cpu(value)
    if type(value) in (list, tuple):
        return type(value)(_to_cpu_arg(v) for v in value)
    if isinstance(value, torch.device) and value.type != "cpu":
        return torch.device("cpu")
    return value


def _device_index(args) -> int:
    for a in args:
        if type(a) is LazyTensor:
            return a._lz_storage.device_index
        if type(a) in (list, tuple):
            for x in a:
                if type(x) is LazyTensor:
                    return x._lz_storage.device_index
    return 0


def _written(func) -> tuple[set[int], set[str]]:
    """Positions and keyword names of the arguments ``func`` writes (in place, out=)."""
    positions, names = set(), set()
    for k, a in enumerate(func._schema.arguments):
        if a.alias_info is not None and a.alias_info.is_write:
            (names if a.kwarg_only else positions).add(a.name if a.kwarg_only else k)
    return positions, names


def _resizable(value):
    if isinstance(value, torch.Tensor):
        return value.clone()
    if type(value) in (list, tuple):
        return type(value)(_resizable(v) for v in value)
    return value


_WARNED: set[str] = set()  # ops warned about in this process


def _where() -> tuple[str, str | None, int]:
    site = trace_site()
    if site is None:
        return "<unknown>", None, 0
    filename, line, function = site
    return f"{filename}:{line} (in {function})", filename, line


def _notice(name: str) -> None:
    """Warn about (or refuse) a CPU fallback of ``name``, as ``LAZAX_FALLBACK`` says."""
    mode = settings().fallback
    if mode == "silent" or (mode == "warn" and name in _WARNED):
        return
    where, filename, line = _where()
    if mode == "error":
        raise RuntimeError(
            f"lazax: {name} has no lowering for this call and would run on the CPU, at "
            f"{where}; LAZAX_FALLBACK=error makes that an error. Unset LAZAX_FALLBACK (or "
            f"set it to warn) to let it run on the CPU, counted in "
            f"lx.metrics.counter_value({name!r})."
        )
    _WARNED.add(name)
    message = (
        f"lazax: {name} has no lowering for this call and ran on the CPU (called at "
        f"{where}): each such call syncs, copies its inputs to the host and its results "
        f"back. lx.metrics.counter_value({name!r}) counts them. LAZAX_FALLBACK=error "
        f"makes these calls raise where they happen; LAZAX_FALLBACK=silent hides this "
        f"warning (given once per op and process)."
    )
    if filename is None:
        warnings.warn(message, UserWarning, stacklevel=2)
    else:  # attributed to the user's line, as if their call had warned
        warnings.warn_explicit(message, UserWarning, filename, line)


def forget_warnings() -> None:
    """Warn again about ops already warned about (tests)."""
    _WARNED.clear()


def fallback(func, args, kwargs, notice: bool = True):
    name = func._schema.name
    EXECUTOR.check_execution_allowed(f"a CPU fallback of {name}")
    if notice:
        _notice(name)  # raises before anything runs under LAZAX_FALLBACK=error
    metrics.bump(name)  # counted only once it is allowed to run
    # Written tensors are cloned: the CPU kernel may resize them (out=, and in place:
    # addbmm_ on a (1,) self), and a tensor over a numpy buffer cannot be resized.
    positions, names = _written(func)
    cpu_args = [
        _resizable(_to_cpu_arg(a)) if k in positions else _to_cpu_arg(a) for k, a in enumerate(args)
    ]
    cpu_kwargs = {
        k: _resizable(_to_cpu_arg(v)) if k in names else _to_cpu_arg(v) for k, v in kwargs.items()
    }
    out = func(*cpu_args, **cpu_kwargs)
    index = _device_index(list(args) + list(kwargs.values()))
    device = kwargs.get("device")
    if isinstance(device, torch.device) and device.index is not None:
        index = device.index
    written: dict[int, LazyTensor] = {}  # id(cpu tensor) -> its lazax original
    schema_args = func._schema.arguments
    for i, arg in enumerate(schema_args):
        if not (arg.alias_info and arg.alias_info.is_write):
            continue
        lazy = args[i] if i < len(args) and not arg.kwarg_only else kwargs.get(arg.name)
        cpu = cpu_args[i] if i < len(args) and not arg.kwarg_only else cpu_kwargs.get(arg.name)
        pairs = zip(lazy, cpu) if isinstance(lazy, (list, tuple)) else [(lazy, cpu)]
        for lz, c in pairs:
            if type(lz) is LazyTensor:
                if tuple(c.shape) != tuple(lz.shape):  # an out= tensor the kernel resized
                    resize_to(lz, tuple(c.shape), from_cpu(c.contiguous(), index))
                else:
                    write(lz, from_cpu(c, index))
                written[id(c)] = lz

    def back(o):
        if isinstance(o, torch.Tensor):
            if id(o) in written:
                return written[id(o)]
            if o.layout != torch.strided:
                raise RuntimeError(
                    f"{name} gives a {o.layout} tensor, and lazax tensors are strided "
                    f"(dense) only. Make sparse tensors on the CPU, e.g. "
                    f"x.cpu().to_sparse(), and densify them before moving to lazax."
                )
            return new_tensor(from_cpu(o, index), Layout(tuple(o.shape), o.dtype), index)
        if type(o) in (list, tuple):
            return type(o)(back(x) for x in o)
        return o

    return back(out)
