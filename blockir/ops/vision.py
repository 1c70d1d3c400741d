"""Vision ops with Paddle 3.3.1's semantics: the ``*_interp_v2`` resizes, ``pixel_shuffle`` and
``pixel_unshuffle``, ``pad3d`` and ``pad``, ``affine_channel``, ``grid_sampler``, ``roi_align``,
``deformable_conv``, and their gradient ops (``grid_sampler``'s bicubic mode and ``roi_align``'s max mode are
blockir's extensions, ONNX's semantics: ``PADDLE_LACKS``).

Resizing and padding are separable: along each spatial axis, output position ``o`` reads a few source
positions ``index[o, t]`` with weights ``weight[o, t]`` (an :class:`_AxisMap`, computed on the host from the
sizes, O(output size)). A kernel gathers along each axis in turn (``xp.take`` of the neighbours, weighted and
summed over the taps) and the gradient scatters back in reverse order (rows added with
:func:`~blockir.ops.values.add_rows`), the exact adjoint; no loop runs over pixels.

The resizes follow ``phi/kernels/cpu/interpolate_kernel.cc``, per spatial axis of input size ``L`` and output
size ``O``:

- sizes: SizeTensor's values win; otherwise a scale (Scale's values, one for every axis or one per axis, else
  the ``scale`` attribute) gives ``O = int(L * scale)`` and OutSize's values, when given, win over that; with
  none of them, the ``out_d``/``out_h``/``out_w`` attributes. When every ``O`` equals its ``L``, Out is X.
- the ratio (float32): ``(L - 1) / (O - 1)`` with ``align_corners`` (0 when ``O`` is 1), else ``1 / scale``
  when a scale was given (even if OutSize then decided ``O``), else ``L / O``; a 2-D resize takes 0 for an
  axis of output size 1.
- linear (``linear``, ``bilinear``, ``trilinear``): with ``align_mode`` 0 and not ``align_corners`` the source
  is ``ratio * (o + 0.5) - 0.5`` clamped at 0, else ``ratio * o``; it reads the truncated position and the next
  (the last one at the edge), weighted by the fraction.
- ``nearest``: ``ratio * o`` rounded half away from zero with ``align_corners``, truncated without.
- ``bicubic``: the source as linear's with ``align_mode`` 0 (not clamped) or ``ratio * o`` with
  ``align_corners``; the four positions from ``floor(source) - 1``, clamped into the axis, weighted by Keys'
  cubic convolution with A = -0.75.

The ``interp_method`` attribute, not the op type, picks the method (Paddle's kernels dispatch on it; its
default is "bilinear" for every op type). A source position past the input, which only a scale whose sizes
OutSize then overrides can give, reads the last position here (Paddle's kernels read out of bounds there).
Gradients are the adjoints of these forwards.
"""

from __future__ import annotations

import functools
import itertools
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, NoReturn

import numpy as np

from blockir.ir.attrs import AttrType
from blockir.ir.schema import AttrDef, InferContext, KernelContext, OpSchema, Slot
from blockir.ops.common import (
    FLOATS,
    NUMBERS,
    check_dtype,
    compatible,
    fmt,
    grad_op,
    infer_grads,
    kernel_error,
    same_dtype,
    to_host,
)
from blockir.ops.values import add_rows

Fail = Callable[[str], NoReturn]

_INDEX_DTYPES = frozenset({"int32", "int64"})


def _kernel_fail(ctx: KernelContext) -> Fail:
    """A :data:`Fail` raising the kernel's error (the op's text names its type)."""

    def fail(message: str) -> NoReturn:
        raise kernel_error(ctx, message)

    return fail


def _ints(value: Any) -> list[int]:
    return [int(v) for v in to_host(value).reshape(-1).tolist()]


# -- separable gathers -----------------------------------------------------------------------------------


@dataclass(frozen=True)
class _AxisMap:
    """Along one axis: output position ``o`` is the sum over taps ``t`` of ``weight[o, t]`` times source position
    ``index[o, t]`` (``weight`` None: one tap of weight 1)."""

    index: np.ndarray  # int64 [out, taps]
    weight: np.ndarray | None  # [out, taps]

    @staticmethod
    def of(index: np.ndarray) -> _AxisMap:
        return _AxisMap(index.reshape(-1, 1).astype(np.int64), None)


def _gather(xp: Any, x: Any, axis: int, amap: _AxisMap) -> Any:
    """``x`` mapped along ``axis`` by ``amap``: one take along the axis per tap, weighted and summed."""
    out, taps = amap.index.shape
    result = None
    for t in range(taps):
        term = xp.take(x, xp.asarray(amap.index[:, t]), axis=axis)
        if amap.weight is not None:
            term *= xp.asarray(amap.weight[:, t].astype(x.dtype).reshape(out, *(1,) * (x.ndim - axis - 1)))
        result = term if result is None else xp.add(result, term, out=result)
    return result


def _scatter(xp: Any, g: Any, axis: int, amap: _AxisMap, size: int) -> Any:
    """The adjoint of :func:`_gather`: ``g`` (mapped along ``axis``) added back to the ``size`` source positions,
    row by row over the axis moved to the front (:func:`~blockir.ops.values.add_rows`)."""
    out, taps = amap.index.shape
    front = xp.moveaxis(g, axis, 0)
    rest = front.shape[1:]
    rows = front.reshape(out, 1, -1)
    if amap.weight is not None:
        rows = rows * xp.asarray(amap.weight.astype(g.dtype).reshape(out, taps, 1))
    width = rows.shape[2]
    dx = xp.zeros((size, width), dtype=g.dtype)
    add_rows(dx, amap.index.reshape(-1), xp.ascontiguousarray(rows).reshape(out * taps, width), xp)
    return xp.moveaxis(dx.reshape(size, *rest), 0, axis)


def _gather_axes(xp: Any, x: Any, maps: Sequence[tuple[int, _AxisMap]]) -> Any:
    for axis, amap in maps:
        x = _gather(xp, x, axis, amap)
    return x


def _scatter_axes(xp: Any, g: Any, maps: Sequence[tuple[int, _AxisMap]], shape: Sequence[int]) -> Any:
    for axis, amap in reversed(maps):
        g = _scatter(xp, g, axis, amap, shape[axis])
    return g


# -- interpolation: sizes ---------------------------------------------------------------------------------

_INTERP_METHODS = {3: ("linear",), 4: ("bilinear", "nearest", "bicubic"), 5: ("trilinear", "nearest")}
_LAYOUTS = ("NCHW", "NHWC")
_OUT_ATTRS = ("out_d", "out_h", "out_w")

_INTERP_ATTRS = (
    AttrDef("data_layout", AttrType.STRING, "NCHW"),
    AttrDef("out_d", AttrType.INT, 0),
    AttrDef("out_h", AttrType.INT, 0),
    AttrDef("out_w", AttrType.INT, 0),
    AttrDef("scale", AttrType.FLOATS, []),
    AttrDef("interp_method", AttrType.STRING, "bilinear"),
    AttrDef("align_corners", AttrType.BOOLEAN, True),
    AttrDef("align_mode", AttrType.INT, 1),
)


def _spatial_axes(rank: int, channel_last: bool) -> list[int]:
    """The spatial axes of an input of ``rank`` (N, C and the others)."""
    return list(range(1, rank - 1)) if channel_last else list(range(2, rank))


def _interp_sizes(
    ctx: KernelContext, x: Any, out_size: Any, size_tensor: list[Any], scale_tensor: Any, fail: Fail
) -> tuple[list[int], list[float]]:
    """The output size of each spatial axis and the scale that sets its ratio (-1: none), in Paddle's order of
    precedence (module docstring)."""
    attrs = ctx.attrs
    axes = _spatial_axes(x.ndim, attrs["data_layout"] == "NHWC")
    n, ins = len(axes), [x.shape[a] for a in axes]
    sizes = [attrs[name] for name in _OUT_ATTRS[-n:]]
    scales = [-1.0] * n
    if size_tensor:
        sizes = [v for t in size_tensor for v in _ints(t)]
        if len(sizes) != n:
            fail(f"SizeTensor holds {len(sizes)} sizes; a {x.ndim}-D X needs {n}")
    else:
        if scale_tensor is not None:
            values = [float(v) for v in to_host(scale_tensor).reshape(-1).astype(np.float32).tolist()]
            if not values:
                fail("Scale is empty")
            scales = values[:n] if len(values) > 1 else values * n
            if len(scales) != n:
                fail(f"Scale holds {len(values)} values; a {x.ndim}-D X needs 1 or {n}")
        elif attrs["scale"]:
            scales = [float(s) for s in attrs["scale"]]
            if len(scales) != n:
                fail(f"scale={scales} must hold {n} values for a {x.ndim}-D X")
        if any(s <= 0 for s in scales) and (scale_tensor is not None or attrs["scale"]):
            fail(f"scale {scales} must be greater than 0")
        if all(s > 0 for s in scales):
            sizes = [int(size * s) for size, s in zip(ins, scales)]
        if out_size is not None:
            given = _ints(out_size)
            if len(given) != n:
                fail(f"OutSize holds {len(given)} sizes; a {x.ndim}-D X needs {n}")
            sizes = given
    if any(s <= 0 for s in sizes):
        fail(f"the output sizes {sizes} must be greater than 0 (input sizes {ins})")
    return sizes, scales


def _ratio(size: int, out: int, align_corners: bool, scale: float) -> np.float32:
    """Paddle's ``AreaPixelComputeScale`` in float32: source positions per output position."""
    if align_corners:
        return np.float32(size - 1) / np.float32(out - 1) if out > 1 else np.float32(0)
    if scale > 0:
        return np.float32(1.0 / scale)
    return np.float32(size) / np.float32(out)


# -- interpolation: the taps of one axis -------------------------------------------------------------------


def _linear_map(size: int, out: int, ratio: np.float32, align_flag: bool) -> _AxisMap:
    o = np.arange(out)
    o32 = o.astype(np.float32)
    if align_flag:
        lower = np.trunc(float(ratio) * (o + 0.5) - 0.5).astype(np.int64)
    else:
        lower = np.trunc(ratio * o32).astype(np.int64)
    lower = np.clip(lower, 0, size - 1)
    upper = np.minimum(lower + 1, size - 1)
    if align_flag:
        source = np.maximum(ratio * (o32 + np.float32(0.5)) - np.float32(0.5), np.float32(0))
        frac = source - lower.astype(np.float32)
    else:
        frac = ratio * o32 - lower.astype(np.float32)
    return _AxisMap(np.stack([lower, upper], axis=1), np.stack([np.float32(1) - frac, frac], axis=1))


def _nearest_map(size: int, out: int, ratio: np.float32, align_corners: bool) -> _AxisMap:
    source = ratio * np.arange(out, dtype=np.float32)
    index = np.floor(source.astype(np.float64) + 0.5) if align_corners else np.trunc(source)
    return _AxisMap.of(np.clip(index.astype(np.int64), 0, size - 1))


_CUBIC_A = -0.75


def _cubic_taps(t: Any) -> tuple[list[Any], list[Any]]:
    """Keys' cubic convolution weights (A = -0.75) of the 4 neighbours ``floor(x) - 1`` to ``floor(x) + 2`` of a
    point ``x`` at fraction ``t`` (an array of any array module), and their derivatives by ``t``."""
    a, one = _CUBIC_A, t.dtype.type(1)

    def near(v: Any) -> Any:  # |v| <= 1
        return ((a + 2) * v - (a + 3)) * v * v + 1

    def far(v: Any) -> Any:  # 1 < |v| < 2
        return ((a * v - 5 * a) * v + 8 * a) * v - 4 * a

    def dnear(v: Any) -> Any:
        return (3 * (a + 2) * v - 2 * (a + 3)) * v

    def dfar(v: Any) -> Any:
        return (3 * a * v - 10 * a) * v + 8 * a

    distances = (t + one, t, one - t, one - t + one)  # growing with t for the first two, shrinking for the others
    weights = [far(distances[0]), near(distances[1]), near(distances[2]), far(distances[3])]
    derivs = [dfar(distances[0]), dnear(distances[1]), -dnear(distances[2]), -dfar(distances[3])]
    return weights, derivs


def _cubic_weights(t: np.ndarray) -> np.ndarray:
    """Keys' cubic convolution weights (A = -0.75) of the 4 neighbours of a point at fraction ``t``."""
    return np.stack(_cubic_taps(t)[0], axis=1)


def _cubic_map(size: int, out: int, ratio: np.float32, align_corners: bool, dtype: Any) -> _AxisMap:
    o = np.arange(out)
    if align_corners:
        source = (ratio * o.astype(np.float32)).astype(dtype)
    else:
        source = (float(ratio) * (o + 0.5) - 0.5).astype(dtype)
    lower = np.floor(source.astype(np.float32)).astype(np.int64)
    frac = source - lower.astype(dtype)
    index = np.clip(lower[:, None] + np.arange(-1, 3), 0, size - 1)
    return _AxisMap(index, _cubic_weights(frac))


def _interp_maps(
    ctx: KernelContext, shape: Sequence[int], sizes: Sequence[int], scales: Sequence[float], dtype: Any
) -> list[tuple[int, _AxisMap]]:
    """The (axis, map) of each spatial axis that changes X into Out; [] when Out is X (every size kept)."""
    attrs = ctx.attrs
    axes = _spatial_axes(len(shape), attrs["data_layout"] == "NHWC")
    ins = [shape[a] for a in axes]
    if list(sizes) == ins:
        return []
    method, align_corners = attrs["interp_method"], attrs["align_corners"]
    align_flag = attrs["align_mode"] == 0 and not align_corners
    work = np.float64 if np.dtype(dtype) == np.float64 else np.float32
    maps = []
    for axis, size, out, scale in zip(axes, ins, sizes, scales):
        ratio = _ratio(size, out, align_corners, scale)
        if len(shape) == 4 and out <= 1:
            ratio = np.float32(0)
        if method == "nearest":
            amap = _nearest_map(size, out, ratio, align_corners)
        elif method == "bicubic":
            amap = _cubic_map(size, out, ratio, align_corners, work)
        else:
            amap = _linear_map(size, out, ratio, align_flag)
        maps.append((axis, amap))
    return maps


def _check_interp(rank: int, method: str, layout: str, x_text: str, fail: Fail) -> None:
    """X's rank fits ``interp_method`` and ``data_layout`` is one of the two (inference, and kernels again: a
    program may run unverified)."""
    methods = _INTERP_METHODS.get(rank)
    if methods is None:
        fail(f"X {x_text} must be 3-D, 4-D or 5-D")
    if method not in methods:
        fail(f"interp_method={method!r} does not resize a {rank}-D X ({', '.join(methods)})")
    if layout not in _LAYOUTS:
        fail(f"data_layout={layout!r} is not one of {', '.join(_LAYOUTS)}")


def _interp_setup(
    ctx: KernelContext, x: Any, out_size: Any, size_tensor: list[Any], scale_tensor: Any
) -> tuple[list[int], list[float], Fail]:
    fail = _kernel_fail(ctx)
    _check_interp(x.ndim, ctx.attrs["interp_method"], ctx.attrs["data_layout"], f"of shape {list(x.shape)}", fail)
    return (*_interp_sizes(ctx, x, out_size, size_tensor, scale_tensor, fail), fail)


def _interp(ctx: KernelContext, x: Any, out_size: Any, size_tensor: list[Any], scale_tensor: Any) -> Any:
    sizes, scales, _ = _interp_setup(ctx, x, out_size, size_tensor, scale_tensor)
    maps = _interp_maps(ctx, x.shape, sizes, scales, x.dtype)
    return _gather_axes(ctx.xp, x, maps) if maps else x.copy()


def _interp_grad(
    ctx: KernelContext, x: Any, out_size: Any, size_tensor: list[Any], scale_tensor: Any, dout: Any
) -> Any:
    sizes, scales, fail = _interp_setup(ctx, x, out_size, size_tensor, scale_tensor)
    axes = _spatial_axes(x.ndim, ctx.attrs["data_layout"] == "NHWC")
    if [dout.shape[a] for a in axes] != sizes or dout.ndim != x.ndim:
        fail(f"Out@GRAD of shape {list(dout.shape)} does not match the output sizes {sizes}")
    maps = _interp_maps(ctx, x.shape, sizes, scales, x.dtype)
    return _scatter_axes(ctx.xp, dout, maps, x.shape) if maps else dout.copy()


# -- interpolation: inference ---------------------------------------------------------------------------


def _infer_interp(ctx: InferContext) -> None:
    x = check_dtype(ctx, "X", FLOATS)
    layout = ctx.attr("data_layout")
    _check_interp(len(x.shape), ctx.attr("interp_method"), layout, fmt(x), ctx.fail)
    if ctx.attr("align_mode") not in (0, 1):
        ctx.fail(f"align_mode={ctx.attr('align_mode')} must be 0 or 1")
    axes = _spatial_axes(len(x.shape), layout == "NHWC")
    n = len(axes)
    ins = [x.shape[a] for a in axes]
    sizes = _infer_interp_sizes(ctx, ins, n)
    shape = list(x.shape)
    for axis, size in zip(axes, sizes):
        shape[axis] = size
    ctx.set_output("Out", shape, x.dtype)


def _infer_interp_sizes(ctx: InferContext, ins: list[int], n: int) -> list[int]:
    """The output sizes inference can tell (-1: decided by a tensor's values, or by an unknown input size)."""
    attr_sizes = [ctx.attr(name) for name in _OUT_ATTRS[-n:]]
    for slot in ("OutSize", "Scale"):
        if ctx.has_input(slot):
            var = check_dtype(ctx, slot, _INDEX_DTYPES if slot == "OutSize" else FLOATS)
            if len(var.shape) != 1 or not (compatible(var.shape[0], n) or (slot == "Scale" and var.shape[0] == 1)):
                ctx.fail(
                    f"{slot} {fmt(var)} must be a 1-D tensor of {n} values" + (" (or 1)" if slot == "Scale" else "")
                )
    if ctx.has_input("SizeTensor"):
        tensors = ctx.tensors("SizeTensor")
        if len(tensors) != n:
            ctx.fail(f"SizeTensor binds {len(tensors)} tensors; a {n + 2}-D X needs {n}")
        for var in tensors:
            if var.dtype not in _INDEX_DTYPES or len(var.shape) > 1 or any(d not in (1, -1) for d in var.shape):
                ctx.fail(f"SizeTensor {fmt(var)} must be an int32 or int64 tensor of shape [1]")
        return [s if s > 0 else -1 for s in attr_sizes]
    scale = list(ctx.attr("scale"))
    if scale and len(scale) != n:
        ctx.fail(f"scale={scale} must hold {n} values for a {n + 2}-D X")
    if any(s <= 0 for s in scale):
        ctx.fail(f"scale={scale} must be greater than 0")
    if ctx.has_input("OutSize") or ctx.has_input("Scale"):
        return [-1] * n
    if scale:
        sizes = [int(size * s) if size > 0 else -1 for size, s in zip(ins, scale)]
        if any(size == 0 for size in sizes):
            ctx.fail(f"scale={scale} makes an output size 0 of the input sizes {ins}")
        return sizes
    if any(s <= 0 for s in attr_sizes):
        names = ", ".join(_OUT_ATTRS[-n:])
        ctx.fail(f"{names} = {attr_sizes}: give sizes > 0, a scale, OutSize, SizeTensor or Scale")
    return attr_sizes


def _interp_schemas(op_type: str, doc: str) -> tuple[OpSchema, OpSchema]:
    inputs = (
        Slot("X"),
        Slot("OutSize", optional=True, no_grad=True),
        Slot("SizeTensor", duplicable=True, optional=True, no_grad=True),
        Slot("Scale", optional=True, no_grad=True),
    )
    backward = OpSchema(
        f"{op_type}_grad",
        inputs=(*inputs, Slot("Out@GRAD")),
        outputs=(Slot("X@GRAD"),),
        attrs=_INTERP_ATTRS,
        infer=infer_grads("X"),
        kernel=_interp_grad,
        doc=f"Gradient of {op_type}: Out@GRAD scattered back to the positions each output read, weighted.",
    )
    forward = OpSchema(
        op_type,
        inputs=inputs,
        outputs=(Slot("Out"),),
        attrs=_INTERP_ATTRS,
        infer=_infer_interp,
        grad=lambda g: grad_op(g, backward, ("X", "OutSize", "SizeTensor", "Scale", "Out@GRAD"), ("X",)),
        kernel=_interp,
        doc=doc,
    )
    return forward, backward


LINEAR_INTERP_V2, LINEAR_INTERP_V2_GRAD = _interp_schemas(
    "linear_interp_v2", "A 3-D X (NCW as NCHW, NWC as NHWC) resized along its one spatial axis."
)
BILINEAR_INTERP_V2, BILINEAR_INTERP_V2_GRAD = _interp_schemas(
    "bilinear_interp_v2", "A 4-D X resized along H and W, by `interp_method` (bilinear, nearest or bicubic)."
)
TRILINEAR_INTERP_V2, TRILINEAR_INTERP_V2_GRAD = _interp_schemas(
    "trilinear_interp_v2", "A 5-D X resized along D, H and W, by `interp_method` (trilinear or nearest)."
)
NEAREST_INTERP_V2, NEAREST_INTERP_V2_GRAD = _interp_schemas(
    "nearest_interp_v2", "A 4-D or 5-D X resized by `interp_method` (nearest: each output takes one input)."
)
BICUBIC_INTERP_V2, BICUBIC_INTERP_V2_GRAD = _interp_schemas(
    "bicubic_interp_v2", "A 4-D X resized along H and W by `interp_method` (bicubic: Keys' kernel, A = -0.75)."
)

# -- pixel_shuffle, pixel_unshuffle --------------------------------------------------------------------------

_SHUFFLE_FORMATS = ("NCHW", "NHWC")


def _times(d: int, k: int) -> int:
    return d * k if d >= 0 else -1


def _over(d: int, k: int) -> int:
    return d // k if d >= 0 else -1


def _shuffle_shape(shape: Sequence[int], r: int, channel_last: bool, upscale: bool) -> list[int]:
    """The shape pixel_shuffle (``upscale``: channels / r^2, height and width * r) or pixel_unshuffle (the
    other way) makes of ``shape`` (-1: unknown)."""
    n, c, h, w = (shape[0], shape[3], shape[1], shape[2]) if channel_last else shape
    if upscale:
        out = (_over(c, r * r), _times(h, r), _times(w, r))
    else:
        out = (_times(c, r * r), _over(h, r), _over(w, r))
    return [n, out[1], out[2], out[0]] if channel_last else [n, *out]


def _shuffle(xp: Any, x: Any, r: int, channel_last: bool) -> Any:
    """[N, C r^2, H, W] -> [N, C, H r, W r]: output (c, h r + i, w r + j) is input (c r^2 + i r + j, h, w)."""
    if channel_last:
        n, h, w, c = x.shape
        y = x.reshape(n, h, w, c // (r * r), r, r).transpose(0, 1, 4, 2, 5, 3)
        return xp.ascontiguousarray(y).reshape(n, h * r, w * r, c // (r * r))
    n, c, h, w = x.shape
    y = x.reshape(n, c // (r * r), r, r, h, w).transpose(0, 1, 4, 2, 5, 3)
    return xp.ascontiguousarray(y).reshape(n, c // (r * r), h * r, w * r)


def _unshuffle(xp: Any, x: Any, r: int, channel_last: bool) -> Any:
    """The inverse of :func:`_shuffle`: [N, C, H r, W r] -> [N, C r^2, H, W]."""
    if channel_last:
        n, h, w, c = x.shape
        y = x.reshape(n, h // r, r, w // r, r, c).transpose(0, 1, 3, 5, 2, 4)
        return xp.ascontiguousarray(y).reshape(n, h // r, w // r, c * r * r)
    n, c, h, w = x.shape
    y = x.reshape(n, c, h // r, r, w // r, r).transpose(0, 1, 3, 5, 2, 4)
    return xp.ascontiguousarray(y).reshape(n, c * r * r, h // r, w // r)


def _check_shuffle_run(ctx: KernelContext, x: Any, factor: str, upscale: bool) -> tuple[int, bool]:
    """The factor and whether channels are last; an error naming the op when X does not divide."""
    fail = _kernel_fail(ctx)
    r, layout = ctx.attrs[factor], ctx.attrs["data_format"]
    if layout not in _SHUFFLE_FORMATS or r < 1 or x.ndim != 4:
        fail(f"X of shape {list(x.shape)}, {factor}={r}, data_format={layout!r}: needs a 4-D X, a factor >= 1")
    channel_last = layout == "NHWC"
    c, h, w = (x.shape[3], x.shape[1], x.shape[2]) if channel_last else x.shape[1:]
    if (c % (r * r) if upscale else h % r or w % r) != 0:
        what = f"the channels {c} by {r * r}" if upscale else f"the height {h} and width {w} by {r}"
        fail(f"{factor}={r} does not divide {what}")
    return r, channel_last


def _shuffle_schemas(op_type: str, factor: str, upscale: bool, doc: str) -> tuple[OpSchema, OpSchema]:
    attrs = (AttrDef(factor, AttrType.INT, 1), AttrDef("data_format", AttrType.STRING, "NCHW"))
    move, undo = (_shuffle, _unshuffle) if upscale else (_unshuffle, _shuffle)

    def infer(ctx: InferContext) -> None:
        x = check_dtype(ctx, "X", NUMBERS)
        r, layout = ctx.attr(factor), ctx.attr("data_format")
        if layout not in _SHUFFLE_FORMATS:
            ctx.fail(f"data_format={layout!r} is not one of {', '.join(_SHUFFLE_FORMATS)}")
        if r < 1:
            ctx.fail(f"{factor}={r} must be >= 1")
        if len(x.shape) != 4:
            ctx.fail(f"X {fmt(x)} must be 4-D ({layout})")
        channel_last = layout == "NHWC"
        c, h, w = (x.shape[3], x.shape[1], x.shape[2]) if channel_last else x.shape[1:]
        if upscale and c > 0 and c % (r * r):
            ctx.fail(f"X {fmt(x)}: its {c} channels are not divisible by {factor}^2 = {r * r}")
        if not upscale and any(d > 0 and d % r for d in (h, w)):
            ctx.fail(f"X {fmt(x)}: {factor}={r} does not divide its height {h} and width {w}")
        ctx.set_output("Out", _shuffle_shape(x.shape, r, channel_last, upscale), x.dtype)

    def infer_grad(ctx: InferContext) -> None:
        dout = ctx.tensor("Out@GRAD")
        shape = _shuffle_shape(dout.shape, ctx.attr(factor), ctx.attr("data_format") == "NHWC", not upscale)
        ctx.set_output("X@GRAD", shape, dout.dtype)

    def forward(ctx: KernelContext, x: Any) -> Any:
        return move(ctx.xp, x, *_check_shuffle_run(ctx, x, factor, upscale))

    def gradient(ctx: KernelContext, dout: Any) -> Any:
        return undo(ctx.xp, dout, *_check_shuffle_run(ctx, dout, factor, not upscale))

    backward = OpSchema(
        f"{op_type}_grad",
        inputs=(Slot("Out@GRAD"),),
        outputs=(Slot("X@GRAD"),),
        attrs=attrs,
        infer=infer_grad,
        kernel=gradient,
        doc=f"Gradient of {op_type}: Out@GRAD moved back (the inverse rearrangement).",
    )
    schema = OpSchema(
        op_type,
        inputs=(Slot("X"),),
        outputs=(Slot("Out"),),
        attrs=attrs,
        infer=infer,
        grad=lambda g: grad_op(g, backward, ("Out@GRAD",), ("X",)),
        kernel=forward,
        doc=doc,
    )
    return schema, backward


PIXEL_SHUFFLE, PIXEL_SHUFFLE_GRAD = _shuffle_schemas(
    "pixel_shuffle", "upscale_factor", True, "[N, C r^2, H, W] rearranged to [N, C, H r, W r] (NCHW or NHWC)."
)
PIXEL_UNSHUFFLE, PIXEL_UNSHUFFLE_GRAD = _shuffle_schemas(
    "pixel_unshuffle",
    "downscale_factor",
    False,
    "[N, C, H r, W r] rearranged to [N, C r^2, H, W]: pixel_shuffle undone.",
)

# -- pad3d, pad ----------------------------------------------------------------------------------------------

_PAD_MODES = ("constant", "reflect", "replicate", "circular")
_PAD3D_FORMATS = ("NCDHW", "NDHWC")
_PAD3D_ATTRS = (
    AttrDef("paddings", AttrType.INTS, [0, 0, 0, 0, 0, 0]),
    AttrDef("mode", AttrType.STRING, "constant"),
    AttrDef("value", AttrType.FLOAT, 0.0),
    AttrDef("data_format", AttrType.STRING, "NCDHW"),
)


def _pad3d_widths(paddings: Sequence[int], channel_last: bool) -> list[tuple[int, int]]:
    """Per dim of the 5-D X, the padding before and after: ``paddings`` is [left, right, top, bottom, front,
    back], W's pair first."""
    d, h, w = (paddings[4], paddings[5]), (paddings[2], paddings[3]), (paddings[0], paddings[1])
    return [(0, 0), d, h, w, (0, 0)] if channel_last else [(0, 0), (0, 0), d, h, w]


def _edge_map(size: int, before: int, after: int, mode: str) -> _AxisMap:
    """The source position of each position of an axis of ``size`` padded by ``mode`` (not constant)."""
    p = np.arange(-before, size + after)
    if mode == "reflect":
        p = np.abs(p)
        p = np.where(p >= size, 2 * (size - 1) - p, p)
    elif mode == "replicate":
        p = np.clip(p, 0, size - 1)
    else:  # circular
        p = p % size
    return _AxisMap.of(p)


def _pad3d_setup(ctx: KernelContext, x: Any, paddings: Any) -> tuple[list[tuple[int, int]], str]:
    """The widths per dim and the mode; an error naming the op for what X's sizes do not allow."""
    fail, attrs = _kernel_fail(ctx), ctx.attrs
    pads = _ints(paddings) if paddings is not None else list(attrs["paddings"])
    mode, layout = attrs["mode"], attrs["data_format"]
    if x.ndim != 5 or len(pads) != 6 or any(p < 0 for p in pads) or mode not in _PAD_MODES:
        fail(f"X of shape {list(x.shape)}, paddings={pads}, mode={mode!r}: needs a 5-D X and 6 paddings >= 0")
    if layout not in _PAD3D_FORMATS:
        fail(f"data_format={layout!r} is not one of {', '.join(_PAD3D_FORMATS)}")
    widths = _pad3d_widths(pads, layout == "NDHWC")
    for size, (before, after) in zip(x.shape, widths):
        if mode == "reflect" and (before >= size or after >= size) and (before or after):
            fail(f"reflect padding {before, after} must be smaller than the padded dim's size {size}")
        if mode in ("replicate", "circular") and size == 0 and (before or after):
            fail(f"{mode} padding of an empty dim")
    return widths, mode


def _edge_maps(shape: Sequence[int], widths: Sequence[tuple[int, int]], mode: str) -> list[tuple[int, _AxisMap]]:
    return [
        (axis, _edge_map(size, before, after, mode))
        for axis, (size, (before, after)) in enumerate(zip(shape, widths))
        if before or after
    ]


def _inner(widths: Sequence[tuple[int, int]], shape: Sequence[int]) -> tuple[slice, ...]:
    """The slices of a padded array holding the array itself."""
    return tuple(slice(before, before + size) for size, (before, _) in zip(shape, widths))


def _pad3d(ctx: KernelContext, x: Any, paddings: Any) -> Any:
    widths, mode = _pad3d_setup(ctx, x, paddings)
    if mode == "constant":
        return ctx.xp.pad(x, widths, mode="constant", constant_values=ctx.attrs["value"])
    return _gather_axes(ctx.xp, x, _edge_maps(x.shape, widths, mode))


def _pad3d_grad(ctx: KernelContext, x: Any, paddings: Any, dout: Any) -> Any:
    widths, mode = _pad3d_setup(ctx, x, paddings)
    if mode == "constant":
        return dout[_inner(widths, x.shape)].copy()
    return _scatter_axes(ctx.xp, dout, _edge_maps(x.shape, widths, mode), x.shape)


def _padded(shape: Sequence[int], widths: Sequence[tuple[int, int]]) -> list[int]:
    return [d + a + b if d >= 0 else -1 for d, (a, b) in zip(shape, widths)]


def _infer_pad3d(ctx: InferContext) -> None:
    x = check_dtype(ctx, "X", NUMBERS)
    if len(x.shape) != 5:
        ctx.fail(f"X {fmt(x)} must be 5-D")
    mode, layout = ctx.attr("mode"), ctx.attr("data_format")
    if mode not in _PAD_MODES:
        ctx.fail(f"mode={mode!r} is not one of {', '.join(_PAD_MODES)}")
    if layout not in _PAD3D_FORMATS:
        ctx.fail(f"data_format={layout!r} is not one of {', '.join(_PAD3D_FORMATS)}")
    channel_last = layout == "NDHWC"
    if ctx.has_input("Paddings"):
        var = check_dtype(ctx, "Paddings", _INDEX_DTYPES)
        if len(var.shape) != 1 or not compatible(var.shape[0], 6):
            ctx.fail(f"Paddings {fmt(var)} must be a 1-D tensor of 6 values")
        spatial = (1, 2, 3) if channel_last else (2, 3, 4)
        ctx.set_output("Out", [-1 if i in spatial else d for i, d in enumerate(x.shape)], x.dtype)
        return
    pads = list(ctx.attr("paddings"))
    if len(pads) != 6 or any(p < 0 for p in pads):
        ctx.fail(f"paddings={pads} must hold 6 values >= 0 ([left, right, top, bottom, front, back])")
    widths = _pad3d_widths(pads, channel_last)
    for size, (before, after) in zip(x.shape, widths):
        if mode == "reflect" and size > 0 and (before >= size or after >= size):
            ctx.fail(f"X {fmt(x)}: reflect padding {before, after} must be smaller than the padded dim's size {size}")
    ctx.set_output("Out", _padded(x.shape, widths), x.dtype)


PAD3D_GRAD = OpSchema(
    "pad3d_grad",
    inputs=(Slot("X"), Slot("Paddings", optional=True), Slot("Out@GRAD")),
    outputs=(Slot("X@GRAD"),),
    attrs=_PAD3D_ATTRS,
    infer=infer_grads("X"),
    kernel=_pad3d_grad,
    doc="Gradient of pad3d: the inner part of Out@GRAD, plus (other modes) what each padded position copied.",
)
PAD3D = OpSchema(
    "pad3d",
    inputs=(Slot("X"), Slot("Paddings", optional=True, no_grad=True)),
    outputs=(Slot("Out"),),
    attrs=_PAD3D_ATTRS,
    infer=_infer_pad3d,
    grad=lambda g: grad_op(g, PAD3D_GRAD, ("X", "Paddings", "Out@GRAD"), ("X",)),
    kernel=_pad3d,
    doc="A 5-D X padded along D, H and W: constant `value`, reflect, replicate or circular.",
)

_PAD_ATTRS = (AttrDef("paddings", AttrType.INTS, []), AttrDef("pad_value", AttrType.FLOAT, 0.0))


def _pad_widths(paddings: Sequence[int], rank: int, fail: Fail) -> list[tuple[int, int]]:
    if len(paddings) != 2 * rank or any(p < 0 for p in paddings):
        fail(f"paddings={list(paddings)} must hold 2 values >= 0 per dim of the {rank}-D X (before, after)")
    return [(paddings[2 * i], paddings[2 * i + 1]) for i in range(rank)]


def _pad(ctx: KernelContext, x: Any) -> Any:
    widths = _pad_widths(ctx.attrs["paddings"], x.ndim, _kernel_fail(ctx))
    return ctx.xp.pad(x, widths, mode="constant", constant_values=ctx.attrs["pad_value"])


def _pad_grad(ctx: KernelContext, dout: Any) -> Any:
    """The inner part of dOut (the padding's widths are X's shape away from dOut's)."""
    widths = _pad_widths(ctx.attrs["paddings"], dout.ndim, _kernel_fail(ctx))
    return dout[tuple(slice(a, d - b) for d, (a, b) in zip(dout.shape, widths))].copy()


def _infer_pad(ctx: InferContext) -> None:
    x = check_dtype(ctx, "X", NUMBERS)
    ctx.set_output("Out", _padded(x.shape, _pad_widths(ctx.attr("paddings"), len(x.shape), ctx.fail)), x.dtype)


def _infer_pad_grad(ctx: InferContext) -> None:
    dout = ctx.tensor("Out@GRAD")
    widths = _pad_widths(ctx.attr("paddings"), len(dout.shape), ctx.fail)
    ctx.set_output("X@GRAD", [d - a - b if d >= 0 else -1 for d, (a, b) in zip(dout.shape, widths)], dout.dtype)


PAD_GRAD = OpSchema(
    "pad_grad",
    inputs=(Slot("Out@GRAD"),),
    outputs=(Slot("X@GRAD"),),
    attrs=_PAD_ATTRS,
    infer=_infer_pad_grad,
    kernel=_pad_grad,
    doc="Gradient of pad: the inner part of Out@GRAD.",
)
PAD = OpSchema(
    "pad",
    inputs=(Slot("X"),),
    outputs=(Slot("Out"),),
    attrs=_PAD_ATTRS,
    infer=_infer_pad,
    grad=lambda g: grad_op(g, PAD_GRAD, ("Out@GRAD",), ("X",)),
    kernel=_pad,
    doc="X padded with `pad_value`: `paddings` holds (before, after) per dim.",
)

# -- affine_channel ------------------------------------------------------------------------------------------

_AFFINE_LAYOUTS = ("AnyLayout", "NCHW", "NHWC")
_AFFINE_ATTRS = (AttrDef("data_layout", AttrType.STRING, "AnyLayout"),)


def _channel_view(ctx: KernelContext, x: Any, v: Any) -> Any:
    """``v`` ([C]) shaped to broadcast along X's channel dim (the last with NHWC, else dim 1)."""
    axis = x.ndim - 1 if ctx.attrs["data_layout"] == "NHWC" else 1
    if x.ndim < 2 or v.size != x.shape[axis]:
        raise kernel_error(ctx, f"Scale and Bias of {v.size} values do not match X {list(x.shape)}'s channels")
    return v.reshape([-1 if i == axis else 1 for i in range(x.ndim)])


def _affine_channel(ctx: KernelContext, x: Any, scale: Any, bias: Any) -> Any:
    return x * _channel_view(ctx, x, scale) + _channel_view(ctx, x, bias)


def _affine_channel_grad(ctx: KernelContext, x: Any, scale: Any, dout: Any) -> tuple[Any, Any, Any]:
    axis = x.ndim - 1 if ctx.attrs["data_layout"] == "NHWC" else 1
    others = tuple(i for i in range(x.ndim) if i != axis)
    dx = dout * _channel_view(ctx, x, scale) if ctx.wants[0] else None
    dscale = (dout * x).sum(axis=others) if ctx.wants[1] else None
    dbias = dout.sum(axis=others) if ctx.wants[2] else None
    return dx, dscale, dbias


def _infer_affine_channel(ctx: InferContext) -> None:
    x = check_dtype(ctx, "X", FLOATS)
    layout = ctx.attr("data_layout")
    if layout not in _AFFINE_LAYOUTS:
        ctx.fail(f"data_layout={layout!r} is not one of {', '.join(_AFFINE_LAYOUTS)}")
    if len(x.shape) < 2:
        ctx.fail(f"X {fmt(x)} must have 2 dims or more")
    channels = x.shape[-1 if layout == "NHWC" else 1]
    for slot in ("Scale", "Bias"):
        var = check_dtype(ctx, slot, FLOATS)
        same_dtype(ctx, x, var)
        if len(var.shape) != 1 or not compatible(var.shape[0], channels):
            ctx.fail(f"{slot} {fmt(var)} must be 1-D of X {fmt(x)}'s {channels} channels ({layout})")
    ctx.set_output("Out", x.shape, x.dtype, lod_level=x.lod_level)


def _infer_affine_channel_grad(ctx: InferContext) -> None:
    infer_grads("X", "Scale")(ctx)
    scale = ctx.tensor("Scale")
    ctx.set_output("Bias@GRAD", scale.shape, scale.dtype)


AFFINE_CHANNEL_GRAD = OpSchema(
    "affine_channel_grad",
    inputs=(Slot("X"), Slot("Scale"), Slot("Out@GRAD")),
    outputs=(Slot("X@GRAD"), Slot("Scale@GRAD"), Slot("Bias@GRAD")),
    attrs=_AFFINE_ATTRS,
    infer=_infer_affine_channel_grad,
    kernel=_affine_channel_grad,
    doc="Gradient of affine_channel.",
)
AFFINE_CHANNEL = OpSchema(
    "affine_channel",
    inputs=(Slot("X"), Slot("Scale"), Slot("Bias")),
    outputs=(Slot("Out"),),
    attrs=_AFFINE_ATTRS,
    infer=_infer_affine_channel,
    grad=lambda g: grad_op(g, AFFINE_CHANNEL_GRAD, ("X", "Scale", "Out@GRAD"), ("X", "Scale", "Bias")),
    kernel=_affine_channel,
    share_lod=(("X", "Out"),),
    doc="Out = X * Scale + Bias per channel (dim 1, or the last with NHWC).",
)

# -- grid_sampler ---------------------------------------------------------------------------------------------

_GRID_MODES = ("bilinear", "nearest", "bicubic")
_GRID_PADDINGS = ("zeros", "border", "reflection")
_GRID_ATTRS = (
    AttrDef("mode", AttrType.STRING, "bilinear"),
    AttrDef("padding_mode", AttrType.STRING, "zeros"),
    AttrDef("align_corners", AttrType.BOOLEAN, True),
    AttrDef("use_cudnn", AttrType.BOOLEAN, False),
)


def _reflect(xp: Any, x: Any, low: float, high: float) -> tuple[Any, Any]:
    """``x`` reflected by the borders ``low`` and ``high`` (as often as it takes) into ``[low, high]``, and the
    derivative of that (+1 or -1)."""
    span = high - low
    if span <= 0:
        return xp.zeros_like(x), xp.zeros_like(x)
    dist = xp.abs(x - low)
    flips = xp.floor(dist / span)
    even = flips % 2 == 0
    reflected = xp.where(even, low + (dist - flips * span), high - (dist - flips * span))
    return reflected, xp.where(even == (x >= low), 1.0, -1.0).astype(x.dtype)


def _grid_bounds(size: int, attrs: dict[str, Any]) -> tuple[float, float]:
    """The span of positions along an axis of ``size`` that the grid's [-1, 1] covers."""
    return (0.0, size - 1.0) if attrs["align_corners"] else (-0.5, size - 0.5)


def _grid_source(xp: Any, g: Any, size: int, attrs: dict[str, Any]) -> tuple[Any, Any]:
    """The position along an axis of ``size`` that normalised grid values ``g`` sample (nearest: rounded half to
    even, ONNX's rule, before padding), moved by ``padding_mode`` but for zeros; and its derivative by g. Bicubic
    (ONNX's rule) moves only positions beyond the grid's span, reflected into it or clamped to the pixels, its
    taps padded one by one; the others clamp every position to the pixels (which reads what padding their taps
    would)."""
    align = attrs["align_corners"]
    scale = (size - 1) / 2 if align else size / 2
    x = (g + 1) * scale - (0.0 if align else 0.5)
    grad = xp.full_like(x, scale)
    if attrs["mode"] == "nearest":
        x = xp.rint(x)
    low, high = _grid_bounds(size, attrs)
    if attrs["padding_mode"] == "reflection":
        x, sign = _reflect(xp, x, low, high)
        grad = grad * sign
    if attrs["padding_mode"] != "zeros":
        kept = (x >= low) & (x <= high) if attrs["mode"] == "bicubic" else (x > 0) & (x < size - 1)
        grad = xp.where(kept, grad, 0.0)
        x = xp.where(kept, x, xp.clip(x, 0, size - 1))
    return x, grad


def _grid_pad(xp: Any, index: Any, size: int, attrs: dict[str, Any]) -> Any:
    """Tap positions ``index`` along an axis of ``size`` as ``padding_mode`` reads them: border clamps them to the
    pixels, reflection reflects them into the grid's span (truncated, as ONNX's reference), zeros leaves them (the
    taps outside read 0)."""
    if attrs["padding_mode"] == "border":
        return xp.clip(index, 0, size - 1)
    if attrs["padding_mode"] == "reflection":
        return xp.trunc(_reflect(xp, index.astype(np.float64), *_grid_bounds(size, attrs))[0]).astype(np.int64)
    return index


@dataclass
class _GridTap:
    """One neighbour every output position reads: its flat spatial index into X (N, Q), weight (N, Q; 0 where it
    falls outside X) and the weight's derivative by each axis' source position."""

    index: Any
    weight: Any
    dweight: list[Any]


def _grid_taps(xp: Any, spatial: Sequence[int], grid: Any, attrs: dict[str, Any]) -> tuple[list[_GridTap], list[Any]]:
    """The taps of grid (N, *out, D; component 0 indexes X's last axis) into X's ``spatial`` dims, and the
    derivative of each axis' source position by its grid component."""
    d = len(spatial)
    g = grid.reshape(grid.shape[0], -1, d)
    sources = [_grid_source(xp, g[:, :, d - 1 - a], spatial[a], attrs) for a in range(d)]
    return _taps_at(xp, spatial, [pos for pos, _ in sources], attrs), [dsource for _, dsource in sources]


def _taps_at(xp: Any, spatial: Sequence[int], positions: Sequence[Any], attrs: dict[str, Any]) -> list[_GridTap]:
    """The taps reading X's ``spatial`` dims at source ``positions`` (one (N, Q) array per axis, in X's axis
    order) by ``mode`` and ``padding_mode`` (a tap outside X weighs 0)."""
    d = len(spatial)
    options = []  # per axis: (integer position, weight, d weight / d position) of each neighbour
    for size, pos in zip(spatial, positions):
        if attrs["mode"] == "nearest":
            options.append([(pos.astype(np.int64), xp.ones_like(pos), xp.zeros_like(pos))])
            continue
        low = xp.floor(pos)
        frac = pos - low
        low = low.astype(np.int64)
        if attrs["mode"] == "bicubic":
            weights, derivs = _cubic_taps(frac)
            near = [(low + k - 1, w, dw) for k, (w, dw) in enumerate(zip(weights, derivs))]
        else:
            near = [(low, 1 - frac, -xp.ones_like(pos)), (low + 1, frac, xp.ones_like(pos))]
        options.append([(_grid_pad(xp, i, size, attrs), w, dw) for i, w, dw in near])
    taps = []
    for combo in itertools.product(*options):
        index, weight, valid = 0, 1.0, True
        for a, (i, w, _) in enumerate(combo):
            valid = valid & (i >= 0) & (i < spatial[a])
            index = index * spatial[a] + xp.clip(i, 0, spatial[a] - 1)
            weight = weight * w
        dweight = []
        for a in range(d):
            others = [w for b, (_, w, _) in enumerate(combo) if b != a]
            dweight.append(functools.reduce(lambda p, q: p * q, others, combo[a][2]) * valid)
        taps.append(_GridTap(index, weight * valid, dweight))
    return taps


def _grid_gather(xp: Any, xf: Any, index: Any) -> Any:
    """``xf[n, c, index[n, q]]`` for every n, c, q: (N, C, Q)."""
    n, c = xf.shape[:2]
    return xf[xp.arange(n)[:, None, None], xp.arange(c)[None, :, None], index[:, None, :]]


def _tap_scatter(xp: Any, taps: Sequence[_GridTap], df: Any, shape: Sequence[int]) -> Any:
    """The adjoint of gathering the taps: ``df`` (N, C, Q) added back to X's positions (X of ``shape``: N, C,
    *spatial), each times its tap's weight; float64."""
    n, c = shape[:2]
    size = int(np.prod(shape))
    rows = (xp.arange(n)[:, None, None] * c + xp.arange(c)[None, :, None]) * int(np.prod(shape[2:]))
    flat = xp.zeros(size, dtype=np.float64)
    for t in taps:
        flat += xp.bincount((rows + t.index[:, None, :]).ravel(), (df * t.weight[:, None, :]).ravel(), size)
    return flat.reshape(tuple(shape))


def _tap_position_grads(xp: Any, xf: Any, taps: Sequence[_GridTap], df: Any) -> list[Any]:
    """Per axis of X (``xf``: N, C, flat spatial), ``df`` (N, C, Q) through the taps' values times their weights'
    derivatives by the source position: (N, Q)."""
    d = len(taps[0].dweight)
    return [sum((_grid_gather(xp, xf, t.index) * df).sum(axis=1) * t.dweight[a] for t in taps) for a in range(d)]


def _check_grid(ctx: KernelContext, x: Any, grid: Any) -> None:
    if grid.ndim != x.ndim or grid.shape[0] != x.shape[0] or grid.shape[-1] != x.ndim - 2:
        raise kernel_error(
            ctx, f"grid_sampler: Grid {list(grid.shape)} does not fit X {list(x.shape)}: [N, *out, {x.ndim - 2}]"
        )


def _grid_sampler(ctx: KernelContext, x: Any, grid: Any) -> Any:
    """Output[n, c, *o]: X[n, c] sampled at Grid[n, *o] (bilinear, bicubic: the weighted neighbours, 2 or 4 per
    axis; nearest: the nearest)."""
    xp = ctx.xp
    _check_grid(ctx, x, grid)
    taps, _ = _grid_taps(xp, x.shape[2:], grid, ctx.attrs)
    xf = x.reshape(x.shape[0], x.shape[1], -1)
    out = sum(_grid_gather(xp, xf, t.index) * t.weight[:, None, :].astype(x.dtype) for t in taps)
    return xp.asarray(out).reshape(*x.shape[:2], *grid.shape[1:-1]).astype(x.dtype, copy=False)


def _grid_sampler_grad(ctx: KernelContext, x: Any, grid: Any, dout: Any) -> tuple[Any, Any]:
    """X@GRAD: dOutput scattered back to the taps by their weights; Grid@GRAD: dOutput times the taps' values
    times their weights' derivatives (0 for nearest), by the source positions' derivatives."""
    xp = ctx.xp
    _check_grid(ctx, x, grid)
    taps, dsources = _grid_taps(xp, x.shape[2:], grid, ctx.attrs)
    n, c = x.shape[:2]
    xf, df = x.reshape(n, c, -1), dout.reshape(n, c, -1)
    dx = dgrid = None
    if ctx.wants[0]:
        dx = _tap_scatter(xp, taps, df, x.shape).astype(x.dtype)
    if ctx.wants[1]:
        d = x.ndim - 2
        dpos = _tap_position_grads(xp, xf, taps, df)
        dgrid = xp.stack([dpos[d - 1 - k] * dsources[d - 1 - k] for k in range(d)], axis=-1)
        dgrid = dgrid.reshape(grid.shape).astype(grid.dtype)
    return dx, dgrid


def _infer_grid_sampler(ctx: InferContext) -> None:
    x, grid = check_dtype(ctx, "X", FLOATS), check_dtype(ctx, "Grid", FLOATS)
    same_dtype(ctx, x, grid)
    if len(x.shape) not in (4, 5):
        ctx.fail(f"X {fmt(x)} must be 4-D (N, C, H, W) or 5-D (N, C, D, H, W)")
    d = len(x.shape) - 2
    if (
        len(grid.shape) != len(x.shape)
        or not compatible(grid.shape[-1], d)
        or not compatible(grid.shape[0], x.shape[0])
    ):
        ctx.fail(f"Grid {fmt(grid)} must be [N, *out, {d}] for X {fmt(x)}")
    for name, allowed in (("mode", _GRID_MODES), ("padding_mode", _GRID_PADDINGS)):
        if ctx.attr(name) not in allowed:
            ctx.fail(f"{name}={ctx.attr(name)!r} is not one of {', '.join(allowed)}")
    batch = x.shape[0] if x.shape[0] >= 0 else grid.shape[0]
    ctx.set_output("Output", (batch, x.shape[1], *grid.shape[1:-1]), x.dtype)


GRID_SAMPLER_GRAD = OpSchema(
    "grid_sampler_grad",
    inputs=(Slot("X"), Slot("Grid"), Slot("Output@GRAD")),
    outputs=(Slot("X@GRAD"), Slot("Grid@GRAD")),
    attrs=_GRID_ATTRS,
    infer=infer_grads("X", "Grid"),
    kernel=_grid_sampler_grad,
    doc="Gradient of grid_sampler.",
)
GRID_SAMPLER = OpSchema(
    "grid_sampler",
    inputs=(Slot("X"), Slot("Grid")),
    outputs=(Slot("Output"),),
    attrs=_GRID_ATTRS,
    infer=_infer_grid_sampler,
    grad=lambda g: grad_op(g, GRID_SAMPLER_GRAD, ("X", "Grid", "Output@GRAD"), ("X", "Grid")),
    kernel=_grid_sampler,
    doc="X (NCHW or NCDHW) sampled at Grid's normalised positions ([-1, 1] spans X; component 0 is along W): "
    "`mode` bilinear, nearest (half to even) or bicubic (blockir's extension, ONNX's cubic: Keys' A = -0.75; "
    "Paddle has none, exports to Paddle refuse it), `padding_mode` zeros, border or reflection, `align_corners`.",
)

# Attribute values of Paddle's ops that are blockir's extensions (ONNX's semantics), which Paddle's kernels lack:
# exports to Paddle's formats refuse them (blockir.io.paddle.check_paddle_attrs). Op type -> attribute -> values.
PADDLE_LACKS: dict[str, dict[str, frozenset[str]]] = {
    "grid_sampler": {"mode": frozenset({"bicubic"})},
    "roi_align": {"mode": frozenset({"max"})},
}

SCHEMAS: tuple[OpSchema, ...] = (
    LINEAR_INTERP_V2,
    LINEAR_INTERP_V2_GRAD,
    BILINEAR_INTERP_V2,
    BILINEAR_INTERP_V2_GRAD,
    TRILINEAR_INTERP_V2,
    TRILINEAR_INTERP_V2_GRAD,
    NEAREST_INTERP_V2,
    NEAREST_INTERP_V2_GRAD,
    BICUBIC_INTERP_V2,
    BICUBIC_INTERP_V2_GRAD,
    PIXEL_SHUFFLE,
    PIXEL_SHUFFLE_GRAD,
    PIXEL_UNSHUFFLE,
    PIXEL_UNSHUFFLE_GRAD,
    PAD3D,
    PAD3D_GRAD,
    PAD,
    PAD_GRAD,
    AFFINE_CHANNEL,
    AFFINE_CHANNEL_GRAD,
    GRID_SAMPLER,
    GRID_SAMPLER_GRAD,
)

# -- roi_align (Paddle's: the average of bilinear samples over each bin of each region; ONNX's max too) -----------

_ROI_ALIGN_MODES = ("avg", "max")
_ROI_ALIGN_ATTRS = (
    AttrDef("spatial_scale", AttrType.FLOAT, 1.0),
    AttrDef("pooled_height", AttrType.INT, 1),
    AttrDef("pooled_width", AttrType.INT, 1),
    AttrDef("sampling_ratio", AttrType.INT, -1),
    AttrDef("aligned", AttrType.BOOLEAN, False),
    AttrDef("mode", AttrType.STRING, "avg"),
)


def _infer_roi_align(ctx: InferContext) -> None:
    x, rois = check_dtype(ctx, "X", FLOATS), check_dtype(ctx, "ROIs", FLOATS)
    same_dtype(ctx, x, rois)
    if len(x.shape) != 4:
        ctx.fail(f"X {fmt(x)} must be NCHW")
    if len(rois.shape) != 2 or not compatible(rois.shape[1], 4):
        ctx.fail(f"ROIs {fmt(rois)} must be [R, 4] boxes (x1, y1, x2, y2)")
    if ctx.has_input("RoisNum"):
        check_dtype(ctx, "RoisNum", frozenset({"int32", "int64"}))
    if ctx.attr("pooled_height") < 1 or ctx.attr("pooled_width") < 1:
        ctx.fail(f"pooled_height={ctx.attr('pooled_height')}, pooled_width={ctx.attr('pooled_width')} must be >= 1")
    if ctx.attr("mode") not in _ROI_ALIGN_MODES:
        ctx.fail(f"mode={ctx.attr('mode')!r} is not one of {', '.join(_ROI_ALIGN_MODES)}")
    shape = [rois.shape[0], x.shape[1], ctx.attr("pooled_height"), ctx.attr("pooled_width")]
    ctx.set_output("Out", shape, x.dtype)


@dataclass
class _RoiSamples:
    """The samples of each bin of each region along one axis, [R, pooled, grid]: the two pixels each reads and
    their bilinear weights (0 for a sample beyond [-1, length] or past its region's grid, ``real`` [R, 1, grid]
    false)."""

    low: np.ndarray
    high: np.ndarray
    w_low: np.ndarray
    w_high: np.ndarray
    real: np.ndarray

    def weights(self, length: int) -> np.ndarray:
        """[R, pooled, length]: the samples' weights summed per position."""
        positions = np.arange(length)
        at_low = (self.low[..., None] == positions) * self.w_low[..., None]
        return (at_low + (self.high[..., None] == positions) * self.w_high[..., None]).sum(axis=2)


def _roi_axis(start: np.ndarray, extent: np.ndarray, grid: np.ndarray, pooled: int, length: int) -> _RoiSamples:
    """The samples along one axis (a sample beyond [-1, length] weighs nothing; one in [-1, 0] is taken at 0;
    one past length - 1 at it)."""
    step = extent / pooled
    i = np.arange(max(int(grid.max(initial=0)), 1))
    at = (
        start[:, None, None]
        + np.arange(pooled)[None, :, None] * step[:, None, None]
        + (i + 0.5)[None, None, :] * (step / np.maximum(grid, 1))[:, None, None]
    )
    real = i[None, None, :] < grid[:, None, None]
    valid = real & (at >= -1.0) & (at <= length)
    at = np.maximum(at, 0.0)
    low = np.minimum(np.floor(at).astype(np.int64), length - 1)
    high = np.minimum(low + 1, length - 1)
    frac = np.where(low >= length - 1, 0.0, at - low) * valid
    return _RoiSamples(low, high, valid - frac, frac, real)


def _roi_samples(ctx: KernelContext, x: Any, rois: Any, rois_num: Any) -> tuple[np.ndarray, _RoiSamples, _RoiSamples]:
    """Each region's image, and its samples along H and along W (on the host)."""
    a = ctx.attrs
    boxes = to_host(rois).astype(np.float64) * a["spatial_scale"] - (0.5 if a["aligned"] else 0.0)
    if rois_num is None:
        if x.shape[0] != 1:
            raise kernel_error(ctx, f"roi_align: X has {x.shape[0]} images; RoisNum must say which regions are whose")
        image = np.zeros(len(boxes), np.int64)
    else:
        counts = to_host(rois_num).reshape(-1).astype(np.int64)
        if len(counts) != x.shape[0] or counts.sum() != len(boxes) or (counts < 0).any():
            raise kernel_error(
                ctx,
                f"roi_align: RoisNum {counts.tolist()} does not split {len(boxes)} regions over {x.shape[0]} images",
            )
        image = np.repeat(np.arange(len(counts)), counts)
    extent = boxes[:, 2:] - boxes[:, :2]  # (width, height)
    if not a["aligned"]:
        extent = np.maximum(extent, 1.0)
    pooled = np.array([a["pooled_width"], a["pooled_height"]])
    ratio = a["sampling_ratio"]
    grid = np.full(extent.shape, ratio) if ratio > 0 else np.ceil(extent / pooled).astype(np.int64)
    ys = _roi_axis(boxes[:, 1], extent[:, 1], grid[:, 1], int(pooled[1]), x.shape[2])
    xs = _roi_axis(boxes[:, 0], extent[:, 0], grid[:, 0], int(pooled[0]), x.shape[3])
    return image, ys, xs


def _roi_maps(ctx: KernelContext, x: Any, rois: Any, rois_num: Any) -> tuple[Any, Any, Any, Any]:
    """avg: each region's image, its weights along H [R, ph, H] and along W [R, pw, W] (on the host, then X's
    device), and its sample count [R, 1, 1, 1]: Out = Wy @ X[image] @ Wx^T / count."""
    xp = ctx.xp
    image, ys, xs = _roi_samples(ctx, x, rois, rois_num)
    count = np.maximum(ys.real.sum(axis=2) * xs.real.sum(axis=2), 1).reshape(-1, 1, 1, 1)
    return (
        xp.asarray(image),
        xp.asarray(ys.weights(x.shape[2])[:, None].astype(x.dtype)),
        xp.asarray(xs.weights(x.shape[3])[:, None].astype(x.dtype)),
        xp.asarray(count.astype(x.dtype)),
    )


def _roi_max(ctx: KernelContext, x: Any, rois: Any, rois_num: Any) -> tuple[Any, Any, Any]:
    """max (ONNX's): per region, channel and bin, the largest of its samples' four corners each times its
    bilinear weight (0 for a bin without samples). Returns Out, and per output value the flat index into X
    [R, C, ph, pw] of the corner it took and that corner's weight (0 for none): its gradient."""
    xp = ctx.xp
    c, h, w = x.shape[1:]
    image, ys, xs = _roi_samples(ctx, x, rois, rois_num)
    # every (region, bin row, bin column, sample row, sample column, corner row, corner column)
    at = (
        np.stack([ys.low, ys.high], axis=-1)[:, :, None, :, None, :, None] * w
        + np.stack([xs.low, xs.high], axis=-1)[:, None, :, None, :, None, :]
    )
    weight = (
        np.stack([ys.w_low, ys.w_high], axis=-1)[:, :, None, :, None, :, None]
        * np.stack([xs.w_low, xs.w_high], axis=-1)[:, None, :, None, :, None, :]
    )
    real = np.broadcast_to(
        ys.real[:, :, None, :, None, None, None] & xs.real[:, None, :, None, :, None, None], at.shape
    )
    bins = at.shape[:3]
    at, real = xp.asarray(at.reshape(*bins, -1)), xp.asarray(real.reshape(*bins, -1))
    weight = xp.asarray(weight.reshape(*bins, -1).astype(x.dtype))
    first = xp.asarray(image * c)[:, None, None, None, None] + xp.arange(c)[None, :, None, None, None]
    flat = first * (h * w) + at[:, None]  # [R, C, ph, pw, K]
    values = xp.where(real[:, None], x.reshape(-1)[flat] * weight[:, None], -xp.inf)
    best = values.argmax(axis=-1)[..., None]
    out = xp.take_along_axis(values, best, axis=-1)[..., 0]
    taken = xp.take_along_axis(xp.broadcast_to(weight[:, None], values.shape), best, axis=-1)[..., 0]
    out = xp.where(real.any(axis=-1)[:, None], out, 0).astype(x.dtype)
    return out, xp.take_along_axis(flat, best, axis=-1)[..., 0], taken


def _roi_align(ctx: KernelContext, x: Any, rois: Any, rois_num: Any) -> Any:
    if ctx.attrs["mode"] == "max":
        return _roi_max(ctx, x, rois, rois_num)[0]
    image, wy, wx, count = _roi_maps(ctx, x, rois, rois_num)
    return (wy @ x[image] @ ctx.xp.swapaxes(wx, -1, -2)) / count


def _roi_align_grad(ctx: KernelContext, x: Any, rois: Any, rois_num: Any, dout: Any) -> Any:
    """avg: each region's dOut / count spread back over its bilinear samples, Wy^T @ dOut @ Wx, summed per image;
    max: each dOut times its corner's weight, back to that corner."""
    xp = ctx.xp
    if ctx.attrs["mode"] == "max":
        _, flat, weight = _roi_max(ctx, x, rois, rois_num)
        total = xp.bincount(flat.reshape(-1), (dout * weight).reshape(-1), x.size)
        return total.reshape(x.shape).astype(dout.dtype)
    image, wy, wx, count = _roi_maps(ctx, x, rois, rois_num)
    dx = xp.zeros(x.shape, dtype=dout.dtype)
    add_rows(dx, image, xp.swapaxes(wy, -1, -2) @ (dout / count) @ wx, xp)
    return dx


ROI_ALIGN_GRAD = OpSchema(
    "roi_align_grad",
    inputs=(Slot("X"), Slot("ROIs"), Slot("RoisNum", optional=True), Slot("Out@GRAD")),
    outputs=(Slot("X@GRAD"),),
    attrs=_ROI_ALIGN_ATTRS,
    infer=infer_grads("X"),
    kernel=_roi_align_grad,
    doc="Gradient of roi_align (X only; the regions take none, as Paddle's).",
)
ROI_ALIGN = OpSchema(
    "roi_align",
    inputs=(Slot("X"), Slot("ROIs", no_grad=True), Slot("RoisNum", optional=True, no_grad=True)),
    outputs=(Slot("Out"),),
    attrs=_ROI_ALIGN_ATTRS,
    infer=_infer_roi_align,
    grad=lambda g: grad_op(g, ROI_ALIGN_GRAD, ("X", "ROIs", "RoisNum", "Out@GRAD"), ("X",)),
    kernel=_roi_align,
    doc="Out [R, C, pooled_height, pooled_width]: each region of ROIs (x1, y1, x2, y2, times spatial_scale; less 0.5 "
    "with aligned, else at least 1 wide) cut into bins, each the average of its sampling_ratio^2 bilinear samples "
    "(ceil(bin size) per axis when sampling_ratio <= 0) of X's image (RoisNum: the regions per image, in order). "
    "`mode` max (blockir's extension, ONNX's; Paddle has none, exports to Paddle refuse it): each bin the largest "
    "of its samples' four corners each times its bilinear weight.",
)

SCHEMAS += (ROI_ALIGN, ROI_ALIGN_GRAD)

# -- deformable_conv (Paddle's: a 2-D convolution whose taps Offset moves and Mask scales) -----------------------

_DEFORM_ATTRS = (
    AttrDef("strides", AttrType.INTS, [1, 1]),
    AttrDef("paddings", AttrType.INTS, [0, 0]),
    AttrDef("dilations", AttrType.INTS, [1, 1]),
    AttrDef("groups", AttrType.INT, 1),
    AttrDef("deformable_groups", AttrType.INT, 1),
    AttrDef("im2col_step", AttrType.INT, 64),
)
_ZERO_PADDED_BILINEAR = {"mode": "bilinear", "padding_mode": "zeros"}


def _deform_out(attrs: dict[str, Any], spatial: Sequence[int], kernel: Sequence[int]) -> list[int]:
    """The output's (H, W) (-1 where an input dim is unknown)."""
    return [
        (size + 2 * p - (d * (k - 1) + 1)) // s + 1 if size >= 0 and k >= 0 else -1
        for size, k, s, p, d in zip(spatial, kernel, attrs["strides"], attrs["paddings"], attrs["dilations"])
    ]


def _infer_deformable_conv(ctx: InferContext) -> None:
    x, offset, w = (check_dtype(ctx, slot, FLOATS) for slot in ("Input", "Offset", "Filter"))
    for var in (offset, w):
        same_dtype(ctx, x, var)
    if len(x.shape) != 4 or len(w.shape) != 4:
        ctx.fail(f"Input {fmt(x)} and Filter {fmt(w)} must be 4-D ([N, C, H, W]; [M, C / groups, kh, kw])")
    for name, least in (("strides", 1), ("paddings", 0), ("dilations", 1)):
        if len(ctx.attr(name)) != 2 or min(ctx.attr(name)) < least:
            ctx.fail(f"{name}={list(ctx.attr(name))} must hold 2 values >= {least}")
    groups, deformable = ctx.attr("groups"), ctx.attr("deformable_groups")
    c, m = x.shape[1], w.shape[0]
    fits = groups >= 1 and deformable >= 1 and (m < 0 or m % groups == 0)
    if c >= 0 and fits:
        fits = c % deformable == 0 and compatible(w.shape[1], c // groups) and c % groups == 0
    if not fits:
        ctx.fail(
            f"Filter {fmt(w)} with groups={groups}, deformable_groups={deformable} does not fit Input {fmt(x)}: "
            "groups must divide M and C (Filter [M, C / groups, kh, kw]), deformable_groups C"
        )
    attrs = {name: ctx.attr(name) for name in ("strides", "paddings", "dilations")}
    out = _deform_out(attrs, x.shape[2:], w.shape[2:])
    if any(size == 0 or size < -1 for size in out):
        ctx.fail(f"the output would be {out} high and wide for Input {fmt(x)} and Filter {fmt(w)}")
    taps = w.shape[2] * w.shape[3] if min(w.shape[2:]) >= 0 else -1
    for slot, per_tap in (("Offset", 2), ("Mask", 1)):
        if not ctx.has_input(slot):
            continue
        var = check_dtype(ctx, slot, FLOATS)
        same_dtype(ctx, x, var)
        want = [x.shape[0], per_tap * deformable * taps if taps >= 0 else -1, *out]
        if len(var.shape) != 4 or not all(compatible(a, b) for a, b in zip(var.shape, want)):
            ctx.fail(f"{slot} {fmt(var)} must be {want}: [N, {per_tap} * deformable_groups * kh * kw, *output]")
    ctx.set_output("Output", [x.shape[0], m, *out], x.dtype)


@dataclass
class _Deformed:
    """What the kernels of deformable_conv share: the bilinear taps of every (image, deformable group) at every
    kernel point and output position (index and weight [N dg, kh kw oh ow]), X as [N dg, C / dg, H W], X sampled
    there ([N dg, C / dg, kh kw oh ow]) and the Mask ([N dg, 1, kh kw oh ow]; ones without one)."""

    taps: list[_GridTap]
    xf: Any
    sampled: Any
    mask: Any


def _deform(ctx: KernelContext, x: Any, offset: Any, mask: Any, w: Any) -> _Deformed:
    xp, attrs = ctx.xp, ctx.attrs
    n, c, h, width = x.shape
    kh, kw = w.shape[2:]
    dg = attrs["deformable_groups"]
    oh, ow = _deform_out(attrs, (h, width), (kh, kw))
    k, q = kh * kw, oh * ow
    if tuple(offset.shape) != (n, 2 * dg * k, oh, ow) or (mask is not None and mask.shape != (n, dg * k, oh, ow)):
        raise kernel_error(
            ctx,
            f"deformable_conv: Offset {list(offset.shape)} must be {[n, 2 * dg * k, oh, ow]} and Mask "
            f"{None if mask is None else list(mask.shape)} {[n, dg * k, oh, ow]} for Input {list(x.shape)} and "
            f"Filter {list(w.shape)}",
        )
    (sh, sw), (ph, pw), (dh, dw) = attrs["strides"], attrs["paddings"], attrs["dilations"]
    rows = (xp.arange(kh) * dh)[:, None, None, None] + (xp.arange(oh) * sh - ph)[None, None, :, None]
    cols = (xp.arange(kw) * dw)[None, :, None, None] + (xp.arange(ow) * sw - pw)[None, None, None, :]
    moves = offset.reshape(n * dg, k, 2, q)  # (dy, dx) per kernel point, as Paddle's and ONNX's
    positions = [
        (xp.broadcast_to(base, (kh, kw, oh, ow)).reshape(1, k, q) + moves[:, :, axis]).reshape(n * dg, k * q)
        for axis, base in enumerate((rows, cols))
    ]
    taps = _taps_at(xp, (h, width), positions, _ZERO_PADDED_BILINEAR)
    xf = x.reshape(n * dg, c // dg, h * width)
    sampled = sum(_grid_gather(xp, xf, t.index) * t.weight[:, None, :].astype(x.dtype) for t in taps)
    scale = xp.ones((n * dg, 1, k * q), dtype=x.dtype) if mask is None else mask.reshape(n * dg, 1, k * q)
    return _Deformed(taps, xf, sampled, scale)


def _deform_columns(x: Any, w: Any, groups: int, d: _Deformed) -> Any:
    """The columns [N, groups, C / groups * kh * kw, oh * ow] the filters multiply."""
    n, c = x.shape[:2]
    return (d.sampled * d.mask).reshape(n, groups, c // groups * w.shape[2] * w.shape[3], -1)


def _deformable_conv(ctx: KernelContext, x: Any, offset: Any, mask: Any, w: Any) -> Any:
    """Output = Filter @ columns per group; each column X bilinearly sampled (0 outside) at its tap's position
    moved by Offset, times Mask."""
    groups = ctx.attrs["groups"]
    cols = _deform_columns(x, w, groups, _deform(ctx, x, offset, mask, w))
    out = w.reshape(groups, w.shape[0] // groups, -1) @ cols
    return out.reshape(x.shape[0], w.shape[0], *_deform_out(ctx.attrs, x.shape[2:], w.shape[2:]))


def _deformable_conv_grad(
    ctx: KernelContext, x: Any, offset: Any, mask: Any, w: Any, dout: Any
) -> tuple[Any, Any, Any, Any]:
    """Filter@GRAD: dOutput @ columns^T; the columns' gradient (Filter^T @ dOutput) gives Mask@GRAD (times the
    samples), Input@GRAD (times the mask, scattered to the taps by their weights) and Offset@GRAD (through the
    taps' weights' derivatives by their positions)."""
    xp, groups = ctx.xp, ctx.attrs["groups"]
    n, c, h, width = x.shape
    d = _deform(ctx, x, offset, mask, w)
    dy = dout.reshape(n, groups, w.shape[0] // groups, -1)
    dw = dx = doffset = dmask = None
    if ctx.wants[3]:
        dw = (dy @ xp.swapaxes(_deform_columns(x, w, groups, d), -1, -2)).sum(axis=0).reshape(w.shape)
    dcols = (xp.swapaxes(w.reshape(groups, w.shape[0] // groups, -1), -1, -2) @ dy).reshape(d.sampled.shape)
    if ctx.wants[2]:
        dmask = (dcols * d.sampled).sum(axis=1).reshape(mask.shape)
    dsampled = dcols * d.mask
    if ctx.wants[0]:
        dx = _tap_scatter(xp, d.taps, dsampled, (d.xf.shape[0], d.xf.shape[1], h, width)).reshape(x.shape)
        dx = dx.astype(x.dtype)
    if ctx.wants[1]:
        rows, cols = _tap_position_grads(xp, d.xf, d.taps, dsampled)
        k = w.shape[2] * w.shape[3]
        doffset = xp.stack([g.reshape(rows.shape[0], k, -1) for g in (rows, cols)], axis=2).reshape(offset.shape)
        doffset = doffset.astype(offset.dtype)
    return dx, doffset, dmask, dw


DEFORMABLE_CONV_GRAD = OpSchema(
    "deformable_conv_grad",
    inputs=(Slot("Input"), Slot("Offset"), Slot("Mask", optional=True), Slot("Filter"), Slot("Output@GRAD")),
    outputs=(Slot("Input@GRAD"), Slot("Offset@GRAD"), Slot("Mask@GRAD"), Slot("Filter@GRAD")),
    attrs=_DEFORM_ATTRS,
    infer=infer_grads("Input", "Offset", "Mask", "Filter"),
    kernel=_deformable_conv_grad,
    doc="Gradient of deformable_conv.",
)
DEFORMABLE_CONV = OpSchema(
    "deformable_conv",
    inputs=(Slot("Input"), Slot("Offset"), Slot("Mask", optional=True), Slot("Filter")),
    outputs=(Slot("Output"),),
    attrs=_DEFORM_ATTRS,
    infer=_infer_deformable_conv,
    grad=lambda g: grad_op(
        g,
        DEFORMABLE_CONV_GRAD,
        ("Input", "Offset", "Mask", "Filter", "Output@GRAD"),
        ("Input", "Offset", "Mask", "Filter"),
    ),
    kernel=_deformable_conv,
    doc="Output [N, M, oh, ow]: Input [N, C, H, W] convolved with Filter [M, C / groups, kh, kw] (strides, "
    "paddings, dilations, groups), each tap read bilinearly (0 outside) at its position moved by Offset [N, 2 * "
    "deformable_groups * kh * kw, oh, ow] ((dy, dx) per kernel point, per group of C / deformable_groups channels) "
    "and times Mask [N, deformable_groups * kh * kw, oh, ow] (optional; DCN v2); im2col_step has no effect.",
)

SCHEMAS += (DEFORMABLE_CONV, DEFORMABLE_CONV_GRAD)
