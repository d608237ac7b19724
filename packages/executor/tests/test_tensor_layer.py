"""The tensor layer: device placement, reads, views, scalars, errors, failures."""

import io

import numpy as np
import pytest
import torch

import lazax.executor as lx
from lazax import ir
from lazax.executor.tensor import transfer as _transfer

DEV = lx.device()


def counter(name):
    return lx.metrics.counter_value(name) or 0


def test_tensors_move_like_cuda_tensors():
    cpu = torch.arange(12, dtype=torch.int64).reshape(3, 4)
    t = cpu.to("lazax")
    assert t.device == torch.device("lazax:0") and t.dtype == torch.int64
    assert t.shape == (3, 4) and t.stride() == (4, 1) and t.is_contiguous()
    torch.testing.assert_close(t.cpu(), cpu)
    assert t.tolist() == cpu.tolist()
    assert t[1, 2].item() == 6
    r = torch.randn(2, 3, device="lazax")
    assert isinstance(r, lx.LazyTensor) and r.device.type == "lazax"
    assert torch.tensor([1.5, 2.5], device="lazax").cpu().tolist() == [1.5, 2.5]


def test_dtypes_are_kept():
    for dtype in (torch.int64, torch.float64, torch.bfloat16, torch.bool, torch.int32, torch.uint8):
        cpu = torch.ones(3, dtype=dtype)
        back = cpu.to("lazax").cpu()
        assert back.dtype == dtype
        torch.testing.assert_close(back, cpu)


def test_print_and_repr_show_values_and_device(capsys):
    t = torch.tensor([[1.0, 2.0], [3.0, 4.0]]).to("lazax")
    print(t)
    out = capsys.readouterr().out
    assert "[3., 4.]]" in out and "device='lazax:0'" in out
    assert repr(t.t()).startswith("tensor([[1., 3.]")


def test_module_to_and_state_dict_save():
    model = torch.nn.Linear(3, 2)
    expected = {k: v.clone() for k, v in model.state_dict().items()}
    model.to("lazax")
    assert model.weight.device.type == "lazax" and isinstance(model.weight, torch.nn.Parameter)
    buffer = io.BytesIO()
    torch.save(model.cpu().state_dict(), buffer)
    buffer.seek(0)
    loaded = torch.load(buffer)
    for k, v in expected.items():
        torch.testing.assert_close(loaded[k], v)


def test_writes_through_views_reach_base_and_siblings():
    base_cpu = torch.arange(12.0).reshape(3, 4)
    base = base_cpu.to("lazax")
    row, col, flat = base[1], base[:, 2], base.view(-1)
    row.mul_(10)
    base_cpu[1].mul_(10)
    col.zero_()
    base_cpu[:, 2].zero_()
    base[0, 0] = 99.0
    base_cpu[0, 0] = 99.0
    torch.testing.assert_close(base.cpu(), base_cpu)
    torch.testing.assert_close(flat.cpu(), base_cpu.view(-1))
    torch.testing.assert_close(row.cpu(), base_cpu[1])
    tt = base.t()
    assert tt.stride() == (1, 4) and not tt.is_contiguous()
    assert base[1:, 1:].storage_offset() == 5 and base[1:, 1:].stride() == (4, 1)


def test_same_program_other_data_same_graph_and_no_compile():
    lx.sync()
    a = torch.randn(5, 5).to("lazax")
    warm = (a.t() @ a).sum()  # compile this graph once (a live tensor: sync runs it)
    lx.sync()
    assert warm.device.type == "lazax"
    before = counter("UncachedCompile")
    b = torch.randn(5, 5).to("lazax")
    out = (b.t() @ b).sum()
    lx.sync()
    assert counter("UncachedCompile") == before
    torch.testing.assert_close(out.cpu(), (b.cpu().t() @ b.cpu()).sum())


def test_other_shape_compiles_again():
    lx.sync()
    x = torch.randn(4, 6).to("lazax")
    y = x.t()
    before = counter("UncachedCompile")
    (y @ x).sum().cpu()
    x2 = torch.randn(4, 7).to("lazax")
    (x2.t() @ x2).sum().cpu()
    assert counter("UncachedCompile") == before + 2


def test_changing_python_scalars_do_not_recompile():
    x = torch.randn(8).to("lazax")
    (x * 0.5 + 3.0).cpu()
    before = counter("UncachedCompile")
    for scale in (0.25, 0.125, 7.0):
        out = x * scale + 3.0
        torch.testing.assert_close(out.cpu(), x.cpu() * scale + 3.0)
    assert counter("UncachedCompile") == before


@pytest.mark.parametrize("first", ["int", "float", "bool"])
def test_equal_python_numbers_of_other_types_are_other_ops(first):
    # 12 == 12.0 and 1 == True as dict keys: the op's cache must still tell them apart.
    values = {"int": (12, 1), "float": (12.0, 1.0), "bool": (True, True)}
    order = [first] + [k for k in values if k != first]
    for kind in order:
        end, fill = values[kind]
        for got, expected in [
            (torch.arange(end, device=DEV), torch.arange(end)),
            (torch.full((2,), fill, device=DEV), torch.full((2,), fill)),
            (torch.zeros(2, device=DEV).add(fill), torch.zeros(2).add(fill)),
        ]:
            assert got.dtype == expected.dtype, (kind, got, expected)
            torch.testing.assert_close(got.cpu(), expected)


def test_unlowered_op_falls_back_to_cpu_and_is_counted():
    x_cpu = torch.tensor([[3.0, 1.0], [0.5, 2.0]])
    name = "aten::linalg_matrix_exp"
    before = counter(name)
    out = torch.linalg.matrix_exp(x_cpu.to("lazax"))
    assert out.device.type == "lazax"
    torch.testing.assert_close(out.cpu(), torch.linalg.matrix_exp(x_cpu))
    assert counter(name) == before + 1


def test_errors_are_torchs_and_raised_at_the_call():
    a = torch.randn(2, 3).to("lazax")
    b = torch.randn(4, 5).to("lazax")
    with pytest.raises(RuntimeError) as lazax_err:
        torch.mm(a, b)
    with pytest.raises(RuntimeError) as cpu_err:
        torch.mm(a.cpu(), b.cpu())
    assert str(lazax_err.value) == str(cpu_err.value)
    with pytest.raises(RuntimeError, match="must match the size of tensor b"):
        torch.randn(3, 4).to("lazax") + torch.randn(5).to("lazax")
    with pytest.raises(RuntimeError, match="Expected all tensors to be on the same device"):
        a + torch.randn(2, 3)
    # 0-dim CPU tensors mix, as with cuda
    torch.testing.assert_close((a * torch.tensor(2.0)).cpu(), a.cpu() * 2)


def test_failed_compile_or_execute_leaves_tensors_readable():
    runtime = lx.EXECUTOR.runtime
    x_cpu = torch.randn(6)
    x = x_cpu.to("lazax")
    y = x * 2 + 1  # pending
    before_data = x.cpu()
    runtime.fail_next("compile", RuntimeError("injected compile failure"))
    with pytest.raises(RuntimeError, match="injected compile failure"):
        y.cpu()
    torch.testing.assert_close(x.cpu(), before_data)
    torch.testing.assert_close(y.cpu(), x_cpu * 2 + 1)  # nothing lost: runs now
    z = torch.sin(x) + 5.0
    z.cpu()  # compiled
    w = torch.sin(x) + 6.0
    runtime.fail_next("execute", RuntimeError("injected execute failure"))
    with pytest.raises(RuntimeError, match="injected execute failure"):
        lx.sync()
    torch.testing.assert_close(w.cpu(), torch.sin(x_cpu) + 6.0)


def test_graph_dump_of_pending_work():
    x = torch.randn(3).to("lazax")
    y = (x + 2.0).relu()
    text = ir.dump(ir.collect([lx.ir_value(y)]))
    assert "aten::add.Tensor" in text and "aten::relu" in text and "scalar()" in text
    np.testing.assert_allclose(y.cpu().numpy(), np.maximum(x.cpu().numpy() + 2.0, 0), rtol=1e-6)


def test_views_reinterpreting_a_complex_storage_read_and_write_through_it():
    z = torch.tensor([1 + 2j, 3 + 4j, 5 + 6j])
    zd = z.to(DEV)
    real, imag, pairs = zd.real, zd.imag, torch.view_as_real(zd)
    lx.sync()  # the storage is written: every view must re-read it
    torch.testing.assert_close(real.cpu(), z.real)
    torch.testing.assert_close(pairs.cpu(), torch.view_as_real(z))
    imag.mul_(10.0)
    real.add_(1.0)
    expected = z.clone()
    expected.imag.mul_(10.0)
    expected.real.add_(1.0)
    torch.testing.assert_close(zd.cpu(), expected)
    torch.testing.assert_close(pairs.cpu(), torch.view_as_real(expected))


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16, torch.int64])
def test_reading_views_of_materialised_data_compiles_nothing(dtype):
    cpu = torch.arange(48).reshape(6, 8).to(dtype)
    x = cpu.to(DEV) * 1
    lx.sync_tensors_graph([x])  # x now holds device data
    before = counter("UncachedCompile") + counter("CachedCompile")
    for i in range(6):  # a new view each time: a compile each before
        torch.testing.assert_close(x[i, i:].cpu(), cpu[i, i:])
    torch.testing.assert_close(x.t()[1:5:2, ::3].cpu(), cpu.t()[1:5:2, ::3])
    assert x[2, 3].item() == cpu[2, 3].item()
    assert counter("UncachedCompile") + counter("CachedCompile") == before


def test_a_small_view_of_a_large_base_is_gathered_on_the_device(monkeypatch):
    monkeypatch.setattr(_transfer, "HOST_SLICE_MAX_ELEMENTS", 16)
    cpu = torch.arange(64.0).reshape(8, 8)
    x = cpu.to(DEV) * 1
    lx.sync_tensors_graph([x])
    before = counter("UncachedCompile") + counter("CachedCompile")
    torch.testing.assert_close(x[3, 2:6].cpu(), cpu[3, 2:6])  # 4 of 64: on the device
    assert counter("UncachedCompile") + counter("CachedCompile") == before + 1
    torch.testing.assert_close(x[1:].cpu(), cpu[1:])  # 56 of 64: on the host
    assert counter("UncachedCompile") + counter("CachedCompile") == before + 1


def test_out_tensors_of_another_shape_are_resized_as_torch_does():
    a, b = torch.randn(3, 4), torch.randn(3, 4)
    out = torch.empty(0, device=DEV)  # no elements: resized silently
    result = torch.add(a.to(DEV), b.to(DEV), out=out)
    assert result is out and out.shape == (3, 4) and out.stride() == (4, 1)
    torch.testing.assert_close(out.cpu(), a + b)
    wrong = torch.zeros(2, device=DEV, dtype=torch.float64)  # elements: torch's warning
    with pytest.warns(UserWarning, match="An output with one or more elements was resized"):
        torch.mul(a.to(DEV), 2.0, out=wrong)
    assert wrong.shape == (3, 4) and wrong.dtype == torch.float64
    torch.testing.assert_close(wrong.cpu(), (a * 2).double())
    torch.testing.assert_close((wrong + 1).cpu(), (a * 2).double() + 1)  # usable after


def test_an_out_tensor_resized_by_a_cpu_fallback_kernel():
    A = torch.randn(3, 3) + 3 * torch.eye(3)
    rhs = torch.randn(3)
    out = torch.empty(0, device=DEV)
    torch.linalg.solve(A.to(DEV), rhs.to(DEV), out=out)
    torch.testing.assert_close(out.cpu(), torch.linalg.solve(A, rhs), rtol=1e-4, atol=1e-5)


def test_composite_out_kernels_that_skip_out_on_a_subclass_write_it():
    # torch's composite out= kernels of these ops take a branch for tensor subclasses
    # that never writes out (or resizes it back): lazax registers its own.
    A = torch.randn(5, 5)
    rank = torch.full((), -1, dtype=torch.int64, device=DEV)
    assert torch.linalg.matrix_rank(A.to(DEV), out=rank) is rank
    assert rank.item() == torch.linalg.matrix_rank(A).item() == 5
    torch.linalg.matrix_rank(A.to(DEV), atol=1e3, rtol=0.0, out=rank)
    assert rank.item() == 0
    x = torch.randn(5, 6, 7)
    out = torch.empty(0, dtype=torch.complex64, device=DEV)
    torch.fft.ihfftn(x.to(DEV), s=(8,), out=out)
    torch.testing.assert_close(out.cpu(), torch.fft.ihfftn(x, s=(8,)))
    out2 = torch.empty(0, dtype=torch.complex64, device=DEV)
    torch.fft.ihfft2(x.to(DEV), out=out2)
    torch.testing.assert_close(out2.cpu(), torch.fft.ihfft2(x))
    a, v = torch.randn(5, 5, 10), torch.randn(10)
    mm = torch.empty(5, 5, device=DEV)
    torch.matmul(a.to(DEV), v.to(DEV), out=mm)
    torch.testing.assert_close(mm.cpu(), a @ v)


def test_composite_out_kernels_keep_torchs_errors():
    a = torch.randn(3, 3, device=DEV, requires_grad=True)
    out = torch.empty(3, 3, device=DEV)
    with pytest.raises(RuntimeError, match="don't support automatic differentiation"):
        torch.matmul(a, a, out=out)
    with torch.no_grad():
        torch.matmul(a, a, out=out)
    torch.testing.assert_close(out.cpu(), (a @ a).detach().cpu())
    with pytest.raises(RuntimeError, match="Expected out tensor to have device"):
        torch.matmul(a.detach(), a.detach(), out=torch.empty(3, 3))


def test_complex_scalars_and_zero_gradients():
    z = torch.randn(3, dtype=torch.complex64)
    torch.testing.assert_close((z.to(DEV) * (1 + 2j)).cpu(), z * (1 + 2j))
    x = torch.randn(4, 4, device=DEV, requires_grad=True)
    torch.sgn(x).sum().backward()  # autograd's _efficientzerotensor, made on lazax
    assert x.grad.device == DEV and not x.grad.cpu().any()
    r, theta = torch.tensor(2.0, requires_grad=True), torch.tensor(0.5, requires_grad=True)
    expected = torch.autograd.grad(torch.polar(r, theta).real, (r, theta))
    r_, theta_ = (t.detach().to(DEV).requires_grad_() for t in (r, theta))
    got = torch.autograd.grad(torch.polar(r_, theta_).real, (r_, theta_))
    torch.testing.assert_close([g.cpu() for g in got], list(expected))


def test_an_in_place_cpu_kernel_may_resize_self_as_torch_does():
    # torch's addbmm_ writes a (5, 10) result into a (1,) self by resizing it.
    s, a, b = torch.randn(1), torch.randn(5, 5, 5), torch.randn(5, 5, 10)
    expected = s.clone().addbmm_(a, b)
    x = s.to(DEV)
    assert x.addbmm_(a.to(DEV), b.to(DEV)) is x
    assert x.shape == (5, 10)
    torch.testing.assert_close(x.cpu(), expected)


def test_sparse_results_are_refused_with_a_clear_error():
    with pytest.raises(RuntimeError, match="lazax tensors are strided"):
        torch.randn(3, 3).to(DEV).to_sparse()


@pytest.mark.parametrize(
    "src, dst",
    [
        (torch.float32, torch.int32),
        (torch.float32, torch.uint8),
        (torch.int16, torch.bfloat16),
        (torch.uint8, torch.bool),
        (torch.complex64, torch.float32),
    ],
)
def test_a_view_as_another_dtype_aliases_its_base(src, dst):
    cpu = torch.arange(8).to(src).reshape(2, 4)
    base = cpu.to(DEV)
    view, cpu_view = base.view(dst), cpu.view(dst)
    before = counter("aten::view.dtype")
    base.add_(1)
    cpu.add_(1)
    torch.testing.assert_close(view.cpu(), cpu_view, rtol=0, atol=0)
    if dst is torch.int32:  # and a write through the view reaches the base
        view[0, 1] = 7
        cpu_view[0, 1] = 7
        torch.testing.assert_close(base.cpu(), cpu, rtol=0, atol=0)
    assert counter("aten::view.dtype") == before  # no CPU fallback


def test_a_freed_storage_holds_no_memory_and_takes_the_next_write():
    # FSDP2's reshard frees its all-gathered parameters (untyped_storage().resize_(0)),
    # and writes them again before their next use: on lazax, ``Storage.free``.
    import gc

    from lazax.modes import memory_allocated

    lx.sync(wait=True)
    gc.collect()
    before = memory_allocated()
    flat = torch.ones(64, device=DEV) * 2  # pending, as an all-gather's copy-out is
    square = flat.view(8, 8)
    assert square.sum().item() == 128.0  # a view with IR cached over the base
    lx.storage_of(flat).free()  # before the sync that would materialise it
    lx.sync(wait=True)
    gc.collect()
    assert memory_allocated() == before  # nothing computed, nothing held
    flat.copy_(torch.arange(64.0, device=DEV))
    torch.testing.assert_close(square.cpu(), torch.arange(64.0).view(8, 8))
    assert memory_allocated() == before + 64 * 4
    lx.storage_of(flat).free()  # materialised: its device data is let go
    gc.collect()
    assert memory_allocated() == before


@pytest.mark.parametrize(
    "a, b",
    [
        (torch.tensor([1, 2]), torch.tensor([1.0, 2.0])),  # promoted: equal
        (torch.tensor([float("nan")]), torch.tensor([float("nan")])),  # NaN != NaN
        (torch.zeros(2, 3), torch.zeros(3, 2)),  # other sizes, same count
        (torch.zeros(2), torch.zeros(1)),  # broadcastable, still other sizes
        (torch.zeros(0), torch.zeros(0)),
        (torch.ones(3), torch.tensor([1.0, 1.0, 2.0])),
    ],
)
def test_torch_equal_is_read_from_the_device_as_torch_answers(a, b):
    # DTensor and user code call torch.equal (a Python bool): computed on the device
    # and read, not on the CPU fallback (which warns and counts aten::equal).
    before = lx.metrics.counter_value("aten::equal") or 0
    assert torch.equal(a.to(DEV), b.to(DEV)) is torch.equal(a, b)
    assert (lx.metrics.counter_value("aten::equal") or 0) == before


@pytest.mark.parametrize(
    "a, b, kwargs",
    [
        (torch.tensor([1.0, 2.0]), torch.tensor([1.0, 2.0 + 1e-9]), {}),
        (torch.tensor([1.0, 2.0]), torch.tensor([1.0, 2.1]), {}),
        (torch.tensor([1.0, 2.0]), torch.tensor([1.0, 2.1]), {"atol": 0.2}),
        (torch.tensor([100.0]), torch.tensor([101.0]), {"rtol": 0.02}),
        (torch.tensor([float("nan")]), torch.tensor([float("nan")]), {}),
        (torch.tensor([float("nan")]), torch.tensor([float("nan")]), {"equal_nan": True}),
        (torch.tensor([float("inf")]), torch.tensor([float("inf")]), {}),
        (torch.ones(2, 3), torch.ones(3), {}),  # broadcast, as torch's isclose
        (torch.zeros(0), torch.zeros(0), {}),
        (torch.tensor([1, 2]), torch.tensor([1, 3]), {"atol": 1}),
    ],
)
def test_torch_allclose_is_read_from_the_device_as_torch_answers(a, b, kwargs):
    # Validation code calls torch.allclose on device tensors: computed there and read,
    # not on the CPU fallback (which would warn and count aten::allclose).
    before = lx.metrics.counter_value("aten::allclose") or 0
    assert torch.allclose(a.to(DEV), b.to(DEV), **kwargs) is torch.allclose(a, b, **kwargs)
    assert (lx.metrics.counter_value("aten::allclose") or 0) == before


def test_torch_allclose_refuses_what_torch_refuses():
    a, b = torch.ones(2), torch.ones(2, dtype=torch.float64)
    with pytest.raises(RuntimeError) as cpu:
        torch.allclose(a, b)
    with pytest.raises(RuntimeError) as lazax:
        torch.allclose(a.to(DEV), b.to(DEV))
    assert str(lazax.value) == str(cpu.value)
    with pytest.raises(RuntimeError, match="must match"):
        torch.allclose(torch.ones(2, device=DEV), torch.ones(3, device=DEV))


def test_empty_strided_keeps_torchs_strides():
    z = torch.empty_strided((2, 4, 8), (8, 16, 1), device=DEV)
    assert z.stride() == (8, 16, 1) and not z.is_contiguous()
    z.copy_(torch.arange(64.0).reshape(2, 4, 8))
    torch.testing.assert_close(
        z.transpose(0, 1).reshape(4, 16).cpu(),
        torch.arange(64.0).reshape(2, 4, 8).transpose(0, 1).reshape(4, 16),
    )
    assert z.transpose(0, 1).view(4, 16).shape == (4, 16)  # a view torch allows at these strides
    assert torch.empty_strided((2, 3), (3, 1), device=DEV).is_contiguous()
    assert torch.empty_strided((2, 3), (0, 1), device=DEV).stride() == (0, 1)
    assert torch.empty_strided((3, 0), (1, 1), device=DEV).shape == (3, 0)
    assert z.new_empty_strided((2, 4, 8), (8, 16, 1), dtype=torch.int32).stride() == (8, 16, 1)
