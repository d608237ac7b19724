"""torch.linalg's triangular solves, LU and what torch computes from it (det, slogdet,
solve, inv, lu_solve) on the device (``ops/factorizations.py``), and ``eye``. Each runs
in the traced graph (the op is traced, no ``aten::<op>`` fallback counter) and matches
torch on the CPU: shapes and dtypes exactly, values within the dtype's tolerance, both
triangles, LAPACK's ``info`` and pivots. Their gradients, and the errors shared with the
other factorizations: ``test_ops_factorizations.py``."""

import pytest
import torch

from ._factorization_helpers import (
    DEV,
    DTYPES,
    TOL,
    _on_device,
    _randn,
    _same_specs,
    aten,
)

# -- triangular solves -----------------------------------------------------------------


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("upper", [False, True])
@pytest.mark.parametrize("left", [False, True])
@pytest.mark.parametrize("unit", [False, True])
def test_solve_triangular(dtype, upper, left, unit):
    # Batches broadcast ((2, 1) with (3,)); the other triangle, and the diagonal when
    # unitriangular, hold garbage that must not be read.
    A = _randn(2, 1, 4, 4, dtype=dtype) + 4 * torch.eye(4, dtype=dtype)
    A = A + 100 * (A.tril(-1) if upper else A.triu(1))
    if unit:
        A = A + 50 * torch.eye(4, dtype=dtype)
    B = _randn(3, 4, 2, dtype=dtype, seed=1)
    B = B if left else B.mT

    def fn(a, b):
        return torch.linalg.solve_triangular(a, b, upper=upper, left=left, unitriangular=unit)

    expected = fn(A, B)
    got = _on_device(fn, A, B, op="aten::linalg_solve_triangular")
    _same_specs(got, expected)
    torch.testing.assert_close(got[0], expected, **TOL[dtype])


def test_solve_triangular_computes_in_As_dtype():
    A = torch.tensor([[2.0, 1], [0, 4]])
    B = _randn(2, 3, dtype=torch.float64)
    for a, b in ((A, B), (A.double(), B.float()), (A.to(torch.complex64), B)):
        expected = torch.linalg.solve_triangular(a, b, upper=True)
        got = _on_device(
            lambda x, y: torch.linalg.solve_triangular(x, y, upper=True),
            a,
            b,
            op="aten::linalg_solve_triangular",
        )
        _same_specs(got, expected)
        torch.testing.assert_close(got[0], expected)


# -- LU and what torch computes from it ------------------------------------------------


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("shape", [(5, 5), (3, 5), (5, 3), (2, 3, 4, 4)])
def test_lu_factor_is_lapacks(dtype, shape):
    A = _randn(*shape, dtype=dtype)
    expected = aten.linalg_lu_factor_ex(A)
    got = _on_device(aten.linalg_lu_factor_ex, A, op="aten::linalg_lu_factor_ex")
    _same_specs(got, expected)
    torch.testing.assert_close(got[0], expected[0], **TOL[dtype])
    assert torch.equal(got[1], expected[1])  # 1-based, as LAPACK's
    assert torch.equal(got[2], expected[2])


def test_lu_info_is_the_first_zero_pivot():
    A = torch.stack(
        [
            torch.tensor([[1.0, 2, 0], [2, 4, 0], [0, 0, 1]]),  # U[1, 1] == 0
            torch.zeros(3, 3),
            torch.eye(3),
        ]
    )
    expected = aten.linalg_lu_factor_ex(A)
    assert expected[2].tolist() == [2, 1, 0]
    got = _on_device(aten.linalg_lu_factor_ex, A, op="aten::linalg_lu_factor_ex")
    for g, e in zip(got, expected):
        torch.testing.assert_close(g, e)
    (info,) = _on_device(lambda a: aten.linalg_inv_ex(a)[1], A, op="aten::linalg_inv_ex")
    assert torch.equal(info, expected[2])
    (info,) = _on_device(lambda a: aten._linalg_solve_ex(a, a)[3], A, op="aten::_linalg_solve_ex")
    assert torch.equal(info, expected[2])


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("view", ["contiguous", "transposed"])
@pytest.mark.parametrize("op", ["_linalg_det", "_linalg_slogdet"])
def test_det_and_slogdet_factor_as_torch_does(dtype, view, op):
    """torch factors A^T when A is contiguous and real, A otherwise: its LU output (which
    the backward reads) must be the same factorization."""
    A = _randn(2, 5, 5, dtype=dtype)
    fn = getattr(aten, op)

    def run(a):
        return fn(a if view == "contiguous" else a.mT)

    expected = run(A)
    got = _on_device(run, A, op=f"aten::{op}")
    _same_specs(got, expected)
    for g, e in zip(got, expected):
        if e.dtype == torch.int32:
            assert torch.equal(g, e)
        else:
            torch.testing.assert_close(g, e, **TOL[dtype])


def test_det_and_slogdet_of_singular_and_empty_matrices():
    singular = torch.tensor([[1.0, 2], [2, 4]])
    for A in (singular, torch.zeros(0, 0), torch.zeros(2, 0, 0)):
        for name in ("_linalg_det", "_linalg_slogdet"):
            fn = getattr(aten, name)
            expected = fn(A)
            got = _on_device(fn, A, op=f"aten::{name}")
            _same_specs(got, expected)
            for g, e in zip(got, expected):
                torch.testing.assert_close(g, e)


@pytest.mark.parametrize("dtype", DTYPES)
def test_solve(dtype):
    A = _randn(3, 4, 4, dtype=dtype)
    B = _randn(3, 4, 2, dtype=dtype, seed=1)
    cases = {
        "left": (A, B, True),
        "right": (A, B.mT, False),
        "vector": (A, B[..., 0], True),
        "one_vector": (A, B[0, :, 0], True),
        "broadcast": (A[0], B, True),
        "broadcast_right": (A[:, None], B.mT, False),
    }
    for name, (a, b, left) in cases.items():
        expected = aten._linalg_solve_ex(a, b, left=left)
        got = _on_device(
            lambda x, y, left=left: aten._linalg_solve_ex(x, y, left=left),
            a,
            b,
            op="aten::_linalg_solve_ex",
        )
        _same_specs(got, expected)
        torch.testing.assert_close(got[0], expected[0], **TOL[dtype], msg=name)
        torch.testing.assert_close(got[1], expected[1], **TOL[dtype], msg=name)
        assert torch.equal(got[2], expected[2]) and torch.equal(got[3], expected[3]), name
    (x,) = _on_device(
        lambda a, b: torch.linalg.solve_ex(a, b).result, A, B, op="aten::_linalg_solve_ex"
    )
    torch.testing.assert_close(x, torch.linalg.solve(A, B), **TOL[dtype])


@pytest.mark.parametrize("dtype", DTYPES)
def test_inv(dtype):
    A = _randn(2, 3, 5, 5, dtype=dtype)
    expected = aten.linalg_inv_ex(A)
    got = _on_device(aten.linalg_inv_ex, A, op="aten::linalg_inv_ex")
    _same_specs(got, expected)
    torch.testing.assert_close(got[0], expected[0], **TOL[dtype])
    assert torch.equal(got[1], expected[1])
    (inverse,) = _on_device(lambda a: torch.linalg.inv_ex(a).inverse, A, op="aten::linalg_inv_ex")
    torch.testing.assert_close(inverse, torch.linalg.inv(A), **TOL[dtype])


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("left", [False, True])
@pytest.mark.parametrize("adjoint", [False, True])
def test_lu_solve(dtype, left, adjoint):
    LU, pivots = torch.linalg.lu_factor(_randn(2, 4, 4, dtype=dtype))
    B = _randn(3, 1, 4, 2, dtype=dtype, seed=1)
    B = B if left else B.mT

    def fn(lu, p, b):
        return torch.linalg.lu_solve(lu, p, b, left=left, adjoint=adjoint)

    expected = fn(LU, pivots, B)
    got = _on_device(fn, LU, pivots, B, op="aten::linalg_lu_solve")
    _same_specs(got, expected)
    torch.testing.assert_close(got[0], expected, **TOL[dtype])


def test_eye():
    for args, kwargs in [((3,), {}), ((3, 5), {}), ((4,), {"dtype": torch.int64})]:
        expected = torch.eye(*args, **kwargs)
        (got,) = _on_device(lambda a=args, k=kwargs: torch.eye(*a, device=DEV, **k), op="aten::eye")
        _same_specs((got,), expected)
        assert torch.equal(got, expected)
