"""``Layout``: how one op output is presented as a torch tensor (shape, dtype, strides,
offset over its storage), precomputed once per spec-cache entry; ``layout_over`` gives
the layout that reads a storage as another dtype of the same size as a view."""

from __future__ import annotations

import math

import torch

from ..ops.pseudo import contiguous_strides
from .dtypes import dtype_name
from .storage import Storage

__all__ = ["Layout", "layout_over"]


class Layout:
    """How to present one op output as a torch tensor (precomputed per spec-cache entry)."""

    __slots__ = ("shape", "dtype", "dtype_name", "stride", "offset", "view", "mkey", "numel")

    def __init__(
        self,
        shape: tuple[int, ...],
        dtype: torch.dtype,
        stride: tuple[int, ...] | None = None,
        offset: int = 0,
        storage_shape: tuple[int, ...] | None = None,
    ) -> None:
        self.shape = shape
        self.dtype = dtype
        self.dtype_name = dtype_name(dtype)
        self.numel = math.prod(shape)
        contiguous = contiguous_strides(shape)
        self.stride = contiguous if stride is None else stride
        self.offset = offset
        if storage_shape is None:
            storage_shape = shape
        # A "view" unless it is the whole base, same shape, in contiguous order: such an
        # alias (detach, alias, a no-op view) reads the storage's value directly.
        full = shape == storage_shape and self.stride == contiguous and offset == 0
        self.view = None if full else (shape, self.stride, offset)
        self.mkey = (shape, dtype, self.stride, offset, storage_shape)


_REINTERPRETING: dict[tuple, Layout] = {}


def layout_over(layout: Layout, storage: Storage) -> Layout:
    """``layout`` as presented over ``storage``: as it is, or as a view where it is the
    whole storage read as another dtype of the same size (``x.view(torch.int32)`` of a
    float32 ``x``), which must re-read the base's bytes, not its value."""
    if layout.view is None and layout.dtype_name != storage.spec.dtype:
        return _reinterpreting(layout)
    return layout


def _reinterpreting(layout: Layout) -> Layout:
    found = _REINTERPRETING.get(layout.mkey)
    if found is None:
        found = Layout(layout.shape, layout.dtype, layout.stride, layout.offset)
        found.view = (layout.shape, layout.stride, layout.offset)
        found.mkey = layout.mkey
        _REINTERPRETING[layout.mkey] = found
    return found
