"""Programs the differential fuzzer (``test_fuzz.py``) once found wrong, kept as plain
tests in every mode. Each names what was wrong and stays as the fuzzer shrank it."""

import pytest
import torch

from .fuzz_programs import MODES, check, kept

f32, f64, i64, b8 = torch.float32, torch.float64, torch.int64, torch.bool

FOUND = {
    # Tensor.copy_ with a Python number: the tensor layer tried to upload the number.
    "copy_from_a_number": kept(
        [((4,), f32)],
        """
        v1 = v0.narrow(0, 2, 1)
        v0.copy_(-1)
        v2 = v1.sum()
        """,
    ),
    # Dynamo: two outputs over one new storage (v2 and its permute) came out as
    # separate tensors, so the next graph (after the t_ break) took them as unrelated
    # inputs and the write through v3 never reached v4.
    "outputs_aliasing_one_another_across_a_graph_break": kept(
        [((1,), b8), ((2, 2, 4), i64)],
        """
        v2 = v1.to(torch.float64)
        v3 = v2.permute(2, 0, 1)
        v4 = v2.to(torch.float64)
        v0.t_()
        v4.copy_(-1.5)
        v5 = torch.neg(v3)
        """,
    ),
    # XLA rewrites convert(pred) * y as select(pred, y, 0): False * inf gave 0, not nan.
    "false_times_inf_is_nan": kept(
        [((2, 2, 1), f32)],
        """
        v1 = torch.div(v0, 0)
        v2 = torch.gt(v0, 100)
        v3 = torch.mul(v2, v1)
        v4 = v2.to(torch.float32) * v1
        """,
    ),
    # t_ (an in-place view op) wrote transposed data into its storage, a lowering
    # error for a non-square tensor, instead of changing only its shape and strides.
    "t_of_a_computed_tensor": kept(
        [((1, 1, 3), b8), ((2, 3), f32)],
        """
        v2 = v0.sum(0)
        v2.t_()
        v3 = v2 + 1
        v4 = v1[0]
        v1.t_()
        v1.mul_(2)
        v1.unsqueeze_(0)
        v1.transpose_(0, 2)
        v1.add_(1)
        """,
    ),
    # CPython hashes -1 and -2 alike, so dim=-1 and dim=-2 were one graph: eager mode
    # ran cumsum(dim=-2) with the executable compiled for cumsum(dim=-1).
    "dim_minus_one_and_minus_two": kept(
        [((2, 2), i64)],
        """
        v1 = v0.cumsum(-1)
        v2 = v0.cumsum(-2)
        v3 = torch.softmax(v0.to(torch.float32), -1)
        v4 = torch.softmax(v0.to(torch.float32), -2)
        """,
    ),
}


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("name", sorted(FOUND))
def test_found_program(name, mode):
    check(FOUND[name], mode)
