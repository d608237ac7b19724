"""The op library: aten op -> jax lowering rules, one module per op family.

Importing this package registers every rule (see ``_registry`` for the contract).
"""

# Families register their rules on import.
from . import (  # noqa: E402,F401
    activations,  # relu, gelu, silu, elu, softplus, hard*, threshold (+ backward)
    antialias,  # _upsample_bilinear2d_aa / _upsample_bicubic2d_aa (+ backward)
    asserts,  # lazax::assert_async: torch's _assert_async as a checked op
    bags,  # _embedding_bag (nn.EmbeddingBag: sum, mean, max) + backward
    batch_norms,  # _batch_norm_with_update_functional (traced graphs' training batch norm)
    bessel,  # special_bessel_j0/j1/y0/y1, modified (scaled) i0/i1/k0/k1, spherical j0, airy
    collectives,  # torch's functional collectives, between the job's processes
    conv,  # convolution (+ transposed), reflection/replication padding, pixel shuffle
    core,  # copies, conversions, factories, view pseudo-ops
    ctc,  # _ctc_loss (F.ctc_loss: alpha recursion as a scan) + backward
    distances,  # dist, renorm, cdist (+ backward), _euclidean_dist, linalg_cross
    elementwise,  # binary math, comparisons, logic/bits, where, clamp, lerp, addcmul
    experts,  # _grouped_mm (mixture-of-experts products), transformers' grouped_mm ops
    factorizations,  # torch.linalg: svd, qr, cholesky, eigh, LU (det, solve, inv), eye
    fft,  # _fft_r2c, _fft_c2r, _fft_c2c (every torch.fft function, + gradients)
    floats,  # frexp, complex/polar (+ their out= dtype checks), mvlgamma
    foreach,  # the _foreach_* ops optimizers use
    gamma_zeta,  # igamma/igammac, polygamma, special_zeta, special_erfcx
    histograms,  # histc (integer inputs too, as on CUDA)
    index_reduce,  # index_reduce (prod, mean, amax, amin; include_self both ways)
    indexing,  # cat/stack, index/index_put, gather/scatter, index_add/copy/fill, take
    jax_calls,  # lazax::call_jax: a JAX function as one node (+ its vjp)
    linalg,  # mm, bmm, addmm, baddbmm, dot
    losses,  # nll, mse, binary cross entropy, smooth L1/Huber (+ backward)
    manual,  # manual sharding's ends and its all-reduce (lazax::manual_*)
    masked,  # masked_scatter (+ backward), _unsafe_masked_index(_put_accumulate), put, max_unpool
    mathops,  # shifts, gcd/lcm, isin, block_diag, unsafe_split, narrow_copy, ...
    medians,  # nanmedian (all and .dim), mode (torch's CPU tie-breaking)
    nn,  # softmax, layer/group/batch norm, embedding (+ backward)
    polynomials,  # special_*_polynomial_*: Chebyshev (shifted), Hermite, Laguerre, Legendre
    pooling,  # max/avg/adaptive pooling, upsampling (+ backward)
    random,  # normal_, uniform_, bernoulli, random_
    reductions,  # sum, mean, max/min, argmax, var/std, prod, any/all
    rnn,  # the fused LSTM/GRU cells of nn.LSTM/GRU off the CPU (+ backward)
    sampling,  # grid_sampler_2d (F.grid_sample) (+ backward)
    shapes,  # triu/tril, arange, flip, roll, repeat, constant_pad_nd, diag_embed
    sharding,  # lazax::shard, the sharding constraint
    sorting,  # sort, topk, searchsorted, bucketize, nonzero_static
    special,  # deg2rad, hypot, copysign, sinc, xlogy, logaddexp, lgamma/digamma, Bessel
    transformer,  # the fused fast-path ops of nn.MultiheadAttention/TransformerEncoderLayer
    unary,  # exp/log, trig, sigmoid, erf, sign, rounding, logit, isnan/isinf
    unfold_backward,  # the backward of Tensor.unfold (an overlap-add)
    views,  # view ops and reshapes
    vision,  # prelu, im2col/col2im, adaptive max pool, bicubic, _trilinear, embedding_renorm
    weight_norm,  # _weight_norm_interface (nn.utils weight_norm's fused op) + backward
)
from ._registry import (
    DuplicateLoweringError,
    Lowering,
    LoweringContext,
    checked_ops,
    get_lowering,
    lowering,
    op_name,
    registered_ops,
)

__all__ = [
    "DuplicateLoweringError",
    "Lowering",
    "LoweringContext",
    "checked_ops",
    "get_lowering",
    "lowering",
    "op_name",
    "registered_ops",
]
