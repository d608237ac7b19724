"""torch.linalg's factorizations on the device (``ops/factorizations.py``): SVD, QR,
Cholesky and eigh, what the CPU kernels refuse or report through ``check_errors``, and
the gradients of the whole family. Each runs in the traced graph (the op is traced, no
``aten::<op>`` fallback counter) and matches torch on the CPU: shapes and dtypes
exactly, unique results by value, factors that are unique only up to signs or phases
(singular vectors, eigenvectors, QR's columns) by what does not depend on them
(reconstruction, orthonormality, magnitudes). Batched and complex inputs, both
triangles, LAPACK's ``info``, torch's errors, and the gradients. Triangular solves, LU
and what torch computes from it: ``test_ops_factorizations_lu.py``."""

import warnings

import pytest
import torch

import lazax.modes as lx
from lazax.executor.testing import no_cpu_fallback

from ._factorization_helpers import (
    DEV,
    DTYPES,
    TOL,
    _gen,
    _identity,
    _on_device,
    _randn,
    _same_specs,
    _spd,
    aten,
)

# -- SVD -------------------------------------------------------------------------------


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("shape", [(4, 6), (6, 4), (2, 3, 5, 5)])
@pytest.mark.parametrize("full", [False, True])
def test_svd(dtype, shape, full):
    A = _randn(*shape, dtype=dtype)
    expected = aten._linalg_svd(A, full)
    U, S, Vh = _on_device(lambda a: aten._linalg_svd(a, full), A, op="aten::_linalg_svd")
    _same_specs((U, S, Vh), expected)
    tol = TOL[dtype]
    torch.testing.assert_close(S, expected[1], **tol)
    k = S.shape[-1]
    rebuilt = U[..., :k] @ torch.diag_embed(S).to(dtype) @ Vh[..., :k, :]
    torch.testing.assert_close(rebuilt, A, **tol)
    torch.testing.assert_close(U.mH @ U, _identity(U.shape[-1], U), **tol)
    torch.testing.assert_close(Vh @ Vh.mH, _identity(Vh.shape[-2], Vh), **tol)


def test_svd_without_vectors_gives_torchs_empty_factors():
    A = _randn(3, 4, 6, dtype=torch.float64)
    expected = aten._linalg_svd(A, False, False)
    got = _on_device(lambda a: aten._linalg_svd(a, False, False), A, op="aten::_linalg_svd")
    _same_specs(got, expected)
    assert got[0].shape == (0,) and got[2].shape == (0,)
    torch.testing.assert_close(got[1], expected[1])
    got = _on_device(torch.linalg.svdvals, A, op="aten::_linalg_svd")
    torch.testing.assert_close(got[0], torch.linalg.svdvals(A))
    got = _on_device(lambda a: torch.linalg.matrix_norm(a, ord=2), A, op="aten::_linalg_svd")
    torch.testing.assert_close(got[0], torch.linalg.matrix_norm(A, ord=2))


# -- QR --------------------------------------------------------------------------------


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("shape", [(5, 3), (3, 5), (2, 4, 4)])
@pytest.mark.parametrize("mode", ["reduced", "complete", "r"])
def test_qr(dtype, shape, mode):
    A = _randn(*shape, dtype=dtype)
    expected = aten.linalg_qr(A, mode)
    Q, R = _on_device(lambda a: aten.linalg_qr(a, mode), A, op="aten::linalg_qr")
    _same_specs((Q, R), expected)
    tol = TOL[dtype]
    assert torch.equal(R.tril(-1), torch.zeros_like(R))  # upper triangular
    # R's rows are unique up to a sign (phase): their magnitudes are not.
    torch.testing.assert_close(R.abs(), expected[1].abs(), **tol)
    if mode == "r":
        assert Q.shape == (0,)
        return
    torch.testing.assert_close(Q @ R, A, **tol)
    torch.testing.assert_close(Q.mH @ Q, _identity(Q.shape[-1], Q), **tol)


# -- Cholesky --------------------------------------------------------------------------


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("upper", [False, True])
def test_cholesky_reads_one_triangle(dtype, upper):
    spd = _spd(2, 3, 5, 5, dtype=dtype)
    # The triangle torch does not read holds garbage (and so does the diagonal's
    # imaginary part): the result must not see it.
    garbage = 100 * _randn(2, 3, 5, 5, dtype=dtype, seed=1)
    A = spd.triu() + garbage.tril(-1) if upper else spd.tril() + garbage.triu(1)
    if dtype.is_complex:
        A = A + 1j * torch.diag_embed(_randn(2, 3, 5, seed=2))
    expected = aten.linalg_cholesky_ex(A, upper=upper)
    got = _on_device(
        lambda a: aten.linalg_cholesky_ex(a, upper=upper), A, op="aten::linalg_cholesky_ex"
    )
    _same_specs(got, expected)
    torch.testing.assert_close(got[0], expected[0], **TOL[dtype])
    assert torch.equal(got[1], torch.zeros(2, 3, dtype=torch.int32))
    got = _on_device(
        lambda a: torch.linalg.cholesky_ex(a, upper=upper).L, A, op="aten::linalg_cholesky_ex"
    )
    torch.testing.assert_close(got[0], expected[0], **TOL[dtype])


def test_cholesky_info_is_the_order_of_the_first_failing_minor():
    bad2 = torch.tensor([[4.0, 2, 1], [2, -3, 0], [1, 0, 5]])  # order 2 is not PD
    bad3 = torch.tensor([[2.0, 1, 1], [1, 2, 1], [1, 1, -1]])  # order 3
    nan = torch.tensor([[1.0, 0, 0], [0, 1, 0], [0, float("nan"), 1]])  # NaN below
    A = torch.stack([torch.eye(3), bad2, bad3, torch.zeros(3, 3), nan, 4 * torch.eye(3)])
    expected = aten.linalg_cholesky_ex(A)[1]
    assert expected.tolist() == [0, 2, 3, 1, 3, 0]
    (info,) = _on_device(lambda a: aten.linalg_cholesky_ex(a)[1], A, op="aten::linalg_cholesky_ex")
    assert info.dtype == torch.int32 and torch.equal(info, expected)
    for upper in (False, True):  # one matrix, and the upper triangle read
        (info,) = _on_device(
            lambda a, upper=upper: aten.linalg_cholesky_ex(a, upper=upper)[1],
            bad2,
            op="aten::linalg_cholesky_ex",
        )
        assert info.shape == () and info.item() == 2


@pytest.mark.parametrize("batched", [False, True])
def test_cholesky_of_a_matrix_not_positive_definite_raises_torchs_error(batched):
    bad = torch.tensor([[4.0, 2, 1], [2, -3, 0], [1, 0, 5]])
    A = torch.stack([torch.eye(3), bad]) if batched else bad
    with pytest.raises(torch.linalg.LinAlgError) as on_cpu:
        torch.linalg.cholesky(A)
    lx.metrics.clear_all()
    with no_cpu_fallback():
        L = torch.linalg.cholesky(A.to(DEV))  # info is checked on the device: no host read
        with pytest.raises(torch.linalg.LinAlgError) as on_lazax:
            L.cpu()  # raised at the read (lazy mode; eager mode raises at the call)
    assert str(on_lazax.value).splitlines()[0] == str(on_cpu.value)
    assert lx.metrics.traced_op_counts().get("aten::linalg_cholesky_ex") == 1


EX_CHECKED = [
    ("inv_ex", lambda a: torch.linalg.inv_ex(a, check_errors=True).inverse),
    ("cholesky_ex", lambda a: torch.linalg.cholesky_ex(a, check_errors=True).L),
    (
        "solve_ex",
        lambda a: torch.linalg.solve_ex(
            a, torch.ones(a.shape[:-1], device=a.device), check_errors=True
        )[0],
    ),
    ("lu_factor_ex", lambda a: torch.linalg.lu_factor_ex(a, check_errors=True).LU),
]


@pytest.mark.parametrize("batched", [False, True])
@pytest.mark.parametrize(("name", "fn"), EX_CHECKED, ids=[e[0] for e in EX_CHECKED])
def test_check_errors_checks_on_the_device_and_raises_torchs_error(name, fn, batched):
    bad = torch.tensor([[1.0, 2, 3], [1, 2, 3], [0, 0, -1]])  # singular, not definite
    A = torch.stack([torch.eye(3), bad]) if batched else bad
    with pytest.raises(RuntimeError) as on_cpu:
        fn(A)
    with no_cpu_fallback():
        out = fn(A.to(DEV))  # lazy: raised at the read
        with pytest.raises(RuntimeError) as on_lazax:
            out.cpu()
        with lx.eager_mode_context(True), pytest.raises(RuntimeError) as eagerly:
            fn(A.to(DEV))  # eager: raised at the call
        spd = _spd(4, 4)
        torch.testing.assert_close(fn(spd.to(DEV)).cpu(), fn(spd))
    for got in (on_lazax.value, eagerly.value):
        assert type(got) is type(on_cpu.value)
        assert str(got).splitlines()[0] == str(on_cpu.value)


def test_what_the_cpu_kernels_refuse_is_refused_alike():
    x = torch.eye(3, dtype=torch.bfloat16)
    cases = [
        lambda a: torch.linalg.svd(a),
        lambda a: torch.linalg.qr(a),
        lambda a: torch.linalg.cholesky_ex(a),
        lambda a: torch.linalg.eigh(a),
        lambda a: torch.linalg.solve_triangular(a, a, upper=True),
        lambda a: torch.linalg.lu_factor_ex(a),
        lambda a: torch.linalg.det(a),
        lambda a: torch.linalg.solve_ex(a, a),
        lambda a: torch.linalg.slogdet(a),
        lambda a: torch.linalg.inv_ex(a),
        lambda a: torch.linalg.svd(a.float(), driver="gesvd"),
        lambda a: torch.linalg.lu_factor_ex(a.float(), pivot=False),
    ]
    for fn in cases:
        with pytest.raises(Exception) as on_cpu:
            fn(x)
        with pytest.raises(type(on_cpu.value)) as on_lazax:
            fn(x.to(DEV))
        assert str(on_lazax.value) == str(on_cpu.value)


# -- eigh ------------------------------------------------------------------------------


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("uplo", ["L", "U"])
def test_eigh_reads_the_uplo_triangle(dtype, uplo):
    h = _spd(3, 6, 6, dtype=dtype) - 6 * torch.eye(6, dtype=dtype)  # not definite
    garbage = 100 * _randn(3, 6, 6, dtype=dtype, seed=1)
    A = h.tril() + garbage.triu(1) if uplo == "L" else h.triu() + garbage.tril(-1)
    expected = aten._linalg_eigh(A, uplo)
    w, V = _on_device(lambda a: aten._linalg_eigh(a, uplo), A, op="aten::_linalg_eigh")
    _same_specs((w, V), expected)
    tol = TOL[dtype]
    torch.testing.assert_close(w, expected[0], **tol)
    torch.testing.assert_close(V @ torch.diag_embed(w).to(dtype) @ V.mH, h, **tol)
    # Each eigenvector (the eigenvalues are distinct) up to its sign or phase.
    overlap = (V.mH @ expected[1]).abs()
    torch.testing.assert_close(overlap, _identity(6, overlap), **tol)
    (values,) = _on_device(
        lambda a: torch.linalg.eigvalsh(a, UPLO=uplo), A, op="aten::_linalg_eigh"
    )
    torch.testing.assert_close(values, expected[0], **tol)


def test_eigh_without_vectors_gives_torchs_empty_factor():
    A = _spd(2, 4, 4)
    expected = aten._linalg_eigh(A, "L", False)
    got = _on_device(lambda a: aten._linalg_eigh(a, "L", False), A, op="aten::_linalg_eigh")
    _same_specs(got, expected)
    torch.testing.assert_close(got[0], expected[0])


# -- gradients -------------------------------------------------------------------------


def _weights(y, seed):
    w = torch.randn(y.shape, generator=_gen(seed), dtype=y.real.dtype).to(y.device)
    return (y.real if y.is_complex() else y) * w


GRADIENTS = {
    # Losses that do not depend on the factors' signs (gauge).
    "svd_values": (lambda a: torch.linalg.svdvals(a).sum(), (5, 3)),
    "svd_rebuilt": (
        lambda a: _weights(_svd_rebuilt(*torch.linalg.svd(a, full_matrices=False)), 1).sum(),
        (2, 4, 3),
    ),
    "qr": (lambda a: _qr_loss(*torch.linalg.qr(a)), (5, 3)),
    "cholesky": (lambda a: _weights(torch.linalg.cholesky_ex(_hermitian(a)).L, 2).sum(), (2, 4, 4)),
    "eigvalsh": (lambda a: _weights(torch.linalg.eigvalsh(_hermitian(a)), 3).sum(), (4, 4)),
    "solve": (
        lambda a: _weights(torch.linalg.solve_ex(a, a[..., :2].exp()).result, 4).sum(),
        (2, 4, 4),
    ),
    "det": (lambda a: _weights(torch.linalg.det(a), 9).sum(), (2, 4, 4)),
    "det_transposed": (lambda a: _weights(torch.linalg.det(a.mT), 9).sum(), (2, 4, 4)),
    "slogdet": (lambda a: torch.linalg.slogdet(a).logabsdet.sum(), (4, 4)),
    "slogdet_transposed": (lambda a: torch.linalg.slogdet(a.mT).logabsdet.sum(), (4, 4)),
    "inv": (lambda a: _weights(torch.linalg.inv_ex(a).inverse, 5).sum(), (4, 4)),
    "solve_triangular": (
        lambda a: _weights(torch.linalg.solve_triangular(a, a.exp(), upper=True), 6).sum(),
        (4, 4),
    ),
}


def _svd_rebuilt(U, S, Vh):
    return U @ torch.diag_embed(S).to(U.dtype) @ Vh


def _qr_loss(Q, R):
    return _weights(R.abs() ** 2, 7).sum() + _weights(Q @ Q.mH, 8).sum()


def _hermitian(a):
    return a @ a.mH + a.shape[-1] * torch.eye(a.shape[-1], dtype=a.dtype, device=a.device)


@pytest.mark.parametrize("dtype", [torch.float64, torch.complex128])
@pytest.mark.parametrize("name", list(GRADIENTS))
def test_gradients_match_the_cpu(name, dtype):
    loss, shape = GRADIENTS[name]
    A = _randn(*shape, dtype=dtype) + 3 * torch.eye(*shape[-2:], dtype=dtype)
    expected = A.clone().requires_grad_()
    loss(expected).backward()
    lx.metrics.clear_all()
    got = A.to(DEV).requires_grad_()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        loss(got).backward()
    grad = got.grad.cpu()
    torch.testing.assert_close(grad, expected.grad, rtol=1e-8, atol=1e-8)
    fell_back = {n for n in lx.metrics.counter_names() if "::" in n}
    # torch's complex svd_backward asks allclose whether the loss depends on the
    # singular vectors' phases: computed on the device and read (one element, as
    # CUDA's sync); nothing runs on the CPU.
    assert fell_back == set()
