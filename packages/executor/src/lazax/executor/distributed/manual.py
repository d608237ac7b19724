"""Manual sharding: code that runs on each device's own piece, inside an SPMD program.

What torch_xla calls manual sharding (``enable_manual_sharding`` /
``disable_manual_sharding``) and jax calls ``shard_map``: between the two calls a tensor
holds one value *per device* (the device's piece), and ops run on each device's own
value, as a custom kernel or a hand-written collective pattern needs.

Contract:
- ``enable_manual_sharding(t, mesh, partition_spec)``: a new tensor, of the shape of the
  piece each device holds when ``t`` is laid out as ``partition_spec`` says over
  ``mesh`` (a dimension that does not divide over its axes: ``ValueError``). It holds a
  value per device: each device of the mesh its own piece. An op whose operand holds
  values per device runs on each device's own value, and its result holds values per
  device too; any other operand (a parameter, a constant) is the same on every device.
  Operands per device over two meshes: ``ValueError``. A random op (dropout) draws
  the same numbers on every device, from the one seed of the step (as torch's DDP
  ranks seeded alike do), so that copies of one piece stay equal.
- ``disable_manual_sharding(t, mesh, partition_spec, full_shape)``: the tensor of
  ``full_shape`` whose pieces the devices hold, laid out as ``partition_spec`` says
  (``get_sharding`` answers it); ``full_shape`` must be ``t``'s shape times the devices
  each dimension is split over (``ValueError``). Devices that hold the same piece (the
  mesh axes the spec leaves out) must hold equal values there: one of them is kept.
  A ``t`` that holds one value gives that value to every device.
- A value per device has no single value: it stays pending (eager mode and ``sync()``
  leave it so), and reading, moving or syncing it raises ``RuntimeError``;
  ``mark_sharding`` of it raises ``ValueError``.
- Autograd: the gradient of ``enable_manual_sharding`` is ``disable_manual_sharding`` of
  the gradient with the devices that hold the same piece adding theirs (jax's
  ``shard_map`` transposes the same way); that of ``disable_manual_sharding`` is
  ``enable_manual_sharding`` of the gradient, shared out among those devices (and
  summed over every device where its input was one value every device used). A tensor
  that holds one value, requires grad and is used on each device's values must enter
  first (``enable_manual_sharding(t, mesh, (None,) * t.dim())``, which sums its
  gradient over the devices; ``shard_map`` enters its arguments that require grad):
  a computed one raises ``ValueError`` at the op (its per-device gradient would be
  added to its other uses' gradients, past telling apart), a parameter (or a view of
  one) that a function closes over gets a gradient per device, which cannot be read,
  and a warning says so.
- ``manual_mesh(t)``: the ``Mesh`` over which ``t`` holds a value per device, or None.
- Collectives between the devices inside (``manual_all_reduce`` and kin) are
  ``manual_collectives``.
- ``shard_map(fn, mesh, in_specs, out_specs)``: ``fn`` on each device's pieces: its
  tensor arguments enabled with ``in_specs`` (one spec per positional argument; None
  for an argument passed whole to every device), its outputs (a tensor or a tuple of them) disabled
  with ``out_specs`` (one spec, or one per output), their full shapes from their pieces'.
- The IR and its lowering are ``ops.manual``; lazy mode, eager mode and ``lx.compile``
  trace them the same way. ``torch.compile`` runs a ``shard_map`` function outside its
  graphs (a graph break; the region is traced lazily and joins the next sync), and
  leaves a frame that calls the enable or disable itself to lazy tracing (dynamo
  cannot trace them); a compiled graph that would take a value per device as an input
  raises ``RuntimeError`` naming ``shard_map``.
"""

from __future__ import annotations

import math

import torch

from lazax import ir

from ..barrier.executor import EXECUTOR
from ..ops.manual import MANUAL, MANUAL_ENTER, MANUAL_EXIT
from ..state.layout import Layout
from ..state.values import ir_value
from ..tensor.lazy import LazyTensor, new_tensor
from .sharding import Mesh, constraint, lazax_mesh, normalize

__all__ = [
    "disable_manual_sharding",
    "enable_manual_sharding",
    "manual_mesh",
    "shard_map",
]


def _ways(mesh: Mesh, spec: tuple) -> list[int]:
    """How many pieces each dimension is split into."""
    out = []
    for entry in spec:
        axes = () if entry is None else (entry if isinstance(entry, tuple) else (entry,))
        out.append(math.prod(mesh.size(a) for a in axes))
    return out


def _copies(mesh: Mesh, spec: tuple) -> int:
    """How many devices hold each piece (the mesh axes the spec leaves out)."""
    return math.prod(mesh.mesh_shape) // math.prod(_ways(mesh, spec))


def _lazax(t, what: str) -> LazyTensor:
    if type(t) is not LazyTensor:
        where = t.device if isinstance(t, torch.Tensor) else type(t).__name__
        raise TypeError(f"{what} takes a lazax tensor, but got {where}")
    return t


def _made(value: ir.Value, like: LazyTensor, shape: tuple) -> LazyTensor:
    index = like._lz_storage.device_index
    if EXECUTOR.eager and MANUAL.of(value.node) is None:
        (value,) = EXECUTOR.run_new([value], index)
    return new_tensor(value, Layout(shape, like.dtype), index)


def _enter(t: LazyTensor, mesh: Mesh, spec: tuple) -> LazyTensor:
    value = ir_value(t)
    if MANUAL.of(value.node) is not None:
        raise ValueError(
            "enable_manual_sharding: the tensor already holds a value per device (it is "
            "inside manual sharding); disable_manual_sharding it first"
        )
    key, _ = constraint(mesh, spec)
    local = tuple(n // w for n, w in zip(t.shape, _ways(mesh, spec)))
    node = ir.Node(
        MANUAL_ENTER, (value,), ((("%", 0), key), ()), (ir.TensorSpec(local, value.spec.dtype),)
    )
    MANUAL.active = True
    return _made(node, t, local)


def _exit(t: LazyTensor, mesh: Mesh, spec: tuple, full: tuple, summed: bool) -> LazyTensor:
    value = ir_value(t)
    held_over = MANUAL.of(value.node)
    if held_over is not None and held_over != mesh.jax_mesh:
        raise ValueError(
            f"disable_manual_sharding: the tensor holds values per device over "
            f"{lazax_mesh(held_over)}, not over {mesh}"
        )
    key, _ = constraint(mesh, spec)
    node = ir.Node(
        MANUAL_EXIT,
        (value,),
        ((("%", 0), key, summed), ()),
        (ir.TensorSpec(full, value.spec.dtype),),
    )
    return _made(node, t, full)


class _Enable(torch.autograd.Function):
    @staticmethod
    def forward(ctx, t, mesh, spec):
        ctx.mesh, ctx.spec, ctx.full = mesh, spec, tuple(t.shape)
        return _enter(t, mesh, spec)

    @staticmethod
    def backward(ctx, grad):
        # Each device's gradient of its piece; the devices that were given the same
        # piece add theirs.
        return _exit(grad.contiguous(), ctx.mesh, ctx.spec, ctx.full, True), None, None


def _summed(t: LazyTensor, mesh: Mesh) -> LazyTensor:
    """The sum over every device of ``t``'s values per device, as one value: the
    gradient of a tensor that holds one value and was used on every device."""
    return _exit(t.contiguous(), mesh, (None,) * t.dim(), tuple(t.shape), True)


class _Disable(torch.autograd.Function):
    @staticmethod
    def forward(ctx, t, mesh, spec, full):
        ctx.mesh, ctx.spec = mesh, spec
        ctx.one_value = manual_mesh(t) is None  # every device gave the same piece
        return _exit(t, mesh, spec, full, False)

    @staticmethod
    def backward(ctx, grad):
        used_inside = manual_mesh(grad)  # the result was used on each device again
        if used_inside is not None:
            grad = _summed(grad, used_inside)
        # The devices that hold one piece each kept it; each gets its share of the
        # gradient, which the enable (or the sum over devices) adds up again.
        piece = _enter(grad.contiguous(), ctx.mesh, ctx.spec)
        copies = _copies(ctx.mesh, ctx.spec)
        piece = piece / copies if copies > 1 else piece
        if ctx.one_value:  # the input was one value that every device used
            piece = _summed(piece, ctx.mesh)
        return piece, None, None, None


def enable_manual_sharding(t: torch.Tensor, mesh: Mesh, partition_spec) -> torch.Tensor:
    """Each device's piece of ``t`` (laid out as ``partition_spec`` over ``mesh``), as one
    tensor holding a value per device (see the module's contract)."""
    t = _lazax(t, "enable_manual_sharding")
    spec = normalize(mesh, partition_spec, tuple(t.shape))
    return _Enable.apply(t, mesh, spec)


def disable_manual_sharding(
    t: torch.Tensor, mesh: Mesh, partition_spec, full_shape
) -> torch.Tensor:
    """The tensor of ``full_shape`` whose pieces the devices hold in ``t`` (see the
    module's contract)."""
    t = _lazax(t, "disable_manual_sharding")
    full = tuple(int(n) for n in full_shape)
    spec = normalize(mesh, partition_spec, full, divides=False)  # checked below
    ways = _ways(mesh, spec)
    if len(full) != t.dim() or any(n != p * w for n, p, w in zip(full, t.shape, ways)):
        raise ValueError(
            f"disable_manual_sharding: pieces of shape {tuple(t.shape)} split as "
            f"{spec} over {mesh} make a tensor of shape "
            f"{tuple(p * w for p, w in zip(t.shape, ways))}, not {full}"
        )
    return _Disable.apply(t, mesh, spec, full)


def manual_mesh(t: torch.Tensor) -> Mesh | None:
    """The mesh over which ``t`` holds a value per device (None: one value)."""
    if type(t) is not LazyTensor or not MANUAL.active:
        return None
    jax_mesh = MANUAL.of(ir_value(t).node)
    return None if jax_mesh is None else lazax_mesh(jax_mesh)


def _entered(a, mesh: Mesh, spec):
    """An argument of ``shard_map``'s function: its pieces, or (spec None) itself, the
    same on every device; one that requires grad enters whole, so that its gradient is
    the sum of the devices' (an operand that stays outside gets one per device)."""
    if spec is not None:
        return enable_manual_sharding(a, mesh, spec)
    if type(a) is LazyTensor and a.requires_grad and torch.is_grad_enabled():
        return enable_manual_sharding(a, mesh, (None,) * a.dim())
    return a


def shard_map(fn, mesh: Mesh, in_specs, out_specs):
    """``fn`` run on each device's pieces of its arguments (see the module's contract)."""

    # torch.compile runs it outside its graphs (a graph break), traced lazily: a graph
    # cannot take a value per device as an input.
    @torch._dynamo.disable
    def mapped(*args):
        if len(in_specs) != len(args):
            raise ValueError(
                f"shard_map: {len(args)} arguments, but {len(in_specs)} in_specs; give "
                f"one per positional argument (None: passed as it is)"
            )
        pieces = [_entered(a, mesh, s) for a, s in zip(args, in_specs)]
        out = fn(*pieces)
        single = not isinstance(out, (tuple, list))
        outs = (out,) if single else tuple(out)
        specs = (out_specs,) if single else tuple(out_specs)
        if len(specs) != len(outs):
            raise ValueError(f"shard_map: {len(outs)} outputs, but {len(specs)} out_specs")
        full = []
        for o, s in zip(outs, specs):
            spec = normalize(mesh, s, tuple(o.shape), divides=False)
            shape = tuple(n * w for n, w in zip(o.shape, _ways(mesh, spec)))
            full.append(disable_manual_sharding(o, mesh, spec, shape))
        return full[0] if single else type(out)(full)

    return mapped
