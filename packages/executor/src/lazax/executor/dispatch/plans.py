"""Per-op plans and the spec cache: what the tensor layer knows about one aten overload.

Contract: ``OpPlan(func, lowering_name, kind)`` holds what never changes between calls
(which arguments are torch ``Scalar`` slots, whether the op is random, which input a
view aliases) and a cache from the call's key to an ``OpInfo``: output specs, layouts,
the node's attribute template and its base hash. The key is built from the tensors'
``_lz_key`` (shape, dtype, strides, offset), the non-tensor arguments, and for lifted
scalars only their Python type, so a new learning rate never misses.

On a miss the output specs come from torch's own meta kernels, run once per key, so
dtypes, shapes, view strides and error messages are torch's. If the meta kernel
rejects the call, the same call is tried on empty CPU tensors, so the user sees the CPU
error type and message (what they would see on "cpu" or "cuda"). Checks the CPU kernel
makes and the meta kernel skips (``ops._arguments``) run once the meta kernel accepts;
a check may send the call to the CPU fallback (``RunOnCpu``), and an op whose values
depend on an input's strides gets them as attributes (``layout_arguments``).
"""

from __future__ import annotations

import math
from typing import Any

import torch

from lazax import ir

from ..ops import checked_ops
from ..ops._arguments import (
    RunOnCpu,
    argument_check_for,
    layout_arguments_for,
    output_specs_for,
)
from ..state.dtypes import dtype_name
from ..state.layout import Layout
from ..tensor.lazy import LazyTensor

__all__ = [
    "aten_overload",
    "FALLBACK",
    "FUNCTIONAL",
    "INPLACE",
    "LIST_SLOT",
    "SCALAR_SLOT",
    "VIEW",
    "NeedsFallback",
    "OpInfo",
    "OpPlan",
]

FUNCTIONAL = "functional"
INPLACE = "inplace"
VIEW = "view"

SCALAR_SLOT = 1
LIST_SLOT = 2

# Python numbers can be lifted in Scalar slots and in Tensor slots (where torch passes
# "wrapped numbers", as in ``x + 2.5``), never in int/float attribute slots.
_SCALAR_TYPES = {"number", "Optional[number]", "Tensor", "Optional[Tensor]"}
_SHAPE_SCALARS = {"arange", "linspace", "logspace", "range"}
_LOW_PRECISION = {"float16", "bfloat16"}
_FLOATS = {"float16", "bfloat16", "float32", "float64"}


def _scalar_dtype(base: str, pytype: type) -> str:
    """The dtype a lifted Python scalar gets: torch's compute type for ``base``."""
    if base in _LOW_PRECISION:
        return "float32"
    if pytype is float:
        if base in _FLOATS or base.startswith("complex"):
            return base
        return "float32"
    # int scalar
    if base == "bool":
        return "int64"
    return base


class NeedsFallback(Exception):
    """This call has no static output spec; run it through the CPU fallback."""


# Keys kept per op: far more than a model's distinct calls of one op; a program that
# never repeats a shape starts the op's cache over instead of growing it.
SPEC_CACHE_LIMIT = 2048
FALLBACK = "fallback"  # spec-cache entry for calls that always take the CPU fallback


class OpInfo:
    __slots__ = (
        "node_op",
        "attrs",
        "base_hash",
        "specs",
        "layouts",
        "result",
        "scalar_dtypes",
        "checked",
    )

    def __init__(self, node_op, attrs, specs, layouts, result, scalar_dtypes):
        self.node_op = node_op
        # Its lowering checks values on the device: the tracer records where it ran.
        self.checked = node_op in checked_ops()
        self.attrs = attrs
        self.specs = specs
        self.base_hash = ir.node_base_hash(node_op, attrs, specs)
        self.layouts = layouts
        self.result = result
        self.scalar_dtypes = scalar_dtypes


def _encode(value: Any) -> Any:
    """A non-tensor argument as a stable-hashable attribute."""
    if value is None or type(value) in (bool, int, float, str):
        return value
    if isinstance(value, torch.dtype):
        return ("dtype", dtype_name(value))
    if isinstance(value, (tuple, list)):
        return tuple(_encode(v) for v in value)
    if isinstance(value, torch.Generator):
        return None  # lazax random ops draw from the device RNG
    if isinstance(value, (torch.device, torch.memory_format, torch.layout)):
        return str(value)
    if isinstance(value, torch.SymInt | torch.SymFloat):
        raise TypeError("symbolic sizes are not supported by the lazax tensor layer")
    if isinstance(value, complex):
        return ("complex", value.real, value.imag)
    return str(value)


def _template(value: Any, slot: int, counter: list) -> Any:
    t = type(value)
    if t is LazyTensor or isinstance(value, torch.Tensor):
        counter[0] += 1
        return ("%", counter[0] - 1)
    if slot and (t is float or t is int) and value not in (0, 1, -1):
        counter[0] += 1
        return ("%", counter[0] - 1)
    if t is list or t is tuple:
        inner = SCALAR_SLOT if slot == LIST_SLOT else 0
        return tuple(_template(v, inner, counter) for v in value)
    return _encode(value)


def _meta(value: Any) -> Any:
    t = type(value)
    if t is LazyTensor:
        shape, dtype, stride, offset, base_shape = value._lz_key
        base = torch.empty(math.prod(base_shape), dtype=dtype, device="meta")
        return base.as_strided(shape, stride, offset)
    if t is list or t is tuple:
        return t(_meta(v) for v in value)
    if isinstance(value, torch.Tensor):
        return value.to("meta")  # a 0-dim CPU tensor, uploaded as an operand
    if isinstance(value, torch.device):
        return torch.device("meta")
    return value


def _cpu(value: Any) -> Any:
    t = type(value)
    if t is LazyTensor:
        shape, dtype, stride, offset, base_shape = value._lz_key
        return torch.zeros(math.prod(base_shape), dtype=dtype).as_strided(shape, stride, offset)
    if t is list or t is tuple:
        return t(_cpu(v) for v in value)
    if isinstance(value, torch.device):
        return torch.device("cpu")
    return value


class OpPlan:
    """See the module docstring."""

    def __init__(self, func, lowering_name: str, kind: str, random: bool = False) -> None:
        self.func = func
        self.lowering_name = lowering_name
        self.kind = kind
        self.random = random
        # What ``metrics.traced_op_counts`` counts it as: an in-place op by its functional
        # name (as torch_xla, whose functionalization traces ``add_`` as ``add``).
        self.op_name = lowering_name.split(".")[0]
        self.cache: dict[tuple, OpInfo] = {}
        schema = func._schema
        # Scalars that decide an output's shape (arange's end) must stay in the key.
        lift = schema.name.split("::")[-1] not in _SHAPE_SCALARS
        self.slots = tuple(
            self._slot(a) if lift else 0 for a in schema.arguments if not a.kwarg_only
        )
        self.kw_slots = {
            a.name: self._slot(a) if lift else 0 for a in schema.arguments if a.kwarg_only
        }
        # For views: the index (among positional args) of the aliased input.
        self.alias_source = 0
        if kind == VIEW:
            sets = [r.alias_info.before_set for r in schema.returns if r.alias_info]
            for i, a in enumerate(schema.arguments):
                if a.alias_info is not None and sets and a.alias_info.before_set == sets[0]:
                    self.alias_source = i
                    break
        self.returns_self = kind == INPLACE and len(schema.returns) == 1

    @staticmethod
    def _slot(arg) -> int:
        text = str(arg.type)
        if text in _SCALAR_TYPES:
            return SCALAR_SLOT
        if text == "List[number]":
            return LIST_SLOT
        return 0

    # -- miss path -------------------------------------------------------------------
    def infer(self, key: tuple, args: tuple, kwargs: dict, operands: list) -> OpInfo:
        meta_args = [_meta(a) for a in args]
        meta_kwargs = {k: _meta(v) for k, v in kwargs.items()}
        # A registered replacement where the meta kernel refuses what the CPU computes.
        specs_of = output_specs_for(self.lowering_name) or self.func
        try:
            out = specs_of(*meta_args, **meta_kwargs)
        except Exception as meta_error:
            cpu_ran = self._raise_cpu_error(args, kwargs)
            if cpu_ran or isinstance(meta_error, NotImplementedError):
                # No static output spec for this call (a data-dependent shape such as
                # x[mask], or no meta kernel): it runs through the CPU fallback, now
                # and on every later call with the same key.
                self.cache[key] = FALLBACK
                raise NeedsFallback(str(meta_error)) from meta_error
            raise meta_error
        check = argument_check_for(self.lowering_name)
        if check is not None:  # what the CPU kernel rejects and the meta kernel does not
            try:
                check(*args, **kwargs)
            except RunOnCpu as why:  # a call lazax runs on the CPU by design
                self.cache[key] = FALLBACK
                raise NeedsFallback(str(why)) from None
        counter = [0]
        args_t = tuple(_template(a, s, counter) for a, s in zip(args, self.slots))
        args_t += tuple(_template(a, 0, counter) for a in args[len(self.slots) :])
        kwargs_t = tuple(
            (k, _template(v, self.kw_slots.get(k, 0), counter)) for k, v in kwargs.items()
        )
        layout_of = layout_arguments_for(self.lowering_name)
        if layout_of is not None:  # values that depend on an input's strides
            extra = layout_of(*meta_args, **meta_kwargs)
            kwargs_t += tuple((k, _encode(v)) for k, v in sorted(extra.items()))
        if self.kind == INPLACE:
            written = args[0]
            flat = list(written) if isinstance(written, (list, tuple)) else [written]
            outs = [_meta(t) for t in flat]
            result = None
        else:
            outs, result = _flatten(out)
        fix = _CPU_KERNEL_SPECS.get(self.func)
        if fix is not None:
            outs = fix(meta_args, outs)
        specs = tuple(ir.TensorSpec(tuple(o.shape), dtype_name(o.dtype)) for o in outs)
        layouts = []
        if self.kind == VIEW:
            storage_shape = args[self.alias_source]._lz_storage.spec.shape
            for o in outs:
                layouts.append(
                    Layout(
                        tuple(o.shape),
                        o.dtype,
                        tuple(o.stride()),
                        o.storage_offset(),
                        storage_shape,
                    )
                )
        else:
            layouts = [Layout(tuple(o.shape), o.dtype) for o in outs]
        base = next((o._lz_key[1] for o in operands if type(o) is LazyTensor), None)
        base_name = (
            dtype_name(base) if base is not None else (specs[0].dtype if specs else "float32")
        )
        scalar_dtypes = tuple(
            _scalar_dtype(base_name, type(o)) for o in operands if type(o) is not LazyTensor
        )
        info = OpInfo(
            self.lowering_name, (args_t, kwargs_t), specs, tuple(layouts), result, scalar_dtypes
        )
        if len(self.cache) >= SPEC_CACHE_LIMIT:
            self.cache.clear()  # bound memory for programs that never repeat a key
        self.cache[key] = info
        return info

    def _raise_cpu_error(self, args, kwargs) -> bool:
        """Raise the CPU kernel's error for this call, if it has one; True if the CPU
        kernel accepted the call, False if the call was too large to try."""
        sizes = [math.prod(a._lz_key[0]) for a in args if type(a) is LazyTensor]
        if sum(sizes) > 1 << 24:
            return False  # too large to reproduce cheaply
        try:
            self.func(*[_cpu(a) for a in args], **{k: _cpu(v) for k, v in kwargs.items()})
        except Exception as cpu_error:
            raise cpu_error.with_traceback(None) from None
        return True


def _batch_norm_saved_stats(meta_args, outs):
    """torch's CPU batch-norm kernels save the statistics in the input's dtype, and
    save nothing (shape ``(0,)``) when normalizing by running statistics; the meta
    kernels say float32 ``(C,)`` (what CUDA returns). lazax follows the CPU. Argument
    counts: ``_no_training`` 7, ``.no_stats`` 6 (always batch statistics), ``.default``
    and ``_functional`` 8 with ``training`` at 5 (``_functional`` also returns the new
    running statistics, in their own dtype on the CPU)."""
    x = meta_args[0]
    by_running_stats = len(meta_args) == 7 or (len(meta_args) == 8 and not meta_args[5])
    fixed = list(outs)
    for k in (1, 2):
        shape = (0,) if by_running_stats else tuple(outs[k].shape)
        fixed[k] = torch.empty(shape, dtype=x.dtype, device="meta")
    for k in range(3, len(outs)):  # _functional's new running_mean, running_var
        fixed[k] = torch.empty(tuple(outs[k].shape), dtype=meta_args[k].dtype, device="meta")
    return fixed


def _layer_norm_saved_stats(meta_args, outs):
    """torch's CPU layer-norm kernel saves mean and rstd in the input's dtype (bfloat16
    in, bfloat16 statistics); the meta kernel says float32."""
    x = meta_args[0]
    return [outs[0]] + [torch.empty(tuple(o.shape), dtype=x.dtype, device="meta") for o in outs[1:]]


_CPU_KERNEL_SPECS = {
    torch.ops.aten.native_layer_norm.default: _layer_norm_saved_stats,
    torch.ops.aten._native_batch_norm_legit_no_training.default: _batch_norm_saved_stats,
    torch.ops.aten._native_batch_norm_legit.default: _batch_norm_saved_stats,
    torch.ops.aten._native_batch_norm_legit.no_stats: _batch_norm_saved_stats,
    torch.ops.aten._native_batch_norm_legit_functional.default: _batch_norm_saved_stats,
}


def _flatten(out: Any) -> tuple[list, Any]:
    """Output tensors in order, and a template to rebuild the op's return value."""
    flat: list = []

    def walk(o):
        if isinstance(o, torch.Tensor):
            flat.append(o)
            return len(flat) - 1
        if isinstance(o, (list, tuple)):
            return (type(o), tuple(walk(x) for x in o))
        return ("const", o)

    return flat, walk(out)


def aten_overload(name: str):
    """``"arange.start"`` -> ``torch.ops.aten.arange.start`` (no overload: ``default``)."""
    packet, _, overload = name.partition(".")
    return getattr(getattr(torch.ops.aten, packet), overload or "default")
