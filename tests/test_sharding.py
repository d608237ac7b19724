"""SPMD sharding over 8 virtual CPU devices (the root conftest.py sets XLA_FLAGS before
jax starts): data- and tensor-parallel results match one device, shardings are part of
the graph key, the dynamo bridge sees a sharding change on any call, bad specs fail at
``mark_sharding``."""

import copy

import pytest
import torch

import lazax.dynamo  # noqa: F401
import lazax.modes as lx
from benchmarks.models import Decoder, DecoderConfig, make_tokens

from .test_training import _decoder_step

DEV = lx.device()

pytestmark = pytest.mark.skipif(
    lx.device_count() < 8,
    reason="needs 8 devices: XLA_FLAGS=--xla_force_host_platform_device_count=8 "
    "before jax starts (the root conftest.py sets it for the test session)",
)


def counter(name):
    return lx.metrics.counter_value(name) or 0


@pytest.fixture(scope="module")
def mesh_8():
    return lx.Mesh(range(8), (8,), ("data",))


@pytest.fixture(scope="module")
def mesh_2x4():
    return lx.Mesh(range(8), (2, 4), ("data", "model"))


def test_data_parallel_decoder_training_matches_one_device(mesh_8):
    cfg = DecoderConfig(vocab=64, d_model=32, n_heads=2, n_layers=1, seq=16, batch=8)
    torch.manual_seed(0)
    ref = Decoder(cfg)
    losses = {}
    for sharded in (False, True):
        model = copy.deepcopy(ref).to(DEV)
        opt = torch.optim.AdamW(model.parameters(), lr=1e-2)
        losses[sharded] = []
        for step in range(4):
            tokens = make_tokens(cfg, step).to(DEV)
            if sharded:
                lx.mark_sharding(tokens, mesh_8, ("data", None))
            losses[sharded].append(_decoder_step(model, opt, tokens))
            lx.sync()
        if sharded:  # the batch was split: each device held one sequence
            assert set(lx.shard_shapes(tokens).values()) == {(1, cfg.seq)}
        losses[sharded] = [loss.item() for loss in losses[sharded]]
    torch.testing.assert_close(losses[True], losses[False], rtol=1e-4, atol=0)


def test_tensor_parallel_matmul_holds_one_shard_per_device(mesh_2x4):
    x = torch.randn(6, 16)
    w = torch.randn(16, 12)
    wl = w.to(DEV)
    lx.mark_sharding(wl, mesh_2x4, (None, "model"))
    assert lx.get_sharding(wl) == lx.Sharding(mesh_2x4, (None, "model"))
    # Each device holds a quarter of the columns (replicated over the "data" axis).
    assert lx.shard_shapes(wl) == {d: (16, 3) for d in range(8)}
    y = torch.nn.functional.gelu(x.to(DEV) @ wl)
    torch.testing.assert_close(y.cpu(), torch.nn.functional.gelu(x @ w), rtol=1e-5, atol=1e-5)
    assert lx.shard_shapes(y) == {d: (6, 3) for d in range(8)}
    lx.clear_sharding(wl)
    assert lx.get_sharding(wl) is None
    assert lx.shard_shapes(wl) == {0: (16, 12)}
    torch.testing.assert_close(wl.cpu(), w)


def test_a_constraint_on_pending_work_is_in_the_graph(mesh_2x4):
    x = torch.randn(8, 8)
    compiles = []
    for spec in [("data", None), ("data", None), (None, "model"), ("data", None)]:
        before = counter("UncachedCompile")
        y = x.to(DEV) * 3.0
        lx.mark_sharding(y, mesh_2x4, spec)  # y is pending: a constraint node
        assert lx.get_sharding(y) == lx.Sharding(mesh_2x4, spec)
        z = y - 1.0
        torch.testing.assert_close(z.cpu(), x * 3.0 - 1.0)
        compiles.append(counter("UncachedCompile") - before)
        # XLA laid y out as asked: 2 rows or 2 columns per device.
        want = (4, 8) if spec[0] else (8, 2)
        assert set(lx.shard_shapes(y).values()) == {want}
    assert compiles[1:] == [0, 1, 0]


def _step(x, w):
    return torch.tanh(x @ w).sum(0)


def test_the_same_shardings_never_recompile_and_a_change_compiles_once(mesh_2x4):
    torch.manual_seed(0)
    x, w = torch.randn(8, 16), torch.randn(16, 8)
    compiles = []
    for spec in [("data", None)] * 3 + [(None, None)] * 2 + [("data", None)]:
        xl, wl = x.to(DEV), w.to(DEV)
        lx.mark_sharding(wl, mesh_2x4, (None, "model"))
        lx.mark_sharding(xl, mesh_2x4, spec)
        before = counter("UncachedCompile")
        out = _step(xl, wl)
        torch.testing.assert_close(out.cpu(), _step(x, w), rtol=1e-5, atol=1e-5)
        compiles.append(counter("UncachedCompile") - before)
        if compiles[-1] and len(compiles) > 1:  # the recompile is explained
            report = lx.metrics.recompile_reports()[-1]
            assert "sharding changed from P('data', None) to replicated" in report
    # Steps 2, 3 reuse step 1; x's new sharding compiles once; switching back, nothing.
    assert compiles[1:3] == [0, 0] and compiles[3] == 1 and compiles[4:] == [0, 0]


@pytest.mark.parametrize("mode", ["eager", "compile"])
def test_eager_and_compile_modes_run_sharded_tensors(mode, mesh_2x4):
    x, w = torch.randn(8, 16), torch.randn(16, 8)
    xl, wl = x.to(DEV), w.to(DEV)
    lx.mark_sharding(xl, mesh_2x4, ("data", None))
    lx.mark_sharding(wl, mesh_2x4, (None, "model"))
    if mode == "eager":
        with lx.eager_mode_context(True):
            out = _step(xl, wl)
    else:
        out = lx.compile(_step)(xl, wl)
    torch.testing.assert_close(out.cpu(), _step(x, w), rtol=1e-5, atol=1e-5)


def test_dynamo_sees_a_sharding_change_after_ten_unchanged_calls(mesh_2x4):
    torch._dynamo.reset()
    compiled = torch.compile(_step, backend="lazax")
    w = torch.randn(16, 8)
    wl = w.to(DEV)
    lx.mark_sharding(wl, mesh_2x4, (None, "model"))
    for _ in range(10):
        x = torch.randn(8, 16)
        xl = x.to(DEV)
        lx.mark_sharding(xl, mesh_2x4, ("data", None))
        torch.testing.assert_close(compiled(xl, wl).cpu(), _step(x, w), rtol=1e-5, atol=1e-5)
    specialized = counter("DynamoSpecializeGraph")
    before = counter("UncachedCompile")
    x = torch.randn(8, 16)
    xl = x.to(DEV)
    lx.mark_sharding(xl, mesh_2x4, (None, "model"))  # the 11th call: a new sharding
    torch.testing.assert_close(compiled(xl, wl).cpu(), _step(x, w), rtol=1e-5, atol=1e-5)
    assert counter("DynamoSpecializeGraph") == specialized + 1
    assert counter("UncachedCompile") == before + 1


def test_bad_partition_specs_fail_at_mark_sharding(mesh_2x4):
    t = torch.zeros(6, 8).to(DEV)
    with pytest.raises(
        ValueError, match="names mesh axis 'tensor'.*axes are \\('data', 'model'\\)"
    ):
        lx.mark_sharding(t, mesh_2x4, (None, "tensor"))
    with pytest.raises(ValueError, match="has 1 entries, but the tensor has 2 dimensions"):
        lx.mark_sharding(t, mesh_2x4, ("data",))
    with pytest.raises(ValueError, match="uses mesh axis 'data' twice"):
        lx.mark_sharding(t, mesh_2x4, ("data", "data"))
    with pytest.raises(ValueError, match="needs 8 devices, but 4 device ids"):
        lx.Mesh(range(4), (2, 4), ("data", "model"))
    with pytest.raises(TypeError, match="takes a lazax tensor"):
        lx.mark_sharding(torch.zeros(4), mesh_2x4, ("data",))
    assert lx.get_sharding(t) is None  # nothing was changed by the failed calls


def test_donation_keeps_working_once_anything_is_sharded(mesh_8):
    # placement() once walked graph.nodes, which the graph keeps: one more holder of
    # every node, and no buffer was donated for the rest of the process
    sharded = torch.randn(16, 4).to(DEV)
    lx.mark_sharding(sharded, mesh_8, ("data", None))
    plain = torch.randn(64, 64).to(DEV)
    lx.sync()
    before = counter("DonatedBuffers")
    plain.mul_(3)
    sharded.mul_(3)
    lx.sync()
    assert counter("DonatedBuffers") - before == 2
    assert lx.get_sharding(sharded) == lx.Sharding(mesh_8, ("data", None))


def test_meshes_over_the_same_grid_are_equal(mesh_2x4):
    again = lx.Mesh(range(8), (2, 4), ("data", "model"))
    assert again == mesh_2x4 and hash(again) == hash(mesh_2x4)
    assert lx.Mesh(range(8), (4, 2), ("data", "model")) != mesh_2x4


def test_each_layout_is_made_once_and_spmd_runs_are_timed(mesh_2x4):
    mesh = lx.Mesh(range(8), (2, 4), ("rows", "cols"))  # axis names no other test uses
    made = counter("CreateOpSharding")
    for _ in range(3):
        lx.mark_sharding(torch.zeros(4, 8).to(DEV), mesh, ("rows", "cols"))
    assert counter("CreateOpSharding") == made + 1
    lx.mark_sharding(torch.zeros(4, 8, 2).to(DEV), mesh, ("cols", None, "rows"))
    assert counter("CreateOpSharding") == made + 2
    spec = ("data", "model")
    runs = (lx.metrics.metric_data("ExecuteReplicatedTime") or (0,))[0]
    single = (lx.metrics.metric_data("ExecuteTime") or (0,))[0]
    x = torch.ones(4, 8).to(DEV)
    lx.mark_sharding(x, mesh_2x4, spec)
    (x * 2).sum().item()
    (torch.ones(3).to(DEV) * 2).sum().item()  # one device: ExecuteTime only
    assert lx.metrics.metric_data("ExecuteReplicatedTime")[0] == runs + 1
    assert lx.metrics.metric_data("ExecuteTime")[0] == single + 2


def test_program_text_shows_the_shardings_xla_partitions_by():
    mesh = lx.Mesh(range(8), (2, 4, 1), ("a", "b", "c"))
    t = torch.randn(16, 16).to(DEV)
    lx.mark_sharding(t, mesh, (None, "b"))  # split 4 ways, 2 copies of each piece
    assert "parameter(0), sharding={devices=[1,4,2]" in lx.program_text([t])
    y = t @ t
    lx.mark_sharding(y, mesh, ("a", None))
    hlo = lx.program_text([y])
    assert 'custom_call_target="Sharding", sharding={devices=[2,1,4]' in hlo
    assert not lx.holds_device_data(y)


def test_a_clone_is_laid_out_as_its_source(mesh_2x4):
    x = torch.randn(8, 16).to(DEV)
    lx.mark_sharding(x, mesh_2x4, ("data", "model"))
    y = x.clone()  # pending: its layout is known before the sync
    assert not lx.holds_device_data(y)
    assert lx.get_sharding(y) == lx.get_sharding(x)
    z = (x * 2).clone()  # pending work not laid out: nothing to keep
    assert lx.get_sharding(z) is None
    row = x[0].clone()  # a view's layout is not its base's
    assert lx.get_sharding(row) is None
    w = y.clone()  # a constraint's copy is constrained alike
    assert lx.get_sharding(w) == lx.get_sharding(x)
    lx.sync()
    assert lx.get_sharding(y) == lx.get_sharding(x) == lx.get_sharding(w)
    torch.testing.assert_close(y.cpu(), x.cpu())
    torch.testing.assert_close(row.cpu(), x.cpu()[0])
    # Laid out over another Mesh object of the same grid (each test module makes its
    # own): the jax mesh finds the first one made, whose layouts are its own.
    again = lx.Mesh(range(8), (2, 4), ("data", "model"))
    v = torch.randn(8, 16).to(DEV)
    lx.mark_sharding(v, again, (None, "model"))
    assert lx.get_sharding(v.clone()) == lx.get_sharding(v)


def test_reading_a_value_over_several_devices_counts_as_torch_xla_counts_it(mesh_8):
    x = torch.randn(8, 4).to(DEV)
    reads = counter("ReplicateShardedData")
    x.cpu()  # one device
    assert counter("ReplicateShardedData") == reads
    lx.mark_sharding(x, mesh_8, ("data", None))
    x.cpu()
    (x * 2).sum().cpu()  # a result of a program over the mesh
    assert counter("ReplicateShardedData") == reads + 2
