"""Test cases of the 3-D convolution and pooling ops (blockir.ops.conv: ``conv3d``, ``conv3d_transpose``,
``pool3d``, ``max_pool3d_with_index``), as data.

Expected values come from cases_conv.py's plain loops, written from Paddle's definitions for any number of spatial
axes (one output position at a time, windows clipped as Paddle's CPU kernels clip them), independently of the
kernels' im2col, col2im and separable window reductions. Max-pooling cases whose ``grad`` names X hold distinct
values (no ties), so that finite differences see one maximum per window.
"""

from __future__ import annotations

import numpy as np

from tests.ops.cases_conv import conv_case, distinct, pool_case, rand, transpose_case, with_index_case
from tests.ops.harness import Case

# -- conv3d ---------------------------------------------------------------------------------------------------

CONV3D = [
    conv_case("3x3x3_pad1_float32", rand(2, 3, 4, 5, 4), rand(4, 3, 3, 3, 3), "float32", paddings=[1, 1, 1]),
    conv_case("2x2x2_plain", rand(2, 2, 3, 4, 3), rand(3, 2, 2, 2, 2)),
    conv_case(
        "strides_dilations_6_paddings",
        rand(1, 2, 5, 6, 5),
        rand(2, 2, 2, 3, 2),
        strides=[2, 1, 2],
        paddings=[1, 0, 0, 1, 2, 1],
        dilations=[1, 2, 1],
    ),
    conv_case("groups_2_batch1", rand(1, 4, 4, 3, 4), rand(6, 2, 2, 2, 3), groups=2, strides=[1, 2, 1]),
    conv_case(
        "same_ignores_dilations",
        rand(1, 2, 5, 4, 3),
        rand(2, 2, 3, 2, 2),
        padding_algorithm="SAME",
        strides=[2, 2, 1],
        dilations=[2, 2, 2],
        paddings=[4, 4, 4],
    ),
    conv_case(
        "valid_ignores_paddings",
        rand(1, 2, 4, 4, 3),
        rand(2, 2, 2, 3, 2),
        padding_algorithm="VALID",
        paddings=[2, 2, 2],
    ),
    conv_case(
        "ndhwc_groups_strided_padded",
        rand(2, 4, 3, 5, 4),
        rand(4, 2, 2, 2, 3),
        data_format="NDHWC",
        groups=2,
        strides=[2, 1, 2],
        paddings=[1, 0, 1],
    ),
    conv_case(
        "ndhwc_same_float32",
        rand(1, 4, 5, 3, 2),
        rand(3, 2, 3, 3, 2),
        "float32",
        data_format="NDHWC",
        padding_algorithm="SAME",
    ),
    conv_case("pointwise", rand(2, 3, 2, 3, 2), rand(4, 3, 1, 1, 1)),
    conv_case("pointwise_ndhwc_groups", rand(1, 2, 3, 2, 4), rand(4, 2, 1, 1, 1), data_format="NDHWC", groups=2),
    # (2 + 0 - 3) / 2 truncates to 0: one output plane reading a zero past the input, as Paddle does
    conv_case("c_division_reads_past_the_end", rand(1, 1, 2, 3, 3), rand(1, 1, 3, 2, 2), strides=[2, 1, 1]),
]

# -- conv3d_transpose ----------------------------------------------------------------------------------------


CONV3D_TRANSPOSE = [
    transpose_case(
        "3x3x3_stride2_pad1_float32",
        rand(2, 3, 2, 3, 2),
        rand(3, 2, 3, 3, 3),
        "float32",
        strides=[2, 2, 2],
        paddings=[1, 1, 1],
    ),
    transpose_case("2x2x2_plain", rand(2, 2, 2, 3, 2), rand(2, 3, 2, 2, 2)),
    transpose_case(
        "strides_dilations_6_paddings",
        rand(1, 2, 3, 2, 3),
        rand(2, 2, 2, 3, 2),
        strides=[2, 3, 1],
        paddings=[1, 0, 0, 1, 1, 1],
        dilations=[1, 1, 2],
    ),
    transpose_case("groups_2_batch1", rand(1, 4, 2, 3, 2), rand(4, 2, 2, 2, 2), groups=2, strides=[1, 2, 1]),
    transpose_case(
        "output_padding", rand(1, 2, 2, 2, 3), rand(2, 1, 2, 3, 2), strides=[2, 3, 1], output_padding=[1, 2, 0]
    ),
    transpose_case(
        "output_size",
        rand(1, 2, 2, 3, 2),
        rand(2, 2, 3, 3, 3),
        strides=[2, 2, 2],
        paddings=[1, 1, 1],
        output_size=[4, 6, 3],
    ),
    transpose_case(
        "same",
        rand(1, 2, 2, 3, 2),
        rand(2, 2, 3, 2, 2),
        padding_algorithm="SAME",
        strides=[2, 1, 2],
        dilations=[2, 2, 2],
    ),
    transpose_case(
        "ndhwc_groups_strided",
        rand(2, 2, 3, 2, 4),
        rand(4, 1, 2, 2, 3),
        data_format="NDHWC",
        groups=2,
        strides=[2, 1, 2],
        paddings=[0, 1, 0],
    ),
    transpose_case(
        "valid_ignores_paddings",
        rand(1, 2, 2, 3, 2),
        rand(2, 2, 2, 2, 3),
        padding_algorithm="VALID",
        paddings=[1, 1, 1],
    ),
    transpose_case("pointwise", rand(2, 3, 2, 2, 3), rand(3, 4, 1, 1, 1)),
    transpose_case("pointwise_ndhwc", rand(1, 2, 3, 2, 3), rand(3, 2, 1, 1, 1), data_format="NDHWC"),
]

# -- pool3d ---------------------------------------------------------------------------------------------------


POOL3D = [
    pool_case(
        "max_2x2x2_float32",
        rand(2, 3, 4, 6, 4, dtype="float32"),
        pooling_type="max",
        ksize=[2, 2, 2],
        strides=[2, 2, 2],
    ),
    pool_case(
        "max_pad1_stride2",
        distinct(1, 2, 5, 4, 5),
        pooling_type="max",
        ksize=[3, 3, 2],
        strides=[2, 2, 1],
        paddings=[1, 1, 0],
    ),
    pool_case(
        "max_ceil_mode_6_paddings",
        distinct(1, 2, 5, 4, 5),
        pooling_type="max",
        ksize=[3, 2, 3],
        strides=[2, 2, 2],
        paddings=[1, 1, 1, 1, 1, 0],
        ceil_mode=True,
    ),
    pool_case("avg_exclusive_pad1", rand(2, 2, 4, 4, 3), pooling_type="avg", ksize=[3, 3, 2], paddings=[1, 1, 1]),
    pool_case(
        "avg_inclusive_6_paddings_ceil",
        rand(1, 2, 5, 5, 4),
        pooling_type="avg",
        ksize=[3, 3, 2],
        strides=[2, 2, 2],
        paddings=[0, 2, 1, 0, 1, 1],
        exclusive=False,
        ceil_mode=True,
    ),
    pool_case("avg_adaptive", rand(2, 2, 5, 4, 7), pooling_type="avg", ksize=[3, 2, 4], adaptive=True),
    pool_case(
        "max_adaptive_keeps_windows",
        distinct(1, 2, 4, 5, 3),
        pooling_type="max",
        ksize=[2, 3, 2],
        strides=[2, 1, 1],
        adaptive=True,
    ),
    pool_case(
        "avg_global",
        rand(2, 3, 3, 4, 2),
        pooling_type="avg",
        ksize=[1, 1, 1],
        global_pooling=True,
        paddings=[1, 1, 1],
    ),
    pool_case("max_global", distinct(2, 2, 2, 3, 4), pooling_type="max", ksize=[1, 1, 1], global_pooling=True),
    pool_case(
        "max_same",
        distinct(1, 2, 5, 4, 5),
        pooling_type="max",
        ksize=[3, 2, 2],
        strides=[2, 3, 2],
        padding_algorithm="SAME",
    ),
    pool_case(
        "avg_valid",
        rand(1, 2, 4, 5, 4),
        pooling_type="avg",
        ksize=[2, 2, 2],
        strides=[2, 2, 2],
        paddings=[1, 1, 1],
        padding_algorithm="VALID",
    ),
    pool_case(
        "avg_ndhwc_inclusive",
        rand(2, 4, 3, 5, 3),
        pooling_type="avg",
        ksize=[3, 2, 2],
        strides=[2, 1, 2],
        paddings=[1, 0, 1],
        data_format="NDHWC",
        exclusive=False,
    ),
    pool_case(
        "max_ndhwc_ceil",
        distinct(1, 4, 5, 3, 2),
        pooling_type="max",
        ksize=[2, 2, 2],
        strides=[2, 2, 2],
        data_format="NDHWC",
        ceil_mode=True,
    ),
    # windows larger than the outputs they make: the kernels loop over windows, not taps
    pool_case(
        "max_big_window_few_outputs",
        distinct(1, 1, 4, 5, 4),
        pooling_type="max",
        ksize=[3, 4, 3],
        strides=[1, 1, 1],
    ),
    pool_case(
        "avg_big_window_few_outputs",
        rand(1, 2, 4, 4, 5),
        pooling_type="avg",
        ksize=[4, 3, 4],
        strides=[1, 1, 1],
    ),
]

# -- max_pool3d_with_index -------------------------------------------------------------------------------------


MAX_POOL3D_WITH_INDEX = [
    with_index_case("2x2x2_float32", distinct(2, 2, 4, 4, 6, dtype="float32"), ksize=[2, 2, 2], strides=[2, 2, 2]),
    with_index_case(
        "pad_stride_ceil",
        distinct(1, 2, 5, 4, 5),
        ksize=[3, 2, 3],
        strides=[2, 2, 2],
        paddings=[1, 0, 1],
        ceil_mode=True,
    ),
    with_index_case("adaptive", distinct(2, 1, 4, 5, 3), ksize=[2, 3, 2], adaptive=True),
    with_index_case("global", distinct(1, 2, 2, 3, 4), ksize=[1, 1, 1], paddings=[1, 1, 1], global_pooling=True),
    with_index_case("big_window", distinct(1, 1, 4, 4, 4), ksize=[3, 3, 3]),
    with_index_case(
        "ties_first", np.array([[[[[2.0, 2.0], [1.0, 2.0]], [[2.0, 0.0], [2.0, 2.0]]]]]), grad=False, ksize=[2, 2, 2]
    ),
]

CASES: dict[str, list[Case]] = {
    "conv3d": CONV3D,
    "conv3d_transpose": CONV3D_TRANSPOSE,
    "pool3d": POOL3D,
    "max_pool3d_with_index": MAX_POOL3D_WITH_INDEX,
}

# -- bad input ---------------------------------------------------------------------------------------------

_X = np.zeros((2, 3, 4, 5, 5), np.float32)
_W = np.zeros((4, 3, 3, 3, 3), np.float32)

INFER_ERRORS: list[tuple[str, Case, str]] = [
    (
        "conv3d",
        Case({"Input": _X[:, :, 0], "Filter": _W}),
        r"Input .*\[2, 3, 5, 5\]\) must be 5-D \(NCDHW or NDHWC\)",
    ),
    (
        "conv3d",
        Case({"Input": _X, "Filter": _W[:, :, 0]}),
        r"Filter .* must be 5-D \[out channels, in channels / groups, kd, kh, kw\]",
    ),
    (
        "conv3d",
        Case({"Input": _X, "Filter": _W}, {"data_format": "NCHW"}),
        r"data_format='NCHW' is not one of NCDHW, AnyLayout, NDHWC",
    ),
    (
        "conv3d",
        Case({"Input": _X, "Filter": _W}, {"paddings": [1, 1, 1, 1]}),
        r"paddings=\[1, 1, 1, 1\] must hold 3 \(\[d, h, w\]\) or 6 \(\[front, back, top, bottom, left, right\]\)",
    ),
    (
        "conv3d",
        Case({"Input": _X, "Filter": _W}, {"strides": [1, 1]}),
        r"strides=\[1, 1\] must hold 3 values >= 1 \(depth, height, width\)",
    ),
    ("conv3d", Case({"Input": _X, "Filter": np.zeros((4, 3, 5, 3, 3), np.float32)}), r"output D = 0"),
    (
        "conv3d",
        Case({"Input": _X, "Filter": np.zeros((4, 2, 3, 3, 3), np.float32)}),
        r"has 3 channels .* needs 2 \* 1",
    ),
    (
        "conv3d_transpose",
        Case({"Input": _X, "Filter": _W[:3]}, {"output_size": [5, 5]}),
        r"output_size=\[5, 5\] must be empty or hold 3 values",
    ),
    (
        "conv3d_transpose",
        Case({"Input": _X, "Filter": _W[:3]}, {"strides": [2, 2, 2], "output_size": [9, 13, 11]}),
        r"output_size H = 13 must be in \[11, 13\)",
    ),
    (
        "pool3d",
        Case({"X": _X}, {"pooling_type": "max", "ksize": [2, 2]}),
        r"ksize=\[2, 2\] must hold 3 values >= 1 \(depth, height, width\)",
    ),
    ("pool3d", Case({"X": _X[:, :, 0]}, {"pooling_type": "avg", "ksize": [2, 2, 2]}), r"must be 5-D"),
    ("pool3d", Case({"X": _X}, {"pooling_type": "max", "ksize": [5, 2, 2]}), r"output D = 0"),
    ("max_pool3d_with_index", Case({"X": _X}, {"ksize": [2, 2]}), r"ksize=\[2, 2\] must hold 3 values"),
    ("max_pool3d_with_index", Case({"X": _X[0]}, {"ksize": [2, 2, 2]}), r"must be 5-D \(NCDHW\)"),
]

KERNEL_ERRORS: list[tuple[str, Case, str]] = [
    (
        "conv3d",
        Case({"Input": _X, "Filter": np.zeros((4, 2, 3, 3, 3), np.float32)}),
        r"3 channels .* do not fit groups=1",
    ),
    (
        "conv3d_transpose",
        Case({"Input": _X, "Filter": _W[:3]}, {"output_size": [6, 7, 9]}),
        r"output_size W = 9 must be in \[7, 8\)",
    ),
    ("pool3d", Case({"X": _X}, {"pooling_type": "max", "ksize": [2, 7, 2]}), r"output size -1 along H"),
    ("max_pool3d_with_index", Case({"X": _X}, {"ksize": [2, 2, 9]}), r"output size -3 along W"),
]
