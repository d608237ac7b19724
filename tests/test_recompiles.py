"""Cache keys from named parts, and recompile reports that say what changed and where."""

import jax
import pytest
import torch

import lazax.executor as lx_exec
import lazax.modes as lx
from lazax.cache import CacheKey
from lazax.modes.testing import recompile_mark, recompile_reports_since

DEV = lx.device()


def counter(name):
    return lx.metrics.counter_value(name) or 0


@pytest.fixture(autouse=True)
def _no_earlier_reports():
    """Start each test with no recompile reports: only the latest 1,024 are kept, so
    after a long run in the same process (the conformance suite, under xdist) counting
    new ones by the list's length finds none."""
    lx.metrics.clear_all()


class _Runtime:
    """A stand-in runtime: only what KeyParts reads."""

    def __init__(self, options=(("x64", True),), jax_version="0.10.2") -> None:
        self.options, self.jax_version = options, jax_version

    def compile_options(self):
        return self.options

    def versions(self):
        return {"jax": self.jax_version, "jaxlib": "0.10.2", "lazax-pjrt": "0.1.0"}


def _graph():
    x = torch.ones(3, 4).to(DEV) * 2.0
    from lazax import ir

    return ir.collect([lx_exec.ir_value(x)])


def test_each_part_of_the_environment_changes_the_key():
    from lazax.executor.barrier.keys import KeyParts

    graph = _graph()
    base = KeyParts(_Runtime(), device_salt_hash=1).cache_key(graph)
    assert isinstance(base, CacheKey)
    assert KeyParts(_Runtime(), device_salt_hash=1).cache_key(graph) == base
    variants = {
        "options": KeyParts(_Runtime(options=(("x64", False),)), 1),
        "versions": KeyParts(_Runtime(jax_version="0.10.3"), 1),
        "device": KeyParts(_Runtime(), device_salt_hash=2),  # another device count/kind
    }
    for part, keys in variants.items():
        key = keys.cache_key(graph)
        assert key != base and key.first_difference(base) == part
        assert keys.memory_key(graph.hash) != KeyParts(_Runtime(), 1).memory_key(graph.hash)


def test_device_count_is_in_the_device_part():
    salt = lx_exec.EXECUTOR.compiler.device_salt
    assert salt.endswith(f":{len(lx_exec.EXECUTOR.runtime.devices)}")


def test_a_changed_jax_option_recompiles_and_says_so():
    w = torch.randn(4, 4).to(DEV)
    x = torch.randn(2, 4).to(DEV)
    lx.sync()
    precision = jax.config.jax_default_matmul_precision
    try:
        for precision_now in (precision, "highest"):  # one site: the same two lines
            before = counter("UncachedCompile")
            jax.config.update("jax_default_matmul_precision", precision_now)
            out = (x @ w).sum()  # noqa: F841 (kept alive to sync)
            lx.sync()
        assert counter("UncachedCompile") == before + 1
        assert "the options part of the cache key changed" in lx.metrics.recompile_reports()[-1]
    finally:
        jax.config.update("jax_default_matmul_precision", precision)


def test_a_loop_whose_input_shape_changes_reports_each_change(capsys, monkeypatch):
    monkeypatch.setenv("LAZAX_DEBUG_RECOMPILES", "1")
    w = torch.randn(40, 3).to(DEV)
    start = recompile_mark()
    for step in range(40):
        width = (40, 32, 24, 16)[step // 10]
        batch = torch.randn(8, width).to(DEV)
        out = (torch.tanh(batch) @ w[:width]).sum()  # noqa: F841 (kept alive to sync)
        lx.sync()  # <- the line the reports name
    reports = recompile_reports_since(start)
    assert len(reports) == 3
    for report, (old, new) in zip(reports, [(40, 32), (32, 24), (24, 16)]):
        assert f"shape changed from (8, {old}) to (8, {new})" in report
        assert "test_recompiles.py:" in report and "a_loop_whose_input_shape" in report
    printed = capsys.readouterr().err
    assert printed.count("lazax: recompile of") == 3


def test_a_baked_constant_that_changes_is_named():
    x = torch.randn(5).to(DEV)
    lx.sync()
    start = recompile_mark()
    for scale in (1.0, 0.0):
        out = torch.relu(x * scale)  # noqa: F841 (kept alive to sync)
        lx.sync()
    (report,) = recompile_reports_since(start)
    assert "aten::mul" in report and "scalar baked as a constant" in report


def test_a_named_region_is_its_own_site():
    name = "step"
    start = recompile_mark()

    @lx.compile(name=name)
    def step(t):
        return (t * 3.0).sum()

    step(torch.randn(4).to(DEV))
    step(torch.randn(6).to(DEV))
    reports = recompile_reports_since(start)
    assert any(r.startswith(f"recompile of {name}: ") and "(4,) to (6,)" in r for r in reports)


def test_each_miss_logs_its_key_parts_at_debug_level(caplog):
    x = torch.randn(7, 3).to(DEV)
    with caplog.at_level("DEBUG", logger="lazax.cache"):
        out = torch.sin(x) * 5.0  # noqa: F841 (kept alive to sync)
        lx.sync()
    (record,) = [r for r in caplog.records if "cache miss" in r.getMessage()]
    for part in ("graph=", "inputs=", "device=", "options=", "versions="):
        assert part in record.getMessage()
