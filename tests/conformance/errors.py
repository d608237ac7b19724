"""torch's OpInfo ``error_inputs`` run on lazax, against torch on the CPU.

Contract: ``check_errors(op, mode) -> list[ErrorCase]``. For each ``ErrorInput`` of
``op.error_inputs("cpu")`` (an OpInfo without error inputs gives ``[]``), the sample
runs on the CPU first; a case the CPU does not reject is not counted. The same sample,
moved to ``lx.device()``, then runs on lazax in ``mode`` (``lazy``, ``eager``,
``compile``, ``dynamo``), and every tensor of the result is read back to the host (in
lazy mode after ``lx.sync()``), so that an error lazax reports only when the value is
computed surfaces too. Each case's ``status``:

- ``"same"``: lazax raised the CPU's exception type (or a subclass of it) with the same
  message: the CPU's message text appears in lazax's, or torch's ``error_regex`` matches
  both (``re.search``, as torch's own ``test_errors`` does).
- ``"type"``: the same type, another message (``device_dependent`` says whether the
  CPU's message names a device, where lazax may rightly differ).
- ``"other"``: lazax raised another type.
- ``"silent"``: lazax raised nothing.
- ``"leak"``: ``lx.sync()`` raised before the case ran: the previous case left a pending
  graph that poisons later work (a bug of lazax's; the case itself is not run).

``failing(case)``: the case fails the conformance test: silent, other, leak, or the same
type with another message where the CPU's message names no device. In ``dynamo`` mode
an error dynamo raises while it traces with fake tensors (before any backend sees the
graph) arrives wrapped in dynamo's own ``TorchRuntimeError``; the case is judged on the
op's error inside it (``wrapped`` names the wrapper). A dynamo case that still fails is
run on the CPU under ``torch.compile(backend="aot_eager")`` too (``dynamo_cpu``): where
lazax raises just what that raises (``dynamo_own``), the difference is dynamo's, on
every device, and the case does not fail.

Cases run one at a time, warnings ignored; every reference to a case's lazax tensors is
dropped before the next one starts, so a failed case's pending IR is garbage, not work.
"""

from __future__ import annotations

import collections
import copy
import dataclasses
import re
import warnings

import torch
import torch.testing._utils as torch_testing_utils
from torch.utils._pytree import tree_flatten, tree_map

import lazax.modes as lx

from .harness import _clone, _in_mode, _no_rng_freeze, _on_cpu, _to_device, op_id

STATUSES = ("same", "type", "other", "silent", "leak")
# A message naming a device: lazax's may name its own (``lazax:0``) or none.
_DEVICE_WORDS = re.compile(r"\b(cpu|CPU|cuda|CUDA|mps|xla|XLA|meta|lazax|device|devices)\b")


@dataclasses.dataclass(frozen=True)
class ErrorCase:
    op: str
    index: int  # position among the OpInfo's error inputs
    sample: str
    cpu_type: str
    cpu_message: str
    error_regex: str
    status: str
    lazax_type: str = ""
    lazax_message: str = ""
    regex_matches: bool = False  # torch's error_regex matches lazax's message
    exact_message: bool = False  # the CPU's message text appears in lazax's
    device_dependent: bool = False
    wrapped: str = ""  # dynamo's exception type around lazax's error, if any
    dynamo_cpu: str = ""  # dynamo mode: what torch.compile raises on the CPU
    dynamo_own: bool = False  # lazax raises just that: the difference is dynamo's


def failing(case: ErrorCase) -> bool:
    """The case fails ``test_error_inputs.py`` (unless ``skips.ERROR_SKIPS`` lists it)."""
    if case.dynamo_own:
        return False
    if case.status == "type":
        return not case.device_dependent
    return case.status in ("other", "silent", "leak")


def describe(sample) -> str:
    """The sample's arguments, tensors as dtype and shape (nested ones too)."""

    def show(x) -> str:
        if isinstance(x, torch.Tensor):
            return f"{str(x.dtype)[6:]}{list(x.shape)}"
        if isinstance(x, (list, tuple)):
            inner = ", ".join(show(v) for v in x)
            return f"[{inner}]" if isinstance(x, list) else f"({inner})"
        return repr(x)

    args = [show(sample.input), *(show(a) for a in sample.args)]
    kwargs = [f"{k}={show(v)}" for k, v in sample.kwargs.items()]
    return f"({', '.join(args + kwargs)})"


def has_error_inputs(op) -> bool:
    return op.error_inputs_func is not None


def _error_inputs(op) -> list:
    if not has_error_inputs(op):
        return []
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            return list(op.error_inputs("cpu"))
    except NotImplementedError:
        return []


def _read_back(value):
    """Every tensor leaf on the host: a lazily-reported error surfaces here."""
    _on_cpu(value)


def _copy(value):
    """The sample for one run, keeping which tensors share memory (``out`` aliasing an
    input, an expanded ``out``): what several error inputs are about."""
    try:
        return copy.deepcopy(value)
    except Exception:
        return _clone(value)


def _overlapping(x: torch.Tensor, storages: dict) -> bool:
    internal = any(st == 0 and n > 1 for st, n in zip(x.stride(), x.shape))
    return not x.requires_grad and (internal or storages[_storage_id(x)] > 1)


def _storage_id(x: torch.Tensor) -> int:
    return x.untyped_storage().data_ptr() if x.untyped_storage().nbytes() else id(x)


def _move(value):
    """``value`` on ``lx.device()`` (``harness._to_device``), except that tensors sharing
    memory (with each other or within themselves) become views of one moved storage."""
    leaves = {id(x): x for x in tree_flatten(value)[0] if isinstance(x, torch.Tensor)}
    storages = collections.Counter(_storage_id(x) for x in leaves.values())
    bases: dict = {}
    moved: dict = {}

    def move(x):
        if not isinstance(x, torch.Tensor):
            return _to_device(x)
        if x.device.type != "cpu":
            return x  # on another device on purpose (a device-mismatch case)
        if id(x) in moved:
            return moved[id(x)]
        if _overlapping(x, storages):
            key = (_storage_id(x), x.dtype)
            if key not in bases:
                n = x.untyped_storage().nbytes() // x.element_size()
                flat = torch.empty(0, dtype=x.dtype).set_(x.untyped_storage(), 0, (n,), (1,))
                bases[key] = _to_device(flat)
            out = bases[key].as_strided(x.shape, x.stride(), x.storage_offset())
        else:
            out = _to_device(x)
        moved[id(x)] = out
        return out

    return tree_map(move, value)


def _run_cpu(op, sample) -> BaseException | None:
    x, args, kwargs = _copy((sample.input, sample.args, sample.kwargs))
    try:
        op.op(x, *args, **kwargs)
    except Exception as err:
        return err
    return None


def _run_lazax(op, sample, mode: str) -> tuple[BaseException | None, str]:
    """lazax's error for the sample (the op's own inside dynamo's wrappers), and the
    wrapper's type name."""
    try:
        x, args, kwargs = _move(_copy((sample.input, sample.args, sample.kwargs)))
        out = _in_mode(op.op, mode)(x, *args, **kwargs)
        _read_back(out)
        del out
        if mode == "lazy":
            lx.sync()
    except Exception as err:
        return _unwrapped(_detached(err))
    return None, ""


def _unwrapped(err: BaseException) -> tuple[BaseException, str]:
    """The op's error inside dynamo's wrappers (``TorchRuntimeError`` from
    ``Unsupported`` from the error a fake-tensor run raised), and the outer type."""
    from torch._dynamo.exc import TorchDynamoException

    link, seen = err, set()
    while isinstance(link, TorchDynamoException) and id(link) not in seen:
        seen.add(id(link))
        inner = link.__cause__ or link.__context__
        if inner is None:
            return err, ""
        link = inner
    return link, (type(err).__name__ if link is not err else "")


def _run_dynamo_cpu(op, sample) -> BaseException | None:
    """The sample on the CPU under ``torch.compile(backend="aot_eager")``."""
    x, args, kwargs = _copy((sample.input, sample.args, sample.kwargs))

    def compiled_call(*a, **k):
        return op.op(*a, **k)

    torch._dynamo.reset()
    compiled = torch.compile(compiled_call, backend="aot_eager", dynamic=False)
    saved = torch_testing_utils.freeze_rng_state
    torch_testing_utils.freeze_rng_state = _no_rng_freeze  # as harness._in_mode does
    try:
        compiled(x, *args, **kwargs)
    except Exception as err:
        return _unwrapped(err)[0]
    finally:
        torch_testing_utils.freeze_rng_state = saved
    return None


def _detached(err: BaseException) -> BaseException:
    """``err`` without tracebacks (its chain's too): their frames hold the case's lazax
    tensors, which must not outlive the case."""
    seen: set[int] = set()
    link = err
    while link is not None and id(link) not in seen:
        seen.add(id(link))
        link.__traceback__ = None
        link = link.__cause__ or link.__context__
    return err


def _message(err: BaseException) -> str:
    if isinstance(err, KeyError) and len(err.args) == 1:
        return str(err.args[0])  # str(KeyError) quotes its argument
    return str(err)


def _search(regex: str, text: str) -> bool:
    try:
        return re.search(regex, text) is not None
    except re.error:
        return False


def classify(cpu_err: BaseException, lazax_err: BaseException | None, regex: str) -> dict:
    """The fields of an ``ErrorCase`` that compare lazax's error to the CPU's."""
    cpu_message = _message(cpu_err)
    fields = {
        "cpu_type": type(cpu_err).__name__,
        "cpu_message": cpu_message,
        "device_dependent": _DEVICE_WORDS.search(cpu_message) is not None,
    }
    if lazax_err is None:
        return {**fields, "status": "silent"}
    message = _message(lazax_err)
    regex_matches = _search(regex, message)
    exact = cpu_message.strip() in message
    same_message = exact or (regex_matches and _search(regex, cpu_message))
    if not isinstance(lazax_err, type(cpu_err)):
        status = "other"
    else:
        status = "same" if same_message else "type"
    return {
        **fields,
        "status": status,
        "lazax_type": type(lazax_err).__name__,
        "lazax_message": message,
        "regex_matches": regex_matches,
        "exact_message": exact,
    }


def _pending_ok() -> BaseException | None:
    """``lx.sync()`` before a case: what a previous case left pending must run (or be
    garbage). An error here is a leak from the previous case, reported, never hidden."""
    try:
        lx.sync()
    except Exception as err:
        return _detached(err)
    return None


def check_errors(op, mode: str) -> list[ErrorCase]:
    name = op_id(op)
    cases: list[ErrorCase] = []
    previous = "(none)"
    for index, error_input in enumerate(_error_inputs(op)):
        sample = error_input.sample_input
        regex = error_input.error_regex
        what = describe(sample)
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            cpu_err = _run_cpu(op, sample)
            if cpu_err is None:
                continue  # the CPU accepts this input: not an error case here
            leak = _pending_ok()
            if leak is not None:
                cases.append(
                    ErrorCase(
                        name,
                        index,
                        what,
                        type(cpu_err).__name__,
                        _message(cpu_err),
                        regex,
                        "leak",
                        type(leak).__name__,
                        f"lx.sync() before this case raised (after case {previous}): "
                        f"{_message(leak)}",
                    )
                )
                continue
            lazax_err, wrapped = _run_lazax(op, sample, mode)
            case = ErrorCase(
                name,
                index,
                what,
                error_regex=regex,
                wrapped=wrapped,
                **classify(cpu_err, lazax_err, regex),
            )
            if mode == "dynamo" and failing(case):
                case = _against_dynamo_cpu(case, op, sample, lazax_err)
        cases.append(case)
        previous = f"{index} {what}"
    return cases


def _against_dynamo_cpu(case: ErrorCase, op, sample, lazax_err) -> ErrorCase:
    dynamo_err = _run_dynamo_cpu(op, sample)
    if dynamo_err is None:
        return dataclasses.replace(case, dynamo_cpu="(no error)", dynamo_own=lazax_err is None)
    own = (
        lazax_err is not None
        and isinstance(lazax_err, type(dynamo_err))
        and _message(dynamo_err).split("\n\nfrom user code:")[0].strip() in _message(lazax_err)
    )
    shown = f"{type(dynamo_err).__name__}: {_message(dynamo_err)}"
    return dataclasses.replace(case, dynamo_cpu=shown, dynamo_own=own)


def short(text: str, limit: int = 200) -> str:
    """One line of at most ``limit`` characters, for tables and test failures."""
    line = " ".join(text.split())
    return line if len(line) <= limit else line[: limit - 3] + "..."
