"""torch.compile(backend="lazax"): traced once, then executed by hash, against plain torch.

Pins the counters the bridge promises: one trace per FX graph, one compile per distinct
shape, no per-op tracing after the first call, an input with pending IR synced first,
an evicted executable compiled again (never an error).
"""

import copy

import pytest
import torch
import torch.nn.functional as F

import lazax.dynamo  # noqa: F401  (the name "lazax" works without it; see the entry point test)
import lazax.executor as lx_exec
import lazax.modes as lx
from benchmarks.models import MLP, Decoder, lm_loss, make_batch, make_tokens

from .test_training import SMALL

DEV = lx.device()


def counter(name):
    return lx.metrics.counter_value(name) or 0


def samples(name):
    data = lx.metrics.metric_data(name)
    return data[0] if data else 0


@pytest.fixture(autouse=True)
def fresh_dynamo():
    torch._dynamo.reset()
    yield
    torch._dynamo.reset()


def test_mlp_inference_runs_by_hash_with_no_per_op_tracing(monkeypatch):
    torch.manual_seed(0)
    model = MLP(16, 32, 4)
    device_model = copy.deepcopy(model).to(DEV)
    compiled = torch.compile(device_model, backend="lazax")
    xs = [make_batch(8, 16, 4, seed)[0] for seed in range(4)]
    on_device = [x.to(DEV) for x in xs]
    lx.sync()
    with torch.no_grad():
        compiles, runs = samples("CompileTime"), samples("ExecuteTime")
        extracted = counter("DynamoExtractCompiledGraph")
        first = compiled(on_device[0])
        assert samples("CompileTime") == compiles + 1
        assert counter("DynamoExtractCompiledGraph") == extracted + 1

        ops = []
        dispatch = lx_exec.LazyTensor.__dict__["__torch_dispatch__"].__func__

        def counting(cls, func, types, args=(), kwargs=None):
            ops.append(func)
            return dispatch(cls, func, types, args, kwargs)

        monkeypatch.setattr(lx_exec.LazyTensor, "__torch_dispatch__", classmethod(counting))
        outs = [compiled(x) for x in on_device[1:]]
        monkeypatch.undo()
        assert ops == []
        assert samples("ExecuteTime") == runs + 4
        assert samples("CompileTime") == compiles + 1
        assert counter("DynamoExtractCompiledGraph") == extracted + 1
    with torch.no_grad():
        for x, out in zip(xs, [first, *outs]):
            torch.testing.assert_close(out.cpu(), model(x), rtol=1e-5, atol=1e-5)


def _loss(model, tokens):
    return lm_loss(model(tokens), tokens)


@pytest.mark.parametrize(
    "make_opt",
    [
        lambda p: torch.optim.SGD(p, lr=0.1, momentum=0.9),
        lambda p: torch.optim.AdamW(p, lr=1e-2),
    ],
    ids=["sgd", "adamw"],
)
def test_training_matches_cpu_and_is_three_graphs_per_step(make_opt, request):
    torch.manual_seed(0)
    ref = Decoder(SMALL)
    model = copy.deepcopy(ref).to(DEV)
    ref_opt, opt = make_opt(ref.parameters()), make_opt(model.parameters())
    step_loss = torch.compile(_loss, backend="lazax")
    extracted = counter("DynamoExtractCompiledGraph")
    for step in range(10):
        tokens = make_tokens(SMALL, step)
        ref_opt.zero_grad()
        expected = _loss(ref, tokens)
        expected.backward()
        ref_opt.step()

        on_device = tokens.to(DEV)
        lx.sync()
        compiles, runs = counter("UncachedCompile"), samples("ExecuteTime")
        input_syncs = samples("DynamoSyncInputExecuteTime")
        opt.zero_grad()
        loss = step_loss(model, on_device)
        loss.backward()
        opt.step()
        lx.sync()
        if step >= 2:
            assert counter("UncachedCompile") == compiles
        # forward, backward, the optimizer's lazy graph; plus the loss's incoming
        # gradient, which autograd creates lazily (ones_like) and the bridge syncs first.
        assert samples("DynamoSyncInputExecuteTime") == input_syncs + 1
        assert samples("ExecuteTime") == runs + 3 + 1
        torch.testing.assert_close(loss.cpu(), expected.detach(), rtol=1e-4, atol=1e-5)
    assert counter("DynamoExtractCompiledGraph") == extracted + 2  # forward, backward
    if "adamw" in request.node.name:
        # Adam normalises each gradient by its own size, so a parameter whose true
        # gradient is zero (the attention's key bias) follows float noise, on the CPU as
        # here; the losses above are the comparison that means something.
        return
    for p_ref, p in zip(ref.parameters(), model.parameters()):
        torch.testing.assert_close(p.cpu(), p_ref.detach(), rtol=1e-3, atol=1e-4)


def test_batchnorm_running_statistics_reach_the_caller():
    torch.manual_seed(0)
    ref = torch.nn.Sequential(torch.nn.Linear(6, 5, bias=False), torch.nn.BatchNorm1d(5))
    model = copy.deepcopy(ref).to(DEV)
    compiled = torch.compile(model, backend="lazax")
    for _ in range(3):
        x = torch.randn(10, 6)
        expected = ref(x)
        out = compiled(x.to(DEV))
        out.sum().backward()
        expected.sum().backward()
        torch.testing.assert_close(out.cpu(), expected.detach(), rtol=1e-5, atol=1e-5)
    bn, bn_ref = model[1], ref[1]
    torch.testing.assert_close(bn.running_mean.cpu(), bn_ref.running_mean)
    torch.testing.assert_close(bn.running_var.cpu(), bn_ref.running_var)
    assert bn.num_batches_tracked.cpu().item() == 3
    torch.testing.assert_close(model[0].weight.grad.cpu(), ref[0].weight.grad)


def test_in_place_update_of_an_input_and_an_output_aliasing_it():
    def update(buf, x):
        buf.mul_(0.5).add_(x)
        return buf.t(), x.sum()

    compiled = torch.compile(update, backend="lazax")
    buf_cpu, x_cpu = torch.randn(3, 4), torch.randn(3, 4)
    buf = buf_cpu.to(DEV)
    for _ in range(3):
        view, total = compiled(buf, x_cpu.to(DEV))
        expected_view, expected_total = update(buf_cpu, x_cpu)
        torch.testing.assert_close(buf.cpu(), buf_cpu)
        torch.testing.assert_close(view.cpu(), expected_view)
        torch.testing.assert_close(total.cpu(), expected_total)
    view.add_(1.0)  # the returned view aliases the caller's tensor, as in torch
    torch.testing.assert_close(buf.cpu(), buf_cpu + 1.0)


def test_an_input_with_pending_ir_is_synced_first():
    compiled = torch.compile(lambda a: torch.tanh(a) * 3.0, backend="lazax")
    base = torch.randn(4, 4)
    compiled(base.to(DEV))  # trace and compile on device data
    pending = base.to(DEV) * 2.0
    before = samples("DynamoSyncInputExecuteTime")
    out = compiled(pending)
    assert samples("DynamoSyncInputExecuteTime") == before + 1
    torch.testing.assert_close(out.cpu(), torch.tanh(base * 2.0) * 3.0)
    clean = base.to(DEV)
    compiled(clean)
    assert samples("DynamoSyncInputExecuteTime") == before + 1


def test_dynamic_shapes_trace_once_and_compile_once_per_shape():
    lx_exec.EXECUTOR.reset_cache()  # no executable left by an earlier test
    model = MLP(16, 32, 4)
    compiled = torch.compile(copy.deepcopy(model).to(DEV), backend="lazax", dynamic=True)
    extracted, compiles = counter("DynamoExtractCompiledGraph"), samples("CompileTime")
    with torch.no_grad():
        for batch in (8, 16, 8):
            x = torch.randn(batch, 16)
            torch.testing.assert_close(compiled(x.to(DEV)).cpu(), model(x), rtol=1e-5, atol=1e-5)
    assert counter("DynamoExtractCompiledGraph") == extracted + 1
    assert samples("CompileTime") == compiles + 2


def test_eviction_compiles_again_and_never_fails(monkeypatch):
    monkeypatch.setenv("LAZAX_COMPILATION_CACHE_SIZE", "2")
    lx_exec.EXECUTOR.reset_cache()
    try:
        assert lx_exec.EXECUTOR.cache.capacity == 2
        model = MLP(8, 16, 3)
        compiled = torch.compile(copy.deepcopy(model).to(DEV), backend="lazax", dynamic=True)
        shapes = (2, 3, 5, 7)
        inputs = {n: torch.randn(n, 8) for n in shapes}
        on_device = {n: x.to(DEV) for n, x in inputs.items()}
        recompiles = counter("DynamoRecompileAfterEviction")
        with torch.no_grad():
            for call in range(20):
                n = shapes[call % 4]
                out = compiled(on_device[n])
                torch.testing.assert_close(out.cpu(), model(inputs[n]), rtol=1e-5, atol=1e-5)
        # The first four calls compile; every later one finds its executable evicted
        # by the three other shapes (capacity 2) and compiles it again.
        assert counter("DynamoRecompileAfterEviction") == recompiles + 16
    finally:
        monkeypatch.delenv("LAZAX_COMPILATION_CACHE_SIZE")
        lx_exec.EXECUTOR.reset_cache()


def test_under_eager_mode_the_compiled_graph_runs_as_one():
    compiled = torch.compile(lambda a, b: torch.relu(a @ b + 1.0).sum(0), backend="lazax")
    a, b = torch.randn(4, 5), torch.randn(5, 3)
    with lx.eager_mode_context(True):
        x, y = a.to(DEV), b.to(DEV)
        compiled(x, y)  # trace and compile
        eager_runs, runs = samples("EagerOpExecuteTime"), samples("ExecuteTime")
        scaled = x * 2.0
        assert samples("EagerOpExecuteTime") == eager_runs + 1
        out = compiled(scaled, y)
        assert samples("ExecuteTime") == runs + 1
        assert samples("EagerOpExecuteTime") == eager_runs + 1
        final = out - 1.0
        assert samples("EagerOpExecuteTime") == eager_runs + 2
        assert lx.is_eager_mode()
    torch.testing.assert_close(final.cpu(), torch.relu((a * 2.0) @ b + 1.0).sum(0) - 1.0)


def test_an_op_without_lowering_still_runs_and_is_named():
    assert "aten::_pdist_forward.default" not in lx_exec.registered_ops()

    def fn(a):
        return F.pdist((a * 0.5).reshape(3, 2)).sum() + a.mean()

    compiled = torch.compile(fn, backend="lazax")
    fallbacks, interpreted = counter("aten::_pdist_forward"), counter("DynamoInterpretedGraph")
    splits = counter("DynamoSplitGraph")
    for seed in range(3):
        a = torch.randn(6, generator=torch.Generator().manual_seed(seed))
        torch.testing.assert_close(compiled(a.to(DEV)).cpu(), fn(a))
        if seed == 0:
            traced, compiles = counter("DynamoExtractCompiledGraph"), counter("UncachedCompile")
    assert counter("aten::_pdist_forward") == fallbacks + 3
    # Split once around the op: the ops before and after it replay, nothing is traced or
    # compiled after the first call, nothing is interpreted.
    assert counter("DynamoSplitGraph") == splits + 1
    assert counter("DynamoInterpretedGraph") == interpreted
    assert counter("DynamoExtractCompiledGraph") == traced
    assert counter("UncachedCompile") == compiles


def test_random_ops_draw_fresh_numbers_on_each_call_and_repeat_after_seeding():
    compiled = torch.compile(lambda a: F.dropout(a, 0.5, training=True), backend="lazax")
    x = torch.ones(64, 64).to(DEV)
    interpreted = counter("DynamoInterpretedGraph")
    lx_exec.RNG.manual_seed(7)
    first = compiled(x).cpu()  # the call that traces draws like every later one
    second = compiled(x).cpu()
    assert not torch.equal(first, second)
    for out in (first, second):
        assert set(out.unique().tolist()) <= {0.0, 2.0}
    lx_exec.RNG.manual_seed(7)
    torch.testing.assert_close(compiled(x).cpu(), first)
    torch.testing.assert_close(compiled(x).cpu(), second)
    with torch.no_grad():  # lazy mode draws the same numbers from the same seed
        lx_exec.RNG.manual_seed(7)
        torch.testing.assert_close(F.dropout(x, 0.5, training=True).cpu(), first)
    assert counter("DynamoInterpretedGraph") == interpreted


def test_factories_inside_a_graph_are_replayed_not_interpreted():
    # A mask built with torch.full, positions with linspace, noise with randn_like: the
    # graph compiles once and replays; nothing is built on the host.
    def fn(x):
        n = x.shape[-1]
        mask = torch.full((n, n), float("-inf"), device=x.device).triu(1)
        ramp = torch.linspace(0.0, 1.0, n, device=x.device)
        rows = torch.triu_indices(n, n, 1, device=x.device)[0]
        noise = torch.randn_like(x) * 0.0
        return (x @ x.T + mask).softmax(-1) * ramp + noise + rows.sum()

    compiled = torch.compile(fn, backend="lazax")
    interpreted, compiles = counter("DynamoInterpretedGraph"), counter("UncachedCompile")
    for seed in range(3):
        x = torch.randn(6, 6, generator=torch.Generator().manual_seed(seed))
        torch.testing.assert_close(compiled(x.to(DEV)).cpu(), fn(x))
    assert counter("DynamoInterpretedGraph") == interpreted
    assert counter("UncachedCompile") == compiles + 1
    for name in ("full", "linspace", "triu_indices", "randn_like"):
        assert counter(f"aten::{name}") == 0, name


def test_a_constant_tensor_made_inside_the_graph_keeps_its_values():
    # torch.tensor(list, device=...) inside a compiled function: dynamo and AOTAutograd
    # fake it (it crashed on lazax's data_ptr), and the replay uses its values.
    def fn(x):
        index = torch.tensor([0, 2, 2], device=x.device)
        mask = torch.tensor([[True, False, True, False]], device=x.device)
        return x[index].masked_fill(mask, -1.0), index

    compiled = torch.compile(fn, backend="lazax")
    interpreted = counter("DynamoInterpretedGraph")
    for seed in range(2):
        x = torch.randn(5, 4, generator=torch.Generator().manual_seed(seed))
        for got, expected in zip(compiled(x.to(DEV)), fn(x)):
            torch.testing.assert_close(got.cpu(), expected)
    assert counter("DynamoInterpretedGraph") == interpreted


def test_attention_with_a_padding_mask_and_weights_trains():
    # Its backward graph views a tangent with the strides it was traced with, which
    # AOTAutograd restrides with torch.empty_strided: lazax keeps those strides.
    torch.manual_seed(0)
    cpu = torch.nn.MultiheadAttention(8, 2, batch_first=True)
    lz = copy.deepcopy(cpu).to(DEV)

    def fn(m, x, mask):
        return m(x, x, x, key_padding_mask=mask, need_weights=True)[0]

    compiled = torch.compile(fn, backend="lazax")
    x = torch.randn(2, 4, 8)
    mask = torch.tensor([[False, False, True, True], [False, False, False, True]])
    compiled(lz, x.to(DEV), mask.to(DEV)).square().sum().backward()
    fn(cpu, x, mask).square().sum().backward()
    torch.testing.assert_close(lz.in_proj_weight.grad.cpu(), cpu.in_proj_weight.grad)


def test_one_hot_checks_its_classes_on_the_device_and_replays():
    # F.one_hot's range checks are _assert_async calls in the FX graph: device-side
    # checks in the replayed program, raising torch's message at the next read.
    compiled = torch.compile(lambda x: F.one_hot(x, 6).float().sum(0), backend="lazax")
    interpreted = counter("DynamoInterpretedGraph")
    for labels in ([1, 3, 5], [0, 0, 2]):
        x = torch.tensor(labels)
        torch.testing.assert_close(compiled(x.to(DEV)).cpu(), F.one_hot(x, 6).float().sum(0))
    assert counter("DynamoInterpretedGraph") == interpreted
    assert counter("aten::_assert_async") == 0
    with pytest.raises(RuntimeError, match="Class values must be smaller than num_classes"):
        compiled(torch.tensor([1, 3, 7], device=DEV)).cpu()
    with pytest.raises(RuntimeError, match="Class values must be non-negative"):
        compiled(torch.tensor([-1, 3, 2], device=DEV)).cpu()


def test_ops_with_effect_tokens_run_and_raise_torchs_error():
    # torch.linalg.inv checks its result with _linalg_check_errors, an op AOTAutograd
    # orders with effect tokens (None at run time); the replayed program checks on the
    # device (no host read, no interpretation) and raises at the read.
    def fn(a):
        return torch.linalg.inv(a) @ a

    compiled = torch.compile(fn, backend="lazax")
    interpreted = counter("DynamoInterpretedGraph")
    for seed in range(2):
        a = torch.randn(3, 3, generator=torch.Generator().manual_seed(seed)) + 3 * torch.eye(3)
        torch.testing.assert_close(compiled(a.to(DEV)).cpu(), fn(a), rtol=1e-4, atol=1e-4)
    with pytest.raises(torch.linalg.LinAlgError, match="diagonal element 1 is zero"):
        compiled(torch.zeros(3, 3, device=DEV)).cpu()
    assert counter("DynamoInterpretedGraph") == interpreted
    assert counter("aten::_linalg_check_errors") == 0


def test_a_python_float_argument_is_replayed_not_interpreted():
    compiled = torch.compile(lambda x, s: x * s + 1.0, backend="lazax")
    x = torch.arange(4.0)
    interpreted = counter("DynamoInterpretedGraph")
    for s in (2.5, 3.5, 4.5, 5.5):
        torch.testing.assert_close(compiled(x.to(DEV), s).cpu(), x * s + 1.0)
    assert counter("DynamoInterpretedGraph") == interpreted


def test_views_that_reinterpret_the_dtype_are_right():
    z = torch.tensor([1 + 2j, 3 + 4j, 5 + 6j, 7 + 8j])
    real_part = torch.compile(lambda a: (a * 2).real, backend="lazax")
    scaled = torch.compile(lambda a: a * 2, backend="lazax")
    for _ in range(2):
        torch.testing.assert_close(real_part(z.to(DEV)).cpu(), (z * 2).real)
        torch.testing.assert_close(scaled(z.to(DEV).imag).cpu(), z.imag * 2)


def test_cpu_tensors_stay_on_the_cpu():
    compiled = torch.compile(lambda a: a * 2 + 1, backend="lazax")
    out = compiled(torch.ones(3))
    assert out.device.type == "cpu"
    torch.testing.assert_close(out, torch.full((3,), 3.0))


def test_out_kernels_torch_skips_on_subclasses_write_out_in_the_graph():
    # torch's composite out= kernels of these ops never write out for a tensor subclass
    # (a fake tensor during tracing is one): lazax's own kernel puts the write in the graph.
    def rank_and_product(a, v, rank, product):
        torch.linalg.matrix_rank(a, out=rank)
        torch.matmul(a, v, out=product)
        return rank, product

    a, v = torch.randn(5, 5), torch.randn(5)
    rank = torch.full((), -1, dtype=torch.int64, device=DEV)
    product = torch.empty(5, device=DEV)
    compiled = torch.compile(rank_and_product, backend="lazax")
    compiled(a.to(DEV), v.to(DEV), rank, product)
    assert rank.item() == torch.linalg.matrix_rank(a).item() == 5
    torch.testing.assert_close(product.cpu(), a @ v)


def test_a_graph_split_around_ops_without_lowering_trains_as_on_the_cpu():
    # pdist's forward and backward kernels run on the CPU fallback: the forward and the
    # backward graph are each split around them, the rest of each replays.
    torch.manual_seed(0)
    reference = torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.ReLU(), torch.nn.Linear(16, 4))
    model = copy.deepcopy(reference).to(DEV)
    optimizers = [torch.optim.SGD(m.parameters(), lr=0.1) for m in (reference, model)]

    def loss_fn(m, x, y):
        return F.pdist(m(x)).mean() + F.cross_entropy(m(x), y)

    compiled = torch.compile(loss_fn, backend="lazax")
    x, y = torch.randn(6, 8), torch.randint(0, 4, (6,))
    interpreted, splits = counter("DynamoInterpretedGraph"), counter("DynamoSplitGraph")
    for step in range(3):
        losses = []
        for m, loss_of, opt, a, b in (
            (reference, loss_fn, optimizers[0], x, y),
            (model, compiled, optimizers[1], x.to(DEV), y.to(DEV)),
        ):
            loss = loss_of(m, a, b)
            loss.backward()
            opt.step()
            opt.zero_grad()
            losses.append(loss)
        torch.testing.assert_close(losses[1].cpu(), losses[0])
        if step == 0:
            traced = counter("DynamoExtractCompiledGraph")
    for p, q in zip(reference.parameters(), model.parameters(), strict=True):
        torch.testing.assert_close(q.detach().cpu(), p.detach())
    assert counter("DynamoSplitGraph") == splits + 2  # forward and backward, once each
    assert counter("DynamoInterpretedGraph") == interpreted
    assert counter("DynamoExtractCompiledGraph") == traced  # no capture after the first step
