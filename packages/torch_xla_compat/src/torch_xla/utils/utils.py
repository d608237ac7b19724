"""``torch_xla.utils.utils`` (``xu``): the plain helpers torch_xla scripts use.

Contract:
- ``getenv_as(name, type, defval=None)``: the variable converted by ``type`` (``bool``
  reads "0"/"false"/"" as False), ``defval`` when unset.
- ``as_list(t)``: lists and tuples as a list, anything else as ``[t]``.
- ``SampleGenerator(data, sample_count)``: an iterable yielding ``data``
  ``sample_count`` times (fake data for benchmarks), with ``len()``.
- ``get_free_tcp_ports(n=1)``: ``n`` ports free on this host now.
- ``check_env_flag(name, default="")``: the variable says 1, true, yes or on.
"""

from __future__ import annotations

import os
import socket

__all__ = ["SampleGenerator", "as_list", "check_env_flag", "get_free_tcp_ports", "getenv_as"]


def getenv_as(name: str, type, defval=None):
    value = os.environ.get(name)
    if value is None:
        return defval
    if type is bool:
        return value.strip().lower() not in ("", "0", "false", "no", "off")
    return type(value)


def as_list(t) -> list:
    return list(t) if isinstance(t, (list, tuple)) else [t]


class SampleGenerator:
    """Yields ``data`` ``sample_count`` times."""

    def __init__(self, data, sample_count: int) -> None:
        self._data = data
        self._count = int(sample_count)

    def __len__(self) -> int:
        return self._count

    def __iter__(self):
        for _ in range(self._count):
            yield self._data


def get_free_tcp_ports(n: int = 1) -> list[int]:
    # Bind all n at once, so that the OS gives n different ports.
    sockets = [socket.socket(socket.AF_INET, socket.SOCK_STREAM) for _ in range(n)]
    try:
        for s in sockets:
            s.bind(("", 0))
        return [s.getsockname()[1] for s in sockets]
    finally:
        for s in sockets:
            s.close()


def check_env_flag(name: str, default: str = "") -> bool:
    """The variable (or ``default``) is one of "1", "true", "yes", "on" (any case)."""
    return os.environ.get(name, default).strip().upper() in ("1", "TRUE", "YES", "ON")
