"""Matrix decompositions and solvers of ``torch.linalg``: SVD, QR, Cholesky, the
Hermitian eigendecomposition, LU (``lu_factor``, ``det``, ``slogdet``, ``solve``,
``inv``, ``lu_solve``), triangular solves; and ``eye``, which their callers build.

Contract (as every family's, see ``_registry``; batches ``(*, m, n)`` broadcast as
torch's, float32/float64/complex64/complex128 as torch's CPU kernels take them):
- Outputs have the shapes of torch's meta kernels: ``compute_uv=False``,
  ``compute_v=False`` and QR's mode ``"r"`` give the empty ``(0,)`` factors torch gives.
- What LAPACK leaves free is the device library's choice: the signs (complex phases) of
  SVD's singular vectors, of ``eigh``'s eigenvectors and of QR's Householder columns
  come from jax's LAPACK calls on the CPU (the routines torch calls: ``gesdd``,
  ``syevd``, ``geqrf``), cuSOLVER on GPU, XLA's own on TPU; torch's factors differ
  between its CPU and CUDA alike. Values on singular or non-finite inputs (``inv`` of a
  singular matrix) are the library's, as torch's are its LAPACK's.
- ``eigh`` reads the ``UPLO`` triangle only; ``cholesky_ex`` the lower one (the upper
  one with ``upper=True``) and the diagonal's real part, as LAPACK's ``potrf``;
  ``solve_triangular`` the ``upper`` triangle, not its diagonal when ``unitriangular``.
- LU is LAPACK's ``getrf`` (partial pivoting): ``pivots`` 1-based int32, ``info`` the
  1-based position of U's first exact zero on the diagonal (0: none). ``det``,
  ``slogdet``, ``solve``, ``inv`` and ``lu_solve`` work from that factorization as
  torch's kernels do, so that torch's backward formulas, which read ``LU`` and
  ``pivots``, hold. ``_linalg_det`` and ``_linalg_slogdet`` factor ``A``'s transpose
  when ``A`` is contiguous and real, as torch's kernels do (their backward formulas
  test the same); the rule gets that as the layout argument ``transposed``. (Under
  dynamo the backward tests its fake tensors' strides, which for an intermediate that
  torch's meta kernel makes column-major and lazax row-major differ from lazax's: the
  gradient of ``det`` of such a tensor is then wrong, as it was with the CPU fallback.)
- ``cholesky_ex``'s ``info`` is potrf's (``_cholesky_info``). Where ``info > 0``, ``L``
  is NaN (jax's), where torch leaves LAPACK's partial factorization: neither is promised.
- ``torch.linalg.cholesky`` and its kin call the ``_ex`` op with ``check_errors=False``,
  then ``_linalg_check_errors``, which lazax checks on the device (``ops.asserts``:
  torch's error at the next sync or read, at the call in eager mode), so they need no
  host read and fit a full_graph region or a replayed graph. The ``_ex`` ops'
  ``check_errors=True`` is the same check inside the op (``check_info``), where CPU and
  CUDA read ``info`` on the host.
- float16/bfloat16, SVD's ``driver=`` (cuSOLVER's) and LU without pivoting raise the CPU
  kernel's error: the meta kernels accept them.
"""

from __future__ import annotations

import jax.numpy as jnp
import torch
from jax import lax
from jax.lax import linalg as lax_linalg

from ._arguments import argument_check, layout_arguments, scalar_type_name
from ._registry import lowering
from .asserts import check_info

aten = torch.ops.aten


def _mT(x):
    return jnp.swapaxes(x, -1, -2)


def _mH(x):
    return jnp.conj(_mT(x))


def _placeholder(ctx, k):
    """Output ``k`` as zeros: torch's empty ``(0,)`` factor, or one nothing reads."""
    shape, dtype = ctx.out[k]
    return jnp.zeros(shape, dtype)


# -- what the CPU kernels reject and the meta kernels accept ---------------------------


def _low_precision(kernel, A):
    if A.dtype in (torch.float16, torch.bfloat16):
        name = scalar_type_name(A.dtype)
        raise NotImplementedError(f"\"{kernel}\" not implemented for '{name}'")


@argument_check(aten._linalg_svd.default)
def _check_svd(A, full_matrices=False, compute_uv=True, *, driver=None):
    if driver is not None:
        raise RuntimeError(
            "torch.linalg.svd: keyword argument `driver=` is only supported on CUDA inputs "
            "with cuSOLVER backend."
        )
    _low_precision("linalg_svd_cpu", A)


@argument_check(aten.linalg_qr.default)
def _check_qr(A, mode="reduced"):
    _low_precision("geqrf_cpu", A)


@argument_check(aten.linalg_cholesky_ex.default)
def _check_cholesky(A, *, upper=False, check_errors=False):
    _low_precision("cholesky_cpu", A)


@argument_check(aten._linalg_eigh.default)
def _check_eigh(A, UPLO="L", compute_v=True):
    _low_precision("linalg_eigh_cpu", A)


@argument_check(aten.linalg_solve_triangular.default)
def _check_solve_triangular(A, B, *, upper, left=True, unitriangular=False):
    _low_precision("triangular_solve_cpu", A)


@argument_check(aten.linalg_lu_factor_ex.default)
def _check_lu_factor(A, *, pivot=True, check_errors=False):
    _low_precision("lu_cpu", A)
    if not pivot:
        raise RuntimeError("linalg.lu_factor: LU without pivoting is not implemented on the CPU")


@argument_check(aten._linalg_det.default)
def _check_det(A):
    _low_precision("lu_cpu", A)


@argument_check(aten._linalg_solve_ex.default)
def _check_solve(A, B, *, left=True, check_errors=False):
    _low_precision("lu_cpu", A)


@argument_check(aten.linalg_lu_solve.default)
def _check_lu_solve(LU, pivots, B, *, left=True, adjoint=False):
    _low_precision("linalg.lu_solve_cpu", LU)


@layout_arguments(aten._linalg_det.default, aten._linalg_slogdet.default)
def _det_layout(A):
    # torch's kernels factor A^T (det(A^T) = det(A)) to skip a copy into LAPACK's
    # column-major order; the backward formulas solve with that LU on the same test.
    return {"transposed": A.is_contiguous() and not A.is_complex()}


# -- SVD, QR, eigh, Cholesky -----------------------------------------------------------


@lowering(aten._linalg_svd.default)
def svd(ctx, A, full_matrices=False, compute_uv=True, *, driver=None):
    if not compute_uv or {0, 2} <= ctx.unread:  # singular values only
        S = lax_linalg.svd(A, full_matrices=False, compute_uv=False)
        return _placeholder(ctx, 0), S, _placeholder(ctx, 2)
    return lax_linalg.svd(A, full_matrices=full_matrices)


@lowering(aten.linalg_qr.default)
def qr(ctx, A, mode="reduced"):
    if mode == "r":
        return _placeholder(ctx, 0), jnp.linalg.qr(A, mode="r")
    return lax_linalg.qr(A, full_matrices=mode == "complete")


@lowering(aten._linalg_eigh.default)
def eigh(ctx, A, UPLO="L", compute_v=True):
    vectors, values = lax_linalg.eigh(A, lower=UPLO.upper() == "L", symmetrize_input=False)
    return values, vectors if compute_v else _placeholder(ctx, 1)


@lowering(aten.linalg_cholesky_ex.default, checked=True)
def cholesky_ex(ctx, A, *, upper=False, check_errors=False):
    # jax reads the lower triangle; A^H's lower triangle is A's upper one (conjugated),
    # and the upper factor of A is the conjugate transpose of the lower one of A^H.
    read = _mH(A) if upper else A
    L = lax_linalg.cholesky(read, symmetrize_input=False)
    if check_errors:
        info = _cholesky_info(read, L)
        check_info(ctx, info, "linalg.cholesky_ex", A.ndim == 2)
    else:
        info = _placeholder(ctx, 1) if 1 in ctx.unread else _cholesky_info(read, L)
    return (_mH(L) if upper else L), info


def _cholesky_info(a, L):
    """LAPACK's potrf ``info``: 0, or the order of the first leading minor of ``a`` (its
    lower triangle) that is not positive-definite. jax's potrf says only that it failed
    (the whole factor is NaN), so where ``L`` has a NaN, the order is found again by
    potf2's unblocked algorithm: the ``j``-th pivot ``d_j = a_jj - sum_k |l_jk|^2`` (the
    Schur complement's diagonal) that is first not positive, or NaN, gives ``j + 1``,
    the test potrf makes. It runs under ``lax.cond``: only when a factorization failed
    (``n`` rank-1 updates of the batch). A failure the loop does not see again (a pivot
    at the rounding's edge) reports ``n``."""
    n = a.shape[-1]
    none = jnp.zeros(a.shape[:-2], jnp.int32)
    if n == 0:
        return none
    failed = jnp.any(jnp.isnan(L), axis=(-2, -1))

    def first_failing(a):
        s = jnp.tril(a) + _mH(jnp.tril(a, -1))  # the Hermitian matrix potrf reads

        def step(j, carry):
            s, info = carry
            d = jnp.real(s[..., j, j])
            bad = ~(d > 0)
            info = jnp.where((info == 0) & bad, j + 1, info)
            col = s[..., :, j]
            pivot = jnp.where(bad, 1, d)[..., None, None]  # past a failure: any value
            return s - col[..., :, None] * jnp.conj(col)[..., None, :] / pivot, info

        return lax.fori_loop(0, n, step, (s, none))[1]

    found = lax.cond(jnp.any(failed), first_failing, lambda a: none, a)
    return jnp.where(failed, jnp.where(found > 0, found, n), 0)


@lowering(aten.linalg_solve_triangular.default)
def solve_triangular(ctx, A, B, *, upper, left=True, unitriangular=False):
    # The result has A's dtype (torch copies B into it first); batches broadcast.
    batch = ctx.shape[:-2]
    A = jnp.broadcast_to(A, batch + A.shape[-2:])
    B = jnp.broadcast_to(B.astype(ctx.dtype), ctx.shape)
    return lax_linalg.triangular_solve(
        A, B, left_side=left, lower=not upper, unit_diagonal=unitriangular
    )


# -- LU and what torch computes from it ------------------------------------------------


def _lu(A):
    """getrf: the packed factors, 0-based pivots (row ``i`` swapped with ``pivots[i]``)
    and the permutation they make (``A[..., perm, :] = L @ U``)."""
    return lax_linalg.lu(A)


def _lu_info(lu):
    zero = jnp.diagonal(lu, axis1=-2, axis2=-1) == 0
    if zero.shape[-1] == 0:
        return jnp.zeros(zero.shape[:-1], jnp.int32)
    return jnp.where(jnp.any(zero, -1), jnp.argmax(zero, -1) + 1, 0)


def _permutation_sign(pivots):
    swaps = jnp.sum(pivots != jnp.arange(pivots.shape[-1], dtype=pivots.dtype), -1)
    return 1 - 2 * (swaps % 2)


def _lu_solve(lu, perm, b, *, left=True, adjoint=False):
    """``X`` with ``op(M) X = b`` (``left``) or ``X op(M) = b``, where ``op`` is the
    conjugate transpose if ``adjoint`` and ``M[..., perm, :] = L @ U`` (getrs)."""
    if not left:  # X op(M) = b  <=>  op(M)^H X^H = b^H
        return _mH(_lu_solve(lu, perm, _mH(b), adjoint=not adjoint))
    batch = jnp.broadcast_shapes(lu.shape[:-2], b.shape[:-2])
    lu = jnp.broadcast_to(lu, batch + lu.shape[-2:])
    perm = jnp.broadcast_to(perm, batch + perm.shape[-1:])[..., :, None]
    b = jnp.broadcast_to(b, batch + b.shape[-2:])
    solve = lax_linalg.triangular_solve
    if not adjoint:  # L U X = b[perm]
        x = jnp.take_along_axis(b, perm, axis=-2)
        x = solve(lu, x, left_side=True, lower=True, unit_diagonal=True)
        return solve(lu, x, left_side=True, lower=False)
    # M^H = U^H L^H P^T: solve U^H, then L^H, then undo the rows' permutation.
    kw = {"left_side": True, "transpose_a": True, "conjugate_a": True}
    x = solve(lu, b, lower=False, **kw)
    x = solve(lu, x, lower=True, unit_diagonal=True, **kw)
    return jnp.take_along_axis(x, jnp.argsort(perm, axis=-2), axis=-2)


@lowering(aten.linalg_lu_factor_ex.default, checked=True)
def lu_factor_ex(ctx, A, *, pivot=True, check_errors=False):
    lu, pivots, _ = _lu(A)
    info = _lu_info(lu)
    if check_errors:
        check_info(ctx, info, "torch.linalg.lu_factor_ex", A.ndim == 2)
    return lu, pivots + 1, info


@lowering(aten._linalg_det.default)
def det(ctx, A, *, transposed):
    lu, pivots, _ = _lu(_mT(A) if transposed else A)
    diagonal = jnp.diagonal(lu, axis1=-2, axis2=-1)
    sign = _permutation_sign(pivots).astype(A.dtype)
    return sign * jnp.prod(diagonal, -1), lu, pivots + 1


@lowering(aten._linalg_slogdet.default)
def slogdet(ctx, A, *, transposed):
    lu, pivots, _ = _lu(_mT(A) if transposed else A)
    diagonal = jnp.diagonal(lu, axis1=-2, axis2=-1)
    # sgn: z / |z| for complex, 0 for 0 (a singular matrix: sign 0, logabsdet -inf).
    sign = _permutation_sign(pivots).astype(A.dtype) * jnp.prod(jnp.sign(diagonal), -1)
    return sign, jnp.sum(jnp.log(jnp.abs(diagonal)), -1), lu, pivots + 1


@lowering(aten._linalg_solve_ex.default, checked=True)
def solve_ex(ctx, A, B, *, left=True, check_errors=False):
    lu, pivots, perm = _lu(A)
    # torch's vector case: B of shape (n,) or A's batch + (n,) is one column.
    vector = B.ndim == 1 or (B.ndim == A.ndim - 1 and B.shape == A.shape[:-1])
    X = _lu_solve(lu, perm, B[..., None] if vector else B, left=left)
    info = _lu_info(lu)
    if check_errors:
        check_info(ctx, info, "torch.linalg.solve_ex", A.ndim == 2)
    return (X[..., 0] if vector else X), lu, pivots + 1, info


@lowering(aten.linalg_inv_ex.default, checked=True)
def inv_ex(ctx, A, *, check_errors=False):
    lu, _, perm = _lu(A)
    identity = jnp.broadcast_to(jnp.eye(A.shape[-1], dtype=A.dtype), A.shape)
    info = _lu_info(lu)
    if check_errors:
        check_info(ctx, info, "linalg.inv_ex", A.ndim == 2)
    return _lu_solve(lu, perm, identity), info


@lowering(aten.linalg_lu_solve.default)
def lu_solve(ctx, LU, pivots, B, *, left=True, adjoint=False):
    # The backward of det, slogdet and solve: LAPACK's pivots, 1-based.
    perm = lax_linalg.lu_pivots_to_permutation(pivots - 1, LU.shape[-1])
    return _lu_solve(LU, perm, B, left=left, adjoint=adjoint)


@lowering(aten.eye.default, aten.eye.m)
def eye(ctx, n, m=None, **kwargs):
    return jnp.eye(*ctx.shape, dtype=ctx.dtype)
