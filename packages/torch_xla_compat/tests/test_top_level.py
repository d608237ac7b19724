"""torch_xla's top-level functions and eager mode, against torch_xla's documented
behaviour: device, sync, compile, step, manual_seed, launch, experimental eager mode."""

import pytest
import torch
import torch_xla
import torch_xla.debug.metrics as met
from torch_xla.experimental import eager_mode, eager_mode_context, is_eager_mode

import lazax.modes as lx

# "xla" when torch_xla was imported before lazax (as here), lazax's "lazax" otherwise.
DEV = lx.device().type


def _executions() -> int:
    return (met.metric_data("ExecuteTime") or (0,))[0]


def test_device_is_the_first_lazax_device():
    assert torch_xla.device() == lx.device(0)
    assert torch_xla.device(0) == lx.device(0)
    assert torch_xla.devices()[0] == lx.device(0)
    assert torch_xla.device_count() == len(torch_xla.devices()) >= 1
    assert torch_xla.real_devices()[0] == "CPU:0"
    assert len(torch_xla.real_devices()) == torch_xla.device_count()


def test_sync_runs_pending_work_as_one_graph():
    x = torch.randn(4, 4).to(torch_xla.device())
    y = (x @ x).relu() + 1
    before = _executions()
    torch_xla.sync(wait=True)
    assert _executions() == before + 1
    torch.testing.assert_close(y.cpu(), (x.cpu() @ x.cpu()).relu() + 1)


def _graphs() -> list[int]:
    """[graphs compiled or found compiled, graphs executed, graphs compiled] so far."""
    uncached = met.counter_value("UncachedCompile") or 0
    return [uncached + (met.counter_value("CachedCompile") or 0), _executions(), uncached]


def _since(before: list[int]) -> list[int]:
    return [now - then for now, then in zip(_graphs(), before)]


def test_compile_is_one_graph_per_call_and_a_context_manager():
    dev = torch_xla.device()

    def f(a, b):
        return (a * b).sum(0) + a

    compiled = torch_xla.compile(f)
    a, b = torch.randn(3, 3), torch.randn(3, 3)
    a_dev, b_dev = a.to(dev), b.to(dev)
    torch_xla.sync(wait=True)
    for call in range(3):
        before = _graphs()
        out = compiled(a_dev, b_dev)
        graphs = _since(before)
        # one graph, run at the call's end (compiled the first time, unless an earlier
        # test did), and nothing more when the output is read
        assert graphs[:2] == [1, 1] and (call == 0 or graphs[2] == 0), (call, graphs)
        torch.testing.assert_close(out.cpu(), f(a, b))
        assert _since(before) == graphs
    before = _graphs()
    with torch_xla.compile(name="block"):
        c = a_dev * 3
        c = c + b_dev
    assert _since(before)[:2] == [1, 1]  # the block's two ops: one graph, at its end
    torch.testing.assert_close(c.cpu(), a * 3 + b)
    assert _since(before)[:2] == [1, 1]


def test_compile_full_graph_refuses_a_host_read():
    @torch_xla.compile(full_graph=True)
    def reads(x):
        return x * (x.sum().item())

    with pytest.raises(RuntimeError, match="Unexpected execution happens inside the compiled"):
        reads(torch.ones(3, device=torch_xla.device()))
    with pytest.raises(RuntimeError, match=r"(?s)exiting\n.*test_top_level.py"):  # lazax's
        with torch_xla.compile(full_graph=True, name="block_reads"):
            torch.ones(2, device=torch_xla.device()).sum().item()


def test_compile_max_different_graphs_stops_a_recompiling_function():
    @torch_xla.compile(max_different_graphs=1, name="grows")
    def step(x):
        return x + 1

    step(torch.ones(2, device=torch_xla.device()))
    step(torch.ones(2, device=torch_xla.device()))  # the same graph again
    with pytest.raises(RuntimeError, match=r"(?s)allowed per function exceeded: 1\nGot: .*\nlazax"):
        step(torch.ones(3, device=torch_xla.device()))


def test_compile_graph_limit_names_the_operations_in_torch_xla_ir_words():
    @torch_xla.compile(max_different_graphs=2, name="forks")
    def forks(x, branch):
        y = x * x
        if branch == "sub":
            return y - x
        if branch == "max":
            return torch.maximum(y, x)
        return y.sum(dim=0) if branch == "sum" else y

    x = torch.ones(2, 3, device=torch_xla.device())
    forks(x, "sub")
    forks(x, "max")
    with pytest.raises(RuntimeError) as err:
        forks(x, "sum")
    assert str(err.value).startswith(
        "Maximum number of different graphs allowed per function exceeded: 2\n"
        "Got: [] aten::sum, xla_shape=f32[3]{0}, dynamic_dims: ()\n"
        "Expected either of:\n"
        "  - [] aten::sub, xla_shape=f32[2,3]{1,0}, dynamic_dims: ()\n"
        "  - [] aten::maximum, xla_shape=f32[2,3]{1,0}, dynamic_dims: ()\n"
        "lazax: compiled region 'forks'"
    )
    with pytest.raises(RuntimeError) as err:
        forks(x, "none")  # the trace ends where the seen ones go on
    assert "Reached the end of the function at: [] aten::mul, xla_shape=f32[2,3]{1,0}" in str(
        err.value
    )


def test_compile_decorates_a_method():
    class Model:
        scale = 3.0

        @torch_xla.compile
        def forward(self, x):
            return x * self.scale

    out = Model().forward(torch.ones(2, device=torch_xla.device()))
    torch.testing.assert_close(out.cpu(), torch.full((2,), 3.0))


def test_step_syncs_before_and_after_its_block():
    dev = torch_xla.device()
    pending = torch.ones(2, device=dev) + 1
    before = _executions()
    with torch_xla.step():
        inside = torch.ones(2, device=dev) * 5
        after_entry = _executions()
    assert after_entry == before + 1  # the earlier work ran at entry, not in the step
    assert _executions() == before + 2
    torch.testing.assert_close(pending.cpu(), torch.full((2,), 2.0))
    torch.testing.assert_close(inside.cpu(), torch.full((2,), 5.0))


def test_step_syncs_even_when_the_block_raises():
    dev = torch_xla.device()
    before = _executions()
    with pytest.raises(ValueError):
        with torch_xla.step():
            left = torch.ones(2, device=dev) * 7
            raise ValueError("boom")
    assert _executions() == before + 1  # nothing was pending at entry; the exit ran it
    torch.testing.assert_close(left.cpu(), torch.full((2,), 7.0))


def test_manual_seed_repeats_device_random_numbers_and_leaves_the_cpu_alone():
    dev = torch_xla.device()
    torch.manual_seed(1)
    cpu_first = torch.rand(3)
    torch.manual_seed(1)
    torch_xla.manual_seed(42)
    a = torch.rand(5, device=dev).cpu()
    torch_xla.manual_seed(42)
    b = torch.rand(5, device=dev).cpu()
    torch.testing.assert_close(a, b)
    torch_xla.manual_seed(43)
    assert not torch.equal(a, torch.rand(5, device=dev).cpu())
    torch.testing.assert_close(torch.rand(3), cpu_first)  # the CPU RNG did not move


def test_launch_runs_the_function_with_ordinal_zero(monkeypatch):
    monkeypatch.delenv("LOCAL_RANK", raising=False)
    monkeypatch.delenv("TORCHELASTIC_RUN_ID", raising=False)
    seen = []
    torch_xla.launch(lambda index, tag: seen.append((index, tag)), args=("x",))
    assert seen == [(0, "x")]
    monkeypatch.setenv("LOCAL_RANK", "3")
    monkeypatch.setenv("TORCHELASTIC_RUN_ID", "job")
    torch_xla.launch(lambda index: seen.append(index))
    assert seen[-1] == 3


def test_eager_mode_runs_each_op_at_once_and_the_context_restores():
    dev = torch_xla.device()
    assert not is_eager_mode()
    with eager_mode_context(True):
        assert is_eager_mode()
        before = (met.metric_data("EagerOpExecuteTime") or (0,))[0]
        y = torch.ones(3, device=dev) * 2
        assert met.metric_data("EagerOpExecuteTime")[0] > before  # ran without a sync
    assert not is_eager_mode()
    eager_mode(True)
    try:
        assert is_eager_mode()
    finally:
        eager_mode(False)
    torch.testing.assert_close(y.cpu(), torch.full((3,), 2.0))


def test_compile_inside_eager_mode_is_still_one_graph():
    dev = torch_xla.device()
    with eager_mode_context(True):
        compiled = torch_xla.compile(lambda x: (x + 1) * 2 - 3)
        x = torch.ones(4, device=dev)
        before = _executions()
        out = compiled(x)
        assert _executions() == before + 1
    torch.testing.assert_close(out.cpu(), torch.full((4,), 1.0))
