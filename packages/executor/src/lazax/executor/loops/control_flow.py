"""torch's control-flow operators on lazax tensors, as XLA's own control flow.

Contract: ``install()`` registers, for lazax tensors, the higher-order operators behind
``torch.cond``, ``torch._higher_order_ops.while_loop``, ``torch._higher_order_ops.scan``
and ``torch._higher_order_ops.map`` (``OPERATORS``). Each traces its functions once on
stand-ins (``functions.trace``) and becomes one ``call_jax`` node: ``lax.cond``,
``lax.while_loop``, ``lax.scan`` and ``lax.map`` of lazax's lowering of them. No branch runs on the
host and the predicate is never read. Gradients: ``torch.cond``, ``scan`` and ``map`` take
torch's own autograd rules for the operators (which call them again with their backward
functions); ``while_loop`` has none in torch either.

torch runs these operators through dynamo even outside ``torch.compile``: dynamo learns
the lazax tensor when it is imported (``dynamo_tensor``), so they work after ``import
lazax.modes`` alone.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import torch
import torch.utils._pytree as pytree
from torch._higher_order_ops.cond import cond_op
from torch._higher_order_ops.map import map_impl
from torch._higher_order_ops.scan import scan_op
from torch._higher_order_ops.while_loop import while_loop_op

from ..interop.calls import call_jax
from ..tensor.lazy import LazyTensor
from .functions import trace

__all__ = ["OPERATORS", "install"]

# One JAX function per combination of traced bodies, so that call_jax finds its node.
_FUNCTIONS: dict[tuple, object] = {}


def _cached(key: tuple, make):
    found = _FUNCTIONS.get(key)
    if found is None:
        found = _FUNCTIONS[key] = make()
    return found


def _numbers_apart(values) -> tuple[list, object]:
    """The tensors among ``values``, and ``put_back(tensors)``: ``values`` with those
    tensors in their places. The numbers among them are dynamo's sizes: torch runs these
    operators through dynamo, which after a call with other shapes traces sizes as
    inputs (automatic dynamic shapes). Each is a plain number at run time, and lazax
    traces per call, so it is a constant of the traced function."""
    values = list(values)
    tensors = [v for v in values if isinstance(v, torch.Tensor)]

    def put_back(new_tensors) -> list:
        it = iter(new_tensors)
        return [next(it) if isinstance(v, torch.Tensor) else v for v in values]

    return tensors, put_back


def _cond(pred, true_fn, false_fn, operands):
    leaves, tree = pytree.tree_flatten(operands)
    flat, put_back = _numbers_apart(leaves)

    def branch(fn):
        return trace(lambda *xs: fn(*pytree.tree_unflatten(put_back(xs), tree)), flat, "torch.cond")

    on_true, on_false = branch(true_fn), branch(false_fn)
    if on_true.outputs != on_false.outputs:
        raise RuntimeError(
            f"torch.cond: the branches must return tensors of the same shapes and dtypes; "
            f"true_fn returns {on_true.outputs}, false_fn {on_false.outputs}"
        )
    t, f = on_true.body, on_false.body

    def make():
        def run(pred, inputs, consts_true, consts_false):
            return jax.lax.cond(
                jnp.reshape(pred, ()).astype(bool),
                lambda: t({"inputs": inputs, "consts": consts_true}),
                lambda: f({"inputs": inputs, "consts": consts_false}),
            )

        return run

    run = _cached(("cond", id(t), id(f)), make)
    outs = call_jax(run, pred, flat, on_true.consts, on_false.consts)
    return on_true.rebuild(outs)


def _tensors_only(values, what: str) -> list:
    values = list(values)
    if not all(isinstance(v, torch.Tensor) for v in values):
        kinds = [type(v).__name__ for v in values]
        raise NotImplementedError(
            f"{what} on lazax tensors takes tensors only, but got {kinds}; make each "
            f"number a 0-dim tensor on the lazax device"
        )
    return values


def _while_loop(cond_fn, body_fn, carried_inputs, additional_inputs, **kwargs):
    carried = _tensors_only(carried_inputs, "while_loop")
    extra, put_back = _numbers_apart(additional_inputs)
    n = len(carried)

    def call(fn):
        return lambda *xs: fn(*xs[:n], *put_back(xs[n:]))

    test = trace(call(cond_fn), carried + extra, "while_loop's cond_fn")
    step = trace(call(body_fn), carried + extra, "while_loop's body_fn")
    if step.outputs != [(tuple(c.shape), c.dtype) for c in carried]:
        raise RuntimeError(
            f"while_loop: body_fn must return tensors of the carried inputs' shapes and "
            f"dtypes {[(tuple(c.shape), c.dtype) for c in carried]}, but returns "
            f"{step.outputs}"
        )
    c, b = test.body, step.body

    def make():
        def run(carried, extra, consts_cond, consts_body):
            def keep_going(values):
                out = c({"inputs": [*values, *extra], "consts": consts_cond})[0]
                return jnp.reshape(out, ()).astype(bool)

            def advance(values):
                return b({"inputs": [*values, *extra], "consts": consts_body})

            return jax.lax.while_loop(keep_going, advance, list(carried))

        return run

    run = _cached(("while", id(c), id(b)), make)
    outs = call_jax(run, carried, extra, test.consts, step.consts)
    return tuple(outs[:n])


def _scan(combine_fn, init, xs, additional_inputs):
    init = _tensors_only(init, "scan")
    xs = _tensors_only(xs, "scan")
    extra, put_back = _numbers_apart(additional_inputs)
    n = len(init)
    if not xs:
        return [*init]
    slices = [x.select(0, 0) for x in xs]
    m = n + len(slices)
    step = trace(
        lambda *v: combine_fn(*v[:m], *put_back(v[m:])), init + slices + extra, "scan's combine_fn"
    )
    body = step.body

    def make():
        def run(init, xs, extra, consts):
            def advance(carry, sliced):
                out = body({"inputs": [*carry, *sliced, *extra], "consts": consts})
                return out[:n], out[n:]

            carry, ys = jax.lax.scan(advance, list(init), list(xs))
            return [*carry, *ys]

        return run

    run = _cached(("scan", id(body)), make)
    return list(call_jax(run, init, xs, extra, step.consts))


def _map(f, xs, pos_args):
    xs = _tensors_only(xs, "map")
    extra, put_back = _numbers_apart(pos_args)
    n = len(xs)
    step = trace(
        lambda *v: f(*v[:n], *put_back(v[n:])),
        [x.select(0, 0) for x in xs] + extra,
        "map's f",
    )
    body = step.body

    def make():
        def run(xs, extra, consts):
            return jax.lax.map(
                lambda sliced: body({"inputs": [*sliced, *extra], "consts": consts}), list(xs)
            )

        return run

    run = _cached(("map", id(body)), make)
    return step.rebuild(call_jax(run, xs, extra, step.consts))


# The operators lazax runs as XLA's control flow, with their rules.
_RULES = {cond_op: _cond, while_loop_op: _while_loop, scan_op: _scan, map_impl: _map}
OPERATORS = tuple(_RULES)


def install() -> None:
    for op, rule in _RULES.items():
        if LazyTensor not in op.python_key_table:
            op.py_impl(LazyTensor)(rule)
