"""Loops and branches in the graph: identical layers as one XLA loop, called
(``scan_layers``) or found in a model's own loop over a ``ModuleList`` (``auto``), and
torch's control-flow operators as XLA's (``control_flow``)."""

from .auto import install as install_auto_loops
from .control_flow import install as install_control_flow
from .scan_layers import scan_layers

__all__ = ["install_auto_loops", "install_control_flow", "scan_layers"]
