"""Loops and branches in the graph: identical layers as one XLA loop, called
(``scan_layers``) or found in a model's own loop over a ``ModuleList`` (``auto``), and
torch's control-flow operators as XLA's (``control_flow``), which torch runs through
dynamo: dynamo learns the lazax tensor as soon as it is imported (``dynamo_tensor``)."""

from .auto import install as install_auto_loops
from .control_flow import install as install_control_flow
from .dynamo_tensor import install as install_into_dynamo
from .dynamo_tensor import install_when_dynamo_loads, unknown_torch
from .scan_layers import scan_layers

__all__ = [
    "install_auto_loops",
    "install_control_flow",
    "install_into_dynamo",
    "install_when_dynamo_loads",
    "scan_layers",
    "unknown_torch",
]
