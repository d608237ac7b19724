"""Elementwise ``_foreach_*`` ops over whole stacked buffers instead of their rows.

Contract of ``over_rows(func, handler)``: the handler of an elementwise ``_foreach_*``
overload, wrapped. Where the tensors at some positions of the op's lists are, in every
list argument, the rows ``0 .. n-1`` in that order (``base[i]`` of a contiguous
``(n, *shape)`` storage, the same row index in every list) of one storage per list,
those positions become one item of the op: the whole storage (the values of a
``Scalar[]`` argument there must be equal, and become one). An in-place op then writes
the storages, which the rows read; an out-of-place op's results at those positions are
the rows of its result for the storage. The values are those of the op row by row: the
math is elementwise, the same on a row as on the stack. Everything else runs item by item as
before: rows that do not cover their storage or come out of order, rows at different
indices in different lists, scalars that differ between the rows, arguments passed by
keyword, and ops whose items are not elementwise (``_foreach_norm``, ``_foreach_max``,
the ``.Tensor`` overloads of ``addcmul``/``addcdiv``, which take one scalar per item in
a tensor).

Why: ``lx.scan_layers`` keeps the parameters of identical layers as rows of stacked
storages, and gives their gradients and optimizer state the same form. An optimizer's
foreach over them is then one computation per stacked storage in the program, not one
per parameter: the program of a deep model's training step stops growing with depth
(docs/deep_models.md).
"""

from __future__ import annotations

import math

import torch

from ..ops.pseudo import contiguous_strides
from ..state.dtypes import dtype_name
from ..state.layout import Layout
from ..tensor.lazy import LazyTensor, rebind

__all__ = ["over_rows", "row_of", "stacks_rows", "whole_of"]

aten = torch.ops.aten

# Ops whose items are reductions, and ops whose .Tensor overloads take one scalar per
# item in a tensor.
_REDUCTIONS = ("_foreach_norm", "_foreach_max")
_SCALARS_IN_A_TENSOR = ("_foreach_addcmul", "_foreach_addcdiv")


def stacks_rows(func) -> bool:
    """Whether ``over_rows`` applies to ``func`` (an elementwise foreach overload)."""
    name = func._schema.name.removeprefix("aten::").rstrip("_")
    if not name.startswith("_foreach_"):
        return False
    if name in _REDUCTIONS:
        return False
    if name in _SCALARS_IN_A_TENSOR and func._overloadname.startswith("Tensor"):
        return False
    return any(_is_list(a, "Tensor") for a in func._schema.arguments)


def _is_list(argument, element: str) -> bool:
    kind = argument.type
    return isinstance(kind, torch.ListType) and str(kind.getElementType()) == element


def row_of(t):
    """``(storage, index, rows)`` when ``t`` is row ``index`` of a contiguous stacked
    storage of ``rows`` rows, read as its own dtype; else None."""
    if type(t) is not LazyTensor:
        return None
    view = t._lz_view
    if view is None:
        return None
    size, stride, offset = view
    storage = t._lz_storage
    spec = storage.spec
    shape = tuple(spec.shape)
    if len(shape) != len(size) + 1 or shape[1:] != tuple(size) or spec.dtype != dtype_name(t.dtype):
        return None
    numel = math.prod(size)
    if numel == 0 or offset % numel or tuple(stride) != contiguous_strides(tuple(size)):
        return None
    return storage, offset // numel, shape[0]


def _complete_groups(lists: list, scalars: list) -> dict:
    """First position -> (positions, one storage per list) of each set of positions that
    covers whole storages, row by row, in every list."""
    found: dict = {}
    for k in range(len(lists[0])):
        rows = [row_of(items[k]) for items in lists]
        if any(r is None for r in rows):
            continue
        index, count = rows[0][1], rows[0][2]
        if any(r[1] != index or r[2] != count for r in rows):
            continue
        key = tuple(id(r[0]) for r in rows)
        group = found.setdefault(key, ([], [r[0] for r in rows], count))
        if index != len(group[0]):  # out of order, or a row twice
            group[0].append(None)
        group[0].append(k)
    complete = {}
    for positions, storages, count in found.values():
        if len(positions) != count or None in positions or count < 2:
            continue
        if any(len({_scalar_key(values[k]) for k in positions}) != 1 for values in scalars):
            continue
        complete[positions[0]] = (positions, storages)
    return complete


def _scalar_key(value):
    # 1, 1.0 and True are equal to Python and differ to torch's type promotion.
    return (type(value), value)


def over_rows(func, handler):
    """``handler`` run on whole storages where the lists cover them (see the module's
    contract)."""
    arguments = func._schema.arguments
    tensor_lists = [j for j, a in enumerate(arguments) if _is_list(a, "Tensor")]
    scalar_lists = [j for j, a in enumerate(arguments) if _is_list(a, "number")]
    in_place = not func._schema.returns

    def run(args, kwargs):
        if len(args) <= max(tensor_lists + scalar_lists) or len(args[tensor_lists[0]]) < 2:
            return handler(args, kwargs)
        lists = [args[j] for j in tensor_lists]
        if not any(getattr(t, "_lz_view", None) is not None for t in lists[0]):
            return handler(args, kwargs)  # no row at all: the common case, kept cheap
        if any(len(items) != len(lists[0]) for items in lists):
            return handler(args, kwargs)  # (the op's own error)
        groups = _complete_groups(lists, [args[j] for j in scalar_lists])
        if not groups:
            return handler(args, kwargs)
        members = {k for positions, _ in groups.values() for k in positions}
        new_args = list(args)
        for j in tensor_lists + scalar_lists:
            column = []
            list_index = tensor_lists.index(j) if j in tensor_lists else None
            for k, item in enumerate(args[j]):
                if k in groups:
                    if list_index is None:
                        column.append(item)
                    else:
                        storage = groups[k][1][list_index]
                        column.append(whole_of(storage, item.dtype))
                elif k not in members:
                    column.append(item)
            new_args[j] = column
        result = handler(tuple(new_args), kwargs)
        if in_place:
            return result
        return _expand(result, groups, members, len(lists[0]))

    return run


def whole_of(storage, dtype: torch.dtype) -> LazyTensor:
    """A tensor that is the whole of ``storage`` (not a view of it)."""
    return rebind(storage, Layout(tuple(storage.spec.shape), dtype))


def _expand(result: list, groups: dict, members: set, count: int) -> list:
    """The op's per-position results from its results per item."""
    out: list = [None] * count
    produced = iter(result)
    for k in range(count):
        if k in groups:
            whole = next(produced)
            for i, position in enumerate(groups[k][0]):
                out[position] = aten.select.int(whole, 0, i)
        elif k not in members:
            out[k] = next(produced)
    return out
