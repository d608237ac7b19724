"""Device-side checks: errors that depend on values, raised as torch raises them.

An index out of range, a class target past the number of classes, a negative
probability: torch's CPU kernels raise, XLA clamps or fills. A checked lowering
(``ops._registry``: ``checked=True`` and ``ctx.check``) makes its program also compute
whether any value was bad and the first bad one; that costs a reduction fused into
the same executable, never a second program and never a host read while it runs.

Contract:
- ``CHECKS.enabled``: on unless ``LAZAX_CHECKS=0``. It is part of every cache key
  (``barrier.keys``), so turning it off or on compiles again, and nothing else does.
- ``trace_site()``: ``(file, line, function)`` of the user's innermost frame outside
  lazax, torch and generated code; the tensor layer keeps it in ``node.data`` of each
  checked op it traces (never hashed), so that the error names where the op was traced.
- A program with checks has one more output, the flags; the barrier (and the dynamo
  replay) ``CHECKS.queue`` it with what the error needs.
- ``CHECKS.hold(t)``: a check's result that no tensor of the user's depends on
  (``torch.linalg.inv``'s ``_linalg_check_errors``) is held until the next sync, or
  read of any tensor, runs it in the same graph (``take_held``).
- ``CHECKS.poll()``: at every sync, before anything else, the flags of the oldest
  executions that have finished are read (the device is never waited for, unless more
  than ``MAX_UNREAD`` executions are unread); ``CHECKS.read_finished()``: after every
  read to the host, every finished execution's flags are read (the read value's
  program has finished, and so have its flags: they are outputs of one execution);
  ``CHECKS.resolve()``: in ``sync(wait=True)`` and ``wait_device_ops``, all of them
  are read, waiting as needed. The
  first bad check raises torch's exception type with torch's message, then where the op
  was traced, and what the tensors now hold:
  * a graph that donated nothing: every tensor computed from the bad op is put back as
    it was before that graph (its pending IR, as a failed execution leaves it), so
    reading it or anything computed from it raises again, as the op would on the CPU
    (``sync()`` of everything leaves it alone); every other tensor of the graph keeps
    its (correct) result;
  * a graph that donated its inputs (or a dynamo replay), or one whose check is still
    unread when the next sync starts (the undo would hold buffers that sync may
    donate): the tensors hold the graph's results, computed with the bad values
    clamped;
  * eager mode: each op's checks are read as it runs, so the op itself raises (as on
    the CPU) and its outputs are never handed out; an in-place op leaves its target as
    it was (``dispatch``).
  Only that execution's checks are dropped; later executions are checked in turn.
"""

from __future__ import annotations

import builtins
import sys
from collections import deque
from contextlib import contextmanager

import torch

from lazax import ir

from ..config import settings
from ..state.storage import is_storage
from .debug import LIBRARY_FILES as _LIBRARY_FILES
from .debug import _is_library

__all__ = ["CHECKS", "is_check_error", "restored_if_check_fails", "trace_site"]

# Executions whose flags may wait unread before a sync waits for the oldest (bounds the
# queue when the host runs far ahead of the device).
MAX_UNREAD = 4

# Code that torch generates (FX graph modules) or Python freezes: not the user's.
_GENERATED = ("<eval_with_key", "<frozen", "<string>")


def trace_site() -> tuple[str, int, str] | None:
    """The user's frame that is tracing the current op (cheap: no traceback objects).
    Under dynamo, the FX graph's generated code is skipped: the frame named is the
    call of the compiled function."""
    frame = sys._getframe(1)
    while frame is not None:
        code = frame.f_code
        name = code.co_filename
        library = _LIBRARY_FILES.get(name)
        if library is None:
            library = _LIBRARY_FILES[name] = name.startswith(_GENERATED) or _is_library(name)
        if not library:
            return name, frame.f_lineno, code.co_name
        frame = frame.f_back
    return None


# What the tensors hold after a failed check, by how the program ran.
_STATE = {
    "reverted": (
        "That graph donated nothing: the {reverted} tensor(s) computed from this op are as "
        "they were before it, so reading one (or what is computed from it) raises again; "
        "sync() leaves them alone, and every other tensor holds its result."
    ),
    "donated": (
        "That graph's inputs were donated (written over), so the tensors hold its "
        "results, computed with the offending values clamped."
    ),
    "later": (
        "Later graphs ran before this check was read, so the tensors hold this graph's "
        "results, computed with the offending values clamped."
    ),
    "replay": (
        "The replayed graph's results are kept: its outputs and the inputs it writes hold "
        "what it computed with the offending values clamped."
    ),
    "eager": "Eager mode: the op raised before returning; its results were not kept.",
}


# The checks' error types that are torch's own, by name (the rest are builtins).
_TORCH_ERRORS = {"LinAlgError": torch.linalg.LinAlgError}


class _Unread:
    __slots__ = ("flags", "checks", "sites", "graph_name", "kept", "undo")

    def __init__(self, flags, checks, sites, graph_name, kept, undo) -> None:
        self.flags = flags
        self.checks = checks
        self.sites = sites
        self.graph_name = graph_name
        self.kept = kept  # a key of _STATE
        self.undo = undo  # (targets, roots, results, the checked nodes) or None


class DeviceChecks:
    def __init__(self) -> None:
        self.enabled = settings().checks
        self.unread: deque[_Unread] = deque()
        # Pending results of checks that nothing else reads (``lazax::linalg_check``):
        # held until a sync includes them.
        self.held: list = []

    def hold(self, tensor) -> None:
        """Keep ``tensor`` (a pending check's result) until the next sync or read of
        anything includes it in its graph (``take_held``)."""
        self.held.append(tensor)

    def take_held(self) -> list:
        """The held checks that are still pending; the barrier adds them to the graph it
        runs (and holds them again if that fails before running)."""
        held, self.held = self.held, []
        return [t for t in held if t._lz_storage.pending]

    def queue(self, flags, checks, sites, graph_name, kept: str, undo=None) -> None:
        """An execution's flags (its program's last output) and its ``checks`` (the
        executable's ``annotations``). ``sites``: per check, ``(op name, trace_site()
        or None)``; ``kept``: what the tensors hold if a check failed: ``"reverted"``
        (``undo`` is ``(targets, roots, results, nodes)``: what each root's result
        replaced and, per check, its node), ``"donated"``, ``"replay"`` or ``"eager"``
        (the caller resolves at once and keeps nothing)."""
        self.unread.append(_Unread(flags, checks, sites, graph_name, kept, undo))

    def poll(self, runtime) -> None:
        """At a sync, before anything else: read the flags of finished executions,
        oldest first, up to the first that is still running; raise the first error.
        The ones left unread give up their undo: what it holds (the graph's results and
        its inputs' IR) would keep this sync from donating them, so if they fail, their
        results stay (``"later"``)."""
        unread = self.unread
        while unread:
            oldest = unread[0]
            if len(unread) <= MAX_UNREAD and not runtime.is_ready(oldest.flags):
                break
            self._read(runtime, unread.popleft())
        for item in unread:
            if item.undo is not None:
                item.undo = None
                item.kept = "later"

    def read_finished(self, runtime) -> None:
        """After a read to the host: read the flags of every execution that has
        finished (the one that computed the value read among them: its outputs are
        ready together), oldest first, never waiting; raise the first error. Waiting
        for all (``resolve``) would stall the step a loop keeps in flight."""
        for item in [u for u in self.unread if runtime.is_ready(u.flags)]:
            self.unread.remove(item)
            self._read(runtime, item)

    def resolve(self, runtime) -> None:
        """Read every queued flag (waiting for the executions); raise the first error."""
        unread = self.unread
        while unread:
            self._read(runtime, unread.popleft())

    def forget(self) -> None:
        """Drop every unread and held check (tests, after a deliberate failure)."""
        self.unread.clear()
        self.held.clear()

    def _read(self, runtime, item: _Unread) -> None:
        rows = runtime.to_host(item.flags).tolist()
        failed = [k for k, (bad, _) in enumerate(rows) if bad]
        if failed:
            k = failed[0]
            raise self._error(item, k, rows[k][1], failed)

    def _error(self, item: _Unread, k: int, value: int, failed: list) -> Exception:
        _, error, message = item.checks[k]
        op, site = item.sites[k]
        where = f"{site[0]}:{site[1]} (in {site[2]})" if site else "an unknown place"
        graph = f" in graph '{item.graph_name}'" if item.graph_name else ""
        reverted = 0
        if item.undo:
            targets, roots, results, nodes = item.undo
            reverted = _revert(targets, roots, results, {id(nodes[j]) for j in failed})
        when = "when it ran" if item.kept == "eager" else "at the first sync or read after it ran"
        note = (
            f"\n\nlazax: raised by a check on the device: the op {op} traced at "
            f"{where}{graph}; reported {when}. {_STATE[item.kept].format(reverted=reverted)} "
            f"(LAZAX_CHECKS=0 turns these checks off.)"
        )
        if type(message) is tuple:  # the value chose among several messages
            message = message[value]
        text = message(value) if callable(message) else message.format(value=value)
        err = _TORCH_ERRORS.get(error, None) or getattr(builtins, error)
        err = err(text + note)
        err.lazax_device_check = True  # what ``is_check_error`` reads
        return err


def is_check_error(err: BaseException) -> bool:
    """Whether ``err`` was raised by a failed device-side check."""
    return getattr(err, "lazax_device_check", False)


@contextmanager
def restored_if_check_fails(before: list):
    """Around an eager in-place op's sync: ``before`` lists ``(storage, value)``; when a
    check fails, each storage gets its value back (its IR held the bad write), so the
    target is unchanged, as on the CPU."""
    try:
        yield
    except Exception as err:
        if is_check_error(err):
            for storage, value in before:
                if storage.value is not value:
                    storage.set(value)
        raise


def _revert(targets, roots, results, bad: set[int]) -> int:
    """Put each target computed from a node in ``bad`` (ids) back on its pending IR
    (unless it was written since); the others keep their results."""
    count = 0
    for target, root, result in zip(targets, roots, results):
        if not any(id(node) in bad for node in ir.post_order([root])):
            continue
        if is_storage(target):
            count += target.revert(result, root)
        elif target._lz_value is result:  # a view tensor synced on its own
            target._lz_value = root
            count += 1
    return count


CHECKS = DeviceChecks()
