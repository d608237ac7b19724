"""Reading and writing a tensor's content as IR, through views.

Contract: ``ir_value(t)`` is the IR value of ``t``'s current content: its storage's
value for a tensor that is not a view (``t._lz_view is None``); for a view
(``_lz_view = (size, stride, offset)`` into the base's contiguous layout) its cached IR,
or, after the base was written, a new ``lazax::view_gather`` of the base (kept as the
view's cache). ``peek_value(t)`` is the same value without keeping anything: a look
(``program_text``) must not make the view hold the base's pending IR, which would stop
the next sync from donating the base's buffer.
``write(t, value)`` replaces ``t``'s content: for a view, through a
``lazax::view_scatter`` into the base, so the base and every other view see it.
"""

from __future__ import annotations

from lazax import ir

from ..ops.pseudo import view_gather, view_scatter

__all__ = ["ir_value", "peek_value", "write"]


def ir_value(t) -> ir.Value:
    """The IR value of ``t``'s current content."""
    storage = t._lz_storage
    view = t._lz_view
    if view is None:
        return storage.value
    if t._lz_seen != storage.version:
        t._lz_value = view_gather(storage.value, view, t._lz_value.spec.dtype)
        t._lz_seen = storage.version
    return t._lz_value


def peek_value(t) -> ir.Value:
    """``ir_value(t)``, without caching a new view value on ``t``."""
    storage = t._lz_storage
    if t._lz_view is not None and t._lz_seen != storage.version:
        return view_gather(storage.value, t._lz_view, t._lz_value.spec.dtype)
    return ir_value(t)


def write(t, value: ir.Value) -> None:
    """Replace the content of ``t`` (shape and dtype already ``t``'s) by ``value``."""
    storage = t._lz_storage
    view = t._lz_view
    if view is None:
        storage.set(value)
        t._lz_seen = storage.version
        return
    storage.set(view_scatter(storage.value, view, value))
    t._lz_value = value
    t._lz_seen = storage.version
