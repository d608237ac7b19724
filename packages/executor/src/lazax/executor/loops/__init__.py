"""Loops in the graph: layers run as one XLA loop (``scan_layers``)."""

from .scan_layers import scan_layers

__all__ = ["scan_layers"]
