"""Oracles beyond ``assert_close`` against torch's CPU result, for the conformance suite.

``no_less_accurate``: when lazax and torch's CPU kernel disagree past the tolerance, is
lazax about as close to the exact answer as torch is?

torch's CPU kernels round some intermediate steps to the tensor's dtype (bfloat16 matmul
and convolution accumulate in blocks, some backward formulas cancel), XLA rounds at
other places. Where two float results differ by more than the dtype's tolerance, the
same sample is run on the CPU in float64 (``harness._float64_run``), and each float
output of lazax passes when
- it is within the tolerance of the float64 run itself (an exactly-zero gradient where
  torch's rounding leaves 6e-5), or
- its largest error against that run is at most twice torch's (two roundings on either
  side of the exact value differ by two), where the run is trusted: torch's error is
  under 5% of the outputs' scale (the largest of them all, so that a zero gradient
  beside others is judged on theirs). An output defined up to a sign or an order
  (eigenvectors, SVD factors) is thus never let through by torch's disagreement.
Non-float outputs must be equal.

``picker``/``same_picks``: for ops in ``skips.INDICES_AMONG_TIES`` (sort, topk, ...),
whose index output may point at any of several equal values, an index output passes
when it picks the same values as torch's.
"""

from __future__ import annotations

import torch
from torch.utils._pytree import tree_flatten

from .skips import INDICES_AMONG_TIES

TRUSTED = 0.05  # torch's error against float64, as a share of the output's scale
SLACK = 2.0  # lazax's error may be this many times torch's


def _error(value: torch.Tensor, reference: torch.Tensor) -> float:
    diff = (value.detach().cpu().to(reference.dtype) - reference).abs()
    finite = torch.isfinite(diff)
    return diff[finite].max().item() if finite.any() else 0.0


def _scale(r: torch.Tensor) -> float:
    if not (r.is_floating_point() or r.is_complex()):
        return 0.0
    finite = r.detach()[torch.isfinite(r.detach())]
    return finite.abs().max().item() if finite.numel() else 0.0


def no_less_accurate(got, expected, reference, close=None) -> bool:
    """True when ``got`` (lazax) is within torch's own error (``expected``) of
    ``reference`` (the float64 run), output by output; ``close(g, e)``: an output that
    already matches torch's within the tolerance needs no reference."""
    try:
        ref = reference()
    except Exception:
        return False  # torch does not run this sample in float64
    got_leaves, _ = tree_flatten(got)
    exp_leaves, _ = tree_flatten(expected)
    ref_leaves, _ = tree_flatten(ref)
    if not (len(got_leaves) == len(exp_leaves) == len(ref_leaves)):
        return False
    scale = max((_scale(r) for r in ref_leaves if isinstance(r, torch.Tensor)), default=0.0)
    for g, e, r in zip(got_leaves, exp_leaves, ref_leaves):
        if not isinstance(e, torch.Tensor) or not (e.is_floating_point() or e.is_complex()):
            if isinstance(e, torch.Tensor) and not torch.equal(g.detach().cpu(), e.detach()):
                return False
            continue
        if g is None or r is None or g.shape != e.shape or r.shape != e.shape:
            return False
        if close is not None and close(g, e):
            continue
        r = r.detach().to(torch.complex128 if r.is_complex() else torch.float64)
        if not torch.equal(torch.isnan(g.detach().cpu()), torch.isnan(e.detach())):
            return False
        if close is not None and close(g, r.to(e.dtype)):
            continue  # lazax matches the float64 run itself
        torch_error = _error(e, r)
        if torch_error > TRUSTED * scale:
            return False
        if _error(g, r) > SLACK * torch_error:
            return False
    return True


def same_picks(pick, got, expected) -> bool:
    try:
        torch.testing.assert_close(pick(got), pick(expected), rtol=0, atol=0, equal_nan=True)
    except (AssertionError, RuntimeError, IndexError):
        return False
    return True


def picker(name: str, sample):
    """For an op in ``INDICES_AMONG_TIES``: the sample input's values at given indices
    along the op's dimension (indices of a reduced dimension get it back first)."""
    if name not in INDICES_AMONG_TIES or not isinstance(sample.input, torch.Tensor):
        return None
    position = INDICES_AMONG_TIES[name]
    dim = sample.kwargs.get("dim", sample.args[position] if len(sample.args) > position else -1)
    x = sample.input.detach()
    if x.ndim == 0:
        return lambda idx: x.reshape(1)[idx.reshape(-1)]

    def pick(idx):
        if idx.ndim < x.ndim:
            idx = idx.unsqueeze(dim)
        return x.gather(dim, idx)

    return pick
