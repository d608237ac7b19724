"""Graphs around the ops that cannot be replayed: device programs between them.

Contract: when capturing an FX graph breaks (``CaptureBroken``: an op runs on the CPU
fallback, reads the host, or has a data-dependent shape), ``breaking_node(gm, args,
tensor_positions)`` traces it again through an interpreter that notes each node it
runs and returns the ``call_function`` node where the capture broke (None when the break
is not one node's: an input or output a replay cannot express). ``split(gm, refused)``
copies ``gm`` and groups its other ``call_function`` nodes into connected subgraphs
(torch's ``CapabilityBasedPartitioner``), each a ``call_module`` of a submodule named
``part_<k>``, while the refused nodes (and ``getitem``s of their results) stay in the
top graph; it returns the top graph and the names of its parts, which the caller
replaces with what runs them (the bridge: a ``GraphBridge`` per part, so each is captured
and replayed by hash, and a part that breaks again is split in turn). The top graph then
runs per call as plain Python: the parts' programs, and the refused ops as lazy mode
runs them (the CPU fallback, a host read), between them.
"""

from __future__ import annotations

import copy
import operator

import torch
from torch.fx.passes.infra.partitioner import CapabilityBasedPartitioner
from torch.fx.passes.operator_support import OperatorSupportBase

from lazax.executor import CaptureBroken, Replay

__all__ = ["breaking_node", "split"]


class _Tracking(torch.fx.Interpreter):
    """Runs the graph node by node, keeping the node being run."""

    node: torch.fx.Node | None = None

    def run_node(self, n: torch.fx.Node):
        self.node = n
        return super().run_node(n)


def breaking_node(gm: torch.fx.GraphModule, args, tensor_positions) -> torch.fx.Node | None:
    """The ``call_function`` node whose op broke the capture of ``gm`` on ``args``."""
    tracker = _Tracking(gm)
    try:
        Replay(lambda *a: tracker.run(*a), args, tensor_positions)
    except CaptureBroken:
        node = tracker.node
        if node is not None and node.op == "call_function" and node.target is not operator.getitem:
            return node
    return None  # not one node's (or it did not break again)


class _Replayable(OperatorSupportBase):
    def __init__(self, refused: set[str]) -> None:
        self.refused = refused

    def is_node_supported(self, submodules, node: torch.fx.Node) -> bool:
        if node.op != "call_function" or node.name in self.refused:
            return False
        if node.target is operator.getitem:  # of a refused op's results: stays with it
            source = node.args[0]
            return not (isinstance(source, torch.fx.Node) and source.name in self.refused)
        return True


def split(gm: torch.fx.GraphModule, refused: set[str]) -> tuple[torch.fx.GraphModule, list[str]]:
    """A copy of ``gm`` whose nodes other than ``refused`` (node names) are grouped into
    submodules ``part_<k>``; returns it and the part names, in the graph's order."""
    top = copy.deepcopy(gm)
    partitioner = CapabilityBasedPartitioner(
        top, _Replayable(refused), allows_single_node_partition=True
    )
    partitions = partitioner.propose_partitions()
    top = partitioner.fuse_partitions(partitions, prefix="part_")
    names = [n.target for n in top.graph.nodes if n.op == "call_module"]
    return top, names
