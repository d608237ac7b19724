"""lx.scan_layers: identical layers as one XLA loop. Trained in every mode against the
unrolled loop on the CPU (attention, LayerNorm, buffers, an extra input every layer
takes), AdamW over stacked parameters and moments with a checkpoint that resumes,
dropout against the unrolled loop on lazax with the same seed, checkpoints across
scanned and unrolled models, a step's program that does not grow with depth (the
optimizer's update included), compile counts, and the layers it must refuse."""

from __future__ import annotations

import copy
import math

import pytest
import torch
import torch.nn.functional as F

import lazax.modes as lx
from lazax.modes.testing import last_program, train_in_mode

DEV = lx.device()
WIDTH, HEADS, SEQ = 16, 2, 6


def counter(name: str) -> int:
    return lx.metrics.counter_value(name) or 0


class Block(torch.nn.Module):
    """A pre-norm transformer block: attention with a causal mask passed in, an MLP,
    dropout, and a buffer (a per-channel gain)."""

    def __init__(self, dropout: float = 0.0):
        super().__init__()
        self.norm1 = torch.nn.LayerNorm(WIDTH)
        self.norm2 = torch.nn.LayerNorm(WIDTH)
        self.qkv = torch.nn.Linear(WIDTH, 3 * WIDTH)
        self.proj = torch.nn.Linear(WIDTH, WIDTH)
        self.up = torch.nn.Linear(WIDTH, 2 * WIDTH)
        self.down = torch.nn.Linear(2 * WIDTH, WIDTH)
        self.drop = torch.nn.Dropout(dropout)
        self.register_buffer("gain", torch.linspace(0.5, 1.5, WIDTH))

    def forward(self, x, mask):
        b, s, w = x.shape
        q, k, v = self.qkv(self.norm1(x)).chunk(3, dim=-1)
        q, k, v = (t.reshape(b, s, HEADS, -1).transpose(1, 2) for t in (q, k, v))
        scores = q @ k.transpose(-1, -2) / math.sqrt(w // HEADS) + mask
        h = (scores.softmax(-1) @ v).transpose(1, 2).reshape(b, s, w)
        x = x + self.drop(self.proj(h))
        return x + self.drop(self.down(F.gelu(self.up(self.norm2(x))))) * self.gain


class Stack(torch.nn.Module):
    def __init__(self, depth: int = 4, dropout: float = 0.0, scan: bool = False, ckpt=False):
        super().__init__()
        self.embed = torch.nn.Linear(WIDTH, WIDTH)
        self.layers = torch.nn.ModuleList(Block(dropout) for _ in range(depth))
        self.scan, self.ckpt = scan, ckpt

    def forward(self, x):
        mask = torch.full((SEQ, SEQ), float("-inf"), device=x.device).triu(1)
        x = self.embed(x)
        if self.scan:
            return lx.scan_layers(self.layers, x, mask, checkpoint=self.ckpt)
        for layer in self.layers:
            x = layer(x, mask)
        return x


def _data(steps: int):
    g = torch.Generator().manual_seed(3)
    return [
        (torch.randn(2, SEQ, WIDTH, generator=g), torch.randn(2, SEQ, WIDTH, generator=g))
        for _ in range(steps)
    ]


def _train(model, data, mode: str, device=None) -> list[float]:
    # SGD: the key projection's bias has a gradient of rounding noise only (softmax
    # ignores a shift shared by a row), which Adam would scale up to a full step.
    opt = torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9)
    return train_in_mode(model, data, mode, opt, device)


@pytest.mark.parametrize("ckpt", [False, True], ids=["stored", "checkpointed"])
@pytest.mark.parametrize("mode", ["lazy", "eager", "compile", "dynamo"])
def test_scanned_blocks_train_as_the_unrolled_loop_on_the_cpu(mode, ckpt):
    torch.manual_seed(0)
    reference = Stack(4)
    model = copy.deepcopy(reference)
    model.scan, model.ckpt = True, ckpt
    data = _data(4)
    expected = _train(reference, data, "lazy")
    got = _train(model.to(DEV), data, mode, DEV)
    torch.testing.assert_close(got, expected, rtol=1e-5, atol=1e-6)
    for (name, p_ref), p in zip(reference.named_parameters(), model.parameters()):
        torch.testing.assert_close(p.detach().cpu(), p_ref.detach(), rtol=1e-4, atol=1e-5, msg=name)


def _step_program(depth: int, scan: bool, optimizer=torch.optim.SGD) -> str:
    """The StableHLO lazax hands XLA for one lazy training step of the stack."""
    torch.manual_seed(0)
    model = Stack(depth, scan=scan).to(DEV)
    opt = optimizer(model.parameters(), lr=0.1)
    x, y = (t.to(DEV) for t in _data(1)[0])
    lx.sync()

    def step():
        opt.zero_grad()
        F.mse_loss(model(x), y).backward()
        opt.step()
        lx.sync()

    return last_program(step)


def test_the_program_holds_one_layer_whatever_the_depth():
    dots = {
        (depth, scan): _step_program(depth, scan).count("stablehlo.dot_general")
        for depth in (2, 6)
        for scan in (False, True)
    }
    assert dots[(2, True)] == dots[(6, True)]  # one layer's forward and backward
    assert dots[(6, False)] > 2 * dots[(2, False)] - dots[(2, True)]  # unrolled grows
    assert dots[(6, True)] < dots[(6, False)] / 2


def _ops(program: str) -> int:
    return sum(line.lstrip().startswith("%") for line in program.splitlines())


def test_the_optimizer_updates_every_layer_at_once():
    """Each layer's parameter is a row of one stacked tensor per name, and so are its
    gradient and its optimizer state: the optimizer's foreach runs once per name, so
    the whole step's program (the update included) has as many ops at any depth."""
    for optimizer in (torch.optim.SGD, torch.optim.AdamW):
        programs = {depth: _step_program(depth, True, optimizer) for depth in (2, 6)}
        assert _ops(programs[2]) == _ops(programs[6]), optimizer.__name__
        unrolled = _step_program(6, False, optimizer)
        assert _ops(programs[6]) < _ops(unrolled), optimizer.__name__


def test_steady_steps_compile_nothing():
    torch.manual_seed(0)
    model = Stack(3, scan=True).to(DEV)
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    compiles = []
    for x, y in _data(4):
        before = counter("UncachedCompile")
        opt.zero_grad()
        F.mse_loss(model(x.to(DEV)), y.to(DEV)).backward()
        opt.step()
        lx.sync()
        compiles.append(counter("UncachedCompile") - before)
    # The first step, then nothing: the first step is the steady step (the parameters
    # still pending since .to() are the same roots, ordered by hash), as unrolled.
    assert compiles == [1, 0, 0, 0], compiles


def test_dropout_draws_what_the_unrolled_loop_draws():
    torch.manual_seed(0)
    unrolled = Stack(3, dropout=0.3).to(DEV)
    scanned = copy.deepcopy(unrolled)
    scanned.scan = True
    x = torch.randn(2, SEQ, WIDTH).to(DEV)
    outs = []
    for model in (unrolled, scanned):
        torch.manual_seed(7)
        out = model(x)
        out.sum().backward()
        lx.sync()  # one graph, not one per gradient read
        outs.append((out.cpu(), [p.grad.cpu() for p in model.parameters()]))
    torch.testing.assert_close(outs[1][0], outs[0][0], rtol=1e-5, atol=1e-6)
    for g_scan, g_unrolled in zip(outs[1][1], outs[0][1]):
        torch.testing.assert_close(g_scan, g_unrolled, rtol=1e-4, atol=1e-5)
    # A second call draws new masks, as the unrolled loop does.
    torch.manual_seed(8)
    assert not torch.equal(scanned(x).cpu(), outs[1][0])


def test_a_checkpoint_moves_between_scanned_and_unrolled_models(tmp_path):
    torch.manual_seed(0)
    scanned = Stack(3, scan=True).to(DEV)
    _train(scanned, _data(2), "lazy", DEV)
    path = tmp_path / "scanned.pt"
    torch.save(scanned.state_dict(), path)
    unrolled = Stack(3)
    unrolled.load_state_dict(torch.load(path, map_location="cpu"))
    x = torch.randn(2, SEQ, WIDTH)
    torch.testing.assert_close(scanned(x.to(DEV)).cpu(), unrolled(x).detach(), rtol=1e-5, atol=1e-6)
    assert [n for n, _ in scanned.state_dict().items()] == list(unrolled.state_dict())


class MLPBlock(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.norm = torch.nn.LayerNorm(WIDTH)
        self.up = torch.nn.Linear(WIDTH, 2 * WIDTH)
        self.down = torch.nn.Linear(2 * WIDTH, WIDTH)

    def forward(self, x):
        return x + self.down(F.gelu(self.up(self.norm(x))))


class MLPStack(torch.nn.Module):
    def __init__(self, depth: int, scan: bool = False):
        super().__init__()
        self.layers = torch.nn.ModuleList(MLPBlock() for _ in range(depth))
        self.scan = scan

    def forward(self, x):
        if self.scan:
            return lx.scan_layers(self.layers, x)
        for layer in self.layers:
            x = layer(x)
        return x


@pytest.mark.parametrize("mode", ["lazy", "eager", "compile", "dynamo"])
def test_adamw_trains_scanned_blocks_as_the_cpu_in_every_mode(mode):
    torch.manual_seed(0)
    reference = MLPStack(3)
    model = copy.deepcopy(reference).to(DEV)
    model.scan = True
    data = _data(4)
    expected = train_in_mode(
        reference, data, "lazy", torch.optim.AdamW(reference.parameters(), lr=1e-2)
    )
    opt = torch.optim.AdamW(model.parameters(), lr=1e-2)
    got = train_in_mode(model, data, mode, opt, DEV)
    torch.testing.assert_close(got, expected, rtol=1e-5, atol=1e-6)
    for (name, p_ref), p in zip(reference.named_parameters(), model.parameters()):
        torch.testing.assert_close(p.detach().cpu(), p_ref.detach(), rtol=1e-4, atol=1e-5, msg=name)


def _adamw_steps(model, opt, data, device=None) -> list[float]:
    losses = []
    for x, y in data:
        if device is not None:
            x, y = x.to(device), y.to(device)
        opt.zero_grad()
        loss = F.mse_loss(model(x), y)
        loss.backward()
        opt.step()
        if device is not None:
            lx.sync()  # the step's graph
        losses.append(loss.item())
    return losses


def test_scanned_layers_run_under_inference_mode_and_train_after():
    """Under torch.inference_mode the parameters stay where they are (an inference
    tensor cannot become a parameter's data); training afterwards stacks them."""
    torch.manual_seed(0)
    reference = MLPStack(3)
    model = copy.deepcopy(reference).to(DEV)
    model.scan = True
    x = torch.randn(2, SEQ, WIDTH)
    with torch.inference_mode():
        got = model(x.to(DEV)).cpu()
    torch.testing.assert_close(got, reference(x).detach(), rtol=1e-5, atol=1e-6)
    data = _data(2)
    expected = _adamw_steps(reference, torch.optim.AdamW(reference.parameters(), lr=1e-2), data)
    got = _adamw_steps(model, torch.optim.AdamW(model.parameters(), lr=1e-2), data, DEV)
    torch.testing.assert_close(got, expected, rtol=1e-5, atol=1e-6)


class _TwoKindsOfState(torch.optim.Optimizer):
    """Asks, per parameter and step, for zeros of another dtype, then of its own."""

    def __init__(self, params):
        super().__init__(params, {})

    @torch.no_grad()
    def step(self, closure=None):
        for group in self.param_groups:
            for p in group["params"]:
                state = self.state[p]
                if not state:
                    state["wide"] = torch.zeros_like(p, dtype=torch.float64)
                    state["same"] = torch.zeros_like(p)
                state["wide"].add_(p.grad.double())
                state["same"].add_(p.grad)
                p.sub_(0.1 * state["same"])


def test_optimizer_state_of_two_dtypes_per_row_is_made_right():
    torch.manual_seed(0)
    reference = MLPStack(3)
    model = copy.deepcopy(reference).to(DEV)
    model.scan = True
    opts = [_TwoKindsOfState(m.parameters()) for m in (reference, model)]
    for x, y in _data(2):
        for m, opt, dev in ((reference, opts[0], None), (model, opts[1], DEV)):
            if dev is not None:
                x, y = x.to(dev), y.to(dev)
            opt.zero_grad()
            F.mse_loss(m(x), y).backward()
            opt.step()
        lx.sync()
    for p_ref, p in zip(reference.parameters(), model.parameters()):
        expected, got = opts[0].state[p_ref], opts[1].state[p]
        assert got["wide"].dtype == torch.float64 and got["same"].dtype == p.dtype
        torch.testing.assert_close(got["wide"].cpu(), expected["wide"], rtol=1e-5, atol=1e-6)
        torch.testing.assert_close(got["same"].cpu(), expected["same"], rtol=1e-5, atol=1e-6)
        torch.testing.assert_close(p.detach().cpu(), p_ref.detach(), rtol=1e-5, atol=1e-6)


def test_adamw_trains_scanned_layers_as_the_cpu_and_resumes_from_a_checkpoint(tmp_path):
    """AdamW over a scanned stack, whose parameters, gradients and moments are rows of
    stacked tensors: one compile, values as the unrolled loop's on the CPU, the same
    Parameter objects throughout, and a checkpoint of model and optimizer that resumes
    on a fresh scanned model."""
    torch.manual_seed(0)
    reference = MLPStack(4)
    model = copy.deepcopy(reference).to(DEV)
    model.scan = True
    params = [id(p) for p in model.parameters()]
    opt_ref = torch.optim.AdamW(reference.parameters(), lr=1e-2)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-2)
    data = _data(5)
    lx.sync()
    before = counter("UncachedCompile")
    got = _adamw_steps(model, opt, data[:3], DEV)
    assert counter("UncachedCompile") - before == 1
    expected = _adamw_steps(reference, opt_ref, data[:3])
    torch.testing.assert_close(got, expected, rtol=1e-5, atol=1e-6)
    assert [id(p) for p in model.parameters()] == params
    torch.save({"model": model.state_dict(), "opt": opt.state_dict()}, tmp_path / "ckpt.pt")

    saved = torch.load(tmp_path / "ckpt.pt", map_location="cpu")
    resumed = MLPStack(4, scan=True).to(DEV)
    resumed.load_state_dict(saved["model"])
    opt_resumed = torch.optim.AdamW(resumed.parameters(), lr=1e-2)
    opt_resumed.load_state_dict(saved["opt"])
    got = _adamw_steps(resumed, opt_resumed, data[3:], DEV)
    expected = _adamw_steps(reference, opt_ref, data[3:])
    torch.testing.assert_close(got, expected, rtol=1e-5, atol=1e-6)
    for (name, p_ref), p in zip(reference.named_parameters(), resumed.parameters()):
        torch.testing.assert_close(p.detach().cpu(), p_ref.detach(), rtol=1e-4, atol=1e-5, msg=name)


class Indexed(torch.nn.Module):
    def __init__(self, index: int):
        super().__init__()
        self.fc = torch.nn.Linear(4, 4)
        self.index = index

    def forward(self, x):
        if self.index % 2:  # a Python if on the layer's index
            return self.fc(x).relu()
        return self.fc(x)


class Counting(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.fc = torch.nn.Linear(4, 4)
        self.register_buffer("calls", torch.zeros(()))

    def forward(self, x):
        self.calls += 1
        return self.fc(x)


class Reading(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.fc = torch.nn.Linear(4, 4)

    def forward(self, x):
        return self.fc(x) * float(x.sum())


def test_layers_that_cannot_loop_raise_saying_which_and_why():
    x = torch.randn(2, 4).to(DEV)
    widths = torch.nn.ModuleList([torch.nn.Linear(4, 4), torch.nn.Linear(4, 4, bias=False)])
    with pytest.raises(ValueError, match="layer 1 differs from layer 0: its parameter bias"):
        lx.scan_layers(widths.to(DEV), x)
    with pytest.raises(ValueError, match="layer 1 does not compute what layer 0 does"):
        lx.scan_layers(torch.nn.ModuleList(Indexed(i) for i in range(3)).to(DEV), x)
    with pytest.raises(ValueError, match=r"layer 0 writes \['calls'\] in place"):
        lx.scan_layers(torch.nn.ModuleList(Counting() for _ in range(2)).to(DEV), x)
    with pytest.raises(ValueError, match="cannot read values on the host"):
        lx.scan_layers(torch.nn.ModuleList(Reading() for _ in range(2)).to(DEV), x)
    wrong = torch.nn.ModuleList(torch.nn.Linear(4, 3) for _ in range(2)).to(DEV)
    with pytest.raises(ValueError, match="returned torch.float32"):
        lx.scan_layers(wrong, x)
    # On CPU tensors it is the plain loop.
    cpu = torch.nn.ModuleList(Indexed(i) for i in range(3))
    y = torch.randn(2, 4)
    expected = cpu[2](cpu[1](cpu[0](y)))
    torch.testing.assert_close(lx.scan_layers(cpu, y), expected)
