"""torch_xla.experimental.scan and scan_layers against the CPU: the values and gradients
of the Python loop they replace."""

import copy

import pytest
import torch
import torch_xla
import torch_xla.debug.metrics as met
from functorch.compile import min_cut_rematerialization_partition
from torch_xla.experimental.scan import scan
from torch_xla.experimental.scan_layers import scan_layers

# xla:0, or lazax:0 where lazax was imported before torch_xla (as in the full suite)
DEV = torch_xla.device()


def _executions() -> int:
    return (met.metric_data("ExecuteTime") or (0,))[0]


def test_scan_returns_the_last_carry_and_the_stacked_outputs_with_gradients():
    dev = torch_xla.device()
    w = torch.randn(3, 3)

    def step(carry, x):
        h = torch.tanh(carry["h"] @ w_dev + x)
        return {"h": h}, (h.sum(), h * 2)

    def reference(h, xs):
        outs = []
        for x in xs:
            h = torch.tanh(h @ w + x)
            outs.append((h.sum(), h * 2))
        return h, torch.stack([o[0] for o in outs]), torch.stack([o[1] for o in outs])

    h0, xs = torch.randn(3), torch.randn(5, 3)
    w_dev = w.to(dev).requires_grad_()
    h_dev, xs_dev = h0.to(dev).requires_grad_(), xs.to(dev).requires_grad_()
    torch_xla.sync()
    before = _executions()
    carry, (sums, doubled) = scan(step, {"h": h_dev}, xs_dev)
    (carry["h"].sum() + sums.sum() + doubled.sum()).backward()
    torch_xla.sync()
    assert _executions() - before == 1  # forward and backward loops: one program

    w_cpu = w.clone().requires_grad_()
    w, h_cpu, xs_cpu = w_cpu, h0.clone().requires_grad_(), xs.clone().requires_grad_()
    last, ref_sums, ref_doubled = reference(h_cpu, xs_cpu)
    (last.sum() + ref_sums.sum() + ref_doubled.sum()).backward()
    torch.testing.assert_close(carry["h"].cpu(), last)
    torch.testing.assert_close(sums.cpu(), ref_sums)
    torch.testing.assert_close(doubled.cpu(), ref_doubled)
    for mine, ref in ((h_dev, h_cpu), (xs_dev, xs_cpu), (w_dev, w_cpu)):
        torch.testing.assert_close(mine.grad.cpu(), ref.grad)


def test_scan_with_no_outputs_gives_none():
    xs = torch.arange(6.0).reshape(3, 2)
    carry, ys = scan(lambda c, x: (c + x, None), torch.zeros(2).to(DEV), xs.to(DEV))
    assert ys is None
    torch.testing.assert_close(carry.cpu(), xs.sum(0))


def test_scan_refuses_leaves_of_different_lengths():
    with pytest.raises(ValueError, match="same leading dimension"):
        scan(lambda c, x: (c, None), torch.zeros(2), (torch.zeros(3, 2), torch.zeros(4, 2)))


def _blocks(n: int) -> torch.nn.ModuleList:
    torch.manual_seed(0)
    return torch.nn.ModuleList(
        torch.nn.Sequential(torch.nn.Linear(8, 8), torch.nn.LayerNorm(8), torch.nn.GELU())
        for _ in range(n)
    )


@pytest.mark.parametrize("partition", ["default", "min_cut"])
def test_scan_layers_equals_the_sequential_model(partition):
    cpu = _blocks(4)
    dev_layers = copy.deepcopy(cpu).to(DEV)
    x = torch.randn(5, 8)
    kwargs = {"partition_fn": min_cut_rematerialization_partition} if partition == "min_cut" else {}
    out = scan_layers(dev_layers, x.to(DEV), **kwargs)
    out.square().sum().backward()
    ref = torch.nn.Sequential(*cpu)(x)
    ref.square().sum().backward()
    torch.testing.assert_close(out.cpu(), ref)
    for mine, theirs in zip(dev_layers.parameters(), cpu.parameters()):
        torch.testing.assert_close(mine.grad.cpu(), theirs.grad, rtol=1e-4, atol=1e-5)


def test_scan_layers_over_a_tuple_runs_the_layers_in_turn():
    class Pair(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.lin = torch.nn.Linear(4, 4)

        def forward(self, h, skip):
            return self.lin(h) + skip, skip

    torch.manual_seed(0)
    cpu = [Pair() for _ in range(3)]
    dev_layers = [copy.deepcopy(layer).to(DEV) for layer in cpu]
    h, skip = torch.randn(2, 4), torch.randn(2, 4)
    with pytest.warns(UserWarning, match="one after the"):
        out, _ = scan_layers(dev_layers, (h.to(DEV), skip.to(DEV)))
    ref = (h, skip)
    for layer in cpu:
        ref = layer(*ref)
    torch.testing.assert_close(out.cpu(), ref[0])


def test_scan_layers_refuses_layers_that_differ():
    layers = [torch.nn.Linear(4, 4), torch.nn.Linear(4, 4), torch.nn.Linear(4, 3)]
    with pytest.raises(Exception, match="layer"):
        scan_layers([layer.to(DEV) for layer in layers], torch.randn(2, 4).to(DEV))
