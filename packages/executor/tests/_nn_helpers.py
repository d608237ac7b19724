"""What the nn tests (``test_ops_nn.py``, ``test_ops_nn_spatial.py``) share: the device
name, and ``check_grads``, which runs a loss forward and backward on lazax and compares
its value and gradients with torch's on the CPU, with no CPU fallback."""

import torch

from lazax.executor.testing import no_cpu_fallback

DEV = "lazax"


def check_grads(fn, *args, grad_args=(0,), rtol=1e-5, atol=1e-6):
    """``fn(*args).backward()`` on lazax gives torch's CPU value and gradients."""
    cpu = [a.clone().requires_grad_() if i in grad_args else a for i, a in enumerate(args)]
    expected = fn(*cpu)
    expected.backward()
    with no_cpu_fallback():
        lz = [
            a.to(DEV).requires_grad_() if i in grad_args else a.to(DEV) for i, a in enumerate(args)
        ]
        got = fn(*lz)
        got.backward()
        torch.testing.assert_close(got.detach().cpu(), expected.detach(), rtol=rtol, atol=atol)
        for i in grad_args:
            torch.testing.assert_close(lz[i].grad.cpu(), cpu[i].grad, rtol=rtol, atol=atol)
