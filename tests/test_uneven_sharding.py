"""Uneven SPMD splits over 8 virtual CPU devices: a dimension that does not divide over
its mesh axes is held padded (zeros after the value, equal pieces per device), and every
read, op, in-place update, training step, checkpoint and move sees the value's own
shape, equal to the CPU."""

import copy
import io

import numpy as np
import pytest
import torch

import lazax.dynamo  # noqa: F401
import lazax.modes as lx
from benchmarks.models import Decoder, DecoderConfig, make_tokens

from .test_sharding import DEV, counter, pytestmark  # noqa: F401 (the skip mark)
from .test_training import _decoder_step


@pytest.fixture(scope="module")
def mesh_1x8():
    return lx.Mesh(range(8), (1, 8), ("data", "model"))


@pytest.fixture(scope="module")
def grid():
    return lx.Mesh(range(8), (2, 4), ("data", "model"))


def test_a_dimension_that_does_not_divide_is_split_in_padded_pieces(mesh_1x8):
    full = torch.arange(18.0).reshape(2, 9)
    t = full.to(DEV)
    lx.mark_sharding(t, mesh_1x8, ("data", "model"))
    assert lx.get_sharding(t) == lx.Sharding(mesh_1x8, ("data", "model"))
    # 9 columns over 8 devices: pieces of 2 (16 columns held), as torch_xla pads them
    assert set(lx.shard_shapes(t).values()) == {(2, 2)}
    assert t.shape == (2, 9)
    torch.testing.assert_close(t.cpu(), full, rtol=0, atol=0)
    torch.testing.assert_close(t[:, 7:].cpu(), full[:, 7:], rtol=0, atol=0)
    assert lx.to_jax(t).shape == (2, 9)
    torch.testing.assert_close(torch.tensor(np.asarray(lx.to_jax(t))), full)


def test_ops_on_uneven_pieces_equal_the_cpu(grid):
    x, w = torch.randn(6, 10), torch.randn(10, 7)
    xl, wl = x.to(DEV), w.to(DEV)
    lx.mark_sharding(xl, grid, ("model", None))  # 6 rows over 4
    lx.mark_sharding(wl, grid, ("data", "model"))  # 10 over 2 divides, 7 over 4 not
    out = torch.relu(xl @ wl).softmax(-1) + xl.sum(-1, keepdim=True)
    expected = torch.relu(x @ w).softmax(-1) + x.sum(-1, keepdim=True)
    torch.testing.assert_close(out.cpu(), expected, rtol=1e-5, atol=1e-5)
    # the padding is no part of any reduction or shape
    torch.testing.assert_close(xl.mean().cpu(), x.mean(), rtol=1e-6, atol=1e-6)
    assert xl.reshape(-1).shape == (60,) and xl.max().item() == x.max().item()


def test_an_update_in_place_keeps_the_split_and_its_buffer(mesh_1x8):
    full = torch.randn(3, 9)
    t = full.to(DEV)
    lx.mark_sharding(t, mesh_1x8, (None, "model"))
    lx.sync()
    donated = counter("DonatedBuffers")
    for _ in range(3):
        t.mul_(2).add_(1)
        lx.sync()
        full = full * 2 + 1
    assert counter("DonatedBuffers") == donated + 3  # written over, never copied
    assert lx.get_sharding(t) == lx.Sharding(mesh_1x8, (None, "model"))
    assert set(lx.shard_shapes(t).values()) == {(3, 2)}
    torch.testing.assert_close(t.cpu(), full)


def test_a_pending_value_marked_unevenly_comes_out_split(grid):
    x = torch.randn(5, 6)
    xl = x.to(DEV)
    y = xl * 3
    lx.mark_sharding(y, grid, ("data", "model"))  # 5 over 2, 6 over 4
    z = y + 1
    lx.sync()
    assert lx.get_sharding(y) == lx.Sharding(grid, ("data", "model"))
    assert set(lx.shard_shapes(y).values()) == {(3, 2)}
    torch.testing.assert_close(y.cpu(), x * 3)
    torch.testing.assert_close(z.cpu(), x * 3 + 1)


def test_a_split_is_cached_as_any_other(mesh_1x8):
    def step(a):
        return (a * 2).sum(0)

    for i in range(3):
        a = torch.full((4, 9), float(i)).to(DEV)
        lx.mark_sharding(a, mesh_1x8, (None, "model"))
        before = counter("UncachedCompile")
        torch.testing.assert_close(step(a).cpu(), torch.full((9,), 8.0 * i))
        if i:  # the same shapes and split: no new program
            assert counter("UncachedCompile") == before


def test_clear_sharding_and_moves_give_back_the_value(mesh_1x8):
    full = torch.randn(4, 9)
    t = full.to(DEV)
    lx.mark_sharding(t, mesh_1x8, (None, "model"))
    lx.mark_sharding(t, mesh_1x8, ("model", None))  # re-split: 4 rows over 8
    assert set(lx.shard_shapes(t).values()) == {(1, 9)}
    torch.testing.assert_close(t.cpu(), full, rtol=0, atol=0)
    moved = t.to(torch.device(DEV.type, 1))
    assert lx.shard_shapes(moved) == {1: (4, 9)}
    torch.testing.assert_close(moved.cpu(), full, rtol=0, atol=0)
    lx.clear_sharding(t)
    assert lx.get_sharding(t) is None
    assert list(lx.shard_shapes(t).values()) == [(4, 9)]
    torch.testing.assert_close((t + 1).cpu(), full + 1, rtol=0, atol=0)


def test_training_with_an_uneven_vocabulary_split_matches_one_device(mesh_1x8):
    # vocab 60 over 8 devices: the embedding and the head do not divide
    cfg = DecoderConfig(vocab=60, d_model=32, n_heads=2, n_layers=1, seq=8, batch=4)
    torch.manual_seed(0)
    ref = Decoder(cfg)
    losses, params = {}, {}
    for sharded in (False, True):
        model = copy.deepcopy(ref).to(DEV)
        if sharded:
            lx.mark_sharding(model.tok.weight, mesh_1x8, ("model", None))
            lx.mark_sharding(model.head.weight, mesh_1x8, ("model", None))
        # (SGD: Adam's normalised step turns a rounding difference of a gradient near
        # zero into a whole step, and the parameters are compared too)
        opt = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)
        losses[sharded] = []
        for step in range(3):
            losses[sharded].append(_decoder_step(model, opt, make_tokens(cfg, step).to(DEV)))
            lx.sync()
        losses[sharded] = [loss.item() for loss in losses[sharded]]
        params[sharded] = {k: v.cpu() for k, v in model.state_dict().items()}
        if sharded:  # the parameters kept their split, their gradients and state took it
            state = [opt.state[p]["momentum_buffer"] for p in (model.tok.weight, model.head.weight)]
            for p in (model.tok.weight, model.head.weight, model.head.weight.grad, *state):
                assert lx.get_sharding(p) == lx.Sharding(mesh_1x8, ("model", None))
                assert set(lx.shard_shapes(p).values()) == {(8, cfg.d_model)}
    torch.testing.assert_close(losses[True], losses[False], rtol=1e-4, atol=1e-6)
    for name, value in params[False].items():
        torch.testing.assert_close(params[True][name], value, rtol=1e-4, atol=1e-5)


def test_checkpoints_hold_the_value_and_restore_the_split(mesh_1x8, tmp_path):
    full = torch.randn(9, 3)
    t = full.to(DEV)
    lx.mark_sharding(t, mesh_1x8, ("model", None))
    buffer = io.BytesIO()
    torch.save({"t": t}, buffer)
    buffer.seek(0)
    loaded = torch.load(buffer)["t"]
    assert lx.get_sharding(loaded) == lx.Sharding(mesh_1x8, ("model", None))
    torch.testing.assert_close(loaded.cpu(), full, rtol=0, atol=0)
    assert torch.load(io.BytesIO(buffer.getvalue()), map_location="cpu")["t"].shape == (9, 3)
    # the sharded checkpoint: each piece without its padding, loaded back split
    lx.distributed.save({"t": t}, str(tmp_path / "ckpt"))
    target = torch.zeros(9, 3).to(DEV)
    lx.mark_sharding(target, mesh_1x8, ("model", None))
    lx.distributed.load({"t": target}, str(tmp_path / "ckpt"))
    torch.testing.assert_close(target.cpu(), full, rtol=0, atol=0)
    assert lx.get_sharding(target) == lx.Sharding(mesh_1x8, ("model", None))


def test_the_dynamo_bridge_takes_uneven_inputs(mesh_1x8):
    compiled = torch.compile(lambda a, b: (a @ b).relu(), backend="lazax")
    a, b = torch.randn(5, 9), torch.randn(9, 4)
    al = a.to(DEV)
    lx.mark_sharding(al, mesh_1x8, (None, "model"))
    torch.testing.assert_close(compiled(al, b.to(DEV)).cpu(), (a @ b).relu(), rtol=1e-5, atol=1e-5)


def test_a_compiled_function_that_writes_an_uneven_input_keeps_its_split(mesh_1x8):
    full = torch.randn(3, 9)
    t = full.to(DEV)
    lx.mark_sharding(t, mesh_1x8, (None, "model"))
    lx.sync()
    compiled = torch.compile(lambda a: (a.mul_(2), a.sum())[1], backend="lazax")
    compiled(t)  # dynamo's first call: a compile per donation pattern
    lx.sync()
    compiles, donated = counter("UncachedCompile"), counter("DonatedBuffers")
    for _ in range(2):
        total = compiled(t)
        lx.sync()
    full = full * 8
    # the written input comes back in its padded pieces: the same signature, no compile
    assert counter("UncachedCompile") == compiles
    assert counter("DonatedBuffers") == donated + 2
    assert lx.get_sharding(t) == lx.Sharding(mesh_1x8, (None, "model"))
    assert set(lx.shard_shapes(t).values()) == {(3, 2)}
    torch.testing.assert_close(t.cpu(), full)
    torch.testing.assert_close(total.cpu(), full.sum(), rtol=1e-5, atol=1e-5)


def test_an_unsplit_input_written_beside_an_uneven_one_keeps_its_layout(mesh_1x8):
    p, q = torch.randn(3, 9), torch.randn(3, 9)
    pl, ql = p.to(DEV), q.to(DEV)
    lx.mark_sharding(pl, mesh_1x8, (None, "model"))
    lx.mark_sharding(ql, mesh_1x8, (None, None))
    lx.sync()
    pl.add_(1)
    ql.add_(1)
    lx.sync()
    assert lx.get_sharding(ql) == lx.Sharding(mesh_1x8, (None, None))
    compiled = torch.compile(lambda a, b: (a.add_(1), b.add_(1), a.sum())[2], backend="lazax")
    compiled(pl, ql)
    lx.sync()
    compiles = counter("UncachedCompile")
    compiled(pl, ql)
    lx.sync()
    assert counter("UncachedCompile") == compiles
    assert lx.get_sharding(pl) == lx.Sharding(mesh_1x8, (None, "model"))
    assert lx.get_sharding(ql) == lx.Sharding(mesh_1x8, (None, None))
    torch.testing.assert_close(pl.cpu(), p + 3)
    torch.testing.assert_close(ql.cpu(), q + 3)


def test_program_text_shows_an_uneven_update_in_place_padded(mesh_1x8):
    t = torch.randn(3, 9).to(DEV)
    lx.mark_sharding(t, mesh_1x8, (None, "model"))
    lx.sync()
    t.mul_(2)
    hlo = lx.program_text([t])
    # in and out padded (9 columns over 8 devices: 16 held), as the sync runs it
    assert "->f32[3,16]{1,0}}" in hlo.splitlines()[0]


def test_a_device_loader_splits_a_batch_that_does_not_divide(mesh_1x8):
    batches = [(torch.randn(7, 3), torch.arange(7)) for _ in range(2)]
    loader = lx.DeviceLoader(batches, sharding=lx.Sharding(mesh_1x8, ("model",)))
    for (x, y), (x_cpu, y_cpu) in zip(loader, batches):
        assert x.shape == (7, 3) and lx.get_sharding(x) == lx.Sharding(mesh_1x8, ("model", None))
        assert set(lx.shard_shapes(x).values()) == {(1, 3)}  # 7 rows over 8: one each
        torch.testing.assert_close(x.cpu(), x_cpu, rtol=0, atol=0)
        torch.testing.assert_close((x.sum(0) + y.sum()).cpu(), x_cpu.sum(0) + y_cpu.sum())


def test_eager_ops_and_compiled_regions_take_uneven_pieces(grid):
    x = torch.randn(6, 5)
    with lx.eager_mode_context(True):
        xl = x.to(DEV)
        lx.mark_sharding(xl, grid, ("model", "data"))  # 6 over 4, 5 over 2
        y = (xl * 2).exp()
        assert lx.holds_device_data(y)
        xl.add_(1)  # an eager op in place keeps the split
        assert lx.get_sharding(xl) == lx.Sharding(grid, ("model", "data"))
    torch.testing.assert_close(y.cpu(), (x * 2).exp())
    torch.testing.assert_close(xl.cpu(), x + 1)
    step = lx.compile(lambda a: (a @ a.T).tanh())
    torch.testing.assert_close(step(xl).cpu(), ((x + 1) @ (x + 1).T).tanh(), rtol=1e-5, atol=1e-5)
