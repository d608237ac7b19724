"""Reduction lowerings match torch's CPU kernels (values, dtypes, index outputs) with
no CPU fallback: sum/mean/prod, amax/amin, max/min, argmax/argmin, var/std, any/all,
logsumexp, cumsum/cumprod, vector norms."""

import math

import pytest
import torch

from lazax.executor.testing import check_against_cpu

DEV = "lazax"


torch.manual_seed(0)
X = torch.randn(3, 4)
XI = torch.randint(-5, 6, (3, 4), dtype=torch.int32)
XB = torch.randn(3, 4).to(torch.bfloat16)
MASK = X > 0
SCALAR = torch.tensor(2.5)
EMPTY = torch.zeros(0, 3)

CASES = {
    "sum": (lambda x: x.sum(), X),
    "sum_dim": (lambda x: x.sum(0), X),
    "sum_dims_keepdim": (lambda x: x.sum((0, 1), keepdim=True), X),
    "sum_neg_dim_dtype": (lambda x: x.sum(-1, dtype=torch.float64), X),
    "sum_transposed": (lambda x: x.t().sum(0), X),
    "sum_empty_dim_list": (lambda x: x.sum(dim=[]), X),
    "sum_int32_to_int64": (lambda x: x.sum(1), XI),
    "sum_bool": (lambda x: x.sum(), MASK),
    "sum_bf16": (lambda x: x.sum(1), XB),
    "sum_0d": (lambda x: x.sum(0), SCALAR),
    "sum_empty": (lambda x: x.sum(0), EMPTY),
    "mean": (lambda x: x.mean(), X),
    "mean_dim_keepdim": (lambda x: x.mean(1, keepdim=True), X),
    "mean_bf16": (lambda x: x.mean(0), XB),
    "mean_int_dtype": (lambda x: x.mean(0, dtype=torch.float32), XI),
    "prod": (lambda x: x.prod(), X),
    "prod_dim_int": (lambda x: x.prod(1), XI),
    "amax": (lambda x: torch.amax(x, (0, 1)), X),
    "amax_keepdim": (lambda x: torch.amax(x.t(), 1, keepdim=True), X),
    "amin_int": (lambda x: torch.amin(x, 0), XI),
    "aminmax": (lambda x: torch.aminmax(x, dim=1), X),
    "max": (lambda x: x.max(), X),
    "min_bf16": (lambda x: x.min(), XB),
    "max_dim": (lambda x: x.max(0), X),
    "min_dim_keepdim": (lambda x: x.min(1, keepdim=True), X.t()),
    "max_dim_ties_first_index": (lambda x: x.max(1), torch.tensor([[1, 3, 3], [2, 2, 0]])),
    "max_dim_nan": (lambda x: x.max(1), torch.tensor([[1.0, math.nan, 3.0], [0.0, 1.0, -1.0]])),
    "argmax": (lambda x: x.argmax(), X),
    "argmax_dim": (lambda x: x.argmax(1), X),
    "argmin_keepdim": (lambda x: x.argmin(0, keepdim=True), X),
    "argmax_ties": (lambda x: x.argmax(1), torch.tensor([[1, 3, 3], [2, 2, 0]])),
    "argmax_0d": (lambda x: x.argmax(), SCALAR),
    "var": (lambda x: x.var(), X),
    "var_dim": (lambda x: x.var(0), X),
    "std_correction0": (lambda x: x.std(1, correction=0), X),
    "var_correction2_keepdim": (lambda x: x.var(1, correction=2, keepdim=True), X),
    "var_single_is_nan": (lambda x: x.var(0), torch.ones(1, 3)),
    "var_mean": (lambda x: torch.var_mean(x, 1), X),
    "std_mean": (lambda x: torch.std_mean(x, (0, 1), keepdim=True), X),
    "var_bf16": (lambda x: x.var(1), XB),
    "any": (lambda x: x.any(), MASK),
    "any_dim": (lambda x: x.any(0), MASK),
    "all_dim_keepdim": (lambda x: x.all(1, keepdim=True), MASK),
    "any_dims": (lambda x: x.any(dim=(0, 1)), X),
    "all_float": (lambda x: x.all(), X),
    "all_uint8": (lambda x: x.all(1), (X > -1).to(torch.uint8)),
    "logsumexp": (lambda x: x.logsumexp(1), X),
    "logsumexp_keepdim": (lambda x: x.logsumexp((0, 1), keepdim=True), X),
    "logsumexp_inf": (
        lambda x: x.logsumexp(1),
        torch.tensor([[-math.inf, -math.inf], [math.inf, 0.0], [1.0, -math.inf]]),
    ),
    "logsumexp_int": (lambda x: x.logsumexp(0), XI),
    "cumsum": (lambda x: x.cumsum(0), X),
    "cumsum_int32": (lambda x: x.cumsum(1), XI),
    "cumsum_bf16": (lambda x: x.cumsum(-1), XB),
    "cumsum_dtype": (lambda x: x.cumsum(1, dtype=torch.float64), X),
    "cumsum_0d": (lambda x: x.cumsum(0), SCALAR),
    "cumprod": (lambda x: x.cumprod(1), X),
    "norm": (lambda x: x.norm(), X),
    "norm_p1": (lambda x: x.norm(p=1), X),
    "norm_p3": (lambda x: x.norm(p=3), X),
    "norm_dim": (lambda x: x.norm(dim=1), X),
    "norm_p_frac_keepdim": (lambda x: x.norm(p=2.5, dim=0, keepdim=True), X),
    "vector_norm_inf": (lambda x: torch.linalg.vector_norm(x, ord=math.inf, dim=1), X),
    "vector_norm_neg_inf": (lambda x: torch.linalg.vector_norm(x, ord=-math.inf), X),
    "vector_norm_0": (lambda x: torch.linalg.vector_norm(x, ord=0, dim=0), X),
    "vector_norm_bf16": (lambda x: torch.linalg.vector_norm(x), XB),
    "nansum": (lambda x: x.nansum(1), torch.tensor([[1.0, math.nan], [math.nan, math.nan]])),
    "count_nonzero": (lambda x: torch.count_nonzero(x, 0), XI),
    "count_nonzero_all": (lambda x: torch.count_nonzero(x), MASK),
    "logcumsumexp": (lambda x: x.logcumsumexp(1), X),
    "cummax_ties_take_last": (lambda x: x.cummax(1), torch.tensor([[1, 3, 3, 2, 3]])),
    "cummin_nan": (lambda x: x.cummin(0), torch.tensor([2.0, 1.0, math.nan, 0.5, math.nan])),
    "median": (lambda x: x.median(), X),
    "median_even_is_lower": (lambda x: x.median(), torch.tensor([4.0, 1.0, 3.0, 2.0])),
    "median_nan": (lambda x: x.median(), torch.tensor([1.0, math.nan, 3.0])),
    "median_dim": (lambda x: x.median(1), X),
    "median_dim_nan": (
        lambda x: x.median(1, keepdim=True),
        torch.tensor([[1.0, math.nan, 3.0, math.nan], [4.0, 2.0, 0.0, 1.0]]),
    ),
    "kthvalue": (lambda x: x.kthvalue(2, 0), X),
    "kthvalue_keepdim_int": (lambda x: x.kthvalue(3, keepdim=True), XI),
}


@pytest.mark.parametrize("name", list(CASES))
def test_reduction(name):
    fn, x = CASES[name]
    check_against_cpu(fn, x)
