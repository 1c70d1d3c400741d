"""Elementwise activations and unary math as a table, and the activations that are more than one row: ``prelu``
(a learned slope), ``log_softmax`` (along an axis), ``maxout`` (over channel groups), ``clip`` and ``pow`` (bounds
and an exponent that may come as tensors).

Each row of :data:`UNARY` is one op of Paddle's: its type, ``Out = forward(xp, X, attrs)``, the gradient
``dX = backward(xp, V, dOut, attrs)`` where ``V`` is X or Out (``reads``: the one Paddle's gradient op reads), its
attributes with Paddle's defaults, and the dtypes it takes. :func:`blockir.ops.common.unary_family` makes the
schemas ``T`` and ``T_grad`` of a row. Formulas follow Paddle's functors (``paddle/phi/kernels/funcs/activation_
functor.h``), branch points included (``x > 0`` or ``x >= 0`` decides which side a kink's gradient takes).
Kernels are written once against ``xp`` (numpy or cupy) and keep X's dtype.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from blockir.ir.attrs import AttrType
from blockir.ir.schema import AttrDef, InferContext, KernelContext, OpSchema, Slot
from blockir.ops.common import (
    FLOATS,
    NUMBERS,
    check_dtype,
    fmt,
    grad_op,
    infer_grads,
    kernel_error,
    normalize_axis,
    numel,
    one_value,
    same_dtype,
    to_host,
    unary_family,
    unbroadcast,
)
from blockir.ops.math import erfc

Attrs = dict[str, Any]

# Settings of Paddle's oneDNN and cuDNN kernels that its programs carry: they change nothing here.
_EXTRA = (
    AttrDef("use_mkldnn", AttrType.BOOLEAN, False),
    AttrDef("use_cudnn", AttrType.BOOLEAN, False),
    AttrDef("mkldnn_data_type", AttrType.STRING, "float32"),
)


def _f(name: str, default: float) -> AttrDef:
    return AttrDef(name, AttrType.FLOAT, default)


@dataclass(frozen=True)
class Unary:
    """One elementwise op: ``Out = forward(xp, X, attrs)``; ``dX = backward(xp, V, dOut, attrs)`` with V the
    input ``reads`` names (X or Out); no gradient op when ``backward`` is None."""

    type: str
    forward: Callable[[Any, Any, Attrs], Any]
    backward: Callable[[Any, Any, Any, Attrs], Any] | None
    reads: str = "X"
    attrs: tuple[AttrDef, ...] = ()
    dtypes: frozenset[str] = FLOATS
    doc: str = ""


def _sigmoid(xp: Any, x: Any) -> Any:
    """1 / (1 + exp(-x)) as 0.5 tanh(x / 2) + 0.5: no overflow; float16 computed in float32 (the sum's
    cancellation in float16 loses 1e-3 relative near 0)."""
    if x.dtype == xp.float16:
        return _sigmoid(xp, x.astype(xp.float32)).astype(xp.float16)
    return 0.5 * xp.tanh(0.5 * x) + 0.5


def _softplus(xp: Any, x: Any) -> Any:
    """log(1 + exp(x)) without overflow: max(x, 0) + log1p(exp(-|x|))."""
    return xp.maximum(x, 0) + xp.log1p(xp.exp(-xp.abs(x)))


def _mask(x: Any, dtype: Any) -> Any:
    return x.astype(dtype)


def _mish(xp: Any, x: Any, a: Attrs) -> Any:
    """x tanh(softplus(x)), softplus(x) taken as x beyond ``threshold`` (Paddle)."""
    return x * xp.tanh(xp.where(x > a["threshold"], x, _softplus(xp, x)))


def _mish_grad(xp: Any, x: Any, dout: Any, a: Attrs) -> Any:
    big = x > a["threshold"]
    sp = xp.where(big, x, _softplus(xp, x))
    t = xp.tanh(sp)
    dsp = xp.where(big, 1.0, 1 - xp.exp(-sp))
    return dout * (t + x * (1 - t * t) * dsp)


def _swish_grad(xp: Any, x: Any, dout: Any, a: Attrs) -> Any:
    """dOut * (beta Out + s (1 - beta Out)), s = sigmoid(beta X), Out = X s."""
    s = _sigmoid(xp, a["beta"] * x)
    beta_out = a["beta"] * x * s
    return dout * (beta_out + s * (1 - beta_out))


def _round(xp: Any, x: Any, a: Attrs) -> Any:
    """Halves away from zero (C's round), at ``decimals`` digits after the point."""
    scale = 10.0 ** a["decimals"]
    y = x * scale if a["decimals"] else x
    r = xp.sign(y) * xp.floor(xp.abs(y) + 0.5)
    return (r / scale if a["decimals"] else r).astype(x.dtype, copy=False)


def _zero_grad(xp: Any, x: Any, dout: Any, a: Attrs) -> Any:
    return xp.zeros_like(dout)


def _typed(fn: Callable[[Any, Any, Attrs], Any]) -> Callable[[Any, Any, Attrs], Any]:
    """``fn`` with its result in X's dtype (Python float constants would widen a float16 or float32 X)."""
    return lambda xp, x, a: fn(xp, x, a).astype(x.dtype, copy=False)


_SELU_SCALE, _SELU_ALPHA = 1.0507009873554804934193349852946, 1.6732632423543772848170429916717
_LN2, _LN10 = math.log(2.0), math.log(10.0)

UNARY: tuple[Unary, ...] = (
    # -- activations --
    Unary(
        "relu6",
        lambda xp, x, a: xp.clip(x, 0, a["threshold"]).astype(x.dtype, copy=False),
        lambda xp, out, d, a: d * _mask((out > 0) & (out < a["threshold"]), d.dtype),
        reads="Out",
        attrs=(_f("threshold", 6.0),),
        doc="Out = min(max(X, 0), threshold).",
    ),
    Unary(
        "hard_swish",
        lambda xp, x, a: x * xp.clip(x + a["offset"], 0, a["threshold"]) / a["scale"],
        lambda xp, x, d, a: (
            d
            * xp.where(
                x + a["offset"] <= 0,
                0.0,
                xp.where(
                    x + a["offset"] >= a["threshold"], a["threshold"] / a["scale"], (2 * x + a["offset"]) / a["scale"]
                ),
            )
        ),
        attrs=(_f("threshold", 6.0), _f("scale", 6.0), _f("offset", 3.0)),
        doc="Out = X * min(max(X + offset, 0), threshold) / scale (Paddle 3's kernel fixes 6, 6, 3: the defaults).",
    ),
    Unary(
        "hard_sigmoid",
        lambda xp, x, a: xp.clip(x * a["slope"] + a["offset"], 0, 1),
        lambda xp, out, d, a: d * a["slope"] * _mask((out > 0) & (out < 1), d.dtype),
        reads="Out",
        attrs=(_f("slope", 0.2), _f("offset", 0.5)),
        doc="Out = min(max(slope * X + offset, 0), 1).",
    ),
    Unary(
        "swish",
        lambda xp, x, a: x * _sigmoid(xp, a["beta"] * x),
        _swish_grad,
        attrs=(_f("beta", 1.0),),
        doc="Out = X * sigmoid(beta * X).",
    ),
    Unary(
        "silu",
        lambda xp, x, a: x * _sigmoid(xp, x),
        lambda xp, x, d, a: d * _sigmoid(xp, x) * (1 + x * (1 - _sigmoid(xp, x))),
        doc="Out = X * sigmoid(X).",
    ),
    Unary(
        "mish",
        _mish,
        _mish_grad,
        attrs=(_f("threshold", 20.0),),
        doc="Out = X * tanh(softplus(X)), softplus(X) = X beyond threshold.",
    ),
    Unary(
        "elu",
        lambda xp, x, a: xp.where(x > 0, x, a["alpha"] * xp.expm1(xp.minimum(x, 0))),
        lambda xp, x, d, a: d * xp.where(x > 0, 1.0, a["alpha"] * xp.exp(xp.minimum(x, 0))),
        attrs=(_f("alpha", 1.0),),
        doc="Out = X for X > 0, else alpha * (exp(X) - 1).",
    ),
    Unary(
        "selu",
        lambda xp, x, a: a["scale"] * xp.where(x > 0, x, a["alpha"] * xp.expm1(xp.minimum(x, 0))),
        lambda xp, out, d, a: d * xp.where(out > 0, a["scale"], out + a["scale"] * a["alpha"]),
        reads="Out",
        attrs=(_f("scale", _SELU_SCALE), _f("alpha", _SELU_ALPHA)),
        doc="Out = scale * (X for X > 0, else alpha * (exp(X) - 1)).",
    ),
    Unary(
        "celu",
        lambda xp, x, a: xp.where(x > 0, x, a["alpha"] * xp.expm1(xp.minimum(x, 0) / a["alpha"])),
        lambda xp, x, d, a: d * xp.where(x > 0, 1.0, xp.exp(xp.minimum(x, 0) / a["alpha"])),
        attrs=(_f("alpha", 1.0),),
        doc="Out = max(X, 0) + min(alpha * (exp(X / alpha) - 1), 0).",
    ),
    Unary(
        "leaky_relu",
        lambda xp, x, a: xp.where(x > 0, x, a["alpha"] * x),
        lambda xp, x, d, a: d * xp.where(x > 0, 1.0, a["alpha"]),
        attrs=(_f("alpha", 0.02),),
        doc="Out = X for X > 0, else alpha * X.",
    ),
    Unary(
        "brelu",
        lambda xp, x, a: xp.clip(x, a["t_min"], a["t_max"]),
        lambda xp, x, d, a: d * _mask((x > a["t_min"]) & (x < a["t_max"]), d.dtype),
        attrs=(_f("t_min", 0.0), _f("t_max", 24.0)),
        doc="Out = min(max(X, t_min), t_max) (paddle.nn.Hardtanh).",
    ),
    Unary(
        "softplus",
        lambda xp, x, a: xp.where(a["beta"] * x > a["threshold"], x, _softplus(xp, a["beta"] * x) / a["beta"]),
        lambda xp, x, d, a: d * xp.where(a["beta"] * x > a["threshold"], 1.0, _sigmoid(xp, a["beta"] * x)),
        attrs=(_f("beta", 1.0), _f("threshold", 20.0)),
        doc="Out = log(1 + exp(beta * X)) / beta, X where beta * X > threshold.",
    ),
    Unary(
        "softsign",
        lambda xp, x, a: x / (1 + xp.abs(x)),
        lambda xp, x, d, a: d / ((1 + xp.abs(x)) * (1 + xp.abs(x))),
        doc="Out = X / (1 + |X|).",
    ),
    Unary(
        "softshrink",
        lambda xp, x, a: xp.where(x > a["lambda"], x - a["lambda"], xp.where(x < -a["lambda"], x + a["lambda"], 0.0)),
        lambda xp, x, d, a: d * _mask(xp.abs(x) > a["lambda"], d.dtype),
        attrs=(_f("lambda", 0.5),),
        doc="Out = X - lambda above lambda, X + lambda below -lambda, else 0.",
    ),
    Unary(
        "hard_shrink",
        lambda xp, x, a: xp.where(xp.abs(x) > a["threshold"], x, 0.0),
        lambda xp, x, d, a: d * _mask(xp.abs(x) > a["threshold"], d.dtype),
        attrs=(_f("threshold", 0.5),),
        doc="Out = X where |X| > threshold, else 0.",
    ),
    Unary(
        "tanh_shrink",
        lambda xp, x, a: x - xp.tanh(x),
        lambda xp, x, d, a: d * xp.tanh(x) * xp.tanh(x),
        doc="Out = X - tanh(X).",
    ),
    Unary(
        "thresholded_relu",
        lambda xp, x, a: xp.where(x > a["threshold"], x, a["value"]),
        lambda xp, x, d, a: d * _mask(x > a["threshold"], d.dtype),
        attrs=(_f("threshold", 1.0), _f("value", 0.0)),
        doc="Out = X where X > threshold, else value.",
    ),
    Unary(
        "logsigmoid",
        lambda xp, x, a: -_softplus(xp, -x),
        lambda xp, x, d, a: d * _sigmoid(xp, -x),
        doc="Out = log(sigmoid(X)) = -softplus(-X).",
    ),
    # -- unary math --
    Unary(
        "abs",
        lambda xp, x, a: xp.abs(x),
        lambda xp, x, d, a: d * xp.sign(x).astype(d.dtype, copy=False),
        dtypes=NUMBERS,
        doc="Out = |X|; gradient sign(X) (0 at 0).",
    ),
    Unary(
        "sign",
        lambda xp, x, a: xp.sign(x),
        _zero_grad,
        dtypes=NUMBERS,
        doc="Out = -1, 0 or 1; gradient 0.",
    ),
    Unary("floor", lambda xp, x, a: xp.floor(x), _zero_grad, doc="Out = floor(X); gradient 0."),
    Unary("ceil", lambda xp, x, a: xp.ceil(x), _zero_grad, doc="Out = ceil(X); gradient 0."),
    Unary(
        "round",
        _round,
        _zero_grad,
        attrs=(AttrDef("decimals", AttrType.INT, 0),),
        doc="Out = X rounded half away from zero at `decimals` digits; gradient 0.",
    ),
    Unary("exp", lambda xp, x, a: xp.exp(x), lambda xp, out, d, a: d * out, reads="Out", doc="Out = exp(X)."),
    Unary(
        "expm1", lambda xp, x, a: xp.expm1(x), lambda xp, out, d, a: d * (out + 1), reads="Out", doc="Out = exp(X) - 1."
    ),
    Unary("log", lambda xp, x, a: xp.log(x), lambda xp, x, d, a: d / x, doc="Out = ln(X)."),
    Unary("log1p", lambda xp, x, a: xp.log1p(x), lambda xp, x, d, a: d / (1 + x), doc="Out = ln(1 + X)."),
    Unary("log2", lambda xp, x, a: xp.log2(x), lambda xp, x, d, a: d / (x * _LN2), doc="Out = log2(X)."),
    Unary("log10", lambda xp, x, a: xp.log10(x), lambda xp, x, d, a: d / (x * _LN10), doc="Out = log10(X)."),
    Unary("sqrt", lambda xp, x, a: xp.sqrt(x), lambda xp, out, d, a: d * 0.5 / out, reads="Out", doc="Out = sqrt(X)."),
    Unary(
        "rsqrt",
        lambda xp, x, a: 1 / xp.sqrt(x),
        lambda xp, out, d, a: d * -0.5 * out * out * out,
        reads="Out",
        doc="Out = 1 / sqrt(X).",
    ),
    Unary(
        "reciprocal",
        lambda xp, x, a: 1 / x,
        lambda xp, out, d, a: -d * out * out,
        reads="Out",
        doc="Out = 1 / X.",
    ),
    Unary("sin", lambda xp, x, a: xp.sin(x), lambda xp, x, d, a: d * xp.cos(x), doc="Out = sin(X)."),
    Unary("cos", lambda xp, x, a: xp.cos(x), lambda xp, x, d, a: -d * xp.sin(x), doc="Out = cos(X)."),
    Unary("tan", lambda xp, x, a: xp.tan(x), lambda xp, x, d, a: d / (xp.cos(x) * xp.cos(x)), doc="Out = tan(X)."),
    Unary("atan", lambda xp, x, a: xp.arctan(x), lambda xp, x, d, a: d / (1 + x * x), doc="Out = atan(X)."),
    Unary("asin", lambda xp, x, a: xp.arcsin(x), lambda xp, x, d, a: d / xp.sqrt(1 - x * x), doc="Out = asin(X)."),
    Unary("acos", lambda xp, x, a: xp.arccos(x), lambda xp, x, d, a: -d / xp.sqrt(1 - x * x), doc="Out = acos(X)."),
    Unary("sinh", lambda xp, x, a: xp.sinh(x), lambda xp, x, d, a: d * xp.cosh(x), doc="Out = sinh(X)."),
    Unary("cosh", lambda xp, x, a: xp.cosh(x), lambda xp, x, d, a: d * xp.sinh(x), doc="Out = cosh(X)."),
    Unary("asinh", lambda xp, x, a: xp.arcsinh(x), lambda xp, x, d, a: d / xp.sqrt(x * x + 1), doc="Out = asinh(X)."),
    Unary("acosh", lambda xp, x, a: xp.arccosh(x), lambda xp, x, d, a: d / xp.sqrt(x * x - 1), doc="Out = acosh(X)."),
    Unary("atanh", lambda xp, x, a: xp.arctanh(x), lambda xp, x, d, a: d / (1 - x * x), doc="Out = atanh(X)."),
    Unary(
        "erf",
        lambda xp, x, a: 1 - erfc(xp, x),
        lambda xp, x, d, a: d * (2 / math.sqrt(math.pi)) * xp.exp(-x * x),
        doc="Out = erf(X).",
    ),
)


def _unary_schemas(row: Unary) -> tuple[OpSchema, ...]:
    forward, backward = _typed(row.forward), row.backward

    def kernel(ctx: KernelContext, x: Any) -> Any:
        return forward(ctx.xp, x, ctx.attrs)

    grad_kernel = None
    if backward is not None:

        def grad_kernel(ctx: KernelContext, v: Any, dout: Any) -> Any:
            return backward(ctx.xp, v, dout, ctx.attrs).astype(dout.dtype, copy=False)

    return unary_family(
        row.type,
        kernel,
        grad_kernel,
        grad_input=row.reads,
        dtypes=row.dtypes,
        attrs=(*row.attrs, *_EXTRA),
        doc=row.doc,
    )


UNARY_SCHEMAS: tuple[OpSchema, ...] = tuple(schema for row in UNARY for schema in _unary_schemas(row))

# -- prelu ---------------------------------------------------------------------------------------------------

_PRELU_MODES = ("all", "channel", "element")
_PRELU_ATTRS = (
    AttrDef("mode", AttrType.STRING, "all"),
    AttrDef("data_format", AttrType.STRING, "NCHW"),
    AttrDef("is_test", AttrType.BOOLEAN, False),
    *_EXTRA,
)


def _prelu_count(shape: tuple[int, ...], mode: str, data_format: str) -> int:
    """How many slopes X of ``shape`` takes in ``mode`` (-1 when a dim it depends on is unknown)."""
    if mode == "all":
        return 1
    if mode == "channel":
        return shape[-1] if data_format == "NHWC" else shape[1]
    return numel(shape[1:])


def _infer_prelu(ctx: InferContext) -> None:
    x, alpha = check_dtype(ctx, "X", FLOATS), check_dtype(ctx, "Alpha", FLOATS)
    same_dtype(ctx, x, alpha)
    mode, layout = ctx.attr("mode"), ctx.attr("data_format")
    if mode not in _PRELU_MODES:
        ctx.fail(f"mode={mode!r} must be one of {', '.join(_PRELU_MODES)}")
    if layout not in ("NCHW", "NHWC"):
        ctx.fail(f"data_format={layout!r} must be NCHW or NHWC")
    if mode != "all" and len(x.shape) < 2:
        ctx.fail(f"mode={mode!r} needs X {fmt(x)} of rank 2 or more")
    want, have = _prelu_count(tuple(x.shape), mode, layout), numel(alpha.shape)
    if want >= 0 and have >= 0 and want != have:
        ctx.fail(f"Alpha {fmt(alpha)} has {have} slopes; mode={mode!r} over X {fmt(x)} takes {want}")
    ctx.set_output("Out", x.shape, x.dtype, lod_level=x.lod_level)


def _prelu_slopes(ctx: KernelContext, x: Any, alpha: Any) -> Any:
    """Alpha shaped to broadcast against X."""
    mode, layout = ctx.attrs["mode"], ctx.attrs["data_format"]
    want = _prelu_count(tuple(x.shape), mode, layout)
    if alpha.size != want:
        raise kernel_error(
            ctx, f"Alpha of shape {list(alpha.shape)} has {alpha.size} slopes; X {list(x.shape)} takes {want}"
        )
    if mode == "all":
        return alpha.reshape(())
    if mode == "element":
        return alpha.reshape(1, *x.shape[1:])
    if layout == "NHWC":
        return alpha.reshape(-1)
    return alpha.reshape(1, -1, *(1,) * (x.ndim - 2))


def _prelu(ctx: KernelContext, x: Any, alpha: Any) -> Any:
    return ctx.xp.where(x > 0, x, _prelu_slopes(ctx, x, alpha) * x)


def _prelu_grad(ctx: KernelContext, x: Any, alpha: Any, dout: Any) -> tuple[Any, Any]:
    """dX = dOut where X > 0, else dOut * alpha; dAlpha = the sum of dOut * X where X <= 0, per slope."""
    xp, slopes = ctx.xp, _prelu_slopes(ctx, x, alpha)
    dx = xp.where(x > 0, dout, dout * slopes) if ctx.wants[0] else None
    dalpha = None
    if ctx.wants[1]:
        dalpha = unbroadcast(xp, xp.where(x > 0, 0, dout * x), slopes.shape).reshape(alpha.shape)
    return dx, dalpha


PRELU_GRAD = OpSchema(
    "prelu_grad",
    inputs=(Slot("X"), Slot("Alpha"), Slot("Out@GRAD")),
    outputs=(Slot("X@GRAD"), Slot("Alpha@GRAD")),
    attrs=_PRELU_ATTRS,
    infer=infer_grads("X", "Alpha"),
    kernel=_prelu_grad,
    doc="Gradient of prelu.",
)
PRELU = OpSchema(
    "prelu",
    inputs=(Slot("X"), Slot("Alpha")),
    outputs=(Slot("Out"),),
    attrs=_PRELU_ATTRS,
    infer=_infer_prelu,
    grad=lambda g: grad_op(g, PRELU_GRAD, ("X", "Alpha", "Out@GRAD"), ("X", "Alpha")),
    kernel=_prelu,
    share_lod=(("X", "Out"),),
    doc="Out = X where X > 0, else Alpha * X: one slope (mode all), one per channel (channel: dim 1, the last "
    "with NHWC) or one per element of a sample (element).",
)

# -- log_softmax ---------------------------------------------------------------------------------------------


def _check_axis(ctx: InferContext, x: Any) -> None:
    normalize_axis(ctx, ctx.attr("axis"), max(len(x.shape), 1))


def _log_softmax(ctx: KernelContext, x: Any) -> Any:
    """X - max - log(sum(exp(X - max))) along ``axis``."""
    xp, axis = ctx.xp, ctx.attrs["axis"]
    shifted = x - x.max(axis=axis, keepdims=True)
    shifted -= xp.log(xp.exp(shifted).sum(axis=axis, keepdims=True))
    return shifted


def _log_softmax_grad(ctx: KernelContext, out: Any, dout: Any) -> Any:
    """dX = dOut - exp(Out) * sum(dOut, axis)."""
    xp = ctx.xp
    return dout - xp.exp(out) * dout.sum(axis=ctx.attrs["axis"], keepdims=True)


LOG_SOFTMAX, LOG_SOFTMAX_GRAD = unary_family(
    "log_softmax",
    _log_softmax,
    _log_softmax_grad,
    attrs=(AttrDef("axis", AttrType.INT, -1), *_EXTRA),
    check=_check_axis,
    doc="Out = log(softmax(X)) along `axis`.",
)

# -- maxout --------------------------------------------------------------------------------------------------

_MAXOUT_ATTRS = (AttrDef("groups", AttrType.INT), AttrDef("axis", AttrType.INT, 1))


def _infer_maxout(ctx: InferContext) -> None:
    x, groups = check_dtype(ctx, "X", FLOATS), ctx.attr("groups")
    if len(x.shape) != 4:
        ctx.fail(f"X {fmt(x)} must have rank 4")
    axis = ctx.attr("axis")
    if axis not in (1, -1, 3):
        ctx.fail(f"axis={axis} must be 1 (NCHW) or -1 / 3 (NHWC)")
    axis %= 4
    if groups < 1:
        ctx.fail(f"groups={groups} must be positive")
    channels = x.shape[axis]
    if channels >= 0 and channels % groups:
        ctx.fail(f"the {channels} channels of X {fmt(x)} do not split into groups of {groups}")
    shape = list(x.shape)
    shape[axis] = channels // groups if channels >= 0 else -1
    ctx.set_output("Out", shape, x.dtype)


def _grouped(ctx: KernelContext, x: Any) -> tuple[Any, int]:
    """X with its channel dim split into [channels / groups, groups], and the position of the groups dim."""
    axis, groups = ctx.attrs["axis"] % x.ndim, ctx.attrs["groups"]
    if x.shape[axis] % groups:
        raise kernel_error(
            ctx, f"the {x.shape[axis]} channels of X {list(x.shape)} do not split into groups of {groups}"
        )
    return x.reshape(*x.shape[:axis], x.shape[axis] // groups, groups, *x.shape[axis + 1 :]), axis + 1


def _maxout(ctx: KernelContext, x: Any) -> Any:
    grouped, axis = _grouped(ctx, x)
    return grouped.max(axis=axis)


def _maxout_grad(ctx: KernelContext, x: Any, out: Any, dout: Any) -> Any:
    """dOut to the first entry of each group equal to its maximum (as Paddle's)."""
    xp = ctx.xp
    grouped, axis = _grouped(ctx, x)
    hit = grouped == xp.expand_dims(out, axis)
    first = hit & (xp.cumsum(hit, axis=axis) == 1)
    return (first * xp.expand_dims(dout, axis)).astype(dout.dtype, copy=False).reshape(x.shape)


MAXOUT_GRAD = OpSchema(
    "maxout_grad",
    inputs=(Slot("X"), Slot("Out"), Slot("Out@GRAD")),
    outputs=(Slot("X@GRAD"),),
    attrs=_MAXOUT_ATTRS,
    infer=infer_grads("X"),
    kernel=_maxout_grad,
    doc="Gradient of maxout.",
)
MAXOUT = OpSchema(
    "maxout",
    inputs=(Slot("X"),),
    outputs=(Slot("Out"),),
    attrs=_MAXOUT_ATTRS,
    infer=_infer_maxout,
    grad=lambda g: grad_op(g, MAXOUT_GRAD, ("X", "Out", "Out@GRAD"), ("X",)),
    kernel=_maxout,
    doc="The maximum of each group of `groups` consecutive channels (dim `axis`) of a rank-4 X.",
)

# -- clip, pow -----------------------------------------------------------------------------------------------

_CLIP_ATTRS = (AttrDef("min", AttrType.FLOAT), AttrDef("max", AttrType.FLOAT), *_EXTRA)


def _infer_clip(ctx: InferContext) -> None:
    x = check_dtype(ctx, "X", NUMBERS)
    for slot in ("Min", "Max"):
        if ctx.has_input(slot):
            one_value(ctx, slot)
    if not ctx.has_input("Min") and not ctx.has_input("Max") and ctx.attr("min") > ctx.attr("max"):
        ctx.fail(f"min={ctx.attr('min')} is greater than max={ctx.attr('max')}")
    ctx.set_output("Out", x.shape, x.dtype, lod_level=x.lod_level)


def _value(tensor: Any, default: float) -> float:
    return default if tensor is None else float(to_host(tensor).reshape(-1)[0])


def _bounds(ctx: KernelContext, x: Any, low: Any, high: Any) -> tuple[Any, Any]:
    """The bounds (Min's and Max's values when given, else the attributes) in X's dtype."""
    lo, hi = _value(low, ctx.attrs["min"]), _value(high, ctx.attrs["max"])
    if lo > hi:
        raise kernel_error(ctx, f"min {lo} is greater than max {hi}")
    return x.dtype.type(lo), x.dtype.type(hi)


def _clip(ctx: KernelContext, x: Any, low: Any, high: Any) -> Any:
    lo, hi = _bounds(ctx, x, low, high)
    return ctx.xp.minimum(ctx.xp.maximum(x, lo), hi)


def _clip_grad(ctx: KernelContext, x: Any, low: Any, high: Any, dout: Any) -> Any:
    """dOut where min < X < max, else 0."""
    lo, hi = _bounds(ctx, x, low, high)
    return dout * ((x > lo) & (x < hi)).astype(dout.dtype)


_CLIP_INPUTS = (Slot("X"), Slot("Min", optional=True, no_grad=True), Slot("Max", optional=True, no_grad=True))
CLIP_GRAD = OpSchema(
    "clip_grad",
    inputs=(*_CLIP_INPUTS, Slot("Out@GRAD")),
    outputs=(Slot("X@GRAD"),),
    attrs=_CLIP_ATTRS,
    infer=infer_grads("X"),
    kernel=_clip_grad,
    doc="Gradient of clip: dOut where min < X < max.",
)
CLIP = OpSchema(
    "clip",
    inputs=_CLIP_INPUTS,
    outputs=(Slot("Out"),),
    attrs=_CLIP_ATTRS,
    infer=_infer_clip,
    grad=lambda g: grad_op(g, CLIP_GRAD, ("X", "Min", "Max", "Out@GRAD"), ("X",)),
    kernel=_clip,
    share_lod=(("X", "Out"),),
    doc="Out = min(max(X, min), max); Min and Max (one value each) override the attributes.",
)

_POW_ATTRS = (AttrDef("factor", AttrType.FLOAT, 1.0), *_EXTRA)


def _infer_pow(ctx: InferContext) -> None:
    x = check_dtype(ctx, "X", NUMBERS)
    if ctx.has_input("FactorTensor"):
        one_value(ctx, "FactorTensor")
    ctx.set_output("Out", x.shape, x.dtype, lod_level=x.lod_level)


def _root_power(xp: Any, x: Any, factor: float) -> Any:
    """X ** 0.75 as sqrt(X) * sqrt(sqrt(X)) (no product larger than X: nothing overflows), X ** 0.25 as
    sqrt(sqrt(X)), where every value of X is positive (LRN's denominator, ONNX's ``(k + alpha / n * sum) ** beta``
    with beta 0.75), else None. numpy's power by a float exponent (other than its own fast 0.5, 1, 2) calls the
    C library's pow per element, some 10x the time of these square roots (1 thread, [1, 192, 56, 56]: 6.6 ms
    against 0.7); within 2 ulps of the power. Zeros, infinities and NaN (also negative values, whose power is
    NaN) go to numpy's power: the minimum decides."""
    if factor not in (0.25, 0.75) or not x.size or not x.min() > 0:
        return None
    root = xp.sqrt(x)
    if factor == 0.25:
        return xp.sqrt(root, out=root)
    return xp.multiply(root, xp.sqrt(root), out=root)


def _pow(ctx: KernelContext, x: Any, factor_tensor: Any) -> Any:
    """X ** factor; integers: the power of doubles truncated, as Paddle's cast of std::pow. Floats by square
    roots for the exponents :func:`_root_power` takes."""
    factor, xp = _value(factor_tensor, ctx.attrs["factor"]), ctx.xp
    if x.dtype.kind == "f":
        out = _root_power(xp, x, factor)
        return xp.power(x, x.dtype.type(factor)) if out is None else out
    return xp.power(x.astype("float64"), factor).astype(x.dtype)


def _pow_grad(ctx: KernelContext, x: Any, factor_tensor: Any, dout: Any) -> Any:
    factor = _value(factor_tensor, ctx.attrs["factor"])
    return (dout * factor * ctx.xp.power(x, x.dtype.type(factor - 1))).astype(dout.dtype, copy=False)


_POW_INPUTS = (Slot("X"), Slot("FactorTensor", optional=True, no_grad=True))
POW_GRAD = OpSchema(
    "pow_grad",
    inputs=(*_POW_INPUTS, Slot("Out@GRAD")),
    outputs=(Slot("X@GRAD"),),
    attrs=_POW_ATTRS,
    infer=infer_grads("X"),
    kernel=_pow_grad,
    doc="Gradient of pow: dOut * factor * X ** (factor - 1).",
)
POW = OpSchema(
    "pow",
    inputs=_POW_INPUTS,
    outputs=(Slot("Out"),),
    attrs=_POW_ATTRS,
    infer=_infer_pow,
    grad=lambda g: grad_op(g, POW_GRAD, ("X", "FactorTensor", "Out@GRAD"), ("X",)),
    kernel=_pow,
    share_lod=(("X", "Out"),),
    doc="Out = X ** factor (FactorTensor's value when given).",
)

SCHEMAS: tuple[OpSchema, ...] = (
    *UNARY_SCHEMAS,
    PRELU,
    PRELU_GRAD,
    LOG_SOFTMAX,
    LOG_SOFTMAX_GRAD,
    MAXOUT,
    MAXOUT_GRAD,
    CLIP,
    CLIP_GRAD,
    POW,
    POW_GRAD,
)
