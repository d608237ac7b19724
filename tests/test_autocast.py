"""``torch.autocast("lazax")`` and ``torch.amp.GradScaler("lazax")``: torch's CUDA op
policy, in every mode, forward and backward. torch's CPU autocast (bfloat16) and
GradScaler are the oracle; where the CUDA policy differs from the CPU one (ops of the
float32 list fed bfloat16 inputs), the CUDA policy is what is asserted.
"""

import copy

import pytest
import torch
import torch.nn.functional as F

import lazax.dynamo  # noqa: F401
import lazax.modes as lx
from benchmarks.models import (
    CNN,
    CNNConfig,
    Decoder,
    DecoderConfig,
    lm_loss,
    make_images,
    make_tokens,
)
from lazax.executor import autocast_missing_policies

DEV = lx.device()
BF16 = torch.bfloat16


def counter(name):
    return lx.metrics.counter_value(name) or 0


def _gen():
    return torch.Generator().manual_seed(0)


def _r(g, *shape):
    return torch.randn(*shape, generator=g)


def _cases():
    g = _gen()
    a, b, c = _r(g, 4, 6), _r(g, 6, 5), _r(g, 4, 5)
    x4, w4, q = _r(g, 2, 3, 8, 8), _r(g, 4, 3, 3, 3), _r(g, 2, 2, 4, 8)
    t, p = _r(g, 4, 6), torch.rand(4, 6, generator=g)
    return {
        "linear": (lambda a, b: F.linear(a, b.t()), (a, b)),
        "matmul": (torch.matmul, (a, b)),
        "bmm": (torch.bmm, (_r(g, 2, 3, 4), _r(g, 2, 4, 5))),
        "addmm": (torch.addmm, (c, a, b)),
        "baddbmm": (torch.baddbmm, (_r(g, 2, 3, 5), _r(g, 2, 3, 4), _r(g, 2, 4, 5))),
        "conv2d": (F.conv2d, (x4, w4)),
        "conv_transpose2d": (F.conv_transpose2d, (x4, _r(g, 3, 4, 3, 3))),
        "sdpa": (F.scaled_dot_product_attention, (q, q, q)),
        "einsum": (lambda a, b: torch.einsum("ij,jk->ik", a, b), (a, b)),
        "softmax": (lambda a: F.softmax(a, -1), (a,)),
        "log_softmax": (lambda a: F.log_softmax(a, -1), (a,)),
        "layer_norm": (lambda a: F.layer_norm(a, (6,)), (a,)),
        "group_norm": (lambda x: F.group_norm(x, 3), (x4,)),
        "mse_loss": (F.mse_loss, (a, t)),
        "smooth_l1_loss": (F.smooth_l1_loss, (a, t)),
        "cross_entropy": (lambda a: F.cross_entropy(a, torch.arange(4, device=a.device)), (a,)),
        "bce_with_logits": (F.binary_cross_entropy_with_logits, (a, p)),
        "exp": (torch.exp, (a,)),
        "pow": (lambda a: a.pow(2), (a,)),
        "sum": (torch.sum, (a,)),
        "cumsum": (lambda a: a.cumsum(0), (a,)),
        "logsumexp": (lambda a: a.logsumexp(-1), (a,)),
        "addcmul": (torch.addcmul, (a, a, a)),
        "relu": (torch.relu, (a,)),  # no policy: runs as it is
        "interpolate": (lambda x: F.interpolate(x, scale_factor=2, mode="bilinear"), (x4,)),
    }


CASES = _cases()
# the float32 list (and reductions given dtype=float32) on CUDA, not on the CPU
CUDA_FP32_FROM_BF16 = {
    "softmax", "log_softmax", "layer_norm", "group_norm", "exp", "pow", "sum", "cumsum",
    "logsumexp", "interpolate",
}  # fmt: skip


def test_every_op_torch_autocasts_on_cuda_has_a_policy():
    assert autocast_missing_policies() == []
    assert torch.amp.is_autocast_available("lazax")
    assert torch.get_autocast_dtype("lazax") == BF16


@pytest.mark.parametrize("name", sorted(CASES))
def test_output_dtypes_and_values_match_cpu_autocast(name):
    fn, args = CASES[name]
    with torch.autocast("cpu", dtype=BF16):
        expected = fn(*args)
    with torch.autocast("lazax", dtype=BF16):
        got = fn(*[a.to(DEV) for a in args])
    assert got.dtype == expected.dtype
    # values against float64 math on the inputs as autocast casts them, not against the
    # CPU's bfloat16 kernels: their accumulation differs between CPUs (oneDNN picks a
    # kernel per instruction set; on an AMD EPYC, conv_transpose2d is off by 0.1 at 4.77)
    exact = fn(*[a.to(expected.dtype).double() for a in args])
    torch.testing.assert_close(got.cpu().double(), exact, rtol=2e-2, atol=2e-2)
    # inputs already in bfloat16 (the output of a matmul): torch's CUDA policy
    low = [a.to(BF16) for a in args]
    with torch.autocast("lazax", dtype=BF16):
        got = fn(*[a.to(DEV) for a in low])
    with torch.autocast("cpu", dtype=BF16):
        cpu = fn(*low)
    want = torch.float32 if name in CUDA_FP32_FROM_BF16 else cpu.dtype
    assert got.dtype == want


def test_nested_regions_disabled_regions_and_float16():
    a, b = torch.randn(4, 6, device=DEV), torch.randn(6, 5, device=DEV)
    with torch.autocast("lazax"):
        assert (a @ b).dtype == BF16
        with torch.autocast("lazax", enabled=False):
            assert (a @ b).dtype == torch.float32
        with torch.autocast("lazax", dtype=torch.float16):
            assert (a @ b).dtype == torch.float16
        assert (a @ b).dtype == BF16
    assert (a @ b).dtype == torch.float32
    torch.set_autocast_dtype("lazax", torch.float16)
    try:
        with torch.autocast("lazax"):
            assert (a @ b).dtype == torch.float16
    finally:
        torch.set_autocast_dtype("lazax", BF16)


def test_binary_cross_entropy_is_refused_as_on_cuda():
    p, t = torch.rand(3, device=DEV), torch.rand(3, device=DEV)
    with torch.autocast("lazax"), pytest.raises(RuntimeError, match="unsafe to autocast"):
        F.binary_cross_entropy(p, t)


def test_gradients_flow_through_the_casts_in_float32():
    g = _gen()
    x, w = _r(g, 4, 6), _r(g, 5, 6)
    grads = []
    for device, kind in (("cpu", "cpu"), (DEV, "lazax")):
        xd = x.detach().to(device).requires_grad_()
        wd = w.detach().to(device).requires_grad_()
        with torch.autocast(kind, dtype=BF16):
            loss = F.log_softmax(F.linear(xd, wd), -1).sum()
        loss.backward()
        assert wd.grad.dtype == torch.float32
        grads.append(wd.grad.cpu())
    torch.testing.assert_close(grads[1], grads[0], rtol=3e-2, atol=3e-2)


def test_the_graph_key_sees_autocast_and_a_steady_step_compiles_once():
    a, b = torch.randn(8, 8, device=DEV), torch.randn(8, 8, device=DEV)
    lx.sync()
    before = counter("UncachedCompile")
    (a @ b).cpu()
    with torch.autocast("lazax"):
        (a @ b).cpu()
    assert counter("UncachedCompile") - before == 2  # with and without: two graphs
    with torch.autocast("lazax"):
        (a @ b).cpu()
        (b @ a).cpu()
    assert counter("UncachedCompile") - before == 2


SMALL = DecoderConfig(vocab=64, d_model=32, n_heads=4, n_layers=2, seq=16, batch=4)
TINY_CNN = CNNConfig(image=16, width=8, classes=10, batch=8)


def _decoder():
    return Decoder(SMALL), [(make_tokens(SMALL, i),) for i in range(10)], lm_loss_step


def lm_loss_step(model, tokens):
    return lm_loss(model(tokens), tokens)


def cnn_loss_step(model, images, labels):
    return F.cross_entropy(model(images), labels)


def _cnn():
    return CNN(TINY_CNN), [make_images(TINY_CNN, i) for i in range(10)], cnn_loss_step


def _train(model, batches, loss_fn, mode):
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
    forward = torch.compile(model, backend="lazax") if mode == "dynamo" else model
    kind = "cpu" if mode == "cpu" else "lazax"

    def step(*batch):
        opt.zero_grad(set_to_none=True)
        with torch.autocast(kind, dtype=BF16):
            loss = loss_fn(forward, *batch)
        loss.backward()
        opt.step()
        return loss

    losses = []
    for batch in batches:
        if mode == "cpu":
            losses.append(step(*batch).item())
            continue
        batch = [b.to(DEV) for b in batch]
        if mode == "eager":
            with lx.eager_mode_context(True):
                loss = step(*batch)
        elif mode == "compile":
            loss = lx.compile(step)(*batch)
        else:
            loss = step(*batch)
            lx.sync()
        losses.append(loss.item())
    return losses


@pytest.mark.parametrize("make", [_decoder, _cnn], ids=["decoder", "cnn"])
@pytest.mark.parametrize("mode", ["lazy", "eager", "compile", "dynamo"])
def test_models_train_under_bf16_autocast_as_on_the_cpu(make, mode):
    torch.manual_seed(0)
    model, batches, loss_fn = make()
    ref = _train(copy.deepcopy(model), batches, loss_fn, "cpu")
    before = counter("UncachedCompile")
    got = _train(copy.deepcopy(model).to(DEV), batches, loss_fn, mode)
    # bfloat16 rounds differently here (XLA) and there (oneDNN), and torch's CUDA policy
    # keeps softmax and norms in float32 where the CPU's does not: bf16-level agreement
    torch.testing.assert_close(got, ref, rtol=3e-2, atol=3e-2)
    if mode in ("lazy", "compile"):
        assert counter("UncachedCompile") - before <= 3  # the first steps, then none


def _scaler_run(model, device, steps=6, inject_at=3):
    kind = torch.device(device).type
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    scaler = torch.amp.GradScaler(kind, init_scale=2.0**10, growth_interval=2)
    g = _gen()
    record = []
    for i in range(steps):
        x, y = _r(g, 4, 8).to(device), torch.randint(0, 4, (4,), generator=g).to(device)
        opt.zero_grad()
        with torch.autocast(kind, dtype=torch.float16):
            loss = F.cross_entropy(model(x), y)
        scaler.scale(loss).backward()
        if i == inject_at:
            with torch.no_grad():
                model[0].weight.grad[0, 0] = float("inf")
        before = [p.detach().cpu().clone() for p in model.parameters()]
        scaler.step(opt)
        scaler.update()
        if kind != "cpu":
            lx.sync()
        moved = any(
            not torch.equal(b, p.detach().cpu()) for b, p in zip(before, model.parameters())
        )
        record.append((scaler.get_scale(), moved))
    return record


def test_grad_scaler_skips_a_step_with_an_inf_and_halves_the_scale_as_on_the_cpu():
    torch.manual_seed(0)
    ref = torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.ReLU(), torch.nn.Linear(16, 4))
    model = copy.deepcopy(ref).to(DEV)
    expected = _scaler_run(ref, "cpu")
    got = _scaler_run(model, DEV)
    assert got == expected
    assert got[3] == (expected[2][0] / 2, False)  # the inf step: skipped, scale halved
    for p_ref, p in zip(ref.parameters(), model.parameters()):
        torch.testing.assert_close(p.cpu(), p_ref.detach(), rtol=1e-3, atol=1e-3)


def test_under_torch_compile_the_captured_graph_holds_the_casts():
    model = torch.nn.Linear(6, 5).to(DEV)
    compiled = torch.compile(lambda x: F.softmax(model(x), -1), backend="lazax")
    x = torch.randn(4, 6, device=DEV)
    with torch.autocast("lazax"):
        out = compiled(x)
        assert out.dtype == torch.float32
        expected = F.softmax(model(x), -1)
    plain = compiled(x)  # outside the region: another graph, no casts
    torch.testing.assert_close(out.cpu(), expected.cpu())
    assert not torch.equal(out.cpu(), plain.cpu())  # the bf16 matmul rounds
    torch.testing.assert_close(plain.cpu(), F.softmax(model(x), -1).cpu())


def _host_reads():
    data = lx.metrics.metric_data("TransferFromDeviceTime")
    return data[0] if data else 0


def test_grad_scaler_with_a_fused_optimizer_reads_nothing_on_the_host():
    # A fused optimizer takes GradScaler's found_inf and skips on the device; lazax
    # runs the check, the skip and the scale update in the step's graph.
    torch.manual_seed(0)
    ref = torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.ReLU(), torch.nn.Linear(16, 4))
    model = copy.deepcopy(ref).to(DEV)
    results = []
    for net, kind in ((ref, "cpu"), (model, "lazax")):
        device = "cpu" if kind == "cpu" else DEV
        opt = torch.optim.AdamW(net.parameters(), lr=0.01, fused=True)
        scaler = torch.amp.GradScaler(kind, init_scale=2.0**10, growth_interval=2)
        g = _gen()
        reads = []
        for i in range(6):
            x, y = _r(g, 4, 8).to(device), torch.randint(0, 4, (4,), generator=g).to(device)
            opt.zero_grad()
            with torch.autocast(kind, dtype=torch.float16):
                loss = F.cross_entropy(net(x), y)
            scaler.scale(loss).backward()
            if i == 3:
                with torch.no_grad():
                    net[0].weight.grad[0, 0] = float("inf")
            before = _host_reads()
            scaler.step(opt)
            scaler.update()
            if kind == "lazax":
                lx.sync()
            reads.append(_host_reads() - before)
        results.append((scaler.get_scale(), reads))
    assert results[1] == results[0] == (2.0**11, [0] * 6)
    for p_ref, p in zip(ref.parameters(), model.parameters()):
        torch.testing.assert_close(p.cpu(), p_ref.detach(), rtol=1e-3, atol=1e-3)


@pytest.mark.parametrize(
    "make",
    [
        lambda ps, **kw: torch.optim.AdamW(ps, lr=0.01, weight_decay=0.1, **kw),
        lambda ps, **kw: torch.optim.Adam(ps, lr=0.01, weight_decay=0.1, amsgrad=True, **kw),
        lambda ps, **kw: torch.optim.Adam(ps, lr=torch.tensor(0.01), maximize=True, **kw),
        lambda ps, **kw: torch.optim.SGD(
            ps, lr=0.1, momentum=0.9, nesterov=True, weight_decay=0.01, **kw
        ),
        lambda ps, **kw: torch.optim.SGD(ps, lr=0.1, momentum=0.5, dampening=0.3, **kw),
        lambda ps, **kw: torch.optim.SGD(ps, lr=0.1, maximize=True, **kw),
    ],
    ids=[
        "adamw",
        "adam-amsgrad",
        "adam-tensor-lr-maximize",
        "sgd-nesterov",
        "sgd-dampening",
        "sgd-plain-maximize",
    ],  # fmt: skip
)
def test_fused_optimizers_run_on_the_device_and_match_the_cpu(make):
    torch.manual_seed(0)
    ref = torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.ReLU(), torch.nn.Linear(16, 4))
    model = copy.deepcopy(ref).to(DEV)
    ref_opt = make(ref.parameters())
    opt = make(model.parameters(), fused=True)
    g = _gen()
    for _ in range(4):
        x, y = _r(g, 4, 8), torch.randint(0, 4, (4,), generator=g)
        for net, o, device in ((ref, ref_opt, "cpu"), (model, opt, DEV)):
            o.zero_grad()
            F.cross_entropy(net(x.to(device)), y.to(device)).backward()
            o.step()
        lx.sync()
    assert not lx.metrics.counter_value("aten::_fused_adamw_")  # no CPU fallback
    assert not lx.metrics.counter_value("aten::_fused_adam_")
    assert not lx.metrics.counter_value("aten::_fused_sgd_")
    for p_ref, p in zip(ref.parameters(), model.parameters()):
        torch.testing.assert_close(p.cpu(), p_ref.detach(), rtol=1e-5, atol=1e-6)


def test_an_autocast_region_inside_a_compiled_function_is_captured():
    model = torch.nn.Linear(6, 5).to(DEV)

    def fn(x):
        with torch.autocast("lazax", dtype=BF16):
            low = model(x)
            with torch.autocast("lazax", enabled=False):
                full = model(x)
        return low, full

    x = torch.randn(4, 6, device=DEV)
    low, full = torch.compile(fn, backend="lazax")(x)
    want_low, want_full = fn(x)
    assert (low.dtype, full.dtype) == (BF16, torch.float32)
    torch.testing.assert_close(low.cpu(), want_low.cpu(), rtol=0, atol=0)
    torch.testing.assert_close(full.cpu(), want_full.cpu(), rtol=0, atol=0)
