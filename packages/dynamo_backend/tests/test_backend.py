"""The backend's registration and the bridge's calling conventions."""

import importlib.metadata
import subprocess
import sys
import textwrap

import pytest
import torch

import lazax.dynamo
import lazax.executor as lx_exec
from lazax.dynamo import GraphBridge, bridge, lazax_backend

DEV = lx_exec.device()


def test_declared_as_a_torch_dynamo_backend_entry_point():
    points = importlib.metadata.entry_points(group="torch_dynamo_backends")
    assert points["lazax"].value == "lazax.dynamo:lazax_backend"
    assert "lazax" in torch._dynamo.list_backends()
    assert torch._dynamo.lookup_backend("lazax") is lazax_backend


def test_backend_name_works_without_importing_lazax_dynamo():
    script = textwrap.dedent(
        """
        import sys
        import torch
        import lazax.executor as lx
        fn = torch.compile(lambda a: torch.cos(a) * 2.0, backend="lazax")
        x = torch.arange(4.0)
        torch.testing.assert_close(fn(x.to(lx.device())).cpu(), torch.cos(x) * 2.0)
        assert "lazax.dynamo" in sys.modules
        print("ok")
        """
    )
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True)
    assert done.returncode == 0, done.stderr[-2000:]
    assert done.stdout.strip().endswith("ok")


def test_bridge_takes_boxed_and_unboxed_calls():
    gm = torch.fx.symbolic_trace(lambda a, b: (torch.ops.aten.add.Tensor(a, b),))
    compiled = bridge(gm, (torch.ones(3), torch.ones(3)))
    assert isinstance(compiled, GraphBridge) and compiled._boxed_call
    a, b = torch.arange(3.0).to(DEV), torch.ones(3).to(DEV)
    (boxed,) = compiled([a, b])
    (unboxed,) = compiled(a, b)
    torch.testing.assert_close(boxed.cpu(), torch.arange(3.0) + 1)
    torch.testing.assert_close(unboxed.cpu(), torch.arange(3.0) + 1)
    assert len(compiled.replays) == 1


def test_a_graph_that_reads_the_host_is_split_around_the_read_and_says_why():
    def fn(a):
        scale = torch.ops.aten._local_scalar_dense.default(torch.ops.aten.sum.default(a))
        return (torch.ops.aten.mul.Tensor(a, scale),)

    compiled = bridge(torch.fx.symbolic_trace(fn), (torch.ones(2),))
    for values in ([1.0, 2.0], [3.0, -1.0]):
        x = torch.tensor(values)
        (out,) = compiled([x.to(DEV)])
        torch.testing.assert_close(out.cpu(), x * x.sum())  # the read is of this call's value
    assert "host" in compiled.broken
    (split,) = compiled.replays.values()  # the sum and the product replay, the read runs
    assert split.around.startswith("_local_scalar_dense")


def test_a_graph_with_a_cpu_input_with_dimensions_is_interpreted_and_says_why():
    def fn(a, i):  # torch indexes a device tensor with CPU indices
        return (torch.ops.aten.index.Tensor(a, [i]),)

    compiled = bridge(torch.fx.symbolic_trace(fn), (torch.ones(2), torch.ones(2)))
    x, i = torch.tensor([1.0, 2.0, 3.0]), torch.tensor([2, 0])
    (out,) = compiled([x.to(DEV), i])
    torch.testing.assert_close(out.cpu(), x[i])
    assert "dimensions" in compiled.broken
    assert list(compiled.replays.values()) == [compiled.broken]  # a reason, no replay


def test_caller_tensors_are_untouched_when_tracing_fails():
    def fn(a):
        torch.ops.aten.add_.Tensor(a, 1.0)
        return (torch.ops.aten.mm.default(a, a),)  # 1-d: fails while tracing on lazax

    compiled = bridge(torch.fx.symbolic_trace(fn), (torch.ones(2),))
    x = torch.tensor([1.0, 2.0]).to(DEV)
    with pytest.raises(RuntimeError, match="must be a matrix"):
        compiled([x])
    torch.testing.assert_close(x.cpu(), torch.tensor([1.0, 2.0]))
    assert lazax.dynamo.__version__


def test_inputs_sharing_a_storage_get_their_own_replay():
    def fn(a, b):
        torch.ops.aten.add_.Tensor(a, 1.0)
        return (torch.ops.aten.mul.Tensor(b, 2.0),)

    compiled = bridge(torch.fx.symbolic_trace(fn), (torch.ones(2, 2), torch.ones(2, 2)))
    base = torch.zeros(2, 2).to(DEV)
    (apart,) = compiled([base, torch.zeros(2, 2).to(DEV)])
    torch.testing.assert_close(apart.cpu(), torch.zeros(2, 2))
    (shared,) = compiled([base, base.view(2, 2)])  # b sees the write through a
    torch.testing.assert_close(shared.cpu(), torch.full((2, 2), 4.0))
    torch.testing.assert_close(base.cpu(), torch.full((2, 2), 2.0))
    assert len(compiled.replays) == 2


def test_an_output_viewing_an_input_shares_its_storage():
    gm = torch.fx.symbolic_trace(lambda a: (torch.ops.aten.t.default(a), a.sum()))
    compiled = bridge(gm, (torch.ones(2, 3),))
    x = torch.arange(6.0).reshape(2, 3).to(DEV)
    for _ in range(2):
        view, total = compiled([x])
    assert lx_exec.storage_of(view) is lx_exec.storage_of(x) and view.stride() == (1, 3)
    view.mul_(10.0)
    torch.testing.assert_close(x.cpu(), torch.arange(6.0).reshape(2, 3) * 10.0)
    torch.testing.assert_close(total.cpu(), torch.tensor(15.0))


def test_a_strided_view_input_written_in_place_writes_its_base():
    def fn(a, b):
        torch.ops.aten.mul_.Tensor(a, 10.0)
        return (torch.ops.aten.add.Tensor(b, 1.0),)

    compiled = bridge(torch.fx.symbolic_trace(fn), (torch.ones(3), torch.ones(2)))
    base_cpu = torch.arange(12.0).reshape(3, 4)
    base = base_cpu.to(DEV)
    for _ in range(2):
        (out,) = compiled([base[:, 1], torch.tensor([1.0, 2.0]).to(DEV)])
        base_cpu[:, 1] *= 10.0
        torch.testing.assert_close(base.cpu(), base_cpu)
        torch.testing.assert_close(out.cpu(), torch.tensor([2.0, 3.0]))
    replay = next(iter(compiled.replays.values()))
    assert replay.mutated == [0]


def test_a_changing_int_argument_keeps_a_bounded_number_of_replays():
    from lazax.dynamo._bridge import MAX_SIGNATURES

    gm = torch.fx.symbolic_trace(lambda a, n: (torch.ops.aten.mul.Tensor(a, n),))
    compiled = bridge(gm, (torch.ones(2), 3))
    x = torch.ones(2).to(DEV)
    for n in range(MAX_SIGNATURES + 5):
        (out,) = compiled([x, n])
    torch.testing.assert_close(out.cpu(), torch.full((2,), float(MAX_SIGNATURES + 4)))
    assert len(compiled.replays) == MAX_SIGNATURES


@pytest.mark.parametrize("hook", ["register_hook", "register_post_accumulate_grad_hook"])
def test_a_traced_backward_past_gradient_hooks_is_refused_not_run_wrong(hook):
    # torch 2.13's traced backward (trace_autograd_ops, which lazax.dynamo turns on)
    # does not run gradient hooks: the step would train on unhooked gradients.
    torch._dynamo.reset()
    model = torch.nn.Linear(4, 4).to(DEV)
    for p in model.parameters():
        getattr(p, hook)(lambda g: None)
    opt = torch.optim.SGD(model.parameters(), lr=0.1)

    def step(x):
        opt.zero_grad()
        model(x).sum().backward()
        opt.step()

    with pytest.raises(Exception, match="gradient hooks"):
        torch.compile(step, backend="lazax")(torch.randn(2, 4).to(DEV))
    # Without the traced backward the graph breaks there and the hooks run.
    torch._dynamo.reset()
    with torch._dynamo.config.patch(trace_autograd_ops=False):
        torch.compile(step, backend="lazax")(torch.randn(2, 4).to(DEV))
    torch._dynamo.reset()


def test_a_replayed_graph_traces_no_op():
    x = torch.ones(4).to(DEV)
    compiled = torch.compile(lambda t: torch.sin(t) * 3.0, backend="lazax")
    lx_exec.metrics.clear_all()
    compiled(x)  # the graph is traced once, then compiled
    assert lx_exec.metrics.traced_op_counts()["aten::sin"] == 1
    lx_exec.metrics.clear_all()
    torch.testing.assert_close(compiled(x).cpu(), torch.sin(torch.ones(4)) * 3.0)
    assert lx_exec.metrics.traced_op_counts() == {}


def test_each_replay_times_its_input_and_output_phases():
    x = torch.ones(4).to(DEV)
    compiled = torch.compile(lambda t: torch.cos(t) + 1.0, backend="lazax")
    compiled(x)
    lx_exec.metrics.clear_all()
    for _ in range(3):
        compiled(x)
    assert lx_exec.metrics.metric_data("RunCachedGraphInputData")[0] == 3
    assert lx_exec.metrics.metric_data("RunCachedGraphOutputData")[0] == 3
    assert lx_exec.metrics.metric_data("ExecuteTime")[0] == 3
