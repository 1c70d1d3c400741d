"""Test cases of the vision ops (blockir.ops.vision), as data.

Expected values come from the plain loops below, written from Paddle 3.3.1's CPU kernels
(``interpolate_kernel.cc``, ``pad3d_kernel.cc``, ``pixel_shuffle``'s and ``affine_channel``'s definitions): one
output element at a time, each axis's source positions and weights computed for that element alone, in the
float32 arithmetic of Paddle's ratios, independently of the kernels' vectorised per-axis gathers. The rows say
which output sizes and scales each combination of attributes and size tensors must give (Paddle's
precedence), and the references take them as given. The kernels were also compared with Paddle 3.3.1 itself,
outside this table: 81 resizes (every method, align_corners, align_mode, layout, sizes and scales), OutSize,
SizeTensor and Scale against the attributes, the pad3d modes, pad, pixel_shuffle / pixel_unshuffle and
affine_channel agree within 3e-6 relative difference, forward and gradient, but for one gradient: Paddle's
linear_interp_v2_grad, for a 1-D resize to width 1 under align_mode 0, sends everything to position 0 where its
forward read the middle (docs/ops.md); the gradient here is the forward's adjoint.
"""

from __future__ import annotations

import itertools
import math
from typing import Any

import numpy as np

from tests.ops.harness import Case

RNG = np.random.default_rng(20261128)


def rand(*shape: int, dtype: str = "float64") -> np.ndarray:
    return RNG.uniform(-2.0, 2.0, size=shape).astype(dtype)


# -- the interpolation reference ----------------------------------------------------------------------------


def ref_ratio(size: int, out: int, align_corners: bool, scale: float, rank: int) -> np.float32:
    if align_corners:
        ratio = np.float32(size - 1) / np.float32(out - 1) if out > 1 else np.float32(0)
    elif scale > 0:
        ratio = np.float32(1.0 / scale)
    else:
        ratio = np.float32(size) / np.float32(out)
    return np.float32(0) if rank == 4 and out <= 1 else ratio


def ref_taps(method: str, size: int, o: int, ratio: np.float32, align_corners: bool, align_mode: int, dtype):
    """The (source position, weight) pairs output position ``o`` of one axis reads."""
    r = float(ratio)
    if method == "nearest":
        src = float(np.float32(ratio * np.float32(o)))
        i = math.floor(src + 0.5) if align_corners else int(src)
        return [(min(i, size - 1), 1.0)]
    if method == "bicubic":
        work = np.float64 if dtype == np.float64 else np.float32
        src = work(np.float32(ratio * np.float32(o))) if align_corners else work(r * (o + 0.5) - 0.5)
        i = math.floor(float(np.float32(src)))
        t = float(src - work(i))
        a = -0.75

        def kernel(v: float) -> float:
            v = abs(v)
            if v <= 1:
                return ((a + 2) * v - (a + 3)) * v * v + 1
            return ((a * v - 5 * a) * v + 8 * a) * v - 4 * a

        return [(min(max(i + k, 0), size - 1), kernel(t - k)) for k in (-1, 0, 1, 2)]
    if align_mode == 0 and not align_corners:
        lo = max(int(r * (o + 0.5) - 0.5), 0)
        frac = max(float(np.float32(ratio * (np.float32(o) + np.float32(0.5)) - np.float32(0.5))), 0.0) - lo
    else:
        product = float(np.float32(ratio * np.float32(o)))
        lo = max(int(product), 0)
        frac = product - lo
    hi = min(lo + 1, size - 1)
    return [(lo, 1.0 - frac), (hi, frac)]


def ref_interp(x, method, sizes, scales=None, align_corners=True, align_mode=1, nhwc=False) -> np.ndarray:
    """X resized to ``sizes`` (per spatial axis), the ratio from ``scales`` where given (-1: none)."""
    xc = np.moveaxis(x, -1, 1) if nhwc else x
    ins = xc.shape[2:]
    scales = scales or [-1.0] * len(ins)
    if list(sizes) == list(ins):
        return x.copy()
    ratios = [ref_ratio(s, o, align_corners, sc, x.ndim) for s, o, sc in zip(ins, sizes, scales)]
    out = np.zeros((*xc.shape[:2], *sizes))
    for pos in itertools.product(*(range(o) for o in sizes)):
        taps = [ref_taps(method, s, o, r, align_corners, align_mode, x.dtype) for s, o, r in zip(ins, pos, ratios)]
        total = np.zeros(xc.shape[:2])
        for combo in itertools.product(*taps):
            weight = np.prod([w for _, w in combo])
            total += weight * xc[(slice(None), slice(None), *(i for i, _ in combo))]
        out[(slice(None), slice(None), *pos)] = total
    out = np.moveaxis(out, 1, -1) if nhwc else out
    return out.astype(x.dtype)


def interp_case(op, x, method, sizes, scales=None, attrs=None, inputs=None, name="", grad=True, **ref) -> Case:
    """A case of ``op`` resizing ``x`` with ``attrs`` (and size tensors ``inputs``) that must give ``sizes``,
    its ratios set by ``scales``; ``ref`` holds align_corners, align_mode and nhwc for the reference."""
    attrs = {"interp_method": method, **(attrs or {})}
    for key in ("align_corners", "align_mode"):
        if key in ref:
            attrs[key] = ref[key]
    if ref.get("nhwc"):
        attrs["data_layout"] = "NHWC"
    expected = ref_interp(x, method, sizes, scales, **ref)
    return Case(
        {"X": x, **(inputs or {})},
        attrs,
        {"Out": expected},
        grad=("X",) if grad and x.dtype == np.float64 else (),
        atol=1e-6 if x.dtype == np.float64 else 1e-5,  # float32 sums of 16 terms that cancel
        name=name,
    )


def _sizes(n: int, *sizes: int) -> dict[str, int]:
    return dict(zip(("out_d", "out_h", "out_w")[-n:], sizes))


_X4 = rand(2, 2, 3, 4)
_X4_NHWC = rand(1, 3, 4, 2)
_X3 = rand(2, 2, 5)
_X5 = rand(1, 2, 2, 3, 3)
_F32 = rand(2, 3, 5, 6, dtype="float32")
_I32 = np.int32

BILINEAR = [
    interp_case("bilinear_interp_v2", _X4, "bilinear", (5, 7), attrs=_sizes(2, 5, 7), name="corners-up"),
    interp_case(
        "bilinear_interp_v2", _X4, "bilinear", (5, 3), attrs=_sizes(2, 5, 3), align_corners=False, name="mode1"
    ),
    interp_case(
        "bilinear_interp_v2",
        _X4,
        "bilinear",
        (5, 6),
        attrs=_sizes(2, 5, 6),
        align_corners=False,
        align_mode=0,
        name="half-pixel",
    ),
    interp_case(
        "bilinear_interp_v2",
        _X4_NHWC,
        "bilinear",
        (2, 7),
        attrs=_sizes(2, 2, 7),
        align_corners=False,
        align_mode=0,
        nhwc=True,
        name="nhwc",
    ),
    interp_case(
        "bilinear_interp_v2",
        _X4,
        "bilinear",
        (5, 2),
        [1.7, 0.6],
        attrs={"scale": [1.7, 0.6]},
        align_corners=False,
        align_mode=0,
        name="scale-attr",
    ),
    interp_case(
        "bilinear_interp_v2",
        _X4,
        "bilinear",
        (6, 8),
        [2.0, 2.0],
        attrs={"scale": [3.0, 3.0], **_sizes(2, 1, 1)},
        inputs={"Scale": np.array([2.0], np.float32)},
        align_corners=False,
        align_mode=0,
        name="scale-tensor-wins",
    ),
    interp_case(
        "bilinear_interp_v2",
        _X4,
        "bilinear",
        (4, 5),
        [1.5, 2.5],
        attrs={"scale": [1.5, 2.5]},
        inputs={"OutSize": np.array([4, 5], _I32)},
        align_corners=False,
        align_mode=0,
        name="outsize-over-scale",
    ),
    interp_case(
        "bilinear_interp_v2",
        _X4,
        "bilinear",
        (2, 6),
        attrs={"scale": [2.0, 2.0], **_sizes(2, -1, -1)},
        inputs={"SizeTensor": [np.array([2], _I32), np.array([6], np.int64)], "OutSize": np.array([7, 7], _I32)},
        name="size-tensor-first",
    ),
    interp_case(
        "bilinear_interp_v2",
        _X4,
        "bilinear",
        (3, 4),
        [1.2, 1.1],
        attrs={"scale": [1.2, 1.1]},
        align_corners=False,
        name="same-size-copies",
    ),
    interp_case("bilinear_interp_v2", _X4, "bilinear", (1, 1), attrs=_sizes(2, 1, 1), name="to-one"),
    interp_case("bilinear_interp_v2", _F32, "bilinear", (9, 4), attrs=_sizes(2, 9, 4), align_corners=False, name="f32"),
    interp_case("bilinear_interp_v2", _X4, "nearest", (4, 7), attrs=_sizes(2, 4, 7), name="method-nearest"),
    Case(
        {"X": np.arange(4.0).reshape(1, 1, 2, 2)},
        _sizes(2, 3, 3),
        {"Out": np.array([[[[0.0, 0.5, 1.0], [1.0, 1.5, 2.0], [2.0, 2.5, 3.0]]]])},
        name="by-hand",
    ),
]

NEAREST = [
    interp_case("nearest_interp_v2", _X4, "nearest", (5, 7), attrs=_sizes(2, 5, 7), align_corners=False, name="up"),
    interp_case("nearest_interp_v2", _X4, "nearest", (2, 3), attrs=_sizes(2, 2, 3), align_corners=False, name="down"),
    interp_case("nearest_interp_v2", _X4, "nearest", (5, 6), attrs=_sizes(2, 5, 6), name="corners-round"),
    interp_case(
        "nearest_interp_v2",
        _X4_NHWC,
        "nearest",
        (6, 8),
        [2.0, 2.0],
        attrs={"scale": [2.0, 2.0]},
        align_corners=False,
        nhwc=True,
        name="nhwc-scale",
    ),
    interp_case(
        "nearest_interp_v2", _X5, "nearest", (3, 2, 5), attrs=_sizes(3, 3, 2, 5), align_corners=False, name="3d"
    ),
    Case(
        {"X": np.array([[[[1.0, 2.0, 3.0]]]])},
        {"interp_method": "nearest", **_sizes(2, 1, 5)},
        {"Out": np.array([[[[1.0, 2.0, 2.0, 3.0, 3.0]]]])},
        name="round-half-up",
    ),
]

BICUBIC = [
    interp_case("bicubic_interp_v2", _X4, "bicubic", (5, 7), attrs=_sizes(2, 5, 7), name="corners"),
    interp_case(
        "bicubic_interp_v2", _X4, "bicubic", (6, 3), attrs=_sizes(2, 6, 3), align_corners=False, name="half-pixel"
    ),
    interp_case(
        "bicubic_interp_v2",
        _X4_NHWC,
        "bicubic",
        (4, 9),
        [1.5, 2.25],
        attrs={"scale": [1.5, 2.25]},
        align_corners=False,
        nhwc=True,
        name="nhwc-scale",
    ),
    interp_case("bicubic_interp_v2", _F32, "bicubic", (3, 10), attrs=_sizes(2, 3, 10), align_corners=False, name="f32"),
]

LINEAR = [
    interp_case("linear_interp_v2", _X3, "linear", (9,), attrs=_sizes(1, 9), name="corners"),
    interp_case(
        "linear_interp_v2", _X3, "linear", (3,), attrs=_sizes(1, 3), align_corners=False, align_mode=0, name="down"
    ),
    interp_case(
        "linear_interp_v2", _X3, "linear", (1,), attrs=_sizes(1, 1), align_corners=False, align_mode=0, name="to-one"
    ),
    interp_case(
        "linear_interp_v2",
        np.moveaxis(_X3, 1, -1).copy(),
        "linear",
        (7,),
        [1.5],
        attrs={"scale": [1.5]},
        align_corners=False,
        nhwc=True,
        name="nwc-scale",
    ),
]

TRILINEAR = [
    interp_case("trilinear_interp_v2", _X5, "trilinear", (3, 4, 2), attrs=_sizes(3, 3, 4, 2), name="corners"),
    interp_case(
        "trilinear_interp_v2",
        _X5,
        "trilinear",
        (1, 5, 4),
        attrs=_sizes(3, 1, 5, 4),
        align_corners=False,
        align_mode=0,
        name="half-pixel",
    ),
    interp_case(
        "trilinear_interp_v2",
        np.moveaxis(_X5, 1, -1).copy(),
        "trilinear",
        (4, 3, 5),
        inputs={"OutSize": np.array([4, 3, 5], _I32)},
        align_corners=False,
        nhwc=True,
        name="ndhwc-outsize",
    ),
]

# -- pixel_shuffle, pixel_unshuffle ----------------------------------------------------------------------------


def ref_pixel_shuffle(x: np.ndarray, r: int, nhwc: bool = False) -> np.ndarray:
    xc = np.moveaxis(x, -1, 1) if nhwc else x
    n, c, h, w = xc.shape
    out = np.zeros((n, c // (r * r), h * r, w * r), x.dtype)
    for oc, oh, ow in itertools.product(range(c // (r * r)), range(h * r), range(w * r)):
        out[:, oc, oh, ow] = xc[:, oc * r * r + (oh % r) * r + ow % r, oh // r, ow // r]
    return np.moveaxis(out, 1, -1) if nhwc else out


def ref_pixel_unshuffle(x: np.ndarray, r: int, nhwc: bool = False) -> np.ndarray:
    xc = np.moveaxis(x, -1, 1) if nhwc else x
    n, c, h, w = xc.shape
    out = np.zeros((n, c * r * r, h // r, w // r), x.dtype)
    for ic, ih, iw in itertools.product(range(c), range(h), range(w)):
        out[:, ic * r * r + (ih % r) * r + iw % r, ih // r, iw // r] = xc[:, ic, ih, iw]
    return np.moveaxis(out, 1, -1) if nhwc else out


_S = rand(2, 8, 2, 3)
_S_NHWC = rand(1, 2, 3, 9)
_U = rand(1, 2, 4, 6)

SHUFFLE = {
    "pixel_shuffle": [
        Case({"X": _S}, {"upscale_factor": 2}, {"Out": ref_pixel_shuffle(_S, 2)}, grad=("X",), name="nchw"),
        Case(
            {"X": _S_NHWC},
            {"upscale_factor": 3, "data_format": "NHWC"},
            {"Out": ref_pixel_shuffle(_S_NHWC, 3, nhwc=True)},
            grad=("X",),
            name="nhwc",
        ),
        Case({"X": _S.astype(np.float32)}, {}, {"Out": _S.astype(np.float32)}, name="factor-1"),
    ],
    "pixel_unshuffle": [
        Case({"X": _U}, {"downscale_factor": 2}, {"Out": ref_pixel_unshuffle(_U, 2)}, grad=("X",), name="nchw"),
        Case(
            {"X": np.moveaxis(_U, 1, -1).copy()},
            {"downscale_factor": 2, "data_format": "NHWC"},
            {"Out": ref_pixel_unshuffle(np.moveaxis(_U, 1, -1), 2, nhwc=True)},
            grad=("X",),
            name="nhwc",
        ),
    ],
}

# -- pad3d, pad --------------------------------------------------------------------------------------------------


def ref_source(p: int, size: int, mode: str) -> int | None:
    """The source position of padded position ``p - before`` = ``p``; None: the constant."""
    if 0 <= p < size:
        return p
    if mode == "reflect":
        return -p if p < 0 else 2 * (size - 1) - p
    if mode == "replicate":
        return 0 if p < 0 else size - 1
    if mode == "circular":
        return p % size
    return None


def ref_pad3d(x: np.ndarray, pads, mode: str = "constant", value: float = 0.0, ndhwc: bool = False) -> np.ndarray:
    xc = np.moveaxis(x, -1, 1) if ndhwc else x
    left, right, top, bottom, front, back = pads
    before, after = (front, top, left), (back, bottom, right)
    sizes = xc.shape[2:]
    out = np.full((*xc.shape[:2], *(s + b + a for s, b, a in zip(sizes, before, after))), value, x.dtype)
    for pos in itertools.product(*(range(s) for s in out.shape[2:])):
        src = [ref_source(p - b, s, mode) for p, b, s in zip(pos, before, sizes)]
        if None not in src:
            out[(slice(None), slice(None), *pos)] = xc[(slice(None), slice(None), *src)]
    return np.moveaxis(out, 1, -1) if ndhwc else out


_P = rand(1, 2, 2, 3, 4)
_P_NDHWC = rand(1, 3, 2, 4, 2)


def pad3d_case(x, pads, mode, name, value=0.0, ndhwc=False, tensor=False) -> Case:
    attrs = {"mode": mode, "value": value, **({"data_format": "NDHWC"} if ndhwc else {})}
    inputs = {"X": x}
    if tensor:
        inputs["Paddings"] = np.array(pads, np.int32)
    else:
        attrs["paddings"] = list(pads)
    return Case(inputs, attrs, {"Out": ref_pad3d(x, pads, mode, value, ndhwc)}, grad=("X",), name=name)


PAD3D = [
    pad3d_case(_P, (1, 2, 0, 1, 1, 0), "constant", "constant", value=1.5),
    pad3d_case(_P, (3, 2, 2, 1, 1, 1), "reflect", "reflect"),
    pad3d_case(_P_NDHWC, (1, 3, 2, 0, 2, 1), "replicate", "replicate-ndhwc", ndhwc=True),
    pad3d_case(_P, (5, 1, 0, 4, 2, 3), "circular", "circular-wide"),
    pad3d_case(_P, (0, 1, 1, 0, 1, 1), "reflect", "paddings-tensor", tensor=True),
    Case(
        {"X": np.arange(3, dtype=np.int64).reshape(1, 1, 1, 1, 3)},
        {"paddings": [2, 1, 0, 0, 0, 0], "mode": "constant", "value": 7.9},
        {"Out": np.array([7, 7, 0, 1, 2, 7], np.int64).reshape(1, 1, 1, 1, 6)},
        name="int-truncates-value",
    ),
]

_Q = rand(2, 3, 2)

PAD = [
    Case(
        {"X": _Q},
        {"paddings": [1, 0, 0, 2, 1, 1], "pad_value": -0.5},
        {"Out": np.pad(_Q, ((1, 0), (0, 2), (1, 1)), constant_values=-0.5)},
        grad=("X",),
        name="3d",
    ),
    Case(
        {"X": np.ones((2, 2), np.float32)},
        {"paddings": [0, 1, 2, 0]},
        {"Out": np.array([[0, 0, 1, 1], [0, 0, 1, 1], [0, 0, 0, 0]], np.float32)},
        name="by-hand",
    ),
]

# -- affine_channel ----------------------------------------------------------------------------------------------

_A = rand(2, 3, 2, 2)
_A_SCALE, _A_BIAS = rand(3), rand(3)
_A2 = rand(4, 3)
_A_NHWC = rand(2, 2, 2, 3)

AFFINE_CHANNEL = [
    Case(
        {"X": _A, "Scale": _A_SCALE, "Bias": _A_BIAS},
        {},
        {"Out": _A * _A_SCALE[:, None, None] + _A_BIAS[:, None, None]},
        grad=("X", "Scale", "Bias"),
        name="nchw",
    ),
    Case(
        {"X": _A_NHWC, "Scale": _A_SCALE, "Bias": _A_BIAS},
        {"data_layout": "NHWC"},
        {"Out": _A_NHWC * _A_SCALE + _A_BIAS},
        grad=("X", "Scale", "Bias"),
        name="nhwc",
    ),
    Case(
        {"X": _A2, "Scale": _A_SCALE, "Bias": _A_BIAS},
        {"data_layout": "NCHW"},
        {"Out": _A2 * _A_SCALE + _A_BIAS},
        grad=("X", "Scale", "Bias"),
        name="2d",
    ),
]

# -- grid_sampler -------------------------------------------------------------------------------------------------


def _grid_reflect(v: float, low: float, high: float) -> float:
    """``v`` mirrored at ``low`` and ``high`` until it lies between them."""
    if high <= low:
        return 0.0
    while v < low or v > high:
        v = 2 * low - v if v < low else 2 * high - v
    return v


def _grid_position(g: float, size: int, mode: str, padding_mode: str, align_corners: bool) -> float:
    v = (g + 1) / 2 * (size - 1) if align_corners else ((g + 1) * size - 1) / 2
    if mode == "nearest":
        v = float(np.round(v))  # half to even
    low, high = (0.0, size - 1.0) if align_corners else (-0.5, size - 0.5)
    if mode == "bicubic":  # ONNX's reference: only a position beyond [low, high] moves
        if padding_mode == "reflection":
            return _grid_reflect(v, low, high)
        return min(max(v, 0.0), size - 1.0) if padding_mode == "border" and not low <= v <= high else v
    if padding_mode == "reflection":
        v = _grid_reflect(v, low, high)
    if padding_mode != "zeros":
        v = min(max(v, 0.0), size - 1.0)
    return v


def _keys(s: float) -> float:
    """Keys' cubic convolution kernel, A = -0.75, at distance ``s``."""
    s, a = abs(s), -0.75
    if s <= 1:
        return (a + 2) * s**3 - (a + 3) * s**2 + 1
    return a * s**3 - 5 * a * s**2 + 8 * a * s - 4 * a if s < 2 else 0.0


def _grid_tap_index(i: int, size: int, padding_mode: str, align_corners: bool) -> int:
    """Where a bicubic tap at ``i`` reads (ONNX's reference: each tap padded; outside X with zeros)."""
    if padding_mode == "border":
        return min(max(i, 0), size - 1)
    if padding_mode == "reflection":
        return int(_grid_reflect(float(i), *((0.0, size - 1.0) if align_corners else (-0.5, size - 0.5))))
    return i


def ref_grid_sampler(x, grid, mode="bilinear", padding_mode="zeros", align_corners=True) -> np.ndarray:
    """One output position at a time: its source position per axis, then the nearest pixel or the 2**D (bicubic:
    4**D) weighted neighbours, those outside X reading 0."""
    n, c, *spatial = x.shape
    d = len(spatial)
    out = np.zeros((n, c, *grid.shape[1:-1]), x.dtype)
    for b in range(n):
        for o in itertools.product(*(range(k) for k in grid.shape[1:-1])):
            pos = [
                _grid_position(grid[(b, *o, d - 1 - a)], spatial[a], mode, padding_mode, align_corners)
                for a in range(d)
            ]
            if mode == "nearest":
                taps = [([int(p) for p in pos], 1.0)]
            elif mode == "bicubic":
                taps = []
                for corner in itertools.product(range(-1, 3), repeat=d):
                    index = [math.floor(p) + k for p, k in zip(pos, corner)]
                    weight = math.prod(_keys(p - i) for p, i in zip(pos, index))
                    taps.append(
                        ([_grid_tap_index(i, s, padding_mode, align_corners) for i, s in zip(index, spatial)], weight)
                    )
            else:
                taps = []
                for corner in itertools.product((0, 1), repeat=d):
                    index = [math.floor(p) + k for p, k in zip(pos, corner)]
                    weight = math.prod(1 - abs(p - i) for p, i in zip(pos, index))
                    taps.append((index, weight))
            for index, weight in taps:
                if all(0 <= i < size for i, size in zip(index, spatial)):
                    out[(b, slice(None), *o)] += weight * x[(b, slice(None), *index)]
    return out


def _grid_of(positions: np.ndarray, spatial: tuple[int, ...], align_corners: bool) -> np.ndarray:
    """The normalised grid (component 0 along the last axis) sampling source ``positions`` (..., D in X's axis
    order)."""
    sizes = np.array(spatial[::-1], dtype=np.float64)
    p = positions[..., ::-1]
    return 2 * p / (sizes - 1) - 1 if align_corners else (2 * p + 1) / sizes - 1


def grid_case(name: str, x_shape, out_shape, dtype: str = "float64", **attrs) -> Case:
    """Positions away from the kinks (integers for bilinear, halves for nearest) so that finite differences hold;
    some outside X."""
    spatial = x_shape[2:]
    cells = np.stack([RNG.integers(-2, size + 2, size=(x_shape[0], *out_shape)) for size in spatial], axis=-1)
    offset = (
        RNG.uniform(-0.3, 0.3, cells.shape) if attrs.get("mode") == "nearest" else RNG.uniform(0.15, 0.85, cells.shape)
    )
    grid = _grid_of(cells + offset, spatial, attrs.get("align_corners", True)).astype(dtype)
    x = rand(*x_shape, dtype=dtype)
    expected = ref_grid_sampler(x, grid, **attrs)
    grad = ("X", "Grid") if dtype == "float64" else ()
    return Case({"X": x, "Grid": grid}, attrs, {"Output": expected}, grad=grad, rtol=1e-5, atol=1e-5, name=name)


GRID_SAMPLER = [
    grid_case(
        f"{mode}_{padding}_{'corners' if align else 'centers'}",
        (2, 3, 4, 5),
        (3, 2),
        mode=mode,
        padding_mode=padding,
        align_corners=align,
    )
    for mode in ("bilinear", "nearest", "bicubic")
    for padding in ("zeros", "border", "reflection")
    for align in (True, False)
] + [
    grid_case("bicubic_5d", (1, 2, 3, 4, 3), (2, 2, 3), mode="bicubic", padding_mode="reflection", align_corners=False),
    grid_case("bicubic_float32", (1, 2, 5, 4), (4, 4), dtype="float32", mode="bicubic", padding_mode="border"),
    grid_case("bilinear_5d", (1, 2, 3, 4, 3), (2, 2, 3), padding_mode="border", align_corners=False),
    grid_case("nearest_5d_reflection", (1, 2, 3, 3, 4), (2, 3, 2), mode="nearest", padding_mode="reflection"),
    grid_case("float32", (1, 2, 5, 4), (4, 4), dtype="float32", align_corners=False),
    Case(  # ties round half to even (not centres, width 4: positions 0.5, 1.5, 2.5 and 0 read 0, 2, 2 and 0)
        {
            "X": np.arange(4.0).reshape(1, 1, 1, 4),
            "Grid": np.array([[[[-0.5, 0.0], [0.0, 0.0], [0.5, 0.0], [-0.75, 0.0]]]]),
        },
        {"mode": "nearest", "align_corners": False},
        {"Output": np.array([[[[0.0, 2.0, 2.0, 0.0]]]])},
        name="nearest_ties_to_even",
    ),
]

CASES: dict[str, list[Case]] = {
    "bilinear_interp_v2": BILINEAR,
    "nearest_interp_v2": NEAREST,
    "bicubic_interp_v2": BICUBIC,
    "linear_interp_v2": LINEAR,
    "trilinear_interp_v2": TRILINEAR,
    **SHUFFLE,
    "pad3d": PAD3D,
    "pad": PAD,
    "affine_channel": AFFINE_CHANNEL,
    "grid_sampler": GRID_SAMPLER,
}

_Z4 = np.zeros((1, 2, 4, 4), np.float32)

INFER_ERRORS: list[tuple[str, Case, str]] = [
    ("grid_sampler", Case({"X": _Z4[0], "Grid": np.zeros((1, 2, 2), np.float32)}), r"must be 4-D .* or 5-D"),
    ("grid_sampler", Case({"X": _Z4, "Grid": np.zeros((1, 2, 2, 3), np.float32)}), r"Grid .* must be \[N, \*out, 2\]"),
    ("grid_sampler", Case({"X": _Z4, "Grid": np.zeros((1, 2, 2, 2))}), r"different dtypes"),
    (
        "grid_sampler",
        Case({"X": _Z4, "Grid": np.zeros((1, 2, 2, 2), np.float32)}, {"mode": "cubic"}),
        r"mode='cubic' is not one of bilinear, nearest, bicubic",
    ),
    (
        "grid_sampler",
        Case({"X": _Z4, "Grid": np.zeros((1, 2, 2, 2), np.float32)}, {"padding_mode": "wrap"}),
        r"padding_mode='wrap' is not one of",
    ),
    ("bilinear_interp_v2", Case({"X": np.zeros((2, 3), np.float32)}, _sizes(2, 2, 2)), r"must be 3-D, 4-D or 5-D"),
    (
        "bilinear_interp_v2",
        Case({"X": _Z4}, {"interp_method": "trilinear", **_sizes(2, 2, 2)}),
        r"does not resize a 4-D",
    ),
    ("bilinear_interp_v2", Case({"X": _Z4}, {"data_layout": "NCDHW", **_sizes(2, 2, 2)}), r"data_layout='NCDHW'"),
    ("bilinear_interp_v2", Case({"X": _Z4}, {"align_mode": 2, **_sizes(2, 2, 2)}), r"align_mode=2 must be 0 or 1"),
    ("bilinear_interp_v2", Case({"X": _Z4}, {}), r"out_h, out_w = \[0, 0\]: give sizes > 0"),
    ("bilinear_interp_v2", Case({"X": _Z4}, {"scale": [2.0]}), r"must hold 2 values"),
    ("bilinear_interp_v2", Case({"X": _Z4}, {"scale": [2.0, -1.0]}), r"must be greater than 0"),
    ("bilinear_interp_v2", Case({"X": _Z4}, {"scale": [0.1, 1.0]}), r"makes an output size 0"),
    (
        "bilinear_interp_v2",
        Case({"X": _Z4, "OutSize": np.array([2, 2, 2], np.int32)}),
        r"OutSize .* must be a 1-D tensor of 2 values",
    ),
    (
        "bilinear_interp_v2",
        Case({"X": _Z4, "SizeTensor": [np.array([2], np.int32)]}),
        r"SizeTensor binds 1 tensors; a 4-D X needs 2",
    ),
    (
        "linear_interp_v2",
        Case({"X": np.zeros((1, 2, 3), np.float32)}, {"interp_method": "bilinear"}),
        r"does not resize a 3-D X \(linear\)",
    ),
    ("pixel_shuffle", Case({"X": np.zeros((1, 6, 2, 2), np.float32)}, {"upscale_factor": 2}), r"6 channels"),
    ("pixel_shuffle", Case({"X": np.zeros((1, 4, 2), np.float32)}, {"upscale_factor": 2}), r"must be 4-D"),
    ("pixel_unshuffle", Case({"X": _Z4}, {"downscale_factor": 3}), r"downscale_factor=3 does not divide"),
    ("pixel_unshuffle", Case({"X": _Z4}, {"downscale_factor": 0}), r"downscale_factor=0 must be >= 1"),
    ("pad3d", Case({"X": _Z4}), r"must be 5-D"),
    ("pad3d", Case({"X": _P}, {"paddings": [1, 1, 1, 1]}), r"must hold 6 values"),
    ("pad3d", Case({"X": _P}, {"mode": "edge"}), r"mode='edge' is not one of"),
    ("pad3d", Case({"X": _P}, {"mode": "reflect", "paddings": [4, 0, 0, 0, 0, 0]}), r"reflect padding \(4, 0\)"),
    ("pad", Case({"X": _Q}, {"paddings": [1, 1]}), r"2 values >= 0 per dim of the 3-D X"),
    (
        "affine_channel",
        Case({"X": _A, "Scale": rand(2), "Bias": rand(2)}),
        r"Scale .* must be 1-D of X .*'s 3 channels",
    ),
    ("affine_channel", Case({"X": _A, "Scale": _A_SCALE, "Bias": _A_BIAS}, {"data_layout": "NCW"}), r"data_layout"),
]

KERNEL_ERRORS: list[tuple[str, Case, str]] = [
    (
        "bilinear_interp_v2",
        Case({"X": _Z4, "OutSize": np.array([0, 3], np.int32)}),
        r"output sizes \[0, 3\] must be greater than 0",
    ),
    ("bilinear_interp_v2", Case({"X": _Z4, "Scale": np.array([-2.0], np.float32)}), r"must be greater than 0"),
    (
        "bilinear_interp_v2",
        Case({"X": _Z4, "SizeTensor": [np.array([2], np.int32)] * 3}),
        r"SizeTensor holds 3 sizes; a 4-D X needs 2",
    ),
    (
        "pad3d",
        Case({"X": _P, "Paddings": np.array([0, 0, 3, 0, 0, 0], np.int32)}, {"mode": "reflect"}),
        r"reflect padding \(3, 0\) must be smaller",
    ),
    ("pad3d", Case({"X": _P, "Paddings": np.array([1, 1], np.int32)}), r"needs a 5-D X and 6 paddings"),
    ("pixel_shuffle", Case({"X": np.zeros((1, 6, 2, 2), np.float32)}, {"upscale_factor": 2}), r"does not divide"),
    ("affine_channel", Case({"X": _A, "Scale": rand(2), "Bias": rand(2)}), r"do not match X"),
]


# -- roi_align: Paddle's CPU kernel as written, a loop over regions, channels, bins and samples -------------------


def _corners(image: np.ndarray, y: float, x: float) -> list[float]:
    """The four corners of a bilinear sample of ``image`` at (y, x), each times its weight (all 0 outside)."""
    height, width = image.shape
    if y < -1.0 or y > height or x < -1.0 or x > width:
        return [0.0] * 4
    y, x = max(y, 0.0), max(x, 0.0)
    y_low, x_low = int(y), int(x)
    if y_low >= height - 1:
        y_low = y_high = height - 1
        y = float(y_low)
    else:
        y_high = y_low + 1
    if x_low >= width - 1:
        x_low = x_high = width - 1
        x = float(x_low)
    else:
        x_high = x_low + 1
    ly, lx = y - y_low, x - x_low
    hy, hx = 1.0 - ly, 1.0 - lx
    return [
        hy * hx * image[y_low, x_low],
        hy * lx * image[y_low, x_high],
        ly * hx * image[y_high, x_low],
        ly * lx * image[y_high, x_high],
    ]


def ref_roi_align(x: np.ndarray, rois: np.ndarray, rois_num: list[int], ph: int, pw: int, **a: Any) -> np.ndarray:
    """avg: each bin the mean of its bilinear samples; max (ONNX's reference): the largest of every sample's
    weighted corners (0 for a bin without samples)."""
    scale, ratio, aligned = a.get("spatial_scale", 1.0), int(a.get("sampling_ratio", -1)), a.get("aligned", False)
    images = [b for b, count in enumerate(rois_num) for _ in range(count)]
    out = np.zeros((len(rois), x.shape[1], ph, pw))
    for r, (box, b) in enumerate(zip(rois.tolist(), images)):
        x1, y1, x2, y2 = (v * scale - (0.5 if aligned else 0.0) for v in box)
        w, h = x2 - x1, y2 - y1
        if not aligned:
            w, h = max(w, 1.0), max(h, 1.0)
        gh = ratio if ratio > 0 else math.ceil(h / ph)
        gw = ratio if ratio > 0 else math.ceil(w / pw)
        for c, i, j in itertools.product(range(x.shape[1]), range(ph), range(pw)):
            samples = [
                _corners(
                    x[b, c], y1 + i * h / ph + (iy + 0.5) * h / ph / gh, x1 + j * w / pw + (ix + 0.5) * w / pw / gw
                )
                for iy in range(gh)
                for ix in range(gw)
            ]
            if a.get("mode", "avg") == "max":
                out[r, c, i, j] = max((max(corners) for corners in samples), default=0.0)
            else:
                out[r, c, i, j] = sum(sum(corners) for corners in samples) / max(gh * gw, 1)
    return out.astype(x.dtype)


def _roi_case(x: np.ndarray, rois: np.ndarray, rois_num: list[int] | None, name: str, **attrs: Any) -> Case:
    ph, pw = int(attrs.get("pooled_height", 1)), int(attrs.get("pooled_width", 1))
    counts, rois = rois_num or [len(rois)], rois.astype(x.dtype)  # the boxes the op sees, rounded to X's dtype
    expected = ref_roi_align(x, rois, counts, ph, pw, **{k: v for k, v in attrs.items() if not k.startswith("pooled")})
    inputs = {"X": x, "ROIs": rois}
    if rois_num is not None:
        inputs["RoisNum"] = np.array(rois_num, np.int32)
    grad = ("X",) if x.dtype == np.float64 else ()
    return Case(inputs, dict(attrs), {"Out": expected}, grad=grad, name=name)


_boxes = np.array([[0.3, 0.6, 4.7, 3.9], [1.2, 0.1, 2.0, 1.1], [-0.8, 2.2, 5.9, 6.6], [2.5, 2.5, 2.5, 2.5]])
CASES["roi_align"] = [
    case
    for mode in ("avg", "max")
    for case in (
        _roi_case(
            RNG.uniform(-1, 1, (2, 3, 6, 5)),
            _boxes,
            [1, 3],
            f"{mode}_adaptive",
            pooled_height=2,
            pooled_width=3,
            mode=mode,
        ),
        _roi_case(
            RNG.uniform(-1, 1, (1, 2, 7, 6)),
            _boxes,
            None,
            f"{mode}_aligned_ratio_scale",
            pooled_height=3,
            pooled_width=2,
            sampling_ratio=2,
            spatial_scale=0.8,
            aligned=True,
            mode=mode,
        ),
        _roi_case(
            RNG.uniform(-1, 1, (2, 2, 5, 5)).astype(np.float32),
            _boxes[:2],
            [0, 2],
            f"{mode}_float32",
            pooled_height=2,
            mode=mode,
        ),
    )
]
INFER_ERRORS += [
    ("roi_align", Case({"X": np.zeros((1, 2, 3, 3)), "ROIs": np.zeros((2, 5))}), r"must be \[R, 4\] boxes"),
    ("roi_align", Case({"X": np.zeros((2, 3, 3)), "ROIs": np.zeros((2, 4))}), r"must be NCHW"),
    (
        "roi_align",
        Case({"X": np.zeros((1, 2, 3, 3)), "ROIs": np.zeros((2, 4))}, {"mode": "min"}),
        r"mode='min' is not one of avg, max",
    ),
]
KERNEL_ERRORS += [
    (
        "roi_align",
        Case({"X": np.zeros((2, 1, 3, 3)), "ROIs": np.zeros((3, 4)), "RoisNum": np.array([1, 1], np.int32)}),
        r"RoisNum \[1, 1\] does not split 3 regions over 2 images",
    ),
]


# -- deformable_conv: ONNX's reference as loops, each tap a zero-padded bilinear sample ---------------------------


def _bilinear_zeros(image: np.ndarray, y: float, x: float) -> float:
    height, width = image.shape
    y0, x0 = math.floor(y), math.floor(x)
    return sum(
        wy * wx * image[yy, xx]
        for yy, wy in ((y0, 1 - (y - y0)), (y0 + 1, y - y0))
        for xx, wx in ((x0, 1 - (x - x0)), (x0 + 1, x - x0))
        if 0 <= yy < height and 0 <= xx < width
    )


def ref_deformable_conv(x, offset, mask, w, strides, paddings, dilations, groups, deformable_groups) -> np.ndarray:
    n, c = x.shape[:2]
    m, per_group, kh, kw = w.shape
    oh, ow = offset.shape[2:]
    out = np.zeros((n, m, oh, ow))
    for b, o, i, j in itertools.product(range(n), range(m), range(oh), range(ow)):
        g = o // (m // groups)
        for ci, ki, kj in itertools.product(range(g * per_group, (g + 1) * per_group), range(kh), range(kw)):
            tap = (ci // (c // deformable_groups) * kh + ki) * kw + kj
            y = i * strides[0] - paddings[0] + ki * dilations[0] + offset[b, 2 * tap, i, j]
            z = j * strides[1] - paddings[1] + kj * dilations[1] + offset[b, 2 * tap + 1, i, j]
            scale = 1.0 if mask is None else mask[b, tap, i, j]
            out[b, o, i, j] += w[o, ci - g * per_group, ki, kj] * scale * _bilinear_zeros(x[b, ci], y, z)
    return out.astype(x.dtype)


def deform_case(name: str, x_shape, w_shape, masked: bool, dtype: str = "float64", **attrs) -> Case:
    """Offsets whole pixels plus a fraction in [0.15, 0.85] (positions away from the kinks, so that finite
    differences hold), some taps moved outside X."""
    a = {"strides": [1, 1], "paddings": [0, 0], "dilations": [1, 1], "groups": 1, "deformable_groups": 1, **attrs}
    x, w = rand(*x_shape, dtype=dtype), rand(*w_shape, dtype=dtype)
    out = [
        (size + 2 * p - (d * (k - 1) + 1)) // s + 1
        for size, k, s, p, d in zip(x_shape[2:], w_shape[2:], a["strides"], a["paddings"], a["dilations"])
    ]
    taps = a["deformable_groups"] * w_shape[2] * w_shape[3]
    shape = (x_shape[0], 2 * taps, *out)
    offset = (RNG.integers(-2, 2, shape) + RNG.uniform(0.15, 0.85, shape)).astype(dtype)
    mask = RNG.uniform(0.2, 1.0, (x_shape[0], taps, *out)).astype(dtype) if masked else None
    expected = ref_deformable_conv(x, offset, mask, w, **a)
    inputs = {"Input": x, "Offset": offset, "Filter": w, **({"Mask": mask} if masked else {})}
    grad = tuple(inputs) if dtype == "float64" else ()
    return Case(inputs, attrs, {"Output": expected}, grad=grad, rtol=1e-5, atol=1e-5, name=name)


CASES["deformable_conv"] = [
    deform_case("plain", (1, 2, 4, 5), (3, 2, 3, 3), False, paddings=[1, 1]),
    deform_case(
        "masked_groups_strided",
        (2, 4, 5, 5),
        (4, 2, 2, 3),
        True,
        strides=[2, 1],
        paddings=[1, 0],
        dilations=[1, 2],
        groups=2,
        deformable_groups=2,
    ),
    deform_case("float32", (1, 2, 4, 4), (2, 1, 3, 3), True, "float32", groups=2, paddings=[1, 1]),
]
INFER_ERRORS += [
    (
        "deformable_conv",
        Case({"Input": np.zeros((1, 3, 4, 4)), "Offset": np.zeros((1, 18, 2, 2)), "Filter": np.zeros((2, 2, 3, 3))}),
        r"Filter .* with groups=1, deformable_groups=1 does not fit Input",
    ),
    (
        "deformable_conv",
        Case({"Input": np.zeros((1, 2, 4, 4)), "Offset": np.zeros((1, 9, 2, 2)), "Filter": np.zeros((2, 2, 3, 3))}),
        r"Offset .* must be \[1, 18, 2, 2\]",
    ),
    (
        "deformable_conv",
        Case({"Input": np.zeros((1, 2, 2, 2)), "Offset": np.zeros((1, 18, 1, 1)), "Filter": np.zeros((2, 2, 3, 3))}),
        r"the output would be \[0, 0\] high and wide",
    ),
]
KERNEL_ERRORS += [
    (
        "deformable_conv",
        Case({"Input": np.zeros((1, 2, 4, 4)), "Offset": np.zeros((1, 9, 2, 2)), "Filter": np.zeros((2, 2, 3, 3))}),
        r"Offset \[1, 9, 2, 2\] must be \[1, 18, 2, 2\]",
    ),
]
