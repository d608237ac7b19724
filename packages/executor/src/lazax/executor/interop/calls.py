"""``call_jax``: a JAX function called on torch tensors, as one node of the graph.

Contract of ``call_jax(fn, *args, **kwargs)``:
- ``args``/``kwargs`` are tensors and tuples, lists and dicts of them (string keys),
  with any other leaf (numbers, strings, None, dtypes) static: it is fixed into the
  traced function, and a new value traces and compiles anew (``jax.jit``'s
  ``static_argnums``). ``fn`` gets jax arrays where the tensors were and returns a jax
  array, or tuples, lists and dicts of them; ``call_jax`` returns the same structure of
  tensors.
- On lazax tensors it is one ``lazax::call_jax`` node (``ops.jax_calls``): lowered into
  the same XLA program as the torch ops around it, in lazy, eager and compile mode;
  under ``torch.compile(backend="lazax")`` dynamo records it as that op, without a
  graph break (``prepare_call_jax`` is what it must not trace). On CPU tensors it runs
  through jax on the host.
- The output specs come from ``jax.eval_shape``. Gradients reach every floating or
  complex input through ``jax.vjp`` of ``fn``. Called where gradients are wanted (grad
  mode on, an input that requires grad), the node is ``fn``'s forward with ``jax.vjp``'s
  residuals as extra outputs, which the backward reads (``ops.jax_calls``): ``fn`` runs
  once, as under ``jax.grad``. Where a residual has no torch dtype (a PRNG key), the
  backward computes ``jax.vjp`` from the inputs instead.
- The same function, statics and input specs make the same node: a call is prepared
  once per ``(fn, structure, specs)``; the node's code is a hash of the jaxpr (and of
  the values of the constants it captures), the same in every process, so an equal
  function made anew (a lambda per step) compiles nothing new either. As with
  ``jax.jit``, what ``fn`` reads from globals is read when it is first traced.
"""

from __future__ import annotations

import hashlib
import re
from typing import Any

import jax
import numpy as np
import torch

from lazax.pjrt import numpy_dtype

from ..ops.jax_calls import CALLS, JaxCall, Pullback, differentiable_dtype, pullback_leaves
from ..state.dtypes import TORCH_DTYPES, dtype_name, torch_dtype

__all__ = ["call_jax", "prepare_call_jax"]

_TENSOR = "tensor"


def _flatten(tree: Any, tensors: list) -> Any:
    """A hashable description of ``tree`` (tensors replaced by their index in
    ``tensors``, which receives them). Plain Python: dynamo traces it."""
    if isinstance(tree, torch.Tensor):
        tensors.append(tree)
        return (_TENSOR, len(tensors) - 1)
    if isinstance(tree, (tuple, list)):
        return (type(tree).__name__, tuple(_flatten(x, tensors) for x in tree))
    if isinstance(tree, dict):
        keys = tuple(tree)
        return ("dict", keys, tuple(_flatten(tree[k], tensors) for k in keys))
    return ("static", tree)


def _build(desc: Any, leaves) -> Any:
    kind = desc[0]
    if kind == _TENSOR:
        return leaves[desc[1]]
    if kind == "tuple":
        return tuple(_build(d, leaves) for d in desc[1])
    if kind == "list":
        return [_build(d, leaves) for d in desc[1]]
    if kind == "dict":
        return {k: _build(d, leaves) for k, d in zip(desc[1], desc[2])}
    return desc[1]


def _describe_output(tree: Any, leaves: list, name: str) -> Any:
    """Like ``_flatten``, for ``fn``'s output (jax arrays or their shape structs)."""
    if isinstance(tree, (jax.Array, jax.ShapeDtypeStruct)):
        leaves.append(tree)
        return (_TENSOR, len(leaves) - 1)
    if isinstance(tree, (tuple, list)):
        kind = "list" if isinstance(tree, list) else "tuple"
        return (kind, tuple(_describe_output(x, leaves, name) for x in tree))
    if isinstance(tree, dict):
        keys = tuple(tree)
        return ("dict", keys, tuple(_describe_output(tree[k], leaves, name) for k in keys))
    raise TypeError(
        f"lazax.call_jax: {name} returned a {type(tree).__name__}; a JAX function "
        f"called from torch returns jax arrays, or tuples, lists and dicts of them"
    )


_PREPARED: dict[tuple, tuple[int, Any]] = {}

# Addresses that jaxprs print (a custom_vjp's backward function): not part of what the
# function computes, and different in every process.
_ADDRESS = re.compile(r" at 0x[0-9a-fA-F]+")


def _fingerprint(closed: Any) -> int:
    digest = hashlib.blake2b(digest_size=8)
    digest.update(_ADDRESS.sub("", str(closed.jaxpr)).encode())
    for const in closed.consts:
        value = np.asarray(const)
        digest.update(f"{value.dtype}{value.shape}".encode())
        digest.update(value.tobytes())
    return int.from_bytes(digest.digest(), "little") >> 2  # fits torch's int


def prepare_call_jax(fn, desc: Any, specs: tuple, grad: bool = False) -> tuple[int, Any]:
    """(the node's function code, the output's description) for ``fn`` called on
    ``desc`` with tensors of ``specs``; traced with jax once per key. ``grad``: the
    code of its forward with residuals, where it has one. ``lazax.dynamo`` marks it
    ``assume_constant_result``: dynamo runs it once, while it traces, and keeps the
    result as a constant (marked there, so that importing lazax does not import
    dynamo)."""
    key = (fn, desc, specs, grad)
    try:
        found = _PREPARED.get(key)
    except TypeError:  # an unhashable static argument
        raise TypeError(
            "lazax.call_jax: every argument that is not a tensor is static and must be "
            "hashable (numbers, strings, tuples); pass an array as a tensor "
            "(torch.from_numpy), or bind it into the function (functools.partial)"
        ) from None
    if found is not None:
        return found
    name = getattr(fn, "__qualname__", None) or getattr(fn, "__name__", None) or repr(fn)
    out_desc: list = []

    def flat_fn(*arrays):
        args, kwargs = _build(desc, arrays)
        leaves: list = []
        out_desc[:] = [_describe_output(fn(*args, **kwargs), leaves, name)]
        return leaves

    structs = [jax.ShapeDtypeStruct(shape, numpy_dtype(dtype_name(d))) for shape, d in specs]
    closed = jax.make_jaxpr(flat_fn)(*structs)
    outputs = tuple(
        (tuple(aval.shape), torch_dtype(np.dtype(aval.dtype).name)) for aval in closed.out_avals
    )
    code = _fingerprint(closed)
    if code not in CALLS:
        differentiable = tuple(differentiable_dtype(d) for _, d in specs)
        CALLS[code] = JaxCall(name, flat_fn, outputs, differentiable)
    if grad:
        code = _with_residuals(CALLS[code], structs, specs) or code
    found = _PREPARED[key] = (code, out_desc[0])
    return found


def _dtype_name(aval) -> str:
    """numpy's name of an output's dtype ("" for one numpy lacks: a PRNG key's)."""
    try:
        return np.dtype(aval.dtype).name
    except TypeError:
        return ""


def _with_residuals(base: JaxCall, structs: list, specs: tuple) -> int | None:
    """The code of ``base``'s forward with residuals (see the module docstring); None
    when nothing is differentiable or a residual has no torch dtype."""
    differentiable = base.differentiable
    if not any(differentiable):
        return None

    def forward(*arrays):
        outs, pullback = pullback_leaves(base.flat_fn, differentiable, arrays)
        return list(outs) + jax.tree_util.tree_leaves(pullback)

    def pullback_of(*arrays):
        return pullback_leaves(base.flat_fn, differentiable, arrays)[1]

    closed = jax.make_jaxpr(forward)(*structs)
    tree = jax.tree_util.tree_structure(jax.eval_shape(pullback_of, *structs))
    count = len(base.outputs)
    avals = closed.out_avals
    names = [_dtype_name(aval) for aval in avals]
    if tree.num_leaves != len(avals) - count or any(n not in TORCH_DTYPES for n in names):
        return None
    code = _fingerprint(closed)
    if code not in CALLS:
        outputs = tuple((tuple(a.shape), torch_dtype(n)) for a, n in zip(avals, names))
        primal = tuple(jax.ShapeDtypeStruct(a.shape, a.dtype) for a in avals[:count])
        grads = tuple((tuple(shape), d) for (shape, d), w in zip(specs, differentiable) if w)
        pullback = Pullback(count, tree, primal, grads)
        CALLS[code] = JaxCall(base.name, forward, outputs, differentiable, pullback)
    return code


def call_jax(fn, *args, **kwargs):
    """Call the JAX function ``fn`` on tensors (see the module docstring)."""
    tensors: list = []
    desc = _flatten((args, kwargs), tensors)
    if not tensors:
        raise ValueError(
            "lazax.call_jax: no tensor among the arguments; call the JAX function "
            "directly, or pass the tensors it computes on"
        )
    specs = tuple((tuple(t.shape), t.dtype) for t in tensors)
    grad = False
    if torch.is_grad_enabled():
        for t in tensors:  # a loop, not any(): dynamo traces this
            grad = grad or t.requires_grad
    code, out_desc = prepare_call_jax(fn, desc, specs, grad)
    return _build(out_desc, torch.ops.lazax.call_jax(tensors, code))
