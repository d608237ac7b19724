"""lazax.ir: the IR every mode builds and every sync walks.

Nodes (op, operand values, attributes, output specs) carry a structural hash computed
once at construction; parameter leaves hash by spec, never by value; ``collect`` turns
output values into a post-ordered ``Graph`` with its graph hash; ``dump`` prints one;
``private_parameters`` says which inputs of a graph nothing else can reach (donation).
Pure Python: imports neither torch nor jax.
"""

from ._graph import Graph, collect, dump, post_order
from ._holders import holder_count, holder_counts, private_parameters, refcounts_reliable
from ._node import (
    DEVICE_DATA,
    DTYPE_CODES,
    SCALAR,
    Node,
    TensorSpec,
    Value,
    device_data,
    node_base_hash,
    scalar_parameter,
)
from ._stable import stable_hash, stable_str_code
from ._version import __version__

__all__ = [
    "DEVICE_DATA",
    "DTYPE_CODES",
    "SCALAR",
    "Graph",
    "Node",
    "TensorSpec",
    "Value",
    "__version__",
    "collect",
    "device_data",
    "dump",
    "holder_count",
    "holder_counts",
    "node_base_hash",
    "post_order",
    "private_parameters",
    "refcounts_reliable",
    "scalar_parameter",
    "stable_hash",
    "stable_str_code",
]
