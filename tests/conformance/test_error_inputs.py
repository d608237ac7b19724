"""torch's OpInfo ``error_inputs`` as lazax's conformance suite: bad calls raise as on
the CPU.

One test per (OpInfo with error inputs, mode): each error input the CPU rejects must be
rejected by lazax with the same exception type, and with the same message unless the
CPU's names a device (``errors.check_errors`` and ``errors.failing`` say exactly when a
case fails). A case in ``skips.ERROR_SKIPS``, keyed by (op id, case index or "*", mode
or "*"), is left out with its reason; the test fails on any other failing case.

``LAZAX_CONFORMANCE_MODE=<mode>`` (the nox ``conformance(mode)`` sessions) runs only that
mode. Without it (``nox -s tests``) every mode runs (~25 s each on one core, dynamo
~50 s). A bad call that dynamo fails to trace leaves torch's eval-frame function
installed in the worker for good (see ``lazax.ir``'s holder counts): the tests that
share the worker then run in that state too, as a user's process would.
"""

import os

import pytest

from .errors import check_errors, failing, has_error_inputs, short
from .harness import MODES, op_id
from .skips import ERROR_SKIPS

try:
    from torch.testing._internal.common_methods_invocations import op_db
except ImportError as err:  # torch's test internals need expecttest
    pytest.skip(f"torch's op database is not importable: {err}", allow_module_level=True)

MODE = os.environ.get("LAZAX_CONFORMANCE_MODE")
DEFAULT_MODES = MODES
if MODE is not None and MODE not in MODES:
    raise ValueError(f"LAZAX_CONFORMANCE_MODE must be one of {MODES}, not {MODE!r}")


def skip_reason(name: str, index: int, mode: str) -> str | None:
    for key in ((name, index, mode), (name, index, "*"), (name, "*", mode), (name, "*", "*")):
        if key in ERROR_SKIPS:
            return ERROR_SKIPS[key]
    return None


def cases():
    for op in op_db:
        if not has_error_inputs(op):
            continue
        for mode in [MODE] if MODE is not None else DEFAULT_MODES:
            name = op_id(op)
            reason = skip_reason(name, "*", mode)
            marks = [pytest.mark.skip(reason=reason)] if reason else []
            yield pytest.param(op, mode, id=f"{name}-{mode}", marks=marks)


def _show(case) -> str:
    got = f"{case.lazax_type}: {short(case.lazax_message)}" if case.lazax_type else "no error"
    if case.wrapped:
        got = f"{case.wrapped} from {got}"
    return (
        f"  case {case.index} {case.sample}: {case.status}; CPU raises {case.cpu_type}: "
        f"{short(case.cpu_message)}; lazax: {got}"
    )


@pytest.mark.parametrize(("op", "mode"), list(cases()))
def test_error_inputs_raise_as_on_cpu(op, mode):
    name = op_id(op)
    bad = [c for c in check_errors(op, mode) if failing(c) and not skip_reason(name, c.index, mode)]
    if bad:
        lines = "\n".join(_show(c) for c in bad)
        raise AssertionError(f"{name} in {mode} mode: {len(bad)} error inputs differ\n{lines}")
