"""Sharding constraints inside traced code: ``lx.sharding_constraint`` (a torch op) and
``lx.mark_sharding`` of activations under ``torch.compile(backend="lazax")`` and
AOTAutograd, over 8 virtual CPU devices. Values equal the CPU; the constraint reaches
the program (the result's layout, its gradient's); dynamo makes one graph."""

import pytest
import torch
import torch.nn.functional as F
from functorch.compile import aot_function, make_boxed_func

import lazax.dynamo  # noqa: F401
import lazax.modes as lx

DEV = lx.device()

pytestmark = pytest.mark.skipif(
    lx.device_count() < 8,
    reason="needs 8 devices: XLA_FLAGS=--xla_force_host_platform_device_count=8 "
    "before jax starts (the root conftest.py sets it for the test session)",
)


@pytest.fixture(scope="module")
def mesh():
    return lx.Mesh(range(8), (2, 4), ("data", "model"))


def _synced_sharding(t):
    lx.sync()
    return lx.get_sharding(t)


def test_constraint_is_functional_and_lays_out_the_result(mesh):
    x, w = torch.randn(16, 8), torch.randn(8, 12)
    xl, wl = x.to(DEV), w.to(DEV)
    y = lx.sharding_constraint(xl @ wl, mesh, ("data", 1))  # an axis by index
    assert lx.get_sharding(y) == lx.Sharding(mesh, ("data", "model"))  # the pending node
    torch.testing.assert_close(y.cpu(), x @ w)
    assert _synced_sharding(y) == lx.Sharding(mesh, ("data", "model"))
    # Its input is not constrained: replicated over the mesh, as any tensor that meets
    # sharded ones in a graph is.
    assert lx.get_sharding(xl) == lx.Sharding(mesh, (None, None))
    torch.testing.assert_close(xl.cpu(), x)
    assert lx.shard_shapes(y)[0] == (8, 3)


def test_constraint_on_device_data_and_in_eager_mode(mesh):
    x = torch.randn(8, 4)
    xl = x.to(DEV)
    y = lx.sharding_constraint(xl, mesh, (None, "model"))
    torch.testing.assert_close(y.cpu(), x)
    assert lx.get_sharding(y) == lx.Sharding(mesh, (None, "model"))
    with lx.eager_mode_context(True):
        z = lx.sharding_constraint(xl * 2, mesh, ("data", None))
        assert lx.holds_device_data(z)  # ran at once
    assert lx.get_sharding(z) == lx.Sharding(mesh, ("data", None))
    torch.testing.assert_close(z.cpu(), x * 2)


def test_the_gradient_is_constrained_alike(mesh):
    x = torch.randn(16, 8, requires_grad=True)
    xl = x.detach().to(DEV).requires_grad_()
    (lx.sharding_constraint(xl * 3, mesh, ("data", None)) ** 2).sum().backward()
    (x * 3).pow(2).sum().backward()
    torch.testing.assert_close(xl.grad.cpu(), x.grad)
    assert _synced_sharding(xl.grad) == lx.Sharding(mesh, ("data", None))


def test_bad_specs_and_cpu_tensors_raise_at_the_call(mesh):
    xl = torch.randn(16, 8).to(DEV)
    with pytest.raises(ValueError, match="names mesh axis 'nope'"):
        lx.sharding_constraint(xl, mesh, ("nope", None))
    with pytest.raises(ValueError, match="has 1 entries, but the tensor has 2"):
        lx.sharding_constraint(xl, mesh, ("data",))
    with pytest.raises(TypeError, match="takes a lazax tensor, but got a cpu tensor"):
        lx.sharding_constraint(torch.randn(16, 8), mesh, ("data", None))


class _Block(torch.nn.Module):
    """An MLP whose forward constrains its hidden activation, as SPMD models do."""

    def __init__(self, mesh=None):
        super().__init__()
        self.up, self.down = torch.nn.Linear(8, 32), torch.nn.Linear(32, 8)
        self.mesh = mesh

    def forward(self, x):
        h = F.gelu(self.up(x))
        if self.mesh is not None:
            lx.mark_sharding(h, self.mesh, ("data", "model"))
        return self.down(h)


def test_mark_sharding_of_activations_under_dynamo_is_one_graph(mesh):
    torch._dynamo.reset()
    torch.manual_seed(0)
    cpu = _Block()
    model = _Block(mesh)
    model.load_state_dict(cpu.state_dict())
    model.to(DEV)
    x = torch.randn(16, 8)
    xl = x.to(DEV)
    explained = torch._dynamo.explain(model)(xl)
    assert (explained.graph_count, explained.graph_break_count) == (1, 0)

    compiled = torch.compile(model, backend="lazax")
    loss = compiled(xl).pow(2).mean()
    loss.backward()
    ref = cpu(x).pow(2).mean()
    ref.backward()
    torch.testing.assert_close(loss.cpu(), ref)
    for p, q in zip(model.parameters(), cpu.parameters()):
        torch.testing.assert_close(p.grad.cpu(), q.grad, rtol=1e-4, atol=1e-5)


def test_the_marked_activation_keeps_its_layout_under_dynamo(mesh):
    torch._dynamo.reset()

    def f(x, w):
        h = torch.sin(x @ w)
        lx.mark_sharding(h, mesh, ("data", None))
        return h

    x, w = torch.randn(16, 8), torch.randn(8, 8)
    out = torch.compile(f, backend="lazax")(x.to(DEV), w.to(DEV))
    torch.testing.assert_close(out.cpu(), torch.sin(x @ w))
    assert _synced_sharding(out) == lx.Sharding(mesh, ("data", None))


def test_aot_autograd_graphs_hold_the_constraint_forward_and_backward(mesh):
    graphs = []

    def keep(gm, _):
        graphs.append(gm)
        return make_boxed_func(gm)

    def f(x):
        return lx.sharding_constraint(torch.sin(x), mesh, (("data", "model"),)) + 1

    x = torch.randn(8)
    xl = x.detach().to(DEV).requires_grad_()
    y = aot_function(f, keep)(xl)
    y.sum().backward()
    torch.testing.assert_close(y.detach().cpu(), torch.sin(x) + 1)
    torch.testing.assert_close(xl.grad.cpu(), torch.cos(x))
    target = torch.ops.lazax.sharding_constraint.default
    for gm in graphs:  # forward, then backward
        assert any(n.target is target for n in gm.graph.nodes), gm.code
    assert _synced_sharding(y) == lx.Sharding(mesh, (("data", "model"),))


def test_marking_an_input_or_a_parameter_under_dynamo_lays_it_out_as_outside(mesh):
    torch._dynamo.reset()

    class Marks(torch.nn.Module):
        def __init__(self, marks: bool):
            super().__init__()
            self.fc = torch.nn.Linear(8, 8)
            self.marks = marks

        def forward(self, x):
            if self.marks:
                lx.mark_sharding(x, mesh, ("data", None))
                lx.mark_sharding(self.fc.weight, mesh, ("model", None))
            return self.fc(x).sum()

    torch.manual_seed(0)
    cpu = Marks(False)
    model = Marks(True)
    model.load_state_dict(cpu.state_dict())
    model.to(DEV)
    x = torch.randn(4, 8)
    xl = x.to(DEV)
    torch.compile(model, backend="lazax")(xl).backward()
    cpu(x).backward()
    torch.testing.assert_close(model.fc.weight.grad.cpu(), cpu.fc.weight.grad)
    torch.testing.assert_close(xl.cpu(), x)
    assert _synced_sharding(xl) == lx.Sharding(mesh, ("data", None))
    assert lx.get_sharding(model.fc.weight) == lx.Sharding(mesh, ("model", None))
