"""lazax and JAX: a JAX function as one node of a torch model's graph (trained in every
mode against the same block in torch on the CPU), arrays both ways without a copy,
DLPack, and JAX lowerings for torch ops that lazax has no rule for."""

from __future__ import annotations

import copy

import jax
import jax.numpy as jnp
import numpy as np
import pytest
import torch
import torch.nn.functional as F

import lazax.executor as lx_exec
import lazax.modes as lx
from lazax.modes.testing import train_in_mode

DEV = lx.device()


def counter(name: str) -> int:
    return lx.metrics.counter_value(name) or 0


def fallbacks() -> dict:
    """The CPU fallback's counters (one per op that ran on the CPU)."""
    return {k: counter(k) for k in lx.metrics.counter_names() if "::" in k}


def jax_ffn(x, w, b):
    return jax.nn.gelu(x @ w.T + b, approximate=True)


class Block(torch.nn.Module):
    """LayerNorm, then a feed-forward layer in torch or through ``call_jax``."""

    def __init__(self, width: int = 16, through_jax: bool = False):
        super().__init__()
        self.norm = torch.nn.LayerNorm(width)
        self.up = torch.nn.Linear(width, 2 * width)
        self.down = torch.nn.Linear(2 * width, width)
        self.through_jax = through_jax

    def forward(self, x):
        h = self.norm(x)
        if self.through_jax:
            h = lx.call_jax(jax_ffn, h, self.up.weight, self.up.bias)
        else:
            h = F.gelu(self.up(h), approximate="tanh")
        return x + self.down(h)


def _step(model, opt, x, y):
    opt.zero_grad(set_to_none=True)
    loss = F.mse_loss(model(x), y)
    loss.backward()
    opt.step()
    return loss


MODES = ["lazy", "eager", "compile", "dynamo"]


@pytest.mark.parametrize("mode", MODES)
def test_a_block_through_call_jax_trains_as_the_torch_block_on_the_cpu(mode):
    torch.manual_seed(0)
    ref = torch.nn.Sequential(Block(), Block())
    model = copy.deepcopy(ref)
    for block in model:
        block.through_jax = True
    model.to(DEV)
    xs = [torch.randn(8, 16) for _ in range(4)]
    ys = [torch.randn(8, 16) for _ in range(4)]
    ref_opt = torch.optim.AdamW(ref.parameters(), lr=1e-2)
    expected = [_step(ref, ref_opt, x, y).item() for x, y in zip(xs, ys)]
    before = fallbacks()
    opt = torch.optim.AdamW(model.parameters(), lr=1e-2)
    losses = train_in_mode(model, zip(xs, ys), mode, opt, DEV)
    torch.testing.assert_close(losses, expected, rtol=1e-4, atol=1e-6)
    for p_ref, p in zip(ref.parameters(), model.parameters()):
        torch.testing.assert_close(p.detach().cpu(), p_ref.detach(), rtol=1e-4, atol=1e-5)
    assert fallbacks() == before  # nothing ran on the CPU


def test_lazy_training_through_call_jax_compiles_one_graph_then_none():
    torch.manual_seed(1)
    model = torch.nn.Sequential(Block(12, True), Block(12, True)).to(DEV)
    opt = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)
    lx.sync(wait=True)
    lx_exec.EXECUTOR.reset_cache()  # no step of an earlier test's shapes is kept
    compiles = []
    for _ in range(5):
        before = counter("UncachedCompile")
        _step(model, opt, torch.randn(4, 12).to(DEV), torch.randn(4, 12).to(DEV))
        lx.sync()
        compiles.append(counter("UncachedCompile") - before)
    # The first step is the steady step (its zero momentum buffers are made on the device,
    # test_optimizer_state.py): one graph, then nothing.
    assert compiles == [1, 0, 0, 0, 0], compiles


def test_an_equal_function_made_anew_each_step_compiles_nothing_new():
    x = torch.randn(5, 3).to(DEV)
    (x * 2).sum().item()
    counts = []
    for _ in range(3):
        before = counter("UncachedCompile")
        out = lx.call_jax(lambda a, s: jnp.cos(a) * s, x, 3.0)  # a new lambda each time
        torch.testing.assert_close(out.cpu(), torch.cos(x.cpu()) * 3.0)
        counts.append(counter("UncachedCompile") - before)
    assert counts[1:] == [0, 0], counts
    # A static argument is part of the function: a new value is a new program.
    before = counter("UncachedCompile")
    torch.testing.assert_close(
        lx.call_jax(lambda a, s: jnp.cos(a) * s, x, 4.0).cpu(), torch.cos(x.cpu()) * 4.0
    )
    assert counter("UncachedCompile") - before == 1


def test_pytrees_in_and_out_and_integer_outputs():
    x = torch.arange(12.0).reshape(3, 4)
    i = torch.tensor([2, 0, 1])

    def fn(inputs, scale=1.0):
        a, idx = inputs["a"], inputs["idx"]
        return {"rows": a[idx] * scale, "arg": [jnp.argmax(a, axis=1), a.sum()]}

    out = lx.call_jax(fn, {"a": x.to(DEV), "idx": i.to(DEV)}, scale=2.0)
    assert set(out) == {"rows", "arg"} and isinstance(out["arg"], list)
    torch.testing.assert_close(out["rows"].cpu(), x[i] * 2.0)
    assert out["arg"][0].dtype == torch.int64 and out["arg"][0].device == DEV
    assert out["arg"][0].cpu().tolist() == [3, 3, 3]
    # On CPU tensors the same call runs through jax on the host.
    cpu = lx.call_jax(fn, {"a": x, "idx": i}, scale=2.0)
    torch.testing.assert_close(cpu["rows"], x[i] * 2.0)


def test_gradients_skip_integer_inputs_and_unused_outputs():
    x = torch.randn(4, 5, requires_grad=True)
    idx = torch.tensor([3, 1])
    xl = x.detach().to(DEV).requires_grad_()

    def fn(a, i):
        return jnp.tanh(a[i]).sum(), jnp.argmax(a)

    total, _ = lx.call_jax(fn, xl, idx.to(DEV))
    total.backward()
    torch.tanh(x[idx]).sum().backward()
    torch.testing.assert_close(xl.grad.cpu(), x.grad)


def test_a_loop_called_for_gradients_runs_forward_once():
    """Where gradients are wanted the node keeps jax.vjp's residuals, so the forward
    loop is not run again in the backward: two while loops, as under jax.grad."""

    def stack(x, w):
        return jax.lax.scan(lambda c, wi: (jnp.tanh(c @ wi), None), x, w)[0]

    x, w = torch.randn(4, 8), torch.randn(3, 8, 8) / 3
    xl = x.to(DEV).requires_grad_()
    wl = w.to(DEV).requires_grad_()
    out = lx.call_jax(stack, xl, wl)
    (out * out).sum().backward()
    text = lx.program_text([out, xl.grad, wl.grad], form="stablehlo")
    assert text.count("stablehlo.while") == 2
    want = jax.grad(lambda a, b: (stack(a, b) ** 2).sum(), argnums=(0, 1))
    gx, gw = want(jnp.asarray(x.numpy()), jnp.asarray(w.numpy()))
    torch.testing.assert_close(out.detach().cpu().numpy(), np.asarray(stack(x.numpy(), w.numpy())))
    np.testing.assert_allclose(xl.grad.cpu().numpy(), np.asarray(gx), rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(wl.grad.cpu().numpy(), np.asarray(gw), rtol=1e-5, atol=1e-6)
    with torch.no_grad():  # no gradients wanted: no residuals either
        plain = lx.call_jax(stack, xl, wl)
    assert "stablehlo.while" in lx.program_text([plain], form="stablehlo")


def test_errors_say_what_to_pass():
    x = torch.ones(2, device=DEV)
    with pytest.raises(ValueError, match="no tensor among the arguments"):
        lx.call_jax(jnp.sin, 3.0)
    with pytest.raises(TypeError, match="must be hashable"):
        lx.call_jax(lambda a, s: a, x, np.ones(2))  # a numpy array is not a tensor
    with pytest.raises(TypeError, match="returned a str"):
        lx.call_jax(lambda a: "nope", x)
    with pytest.raises(TypeError, match="expects a tensor on a lazax device"):
        lx.to_jax(torch.ones(2))
    with pytest.raises(TypeError, match="expects a jax.Array"):
        lx.from_jax(np.ones(2))


# -- arrays both ways ------------------------------------------------------------------


def _address(a: jax.Array) -> int:
    return a.addressable_shards[0].data.unsafe_buffer_pointer()


def test_to_jax_and_from_jax_share_the_buffer_and_keep_values_apart_after_writes():
    t = torch.arange(6.0).reshape(2, 3).to(DEV) * 2
    a = lx.to_jax(t)
    assert isinstance(a, jax.Array) and a.shape == (2, 3) and a.dtype == jnp.float32
    np.testing.assert_array_equal(np.asarray(a), np.arange(6.0).reshape(2, 3) * 2)
    assert _address(lx.to_jax(t)) == _address(a)  # the tensor's own buffer, again
    back = lx.from_jax(a)
    assert back.device == DEV and back.dtype == torch.float32
    assert _address(lx.to_jax(back)) == _address(a)  # no copy either way
    # A write gives the tensor a new buffer; the array keeps the value it had.
    t.add_(1)
    back.mul_(10)
    lx.sync()
    np.testing.assert_array_equal(np.asarray(a), np.arange(6.0).reshape(2, 3) * 2)
    torch.testing.assert_close(t.cpu(), torch.arange(6.0).reshape(2, 3) * 2 + 1)
    torch.testing.assert_close(back.cpu(), torch.arange(6.0).reshape(2, 3) * 20)
    # jnp.asarray reads the same buffer.
    assert _address(jnp.asarray(back)) == _address(lx.to_jax(back))
    # A view hands out a new buffer of its own value.
    np.testing.assert_array_equal(np.asarray(lx.to_jax(t[:, 1])), t.cpu()[:, 1].numpy())


def test_sharding_is_kept_both_ways():
    mesh = lx.Mesh(range(8), (8,), ("data",))
    t = torch.randn(16, 4).to(DEV)
    lx.mark_sharding(t, mesh, ("data", None))
    a = lx.to_jax(t * 1)
    assert len(a.sharding.device_set) == 8
    assert {s.data.shape for s in a.addressable_shards} == {(2, 4)}
    back = lx.from_jax(a)
    assert lx.shard_shapes(back) == lx.shard_shapes(t)
    torch.testing.assert_close((back + 1).cpu(), t.cpu() + 1)
    # Inside call_jax, the SPMD program's layout flows through, and jax's own sharding
    # constraints apply.
    assert lx.shard_shapes(lx.call_jax(lambda x: x * 3, t)) == lx.shard_shapes(t)
    whole = jax.sharding.NamedSharding(
        jax.sharding.Mesh(jax.devices()[:8], ("d",)), jax.sharding.PartitionSpec()
    )
    replicated = lx.call_jax(lambda x: jax.lax.with_sharding_constraint(x * 2, whole), t)
    assert set(lx.shard_shapes(replicated).values()) == {(16, 4)}
    torch.testing.assert_close(replicated.cpu(), t.cpu() * 2)


def test_from_jax_on_another_lazax_device_and_dtypes():
    b = jax.device_put(jnp.arange(4, dtype=jnp.bfloat16), jax.devices()[1])
    t = lx.from_jax(b)
    assert t.device == lx.device(1) and t.dtype == torch.bfloat16
    assert t.cpu().tolist() == [0.0, 1.0, 2.0, 3.0]


def test_dlpack_exports_the_buffer_and_never_address_0():
    t = torch.arange(8.0).to(DEV) + 1
    shared = torch.utils.dlpack.from_dlpack(t)  # __dlpack__ / __dlpack_device__
    assert shared.device.type == "cpu" and shared.data_ptr() == _address(lx.to_jax(t))
    torch.testing.assert_close(shared, torch.arange(8.0) + 1)
    capsule = torch.utils.dlpack.to_dlpack(t)
    assert torch.utils.dlpack.from_dlpack(capsule).data_ptr() == shared.data_ptr()
    np.testing.assert_array_equal(np.asarray(jax.dlpack.from_dlpack(t)), np.arange(8.0) + 1)
    # An exported buffer is never donated: the write leaves the export as it was.
    t.mul_(2)
    lx.sync()
    torch.testing.assert_close(shared, torch.arange(8.0) + 1)
    torch.testing.assert_close(t.cpu(), (torch.arange(8.0) + 1) * 2)
    with pytest.raises(RuntimeError, match="require gradient"):
        torch.utils.dlpack.to_dlpack(torch.ones(2, device=DEV, requires_grad=True))


# -- custom ops with JAX lowerings -----------------------------------------------------


@torch.library.custom_op("lazax_test::scaled_softplus", mutates_args=())
def scaled_softplus(x: torch.Tensor, beta: float = 2.0) -> torch.Tensor:
    return F.softplus(x, beta=beta)


@scaled_softplus.register_fake
def _(x, beta=2.0):
    return torch.empty_like(x)


def _softplus_backward(ctx, grad):
    (x,) = ctx.saved_tensors
    return grad * torch.sigmoid(ctx.beta * x), None


def _softplus_setup(ctx, inputs, output):
    ctx.save_for_backward(inputs[0])
    ctx.beta = inputs[1] if len(inputs) > 1 else 2.0


scaled_softplus.register_autograd(_softplus_backward, setup_context=_softplus_setup)


def test_a_custom_op_with_a_jax_lowering_compiles_into_the_graph():
    x = torch.randn(6, 3, requires_grad=True)
    xl = x.detach().to(DEV).requires_grad_()
    # Without a lowering it runs on the CPU.
    before = counter("lazax_test::scaled_softplus")
    scaled_softplus(xl.detach()).cpu()
    assert counter("lazax_test::scaled_softplus") == before + 1

    lx.register_lowering(scaled_softplus, lambda a, beta: jax.nn.softplus(a * beta) / beta)
    (xl * 1).sum().item()
    before = counter("UncachedCompile")
    fallbacks = counter("lazax_test::scaled_softplus")
    out = scaled_softplus(xl * 3, 0.5).sum()
    out.backward()
    lx.sync()
    assert counter("lazax_test::scaled_softplus") == fallbacks  # not on the CPU
    assert counter("UncachedCompile") - before == 1  # forward and backward, one graph
    ref = scaled_softplus(x * 3, 0.5).sum()
    ref.backward()
    torch.testing.assert_close(out.cpu(), ref.detach())
    torch.testing.assert_close(xl.grad.cpu(), x.grad)


def test_register_lowering_errors():
    with pytest.raises(TypeError, match="must take its arguments"):
        lx.register_lowering(scaled_softplus, lambda a: a)

    @torch.library.custom_op("lazax_test::halves", mutates_args=())
    def halves(x: torch.Tensor) -> torch.Tensor:
        return x[: x.shape[0] // 2].clone()

    @halves.register_fake
    def _(x):
        return x.new_empty(x.shape[0] // 2, *x.shape[1:])

    lx.register_lowering(halves, lambda a: a)  # the whole tensor: wrong shape
    wrong = r"torch.float32\[4\] as output 0; the op's fake kernel says torch.float32\[2\]"
    with pytest.raises(RuntimeError, match=wrong):
        halves(torch.ones(4, device=DEV))
    with pytest.raises(TypeError, match="pass one"):
        lx.register_lowering(torch.ops.aten.add, lambda a, b: a + b)
