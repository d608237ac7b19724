"""Matrix-product lowerings match torch's CPU results with no CPU fallback: mm, bmm, mv,
dot, vdot, addmm/baddbmm/addmv/addbmm/addr with beta/alpha, matmul/linear/einsum (which
decompose into them), bfloat16 and integer inputs, and mm's autograd."""

import pytest
import torch
import torch.nn.functional as F

from lazax.executor.testing import check_against_cpu, no_cpu_fallback

DEV = "lazax"


torch.manual_seed(0)
A = torch.randn(3, 4)
B = torch.randn(4, 5)
C = torch.randn(3, 5)
V = torch.randn(4)
BA = torch.randn(2, 3, 4)
BB = torch.randn(2, 4, 5)

CASES = {
    "mm": (lambda a, b: a @ b, A, B),
    "mm_transposed": (lambda a, b: a.t() @ b.t(), B, A),
    "mm_int64": (lambda a, b: a @ b, A.round().long(), B.round().long()),
    "mm_bf16": (lambda a, b: a @ b, A.bfloat16(), B.bfloat16()),
    "mm_f64": (lambda a, b: a @ b, A.double(), B.double()),
    "mm_empty_inner": (lambda a, b: a @ b, torch.zeros(3, 0), torch.zeros(0, 2)),
    "bmm": (lambda a, b: torch.bmm(a, b), BA, BB),
    "bmm_transposed": (lambda a, b: torch.bmm(a, b.transpose(1, 2)), BA, BA),
    "mv": (lambda a, v: a @ v, A, V),
    "dot": (lambda u, v: torch.dot(u, v), V, V * 2),
    "vdot_complex": (
        lambda u, v: torch.vdot(u, v),
        torch.randn(4, dtype=torch.complex64),
        torch.randn(4, dtype=torch.complex64),
    ),
    "addmm": (lambda c, a, b: torch.addmm(c, a, b), C, A, B),
    "addmm_beta_alpha": (lambda c, a, b: torch.addmm(c, a, b, beta=0.5, alpha=2.0), C, A, B),
    "addmm_beta0_ignores_nan": (
        lambda c, a, b: torch.addmm(c, a, b, beta=0),
        torch.full((3, 5), float("nan")),
        A,
        B,
    ),
    "addmm_broadcast_bias": (lambda c, a, b: torch.addmm(c, a, b, alpha=-1), C[0], A, B),
    "addmm_bf16": (lambda c, a, b: torch.addmm(c, a, b), C.bfloat16(), A.bfloat16(), B.bfloat16()),
    "baddbmm": (lambda c, a, b: torch.baddbmm(c, a, b, beta=2.0, alpha=0.5), C, BA, BB),
    "addbmm": (lambda c, a, b: torch.addbmm(c, a, b, beta=0.5), C, BA, BB),
    "addmv": (lambda c, a, v: torch.addmv(c, a, v, alpha=3.0), C[:, 0], A, V),
    "addr": (lambda c, u, v: torch.addr(c, u, v, beta=2.0), C[:, :4], C[:, 0], V),
    "matmul_batched_broadcast": (lambda a, b: torch.matmul(a, b), BA, B),
    "matmul_vec": (lambda a, v: torch.matmul(a, v), BA, V),
    "linear": (lambda x, w, b: F.linear(x, w, b), BA, B.t(), C[0]),
    "linear_no_bias": (lambda x, w: F.linear(x, w), A, B.t()),
    "einsum": (lambda a, b: torch.einsum("bij,bjk->bik", a, b), BA, BB),
    "trace": (lambda a: torch.trace(a), A),
    "trace_int": (lambda a: torch.trace(a), A.round().int()),
}


@pytest.mark.parametrize("name", list(CASES))
def test_linalg(name):
    fn, *args = CASES[name]
    check_against_cpu(fn, *args)


def test_mm_autograd():
    a, b = A.clone().requires_grad_(), B.clone().requires_grad_()
    (torch.tanh(a @ b) * C).sum().backward()
    with no_cpu_fallback():
        la = A.to(DEV).requires_grad_()
        lb = B.to(DEV).requires_grad_()
        (torch.tanh(la @ lb) * C.to(DEV)).sum().backward()
        torch.testing.assert_close(la.grad.cpu(), a.grad, rtol=1e-5, atol=1e-6)
        torch.testing.assert_close(lb.grad.cpu(), b.grad, rtol=1e-5, atol=1e-6)
