"""compile(): one graph per call over the same machine; full_graph and graph-count limits."""

import copy

import pytest
import torch

import lazax.executor as lx_exec
import lazax.modes as lx
from benchmarks.models import Decoder, lm_loss, make_tokens

from .test_training import SMALL

DEV = lx.device()


def samples(name):
    data = lx.metrics.metric_data(name)
    return data[0] if data else 0


def state():
    ex = lx_exec.EXECUTOR
    return ex.eager, ex.allow_execution, ex.graph_name, ex.graph_count_session


def test_step_is_one_graph_under_eager_mode_and_recompiles_nothing():
    w = torch.randn(8, 8).to(DEV)

    @lx.compile
    def step(x):
        return torch.relu(x @ w).sum() * 0.5

    with lx.eager_mode_context(True):
        x = torch.randn(4, 8).to(DEV)
        runs, eager_runs = samples("ExecuteTime"), samples("EagerOpExecuteTime")
        first = step(x)
        assert samples("ExecuteTime") == runs + 1
        assert samples("EagerOpExecuteTime") == eager_runs
        compiles = lx.metrics.counter_value("UncachedCompile")
        second = step(torch.randn(4, 8).to(DEV))
        assert lx.metrics.counter_value("UncachedCompile") == compiles
        assert samples("ExecuteTime") == runs + 2
        assert lx.is_eager_mode()
    torch.testing.assert_close(first.cpu(), (torch.relu(x.cpu() @ w.cpu()).sum() * 0.5))
    assert second.device == DEV


def test_graph_names_seen_by_the_executor():
    names = []
    hook = lambda name, graph: names.append(name)  # noqa: E731
    lx_exec.EXECUTOR.graph_hooks.append(hook)
    try:
        loaded = torch.randn(3).to(DEV) * 2.0  # pending "data loading"

        def step(t):
            return t + 1.0

        out = lx.compile(step)(loaded)
    finally:
        lx_exec.EXECUTOR.graph_hooks.remove(hook)
    assert names == ["step_clear_pending", "step"]
    assert out.device == DEV


def test_full_graph_refuses_execution_and_names_the_line(capsys):
    before = state()

    @lx.compile(full_graph=True)
    def step(t):
        t = t * 2.0
        if t[0][0] > 0:  # a data-dependent branch: needs a value
            t = t + 1.0
        return t

    runs = samples("ExecuteTime")
    x = torch.randn(2, 2).to(DEV)
    with pytest.raises(RuntimeError, match="inside the compiled region 'step'") as err:
        step(x)
    report = capsys.readouterr().err
    assert "test_compile.py:" in str(err.value) and "test_compile.py:" in report
    assert "graph name: step" in report and "graph hash:" in report
    assert samples("ExecuteTime") == runs  # nothing of the partial graph ran
    assert state() == before


def test_full_graph_refuses_a_cpu_fallback():
    @lx.compile(full_graph=True)
    def step(t):
        return torch.linalg.matrix_exp(t)  # no lowering: a CPU fallback would execute

    with pytest.raises(RuntimeError, match="CPU fallback of aten::linalg_matrix_exp"):
        step(torch.eye(3).to(DEV))
    assert lx_exec.EXECUTOR.allow_execution


def test_max_different_graphs_on_a_function():
    def double(t):
        return t * 2.0

    limited = lx.compile(double, max_different_graphs=1)
    limited(torch.randn(5).to(DEV))
    limited(torch.randn(5).to(DEV))  # the same graph again is fine
    with pytest.raises(RuntimeError, match=r"max_different_graphs=1") as err:
        limited(torch.randn(10).to(DEV))
    assert "float32[10]" in str(err.value) and "float32[5]" in str(err.value)
    roomy = lx.compile(double, max_different_graphs=2)
    roomy(torch.randn(5).to(DEV))
    roomy(torch.randn(10).to(DEV))


def test_max_different_graphs_names_where_the_new_graph_leaves_the_seen_ones():
    # The seen graphs form one trie of operations: the error names the first operation
    # where the new graph leaves those sharing its longest prefix, and every operation
    # they hold there.
    def branches(x, step):
        r = x + x
        if step == 0:
            return r * 2
        if step == 1:
            return r + x
        return r / 3 if step == 2 else r

    x = torch.rand(10).to(DEV)
    limited = lx.compile(branches, max_different_graphs=2)
    limited(x, 0)
    limited(x, 1)
    with pytest.raises(lx.GraphLimitExceeded, match="either of") as err:
        limited(x, 2)
    assert isinstance(err.value, RuntimeError)
    assert (err.value.index, err.value.got.op) == (1, "aten::div.Tensor")
    assert [op.op for op in err.value.expected] == ["aten::mul.Tensor", "aten::add.Tensor"]
    assert [str(s) for s in err.value.got.specs] == ["float32[10]"]
    with pytest.raises(lx.GraphLimitExceeded, match=r"now \(the end of the graph\)") as err:
        limited(x, 3)  # ends where the seen graphs go on
    assert err.value.got is None and len(err.value.operations) == 1
    torch.testing.assert_close(limited(x, 1).cpu(), 3 * x.cpu())  # a seen graph still runs


def test_max_different_graphs_says_when_only_the_inputs_differ():
    add = lx.compile(lambda a, b: a + b, max_different_graphs=1)
    x, y = torch.rand(4).to(DEV), torch.rand(4).to(DEV)
    add(x, x)
    with pytest.raises(lx.GraphLimitExceeded, match="its inputs differ") as err:
        add(x, y)  # the same operations over two inputs instead of one
    assert err.value.got is None and err.value.expected == (None,)


def test_max_different_graphs_trips_across_entries_of_a_named_block():
    with pytest.raises(RuntimeError, match="max_different_graphs=1"):
        for n in (3, 4):
            with lx.compile(name="looped_block", max_different_graphs=1):
                y = torch.ones(n).to(DEV) * 3.0
    assert y.device == DEV
    assert state()[3] is None and lx_exec.EXECUTOR.graph_name is None


def test_decoder_trains_with_compiled_full_graph_step_under_eager():
    torch.manual_seed(0)
    model = Decoder(SMALL)
    batches = [make_tokens(SMALL, seed) for seed in range(4)]

    def run(device, compiled):
        m = copy.deepcopy(model).to(device)
        opt = torch.optim.AdamW(m.parameters(), lr=3e-3)

        def step(tokens):
            opt.zero_grad()
            loss = lm_loss(m(tokens), tokens)
            loss.backward()
            opt.step()
            return loss

        if compiled:
            step = lx.compile(step, full_graph=True)
        return [step(t.to(device)).item() for t in batches]

    cpu = run("cpu", compiled=False)
    with lx.eager_mode_context(True):
        got = run(DEV, compiled=True)
    torch.testing.assert_close(got, cpu, rtol=1e-4, atol=1e-5)
