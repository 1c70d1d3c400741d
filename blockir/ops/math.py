"""Tensor math ops: matrix products, elementwise arithmetic, activations, reductions, tensor plumbing.

Names, slots and attributes follow PaddlePaddle Fluid 1.x (docs/ops.md). Every
kernel is written once against ``ctx.xp`` (numpy or cupy) and keeps its input
dtype (float32 in, float32 out). Kernels never write into their inputs, except
those the executor offers through a keyword-only ``reuse`` parameter (one flag
per input slot; see :mod:`blockir.runtime.plan`); they may write into arrays
they have just allocated (``out=``, in-place operators).
Gradient kernels compute only the outputs ``ctx.wants`` asks for and return
None for the others.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

import numpy as np

from blockir.ir.attrs import AttrType
from blockir.ir.dtypes import DTYPE_TO_PROTO, VarKind
from blockir.ir.schema import EMPTY_VAR, AttrDef, GradContext, InferContext, KernelContext, OpSchema, OpSpec, Slot
from blockir.ops.common import (
    ALL_DTYPES,
    FLOATS,
    NUMBERS,
    Broadcast,
    binary_family,
    broadcast_dims,
    check_dtype,
    compatible,
    dtype_attr,
    expand_reduced,
    fill,
    fmt,
    grad_op,
    grad_outputs,
    infer_grads,
    kernel_error,
    merge_shapes,
    normalize_axis,
    np_dtype,
    numel,
    reduce_family,
    same_dtype,
    to_host,
    unary_family,
    unbroadcast,
    y_view,
)
from blockir.ops.values import SelectedRows

# -- mul -------------------------------------------------------------------------------------------

_MUL_ATTRS = (AttrDef("x_num_col_dims", AttrType.INT, 1), AttrDef("y_num_col_dims", AttrType.INT, 1))


def _infer_mul(ctx: InferContext) -> None:
    x, y = check_dtype(ctx, "X", NUMBERS), check_dtype(ctx, "Y", NUMBERS)
    same_dtype(ctx, x, y)
    xn, yn = ctx.attr("x_num_col_dims"), ctx.attr("y_num_col_dims")
    for name, var, n in (("x_num_col_dims", x, xn), ("y_num_col_dims", y, yn)):
        if not 1 <= n < len(var.shape):
            ctx.fail(f"{name}={n} must be in [1, {len(var.shape)}) for {fmt(var)}")
    if not compatible(numel(x.shape[xn:]), numel(y.shape[:yn])):
        ctx.fail(
            f"X {fmt(x)} flattened at x_num_col_dims={xn} has {numel(x.shape[xn:])} columns but Y "
            f"{fmt(y)} flattened at y_num_col_dims={yn} has {numel(y.shape[:yn])} rows"
        )
    ctx.set_output("Out", (*x.shape[:xn], *y.shape[yn:]), x.dtype, lod_level=x.lod_level)


def _matrix(a: Any, n: int) -> Any:
    """``a`` flattened to a matrix: dims before ``n`` make the rows, the rest the columns."""
    return a if a.ndim == 2 and n == 1 else a.reshape(math.prod(a.shape[:n]), math.prod(a.shape[n:]))


def _shaped(a: Any, shape: tuple[int, ...]) -> Any:
    """``a`` reshaped to ``shape``, itself when it has that shape (not a view: a later kernel may reuse it)."""
    return a if a.shape == shape else a.reshape(shape)


def _plain(x: Any, y: Any, xn: int, yn: int) -> bool:
    """Whether X and Y are matrices already (fc's case): nothing to flatten or reshape back."""
    return x.ndim == 2 and y.ndim == 2 and xn == 1 and yn == 1


def _mul(ctx: KernelContext, x: Any, y: Any) -> Any:
    """Out = flatten(X) @ flatten(Y), reshaped to X's leading dims + Y's trailing dims."""
    xn, yn = ctx.attrs["x_num_col_dims"], ctx.attrs["y_num_col_dims"]
    if _plain(x, y, xn, yn):
        return x @ y
    return (_matrix(x, xn) @ _matrix(y, yn)).reshape(*x.shape[:xn], *y.shape[yn:])


def _mul_grad(ctx: KernelContext, x: Any, y: Any, dout: Any) -> tuple[Any, Any]:
    xn, yn = ctx.attrs["x_num_col_dims"], ctx.attrs["y_num_col_dims"]
    if _plain(x, y, xn, yn):
        return dout @ y.T if ctx.wants[0] else None, x.T @ dout if ctx.wants[1] else None
    x2, y2 = _matrix(x, xn), _matrix(y, yn)
    d2 = dout.reshape(x2.shape[0], y2.shape[1])
    dx = _shaped(d2 @ y2.T, x.shape) if ctx.wants[0] else None
    dy = _shaped(x2.T @ d2, y.shape) if ctx.wants[1] else None
    return dx, dy


MUL_GRAD = OpSchema(
    "mul_grad",
    inputs=(Slot("X"), Slot("Y"), Slot("Out@GRAD")),
    outputs=(Slot("X@GRAD"), Slot("Y@GRAD")),
    attrs=_MUL_ATTRS,
    infer=infer_grads("X", "Y"),
    kernel=_mul_grad,
    share_lod=(("X", "X@GRAD"),),
    doc="Gradient of mul: dOut @ Y^T and X^T @ dOut.",
)

MUL = OpSchema(
    "mul",
    inputs=(Slot("X"), Slot("Y")),
    outputs=(Slot("Out"),),
    attrs=_MUL_ATTRS,
    infer=_infer_mul,
    grad=lambda g: grad_op(g, MUL_GRAD, ("X", "Y", "Out@GRAD"), ("X", "Y")),
    kernel=_mul,
    share_lod=(("X", "Out"),),
    doc="Matrix product of X and Y flattened to matrices at x_num_col_dims / y_num_col_dims (fc's product).",
)

# -- matmul ----------------------------------------------------------------------------------------

_MATMUL_ATTRS = (
    AttrDef("transpose_X", AttrType.BOOLEAN, False),
    AttrDef("transpose_Y", AttrType.BOOLEAN, False),
    AttrDef("alpha", AttrType.FLOAT, 1.0),
)


def _infer_matmul(ctx: InferContext) -> None:
    x, y = check_dtype(ctx, "X", NUMBERS), check_dtype(ctx, "Y", NUMBERS)
    same_dtype(ctx, x, y)
    xs, ys = tuple(x.shape), tuple(y.shape)
    if not xs or not ys:
        ctx.fail(f"X {fmt(x)} and Y {fmt(y)} must have at least one dimension")
    if ctx.attr("alpha") != 1.0 and x.dtype not in FLOATS:
        ctx.fail(f"alpha={ctx.attr('alpha')} needs floating-point X and Y, not {x.dtype}")
    # op(X) and op(Y) as matrices; a vector X is a row, a vector Y a column (transposition does not matter).
    a = (1, xs[0]) if len(xs) == 1 else (xs[-1], xs[-2]) if ctx.attr("transpose_X") else xs[-2:]
    b = (ys[0], 1) if len(ys) == 1 else (ys[-1], ys[-2]) if ctx.attr("transpose_Y") else ys[-2:]
    if not compatible(a[1], b[0]):
        ctx.fail(
            f"X {fmt(x)} and Y {fmt(y)} cannot be multiplied (transpose_X={ctx.attr('transpose_X')}, "
            f"transpose_Y={ctx.attr('transpose_Y')}): {a[1]} vs {b[0]}"
        )
    batch = broadcast_dims(xs[:-2], ys[:-2])
    if batch is None:
        ctx.fail(f"the batch dims of X {fmt(x)} and Y {fmt(y)} do not broadcast")
    rows = a[:1] if len(xs) > 1 else ()  # a vector operand's added dim is dropped again
    cols = b[1:] if len(ys) > 1 else ()
    ctx.set_output("Out", (*batch, *rows, *cols) or (1,), x.dtype)


def _matmul(ctx: KernelContext, x: Any, y: Any) -> Any:
    """Out = alpha * op(X) @ op(Y), batched with broadcasting; vector @ vector gives shape [1]."""
    attrs = ctx.attrs
    a = x.swapaxes(-1, -2) if attrs["transpose_X"] and x.ndim > 1 else x
    b = y.swapaxes(-1, -2) if attrs["transpose_Y"] and y.ndim > 1 else y
    out = ctx.xp.matmul(a, b)
    if out.ndim == 0:
        out = out.reshape(1)
    if attrs["alpha"] != 1.0:
        out *= attrs["alpha"]
    return out


def _matmul_grad(ctx: KernelContext, x: Any, y: Any, dout: Any) -> tuple[Any, Any]:
    xp, attrs = ctx.xp, ctx.attrs
    tx, ty, alpha = attrs["transpose_X"] and x.ndim > 1, attrs["transpose_Y"] and y.ndim > 1, attrs["alpha"]
    a = x.reshape(1, -1) if x.ndim == 1 else x.swapaxes(-1, -2) if tx else x  # op(X) as a matrix (stack)
    b = y.reshape(-1, 1) if y.ndim == 1 else y.swapaxes(-1, -2) if ty else y
    d = dout.reshape(*np.broadcast_shapes(a.shape[:-2], b.shape[:-2]), a.shape[-2], b.shape[-1])
    if alpha != 1.0:
        d = d * alpha
    dx = dy = None
    if ctx.wants[0]:
        da = unbroadcast(xp, d @ b.swapaxes(-1, -2), a.shape)
        dx = (da.swapaxes(-1, -2) if tx else da).reshape(x.shape)
    if ctx.wants[1]:
        db = unbroadcast(xp, a.swapaxes(-1, -2) @ d, b.shape)
        dy = (db.swapaxes(-1, -2) if ty else db).reshape(y.shape)
    return dx, dy


MATMUL_GRAD = OpSchema(
    "matmul_grad",
    inputs=(Slot("X"), Slot("Y"), Slot("Out@GRAD")),
    outputs=(Slot("X@GRAD"), Slot("Y@GRAD")),
    attrs=_MATMUL_ATTRS,
    infer=infer_grads("X", "Y"),
    kernel=_matmul_grad,
    doc="Gradient of matmul.",
)

MATMUL = OpSchema(
    "matmul",
    inputs=(Slot("X"), Slot("Y")),
    outputs=(Slot("Out"),),
    attrs=_MATMUL_ATTRS,
    infer=_infer_matmul,
    grad=lambda g: grad_op(g, MATMUL_GRAD, ("X", "Y", "Out@GRAD"), ("X", "Y")),
    kernel=_matmul,
    doc="alpha * op(X) @ op(Y) (op transposes the last two dims when asked), batched with broadcasting.",
)

# -- elementwise arithmetic ---------------------------------------------------------------------


def _x_buffer(x: Any, yv: Any, reuse: Sequence[bool]) -> Any:
    """X as the output buffer of ``X op Y``: when the executor offers it and the result has X's shape
    and dtype (Y broadcasts into X); else None (a new array)."""
    if not (reuse and reuse[0]) or yv.dtype != x.dtype or yv.ndim > x.ndim:
        return None
    return x if all(d == 1 or d == e for d, e in zip(yv.shape[::-1], x.shape[::-1])) else None


def _add(ctx: KernelContext, x: Any, y: Any, *, reuse: Sequence[bool] = ()) -> Any:
    yv = y_view(y, x.ndim, ctx.attrs["axis"])
    return ctx.xp.add(x, yv, out=_x_buffer(x, yv, reuse))


def _sub(ctx: KernelContext, x: Any, y: Any, *, reuse: Sequence[bool] = ()) -> Any:
    yv = y_view(y, x.ndim, ctx.attrs["axis"])
    return ctx.xp.subtract(x, yv, out=_x_buffer(x, yv, reuse))


def _emul(ctx: KernelContext, x: Any, y: Any, *, reuse: Sequence[bool] = ()) -> Any:
    yv = y_view(y, x.ndim, ctx.attrs["axis"])
    return ctx.xp.multiply(x, yv, out=_x_buffer(x, yv, reuse))


def _div(ctx: KernelContext, x: Any, y: Any) -> Any:
    """True division for floats; integers divide truncating toward zero (C, Fluid), and refuse zero."""
    xp, yv = ctx.xp, y_view(y, x.ndim, ctx.attrs["axis"])
    if x.dtype.kind == "f":
        return xp.true_divide(x, yv)
    if bool((yv == 0).any()):
        raise kernel_error(ctx, f"elementwise_div: integer division by zero (Y of shape {list(y.shape)})")
    q = xp.floor_divide(xp.abs(x), xp.abs(yv))
    return xp.where((x < 0) != (yv < 0), -q, q)


def _add_grad(ctx: KernelContext, x: Any, y: Any, dout: Any) -> tuple[Any, Any]:
    lead = x.ndim - y.ndim
    if 0 <= lead and dout.shape == x.shape and y.shape == x.shape[lead:] and ctx.attrs["axis"] in (-1, lead):
        # Y lines up with X's trailing dims (fc's bias): dX is dOut, dY dOut summed over the leading dims
        return dout if ctx.wants[0] else None, dout.sum(axis=tuple(range(lead))) if ctx.wants[1] else None
    b = Broadcast(ctx, x, y)
    return b.dx(dout) if ctx.wants[0] else None, b.dy(dout) if ctx.wants[1] else None


def _sub_grad(ctx: KernelContext, x: Any, y: Any, dout: Any) -> tuple[Any, Any]:
    b = Broadcast(ctx, x, y)
    return b.dx(dout) if ctx.wants[0] else None, ctx.xp.negative(b.dy(dout)) if ctx.wants[1] else None


def _emul_grad(ctx: KernelContext, x: Any, y: Any, dout: Any) -> tuple[Any, Any]:
    b = Broadcast(ctx, x, y)
    return b.dx(dout * b.y(y)) if ctx.wants[0] else None, b.dy(dout * x) if ctx.wants[1] else None


def _div_grad(ctx: KernelContext, x: Any, y: Any, out: Any, dout: Any) -> tuple[Any, Any]:
    """dX = dOut / Y, dY = -dOut * Out / Y."""
    b = Broadcast(ctx, x, y)
    yv = b.y(y)
    dx = b.dx(dout / yv) if ctx.wants[0] else None
    dy = None
    if ctx.wants[1]:
        t = dout * out
        t /= yv
        dy = b.dy(ctx.xp.negative(t, out=t))
    return dx, dy


_XY = ("X", "Y", "Out@GRAD")
_BROADCAST_DOC = "; Y broadcasts against X from dim `axis` (Paddle), or both ways with axis=-1 (numpy)"
ELEMENTWISE_ADD, ELEMENTWISE_ADD_GRAD = binary_family(
    "elementwise_add", _add, _add_grad, _XY, doc="Out = X + Y" + _BROADCAST_DOC
)
ELEMENTWISE_SUB, ELEMENTWISE_SUB_GRAD = binary_family(
    "elementwise_sub", _sub, _sub_grad, _XY, doc="Out = X - Y" + _BROADCAST_DOC
)
ELEMENTWISE_MUL, ELEMENTWISE_MUL_GRAD = binary_family(
    "elementwise_mul", _emul, _emul_grad, _XY, doc="Out = X * Y" + _BROADCAST_DOC
)
ELEMENTWISE_DIV, ELEMENTWISE_DIV_GRAD = binary_family(
    "elementwise_div",
    _div,
    _div_grad,
    ("X", "Y", "Out", "Out@GRAD"),
    doc="Out = X / Y (integers truncate)" + _BROADCAST_DOC,
)

# -- activations -------------------------------------------------------------------------------------


def _relu(ctx: KernelContext, x: Any, *, reuse: Sequence[bool] = ()) -> Any:
    return ctx.xp.maximum(x, 0, out=x if reuse and reuse[0] else None)


def _relu_grad(ctx: KernelContext, out: Any, dout: Any, *, reuse: Sequence[bool] = ()) -> Any:
    return ctx.xp.multiply(dout, out > 0, out=dout if reuse and reuse[1] else None)


def _sigmoid(ctx: KernelContext, x: Any, *, reuse: Sequence[bool] = ()) -> Any:
    """1 / (1 + exp(-x)) computed as 0.5 * tanh(x / 2) + 0.5, which cannot overflow."""
    t = ctx.xp.multiply(x, 0.5, out=x if reuse and reuse[0] else None)
    ctx.xp.tanh(t, out=t)
    t *= 0.5
    t += 0.5
    return t


def _sigmoid_grad(ctx: KernelContext, out: Any, dout: Any) -> Any:
    t = 1 - out
    t *= out
    t *= dout
    return t


def _tanh(ctx: KernelContext, x: Any, *, reuse: Sequence[bool] = ()) -> Any:
    return ctx.xp.tanh(x, out=x if reuse and reuse[0] else None)


def _tanh_grad(ctx: KernelContext, out: Any, dout: Any) -> Any:
    t = out * out
    ctx.xp.subtract(1, t, out=t)
    t *= dout
    return t


def _square(ctx: KernelContext, x: Any) -> Any:
    return ctx.xp.square(x)


def _square_grad(ctx: KernelContext, x: Any, dout: Any) -> Any:
    t = x * dout
    t *= 2
    return t


RELU, RELU_GRAD = unary_family("relu", _relu, _relu_grad, dtypes=NUMBERS, doc="Out = max(X, 0).")
SIGMOID, SIGMOID_GRAD = unary_family("sigmoid", _sigmoid, _sigmoid_grad, doc="Out = 1 / (1 + exp(-X)).")
TANH, TANH_GRAD = unary_family("tanh", _tanh, _tanh_grad, doc="Out = tanh(X).")
SQUARE, SQUARE_GRAD = unary_family("square", _square, _square_grad, grad_input="X", dtypes=NUMBERS, doc="Out = X * X.")

# -- softmax -----------------------------------------------------------------------------------------

_SOFTMAX_ATTRS = (AttrDef("axis", AttrType.INT, -1),)


def _check_softmax(ctx: InferContext, x: Any) -> None:
    normalize_axis(ctx, ctx.attr("axis"), len(x.shape))


def _softmax(ctx: KernelContext, x: Any, *, reuse: Sequence[bool] = ()) -> Any:
    """exp(X - max) / sum(exp(X - max)) along ``axis``."""
    xp, axis = ctx.xp, ctx.attrs["axis"]
    e = xp.subtract(x, x.max(axis=axis, keepdims=True), out=x if reuse and reuse[0] else None)
    xp.exp(e, out=e)
    e /= e.sum(axis=axis, keepdims=True)
    return e


def _softmax_grad(ctx: KernelContext, out: Any, dout: Any, *, reuse: Sequence[bool] = ()) -> Any:
    """dX = Out * (dOut - sum(dOut * Out, axis))."""
    total = (dout * out).sum(axis=ctx.attrs["axis"], keepdims=True)
    dx = ctx.xp.subtract(dout, total, out=dout if reuse and reuse[1] else None)
    dx *= out
    return dx


SOFTMAX, SOFTMAX_GRAD = unary_family(
    "softmax",
    _softmax,
    _softmax_grad,
    attrs=_SOFTMAX_ATTRS,
    check=_check_softmax,
    doc="Normalized exponentials of X along `axis`.",
)

# -- scale, cast, assign: their gradients are ops of the same type ------------------------------------

_SCALE_ATTRS = (
    AttrDef("scale", AttrType.FLOAT, 1.0),
    AttrDef("bias", AttrType.FLOAT, 0.0),
    AttrDef("bias_after_scale", AttrType.BOOLEAN, True),
)


def _scale(ctx: KernelContext, x: Any) -> Any:
    """scale * X + bias, or scale * (X + bias) without ``bias_after_scale``; X's dtype is kept."""
    s, bias = ctx.attrs["scale"], ctx.attrs["bias"]
    if not ctx.attrs["bias_after_scale"]:
        bias *= s
    out = x * s
    if bias:
        out += bias
    return out if out.dtype == x.dtype else out.astype(x.dtype)


def _grad_scale(g: GradContext) -> list[OpSpec]:
    outputs = grad_outputs(g, "X")
    return (
        [
            OpSpec(
                "scale",
                {"X": g.output_grad("Out")},
                {"Out": outputs["X@GRAD"]},
                {"scale": g.op.attr("scale"), "bias": 0.0, "bias_after_scale": True},
            )
        ]
        if outputs
        else []
    )


(SCALE,) = unary_family(
    "scale",
    _scale,
    dtypes=NUMBERS,
    attrs=_SCALE_ATTRS,
    grad=_grad_scale,
    doc="Out = scale * X + bias (bias_after_scale) or scale * (X + bias).",
)

_CAST_ATTRS = (AttrDef("in_dtype", AttrType.INT), AttrDef("out_dtype", AttrType.INT))


def _infer_cast(ctx: InferContext) -> None:
    x = check_dtype(ctx, "X", ALL_DTYPES)
    in_dtype, out_dtype = dtype_attr(ctx, "in_dtype"), dtype_attr(ctx, "out_dtype")
    if x.dtype != in_dtype:
        ctx.fail(f"in_dtype={ctx.attr('in_dtype')} ({in_dtype}) does not match X {fmt(x)}")
    ctx.set_output("Out", x.shape, out_dtype, lod_level=x.lod_level)


def _cast(ctx: KernelContext, x: Any) -> Any:
    return x.astype(np_dtype(ctx.attrs["out_dtype"]))


def _grad_cast(g: GradContext) -> list[OpSpec]:
    outputs = grad_outputs(g, "X")
    return (
        [
            OpSpec(
                "cast",
                {"X": g.output_grad("Out")},
                {"Out": outputs["X@GRAD"]},
                {"in_dtype": g.op.attr("out_dtype"), "out_dtype": g.op.attr("in_dtype")},
            )
        ]
        if outputs
        else []
    )


CAST = OpSchema(
    "cast",
    inputs=(Slot("X"),),
    outputs=(Slot("Out"),),
    attrs=_CAST_ATTRS,
    infer=_infer_cast,
    grad=_grad_cast,
    kernel=_cast,
    share_lod=(("X", "Out"),),
    doc="X converted from in_dtype to out_dtype (proto VarType codes: BOOL=0, INT32=2, INT64=3, FP32=5, FP64=6).",
)


def _infer_assign(ctx: InferContext) -> None:
    x = check_dtype(ctx, "X", ALL_DTYPES)
    ctx.set_output("Out", x.shape, x.dtype, lod_level=x.lod_level)
    for out in ctx.outputs("Out"):
        if out.kind is not x.kind:
            out.kind = x.kind


def _assign(ctx: KernelContext, x: Any) -> Any:
    """A copy of X (dense or SelectedRows)."""
    if isinstance(x, SelectedRows):
        return SelectedRows(np.array(to_host(x.rows), dtype=np.int64), x.values.copy(), x.height)
    return x.copy()


def _grad_assign(g: GradContext) -> list[OpSpec]:
    outputs = grad_outputs(g, "X")
    return [OpSpec("assign", {"X": g.output_grad("Out")}, {"Out": outputs["X@GRAD"]})] if outputs else []


ASSIGN = OpSchema(
    "assign",
    inputs=(Slot("X"),),
    outputs=(Slot("Out"),),
    infer=_infer_assign,
    grad=_grad_assign,
    kernel=_assign,
    share_lod=(("X", "Out"),),
    doc="Out = a copy of X (dense, LoDTensor or SelectedRows).",
)

# -- reductions --------------------------------------------------------------------------------------------


def _infer_mean(ctx: InferContext) -> None:
    x = check_dtype(ctx, "X", FLOATS)
    ctx.set_output("Out", (1,), x.dtype)


def _mean(ctx: KernelContext, x: Any) -> Any:
    """Sum, then divide in place (cheaper than ``xp.mean``); float16 accumulates in float32."""
    out = x.reshape(-1).sum(dtype=np.float32 if x.dtype == np.float16 else None, keepdims=True)  # [1], no view
    out /= max(x.size, 1)
    return out.astype(x.dtype, copy=False)


def _mean_grad(ctx: KernelContext, x: Any, dout: Any) -> Any:
    return fill(ctx.xp, dout.reshape(()) / max(x.size, 1), x.shape, dout.dtype)


MEAN_GRAD = OpSchema(
    "mean_grad",
    inputs=(Slot("X"), Slot("Out@GRAD")),
    outputs=(Slot("X@GRAD"),),
    infer=infer_grads("X"),
    kernel=_mean_grad,
    share_lod=(("X", "X@GRAD"),),
    doc="Gradient of mean: dOut / X.size everywhere.",
)
MEAN = OpSchema(
    "mean",
    inputs=(Slot("X"),),
    outputs=(Slot("Out"),),
    infer=_infer_mean,
    grad=lambda g: grad_op(g, MEAN_GRAD, ("X", "Out@GRAD"), ("X",)),
    kernel=_mean,
    doc="The mean of all elements of X, shape [1].",
)


def _reduce_sum(ctx: KernelContext, x: Any, axes: tuple[int, ...]) -> Any:
    out = x.sum(axis=axes, dtype=x.dtype, keepdims=ctx.attrs["keep_dim"])
    return out if out.ndim else out.reshape(1)


def _reduce_sum_grad(ctx: KernelContext, x: Any, dout: Any, axes: tuple[int, ...]) -> Any:
    return expand_reduced(ctx.xp, dout, x.shape, axes)


def _reduce_mean(ctx: KernelContext, x: Any, axes: tuple[int, ...]) -> Any:
    out = x.mean(axis=axes, keepdims=ctx.attrs["keep_dim"])
    return out if out.ndim else out.reshape(1)


def _reduce_mean_grad(ctx: KernelContext, x: Any, dout: Any, axes: tuple[int, ...]) -> Any:
    count = math.prod(x.shape[a] for a in axes)
    return expand_reduced(ctx.xp, dout, x.shape, axes, 1.0 / max(count, 1))


REDUCE_SUM, REDUCE_SUM_GRAD = reduce_family(
    "reduce_sum", _reduce_sum, _reduce_sum_grad, NUMBERS, doc="Sum of X over `dim` (every dim with reduce_all)."
)
REDUCE_MEAN, REDUCE_MEAN_GRAD = reduce_family(
    "reduce_mean", _reduce_mean, _reduce_mean_grad, FLOATS, doc="Mean of X over `dim` (every dim with reduce_all)."
)

# -- sum (gradient accumulation) ---------------------------------------------------------------------------


def _infer_sum(ctx: InferContext) -> None:
    first, shape = merge_shapes(ctx, "X", NUMBERS)
    ctx.set_output("Out", shape, first.dtype, lod_level=first.lod_level)
    kinds = {v.kind for v in ctx.inputs("X")}
    kind = VarKind.SELECTED_ROWS if kinds == {VarKind.SELECTED_ROWS} else VarKind.LOD_TENSOR
    for out in ctx.outputs("Out"):
        if out.kind is not kind:
            out.kind = kind


def _sum(ctx: KernelContext, xs: list[Any]) -> Any:
    """The sum of dense arrays and SelectedRows (rows scatter-added, repeats accumulated); SelectedRows
    only: a SelectedRows holding every input's rows and values."""
    xp = ctx.xp
    dense = [v for v in xs if not isinstance(v, SelectedRows)]
    sparse = [v for v in xs if isinstance(v, SelectedRows)]
    if not dense:
        height = sparse[0].height
        if any(s.height != height for s in sparse):
            raise kernel_error(ctx, f"sum: SelectedRows heights differ: {[s.height for s in sparse]}")
        rows = np.concatenate([np.asarray(to_host(s.rows), dtype=np.int64) for s in sparse])
        return SelectedRows(rows, xp.concatenate([s.values for s in sparse]), height)
    if any(v.shape != dense[0].shape for v in dense) or any(s.shape != dense[0].shape for s in sparse):
        raise kernel_error(ctx, f"sum: inputs of different shapes: {[list(v.shape) for v in xs]}")
    out = xp.add(dense[0], dense[1]) if len(dense) > 1 else dense[0].copy()
    for v in dense[2:]:
        out += v
    for s in sparse:
        xp.add.at(out, xp.asarray(s.rows), s.values)
    return out


def _grad_sum(g: GradContext) -> list[OpSpec]:
    dout = g.output_grad("Out")
    return [
        OpSpec("assign", {"X": dout}, {"Out": [name]})
        for name in grad_outputs(g, "X").get("X@GRAD", [])
        if name != EMPTY_VAR
    ]


SUM = OpSchema(
    "sum",
    inputs=(Slot("X", duplicable=True),),
    outputs=(Slot("Out"),),
    infer=_infer_sum,
    grad=_grad_sum,
    kernel=_sum,
    share_lod=(("X", "Out"),),
    doc="Out = sum of X (dense and/or SelectedRows; SelectedRows only gives a SelectedRows).",
)

# -- concat and reshape2 ------------------------------------------------------------------------------------


def _infer_concat(ctx: InferContext) -> None:
    axis = normalize_axis(ctx, ctx.attr("axis"), len(check_dtype(ctx, "X", ALL_DTYPES).shape))
    first, shape = merge_shapes(ctx, "X", ALL_DTYPES, axis)
    sizes = [v.shape[axis] for v in ctx.tensors("X")]
    shape[axis] = -1 if any(d < 0 for d in sizes) else sum(sizes)
    ctx.set_output("Out", shape, first.dtype)


def _concat(ctx: KernelContext, xs: list[Any]) -> Any:
    return ctx.xp.concatenate(xs, axis=ctx.attrs["axis"])


def _concat_grad(ctx: KernelContext, xs: list[Any], dout: Any) -> list[Any]:
    """dOut split back into pieces the sizes of the inputs along ``axis`` (views of dOut)."""
    axis = ctx.attrs["axis"] % dout.ndim
    bounds = np.cumsum([x.shape[axis] for x in xs[:-1]]).tolist()
    return ctx.xp.split(dout, bounds, axis=axis)


_CONCAT_ATTRS = (AttrDef("axis", AttrType.INT, 0),)
CONCAT_GRAD = OpSchema(
    "concat_grad",
    inputs=(Slot("X", duplicable=True), Slot("Out@GRAD")),
    outputs=(Slot("X@GRAD", duplicable=True),),
    attrs=_CONCAT_ATTRS,
    infer=infer_grads("X"),
    kernel=_concat_grad,
    doc="Gradient of concat: dOut split.",
)
CONCAT = OpSchema(
    "concat",
    inputs=(Slot("X", duplicable=True),),
    outputs=(Slot("Out"),),
    attrs=_CONCAT_ATTRS,
    infer=_infer_concat,
    grad=lambda g: grad_op(g, CONCAT_GRAD, ("X", "Out@GRAD"), ("X",)),
    kernel=_concat,
    doc="The inputs joined along `axis`.",
)


def _infer_reshape2(ctx: InferContext) -> None:
    x, target = check_dtype(ctx, "X", ALL_DTYPES), list(ctx.attr("shape"))
    xs = tuple(x.shape)
    if target.count(-1) > 1 or any(d < -1 for d in target):
        ctx.fail(f"shape {target} may hold one -1 and no other negative dim")
    if any(d == 0 and i >= len(xs) for i, d in enumerate(target)):
        ctx.fail(f"shape {target}: a 0 copies X's dim at its position, but X {fmt(x)} has rank {len(xs)}")
    shape = [xs[i] if d == 0 else d for i, d in enumerate(target)]
    total = numel(xs)
    if -1 in target:
        k = target.index(-1)
        rest = numel(shape[:k] + shape[k + 1 :])
        if total >= 0 and rest > 0:
            if total % rest:
                ctx.fail(f"X {fmt(x)} of {total} elements cannot be reshaped to {target}")
            shape[k] = total // rest
    elif total >= 0 and numel(shape) >= 0 and numel(shape) != total:
        ctx.fail(f"X {fmt(x)} of {total} elements cannot be reshaped to {target} ({numel(shape)} elements)")
    ctx.set_output("Out", shape, x.dtype)
    ctx.set_output("XShape", (0, *xs), x.dtype)


def _reshape2(ctx: KernelContext, x: Any) -> tuple[Any, Any]:
    """X with the new shape (a view when possible); XShape is an empty [0, *X.shape] array recording X's shape."""
    target = ctx.attrs["shape"]
    try:
        out = x.reshape([x.shape[i] if d == 0 else d for i, d in enumerate(target)])
    except (ValueError, IndexError):
        raise kernel_error(ctx, f"reshape2: X of shape {list(x.shape)} cannot be reshaped to {list(target)}") from None
    return out, ctx.xp.empty((0, *x.shape), dtype=x.dtype) if ctx.wants[1] else None


def _infer_reshape2_grad(ctx: InferContext) -> None:
    xshape = ctx.tensor("XShape")
    ctx.set_output("X@GRAD", xshape.shape[1:], xshape.dtype)


RESHAPE2_GRAD = OpSchema(
    "reshape2_grad",
    inputs=(Slot("XShape"), Slot("Out@GRAD")),
    outputs=(Slot("X@GRAD"),),
    attrs=(AttrDef("shape", AttrType.INTS),),
    infer=_infer_reshape2_grad,
    kernel=lambda ctx, xshape, dout: dout.reshape(xshape.shape[1:]),
    doc="Gradient of reshape2: dOut reshaped to X's shape (read from XShape).",
)
RESHAPE2 = OpSchema(
    "reshape2",
    inputs=(Slot("X"),),
    outputs=(Slot("Out"), Slot("XShape", no_grad=True)),
    attrs=(AttrDef("shape", AttrType.INTS),),
    infer=_infer_reshape2,
    grad=lambda g: grad_op(g, RESHAPE2_GRAD, ("XShape", "Out@GRAD"), ("X",)),
    kernel=_reshape2,
    doc="X with a new shape: 0 copies X's dim at that position, one -1 is inferred.",
)

# -- fill_constant ------------------------------------------------------------------------------------------

_FILL_ATTRS = (
    AttrDef("shape", AttrType.LONGS),
    AttrDef("dtype", AttrType.INT, DTYPE_TO_PROTO["float32"]),
    AttrDef("value", AttrType.FLOAT, 0.0),
    AttrDef("force_cpu", AttrType.BOOLEAN, False),
)


def _infer_fill_constant(ctx: InferContext) -> None:
    dtype, shape = dtype_attr(ctx, "dtype"), list(ctx.attr("shape"))
    if any(d < 0 for d in shape):
        ctx.fail(f"shape {shape} must not have negative dimensions")
    ctx.set_output("Out", shape, dtype)


def _fill_constant(ctx: KernelContext) -> Any:
    attrs = ctx.attrs
    out = ctx.xp.empty(tuple(attrs["shape"]), dtype=np_dtype(attrs["dtype"]))
    out.fill(attrs["value"])
    return out


FILL_CONSTANT = OpSchema(
    "fill_constant",
    outputs=(Slot("Out"),),
    attrs=_FILL_ATTRS,
    infer=_infer_fill_constant,
    kernel=_fill_constant,
    doc="A tensor of `shape` and `dtype` (proto code) filled with `value`; force_cpu asks placement for the host.",
)

SCHEMAS: tuple[OpSchema, ...] = (
    MUL,
    MUL_GRAD,
    MATMUL,
    MATMUL_GRAD,
    ELEMENTWISE_ADD,
    ELEMENTWISE_ADD_GRAD,
    ELEMENTWISE_SUB,
    ELEMENTWISE_SUB_GRAD,
    ELEMENTWISE_MUL,
    ELEMENTWISE_MUL_GRAD,
    ELEMENTWISE_DIV,
    ELEMENTWISE_DIV_GRAD,
    RELU,
    RELU_GRAD,
    SIGMOID,
    SIGMOID_GRAD,
    TANH,
    TANH_GRAD,
    SQUARE,
    SQUARE_GRAD,
    SOFTMAX,
    SOFTMAX_GRAD,
    SCALE,
    CAST,
    ASSIGN,
    MEAN,
    MEAN_GRAD,
    REDUCE_SUM,
    REDUCE_SUM_GRAD,
    REDUCE_MEAN,
    REDUCE_MEAN_GRAD,
    SUM,
    CONCAT,
    CONCAT_GRAD,
    RESHAPE2,
    RESHAPE2_GRAD,
    FILL_CONSTANT,
)
