"""JAX functions as graph nodes: the ``lazax::call_jax`` op and its backward.

Contract:
- ``CALLS`` maps a function code (an int, stable across processes: ``interop`` makes
  it from the function's jaxpr) to a ``JaxCall``: a function of the call's tensor
  leaves (jax arrays) returning a list of jax arrays, the outputs' shapes and torch
  dtypes, and which inputs are differentiable (floating or complex).
- ``torch.ops.lazax.call_jax(args, fn)`` (``Tensor[] -> Tensor[]``) runs ``CALLS[fn]``:
  on lazax tensors it is one node of the traced graph (the rule here), on CPU tensors it
  runs through jax on the host. Its fake kernel gives the outputs' specs, so meta
  tensors, FakeTensors and dynamo see it as any op.
- Autograd: the backward is ``torch.ops.lazax.call_jax_vjp(args, cotangents, fn)``,
  lowered as ``jax.vjp`` of the same function (``jax.custom_vjp`` rules respected),
  returning one gradient per differentiable input. A second backward through it is not
  supported (torch says so).
- A function called where gradients are wanted is registered a second time, as its
  forward with residuals (``JaxCall.pullback`` set): its outputs are the function's,
  then the leaves of ``jax.vjp``'s pullback (what the backward reads: a loop's saved
  activations). Its backward is ``torch.ops.lazax.call_jax_pullback(residuals,
  cotangents, fn)``, that pullback rebuilt from them, so the forward is computed once.
  Why: recomputing it from the inputs in the backward (``call_jax_vjp``) ran every
  loop twice, as XLA merges equal ops but not two loops that differ in what they keep
  (a scanned decoder's step had three while loops where JAX's has two).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
import torch

from ._registry import lowering

__all__ = ["CALLS", "JaxCall", "Pullback", "differentiable_dtype", "pullback_leaves"]


@dataclass(frozen=True)
class Pullback:
    """How a forward-with-residuals entry's backward rebuilds ``jax.vjp``'s pullback."""

    count: int  # the function's own outputs (the residuals follow them)
    tree: Any  # the pullback's treedef: its leaves are the residuals
    primal: tuple  # the function's outputs as jax.ShapeDtypeStruct (their cotangents')
    grads: tuple  # (shape, torch dtype) of each differentiable input's gradient


@dataclass(frozen=True)
class JaxCall:
    name: str  # the function's qualified name, for errors and dumps
    flat_fn: Callable  # jax arrays (the tensor leaves) -> list of jax arrays
    outputs: tuple  # of (shape, torch dtype)
    differentiable: tuple  # of bool, one per input leaf
    pullback: Pullback | None = None  # set: a forward with residuals (see above)


CALLS: dict[int, JaxCall] = {}


def differentiable_dtype(dtype: torch.dtype) -> bool:
    return dtype.is_floating_point or dtype.is_complex


def _call(code: int) -> JaxCall:
    entry = CALLS.get(code)
    if entry is None:
        raise RuntimeError(
            f"lazax: no JAX function is registered under code {code}; torch.ops.lazax."
            f"call_jax is made by lazax.modes.call_jax, not called directly"
        )
    return entry


_LIB = torch.library.Library("lazax", "FRAGMENT")
_LIB.define("call_jax(Tensor[] args, int fn) -> Tensor[]")
_LIB.define("call_jax_vjp(Tensor[] args, Tensor[] cotangents, int fn) -> Tensor[]")
_LIB.define("call_jax_pullback(Tensor[] residuals, Tensor[] cotangents, int fn) -> Tensor[]")


def _host_run(fn: Callable, tensors: list) -> list:
    arrays = [jnp.asarray(t.detach().numpy(force=True)) for t in tensors]
    return [torch.from_numpy(np.array(out)) for out in fn(*arrays)]


def _call_cpu(args, fn):
    return _host_run(_call(fn).flat_fn, list(args))


def _call_vjp_cpu(args, cotangents, fn):
    def vjp(*arrays):
        return _vjp(_call(fn), arrays[: len(args)], arrays[len(args) :])

    return _host_run(vjp, [*args, *cotangents])


def _call_fake(args, fn):
    device = args[0].device if args else torch.device("meta")
    return [torch.empty(shape, dtype=dtype, device=device) for shape, dtype in _call(fn).outputs]


def _call_vjp_fake(args, cotangents, fn):
    wanted = _call(fn).differentiable
    return [torch.empty_like(a) for a, d in zip(args, wanted) if d]


def _pullback_cpu(residuals, cotangents, fn):
    def run(*arrays):
        return _pullback(_call(fn), arrays[: len(residuals)], arrays[len(residuals) :])

    return _host_run(run, [*residuals, *cotangents])


def _pullback_fake(residuals, cotangents, fn):
    device = (residuals or cotangents)[0].device
    grads = _call(fn).pullback.grads
    return [torch.empty(shape, dtype=dtype, device=device) for shape, dtype in grads]


_LIB.impl("call_jax", _call_cpu, "CPU")
_LIB.impl("call_jax_vjp", _call_vjp_cpu, "CPU")
_LIB.impl("call_jax_pullback", _pullback_cpu, "CPU")
torch.library.register_fake("lazax::call_jax", _call_fake, lib=_LIB)
torch.library.register_fake("lazax::call_jax_vjp", _call_vjp_fake, lib=_LIB)
torch.library.register_fake("lazax::call_jax_pullback", _pullback_fake, lib=_LIB)


def _setup_context(ctx, inputs, output) -> None:
    args, fn = inputs
    pullback = _call(fn).pullback
    # A forward with residuals keeps them (its own outputs), else its inputs.
    ctx.save_for_backward(*(args if pullback is None else output[pullback.count :]))
    ctx.fn = fn


def _backward(ctx, grads):
    saved = ctx.saved_tensors
    entry = _call(ctx.fn)
    pullback = entry.pullback
    count = len(entry.outputs) if pullback is None else pullback.count
    device = saved[0].device if saved else grads[0].device
    cotangents = [
        g if g is not None else torch.zeros(shape, dtype=dtype, device=device)
        for g, (shape, dtype) in zip(grads[:count], entry.outputs[:count])
    ]
    if pullback is None:
        got = iter(torch.ops.lazax.call_jax_vjp(list(saved), cotangents, ctx.fn))
    else:
        got = iter(torch.ops.lazax.call_jax_pullback(list(saved), cotangents, ctx.fn))
    return [next(got) if d else None for d in entry.differentiable], None


torch.library.register_autograd(
    "lazax::call_jax", _backward, setup_context=_setup_context, lib=_LIB
)


def pullback_leaves(flat_fn: Callable, differentiable: tuple, args) -> tuple[list, Any]:
    """``flat_fn(*args)``'s outputs and ``jax.vjp``'s pullback over the differentiable
    ``args`` (a pytree: its leaves are the residuals)."""
    wanted = [i for i, d in enumerate(differentiable) if d]

    def primal(*diff):
        full = list(args)
        for i, a in zip(wanted, diff):
            full[i] = a
        return list(flat_fn(*full))

    return jax.vjp(primal, *[args[i] for i in wanted])


def _cotangents(outs, cotangents) -> list:
    cts = []
    for out, ct in zip(outs, cotangents):
        if jnp.issubdtype(out.dtype, jnp.inexact):
            cts.append(jnp.asarray(ct).astype(out.dtype))
        else:  # integer and boolean outputs have no cotangent
            cts.append(np.zeros(out.shape, jax.dtypes.float0))
    return cts


def _vjp(entry: JaxCall, args, cotangents) -> list:
    outs, pullback = pullback_leaves(entry.flat_fn, entry.differentiable, args)
    return list(pullback(_cotangents(outs, cotangents)))


def _pullback(entry: JaxCall, residuals, cotangents) -> list:
    spec = entry.pullback
    pullback = jax.tree_util.tree_unflatten(spec.tree, list(residuals))
    return list(pullback(_cotangents(spec.primal, cotangents)))


@lowering("lazax::call_jax")
def call_jax(ctx, args, fn):
    return list(_call(fn).flat_fn(*args))


@lowering("lazax::call_jax_vjp")
def call_jax_vjp(ctx, args, cotangents, fn):
    return _vjp(_call(fn), args, cotangents)


@lowering("lazax::call_jax_pullback")
def call_jax_pullback(ctx, residuals, cotangents, fn):
    return _pullback(_call(fn), residuals, cotangents)
