"""Where the persistent tier lives on disk, and whether it may be used.

Contract: ``persistent_cache_settings()`` reads ``LAZAX_PERSISTENT_CACHE_DIR`` (unset:
no persistent tier) and ``LAZAX_PERSISTENT_CACHE_READ_ONLY`` (a shared cache other jobs
fill). ``prepare_directory(path, read_only)`` returns the directory to use, or None with
a warning when it cannot be used (not a directory, unreadable, or not writable when
writes are wanted): a run without the persistent tier is slower, never wrong. A
directory it creates is private to the user (mode 0700). What is stored there, and how,
belongs to the runtime (jax's own persistent compilation cache: serialized executables,
never pickle). Pure Python.
"""

from __future__ import annotations

import os
import warnings
from pathlib import Path

__all__ = ["ENV_DIR", "ENV_READ_ONLY", "persistent_cache_settings", "prepare_directory"]

ENV_DIR = "LAZAX_PERSISTENT_CACHE_DIR"
ENV_READ_ONLY = "LAZAX_PERSISTENT_CACHE_READ_ONLY"


def persistent_cache_settings() -> tuple[str | None, bool]:
    """(directory or None, read-only) from the environment."""
    path = os.environ.get(ENV_DIR) or None
    read_only = os.environ.get(ENV_READ_ONLY, "0") not in ("", "0", "false")
    return path, read_only


def prepare_directory(path: str | os.PathLike, read_only: bool = False) -> Path | None:
    where = Path(path).expanduser()
    try:
        if not where.exists() and not read_only:
            where.mkdir(mode=0o700, parents=True)
        if not where.is_dir():
            raise OSError(f"{where} is not a directory")
        wanted = os.R_OK | os.X_OK | (0 if read_only else os.W_OK)
        if not os.access(where, wanted):
            raise OSError(f"{where} is not {'readable' if read_only else 'readable and writable'}")
        next(where.iterdir(), None)  # really list it (access() trusts mode bits only)
    except OSError as err:
        warnings.warn(
            f"lazax: the persistent compilation cache at {where} cannot be used ({err}); "
            f"compiling without it. Point {ENV_DIR} at a directory you can "
            f"{'read' if read_only else 'read and write'}.",
            RuntimeWarning,
            stacklevel=3,
        )
        return None
    return where
