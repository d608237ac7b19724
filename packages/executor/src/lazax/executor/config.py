"""Every setting of the executor, in one place: its constants and its ``LAZAX_*``
environment variables.

Contract: ``settings()`` reads the environment now and returns a ``Settings``; each
part of the executor reads it where it did before this module existed (the executor's
flags when it is made, a policy when it is made, the recompile printer at each
recompile), so a test or a launcher that sets a variable before that point is obeyed.

| variable | default | what it does |
|---|---|---|
| ``LAZAX_USE_EAGER_MODE`` | 0 | start in eager mode (every op runs at once) |
| ``LAZAX_PENDING_GRAPH_WARN_DEPTH`` | 20000 | warn (once) when a pending graph gets this deep |
| ``LAZAX_SCAN_LAYERS`` | 0 | loops over identical layers of a ModuleList as one XLA loop |
| ``LAZAX_DONATION`` | 1 | donate inputs that nothing can read after a sync |
| ``LAZAX_CHECKS`` | 1 | device-side checks of bad indices and targets (a key part) |
| ``LAZAX_DEBUG_RECOMPILES`` | 0 | print each recompile report to stderr |
| ``LAZAX_DISTRIBUTED_TIMEOUT`` | 300 | seconds a process waits for the others to agree |
| ``LAZAX_FALLBACK`` | warn | an op run on the CPU: ``warn`` once per op, ``silent``, ``error`` |
| ``LAZAX_DUMP_DIR`` | unset | write each compiled graph's IR, StableHLO and HLO there |
| ``LAZAX_DEVICE_NAME`` | lazax | the device's name, read once at import: ``lazax`` or ``xla`` |
| ``LAZAX_DEVICE_TIMING`` | 0 | time each run to the device's end, not its dispatch (``metrics``) |
| ``LAZAX_OP_METRICS`` | 0 | keep the per-op metrics (``LazyTracing``, tensors made and freed) |

The computation cache reads its own (``LAZAX_COMPILATION_CACHE_SIZE``,
``LAZAX_PERSISTENT_CACHE_DIR``, ``LAZAX_PERSISTENT_CACHE_READ_ONLY``: ``lazax.cache``),
and the runtime its device and its watchdog (``PJRT_DEVICE``, ``LAZAX_WATCHDOG_S``:
``lazax.pjrt``).
"""

from __future__ import annotations

import os
from dataclasses import dataclass

__all__ = ["DEVICE_NAME", "DEVICE_NAMES", "FALLBACK_MODES", "Settings", "settings"]

# The names torch's PrivateUse1 backend can be given. ``xla`` is for the torch_xla
# compatibility package: torch already knows the name (``torch.device("xla:0")``,
# ``device.type == "xla"`` in libraries), and once PrivateUse1 is renamed to it torch parses
# it as PrivateUse1, whose device guard a Python backend can register (torch's own XLA
# key has no device guard in torch, and autograd needs one for every tensor it records).
DEVICE_NAMES = ("lazax", "xla")


def _device_name(raw: str | None) -> str:
    name = (raw or "lazax").strip().lower()
    if name not in DEVICE_NAMES:
        raise ValueError(f"LAZAX_DEVICE_NAME={raw!r}: expected one of {', '.join(DEVICE_NAMES)}")
    return name


# torch's PrivateUse1 backend, renamed: tensors say ``device='lazax:0'`` (or ``xla:0``).
# Read once, at import: torch cannot rename a backend twice in one process.
DEVICE_NAME = _device_name(os.environ.get("LAZAX_DEVICE_NAME"))

_OFF = ("", "0", "false")

# What an op without a lowering does (``dispatch.fallback``): run on the CPU and warn
# once per op, run on the CPU silently, or raise at the call.
FALLBACK_MODES = ("warn", "silent", "error")


def _flag(name: str, default: bool) -> bool:
    raw = os.environ.get(name)
    if raw is None:
        return default
    return raw.strip().lower() not in _OFF


@dataclass(frozen=True)
class Settings:
    eager: bool
    pending_graph_warn_depth: int
    donation: bool
    checks: bool
    debug_recompiles: bool
    distributed_timeout_s: float
    scan_layers: bool
    fallback: str
    dump_dir: str | None
    device_timing: bool
    op_metrics: bool


def settings() -> Settings:
    """The executor's settings, as the environment gives them now."""
    env = os.environ
    return Settings(
        eager=_flag("LAZAX_USE_EAGER_MODE", False),
        pending_graph_warn_depth=int(env.get("LAZAX_PENDING_GRAPH_WARN_DEPTH", "20000")),
        donation=_flag("LAZAX_DONATION", True),
        checks=_flag("LAZAX_CHECKS", True),
        debug_recompiles=_flag("LAZAX_DEBUG_RECOMPILES", False),
        distributed_timeout_s=float(env.get("LAZAX_DISTRIBUTED_TIMEOUT", "300")),
        scan_layers=_flag("LAZAX_SCAN_LAYERS", False),
        fallback=_fallback_mode(env.get("LAZAX_FALLBACK")),
        dump_dir=env.get("LAZAX_DUMP_DIR") or None,
        device_timing=_flag("LAZAX_DEVICE_TIMING", False),
        op_metrics=_flag("LAZAX_OP_METRICS", False),
    )


def _fallback_mode(raw: str | None) -> str:
    mode = (raw or "warn").strip().lower()
    if mode not in FALLBACK_MODES:
        raise ValueError(
            f"LAZAX_FALLBACK={raw!r}: expected one of {', '.join(FALLBACK_MODES)} "
            f"(warn: run an op without a lowering on the CPU and warn once per op; "
            f"silent: run it without a warning; error: raise at the call)"
        )
    return mode
