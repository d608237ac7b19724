"""Graph hashing and the computation cache, seen through the tensor layer."""

import os
import subprocess
import sys

import torch

import lazax.executor as lx
import lazax.modes as lx_modes
from lazax import ir

_PROGRAM = """
import torch
import lazax.executor as lx
from lazax import ir
torch.manual_seed({seed})
x = torch.randn(8, 16).to("lazax")
w = torch.randn(16, 4).to("lazax")
y = torch.softmax(torch.relu(x @ w) * 0.5 + 1.5, dim=-1).sum(0)
print(ir.collect([lx.ir_value(y)], salt=lx.EXECUTOR.compiler.device_salt).hash)
"""


def _hash_in_subprocess(seed: int, hashseed: str) -> str:
    env = dict(os.environ, PYTHONHASHSEED=hashseed)
    out = subprocess.run(
        [sys.executable, "-c", _PROGRAM.format(seed=seed)],
        env=env,
        capture_output=True,
        text=True,
        check=True,
    )
    return out.stdout.strip().splitlines()[-1]


def test_same_torch_program_hashes_the_same_in_two_processes():
    # Other data (seed) and another string-hash salt: the same graph hash.
    assert _hash_in_subprocess(0, "1") == _hash_in_subprocess(1, "2")


def test_attribute_change_changes_the_hash():
    x = torch.randn(4, 6).to("lazax")
    a = ir.collect([lx.ir_value(torch.softmax(x, dim=0))]).hash
    b = ir.collect([lx.ir_value(torch.softmax(x, dim=1))]).hash
    c = ir.collect([lx.ir_value(torch.softmax(x, dim=1))]).hash
    assert a != b and b == c


def test_eviction_costs_a_recompile_not_an_error():
    executor = lx.EXECUTOR
    try:
        executor.reset_cache(capacity=2)
        evictions = lx_modes.metrics.counter_value("CacheEvictions") or 0
        x = torch.randn(5).to("lazax")
        programs = [lambda t: t + 1.5, lambda t: t * t, lambda t: torch.exp(t)]
        results = [p(x).cpu() for p in programs]  # third graph evicts the first
        assert lx_modes.metrics.counter_value("CacheEvictions") == evictions + 1
        assert len(executor.cache) == 2
        before = lx_modes.metrics.counter_value("UncachedCompile")
        torch.testing.assert_close(programs[0](x).cpu(), results[0])
        assert lx_modes.metrics.counter_value("UncachedCompile") == before + 1
    finally:
        executor.reset_cache()  # back to the default capacity


def test_cache_capacity_comes_from_the_environment():
    code = "import lazax.executor as lx; print(lx.EXECUTOR.cache.capacity)"
    env = dict(os.environ, LAZAX_COMPILATION_CACHE_SIZE="64")
    out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True)
    assert out.stdout.strip() == "64", out.stderr
