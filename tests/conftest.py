"""Shared fixtures for the cross-package tests."""

import pytest

import lazax.modes as lx


@pytest.fixture
def no_fallback():
    """Asserts that the test body ran no op through the CPU fallback."""
    before = {n: lx.metrics.counter_value(n) for n in lx.metrics.counter_names()}
    yield
    after = {n: lx.metrics.counter_value(n) for n in lx.metrics.counter_names()}
    fell_back = sorted(n for n in after if n.startswith("aten::") and after[n] != before.get(n))
    assert not fell_back, f"ops ran through the CPU fallback: {fell_back}"
