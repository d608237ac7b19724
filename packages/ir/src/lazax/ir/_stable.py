"""Deterministic hashing of IR attributes.

Contract: ``stable_hash(obj)`` returns the same int for equal values in every process,
whatever ``PYTHONHASHSEED`` is. Python's own ``hash()`` is salted for ``str`` and
``bytes``, is address-based for ``None`` (on Python 3.11) and identity-based for NaN, so
those are mapped to fixed codes first. Ints, floats, bools and tuples of them hash
deterministically in CPython, so the rest is left to the fast built-in ``hash``, except
-1: CPython's ``hash(-1)`` is -2, the same as ``hash(-2)`` (and so for -1.0 and -2.0),
which would make ``dim=-1`` and ``dim=-2`` the same graph; -1 gets a code of its own.

Accepted values: None, bool, int, float, str, bytes, and tuples/lists of those
(nested). Anything else is a ``TypeError``: an attribute that cannot be hashed the same
way in two processes must not reach the graph key.
"""

from __future__ import annotations

import hashlib
import math

__all__ = ["stable_hash", "stable_str_code"]

_STR_CODES: dict[str, int] = {}

# Type tags keep 1, 1.0 and True apart (Python hashes them equal).
_NONE = 0x6E6F6E65
_NAN = 0x6E616E00
_TAG_INT = 1
_TAG_FLOAT = 2
_TAG_BOOL = 3
_TAG_STR = 4
_TAG_SEQ = 5
_TAG_BYTES = 6
_MINUS_ONE_INT = hash((7,))
_MINUS_ONE_FLOAT = hash((8,))


def stable_str_code(text: str) -> int:
    """A 63-bit code for ``text`` that is the same in every process (memoised)."""
    code = _STR_CODES.get(text)
    if code is None:
        digest = hashlib.blake2b(text.encode(), digest_size=8).digest()
        code = int.from_bytes(digest, "little") >> 1
        _STR_CODES[text] = code
    return code


def stable_hash(obj: object) -> int:
    """Hash ``obj`` (an attribute value) deterministically across processes."""
    kind = type(obj)
    if kind is int:
        return hash((_TAG_INT, obj)) if obj != -1 else _MINUS_ONE_INT
    if kind is float:
        if obj == -1.0:
            return _MINUS_ONE_FLOAT
        return hash((_TAG_FLOAT, _NAN if math.isnan(obj) else obj))
    if kind is bool:
        return hash((_TAG_BOOL, obj))
    if kind is str:
        return hash((_TAG_STR, stable_str_code(obj)))
    if obj is None:
        return _NONE
    if kind is tuple or kind is list:
        return hash((_TAG_SEQ, *[stable_hash(item) for item in obj]))
    if kind is bytes:
        digest = hashlib.blake2b(obj, digest_size=8).digest()
        return hash((_TAG_BYTES, int.from_bytes(digest, "little") >> 1))
    raise TypeError(
        f"IR attributes must be None, bool, int, float, str, bytes or tuples of them, "
        f"but got {kind.__name__}: {obj!r}. Convert it to one of those before building "
        f"the node (for example a torch.dtype to its name)."
    )
