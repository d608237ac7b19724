"""``sharding_constraint``: a sharding constraint as a torch op, which dynamo and
AOTAutograd trace into their graphs.

Contract:
- ``sharding_constraint(t, mesh, partition_spec)`` returns a new tensor with ``t``'s
  value laid out as ``partition_spec`` says over ``mesh`` (jax's
  ``with_sharding_constraint``); ``partition_spec`` as ``mark_sharding`` takes it,
  checked against ``t``'s shape where the op is called or traced (``ValueError``). Its
  gradient is constrained alike. On lazax tensors the op is the graph's
  ``lazax::shard`` node, as ``mark_sharding`` of pending work makes (so graphs,
  ``get_sharding`` and uneven splits behave the same); in eager mode it runs at once.
  Any other tensor: ``TypeError``.
- The op is ``torch.ops.lazax.sharding_constraint(Tensor x, str mesh, str[] spec)``:
  ``mesh`` is the mesh's ``key`` (every ``Mesh`` made in the process is found by it),
  ``spec`` one string per dimension (``""`` not split, ``"a"`` or ``"a,b"`` its mesh
  axes). Its fake kernel checks the spec, so a bad one raises while dynamo traces.
- ``mark_sharding`` of a tensor that dynamo or AOTAutograd is tracing (not a lazax
  tensor: a fake or functional one on a lazax device) writes this op's result into it
  (``mark_sharding`` here), outside autograd as ``mark_sharding`` of a lazax tensor
  is: the value is constrained, the gradient is not. So a model whose forward marks its
  activations compiles as one graph under ``torch.compile(backend="lazax")`` instead of
  making dynamo skip the function.
- ``clone`` of a lazax tensor laid out over a mesh is laid out alike
  (``sharding.keep_layout``): the copy carries its source's constraint.
"""

from __future__ import annotations

import torch

from lazax import ir

from ..barrier.executor import EXECUTOR
from ..config import DEVICE_NAME
from ..dispatch.plans import FUNCTIONAL, OpPlan
from ..dispatch.run import run_plan
from ..dispatch.special import register_special
from ..ops.sharding import ACTIVE, SHARD_OP
from ..state.layout import Layout
from ..state.values import ir_value
from ..tensor.lazy import LazyTensor, new_tensor
from .sharding import Mesh, constraint, keep_layout, mesh_by_key, normalize
from .sharding import mark_sharding as _mark_lazax

__all__ = ["mark_sharding", "sharding_constraint"]

_LIB = torch.library.Library("lazax", "FRAGMENT")
_LIB.define("sharding_constraint(Tensor x, str mesh, str[] spec) -> Tensor")


def _encode(mesh: Mesh, partition_spec) -> list[str]:
    """A partition spec as the op's strings, axis indices as the mesh's names. Plain
    loops over constants: dynamo traces this; the op's kernels check the result."""
    axes = mesh.axis_keys
    out = []
    for entry in partition_spec:
        if entry is None:
            out.append("")
            continue
        names = []
        for axis in entry if isinstance(entry, tuple) else (entry,):
            if isinstance(axis, int) and 0 <= axis < len(axes):
                axis = axes[axis]
            names.append(str(axis))
        out.append(",".join(names))
    return out


def _decode(spec: list[str]) -> tuple:
    return tuple(None if s == "" else tuple(s.split(",")) if "," in s else s for s in spec)


def _checked(x: torch.Tensor, mesh_key: str, spec: list[str]) -> tuple[Mesh, tuple]:
    mesh = mesh_by_key(mesh_key)
    if mesh is None:
        raise ValueError(
            f"lazax.sharding_constraint: no mesh {mesh_key!r} was made in this process; "
            f"the op is made by lazax.sharding_constraint, not called directly"
        )
    multi = EXECUTOR.runtime.process_count > 1
    return mesh, normalize(mesh, _decode(spec), tuple(x.shape), multi)


def _fake(x, mesh, spec):
    _checked(x, mesh, spec)
    return torch.empty_like(x)


def _refuse(x, mesh, spec):
    raise TypeError(f"sharding_constraint takes a lazax tensor, but got a {x.device} tensor")


def _on_lazax(args, kwargs):
    values = dict(zip(("x", "mesh", "spec"), args), **kwargs)
    x = values["x"]
    mesh, spec = _checked(x, values["mesh"], values["spec"])
    key, _ = constraint(mesh, spec)
    value = ir_value(x)
    node = ir.Node(SHARD_OP, (value,), ((("%", 0), key), ()), (value.spec,))
    out = node.outputs[0]
    index = x._lz_storage.device_index
    if EXECUTOR.eager:
        (out,) = EXECUTOR.run_new([out], index)
    return new_tensor(out, Layout(tuple(x.shape), x.dtype), index)


def _setup(ctx, inputs, output) -> None:
    _, ctx.mesh, ctx.spec = inputs


def _backward(ctx, grad):
    return torch.ops.lazax.sharding_constraint(grad, ctx.mesh, ctx.spec), None, None


_LIB.impl("sharding_constraint", _refuse, "CompositeExplicitAutograd")
torch.library.register_fake("lazax::sharding_constraint", _fake, lib=_LIB)
torch.library.register_autograd(
    "lazax::sharding_constraint", _backward, setup_context=_setup, lib=_LIB
)
_CLONE = OpPlan(torch.ops.aten.clone.default, torch.ops.aten.clone.default.name(), FUNCTIONAL)


def _clone(args, kwargs):
    out = run_plan(_CLONE, args, kwargs)
    if ACTIVE["active"]:  # (only once anything was laid out over a mesh)
        keep_layout(args[0], out)
    return out


register_special(
    {torch.ops.lazax.sharding_constraint.default: _on_lazax, torch.ops.aten.clone.default: _clone}
)


def sharding_constraint(t: torch.Tensor, mesh: Mesh, partition_spec) -> torch.Tensor:
    """``t``'s value laid out as ``partition_spec`` over ``mesh`` (see the contract)."""
    if not isinstance(t, torch.Tensor):
        raise TypeError(f"sharding_constraint takes a tensor, but got {type(t).__name__}")
    return torch.ops.lazax.sharding_constraint(t, mesh.key, _encode(mesh, partition_spec))


def mark_sharding(t: torch.Tensor, mesh: Mesh, partition_spec) -> torch.Tensor:
    """``sharding.mark_sharding`` of a lazax tensor; of a tensor that dynamo or
    AOTAutograd traces on a lazax device, this op's result written into it (see the
    contract)."""
    if torch.compiler.is_compiling() or (
        type(t) is not LazyTensor and isinstance(t, torch.Tensor) and t.device.type == DEVICE_NAME
    ):
        constrained = sharding_constraint(t, mesh, partition_spec)
        with torch.no_grad():
            t.copy_(constrained)
        return t
    return _mark_lazax(t, mesh, partition_spec)
