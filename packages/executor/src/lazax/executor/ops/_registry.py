"""The op library's registry: aten op -> jax lowering.

Contract:
- ``@lowering(aten.x.overload, ...)`` registers a plain function
  ``fn(ctx, *args, **kwargs)`` for those aten overloads. ``args``/``kwargs`` are the aten
  op's own arguments with every tensor replaced by a jax array (lifted Python scalars
  become 0-dim arrays too). It returns a jax array, or a tuple/list of them for ops with
  several outputs; each output is cast to the dtype torch gives it, so a rule only has
  to compute in the right precision.
- Registering an overload twice is an error (``DuplicateLoweringError``), wherever the
  two rules live.
- ``ctx.out`` holds the output specs (``shape``, numpy ``dtype``) torch infers for the
  call; ``ctx.key`` is a fresh jax PRNG key for rules registered with ``random=True``.
- A rule registered with ``checked=True`` may call ``ctx.check(bad, values, error,
  message)`` for an error torch raises from the *values* (an index out of range): the
  program also computes whether any element of ``bad`` is true and the first offending
  value, and the executor raises ``error(message.format(value=...))`` when it reads
  that (see ``barrier.checks``). With checks off (``LAZAX_CHECKS=0``) ``ctx.check`` does
  nothing. The tensor layer records where such ops were traced (``checked_ops``).
- In-place (``add_``) and functional (``add``) overloads share one rule: register the
  functional one; the tensor layer writes the result back for the in-place form.
- ``collective=True`` marks a rule that communicates between the job's processes
  (``jax.lax.psum`` over ``lazax.pjrt.PROCESS_AXIS``, ...): a graph holding one is
  compiled as a program every process runs on its own values (``barrier.lower`` says so).
- ``copies=True`` marks a rule for an op whose schema says it aliases its input but
  which lazax computes as a new tensor: ``_conj``, a view with torch's conjugate bit,
  which lazax tensors do not carry (the tensor layer then treats it as functional).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import jax.numpy as jnp

__all__ = [
    "DuplicateLoweringError",
    "Lowering",
    "LoweringContext",
    "get_lowering",
    "lowering",
    "op_name",
    "checked_ops",
    "registered_ops",
]


class DuplicateLoweringError(RuntimeError):
    """Two lowering rules were registered for the same aten overload."""


@dataclass(frozen=True)
class Lowering:
    fn: Callable[..., Any]
    random: bool
    where: str
    checked: bool = False
    copies: bool = False
    collective: bool = False


@dataclass
class LoweringContext:
    out: tuple  # of (shape tuple, numpy dtype)
    key: Any = None
    # (any bad, first bad value, error name, message) per ``check``; None: checks off.
    checks: list | None = None
    # Indices of the outputs nothing in the graph reads (neither a root nor an operand):
    # a rule may return anything of the right shape there, and skip computing them.
    unread: frozenset = frozenset()

    def check(self, bad, values, error: str, message) -> None:
        """Report ``error`` (a builtin exception's name, or ``"LinAlgError"``) with
        ``message`` (``{value}``: the first element of ``values`` where ``bad`` holds) if
        any ``bad`` is true. ``message`` may be a tuple (the first bad value picks the
        message) or a picklable callable (given the value, returns the message)."""
        if self.checks is None or bad.size == 0:
            return
        flat = bad.reshape(-1)
        if values is None:
            first = jnp.zeros((), jnp.int64)
        else:
            first = jnp.broadcast_to(values, bad.shape).reshape(-1)[jnp.argmax(flat)]
        self.checks.append((jnp.any(flat), first.astype(jnp.int64), error, message))

    @property
    def dtype(self):
        """dtype of the first output."""
        return self.out[0][1]

    @property
    def shape(self):
        """shape of the first output."""
        return self.out[0][0]


_LOWERINGS: dict[str, Lowering] = {}
_CHECKED: set[str] = set()


def op_name(op: Any) -> str:
    """The registry's key for ``op``: ``"aten::add.Tensor"`` (or the string itself)."""
    return op if isinstance(op, str) else op.name()


def lowering(
    *ops: Any,
    random: bool = False,
    checked: bool = False,
    copies: bool = False,
    collective: bool = False,
):
    """Register the decorated function as the jax lowering of ``ops``."""

    def register(fn: Callable[..., Any]) -> Callable[..., Any]:
        where = f"{fn.__module__}.{fn.__qualname__}"
        for op in ops:
            name = op_name(op)
            if name in _LOWERINGS:
                raise DuplicateLoweringError(
                    f"aten op {name} already has a lowering "
                    f"({_LOWERINGS[name].where}); {where} registers it again. "
                    f"Remove one of them."
                )
            _LOWERINGS[name] = Lowering(fn, random, where, checked, copies, collective)
            if checked:
                _CHECKED.add(name)
        return fn

    return register


def get_lowering(op: Any) -> Lowering | None:
    return _LOWERINGS.get(op if isinstance(op, str) else op.name())


def checked_ops() -> set[str]:
    """The ops whose lowerings check values on the device (the live set)."""
    return _CHECKED


def registered_ops() -> list[str]:
    return sorted(_LOWERINGS)
