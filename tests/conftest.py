"""Shared fixtures for the cross-package tests."""

import pytest

from lazax.executor.testing import no_cpu_fallback


@pytest.fixture
def no_fallback():
    """Asserts that the test body ran no op through the CPU fallback."""
    with no_cpu_fallback():
        yield
