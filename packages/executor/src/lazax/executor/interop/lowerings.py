"""``register_lowering``: a JAX function as the lowering of a torch op.

Contract of ``register_lowering(op, jax_fn)``:
- ``op``: a ``torch.library.custom_op``, an ``OpOverload`` (``torch.ops.aten.x.y``), a
  packet with a single overload, or its name (``"mylib::op"``, ``"aten::x.y"``).
- From then on, a call of ``op`` on lazax tensors is ``call_jax(jax_fn, *args,
  **kwargs)``: one node of the traced graph, in every mode, instead of the CPU fallback
  (or of lazax's own rule, which it replaces). ``jax_fn`` takes the op's arguments in
  the schema's order (tensors as jax arrays, missing defaults filled in) and returns
  what the op returns. Gradients are the op's own (its ``register_autograd``, or
  torch's formula for an aten op): the lowering computes the forward only.
- Errors: ``TypeError`` at registration when ``jax_fn`` cannot take the op's arguments;
  ``RuntimeError`` at the call when its outputs differ from what the op's fake (meta)
  kernel says in number, shape or dtype.
"""

from __future__ import annotations

import inspect
from collections.abc import Callable
from typing import Any

import torch

from ..dispatch.handlers import forget_handlers
from ..dispatch.special import register_special
from .calls import call_jax

__all__ = ["register_lowering"]


def _overload(op: Any):
    if isinstance(op, str):
        namespace, _, rest = op.partition("::")
        name, _, overload = rest.partition(".")
        packet = getattr(getattr(torch.ops, namespace), name)
        return getattr(packet, overload or "default")
    if isinstance(op, torch._ops.OpOverload):
        return op
    inner = getattr(op, "_opoverload", None)  # a torch.library.custom_op
    if inner is not None:
        return inner
    if isinstance(op, torch._ops.OpOverloadPacket):
        overloads = op.overloads()
        if len(overloads) != 1:
            raise TypeError(
                f"lazax.register_lowering: {op} has overloads {overloads}; pass one "
                f"(e.g. {op}.{overloads[0]})"
            )
        return getattr(op, overloads[0])
    raise TypeError(
        f"lazax.register_lowering expects a torch op (a custom_op, an OpOverload or its "
        f"name), got {type(op).__name__}"
    )


def _check_arity(func, jax_fn: Callable) -> None:
    arguments = func._schema.arguments
    positional = [None] * sum(not a.kwarg_only for a in arguments)
    keywords = {a.name: None for a in arguments if a.kwarg_only}
    try:
        inspect.signature(jax_fn).bind(*positional, **keywords)
    except TypeError as err:
        raise TypeError(
            f"lazax.register_lowering: the JAX lowering of {func.name()} must take its "
            f"arguments {func._schema.arguments}; {getattr(jax_fn, '__name__', jax_fn)} "
            f"cannot ({err})"
        ) from None
    except ValueError:  # no signature to read (a builtin): checked when called
        pass


def _filled(func, args: tuple, kwargs: dict) -> tuple[list, dict]:
    """The call's arguments with the schema's defaults for those it left out."""
    full, named = list(args), dict(kwargs)
    for k, a in enumerate(func._schema.arguments):
        if a.kwarg_only:
            if a.name not in named and a.has_default_value():
                named[a.name] = a.default_value
        elif k >= len(full):
            if a.name in named:
                full.append(named.pop(a.name))
            elif a.has_default_value():
                full.append(a.default_value)
    return full, named


def _as_meta(x):
    if isinstance(x, torch.Tensor):
        return torch.empty_strided(x.shape, x.stride(), dtype=x.dtype, device="meta")
    return x


def register_lowering(op: Any, jax_fn: Callable) -> None:
    """Lower ``op`` on lazax tensors with ``jax_fn`` (see the module docstring)."""
    func = _overload(op)
    _check_arity(func, jax_fn)
    checked: set = set()

    def run(args, kwargs):
        full, named = _filled(func, args, kwargs)
        out = call_jax(jax_fn, *full, **named)
        key = tuple(
            (tuple(x.shape), x.dtype) if isinstance(x, torch.Tensor) else None for x in full
        )
        if key not in checked:
            _check_outputs(func, full, named, out)
            checked.add(key)
        return out

    register_special({func: run})
    forget_handlers()


def _check_outputs(func, args: list, kwargs: dict, out) -> None:
    meta_args = torch.utils._pytree.tree_map(_as_meta, (args, kwargs))
    expected = func(*meta_args[0], **meta_args[1])
    want = expected if isinstance(expected, (tuple, list)) else (expected,)
    got = out if isinstance(out, (tuple, list)) else (out,)
    what = f"lazax.register_lowering: the JAX lowering of {func.name()}"
    if len(got) != len(want):
        raise RuntimeError(f"{what} returned {len(got)} outputs; the op returns {len(want)}")
    for k, (g, w) in enumerate(zip(got, want)):
        if tuple(g.shape) != tuple(w.shape) or g.dtype != w.dtype:
            raise RuntimeError(
                f"{what} returned {g.dtype}{list(g.shape)} as output {k}; the op's fake "
                f"kernel says {w.dtype}{list(w.shape)}"
            )
