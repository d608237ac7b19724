"""Differential fuzzing: random torch programs give torch's answers in every mode.

CI runs a fixed, reproducible budget (``derandomize``: the same programs every run);
``nox -s fuzz`` runs a long random one (``LAZAX_FUZZ_EXAMPLES`` programs per mode, new
ones each run, failures remembered in ``.hypothesis/``) and prints how many programs
each mode ran. A program that fails is shrunk by hypothesis to a short one; keep it in
``test_fuzz_regressions.py``.
"""

import json
import os
from collections import Counter

import pytest
from hypothesis import HealthCheck, given, settings

from .fuzz_programs import MODES, check, programs

EXAMPLES = int(os.environ.get("LAZAX_FUZZ_EXAMPLES", "40"))
LONG_RUN = os.environ.get("LAZAX_FUZZ_RANDOM") == "1"
RAN: Counter = Counter()  # programs that ran and matched, per mode


@pytest.fixture(scope="module", autouse=True)
def report_programs_per_mode():
    yield
    if os.environ.get("LAZAX_FUZZ_REPORT"):
        with open(os.environ["LAZAX_FUZZ_REPORT"], "w") as f:
            json.dump(dict(RAN), f, indent=1)
    print("\nfuzzed programs matching torch, per mode:", dict(RAN))


@pytest.mark.parametrize("mode", MODES)
def test_random_programs_match_torch(mode):
    @settings(
        max_examples=EXAMPLES,
        deadline=None,
        derandomize=not LONG_RUN,
        database=None if not LONG_RUN else settings.default.database,
        suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
        print_blob=LONG_RUN,
    )
    @given(programs())
    def program_matches(program):
        check(program, mode)
        RAN[mode] += 1

    program_matches()
