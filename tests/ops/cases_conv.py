"""Test cases of the convolution and pooling ops (blockir.ops.conv), as data.

Expected values come from the plain loops below, written from Paddle's definitions for any number of spatial
axes (one output position at a time, windows clipped as Paddle's CPU kernels clip them), independently of the
kernels' im2col, col2im and separable window reductions; cases_conv3d.py builds its cases with the same
references and case builders. Max-pooling cases whose ``grad`` names X hold distinct values (no ties), so that
finite differences see one maximum per window; the tie rule is checked on the gradient ops directly.
"""

from __future__ import annotations

import itertools
from collections.abc import Iterator, Sequence
from typing import Any

import numpy as np

from tests.ops.harness import Case

RNG = np.random.default_rng(20240611)
FLT_MAX = float(np.finfo(np.float32).max)
CHANNEL_LAST = ("NHWC", "NDHWC")


def rand(*shape: int, dtype: str = "float64") -> np.ndarray:
    return RNG.uniform(-2.0, 2.0, size=shape).astype(dtype)


def away_from_zero(*shape: int) -> np.ndarray:
    """Values with |v| in [0.3, 2], random signs (relu's kink stays out of finite differences)."""
    return RNG.uniform(0.3, 2.0, size=shape) * RNG.choice([-1.0, 1.0], size=shape)


def distinct(*shape: int, dtype: str = "float64") -> np.ndarray:
    """Values 0.1 apart in random order: no two equal, so every window has one maximum."""
    return (RNG.permutation(int(np.prod(shape))).reshape(shape) * 0.1 - 1.0).astype(dtype)


def trunc_div(a: int, b: int) -> int:
    return int(a / b)  # C's division truncates toward zero


def pads_of(
    paddings: Sequence[int] | None, algorithm: str, sizes: Sequence[int], strides: Sequence[int], ksize: Sequence[int]
) -> list[tuple[int, int]]:
    """(before, after) per spatial axis under Paddle's padding_algorithm; ``paddings`` one value per axis (both
    sides) or a (before, after) pair per axis, none for no padding."""
    if algorithm == "VALID":
        return [(0, 0)] * len(sizes)
    if algorithm == "SAME":
        totals = [max((-(-size // s) - 1) * s + k - size, 0) for size, s, k in zip(sizes, strides, ksize)]
        return [(t // 2, t - t // 2) for t in totals]
    p = list(paddings or [0] * len(sizes))
    return [(v, v) for v in p] if len(p) == len(sizes) else [(p[2 * a], p[2 * a + 1]) for a in range(len(sizes))]


def filter_geometry(
    sizes: Sequence[int],
    ksize: Sequence[int],
    strides: Sequence[int] | None,
    paddings: Sequence[int] | None,
    dilations: Sequence[int] | None,
    padding_algorithm: str,
) -> tuple[list[int], list[tuple[int, int]], list[int]]:
    """A convolution's strides, (before, after) paddings and dilations per spatial axis, unset ones 1, 0 and 1;
    SAME ignores dilations."""
    strides = list(strides or [1] * len(sizes))
    pads = pads_of(paddings, padding_algorithm, sizes, strides, ksize)
    dil = [1] * len(sizes) if padding_algorithm == "SAME" else list(dilations or [1] * len(sizes))
    return strides, pads, dil


def taps_inside(
    grid: Sequence[int],
    bounds: Sequence[int],
    ksize: Sequence[int],
    strides: Sequence[int],
    pads: Sequence[tuple[int, int]],
    dil: Sequence[int],
) -> Iterator[tuple[tuple[int, ...], tuple[int, ...], list[int]]]:
    """(position, tap, at) for each position of a grid of shape ``grid`` and each filter tap whose
    ``at = position * stride - pad_before + tap * dilation`` lies inside ``bounds``, one at a time."""
    for position in itertools.product(*map(range, grid)):
        for tap in itertools.product(*map(range, ksize)):
            at = [q * s - b + t * d for q, s, (b, _), t, d in zip(position, strides, pads, tap, dil)]
            if all(0 <= a < size for a, size in zip(at, bounds)):
                yield position, tap, at


def channel_first(x: np.ndarray, data_format: str) -> np.ndarray:
    """``x`` as float64 with its channels at axis 1 (NHWC and NDHWC hold them last)."""
    return (np.moveaxis(x, -1, 1) if data_format in CHANNEL_LAST else x).astype(np.float64)


def in_layout(y: np.ndarray, data_format: str, dtype: np.dtype) -> np.ndarray:
    """Channel-first ``y`` back in ``data_format``'s layout, as ``dtype``."""
    return (np.moveaxis(y, 1, -1) if data_format in CHANNEL_LAST else y).astype(dtype)


# -- conv2d ---------------------------------------------------------------------------------------------


def ref_conv(
    x: np.ndarray,
    w: np.ndarray,
    strides: Sequence[int] | None = None,
    paddings: Sequence[int] | None = None,
    dilations: Sequence[int] | None = None,
    groups: int = 1,
    padding_algorithm: str = "EXPLICIT",
    data_format: str = "NCHW",
    fuse_relu_before_depthwise_conv: bool = False,
    **no_effect: Any,
) -> np.ndarray:
    """Paddle's convolution (cross-correlation) over any number of spatial axes, one output position at a time:
    each reads the taps ``o * stride - pad_before + tap * dilation`` of Input (zeros outside); SAME ignores
    dilations. ``no_effect``: attributes that change nothing (use_cudnn, ...)."""
    xc = channel_first(x, data_format)
    if fuse_relu_before_depthwise_conv:
        xc = np.maximum(xc, 0)
    n, _, *sizes = xc.shape
    m, per_group, *ksize = w.shape
    strides, pads, dil = filter_geometry(sizes, ksize, strides, paddings, dilations, padding_algorithm)
    outs = [
        trunc_div(size + b + a - (d * (k - 1) + 1), s) + 1
        for size, (b, a), d, k, s in zip(sizes, pads, dil, ksize, strides)
    ]
    out = np.zeros((n, m, *outs))
    mg = m // groups
    for o, tap, at in taps_inside(outs, sizes, ksize, strides, pads, dil):
        for g in range(groups):
            values = xc[(slice(None), slice(g * per_group, (g + 1) * per_group), *at)]  # [N, C / groups]
            taps = w[(slice(g * mg, (g + 1) * mg), slice(None), *tap)]  # [M / groups, C / groups]
            out[(slice(None), slice(g * mg, (g + 1) * mg), *o)] += values @ taps.T
    return in_layout(out, data_format, x.dtype)


def conv_case(name: str, x: np.ndarray, w: np.ndarray, dtype: str = "float64", grad: bool = True, **attrs: Any) -> Case:
    x, w = x.astype(dtype), w.astype(dtype)
    return filter_case(name, x, w, ref_conv(x, w, **attrs), grad, attrs)


def filter_case(name, x, w, output, grad, attrs) -> Case:
    """A case of a convolution op of Input ``x`` and Filter ``w`` giving ``output``, gradient-checked in float64."""
    float32 = x.dtype == np.float32
    return Case(
        {"Input": x, "Filter": w},
        attrs,
        {"Output": output},
        grad=("Input", "Filter") if grad and x.dtype == np.float64 else (),
        rtol=1e-4 if float32 else 1e-5,
        atol=1e-4 if float32 else 1e-6,
        name=name,
    )


CONV2D = [
    conv_case("3x3_pad1_float32", rand(2, 3, 6, 5), rand(4, 3, 3, 3), "float32", paddings=[1, 1]),
    conv_case("3x3_pad1", rand(2, 3, 5, 4), rand(4, 3, 3, 3), paddings=[1, 1]),
    conv_case(
        "strides_dilations_4_paddings",
        rand(1, 2, 7, 8),
        rand(3, 2, 2, 3),
        strides=[2, 1],
        paddings=[1, 0, 2, 1],
        dilations=[1, 2],
    ),
    conv_case("groups_2", rand(2, 4, 5, 5), rand(6, 2, 3, 2), groups=2, strides=[1, 2], paddings=[0, 1]),
    conv_case(
        "same_ignores_dilations",
        rand(1, 2, 7, 6),
        rand(2, 2, 3, 2),
        padding_algorithm="SAME",
        strides=[2, 2],
        dilations=[2, 2],
        paddings=[5, 5],
    ),
    conv_case("valid_ignores_paddings", rand(1, 2, 5, 6), rand(2, 2, 2, 3), padding_algorithm="VALID", paddings=[2, 3]),
    conv_case("nhwc", rand(2, 5, 4, 3), rand(2, 3, 3, 2), data_format="NHWC", paddings=[1, 0], strides=[1, 2]),
    conv_case("nhwc_groups_float32", rand(1, 4, 4, 4), rand(4, 2, 2, 2), "float32", data_format="NHWC", groups=2),
    conv_case("any_layout_is_nchw", rand(1, 2, 4, 4), rand(2, 2, 2, 2), data_format="AnyLayout"),
    conv_case("pointwise", rand(2, 3, 3, 4), rand(5, 3, 1, 1)),
    # the kernels' paths: im2col and one gemm per group over the batch (NCHW, NHWC), pointwise gemms with no
    # im2col (1x1, strides 1, no padding; NCHW per image), and col2im for Input@GRAD
    # NCHW per image (an image's output pixels at least C / groups * taps): col2im (strides 2), and Input@GRAD as
    # the convolution by the flipped filter (strides 1)
    conv_case(
        "per_image_groups_strided", rand(2, 4, 6, 7), rand(6, 2, 2, 2), groups=2, strides=[1, 2], paddings=[1, 0]
    ),
    conv_case("per_image_stride1", rand(2, 2, 6, 6), rand(3, 2, 2, 2), paddings=[1, 1]),
    # Input@GRAD by the flipped filter: strides 1, C >= M and at least 64 pixels an image (else the col2im)
    conv_case("flipped_input_grad", rand(2, 4, 8, 9), rand(3, 4, 3, 3), paddings=[1, 2]),
    conv_case(
        "flipped_input_grad_groups_dilated",
        rand(1, 4, 9, 8),
        rand(4, 2, 3, 2),
        groups=2,
        dilations=[2, 1],
        paddings=[2, 1],
    ),
    conv_case(
        "flipped_input_grad_nhwc_same", rand(1, 8, 9, 3), rand(3, 3, 3, 3), data_format="NHWC", padding_algorithm="SAME"
    ),
    conv_case("pointwise_groups_float32", rand(2, 4, 3, 3), rand(6, 2, 1, 1), "float32", groups=2),
    conv_case("pointwise_nhwc", rand(2, 3, 4, 3), rand(4, 3, 1, 1), data_format="NHWC"),
    conv_case("pointwise_nhwc_groups_batch1", rand(1, 3, 3, 6), rand(4, 3, 1, 1), data_format="NHWC", groups=2),
    conv_case("1x1_strided_is_not_pointwise", rand(2, 3, 5, 4), rand(2, 3, 1, 1), strides=[2, 1]),
    conv_case(
        "1x1_padded_is_not_pointwise_nhwc", rand(1, 3, 3, 2), rand(2, 2, 1, 1), data_format="NHWC", paddings=[1, 0]
    ),
    conv_case(
        "nhwc_strides_dilations_4_paddings",
        rand(2, 7, 8, 2),
        rand(3, 2, 2, 3),
        data_format="NHWC",
        strides=[2, 1],
        paddings=[1, 0, 2, 1],
        dilations=[1, 2],
    ),
    conv_case(
        "nhwc_same", rand(1, 7, 6, 2), rand(2, 2, 3, 2), data_format="NHWC", padding_algorithm="SAME", strides=[2, 2]
    ),
    conv_case("nhwc_valid", rand(2, 5, 6, 2), rand(3, 2, 2, 3), data_format="NHWC", padding_algorithm="VALID"),
    conv_case(
        "groups_3_dilated_strided_batch1",
        rand(1, 6, 7, 7),
        rand(3, 2, 3, 3),
        groups=3,
        strides=[2, 2],
        dilations=[2, 1],
        paddings=[2, 1],
    ),
    conv_case(
        "nhwc_groups_3_strided", rand(2, 5, 6, 6), rand(6, 2, 3, 2), data_format="NHWC", groups=3, strides=[1, 2]
    ),
    conv_case(
        "nhwc_relu_before_conv",
        away_from_zero(1, 4, 4, 2),
        rand(2, 1, 2, 2),
        data_format="NHWC",
        groups=2,
        paddings=[1, 1],
        fuse_relu_before_depthwise_conv=True,
    ),
    # (2 + 0 - 3) / 2 truncates to 0: one output row reading a zero past the input, as Paddle does
    conv_case("c_division_reads_past_the_end", rand(1, 1, 2, 5), rand(1, 1, 3, 3), strides=[2, 1]),
    conv_case(
        "relu_before_conv",
        away_from_zero(1, 2, 4, 4),
        rand(2, 1, 2, 2),
        groups=2,
        fuse_relu_before_depthwise_conv=True,
    ),
    conv_case(
        "non_semantic_attributes",
        rand(1, 2, 4, 4),
        rand(2, 2, 3, 3),
        grad=False,
        paddings=[1, 1],
        use_cudnn=True,
        use_mkldnn=True,
        is_test=True,
        workspace_size_MB=4096,
        exhaustive_search=True,
        mkldnn_data_type="bfloat16",
        Scale_weights=[0.5, 2.0],
    ),
]

DEPTHWISE_CONV2D = [
    conv_case("channel_multiplier_2", rand(2, 3, 5, 5), rand(6, 1, 3, 3), groups=3, paddings=[1, 1], strides=[2, 2]),
    conv_case("float32_nhwc", rand(1, 4, 5, 4), rand(4, 1, 3, 3), "float32", groups=4, data_format="NHWC"),
    conv_case("same", rand(1, 2, 6, 5), rand(2, 1, 3, 3), groups=2, padding_algorithm="SAME", strides=[2, 1]),
    conv_case("dilated_valid_batch1", rand(1, 3, 7, 6), rand(3, 1, 3, 2), groups=3, dilations=[2, 2]),
    conv_case(
        "nhwc_multiplier_2_strided_padded",
        rand(2, 6, 5, 3),
        rand(6, 1, 3, 3),
        data_format="NHWC",
        groups=3,
        strides=[2, 2],
        paddings=[1, 0, 0, 1],
    ),
    conv_case("nhwc_pointwise", rand(1, 3, 3, 4), rand(4, 1, 1, 1), data_format="NHWC", groups=4),
    # blockir/ops/depthwise.py's direct kernel (multiplier 1 forward, every multiplier backward): its phase planes
    # under uneven strides, dilations, 4 paddings, SAME, VALID, C's truncation, windows in the padding alone
    conv_case(
        "strides_dilations_4_paddings",
        rand(2, 3, 9, 8),
        rand(3, 1, 3, 2),
        groups=3,
        strides=[2, 3],
        dilations=[2, 1],
        paddings=[1, 0, 2, 1],
    ),
    conv_case(
        "nhwc_strides_dilations_multiplier_2",
        rand(1, 8, 7, 2),
        rand(4, 1, 2, 3),
        data_format="NHWC",
        groups=2,
        strides=[3, 2],
        dilations=[1, 2],
        paddings=[0, 2, 1, 1],
    ),
    conv_case("valid_multiplier_3_batch1", rand(1, 2, 6, 7), rand(6, 1, 2, 3), groups=2, padding_algorithm="VALID"),
    conv_case(
        "nhwc_same_ignores_dilations",
        rand(2, 7, 6, 3),
        rand(3, 1, 3, 3),
        data_format="NHWC",
        groups=3,
        padding_algorithm="SAME",
        strides=[2, 2],
        dilations=[2, 2],
    ),
    conv_case("c_division_reads_past_the_end", rand(1, 2, 2, 5), rand(2, 1, 3, 3), groups=2, strides=[2, 1]),
    conv_case("paddings_wider_than_the_filter", rand(1, 2, 3, 3), rand(2, 1, 2, 2), groups=2, paddings=[3, 2]),
    conv_case("float32_nchw_strided", rand(2, 5, 9, 9), rand(5, 1, 3, 3), "float32", groups=5, strides=[2, 2]),
    conv_case(
        "relu_before_depthwise",
        away_from_zero(2, 3, 5, 4),
        rand(3, 1, 3, 3),
        groups=3,
        paddings=[1, 1],
        fuse_relu_before_depthwise_conv=True,
    ),
]

# -- conv2d_transpose ---------------------------------------------------------------------------------------


def ref_conv_transpose(
    x: np.ndarray,
    w: np.ndarray,
    strides: Sequence[int] | None = None,
    paddings: Sequence[int] | None = None,
    dilations: Sequence[int] | None = None,
    groups: int = 1,
    padding_algorithm: str = "EXPLICIT",
    output_padding: Sequence[int] = (),
    output_size: Sequence[int] = (),
    data_format: str = "NCHW",
    **no_effect: Any,
) -> np.ndarray:
    """Paddle's transposed convolution over any number of spatial axes, one Input position at a time: each adds
    Filter's taps times its value into Output at ``i * stride - pad_before + tap * dilation`` (positions outside
    Output dropped); Output's size is ``(L - 1) * stride - pads + dilation * (k - 1) + 1``, or output_size, or that
    plus output_padding."""
    xc = channel_first(x, data_format)
    n, c, *sizes = xc.shape
    _, mg, *ksize = w.shape
    strides, pads, dil = filter_geometry(sizes, ksize, strides, paddings, dilations, padding_algorithm)
    outs = []
    for axis, (size, k) in enumerate(zip(sizes, ksize)):
        inferred = (size - 1) * strides[axis] - sum(pads[axis]) + dil[axis] * (k - 1) + 1
        outs.append(output_size[axis] if output_size else inferred + (output_padding[axis] if output_padding else 0))
    out = np.zeros((n, mg * groups, *outs))
    cg = c // groups
    for i, tap, at in taps_inside(sizes, outs, ksize, strides, pads, dil):
        for g in range(groups):
            values = xc[(slice(None), slice(g * cg, (g + 1) * cg), *i)]  # [N, C / groups]
            taps = w[(slice(g * cg, (g + 1) * cg), slice(None), *tap)]  # [C / groups, M / groups]
            out[(slice(None), slice(g * mg, (g + 1) * mg), *at)] += values @ taps
    return in_layout(out, data_format, x.dtype)


def transpose_case(
    name: str, x: np.ndarray, w: np.ndarray, dtype: str = "float64", grad: bool = True, **attrs: Any
) -> Case:
    x, w = x.astype(dtype), w.astype(dtype)
    return filter_case(name, x, w, ref_conv_transpose(x, w, **attrs), grad, attrs)


CONV2D_TRANSPOSE = [
    transpose_case(
        "3x3_stride2_pad1_float32", rand(2, 4, 3, 3), rand(4, 3, 3, 3), "float32", strides=[2, 2], paddings=[1, 1]
    ),
    transpose_case("3x3_plain", rand(2, 3, 4, 3), rand(3, 2, 3, 3)),
    transpose_case("groups_2", rand(2, 4, 3, 4), rand(4, 3, 3, 2), groups=2, strides=[1, 2]),
    transpose_case(
        "strides_dilations_4_paddings",
        rand(1, 2, 4, 3),
        rand(2, 3, 3, 2),
        strides=[2, 3],
        paddings=[1, 0, 2, 1],
        dilations=[2, 1],
    ),
    transpose_case("output_padding", rand(1, 2, 3, 3), rand(2, 2, 3, 3), strides=[2, 3], output_padding=[1, 2]),
    # output_padding below max(stride, dilation): a row past every tap, left zero
    transpose_case(
        "output_padding_past_the_taps", rand(1, 2, 3, 2), rand(2, 1, 2, 2), dilations=[3, 1], output_padding=[2, 0]
    ),
    transpose_case(
        "output_size", rand(2, 2, 3, 4), rand(2, 3, 3, 3), strides=[2, 2], paddings=[1, 1], output_size=[6, 8]
    ),
    transpose_case(
        "same", rand(1, 2, 3, 4), rand(2, 2, 3, 2), padding_algorithm="SAME", strides=[2, 2], dilations=[2, 2]
    ),
    transpose_case(
        "valid_ignores_paddings", rand(1, 2, 3, 3), rand(2, 2, 2, 3), padding_algorithm="VALID", paddings=[1, 1]
    ),
    transpose_case("nhwc", rand(2, 3, 4, 3), rand(3, 2, 3, 2), data_format="NHWC", strides=[2, 1], paddings=[1, 0]),
    transpose_case(
        "nhwc_groups_output_size_float32",
        rand(1, 3, 3, 4),
        rand(4, 3, 2, 2),
        "float32",
        data_format="NHWC",
        groups=2,
        strides=[2, 2],
        output_size=[7, 6],
    ),
    transpose_case("pointwise", rand(2, 3, 3, 4), rand(3, 5, 1, 1)),
    transpose_case("per_image_stride2", rand(2, 2, 5, 4), rand(2, 3, 2, 2), strides=[2, 2]),
    # strides 1, Output's channels >= Input's, at least 64 pixels: the convolution by the flipped filter
    transpose_case("stride1_flipped", rand(1, 2, 7, 8), rand(2, 3, 3, 3), paddings=[1, 0]),
    transpose_case("pointwise_nhwc_groups", rand(2, 3, 2, 4), rand(4, 3, 1, 1), data_format="NHWC", groups=2),
    # a 1x1 filter whose Output is larger than Input (output_padding with dilation 2): not pointwise
    transpose_case(
        "1x1_output_padding_is_not_pointwise",
        rand(1, 2, 3, 3),
        rand(2, 2, 1, 1),
        dilations=[2, 2],
        output_padding=[1, 0],
    ),
    transpose_case(
        "non_semantic_attributes",
        rand(1, 2, 3, 3),
        rand(2, 2, 3, 3),
        grad=False,
        use_cudnn=True,
        use_mkldnn=True,
        is_test=True,
        workspace_size_MB=4096,
        mkldnn_data_type="bfloat16",
        force_fp32_output=True,
    ),
]

DEPTHWISE_CONV2D_TRANSPOSE = [
    transpose_case(
        "channel_multiplier_2", rand(2, 3, 3, 3), rand(3, 2, 3, 3), groups=3, strides=[2, 2], paddings=[1, 1]
    ),
    transpose_case("nhwc_float32", rand(1, 4, 3, 4), rand(4, 1, 3, 3), "float32", groups=4, data_format="NHWC"),
]

# -- pool2d -----------------------------------------------------------------------------------------------


def ref_pool(
    x: np.ndarray,
    pooling_type: str,
    ksize: Sequence[int],
    strides: Sequence[int] | None = None,
    paddings: Sequence[int] | None = None,
    global_pooling: bool = False,
    exclusive: bool = True,
    adaptive: bool = False,
    ceil_mode: bool = False,
    padding_algorithm: str = "EXPLICIT",
    data_format: str = "NCHW",
    **no_effect: Any,
) -> np.ndarray:
    """Paddle's CPU pooling loops over any number of spatial axes, one output position at a time (max pooling
    ignores adaptive's bins; the inclusive divisor measures the far side with the near padding, as Paddle's does);
    ``no_effect``: attributes that change nothing (use_cudnn, ...)."""
    xc = channel_first(x, data_format)
    n, c, *sizes = xc.shape
    ksize = sizes if global_pooling else list(ksize)
    strides = strides or [1] * len(sizes)
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
    return in_layout(out, data_format, x.dtype)


def _below_flt_max(n: int, c: int, h: int, w: int) -> np.ndarray:
    """float64 values in [-1, 1] but for channel 0's top left 3x3 block (-1e300) and the last channel's bottom right
    one (-inf): windows whose maximum is below -FLT_MAX."""
    x = np.linspace(-1.0, 1.0, n * c * h * w).reshape(n, c, h, w)
    x[:, 0, :3, :3] = -1e300
    x[:, -1, h - 3 :, w - 3 :] = -np.inf
    return x


def pool_case(name: str, x: np.ndarray, grad: bool = True, **attrs: Any) -> Case:
    return Case(
        {"X": x}, attrs, {"Out": ref_pool(x, **attrs)}, grad=("X",) if grad and x.dtype == np.float64 else (), name=name
    )


POOL2D = [
    pool_case("max_2x2_float32", rand(2, 3, 6, 4, dtype="float32"), pooling_type="max", ksize=[2, 2], strides=[2, 2]),
    # the gradient's paths for windows side by side: tiling X (every position written), and with gaps
    pool_case("max_2x2_tiles", distinct(2, 2, 4, 6), pooling_type="max", ksize=[2, 2], strides=[2, 2]),
    pool_case("max_2x2_strides_3_gaps", distinct(1, 2, 7, 5), pooling_type="max", ksize=[2, 2], strides=[3, 3]),
    pool_case("max_3x3_pad1", distinct(2, 2, 5, 6), pooling_type="max", ksize=[3, 3], strides=[2, 2], paddings=[1, 1]),
    pool_case(
        "max_ceil_mode_4_paddings",
        distinct(1, 2, 5, 5),
        pooling_type="max",
        ksize=[3, 2],
        strides=[2, 2],
        paddings=[1, 1, 0, 1],
        ceil_mode=True,
    ),
    # the last row of windows starts past the input: Paddle gives its initial -FLT_MAX
    pool_case(
        "max_empty_window",
        distinct(1, 1, 5, 5),
        grad=False,
        pooling_type="max",
        ksize=[3, 3],
        strides=[2, 2],
        paddings=[0, 3, 1, 0],
        ceil_mode=True,
    ),
    pool_case("avg_exclusive_pad1", rand(2, 2, 5, 5), pooling_type="avg", ksize=[3, 3], paddings=[1, 1]),
    pool_case(
        "avg_inclusive_4_paddings_ceil",
        rand(1, 2, 5, 5),
        pooling_type="avg",
        ksize=[3, 3],
        strides=[2, 2],
        paddings=[0, 2, 1, 0],
        exclusive=False,
        ceil_mode=True,
    ),
    pool_case(
        "avg_inclusive_float32",
        rand(2, 2, 6, 6, dtype="float32"),
        pooling_type="avg",
        ksize=[2, 3],
        strides=[2, 3],
        paddings=[1, 1],
        exclusive=False,
    ),
    pool_case("avg_adaptive", rand(2, 2, 5, 7), pooling_type="avg", ksize=[3, 4], adaptive=True),
    pool_case("avg_adaptive_larger_than_input", rand(1, 2, 3, 2), pooling_type="avg", ksize=[4, 3], adaptive=True),
    pool_case(
        "max_adaptive_keeps_windows",
        distinct(1, 2, 5, 6),
        pooling_type="max",
        ksize=[2, 3],
        strides=[2, 1],
        adaptive=True,
    ),
    pool_case("avg_global", rand(2, 3, 4, 5), pooling_type="avg", ksize=[1, 1], global_pooling=True, paddings=[1, 1]),
    pool_case("max_global", distinct(2, 2, 3, 4), pooling_type="max", ksize=[-1, -1], global_pooling=True),
    pool_case(
        "avg_global_adaptive", rand(1, 2, 3, 4), pooling_type="avg", ksize=[1, 1], global_pooling=True, adaptive=True
    ),
    pool_case(
        "max_same", distinct(1, 2, 5, 7), pooling_type="max", ksize=[3, 2], strides=[2, 3], padding_algorithm="SAME"
    ),
    pool_case(
        "avg_valid",
        rand(1, 2, 5, 6),
        pooling_type="avg",
        ksize=[2, 2],
        strides=[2, 2],
        paddings=[1, 1],
        padding_algorithm="VALID",
    ),
    pool_case(
        "avg_nhwc",
        rand(2, 5, 4, 3),
        pooling_type="avg",
        ksize=[3, 2],
        strides=[2, 1],
        paddings=[1, 0],
        data_format="NHWC",
        exclusive=False,
    ),
    pool_case(
        "max_nhwc",
        distinct(1, 4, 5, 2),
        pooling_type="max",
        ksize=[2, 2],
        strides=[2, 2],
        data_format="NHWC",
        ceil_mode=True,
    ),
    pool_case("max_big_window_few_outputs", distinct(1, 1, 6, 7), pooling_type="max", ksize=[5, 6], strides=[1, 1]),
    # maxima below -FLT_MAX (windows of -1e300 or -inf only) are Paddle's initial -FLT_MAX: windows, global
    pool_case(
        "max_below_flt_max", _below_flt_max(1, 2, 6, 6), grad=False, pooling_type="max", ksize=[3, 3], strides=[3, 3]
    ),
    pool_case(
        "max_global_below_flt_max",
        _below_flt_max(1, 2, 3, 3),
        grad=False,
        pooling_type="max",
        ksize=[3, 3],
        global_pooling=True,
    ),
    pool_case(
        "non_semantic_attributes",
        rand(1, 2, 4, 4),
        grad=False,
        pooling_type="avg",
        ksize=[2, 2],
        use_cudnn=True,
        use_mkldnn=True,
        is_test=True,
        data_format="AnyLayout",
    ),
]

# pool2d_grad directly: ties go to the first maximum in row-major order (Paddle's rule)
_TIES = np.array([[[[1.0, 3.0, 3.0, 0.0], [3.0, 2.0, 3.0, 3.0], [0.0, 0.0, 1.0, 1.0]]]])
_TIES_OUT = np.array([[[[3.0, 3.0, 3.0], [3.0, 3.0, 3.0]]]])
_TIES_DOUT = np.array([[[[1.0, 10.0, 100.0], [1000.0, 10000.0, 100000.0]]]])
POOL2D_GRAD = [
    Case(
        {"X": _TIES, "Out": _TIES_OUT, "Out@GRAD": _TIES_DOUT},
        {"pooling_type": "max", "ksize": [2, 2]},
        {"X@GRAD": np.array([[[[0.0, 11.0, 100.0, 0.0], [1000.0, 0.0, 110000.0, 0.0], [0.0, 0.0, 0.0, 0.0]]]])},
        name="max_ties_first_in_row_major_order",
    ),
    Case(
        {"X": _TIES[:, :, :2], "Out": np.full((1, 1, 1, 2), 3.0), "Out@GRAD": np.array([[[[1.0, 10.0]]]])},
        {"pooling_type": "max", "ksize": [2, 2], "strides": [2, 2]},
        {"X@GRAD": np.array([[[[0.0, 1.0, 10.0, 0.0], [0.0, 0.0, 0.0, 0.0]]]])},
        name="max_ties_first_in_row_major_order_side_by_side",
    ),
]

# -- max_pool2d_with_index ------------------------------------------------------------------------------


def ref_max_pool_with_index(
    x, ksize, strides=None, paddings=None, global_pooling=False, adaptive=False, ceil_mode=False
):
    """(Out, Mask) of max_pool2d_with_index and max_pool3d_with_index: the first maximum of each window in
    row-major order, above -FLT_MAX, and its position in the plane, ``h * W + w`` (3-D: ``(d * H + h) * W + w``)."""
    n, c, *sizes = x.shape
    strides, paddings = strides or [1] * len(sizes), paddings or [0] * len(sizes)
    ksize = sizes if global_pooling else list(ksize)
    pads = [0] * len(sizes) if global_pooling else list(paddings)
    if adaptive:
        outs = ksize
    else:
        outs = [
            trunc_div(size - k + 2 * p + (s - 1 if ceil_mode else 0), s) + 1
            for size, k, p, s in zip(sizes, ksize, pads, strides)
        ]
    out = np.full((n, c, *outs), -FLT_MAX, dtype=x.dtype)
    mask = np.full((n, c, *outs), -1, dtype=np.int32)
    for o in itertools.product(*map(range, outs)):
        ranges = []
        for p, size, k, s, pad, count in zip(o, sizes, ksize, strides, pads, outs):
            if adaptive:
                ranges.append(range(p * size // count, -(-(p + 1) * size // count)))
            else:
                ranges.append(range(max(p * s - pad, 0), min(p * s - pad + k, size)))
        for a in range(n):
            for b in range(c):
                for at in itertools.product(*ranges):
                    if x[(a, b, *at)] > out[(a, b, *o)]:
                        out[(a, b, *o)] = x[(a, b, *at)]
                        mask[(a, b, *o)] = np.ravel_multi_index(at, sizes)
    return out, mask


def with_index_case(name: str, x: np.ndarray, grad: bool = True, **attrs: Any) -> Case:
    out, mask = ref_max_pool_with_index(x, **attrs)
    return Case(
        {"X": x}, attrs, {"Out": out, "Mask": mask}, grad=("X",) if grad and x.dtype == np.float64 else (), name=name
    )


MAX_POOL2D_WITH_INDEX = [
    with_index_case("2x2_float32", distinct(2, 2, 4, 6, dtype="float32"), ksize=[2, 2], strides=[2, 2]),
    with_index_case(
        "pad_stride_ceil", distinct(1, 2, 6, 5), ksize=[3, 3], strides=[2, 2], paddings=[1, 1], ceil_mode=True
    ),
    with_index_case("adaptive", distinct(2, 1, 5, 7), ksize=[2, 3], adaptive=True),
    with_index_case("adaptive_larger_than_input", distinct(1, 1, 3, 2), ksize=[4, 3], adaptive=True),
    with_index_case("global", distinct(2, 2, 3, 4), ksize=[1, 1], paddings=[1, 1], global_pooling=True),
    with_index_case("ties_first", np.array([[[[2.0, 2.0, 1.0], [2.0, 0.0, 2.0]]]]), grad=False, ksize=[2, 2]),
]

# -- fold -------------------------------------------------------------------------------------------------


def ref_fold(x: np.ndarray, output_sizes, kernel_sizes, strides=(1, 1), paddings=(0, 0, 0, 0), dilations=(1, 1)):
    """Paddle's fold, one block and tap at a time: X[n, (c, i, j), block] added at the pixel tap (i, j) of that
    block covers in the image padded by paddings [top, left, bottom, right]."""
    (h, w), (kh, kw), (sh, sw), (dh, dw) = output_sizes, kernel_sizes, strides, dilations
    top, left, bottom, right = paddings
    bh = (h + top + bottom - (dh * (kh - 1) + 1)) // sh + 1
    bw = (w + left + right - (dw * (kw - 1) + 1)) // sw + 1
    n, c = x.shape[0], x.shape[1] // (kh * kw)
    out = np.zeros((n, c, h, w), x.dtype)
    cols = x.reshape(n, c, kh, kw, bh, bw)
    for bi in range(bh):
        for bj in range(bw):
            for i in range(kh):
                for j in range(kw):
                    r, q = bi * sh - top + i * dh, bj * sw - left + j * dw
                    if 0 <= r < h and 0 <= q < w:
                        out[:, :, r, q] += cols[:, :, i, j, bi, bj]
    return out


def fold_case(name: str, shape: tuple[int, int, int], dtype: str = "float64", **attrs) -> Case:
    x = rand(*shape, dtype=dtype)
    paddings = attrs.get("paddings", [0, 0, 0, 0])
    expected = ref_fold(x, **{**attrs, "paddings": paddings * 2 if len(paddings) == 2 else paddings})  # [h, w]: twice
    grad = ("X",) if dtype == "float64" else ()
    return Case({"X": x}, attrs, {"Y": expected}, grad=grad, name=name)


FOLD = [
    fold_case("plain", (2, 2 * 4, 9), output_sizes=[4, 4], kernel_sizes=[2, 2]),
    fold_case("strides", (1, 3 * 6, 6), output_sizes=[5, 5], kernel_sizes=[2, 3], strides=[2, 1]),
    fold_case("paddings", (2, 1 * 4, 6), output_sizes=[2, 3], kernel_sizes=[2, 2], paddings=[1, 0, 0, 1]),
    fold_case("paddings_hw", (1, 2 * 4, 12), output_sizes=[2, 3], kernel_sizes=[2, 2], paddings=[1, 1]),
    fold_case("dilations", (1, 1 * 4, 6), output_sizes=[4, 5], kernel_sizes=[2, 2], dilations=[2, 2]),
    fold_case(
        "all_and_uneven",
        (2, 2 * 6, 4),
        output_sizes=[6, 5],
        kernel_sizes=[2, 3],
        strides=[3, 2],
        paddings=[0, 1, 1, 0],
        dilations=[2, 1],
    ),
    fold_case("float32", (2, 3 * 1, 25), dtype="float32", output_sizes=[5, 5], kernel_sizes=[1, 1]),
]

CASES: dict[str, list[Case]] = {
    "conv2d": CONV2D,
    "depthwise_conv2d": DEPTHWISE_CONV2D,
    "conv2d_transpose": CONV2D_TRANSPOSE,
    "depthwise_conv2d_transpose": DEPTHWISE_CONV2D_TRANSPOSE,
    "pool2d": POOL2D,
    "pool2d_grad": POOL2D_GRAD,
    "max_pool2d_with_index": MAX_POOL2D_WITH_INDEX,
    "fold": FOLD,
}

# -- bad input ---------------------------------------------------------------------------------------------

_X = np.zeros((2, 3, 5, 5), np.float32)
_W = np.zeros((4, 3, 3, 3), np.float32)

INFER_ERRORS: list[tuple[str, Case, str]] = [
    ("fold", Case({"X": _X}, {"output_sizes": [4, 4], "kernel_sizes": [2, 2]}), r"must be 3-D"),
    (
        "fold",
        Case({"X": np.zeros((1, 6, 9), np.float32)}, {"output_sizes": [4, 4], "kernel_sizes": [2, 2]}),
        r"dim 1 must be a multiple of the 4 kernel taps",
    ),
    (
        "fold",
        Case({"X": np.zeros((1, 4, 8), np.float32)}, {"output_sizes": [4, 4], "kernel_sizes": [2, 2]}),
        r"has 8 blocks; the attributes make 3 x 3",
    ),
    (
        "fold",
        Case({"X": np.zeros((1, 4, 9), np.float32)}, {"output_sizes": [4, 4], "kernel_sizes": [2, 2], "paddings": [1]}),
        r"paddings=\[1\] must hold 2",
    ),
    (
        "fold",
        Case({"X": np.zeros((1, 4, 9), np.float32)}, {"output_sizes": [2, 2], "kernel_sizes": [3, 2]}),
        r"leave no block",
    ),
    ("conv2d", Case({"Input": np.zeros((3, 5, 5), np.float32), "Filter": _W}), r"Input .*\[3, 5, 5\]\) must be 4-D"),
    ("conv2d", Case({"Input": _X, "Filter": np.zeros((4, 2, 3, 3), np.float32)}), r"has 3 channels .* needs 2 \* 1"),
    (
        "conv2d",
        Case(
            {"Input": np.zeros((1, 4, 5, 5), np.float32), "Filter": np.zeros((3, 2, 3, 3), np.float32)}, {"groups": 2}
        ),
        r"3 output channels are not divisible by groups=2",
    ),
    ("conv2d", Case({"Input": _X, "Filter": np.zeros((4, 3, 3, 3))}), r"different dtypes"),
    ("conv2d", Case({"Input": _X.astype(np.int32), "Filter": _W.astype(np.int32)}), r"Input .* has dtype int32"),
    (
        "conv2d",
        Case({"Input": _X, "Filter": _W}, {"data_format": "NCDHW"}),
        r"data_format='NCDHW' is not one of NCHW, AnyLayout, NHWC",
    ),
    ("conv2d", Case({"Input": _X, "Filter": _W}, {"padding_algorithm": "FULL"}), r"padding_algorithm='FULL'"),
    ("conv2d", Case({"Input": _X, "Filter": _W}, {"paddings": [1, 1, 1]}), r"paddings=\[1, 1, 1\] must hold 2 .* or 4"),
    ("conv2d", Case({"Input": _X, "Filter": _W}, {"strides": [0, 1]}), r"strides=\[0, 1\] must hold 2 values >= 1"),
    ("conv2d", Case({"Input": _X, "Filter": _W}, {"dilations": [1]}), r"dilations=\[1\] must hold 2 values"),
    (
        "conv2d",
        Case({"Input": _X, "Filter": np.zeros((4, 3, 7, 3), np.float32)}),
        r"output H = -1; it must be at least 1",
    ),
    (
        "conv2d",
        Case({"Input": _X, "Filter": _W, "Bias": np.zeros(4, np.float32)}),
        r"input Bias is used only by Paddle's oneDNN",
    ),
    (
        "conv2d",
        Case({"Input": _X, "Filter": _W}, {"fuse_activation": "relu"}),
        r"fuse_activation='relu' asks for a oneDNN fusion",
    ),
    ("depthwise_conv2d", Case({"Input": _X, "Filter": _W}, {"groups": 0}), r"groups=0 must be at least 1"),
    (
        "conv2d_grad",
        Case({"Input": _X, "Filter": _W, "Output@GRAD": np.zeros((2, 4, 3, 3), np.float32)}, {"use_addto": True}),
        r"use_addto=True .* is not supported",
    ),
    (
        "conv2d_transpose",
        Case({"Input": _X, "Filter": np.zeros((4, 2, 3, 3), np.float32)}),
        r"has 3 channels \(NCHW\) but Filter .* takes 4 \(its dim 0\)",
    ),
    (
        "conv2d_transpose",
        Case({"Input": _X, "Filter": np.zeros((3, 2, 3, 3), np.float32)}, {"groups": 2}),
        r"its 3 channels are not divisible by groups=2",
    ),
    ("conv2d_transpose", Case({"Input": _X, "Filter": _W[:3, :, 0]}), r"Filter .* must be 4-D \[in channels, out"),
    (
        "conv2d_transpose",
        Case({"Input": _X, "Filter": _W[:3]}, {"strides": [2, 2], "output_size": [13, 11]}),
        r"output_size H = 13 must be in \[11, 13\)",
    ),
    (
        "conv2d_transpose",
        Case({"Input": _X, "Filter": _W[:3]}, {"strides": [2, 2], "output_size": [11]}),
        r"output_size=\[11\] must be empty or hold 2 values",
    ),
    (
        "conv2d_transpose",
        Case({"Input": _X, "Filter": _W[:3]}, {"dilations": [1, 2], "output_padding": [0, 2]}),
        r"output_padding W = 2 must be in \[0, 2\)",
    ),
    (
        "conv2d_transpose",
        Case({"Input": _X, "Filter": _W[:3]}, {"paddings": [4, 4]}),
        r"output H = -1; it must be at least 1",
    ),
    (
        "depthwise_conv2d_transpose",
        Case({"Input": _X, "Filter": _W[:3], "Bias": np.zeros(4, np.float32)}),
        r"input Bias is used only by Paddle's oneDNN",
    ),
    (
        "conv2d_transpose",
        Case({"Input": _X, "Filter": _W[:3]}, {"fuse_relu": True}),
        r"fuse_relu=True asks for a oneDNN fusion",
    ),
    ("pool2d", Case({"X": _X}, {"pooling_type": "min", "ksize": [2, 2]}), r"pooling_type='min' is not one of max, avg"),
    ("pool2d", Case({"X": _X}, {"pooling_type": "max", "ksize": [2, 2, 2]}), r"ksize=\[2, 2, 2\] must hold 2 values"),
    ("pool2d", Case({"X": _X}, {"pooling_type": "max", "ksize": [6, 2]}), r"output H = 0; it must be at least 1"),
    ("pool2d", Case({"X": _X.astype(np.int64)}, {"pooling_type": "max", "ksize": [2, 2]}), r"X .* has dtype int64"),
    ("pool2d", Case({"X": _X[0]}, {"pooling_type": "avg", "ksize": [2, 2]}), r"X .*\[3, 5, 5\]\) must be 4-D"),
    (
        "pool2d",
        Case({"X": _X}, {"pooling_type": "avg", "ksize": [2, 2], "data_format": "NDHWC"}),
        r"data_format='NDHWC'",
    ),
    (
        "max_pool2d_with_index",
        Case({"X": _X}, {"ksize": [2, 2], "paddings": [0, 0, 1, 1]}),
        r"paddings=\[0, 0, 1, 1\] must hold 2 values",
    ),
    ("max_pool2d_with_index", Case({"X": _X}, {"ksize": [7, 2]}), r"output H = -1"),
]

KERNEL_ERRORS: list[tuple[str, Case, str]] = [
    ("conv2d", Case({"Input": _X, "Filter": np.zeros((4, 2, 3, 3), np.float32)}), r"3 channels .* do not fit groups=1"),
    (
        "depthwise_conv2d",
        Case({"Input": _X, "Filter": np.zeros((4, 3, 6, 3), np.float32)}),
        r"give output size \[0, 3\]",
    ),
    (
        "conv2d_transpose",
        Case({"Input": _X, "Filter": np.zeros((4, 2, 3, 3), np.float32)}),
        r"Input with 3 channels .* Input channels must be Filter dim 0",
    ),
    (
        "conv2d_transpose",
        Case({"Input": _X, "Filter": _W[:3]}, {"output_size": [7, 9]}),
        r"output_size W = 9 must be in \[7, 8\)",
    ),
    ("pool2d", Case({"X": _X}, {"pooling_type": "max", "ksize": [7, 2]}), r"output size -1 along H"),
    ("max_pool2d_with_index", Case({"X": _X}, {"ksize": [2, 9]}), r"output size -3 along W"),
]
