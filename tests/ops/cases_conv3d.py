"""Test cases of the 3-D convolution and pooling ops (blockir.ops.conv: ``conv3d``, ``conv3d_transpose``,
``pool3d``, ``max_pool3d_with_index``), as data.

Expected values come from the plain loops below, written from Paddle's definitions for any number of spatial
dims (one output position at a time, windows clipped as Paddle's CPU kernels clip them), independently of the
kernels' im2col, col2im and separable window reductions. Max-pooling cases whose ``grad`` names X hold distinct
values (no ties), so that finite differences see one maximum per window.
"""

from __future__ import annotations

import itertools

import numpy as np

from tests.ops.cases_conv import FLT_MAX, distinct, rand, trunc_div, with_index_case
from tests.ops.harness import Case


def pads_of(paddings, algorithm, sizes, strides, ksize) -> list[tuple[int, int]]:
    """(before, after) per spatial axis under Paddle's padding_algorithm; ``paddings`` one value per axis (both
    sides) or a (before, after) pair per axis."""
    if algorithm == "VALID":
        return [(0, 0)] * len(sizes)
    if algorithm == "SAME":
        totals = [max((-(-size // s) - 1) * s + k - size, 0) for size, s, k in zip(sizes, strides, ksize)]
        return [(t // 2, t - t // 2) for t in totals]
    p = list(paddings)
    return [(v, v) for v in p] if len(p) == len(sizes) else [(p[2 * a], p[2 * a + 1]) for a in range(len(sizes))]


def channel_first(x, channel_last):
    return np.moveaxis(x, -1, 1) if channel_last else x


def in_layout(y, channel_last):
    return np.moveaxis(y, 1, -1) if channel_last else y


# -- conv3d ---------------------------------------------------------------------------------------------------


def ref_conv(
    x,
    w,
    strides=(1, 1, 1),
    paddings=(0, 0, 0),
    dilations=(1, 1, 1),
    groups=1,
    padding_algorithm="EXPLICIT",
    data_format="NCDHW",
    **no_effect,
) -> np.ndarray:
    """Paddle's convolution (cross-correlation), one output position at a time: each reads the taps ``o * stride -
    pad_before + tap * dilation`` of Input (zeros outside); SAME ignores dilations."""
    nhwc = data_format == "NDHWC"
    xc = channel_first(x, nhwc).astype(np.float64)
    n, _, *sizes = xc.shape
    m, per_group, *ksize = w.shape
    pads = pads_of(paddings, padding_algorithm, sizes, strides, ksize)
    dil = [1] * len(sizes) if padding_algorithm == "SAME" else list(dilations)
    outs = [
        trunc_div(size + b + a - (d * (k - 1) + 1), s) + 1
        for size, (b, a), d, k, s in zip(sizes, pads, dil, ksize, strides)
    ]
    out = np.zeros((n, m, *outs))
    mg = m // groups
    for o in itertools.product(*map(range, outs)):
        for tap in itertools.product(*map(range, ksize)):
            at = [p * s - b + t * d for p, s, (b, _), t, d in zip(o, strides, pads, tap, dil)]
            if not all(0 <= q < size for q, size in zip(at, sizes)):
                continue
            for g in range(groups):
                values = xc[(slice(None), slice(g * per_group, (g + 1) * per_group), *at)]  # [N, C / groups]
                taps = w[(slice(g * mg, (g + 1) * mg), slice(None), *tap)]  # [M / groups, C / groups]
                out[(slice(None), slice(g * mg, (g + 1) * mg), *o)] += values @ taps.T
    return in_layout(out, nhwc).astype(x.dtype)


def filter_case(name, x, w, output, grad, attrs) -> Case:
    float32 = x.dtype == np.float32
    return Case(
        {"Input": x, "Filter": w},
        attrs,
        {"Output": output},
        grad=("Input", "Filter") if grad and not float32 else (),
        rtol=1e-4 if float32 else 1e-5,
        atol=1e-4 if float32 else 1e-6,
        name=name,
    )


def conv_case(name, x, w, dtype="float64", grad=True, **attrs) -> Case:
    x, w = x.astype(dtype), w.astype(dtype)
    return filter_case(name, x, w, ref_conv(x, w, **attrs), grad, attrs)


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


def ref_conv_transpose(
    x,
    w,
    strides=(1, 1, 1),
    paddings=(0, 0, 0),
    dilations=(1, 1, 1),
    groups=1,
    padding_algorithm="EXPLICIT",
    output_padding=(),
    output_size=(),
    data_format="NCDHW",
    **no_effect,
) -> np.ndarray:
    """Paddle's transposed convolution, one Input position at a time: each adds Filter's taps times its value into
    Output at ``i * stride - pad_before + tap * dilation`` (positions outside Output dropped); Output's size is
    ``(L - 1) * stride - pads + dilation * (k - 1) + 1``, or output_size, or that plus output_padding."""
    nhwc = data_format == "NDHWC"
    xc = channel_first(x, nhwc).astype(np.float64)
    n, c, *sizes = xc.shape
    _, mg, *ksize = w.shape
    pads = pads_of(paddings, padding_algorithm, sizes, strides, ksize)
    dil = [1] * len(sizes) if padding_algorithm == "SAME" else list(dilations)
    outs = []
    for axis, (size, k) in enumerate(zip(sizes, ksize)):
        inferred = (size - 1) * strides[axis] - sum(pads[axis]) + dil[axis] * (k - 1) + 1
        outs.append(output_size[axis] if output_size else inferred + (output_padding[axis] if output_padding else 0))
    out = np.zeros((n, mg * groups, *outs))
    cg = c // groups
    for i in itertools.product(*map(range, sizes)):
        for tap in itertools.product(*map(range, ksize)):
            at = [p * s - b + t * d for p, s, (b, _), t, d in zip(i, strides, pads, tap, dil)]
            if not all(0 <= q < size for q, size in zip(at, outs)):
                continue
            for g in range(groups):
                values = xc[(slice(None), slice(g * cg, (g + 1) * cg), *i)]  # [N, C / groups]
                taps = w[(slice(g * cg, (g + 1) * cg), slice(None), *tap)]  # [C / groups, M / groups]
                out[(slice(None), slice(g * mg, (g + 1) * mg), *at)] += values @ taps
    return in_layout(out, nhwc).astype(x.dtype)


def transpose_case(name, x, w, dtype="float64", grad=True, **attrs) -> Case:
    x, w = x.astype(dtype), w.astype(dtype)
    return filter_case(name, x, w, ref_conv_transpose(x, w, **attrs), grad, attrs)


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


def ref_pool(
    x,
    pooling_type,
    ksize,
    strides=(1, 1, 1),
    paddings=(0, 0, 0),
    global_pooling=False,
    exclusive=True,
    adaptive=False,
    ceil_mode=False,
    padding_algorithm="EXPLICIT",
    data_format="NCDHW",
    **no_effect,
) -> np.ndarray:
    """Paddle's CPU pooling loops, one output position at a time (max pooling ignores adaptive's bins; the
    inclusive divisor measures the far side with the near padding, as Paddle's does)."""
    nhwc = data_format == "NDHWC"
    xc = channel_first(x, nhwc).astype(np.float64)
    n, c, *sizes = xc.shape
    ksize = sizes if global_pooling else list(ksize)
    pads = pads_of(paddings, padding_algorithm, sizes, strides, ksize)
    if global_pooling or adaptive:
        pads = [(0, 0)] * len(sizes)
    if adaptive:
        outs = ksize
    else:
        outs = [
            trunc_div(size - k + b + a + (s - 1 if ceil_mode else 0), s) + 1
            for size, k, (b, a), s in zip(sizes, ksize, pads, strides)
        ]
    bins = adaptive and pooling_type == "avg"
    out = np.zeros((n, c, *outs))
    for o in itertools.product(*map(range, outs)):
        bounds, nominal = [], 1
        for p, size, k, s, (before, _), count in zip(o, sizes, ksize, strides, pads, outs):
            if bins:
                bounds.append((p * size // count, -(-(p + 1) * size // count)))
                continue
            start = p * s - before
            end = min(start + k, size + before)
            nominal *= end - start
            bounds.append((max(start, 0), min(end, size)))
        window = xc[(slice(None), slice(None), *(slice(a, b) for a, b in bounds))].reshape(n, c, -1)
        if pooling_type == "max":
            out[(slice(None), slice(None), *o)] = np.max(window, axis=-1, initial=-FLT_MAX)
        else:
            area = np.prod([b - a for a, b in bounds]) if exclusive or adaptive else nominal
            out[(slice(None), slice(None), *o)] = window.sum(axis=-1) / area
    return in_layout(out, nhwc).astype(x.dtype)


def pool_case(name, x, grad=True, **attrs) -> Case:
    return Case(
        {"X": x}, attrs, {"Out": ref_pool(x, **attrs)}, grad=("X",) if grad and x.dtype == np.float64 else (), name=name
    )


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
