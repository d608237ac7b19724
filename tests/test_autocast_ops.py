"""Every op of torch's CUDA autocast lists that torch's op database has samples for, run
under ``torch.autocast("lazax", dtype=torch.bfloat16)``: the output dtype is the one the
CUDA policy gives float32 inputs, and the values are those of the op run on the CPU
on inputs as that policy casts them (rounded to bfloat16 for the lower-precision list,
computed in float32 and rounded to bfloat16 as XLA does; as they are for the others).
Two samples per OpInfo, lazy mode.
"""

import pytest
import torch
from torch.testing._internal.common_methods_invocations import op_db
from torch.utils._pytree import tree_flatten, tree_map

import lazax.modes as lx
from lazax.executor.hooks.autocast import BANNED, LOWER, POLICY

DEV = lx.device()
BF16 = torch.bfloat16
_BASES: dict[str, set] = {}
for _name, _policy in POLICY.items():
    _BASES.setdefault(_name.split(".")[0], set()).add(_policy)


def _policy_of(op):
    for name in (op.aten_name, op.name.split(".")[-1]):
        policies = _BASES.get(name)
        if policies and len(policies) == 1 and BANNED not in policies:
            return next(iter(policies))
    return None


OPS = [op for op in op_db if _policy_of(op) is not None and not op.name.startswith("sparse")]


def _rounded(value):
    """A float32 input as the lower-precision list sees it: rounded to bfloat16."""
    if isinstance(value, torch.Tensor) and value.dtype == torch.float32:
        return value.to(BF16).float()
    return value


def _to_bf16(value):
    if isinstance(value, torch.Tensor) and value.dtype == torch.float32:
        return value.to(BF16)
    return value


def _floats(out):
    return [
        t for t in tree_flatten(out)[0] if isinstance(t, torch.Tensor) and t.is_floating_point()
    ]


def test_the_database_covers_most_of_the_lists():
    covered = {n for op in OPS for n in (op.aten_name, op.name.split(".")[-1])}
    assert len(covered & set(_BASES)) >= 60


@pytest.mark.parametrize("op", OPS, ids=lambda op: f"{op.name}.{op.variant_test_name}".strip("."))
def test_policy_dtype_and_values(op):
    policy = _policy_of(op)
    checked = 0
    for sample in list(op.sample_inputs("cpu", torch.float32))[:2]:
        args = (sample.input, *sample.args)
        kwargs = sample.kwargs
        # The lower-precision list: bfloat16 inputs, a float32 computation (XLA's
        # accumulation; the CPU's own bfloat16 kernels may round partial sums), a
        # bfloat16 result. The other lists see float32 inputs as they are.
        if policy == LOWER:
            expected = tree_map(_to_bf16, op(*tree_map(_rounded, args), **kwargs))
        else:
            expected = op(*args, **kwargs)
        to_dev = lambda v: v.to(DEV) if isinstance(v, torch.Tensor) else v  # noqa: E731
        with torch.autocast("lazax", dtype=BF16):
            got = op(*tree_map(to_dev, args), **tree_map(to_dev, kwargs))
        got, expected = _floats(got), _floats(expected)
        assert len(got) == len(expected)
        for g, e in zip(got, expected):
            assert g.dtype == e.dtype, f"{op.name}: {g.dtype} != {e.dtype} ({policy})"
            tol = 2e-2 if e.dtype == BF16 else 1e-3
            torch.testing.assert_close(g.cpu(), e, rtol=tol, atol=tol, equal_nan=True)
        checked += 1
    if not checked:
        pytest.skip("no float32 sample")
