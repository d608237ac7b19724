"""The computation-cache key, built from named parts.

Contract: ``CacheKey(parts)`` takes an ordered mapping of part name -> part hash (an
int): the graph, the input specs, the device, the compile options, the versions of
everything that shapes the program. ``key.digest`` combines them into one int (the
key the LRU uses); two keys are equal exactly when every part is. ``key.first_difference
(other)`` names the first part that differs, which is how a recompile is explained.
``environment_part(values)`` hashes a mapping of strings (versions, options) into one
part, stably across processes. Pure Python.
"""

from __future__ import annotations

import hashlib
from collections.abc import Mapping

__all__ = ["CacheKey", "environment_part"]


def environment_part(values: Mapping[str, object]) -> int:
    """A stable 63-bit hash of ``values`` (sorted by name, values as ``repr``)."""
    text = "\n".join(f"{k}={values[k]!r}" for k in sorted(values))
    return int.from_bytes(hashlib.blake2b(text.encode(), digest_size=8).digest(), "big") >> 1


class CacheKey:
    """A cache key whose parts keep their names (see the module docstring)."""

    __slots__ = ("parts", "digest")

    def __init__(self, parts: Mapping[str, int]) -> None:
        self.parts = dict(parts)
        self.digest = hash(tuple(self.parts.items()))

    def __eq__(self, other: object) -> bool:
        return isinstance(other, CacheKey) and self.parts == other.parts

    def __hash__(self) -> int:
        return self.digest

    def first_difference(self, other: CacheKey) -> str | None:
        """The name of the first part that differs from ``other``'s (None: none)."""
        for name in list(self.parts) + [n for n in other.parts if n not in self.parts]:
            if self.parts.get(name) != other.parts.get(name):
                return name
        return None

    def __repr__(self) -> str:
        body = ", ".join(f"{k}={v & 0xFFFFFFFFFFFFFFFF:016x}" for k, v in self.parts.items())
        return f"CacheKey({body})"
