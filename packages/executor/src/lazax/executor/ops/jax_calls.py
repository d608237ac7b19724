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
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import jax
import jax.numpy as jnp
import numpy as np
import torch

from ._registry import lowering

__all__ = ["CALLS", "JaxCall", "differentiable_dtype"]


@dataclass(frozen=True)
class JaxCall:
    name: str  # the function's qualified name, for errors and dumps
    flat_fn: Callable  # jax arrays (the tensor leaves) -> list of jax arrays
    outputs: tuple  # of (shape, torch dtype)
    differentiable: tuple  # of bool, one per input leaf


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


_LIB.impl("call_jax", _call_cpu, "CPU")
_LIB.impl("call_jax_vjp", _call_vjp_cpu, "CPU")
torch.library.register_fake("lazax::call_jax", _call_fake, lib=_LIB)
torch.library.register_fake("lazax::call_jax_vjp", _call_vjp_fake, lib=_LIB)


def _setup_context(ctx, inputs, output) -> None:
    args, fn = inputs
    ctx.save_for_backward(*args)
    ctx.fn = fn


def _backward(ctx, grads):
    args = ctx.saved_tensors
    entry = _call(ctx.fn)
    cotangents = [
        g if g is not None else torch.zeros(shape, dtype=dtype, device=args[0].device)
        for g, (shape, dtype) in zip(grads, entry.outputs)
    ]
    got = iter(torch.ops.lazax.call_jax_vjp(list(args), cotangents, ctx.fn))
    return [next(got) if d else None for d in entry.differentiable], None


torch.library.register_autograd(
    "lazax::call_jax", _backward, setup_context=_setup_context, lib=_LIB
)


def _vjp(entry: JaxCall, args, cotangents) -> list:
    wanted = [i for i, d in enumerate(entry.differentiable) if d]

    def primal(*diff):
        full = list(args)
        for i, a in zip(wanted, diff):
            full[i] = a
        return list(entry.flat_fn(*full))

    outs, pullback = jax.vjp(primal, *[args[i] for i in wanted])
    cts = []
    for out, ct in zip(outs, cotangents):
        if jnp.issubdtype(out.dtype, jnp.inexact):
            cts.append(jnp.asarray(ct).astype(out.dtype))
        else:  # integer and boolean outputs have no cotangent
            cts.append(np.zeros(out.shape, jax.dtypes.float0))
    return list(pullback(cts))


@lowering("lazax::call_jax")
def call_jax(ctx, args, fn):
    return list(_call(fn).flat_fn(*args))


@lowering("lazax::call_jax_vjp")
def call_jax_vjp(ctx, args, cotangents, fn):
    return _vjp(_call(fn), args, cotangents)
