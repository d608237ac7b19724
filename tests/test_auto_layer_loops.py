"""Automatic layer loops: an unchanged Hugging Face decoder's layer loop runs as one XLA
loop under ``lx.compile(step, scan_layers=True)`` (or ``LAZAX_SCAN_LAYERS=1``), with the
losses of the unrolled loop; loops it must not serve from a loop give the unrolled
values (layers that differ, a layer called twice, a Python ``if`` on the index,
something done between layers, intermediate outputs kept)."""

from __future__ import annotations

import copy

import pytest
import torch

import lazax.executor as lx_exec
import lazax.modes as lx
from benchmarks.models import tiny_llama
from lazax.modes.testing import last_program

transformers = pytest.importorskip("transformers")

DEV = lx.device()


def counter(name: str) -> int:
    return lx.metrics.counter_value(name) or 0


def llama(layers: int):
    torch.manual_seed(0)
    return tiny_llama(layers)


IDS = [torch.randint(0, 64, (2, 12), generator=torch.Generator().manual_seed(k)) for k in range(3)]


def _train(model, scan: bool, mode: str = "compile") -> list[float]:
    opt = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)

    def step(ids):
        opt.zero_grad(set_to_none=True)
        loss = model(ids, labels=ids).loss
        loss.backward()
        opt.step()
        return loss

    losses = []
    for ids in IDS:
        ids = ids.to(DEV)
        if mode == "compile":
            loss = lx.compile(step, scan_layers=scan)(ids)
        elif mode == "eager":
            with lx.eager_mode_context(True), lx_exec.EXECUTOR.mode(scan_layers=scan):
                loss = step(ids)
        else:  # lazy, with the flag LAZAX_SCAN_LAYERS sets
            with lx_exec.EXECUTOR.mode(scan_layers=scan):
                loss = step(ids)
            lx.sync()
        losses.append(loss.item())
    return losses


@pytest.mark.parametrize("mode", ["compile", "lazy", "eager"])
def test_an_unchanged_llama_trains_as_the_unrolled_loop(mode):
    reference = llama(3)
    expected = _train(copy.deepcopy(reference).to(DEV), scan=False, mode="lazy")
    cpu = reference(IDS[0], labels=IDS[0]).loss.item()
    loops = counter("AutoLayerLoop")
    unrolled = counter("AutoLayerLoopUnrolled")
    model = copy.deepcopy(reference).to(DEV)
    got = _train(model, scan=True, mode=mode)
    assert counter("AutoLayerLoop") - loops == len(IDS)  # one loop per forward
    assert counter("AutoLayerLoopUnrolled") == unrolled
    torch.testing.assert_close(got, expected, rtol=1e-5, atol=1e-6)
    assert got[0] == pytest.approx(cpu, rel=1e-5)


def _step_program(layers: int) -> str:
    model = llama(layers).to(DEV)
    ids = IDS[0].to(DEV)
    lx.sync()

    def step():
        with lx.compile(scan_layers=True):
            model(ids, labels=ids).loss.backward()

    return last_program(step)


def _unrolled_dots(layers: int) -> int:
    """The matmuls of the unrolled step's program (its text only: nothing compiles)."""
    model = llama(layers).to(DEV)
    ids = IDS[0].to(DEV)
    lx.sync()
    with lx_exec.EXECUTOR.mode(scan_layers=False):
        loss = model(ids, labels=ids).loss
        loss.backward()
    grads = [p.grad for p in model.parameters()]
    text = lx.program_text([loss, *grads], form="stablehlo")
    lx.sync()
    return text.count("stablehlo.dot_general")


def test_a_deeper_llama_compiles_one_layers_worth_of_program():
    one, unrolled_two = _unrolled_dots(1), _unrolled_dots(2)
    assert unrolled_two > one > 0  # a layer holds matmuls: the count tells 1 layer from 2
    two, six = (_step_program(n).count("stablehlo.dot_general") for n in (2, 6))
    # one layer's body (and what is outside the layers), whatever the depth
    assert two == six == one, (one, two, six)


def test_the_flag_comes_from_the_environment(monkeypatch):
    monkeypatch.setenv("LAZAX_SCAN_LAYERS", "1")
    assert lx_exec.config.settings().scan_layers
    monkeypatch.delenv("LAZAX_SCAN_LAYERS")
    assert not lx_exec.config.settings().scan_layers


class Body(torch.nn.Module):
    def __init__(self, width: int = 8, out: int = 8):
        super().__init__()
        self.fc = torch.nn.Linear(width, out)

    def forward(self, x, scale=1.0):
        return torch.tanh(self.fc(x)) * scale


def _loops(fn, layers):
    """``fn(layers, x)`` on the CPU, and on lazax with automatic loops on; the number of
    loops formed and of loops that ran unrolled from some layer on."""
    torch.manual_seed(1)
    x = torch.randn(3, 8)
    expected = fn(layers, x)
    moved = copy.deepcopy(layers).to(DEV)
    formed, unrolled = counter("AutoLayerLoop"), counter("AutoLayerLoopUnrolled")
    with lx.compile(scan_layers=True):
        got = fn(moved, x.to(DEV))
    got = [g.cpu() for g in got] if isinstance(got, list) else got.cpu()
    return (
        got,
        expected,
        counter("AutoLayerLoop") - formed,
        counter("AutoLayerLoopUnrolled") - unrolled,
    )


def _plain(layers, x):
    for layer in layers:
        x = layer(x)
    return x


def test_a_plain_loop_is_served_from_one_loop():
    got, expected, formed, unrolled = _loops(_plain, torch.nn.ModuleList(Body() for _ in range(4)))
    torch.testing.assert_close(got, expected.detach())
    assert (formed, unrolled) == (1, 0)


def test_kept_intermediate_outputs_are_each_layers_own():
    def keep(layers, x):
        seen = []
        for layer in layers:
            x = layer(x)
            seen.append(x)
        return seen

    got, expected, formed, unrolled = _loops(keep, torch.nn.ModuleList(Body() for _ in range(4)))
    for g, e in zip(got, expected):
        torch.testing.assert_close(g, e.detach())
    assert (formed, unrolled) == (1, 0)


@pytest.mark.parametrize(
    "body",
    [
        lambda layers, x: [x := layer(layer(x)) for layer in layers][-1],  # called twice
        lambda layers, x: [x := layer(x) * 2 for layer in layers][-1],  # work in between
        lambda layers, x: [x := layer(x, scale=1.0 + i) for i, layer in enumerate(layers)][-1],
        lambda layers, x: [x := layer(x) for i, layer in enumerate(layers) if i != 1][-1],
    ],
    ids=["called_twice", "work_between", "other_arguments", "a_layer_skipped"],
)
def test_loops_a_loop_cannot_serve_run_as_written(body):
    got, expected, formed, unrolled = _loops(body, torch.nn.ModuleList(Body() for _ in range(4)))
    torch.testing.assert_close(got, expected.detach())
    assert (formed, unrolled) == (1, 1)


class Indexed(Body):
    def __init__(self, index: int):
        super().__init__()
        self.index = index

    def forward(self, x, scale=1.0):
        return super().forward(x) if self.index % 2 else -super().forward(x)


def _without_bias() -> Body:
    body = Body()
    body.fc = torch.nn.Linear(8, 8, bias=False)
    return body


def test_layers_that_differ_never_form_a_loop():
    differ = [
        torch.nn.ModuleList([Body(), Body(), torch.nn.Linear(8, 8)]),  # another type
        torch.nn.ModuleList([Body(), _without_bias(), Body()]),  # another structure
        torch.nn.ModuleList(Indexed(i) for i in range(3)),  # a Python if on the index
    ]
    for layers in differ:
        got, expected, formed, unrolled = _loops(_plain, layers)
        torch.testing.assert_close(got, expected.detach())
        assert (formed, unrolled) == (0, 0)
