"""``xs.HybridMesh`` and ``xr.global_runtime_device_attributes``, against torch_xla's
documented behaviour: a mesh of ``ici * dcn`` devices whose slices are ``ici`` blocks
laid out by ``dcn``, TPU chips ordered along their torus."""

import numpy as np
import pytest
import torch
import torch_xla
import torch_xla.core.xla_model as xm
import torch_xla.distributed.spmd as xs
import torch_xla.runtime as xr

import lazax.modes as lx

needs_8 = pytest.mark.skipif(lx.global_device_count() != 8, reason="needs 8 devices")


def test_device_attributes_name_every_device_of_the_job():
    every = xr.global_runtime_device_attributes()
    kind = xr.device_type()
    assert [a["name"] for a in every] == [f"{kind}:{i}" for i in range(lx.global_device_count())]
    assert xr.runtime_device_attributes(f"{kind}:0") == every[0]
    assert xr.runtime_device_attributes(str(torch_xla.device(0))) == every[0]
    with pytest.raises(ValueError, match="no device named 'ABACUS:0'"):
        xr.runtime_device_attributes("ABACUS:0")


@needs_8
@pytest.mark.parametrize(
    "ici, dcn, expected",
    [
        ((2, 2), (2, 1), [[0, 1], [2, 3], [4, 5], [6, 7]]),
        ((2, 2), (1, 2), [[0, 1, 4, 5], [2, 3, 6, 7]]),
        ((2, 4), None, [[0, 1, 2, 3], [4, 5, 6, 7]]),
    ],
)
def test_slices_are_ici_blocks_laid_out_by_dcn(ici, dcn, expected):
    mesh = xs.HybridMesh(ici_mesh_shape=ici, dcn_mesh_shape=dcn)
    assert isinstance(mesh, xs.Mesh) and isinstance(mesh, lx.Mesh)
    assert mesh.get_logical_mesh().tolist() == expected
    assert mesh.mesh_shape == np.array(expected).shape


@needs_8
def test_a_hybrid_mesh_shards_like_any_mesh():
    mesh = xs.HybridMesh(ici_mesh_shape=(1, 4), dcn_mesh_shape=(2, 1), axis_names=("data", "model"))
    assert mesh.shape() == {"data": 2, "model": 4}
    cpu = torch.arange(32.0).reshape(4, 8)
    t = cpu.to(torch_xla.device())
    xs.mark_sharding(t, mesh, ("data", "model"))
    torch.testing.assert_close((t * 2).cpu(), cpu * 2)


@needs_8
def test_a_mesh_of_another_size_than_the_job_is_refused():
    with pytest.raises(AssertionError, match=r"has 4 devices, but the job has 8"):
        xs.HybridMesh(ici_mesh_shape=(2, 2))
    with pytest.raises(AssertionError, match="must have the same length"):
        xs.HybridMesh(ici_mesh_shape=(2, 2, 2), dcn_mesh_shape=(1, 1))


def _chip(index, x, y, slice_index):
    return {
        "name": f"TPU:{index}",
        "coords": [x, y, 0],
        "core_on_chip": 0,
        "slice_index": slice_index,
    }


@needs_8
def test_tpu_chips_follow_their_coordinates_within_each_slice(monkeypatch):
    # Two slices of 2x2 chips, listed out of order: each slice's block is its chips by
    # (y, x) coordinate, whatever their ids, and slice 1 comes after slice 0 along dcn.
    chips = [
        _chip(0, 1, 1, 0), _chip(1, 0, 0, 0), _chip(2, 1, 0, 0), _chip(3, 0, 1, 0),
        _chip(4, 0, 1, 1), _chip(5, 1, 1, 1), _chip(6, 0, 0, 1), _chip(7, 1, 0, 1),
    ]  # fmt: skip
    monkeypatch.setattr(xr, "global_runtime_device_attributes", lambda: chips)
    monkeypatch.setattr(xm, "xla_device_hw", lambda device: "TPU")
    mesh = xs.HybridMesh(ici_mesh_shape=(2, 2), dcn_mesh_shape=(1, 2))
    assert mesh.get_logical_mesh().tolist() == [[1, 2, 6, 7], [3, 0, 4, 5]]
    mesh = xs.HybridMesh(ici_mesh_shape=(2, 2), dcn_mesh_shape=(2, 1))
    assert mesh.get_logical_mesh().tolist() == [[1, 2], [3, 0], [6, 7], [4, 5]]


@needs_8
def test_a_mesh_without_axis_names_answers_none_and_still_shards_by_index():
    mesh = xs.Mesh(np.arange(8), (2, 4))
    assert mesh.axis_names is None and mesh.shape() == {0: 2, 1: 4}
    cpu = torch.arange(16.0).reshape(2, 8)
    t = xs.mark_sharding(cpu.to(torch_xla.device()), mesh, (0, 1))
    assert t.sharding_spec == "{devices=[2,4]0,1,2,3,4,5,6,7}"
    assert [s.data.shape for s in t.local_shards] == [torch.Size([1, 2])] * 8
    torch.testing.assert_close((t.global_tensor + 1).cpu(), cpu + 1)
