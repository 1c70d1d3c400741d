"""Normalization and dropout ops with Paddle's semantics: ``batch_norm``, ``layer_norm``, ``group_norm``,
``instance_norm``, ``dropout``.

Kernels are written once against the array module ``ctx.xp``. A float16 ``X`` keeps
its statistics and affine parameters in float32 (Paddle's rule); the kernels compute
in that dtype and give ``Y`` X's dtype.

- ``batch_norm`` normalizes each channel (dim 1 for ``NCHW``, the last dim for
  ``NHWC``; a rank-2 X has its channels in dim 1 either way). In training it
  normalizes with the batch's mean and biased variance and updates the running
  statistics in place (``MeanOut = momentum * Mean + (1 - momentum) * batch mean``,
  likewise ``VarianceOut`` with the biased batch variance); ``SavedMean`` and
  ``SavedVariance`` hold the batch mean and inverse standard deviation
  ``1 / sqrt(var + epsilon)`` its gradient reads. With ``is_test`` (unless
  ``trainable_statistics``) or ``use_global_stats`` it normalizes with ``Mean`` and
  ``Variance``, which pass through unchanged; the saved outputs then hold them (the
  mean and the inverse standard deviation used). As Paddle's kernel, a training batch
  with one value per channel passes X through unchanged.
- ``layer_norm`` normalizes each row of X flattened to a matrix at ``begin_norm_axis``;
  ``Mean`` and ``Variance`` (biased) are per row.
- ``group_norm`` normalizes each image's ``groups`` groups of consecutive channels (dim 1 for
  ``NCHW``, the last dim for ``NHWC``) over all their values: ``Mean`` and ``Variance``
  (biased) are ``[N, groups]``. ``instance_norm`` normalizes each image's channels (dim 1):
  ``SavedMean`` and ``SavedVariance`` (the inverse standard deviation, as batch_norm's) are
  ``[N * C]``. Both then take Scale and Bias per channel, each optional.
- ``dropout`` zeroes each element with probability ``dropout_prob``; ``Mask`` (uint8)
  holds the kept ones. ``downgrade_in_infer``: train ``X * Mask``, test
  ``X * (1 - dropout_prob)``; ``upscale_in_train``: train ``X * Mask / (1 - dropout_prob)``,
  test ``X``. The mask keeps the elements whose uniform draw in [0, 1) is at least
  ``dropout_prob``, drawn on the host (so a seed gives the same mask on every device kind)
  in X's row-major order by numpy's legacy ``RandomState`` (MT19937), seeded by the
  ``Seed`` tensor when bound, else by ``seed`` when ``fix_seed`` (0 included, as
  Paddle's), modulo 2**32: the same mask at every run, and the one ONNX's reference
  Dropout draws for that seed. Otherwise every run draws a fresh mask.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import numpy as np

from blockir.ir.attrs import AttrType
from blockir.ir.schema import AttrDef, GradContext, InferContext, KernelContext, OpSchema, OpSpec, Slot
from blockir.ops.common import (
    FLOATS,
    check_dtype,
    compatible,
    fmt,
    forward_attrs,
    grad_op,
    grad_spec,
    infer_grads,
    infer_like,
    kernel_error,
    numel,
    to_host,
)

# -- shared -------------------------------------------------------------------------------------


def _param_dtype(x_dtype: str) -> str:
    """The dtype of the statistics and affine parameters of an X of ``x_dtype``."""
    return "float32" if x_dtype == "float16" else x_dtype


def _check_vector(ctx: InferContext, slot: str, size: int, dtype: str) -> int:
    """Input ``slot`` (when bound) must be a 1-D ``dtype`` tensor of ``size`` elements (-1: unknown); return
    its length when known, else ``size``."""
    if not ctx.has_input(slot):
        return size
    var = ctx.tensor(slot)
    if var.dtype != dtype:
        ctx.fail(f"{slot} {fmt(var)} must have dtype {dtype} (X's parameter dtype)")
    if len(var.shape) != 1 or not compatible(var.shape[0], size):
        ctx.fail(f"{slot} {fmt(var)} must have shape [{size}]")
    return size if size >= 0 else var.shape[0]


def _inv_std(xp: Any, variance: Any, epsilon: float) -> Any:
    """1 / sqrt(variance + epsilon), a new array."""
    out = variance + epsilon
    xp.sqrt(out, out=out)
    return xp.reciprocal(out, out=out)


def _normalize_rows(xp: Any, rows: Any, epsilon: float) -> tuple[Any, Any, Any, Any]:
    """(each row of matrix ``rows`` minus its mean over its standard deviation, a new array; the means; the
    biased variances; the inverse standard deviations ``1 / sqrt(variance + epsilon)``)."""
    mean = rows.mean(axis=1)
    y = rows - mean[:, None]
    variance = xp.square(y).mean(axis=1)
    inv_std = _inv_std(xp, variance, epsilon)
    y *= inv_std[:, None]
    return y, mean, variance, inv_std


def _rows_grad(g: Any, x_hat: Any, inv_std: Any) -> Any:
    """The gradient of rows normalized by their own statistics (``x_hat``, normalized with ``inv_std`` per row),
    given ``g``, the gradient of ``x_hat``: ``inv_std * (g - mean(g) - x_hat * mean(g * x_hat))`` per row."""
    dx = g - g.mean(axis=1, keepdims=True)
    dx -= x_hat * (g * x_hat).mean(axis=1, keepdims=True)
    dx *= inv_std[:, None]
    return dx


def _channel_view(x: Any, channel_last: bool) -> Any:
    """``x`` (N, C, ... or, ``channel_last``, N, ..., C) as ``[N, C, S]``, S the product of the other dims."""
    if channel_last:
        return x.reshape(x.shape[0], -1, x.shape[-1]).transpose(0, 2, 1)
    return x.reshape(x.shape[0], x.shape[1], -1)


def _from_channel_view(v: Any, shape: tuple[int, ...], channel_last: bool) -> Any:
    """The inverse of :func:`_channel_view`: ``[N, C, S]`` ``v`` as an array of ``shape``."""
    return v.transpose(0, 2, 1).reshape(shape) if channel_last else v.reshape(shape)


def _norm_schemas(
    op_type: str,
    stats: tuple[str, str],
    attrs: tuple[AttrDef, ...],
    kernels: tuple[Callable[..., Any], Callable[..., Any], Callable[..., Any]],
    doc: str,
    reads_y: bool = False,
    optional_stats: bool = False,
) -> tuple[OpSchema, OpSchema]:
    """An op normalizing X by statistics of its own (outputs Y and ``stats``, optional with ``optional_stats``),
    times the optional Scale plus the optional Bias, and its gradient op ``{op_type}_grad`` reading X, Scale,
    Bias, Y (``reads_y``), the statistics and Y@GRAD, as Paddle's makers build it. ``kernels``: (infer, kernel,
    the gradient's kernel)."""
    infer, kernel, grad_kernel = kernels
    grad_inputs = ("X", "Scale", "Bias", *(("Y",) if reads_y else ()), *stats, "Y@GRAD")
    backward = OpSchema(
        f"{op_type}_grad",
        inputs=tuple(Slot(slot, optional=slot in ("Scale", "Bias", "Y")) for slot in grad_inputs),
        outputs=(Slot("X@GRAD"), Slot("Scale@GRAD"), Slot("Bias@GRAD")),
        attrs=attrs,
        infer=infer_grads("X", "Scale", "Bias"),
        kernel=grad_kernel,
        share_lod=(("X", "X@GRAD"),),
        doc=f"Gradient of {op_type}.",
    )
    forward = OpSchema(
        op_type,
        inputs=(Slot("X"), Slot("Scale", optional=True), Slot("Bias", optional=True)),
        outputs=(Slot("Y"), *(Slot(slot, optional=optional_stats, no_grad=True) for slot in stats)),
        attrs=attrs,
        infer=infer,
        grad=lambda g: grad_op(g, backward, grad_inputs, ("X", "Scale", "Bias")),
        kernel=kernel,
        share_lod=(("X", "Y"),),
        doc=doc,
    )
    return forward, backward


# -- batch_norm ---------------------------------------------------------------------------------

_BATCH_NORM_ATTRS = (
    AttrDef("momentum", AttrType.FLOAT, 0.9),
    AttrDef("epsilon", AttrType.FLOAT, 1e-5),
    AttrDef("is_test", AttrType.BOOLEAN, False),
    AttrDef("data_layout", AttrType.STRING, "NCHW"),
    AttrDef("use_global_stats", AttrType.BOOLEAN, False),
    AttrDef("trainable_statistics", AttrType.BOOLEAN, False),
    AttrDef("use_mkldnn", AttrType.BOOLEAN, False),
    AttrDef("fuse_with_relu", AttrType.BOOLEAN, False),
)
_LAYOUTS = ("NCHW", "NHWC")
_BN_PARAMS = ("Scale", "Bias", "Mean", "Variance")
_BN_STATS = ("MeanOut", "VarianceOut", "SavedMean", "SavedVariance")


def _global_stats(attrs: Mapping[str, Any]) -> bool:
    """Whether batch_norm normalizes with the running statistics rather than the batch's."""
    return bool((attrs["is_test"] and not attrs["trainable_statistics"]) or attrs["use_global_stats"])


def _check_batch_norm_attrs(ctx: InferContext, x: Any) -> int:
    """Check data_layout, epsilon and X's rank and dims; return the channel axis."""
    layout = ctx.attr("data_layout")
    if layout not in _LAYOUTS:
        ctx.fail(f"data_layout {layout!r} is not supported; expected one of {', '.join(_LAYOUTS)}")
    if ctx.attr("epsilon") < 0:
        ctx.fail(f"epsilon {ctx.attr('epsilon'):g} must not be negative")
    if len(x.shape) < 2:
        ctx.fail(f"X {fmt(x)} must have rank 2 or more (N, C, ...)")
    if 0 in x.shape:
        ctx.fail(f"X {fmt(x)} must not have a zero dimension")
    return 1 if layout == "NCHW" else len(x.shape) - 1


def _infer_batch_norm(ctx: InferContext) -> None:
    x = check_dtype(ctx, "X", FLOATS)
    channels = x.shape[_check_batch_norm_attrs(ctx, x)]
    dtype = _param_dtype(x.dtype)
    for slot in _BN_PARAMS:
        channels = _check_vector(ctx, slot, channels, dtype)
    if ctx.has_input("MomentumTensor"):
        m = check_dtype(ctx, "MomentumTensor", FLOATS)
        if not compatible(numel(m.shape), 1):
            ctx.fail(f"MomentumTensor {fmt(m)} must hold one value")
    ctx.set_output("Y", x.shape, x.dtype, lod_level=x.lod_level)
    for slot in _BN_STATS:
        ctx.set_output(slot, (channels,), dtype)
    ctx.set_output("ReserveSpace", (0,), "uint8")


def _channels(attrs: dict[str, Any], x: Any) -> tuple[bool, tuple[int, ...], int]:
    """(whether the channels are X's last dim, the shape per-channel vectors broadcast in, values per channel)."""
    channel_last = attrs["data_layout"] == "NHWC"
    axis = x.ndim - 1 if channel_last else 1
    return channel_last, (-1,) + (1,) * (x.ndim - 1 - axis), math.prod(n for i, n in enumerate(x.shape) if i != axis)


# A row's float32 sums (:func:`_channel_sums` on NCHW) give E[x^2] - E[x]^2 (or the like covariance) to some 1e-6 of
# E[x^2]: with a mean more than 4 standard deviations from 0 (a square over 16 variances) too few digits are left, and
# the values are centered first.
_FAR = 16.0


def _rows_dot(xp: Any, a: Any, b: Any) -> Any:
    """The sum of ``a * b`` over each row of ``[N, C, S]`` ``a`` and ``b``, ``[N, C]``: one BLAS dot product a row,
    accumulated in the data's dtype, and no temporary of the data's size."""
    return xp.matmul(a[:, :, None, :], b[:, :, :, None])[:, :, 0, 0]


def _channel_sums(xp: Any, a: Any, b: Any) -> tuple[Any, Any]:
    """(sum of ``a``, sum of ``a * b``) per channel of ``[N, C, S]`` ``a`` and ``b``, in float64. Rows of S > 1
    contiguous values (NCHW): each row's sums in the data's dtype (BLAS: ``a`` times a vector of ones, and
    :func:`_rows_dot`; a read of ``a`` each and one of ``b``), then their sums over N in float64, some 3x as fast as
    numpy's float64 reductions. Otherwise (NHWC, or one value a row, which would make as many BLAS calls as values)
    those reductions: a read of the data each, with no temporary of its size."""
    if a.shape[2] > 1 and a.strides[2] == a.itemsize and b.strides[2] == b.itemsize:
        rows = xp.matmul(a, xp.ones(a.shape[2], dtype=a.dtype))
        return rows.sum(axis=0, dtype=np.float64), _rows_dot(xp, a, b).sum(axis=0, dtype=np.float64)
    return a.sum(axis=(0, 2), dtype=np.float64), xp.einsum("ncs,ncs->c", a, b, dtype=np.float64)


def _centered(ctx: KernelContext, x: Any, mean: Any, view: tuple[int, ...]) -> Any:
    """``x`` minus ``mean`` per channel (broadcast in ``view``), in scratch buffer 0."""
    xp = ctx.xp
    return xp.subtract(x, mean.astype(x.dtype).reshape(view), out=ctx.scratch.empty(xp, 0, x.shape, x.dtype))


def _affine(xp: Any, x: Any, a: Any, b: Any, view: tuple[int, ...]) -> Any:
    """``x * a + b`` per channel (``a``, ``b`` vectors broadcast in ``view``): a new array, one pass writing it
    and one adding in place."""
    y = xp.multiply(x, a.reshape(view))
    return xp.add(y, b.reshape(view), out=y)


def _batch_norm(
    ctx: KernelContext, x: Any, scale: Any, bias: Any, mean: Any, variance: Any, momentum: Any
) -> tuple[Any, ...]:
    """(Y, MeanOut, VarianceOut, SavedMean, SavedVariance, ReserveSpace): see the module docstring.

    In training, the statistics: per channel the sums of X and of its squares (:func:`_channel_sums`: two reads
    of X); a mean more than 4 standard deviations from 0 takes the variance again from X minus the mean (a
    pass writing it, a read). Then ``Y = X * a + b``: a pass writing Y, one adding in place."""
    xp, attrs = ctx.xp, ctx.attrs
    channel_last, view, count = _channels(attrs, x)
    reserve = xp.empty((0,), dtype=np.uint8)
    xf = x.astype(scale.dtype, copy=False)
    if _global_stats(attrs):
        inv_std = _inv_std(xp, variance, attrs["epsilon"])
        a = scale * inv_std
        return (
            _affine(xp, xf, a, bias - mean * a, view).astype(x.dtype, copy=False),
            mean,
            variance,
            mean,
            inv_std,
            reserve,
        )
    if count == 0:
        raise kernel_error(ctx, f"batch_norm: X of shape {list(x.shape)} is empty; a training batch needs values")
    if count == 1:  # Paddle's kernel: nothing to normalize over, Y = X and the running statistics stay
        zeros = xp.zeros_like(mean)
        return x, mean, variance, zeros, zeros, reserve
    xv = _channel_view(xf, channel_last)
    total, squares = _channel_sums(xp, xv, xv)
    batch_mean = total / count
    batch_var = squares / count - batch_mean * batch_mean
    if bool((batch_mean * batch_mean > _FAR * batch_var).any()):
        centered = _channel_view(_centered(ctx, xf, batch_mean, view), channel_last)
        batch_var = _channel_sums(xp, centered, centered)[1] / count
    batch_var = xp.maximum(batch_var, 0).astype(scale.dtype)
    batch_mean = batch_mean.astype(scale.dtype)
    inv_std = _inv_std(xp, batch_var, attrs["epsilon"])
    a = scale * inv_std
    y = _affine(xp, xf, a, bias - batch_mean * a, view)
    m = attrs["momentum"] if momentum is None else momentum.reshape(()).astype(mean.dtype)
    mean_out = mean * m + batch_mean * (1 - m)
    var_out = variance * m + batch_var * (1 - m)
    return y.astype(x.dtype, copy=False), mean_out, var_out, batch_mean, inv_std, reserve


def _batch_norm_grad(
    ctx: KernelContext,
    x: Any,
    scale: Any,
    bias: Any,
    mean: Any,
    variance: Any,
    saved_mean: Any,
    saved_inv_std: Any,
    reserve: Any,
    dy: Any,
    *,
    reuse: Sequence[bool] = (),
) -> tuple[Any, Any, Any]:
    """(X@GRAD, Scale@GRAD, Bias@GRAD) of batch_norm, each only when ``ctx.wants`` it.

    The sums of Y@GRAD and of Y@GRAD * X per channel (:func:`_channel_sums`: two reads of Y@GRAD and one of X; of
    X minus the mean instead, written first to scratch, when the mean is more than 4 standard deviations from 0),
    which give Bias@GRAD and Scale@GRAD. Then X@GRAD = a * Y@GRAD + b * X + c per channel (training: the batch
    statistics depend on X, hence ``b`` and ``c``; with global statistics X@GRAD is Y@GRAD * scale / std alone):
    ``a * Y@GRAD`` in Y@GRAD's buffer where it may be overwritten (``reuse``; a float32 copy of a float16 Y@GRAD
    always), ``b * X + c`` in scratch, then added: four passes."""
    xp, attrs = ctx.xp, ctx.attrs
    channel_last, view, count = _channels(attrs, x)
    global_stats = _global_stats(attrs)
    if not global_stats and count == 1:  # Y was X
        zeros = xp.zeros_like(scale)
        return dy if ctx.wants[0] else None, zeros if ctx.wants[1] else None, zeros if ctx.wants[2] else None
    if global_stats:
        mu, inv_std = mean, _inv_std(xp, variance, attrs["epsilon"])
    else:
        mu, inv_std = saved_mean, saved_inv_std
    dyf, xs = dy.astype(scale.dtype, copy=False), x.astype(scale.dtype, copy=False)
    a = scale * inv_std
    dx = d_scale = d_bias = None
    shift: Any = mu  # X minus what xs is
    if ctx.wants[1] or ctx.wants[2] or (ctx.wants[0] and not global_stats):
        if bool((mu * mu * inv_std * inv_std > _FAR).any()):
            xs, shift = _centered(ctx, xs, mu, view), 0.0
        total, products = _channel_sums(xp, _channel_view(dyf, channel_last), _channel_view(xs, channel_last))
        d_bias = total.astype(scale.dtype)
        d_scale = ((products - shift * total) * inv_std).astype(scale.dtype)  # the sum of Y@GRAD * (X - mean) / std
    if ctx.wants[0]:
        dx = xp.multiply(dyf, a.reshape(view), out=dyf if dyf is not dy or (reuse and reuse[-1]) else None)
        if not global_stats:  # a * (Y@GRAD - Bias@GRAD / count - (X - mean) / std * Scale@GRAD / count)
            b = -a * inv_std * d_scale / count
            bx = xp.multiply(xs, b.reshape(view), out=ctx.scratch.empty(xp, 0, xs.shape, xs.dtype))
            bx += (-a * d_bias / count - b * shift).reshape(view)
            dx += bx
    return (
        None if dx is None else dx.astype(x.dtype, copy=False),
        d_scale if ctx.wants[1] else None,
        d_bias if ctx.wants[2] else None,
    )


BATCH_NORM_GRAD = OpSchema(
    "batch_norm_grad",
    inputs=(
        Slot("X"),
        Slot("Scale"),
        Slot("Bias", optional=True),
        Slot("Mean", optional=True),
        Slot("Variance", optional=True),
        Slot("SavedMean"),
        Slot("SavedVariance"),
        Slot("ReserveSpace", optional=True),
        Slot("Y@GRAD"),
    ),
    outputs=(Slot("X@GRAD"), Slot("Scale@GRAD"), Slot("Bias@GRAD")),
    attrs=_BATCH_NORM_ATTRS,
    infer=infer_grads("X", "Scale", "Bias"),
    kernel=_batch_norm_grad,
    share_lod=(("X", "X@GRAD"),),
    doc="Gradient of batch_norm (batch statistics in training, Mean and Variance with global statistics).",
)


def _grad_batch_norm(g: GradContext) -> list[OpSpec]:
    """Paddle's maker: the running statistics are read only when they normalized (they are updated in place)."""
    global_stats = _global_stats(forward_attrs(g, BATCH_NORM_GRAD))
    inputs = {
        "X": g.input("X"),
        "Scale": g.input("Scale"),
        "Bias": g.input("Bias"),
        "Mean": g.output("MeanOut") if global_stats else [],
        "Variance": g.output("VarianceOut") if global_stats else [],
        "SavedMean": g.output("SavedMean"),
        "SavedVariance": g.output("SavedVariance"),
        "ReserveSpace": g.output("ReserveSpace"),
        "Y@GRAD": g.output_grad("Y"),
    }
    return grad_spec(g, BATCH_NORM_GRAD, inputs, ("X", "Scale", "Bias"))


BATCH_NORM = OpSchema(
    "batch_norm",
    inputs=(
        Slot("X"),
        Slot("Scale"),
        Slot("Bias"),
        Slot("Mean", no_grad=True),
        Slot("Variance", no_grad=True),
        Slot("MomentumTensor", optional=True, no_grad=True),
    ),
    outputs=(
        Slot("Y"),
        Slot("MeanOut", no_grad=True),
        Slot("VarianceOut", no_grad=True),
        Slot("SavedMean", no_grad=True),
        Slot("SavedVariance", no_grad=True),
        Slot("ReserveSpace", optional=True, no_grad=True),
    ),
    attrs=_BATCH_NORM_ATTRS,
    infer=_infer_batch_norm,
    grad=_grad_batch_norm,
    kernel=_batch_norm,
    share_lod=(("X", "Y"),),
    doc="Per-channel normalization with batch statistics (training) or running ones (is_test, use_global_stats).",
)

# -- layer_norm ---------------------------------------------------------------------------------

_LAYER_NORM_ATTRS = (
    AttrDef("epsilon", AttrType.FLOAT, 1e-5),
    AttrDef("begin_norm_axis", AttrType.INT, 1),
    AttrDef("is_test", AttrType.BOOLEAN, False),
    AttrDef("use_mkldnn", AttrType.BOOLEAN, False),
    AttrDef("mkldnn_data_type", AttrType.STRING, "float32"),
)


def _infer_layer_norm(ctx: InferContext) -> None:
    x = check_dtype(ctx, "X", FLOATS)
    begin = ctx.attr("begin_norm_axis")
    if not 0 <= begin < len(x.shape):
        ctx.fail(f"begin_norm_axis {begin} must be in [0, {len(x.shape)}) for X {fmt(x)}")
    if ctx.attr("epsilon") < 0:
        ctx.fail(f"epsilon {ctx.attr('epsilon'):g} must not be negative")
    right = numel(x.shape[begin:])
    if right == 0:
        ctx.fail(f"X {fmt(x)} has no values to normalize from begin_norm_axis {begin} on")
    dtype = _param_dtype(x.dtype)
    for slot in ("Scale", "Bias"):
        _check_vector(ctx, slot, right, dtype)
    ctx.set_output("Y", x.shape, x.dtype, lod_level=x.lod_level)
    for slot in ("Mean", "Variance"):
        ctx.set_output(slot, (numel(x.shape[:begin]),), dtype)


def _rows(ctx: KernelContext, x: Any) -> Any:
    """X as the matrix layer_norm normalizes row by row, in the parameter dtype."""
    begin = ctx.attrs["begin_norm_axis"]
    right = math.prod(x.shape[begin:])
    if right == 0:
        raise kernel_error(ctx, f"layer_norm: X of shape {list(x.shape)} has no values from dim {begin} on")
    return x.reshape(math.prod(x.shape[:begin]), right).astype(_param_dtype(x.dtype.name), copy=False)


def _layer_norm(ctx: KernelContext, x: Any, scale: Any, bias: Any) -> tuple[Any, Any, Any]:
    """(Y, Mean, Variance): each row normalized, then scaled and shifted."""
    y, mean, variance, _ = _normalize_rows(ctx.xp, _rows(ctx, x), ctx.attrs["epsilon"])
    if scale is not None:
        y *= scale
    if bias is not None:
        y += bias
    return y.reshape(x.shape).astype(x.dtype, copy=False), mean, variance


def _layer_norm_grad(
    ctx: KernelContext, x: Any, scale: Any, bias: Any, mean: Any, variance: Any, dy: Any
) -> tuple[Any, Any, Any]:
    """(X@GRAD, Scale@GRAD, Bias@GRAD), each only when ``ctx.wants`` it (Bias is read for Paddle, not used)."""
    x2 = _rows(ctx, x)
    dy2 = dy.reshape(x2.shape).astype(x2.dtype, copy=False)
    inv_std = _inv_std(ctx.xp, variance, ctx.attrs["epsilon"])
    x_hat = x2 - mean[:, None]
    x_hat *= inv_std[:, None]
    d_scale = (dy2 * x_hat).sum(axis=0) if ctx.wants[1] else None
    d_bias = dy2.sum(axis=0) if ctx.wants[2] else None
    dx = None
    if ctx.wants[0]:
        g = dy2 * scale if scale is not None else dy2
        dx = _rows_grad(g, x_hat, inv_std).reshape(x.shape).astype(x.dtype, copy=False)
    return dx, d_scale, d_bias


LAYER_NORM, LAYER_NORM_GRAD = _norm_schemas(
    "layer_norm",
    ("Mean", "Variance"),
    _LAYER_NORM_ATTRS,
    (_infer_layer_norm, _layer_norm, _layer_norm_grad),
    "Each row of X flattened at begin_norm_axis normalized, times Scale plus Bias (both optional).",
)

# -- group_norm and instance_norm ----------------------------------------------------------------------------
#
# Both normalize rows of X seen as [N, C, S]: group_norm each image's group of C / groups channels (all their
# values), instance_norm each image's channel; then Scale and Bias per channel (both optional).

_GROUP_NORM_ATTRS = (
    AttrDef("epsilon", AttrType.FLOAT, 1e-5),
    AttrDef("groups", AttrType.INT, 1),
    AttrDef("data_layout", AttrType.STRING, "NCHW"),
)
_INSTANCE_NORM_ATTRS = (AttrDef("epsilon", AttrType.FLOAT, 1e-5),)


def _check_norm_x(ctx: InferContext, channel_last: bool) -> tuple[Any, int]:
    """(X, its channels) of group_norm or instance_norm: float, rank 2 to 5, epsilon >= 0; Scale and Bias (when
    bound) vectors of the channels."""
    x = check_dtype(ctx, "X", FLOATS)
    if not 2 <= len(x.shape) <= 5:
        ctx.fail(f"X {fmt(x)} must have rank 2 to 5 (N, C, ...)")
    if ctx.attr("epsilon") < 0:
        ctx.fail(f"epsilon {ctx.attr('epsilon'):g} must not be negative")
    channels = x.shape[-1 if channel_last else 1]
    for slot in ("Scale", "Bias"):
        channels = _check_vector(ctx, slot, channels, _param_dtype(x.dtype))
    return x, channels


def _normalize_groups(xp: Any, view: Any, groups: int, epsilon: float, scale: Any, bias: Any) -> tuple[Any, ...]:
    """(``[N, C, S]`` ``view`` with each image's groups of C / groups channels normalized over all their values,
    then times Scale plus Bias per channel (each when not None); the mean, the biased variance and the inverse
    standard deviation of each image's groups, ``[N * groups]``)."""
    y, mean, variance, inv_std = _normalize_rows(xp, view.reshape(view.shape[0] * groups, -1), epsilon)
    y = y.reshape(view.shape)
    if scale is not None:
        y *= scale[:, None]
    if bias is not None:
        y += bias[:, None]
    return y, mean, variance, inv_std


def _normalize_groups_grad(
    ctx: KernelContext, view: Any, dy: Any, groups: int, stats: tuple[Any, Any], scale: Any
) -> tuple[Any, Any, Any]:
    """(X@GRAD as ``[N, C, S]``, Scale@GRAD, Bias@GRAD), each when wanted, of :func:`_normalize_groups` of
    ``view``, for its output's gradient ``dy`` (``[N, C, S]``); ``stats``: the groups' means and inverse standard
    deviations, ``[N * groups]``."""
    (mean, inv_std), rows = stats, view.shape[0] * groups
    x_hat = view.reshape(rows, -1) - mean[:, None]
    x_hat *= inv_std[:, None]
    d_scale = (dy * x_hat.reshape(view.shape)).sum(axis=(0, 2)) if ctx.wants[1] else None
    d_bias = dy.sum(axis=(0, 2)) if ctx.wants[2] else None
    dx = None
    if ctx.wants[0]:
        g = dy * scale[:, None] if scale is not None else dy
        dx = _rows_grad(g.reshape(rows, -1), x_hat, inv_std).reshape(view.shape)
    return dx, d_scale, d_bias


def _infer_group_norm(ctx: InferContext) -> None:
    layout = ctx.attr("data_layout")
    if layout not in _LAYOUTS:
        ctx.fail(f"data_layout {layout!r} is not supported; expected one of {', '.join(_LAYOUTS)}")
    x, channels = _check_norm_x(ctx, layout == "NHWC")
    groups = ctx.attr("groups")
    if groups < 1 or (channels >= 0 and (groups > channels or channels % groups)):
        ctx.fail(f"groups={groups} must be at least 1 and divide X's {channels} channels ({layout})")
    ctx.set_output("Y", x.shape, x.dtype, lod_level=x.lod_level)
    for slot in ("Mean", "Variance"):
        ctx.set_output(slot, (x.shape[0], groups), _param_dtype(x.dtype))


def _groups(ctx: KernelContext, x: Any) -> tuple[Any, int, bool]:
    """(X as ``[N, C, S]`` in the parameter dtype, groups, whether NHWC); a kernel error when groups does not
    divide the channels (inference may have seen -1)."""
    channel_last, groups = ctx.attrs["data_layout"] == "NHWC", ctx.attrs["groups"]
    view = _channel_view(x.astype(_param_dtype(x.dtype.name), copy=False), channel_last)
    if view.shape[1] % groups:
        raise kernel_error(
            ctx,
            f"group_norm: X of shape {list(x.shape)} has {view.shape[1]} channels, not divisible by groups={groups}",
        )
    return view, groups, channel_last


def _group_norm(ctx: KernelContext, x: Any, scale: Any, bias: Any) -> tuple[Any, Any, Any]:
    """(Y, Mean, Variance): each image's groups of channels normalized (Mean and the biased Variance per image
    and group, ``[N, groups]``), then Scale and Bias per channel."""
    view, groups, channel_last = _groups(ctx, x)
    y, mean, variance, _ = _normalize_groups(ctx.xp, view, groups, ctx.attrs["epsilon"], scale, bias)
    y = _from_channel_view(y, x.shape, channel_last).astype(x.dtype, copy=False)
    return y, mean.reshape(-1, groups), variance.reshape(-1, groups)


def _group_norm_grad(
    ctx: KernelContext, x: Any, scale: Any, bias: Any, y: Any, mean: Any, variance: Any, dy: Any
) -> tuple[Any, Any, Any]:
    """(X@GRAD, Scale@GRAD, Bias@GRAD), each only when ``ctx.wants`` it; X is normalized again from Mean and
    Variance (Y and Bias are read for Paddle, not used)."""
    view, groups, channel_last = _groups(ctx, x)
    dyv = _channel_view(dy.astype(view.dtype, copy=False), channel_last)
    stats = (mean.reshape(-1), _inv_std(ctx.xp, variance.reshape(-1), ctx.attrs["epsilon"]))
    dx, d_scale, d_bias = _normalize_groups_grad(ctx, view, dyv, groups, stats, scale)
    if dx is not None:
        dx = _from_channel_view(dx, x.shape, channel_last).astype(x.dtype, copy=False)
    return dx, d_scale, d_bias


GROUP_NORM, GROUP_NORM_GRAD = _norm_schemas(
    "group_norm",
    ("Mean", "Variance"),
    _GROUP_NORM_ATTRS,
    (_infer_group_norm, _group_norm, _group_norm_grad),
    "Each image's groups of channels normalized, times Scale plus Bias per channel (both optional).",
    reads_y=True,
)


def _infer_instance_norm(ctx: InferContext) -> None:
    x, channels = _check_norm_x(ctx, False)
    ctx.set_output("Y", x.shape, x.dtype, lod_level=x.lod_level)
    rows = x.shape[0] * channels if x.shape[0] >= 0 and channels >= 0 else -1
    for slot in ("SavedMean", "SavedVariance"):
        ctx.set_output(slot, (rows,), _param_dtype(x.dtype))


def _instances(x: Any) -> Any:
    """X (N, C, ...) as ``[N, C, S]`` in the parameter dtype."""
    return _channel_view(x.astype(_param_dtype(x.dtype.name), copy=False), False)


def _instance_norm(ctx: KernelContext, x: Any, scale: Any, bias: Any) -> tuple[Any, Any, Any]:
    """(Y, SavedMean, SavedVariance): each image's channels normalized (group_norm with a group per channel;
    SavedMean and SavedVariance, the inverse standard deviation, per image and channel, ``[N * C]``), then Scale
    and Bias per channel."""
    view = _instances(x)
    y, mean, _, inv_std = _normalize_groups(ctx.xp, view, view.shape[1], ctx.attrs["epsilon"], scale, bias)
    return y.reshape(x.shape).astype(x.dtype, copy=False), mean, inv_std


def _instance_norm_grad(
    ctx: KernelContext, x: Any, scale: Any, bias: Any, saved_mean: Any, saved_inv_std: Any, dy: Any
) -> tuple[Any, Any, Any]:
    """(X@GRAD, Scale@GRAD, Bias@GRAD), each only when ``ctx.wants`` it (Bias is read for Paddle, not used)."""
    view = _instances(x)
    dyv = _channel_view(dy.astype(view.dtype, copy=False), False)
    dx, d_scale, d_bias = _normalize_groups_grad(ctx, view, dyv, view.shape[1], (saved_mean, saved_inv_std), scale)
    return (None if dx is None else dx.reshape(x.shape).astype(x.dtype, copy=False)), d_scale, d_bias


# SavedMean and SavedVariance are Paddle's extra outputs: its inference programs leave them out
INSTANCE_NORM, INSTANCE_NORM_GRAD = _norm_schemas(
    "instance_norm",
    ("SavedMean", "SavedVariance"),
    _INSTANCE_NORM_ATTRS,
    (_infer_instance_norm, _instance_norm, _instance_norm_grad),
    "Each image's channels (NCHW) normalized, times Scale plus Bias per channel (both optional).",
    optional_stats=True,
)

# -- dropout -----------------------------------------------------------------------------------------

_DROPOUT_IMPLEMENTATIONS = ("downgrade_in_infer", "upscale_in_train")
_DROPOUT_ATTRS = (
    AttrDef("dropout_prob", AttrType.FLOAT, 0.5),
    AttrDef("is_test", AttrType.BOOLEAN, False),
    AttrDef("fix_seed", AttrType.BOOLEAN, False),
    AttrDef("seed", AttrType.INT, 0),
    AttrDef("dropout_implementation", AttrType.STRING, "downgrade_in_infer"),
)


def _infer_dropout(ctx: InferContext) -> None:
    x = check_dtype(ctx, "X", FLOATS)
    p, implementation = ctx.attr("dropout_prob"), ctx.attr("dropout_implementation")
    if not 0.0 <= p <= 1.0:
        ctx.fail(f"dropout_prob {p:g} must be in [0, 1]")
    if implementation not in _DROPOUT_IMPLEMENTATIONS:
        ctx.fail(f"dropout_implementation {implementation!r} is not one of {', '.join(_DROPOUT_IMPLEMENTATIONS)}")
    if ctx.has_input("Seed"):
        seed = check_dtype(ctx, "Seed", frozenset({"int32", "int64"}))
        if not compatible(numel(seed.shape), 1):
            ctx.fail(f"Seed {fmt(seed)} must hold one value")
    ctx.set_output("Out", x.shape, x.dtype, lod_level=x.lod_level)
    ctx.set_output("Mask", x.shape, "uint8")


def _upscale(attrs: dict[str, Any]) -> bool:
    return bool(attrs["dropout_implementation"] == "upscale_in_train")


def _dropout_mask(ctx: KernelContext, shape: tuple[int, ...], seed: Any) -> Any:
    """The uint8 keep-mask of ``shape``: 1 with probability 1 - dropout_prob (module docstring for the seed)."""
    attrs = ctx.attrs
    if seed is not None:
        value: int | None = int(to_host(seed).reshape(-1)[0])
    else:
        value = attrs["seed"] if attrs["fix_seed"] else None
    rng = np.random.RandomState(None if value is None else value % 2**32)
    return ctx.xp.asarray((rng.random_sample(shape) >= attrs["dropout_prob"]).astype(np.uint8))


def _dropout(ctx: KernelContext, x: Any, seed: Any) -> tuple[Any, Any]:
    """(Out, Mask): see the module docstring; in a test Mask is all ones (nothing is dropped)."""
    xp, attrs = ctx.xp, ctx.attrs
    p = attrs["dropout_prob"]
    if attrs["is_test"]:
        mask = xp.ones(x.shape, dtype=np.uint8) if ctx.wants[1] else None
        return (x if _upscale(attrs) else x * (1.0 - p)), mask
    if p == 1.0:
        return xp.zeros_like(x), xp.zeros(x.shape, dtype=np.uint8)
    mask = _dropout_mask(ctx, x.shape, seed)
    out = xp.where(mask.astype(bool), x, xp.zeros((), dtype=x.dtype))
    if _upscale(attrs):
        out /= 1.0 - p
    return out, mask


def _dropout_grad(ctx: KernelContext, mask: Any, dout: Any) -> Any:
    """X@GRAD = Out@GRAD times what Out was of X: the mask (over 1 - p when upscaled), or 1 - p / 1 in a test."""
    attrs = ctx.attrs
    p = attrs["dropout_prob"]
    if attrs["is_test"]:
        return dout if _upscale(attrs) else dout * (1.0 - p)
    if _upscale(attrs) and p == 1.0:
        return ctx.xp.zeros_like(dout)
    dx = dout * mask
    if _upscale(attrs):
        dx /= 1.0 - p
    return dx


DROPOUT_GRAD = OpSchema(
    "dropout_grad",
    inputs=(Slot("Mask"), Slot("Out@GRAD")),
    outputs=(Slot("X@GRAD"),),
    attrs=_DROPOUT_ATTRS,
    infer=lambda ctx: infer_like(ctx, "Out@GRAD", "X@GRAD"),
    kernel=_dropout_grad,
    share_lod=(("Out@GRAD", "X@GRAD"),),
    doc="Gradient of dropout: Out@GRAD through the mask.",
)


def _grad_dropout(g: GradContext) -> list[OpSpec]:
    inputs = {"Mask": g.output("Mask"), "Out@GRAD": g.output_grad("Out")}
    return grad_spec(g, DROPOUT_GRAD, inputs, ("X",))


DROPOUT = OpSchema(
    "dropout",
    inputs=(Slot("X"), Slot("Seed", optional=True, no_grad=True)),
    outputs=(Slot("Out"), Slot("Mask", optional=True, no_grad=True)),  # Paddle's test programs drop Mask
    attrs=_DROPOUT_ATTRS,
    infer=_infer_dropout,
    grad=_grad_dropout,
    kernel=_dropout,
    share_lod=(("X", "Out"),),
    doc="X with each element zeroed with probability dropout_prob (downgrade_in_infer or upscale_in_train).",
)

SCHEMAS: tuple[OpSchema, ...] = (
    BATCH_NORM,
    BATCH_NORM_GRAD,
    LAYER_NORM,
    LAYER_NORM_GRAD,
    GROUP_NORM,
    GROUP_NORM_GRAD,
    INSTANCE_NORM,
    INSTANCE_NORM_GRAD,
    DROPOUT,
    DROPOUT_GRAD,
)
