"""``out=`` overloads whose torch composite kernel is wrong on a tensor subclass.

Some of torch's CompositeImplicitAutograd ``out=`` kernels take another branch when an
argument is a tensor subclass (as every lazax tensor is), and that branch does not
write ``out``: ``linalg.matrix_rank(out=)`` computes the rank and drops it (``out``
keeps whatever ``torch.empty`` left), ``fft.ihfft2``/``fft.ihfftn`` resize ``out`` back
to its old shape, ``matmul(out=)`` broadcasts ``out`` against the wrong shape. torch on
the CPU does the same under a ``TorchDispatchMode``: it is torch's, not lazax's, but a
lazax user would get a wrong answer with no error.

For these overloads lazax registers a kernel at the ``AutogradPrivateUse1`` key, which
is reached before torch's composite: it runs the functional overload (decomposed and
lowered as usual) and writes the result into ``out`` as every lazax ``out=`` op does
(resized with torch's warning when its shape differs, cast to its dtype). On fake tensors
of the lazax device (dynamo tracing a graph) it does the same steps in torch ops, so that
the traced graph holds the write.
"""

from __future__ import annotations

import torch

from ..tensor.lazy import LazyTensor
from .plans import aten_overload
from .special import write_outs

# (out= overload, its functional overload); each measured wrong by the OpInfo run.
_BROKEN_OUT = (
    ("linalg_matrix_rank.out", "linalg_matrix_rank.default"),
    ("linalg_matrix_rank.out_tol_tensor", "linalg_matrix_rank.tol_tensor"),
    ("linalg_matrix_rank.atol_rtol_tensor_out", "linalg_matrix_rank.atol_rtol_tensor"),
    ("linalg_matrix_rank.atol_rtol_float_out", "linalg_matrix_rank.atol_rtol_float"),
    ("fft_ihfft2.out", "fft_ihfft2.default"),
    ("fft_ihfftn.out", "fft_ihfftn.default"),
    ("matmul.out", "matmul.default"),
)


def _requires_grad(values) -> bool:
    for v in values:
        if isinstance(v, torch.Tensor) and v.requires_grad:
            return True
        if type(v) in (list, tuple) and _requires_grad(v):
            return True
    return False


def _kernel(out_op, functional):
    out_names = [a.name for a in out_op._schema.arguments if a.kwarg_only and a.alias_info]
    short = out_op._schema.name.split("::")[1]

    def run(*args, **kwargs):
        outs = [kwargs.pop(n) for n in out_names]
        if torch.is_grad_enabled() and _requires_grad([*args, *kwargs.values()]):
            raise RuntimeError(
                f"{short}(): functions with out=... arguments don't support automatic "
                f"differentiation, but one of the arguments requires grad."
            )
        if not any(type(a) is LazyTensor for a in args):
            # Fake tensors of the lazax device (dynamo tracing): the same steps in torch
            # ops, so that the graph holds the write (torch's composite would drop it).
            result = functional(*args, **kwargs)
            results = result if isinstance(result, (tuple, list)) else (result,)
            for out, value in zip(outs, results):
                if out.shape != value.shape:
                    out.resize_(value.shape)
                out.copy_(value)
            return outs[0] if len(outs) == 1 else tuple(outs)
        for out in outs:
            if type(out) is not LazyTensor:
                raise RuntimeError(
                    f"Expected out tensor to have device {args[0].device}, but got "
                    f"{out.device} instead"
                )
        result = functional(*args, **kwargs)
        return write_outs(outs, result if isinstance(result, (tuple, list)) else (result,))

    return run


def composite_out_kernels() -> list[tuple[str, object]]:
    """(out= overload name, lazax's kernel for it), registered by
    ``kernels.register_kernels`` at the ``AutogradPrivateUse1`` key."""
    return [
        (out_name, _kernel(aten_overload(out_name), aten_overload(functional_name)))
        for out_name, functional_name in _BROKEN_OUT
    ]
