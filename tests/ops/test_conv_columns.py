"""im2col and col2im (blockir.ops.conv), the convolution kernels' building blocks, against naive loops.

im2col's matrices must hold, entry by entry, the input pixel (or padding zero) each output pixel reads through
each filter tap, in the documented order of each layout; col2im must be its adjoint (<im2col(x), c> = <x,
col2im(c)>), which is what makes it conv2d's Input@GRAD and conv2d_transpose's forward. The geometry they read is
remembered per shapes and attributes; their strided views are the ones numpy's ``as_strided`` makes.
"""

from __future__ import annotations

import itertools

import numpy as np
import pytest

from blockir.errors import BlockirError
from blockir.ir.schema import KernelContext, lookup
from blockir.ops.conv import ConvGeometry, _conv_geometry, _strided, col2im, im2col
from tests.ops.harness import kernel_attrs

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


def test_geometry_remembered_per_shapes_and_attributes() -> None:
    """conv2d's kernel makes a geometry once per (spatial sizes, taps, padding attributes): the same object again
    for the same ones whatever the batch and channels, another for other attributes, each knowing whether it is
    pointwise; Input and Filter that do not fit still fail at every call."""
    attrs = kernel_attrs(lookup("conv2d"), {"strides": [2, 2], "paddings": [1, 1]})
    geo = _conv_geometry(KernelContext(np, attrs, (True,)), (1, 3, 9, 9), (4, 3, 3, 3))
    assert geo == ConvGeometry(((1, 1), (1, 1)), (1, 1), (2, 2), (3, 3), (5, 5)) and not geo.pointwise()
    assert _conv_geometry(KernelContext(np, dict(attrs), (True,)), (2, 6, 9, 9), (8, 6, 3, 3)) is geo
    valid = _conv_geometry(
        KernelContext(np, {**attrs, "padding_algorithm": "VALID"}, (True,)), (1, 3, 9, 9), (4, 3, 3, 3)
    )
    assert valid == ConvGeometry(((0, 0), (0, 0)), (1, 1), (2, 2), (3, 3), (4, 4))
    ones = {**attrs, "strides": [1, 1], "paddings": [0, 0]}
    assert _conv_geometry(KernelContext(np, ones, (True,)), (1, 3, 9, 9), (4, 3, 1, 1)).pointwise()
    for _ in range(2):
        with pytest.raises(BlockirError, match=r"give output size \[-3, -3\]"):
            _conv_geometry(KernelContext(np, {**ones, "dilations": [6, 6]}, (True,)), (1, 3, 9, 9), (4, 3, 3, 3))


@pytest.mark.parametrize("contiguous", [True, False])
@pytest.mark.parametrize("writeable", [True, False])
def test_strided_views_as_numpy_makes_them(contiguous: bool, writeable: bool) -> None:
    """``_strided`` (the ndarray constructor on a C-contiguous array, else numpy's ``as_strided``): the view numpy's
    ``as_strided`` makes, writeable as asked, writes reaching the array; a view past the array's end is refused
    where the constructor makes it."""
    a = np.arange(2 * 3 * 6 * 6, dtype=np.float32).reshape(2, 3, 6, 6)
    if not contiguous:
        a = np.swapaxes(np.swapaxes(a, 2, 3).copy(), 2, 3)
    s_n, s_c, s_h, s_w = a.strides
    shape, strides = (2, 3, 2, 2, 3, 3), (s_n, s_c, s_h, s_w, 2 * s_h, 2 * s_w)
    view = _strided(np, a, shape, strides, writeable)
    np.testing.assert_array_equal(view, np.lib.stride_tricks.as_strided(a, shape, strides))
    assert view.flags.writeable == writeable
    if writeable:
        view[1, 2, 1, 1, 2, 2] = -1.0
        assert a[1, 2, 5, 5] == -1.0
    if contiguous:
        with pytest.raises(ValueError):
            _strided(np, a, (2, 3, 7, 6), a.strides)
