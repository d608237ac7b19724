"""Loops in the graph: identical layers as one XLA loop, called (``scan_layers``) or
found in a model's own loop over a ``ModuleList`` (``auto``)."""

from .auto import install as install_auto_loops
from .scan_layers import scan_layers

__all__ = ["install_auto_loops", "scan_layers"]
