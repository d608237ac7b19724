"""A graph's parameters as its program's arguments: device data one by one, Python
numbers packed into one array per dtype.

Contract: ``Packing(parameters)`` depends only on which of a graph's parameters are
scalar parameters (``lazax.ir.SCALAR``: the Python numbers of traced ops, and random
ops' seeds) and on their dtypes, both of which the graph hash covers, so one packing
serves every run of a cached program.
- ``arrange(values)``: the values of the parameters, in ``graph.parameters`` order, as
  the runtime's arguments: the device data (and the number of a dtype that has only one)
  in their order, then one 1-D numpy array per scalar dtype with ``PACK_FROM`` numbers
  or more (dtype names sorted) holding that dtype's numbers in parameter order. Without
  such a dtype it returns ``values`` itself.
- ``unpack(args)``: inside the traced program, one value per parameter again (a pack's
  element ``k`` is the ``k``-th piece of one ``lax.split`` of the pack, static slices;
  a device buffer that holds its value padded, split unevenly over a mesh
  (``lazax.pjrt.padded_shape``), is sliced back to the parameter's shape).
- ``arg_specs``: the arguments' ``(shape, dtype name)`` (a padded buffer's own shape:
  the input shardings in the cache key fix the padding); ``donated(indices)`` and
  ``shardings(per_parameter)``: parameter positions and shardings as argument ones.
Why: a number's value must stay out of the program (a changed learning rate must not
recompile), but XLA compiles a program with thousands of parameters slowly (a chain of
2,000 ops with two numbers each: 47 s with one parameter per number, against 1.6 s for
``jax.jit`` of the same function with the numbers baked in). Packed, a graph has a
handful of extra parameters whatever its count of numbers, and a run transfers one small
array per dtype instead of one scalar per number.
"""

from __future__ import annotations

import numpy as np
from jax import lax

from lazax import ir
from lazax.pjrt import numpy_dtype, trim

__all__ = ["PACK_FROM", "Packing"]

# How many numbers of one dtype a graph needs before they travel packed. Measured with
# jax 0.10 on the 2-core CPU, one call of a compiled program: separate scalars cost
# ~3-4 us each (1: 9.5 us, 8: 41 us, 16: 59 us), a packed array ~10-15 us whatever its
# length (1: 12.8 us, 2: 9.7 us, 16: 12.8 us).
PACK_FROM = 2


class Packing:
    """Where each parameter of a graph travels (see the module docstring)."""

    __slots__ = ("singles", "packs", "places", "arg_specs", "trims")

    def __init__(self, parameters) -> None:
        by_dtype: dict[str, list[int]] = {}
        for i, p in enumerate(parameters):
            if p.op == ir.SCALAR:
                by_dtype.setdefault(p.specs[0].dtype, []).append(i)
        # A dtype's only number travels alone: passing one scalar costs a run less than
        # making and passing a one-element array (an eager op with one Python number).
        alone = {slots[0] for slots in by_dtype.values() if len(slots) < PACK_FROM}
        by_dtype = {d: slots for d, slots in by_dtype.items() if len(slots) >= PACK_FROM}
        # The parameters passed one by one (device data, lone numbers), in order.
        singles = [i for i, p in enumerate(parameters) if p.op != ir.SCALAR or i in alone]
        self.singles = singles
        # (numpy dtype, the parameter positions it packs), by dtype name.
        self.packs = [(numpy_dtype(d), by_dtype[d]) for d in sorted(by_dtype)]
        # Per parameter: (argument index, element of a pack or None).
        places: list = [None] * len(parameters)
        for a, i in enumerate(singles):
            places[i] = (a, None)
        for k, (_, slots) in enumerate(self.packs):
            for e, i in enumerate(slots):
                places[i] = (len(singles) + k, e)
        self.places = places
        specs = []
        self.trims: list[tuple[int, tuple]] = []  # (parameter, its shape): held padded
        for i in singles:
            p = parameters[i]
            shape = p.specs[0].shape
            held = shape
            if p.op == ir.DEVICE_DATA:
                held = tuple(getattr(p.data, "shape", shape))
                if held != shape:
                    self.trims.append((i, shape))
            specs.append((held, p.specs[0].dtype))
        for d in sorted(by_dtype):
            specs.append(((len(by_dtype[d]),), d))
        self.arg_specs = specs

    def arrange(self, values: list) -> list:
        if not self.packs:
            return values
        args = [values[i] for i in self.singles]
        for dtype, slots in self.packs:
            args.append(np.array([values[i] for i in slots], dtype=dtype))
        return args

    def unpack(self, args) -> list:
        if not self.packs:
            values = list(args)
        else:
            # One split per pack, not one indexing per number: jax's indexing costs
            # ~0.15 ms of tracing each (0.7 s of a 4,000-number graph's first call).
            first = len(self.singles)
            pieces = {
                first + k: [
                    lax.reshape(v, ()) for v in lax.split(args[first + k], [1] * len(slots))
                ]
                for k, (_, slots) in enumerate(self.packs)
            }
            values = [args[a] if e is None else pieces[a][e] for a, e in self.places]
        for i, shape in self.trims:
            values[i] = trim(values[i], shape)
        return values

    def donated(self, indices) -> tuple[int, ...]:
        """Donated parameter positions as argument positions (only device data is
        ever donated)."""
        return tuple(self.places[i][0] for i in indices)

    def shardings(self, per_parameter: list) -> list:
        """One sharding per argument: a pack takes its first number's (replicated)."""
        out = [per_parameter[i] for i in self.singles]
        out.extend(per_parameter[slots[0]] for _, slots in self.packs)
        return out
