"""Who is closer to the truth when lazax and torch's CPU kernels disagree on an OpInfo.

    python tools/grad_error.py logcumsumexp                 # float32 gradients
    python tools/grad_error.py addbmm --variant op --dtype bfloat16

For each sample the conformance suite checks (``tests/conformance/harness.py``), runs the
op (or its gradients, with the harness's seeded cotangents) in ``--dtype`` on the CPU and
on lazax, and in float64 on the CPU as the reference, and prints each one's largest
absolute error against the reference and the reference's scale. A tolerance in
``tests/conformance/skips.py`` cites these figures: it is only widened where torch's own
error is of the same size.
"""

from __future__ import annotations

import argparse
import sys
import warnings
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def _run(op, sample, variant: str, index: int, device, dtype):
    """The sample's outputs (or gradients, the harness's seeded cotangents) as float64."""
    import torch
    from torch.utils._pytree import tree_flatten, tree_map

    from tests.conformance.harness import _grad_run

    def move(x):
        if not isinstance(x, torch.Tensor):
            return x
        target = dtype if x.is_floating_point() else x.dtype
        return x.detach().to(device, target).requires_grad_(x.requires_grad)

    x, args, kwargs = tree_map(move, (sample.input, sample.args, sample.kwargs))
    if variant == "grad":
        out = _grad_run(op.op, x, args, kwargs, index)
    else:
        out = op.op(x, *args, **kwargs)
    return [t.detach().cpu().double() for t in tree_flatten(out)[0] if isinstance(t, torch.Tensor)]


def main(argv: list[str]) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("op", help="OpInfo id, as in docs/coverage.md")
    parser.add_argument("--variant", choices=["op", "grad"], default="grad")
    parser.add_argument("--dtype", default="float32")
    args = parser.parse_args(argv)
    sys.path.insert(0, str(ROOT))
    warnings.filterwarnings("ignore")
    import torch
    from torch.testing._internal.common_methods_invocations import op_db

    import lazax.modes as lx
    from tests.conformance.harness import _samples, op_id

    dtype = getattr(torch, args.dtype)
    op = next(o for o in op_db if op_id(o) == args.op)
    for index, sample in enumerate(_samples(op, dtype, args.variant == "grad")):
        try:
            ref = _run(op, sample, args.variant, index, "cpu", torch.float64)
        except Exception:
            continue  # torch rejects this sample in float64 (integer-only arguments)
        cpu = _run(op, sample, args.variant, index, "cpu", dtype)
        lazax = _run(op, sample, args.variant, index, lx.device(), dtype)
        if not ref:
            continue
        scale = max(r.abs().max().item() for r in ref if r.numel())
        errors = [
            max((a - r).abs().max().item() for a, r in zip(got, ref) if r.numel())
            for got in (cpu, lazax)
        ]
        print(f"{index:3d}  torch {errors[0]:.3g}  lazax {errors[1]:.3g}  scale {scale:.3g}")


if __name__ == "__main__":
    main(sys.argv[1:])
