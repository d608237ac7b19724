"""Grid sampling: ``grid_sampler_2d`` (``F.grid_sample`` on 4-D inputs) and its backward.

Contract: float32/float64 inputs follow torch's vectorized CPU kernel, computed in the
input's dtype: the grid unnormalized as ``(g + 1) * size/2 - 0.5`` (``(g + 1) *
(size-1)/2`` with ``align_corners``), then for bilinear/nearest the padding mode's
coordinate (zeros: as is; border: clipped to ``[0, size-1]``; reflection: reflected
about ``[-0.5, size-0.5]`` (``[0, size-1]`` with ``align_corners``), then clipped);
bilinear weights ``(1-n)(1-w)``, ... from the floor; nearest rounds half to even;
bicubic takes 4x4 taps around the floor of the unnormalized coordinate, each tap's
coordinate put through the padding mode, with torch's A = -0.75 weights. Taps outside
the input read zero. The backward is the ``jax.vjp`` of the forward: the coordinate
maps are written so that their derivatives are torch's (zero on a clip's bounds, +-1
through a reflection, zero through floor/round). float16/bfloat16 inputs are left to
the CPU fallback (``RunOnCpu``): torch's CPU kernel takes its scalar path for them and
rounds every intermediate coordinate to the half type, which a float32 rule would not
reproduce.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import torch

from ._arguments import RunOnCpu, argument_check
from ._registry import lowering
from .vision import cubic_weights

aten = torch.ops.aten

_BILINEAR, _NEAREST, _BICUBIC = 0, 1, 2
_ZEROS, _BORDER, _REFLECTION = 0, 1, 2


def _half_types_on_cpu(x):
    if x.dtype in (torch.float16, torch.bfloat16):
        raise RunOnCpu("torch's CPU kernel rounds every coordinate step to the half type")


@argument_check(aten.grid_sampler_2d.default)
def _check_forward(x, *args, **kwargs):
    _half_types_on_cpu(x)


@argument_check(aten.grid_sampler_2d_backward.default)
def _check_backward(grad, x, *args, **kwargs):
    _half_types_on_cpu(x)


def _unnormalize(coord, size, align_corners, dt):
    if align_corners:
        return (coord + dt(1)) * dt(dt(size - 1) / dt(2))
    return (coord + dt(1)) * dt(dt(size) / dt(2)) - dt(0.5)


def _clip(coord, size, dt):
    # Gradient zero on the bounds too, as torch's clip_coordinates_set_grad.
    top = dt(size - 1)
    return jnp.where(coord <= 0, jnp.zeros((), coord.dtype), jnp.where(coord >= top, top, coord))


def _reflect(coord, size, align_corners, dt):
    twice_span = 2 * (size - 1) if align_corners else 2 * size
    if twice_span <= 0:
        return jnp.zeros_like(coord)
    low = dt(0) if align_corners else dt(-0.5)
    c = coord - low
    c = jnp.where(c < 0, -c, c)
    span = dt(twice_span)
    extra = c - jnp.trunc(c / span) * span
    flipped = span - extra
    return jnp.where(extra > flipped, flipped, extra) + low


def _coordinates(coord, size, padding_mode, align_corners, dt):
    if padding_mode == _BORDER:
        return _clip(coord, size, dt)
    if padding_mode == _REFLECTION:
        return _clip(_reflect(coord, size, align_corners, dt), size, dt)
    return coord


def _grid_sample(x, grid, mode, padding_mode, align_corners):
    n, c, h, w = x.shape
    _, oh, ow, _ = grid.shape
    dt = np.float64 if x.dtype == jnp.float64 else np.float32
    flat_x = x.reshape(n, c, h * w)
    gx = grid[..., 0].reshape(n, 1, oh * ow)
    gy = grid[..., 1].reshape(n, 1, oh * ow)

    def read(xs, ys):
        """x at (xs, ys) (float-valued integers, (n, 1, L)); zero outside."""
        inside = (xs > -1) & (xs < w) & (ys > -1) & (ys < h)
        xi = jnp.clip(jnp.where(inside, xs, 0).astype(jnp.int32), 0, w - 1)
        yi = jnp.clip(jnp.where(inside, ys, 0).astype(jnp.int32), 0, h - 1)
        idx = jnp.broadcast_to(yi * w + xi, (n, c, oh * ow))
        vals = jnp.take_along_axis(flat_x, idx, axis=2)
        return jnp.where(inside, vals, jnp.zeros((), x.dtype))

    ix = _unnormalize(gx, w, align_corners, dt)
    iy = _unnormalize(gy, h, align_corners, dt)
    if mode == _BICUBIC:
        x0, y0 = jnp.floor(ix), jnp.floor(iy)
        tx, ty = ix - x0, iy - y0
        one, two = dt(1), dt(2)
        cx = cubic_weights(tx + one, tx, one - tx, two - tx, dt)
        cy = cubic_weights(ty + one, ty, one - ty, two - ty, dt)

        def tap(xs, ys):
            xs = _coordinates(xs, w, padding_mode, align_corners, dt)
            ys = _coordinates(ys, h, padding_mode, align_corners, dt)
            return read(xs, ys)

        rows = []
        for i in range(4):
            ys = y0 + dt(i - 1)
            row = cx[0] * tap(x0 - one, ys)
            for k in range(1, 4):
                row = row + cx[k] * tap(x0 + dt(k - 1), ys)
            rows.append(row)
        out = cy[0] * rows[0] + cy[1] * rows[1] + cy[2] * rows[2] + cy[3] * rows[3]
    else:
        ix = _coordinates(ix, w, padding_mode, align_corners, dt)
        iy = _coordinates(iy, h, padding_mode, align_corners, dt)
        if mode == _NEAREST:
            out = read(jnp.round(ix), jnp.round(iy))
        else:
            x_w, y_n = jnp.floor(ix), jnp.floor(iy)
            we = ix - x_w
            e = dt(1) - we
            no = iy - y_n
            s = dt(1) - no
            x_e, y_s = x_w + dt(1), y_n + dt(1)
            out = (
                read(x_w, y_n) * (s * e)
                + read(x_e, y_n) * (s * we)
                + read(x_w, y_s) * (no * e)
                + read(x_e, y_s) * (no * we)
            )
    return out.reshape(n, c, oh, ow)


@lowering(aten.grid_sampler_2d.default)
def grid_sampler_2d(ctx, x, grid, interpolation_mode, padding_mode, align_corners):
    return _grid_sample(x, grid.astype(x.dtype), interpolation_mode, padding_mode, align_corners)


@lowering(aten.grid_sampler_2d_backward.default)
def grid_sampler_2d_backward(
    ctx, grad, x, grid, interpolation_mode, padding_mode, align_corners, output_mask
):
    def sample(xx, gg):
        return _grid_sample(xx, gg, interpolation_mode, padding_mode, align_corners)

    _, pullback = jax.vjp(sample, x, grid.astype(x.dtype))
    grad_input, grad_grid = pullback(grad.astype(x.dtype))
    if not output_mask[1]:
        grad_grid = jnp.zeros(grid.shape, grid.dtype)  # torch leaves it uninitialized
    return (grad_input, grad_grid) if output_mask[0] else (grad_grid,)
