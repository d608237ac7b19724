"""Eager mode: every op runs at once, compiled once per op shape, on the same machine."""

import copy

import pytest
import torch
import torch.nn.functional as F

import lazax.executor as lx_exec
import lazax.modes as lx
from benchmarks.models import MLP, Decoder, lm_loss, make_batch, make_tokens

from .test_training import SMALL

DEV = lx.device()


def samples(name):
    data = lx.metrics.metric_data(name)
    return data[0] if data else 0


@pytest.fixture
def eager():
    lx.sync()  # lazy work from elsewhere must not land in these counts
    lx_exec.EXECUTOR.reset_cache()  # every op compiles anew: counts are exact
    with lx.eager_mode_context(True) as previous:
        assert previous is False
        yield
    assert not lx.is_eager_mode()


def test_compile_per_op_shape_not_per_op(eager):
    x = torch.randn(5, 5).to(DEV)
    compiles, runs = samples("EagerOpCompileTime"), samples("EagerOpExecuteTime")
    a = torch.logsumexp(x, dim=1)
    b = torch.logsumexp(x, dim=1)
    assert samples("EagerOpCompileTime") == compiles + 1
    assert samples("EagerOpExecuteTime") == runs + 2
    torch.testing.assert_close(a.cpu(), torch.logsumexp(x.cpu(), dim=1))
    torch.testing.assert_close(b.cpu(), a.cpu())


@pytest.mark.parametrize(
    "op",
    [
        lambda x: torch.topk(x, 3, dim=1),
        lambda x: torch.var_mean(x, dim=0),
        lambda x: torch.ops.aten.native_batch_norm(
            x,
            torch.ones(6).to(DEV),
            torch.zeros(6).to(DEV),
            torch.zeros(6).to(DEV),
            torch.ones(6).to(DEV),
            True,
            0.1,
            1e-5,
        ),
    ],
    ids=["topk", "var_mean", "native_batch_norm"],
)
def test_multi_output_ops_compile_and_run_once(eager, op):
    x = torch.randn(8, 6).to(DEV)  # uploads (here and in ``op``) run nothing
    compiles, runs = samples("EagerOpCompileTime"), samples("EagerOpExecuteTime")
    outs = op(x)
    assert samples("EagerOpCompileTime") - compiles == 1
    assert samples("EagerOpExecuteTime") - runs == 1
    assert all(o.device == DEV for o in outs)


def test_batch_norm_running_stats_in_one_graph(eager):
    bn_cpu = torch.nn.BatchNorm1d(6)
    bn = copy.deepcopy(bn_cpu).to(DEV)
    x = torch.randn(8, 6) + 3
    x_dev = x.to(DEV)
    compiles, runs = samples("EagerOpCompileTime"), samples("EagerOpExecuteTime")
    out = bn(x_dev)
    # Two ops: num_batches_tracked += 1, then batch norm with its running statistics.
    assert samples("EagerOpExecuteTime") - runs == 2
    assert samples("EagerOpCompileTime") - compiles == 2
    torch.testing.assert_close(out.cpu(), bn_cpu(x))
    torch.testing.assert_close(bn.running_mean.cpu(), bn_cpu.running_mean)
    torch.testing.assert_close(bn.running_var.cpu(), bn_cpu.running_var)


def test_in_place_runs_once_and_writes_through_views(eager):
    base_cpu = torch.arange(12.0).reshape(3, 4)
    base = base_cpu.to(DEV)
    runs = samples("EagerOpExecuteTime")
    base.add_(1.5)
    assert samples("EagerOpExecuteTime") == runs + 1
    base[:, 1].mul_(10)  # a view, written in place
    expected = base_cpu + 1.5
    expected[:, 1] *= 10
    torch.testing.assert_close(base.cpu(), expected)


def test_an_op_that_fails_to_run_raises_at_the_call_and_leaves_nothing(eager):
    x_cpu = torch.randn(4, 4)
    x = x_cpu.to(DEV)
    (x * 2.0).cpu()  # compiled: the next one only executes
    lx_exec.EXECUTOR.runtime.fail_next("execute")
    with pytest.raises(RuntimeError, match="injected execute failure"):
        x * 2.0
    torch.testing.assert_close(x.cpu(), x_cpu)
    runs = samples("ExecuteTime") + samples("EagerOpExecuteTime")
    lx.sync()  # the failed op left no pending work behind
    assert samples("ExecuteTime") + samples("EagerOpExecuteTime") == runs
    y = x * 2.0
    assert lx_exec.ir_value(y).op == "device_data"  # made from the results
    torch.testing.assert_close(y.cpu(), x_cpu * 2.0)


def test_randn_compiles_once_new_values_and_repeats_after_seed(eager):
    a = torch.randn(16, device=DEV).cpu()
    compiles = samples("EagerOpCompileTime")
    b = torch.randn(16, device=DEV).cpu()
    assert samples("EagerOpCompileTime") == compiles
    assert not torch.equal(a, b)
    torch.manual_seed(0)
    c = torch.randn(16, device=DEV).cpu()
    torch.manual_seed(0)
    d = torch.randn(16, device=DEV).cpu()
    torch.testing.assert_close(c, d, rtol=0, atol=0)


def test_pending_lazy_work_stays_pending():
    x = torch.randn(4).to(DEV)
    lazy = x * 3.0  # traced before eager is on
    with lx.eager_mode_context(True):
        y = torch.exp(x)
        assert lx_exec.ir_value(y).op == "device_data"
        assert lx_exec.ir_value(lazy).op != "device_data"
    lx.sync()
    assert lx_exec.ir_value(lazy).op == "device_data"


def test_context_restores_the_flag_when_the_body_raises():
    assert not lx.is_eager_mode()
    with pytest.raises(ValueError):
        with lx.eager_mode_context(True):
            assert lx.is_eager_mode()
            raise ValueError("user error")
    assert not lx.is_eager_mode()
    lx.eager_mode(True)
    try:
        assert lx.is_eager_mode()
    finally:
        lx.eager_mode(False)


def test_env_var_turns_eager_on_at_import():
    import os
    import subprocess
    import sys

    code = "import lazax.modes as lx; print(lx.is_eager_mode())"
    env = dict(os.environ, LAZAX_USE_EAGER_MODE="1")
    out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True)
    assert out.stdout.strip() == "True", out.stderr


def _train(model, batches, step_fn, device, steps):
    model = copy.deepcopy(model).to(device)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-2)
    losses = []
    for batch in batches[:steps]:
        opt.zero_grad()
        loss = step_fn(model, *[b.to(device) for b in batch])
        loss.backward()
        opt.step()
        losses.append(loss.item())
    return losses


def test_mlp_and_decoder_train_in_eager_mode_like_cpu(eager):
    torch.manual_seed(0)
    mlp = MLP()
    batches = [make_batch(16, 32, 10, seed) for seed in range(4)]

    def mlp_loss(m, x, y):
        return F.cross_entropy(m(x), y)

    with lx.eager_mode_context(False):
        cpu = _train(mlp, batches, mlp_loss, "cpu", 4)
    torch.testing.assert_close(_train(mlp, batches, mlp_loss, DEV, 4), cpu, rtol=1e-4, atol=1e-5)

    decoder = Decoder(SMALL)
    tokens = [(make_tokens(SMALL, seed),) for seed in range(3)]

    def decoder_loss(m, t):
        return lm_loss(m(t), t)

    with lx.eager_mode_context(False):
        cpu = _train(decoder, tokens, decoder_loss, "cpu", 3)
    got = _train(decoder, tokens, decoder_loss, DEV, 3)
    torch.testing.assert_close(got, cpu, rtol=1e-4, atol=1e-5)
