"""Running one OpInfo of torch's op database on lazax, against torch on the CPU.

Contract: ``check(op, dtype, mode, variant)`` runs every sample torch's database has for
``op`` at ``dtype`` (``torch.testing._internal.common_methods_invocations.op_db``) on
the CPU and on lazax in ``mode`` (``lazy``, ``eager``, ``compile``, ``dynamo``), for
``variant``: ``"op"`` (the function), ``"inplace"`` (``x.op_()``), ``"out"``
(``op(..., out=t)``) or ``"grad"`` (the gradients of the differentiable float32 samples,
for a random cotangent). A sample the CPU rejects is not counted. It returns a
``Result``: ``status`` is ``"pass"`` (every sample matched: dtype, shape, values within
the dtype's tolerance, NaNs equal; a float sample past the tolerance still passes when
lazax is about as close to a float64 run as torch is: ``oracles.py``), ``"mismatch"``
(a wrong answer with no error), ``"error"`` (lazax raised where torch did not) or
``"none"`` (no sample applies), with the first failing sample's description in
``detail``. An OpInfo with more than
``SPREAD_SAMPLES`` samples is checked on that many, spread evenly over its list.

Values that torch leaves undefined (``empty``'s contents, random draws) are checked by
shape and dtype only (``VALUES_UNDEFINED`` for every sample of an op,
``RANDOM_SAMPLES`` for the samples that draw, e.g. attention with dropout). Arguments that
torch requires on the CPU whatever the device (``CPU_ARGUMENTS``) stay there.
Outputs defined only up to signs or phases (singular vectors, eigenvectors: ``GAUGE``)
are compared by their shapes and dtypes, then through the sample's
``output_process_fn_grad``, torch's own function of them that does not depend on the
choice (``|U|``, ``U @ Vh``), which the gradient variant differentiates too.
"""

from __future__ import annotations

import contextlib
import functools
import math
import warnings
from dataclasses import dataclass

import torch
import torch.testing._utils as torch_testing_utils
from torch.utils._pytree import tree_flatten, tree_map

import lazax.dynamo  # noqa: F401  (registers the "lazax" backend)
import lazax.modes as lx

from .oracles import no_less_accurate, picker, same_picks
from .skips import CPU_ARGUMENTS, GAUGE, RANDOM_SAMPLES, TOLERANCES, VALUES_UNDEFINED

MODES = ("lazy", "eager", "compile", "dynamo")
DTYPES = {
    "float32": torch.float32,
    "bfloat16": torch.bfloat16,
    "int64": torch.int64,
    "bool": torch.bool,
}
VARIANTS = ("op", "inplace", "out", "grad")
DEFAULT_TOLERANCE = {
    torch.float32: (1e-4, 1e-5),
    torch.bfloat16: (1.6e-2, 1e-2),
    torch.float64: (1e-7, 1e-7),
    # Complex results (the FFTs) as their real and imaginary parts' dtype.
    torch.complex64: (1e-4, 1e-5),
    torch.complex128: (1e-7, 1e-7),
}
MAX_SAMPLES = {"dynamo": 4}  # dynamo compiles per sample: its runs take the first few
# At most this many samples per case, spread evenly over the OpInfo's list: ten OpInfos
# have 250 to 1,440 samples (max_pool2d's grid of configurations), over a third of the
# database's 18,762 float32 samples, and every sample of a new shape is a compile.
SPREAD_SAMPLES = 64


@dataclass(frozen=True)
class Result:
    status: str
    samples: int = 0
    detail: str = ""


class _Mismatch(Exception):
    pass


def op_id(op) -> str:
    return f"{op.name}.{op.variant_test_name}" if op.variant_test_name else op.name


def _in_mode(fn, mode: str):
    if mode == "lazy":
        return fn
    if mode == "eager":

        def eager(*args, **kwargs):
            with lx.eager_mode_context(True):
                return fn(*args, **kwargs)

        return eager
    if mode == "compile":
        return lx.compile(fn, name="conformance")
    if mode == "dynamo":

        def compiled_call(*args, **kwargs):
            return fn(*args, **kwargs)

        torch._dynamo.reset()
        compiled = torch.compile(compiled_call, backend="lazax", dynamic=False)

        def run_without_rng_freeze(*args, **kwargs):
            # OpInfo's random ops seed inside torch's freeze_rng_state, which reads the
            # device RNG state under no_dispatch(): dynamo cannot trace that for a device
            # whose RNG state lives in Python. Their values are not compared anyway.
            saved = torch_testing_utils.freeze_rng_state
            torch_testing_utils.freeze_rng_state = _no_rng_freeze
            try:
                return compiled(*args, **kwargs)
            finally:
                torch_testing_utils.freeze_rng_state = saved

        return run_without_rng_freeze
    raise ValueError(f"unknown mode {mode!r}; expected one of {MODES}")


@contextlib.contextmanager
def _no_rng_freeze():
    yield


def _never(sample) -> bool:
    return False


def _to_device(value):
    def move(x):
        if isinstance(x, torch.Tensor):
            return x.detach().to(lx.device()).requires_grad_(x.requires_grad)
        if (isinstance(x, torch.device) and x.type == "cpu") or x == "cpu":
            return lx.device()
        return x

    return tree_map(move, value)


def _clone(value):
    return tree_map(
        lambda x: (
            x.detach().clone().requires_grad_(x.requires_grad) if isinstance(x, torch.Tensor) else x
        ),
        value,
    )


def _compare(name: str, got, expected, dtype, what: str, values_defined: bool, pick=None) -> None:
    """Raise ``_Mismatch`` unless ``got`` matches ``expected``. ``pick``: for ops that
    return indices among ties in no promised order, the input's values at some indices
    (an index output passes when it points at the same values as torch's)."""
    got_leaves, got_spec = tree_flatten(got)
    exp_leaves, exp_spec = tree_flatten(expected)
    if got_spec != exp_spec:
        raise _Mismatch(f"{what}: output structure {got_spec} != torch's {exp_spec}")
    overrides = TOLERANCES.get(name, {})
    for k, (g, e) in enumerate(zip(got_leaves, exp_leaves)):
        if not isinstance(e, torch.Tensor):
            if isinstance(g, torch.Tensor) or (g != e and not (_isnan(g) and _isnan(e))):
                raise _Mismatch(f"{what}: output {k} is {g!r}, torch gives {e!r}")
            continue
        if not isinstance(g, torch.Tensor):
            raise _Mismatch(f"{what}: output {k} is {type(g).__name__}, torch gives a tensor")
        g = g.detach().cpu()
        if g.dtype != e.dtype or g.shape != e.shape:
            raise _Mismatch(
                f"{what}: output {k} is {g.dtype}{tuple(g.shape)}, torch gives "
                f"{e.dtype}{tuple(e.shape)}"
            )
        if not values_defined:
            continue
        rtol, atol = _tolerance(overrides, e.dtype)
        try:
            torch.testing.assert_close(g, e.detach(), rtol=rtol, atol=atol, equal_nan=True)
        except AssertionError as err:
            if pick is not None and e.dtype == torch.int64 and same_picks(pick, g, e):
                continue
            raise _Mismatch(f"{what}: output {k}: {err}") from None


def _tolerance(overrides: dict, dtype: torch.dtype) -> tuple[float, float]:
    # By the output's dtype (an int input can give a float output: cos, logsumexp).
    return overrides.get(dtype, DEFAULT_TOLERANCE.get(dtype, (0, 0)))


def _close(overrides: dict, got: torch.Tensor, expected: torch.Tensor) -> bool:
    rtol, atol = _tolerance(overrides, expected.dtype)
    try:
        torch.testing.assert_close(
            got.detach().cpu(), expected.detach(), rtol=rtol, atol=atol, equal_nan=True
        )
    except AssertionError:
        return False
    return True


def _isnan(x) -> bool:
    return isinstance(x, float) and math.isnan(x)


def _describe(sample) -> str:
    def show(x):
        if isinstance(x, torch.Tensor):
            return f"{str(x.dtype)[6:]}{list(x.shape)}"
        return repr(x)

    args = [show(sample.input), *(show(a) for a in sample.args)]
    kwargs = [f"{k}={show(v)}" for k, v in sample.kwargs.items()]
    return f"({', '.join(args + kwargs)})"


def _call_fn(op, variant: str):
    if variant == "inplace":
        return op.inplace_variant
    if variant == "out":

        def with_out(x, *args, out, **kwargs):
            return op.op(x, *args, out=out, **kwargs)

        return with_out
    return op.op


_SINGLE = {torch.float64: torch.float32, torch.complex128: torch.complex64}
_DOUBLE = {
    torch.float32: torch.float64,
    torch.bfloat16: torch.float64,
    torch.complex64: torch.complex128,
}


def _then(fn, process):
    """``fn`` followed by ``process`` (a gauge-invariant view of its outputs), if any."""
    if process is None:
        return fn
    return lambda *args, **kwargs: process(fn(*args, **kwargs))


def _float64_run(op, variant: str, sample, index: int, process=None):
    """The sample's result with every float tensor in double precision (the reference
    of ``oracles.no_less_accurate``), through ``process`` if given."""

    def double(x):
        if not isinstance(x, torch.Tensor) or x.dtype not in _DOUBLE:
            return x
        return x.detach().to(_DOUBLE[x.dtype]).requires_grad_(x.requires_grad)

    x, args, kwargs = tree_map(double, _clone((sample.input, sample.args, sample.kwargs)))
    if variant == "grad":
        return _grad_run(_then(op.op, process), x, args, kwargs, index)
    return _then(_call_fn(op, "op" if variant == "out" else variant), process)(x, *args, **kwargs)


def _grad_run(fn, sample_input, args, kwargs, cotangent_seed: int):
    """Outputs, and the gradients of the float outputs (weighted by a seeded random
    cotangent) with respect to every input that requires grad."""
    out = fn(sample_input, *args, **kwargs)
    outs = [o for o in tree_flatten(out)[0] if isinstance(o, torch.Tensor) and o.requires_grad]
    inputs = [
        x
        for x in tree_flatten((sample_input, args, kwargs))[0]
        if isinstance(x, torch.Tensor) and x.requires_grad
    ]
    if not outs or not inputs:
        return None
    g = torch.Generator().manual_seed(cotangent_seed)
    # Drawn in single precision, so that the float64 reference run uses the same ones.
    cotangents = [
        torch.randn(o.shape, generator=g, dtype=_SINGLE.get(o.dtype, o.dtype)).to(o) for o in outs
    ]
    grads = torch.autograd.grad(outs, inputs, cotangents, allow_unused=True)
    return list(grads)


_SAMPLES: dict = {}


def _samples(op, dtype, requires_grad: bool) -> list:
    """The OpInfo's samples, made once for the op, inplace and out variants of one
    (op, dtype): torch's sample generators are a fifth of the suite's time. Every use
    clones them first, so sharing is safe. Only the latest op's are kept."""
    key = (id(op), dtype, requires_grad)
    if key not in _SAMPLES:
        if not any(k[0] == id(op) for k in _SAMPLES):
            _SAMPLES.clear()
        samples = list(op.sample_inputs("cpu", dtype, requires_grad=requires_grad))
        if len(samples) > SPREAD_SAMPLES:
            step = len(samples) / SPREAD_SAMPLES
            samples = [samples[int(k * step)] for k in range(SPREAD_SAMPLES)]
        _SAMPLES[key] = samples
    return _SAMPLES[key]


def _expected_cases(op, dtype, variant: str, limit: int | None):
    """(description, lazax arguments, expected result) for each sample torch accepts."""
    fn = _call_fn(op, variant)
    name = op_id(op)
    ran = 0
    for sample in _samples(op, dtype, variant == "grad"):
        if limit is not None and ran >= limit:
            return
        args = (sample.input, sample.args, sample.kwargs)
        process = sample.output_process_fn_grad if name in GAUGE else None
        cpu_input, cpu_args, cpu_kwargs = _clone(args)
        lz_input, lz_args, lz_kwargs = _to_device(_clone(args))
        if name in CPU_ARGUMENTS:  # an argument torch requires on the CPU on any device
            lz_args = tuple(
                cpu if k in CPU_ARGUMENTS[name] else lz
                for k, (cpu, lz) in enumerate(zip(_clone(sample.args), lz_args))
            )
        try:
            if variant == "out":
                expected = op.op(cpu_input, *cpu_args, **cpu_kwargs)
                if not isinstance(expected, torch.Tensor):
                    continue  # several outputs: out= takes a tuple; not covered here
                out = torch.empty_like(expected)
                # torch must accept the sample with out=; the oracle stays the
                # functional result, since out= means "hold that" and torch's own CPU
                # fft.ihfft2/ihfftn(out=) leave garbage in out (torch 2.13).
                fn(cpu_input, *cpu_args, out=out, **cpu_kwargs)
                lz_kwargs = {**lz_kwargs, "out": torch.empty_like(out).to(lx.device())}
            elif variant == "grad":
                expected = _grad_run(_then(fn, process), cpu_input, cpu_args, cpu_kwargs, ran)
                if expected is None:
                    continue
            else:
                expected = fn(cpu_input, *cpu_args, **cpu_kwargs)
        except Exception:
            continue  # torch rejects this sample for this variant
        random = name in VALUES_UNDEFINED or RANDOM_SAMPLES.get(name, _never)(sample)
        what = f"sample {_describe(sample)}"
        checks = (not random, picker(name, sample))
        reference = None
        if not random and dtype in (torch.float32, torch.bfloat16):
            reference = functools.partial(_float64_run, op, variant, sample, ran, process)
        yield ran, what, (lz_input, lz_args, lz_kwargs), expected, (checks, reference), process
        ran += 1


def _run_lazax(op, variant: str, mode: str, index: int, lz, process=None):
    fn = _call_fn(op, variant)
    lz_input, lz_args, lz_kwargs = lz
    if variant != "grad":
        return _in_mode(fn, mode)(lz_input, *lz_args, **lz_kwargs)
    fn = _then(fn, process)  # gradients of the gauge-invariant view (op: on the CPU)
    if mode == "dynamo":
        return _grad_run(_in_mode(fn, mode), lz_input, lz_args, lz_kwargs, index)
    if mode == "compile":
        region = lx.compile(_grad_run, name="conformance_grad")
        return region(fn, lz_input, lz_args, lz_kwargs, index)
    if mode == "eager":
        with lx.eager_mode_context(True):
            return _grad_run(fn, lz_input, lz_args, lz_kwargs, index)
    return _grad_run(fn, lz_input, lz_args, lz_kwargs, index)


def _on_cpu(value):
    return tree_map(lambda x: x.cpu() if isinstance(x, torch.Tensor) else x, value)


def applies(op, dtype: torch.dtype, variant: str) -> bool:
    if dtype not in op.supported_dtypes("cpu"):
        return False
    if variant == "grad":
        return dtype == torch.float32 and op.supports_autograd
    if variant == "inplace":
        return op.inplace_variant is not None
    if variant == "out":
        return op.supports_out
    return True


def check(op, dtype: torch.dtype, mode: str, variant: str = "op") -> Result:
    if not applies(op, dtype, variant):
        return Result("none")
    name = op_id(op)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        cases = list(_expected_cases(op, dtype, variant, MAX_SAMPLES.get(mode)))
        if not cases:
            return Result("none")
        results = []
        for index, what, lz, *_, process in cases:
            try:
                results.append(_run_lazax(op, variant, mode, index, lz, process))
            except Exception as err:
                return Result("error", index + 1, f"{what}: {type(err).__name__}: {_short(err)}")
            if mode != "lazy":  # lazy: every sample's graph runs as one, below
                try:
                    results[-1] = _on_cpu(results[-1])
                except Exception as err:
                    return Result(
                        "error", index + 1, f"{what}: {type(err).__name__}: {_short(err)}"
                    )
        if mode == "lazy":
            try:
                lx.sync()
            except Exception:
                pass  # run one by one below, to name the sample that fails
        for (index, what, _, expected, (checks, reference), process), got in zip(cases, results):
            try:
                got = _on_cpu(got)
            except Exception as err:
                return Result("error", index + 1, f"{what}: {type(err).__name__}: {_short(err)}")
            expected = tree_map(lambda x: x, expected)  # the same containers as got
            try:
                if process is not None and variant != "grad":
                    _compare(name, got, expected, dtype, what, False)  # shapes and dtypes
                    got, expected = process(got), process(expected)
                _compare(name, got, expected, dtype, what, *checks)
            except _Mismatch as err:
                close = functools.partial(_close, TOLERANCES.get(name, {}))
                if reference is None or not no_less_accurate(got, expected, reference, close):
                    return Result("mismatch", index + 1, str(err)[:2000])
    return Result("pass", len(cases))


def _short(err: BaseException) -> str:
    text = str(err).strip().splitlines()
    return text[0][:300] if text else ""
