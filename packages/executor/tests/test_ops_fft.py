"""FFT on the device: every torch.fft function (fft, ifft, rfft, irfft, fft2, fftn and
their inverses, hfft/ihfft) matches torch on the CPU with no CPU fallback, for real and
complex inputs, single and double precision, odd and even sizes, one to four
dimensions, the three normalizations and the ``n``/``s`` padding and trimming; so do
their gradients, ``view_as_complex``/``view_as_real`` (reads and writes through them)
and a whole-graph ``lx.compile(full_graph=True)`` region of FFTs."""

import pytest
import torch

import lazax.modes as lx
from lazax.executor.testing import deferred_check, no_cpu_fallback

DEV = "lazax"
TOL = {"rtol": 1e-4, "atol": 1e-4}

torch.manual_seed(0)
REAL = torch.randn(4, 6, 5)
CPLX = torch.randn(4, 6, 5, dtype=torch.complex64)
ODD = torch.randn(3, 7)
NORMS = ("backward", "ortho", "forward")

FORWARD = {
    "fft": (lambda x, norm: torch.fft.fft(x, norm=norm), CPLX),
    "fft_of_real": (lambda x, norm: torch.fft.fft(x, dim=0, norm=norm), REAL),
    "fft_n_pads": (lambda x, norm: torch.fft.fft(x, n=9, norm=norm), CPLX),
    "ifft_n_trims": (lambda x, norm: torch.fft.ifft(x, n=3, dim=1, norm=norm), CPLX),
    "rfft": (lambda x, norm: torch.fft.rfft(x, norm=norm), REAL),
    "rfft_odd": (lambda x, norm: torch.fft.rfft(x, norm=norm), ODD),
    "irfft": (lambda x, norm: torch.fft.irfft(x, norm=norm), CPLX),
    "irfft_odd_n": (lambda x, norm: torch.fft.irfft(x, n=7, dim=-2, norm=norm), CPLX),
    "fft2": (lambda x, norm: torch.fft.fft2(x, norm=norm), REAL),
    "ifft2": (lambda x, norm: torch.fft.ifft2(x, norm=norm), CPLX),
    "fftn": (lambda x, norm: torch.fft.fftn(x, norm=norm), CPLX),
    "ifftn_s": (lambda x, norm: torch.fft.ifftn(x, s=(3, 8), norm=norm), CPLX),
    "rfft2": (lambda x, norm: torch.fft.rfft2(x, norm=norm), REAL),
    "irfft2": (lambda x, norm: torch.fft.irfft2(x, s=(5, 6), norm=norm), CPLX),
    "rfftn": (lambda x, norm: torch.fft.rfftn(x, norm=norm), REAL),
    "irfftn": (lambda x, norm: torch.fft.irfftn(x, dim=(0, 2), norm=norm), CPLX),
    "hfft": (lambda x, norm: torch.fft.hfft(x, norm=norm), CPLX),
    "ihfft": (lambda x, norm: torch.fft.ihfft(x, norm=norm), REAL),
    "fftn_four_dims": (
        lambda x, norm: torch.fft.fftn(x, norm=norm),
        torch.randn(2, 3, 4, 5, dtype=torch.complex64),
    ),
    "rfftn_four_dims": (lambda x, norm: torch.fft.rfftn(x, norm=norm), torch.randn(2, 3, 4, 6)),
    "irfftn_four_dims": (
        lambda x, norm: torch.fft.irfftn(x, norm=norm),
        torch.randn(2, 3, 4, 4, dtype=torch.complex64),
    ),
    "fft_float64": (lambda x, norm: torch.fft.fft(x, norm=norm), REAL.double()),
    "irfft_complex128": (lambda x, norm: torch.fft.irfft(x, norm=norm), CPLX.to(torch.complex128)),
    "rfft_int": (lambda x, norm: torch.fft.rfft(x, norm=norm), torch.arange(10)),
    "fftshift_roundtrip": (
        lambda x, norm: torch.fft.ifft(torch.fft.fftshift(torch.fft.fft(x, norm=norm)), norm=norm),
        CPLX,
    ),
}


@pytest.mark.parametrize("norm", NORMS)
def test_fft_functions_match_the_cpu(norm):
    with no_cpu_fallback():
        for fn, x in FORWARD.values():
            deferred_check(fn, x, norm, **TOL)


def test_primitive_ops_directly():
    """The aten ops with arguments the Python layer rarely passes: a two-sided r2c, a
    c2c over unsorted dims, a c2r over several dims."""
    aten = torch.ops.aten
    with no_cpu_fallback():
        deferred_check(lambda x: aten._fft_r2c(x, [0, 2], 1, False), REAL, **TOL)
        deferred_check(lambda x: aten._fft_c2c(x, [2, 0], 2, False), CPLX, **TOL)
        deferred_check(lambda x: aten._fft_c2r(x, [2, 1], 0, 10), CPLX, **TOL)


def _loss(y):
    """A real function of every output element (complex ones through both parts)."""
    w = torch.linspace(-1.0, 1.0, y.numel()).reshape(y.shape)
    if y.is_complex():
        y = torch.view_as_real(y.resolve_conj())
        w = torch.stack([w, w.flip(0)], -1)
    return (y * w.to(y.device)).sum()


GRADIENTS = {
    "fft": (lambda x: torch.fft.fft(x), CPLX),
    "ifft_ortho": (lambda x: torch.fft.ifft(x, norm="ortho"), CPLX),
    "rfft": (lambda x: torch.fft.rfft(x), REAL),
    "rfft_odd_forward": (lambda x: torch.fft.rfft(x, norm="forward"), ODD),
    "irfft": (lambda x: torch.fft.irfft(x), CPLX),
    "irfft_n": (lambda x: torch.fft.irfft(x, n=9, norm="ortho"), CPLX),
    "fft2_of_real": (lambda x: torch.fft.fft2(x), REAL),
    "rfftn": (lambda x: torch.fft.rfftn(x), REAL),
    "irfftn_s": (lambda x: torch.fft.irfftn(x, s=(4, 5, 8)), CPLX),
    "hfft": (lambda x: torch.fft.hfft(x), CPLX),
    "ihfft": (lambda x: torch.fft.ihfft(x), REAL),
}


@pytest.mark.parametrize("name", list(GRADIENTS))
def test_fft_gradients_match_the_cpu(name):
    fn, x = GRADIENTS[name]
    expected = x.clone().requires_grad_()
    _loss(fn(expected)).backward()
    with no_cpu_fallback():
        got = x.to(DEV).requires_grad_()
        _loss(fn(got)).backward()
        grad = got.grad.cpu()
    torch.testing.assert_close(grad, expected.grad, **TOL)


def test_view_as_complex_reads_and_writes_its_base():
    pairs = torch.randn(3, 4, 2)
    with no_cpu_fallback():
        deferred_check(lambda p: torch.view_as_complex(p) * (1 + 2j), pairs)
        conjugate = lambda p: torch.view_as_complex(p).conj().resolve_conj()  # noqa: E731
        deferred_check(lambda p: torch.view_as_real(conjugate(p)), pairs)

        def write_through(p):
            torch.view_as_complex(p).mul_(1j)
            torch.view_as_real(torch.view_as_complex(p))[..., 0].add_(1)
            return p

        deferred_check(write_through, pairs)


def test_a_full_graph_compiled_spectral_filter():
    """A whole region of FFTs compiles as one program (no CPU fallback to refuse)."""

    def low_pass(x):
        spectrum = torch.fft.rfft(x, dim=-1)
        spectrum[..., 3:] = 0
        return torch.fft.irfft(spectrum, n=x.shape[-1], dim=-1)

    x = torch.randn(4, 16)
    with no_cpu_fallback():
        got = lx.compile(low_pass, full_graph=True)(x.to(DEV)).cpu()
    torch.testing.assert_close(got, low_pass(x), **TOL)
