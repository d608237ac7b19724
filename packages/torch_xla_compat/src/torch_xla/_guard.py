"""Refuse to be ``torch_xla`` beside the real one.

Contract: ``check()`` raises ``ImportError`` when another distribution named
``torch_xla`` / ``torch-xla`` is installed (importlib.metadata), or when a directory
``torch_xla`` holding torch_xla's extension ``_XLAC`` lies on ``sys.path`` outside this
package. Two packages answering ``import torch_xla`` would make which one a script
gets depend on ``sys.path`` order; this package must never shadow the real one silently.
"""

from __future__ import annotations

import importlib.metadata
import sys
from pathlib import Path

__all__ = ["check"]

_HERE = Path(__file__).resolve().parent
_DISTRIBUTIONS = ("torch_xla", "torch-xla")


def _message(where: str) -> str:
    return (
        f"lazax-torch-xla provides the import name torch_xla over lazax, but the real "
        f"torch_xla is installed too ({where}). The two cannot live in one environment: "
        f"uninstall one (`pip uninstall torch_xla` or `pip uninstall lazax-torch-xla`), or "
        f"use a separate virtual environment for each."
    )


def check() -> None:
    """Raise ImportError if the real torch_xla is installed beside this package."""
    for name in _DISTRIBUTIONS:
        try:
            dist = importlib.metadata.distribution(name)
        except importlib.metadata.PackageNotFoundError:
            continue
        raise ImportError(_message(f"distribution {dist.metadata['Name']} {dist.version}"))
    for entry in sys.path:
        try:
            candidate = Path(entry or ".").resolve() / "torch_xla"
            if candidate == _HERE or not candidate.is_dir():
                continue
            found = next(iter(candidate.glob("_XLAC*")), None)
        except OSError:
            continue
        if found is not None:
            raise ImportError(_message(f"its extension {found}"))
