"""What the factorization tests (``test_ops_factorizations.py``,
``test_ops_factorizations_lu.py``) share: the dtypes they cover with their tolerances,
seeded inputs (``_randn``, ``_spd``: Hermitian positive definite), and ``_on_device``,
which runs a function on lazax and asserts that the op was traced and nothing ran
through the CPU fallback."""

import torch

import lazax.modes as lx
from lazax.executor.testing import no_cpu_fallback

DEV = "lazax"
aten = torch.ops.aten
DTYPES = (torch.float32, torch.float64, torch.complex64, torch.complex128)
TOL = {
    torch.float32: {"rtol": 1e-4, "atol": 1e-4},
    torch.complex64: {"rtol": 1e-4, "atol": 1e-4},
    torch.float64: {"rtol": 1e-10, "atol": 1e-10},
    torch.complex128: {"rtol": 1e-10, "atol": 1e-10},
}


def _gen(seed=0):
    return torch.Generator().manual_seed(seed)


def _randn(*shape, dtype=torch.float32, seed=0):
    return torch.randn(*shape, dtype=dtype, generator=_gen(seed))


def _spd(*shape, dtype=torch.float32, seed=0):
    a = _randn(*shape, dtype=dtype, seed=seed)
    return a @ a.mH + shape[-1] * torch.eye(shape[-1], dtype=dtype)


def _on_device(fn, *args, op):
    """``fn`` on lazax copies of ``args``, its outputs on the CPU; asserts that ``op``
    (``"aten::_linalg_svd"``) was traced and that nothing ran through the CPU fallback."""
    lx.metrics.clear_all()
    with no_cpu_fallback():
        out = fn(*[a.to(DEV) if isinstance(a, torch.Tensor) else a for a in args])
        outs = tuple(o.cpu() for o in (out if isinstance(out, tuple) else (out,)))
    assert lx.metrics.counter_value(op) is None, f"{op} ran on the CPU"
    assert lx.metrics.traced_op_counts().get(op), f"{op} was not traced"
    return outs


def _same_specs(got, expected):
    expected = expected if isinstance(expected, tuple) else (expected,)
    assert [(g.shape, g.dtype) for g in got] == [(e.shape, e.dtype) for e in expected]


def _identity(n, like):
    return torch.eye(n, dtype=like.dtype).expand(*like.shape[:-2], n, n)
