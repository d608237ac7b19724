"""IR nodes, values and tensor specs.

Contract:
- A ``Node`` is immutable once built: an op name, operand values (a ``Node`` is its own
  output 0; ``Value`` names outputs 1 and up), attributes (values
  accepted by ``stable_hash``) and one ``TensorSpec`` per output.
- ``node.hash`` is computed once, in the constructor, from the op, the attributes, the
  output specs and the operands' hashes (a Merkle hash), and is the same in every
  process. Building a node is O(number of operands).
- ``node.depth`` is the longest chain of ops under it (leaves: 0), also computed once:
  how a front-end notices a pending graph that keeps growing because nothing syncs it.
- Parameter leaves (``device_data`` and ``scalar``) hash by spec only, never by value:
  the same program on new data, or with a new learning rate, hashes the same. Their
  payload lives in ``node.data`` and is mutable; it never enters a hash.
"""

from __future__ import annotations

from typing import Any, NamedTuple

from ._stable import stable_hash, stable_str_code

__all__ = [
    "DEVICE_DATA",
    "SCALAR",
    "DTYPE_CODES",
    "Node",
    "TensorSpec",
    "Value",
    "device_data",
    "node_base_hash",
    "scalar_parameter",
]

DEVICE_DATA = "device_data"
SCALAR = "scalar"

# Fixed codes so that spec hashes never depend on str hashing.
DTYPE_CODES: dict[str, int] = {
    name: code
    for code, name in enumerate(
        (
            "bool",
            "uint8",
            "int8",
            "int16",
            "int32",
            "int64",
            "float16",
            "bfloat16",
            "float32",
            "float64",
            "complex64",
            "complex128",
            "uint16",
            "uint32",
            "uint64",
            "float8_e4m3fn",
            "float8_e5m2",
        ),
        start=1,
    )
}


class TensorSpec(NamedTuple):
    """Shape and dtype name (``"float32"``, ``"int64"``, ...) of one tensor."""

    shape: tuple[int, ...]
    dtype: str

    def __str__(self) -> str:
        return f"{self.dtype}[{','.join(map(str, self.shape))}]"


def _specs_key(specs: tuple[TensorSpec, ...]) -> tuple:
    return tuple((DTYPE_CODES[s.dtype], s.shape) for s in specs)


def node_base_hash(op: str, attrs: tuple, specs: tuple[TensorSpec, ...]) -> int:
    """The part of a node's hash that does not depend on its operands.

    Callers that build many nodes of the same op, attributes and specs (the tensor
    layer's per-op cache) compute this once and pass it to ``Node(base_hash=...)``.
    """
    return hash((stable_str_code(op), stable_hash(attrs), _specs_key(specs)))


class Value:
    """Output ``index`` (>= 1) of a multi-output node.

    Output 0 of every node is the node itself (``Node`` has the same ``node``, ``index``,
    ``hash`` and ``spec`` fields), so the common single-output op allocates one object
    and no reference cycle: nodes are freed by reference counting, not the cyclic GC.
    """

    __slots__ = ("node", "index", "hash", "spec")

    def __init__(self, node: Node, index: int, spec: TensorSpec) -> None:
        self.node = node
        self.index = index
        self.spec = spec
        self.hash = hash((node.hash, index))

    @property
    def depth(self) -> int:
        return self.node.depth

    def __repr__(self) -> str:
        return f"Value({self.node.op}#{self.index}: {self.spec})"


class Node:
    """One IR operation, and its own output 0. See the module docstring for hashing."""

    __slots__ = ("op", "operands", "attrs", "specs", "hash", "depth", "data", "__weakref__")

    index = 0  # as a value, a node is its own output 0

    def __init__(
        self,
        op: str,
        operands: tuple[Value | Node, ...],
        attrs: tuple = (),
        specs: tuple[TensorSpec, ...] = (),
        base_hash: int | None = None,
        data: Any = None,
    ) -> None:
        self.op = op
        self.operands = operands
        self.attrs = attrs
        self.specs = specs
        self.data = data
        if base_hash is None:
            base_hash = node_base_hash(op, attrs, specs)
        n = len(operands)
        if n == 0:
            self.hash = base_hash
            self.depth = 0
        elif n == 1:
            first = operands[0]
            self.hash = hash((base_hash, first.hash))
            self.depth = first.depth + 1
        elif n == 2:
            first, second = operands
            self.hash = hash((base_hash, first.hash, second.hash))
            d1, d2 = first.depth, second.depth
            self.depth = (d1 if d1 > d2 else d2) + 1
        else:
            self.hash = hash((base_hash, *[v.hash for v in operands]))
            self.depth = max([v.depth for v in operands]) + 1

    @property
    def node(self) -> Node:
        return self

    @property
    def spec(self) -> TensorSpec:
        return self.specs[0]

    @property
    def outputs(self) -> tuple[Node | Value, ...]:
        """One value per output: the node itself, then ``Value``s (made on each call)."""
        specs = self.specs
        if len(specs) == 1:
            return (self,)
        return (self,) + tuple([Value(self, i, specs[i]) for i in range(1, len(specs))])

    @property
    def is_parameter(self) -> bool:
        """True for leaves whose payload is fed to the compiled program at run time."""
        return not self.operands and (self.op == DEVICE_DATA or self.op == SCALAR)

    def __repr__(self) -> str:
        return f"Node({self.op}, {len(self.operands)} operands, hash={self.hash & 0xFFFFFFFF:08x})"


_PARAM_BASES: dict[tuple[str, TensorSpec], int] = {}


def _parameter(kind: str, spec: TensorSpec, data: Any) -> Node:
    base = _PARAM_BASES.get((kind, spec))
    if base is None:
        base = _PARAM_BASES[(kind, spec)] = node_base_hash(kind, (), (spec,))
    return Node(kind, (), (), (spec,), base, data)


def device_data(spec: TensorSpec, data: Any) -> Node:
    """A leaf holding device data (a runtime buffer); hashed by ``spec`` only."""
    return _parameter(DEVICE_DATA, spec, data)


def scalar_parameter(dtype: str, value: Any) -> Node:
    """A 0-dim leaf holding a host scalar, fed at run time; hashed by dtype only.

    This is how a changing Python scalar (a learning rate) stays out of the graph key.
    """
    cached = _SCALAR_SPECS.get(dtype)
    if cached is None:
        spec = TensorSpec((), dtype)
        cached = _SCALAR_SPECS[dtype] = ((spec,), node_base_hash(SCALAR, (), (spec,)))
    return Node(SCALAR, (), (), cached[0], cached[1], value)


_SCALAR_SPECS: dict[str, tuple] = {}
