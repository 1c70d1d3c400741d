"""im2col and col2im (blockir.ops.conv), the convolution kernels' building blocks, against naive loops.

im2col's matrices must hold, entry by entry, the input pixel (or padding zero) each output pixel reads through
each filter tap, in the documented order of each layout; col2im must be its adjoint (<im2col(x), c> = <x,
col2im(c)>), which is what makes it conv2d's Input@GRAD and conv2d_transpose's forward.
"""

from __future__ import annotations

import itertools

import numpy as np
import pytest

from blockir.ops.conv import ConvGeometry, col2im, im2col

# (N, C, H, W), groups, (kh, kw), strides, dilations, ((top, bottom), (left, right)); and 3-D: (N, C, D, H, W), ...
GEOMETRIES = [
    ((2, 3, 5, 4), 1, (3, 3), (1, 1), (1, 1), ((1, 1), (1, 1))),
    ((1, 4, 7, 6), 2, (2, 3), (2, 1), (1, 2), ((0, 1), (2, 0))),
    ((2, 6, 6, 5), 3, (3, 2), (2, 2), (2, 1), ((2, 2), (0, 1))),
    ((1, 3, 4, 4), 3, (1, 1), (1, 1), (1, 1), ((0, 0), (0, 0))),
    ((2, 2, 4, 5, 3), 1, (2, 3, 2), (1, 2, 1), (2, 1, 1), ((1, 0), (0, 1), (1, 1))),
    ((1, 4, 3, 4, 5), 2, (1, 2, 3), (2, 1, 2), (1, 2, 1), ((0, 1), (1, 1), (2, 0))),
]


def geometry(shape, ksize, strides, dilations, pads) -> ConvGeometry:
    out = tuple(
        (size + p0 + p1 - d * (k - 1) - 1) // s + 1
        for size, k, s, d, (p0, p1) in zip(shape[2:], ksize, strides, dilations, pads)
    )
    return ConvGeometry(pads, dilations, strides, ksize, out)


def naive_im2col(x: np.ndarray, geo: ConvGeometry, groups: int) -> np.ndarray:
    """``[N, groups, C / groups, *taps, *outputs]`` (2-D: ``kh, kw, OH, OW``) of channel-first ``x``, one entry at
    a time."""
    n, c, *sizes = x.shape
    per_group = c // groups
    cols = np.zeros((n, groups, per_group, *geo.ksize, *geo.out))
    for b, ch in itertools.product(range(n), range(c)):
        for tap in itertools.product(*map(range, geo.ksize)):
            for o in itertools.product(*map(range, geo.out)):
                at = [
                    p * s + t * d - before
                    for p, s, t, d, (before, _) in zip(o, geo.strides, tap, geo.dilations, geo.pads)
                ]
                if all(0 <= q < size for q, size in zip(at, sizes)):
                    cols[(b, ch // per_group, ch % per_group, *tap, *o)] = x[(b, ch, *at)]
    return cols


@pytest.mark.parametrize(("shape", "groups", "ksize", "strides", "dilations", "pads"), GEOMETRIES)
@pytest.mark.parametrize(
    ("channel_last", "per_image"),
    [(False, False), (False, True), (True, False)],
    ids=["channel_first", "channel_first_per_image", "channel_last"],
)
def test_im2col_matches_the_naive_loop_and_col2im_is_its_adjoint(
    shape, groups, ksize, strides, dilations, pads, channel_last, per_image
) -> None:
    rng = np.random.default_rng(7)
    geo = geometry(shape, ksize, strides, dilations, pads)
    x = rng.standard_normal(shape)
    image = np.moveaxis(x, 1, -1).copy() if channel_last else x
    cols = im2col(np, image, geo, groups, channel_last, per_image=per_image)
    expected = naive_im2col(x, geo, groups)
    n, pixels, dims = shape[0], int(np.prod(geo.out)), len(geo.out)
    taps, outputs = list(range(3, 3 + dims)), list(range(3 + dims, 3 + 2 * dims))
    if channel_last:  # [N * OH * OW, groups, (kh, kw, C / groups)]
        expected = expected.transpose(0, *outputs, 1, *taps, 2).reshape(n * pixels, groups, -1)
    elif per_image:  # [N, groups, (C / groups, kh, kw), (OH, OW)]
        expected = expected.reshape(n, groups, -1, pixels)
    else:  # [groups, (C / groups, kh, kw), (N, OH, OW)]
        expected = expected.transpose(1, 2, *taps, 0, *outputs).reshape(groups, -1, n * pixels)
    np.testing.assert_array_equal(cols, expected)

    c = rng.standard_normal(cols.shape)
    back = col2im(np, c, image.shape, geo, groups, channel_last, per_image)
    assert back.shape == image.shape
    np.testing.assert_allclose(np.sum(cols * c), np.sum(image * back), rtol=1e-12)
