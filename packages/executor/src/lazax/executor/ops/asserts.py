"""Device-side assertions as ops with a result, so that a program can carry them.

Contract:
- ``lazax::assert_async(cond, msg)``: torch's ``_assert_async``. Returns ``cond`` as a
  0-dim bool and checks on the device that it is true; if not, ``RuntimeError(msg)`` is
  raised at the next sync point, as CUDA's ``_assert_async`` raises later
  (``barrier.checks``). torch's op returns nothing, so no graph would hold it; the
  dynamo bridge rewrites each ``_assert_async`` of an FX graph into this op and keeps its
  result as an extra output of the graph's program (``F.one_hot``'s range checks under
  ``torch.compile``).
- ``lazax::linalg_check(info, api_name, is_matrix)``: torch's ``_linalg_check_errors``
  (what ``torch.linalg.inv``, ``solve``, ``cholesky`` and ``lu_factor`` call after their
  ``_ex`` form), which on the CPU and CUDA reads ``info`` on the host. Returns whether
  every ``info`` is 0 (a 0-dim bool) and checks it on the device: a non-zero ``info``
  raises ``torch.linalg.LinAlgError`` with torch's message (the first failed batch
  element, LAPACK's code) at the next sync or read (``dispatch.special`` holds the result
  until then; in eager mode, at once). ``check_info`` is that check, for the ``_ex``
  ops' ``check_errors=True`` too.
- On the CPU and on a fake tensor neither op checks anything itself (a fake value has
  none; a CPU caller has torch's ops).
"""

from __future__ import annotations

import jax.numpy as jnp
import torch

from ._registry import lowering

_LIB = torch.library.Library("lazax", "FRAGMENT")
_LIB.define("assert_async(Tensor cond, str msg) -> Tensor")
_LIB.define("linalg_check(Tensor info, str api_name, bool is_matrix) -> Tensor")


def _value(cond, msg):
    # A new tensor: a custom op's result may not alias its input.
    return cond.to(torch.bool).reshape(()).clone()


def _all_zero(info, api_name, is_matrix):
    return (info == 0).all()


_LIB.impl("assert_async", _value, "CompositeExplicitAutograd")
torch.library.register_fake("lazax::assert_async", _value, lib=_LIB)
_LIB.impl("linalg_check", _all_zero, "CompositeExplicitAutograd")
torch.library.register_fake("lazax::linalg_check", _all_zero, lib=_LIB)


@lowering("lazax::assert_async", checked=True)
def assert_async(ctx, cond, msg):
    holds = cond.astype(bool).reshape(())
    ctx.check(~holds, None, "RuntimeError", msg)
    return holds


# The failed check's value: the batch element's index in the high 32 bits, LAPACK's
# info (offset to be non-negative) in the low ones.
_OFFSET = 2**31


# torch's _linalg_check_errors, in its order: the first name found in the api's picks
# the message ({head}: the api, and the failed batch element; {info}: LAPACK's code) and
# the error (TORCH_CHECK_LINALG's LinAlgError, lu_factor's plain RuntimeError).
_LINALG_ERRORS = (
    (
        ("inv",),
        "{head}: The diagonal element {info} is zero, the inversion could not be completed "
        "because the input matrix is singular.",
        "LinAlgError",
    ),
    (
        ("solve",),
        "{head}: The solver failed because the input matrix is singular.",
        "LinAlgError",
    ),
    (
        ("cholesky",),
        "{head}: The factorization could not be completed because the input is not "
        "positive-definite (the leading minor of order {info} is not positive-definite).",
        "LinAlgError",
    ),
    (
        ("svd",),
        "{head}: The algorithm failed to converge because the input matrix is "
        "ill-conditioned or has too many repeated singular values (error code: {info}).",
        "LinAlgError",
    ),
    (
        ("eig", "syevd"),
        "{head}: The algorithm failed to converge because the input matrix is "
        "ill-conditioned or has too many repeated eigenvalues (error code: {info}).",
        "LinAlgError",
    ),
    (
        ("lstsq",),
        "{head}: The least squares solution could not be computed because the input "
        "matrix does not have full rank (error code: {info}).",
        "LinAlgError",
    ),
    (
        ("lu_factor",),
        "{head}: U[{info},{info}] is zero and using it on lu_solve would result in a "
        "division by zero. If you still want to perform the factorization, consider "
        "calling linalg.lu(A, pivot) or linalg.lu_factor_ex(A, pivot)",
        "RuntimeError",
    ),
)
_UNKNOWN = ((), "{api}: Unknown error code: {info}.", "RuntimeError")


def _linalg_error(api_name: str) -> tuple:
    return next((e for e in _LINALG_ERRORS if any(k in api_name for k in e[0])), _UNKNOWN)


class LinalgMessage:
    """torch's ``_linalg_check_errors`` message for one failed ``info`` (picklable: the
    executable's annotations keep it)."""

    __slots__ = ("api_name", "is_matrix")

    def __init__(self, api_name: str, is_matrix: bool) -> None:
        self.api_name = api_name
        self.is_matrix = is_matrix

    def __call__(self, value: int) -> str:
        index, info = value >> 32, (value & 0xFFFFFFFF) - _OFFSET
        api = self.api_name
        head = api if self.is_matrix else f"{api}: (Batch element {index})"
        if info < 0:
            return (
                f"{head}: Argument {-info} has illegal value. Most certainly there is a bug "
                "in the implementation calling the backend library."
            )
        return _linalg_error(api)[1].format(head=head, api=api, info=info)


def check_info(ctx, info, api_name: str, is_matrix: bool) -> None:
    """``ctx.check`` of torch's ``_linalg_check_errors(info, api_name, is_matrix)``: a
    non-zero ``info`` raises torch's error and message (also the ``_ex`` ops'
    ``check_errors=True``)."""
    flat = info.reshape(-1).astype(jnp.int64)
    where = jnp.arange(flat.size, dtype=jnp.int64) << 32
    error = _linalg_error(api_name)[2]
    ctx.check(flat != 0, where + flat + _OFFSET, error, LinalgMessage(api_name, is_matrix))


@lowering("lazax::linalg_check", checked=True)
def linalg_check(ctx, info, api_name, is_matrix):
    check_info(ctx, info, api_name, is_matrix)
    return jnp.all(info == 0)
