"""A whole training step under torch.compile(backend="lazax"), against plain torch.

The recipe the README gives: forward and backward in a function of their own that
returns ``loss.detach()``, then ``opt.step()`` and ``opt.zero_grad()`` (and a scheduler's
step, with a tensor learning rate), all inside the compiled function. Dynamo captures it
as two graphs, forward with backward and the optimizer update (it must stop between
them: the optimizer decides which parameters have gradients from real values), and
lazax replays both by hash on every later call: two executions, no compile, no op
traced, no read to the host, parameters and optimizer state written in place.
"""

import copy

import pytest
import torch
import torch.distributed as dist
import torch.nn.functional as F

import lazax.dynamo  # noqa: F401
import lazax.executor as lx_exec
import lazax.modes as lx
from benchmarks.models import CNN, CNNConfig, Decoder, lm_loss, make_images, make_tokens

from .test_dynamo import counter, fresh_dynamo, samples  # noqa: F401  (fixture, autouse)
from .test_training import SMALL

DEV = lx.device()


def make_step(model, opt, sched=None):
    def forward_backward(tokens):
        loss = lm_loss(model(tokens), tokens)
        loss.backward()
        return loss.detach()

    def step(tokens):
        value = forward_backward(tokens)
        opt.step()
        if sched is not None:
            sched.step()
        opt.zero_grad()
        return value

    return step


OPTIMIZERS = {
    "sgd": lambda p: torch.optim.SGD(p, lr=0.1, momentum=0.9),
    "adamw": lambda p: torch.optim.AdamW(p, lr=torch.tensor(1e-2)),
    "adam-amsgrad": lambda p: torch.optim.Adam(p, lr=torch.tensor(1e-2), amsgrad=True),
}


def traced_ops(monkeypatch, call, *args):
    """``call(*args)``'s result and the aten ops that reached lazax's dispatcher then."""
    ops = []
    dispatch = lx_exec.LazyTensor.__dict__["__torch_dispatch__"].__func__

    def counting(cls, func, types, args=(), kwargs=None):
        ops.append(func)
        return dispatch(cls, func, types, args, kwargs)

    with monkeypatch.context() as patch:
        patch.setattr(lx_exec.LazyTensor, "__torch_dispatch__", classmethod(counting))
        return call(*args), ops


@pytest.mark.parametrize("name", list(OPTIMIZERS))
def test_a_whole_step_replays_two_graphs_and_matches_cpu(name, monkeypatch):
    torch.manual_seed(0)
    ref = Decoder(SMALL)
    model = copy.deepcopy(ref).to(DEV)
    make_opt = OPTIMIZERS[name]
    ref_step = make_step(ref, make_opt(ref.parameters()))
    step = torch.compile(make_step(model, make_opt(model.parameters())), backend="lazax")
    steady = 3
    for i in range(8):
        tokens = make_tokens(SMALL, i)
        expected = ref_step(tokens)
        on_device = tokens.to(DEV)
        lx.sync()
        before = [
            counter("UncachedCompile"),
            samples("ExecuteTime"),
            samples("TransferFromDeviceTime"),
            counter("DynamoExtractCompiledGraph"),
            counter("DynamoInterpretedGraph"),
        ]
        loss, ops = traced_ops(monkeypatch, step, on_device)
        after = [
            counter("UncachedCompile"),
            samples("ExecuteTime"),
            samples("TransferFromDeviceTime"),
            counter("DynamoExtractCompiledGraph"),
            counter("DynamoInterpretedGraph"),
        ]
        if i == 0:
            assert after[3] - before[3] == 2  # forward with backward; the optimizer
        if i >= steady:
            # No compile, two executions, no host read, no capture, nothing interpreted.
            assert [a - b for a, b in zip(after, before)] == [0, 2, 0, 0, 0]
            assert ops == []  # not one op traced per call
        torch.testing.assert_close(loss.cpu(), expected, rtol=1e-4, atol=1e-5)
    assert all(p.grad is None for p in model.parameters())  # zero_grad ran
    if name != "sgd":
        # Adam normalises each gradient by its own size: a parameter whose true
        # gradient is zero (the attention's key bias) follows float noise, on the CPU
        # too; the losses above are the comparison that means something.
        return
    for p_ref, p in zip(ref.parameters(), model.parameters()):
        torch.testing.assert_close(p.cpu(), p_ref.detach(), rtol=1e-3, atol=1e-4)


def test_a_lazax_process_group_keeps_backward_out_of_the_step_until_it_is_destroyed(
    monkeypatch,
):
    """While a lazax group lives, ``backward()`` breaks the compiled step's graph (DDP's
    and FSDP2's gradient hooks run only then); once ``destroy_process_group`` removes
    every group, the whole step is two graphs again. Before, one group made anywhere
    in the process (an earlier test's in the same xdist worker) made it four for good."""
    assert torch._dynamo.config.trace_autograd_ops
    dist.init_process_group("lazax", store=dist.HashStore(), rank=0, world_size=1)
    try:
        dist.new_group([0])
        assert lx_exec.process_group_made()
        assert not torch._dynamo.config.trace_autograd_ops
    finally:
        dist.destroy_process_group()
    assert not lx_exec.process_group_made()
    assert torch._dynamo.config.trace_autograd_ops
    test_a_whole_step_replays_two_graphs_and_matches_cpu("sgd", monkeypatch)


def test_the_optimizer_graph_writes_parameters_and_state_in_place():
    """SGD with momentum: each step's optimizer graph donates every parameter and its
    momentum buffer (nothing else holds them), so the step holds one copy of the state."""
    torch.manual_seed(0)
    model = Decoder(SMALL).to(DEV)
    opt = OPTIMIZERS["sgd"](model.parameters())
    step = torch.compile(make_step(model, opt), backend="lazax")
    n_params = len(list(model.parameters()))
    for i in range(4):
        before = counter("DonatedBuffers")
        step(make_tokens(SMALL, i).to(DEV))
    assert counter("DonatedBuffers") - before == 2 * n_params


def test_an_lr_scheduler_inside_the_step_is_replayed_with_a_tensor_lr():
    """A tensor learning rate changes in place: no re-trace when the scheduler moves it,
    and the losses follow the CPU's schedule."""
    torch.manual_seed(0)
    ref = Decoder(SMALL)
    model = copy.deepcopy(ref).to(DEV)

    def parts(m):
        opt = torch.optim.AdamW(m.parameters(), lr=torch.tensor(1e-2))
        return opt, torch.optim.lr_scheduler.StepLR(opt, step_size=2, gamma=0.5)

    ref_step = make_step(ref, *parts(ref))
    opt, sched = parts(model)
    step = torch.compile(make_step(model, opt, sched), backend="lazax")
    for i in range(7):
        tokens = make_tokens(SMALL, i)
        expected = ref_step(tokens)
        if i == 2:
            extracted = counter("DynamoExtractCompiledGraph")
            compiles = counter("UncachedCompile")
        loss = step(tokens.to(DEV))
        torch.testing.assert_close(loss.cpu(), expected, rtol=1e-4, atol=1e-5)
    assert counter("DynamoExtractCompiledGraph") == extracted
    assert counter("UncachedCompile") == compiles
    assert float(opt.param_groups[0]["lr"].cpu()) == pytest.approx(1e-2 * 0.5**3)


def test_gradients_accumulate_across_compiled_backward_calls():
    """Two micro-batches, then the update: ``.grad`` holds the sum, as on the CPU."""
    torch.manual_seed(0)
    ref = Decoder(SMALL)
    model = copy.deepcopy(ref).to(DEV)

    def make_accumulate(m):
        def accumulate(tokens):
            loss = lm_loss(m(tokens), tokens) / 2
            loss.backward()
            return loss.detach()

        return accumulate

    ref_accumulate = make_accumulate(ref)
    accumulate = torch.compile(make_accumulate(model), backend="lazax")
    for i in range(2):
        tokens = make_tokens(SMALL, i)
        ref_accumulate(tokens)
        accumulate(tokens.to(DEV))
    for p_ref, p in zip(ref.parameters(), model.parameters()):
        torch.testing.assert_close(p.grad.cpu(), p_ref.grad, rtol=1e-4, atol=1e-5)


def test_batch_norm_statistics_and_momentum_reach_the_model_through_the_whole_step():
    """A CNN with batch norm, SGD with momentum: the running statistics the forward
    writes and the parameters the update writes are the CPU's, and a steady step is
    two executions (the first step differs: the momentum buffers do not exist yet)."""
    torch.manual_seed(0)
    cfg = CNNConfig(image=16, width=8, batch=8)
    ref = CNN(cfg)
    model = copy.deepcopy(ref).to(DEV)

    def make_cnn_step(m):
        opt = torch.optim.SGD(m.parameters(), lr=0.05, momentum=0.9)

        def forward_backward(images, labels):
            loss = F.cross_entropy(m(images), labels)
            loss.backward()
            return loss.detach()

        def step(images, labels):
            value = forward_backward(images, labels)
            opt.step()
            opt.zero_grad()
            return value

        return step

    ref_step = make_cnn_step(ref)
    step = torch.compile(make_cnn_step(model), backend="lazax")
    for i in range(5):
        images, labels = make_images(cfg, i)
        expected = ref_step(images, labels)
        runs = samples("ExecuteTime")
        loss = step(images.to(DEV), labels.to(DEV))
        if i >= 2:
            assert samples("ExecuteTime") - runs == 2
        torch.testing.assert_close(loss.cpu(), expected, rtol=1e-4, atol=1e-5)
    for (name, want), got in zip(ref.state_dict().items(), model.state_dict().values()):
        torch.testing.assert_close(got.cpu(), want, rtol=1e-3, atol=1e-4, msg=name)
