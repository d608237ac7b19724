"""torch's OpInfo database as lazax's conformance suite.

One test per (OpInfo, dtype, variant, mode): every sample matches torch on the CPU (see
``harness.check``). dtypes: float32, bfloat16, int64 and bool, where the op supports
them; variants: the op, its in-place form, its ``out=`` form, and the gradients of the
float32 samples. A case in ``skips.SKIPS`` is skipped with its reason; any other case
that gives a wrong answer or raises fails.

``LAZAX_CONFORMANCE_MODE=<mode>`` (the nox ``conformance(mode)`` sessions) runs every
case in that mode. Without it (``nox -s tests``) every case runs in lazy mode (~17
minutes over 2 xdist workers on CI's 2 cores) and a fixed sample in the others: every
``OTHER_EVERY``-th OpInfo in eager, compile and dynamo.
"""

import os

import pytest
import torch

from .harness import DTYPES, MODES, VARIANTS, applies, check, op_id
from .skips import KNOWN_FAILURES, SKIPS

try:
    from torch.testing._internal.common_methods_invocations import op_db
except ImportError as err:  # torch's test internals need expecttest
    pytest.skip(f"torch's op database is not importable: {err}", allow_module_level=True)

MODE = os.environ.get("LAZAX_CONFORMANCE_MODE")
if MODE is not None and MODE not in MODES:
    raise ValueError(f"LAZAX_CONFORMANCE_MODE must be one of {MODES}, not {MODE!r}")
OTHER_EVERY = 90


def skip_reason(name: str, variant: str, dtype_name: str, mode: str) -> str | None:
    for key in (
        (name, variant, dtype_name, mode),
        (name, variant, dtype_name, "*"),
        (name, variant, "*", mode),
        (name, variant, "*", "*"),
        (name, "*", "*", mode),
        (name, "*", "*", "*"),
    ):
        if key in SKIPS:
            return SKIPS[key]
        if key in KNOWN_FAILURES:
            return f"known failure (known_failures.json): {KNOWN_FAILURES[key]}"
    return None


def cases():
    for position, op in enumerate(op_db):
        if MODE is not None:
            modes = [MODE]
        else:
            modes = ["lazy"]
            if position % OTHER_EVERY == 0:
                modes += ["eager", "compile", "dynamo"]
        for dtype_name, dtype in DTYPES.items():
            for variant in VARIANTS:
                if not applies(op, dtype, variant):
                    continue
                for mode in modes:
                    name = op_id(op)
                    reason = skip_reason(name, variant, dtype_name, mode)
                    marks = [pytest.mark.skip(reason=reason)] if reason else []
                    yield pytest.param(
                        op,
                        dtype,
                        variant,
                        mode,
                        id=f"{name}-{dtype_name}-{variant}-{mode}",
                        marks=marks,
                    )


@pytest.mark.parametrize(("op", "dtype", "variant", "mode"), list(cases()))
def test_op_matches_torch(op, dtype, variant, mode):
    result = check(op, dtype, mode, variant)
    if result.status in ("pass", "none"):
        return
    raise AssertionError(f"{op_id(op)} ({torch.__version__}) {result.status}: {result.detail}")
