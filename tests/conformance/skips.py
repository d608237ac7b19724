"""What the conformance suite does not hold lazax to, each with its reason.

- ``SKIPS``: (op id, variant, dtype name or "*", mode or "*") -> reason, by hand. The
  test is skipped with the reason and counted as not passing in docs/coverage.md.
- ``ERROR_SKIPS``: (op id, error input index or "*", mode or "*") -> reason: the cases
  of torch's ``error_inputs`` that ``test_error_inputs.py`` does not hold lazax to.
- ``KNOWN_FAILURES``: the same, read from ``known_failures.json``, which
  ``tools/coverage.py --record-failures`` writes from a coverage run: every case that
  did not pass there, with its first failure as the reason (mode "*": a case that
  fails in lazy mode is not expected to pass in the others). Each is a bug or a missing
  lowering to fix; fixing one and re-recording drops its entry.
- ``VALUES_UNDEFINED``: ops whose values torch leaves undefined (uninitialized memory,
  random draws): checked by dtype and shape only.
- ``RANDOM_SAMPLES``: op id -> a test of one sample: True where that sample's values
  are a random draw (attention with dropout); checked by dtype and shape only.
- ``CPU_ARGUMENTS``: op id -> positions in ``sample.args`` of tensors torch requires on
  the CPU whatever the device (they stay there).
- ``INDICES_AMONG_TIES``: op id -> position of ``dim`` in ``sample.args``: ops whose
  index output may point at any of several equal values (torch promises no order among
  ties); an index output passes when it picks the same values as torch's.
- ``TOLERANCES``: op id -> {dtype: (rtol, atol)} where XLA's math differs from torch's
  CPU kernels by more than the default tolerance, within what the op promises.
- ``GAUGE``: op id -> why: ops whose outputs are defined only up to signs or phases
  (singular vectors, eigenvectors); their shapes and dtypes are compared, then their
  values through the sample's ``output_process_fn_grad`` (torch's own gauge-invariant
  function of them, which its gradient tests use), in every variant.
"""

import json
from pathlib import Path

import torch

SKIPS: dict[tuple[str, str, str, str], str] = {
    # Known wrong or failing; each is a bug to fix (issue 6), not a limit accepted.
    ("polygamma.polygamma_n_1", "inplace", "*", "dynamo"): (
        "BackendCompilerFailed: the in-place polygamma graph does not capture under dynamo"
    ),
}

ERROR_SKIPS: dict[tuple[str, int | str, str], str] = {
    # None today: every error input torch's CPU rejects, lazax rejects alike in every
    # mode (python tools/error_inputs_table.py).
}

VALUES_UNDEFINED: set[str] = {
    # Random draws: lazax draws from XLA's generator, not torch's CPU one.
    "bernoulli",
    "cauchy",
    "exponential",
    "geometric",
    "log_normal",
    "multinomial",
    "normal",
    "normal.in_place",
    "normal.number_mean",
    "uniform",
    "nn.functional.dropout",
    "nn.functional.dropout2d",
    "nn.functional.dropout3d",
    "nn.functional.alpha_dropout",
    "nn.functional.feature_alpha_dropout.with_train",
    "nn.functional.rrelu",
    "nn.functional.fractional_max_pool2d",  # random pooling regions
    "nn.functional.fractional_max_pool3d",
    "svd_lowrank",  # a random projection: the factors differ by more than signs
    "rand_like",
    "randn_like",
    "randint_like",
    "randint",
    "randn",
    "rand",
    "randperm",
    # Uninitialized memory.
    "empty",
    "empty_like",
    "empty_permuted",
    "empty_strided",
    "new_empty",
    "new_empty_strided",
}


def _dropout_p(position: int):
    """True for a sample whose dropout probability (``kwargs["dropout_p"]`` or
    ``args[position]``) is above 0 while training: its output is a random draw."""

    def drawn(sample) -> bool:
        p = sample.kwargs.get("dropout_p")
        if p is None and len(sample.args) > position:
            p = sample.args[position]
        return bool(p) and sample.kwargs.get("training", True)

    return drawn


RANDOM_SAMPLES = {
    "nn.functional.scaled_dot_product_attention": _dropout_p(4),
    "nn.functional.multi_head_attention_forward": _dropout_p(9),
}

INDICES_AMONG_TIES = {
    # torch's CPU kernels (non-stable sort, partial sort in topk, selection in kthvalue)
    # order ties their own way; lazax sorts stably.
    "sort": 0,
    "argsort": 0,
    "topk": 1,
    "kthvalue": 1,
    # mode: the CPU's run over its unstable sort ends on any of the mode's occurrences.
    "mode": 0,
}

GAUGE: dict[str, str] = {
    # LAPACK leaves each singular vector's sign (phase) free, and the columns past the
    # rank with full_matrices=True; jax's gesdd and syevd choose theirs, torch's theirs.
    # OpInfo's samples compare |U|, S, |Vh| and U @ Vh (svd) or the eigenvalues and
    # |eigenvectors| (eigh): the same for any choice.
    "svd": "singular vectors up to sign (phase)",
    "linalg.svd": "singular vectors up to sign (phase)",
    "linalg.eigh": "eigenvectors up to sign (phase)",
    # Its samples have rank q, so the random projection finds the exact factors, up to
    # sign; the samples compare U @ V^H and S.
    "pca_lowrank": "singular vectors up to sign (phase)",
}

CPU_ARGUMENTS: dict[str, set[int]] = {
    # "tensor_split expected tensor_indices_or_sections to be on cpu" on any device.
    "tensor_split": {0},
}

TOLERANCES: dict[str, dict[torch.dtype, tuple[float, float]]] = {
    # OpInfo's attention samples hold values up to 9: logits up to ~600, where one float32
    # rounding of the scaled scores moves an output by ~1e-5 (measured 1.26e-5).
    "nn.functional.scaled_dot_product_attention": {torch.float32: (1.3e-6, 5e-5)},
    # cov's aweights gradient on OpInfo's samples: float32 errors up to 3.05e-5 for both
    # torch and lazax against a float64 run (python tools/grad_error.py cov), beyond
    # twice torch's on one sample where torch's happens to be small (3.8e-7).
    "cov": {torch.float32: (1.3e-6, 5e-5)},
    # torch's CPU linspace steps an integer result per SIMD chunk (a chunk's first value
    # truncated, then whole float steps added), so which values round down depends on
    # the CPU's vector width; lazax truncates each value's own float, one apart at most.
    "linspace": {torch.int64: (0.0, 1.0)},
    "linspace.tensor_overload": {torch.int64: (0.0, 1.0)},
}


def _known_failures() -> dict[tuple[str, str, str, str], str]:
    path = Path(__file__).with_name("known_failures.json")
    if not path.exists():
        return {}
    return {tuple(key.split("|")): reason for key, reason in json.loads(path.read_text()).items()}


KNOWN_FAILURES = _known_failures()
