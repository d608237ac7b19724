"""torch_xla's dynamo surface beyond the ``openxla`` name: ``dynamo_backend2``, and what
the bridge does with tensors that are not on the device (a warning per tensor; a graph
all on the CPU runs there; tensors on two devices raise)."""

import warnings

import pytest
import torch
import torch_xla
import torch_xla.debug.metrics as met
import torch_xla.distributed.spmd as xs
from torch_xla import _XLAC
from torch_xla._dynamo import dynamo_backend2

import lazax.modes as lx


def _f(x, y):
    return torch.cos(x) * y + 1


def test_dynamo_backend2_compiles_with_lazax_and_equals_the_cpu():
    torch._dynamo.reset()
    met.clear_all()
    x, y = torch.randn(4, 3), torch.randn(4, 3)
    compiled = torch.compile(_f, backend=dynamo_backend2.dynamo_backend, fullgraph=True)
    dev = torch_xla.device()
    got = compiled(x.to(dev), y.to(dev))
    assert got.device.type == dev.type
    torch.testing.assert_close(got.cpu(), _f(x, y))
    assert met.counter_value("DynamoExtractCompiledGraph") == 1


def test_init_computation_client_leaves_the_runtime_started():
    _XLAC._init_computation_client()
    assert _XLAC._xla_runtime_is_initialized()


def test_openxla_graph_on_the_cpu_warns_per_tensor_and_runs_there():
    torch._dynamo.reset()
    model = torch.nn.Linear(3, 2)
    compiled = torch.compile(model, backend="openxla")
    x = torch.randn(5, 3)
    met.clear_all()
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        got = compiled(x)
    found = [str(w.message) for w in caught if "Found tensor with shape" in str(w.message)]
    # weight, bias and the input, each named with its shape and device
    assert sorted(found) == sorted(
        f"Found tensor with shape {s} on cpu. Please move all tensors to xla device to "
        "execute on XLA device."
        for s in (torch.Size([2, 3]), torch.Size([2]), torch.Size([5, 3]))
    )
    assert got.device.type == "cpu"
    torch.testing.assert_close(got, model(x))
    assert met.counter_value("DynamoExtractCompiledGraph") is None  # lazax not involved


def test_openxla_graph_on_two_devices_raises_before_running():
    # A convolution: dynamo's own device check (a Linear's) does not see it first.
    torch._dynamo.reset()
    model = torch.nn.Conv2d(3, 4, 3).to(torch_xla.device())
    compiled = torch.compile(model, backend="openxla")
    met.clear_all()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        # (the device's name: xla:0, or lazax:0 where lazax was imported first)
        device = torch_xla.device()
        with pytest.raises(RuntimeError, match=f"found two different devices: {device} and cpu"):
            compiled(torch.randn(1, 3, 8, 8))
    assert met.metric_data("ExecuteTime") is None


def test_pending_inputs_synced_before_a_dynamo_graph_are_counted_as_torch_xla_does():
    dev = torch_xla.device()
    fn = torch.compile(lambda a, b: torch.tanh(a) + b, backend="openxla")
    x, y = torch.randn(3, 4, device=dev), torch.randn(3, 4, device=dev)
    torch_xla.sync()
    met.clear_all()
    fn(x, y)  # inputs on the device already: nothing to sync first
    assert met.counter_value("DynamoSyncInputExecuteTime") is None
    pending = x * 2  # pending IR: the bridge runs it before the graph
    out = fn(pending, y)
    assert met.counter_value("DynamoSyncInputExecuteTime") == 1
    assert "DynamoSyncInputExecuteTime" in met.counter_names()
    assert "Counter: DynamoSyncInputExecuteTime\n  Value: 1" in met.short_metrics_report()
    assert "XLAData: None" not in _XLAC._get_xla_tensor_debug_info(pending)
    torch.testing.assert_close(out.cpu(), torch.tanh(x.cpu() * 2) + y.cpu())


def test_mark_sharding_of_an_activation_inside_openxla_stays_in_one_graph():
    n = lx.global_device_count()
    if n < 2:
        pytest.skip("needs 2 devices")
    mesh = xs.Mesh(range(n), (n,), ("x",))

    def f(x, w):
        h = torch.relu(x @ w)
        xs.mark_sharding(h, mesh, ("x", None))
        return h * 2

    torch._dynamo.reset()
    x, w = torch.randn(2 * n, 4), torch.randn(4, 4)
    dev = torch_xla.device()
    explained = torch._dynamo.explain(f)(x.to(dev), w.to(dev))
    assert (explained.graph_count, explained.graph_break_count) == (1, 0)
    got = torch.compile(f, backend="openxla")(x.to(dev), w.to(dev))
    torch.testing.assert_close(got.cpu(), torch.relu(x @ w) * 2)
    torch_xla.sync()
    assert _XLAC._get_xla_sharding_spec(got).startswith(f"{{devices=[{n},1]")
