"""Index bounds checked on the device, with torch's CPU messages (see ``barrier.checks``).

Contract: ``check_index(ctx, idx, size, error, message, negative)`` reports ``error``
with ``message`` (``{value}``: the first offending index) when any element of ``idx`` lies
outside ``[-size, size)`` (``negative=True``, as Python indexing allows) or
``[0, size)``. The messages are torch's, so that the same ``except`` and the same
regular expression work on a lazax tensor as on a CPU one.
"""

from __future__ import annotations

__all__ = ["IN_SELF", "bounds_message", "check_index"]

# index_select's, embedding's and index_add's words.
IN_SELF = "index out of range in self"


def check_index(ctx, idx, size: int, error: str, message: str, negative: bool = False) -> None:
    low = -size if negative else 0
    ctx.check((idx < low) | (idx >= size), idx, error, message)


def bounds_message(dim: int, size: int, prefix: str = "") -> str:
    """torch's "index {value} is out of bounds for dimension d with size n"."""
    return f"{prefix}index {{value}} is out of bounds for dimension {dim} with size {size}"
