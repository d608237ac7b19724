"""The functional ``_foreach_*`` lowerings (what torch.optim's foreach paths call).

Contract: a ``_foreach_*`` rule returns a list with one array per tensor of ``self``.
Item ``i`` is computed by the rule for the same math (``elementwise``, ``unary``),
called with a per-item context ``LoweringContext(out=(ctx.out[i],))`` and the item's
arguments: element ``i`` of every list argument (tensors, or Scalar lists whose
entries are lifted 0-dim arrays or Python 0/+-1), and the shared arguments as they
are. So each op's math (dtype promotion, opmath, torch's formula) has one
implementation. The ``.Tensor`` overloads of ``addcmul``/``addcdiv`` take a 1-D tensor
holding one scalar per item. The in-place forms (``_foreach_add_.List``, ...) need no
rule: the tensor layer runs these and writes each result back.

Items of one call that have the same shapes, dtypes and non-array arguments are traced
once: the item's math is a ``jax.jit`` function cached per such signature, called once
per item. An optimizer's foreach over a deep model's parameters has hundreds of
same-shaped items, and tracing each of them again made the lowering grow with depth.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import torch

from . import elementwise as ew
from ._promotion import opmath, to_dtype
from ._registry import LoweringContext, lowering
from .unary import UNARY

aten = torch.ops.aten


def _foreach(op, fn, per_item=()):
    """Register ``op`` as ``fn`` applied item by item.

    Arguments are bound by ``op``'s schema (positional or keyword, schema defaults for
    the missing ones) and passed to ``fn`` positionally in schema order, so ``fn``'s
    parameters must follow that order. List arguments, and those named in
    ``per_item``, are indexed per item."""
    schema_args = [a for a in op._schema.arguments if not (a.alias_info and a.alias_info.is_write)]
    names = [a.name for a in schema_args]
    listed = {a.name for a in schema_args if isinstance(a.type, torch.ListType)} | set(per_item)
    defaults = {a.name: a.default_value for a in schema_args if a.has_default_value()}

    def rule(ctx, *args, **kwargs):
        bound = dict(defaults)
        bound.update(zip(names, args, strict=False))  # trailing defaults may be left out
        bound.update(kwargs)
        values = [bound[n] for n in names]
        outs = []
        for i, out in enumerate(ctx.out):
            item = [v[i] if n in listed else v for n, v in zip(names, values, strict=True)]
            outs.append(_call_item(fn, out, item))
        return outs

    rule.__name__ = rule.__qualname__ = f"foreach_{op.name().split('::')[1]}"
    rule.__doc__ = f"``{op.name()}``: ``{fn.__name__}`` per item."
    return lowering(op)(rule)


_ARRAY = object()  # where an item's array goes among its fixed arguments
_ITEM_FUNCTIONS: dict = {}


def _static_key(value):
    """A cache key for a fixed argument that tells apart what ``==`` does not:
    ``1``, ``1.0`` and ``True`` promote differently, ``0.0`` and ``-0.0`` differ."""
    return (type(value), repr(value) if isinstance(value, float) else value)


def _call_item(fn, out, item):
    """``fn(LoweringContext(out=(out,)), *item)``, through the jitted function cached for
    the item's signature: arrays by shape and dtype, every other argument by value."""
    arrays = [a for a in item if isinstance(a, jax.Array)]
    statics = tuple(_ARRAY if isinstance(a, jax.Array) else a for a in item)
    shapes = tuple((a.shape, a.dtype) for a in arrays)
    out = (tuple(out[0]), np.dtype(out[1]))
    try:
        key = (fn, out, shapes, tuple(_static_key(s) for s in statics))
        jitted = _ITEM_FUNCTIONS.get(key)
    except TypeError:  # an unhashable argument: trace this item on its own
        return fn(LoweringContext(out=(out,)), *item)
    if jitted is None:
        if len(_ITEM_FUNCTIONS) > 4096:  # signatures of long-gone graphs
            _ITEM_FUNCTIONS.clear()
        jitted = _ITEM_FUNCTIONS[key] = _item_function(fn, out, statics)
    return jitted(*arrays)


def _item_function(fn, out, statics):
    """``fn`` as a ``jax.jit`` function of the item's arrays (in order), with the other
    arguments fixed as in ``statics``."""

    def item(*arrays):
        it = iter(arrays)
        args = [next(it) if s is _ARRAY else s for s in statics]
        return fn(LoweringContext(out=(out,)), *args)

    item.__name__ = item.__qualname__ = f"foreach_{fn.__name__}"
    # Inlined: the cached trace is copied into the graph's, which JAX lowers faster
    # than a call per item (measured: python-side compile of 24 scanned layers' step,
    # 11.3 s per item traced, 8.5 s as calls, 6.8 s inlined, under cProfile).
    return jax.jit(item, inline=True)


def _overloads(name, fn, overloads, per_item=()):
    """``_foreach`` for several overloads of ``aten.<name>``."""
    packet = getattr(aten, name)
    for overload in overloads:
        _foreach(getattr(packet, overload), fn, per_item)


# Binary arithmetic: a shared Scalar or 0-dim Tensor, a list of tensors, a list of
# scalars. alpha (add/sub .List/.Tensor) is bound by name and passed on.
_overloads("_foreach_add", ew.add, ("Scalar", "List", "ScalarList", "Tensor"))
_overloads("_foreach_sub", ew.sub, ("Scalar", "List", "ScalarList"))
_overloads("_foreach_mul", ew.mul, ("Scalar", "List", "ScalarList", "Tensor"))
_overloads("_foreach_div", ew.div, ("Scalar", "List", "ScalarList", "Tensor"))
_overloads("_foreach_pow", ew.pow, ("List", "Scalar", "ScalarList", "ScalarAndTensor"))
# torch computes maximum/minimum against scalars as clamp_min/clamp_max.
_overloads("_foreach_maximum", ew.maximum, ("List",))
_overloads("_foreach_maximum", ew.clamp_min, ("Scalar", "ScalarList"))
_overloads("_foreach_minimum", ew.minimum, ("List",))
_overloads("_foreach_minimum", ew.clamp_max, ("Scalar", "ScalarList"))
_overloads("_foreach_clamp_min", ew.clamp_min, ("Scalar", "List", "ScalarList"))
_overloads("_foreach_clamp_max", ew.clamp_max, ("Scalar", "List", "ScalarList"))
_overloads("_foreach_lerp", ew.lerp, ("Scalar", "List", "ScalarList"))
_overloads("_foreach_addcmul", ew.addcmul, ("Scalar", "ScalarList"))
_overloads("_foreach_addcdiv", ew.addcdiv, ("Scalar", "ScalarList"))
_overloads("_foreach_addcmul", ew.addcmul, ("Tensor",), per_item=("scalars",))
_overloads("_foreach_addcdiv", ew.addcdiv, ("Tensor",), per_item=("scalars",))

for _name in (
    "abs acos asin atan ceil cos cosh erf erfc exp expm1 floor frac log log10 log1p log2 "
    "neg reciprocal round rsqrt sigmoid sign sin sinh sqrt tan tanh trunc"
).split():
    _foreach(getattr(aten, f"_foreach_{_name}").default, UNARY[_name])


def _zero(ctx, self):
    """Zeros shaped like ``self``."""
    return jnp.zeros(ctx.shape, ctx.dtype)


def _copy(ctx, self, src, non_blocking=False):
    """``src`` broadcast to ``self``'s shape (the output cast gives ``self``'s dtype)."""
    return jnp.broadcast_to(src, ctx.shape)


def _clone(ctx, self, memory_format=None):
    """``self``."""
    return self


_foreach(aten._foreach_zero.default, _zero)
_foreach(aten._foreach_copy.default, _copy)
_foreach(aten._foreach_clone.default, _clone)


def _vector_norm(ctx, self, ord=2, dtype=None):
    """``linalg.vector_norm`` of the flattened tensor, in opmath of ``dtype`` (or of the
    tensor's dtype).

    A Python ``ord`` picks one formula; a lifted one is only known at run time, so
    every formula is computed and the right one selected (the reductions share one
    pass over the data once fused)."""
    dt = opmath(np.dtype(dtype) if dtype is not None else self.dtype)
    a = jnp.abs(self.astype(dt)).reshape(-1)
    if a.dtype != dt:  # complex input: |x| is real
        dt = a.dtype
    forms = {
        2.0: lambda: jnp.sqrt(jnp.sum(a * a)),
        1.0: lambda: jnp.sum(a),
        float("inf"): lambda: jnp.max(a, initial=0),
        float("-inf"): lambda: jnp.min(a, initial=float("inf")),
        0.0: lambda: jnp.sum(a != 0).astype(dt),
    }
    if isinstance(ord, (int, float)):
        form = forms.get(float(ord))
        if form is not None:
            return form()
        p = to_dtype(ord, dt)
        return jnp.sum(a**p) ** (1 / p)
    p = ord.astype(dt)
    safe_p = jnp.where(jnp.isinf(p) | (p == 0), 1, p)
    out = jnp.sum(a**safe_p) ** (1 / safe_p)
    for value, form in forms.items():
        out = jnp.where(p == value, form(), out)
    return out


_foreach(aten._foreach_norm.Scalar, _vector_norm)
