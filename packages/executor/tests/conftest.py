"""Fixtures for the executor's tests (``lazax.executor.testing`` underneath).

- ``_compare_deferred_checks`` (autouse): each test's ``deferred_check``s are run as one
  graph and compared at its end.
- ``no_fallback``: fails the test if any aten op ran through the CPU fallback during it.
"""

import pytest

from lazax.executor.testing import comparing_deferred_checks, no_cpu_fallback


@pytest.fixture(autouse=True)
def _compare_deferred_checks():
    with comparing_deferred_checks():
        yield


@pytest.fixture
def no_fallback():
    with no_cpu_fallback():
        yield
