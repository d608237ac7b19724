"""torch_xla.amp over lazax, against torch on the CPU: autocast, GradScaler, and the
sync-free optimizers (an inf step skipped on the device, nothing read on the host)."""

import warnings

import pytest
import torch
import torch_xla
import torch_xla.core.xla_model as xm
import torch_xla.debug.metrics as met
from torch_xla.amp import GradScaler, autocast, syncfree

import lazax.modes as lx

DEV = lx.device().type  # "xla": torch_xla was imported before lazax


def _executions() -> int:
    return (met.metric_data("ExecuteTime") or (0,))[0]


def _reads() -> int:
    return (met.metric_data("TransferFromDeviceTime") or (0,))[0]


def _linear_out(device, ctx):
    torch.manual_seed(0)
    lin = torch.nn.Linear(8, 5)
    x = torch.randn(4, 8)
    lin, x = lin.to(device), x.to(device)
    with ctx:
        return lin(x)


def test_autocast_runs_a_linear_in_bfloat16_as_on_the_cpu():
    want = _linear_out("cpu", torch.autocast("cpu", dtype=torch.bfloat16))
    for device in (torch_xla.device(), "xla", "xla:0"):
        ctx = autocast(device)
        assert isinstance(ctx, torch.autocast)
        got = _linear_out(torch_xla.device(), ctx)
        assert got.dtype == torch.bfloat16 and got.device.type == DEV
        torch.testing.assert_close(got.cpu(), want, rtol=1.6e-2, atol=1e-2)


def test_autocast_float16_and_disabled():
    want = _linear_out("cpu", torch.autocast("cpu", dtype=torch.float16))
    got = _linear_out(torch_xla.device(), autocast(torch_xla.device(), dtype=torch.float16))
    assert got.dtype == torch.float16
    torch.testing.assert_close(got.cpu(), want, rtol=1e-3, atol=1e-3)
    off = _linear_out(torch_xla.device(), autocast(torch_xla.device(), enabled=False))
    assert off.dtype == torch.float32
    torch.testing.assert_close(off.cpu(), _linear_out("cpu", torch.autocast("cpu", enabled=False)))


def test_autocast_is_a_decorator():
    lin = torch.nn.Linear(3, 2).to(torch_xla.device())

    @autocast(torch_xla.device())
    def f(x):
        return lin(x)

    assert f(torch.ones(1, 3, device=torch_xla.device())).dtype == torch.bfloat16
    assert lin(torch.ones(1, 3, device=torch_xla.device())).dtype == torch.float32


def test_grad_scaler_takes_torch_xlas_signature():
    scaler = GradScaler(1024.0, 3.0, 0.25, 7, True)
    assert isinstance(scaler, torch.amp.GradScaler)
    assert scaler._device == DEV  # torch's attribute: the device type it scales on
    assert scaler.get_growth_factor() == 3.0 and scaler.get_backoff_factor() == 0.25
    assert scaler.get_growth_interval() == 7 and scaler.is_enabled()
    out = scaler.scale(torch.ones(2, device=torch_xla.device()))
    assert out.device.type == DEV
    torch.testing.assert_close(out.cpu(), torch.full((2,), 1024.0))
    assert GradScaler(device="cpu")._device == "cpu"
    assert not GradScaler(enabled=False).is_enabled()


def test_grad_scaler_use_zero_grad_warns_only_when_true():
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        GradScaler(use_zero_grad=False)
    with pytest.warns(UserWarning, match="use_zero_grad=True"):
        GradScaler(use_zero_grad=True)


def test_syncfree_optimizers_are_torchs_fused_ones():
    p = [torch.nn.Parameter(torch.ones(2, device=torch_xla.device()))]
    for cls, base in ((syncfree.SGD, torch.optim.SGD), (syncfree.Adam, torch.optim.Adam)):
        opt = cls(p, lr=0.1)
        assert isinstance(opt, base) and opt.defaults["fused"] is True
        assert opt._step_supports_amp_scaling  # torch's GradScaler hands it found_inf
    opt = syncfree.AdamW(p, 0.5, (0.8, 0.9), weight_decay=0.0)  # torch's positional args
    assert opt.defaults["lr"] == 0.5 and opt.defaults["betas"] == (0.8, 0.9)
    with pytest.raises(ValueError, match="fused=False"):
        syncfree.AdamW(p, fused=False)
    with pytest.raises(ValueError, match="foreach"):
        syncfree.SGD(p, lr=0.1, foreach=True)


OPTIMIZERS = {
    "SGD": (syncfree.SGD, torch.optim.SGD, {"lr": 0.05, "momentum": 0.9}),
    "Adam": (syncfree.Adam, torch.optim.Adam, {"lr": 0.01}),
    "AdamW": (syncfree.AdamW, torch.optim.AdamW, {"lr": 0.01, "weight_decay": 0.1}),
}


def _mlp():
    torch.manual_seed(0)
    return torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.ReLU(), torch.nn.Linear(16, 4))


def _batches(n):
    g = torch.Generator().manual_seed(1)
    return [(torch.randn(6, 8, generator=g), torch.randn(6, 4, generator=g)) for _ in range(n)]


def _step(model, opt, scaler, x, y, ctx):
    with ctx:
        out = model(x)
    loss = torch.nn.functional.mse_loss(out.float(), y)
    scaler.scale(loss).backward()
    scaler.step(opt)
    scaler.update()
    opt.zero_grad()
    return loss.detach()


def _params(model):
    return [p.detach().cpu().clone() for p in model.parameters()]


@pytest.mark.parametrize("name", sorted(OPTIMIZERS))
def test_syncfree_float16_training_matches_the_cpu(name):
    ours, torchs, kwargs = OPTIMIZERS[name]
    batches = _batches(3)
    ref = _mlp()
    ref_opt = torchs(ref.parameters(), **kwargs)
    ref_scaler = torch.amp.GradScaler("cpu", init_scale=2.0**10, growth_interval=2)
    dev = torch_xla.device()
    model = _mlp().to(dev)
    opt = ours(model.parameters(), **kwargs)
    scaler = GradScaler(init_scale=2.0**10, growth_interval=2)
    for x, y in batches:
        want = _step(ref, ref_opt, ref_scaler, x, y, torch.autocast("cpu", dtype=torch.float16))
        got = _step(model, opt, scaler, x.to(dev), y.to(dev), autocast(dev, dtype=torch.float16))
        torch_xla.sync()
        torch.testing.assert_close(got.cpu(), want, rtol=1e-4, atol=1e-5)
        assert scaler.get_scale() == ref_scaler.get_scale()
    for got, want in zip(_params(model), _params(ref)):
        torch.testing.assert_close(got, want, rtol=1e-4, atol=1e-5)


@pytest.mark.parametrize("name", sorted(OPTIMIZERS))
def test_syncfree_skips_an_inf_step_on_the_device(name):
    ours, torchs, kwargs = OPTIMIZERS[name]
    (x0, y0), (x1, y1) = _batches(2)
    bad = x1.clone()
    bad[0, 0] = float("inf")
    cpu_ctx = torch.autocast("cpu", dtype=torch.float16)
    ref = _mlp()
    ref_opt = torchs(ref.parameters(), **kwargs)
    ref_scaler = torch.amp.GradScaler("cpu", init_scale=2.0**10)
    for x, y in ((x0, y0), (bad, y1), (x1, y1)):
        _step(ref, ref_opt, ref_scaler, x, y, cpu_ctx)
    dev = torch_xla.device()
    ctx = autocast(dev, dtype=torch.float16)
    model = _mlp().to(dev)
    opt = ours(model.parameters(), **kwargs)
    scaler = GradScaler(init_scale=2.0**10)
    _step(model, opt, scaler, x0.to(dev), y0.to(dev), ctx)
    torch_xla.sync()
    before, scale = _params(model), scaler.get_scale()

    with ctx:
        out = model(bad.to(dev))
    scaler.scale(torch.nn.functional.mse_loss(out.float(), y1.to(dev))).backward()
    torch_xla.sync()
    executions, reads = _executions(), _reads()
    scaler.step(opt)  # the found-inf flag stays on the device: nothing runs, nothing is read
    assert (_executions(), _reads()) == (executions, reads)
    scaler.update()
    opt.zero_grad()
    torch_xla.sync()
    for got, want in zip(_params(model), before):
        torch.testing.assert_close(got, want, rtol=0, atol=0)
    assert scaler.get_scale() == scale * 0.5 == ref_scaler.get_scale()

    _step(model, opt, scaler, x1.to(dev), y1.to(dev), ctx)  # the skipped step left no trace
    torch_xla.sync()
    for got, want in zip(_params(model), _params(ref)):
        torch.testing.assert_close(got, want, rtol=1e-4, atol=1e-5)


def test_a_plain_optimizer_reads_the_flag_on_the_host():
    # the measure above sees a host read: torch's GradScaler with an unfused optimizer
    dev = torch_xla.device()
    model = _mlp().to(dev)
    opt = torch.optim.AdamW(model.parameters(), lr=0.01, foreach=False)
    scaler = GradScaler()
    ((x, y),) = _batches(1)
    with autocast(dev, dtype=torch.float16):
        out = model(x.to(dev))
    scaler.scale(torch.nn.functional.mse_loss(out.float(), y.to(dev))).backward()
    torch_xla.sync()
    executions, reads = _executions(), _reads()
    scaler.step(opt)
    assert _executions() > executions and _reads() > reads


@pytest.mark.parametrize("name", sorted(OPTIMIZERS))
def test_syncfree_step_takes_torch_xlas_found_inf(name):
    ours, torchs, kwargs = OPTIMIZERS[name]
    dev = torch_xla.device()
    model, ref = _mlp().to(dev), _mlp()
    opt, ref_opt = ours(model.parameters(), **kwargs), torchs(ref.parameters(), **kwargs)
    for i, (x, y) in enumerate(_batches(4)):
        for m, o, (a, b) in ((model, opt, (x.to(dev), y.to(dev))), (ref, ref_opt, (x, y))):
            o.zero_grad()
            torch.nn.functional.mse_loss(m(a), b).backward()
        skip = i % 2 == 0
        assert xm._fetch_gradients(opt) == [p.grad for p in model.parameters()]
        xm.optimizer_step(opt, optimizer_args={"found_inf": torch.tensor(float(skip)).to(dev)})
        if not skip:  # the reference steps only where the flag was 0
            ref_opt.step()
        torch_xla.sync()
    assert not hasattr(opt, "found_inf")  # handed to torch's step for that step only
    for got, want in zip(_params(model), _params(ref)):
        torch.testing.assert_close(got, want, rtol=1e-5, atol=1e-6)
