"""Convolution and pooling ops with Paddle's semantics: ``conv2d``, ``depthwise_conv2d``, ``conv2d_transpose``,
``depthwise_conv2d_transpose``, ``pool2d``, ``max_pool2d_with_index``, their 3-D counterparts ``conv3d``,
``conv3d_transpose``, ``pool3d``, ``max_pool3d_with_index`` (NCDHW or NDHWC), and their gradients.

Kernels are written once against the array module ``ctx.xp``, and once for 2 or 3 spatial axes. Geometry follows
Paddle's kernels (``phi/kernels/funcs/pooling.*``, ``conv_op.h``), per spatial axis of size ``L``:

- ``paddings`` hold one value per axis (``[h, w]``, ``[d, h, w]``: both sides) or two (``[top, bottom, left,
  right]``, ``[front, back, top, bottom, left, right]``);
  ``padding_algorithm="SAME"`` replaces them by ``max((ceil(L / s) - 1) * s + k - L, 0)`` split with the
  smaller half first (conv2d: with the undilated filter size, and dilations become 1), ``"VALID"`` by 0.
- Output sizes, with C's truncating division (a size below 1 is an error): conv2d
  ``(L + p0 + p1 - (d * (k - 1) + 1)) / s + 1``; conv2d_transpose ``(L - 1) * s - p0 - p1 + d * (k - 1) + 1``
  (paddings resolved on its Input's size), or ``output_size`` in ``[that, that + s)``, or that plus
  ``output_padding`` (below ``max(s, d)``); pool2d ``(L - k + p0 + p1) / s + 1``, with ``s - 1``
  added before dividing under ``ceil_mode``; max_pool2d_with_index the same with ``p0 = p1`` (2 paddings).
- A pooling window ``o`` reads ``[o * s - p0, o * s - p0 + k)`` clipped to ``[0, L)``. Average pooling
  divides by the clipped area (``exclusive``) or by the area up to ``L + p0`` (Paddle's divisor, which
  measures the far side with the near padding); max pooling starts from Paddle's ``-FLT_MAX``, so an
  empty window gives it. ``global_pooling`` makes ``k = L`` and the paddings 0.
- ``adaptive``: the output size is ``ksize`` and, for average pooling and max_pool2d_with_index, window
  ``o`` is the bin ``[floor(o * L / O), ceil((o + 1) * L / O))``. pool2d's max pooling keeps regular
  windows of ``ksize`` (paddings 0) under ``adaptive``, as Paddle's kernels do.
- The gradient of max pooling goes to the first position of the window (row-major) holding its maximum,
  Paddle's rule (pool2d_grad: the first equal to Out; max_pool2d_with_index: Mask's position).

Loops run over filter taps, window taps or (adaptive) output bins, whichever is the smaller attribute-sized
range, never over batch items or pixels. A convolution is one gemm per group over the whole batch on
:func:`im2col`'s columns, in the op's layout (NCHW with many pixels per image: one batched matmul, a gemm per
image, :func:`_gemms`); :func:`col2im`, its adjoint, gives Input@GRAD (and is
conv2d_transpose's forward). NCHW with strides 1, where measured faster (:func:`_grid`), there is no im2col: each
filter tap's gemm reads the padded image where it lies and numpy's BLAS sums the taps' products
(:func:`_grid_product`, :func:`_grid_filter_grad`); on one small image with few output channels im2col's
columns are laid out on the padded width, each a contiguous stretch of the image (:func:`_wide_product`).
``docs/ops.md`` describes the kernels and ``benchmarks/bench_cnn.py`` times them.
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from functools import lru_cache, partial, reduce
from typing import Any, NamedTuple, NoReturn

import numpy as np

from blockir.ir.attrs import AttrType
from blockir.ir.schema import AttrDef, InferContext, KernelContext, OpSchema, Scratch, Slot
from blockir.ops import blas, depthwise
from blockir.ops.common import FLOATS, check_dtype, compatible, fmt, grad_op, infer_grads, kernel_error, same_dtype

_FLT_MAX = float(np.finfo(np.float32).max)
_BLAS_FLOATS = (np.dtype(np.float32), np.dtype(np.float64))
_LAYOUTS = {  # spatial dims -> data_format -> channel last
    2: {"NCHW": False, "AnyLayout": False, "NHWC": True},
    3: {"NCDHW": False, "AnyLayout": False, "NDHWC": True},
}
_CHANNEL_LAST = {**_LAYOUTS[2], **_LAYOUTS[3]}
_AXES = {2: "HW", 3: "DHW"}  # spatial dims -> the names of the spatial axes
_AXIS_WORDS = {2: "height, width", 3: "depth, height, width"}
_PAD_WORDS = {2: "[top, bottom, left, right]", 3: "[front, back, top, bottom, left, right]"}
_PADDING_ALGORITHMS = ("EXPLICIT", "SAME", "VALID")

Fail = Callable[[str], NoReturn]

# -- geometry ----------------------------------------------------------------------------------------


def _cdiv(a: int, b: int) -> int:
    """``a / b`` truncated toward zero (C's integer division)."""
    q = abs(a) // b
    return q if a >= 0 else -q


def _paddings(attrs: Mapping[str, Any], axis: int, size: int, k: int) -> tuple[int, int]:
    """The padding before and after spatial ``axis`` (in D, H, W order) of known ``size`` for window size ``k``;
    ``paddings`` hold one value per axis (both sides) or a (before, after) pair per axis."""
    algorithm = attrs["padding_algorithm"]
    if algorithm == "SAME":
        stride = attrs["strides"][axis]
        total = max((-(-size // stride) - 1) * stride + k - size, 0)
        return total // 2, total - total // 2
    if algorithm == "VALID":
        return 0, 0
    p = attrs["paddings"]
    return (p[axis], p[axis]) if len(p) == len(attrs["strides"]) else (p[2 * axis], p[2 * axis + 1])


def _channel_last(attrs: Mapping[str, Any]) -> bool:
    return _CHANNEL_LAST[attrs["data_format"]]


def _nchw(x: Any, channel_last: bool) -> Any:
    """A channel-last array (NHWC, NDHWC) as a channel-first view (NCHW, NCDHW); channel-first as it is."""
    return x.transpose(0, x.ndim - 1, *range(1, x.ndim - 1)) if channel_last else x


def _layout(y: Any, channel_last: bool) -> Any:
    """A channel-first result in the op's layout."""
    return y.transpose(0, *range(2, y.ndim), 1) if channel_last else y


def _spatial(shape: Sequence[int], channel_last: bool) -> tuple[int, ...]:
    return tuple(shape[1:-1]) if channel_last else tuple(shape[2:])


def _along(axis: int, index: int | slice) -> tuple[Any, ...]:
    """An index tuple selecting ``index`` on ``axis`` and everything on the axes before it."""
    return (*(slice(None),) * axis, index)


def _tap(start: int, stride: int, count: int) -> slice:
    """``count`` positions from ``start`` every ``stride``."""
    return slice(start, start + stride * (count - 1) + 1, stride)


def _pad_into(out: Any, x: Any, widths: Sequence[tuple[int, int]], value: float) -> Any:
    """``out``, of ``x``'s shape with its last ``len(widths)`` axes grown by ``widths``, holding ``x`` padded by
    ``value``: the borders set, then ``x`` copied in (numpy's pad takes some 0.1 ms of Python a call, as long as
    a 3x3 convolution's gemm over [1, 128, 7, 7])."""
    lead = x.ndim - len(widths)
    for axis, (size, (before, _)) in enumerate(zip(x.shape[lead:], widths)):
        out[_along(lead + axis, slice(before))] = value
        out[_along(lead + axis, slice(before + size, None))] = value
    out[(Ellipsis, *(slice(b, b + size) for size, (b, _) in zip(x.shape[lead:], widths)))] = x
    return out


def _strided(xp: Any, a: Any, shape: Sequence[int], strides: Sequence[int], writeable: bool = True) -> Any:
    """A view of ``a``'s memory of ``shape`` and ``strides`` (bytes) from its first element, as numpy's ``as_strided``;
    a C-contiguous numpy array by the ndarray constructor (1 us a call, where ``as_strided`` takes some 8 us of
    Python, a tenth of a small convolution's time)."""
    if xp is not np or not a.flags.c_contiguous:
        return xp.lib.stride_tricks.as_strided(a, shape, strides, **({} if writeable else {"writeable": False}))
    view = np.ndarray(shape, a.dtype, a, 0, strides)
    if not writeable:
        view.flags.writeable = False
    return view


def _padded_shape(x: Any, widths: Sequence[tuple[int, int]]) -> tuple[int, ...]:
    lead = x.ndim - len(widths)
    return (*x.shape[:lead], *(n + a + b for n, (a, b) in zip(x.shape[lead:], widths)))


def _pad(xp: Any, x: Any, widths: Sequence[tuple[int, int]], value: float = 0.0) -> Any:
    """``x`` padded on its last ``len(widths)`` axes (itself when every width is 0)."""
    if not any(a or b for a, b in widths):
        return x
    return _pad_into(xp.empty(_padded_shape(x, widths), x.dtype), x, widths, value)


# -- validation shared by inference --------------------------------------------------------------------


def _check_attrs(ctx: InferContext, slot: str, x: Any, ints: Mapping[str, int], dims: int) -> bool:
    """Fail unless input ``slot`` ``x`` has ``dims`` spatial dims and ``data_format``, ``padding_algorithm``,
    ``paddings`` and the INTS attributes in ``ints`` (name -> least value) are well formed; whether the layout is
    channel last (NHWC, NDHWC)."""
    layouts = _LAYOUTS[dims]
    if len(x.shape) != dims + 2:
        ctx.fail(f"{slot} {fmt(x)} must be {dims + 2}-D ({' or '.join(k for k in layouts if k != 'AnyLayout')})")
    data_format = ctx.attr("data_format")
    if data_format not in layouts:
        ctx.fail(f"data_format={data_format!r} is not one of {', '.join(layouts)}")
    algorithm = ctx.attr("padding_algorithm")
    if algorithm not in _PADDING_ALGORITHMS:
        ctx.fail(f"padding_algorithm={algorithm!r} is not one of {', '.join(_PADDING_ALGORITHMS)}")
    paddings = list(ctx.attr("paddings"))
    if len(paddings) not in (dims, 2 * dims) or any(p < 0 for p in paddings):
        ctx.fail(
            f"paddings={paddings} must hold {dims} ([{', '.join(_AXES[dims].lower())}]) or {2 * dims} "
            f"({_PAD_WORDS[dims]}) values >= 0"
        )
    for name, low in ints.items():
        _check_ints(ctx, name, low, dims)
    return layouts[data_format]


def _check_ints(ctx: InferContext, name: str, low: int, dims: int) -> None:
    values = list(ctx.attr(name))
    if len(values) != dims or any(v < low for v in values):
        ctx.fail(f"{name}={values} must hold {dims} values >= {low} ({_AXIS_WORDS[dims]})")


def _check_size(ctx: InferContext, x: Any, axis: int, out: int, what: str) -> int:
    if out < 1:
        name = _AXES[len(x.shape) - 2][axis]
        ctx.fail(f"input {fmt(x)}: {what} leave output {name} = {out}; it must be at least 1")
    return out


def _infer_attrs(ctx: InferContext, schema_attrs: Sequence[AttrDef]) -> dict[str, Any]:
    return {a.name: ctx.attr(a.name) for a in schema_attrs}


# -- conv2d and depthwise_conv2d ----------------------------------------------------------------------

_CONV_ATTRS = (
    AttrDef("strides", AttrType.INTS, [1, 1]),
    AttrDef("paddings", AttrType.INTS, [0, 0]),
    AttrDef("padding_algorithm", AttrType.STRING, "EXPLICIT"),
    AttrDef("groups", AttrType.INT, 1),
    AttrDef("dilations", AttrType.INTS, [1, 1]),
    AttrDef("data_format", AttrType.STRING, "NCHW"),
    # CUDA's depthwise kernel applies relu to Input first; so do these kernels
    AttrDef("fuse_relu_before_depthwise_conv", AttrType.BOOLEAN, False),
    # accepted, no effect on the result: kernel choice, int8 scales (float inputs only here), tuning
    AttrDef("is_test", AttrType.BOOLEAN, False),
    AttrDef("use_cudnn", AttrType.BOOLEAN, False),
    AttrDef("use_mkldnn", AttrType.BOOLEAN, False),
    AttrDef("use_quantizer", AttrType.BOOLEAN, False),
    AttrDef("mkldnn_data_type", AttrType.STRING, "float32"),
    AttrDef("Scale_in", AttrType.FLOAT, 1.0),
    AttrDef("Scale_out", AttrType.FLOAT, 1.0),
    AttrDef("Scale_in_eltwise", AttrType.FLOAT, 1.0),
    AttrDef("Scale_weights", AttrType.FLOATS, [1.0]),
    AttrDef("force_fp32_output", AttrType.BOOLEAN, False),
    AttrDef("workspace_size_MB", AttrType.INT, 512),
    AttrDef("exhaustive_search", AttrType.BOOLEAN, False),
    # oneDNN fusions and cuDNN's add-to gradient: refused unless off (see _ONEDNN_FUSIONS, _infer_conv_grad)
    AttrDef("fuse_relu", AttrType.BOOLEAN, False),
    AttrDef("fuse_brelu", AttrType.BOOLEAN, False),
    AttrDef("fuse_brelu_threshold", AttrType.FLOAT, 6.0),
    AttrDef("fuse_activation", AttrType.STRING, ""),
    AttrDef("fuse_alpha", AttrType.FLOAT, 0.0),
    AttrDef("fuse_beta", AttrType.FLOAT, 0.0),
    AttrDef("fuse_residual_connection", AttrType.BOOLEAN, False),
    AttrDef("use_addto", AttrType.BOOLEAN, False),
)
_ONEDNN_FUSIONS = {"fuse_relu": False, "fuse_brelu": False, "fuse_activation": "", "fuse_residual_connection": False}


def _attrs_3d(attrs: tuple[AttrDef, ...]) -> tuple[AttrDef, ...]:
    """A 2-D op's attributes ``attrs`` with the defaults of its 3-D counterpart (conv3d, pool3d, ...)."""
    defaults = {"strides": [1, 1, 1], "paddings": [0, 0, 0], "dilations": [1, 1, 1], "data_format": "NCDHW"}
    return tuple(AttrDef(a.name, a.type, defaults[a.name]) if a.name in defaults else a for a in attrs)


@dataclass(frozen=True)
class ConvGeometry:
    """Where a convolution's taps read its padded input: paddings (the far ones grown to cover every tap),
    dilations, strides, filter and output sizes, per spatial axis (H, W; D, H, W)."""

    pads: tuple[tuple[int, int], ...]
    dilations: tuple[int, ...]
    strides: tuple[int, ...]
    ksize: tuple[int, ...]
    out: tuple[int, ...]
    _pointwise: bool = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        pointwise = all(k == 1 for k in self.ksize) and all(s == 1 for s in self.strides)
        object.__setattr__(self, "_pointwise", pointwise and not any(map(any, self.pads)))

    def pointwise(self) -> bool:
        """Whether output pixel ``p`` reads input pixel ``p`` alone (a 1x1 filter, strides 1, no padding): the
        input is its own im2col."""
        return self._pointwise


def _conv_axis(attrs: Mapping[str, Any], axis: int, size: int, k: int) -> tuple[int, int, int, int]:
    """(padding before, padding after, dilation, output size) of spatial ``axis`` of known ``size``."""
    before, after = _paddings(attrs, axis, size, k)
    dilation = 1 if attrs["padding_algorithm"] == "SAME" else attrs["dilations"][axis]
    out = _cdiv(size + before + after - (dilation * (k - 1) + 1), attrs["strides"][axis]) + 1
    return before, after, dilation, out


def _conv_geometry(ctx: KernelContext, x_shape: Sequence[int], w_shape: Sequence[int]) -> ConvGeometry:
    """The geometry of a convolution of channel-first ``x_shape`` by ``w_shape``; a kernel error when the
    shapes do not fit (inference may have seen -1 dims)."""
    attrs, groups = ctx.attrs, ctx.attrs["groups"]
    if x_shape[1] != w_shape[1] * groups or w_shape[0] % groups:
        raise kernel_error(
            ctx,
            f"Input with {x_shape[1]} channels (NCHW {list(x_shape)}) and Filter {list(w_shape)} do not fit "
            f"groups={groups}: Input channels must be Filter dim 1 * groups and Filter dim 0 divisible by groups",
        )
    geo = _spatial_geometry(
        tuple(x_shape[2:]),
        tuple(w_shape[2:]),
        attrs["padding_algorithm"],
        tuple(attrs["strides"]),
        tuple(attrs["paddings"]),
        tuple(attrs["dilations"]),
    )
    if min(geo.out) < 1:
        raise kernel_error(ctx, f"Input {list(x_shape)} and Filter {list(w_shape)} give output size {list(geo.out)}")
    return geo


@lru_cache(maxsize=1024)
def _spatial_geometry(
    sizes: tuple[int, ...],
    ksize: tuple[int, ...],
    padding_algorithm: str,
    strides: tuple[int, ...],
    paddings: tuple[int, ...],
    dilations: tuple[int, ...],
) -> ConvGeometry:
    """:func:`_conv_geometry` of spatial ``sizes`` by taps ``ksize`` under these attributes (output sizes below 1
    included: the caller refuses them), remembered: a plan's convolutions ask for the same few geometries at every
    run, and making one takes some 14 us of Python, two thirds of the gemm of a 1x1 convolution over [1, 48, 14,
    14]."""
    attrs = {"padding_algorithm": padding_algorithm, "strides": strides, "paddings": paddings, "dilations": dilations}
    axes = [_conv_axis(attrs, a, size, k) for a, (size, k) in enumerate(zip(sizes, ksize))]
    # C's division can leave the last taps past the far padding (Paddle reads zeros there): pad further
    pads = tuple(
        (b, max(a, (o - 1) * s + d * (k - 1) + 1 - size - b))
        for (b, a, d, o), s, k, size in zip(axes, strides, ksize, sizes)
    )
    return ConvGeometry(pads, tuple(a[2] for a in axes), strides, ksize, tuple(a[3] for a in axes))


def _columns_order(channel_last: bool, per_image: bool, dims: int) -> tuple[int, ...]:
    """The axes of _taps' view, ``(N, groups, C / groups, *taps, *outputs)``, in the order of a layout's im2col
    columns: channel first ``[groups, (C / groups, *taps), (N, *outputs)]`` (the filter's order; one gemm over the
    whole batch, its product transposed to NCHW after) or, ``per_image``, ``[N, groups, (C / groups, *taps),
    outputs]`` (the view's own order; a gemm per image, whose products are NCHW as they are), channel last
    ``[(N, *outputs), groups, (*taps, C / groups)]`` (the input's; one gemm over the batch, its product in its
    layout as it is)."""
    taps, outputs = tuple(range(3, 3 + dims)), tuple(range(3 + dims, 3 + 2 * dims))
    if channel_last:
        return (0, *outputs, 1, *taps, 2)
    return (0, 1, 2, *taps, *outputs) if per_image else (1, 2, *taps, 0, *outputs)


_ORDERS = ((False, False), (False, True), (True, False))  # (channel last, per image)
_COLUMNS = {(*order, dims): _columns_order(*order, dims) for order in _ORDERS for dims in (2, 3)}
_COLUMNS_INVERSE = {k: tuple(int(a) for a in np.argsort(v)) for k, v in _COLUMNS.items()}


def _padded_image(xp: Any, x: Any, geo: ConvGeometry, channel_last: bool, scratch: Scratch | None = None) -> Any:
    """``x`` (channel first or last) padded with zeros by ``geo.pads``; with ``scratch``, in its buffer 1."""
    widths = [*geo.pads, (0, 0)] if channel_last else list(geo.pads)
    if scratch is None or not any(a or b for a, b in widths):
        return _pad(xp, x, widths)
    return _pad_into(scratch.empty(xp, 1, _padded_shape(x, widths), x.dtype), x, widths, 0.0)


def _taps(xp: Any, padded: Any, geo: ConvGeometry, groups: int, channel_last: bool) -> Any:
    """Every filter tap of every output pixel of ``padded`` (an image padded by ``geo.pads``, channel first or
    last) as one strided view, axes ``(N, groups, C / groups, *taps, *outputs)`` (2-D: ``kh, kw, OH, OW``). For
    one tap the view holds each position at most once, so that adding into it adds once."""
    if channel_last:
        n, c = padded.shape[0], padded.shape[-1]
        s_n, *s_spatial, s_c = padded.strides
    else:
        n, c = padded.shape[:2]
        s_n, s_c, *s_spatial = padded.strides
    per_group = c // groups
    shape = (n, groups, per_group, *geo.ksize, *geo.out)
    taps = tuple(s * d for s, d in zip(s_spatial, geo.dilations))
    strides = (s_n, s_c * per_group, s_c, *taps, *(s * step for s, step in zip(s_spatial, geo.strides)))
    return _strided(xp, padded, shape, strides)


def im2col(
    xp: Any,
    x: Any,
    geo: ConvGeometry,
    groups: int,
    channel_last: bool,
    scratch: Scratch | None = None,
    per_image: bool = False,
) -> Any:
    """The input pixels each output pixel of a convolution of ``x`` reads, as the matrices of its gemms, one
    copy through a strided view: channel first ``[groups, C / groups * taps, N * pixels]`` (rows in the
    filter's (channel, tap) order; 2-D: taps = kh * kw, pixels = OH * OW) or, ``per_image``, ``[N, groups,
    C / groups * taps, pixels]``, channel last ``[N * pixels, groups, taps * C / groups]`` ((tap, channel)
    order). With ``scratch``, the copy goes into its buffer 0 (the caller's to use within its call only), the padded
    image into its buffer 1."""
    view = _taps(xp, _padded_image(xp, x, geo, channel_last, scratch), geo, groups, channel_last).transpose(
        _COLUMNS[channel_last, per_image, len(geo.out)]
    )
    if scratch is None:
        cols = xp.ascontiguousarray(view)
    else:
        cols = scratch.empty(xp, 0, view.shape, view.dtype)
        xp.copyto(cols, view)
    n, pixels = x.shape[0], math.prod(geo.out)
    if channel_last:
        return cols.reshape(n * pixels, groups, -1)
    return cols.reshape(n, groups, -1, pixels) if per_image else cols.reshape(groups, -1, n * pixels)


def col2im(
    xp: Any,
    cols: Any,
    shape: Sequence[int],
    geo: ConvGeometry,
    groups: int,
    channel_last: bool,
    per_image: bool = False,
) -> Any:
    """The adjoint of :func:`im2col`: the image of ``shape`` (channel first or last) that receives each value of
    ``cols`` (im2col's matrices of that image in the order ``per_image`` says, or any array of their values in
    that order) added at the position it was read from; positions that several taps read receive the sum.

    conv2d_grad's Input@GRAD is the col2im of Filter^T times Output@GRAD, and conv2d_transpose's forward (whose
    output is such an image, its input the Output@GRAD) is the same computation: both call this. One strided add
    per filter tap over the whole batch; the result is a view into the padded sum."""
    n, c, sizes = shape[0], shape[-1 if channel_last else 1], _spatial(shape, channel_last)
    padded_sizes = tuple(size + before + after for size, (before, after) in zip(sizes, geo.pads))
    padded = xp.zeros((n, *padded_sizes, c) if channel_last else (n, c, *padded_sizes), dtype=cols.dtype)
    windows = _taps(xp, padded, geo, groups, channel_last)
    key = (channel_last, per_image, len(sizes))
    taps = cols.reshape([windows.shape[a] for a in _COLUMNS[key]]).transpose(_COLUMNS_INVERSE[key])
    for tap in itertools.product(*map(range, geo.ksize)):
        index = (slice(None), slice(None), slice(None), *tap)
        window = windows[index]
        xp.add(window, taps[index], out=window)
    inside = tuple(slice(before, before + size) for size, (before, _) in zip(sizes, geo.pads))
    return padded[(slice(None), *inside)] if channel_last else padded[(slice(None), slice(None), *inside)]


def _conv_setup(ctx: KernelContext, x: Any, w: Any) -> tuple[Any, bool, ConvGeometry]:
    """(Input, after relu with ``fuse_relu_before_depthwise_conv``; whether the layout is NHWC; the geometry)."""
    channel_last = _channel_last(ctx.attrs)
    geo = _conv_geometry(ctx, _nchw(x, channel_last).shape, w.shape)
    return (ctx.xp.maximum(x, 0) if ctx.attrs["fuse_relu_before_depthwise_conv"] else x), channel_last, geo


class Gemms(NamedTuple):
    """How a convolution's gemms take their operands: whether the layout is channel last; whether the geometry is
    pointwise (Input is its own im2col: no copy); channel first, whether per image (one gemm per image, of the
    image's pixels, whose products are NCHW as they are) rather than one over the whole batch (its product and
    Output@GRAD transposed between ``[M, N, pixels]`` and NCHW)."""

    channel_last: bool
    pointwise: bool
    per_image: bool


def _gemms(channel_last: bool, pointwise: bool, geo: ConvGeometry, w_shape: Sequence[int]) -> Gemms:
    """The gemms of a convolution of geometry ``geo`` by a filter of ``w_shape`` (conv2d's order: ``[M, C /
    groups, *k]``): channel first, per image where Input is its own columns or an image has at least as many
    output pixels as the gemm's k (``C / groups * taps``): there the transposed copies cost more than the
    narrower gemms save. Measured (1 thread, 3x3 filters, batch 64; CPU time per image against batch-wide,
    forward / Filter@GRAD): 3 -> 32 channels at 32x32 0.4x / 0.5x, 32 -> 32 at 32x32 0.95x / 0.93x; 64 -> 64 at
    16x16 1.05x / 1.2x, 64 -> 128 at 8x8 1.0x / 1.4x, 512 -> 512 at 7x7 (batch 8) 1.3x / 1.9x."""
    per_image = not channel_last and (pointwise or math.prod(geo.out) >= math.prod(w_shape[1:]))
    return Gemms(channel_last, pointwise, per_image)


def _columns(xp: Any, x: Any, geo: ConvGeometry, groups: int, gemms: Gemms, scratch: Scratch) -> Any:
    """Input as the columns of the gemms: channel last ``[N * pixels, groups, K / groups]``; channel first ``[B,
    groups, K / groups, Q]``: per image B = N and Q = an image's output pixels (im2col's per-image matrices or,
    pointwise, Input itself), else B = 1 and Q = N * output pixels."""
    channel_last = gemms.channel_last
    if not gemms.pointwise:
        cols = im2col(xp, x, geo, groups, channel_last, scratch, gemms.per_image)
        return cols if channel_last or gemms.per_image else cols[None]
    if channel_last:
        return x.reshape(-1, groups, x.shape[-1] // groups)
    return x.reshape(x.shape[0], groups, x.shape[1] // groups, -1)


def _filters(w: Any, groups: int, channel_last: bool) -> Any:
    """Filter as the other operand of the gemms: channel first ``[groups, M / groups, K / groups]`` (rows in
    (channel, tap) order), channel last ``[groups, K / groups, M / groups]`` ((tap, channel) order, as its
    columns)."""
    m = w.shape[0]
    if channel_last:
        return w.transpose(0, *range(2, w.ndim), 1).reshape(groups, m // groups, -1).transpose(0, 2, 1)
    return w.reshape(groups, m // groups, -1)


def _outputs(xp: Any, out: Any, m: int, groups: int, gemms: Gemms) -> Any:
    """An array of a convolution's Output shape (Output@GRAD; conv2d_transpose's Input) as the gemms' operand
    against the columns: channel last ``[groups, N * pixels, M / groups]``; channel first ``[B, groups,
    M / groups, Q]`` (B and Q as :func:`_columns`'; per image a view, else a transposed copy)."""
    n = out.shape[0]
    if gemms.channel_last:
        return out.reshape(-1, groups, m // groups).transpose(1, 0, 2)
    if gemms.per_image:
        return out.reshape(n, groups, m // groups, -1)
    d = xp.ascontiguousarray(out.reshape(n, groups, m // groups, -1).transpose(1, 2, 0, 3))
    return d.reshape(1, groups, m // groups, -1)


def _product(xp: Any, cols: Any, w: Any, geo: ConvGeometry, n: int, groups: int, gemms: Gemms) -> Any:
    """Filter times the columns of an ``n``-image batch, in the op's layout: the convolution's Output."""
    m, sizes = w.shape[0], geo.out
    filters = _filters(w, groups, gemms.channel_last)
    if gemms.channel_last:  # [groups, N * pixels, M / groups]: channel last once the groups are inside
        return xp.matmul(cols.transpose(1, 0, 2), filters).transpose(1, 0, 2).reshape(n, *sizes, m)
    out = xp.matmul(filters, cols)  # [B, groups, M / groups, Q]
    if gemms.per_image:
        return out.reshape(n, m, *sizes)
    return xp.ascontiguousarray(out.reshape(m, n, *sizes).transpose(1, 0, *range(2, 2 + len(sizes))))


def _filter_grad(xp: Any, d: Any, cols: Any, w_shape: Sequence[int], groups: int, channel_last: bool) -> Any:
    """Filter@GRAD: the Output-shaped ``d`` (:func:`_outputs`) times the columns, one gemm per group."""
    if channel_last:  # [groups, M / groups, (*taps, C / groups)]
        dw = xp.matmul(d.transpose(0, 2, 1), cols.transpose(1, 0, 2))
        last = len(w_shape) - 1
        return xp.ascontiguousarray(
            dw.reshape(w_shape[0], *w_shape[2:], w_shape[1]).transpose(0, last, *range(1, last))
        )
    return xp.matmul(d, cols.swapaxes(-1, -2)).sum(axis=0).reshape(w_shape)


def _image_grad(
    xp: Any, d: Any, w: Any, geo: ConvGeometry, shape: Sequence[int], groups: int, gemms: Gemms, spare: Any
) -> Any:
    """Input@GRAD of ``shape``: the col2im of Filter^T times the Output-shaped ``d`` (:func:`_outputs`), or,
    pointwise, that product itself; ``spare``: a buffer of the product's shape and order to write it in, or None."""
    channel_last = gemms.channel_last
    filters = _filters(w, groups, channel_last)
    if channel_last:  # [N * pixels, groups, K / groups]
        spare = None if spare is None else spare.transpose(1, 0, 2)
        dcols = xp.matmul(d, filters.transpose(0, 2, 1), out=spare).transpose(1, 0, 2)
    else:
        dcols = xp.matmul(filters.swapaxes(-1, -2), d, out=spare)  # [B, groups, K / groups, Q]
    if gemms.pointwise:
        return dcols.reshape(shape)
    return col2im(xp, dcols, shape, geo, groups, channel_last, gemms.per_image)


# The padded grid's taps (:func:`_grid_product`) replace im2col where a group has _GRID_MIN_CHANNELS to
# _GRID_MAX_FILTERS output channels, at most _GRID_FILTERS_PER_CHANNEL per input channel, the grid spans at most
# _GRID_MAX_SPAN times the output's pixels, and im2col's columns would hold at least _GRID_MIN_COLUMNS elements:
# measured, docs/ops.md.
_GRID_MIN_CHANNELS = 16
_GRID_MAX_FILTERS = 64
_GRID_FILTERS_PER_CHANNEL = 1.0
_GRID_MAX_SPAN = 1.15
_GRID_MIN_COLUMNS = 1 << 19


def _grid(xp: Any, n: int, geo: ConvGeometry, w_shape: Sequence[int], groups: int, channel_last: bool) -> bool:
    """Whether a convolution of ``n`` images of geometry ``geo`` by a filter of ``w_shape`` (``[M, C / groups,
    *k]``) takes the padded grid's taps rather than im2col: numpy (its BLAS), channel first, 2-D, strides 1, not
    pointwise, and the measured rule (the constants above): the taps' gemms have a k of C / groups where im2col's
    has 9 times that, and im2col's copy costs 1 / M of its gemm's work, so the grid pays with many input channels
    and few output channels (too few of either make the taps' gemms too thin or too short); small images make the
    grid's columns past the output a large share; columns that stay in the cache make im2col's copy cheap."""
    if xp is not np or channel_last or len(geo.out) != 2 or geo.pointwise() or any(s != 1 for s in geo.strides):
        return False
    filters, pixels = w_shape[0] // groups, math.prod(geo.out)
    return (
        _GRID_MIN_CHANNELS <= filters <= min(_GRID_MAX_FILTERS, _GRID_FILTERS_PER_CHANNEL * w_shape[1])
        and _grid_span(geo) <= _GRID_MAX_SPAN * pixels
        and n * groups * math.prod(w_shape[1:]) * pixels >= _GRID_MIN_COLUMNS
    )


def _grid_sizes(geo: ConvGeometry) -> list[int]:
    """The padded image's sizes under strides 1: each output size plus the dilated filter's extent less one."""
    return [o + d * (k - 1) for o, d, k in zip(geo.out, geo.dilations, geo.ksize)]


def _grid_span(geo: ConvGeometry) -> int:
    """How many positions of a padded image (flattened) a tap's matrix spans: from the first output pixel to the
    last on the padded grid, the output's rows at the padded width (2-D ``(OH - 1) * Wp + OW``)."""
    sizes = _grid_sizes(geo)
    return sum((o - 1) * math.prod(sizes[a + 1 :]) for a, o in enumerate(geo.out)) + 1


def _grid_inside(geo: ConvGeometry) -> tuple[Any, ...]:
    """The index of the output's pixels in an array on the padded grid (:func:`_grid_outputs`)."""
    return (Ellipsis, *(slice(o) for o in geo.out[1:]))


def _grid_taps(xp: Any, x: Any, geo: ConvGeometry, groups: int, scratch: Scratch) -> Any:
    """Channel-first ``x`` padded with zeros by ``geo.pads`` (strides 1) into ``scratch``'s buffer 0, each filter
    tap of each image and group as a matrix ``[C / groups, span]`` read in place (:func:`_grid_span`): the padded
    image's channels flattened, from the tap's offset on (2-D ``i * dh * Wp + j * dw``), ``Hp * Wp`` apart. One
    strided view, axes ``(N, groups, *taps, C / groups, span)``."""
    padded = _pad_into(scratch.empty(xp, 0, (*x.shape[:2], *_grid_sizes(geo)), x.dtype), x, geo.pads, 0.0)
    (n, c), (s_n, s_c, *s_spatial) = padded.shape[:2], padded.strides
    per_group = c // groups
    shape = (n, groups, *geo.ksize, per_group, _grid_span(geo))
    strides = (s_n, s_c * per_group, *(s * d for s, d in zip(s_spatial, geo.dilations)), s_c, padded.itemsize)
    return _strided(xp, padded, shape, strides, writeable=False)


def _grid_outputs(
    xp: Any, n: int, m: int, geo: ConvGeometry, groups: int, dtype: Any, scratch: Scratch
) -> tuple[Any, Any]:
    """(an Output on the padded grid, uninitialised, ``scratch``'s buffer 1: ``[N, M, OH, Wp]``, the columns past
    OW not the output's; its matrices against :func:`_grid_taps`', ``[N, groups, *1 per tap axis, M / groups,
    span]``)."""
    grid = scratch.empty(xp, 1, (n, m, geo.out[0], *_grid_sizes(geo)[1:]), dtype)
    shape = (n, groups, *(1,) * len(geo.out), m // groups, -1)
    return grid, grid.reshape(shape)[..., : _grid_span(geo)]


def _grid_product(xp: Any, x: Any, w: Any, geo: ConvGeometry, groups: int, channel_last: bool, scratch: Scratch) -> Any:
    """Filter ``w`` (*) channel-first ``x`` without im2col where :func:`_grid` says so, else None: per image, group
    and tap, the tap's filter ``[M / groups, C / groups]`` times its matrix of the padded image (:func:`_grid_taps`)
    added into the output on the padded grid by BLAS's gemm with beta = 1 (:func:`blockir.ops.blas.gemm`), the
    output's columns copied out after. None too where numpy's BLAS has no gemm for the dtype."""
    if not _grid(xp, x.shape[0], geo, w.shape, groups, channel_last):
        return None
    m, per_group, *ksize = w.shape
    filters = w.reshape(groups, m // groups, per_group, *ksize).transpose(0, *range(3, 3 + len(ksize)), 1, 2)
    grid, product = _grid_outputs(xp, x.shape[0], m, geo, groups, x.dtype, scratch)
    grid.fill(0)
    if not blas.gemm(product, xp.ascontiguousarray(filters), _grid_taps(xp, x, geo, groups, scratch), 1.0, 1.0):
        return None
    return grid[_grid_inside(geo)].copy()  # out of the scratch buffer, contiguous


# im2col's columns on the padded grid's width (:func:`_wide_product`) replace im2col's for at most _WIDE_MAX_IMAGES
# images of at most _WIDE_MAX_PIXELS output pixels each, by at most _WIDE_MAX_FILTERS output channels: measured,
# docs/ops.md.
_WIDE_MAX_IMAGES = 1
_WIDE_MAX_PIXELS = 196
_WIDE_MAX_FILTERS = 64


def _wide(xp: Any, n: int, geo: ConvGeometry, w_shape: Sequence[int], groups: int, channel_last: bool) -> bool:
    """Whether a convolution of ``n`` images of geometry ``geo`` by a filter of ``w_shape`` takes
    :func:`_wide_product` rather than im2col: numpy, channel first, 2-D, strides 1, one group, not pointwise, and
    the measured rule (the constants above): small images, whose im2col copies many short rows, and few output
    channels, whose gemm is cheap beside that copy (with more, or larger images, the gemm's columns past the output
    cost more than the copy saves; with more images, the per-image gemms lose to im2col's one over the batch)."""
    if xp is not np or channel_last or groups != 1 or len(geo.out) != 2 or geo.pointwise():
        return False
    return (
        all(s == 1 for s in geo.strides)
        and n <= _WIDE_MAX_IMAGES
        and math.prod(geo.out) <= _WIDE_MAX_PIXELS
        and w_shape[0] <= _WIDE_MAX_FILTERS
    )


def _wide_product(xp: Any, x: Any, w: Any, geo: ConvGeometry, groups: int, channel_last: bool, scratch: Scratch) -> Any:
    """Filter ``w`` (*) channel-first ``x`` where :func:`_wide` says so, else None: each image's im2col columns laid
    out on the padded image's width, ``[C * taps, OH * Wp]`` (output pixel ``(oh, ow)`` at ``oh * Wp + ow``, the
    ``Wp - OW`` columns past OW not the output's), so that each row is one contiguous stretch of the padded image
    (one copy of ``C * taps`` rows of ``OH * Wp`` values, where im2col copies ``C * taps * OH`` rows of OW: short
    rows, whose per-row cost dominates on small images); one gemm per image, the output's columns copied out after.
    The padded image (one zero row more, which the last tap's stretch reaches) is ``scratch``'s buffer 1, the
    columns its buffer 0 and the product its buffer 2."""
    if not _wide(xp, x.shape[0], geo, w.shape, groups, channel_last):
        return None
    (n, c), m, (oh, ow), (kh, kw) = x.shape[:2], w.shape[0], geo.out, geo.ksize
    hp, wp = _grid_sizes(geo)
    (top, bottom), sides = geo.pads
    padded = _pad_into(scratch.empty(xp, 1, (n, c, hp + 1, wp), x.dtype), x, [(top, bottom + 1), sides], 0.0)
    s_n, s_c, s_h, s_w = padded.strides
    dh, dw = geo.dilations
    view = _strided(xp, padded, (n, c, kh, kw, oh * wp), (s_n, s_c, s_h * dh, s_w * dw, s_w), writeable=False)
    cols = scratch.empty(xp, 0, view.shape, x.dtype)
    xp.copyto(cols, view)
    out = scratch.empty(xp, 2, (n, m, oh * wp), x.dtype)
    xp.matmul(w.reshape(m, -1), cols.reshape(n, -1, oh * wp), out=out)
    return out.reshape(n, m, oh, wp)[..., :ow].copy()  # out of the scratch buffer, contiguous


def _grid_filter_grad(
    xp: Any,
    x: Any,
    dout: Any,
    geo: ConvGeometry,
    w_shape: Sequence[int],
    groups: int,
    channel_last: bool,
    scratch: Scratch,
) -> Any:
    """Filter@GRAD without im2col where :func:`_grid` says so, else None: per tap and group, the sum over images of
    Output@GRAD on the padded grid (zeros past OW) times the tap's matrix of the padded image transposed
    (:func:`_grid_taps`), by BLAS's gemm with beta = 1; None too where numpy's BLAS has no gemm for the dtype."""
    if not _grid(xp, x.shape[0], geo, w_shape, groups, channel_last):
        return None
    dims = len(geo.out)
    grid, d = _grid_outputs(xp, dout.shape[0], w_shape[0], geo, groups, dout.dtype, scratch)
    for axis in range(1, dims):  # the grid's positions past the output, then the output's
        grid[_along(2 + axis, slice(geo.out[axis], None))] = 0
    grid[_grid_inside(geo)] = dout
    dw = xp.zeros((groups, *geo.ksize, w_shape[0] // groups, w_shape[1]), dout.dtype)
    if not blas.gemm(dw[None], d, _grid_taps(xp, x, geo, groups, scratch).swapaxes(-1, -2), 1.0, 1.0):
        return None
    return xp.ascontiguousarray(dw.transpose(0, dims + 1, dims + 2, *range(1, dims + 1))).reshape(w_shape)


def _flipped_geometry(geo: ConvGeometry, size: Sequence[int]) -> ConvGeometry | None:
    """The geometry of the convolution of Output@GRAD by the flipped filter whose output is Input@GRAD, of
    spatial ``size`` (the "full" correlation): strides 1 only, and paddings at most the dilated filter's extent
    less one (else None: the col2im then)."""
    if any(s != 1 for s in geo.strides):
        return None
    pads = tuple(
        (d * (k - 1) - before, n + before - out)  # the far padding: what brings the output back to ``n``
        for (before, _), d, k, n, out in zip(geo.pads, geo.dilations, geo.ksize, size, geo.out)
    )
    if any(p < 0 for pair in pads for p in pair):
        return None
    return ConvGeometry(pads, geo.dilations, (1,) * len(pads), geo.ksize, tuple(size))


def _flipped_filters(xp: Any, w: Any, groups: int) -> Any:
    """Filter ``[M, C / groups, *k]`` as the filter of its Input@GRAD's convolution: per group the channels
    swapped (``[C, M / groups, *k]``) and the taps reversed along every spatial axis."""
    m, per_group, *ksize = w.shape
    reverse = (slice(None, None, -1),) * len(ksize)
    flipped = w.reshape(groups, m // groups, per_group, *ksize).swapaxes(1, 2)[(Ellipsis, *reverse)]
    return xp.ascontiguousarray(flipped).reshape(groups * per_group, m // groups, *ksize)


def _direct_image_grad(ctx: KernelContext, dout: Any, w: Any, geo: ConvGeometry, shape: Sequence[int]) -> Any:
    """Input@GRAD of ``shape`` as a convolution of Output@GRAD (``dout``, the op's layout) by the flipped filter,
    when the geometry allows one (:func:`_flipped_geometry`) and it pays, else None: on the padded grid where
    :func:`_grid` takes that convolution (no im2col), else by im2col. The latter trades col2im's strided
    adds over the columns of Input's channels (C x taps per pixel) for an im2col of Output@GRAD (M x taps per
    pixel) and a gemm over a k of M x taps: measured (benchmarks/bench_cnn.py's layers, resnet's), it pays where
    C >= M and an image has at least 64 pixels (0.55-0.90x the col2im's time there; 1.6x at M = 4C, 3.7x at
    3 -> 32 channels, 1.6x for 512 channels at 7x7)."""
    channel_last, groups = _channel_last(ctx.attrs), ctx.attrs["groups"]
    sizes = _spatial(shape, channel_last)
    full = _flipped_geometry(geo, sizes)
    if full is None or full.pointwise():
        return None
    flipped = _flipped_filters(ctx.xp, w, groups)
    dx = _grid_product(ctx.xp, dout, flipped, full, groups, channel_last, ctx.scratch)
    if dx is not None or w.shape[1] * groups < w.shape[0] or math.prod(sizes) < 64:
        return dx
    gemms = _gemms(channel_last, False, full, flipped.shape)
    return _product(
        ctx.xp, _columns(ctx.xp, dout, full, groups, gemms, ctx.scratch), flipped, full, dout.shape[0], groups, gemms
    )


def _conv(ctx: KernelContext, x: Any, w: Any, *onednn: Any) -> Any:
    """Output = Filter (*) Input: on the padded grid without im2col where :func:`_grid` says so, by im2col's columns
    on the padded width where :func:`_wide` says so, else per group one gemm over the whole batch's im2col
    columns, or NCHW one per image (:func:`_gemms`: where images have many pixels, or a pointwise Input is its own
    columns).

    ``onednn``: oneDNN's optional slots (conv2d: Bias, ResidualData; conv3d: ResidualData), None: inference refuses
    them."""
    xp, groups = ctx.xp, ctx.attrs["groups"]
    x, channel_last, geo = _conv_setup(ctx, x, w)
    if depthwise.direct(xp, w.shape, groups, geo):
        return depthwise.conv(xp, x, w, geo, channel_last)
    out = _grid_product(xp, x, w, geo, groups, channel_last, ctx.scratch)
    if out is None:
        out = _wide_product(xp, x, w, geo, groups, channel_last, ctx.scratch)
    if out is not None:
        return out
    gemms = _gemms(channel_last, geo.pointwise(), geo, w.shape)
    return _product(xp, _columns(xp, x, geo, groups, gemms, ctx.scratch), w, geo, x.shape[0], groups, gemms)


def _conv_grad(ctx: KernelContext, x: Any, w: Any, dout: Any) -> tuple[Any, Any]:
    """Filter@GRAD: Output@GRAD times the columns (on the padded grid where :func:`_grid` says so); Input@GRAD: with
    strides 1, the convolution of Output@GRAD by the flipped filter (:func:`_direct_image_grad`), else the col2im of
    Filter^T times Output@GRAD (or, pointwise, that product itself). One gemm each per group over the whole batch,
    or NCHW per image (:func:`_gemms`)."""
    xp, groups = ctx.xp, ctx.attrs["groups"]
    x_in = x
    x, channel_last, geo = _conv_setup(ctx, x, w)
    if depthwise.direct(xp, w.shape, groups, geo, grad=True):
        dx, dw = depthwise.conv_grad(xp, x, w, dout, geo, channel_last, ctx.wants)
        return (dx * (x_in > 0) if dx is not None and ctx.attrs["fuse_relu_before_depthwise_conv"] else dx), dw
    gemms = _gemms(channel_last, geo.pointwise(), geo, w.shape)
    dx = d = cols = None
    dw = _grid_filter_grad(xp, x, dout, geo, w.shape, groups, channel_last, ctx.scratch) if ctx.wants[1] else None
    if ctx.wants[1] and dw is None:
        d = _outputs(xp, dout, w.shape[0], groups, gemms)
        cols = _columns(xp, x, geo, groups, gemms, ctx.scratch)
        dw = _filter_grad(xp, d, cols, w.shape, groups, channel_last)
    if ctx.wants[0]:
        dx = _direct_image_grad(ctx, dout, w, geo, x.shape)
    if ctx.wants[0] and dx is None:
        d = _outputs(xp, dout, w.shape[0], groups, gemms) if d is None else d
        # im2col's buffer, read by now, takes the product (its shape and order; a pointwise Input is not ours)
        spare = None if cols is None or gemms.pointwise or (channel_last and groups > 1) else cols
        dx = _image_grad(xp, d, w, geo, x.shape, groups, gemms, spare)
    if dx is not None and ctx.attrs["fuse_relu_before_depthwise_conv"]:
        dx = dx * (x_in > 0)
    return dx, dw


def _check_conv_inputs(
    ctx: InferContext, fusions: Mapping[str, Any], filter_layout: str, dims: int
) -> tuple[Any, Any, bool, int]:
    """(Input, Filter, whether channel last, groups) of a convolution of ``dims`` spatial dims, checked: dtypes,
    attributes, a Filter of ``dims + 2`` dims (``filter_layout``, then the taps), no oneDNN-only input slot bound
    and every oneDNN fusion in ``fusions`` (name -> its off value) off."""
    x, w = check_dtype(ctx, "Input", FLOATS), check_dtype(ctx, "Filter", FLOATS)
    same_dtype(ctx, x, w)
    channel_last = _check_attrs(ctx, "Input", x, {"strides": 1, "dilations": 1}, dims)
    for slot in ("Bias", "ResidualData"):
        if ctx.has_input(slot):
            ctx.fail(f"input {slot} is used only by Paddle's oneDNN fusion passes; add it with its own op instead")
    for name, off in fusions.items():
        if ctx.attr(name) != off:
            ctx.fail(f"{name}={ctx.attr(name)!r} asks for a oneDNN fusion; apply the activation or sum as its own op")
    groups = ctx.attr("groups")
    if groups < 1:
        ctx.fail(f"groups={groups} must be at least 1")
    if len(w.shape) != dims + 2:
        taps = ", ".join(f"k{a.lower()}" for a in _AXES[dims])
        ctx.fail(f"Filter {fmt(w)} must be {dims + 2}-D [{filter_layout}, {taps}]")
    return x, w, channel_last, groups


def _infer_conv(ctx: InferContext, dims: int) -> None:
    x, w, channel_last, groups = _check_conv_inputs(ctx, _ONEDNN_FUSIONS, "out channels, in channels / groups", dims)
    channels = x.shape[-1 if channel_last else 1]
    if not compatible(channels, w.shape[1] * groups if w.shape[1] >= 0 else -1):
        ctx.fail(
            f"Input {fmt(x)} has {channels} channels ({ctx.attr('data_format')}) but Filter {fmt(w)} with "
            f"groups={groups} needs {w.shape[1]} * {groups}"
        )
    if w.shape[0] >= 0 and w.shape[0] % groups:
        ctx.fail(f"Filter {fmt(w)}: its {w.shape[0]} output channels are not divisible by groups={groups}")
    attrs = _infer_attrs(ctx, _CONV_ATTRS)
    sizes = []
    for axis, size in enumerate(_spatial(x.shape, channel_last)):
        k = w.shape[2 + axis]
        if size < 0 or k < 0:
            sizes.append(-1)
        else:
            sizes.append(_check_size(ctx, x, axis, _conv_axis(attrs, axis, size, k)[3], f"Filter {fmt(w)}, paddings"))
    n, m = x.shape[0], w.shape[0]
    ctx.set_output("Output", (n, *sizes, m) if channel_last else (n, m, *sizes), x.dtype)


def _infer_conv_grad(ctx: InferContext) -> None:
    if ctx.attr("use_addto"):
        ctx.fail("use_addto=True (cuDNN adding Input@GRAD into its old value) is not supported")
    infer_grads("Input", "Filter")(ctx)


def _conv_schemas(
    op_type: str, doc: str, kernels: tuple[Any, Any, Any, Any], attrs: tuple[AttrDef, ...], optional: Sequence[str]
) -> tuple[OpSchema, OpSchema]:
    """A convolution op and its gradient op ``{op_type}_grad`` (Input, Filter, Output@GRAD -> Input@GRAD,
    Filter@GRAD). ``kernels``: (infer, kernel, the gradient's infer, the gradient's kernel); ``optional``: the
    forward's optional input slots, after Input and Filter."""
    infer, kernel, grad_infer, grad_kernel = kernels
    backward = OpSchema(
        f"{op_type}_grad",
        inputs=(Slot("Input"), Slot("Filter"), Slot("Output@GRAD")),
        outputs=(Slot("Input@GRAD"), Slot("Filter@GRAD")),
        attrs=attrs,
        infer=grad_infer,
        kernel=grad_kernel,
        doc=f"Gradient of {op_type}.",
    )
    forward = OpSchema(
        op_type,
        inputs=(Slot("Input"), Slot("Filter"), *(Slot(name, optional=True) for name in optional)),
        outputs=(Slot("Output"),),
        attrs=attrs,
        infer=infer,
        grad=lambda g: grad_op(g, backward, ("Input", "Filter", "Output@GRAD"), ("Input", "Filter")),
        kernel=kernel,
        doc=doc,
    )
    return forward, backward


_CONV_KERNELS = (partial(_infer_conv, dims=2), _conv, _infer_conv_grad, _conv_grad)
CONV2D, CONV2D_GRAD = _conv_schemas(
    "conv2d",
    "2-D convolution (cross-correlation) of Input by Filter [M, C / groups, kh, kw], NCHW or NHWC.",
    _CONV_KERNELS,
    _CONV_ATTRS,
    ("Bias", "ResidualData"),
)
DEPTHWISE_CONV2D, DEPTHWISE_CONV2D_GRAD = _conv_schemas(
    "depthwise_conv2d",
    "conv2d for groups = input channels (Paddle's depthwise kernels); the same semantics.",
    _CONV_KERNELS,
    _CONV_ATTRS,
    ("Bias", "ResidualData"),
)
CONV3D, CONV3D_GRAD = _conv_schemas(
    "conv3d",
    "3-D convolution (cross-correlation) of Input by Filter [M, C / groups, kd, kh, kw], NCDHW or NDHWC.",
    (partial(_infer_conv, dims=3), _conv, _infer_conv_grad, _conv_grad),
    _attrs_3d(_CONV_ATTRS),
    ("ResidualData",),
)

# -- conv2d_transpose and depthwise_conv2d_transpose -------------------------------------------------------
#
# conv2d_transpose by Filter [C, M / groups, kh, kw] is the adjoint of the convolution by the same Filter (read as
# conv2d's [M', C' / groups, ...] with M' = C) from an image of Output's shape to one of Input's: its Output is
# that convolution's Input@GRAD for an Output@GRAD equal to Input (col2im of Filter^T times Input), its Input@GRAD
# that convolution of Output@GRAD, and its Filter@GRAD conv2d_grad's Filter@GRAD with the roles of the two
# images exchanged. The geometry below is that convolution's: its output size is Input's.

_CONV_ATTR = {a.name: a for a in _CONV_ATTRS}
_CONV_TRANSPOSE_ATTRS = (
    *(_CONV_ATTR[name] for name in ("strides", "paddings", "padding_algorithm", "groups", "dilations")),
    AttrDef("output_padding", AttrType.INTS, []),
    AttrDef("output_size", AttrType.INTS, []),
    _CONV_ATTR["data_format"],
    # Paddle's extra attributes: accepted without effect, or (fuse_relu, fuse_activation) refused unless off
    *(
        _CONV_ATTR[name]
        for name in (
            "is_test",
            "use_cudnn",
            "use_mkldnn",
            "mkldnn_data_type",
            "force_fp32_output",
            "workspace_size_MB",
            "fuse_relu",
            "fuse_activation",
            "fuse_alpha",
            "fuse_beta",
        )
    ),
)
_TRANSPOSE_FUSIONS = {"fuse_relu": False, "fuse_activation": ""}


def _transpose_axis(attrs: Mapping[str, Any], axis: int, size: int, k: int) -> tuple[int, int, int, int]:
    """(padding before, padding after, dilation, Paddle's output size before output_size and output_padding) of
    conv2d_transpose along spatial ``axis`` of known Input ``size``: ``(size - 1) * stride - paddings + dilation *
    (k - 1) + 1``, the paddings (SAME and VALID too) resolved on Input's size as Paddle does."""
    before, after = _paddings(attrs, axis, size, k)
    dilation = 1 if attrs["padding_algorithm"] == "SAME" else attrs["dilations"][axis]
    return before, after, dilation, (size - 1) * attrs["strides"][axis] - before - after + dilation * (k - 1) + 1


def _transpose_size(attrs: Mapping[str, Any], axis: int, inferred: int, dilation: int, fail: Fail) -> int:
    """Output's size along ``axis``: ``output_size`` (in ``[inferred, inferred + stride)``), else ``inferred`` plus
    ``output_padding`` (below ``max(stride, dilation)``), else ``inferred``; ``fail`` (a message) otherwise."""
    stride, name = attrs["strides"][axis], _AXES[len(attrs["strides"])][axis]
    if attrs["output_size"]:
        size = attrs["output_size"][axis]
        if not inferred <= size < inferred + stride:
            fail(
                f"output_size {name} = {size} must be in [{inferred}, {inferred + stride}) (the size the paddings give)"
            )
        return int(size)
    if attrs["output_padding"]:
        pad = attrs["output_padding"][axis]
        if not 0 <= pad < max(stride, dilation):
            fail(f"output_padding {name} = {pad} must be in [0, {max(stride, dilation)}) (max(stride, dilation))")
        return int(inferred + pad)
    return inferred


def _transpose_geometry(
    ctx: KernelContext, x_shape: Sequence[int], w_shape: Sequence[int]
) -> tuple[ConvGeometry, tuple[int, ...]]:
    """The geometry of the convolution a transposed convolution of channel-first ``x_shape`` by ``w_shape`` is
    the adjoint of, and Output's spatial size; a kernel error when the shapes do not fit (inference may have seen
    -1 dims)."""
    attrs, groups = ctx.attrs, ctx.attrs["groups"]
    if x_shape[1] != w_shape[0] or w_shape[0] % groups:
        raise kernel_error(
            ctx,
            f"Input with {x_shape[1]} channels (channel first {list(x_shape)}) and Filter {list(w_shape)} do not "
            f"fit groups={groups}: Input channels must be Filter dim 0, divisible by groups",
        )

    def fail(message: str) -> NoReturn:
        raise kernel_error(ctx, f"Input {list(x_shape)}, Filter {list(w_shape)}: {message}")

    dims = len(x_shape) - 2
    pads, dilations, sizes = [], [], []
    for axis in range(dims):
        size, k = x_shape[2 + axis], w_shape[2 + axis]
        before, after, dilation, inferred = _transpose_axis(attrs, axis, size, k)
        out = _transpose_size(attrs, axis, inferred, dilation, fail)
        if out < 1:
            fail(f"output size {_AXES[dims][axis]} = {out}; it must be at least 1")
        # the taps reach (size - 1) * stride + dilation * (k - 1) + 1 rows of the padded Output
        reach = (size - 1) * attrs["strides"][axis] + dilation * (k - 1) + 1
        pads.append((before, max(after, reach - out - before)))
        dilations.append(dilation)
        sizes.append(out)
    geo = ConvGeometry(tuple(pads), tuple(dilations), tuple(attrs["strides"]), tuple(w_shape[2:]), tuple(x_shape[2:]))
    return geo, tuple(sizes)


def _transpose_setup(ctx: KernelContext, x: Any, w: Any) -> tuple[ConvGeometry, tuple[int, ...], Gemms]:
    """(the geometry, Output's shape in the op's layout, the gemms of the convolution it is the adjoint of (pointwise:
    a pointwise geometry whose Output has Input's size))."""
    channel_last = _channel_last(ctx.attrs)
    geo, sizes = _transpose_geometry(ctx, _nchw(x, channel_last).shape, w.shape)
    n, m = x.shape[0], w.shape[1] * ctx.attrs["groups"]
    shape = (n, *sizes, m) if channel_last else (n, m, *sizes)
    return geo, shape, _gemms(channel_last, geo.pointwise() and sizes == geo.out, geo, w.shape)


def _conv_transpose(ctx: KernelContext, x: Any, w: Any, *onednn: Any) -> Any:
    """Output: conv2d_grad's Input@GRAD computation of Input (a convolution by the flipped filter where the
    strides are 1, else the col2im of Filter^T times Input).

    ``onednn``: oneDNN's optional slot (conv2d_transpose: Bias; conv3d_transpose has none), None: inference
    refuses it."""
    xp, groups = ctx.xp, ctx.attrs["groups"]
    geo, shape, gemms = _transpose_setup(ctx, x, w)
    direct = _direct_image_grad(ctx, x, w, geo, shape)
    if direct is not None:
        return direct
    return _image_grad(xp, _outputs(xp, x, w.shape[0], groups, gemms), w, geo, shape, groups, gemms, None)


def _conv_transpose_grad(ctx: KernelContext, x: Any, w: Any, dout: Any) -> tuple[Any, Any]:
    """Input@GRAD: the convolution of Output@GRAD by Filter (conv2d's forward); Filter@GRAD: Input times the
    im2col columns of Output@GRAD (conv2d_grad's gemm). The columns are made once for both."""
    xp, groups = ctx.xp, ctx.attrs["groups"]
    geo, _, gemms = _transpose_setup(ctx, x, w)
    cols = _columns(xp, dout, geo, groups, gemms, ctx.scratch)
    dx = _product(xp, cols, w, geo, x.shape[0], groups, gemms) if ctx.wants[0] else None
    dw = None
    if ctx.wants[1]:
        dw = _filter_grad(xp, _outputs(xp, x, w.shape[0], groups, gemms), cols, w.shape, groups, gemms.channel_last)
    return dx, dw


def _infer_conv_transpose(ctx: InferContext, dims: int) -> None:
    x, w, channel_last, groups = _check_conv_inputs(ctx, _TRANSPOSE_FUSIONS, "in channels, out channels / groups", dims)
    channels = x.shape[-1 if channel_last else 1]
    if not compatible(channels, w.shape[0]):
        ctx.fail(
            f"Input {fmt(x)} has {channels} channels ({ctx.attr('data_format')}) but Filter {fmt(w)} takes "
            f"{w.shape[0]} (its dim 0)"
        )
    if channels >= 0 and channels % groups:
        ctx.fail(f"Input {fmt(x)}: its {channels} channels are not divisible by groups={groups}")
    attrs = _infer_attrs(ctx, _CONV_TRANSPOSE_ATTRS)
    for name in ("output_size", "output_padding"):
        values = list(attrs[name])
        if values and (len(values) != dims or any(v < 0 for v in values)):
            ctx.fail(f"{name}={values} must be empty or hold {dims} values >= 0 ({_AXIS_WORDS[dims]})")
    sizes = []
    for axis, size in enumerate(_spatial(x.shape, channel_last)):
        k = w.shape[2 + axis]
        if size < 0 or k < 0:
            sizes.append(attrs["output_size"][axis] if attrs["output_size"] else -1)
            continue
        _, _, dilation, inferred = _transpose_axis(attrs, axis, size, k)
        out = _transpose_size(
            attrs, axis, inferred, dilation, lambda m: ctx.fail(f"Input {fmt(x)}, Filter {fmt(w)}: {m}")
        )
        sizes.append(_check_size(ctx, x, axis, out, f"Filter {fmt(w)}, paddings"))
    n, m = x.shape[0], w.shape[1] * groups if w.shape[1] >= 0 else -1
    ctx.set_output("Output", (n, *sizes, m) if channel_last else (n, m, *sizes), x.dtype)


_TRANSPOSE_KERNELS = (
    partial(_infer_conv_transpose, dims=2),
    _conv_transpose,
    infer_grads("Input", "Filter"),
    _conv_transpose_grad,
)
CONV2D_TRANSPOSE, CONV2D_TRANSPOSE_GRAD = _conv_schemas(
    "conv2d_transpose",
    "2-D transposed convolution of Input by Filter [C, M / groups, kh, kw], NCHW or NHWC: the adjoint of conv2d.",
    _TRANSPOSE_KERNELS,
    _CONV_TRANSPOSE_ATTRS,
    ("Bias",),
)
DEPTHWISE_CONV2D_TRANSPOSE, DEPTHWISE_CONV2D_TRANSPOSE_GRAD = _conv_schemas(
    "depthwise_conv2d_transpose",
    "conv2d_transpose for groups = input channels (Paddle's depthwise kernels); the same semantics.",
    _TRANSPOSE_KERNELS,
    _CONV_TRANSPOSE_ATTRS,
    ("Bias",),
)
CONV3D_TRANSPOSE, CONV3D_TRANSPOSE_GRAD = _conv_schemas(
    "conv3d_transpose",
    "3-D transposed convolution of Input by Filter [C, M / groups, kd, kh, kw], NCDHW or NDHWC: the adjoint of conv3d.",
    (partial(_infer_conv_transpose, dims=3), *_TRANSPOSE_KERNELS[1:]),
    _attrs_3d(_CONV_TRANSPOSE_ATTRS),
    (),
)

# -- pooling windows -------------------------------------------------------------------------------------


@dataclass(frozen=True)
class _Windows:
    """The pooling windows along one spatial axis of ``size``: window ``o`` reads ``[starts[o], ends[o])``.

    Regular windows (``taps = (k, stride, pad before)``) start at ``o * stride - pad`` and span ``k`` before
    clipping; adaptive bins have no taps."""

    size: int
    starts: tuple[int, ...]
    ends: tuple[int, ...]
    taps: tuple[int, int, int] | None

    @staticmethod
    @lru_cache(maxsize=1024)
    def regular(size: int, out: int, k: int, stride: int, before: int) -> _Windows:
        starts = [o * stride - before for o in range(out)]
        return _Windows(
            size, tuple(max(s, 0) for s in starts), tuple(min(s + k, size) for s in starts), (k, stride, before)
        )

    @staticmethod
    @lru_cache(maxsize=1024)
    def adaptive(size: int, out: int) -> _Windows:
        return _Windows(
            size,
            tuple(o * size // out for o in range(out)),
            tuple(-(-(o + 1) * size // out) for o in range(out)),
            None,
        )

    @property
    def out(self) -> int:
        return len(self.starts)

    def uses_taps(self) -> bool:
        """Whether to loop over window taps rather than over windows (the shorter loop)."""
        return self.taps is not None and self.taps[0] <= self.out

    def counts(self) -> np.ndarray:
        """Positions per clipped window (Paddle's exclusive divisor; not clamped at 0, as in Paddle)."""
        return np.subtract(self.ends, self.starts)

    def regular_taps(self) -> tuple[int, int, int]:
        """``(k, stride, pad before)`` of regular windows (adaptive bins have none)."""
        if self.taps is None:
            raise TypeError("adaptive pooling bins have no taps")
        return self.taps

    def nominal(self) -> np.ndarray:
        """Paddle's non-exclusive divisor: the window clipped only past ``size + pad before``."""
        k, stride, before = self.regular_taps()
        starts = np.arange(self.out) * stride - before
        return np.minimum(starts + k, self.size + before) - starts

    def padding(self) -> tuple[int, int]:
        """Padding before and after that puts every tap inside the array."""
        k, stride, before = self.regular_taps()
        return before, max(0, (self.out - 1) * stride + k - before - self.size)

    @property
    def whole(self) -> bool:
        """Whether the one window is the whole (nonempty) axis: global pooling."""
        return self.size > 0 and self.starts == (0,) and self.ends == (self.size,)

    def tap_windows(self, i: int) -> tuple[int, int]:
        """The windows ``[first, last)`` whose tap ``i`` (at ``o * stride - pad before + i``) is inside the axis."""
        _, stride, before = self.regular_taps()
        first = max(0, -((i - before) // stride))
        return first, max(first, min(self.out, -((i - before - self.size) // stride)))

    def reduce(self, xp: Any, a: Any, axis: int, op: str) -> Any:
        """``a`` reduced (``"sum"`` or ``"max"``) over each window along ``axis``; empty windows give the
        identity (0, -inf). Regular windows take one pass per tap over the windows that read it inside the axis (no
        padded copy of ``a``), the first a copy of a tap that every window reads where there is one."""
        identity = 0.0 if op == "sum" else -np.inf
        shape = list(a.shape)
        shape[axis] = self.out
        if self.uses_taps():
            shifted = self.shifted(xp, a, axis, op)
            if shifted is not None:
                return shifted
            k, stride, before = self.regular_taps()
            spans = [self.tap_windows(i) for i in range(k)]

            def taps(i: int) -> Any:
                first, last = spans[i]
                return a[_along(axis, _tap(first * stride - before + i, stride, last - first))]

            full = next((i for i, span in enumerate(spans) if span == (0, self.out)), None)
            out = xp.full(shape, identity, dtype=a.dtype) if full is None else taps(full).copy()
            combine = xp.add if op == "sum" else xp.maximum
            for i, (first, last) in enumerate(spans):
                if i != full and last > first:
                    into = out[_along(axis, slice(first, last))]
                    combine(into, taps(i), out=into)
            return out
        out = xp.full(shape, identity, dtype=a.dtype)
        for o, (start, end) in enumerate(zip(self.starts, self.ends)):
            if end > start:
                window = a[_along(axis, slice(start, end))]
                out[_along(axis, o)] = window.sum(axis=axis) if op == "sum" else window.max(axis=axis)
        return out

    def shifted(self, xp: Any, a: Any, axis: int, op: str) -> Any:
        """:meth:`reduce` of regular windows of stride 1 by passes over ``a`` flattened, or None where it does not
        apply (another array module, a stride above 1, ``a`` not C-contiguous, a padding before of ``k`` or more,
        more windows than positions, an axis with nothing before it: LRN's channel windows over ``[1, 1, C, H *
        W]``, whose slices are contiguous already). Window ``o`` reads ``[o - pad, o - pad + k)``: per tap one pass
        over all of ``a`` against ``a`` shifted along the axis (contiguous reads, where a slice along the axis reads
        short rows of the axes after it), then the positions within ``k`` of either end, which read across into the
        neighbouring rows, taken again from their taps inside the axis. Measured against :meth:`reduce`'s slices
        (pool2d, 1 thread): 3x3 windows by 1 padded, average or max, over [1, 256, 28, 28] and [1, 576, 14, 14]
        0.39-0.49x the time, over [8, 64, 56, 56] 0.66x. Under strides the passes over every position cost more
        than they save (the last axis by 2: 0.76-0.98x at batch 1 but 1.05-1.33x at batch 64)."""
        k, stride, before = self.regular_taps()
        if xp is not np or stride != 1 or not a.flags.c_contiguous or not 0 <= before < k or self.out > self.size:
            return None
        if math.prod(a.shape[:axis]) == 1:  # one row: its slices are contiguous
            return None
        combine = np.add if op == "sum" else np.maximum
        flat, unit = a.reshape(-1), math.prod(a.shape[axis + 1 :])
        out = flat.copy()  # tap ``before``: position p itself
        n = out.size
        for i in range(k):
            shift = (i - before) * unit
            if 0 < shift < n:
                combine(out[: n - shift], flat[shift:], out=out[: n - shift])
            elif 0 < -shift < n:
                combine(out[-shift:], flat[: n + shift], out=out[-shift:])
        out = out.reshape(a.shape)
        for p in sorted({*range(min(before, self.size)), *range(max(0, self.size - (k - 1 - before)), self.size)}):
            taps = range(max(0, p - before), min(self.size, p - before + k))
            out[_along(axis, p)] = reduce(combine, (a[_along(axis, q)] for q in taps))
        return out if self.out == self.size else np.ascontiguousarray(out[_along(axis, slice(self.out))])

    def scatter(self, xp: Any, g: Any, axis: int) -> Any:
        """The adjoint of ``reduce(..., "sum")``: each window's value added to every position it reads."""
        shape = list(g.shape)
        if self.uses_taps():
            k, stride, _ = self.regular_taps()
            before, after = self.padding()
            shape[axis] = before + self.size + after
            padded = xp.zeros(shape, dtype=g.dtype)
            for i in range(k):
                padded[_along(axis, _tap(i, stride, self.out))] += g
            return padded[_along(axis, slice(before, before + self.size))]
        shape[axis] = self.size
        out = xp.zeros(shape, dtype=g.dtype)
        for o, (start, end) in enumerate(zip(self.starts, self.ends)):
            if end > start:
                out[_along(axis, slice(start, end))] += g[_along(axis, slice(o, o + 1))]
        return out


def _lowest(dtype: Any) -> float:
    """Paddle's initial value of max pooling, ``-FLT_MAX``, in ``dtype`` (float16: its lowest finite)."""
    return max(float(np.finfo(dtype).min), -_FLT_MAX)


def _reduce_windows(xp: Any, x: Any, windows: Sequence[_Windows], op: str) -> Any:
    """Channel-first ``x`` reduced (``"sum"`` or ``"max"``) over each window (one :class:`_Windows` per spatial
    axis; a new array): the axes whose window is the whole axis by one reduction, then the others outermost first,
    so that the passes along the innermost axis, whose reads are strided, run over the smallest array."""
    whole = tuple(2 + axis for axis, w in enumerate(windows) if w.whole)
    out = _reduce_whole(xp, x, whole, op) if whole else x
    for axis, w in enumerate(windows):
        if not w.whole:
            out = w.reduce(xp, out, 2 + axis, op)
    return out


def _reduce_whole(xp: Any, x: Any, axes: tuple[int, ...], op: str) -> Any:
    """``x`` reduced (``"sum"`` or ``"max"``) over ``axes``, kept with size 1. A sum over the trailing axes of a
    C-contiguous float32 or float64 array (global average pooling) is one matrix-vector product by ones (BLAS's):
    numpy's sum takes some 40 ns a row over rows of 49 values. Measured (1 thread, alternating): 0.36x the time
    over [1, 1024, 7, 7], 0.6x over [1, 512, 7, 7] and [1, 1000, 13, 13], 0.26-0.64x at batch 64 ([64, 512, 7, 7],
    [64, 256, 8, 8], [64, 64, 32, 32]); the rounding is a dot product's, as numpy's sum of so few values."""
    lead = x.ndim - len(axes)
    if op == "max" or axes != tuple(range(lead, x.ndim)) or x.dtype not in _BLAS_FLOATS or not x.flags.c_contiguous:
        return (x.sum if op == "sum" else x.max)(axis=axes, keepdims=True)
    rows = x.reshape(-1, math.prod(x.shape[lead:]))
    return xp.matmul(rows, xp.ones(rows.shape[1], x.dtype)).reshape(*x.shape[:lead], *(1,) * len(axes))


def _window_max(xp: Any, x: Any, windows: Sequence[_Windows]) -> Any:
    """The maximum of each window of channel-first ``x`` (one :class:`_Windows` per spatial axis), at least
    ``-FLT_MAX`` (Paddle's initial value). The floor is applied only where a maximum is below it: numpy's maximum
    by a scalar takes some 5x the time of the comparison."""
    out = _reduce_windows(xp, x, windows, "max")
    lowest = _lowest(x.dtype)
    if (out < lowest).any():
        xp.maximum(out, lowest, out=out)
    return out


def _flat(coords: Sequence[Any], sizes: Sequence[int]) -> Any:
    """The row-major position ``(d * H + h) * W + w`` of broadcastable coordinates in a plane of ``sizes``."""
    return reduce(lambda flat, axis: flat * sizes[axis] + coords[axis], range(1, len(sizes)), coords[0])


_ARGMAX_CHUNK = 1 << 20  # bytes of X per chunk of planes in _tap_argmax on the host


def _tap_argmax(xp: Any, x: Any, windows: Sequence[_Windows]) -> tuple[Any, Any]:
    """:func:`_window_argmax` over regular windows, one pass per window tap, branch free.

    Each tap's values (X padded with -inf, which never wins) are copied by one strided copy into a contiguous
    buffer, compared with the best so far (strictly greater: the first maximum stays) and folded in by ``fmax``
    (a NaN never wins, as in Paddle's comparison). The winning tap's offset in the plane grows with the tap's
    row-major order, so the offset of the last tap to beat the best is the largest offset of a winning tap:
    ``offset = max(offset, better * tap offset)``, two plain ufuncs. numpy's masked writes (``where``,
    ``copyto(..., where=)``) cost 10-30x a plain ufunc on random masks: with them this ran 3x slower than
    ``pool2d``'s maximum (1 thread, [64, 32, 32, 32], 2x2 windows by 2). On the host the planes go by chunks of
    about a MiB, so that a chunk's taps are read from the cache (1.8x faster than no chunks over [64, 32, 32, 32]
    with the caches cold; chunks of 256 KiB gain less, of 64 KiB lose: numpy's calls)."""
    regular = [w.regular_taps() for w in windows]
    sizes, outs = x.shape[2:], tuple(w.out for w in windows)
    planes = x.reshape(-1, *sizes)
    count = planes.shape[0]
    rows = max(1, _ARGMAX_CHUNK // max(1, planes[0].nbytes)) if xp is np else count
    lowest = _lowest(x.dtype)
    best = xp.empty((count, *outs), dtype=x.dtype)
    offset = xp.zeros((count, *outs), dtype=np.int32)
    chunk = (min(rows, count), *outs)
    value, better, share = xp.empty(chunk, x.dtype), xp.empty(chunk, np.bool_), xp.empty(chunk, np.int32)
    taps = list(itertools.product(*(range(k) for k, _, _ in regular)))
    steps = [(slice(None), *(_tap(i, s, o) for i, (_, s, _), o in zip(tap, regular, outs))) for tap in taps]
    pads = [w.padding() for w in windows]
    for low in range(0, count, rows):
        high = min(low + rows, count)
        padded = _pad(xp, planes[low:high], pads, -np.inf)
        top, at, n = best[low:high], offset[low:high], high - low
        xp.fmax(padded[steps[0]], lowest, out=top)  # the first tap's offset is 0; NaN and -inf: -FLT_MAX
        for tap, step in zip(taps[1:], steps[1:]):
            xp.copyto(value[:n], padded[step])
            xp.greater(value[:n], top, out=better[:n])
            xp.fmax(top, value[:n], out=top)
            xp.multiply(better[:n], np.int32(_flat(tap, sizes)), out=share[:n])
            xp.maximum(at, share[:n], out=at)
    starts = [np.arange(o) * stride - before for o, (_, stride, before) in zip(outs, regular)]
    offset += xp.asarray(_flat(np.ix_(*starts), sizes).astype(np.int32))
    empty = best <= lowest
    if bool(empty.any()):
        offset[empty] = -1
    shape = (*x.shape[:2], *outs)
    return best.reshape(shape), offset.reshape(shape)


def _window_argmax(xp: Any, x: Any, windows: Sequence[_Windows]) -> tuple[Any, Any]:
    """Each window's maximum and, as its row-major position in the plane (``h * W + w``; ``(d * H + h) * W + w``;
    int32), its first position in row-major order; Paddle's rule: values must beat ``-FLT_MAX``, else the maximum
    is ``-FLT_MAX`` and the position -1."""
    (n, c), sizes = x.shape[:2], x.shape[2:]
    taps = [w.taps for w in windows]
    outs = tuple(w.out for w in windows)
    if all(t is not None for t in taps) and math.prod(t[0] for t in taps if t) <= math.prod(outs):
        return _tap_argmax(xp, x, windows)
    lowest = _lowest(x.dtype)
    best = xp.full((n, c, *outs), lowest, dtype=x.dtype)
    index = xp.full(best.shape, -1, dtype=np.int32)
    for out in itertools.product(*(range(w.out) for w in windows)):
        bounds = [(w.starts[o], w.ends[o]) for w, o in zip(windows, out)]
        if any(end <= start for start, end in bounds):
            continue
        window = x[(slice(None), slice(None), *(slice(start, end) for start, end in bounds))].reshape(n, c, -1)
        top = window.argmax(axis=-1)
        value = window.max(axis=-1)
        better = value > lowest
        at = (slice(None), slice(None), *out)
        best[at] = xp.where(better, value, lowest)
        position: list[Any] = []  # the window's row-major position top as coordinates in the plane
        rest = top
        for start, end in reversed(bounds):
            position.insert(0, start + rest % (end - start))
            rest = rest // (end - start)
        index[at] = xp.where(better, _flat(position, sizes), -1)
    return best, index


def _first_max_grad(xp: Any, x: Any, out: Any, dout: Any, windows: Sequence[_Windows], scratch: Scratch) -> Any:
    """The gradient of max pooling over regular windows of channel-first ``x``: ``dout`` to the first tap
    (row-major) of each window whose value equals ``out`` (none where ``out`` did not beat ``-FLT_MAX``).

    Each tap's values of every window are gathered once, by one strided copy per tap into a tap-major buffer
    (``scratch``'s buffer 0); the comparisons, the first-hit rule and the products by ``dout`` then run over
    that contiguous buffer in place, and each tap's share goes back by one strided write (an add where windows
    overlap). numpy's ufuncs over strided views are some 10x slower than over contiguous arrays, and its strided
    copies faster than those ufuncs: measured against comparing and multiplying on the strided views (1 thread,
    CPU time), 0.7x-0.9x at 2x2 windows over [64, 32, 32, 32], 0.6x-0.8x at 3x3 windows by 2 over [8, 64, 56,
    56], within noise (0.9x-1.15x) over [64, 64, 16, 16]."""
    regular = [w.regular_taps() for w in windows]
    pads = [w.padding() for w in windows]
    padded = _pad(xp, x, pads, -np.inf)
    taps = [
        (slice(None), slice(None), *(_tap(i, s, w.out) for i, (_, s, _), w in zip(tap, regular, windows)))
        for tap in itertools.product(*(range(k) for k, _, _ in regular))
    ]
    values = scratch.empty(xp, 0, (len(taps), *out.shape), x.dtype)
    for value, index in zip(values, taps):
        xp.copyto(value, padded[index])
    hits = xp.equal(values, out)
    taken = out <= _lowest(x.dtype)
    for hit in hits:  # the first hit of each window: a hit not taken by an earlier tap
        xp.greater(hit, taken, out=hit)
        taken |= hit
    shares = xp.multiply(hits, dout, out=values)
    disjoint = all(stride >= k for k, stride, _ in regular)
    # windows side by side over the whole padded image write every position: no zeros first
    tiled = all(
        stride == k and k * w.out == size for (k, stride, _), w, size in zip(regular, windows, padded.shape[2:])
    )
    dx = (xp.empty if tiled else xp.zeros)(padded.shape, dtype=dout.dtype)
    for share, index in zip(shares, taps):
        if disjoint:
            xp.copyto(dx[index], share)
        else:
            window = dx[index]
            window += share
    return dx[(slice(None), slice(None), *(slice(b, b + size) for (b, _), size in zip(pads, x.shape[2:])))]


def _scatter_index(xp: Any, index: Any, dout: Any, shape: Sequence[int], distinct: bool = False) -> Any:
    """A channel-first array of ``shape`` receiving ``dout`` at plane positions ``index`` (-1: nowhere), summed.
    ``distinct``: the positions of a plane differ (windows that do not overlap): then, with none at -1, one
    assignment through the flat positions, else a ``bincount`` (3-4x as long: its float64 sums, then a cast)."""
    n, c, plane = shape[0], shape[1], math.prod(shape[2:])
    offsets = xp.arange(n * c, dtype=np.int64).reshape(n, c, *[1] * (len(shape) - 2)) * plane
    valid = index >= 0
    if distinct and bool(valid.all()):
        dx = xp.zeros(n * c * plane, dtype=dout.dtype)
        dx[(offsets + index).ravel()] = dout.ravel()
        return dx.reshape(shape)
    flat = (offsets + xp.where(valid, index, 0)).ravel()
    weights = xp.where(valid, dout, 0).ravel()
    return xp.bincount(flat, weights=weights, minlength=n * c * plane).astype(dout.dtype).reshape(shape)


# -- pool2d ------------------------------------------------------------------------------------------------

_POOL_ATTRS = (
    AttrDef("pooling_type", AttrType.STRING),
    AttrDef("ksize", AttrType.INTS),
    AttrDef("global_pooling", AttrType.BOOLEAN, False),
    AttrDef("strides", AttrType.INTS, [1, 1]),
    AttrDef("paddings", AttrType.INTS, [0, 0]),
    AttrDef("exclusive", AttrType.BOOLEAN, True),
    AttrDef("adaptive", AttrType.BOOLEAN, False),
    AttrDef("ceil_mode", AttrType.BOOLEAN, False),
    AttrDef("data_format", AttrType.STRING, "NCHW"),
    AttrDef("padding_algorithm", AttrType.STRING, "EXPLICIT"),
    # accepted, no effect on the result: kernel choice
    AttrDef("use_cudnn", AttrType.BOOLEAN, False),
    AttrDef("use_mkldnn", AttrType.BOOLEAN, False),
    AttrDef("use_quantizer", AttrType.BOOLEAN, False),
    AttrDef("mkldnn_data_type", AttrType.STRING, "float32"),
    AttrDef("is_test", AttrType.BOOLEAN, False),
)
_POOLING_TYPES = ("max", "avg")


def _pool_axis(attrs: Mapping[str, Any], axis: int, size: int) -> tuple[int, int, int]:
    """(window size, padding before, output size) of pool2d or pool3d along spatial ``axis`` (output -1 when ``size``
    is unknown and decides it)."""
    k = size if attrs["global_pooling"] else attrs["ksize"][axis]
    if attrs["adaptive"]:
        return k, 0, k
    if attrs["global_pooling"]:
        return k, 0, 1
    if size < 0:
        return k, 0, -1
    before, after = _paddings(attrs, axis, size, k)
    stride = attrs["strides"][axis]
    return k, before, _cdiv(size - k + before + after + (stride - 1 if attrs["ceil_mode"] else 0), stride) + 1


def _pool_windows(ctx: KernelContext, x: Any) -> list[_Windows]:
    """pool2d's or pool3d's windows along each spatial axis of channel-first ``x``."""
    attrs = ctx.attrs
    bins = attrs["adaptive"] and attrs["pooling_type"] == "avg"
    windows = []
    for axis, size in enumerate(x.shape[2:]):
        k, before, out = _pool_axis(attrs, axis, size)
        if out < 1:
            name = _AXES[x.ndim - 2][axis]
            raise kernel_error(ctx, f"X (channel first) {list(x.shape)} gives output size {out} along {name}")
        stride = attrs["strides"][axis]
        windows.append(_Windows.adaptive(size, out) if bins else _Windows.regular(size, out, k, stride, before))
    return windows


def _avg_divisor(ctx: KernelContext, windows: Sequence[_Windows], dtype: Any) -> Any:
    """Average pooling's divisors, broadcastable to Out's spatial axes: the outer product of each axis's, an
    axis whose windows all have one divisor taking one value (size 1), so that an axis of many windows of one
    size adds no array of its size (LRN's channel windows over ``[N, 1, C, H * W]``: ``[C, 1]``, not ``[C,
    H * W]``)."""
    exclusive = bool(ctx.attrs["exclusive"] or ctx.attrs["adaptive"])
    return ctx.xp.asarray(_divisors(tuple(windows), exclusive), dtype=dtype)


@lru_cache(maxsize=256)
def _divisors(windows: tuple[_Windows, ...], exclusive: bool) -> np.ndarray:
    """:func:`_avg_divisor`'s divisors on the host (read-only: shared by the calls with these windows, as the
    windows themselves are, so that a call builds neither: an axis of 3,136 windows takes a millisecond of
    Python)."""
    sizes = [w.counts() if exclusive else w.nominal() for w in windows]
    divisors = reduce(np.multiply.outer, [s[:1] if s.size and (s == s[0]).all() else s for s in sizes])
    divisors.setflags(write=False)
    return divisors


def _pool(ctx: KernelContext, x: Any) -> Any:
    xp, channel_last = ctx.xp, _channel_last(ctx.attrs)
    x = _nchw(x, channel_last)
    windows = _pool_windows(ctx, x)
    if ctx.attrs["pooling_type"] == "max":
        out = _window_max(xp, x, windows)
    else:
        out = _reduce_windows(xp, x, windows, "sum")
        out /= _avg_divisor(ctx, windows, x.dtype)
    return _layout(out, channel_last)


def _pool_grad(ctx: KernelContext, x: Any, out: Any, dout: Any) -> Any:
    """avg: Out@GRAD / divisor spread over each window; max: Out@GRAD to the window's first maximum (the first
    position equal to Out)."""
    xp, channel_last = ctx.xp, _channel_last(ctx.attrs)
    x, dout = _nchw(x, channel_last), _nchw(dout, channel_last)
    windows = _pool_windows(ctx, x)
    if ctx.attrs["pooling_type"] == "max" and all(w.uses_taps() for w in windows):
        dx = _first_max_grad(xp, x, _nchw(out, channel_last), dout, windows, ctx.scratch)
    elif ctx.attrs["pooling_type"] == "max":
        _, index = _window_argmax(xp, x, windows)
        dx = _scatter_index(xp, index, dout, x.shape)
    else:
        dx = dout / _avg_divisor(ctx, windows, dout.dtype)
        for axis, w in enumerate(windows):
            dx = w.scatter(xp, dx, 2 + axis)
    return _layout(dx, channel_last)


def _infer_pool(ctx: InferContext, dims: int) -> None:
    x = check_dtype(ctx, "X", FLOATS)
    channel_last = _check_attrs(ctx, "X", x, {"strides": 1}, dims)
    if ctx.attr("pooling_type") not in _POOLING_TYPES:
        ctx.fail(f"pooling_type={ctx.attr('pooling_type')!r} is not one of {', '.join(_POOLING_TYPES)}")
    ksize = list(ctx.attr("ksize"))
    if len(ksize) != dims or (not ctx.attr("global_pooling") and any(k < 1 for k in ksize)):
        ctx.fail(f"ksize={ksize} must hold {dims} values >= 1 ({_AXIS_WORDS[dims]}) unless global_pooling")
    attrs = _infer_attrs(ctx, _POOL_ATTRS)
    sizes = []
    for axis, size in enumerate(_spatial(x.shape, channel_last)):
        out = _pool_axis(attrs, axis, size)[2]
        sizes.append(out if out < 0 and size < 0 else _check_size(ctx, x, axis, out, f"ksize={ksize}, paddings"))
    n, c = x.shape[0], x.shape[-1 if channel_last else 1]
    ctx.set_output("Out", (n, *sizes, c) if channel_last else (n, c, *sizes), x.dtype, lod_level=x.lod_level)


def _pool_schemas(
    op_type: str, dims: int, attrs: tuple[AttrDef, ...], doc: str, with_index: bool = False
) -> tuple[OpSchema, OpSchema]:
    """A pooling op of ``dims`` spatial dims (pool2d, pool3d; ``with_index``: max_pool2d_with_index,
    max_pool3d_with_index) and its gradient op ``{op_type}_grad``, which reads X, Out (with_index: Mask) and
    Out@GRAD."""
    saved = "Mask" if with_index else "Out"
    backward = OpSchema(
        f"{op_type}_grad",
        inputs=(Slot("X"), Slot(saved), Slot("Out@GRAD")),
        outputs=(Slot("X@GRAD"),),
        attrs=attrs,
        infer=infer_grads("X"),
        kernel=_max_pool_with_index_grad if with_index else _pool_grad,
        doc=f"Gradient of {op_type}" + (": Out@GRAD added at Mask's positions." if with_index else "."),
    )
    forward = OpSchema(
        op_type,
        inputs=(Slot("X"),),
        outputs=(Slot("Out"), Slot("Mask", no_grad=True)) if with_index else (Slot("Out"),),
        attrs=attrs,
        infer=partial(_infer_max_pool_with_index if with_index else _infer_pool, dims=dims),
        grad=lambda g: grad_op(g, backward, ("X", saved, "Out@GRAD"), ("X",)),
        kernel=_max_pool_with_index if with_index else _pool,
        share_lod=() if with_index else (("X", "Out"),),
        doc=doc,
    )
    return forward, backward


POOL2D, POOL2D_GRAD = _pool_schemas(
    "pool2d", 2, _POOL_ATTRS, "Max or average pooling over windows of X (NCHW or NHWC), global or adaptive."
)
POOL3D, POOL3D_GRAD = _pool_schemas(
    "pool3d",
    3,
    _attrs_3d(_POOL_ATTRS),
    "Max or average pooling over 3-D windows of X (NCDHW or NDHWC), global or adaptive.",
)

# -- max_pool2d_with_index -------------------------------------------------------------------------------

_WITH_INDEX_ATTRS = (
    AttrDef("ksize", AttrType.INTS),
    AttrDef("strides", AttrType.INTS, [1, 1]),
    AttrDef("paddings", AttrType.INTS, [0, 0]),
    AttrDef("global_pooling", AttrType.BOOLEAN, False),
    AttrDef("adaptive", AttrType.BOOLEAN, False),
    AttrDef("ceil_mode", AttrType.BOOLEAN, False),
)


def _with_index_axis(attrs: Mapping[str, Any], axis: int, size: int) -> tuple[int, int, int]:
    """(window size, padding, output size) of max_pool2d_with_index along spatial ``axis``."""
    k = size if attrs["global_pooling"] else attrs["ksize"][axis]
    pad = 0 if attrs["global_pooling"] else attrs["paddings"][axis]
    if attrs["adaptive"]:
        return k, pad, k
    if attrs["global_pooling"]:
        return k, 0, 1
    if size < 0:
        return k, pad, -1
    stride = attrs["strides"][axis]
    return k, pad, _cdiv(size - k + 2 * pad + (stride - 1 if attrs["ceil_mode"] else 0), stride) + 1


def _with_index_windows(ctx: KernelContext, x: Any) -> list[_Windows]:
    windows = []
    for axis, size in enumerate(x.shape[2:]):
        k, pad, out = _with_index_axis(ctx.attrs, axis, size)
        if out < 1:
            name = _AXES[x.ndim - 2][axis]
            raise kernel_error(ctx, f"X {list(x.shape)} gives output size {out} along {name}")
        adaptive = ctx.attrs["adaptive"]
        windows.append(
            _Windows.adaptive(size, out)
            if adaptive
            else _Windows.regular(size, out, k, ctx.attrs["strides"][axis], pad)
        )
    return windows


def _max_pool_with_index(ctx: KernelContext, x: Any) -> tuple[Any, Any]:
    """Out: each window's maximum; Mask: its first position (row-major) in X's plane, ``h * W + w`` (3-D:
    ``(d * H + h) * W + w``)."""
    return _window_argmax(ctx.xp, x, _with_index_windows(ctx, x))


def _max_pool_with_index_grad(ctx: KernelContext, x: Any, mask: Any, dout: Any) -> Any:
    """Out@GRAD added at Mask's positions; windows that do not overlap (strides at least ksize, or global pooling)
    hold distinct positions (Mask made by the forward op)."""
    attrs = ctx.attrs
    distinct = not attrs["adaptive"] and (
        attrs["global_pooling"] or all(s >= k for s, k in zip(attrs["strides"], attrs["ksize"]))
    )
    return _scatter_index(ctx.xp, mask, dout, x.shape, distinct)


def _infer_max_pool_with_index(ctx: InferContext, dims: int) -> None:
    x = check_dtype(ctx, "X", FLOATS)
    if len(x.shape) != dims + 2:
        ctx.fail(f"X {fmt(x)} must be {dims + 2}-D ({'NCHW' if dims == 2 else 'NCDHW'})")
    for name, low in {"ksize": 0 if ctx.attr("global_pooling") else 1, "strides": 1, "paddings": 0}.items():
        _check_ints(ctx, name, low, dims)
    attrs = _infer_attrs(ctx, _WITH_INDEX_ATTRS)
    sizes = []
    for axis, size in enumerate(x.shape[2:]):
        out = _with_index_axis(attrs, axis, size)[2]
        sizes.append(out if out < 0 and size < 0 else _check_size(ctx, x, axis, out, f"ksize={attrs['ksize']}"))
    shape = (x.shape[0], x.shape[1], *sizes)
    ctx.set_output("Out", shape, x.dtype)
    ctx.set_output("Mask", shape, "int32")


MAX_POOL2D_WITH_INDEX, MAX_POOL2D_WITH_INDEX_GRAD = _pool_schemas(
    "max_pool2d_with_index",
    2,
    _WITH_INDEX_ATTRS,
    "Max pooling of NCHW X with the position of each maximum (Mask, int32 h * W + w); adaptive bins too.",
    with_index=True,
)
MAX_POOL3D_WITH_INDEX, MAX_POOL3D_WITH_INDEX_GRAD = _pool_schemas(
    "max_pool3d_with_index",
    3,
    _attrs_3d(_WITH_INDEX_ATTRS),
    "Max pooling of NCDHW X with the position of each maximum (Mask, int32 (d * H + h) * W + w); adaptive bins too.",
    with_index=True,
)

# -- fold (col2im as an op) --------------------------------------------------------------------------------

_FOLD_ATTRS = (
    AttrDef("output_sizes", AttrType.INTS),
    AttrDef("kernel_sizes", AttrType.INTS),
    AttrDef("strides", AttrType.INTS, [1, 1]),
    AttrDef("paddings", AttrType.INTS, [0, 0, 0, 0]),
    AttrDef("dilations", AttrType.INTS, [1, 1]),
)


def _fold_geometry(attrs: Mapping[str, Any], fail: Fail) -> ConvGeometry:
    """The geometry of the sliding blocks of fold's image (``paddings`` [h, w] or [top, left, bottom, right],
    Paddle's order); ``fail`` names an attribute that is not well formed or leaves no block."""
    for name, low in (("output_sizes", 1), ("kernel_sizes", 1), ("strides", 1), ("dilations", 1)):
        if len(attrs[name]) != 2 or any(v < low for v in attrs[name]):
            fail(f"{name}={list(attrs[name])} must hold 2 values >= {low} (height, width)")
    paddings = list(attrs["paddings"])
    if len(paddings) not in (2, 4) or any(p < 0 for p in paddings):
        fail(f"paddings={paddings} must hold 2 ([h, w]) or 4 ([top, left, bottom, right]) values >= 0")
    before, after = (paddings, paddings) if len(paddings) == 2 else (paddings[:2], paddings[2:])
    size, k, s, d = (list(attrs[n]) for n in ("output_sizes", "kernel_sizes", "strides", "dilations"))
    blocks = [(size[a] + before[a] + after[a] - (d[a] * (k[a] - 1) + 1)) // s[a] + 1 for a in range(2)]
    if min(blocks) < 1:
        fail(f"kernel_sizes={k} with dilations={d} leave no block in output_sizes={size} padded by {paddings}")
    # the far paddings grown to cover every tap, as conv2d's
    far = [max(after[a], (blocks[a] - 1) * s[a] + d[a] * (k[a] - 1) + 1 - size[a] - before[a]) for a in range(2)]
    return ConvGeometry(
        ((before[0], far[0]), (before[1], far[1])), (d[0], d[1]), (s[0], s[1]), (k[0], k[1]), (blocks[0], blocks[1])
    )


def _check_fold_input(shape: Sequence[int], geo: ConvGeometry, fail: Fail) -> None:
    taps, blocks = geo.ksize[0] * geo.ksize[1], geo.out[0] * geo.out[1]
    if len(shape) != 3:
        fail(f"X of shape {list(shape)} must be 3-D: [N, C * kernel height * kernel width, blocks]")
    if shape[1] >= 0 and shape[1] % taps:
        fail(f"X of shape {list(shape)}: dim 1 must be a multiple of the {taps} kernel taps")
    if shape[2] >= 0 and shape[2] != blocks:
        fail(f"X of shape {list(shape)} has {shape[2]} blocks; the attributes make {geo.out[0]} x {geo.out[1]}")


def _infer_fold(ctx: InferContext) -> None:
    x = check_dtype(ctx, "X", FLOATS)
    geo = _fold_geometry(_infer_attrs(ctx, _FOLD_ATTRS), ctx.fail)
    _check_fold_input(x.shape, geo, ctx.fail)
    channels = x.shape[1] // (geo.ksize[0] * geo.ksize[1]) if x.shape[1] >= 0 else -1
    ctx.set_output("Y", (x.shape[0], channels, *ctx.attr("output_sizes")), x.dtype)


def _fold_setup(ctx: KernelContext, x: Any) -> tuple[ConvGeometry, tuple[int, ...]]:
    """The geometry and Y's shape (NCHW)."""

    def fail(message: str) -> NoReturn:
        raise kernel_error(ctx, f"fold: {message}")

    geo = _fold_geometry(ctx.attrs, fail)
    _check_fold_input(x.shape, geo, fail)
    return geo, (x.shape[0], x.shape[1] // (geo.ksize[0] * geo.ksize[1]), *ctx.attrs["output_sizes"])


def _fold(ctx: KernelContext, x: Any) -> Any:
    """Y: each block of X (columns [C * kh * kw] per block) added back at the image positions it covers."""
    geo, shape = _fold_setup(ctx, x)
    return col2im(ctx.xp, x, shape, geo, 1, False, per_image=True)


def _fold_grad(ctx: KernelContext, x: Any, dy: Any) -> Any:
    """X@GRAD: the blocks of Y@GRAD (unfold, im2col)."""
    geo, _ = _fold_setup(ctx, x)
    return im2col(ctx.xp, dy, geo, 1, False, per_image=True).reshape(x.shape)


FOLD_GRAD = OpSchema(
    "fold_grad",
    inputs=(Slot("X"), Slot("Y@GRAD")),
    outputs=(Slot("X@GRAD"),),
    attrs=_FOLD_ATTRS,
    infer=infer_grads("X"),
    kernel=_fold_grad,
    doc="Gradient of fold: the blocks of Y@GRAD (unfold).",
)
FOLD = OpSchema(
    "fold",
    inputs=(Slot("X"),),
    outputs=(Slot("Y"),),
    attrs=_FOLD_ATTRS,
    infer=_infer_fold,
    grad=lambda g: grad_op(g, FOLD_GRAD, ("X", "Y@GRAD"), ("X",)),
    kernel=_fold,
    doc="col2im: X [N, C * kh * kw, blocks] summed into the NCHW image of output_sizes, blocks sliding by "
    "strides over it padded by paddings ([top, left, bottom, right]), taps spread by dilations.",
)

SCHEMAS: tuple[OpSchema, ...] = (
    CONV2D,
    CONV2D_GRAD,
    DEPTHWISE_CONV2D,
    DEPTHWISE_CONV2D_GRAD,
    CONV3D,
    CONV3D_GRAD,
    CONV2D_TRANSPOSE,
    CONV2D_TRANSPOSE_GRAD,
    DEPTHWISE_CONV2D_TRANSPOSE,
    DEPTHWISE_CONV2D_TRANSPOSE_GRAD,
    CONV3D_TRANSPOSE,
    CONV3D_TRANSPOSE_GRAD,
    POOL2D,
    POOL2D_GRAD,
    POOL3D,
    POOL3D_GRAD,
    MAX_POOL2D_WITH_INDEX,
    MAX_POOL2D_WITH_INDEX_GRAD,
    MAX_POOL3D_WITH_INDEX,
    MAX_POOL3D_WITH_INDEX_GRAD,
    FOLD,
    FOLD_GRAD,
)
