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
- In-place (``add_``) and functional (``add``) overloads share one rule: register the
  functional one; the tensor layer writes the result back for the in-place form.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

__all__ = [
    "DuplicateLoweringError",
    "Lowering",
    "LoweringContext",
    "get_lowering",
    "lowering",
    "op_name",
    "registered_ops",
]


class DuplicateLoweringError(RuntimeError):
    """Two lowering rules were registered for the same aten overload."""


@dataclass(frozen=True)
class Lowering:
    fn: Callable[..., Any]
    random: bool
    where: str


@dataclass
class LoweringContext:
    out: tuple  # of (shape tuple, numpy dtype)
    key: Any = None

    @property
    def dtype(self):
        """dtype of the first output."""
        return self.out[0][1]

    @property
    def shape(self):
        """shape of the first output."""
        return self.out[0][0]


_LOWERINGS: dict[str, Lowering] = {}


def op_name(op: Any) -> str:
    """The registry's key for ``op``: ``"aten::add.Tensor"`` (or the string itself)."""
    return op if isinstance(op, str) else op.name()


def lowering(*ops: Any, random: bool = False):
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
            _LOWERINGS[name] = Lowering(fn, random, where)
        return fn

    return register


def get_lowering(op: Any) -> Lowering | None:
    return _LOWERINGS.get(op if isinstance(op, str) else op.name())


def registered_ops() -> list[str]:
    return sorted(_LOWERINGS)
