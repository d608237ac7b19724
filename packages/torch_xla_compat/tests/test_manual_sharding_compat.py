"""torch_xla's manual sharding (``xs.enable_manual_sharding`` /
``xs.disable_manual_sharding``, ``xs._mark_manual_sharding`` and ``_XLAC``'s shape
conversions) against its documented behaviour: a tensor of each device's piece whose
sharding reads ``{manual}``, ops on each device's own piece, and the pieces put back.
Needs 8 devices (the root conftest.py gives the CPU 8)."""

import pytest
import torch
import torch_xla
import torch_xla._XLAC as xlac
import torch_xla.distributed.spmd as xs

import lazax.modes as lx

pytestmark = pytest.mark.skipif(lx.device_count() < 8, reason="needs 8 devices")


@pytest.fixture
def global_mesh():
    before = xs.get_global_mesh()
    mesh = xs.Mesh(range(8), (2, 4), ("data", "model"))
    xs.set_global_mesh(mesh)
    yield mesh
    xs.set_global_mesh(before)


def test_enable_gives_each_devices_piece_and_disable_puts_them_back(global_mesh):
    x = torch.randn(8, 8)
    piece = xs.enable_manual_sharding(x.to(torch_xla.device()), ("data", "model"))
    assert isinstance(piece, xs.XLAShardedTensor) and piece.shape == (4, 2)
    assert piece.sharding_spec == "{manual}" and piece.sharding_type == xs.ShardingType.MANUAL
    # each device's own piece, shifted by its own mean
    moved = piece.global_tensor - piece.global_tensor.mean()
    out = xs.disable_manual_sharding(moved, ("data", "model"), (8, 8))
    assert out.shape == (8, 8) and out.sharding_type == xs.ShardingType.TILED
    blocks = [[b - b.mean() for b in r.chunk(4, dim=1)] for r in x.chunk(2, dim=0)]
    expected = torch.cat([torch.cat(r, dim=1) for r in blocks])
    torch.testing.assert_close(out.cpu(), expected)


def test_the_xlac_shape_conversions_follow_the_tensors_sharding():
    mesh = xs.Mesh(range(8), (1, 8), ("x", "y"))
    x = torch.zeros(8, 16, device=torch_xla.device())
    with pytest.raises(RuntimeError, match="no sharding"):
        xlac._spmd_full_to_shard_shape(x)
    xt = xs.mark_sharding(x, mesh, (0, 1))
    piece = xlac._spmd_full_to_shard_shape(xt.global_tensor)
    assert piece.shape == (8, 2) and xlac._get_xla_sharding_spec(piece) == "{manual}"
    full = xlac._spmd_shard_to_full_shape(
        piece + 1, mesh.get_op_sharding((0, 1)), (8, 16), torch.float32
    )
    torch.testing.assert_close(full.cpu(), torch.ones(8, 16))
    with pytest.raises(RuntimeError, match="not in manual sharding"):
        xlac._spmd_shard_to_full_shape(full, mesh.get_op_sharding((0, 1)), (8, 16), full.dtype)
    # torch_xla's replicated OpSharding: every device gave the whole value
    whole = xs._mark_manual_sharding(full * 2)
    assert whole.sharding_spec == "{manual}"
    replicated = xlac.OpSharding([], [], [], xs.ShardingType.REPLICATED)
    back = xlac._spmd_shard_to_full_shape(whole.global_tensor, replicated, (8, 16), torch.float32)
    torch.testing.assert_close(back.cpu(), torch.full((8, 16), 2.0))
    with pytest.raises(RuntimeError, match="get_op_sharding"):
        xlac.OpSharding([0, 1], [], [], xs.ShardingType.TILED)


def test_mark_manual_sharding_refuses_data_already_on_the_device():
    x = torch.zeros(3, 2).to(torch_xla.device())  # a transfer: data on the device
    with pytest.raises(RuntimeError, match="already on the device"):
        xs._mark_manual_sharding(x)
    marked = xs._mark_manual_sharding(x + 1)
    assert marked.sharding_type == xs.ShardingType.MANUAL
    # a value per device has no single value to read
    with pytest.raises(RuntimeError, match="disable_manual_sharding"):
        marked.global_tensor.cpu()


def test_enable_shards_the_tensor_itself_first(global_mesh):
    x = torch.randn(8, 8).to(torch_xla.device())
    xs.enable_manual_sharding(x, ("data", None))
    assert (
        xlac._get_xla_sharding_spec(x) == "{devices=[2,1,4]0,1,2,3,4,5,6,7 last_tile_dim_replicate}"
    )


def test_spmd_all_reduce_reduces_over_the_mesh_axes_its_groups_are_rows_of(global_mesh):
    x = torch.randn(8, 8)
    piece = xs.enable_manual_sharding(x.to(torch_xla.device()), ("data", "model")).global_tensor
    cell = piece.sum().reshape(1, 1)
    # the rows of "model": devices 0-3 and 4-7 (the mesh is range(8) as (2, 4))
    summed = xlac._xla_spmd_all_reduce("sum", cell, 0.5, [[0, 1, 2, 3], [4, 5, 6, 7]])
    out = xs.disable_manual_sharding(summed, ("data", "model"), (2, 4)).global_tensor
    expected = x.reshape(2, 4, 8).sum((1, 2)).mul(0.5).unsqueeze(1).expand(2, 4)
    torch.testing.assert_close(out.cpu(), expected)
    everyone = xlac._xla_spmd_all_reduce("max", cell, 1.0, [list(range(8))])
    out = xs.disable_manual_sharding(everyone, ("data", "model"), (2, 4)).global_tensor
    torch.testing.assert_close(out.cpu(), x.reshape(2, 4, 4, 2).sum((1, 3)).max().expand(2, 4))
    with pytest.raises(RuntimeError, match="not the rows of any"):
        xlac._xla_spmd_all_reduce("sum", cell, 1.0, [[0, 5], [1, 2, 3, 4, 6, 7]])
    with pytest.raises(RuntimeError, match="not in manual sharding"):
        xlac._xla_spmd_all_reduce("sum", x.to(torch_xla.device()), 1.0, [list(range(8))])


def test_spmd_reduce_scatter_keeps_each_devices_part_of_the_groups_sum(global_mesh):
    # torch_xla's own use: every device holds the whole (8, 8) ones, one group of all 8
    x = xs.enable_manual_sharding(torch.ones(8, 8).to(torch_xla.device()), (None, None))
    part = xlac._xla_spmd_reduce_scatter("sum", x.global_tensor, 1.0, -1, 8, [list(range(8))])
    assert part.shape == (8, 1)
    out = xs.disable_manual_sharding(part, (None, ("data", "model")), (8, 8)).global_tensor
    torch.testing.assert_close(out.cpu(), torch.full((8, 8), 8.0))
    with pytest.raises(RuntimeError, match="shard_count is 4"):
        xlac._xla_spmd_reduce_scatter("sum", x.global_tensor, 1.0, 0, 4, [list(range(8))])


def test_spmd_reduce_scatter_refuses_groups_out_of_the_meshs_order(global_mesh):
    x = xs.enable_manual_sharding(torch.ones(8, 8).to(torch_xla.device()), (None, None))
    with pytest.raises(RuntimeError, match="not the rows of any"):  # part i: i-th device
        xlac._xla_spmd_reduce_scatter("sum", x.global_tensor, 1.0, 0, 8, [[7, 6, 5, 4, 3, 2, 1, 0]])
