"""Checks on ``out=`` tensors that torch's CPU kernels make and lazax's ``out=`` path
(the functional rule, then a copy into ``out``) would skip.

Contract: ``checked_out(func, handler, plan)`` wraps the handler of the ``out=``
overload ``func``; before the handler runs:
1. Memory overlap, as the CPU kernel checks it. Only where an ``out`` tensor may overlap
   itself (a view with a zero stride: an expanded tensor) or shares a storage with an
   input is anything done: the call is reproduced on the CPU over zero-filled storages
   with the same layout relations (same strides and offsets into shared storages), and
   the kernel's own "unsupported operation: ..." error, if it raises one, is raised.
   torch's kernels differ in what they forbid (``gather`` any overlap with its input,
   ``add`` partial overlap only, ``sum`` nothing), so the kernel decides; calls without
   aliasing, the normal case, cost one identity test per tensor.
2. Dtypes and shapes of ``out``, for lowered ops (``plan`` given), once per key: the
   ``out=`` overload's meta kernel runs; where it rejects the call, the CPU kernel on
   zero-filled tensors decides and its error is raised (the meta kernel is a filter: it
   never rejects what the CPU accepts).
3. The argument check registered for the ``out=`` overload (``ops._arguments``), once
   per key: the checks neither meta kernel makes (``aminmax``'s out dtype).
Calls too large to reproduce on the CPU (over ``_CPU_LIMIT`` elements) skip 1 and 2.
"""

from __future__ import annotations

import math
import warnings

import torch

from ..ops._arguments import argument_check_for
from ..tensor.lazy import LazyTensor
from .plans import SPEC_CACHE_LIMIT, _cpu, _meta

__all__ = ["checked_out"]

_CPU_LIMIT = 1 << 24  # elements: a CPU reproduction larger than this is not tried
_OVERLAP_ERROR = "unsupported operation:"


def _is_out(arg) -> bool:
    return arg.kwarg_only and arg.alias_info is not None and arg.alias_info.is_write


def _tensors(value, found: list) -> list:
    if type(value) is LazyTensor:
        found.append(value)
    elif isinstance(value, (list, tuple)):
        for v in value:
            _tensors(v, found)
    return found


def _self_overlapping(t: LazyTensor) -> bool:
    shape, _, stride = t._lz_key[:3]
    return 0 in stride and any(s == 0 and n > 1 for s, n in zip(stride, shape))


def _aliased(outs: list, args: tuple, kwargs: dict, out_names: tuple) -> bool:
    """Some ``out`` tensor may overlap itself or share memory with an input."""
    storages = [o._lz_storage for o in outs]
    for o in outs:
        if _self_overlapping(o):
            return True
    if len(outs) > 1 and len({id(s) for s in storages}) < len(outs):
        return True
    for a in args:
        if type(a) is LazyTensor:
            if any(a._lz_storage is s for s in storages):
                return True
        elif isinstance(a, (list, tuple)):
            if any(t._lz_storage is s for t in _tensors(a, []) for s in storages):
                return True
    if len(kwargs) > len(out_names):
        others = [v for k, v in kwargs.items() if k not in out_names]
        return any(t._lz_storage is s for t in _tensors(others, []) for s in storages)
    return False


def _reproduce(value, bases: dict):
    """``value`` on the CPU: each lazax storage one zero-filled CPU buffer, each tensor
    a view of it with the lazax tensor's strides and offset (one view per tensor: torch
    tells a tensor passed twice from two views of one buffer)."""
    if type(value) is LazyTensor:
        if id(value) in bases:
            return bases[id(value)]
        shape, dtype, stride, offset, storage_shape = value._lz_key
        key = (id(value._lz_storage), dtype)
        if key not in bases:
            bases[key] = torch.zeros(math.prod(storage_shape), dtype=dtype)
        bases[id(value)] = bases[key].as_strided(shape, stride, offset)
        return bases[id(value)]
    if isinstance(value, (list, tuple)):
        return type(value)(_reproduce(v, bases) for v in value)
    if isinstance(value, torch.device):
        return torch.device("cpu")
    return value


def _size(args: tuple, kwargs: dict) -> int:
    """Elements of every lazax storage the call touches (what a reproduction costs)."""
    tensors = _tensors([args, list(kwargs.values())], [])
    return sum(math.prod(t._lz_key[4]) for t in tensors)


def _check_overlap(func, args, kwargs) -> None:
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # "an output ... was resized"
            bases: dict = {}
            func(*_reproduce(args, bases), **{k: _reproduce(v, bases) for k, v in kwargs.items()})
    except Exception as cpu_error:
        if str(cpu_error).startswith(_OVERLAP_ERROR):
            raise cpu_error.with_traceback(None) from None
        # Any other error of a zero-filled reproduction is not this check's to report.


def _key(value):
    if type(value) is LazyTensor:
        return value._lz_key
    if isinstance(value, (list, tuple)):
        return tuple(_key(v) for v in value)
    if isinstance(value, torch.Tensor):
        return ("cpu", tuple(value.shape), value.dtype)
    if isinstance(value, (int, float, bool)):
        return (type(value), value)
    return str(value)


def _check_specs(func, args, kwargs, size: int) -> None:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        try:
            func(*[_meta(a) for a in args], **{k: _meta(v) for k, v in kwargs.items()})
        except NotImplementedError:
            pass  # no meta kernel: nothing to learn from it
        except Exception as meta_error:
            if size > _CPU_LIMIT:
                raise meta_error.with_traceback(None) from None
            try:
                func(*[_cpu(a) for a in args], **{k: _cpu(v) for k, v in kwargs.items()})
            except Exception as cpu_error:
                raise cpu_error.with_traceback(None) from None
    check = argument_check_for(func.name())
    if check is not None:
        check(*args, **kwargs)


def checked_out(func, handler, plan=None):
    """``handler`` for the ``out=`` overload ``func``, with the checks above first."""
    out_names = tuple(a.name for a in func._schema.arguments if _is_out(a))
    checked: set = set()

    single = out_names[0] if len(out_names) == 1 else None

    def run(args, kwargs):
        if single is not None and type(kwargs.get(single)) is LazyTensor:
            outs = [kwargs[single]]  # the common case, inlined
        else:
            outs = _tensors([kwargs.get(n) for n in out_names], [])
            if not outs:
                return handler(args, kwargs)
        if _aliased(outs, args, kwargs, out_names) and _size(args, kwargs) <= _CPU_LIMIT:
            _check_overlap(func, args, kwargs)
        if plan is not None:
            key = tuple([a._lz_key if type(a) is LazyTensor else _key(a) for a in args])
            key = (key, tuple([(k, _key(v)) for k, v in kwargs.items()]))
            if key not in checked:
                _check_specs(func, args, kwargs, _size(args, kwargs))
                if len(checked) >= SPEC_CACHE_LIMIT:
                    checked.clear()
                checked.add(key)
        return handler(args, kwargs)

    return run
