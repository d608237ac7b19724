"""``xs.XLAShardedTensor`` (what ``xs.mark_sharding`` returns) against torch_xla's
documented behaviour: the global tensor, per-device shards, sharding type and text,
loading shards back, and torch ops on it being its global tensor's. Needs 8 devices
(the root conftest.py gives the CPU 8)."""

import pytest
import torch
import torch_xla
import torch_xla._XLAC as xlac
import torch_xla.distributed.spmd as xs

import lazax.modes as lx

needs_8 = pytest.mark.skipif(lx.device_count() < 8, reason="needs 8 devices")


def _mesh(shape=(2, 4), names=("a", "b")):
    return xs.Mesh(range(8), shape, names)


@needs_8
def test_mark_sharding_returns_a_wrapper_of_the_tensor_it_shards():
    t = torch.zeros(4, 8, device=torch_xla.device())
    st = xs.mark_sharding(t, _mesh(), ("a", "b"))
    assert isinstance(st, xs.XLAShardedTensor)
    assert st.global_tensor is t
    assert st.shape == t.shape and st.dtype == t.dtype and st.device == t.device
    assert st.sharding_spec == xlac._get_xla_sharding_spec(t) == "{devices=[2,4]0,1,2,3,4,5,6,7}"
    # Marking the wrapper again shards the same global tensor.
    again = xs.mark_sharding(st, _mesh(), (None, "b"))
    assert again.global_tensor is t
    assert "last_tile_dim_replicate" in xlac._get_xla_sharding_spec(st)


@needs_8
def test_sharding_type_tiled_partial_replicated_and_none():
    dev = torch_xla.device()
    kinds = {("a", "b"): "TILED", ("b", None): "PARTIAL", (None, None): "REPLICATED"}
    for spec, kind in kinds.items():
        st = xs.mark_sharding(torch.zeros(8, 8, device=dev), _mesh(), spec)
        assert st.sharding_type == xs.ShardingType[kind], spec
        assert xlac._get_xla_sharding_type(st) == xs.ShardingType[kind].value
    assert xlac._get_xla_sharding_type(torch.zeros(2, device=dev)) is None
    assert xs.XLAShardedTensor(torch.zeros(2, device=dev)).sharding_type is None


@needs_8
def test_local_shards_are_each_devices_piece_in_device_order():
    value = torch.arange(64.0).reshape(8, 8)
    st = xs.mark_sharding(value.to(torch_xla.device()), _mesh((4, 2)), (None, 1))
    shards = st.local_shards
    assert [s.shard_device for s in shards] == [f"xla:{i}" for i in range(8)]
    for i, s in enumerate(shards):
        cols = slice(4 * (i % 2), 4 * (i % 2) + 4, 1)
        assert s.indices == [slice(0, 8, 1), cols]
        assert s.data.device.type == "cpu"
        torch.testing.assert_close(s.data, value[:, cols])
        torch.testing.assert_close(s.unpadded_data, s.data)
        # Devices holding the same piece count its copies in device order.
        assert s.replica_id == i // 2 and s.global_ordinal == i


@needs_8
def test_local_shards_of_a_replicated_tensor_hold_the_whole_value():
    value = torch.arange(6, dtype=torch.int32)
    st = xs.mark_sharding(value.to(torch_xla.device()), _mesh(), (None,))
    shards = st.local_shards
    assert len(shards) == 8
    assert all(s.indices is Ellipsis for s in shards)
    assert [s.replica_id for s in shards] == list(range(8))
    for s in shards:
        assert torch.equal(s.data, value)


@needs_8
def test_local_shards_follow_a_mesh_with_devices_out_of_order():
    mesh = xs.Mesh([7, 6, 5, 4, 3, 2, 1, 0], (8,), ("x",))
    value = torch.arange(8.0)
    st = xs.mark_sharding(value.to(torch_xla.device()), mesh, ("x",))
    for s in st.local_shards:
        # Device 7 holds the first element: the mesh's first position.
        assert s.indices == [slice(7 - s.global_ordinal, 8 - s.global_ordinal, 1)]
        torch.testing.assert_close(s.data, value[s.indices[0]])


@needs_8
def test_load_local_shards_writes_pieces_back_and_keeps_the_sharding():
    value = torch.arange(32.0).reshape(4, 8)
    st = xs.mark_sharding(value.to(torch_xla.device()), _mesh(), ("a", "b"))
    before = st.sharding_spec
    shards = st.local_shards
    for s in shards:
        s.data += 100
    st.load_local_shards_(shards)
    assert st.sharding_spec == before
    torch.testing.assert_close(st.cpu(), value + 100)
    with pytest.raises(RuntimeError, match="shards given"):
        st.load_local_shards_(shards[1:])
    shards[0].data = torch.zeros(3, 3)
    with pytest.raises(RuntimeError, match="shape"):
        st.load_local_shards_(shards)
    rep = xs.mark_sharding(value.to(torch_xla.device()), _mesh(), (None, None))
    with pytest.raises(RuntimeError, match="replicated"):
        rep.load_local_shards_(rep.local_shards)


@needs_8
def test_uneven_shards_are_zero_padded_and_load_back():
    # 10 rows over 4 devices: pieces of 3, the last one 1 row of value and 2 of zeros
    value = torch.arange(30.0).reshape(10, 3)
    st = xs.mark_sharding(value.to(torch_xla.device()), _mesh(), ("b", None))
    shards = st.local_shards
    for s in shards:
        row = int(s.global_ordinal) % 4
        start, stop = min(3 * row, 10), min(3 * row + 3, 10)
        assert s.data.shape == (3, 3)
        assert s.indices == [slice(start, stop, 1), slice(0, 3, 1)]
        torch.testing.assert_close(s.unpadded_data, value[start:stop])
        torch.testing.assert_close(s.data[stop - start :], torch.zeros(3 - (stop - start), 3))
    for s in shards:
        s.data += 1
    st.load_local_shards_(shards)
    torch.testing.assert_close(st.cpu(), value + 1)
    assert st.sharding_spec == "{devices=[4,1,2]0,4,1,5,2,6,3,7 last_tile_dim_replicate}"


@needs_8
def test_a_global_tensor_from_cpu_shards():
    mesh = _mesh((8,), ("x",))
    tiled = mesh.get_op_sharding(("x",))
    shards = [torch.arange(3) + 3 * i for i in range(8)]
    t = xlac._global_tensor_from_cpu_shards(shards, tiled)
    torch.testing.assert_close(t.cpu(), torch.arange(24))
    assert xlac._get_xla_sharding_spec(t) == "{devices=[8]0,1,2,3,4,5,6,7}"
    # A shorter global shape: the high end of the shards is padding
    t = xlac._global_tensor_from_cpu_shards(shards, tiled, torch.Size((22,)))
    torch.testing.assert_close(t.cpu(), torch.arange(22))
    for shape in ((16,), (25,), (3, 8)):  # more padding than a split makes, or no fit
        with pytest.raises(RuntimeError, match="do not make|dimensions"):
            xlac._global_tensor_from_cpu_shards(shards, tiled, torch.Size(shape))
    with pytest.raises(RuntimeError, match="one CPU shard per device"):
        xlac._global_tensor_from_cpu_shards(shards[:-1], tiled)
    # Replicated over a 2-D mesh: any rank; each device gives the whole value
    grid = _mesh((4, 2), ("a", "b"))
    t = xlac._global_tensor_from_cpu_shards(
        [torch.ones(2, 5)] * 8, grid.get_op_sharding((None, None))
    )
    torch.testing.assert_close(t.cpu(), torch.ones(2, 5))
    # Partly replicated: devices 0, 2, 4, 6 hold column 0, the others column 1
    shards = [torch.tensor([[i % 2]]) for i in range(8)]
    t = xlac._global_tensor_from_cpu_shards(shards, grid.get_op_sharding((None, "b")))
    torch.testing.assert_close(t.cpu(), torch.tensor([[0, 1]]))


@needs_8
def test_ops_run_on_the_global_tensor_and_device_results_stay_wrapped():
    value = torch.randn(8, 16)
    lin = torch.nn.Linear(16, 4).to(torch_xla.device())
    t = value.to(torch_xla.device())
    st = xs.mark_sharding(t, _mesh(), ("a", None))
    out = lin(st)  # a plain lazax weight and bias with the wrapper
    assert isinstance(out, xs.XLAShardedTensor) and "XLAShardedTensor" in repr(out)
    torch.testing.assert_close(out.cpu(), lin.cpu()(value), rtol=1e-4, atol=1e-4)
    assert type(st.cpu()) is torch.Tensor and isinstance(st.shape, torch.Size)
    values, _ = st.max(dim=1)
    assert isinstance(values, xs.XLAShardedTensor)
    st.mul_(2)  # in place: the global tensor is written
    torch.testing.assert_close(t.cpu(), value * 2)


@needs_8
def test_autograd_goes_to_the_global_tensor():
    w = torch.ones(8, 4, device=torch_xla.device())
    st = xs.XLAShardedTensor(w, requires_grad=True)
    assert w.requires_grad and st.requires_grad
    (st * 3).sum().backward()
    torch.testing.assert_close(w.grad.cpu(), torch.full((8, 4), 3.0))
    torch.testing.assert_close(st.grad.cpu(), torch.full((8, 4), 3.0))


@needs_8
def test_apply_and_clear_sharding_act_on_the_global_tensor():
    t = torch.zeros(8, 8, device=torch_xla.device())
    st = xs.XLAShardedTensor(t)
    assert st.sharding_spec == ""
    assert st.apply_sharding(_mesh(), ("a", "b")) is st
    assert lx.get_sharding(t) is not None
    xs.clear_sharding(st)
    assert lx.get_sharding(t) is None and st.sharding_spec == ""
    st.apply_sharding(_mesh(), (None, "a"))
    assert st.clear_sharding() is st and lx.get_sharding(t) is None
