"""nn.LSTM / nn.GRU / their cells on lazax against the CPU: forward, gradients of the
input, the initial state and every parameter; no CPU fallback (the fused cells torch
uses off the CPU have lowerings)."""

import pytest
import torch
import torch.nn as nn

import lazax.executor as lx

DEV = "lazax"


def _pair(make):
    torch.manual_seed(0)
    cpu = make()
    lz = make().to(DEV)
    lz.load_state_dict(cpu.state_dict())
    return cpu, lz


def _compare(cpu, lz, inputs, first=lambda out: out[0]):
    """Outputs and gradients alike; ``inputs``: the input, then the state (a pair for
    an LSTM's), the module's call as torch's (``m(x, (h, c))``)."""
    outs = []
    for module, device in ((cpu, "cpu"), (lz, DEV)):
        args = [t.clone().to(device).requires_grad_(t.is_floating_point()) for t in inputs]
        out = first(module(args[0], tuple(args[1:])) if len(args) == 3 else module(*args))
        (
            out * torch.linspace(-1, 1, out.numel(), device=device).reshape(out.shape)
        ).sum().backward()
        outs.append((out, [a.grad for a in args], [p.grad for p in module.parameters()]))
    (o1, a1, p1), (o2, a2, p2) = outs
    torch.testing.assert_close(o2.cpu(), o1, rtol=1e-5, atol=1e-5)
    for g1, g2 in zip(a1 + p1, a2 + p2):
        torch.testing.assert_close(g2.cpu(), g1, rtol=1e-4, atol=1e-5)


@pytest.mark.parametrize(
    "make",
    [
        lambda: nn.LSTM(4, 5, num_layers=2, batch_first=True),
        lambda: nn.LSTM(4, 5, bias=False),
        lambda: nn.LSTM(4, 6, proj_size=3, bidirectional=True),
        lambda: nn.GRU(4, 5, num_layers=2, bidirectional=True),
        lambda: nn.GRU(4, 5, bias=False, batch_first=True),
    ],
    ids=[
        "lstm_2_layers",
        "lstm_no_bias",
        "lstm_proj_bidirectional",
        "gru_bidirectional",
        "gru_no_bias",
    ],
)
def test_recurrent_layers_match_the_cpu(make, no_fallback):
    cpu, lz = _pair(make)
    _compare(cpu, lz, [torch.randn(3, 2, 4)])


def test_lstm_with_an_initial_state():
    cpu, lz = _pair(lambda: nn.LSTM(4, 5, batch_first=True))
    state = (torch.randn(1, 2, 5), torch.randn(1, 2, 5))
    _compare(cpu, lz, [torch.randn(2, 3, 4), state[0], state[1]], first=lambda out: out[0])


def test_lstm_and_gru_cells(no_fallback):
    cpu, lz = _pair(lambda: nn.LSTMCell(4, 5))
    _compare(
        cpu,
        lz,
        [torch.randn(2, 4), torch.randn(2, 5), torch.randn(2, 5)],
        first=lambda o: o[0] + o[1],
    )
    cpu, lz = _pair(lambda: nn.GRUCell(4, 5))
    _compare(cpu, lz, [torch.randn(2, 4), torch.randn(2, 5)], first=lambda o: o)


def test_bfloat16_gru():
    cpu, lz = _pair(lambda: nn.GRU(4, 5).to(torch.bfloat16))
    x = torch.randn(3, 2, 4, dtype=torch.bfloat16)
    torch.testing.assert_close(lz(x.to(DEV))[0].cpu(), cpu(x)[0], rtol=2e-2, atol=2e-2)


def test_an_lstm_step_under_torch_compile_replays(no_fallback):
    import lazax.dynamo  # noqa: F401

    cpu, lz = _pair(lambda: nn.LSTM(4, 5))
    step = torch.compile(lambda m, x: m(x)[0].square().mean(), backend="lazax")
    interpreted = lx.metrics.counter_value("DynamoInterpretedGraph") or 0
    for seed in range(3):
        x = torch.randn(3, 2, 4, generator=torch.Generator().manual_seed(seed))
        torch.testing.assert_close(step(lz, x.to(DEV)).cpu(), cpu(x)[0].square().mean())
    assert (lx.metrics.counter_value("DynamoInterpretedGraph") or 0) == interpreted


@pytest.mark.parametrize(
    ("make", "lengths"),
    [
        (lambda: nn.LSTM(4, 5, batch_first=True), [4, 3, 2]),
        (lambda: nn.GRU(4, 5, batch_first=True), [4, 2, 3]),  # enforce_sorted=False
        (lambda: nn.LSTM(4, 5, batch_first=True, bidirectional=True), [2, 4, 3]),
    ],
    ids=["lstm_sorted", "gru_unsorted", "lstm_bidirectional_unsorted"],
)
def test_packed_sequences_through_a_recurrent_layer(make, lengths, no_fallback):
    # pack_padded_sequence packs on the device (batch sizes stay on the CPU, as
    # PackedSequence demands), the layer runs per step, pad_packed_sequence unpacks.
    cpu, lz = _pair(make)
    x = torch.randn(3, 4, 4)
    lengths = torch.tensor(lengths)
    sort = lengths.tolist() == sorted(lengths.tolist(), reverse=True)
    results = []
    for module, device in ((cpu, "cpu"), (lz, DEV)):
        inp = x.clone().to(device).requires_grad_()
        packed = nn.utils.rnn.pack_padded_sequence(
            inp, lengths, batch_first=True, enforce_sorted=sort
        )
        assert packed.batch_sizes.device.type == "cpu"
        out, state = module(packed)
        out, out_lengths = nn.utils.rnn.pad_packed_sequence(out, batch_first=True, total_length=5)
        hidden = state[0] if isinstance(state, tuple) else state
        (out.sum() + hidden.square().sum()).backward()
        results.append((out, out_lengths, inp.grad, [p.grad for p in module.parameters()]))
    (o1, l1, g1, p1), (o2, l2, g2, p2) = results
    torch.testing.assert_close(o2.cpu(), o1, rtol=1e-5, atol=1e-5)
    assert torch.equal(l2, l1) and l2.device.type == "cpu"
    for a, b in zip([g1, *p1], [g2, *p2]):
        torch.testing.assert_close(b.cpu(), a, rtol=1e-4, atol=1e-5)


def test_packing_refuses_what_torch_refuses():
    x = torch.randn(3, 2, 4)
    for lengths in ([1, 3], [3, 0], [3, 1, 1]):
        with pytest.raises(RuntimeError) as cpu:
            torch.ops.aten._pack_padded_sequence(x, torch.tensor(lengths), False)
        with pytest.raises(RuntimeError) as lazax:
            torch.ops.aten._pack_padded_sequence(x.to(DEV), torch.tensor(lengths), False)
        assert str(lazax.value) == str(cpu.value)
