"""im2col and col2im (blockir.ops.conv), the convolution kernels' building blocks, against naive loops.

im2col's matrices must hold, entry by entry, the input pixel (or padding zero) each output pixel reads through
each filter tap, in the documented order of each layout; col2im must be its adjoint (<im2col(x), c> = <x,
col2im(c)>), which is what makes it conv2d's Input@GRAD and conv2d_transpose's forward.
"""

from __future__ import annotations

import numpy as np
import pytest

from blockir.ops.conv import ConvGeometry, col2im, im2col

# (N, C, H, W), groups, (kh, kw), strides, dilations, ((top, bottom), (left, right))
GEOMETRIES = [
    ((2, 3, 5, 4), 1, (3, 3), (1, 1), (1, 1), ((1, 1), (1, 1))),
    ((1, 4, 7, 6), 2, (2, 3), (2, 1), (1, 2), ((0, 1), (2, 0))),
    ((2, 6, 6, 5), 3, (3, 2), (2, 2), (2, 1), ((2, 2), (0, 1))),
    ((1, 3, 4, 4), 3, (1, 1), (1, 1), (1, 1), ((0, 0), (0, 0))),
]


def geometry(shape, ksize, strides, dilations, pads) -> ConvGeometry:
    out = tuple(
        (size + p0 + p1 - d * (k - 1) - 1) // s + 1
        for size, k, s, d, (p0, p1) in zip(shape[2:], ksize, strides, dilations, pads)
    )
    return ConvGeometry(pads, dilations, strides, ksize, out)


def naive_im2col(x: np.ndarray, geo: ConvGeometry, groups: int) -> np.ndarray:
    """``[N, groups, C / groups, kh, kw, OH, OW]`` of NCHW ``x``, one entry at a time."""
    n, c, h, w = x.shape
    (kh, kw), (oh, ow), (sh, sw), (dh, dw), ((top, _), (left, _)) = (
        geo.ksize,
        geo.out,
        geo.strides,
        geo.dilations,
        geo.pads,
    )
    cols = np.zeros((n, groups, c // groups, kh, kw, oh, ow))
    for b in range(n):
        for ch in range(c):
            for i in range(kh):
                for j in range(kw):
                    for y in range(oh):
                        for q in range(ow):
                            r, s = y * sh + i * dh - top, q * sw + j * dw - left
                            if 0 <= r < h and 0 <= s < w:
                                cols[b, ch // (c // groups), ch % (c // groups), i, j, y, q] = x[b, ch, r, s]
    return cols


@pytest.mark.parametrize(("shape", "groups", "ksize", "strides", "dilations", "pads"), GEOMETRIES)
@pytest.mark.parametrize("channel_last", [False, True], ids=["NCHW", "NHWC"])
def test_im2col_matches_the_naive_loop_and_col2im_is_its_adjoint(
    shape, groups, ksize, strides, dilations, pads, channel_last
) -> None:
    rng = np.random.default_rng(7)
    geo = geometry(shape, ksize, strides, dilations, pads)
    x = rng.standard_normal(shape)
    image = x.transpose(0, 2, 3, 1).copy() if channel_last else x
    cols = im2col(np, image, geo, groups, channel_last)
    expected = naive_im2col(x, geo, groups)
    n, pixels = shape[0], geo.out[0] * geo.out[1]
    if channel_last:  # [N * OH * OW, groups, (kh, kw, C / groups)]
        expected = expected.transpose(0, 5, 6, 1, 3, 4, 2).reshape(n * pixels, groups, -1)
    else:  # [groups, (C / groups, kh, kw), (N, OH, OW)]
        expected = expected.transpose(1, 2, 3, 4, 0, 5, 6).reshape(groups, -1, n * pixels)
    np.testing.assert_array_equal(cols, expected)

    c = rng.standard_normal(cols.shape)
    back = col2im(np, c, image.shape, geo, groups, channel_last)
    assert back.shape == image.shape
    np.testing.assert_allclose(np.sum(cols * c), np.sum(image * back), rtol=1e-12)
