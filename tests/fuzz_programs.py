"""Random torch programs for differential fuzzing (hypothesis), and their runners.

A ``Program`` is Python source: a function ``program(v0, v1, ...)`` whose body is a few
to a few dozen statements over names ``v<i>`` (elementwise ops, scalar and broadcast
operands, reductions, matmul, casts, views and slices, reshapes, in-place writes through
views), returning every name it bound, inputs included, so that a write through a view
is seen in the base it reached. Being source, a failing example prints as a torch
program a developer can paste into a regular test.

A quarter of the programs end with a statement that reads out of range (an index past
a dimension, a class target past the classes: ``_bad_statement``); torch raises for it
on the CPU, and every mode must raise the same type and message (device-side checks).

``programs()`` builds one statement at a time and runs each candidate on the CPU
first, against a fresh run of the program so far: a statement torch rejects (a shape
that does not broadcast, a ``view`` of a non-viewable layout, an in-place write that
would need a cast) is never kept, so every program is valid torch. The CPU run also
gives the largest magnitude any value reached, which scales the absolute tolerance:
float error grows with the values a program passes through, not with its result.

Inputs are exact in every dtype (floats are multiples of 0.25 in [-4, 4]), so sums,
products and reorderings of them stay exact until a transcendental op appears.

``run(program, mode, inputs)`` runs it on lazax in ``lazy``, ``eager``, ``compile`` or
``dynamo`` mode and returns the results on the CPU; ``check(program)`` compares each
mode with torch on the CPU, twice with different input values (the second call of
each mode takes its cached path: graph cache, dynamo replay).
"""

from __future__ import annotations

import math
import warnings
from dataclasses import dataclass

import torch
from hypothesis import strategies as st

import lazax.dynamo  # noqa: F401  (registers the "lazax" backend)
import lazax.modes as lx

MODES = ("lazy", "eager", "compile", "dynamo")
DTYPES = (torch.float32, torch.int64, torch.bool, torch.float64)
FLOATS = (torch.float32, torch.float64)


@dataclass(frozen=True)
class InputSpec:
    shape: tuple[int, ...]
    dtype: torch.dtype

    def make(self, seed: int) -> torch.Tensor:
        g = torch.Generator().manual_seed(seed)
        if self.dtype == torch.bool:
            return torch.randint(0, 2, self.shape, generator=g).bool()
        if self.dtype == torch.int64:
            return torch.randint(-9, 10, self.shape, generator=g)
        return (torch.randint(-16, 17, self.shape, generator=g) / 4).to(self.dtype)


@dataclass(frozen=True)
class Program:
    inputs: tuple[InputSpec, ...]
    body: tuple[str, ...]
    names: tuple[str, ...]  # every name bound, in order; all are returned
    magnitude: float  # the largest finite |value| any name held on the CPU
    # The last statement reads out of range: torch's (exception type, first line).
    raises: tuple[str, str] | None = None

    @property
    def source(self) -> str:
        params = ", ".join(f"v{i}" for i in range(len(self.inputs)))
        lines = [f"def program({params}):", *(f"    {s}" for s in self.body)]
        lines.append(f"    return ({', '.join(self.names)},)")
        return "\n".join(lines)

    def function(self):
        namespace = {"torch": torch}
        exec(compile(self.source, "<fuzzed program>", "exec"), namespace)  # noqa: S102
        return namespace["program"]

    def make_inputs(self, seed: int) -> list[torch.Tensor]:
        return [spec.make(seed * 1000 + i) for i, spec in enumerate(self.inputs)]

    def __repr__(self) -> str:  # what hypothesis prints for a falsifying example
        specs = ", ".join(f"{tuple(s.shape)}:{str(s.dtype)[6:]}" for s in self.inputs)
        return f"Program(inputs=[{specs}])\n{self.source}"


# ---------------------------------------------------------------- generation


class _Builder:
    """The program so far, with each name's CPU value after running all of it."""

    def __init__(self) -> None:
        self.inputs: list[InputSpec] = []
        self.body: list[str] = []
        self.names: list[str] = []
        self.values: dict[str, torch.Tensor] = {}
        self.magnitude = 1.0

    def add_input(self, spec: InputSpec) -> None:
        assert not self.body, "inputs come first in the signature"
        self.names.append(f"v{len(self.inputs)}")
        self.inputs.append(spec)
        self.values = self._run(self.body)

    def fresh(self) -> str:
        return f"v{len(self.names)}"

    def _run(self, body: list[str]) -> dict[str, torch.Tensor]:
        namespace = {"torch": torch}
        for i, spec in enumerate(self.inputs):
            namespace[f"v{i}"] = spec.make(1000 + i)  # call 1's inputs (make_inputs(1))
        exec("\n".join(body), namespace)  # noqa: S102
        del namespace["torch"]
        namespace.pop("__builtins__", None)
        return namespace

    def try_statement(self, statement: str, binds: str | None) -> bool:
        """Keep ``statement`` if torch runs it, without a warning, after the program so
        far (a warning marks what torch deprecates, such as a write into an expanded
        tensor, whose result depends on the order of the writes)."""
        try:
            with warnings.catch_warnings():
                warnings.simplefilter("error")
                values = self._run([*self.body, statement])
        except (RuntimeError, IndexError, ValueError, TypeError, Warning):
            return False
        magnitude = max(
            (_finite_max(v) for v in values.values() if isinstance(v, torch.Tensor)),
            default=0.0,
        )
        if magnitude > 1e12:  # beyond here float32 spacing swamps any tolerance
            return False
        self.body.append(statement)
        if binds is not None:
            self.names.append(binds)
        self.values = values
        self.magnitude = max(self.magnitude, magnitude)
        return True

    def try_bad_statement(self, statement: str) -> tuple[str, str] | None:
        """Append ``statement`` if torch raises for it because of a value (an index out
        of range, a class target past the classes): what it raises."""
        try:
            self._run([*self.body, statement])
        except (IndexError, RuntimeError) as err:
            first = str(err).splitlines()[0]
            if "out of bounds" not in first and "out of range" not in first:
                return None  # a shape or dtype error, not a value
            self.body.append(statement)
            self.names.append(statement.split(" = ")[0])  # returned: read, so it runs
            return type(err).__name__, first
        return None

    def build(self, raises=None) -> Program:
        body, names = tuple(self.body), tuple(self.names)
        return Program(tuple(self.inputs), body, names, self.magnitude, raises)


def _finite_max(t: torch.Tensor) -> float:
    if t.numel() == 0 or t.dtype == torch.bool:
        return 0.0
    finite = t[torch.isfinite(t)] if t.is_floating_point() else t
    return float(finite.abs().max()) if finite.numel() else 0.0


_shapes = st.lists(st.integers(1, 4), min_size=0, max_size=3).map(tuple)

_UNARY = {
    "neg": "torch.neg({a})",
    "abs": "torch.abs({a})",
    "tanh": "torch.tanh({a})",
    "sin": "torch.sin({a})",
    "sigmoid": "torch.sigmoid({a})",
    "exp": "torch.exp(torch.clamp({a}, -8, 8))",
    "sqrt": "torch.sqrt(torch.abs({a}))",
    "relu": "torch.relu({a})",
    "floor": "torch.floor({a})",
    "sign": "torch.sign({a})",
    "square": "torch.square({a})",
    "not": "torch.logical_not({a})",
    "isnan": "torch.isnan({a})",
    "clone": "{a}.clone()",
    "contiguous": "{a}.contiguous()",
}
_BINARY = {
    "add": "torch.add({a}, {b})",
    "sub": "torch.sub({a}, {b})",
    "mul": "torch.mul({a}, {b})",
    "div": "torch.div({a}, {b})",
    "floor_divide": "torch.floor_divide({a}, torch.where({b} == 0, 1, {b}))",
    "remainder": "torch.remainder({a}, torch.where({b} == 0, 1, {b}))",
    "trunc_div": "torch.div({a}, torch.where({b} == 0, 1, {b}), rounding_mode='trunc')",
    "maximum": "torch.maximum({a}, {b})",
    "minimum": "torch.minimum({a}, {b})",
    "lt": "torch.lt({a}, {b})",
    "eq": "torch.eq({a}, {b})",
    "and": "torch.logical_and({a}, {b})",
    "bitwise_and": "torch.bitwise_and({a}, {b})",
    "where": "torch.where({c}, {a}, {b})",
}
_INPLACE = {
    "add_": "{a}.add_({b})",
    "mul_": "{a}.mul_({b})",
    "sub_": "{a}.sub_({b})",
    "copy_": "{a}.copy_({b})",
    "zero_": "{a}.zero_()",
    "fill_": "{a}.fill_({s})",
    "clamp_": "{a}.clamp_(-1, 2)",
    "masked_fill_": "{a}.masked_fill_({c}, {s})",
    "t_": "{a}.t_()",
    "setitem": "{a}[{index}] = {b}",
    "setitem_scalar": "{a}[{index}] = {s}",
}
_scalars = st.sampled_from(["0", "1", "-1", "2", "3", "-1.5", "0.5", "True"])


@st.composite
def _index(draw, shape: tuple[int, ...]) -> str:
    """A basic index (slices with steps, integers, None, ...) valid for ``shape``."""
    parts = []
    for size in shape[: draw(st.integers(0, len(shape)))]:
        kind = draw(st.sampled_from(["slice", "int", "all", "none"]))
        if kind == "int" and size:
            parts.append(str(draw(st.integers(-size, size - 1))))
        elif kind == "slice":
            start = draw(st.integers(0, size))
            stop = draw(st.integers(start, size))
            step = draw(st.integers(1, 3))
            parts.append(f"{start}:{stop}:{step}")
        elif kind == "none":
            parts.extend(["None", ":"])
        else:
            parts.append(":")
    if not parts:
        return "..."
    return ", ".join(parts)


@st.composite
def _statement(draw, b: _Builder) -> tuple[str, str | None]:
    names = b.names
    pick = st.sampled_from(names)
    a = draw(pick)
    ta = b.values[a]
    out = b.fresh()
    kind = draw(
        st.sampled_from(
            ["unary", "binary", "scalar", "reduce", "view", "inplace", "matmul", "cast"]
        )
    )
    if kind == "unary":
        return f"{out} = " + draw(st.sampled_from(sorted(_UNARY.values()))).format(a=a), out
    if kind in ("binary", "scalar", "inplace"):
        if kind == "binary" or draw(st.booleans()):
            other = draw(pick)
            # A broadcast partner: a slice of another name down to fewer or unit dims.
            if draw(st.booleans()) and b.values[other].dim() > 0:
                other = f"{other}[{draw(_index(tuple(b.values[other].shape)))}]"
        else:
            other = draw(_scalars)
        c = draw(st.sampled_from([n for n in names if b.values[n].dtype == torch.bool] or [a]))
        if kind == "inplace":
            template = draw(st.sampled_from(sorted(_INPLACE.values())))
            index = draw(_index(tuple(ta.shape))) if ta.dim() else "..."
            return template.format(a=a, b=other, c=c, s=draw(_scalars), index=index), None
        template = draw(st.sampled_from(sorted(_BINARY.values())))
        if kind == "scalar" and draw(st.booleans()):
            return f"{out} = " + template.format(a=other, b=a, c=c), out
        return f"{out} = " + template.format(a=a, b=other, c=c), out
    if kind == "reduce":
        op = draw(
            st.sampled_from(["sum", "mean", "amax", "amin", "prod", "argmax", "cumsum", "any"])
        )
        if ta.dim() == 0 or op in ("sum", "any") and draw(st.booleans()):
            return f"{out} = {a}.{op}()" if op != "cumsum" else f"{out} = {a}.cumsum(0)", out
        dim = draw(st.integers(-ta.dim(), ta.dim() - 1))
        if op in ("cumsum", "argmax"):
            return f"{out} = {a}.{op}({dim})", out
        return f"{out} = {a}.{op}({dim}, keepdim={draw(st.booleans())})", out
    if kind == "view":
        return f"{out} = {a}{draw(_view(tuple(ta.shape)))}", out
    if kind == "matmul" and ta.dtype != torch.bool:
        # Any name whose shape fits, often a itself transposed (a @ a.T). Not bool: torch
        # multiplies only empty bool matrices, which dynamo's fake tensors refuse.
        other = draw(pick)
        if draw(st.booleans()) and b.values[other].dim() >= 2:
            other = f"{other}.transpose(-1, -2)"
        return f"{out} = torch.matmul({a}, {other})", out
    dtype = draw(st.sampled_from(DTYPES))  # a cast (also what a bool matmul draw becomes)
    if ta.is_floating_point() and dtype == torch.int64:
        # Casting NaN, inf or out-of-range floats to an integer is undefined in C++:
        # torch and XLA may both be right and differ. Keep the cast defined.
        return f"{out} = torch.nan_to_num({a}, 0.0, 1e6, -1e6).to({dtype})", out
    return f"{out} = {a}.to({dtype})", out


@st.composite
def _view(draw, shape: tuple[int, ...]) -> str:
    """A view (or a reshape, which torch makes a view when the layout allows)."""
    n = len(shape)
    numel = math.prod(shape)
    options = [".t()", ".flatten()", f".unsqueeze({draw(st.integers(-n - 1, n))})"]
    if n:
        dim = draw(st.integers(0, n - 1))
        options += [f"[{draw(_index(shape))}]", f".squeeze({dim - n})"]
        options.append(f".expand{tuple(2 if d == 1 else d for d in shape)}")
        if shape[dim]:
            start = draw(st.integers(0, shape[dim] - 1))
            options.append(f".select({dim}, {start})")
            options.append(f".narrow({dim}, {start}, {draw(st.integers(0, shape[dim] - start))})")
    if n >= 2:
        i, j = draw(st.permutations(range(n)))[:2]
        options += [f".transpose({i}, {j})", f".permute{tuple(draw(st.permutations(range(n))))}"]
    if numel:
        first = draw(st.sampled_from([d for d in range(1, numel + 1) if numel % d == 0]))
        for target in [(first, numel // first), (first, -1), (-1,), (numel // first, 1, first)]:
            options += [f".reshape{target}", f".view{target}"]
    return draw(st.sampled_from(options))


@st.composite
def programs(draw, max_statements: int = 24) -> Program:
    b = _Builder()
    for _ in range(draw(st.integers(1, 3))):
        b.add_input(InputSpec(draw(_shapes), draw(st.sampled_from(DTYPES))))
    target = draw(st.integers(1, max_statements))
    attempts = 0
    while len(b.body) < target and attempts < 4 * max_statements:
        attempts += 1
        statement, binds = draw(_statement(b))
        b.try_statement(statement, binds)
    raises = None
    if draw(st.integers(0, 3)) == 0:  # a quarter of the programs end reading out of range
        raises = b.try_bad_statement(draw(_bad_statement(b)))
    return b.build(raises)


@st.composite
def _bad_statement(draw, b: _Builder) -> str:
    """A statement whose indices or targets lie out of range (torch raises for them)."""
    a = draw(st.sampled_from([n for n in b.names if b.values[n].dim() > 0] or b.names))
    t = b.values[a]
    size = t.shape[0] if t.dim() else 1
    past = draw(st.sampled_from([size, size + 2, -size - 1]))
    idx = f"torch.full(({draw(st.integers(1, 3))},), {past}, device={a}.device)"
    kind = draw(st.sampled_from(["index", "index_select", "take", "gather", "embed", "nll"]))
    if kind == "index":
        return f"{b.fresh()} = {a}[{idx}]"
    if kind == "index_select":
        return f"{b.fresh()} = {a}.index_select(0, {idx})"
    if kind == "take":
        return f"{b.fresh()} = {a}.take(torch.full((2,), {t.numel() + 1}, device={a}.device))"
    if kind == "gather" and t.dim():
        shape = (1,) * t.dim()
        return f"{b.fresh()} = {a}.gather(0, torch.full({shape}, {past}, device={a}.device))"
    if kind == "embed" and t.dim() == 2 and t.is_floating_point():
        return f"{b.fresh()} = torch.nn.functional.embedding({idx}, {a})"
    if kind == "nll" and t.dim() == 2 and t.is_floating_point():
        target = f"torch.full(({size},), {t.shape[1] + 1}, device={a}.device)"
        return f"{b.fresh()} = torch.nn.functional.nll_loss({a}, {target})"
    return f"{b.fresh()} = {a}[{idx}]"


def kept(inputs: list[tuple[tuple[int, ...], torch.dtype]], body: str) -> Program:
    """A program found by the fuzzer, written back as a regression test: its inputs'
    (shape, dtype) and its body as printed (statements, one per line)."""
    b = _Builder()
    for shape, dtype in inputs:
        b.add_input(InputSpec(tuple(shape), dtype))
    for line in body.strip().splitlines():
        statement = line.strip()
        target = statement.split(" = ")[0] if " = " in statement else ""
        binds = target if target.isidentifier() else None
        if not b.try_statement(statement, binds):
            raise ValueError(f"torch rejects {statement!r} after the lines before it")
    return b.build()


# ---------------------------------------------------------------- running


def _to(value, device):
    return tuple(t.to(device) for t in value)


def runner(program: Program, mode: str):
    """A callable running ``program`` on lazax copies of its inputs in ``mode`` and
    returning the results on the CPU. Calls after the first take the mode's cached path
    (the same function object: dynamo's replay, compile's cached region graph)."""
    fn = program.function()
    if mode == "lazy":
        call = fn
    elif mode == "eager":

        def call(*args):
            with lx.eager_mode_context(True):
                return fn(*args)
    elif mode == "compile":
        call = lx.compile(fn, name="fuzzed_program")
    elif mode == "dynamo":
        call = torch.compile(fn, backend="lazax", dynamic=False)
    else:
        raise ValueError(f"unknown mode {mode!r}; expected one of {MODES}")
    return lambda inputs: _to(call(*_to(inputs, lx.device())), "cpu")


def compare(program: Program, got, expected, what: str) -> None:
    magnitude = max([1.0, program.magnitude, *(_finite_max(e) for e in expected)])
    atol = 1e-5 * magnitude
    assert len(got) == len(expected)
    for name, g, e in zip(program.names, got, expected):
        torch.testing.assert_close(
            g,
            e,
            rtol=1e-4,
            atol=atol,
            equal_nan=True,
            msg=lambda m, name=name: f"{what}: {name} differs from torch on the CPU\n{m}",
        )


def check(program: Program, mode: str) -> None:
    """``program`` in ``mode`` matches torch on the CPU, on two sets of inputs (or,
    where its last statement reads out of range, raises what torch raises)."""
    run = runner(program, mode)
    for seed in (1, 2):
        inputs = program.make_inputs(seed)
        if program.raises is not None:
            try:
                run(inputs)
            except (IndexError, RuntimeError) as err:
                got = (type(err).__name__, str(err).splitlines()[0])
                assert got == program.raises, f"{mode} mode, call {seed}: {got}"
                continue
            raise AssertionError(
                f"{mode} mode, call {seed}: no error; torch raises {program.raises}"
            )
        expected = program.function()(*[t.clone() for t in inputs])
        compare(program, run(inputs), expected, f"{mode} mode, call {seed}")
