"""The memory-map guard: near the OS's limit on mappings, the oldest executables go.

An XLA CPU executable holds its code in ~13 mappings of its own; a full cache of real
graphs can pass Linux's default limit (65,530), and then LLVM aborts the process. The
guard is tested with the runtime's reading replaced (reaching the real limit takes tens
of thousands of compiles); that the reading itself is right is checked against /proc.
"""

import os
import warnings

import pytest
import torch

import lazax.executor as lx_exec
import lazax.modes as lx
from lazax.executor.barrier import map_guard as _map_guard

DEV = lx.device()


@pytest.mark.skipif(not os.path.exists("/proc/self/maps"), reason="Linux only")
def test_memory_maps_reads_the_process_and_the_limit():
    count, limit = lx_exec.EXECUTOR.runtime.memory_maps()
    with open("/proc/sys/vm/max_map_count") as f:
        assert limit == int(f.read())
    assert 100 < count < limit


def test_near_the_limit_the_oldest_executables_are_evicted_with_one_warning(monkeypatch):
    executor = lx_exec.EXECUTOR
    runtime = executor.runtime
    executor.reset_cache(capacity=256)
    monkeypatch.setattr(executor.compiler, "map_guard", _map_guard.MapGuard())
    reading = {"count": 1000}
    monkeypatch.setattr(runtime, "memory_maps", lambda: (reading["count"], 10_000))
    before = lx_exec.metrics.counter_value("MemoryMapEvictions") or 0
    x = torch.ones(4, device=DEV)
    for n in range(1, 33):  # 32 new graphs: two guard checks, both under the mark
        (x * n + torch.ones(n, 1, device=DEV)).cpu()
    assert len(executor.cache) == 32
    reading["count"] = 8000  # 80% of the limit: past the high-water mark
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        for n in range(33, 49):  # the third check
            (x * n + torch.ones(n, 1, device=DEV)).cpu()
        for n in range(49, 81):  # two more checks: evicts again, warns no more
            (x * n + torch.ones(n, 1, device=DEV)).cpu()
    messages = [str(w.message) for w in caught if "memory mappings" in str(w.message)]
    assert len(messages) == 1 and "vm.max_map_count" in messages[0]
    # Each check evicts 1 + entries * (8000 - 3500) / 8000 (down to 35% in proportion):
    # 48 entries -> 28 go; 20 + 16 = 36 -> 21 go; 15 + 16 = 31 -> 18 go; 13 stay.
    evicted = lx_exec.metrics.counter_value("MemoryMapEvictions") - before
    assert (evicted, len(executor.cache)) == (28 + 21 + 18, 13)
    # The evicted graphs recompile and give the right answer.
    torch.testing.assert_close(
        (x * 1 + torch.ones(1, 1, device=DEV)).cpu(), torch.full((1, 4), 2.0)
    )
    executor.reset_cache()


def test_the_guard_turns_itself_off_where_the_os_does_not_say(monkeypatch):
    executor = lx_exec.EXECUTOR
    guard = _map_guard.MapGuard()
    monkeypatch.setattr(executor.compiler, "map_guard", guard)
    monkeypatch.setattr(executor.runtime, "memory_maps", lambda: None)
    x = torch.ones(3, device=DEV)
    for n in range(1, 20):
        (x * n + torch.ones(n + 100, 1, device=DEV)).cpu()
    assert guard.enabled is False
