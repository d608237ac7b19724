"""Spatial nn lowerings match torch's CPU kernels with no CPU fallback, forward and
backward: convolution (plain, grouped, dilated, transposed; 1-d to 3-d) and its backward,
max / average / adaptive average pooling, upsampling (nearest, bilinear, linear,
trilinear), reflection and replication padding, pixel shuffle. The other nn lowerings:
``test_ops_nn.py``."""

import pytest
import torch
import torch.nn.functional as F

from lazax.executor.testing import check_against_cpu, no_cpu_fallback

from ._nn_helpers import DEV, check_grads

torch.manual_seed(0)

CASES = {
    "conv2d": (
        lambda x, w, b: F.conv2d(x, w, b, stride=2, padding=1),
        torch.randn(2, 3, 7, 6),
        torch.randn(4, 3, 3, 3),
        torch.randn(4),
    ),
    "conv2d_groups_dilation": (
        lambda x, w: F.conv2d(x, w, groups=2, dilation=(2, 1), padding=(2, 0)),
        torch.randn(1, 4, 6, 5),
        torch.randn(6, 2, 3, 2),
    ),
    "conv1d_same": (
        lambda x, w: F.conv1d(x, w, padding="same"),
        torch.randn(2, 3, 9),
        torch.randn(5, 3, 3),
    ),
    "conv3d": (lambda x, w: F.conv3d(x, w), torch.randn(1, 2, 4, 4, 3), torch.randn(2, 2, 2, 2, 2)),
    "conv_transpose2d": (
        lambda x, w, b: F.conv_transpose2d(x, w, b, stride=2, padding=1, output_padding=1),
        torch.randn(2, 4, 3, 4),
        torch.randn(4, 3, 3, 3),
        torch.randn(3),
    ),
    "conv_transpose1d_groups_dilation": (
        lambda x, w: F.conv_transpose1d(x, w, stride=3, groups=2, dilation=2),
        torch.randn(1, 4, 5),
        torch.randn(4, 3, 3),
    ),
    "max_pool2d": (lambda x: F.max_pool2d(x, 2, return_indices=True), torch.randn(2, 3, 5, 4)),
    "max_pool2d_stride_pad_dilation_ceil": (
        lambda x: F.max_pool2d(
            x,
            (3, 2),
            stride=(2, 1),
            padding=1,
            dilation=(1, 2),
            ceil_mode=True,
            return_indices=True,
        ),
        torch.randn(1, 2, 7, 6),
    ),
    "max_pool2d_ties_unbatched": (
        lambda x: F.max_pool2d(x, 2, stride=1, return_indices=True),
        torch.tensor([[[1.0, 1.0, 0.0], [1.0, 0.0, 2.0], [2.0, 2.0, 2.0]]]),
    ),
    "max_pool1d": (lambda x: F.max_pool1d(x, 3, stride=2), torch.randn(2, 3, 9)),
    "max_pool3d": (
        lambda x: F.max_pool3d(x, 2, return_indices=True),
        torch.randn(1, 2, 4, 4, 5),
    ),
    "max_pool2d_int": (
        lambda x: F.max_pool2d(x, 2, return_indices=True),
        torch.randint(-9, 9, (1, 1, 4, 4)),
    ),
    "avg_pool2d": (lambda x: F.avg_pool2d(x, 2), torch.randn(2, 3, 5, 4)),
    "avg_pool2d_pad_ceil": (
        lambda x: F.avg_pool2d(x, 3, stride=2, padding=1, ceil_mode=True),
        torch.randn(1, 2, 6, 7),
    ),
    "avg_pool2d_exclude_pad": (
        lambda x: F.avg_pool2d(x, 3, stride=2, padding=1, ceil_mode=True, count_include_pad=False),
        torch.randn(1, 2, 6, 7),
    ),
    "avg_pool2d_divisor": (
        lambda x: F.avg_pool2d(x, (2, 3), stride=1, divisor_override=5),
        torch.randn(1, 1, 4, 4),
    ),
    "avg_pool1d": (lambda x: F.avg_pool1d(x, 3, stride=2, padding=1), torch.randn(2, 3, 8)),
    "avg_pool3d": (lambda x: F.avg_pool3d(x, 2), torch.randn(1, 2, 4, 4, 5)),
    "adaptive_avg_pool2d": (lambda x: F.adaptive_avg_pool2d(x, (3, 2)), torch.randn(2, 3, 7, 5)),
    "adaptive_avg_pool3d": (lambda x: F.adaptive_avg_pool3d(x, 2), torch.randn(1, 2, 3, 5, 4)),
    "adaptive_avg_pool1d": (lambda x: F.adaptive_avg_pool1d(x, 4), torch.randn(2, 3, 10)),
    "upsample_nearest": (lambda x: F.interpolate(x, scale_factor=2), torch.randn(1, 2, 3, 4)),
    "upsample_nearest_size": (lambda x: F.interpolate(x, size=(5, 7)), torch.randn(1, 2, 3, 4)),
    "upsample_nearest_exact": (
        lambda x: F.interpolate(x, scale_factor=1.7, mode="nearest-exact"),
        torch.randn(1, 2, 3, 4),
    ),
    "upsample_nearest1d_3d": (
        lambda a, b: (F.interpolate(a, size=7), F.interpolate(b, scale_factor=2)),
        torch.randn(1, 2, 3),
        torch.randn(1, 1, 2, 3, 2),
    ),
    "upsample_bilinear": (
        lambda x: F.interpolate(x, size=(5, 7), mode="bilinear"),
        torch.randn(2, 2, 3, 4),
    ),
    "upsample_bilinear_align_corners_scale": (
        lambda x: F.interpolate(x, scale_factor=1.5, mode="bilinear", align_corners=True),
        torch.randn(1, 2, 4, 4),
    ),
    "upsample_bilinear_down": (
        lambda x: F.interpolate(x, size=(2, 3), mode="bilinear"),
        torch.randn(1, 2, 5, 7),
    ),
    "upsample_linear_trilinear": (
        lambda a, b: (
            F.interpolate(a, size=5, mode="linear"),
            F.interpolate(b, scale_factor=2, mode="trilinear"),
        ),
        torch.randn(1, 2, 3),
        torch.randn(1, 1, 2, 3, 2),
    ),
    "reflection_pad": (
        lambda a, b: (F.pad(a, (2, 1), mode="reflect"), F.pad(b, (1, 1, 2, 0), mode="reflect")),
        torch.randn(2, 3, 4),
        torch.randn(1, 2, 4, 3),
    ),
    "replication_pad": (
        lambda a, b: (
            F.pad(a, (2, 1), mode="replicate"),
            F.pad(b, (1, 0, 1, 2, 0, 1), mode="replicate"),
        ),
        torch.randn(2, 3, 4),
        torch.randn(1, 2, 3, 4, 3),
    ),
    "pixel_shuffle": (
        lambda x: (F.pixel_shuffle(x, 2), F.pixel_unshuffle(x, 2)),
        torch.randn(1, 8, 4, 6),
    ),
}


@pytest.mark.parametrize("name", list(CASES))
def test_nn(name):
    fn, *args = CASES[name]
    check_against_cpu(fn, *args, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize(
    "name, fn, args, grad_args",
    [
        (
            "conv2d",
            lambda x, w, b: (F.conv2d(x, w, b, stride=2, padding=1) ** 2).sum(),
            (torch.randn(2, 3, 6, 5), torch.randn(4, 3, 3, 3), torch.randn(4)),
            (0, 1, 2),
        ),
        (
            "max_pool2d_overlapping",
            lambda x: (F.max_pool2d(x, 3, stride=2, padding=1) ** 2).sum(),
            (torch.randn(2, 2, 6, 5),),
            (0,),
        ),
        (
            "max_pool3d",
            lambda x: (F.max_pool3d(x, 2) ** 2).sum(),
            (torch.randn(1, 2, 4, 4, 4),),
            (0,),
        ),
        (
            "avg_pool2d_pad_ceil_exclude",
            lambda x: (
                F.avg_pool2d(x, 3, stride=2, padding=1, ceil_mode=True, count_include_pad=False)
                ** 2
            ).sum(),
            (torch.randn(1, 2, 6, 7),),
            (0,),
        ),
        (
            "adaptive_avg_pool2d",
            lambda x: (F.adaptive_avg_pool2d(x, (3, 2)) ** 2).sum(),
            (torch.randn(2, 3, 7, 5),),
            (0,),
        ),
        (
            "upsample_nearest_and_bilinear",
            lambda x: (
                (F.interpolate(x, scale_factor=2) ** 2).sum()
                + (F.interpolate(x, size=(5, 7), mode="bilinear") ** 2).sum()
            ),
            (torch.randn(1, 2, 3, 4),),
            (0,),
        ),
        (
            "reflect_pad",
            lambda x: (F.pad(x, (1, 2, 2, 0), mode="reflect") ** 2).sum(),
            (torch.randn(1, 2, 4, 3),),
            (0,),
        ),
        (
            "conv_transpose2d_groups",
            lambda x, w: (F.conv_transpose2d(x, w, stride=2, groups=2) ** 2).sum(),
            (torch.randn(1, 4, 3, 3), torch.randn(4, 1, 2, 3)),
            (0, 1),
        ),
    ],
)
def test_nn_autograd(name, fn, args, grad_args):
    check_grads(fn, *args, grad_args=grad_args, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("eager", [False, True], ids=["lazy", "eager"])
def test_convolution_backward_with_every_output_masked_off_returns_nones(eager):
    from lazax.executor import EXECUTOR

    g, x, w = torch.randn(1, 3, 3, 3), torch.randn(1, 2, 5, 5), torch.randn(3, 2, 3, 3)
    conv_args = ([3], [1, 1], [0, 0], [1, 1], False, [0, 0], 1)
    with EXECUTOR.mode(eager=eager), no_cpu_fallback():
        lz = [t.to(DEV) for t in (g, x, w)]
        none = torch.ops.aten.convolution_backward(*lz, *conv_args, [False, False, False])
        only_weight = torch.ops.aten.convolution_backward(*lz, *conv_args, [False, True, False])
    assert none == (None, None, None)
    expected = torch.ops.aten.convolution_backward(g, x, w, *conv_args, [False, True, False])
    assert only_weight[0] is None and only_weight[2] is None
    torch.testing.assert_close(only_weight[1].cpu(), expected[1], rtol=1e-5, atol=1e-5)
