"""Reductions and scans beyond ``reduce_sum`` / ``reduce_mean`` (:mod:`blockir.ops.math`): ``reduce_max``,
``reduce_min``, ``reduce_prod``, ``reduce_all``, ``reduce_any`` (the ``reduce_*`` family of
:func:`blockir.ops.common.reduce_family`), ``logsumexp``, ``p_norm``, ``cumsum``, ``cumprod`` and
``determinant``, with their gradient ops where Paddle has one.

As the ``reduce_*`` family, a reduction over every dim gives ``[1]`` (Fluid's shape; Paddle 3 gives 0-D). Kernels
are written once against ``ctx.xp`` and keep X's dtype.
"""

from __future__ import annotations

import math
from typing import Any

from blockir.ir.attrs import AttrType
from blockir.ir.schema import AttrDef, InferContext, KernelContext, OpSchema, Slot
from blockir.ops.common import (
    ALL_DTYPES,
    FLOATS,
    NUMBERS,
    check_dtype,
    fmt,
    grad_op,
    infer_grads,
    normalize_axis,
    reduce_axes,
    reduce_family,
    reduced_shape,
)


def _kept(shape: tuple[int, ...], axes: tuple[int, ...]) -> tuple[int, ...]:
    """``shape`` with the reduced ``axes`` kept as 1s (what a reduced value broadcasts from)."""
    return tuple(1 if i in axes else d for i, d in enumerate(shape))


def _reduced(out: Any) -> Any:
    return out if out.ndim else out.reshape(1)


# -- reduce_max, reduce_min, reduce_prod, reduce_all, reduce_any ------------------------------------------------


def _reduce_max(ctx: KernelContext, x: Any, axes: tuple[int, ...]) -> Any:
    return _reduced(x.max(axis=axes, keepdims=ctx.attrs["keep_dim"]))


def _reduce_min(ctx: KernelContext, x: Any, axes: tuple[int, ...]) -> Any:
    return _reduced(x.min(axis=axes, keepdims=ctx.attrs["keep_dim"]))


def _extremum_grad(ctx: KernelContext, x: Any, out: Any, dout: Any, axes: tuple[int, ...]) -> Any:
    """dOut to every entry equal to the extreme value (ties each get all of it, as Paddle's)."""
    kept = _kept(x.shape, axes)
    return (x == out.reshape(kept)) * dout.reshape(kept)


def _reduce_prod(ctx: KernelContext, x: Any, axes: tuple[int, ...]) -> Any:
    return _reduced(x.prod(axis=axes, dtype=x.dtype, keepdims=ctx.attrs["keep_dim"]))


def _reduce_prod_grad(ctx: KernelContext, x: Any, out: Any, dout: Any, axes: tuple[int, ...]) -> Any:
    """dOut * Out / X, as Paddle's (not finite where X is 0)."""
    kept = _kept(x.shape, axes)
    return dout.reshape(kept) * out.reshape(kept) / x


def _reduce_all(ctx: KernelContext, x: Any, axes: tuple[int, ...]) -> Any:
    return _reduced(x.astype(bool, copy=False).all(axis=axes, keepdims=ctx.attrs["keep_dim"]))


def _reduce_any(ctx: KernelContext, x: Any, axes: tuple[int, ...]) -> Any:
    return _reduced(x.astype(bool, copy=False).any(axis=axes, keepdims=ctx.attrs["keep_dim"]))


_EXTREMUM_GRAD_INPUTS = ("X", "Out", "Out@GRAD")
REDUCE_MAX, REDUCE_MAX_GRAD = reduce_family(
    "reduce_max", _reduce_max, _extremum_grad, NUMBERS, "Maximum of X over `dim`.", _EXTREMUM_GRAD_INPUTS
)
REDUCE_MIN, REDUCE_MIN_GRAD = reduce_family(
    "reduce_min", _reduce_min, _extremum_grad, NUMBERS, "Minimum of X over `dim`.", _EXTREMUM_GRAD_INPUTS
)
REDUCE_PROD, REDUCE_PROD_GRAD = reduce_family(
    "reduce_prod", _reduce_prod, _reduce_prod_grad, NUMBERS, "Product of X over `dim`.", _EXTREMUM_GRAD_INPUTS
)
(REDUCE_ALL,) = reduce_family(
    "reduce_all", _reduce_all, None, ALL_DTYPES, "Whether every entry of X over `dim` is true.", out_dtype="bool"
)
(REDUCE_ANY,) = reduce_family(
    "reduce_any", _reduce_any, None, ALL_DTYPES, "Whether some entry of X over `dim` is true.", out_dtype="bool"
)

# -- logsumexp ---------------------------------------------------------------------------------------------------

_LOGSUMEXP_ATTRS = (
    AttrDef("axis", AttrType.INTS, [0]),
    AttrDef("keepdim", AttrType.BOOLEAN, False),
    AttrDef("reduce_all", AttrType.BOOLEAN, False),
)


def _logsumexp_axes(ctx: KernelContext, x: Any) -> tuple[int, ...]:
    return reduce_axes(ctx.attrs["axis"], x.ndim, ctx.attrs["reduce_all"] or not ctx.attrs["axis"])


def _infer_logsumexp(ctx: InferContext) -> None:
    x = check_dtype(ctx, "X", FLOATS)
    for d in ctx.attr("axis"):
        normalize_axis(ctx, d, max(len(x.shape), 1))
    axes = reduce_axes(ctx.attr("axis"), len(x.shape), ctx.attr("reduce_all") or not ctx.attr("axis"))
    ctx.set_output("Out", reduced_shape(x.shape, axes, ctx.attr("keepdim")), x.dtype)


def _logsumexp(ctx: KernelContext, x: Any) -> Any:
    """max + log(sum(exp(X - max))) over ``axis`` (every dim with reduce_all or an empty axis)."""
    xp, axes = ctx.xp, _logsumexp_axes(ctx, x)
    top = x.max(axis=axes, keepdims=True)
    top = xp.where(xp.isfinite(top), top, 0)
    out = xp.log(xp.exp(x - top).sum(axis=axes, keepdims=True)) + top
    return _reduced(out if ctx.attrs["keepdim"] else out.reshape(reduced_shape(x.shape, axes, False)))


def _logsumexp_grad(ctx: KernelContext, x: Any, out: Any, dout: Any) -> Any:
    """dOut * exp(X - Out)."""
    kept = _kept(x.shape, _logsumexp_axes(ctx, x))
    return dout.reshape(kept) * ctx.xp.exp(x - out.reshape(kept))


LOGSUMEXP_GRAD = OpSchema(
    "logsumexp_grad",
    inputs=(Slot("X"), Slot("Out"), Slot("Out@GRAD")),
    outputs=(Slot("X@GRAD"),),
    attrs=_LOGSUMEXP_ATTRS,
    infer=infer_grads("X"),
    kernel=_logsumexp_grad,
    doc="Gradient of logsumexp: dOut * exp(X - Out).",
)
LOGSUMEXP = OpSchema(
    "logsumexp",
    inputs=(Slot("X"),),
    outputs=(Slot("Out"),),
    attrs=_LOGSUMEXP_ATTRS,
    infer=_infer_logsumexp,
    grad=lambda g: grad_op(g, LOGSUMEXP_GRAD, ("X", "Out", "Out@GRAD"), ("X",)),
    kernel=_logsumexp,
    doc="log(sum(exp(X))) over `axis` (every dim with reduce_all or an empty axis), computed from the maximum.",
)

# -- p_norm ------------------------------------------------------------------------------------------------------

_P_NORM_ATTRS = (
    AttrDef("porder", AttrType.FLOAT, 2.0),
    AttrDef("axis", AttrType.INT, -1),
    AttrDef("epsilon", AttrType.FLOAT, 1.0e-12),
    AttrDef("keepdim", AttrType.BOOLEAN, False),
    AttrDef("asvector", AttrType.BOOLEAN, False),
)


def _p_norm_axes(attrs: dict[str, Any], rank: int) -> tuple[int, ...]:
    return tuple(range(rank)) if attrs["asvector"] or rank == 0 else (attrs["axis"] % rank,)


def _infer_p_norm(ctx: InferContext) -> None:
    x = check_dtype(ctx, "X", FLOATS)
    if not ctx.attr("asvector"):
        normalize_axis(ctx, ctx.attr("axis"), max(len(x.shape), 1))
    axes = _p_norm_axes({"asvector": ctx.attr("asvector"), "axis": ctx.attr("axis")}, len(x.shape))
    ctx.set_output("Out", reduced_shape(x.shape, axes, ctx.attr("keepdim")), x.dtype)


def _p_norm(ctx: KernelContext, x: Any) -> Any:
    """(sum |X|^p)^(1/p) over ``axis`` (all X with asvector); p = inf: max |X|, -inf: min |X|, 0: the count of
    entries that are not 0."""
    xp, p, axes = ctx.xp, ctx.attrs["porder"], _p_norm_axes(ctx.attrs, x.ndim)
    a = xp.abs(x)
    if p == math.inf:
        out = a.max(axis=axes, keepdims=True)
    elif p == -math.inf:
        out = a.min(axis=axes, keepdims=True)
    elif p == 0:
        out = (a != 0).sum(axis=axes, keepdims=True).astype(x.dtype)
    else:
        out = xp.power(xp.power(a, p).sum(axis=axes, keepdims=True), 1.0 / p)
    out = out.astype(x.dtype, copy=False)
    return _reduced(out if ctx.attrs["keepdim"] else out.reshape(reduced_shape(x.shape, axes, False)))


def _p_norm_grad(ctx: KernelContext, x: Any, out: Any, dout: Any) -> Any:
    """dOut * sign(X) |X|^(p-1) / max(Out, epsilon)^(p-1); for p = +-inf dOut * sign(X) where |X| is the norm;
    0 for p = 0 (as Paddle's)."""
    xp, p, axes = ctx.xp, ctx.attrs["porder"], _p_norm_axes(ctx.attrs, x.ndim)
    kept = _kept(x.shape, axes)
    norm, d = out.reshape(kept), dout.reshape(kept)
    if p == 0:
        return xp.zeros_like(x)
    if math.isinf(p):
        return d * xp.sign(x) * (xp.abs(x) == norm)
    return d * xp.sign(x) * xp.power(xp.abs(x), p - 1) / xp.power(xp.maximum(norm, ctx.attrs["epsilon"]), p - 1)


P_NORM_GRAD = OpSchema(
    "p_norm_grad",
    inputs=(Slot("X"), Slot("Out"), Slot("Out@GRAD")),
    outputs=(Slot("X@GRAD"),),
    attrs=_P_NORM_ATTRS,
    infer=infer_grads("X"),
    kernel=_p_norm_grad,
    doc="Gradient of p_norm.",
)
P_NORM = OpSchema(
    "p_norm",
    inputs=(Slot("X"),),
    outputs=(Slot("Out"),),
    attrs=_P_NORM_ATTRS,
    infer=_infer_p_norm,
    grad=lambda g: grad_op(g, P_NORM_GRAD, ("X", "Out", "Out@GRAD"), ("X",)),
    kernel=_p_norm,
    doc="The porder-norm of X along `axis` (of all X with asvector).",
)

# -- cumsum, cumprod ------------------------------------------------------------------------------------------------

_CUMSUM_ATTRS = (
    AttrDef("axis", AttrType.INT, -1),
    AttrDef("flatten", AttrType.BOOLEAN, False),
    AttrDef("exclusive", AttrType.BOOLEAN, False),
    AttrDef("reverse", AttrType.BOOLEAN, False),
    AttrDef("use_mkldnn", AttrType.BOOLEAN, False),
)


def _scan_check(ctx: InferContext, x: Any) -> None:
    if not ctx.attr("flatten"):
        normalize_axis(ctx, ctx.attr("axis"), max(len(x.shape), 1))


def _infer_cumsum(ctx: InferContext) -> None:
    x = check_dtype(ctx, "X", NUMBERS)
    _scan_check(ctx, x)
    flat = ctx.attr("flatten") or not x.shape
    ctx.set_output("Out", ((-1 if any(d < 0 for d in x.shape) else math.prod(x.shape)),) if flat else x.shape, x.dtype)


def _shifted(xp: Any, a: Any, axis: int, fill: float) -> Any:
    """``a`` moved one step along ``axis``: ``fill`` first, its last entry dropped (an exclusive scan)."""
    head = xp.full((*a.shape[:axis], 1, *a.shape[axis + 1 :]), fill, dtype=a.dtype)
    body = a[(slice(None),) * axis + (slice(None, -1),)]
    return xp.concatenate([head, body], axis=axis)


def _scan(xp: Any, x: Any, axis: int, exclusive: bool, reverse: bool, product: bool) -> Any:
    """Cumulative sums (products) of X along ``axis``, from the end with ``reverse``, each without its own
    entry with ``exclusive``."""
    data = xp.flip(x, axis) if reverse else x
    out = (xp.cumprod if product else xp.cumsum)(data, axis=axis, dtype=x.dtype)
    if exclusive:
        out = _shifted(xp, out, axis, 1 if product else 0)
    return xp.flip(out, axis) if reverse else out


def _cumsum_view(ctx: KernelContext, x: Any) -> tuple[Any, int]:
    """X as cumsum scans it (flattened with ``flatten``) and the axis."""
    if ctx.attrs["flatten"] or x.ndim == 0:
        return x.reshape(-1), 0
    return x, ctx.attrs["axis"] % x.ndim


def _cumsum(ctx: KernelContext, x: Any) -> Any:
    data, axis = _cumsum_view(ctx, x)
    return _scan(ctx.xp, data, axis, ctx.attrs["exclusive"], ctx.attrs["reverse"], product=False)


def _cumsum_grad(ctx: KernelContext, x: Any, dout: Any) -> Any:
    """The scan of dOut the other way round (as exclusive as the forward one), in X's shape."""
    _, axis = _cumsum_view(ctx, x)
    return _scan(ctx.xp, dout, axis, ctx.attrs["exclusive"], not ctx.attrs["reverse"], product=False).reshape(x.shape)


CUMSUM_GRAD = OpSchema(
    "cumsum_grad",
    inputs=(Slot("X"), Slot("Out@GRAD")),
    outputs=(Slot("X@GRAD"),),
    attrs=_CUMSUM_ATTRS,
    infer=infer_grads("X"),
    kernel=_cumsum_grad,
    doc="Gradient of cumsum: the reverse scan of dOut.",
)
CUMSUM = OpSchema(
    "cumsum",
    inputs=(Slot("X"),),
    outputs=(Slot("Out"),),
    attrs=_CUMSUM_ATTRS,
    infer=_infer_cumsum,
    grad=lambda g: grad_op(g, CUMSUM_GRAD, ("X", "Out@GRAD"), ("X",)),
    kernel=_cumsum,
    doc="Cumulative sums of X along `axis` (of X flattened with flatten), from the end with reverse, without each "
    "entry itself with exclusive.",
)

_CUMPROD_ATTRS = (
    AttrDef("dim", AttrType.INT),
    AttrDef("exclusive", AttrType.BOOLEAN, False),
    AttrDef("reverse", AttrType.BOOLEAN, False),
)


def _cumprod(ctx: KernelContext, x: Any) -> Any:
    axis = ctx.attrs["dim"] % max(x.ndim, 1)
    return _scan(ctx.xp, x.reshape(x.shape or (1,)), axis, ctx.attrs["exclusive"], ctx.attrs["reverse"], True).reshape(
        x.shape
    )


def _cumprod_grad(ctx: KernelContext, x: Any, out: Any, dout: Any) -> Any:
    """Without dividing by X (exact where X has zeros): along the scan, dX_i = P_i S_i with P_i the product of the
    entries before i and S_i = dOut_i + X_(i+1) S_(i+1) (exclusive: S_i = dOut_(i+1) + X_(i+1) S_(i+1))."""
    xp, exclusive, reverse = ctx.xp, ctx.attrs["exclusive"], ctx.attrs["reverse"]
    axis = ctx.attrs["dim"] % max(x.ndim, 1)
    xs = xp.moveaxis(x.reshape(x.shape or (1,)), axis, 0)
    ds = xp.moveaxis(dout.reshape(x.shape or (1,)), axis, 0)
    if reverse:
        xs, ds = xs[::-1], ds[::-1]
    before = _scan(xp, xs, 0, exclusive=True, reverse=False, product=True)
    dx = xp.empty_like(xs)
    s = xp.zeros_like(xs[0])
    n = xs.shape[0]
    for i in range(n - 1, -1, -1):
        if i + 1 < n:
            carried = xs[i + 1] * s
            s = ds[i + 1] + carried if exclusive else ds[i] + carried
        elif not exclusive:
            s = ds[i]
        dx[i] = before[i] * s
    if reverse:
        dx = dx[::-1]
    return xp.moveaxis(dx, 0, axis).reshape(x.shape)


def _infer_cumprod(ctx: InferContext) -> None:
    x = check_dtype(ctx, "X", NUMBERS)
    normalize_axis(ctx, ctx.attr("dim"), max(len(x.shape), 1), "dim")
    ctx.set_output("Out", x.shape, x.dtype, lod_level=x.lod_level)


CUMPROD_GRAD = OpSchema(
    "cumprod_grad",
    inputs=(Slot("X"), Slot("Out"), Slot("Out@GRAD")),
    outputs=(Slot("X@GRAD"),),
    attrs=_CUMPROD_ATTRS,
    infer=infer_grads("X"),
    kernel=_cumprod_grad,
    doc="Gradient of cumprod.",
)
CUMPROD = OpSchema(
    "cumprod",
    inputs=(Slot("X"),),
    outputs=(Slot("Out"),),
    attrs=_CUMPROD_ATTRS,
    infer=_infer_cumprod,
    grad=lambda g: grad_op(g, CUMPROD_GRAD, ("X", "Out", "Out@GRAD"), ("X",)),
    kernel=_cumprod,
    share_lod=(("X", "Out"),),
    doc="Cumulative products of X along `dim`, from the end with reverse, without each entry itself with exclusive.",
)

SCHEMAS: tuple[OpSchema, ...] = (
    REDUCE_MAX,
    REDUCE_MAX_GRAD,
    REDUCE_MIN,
    REDUCE_MIN_GRAD,
    REDUCE_PROD,
    REDUCE_PROD_GRAD,
    REDUCE_ALL,
    REDUCE_ANY,
    LOGSUMEXP,
    LOGSUMEXP_GRAD,
    P_NORM,
    P_NORM_GRAD,
    CUMSUM,
    CUMSUM_GRAD,
    CUMPROD,
    CUMPROD_GRAD,
)

# -- determinant (Paddle's; each square matrix of the last two dims reduced to its determinant) -------------------

_DET_DTYPES = frozenset({"float32", "float64"})


def _infer_determinant(ctx: InferContext) -> None:
    x = check_dtype(ctx, "Input", _DET_DTYPES)
    shape = tuple(x.shape)
    if len(shape) < 2 or (shape[-1] != shape[-2] and -1 not in shape[-2:]):
        ctx.fail(f"Input {fmt(x)} must be square matrices [..., n, n]")
    ctx.set_output("Out", shape[:-2], x.dtype)


def _determinant_grad(ctx: KernelContext, x: Any, out: Any, dout: Any) -> Any:
    """dOut * det(X) * inv(X)^T (zeros for a singular matrix, as Paddle's)."""
    xp = ctx.xp
    det = out.reshape(*out.shape, 1, 1)
    n = xp.arange(x.shape[-1])
    invertible = xp.where(det != 0, x, (n[:, None] == n).astype(x.dtype))  # a singular one's grad: 0 * inv(I)
    return dout.reshape(det.shape) * det * xp.swapaxes(xp.linalg.inv(invertible), -1, -2)


DETERMINANT_GRAD = OpSchema(
    "determinant_grad",
    inputs=(Slot("Input"), Slot("Out"), Slot("Out@GRAD")),
    outputs=(Slot("Input@GRAD"),),
    infer=infer_grads("Input"),
    kernel=_determinant_grad,
    doc="Gradient of determinant.",
)
DETERMINANT = OpSchema(
    "determinant",
    inputs=(Slot("Input"),),
    outputs=(Slot("Out"),),
    infer=_infer_determinant,
    grad=lambda g: grad_op(g, DETERMINANT_GRAD, ("Input", "Out", "Out@GRAD"), ("Input",)),
    kernel=lambda ctx, x: ctx.xp.linalg.det(x).astype(x.dtype, copy=False),
    doc="Out = the determinant of each matrix of Input [..., n, n], of shape [...] (0-D for one matrix).",
)

SCHEMAS += (DETERMINANT, DETERMINANT_GRAD)
