"""The memory-map guard: it keeps the process under the OS's limit on mappings by what
its programs hold, and says so when it cannot.

An XLA CPU executable holds its code in mappings of its own (two for a one-op graph,
hundreds to thousands for a real forward); Linux allows 65,530 per process by default,
and past it LLVM aborts the process. The guard is tested with the runtime's reading
replaced by a model of the process: a base count plus what each live program holds,
set per compile by the test (reaching the real limit takes thousands of compiles; the
real run is ``tests/long_run.py``'s map scenario). That the reading itself is right is
checked against /proc.
"""

import gc
import os
import warnings

import pytest
import torch

import lazax.executor as lx_exec
import lazax.modes as lx
from lazax.executor.barrier import map_guard as _map_guard

DEV = lx.device()
LIMIT = 10_000


@pytest.mark.skipif(not os.path.exists("/proc/self/maps"), reason="Linux only")
def test_memory_maps_reads_the_process_and_the_limit():
    count, limit = lx_exec.EXECUTOR.runtime.memory_maps()
    with open("/proc/sys/vm/max_map_count") as f:
        assert limit == int(f.read())
    assert 100 < count < limit


class Process:
    """``memory_maps()`` of a process whose count is ``base`` plus what every program
    still alive holds: each compile's program holds ``next_size`` mappings."""

    def __init__(self, monkeypatch, base=1000):
        executor = lx_exec.EXECUTOR
        runtime = executor.runtime
        self.base = base
        self.next_size = 10
        self.sizes = {}  # id(executable) -> mappings
        self.alive = {}  # id -> weakref: freed programs drop out
        self.readings = []
        compile_ = runtime.compile

        def compile(*args, **kwargs):
            import weakref

            entry = compile_(*args, **kwargs)
            self.sizes[id(entry)] = self.next_size
            self.alive[id(entry)] = weakref.ref(entry)
            return entry

        monkeypatch.setattr(runtime, "compile", compile)
        monkeypatch.setattr(runtime, "memory_maps", self.memory_maps)
        # Read after every compile: the budget rule is for real readings' cost.
        monkeypatch.setattr(_map_guard, "SECONDS_PER_MAPPING_READ", 0.0)
        self.guard = _map_guard.MapGuard()
        monkeypatch.setattr(executor.compiler, "map_guard", self.guard)

    def memory_maps(self):
        gc.collect()
        held = sum(self.sizes[i] for i, ref in self.alive.items() if ref() is not None)
        self.readings.append(self.base + held)
        return self.base + held, LIMIT


def _program(n: int, x):
    """A new graph for each ``n`` (its shape differs)."""
    return (x * n + torch.ones(n, 1, device=DEV)).cpu()


def test_the_guard_evicts_by_what_programs_hold_before_the_next_one_could_cross(monkeypatch):
    executor = lx_exec.EXECUTOR
    executor.reset_cache(capacity=256)
    process = Process(monkeypatch)
    x = torch.ones(4).to(DEV)  # a transfer: no program
    before = lx_exec.metrics.counter_value("MemoryMapEvictions") or 0
    for n in range(1, 5):  # four small programs: 10 mappings each
        _program(n, x)
    process.next_size = 500  # then large ones, as a decoder's forwards
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        for n in range(5, 11):
            _program(n, x)
    # After the sixth large one the count is 1000 + 40 + 3000 = 4040: with room for the
    # next (twice the largest recent, 1000) it would pass half the limit. To come down
    # to 35% (3500) the guard sheds 540 mappings: the four small ones hold 40, so it
    # evicts the oldest large one as well: five programs, by what they hold.
    evicted = lx_exec.metrics.counter_value("MemoryMapEvictions") - before
    assert evicted == 5
    assert process.readings[-1] == 1000 + 5 * 500
    assert process.guard.held and set(process.guard.held.values()) == {500}
    messages = [str(w.message) for w in caught if "memory mappings" in str(w.message)]
    assert len(messages) == 1 and "vm.max_map_count" in messages[0], messages
    # Twenty more large ones: the count never passes half the limit, one warning only.
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        for n in range(11, 31):
            _program(n, x)
    assert max(process.readings) <= LIMIT // 2
    assert not [w for w in caught if "memory mappings" in str(w.message)]
    # An evicted graph recompiles and gives the right answer.
    torch.testing.assert_close(_program(1, x), torch.full((1, 4), 2.0))
    executor.reset_cache()


def test_programs_held_elsewhere_are_named_and_the_next_compile_raises(monkeypatch):
    executor = lx_exec.EXECUTOR
    executor.reset_cache(capacity=256)
    process = Process(monkeypatch, base=1000)
    process.next_size = 1500

    class Keeper:  # holds every program it sees, as a cache outside lazax's would
        def __init__(self):
            self.programs = []

    keeper = Keeper()
    compile_ = lx_exec.EXECUTOR.runtime.compile

    def keep(*args, **kwargs):
        entry = compile_(*args, **kwargs)
        keeper.programs.append(entry)
        return entry

    monkeypatch.setattr(lx_exec.EXECUTOR.runtime, "compile", keep)
    x = torch.ones(4).to(DEV)  # a transfer: no program
    held_before = lx_exec.metrics.counter_value("MemoryMapsHeldElsewhere") or 0
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        for n in range(1, 5):  # 1000 + 4 * 1500 = 7000: past half, nothing frees
            _program(n, x)
    held = [str(w.message) for w in caught if "were freed" in str(w.message)]
    assert held and "Keeper" in held[0], held
    assert lx_exec.metrics.counter_value("MemoryMapsHeldElsewhere") > held_before
    # 1000 + 5 * 1500 = 8500, room 3000: the next program may not fit under the limit.
    y = x * 7 + 1
    with pytest.raises(lx.MemoryMapsExhausted, match="vm.max_map_count") as raised:
        _program(5, x)
    assert "Keeper" in str(raised.value) and "keeps its value" in str(raised.value)
    # Freed by their holder, the programs go, and the same work runs.
    keeper.programs.clear()
    torch.testing.assert_close(y.cpu(), torch.full((4,), 8.0))
    torch.testing.assert_close(_program(5, x), torch.full((5, 4), 6.0))
    executor.reset_cache()


def test_a_compile_that_runs_out_of_mappings_raises_and_tensors_keep_their_values(
    monkeypatch,
):
    executor = lx_exec.EXECUTOR
    x = torch.arange(6.0, device=DEV)
    lx.sync(wait=True)
    y = x * 3 + 2  # pending: its program is not compiled yet
    x.add_(1)  # pending in-place: x must keep its old value if the compile fails

    def fail(*args, **kwargs):
        raise RuntimeError("INTERNAL: LLVM compilation error: Cannot allocate memory")

    monkeypatch.setattr(executor.runtime, "compile", fail)
    with pytest.raises(lx.MemoryMapsExhausted, match="vm.max_map_count") as raised:
        y.cpu()
    assert "Cannot allocate memory" in str(raised.value)
    assert isinstance(raised.value.__cause__, RuntimeError)
    monkeypatch.undo()
    torch.testing.assert_close(y.cpu(), torch.arange(6.0) * 3 + 2)
    torch.testing.assert_close(x.cpu(), torch.arange(6.0) + 1)


def test_the_guard_turns_itself_off_where_the_os_does_not_say(monkeypatch):
    executor = lx_exec.EXECUTOR
    guard = _map_guard.MapGuard()
    monkeypatch.setattr(executor.compiler, "map_guard", guard)
    monkeypatch.setattr(executor.runtime, "memory_maps", lambda: None)
    x = torch.ones(3, device=DEV)
    for n in range(1, 20):
        (x * n + torch.ones(n + 100, 1, device=DEV)).cpu()
    assert guard.enabled is False
