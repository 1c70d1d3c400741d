"""Tensor math ops: matrix products, elementwise arithmetic, activations, reductions, tensor plumbing.

Names, slots and attributes follow PaddlePaddle's legacy (Fluid, ProgramDesc)
operators (docs/ops.md); where Paddle 3 changed an output's shape to 0-D
(``matmul``/``matmul_v2`` of two vectors, ``arg_max`` with ``flatten``), the
shape is Paddle 3's. The attributes of Paddle's oneDNN and cuDNN kernels are
accepted and change nothing here. Every
kernel is written once against ``ctx.xp`` (numpy or cupy) and keeps its input
dtype (float32 in, float32 out). Kernels never write into their inputs, except
those the executor offers through a keyword-only ``reuse`` parameter (one flag
per input slot; see :mod:`blockir.runtime.plan`); they may write into arrays
they have just allocated (``out=``, in-place operators).
Gradient kernels compute only the outputs ``ctx.wants`` asks for and return
None for the others.
"""

from __future__ import annotations

import functools
import math
import string
from collections.abc import Callable, Sequence
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
    Kernel,
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
)
from blockir.ops.control_flow import add_gradients
from blockir.ops.values import SelectedRows, TensorArray

# -- attributes of Paddle's oneDNN (MKL-DNN) and cuDNN kernels -----------------------------------
# Accepted so that Paddle's programs load; those kernels compute what the plain ones do (int8 and bfloat16
# oneDNN kernels approximately), so here they change nothing.

_MKLDNN = (
    AttrDef("use_mkldnn", AttrType.BOOLEAN, False),
    AttrDef("mkldnn_data_type", AttrType.STRING, "float32"),
    AttrDef("use_onednn", AttrType.BOOLEAN, False),
    AttrDef("onednn_data_type", AttrType.STRING, ""),
)
_CUDNN = (AttrDef("use_cudnn", AttrType.BOOLEAN, False),)
_INT8 = (  # oneDNN's int8 kernels: the quantization scales of X, Y and Out
    AttrDef("use_quantizer", AttrType.BOOLEAN, False),
    AttrDef("Scale_x", AttrType.FLOAT, 1.0),
    AttrDef("Scale_y", AttrType.FLOAT, 1.0),
    AttrDef("Scale_out", AttrType.FLOAT, 1.0),
)
_FP32_OUTPUT = (AttrDef("force_fp32_output", AttrType.BOOLEAN, False),)

# -- mul -------------------------------------------------------------------------------------------

_MUL_ATTRS = (
    AttrDef("x_num_col_dims", AttrType.INT, 1),
    AttrDef("y_num_col_dims", AttrType.INT, 1),
    AttrDef("use_mkldnn", AttrType.BOOLEAN, False),
    AttrDef("use_onednn", AttrType.BOOLEAN, False),
    AttrDef("scale_x", AttrType.FLOAT, 1.0),
    AttrDef("scale_y", AttrType.FLOATS, (1.0,)),
    AttrDef("scale_out", AttrType.FLOAT, 1.0),
    *_FP32_OUTPUT,
)


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

# oneDNN's fusion of a reshape and a transpose into an operand or the product: set by Paddle's oneDNN passes only.
_FUSED_LAYOUT = tuple(
    AttrDef(f"fused_{what}_{slot}", AttrType.INTS, ())
    for slot in ("X", "Y", "Out")
    for what in ("reshape", "transpose")
)
_MATMUL_ATTRS = (
    AttrDef("transpose_X", AttrType.BOOLEAN, False),
    AttrDef("transpose_Y", AttrType.BOOLEAN, False),
    AttrDef("alpha", AttrType.FLOAT, 1.0),
    AttrDef("head_number", AttrType.INT, 1),
    *_FUSED_LAYOUT,
    *_MKLDNN,
    *_INT8,
    *_FP32_OUTPUT,
)
_MATMUL_V2_ATTRS = (
    AttrDef("trans_x", AttrType.BOOLEAN, False),
    AttrDef("trans_y", AttrType.BOOLEAN, False),
    *_FUSED_LAYOUT,
    *_MKLDNN,
    *_FP32_OUTPUT,
    AttrDef("use_addto", AttrType.BOOLEAN, False),
)


def _infer_product(ctx: InferContext, tx: str, ty: str, batch_broadcast: bool) -> None:
    """Out of op(X) @ op(Y), the transpose flags in attributes ``tx`` and ``ty``; with ``batch_broadcast``
    the batch dims broadcast (matmul_v2), else both operands' must be the same when both have some (matmul)."""
    x, y = check_dtype(ctx, "X", NUMBERS), check_dtype(ctx, "Y", NUMBERS)
    same_dtype(ctx, x, y)
    for adef in _FUSED_LAYOUT:
        if ctx.attr(adef.name):
            ctx.fail(f"attribute {adef.name}={list(ctx.attr(adef.name))}: oneDNN's fused layouts are not supported")
    xs, ys = tuple(x.shape), tuple(y.shape)
    if not xs or not ys:
        ctx.fail(f"X {fmt(x)} and Y {fmt(y)} must have at least one dimension")
    # op(X) and op(Y) as matrices; a vector X is a row, a vector Y a column (transposition does not matter).
    a = (1, xs[0]) if len(xs) == 1 else (xs[-1], xs[-2]) if ctx.attr(tx) else xs[-2:]
    b = (ys[0], 1) if len(ys) == 1 else (ys[-1], ys[-2]) if ctx.attr(ty) else ys[-2:]
    if not compatible(a[1], b[0]):
        ctx.fail(
            f"X {fmt(x)} and Y {fmt(y)} cannot be multiplied ({tx}={ctx.attr(tx)}, {ty}={ctx.attr(ty)}): "
            f"{a[1]} vs {b[0]}"
        )
    if not batch_broadcast and len(xs) > 2 and len(ys) > 2:
        if len(xs) != len(ys) or not all(map(compatible, xs[:-2], ys[:-2])):
            ctx.fail(
                f"the batch dims of X {fmt(x)} and Y {fmt(y)} differ: matmul broadcasts an operand without "
                "batch dims only (matmul_v2 broadcasts batch dims)"
            )
    batch = broadcast_dims(xs[:-2], ys[:-2])
    if batch is None:
        ctx.fail(f"the batch dims of X {fmt(x)} and Y {fmt(y)} do not broadcast")
    rows = a[:1] if len(xs) > 1 else ()  # a vector operand's added dim is dropped again
    cols = b[1:] if len(ys) > 1 else ()
    ctx.set_output("Out", (*batch, *rows, *cols), x.dtype, lod_level=x.lod_level)


def _infer_matmul(ctx: InferContext) -> None:
    _infer_product(ctx, "transpose_X", "transpose_Y", batch_broadcast=False)
    dtype = ctx.tensor("X").dtype
    if ctx.attr("alpha") != 1.0 and dtype not in FLOATS:
        ctx.fail(f"alpha={ctx.attr('alpha')} needs floating-point X and Y, not {dtype}")
    if ctx.attr("head_number") != 1:
        ctx.fail(f"attribute head_number={ctx.attr('head_number')}: MKLML's multi-head product is not supported")


def _infer_matmul_v2(ctx: InferContext) -> None:
    if ctx.attr("use_addto"):
        ctx.fail("attribute use_addto=True: gradients accumulated in place are not supported")
    _infer_product(ctx, "trans_x", "trans_y", batch_broadcast=True)


def _product(ctx: KernelContext, x: Any, y: Any, tx: bool, ty: bool) -> Any:
    """op(X) @ op(Y), batched with numpy's broadcasting: op transposes the last two dims when asked; a vector X
    is a row and a vector Y a column whatever the flags, their added dim dropped again (vector @ vector: 0-D)."""
    a = x.swapaxes(-1, -2) if tx and x.ndim > 1 else x
    b = y.swapaxes(-1, -2) if ty and y.ndim > 1 else y
    try:
        out = ctx.xp.matmul(a, b)
    except ValueError:
        raise kernel_error(ctx, f"X {list(x.shape)} and Y {list(y.shape)} cannot be multiplied") from None
    return out if out.ndim else ctx.xp.asarray(out)  # numpy's vector @ vector is a scalar, not an array


def _product_grad(ctx: KernelContext, x: Any, y: Any, dout: Any, tx: bool, ty: bool, alpha: float) -> tuple[Any, Any]:
    """dX and dY of alpha * op(X) @ op(Y) (:func:`_product`), each summed over the batch dims it was broadcast in."""
    xp = ctx.xp
    tx, ty = tx and x.ndim > 1, ty and y.ndim > 1
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


def _matmul(ctx: KernelContext, x: Any, y: Any) -> Any:
    """Out = alpha * op(X) @ op(Y) (:func:`_product`); operands with batch dims both have the same ones."""
    attrs = ctx.attrs
    if x.ndim > 2 and y.ndim > 2 and x.shape[:-2] != y.shape[:-2]:
        raise kernel_error(ctx, f"the batch dims of X {list(x.shape)} and Y {list(y.shape)} differ")
    out = _product(ctx, x, y, attrs["transpose_X"], attrs["transpose_Y"])
    if attrs["alpha"] != 1.0:
        out *= attrs["alpha"]
    return out


def _matmul_grad(ctx: KernelContext, x: Any, y: Any, dout: Any) -> tuple[Any, Any]:
    attrs = ctx.attrs
    return _product_grad(ctx, x, y, dout, attrs["transpose_X"], attrs["transpose_Y"], attrs["alpha"])


def _matmul_v2(ctx: KernelContext, x: Any, y: Any) -> Any:
    return _product(ctx, x, y, ctx.attrs["trans_x"], ctx.attrs["trans_y"])


def _matmul_v2_grad(ctx: KernelContext, x: Any, y: Any, dout: Any) -> tuple[Any, Any]:
    return _product_grad(ctx, x, y, dout, ctx.attrs["trans_x"], ctx.attrs["trans_y"], 1.0)


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
    share_lod=(("X", "Out"),),
    doc="alpha * op(X) @ op(Y) (op transposes the last two dims when asked), batched: operands with batch dims "
    "both have the same ones.",
)

MATMUL_V2_GRAD = OpSchema(
    "matmul_v2_grad",
    inputs=(Slot("X"), Slot("Y"), Slot("Out@GRAD")),
    outputs=(Slot("X@GRAD"), Slot("Y@GRAD")),
    attrs=_MATMUL_V2_ATTRS,
    infer=infer_grads("X", "Y"),
    kernel=_matmul_v2_grad,
    doc="Gradient of matmul_v2.",
)

MATMUL_V2 = OpSchema(
    "matmul_v2",
    inputs=(Slot("X"), Slot("Y")),
    outputs=(Slot("Out"),),
    attrs=_MATMUL_V2_ATTRS,
    infer=_infer_matmul_v2,
    grad=lambda g: grad_op(g, MATMUL_V2_GRAD, ("X", "Y", "Out@GRAD"), ("X", "Y")),
    kernel=_matmul_v2,
    share_lod=(("X", "Out"),),
    doc="op(X) @ op(Y) (op transposes the last two dims when asked), batch dims broadcast as numpy's matmul does.",
)

# -- elementwise arithmetic ---------------------------------------------------------------------


_ELEMENTWISE_ATTRS = (
    AttrDef("axis", AttrType.INT, -1),
    *_MKLDNN,
    *_INT8,
    AttrDef("x_data_format", AttrType.STRING, ""),  # no longer read by Paddle either
    AttrDef("y_data_format", AttrType.STRING, ""),
)


def _x_buffer(xv: Any, yv: Any, reuse: Sequence[bool]) -> Any:
    """X (as broadcast: ``xv``) as the output buffer of ``X op Y``: when the executor offers it and the result
    has its shape and dtype (Y broadcasts into X); else None (a new array)."""
    if not (reuse and reuse[0]) or yv.dtype != xv.dtype or yv.ndim > xv.ndim:
        return None
    return xv if all(d == 1 or d == e for d, e in zip(yv.shape[::-1], xv.shape[::-1])) else None


def _add(ctx: KernelContext, x: Any, y: Any, *, reuse: Sequence[bool] = ()) -> Any:
    b = Broadcast(ctx, x, y)
    xv, yv = b.x(x), b.y(y)
    return ctx.xp.add(xv, yv, out=_x_buffer(xv, yv, reuse))


def _sub(ctx: KernelContext, x: Any, y: Any, *, reuse: Sequence[bool] = ()) -> Any:
    b = Broadcast(ctx, x, y)
    xv, yv = b.x(x), b.y(y)
    return ctx.xp.subtract(xv, yv, out=_x_buffer(xv, yv, reuse))


def _emul(ctx: KernelContext, x: Any, y: Any, *, reuse: Sequence[bool] = ()) -> Any:
    b = Broadcast(ctx, x, y)
    xv, yv = b.x(x), b.y(y)
    return ctx.xp.multiply(xv, yv, out=_x_buffer(xv, yv, reuse))


def _div(ctx: KernelContext, x: Any, y: Any) -> Any:
    """True division for floats; integers divide truncating toward zero (C, Paddle), and refuse zero."""
    b, xp = Broadcast(ctx, x, y), ctx.xp
    xv, yv = b.x(x), b.y(y)
    if xv.dtype.kind == "f":
        return xp.true_divide(xv, yv)
    if bool((yv == 0).any()):
        raise kernel_error(ctx, f"elementwise_div: integer division by zero (Y of shape {list(y.shape)})")
    q = xp.floor_divide(xp.abs(xv), xp.abs(yv))
    return xp.where((xv < 0) != (yv < 0), -q, q)


def _pow(ctx: KernelContext, x: Any, y: Any) -> Any:
    """X ** Y; integers: the power of doubles rounded to the nearest integer, as Paddle (2 ** -1 is 0)."""
    b, xp = Broadcast(ctx, x, y), ctx.xp
    xv, yv = b.x(x), b.y(y)
    if xv.dtype.kind == "f":
        return xp.power(xv, yv)
    return xp.rint(xp.power(xv.astype("float64"), yv.astype("float64"))).astype(xv.dtype)


def _max(ctx: KernelContext, x: Any, y: Any) -> Any:
    b = Broadcast(ctx, x, y)
    return ctx.xp.maximum(b.x(x), b.y(y))


def _min(ctx: KernelContext, x: Any, y: Any) -> Any:
    b = Broadcast(ctx, x, y)
    return ctx.xp.minimum(b.x(x), b.y(y))


def _add_grad(ctx: KernelContext, x: Any, y: Any, dout: Any) -> tuple[Any, Any]:
    b = Broadcast(ctx, x, y)
    return b.dx(dout) if ctx.wants[0] else None, b.dy(dout) if ctx.wants[1] else None


def _sub_grad(ctx: KernelContext, x: Any, y: Any, dout: Any) -> tuple[Any, Any]:
    b = Broadcast(ctx, x, y)
    return b.dx(dout) if ctx.wants[0] else None, ctx.xp.negative(b.dy(dout)) if ctx.wants[1] else None


def _emul_grad(ctx: KernelContext, x: Any, y: Any, dout: Any) -> tuple[Any, Any]:
    b = Broadcast(ctx, x, y)
    return b.dx(dout * b.y(y)) if ctx.wants[0] else None, b.dy(dout * b.x(x)) if ctx.wants[1] else None


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


def _pow_grad(ctx: KernelContext, x: Any, y: Any, dout: Any) -> tuple[Any, Any]:
    """dX = dOut * Y * X ** (Y - 1), dY = dOut * X ** Y * log(X) (NaN for X < 0, as Paddle)."""
    b, xp = Broadcast(ctx, x, y), ctx.xp
    xv, yv = b.x(x), b.y(y)
    dx = b.dx(dout * yv * xp.power(xv, yv - 1)) if ctx.wants[0] else None
    dy = b.dy(dout * xp.power(xv, yv) * xp.log(xv)) if ctx.wants[1] else None
    return dx, dy


def _extremum_grad(ctx: KernelContext, x: Any, y: Any, dout: Any, wins: Callable[[Any, Any], Any]) -> tuple[Any, Any]:
    """The gradients of max / min (``wins``: ``xp.greater`` / ``xp.less``): dOut goes to the operand whose
    value was taken, halved between both where they are equal (as Paddle 3)."""
    b = Broadcast(ctx, x, y)
    xv, yv = b.x(x), b.y(y)
    tie = (xv == yv).astype(dout.dtype) * 0.5
    dx = b.dx(dout * (wins(xv, yv) + tie)) if ctx.wants[0] else None
    dy = b.dy(dout * (wins(yv, xv) + tie)) if ctx.wants[1] else None
    return dx, dy


def _max_grad(ctx: KernelContext, x: Any, y: Any, dout: Any) -> tuple[Any, Any]:
    return _extremum_grad(ctx, x, y, dout, ctx.xp.greater)


def _min_grad(ctx: KernelContext, x: Any, y: Any, dout: Any) -> tuple[Any, Any]:
    return _extremum_grad(ctx, x, y, dout, ctx.xp.less)


def _floor_divide(ctx: KernelContext, x: Any, y: Any) -> Any:
    """floor(X / Y); integers refuse division by zero."""
    b = Broadcast(ctx, x, y)
    xv, yv = b.x(x), b.y(y)
    if xv.dtype.kind != "f" and bool((yv == 0).any()):
        raise kernel_error(ctx, f"elementwise_floordiv: integer division by zero (Y of shape {list(y.shape)})")
    return ctx.xp.floor_divide(xv, yv)


def _mod(ctx: KernelContext, x: Any, y: Any) -> Any:
    """X - floor(X / Y) * Y: the remainder takes Y's sign (Python's %, Paddle's remainder); integers refuse 0."""
    b = Broadcast(ctx, x, y)
    xv, yv = b.x(x), b.y(y)
    if xv.dtype.kind != "f" and bool((yv == 0).any()):
        raise kernel_error(ctx, f"elementwise_mod: integer division by zero (Y of shape {list(y.shape)})")
    return ctx.xp.mod(xv, yv)


def _mod_grad(ctx: KernelContext, x: Any, y: Any, dout: Any) -> tuple[Any, Any]:
    """dX = dOut, dY = -dOut * floor(X / Y)."""
    b = Broadcast(ctx, x, y)
    dx = b.dx(dout) if ctx.wants[0] else None
    dy = b.dy(-dout * ctx.xp.floor_divide(b.x(x), b.y(y))) if ctx.wants[1] else None
    return dx, dy


def _elementwise(
    op_type: str,
    kernel: Kernel,
    grad_kernel: Kernel | None,
    formula: str,
    grad_inputs: tuple[str, ...] = ("X", "Y", "Out@GRAD"),
) -> tuple[OpSchema, ...]:
    doc = f"Out = {formula}; the lower-rank operand's dims placed from dim `axis` of the other's (-1: numpy's)"
    return binary_family(op_type, kernel, grad_kernel, grad_inputs, attrs=_ELEMENTWISE_ATTRS, doc=doc)


ELEMENTWISE_ADD, ELEMENTWISE_ADD_GRAD = _elementwise("elementwise_add", _add, _add_grad, "X + Y")
ELEMENTWISE_SUB, ELEMENTWISE_SUB_GRAD = _elementwise("elementwise_sub", _sub, _sub_grad, "X - Y")
ELEMENTWISE_MUL, ELEMENTWISE_MUL_GRAD = _elementwise("elementwise_mul", _emul, _emul_grad, "X * Y")
ELEMENTWISE_DIV, ELEMENTWISE_DIV_GRAD = _elementwise(
    "elementwise_div", _div, _div_grad, "X / Y (integers truncate)", ("X", "Y", "Out", "Out@GRAD")
)
ELEMENTWISE_POW, ELEMENTWISE_POW_GRAD = _elementwise(
    "elementwise_pow", _pow, _pow_grad, "X ** Y (integers: rounded power of doubles)"
)
ELEMENTWISE_MAX, ELEMENTWISE_MAX_GRAD = _elementwise("elementwise_max", _max, _max_grad, "max(X, Y)")
ELEMENTWISE_MIN, ELEMENTWISE_MIN_GRAD = _elementwise("elementwise_min", _min, _min_grad, "min(X, Y)")
ELEMENTWISE_MOD, ELEMENTWISE_MOD_GRAD = _elementwise("elementwise_mod", _mod, _mod_grad, "X mod Y, with Y's sign")
(ELEMENTWISE_FLOORDIV,) = _elementwise("elementwise_floordiv", _floor_divide, None, "floor(X / Y) (no gradient)")

# -- activations -------------------------------------------------------------------------------------


# The shortest row :func:`_relu` broadcasts its zeros along: numpy's inner loop restarts at each row.
_RELU_ROW = 256


def _relu(ctx: KernelContext, x: Any, *, reuse: Sequence[bool] = ()) -> Any:
    """max(X, 0) against a row of zeros broadcast, not the scalar 0: numpy (2.4) runs maximum over two arrays
    in SIMD but not over an array and a scalar, which takes 2.5x as long for [256, 256] float32. A contiguous X
    is viewed with rows of at least ``_RELU_ROW`` elements (its trailing axes together): over [1, 1024, 7, 7]
    rows of 7 take 4x as long as rows of 1024 * 49."""
    xp = ctx.xp
    view = x
    if x.flags.c_contiguous and x.ndim > 1 and x.shape[-1] < _RELU_ROW:
        row = 1
        for size in reversed(x.shape):
            row *= size
            if row >= _RELU_ROW:
                break
        view = x.reshape(-1, row) if row else x
    if reuse and reuse[0]:
        xp.maximum(view, xp.zeros(view.shape[-1:], x.dtype), out=view)
        return x
    return xp.maximum(view, xp.zeros(view.shape[-1:], x.dtype)).reshape(x.shape)


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


_ACTIVATION_ATTRS = (*_MKLDNN, *_CUDNN)
RELU, RELU_GRAD = unary_family(
    "relu", _relu, _relu_grad, dtypes=NUMBERS, attrs=_ACTIVATION_ATTRS, doc="Out = max(X, 0)."
)
SIGMOID, SIGMOID_GRAD = unary_family(
    "sigmoid", _sigmoid, _sigmoid_grad, attrs=_ACTIVATION_ATTRS, doc="Out = 1 / (1 + exp(-X))."
)
TANH, TANH_GRAD = unary_family("tanh", _tanh, _tanh_grad, attrs=_ACTIVATION_ATTRS, doc="Out = tanh(X).")
SQUARE, SQUARE_GRAD = unary_family(
    "square", _square, _square_grad, grad_input="X", dtypes=NUMBERS, attrs=_ACTIVATION_ATTRS, doc="Out = X * X."
)

# -- gelu ------------------------------------------------------------------------------------------------

# W. J. Cody's rational Chebyshev approximations of erf and erfc (Math. Comp. 23 (1969), 631-637; the
# coefficients of his CALERF), good to float64's rounding: erf(y) = y P(y^2) / Q(y^2) for y < 0.46875,
# erfc(y) = exp(-y^2) P(y) / Q(y) for 0.46875 <= y < 4, erfc(y) = exp(-y^2) / y (1/sqrt(pi) - R(1/y^2) / y^2)
# beyond. numpy has no erf, cupy's is in cupyx.scipy: this one is written once against xp.
_ERF_NEAR = (
    (
        3.16112374387056560e00,
        1.13864154151050156e02,
        3.77485237685302021e02,
        3.20937758913846947e03,
        1.85777706184603153e-1,
    ),
    (2.36012909523441209e01, 2.44024637934444173e02, 1.28261652607737228e03, 2.84423683343917062e03),
)
_ERFC_MID = (
    (
        5.64188496988670089e-1,
        8.88314979438837594e00,
        6.61191906371416295e01,
        2.98635138197400131e02,
        8.81952221241769090e02,
        1.71204761263407058e03,
        2.05107837782607147e03,
        1.23033935479799725e03,
        2.15311535474403846e-8,
    ),
    (
        1.57449261107098347e01,
        1.17693950891312499e02,
        5.37181101862009858e02,
        1.62138957456669019e03,
        3.29079923573345963e03,
        4.36261909014324716e03,
        3.43936767414372164e03,
        1.23033935480374942e03,
    ),
)
_ERFC_FAR = (
    (
        3.05326634961232344e-1,
        3.60344899949804439e-1,
        1.25781726111229246e-1,
        1.60837851487422766e-2,
        6.58749161529837803e-4,
        1.63153871373020978e-2,
    ),
    (
        2.56852019228982242e00,
        1.87295284992346725e00,
        5.27905102951428412e-1,
        6.05183413124413191e-2,
        2.33520497626869185e-3,
    ),
)


def _rational(t: Any, coefficients: tuple[tuple[float, ...], tuple[float, ...]]) -> Any:
    """Cody's ratio (p[-1] t^n + p[0] t^(n-1) + ... + p[n-1]) / (t^n + q[0] t^(n-1) + ... + q[n-1]), n = len(q),
    in two new arrays."""
    p, q = coefficients
    top, bottom = t * p[-1], t.copy()
    for a, b in zip(p[:-2], q[:-1]):
        top += a
        top *= t
        bottom += b
        bottom *= t
    top += p[-2]
    bottom += q[-1]
    top /= bottom
    return top


def erfc(xp: Any, z: Any) -> Any:
    """erfc(z) = 1 - erf(z) elementwise, in z's float dtype (relative error below 1e-15 in float64); erfc(-y) is
    2 - erfc(y), and exp(-y^2) is exp(-h^2) exp(-(y - h)(y + h)) with h = y rounded down to 1/16 (exact h^2).
    Each range is evaluated everywhere (clipped into it) and the right one picked: no data-dependent shapes;
    the last only when some |z| reaches it."""
    y = xp.abs(z)
    near = xp.minimum(y, 0.46875)
    erfc_near = _rational(near * near, _ERF_NEAR)
    erfc_near *= near
    xp.subtract(1, erfc_near, out=erfc_near)
    tail = _rational(xp.clip(y, 0.46875, 4.0), _ERFC_MID)
    if bool((y >= 4.0).any()):
        far = xp.clip(y, 4.0, 40.0)  # erfc(40) underflows to 0 in float64
        inverse = far * far
        xp.reciprocal(inverse, out=inverse)
        far_tail = _rational(inverse, _ERFC_FAR)
        far_tail *= inverse
        xp.subtract(1 / math.sqrt(math.pi), far_tail, out=far_tail)
        far_tail /= far
        tail = xp.where(y < 4.0, tail, far_tail)
    w = xp.clip(y, 0.46875, 40.0)
    h = w * 16
    xp.trunc(h, out=h)
    h /= 16
    w -= h  # (y - h) (y + h) = (y - h)^2 + 2 h (y - h)
    tail *= xp.exp(-(w * (w + 2 * h)))
    h *= h
    xp.negative(h, out=h)
    tail *= xp.exp(h, out=h)
    out = xp.where(y < 0.46875, erfc_near, tail)
    return xp.where(z < 0, 2 - out, out)


_GELU_ATTRS = (AttrDef("approximate", AttrType.BOOLEAN, False), *_MKLDNN, *_CUDNN)
_GELU_A, _GELU_B = math.sqrt(2 / math.pi), 0.044715  # tanh(A (x + B x^3)) approximates erf(x / sqrt(2))


def _widened(x: Any) -> Any:
    """X in the dtype gelu computes in: float16 in float32, as Paddle."""
    return x.astype("float32") if x.dtype == np.float16 else x


def _normal_cdf(xp: Any, x: Any) -> Any:
    """Phi(x), the standard normal CDF: erfc(-x / sqrt(2)) / 2, accurate in both tails."""
    return 0.5 * erfc(xp, x * -math.sqrt(0.5))


def _gelu(ctx: KernelContext, x: Any) -> Any:
    """X * Phi(X), or with ``approximate`` X * (1 + tanh(A (X + B X^3))) / 2."""
    xp, w = ctx.xp, _widened(x)
    if ctx.attrs["approximate"]:
        out = 0.5 * w * (1 + xp.tanh(_GELU_A * (w + _GELU_B * w * w * w)))
    else:
        out = w * _normal_cdf(xp, w)
    return out.astype(x.dtype, copy=False)


def _gelu_grad(ctx: KernelContext, x: Any, dout: Any) -> Any:
    """dOut * (Phi(X) + X * Phi'(X)), Phi the normal CDF or its tanh form."""
    xp, w = ctx.xp, _widened(x)
    if ctx.attrs["approximate"]:
        t = xp.tanh(_GELU_A * (w + _GELU_B * w * w * w))
        slope = 0.5 * (1 + t) + 0.5 * _GELU_A * w * (1 - t * t) * (1 + 3 * _GELU_B * w * w)
    else:
        slope = _normal_cdf(xp, w) + w * xp.exp(-0.5 * w * w) / math.sqrt(2 * math.pi)
    return (dout * slope).astype(x.dtype, copy=False)


GELU, GELU_GRAD = unary_family(
    "gelu",
    _gelu,
    _gelu_grad,
    grad_input="X",
    attrs=_GELU_ATTRS,
    doc="Out = X * Phi(X), Phi the standard normal CDF (erf); with approximate, its tanh approximation.",
)

# -- softmax -----------------------------------------------------------------------------------------

_SOFTMAX_ATTRS = (
    AttrDef("axis", AttrType.INT, -1),
    *_MKLDNN,
    *_CUDNN,
    AttrDef("data_format", AttrType.STRING, "AnyLayout"),  # oneDNN's layout; `axis` says where to normalize
    AttrDef("is_test", AttrType.BOOLEAN, False),
)


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
    *_MKLDNN,
)


def _infer_scale(ctx: InferContext) -> None:
    x = check_dtype(ctx, "X", NUMBERS)
    for slot in ("ScaleTensor", "BiasTensor"):
        if ctx.has_input(slot):
            value = check_dtype(ctx, slot, NUMBERS)
            if numel(value.shape) not in (-1, 1):
                ctx.fail(f"{slot} {fmt(value)} must hold one value")
    ctx.set_output("Out", x.shape, x.dtype, lod_level=x.lod_level)
    for out in ctx.outputs("Out"):
        if out.kind is not x.kind:
            out.kind = x.kind


def _scaled(ctx: KernelContext, x: Any, scale_tensor: Any, bias_tensor: Any) -> Any:
    """scale * X + bias in X's dtype (an integer X: scale and bias truncated to integers first, as Paddle)."""
    attrs = ctx.attrs
    scale = attrs["scale"] if scale_tensor is None else to_host(scale_tensor).reshape(-1)[0].item()
    bias = attrs["bias"] if bias_tensor is None else to_host(bias_tensor).reshape(-1)[0].item()
    if x.dtype.kind in "iu":
        scale, bias = int(scale), int(bias)
    out = x * scale + bias if attrs["bias_after_scale"] else (x + bias) * scale
    return out.astype(x.dtype, copy=False)


def _scale(ctx: KernelContext, x: Any, scale_tensor: Any, bias_tensor: Any) -> Any:
    """scale * X + bias (``bias_after_scale``) or scale * (X + bias), of a dense X or a SelectedRows' values;
    ScaleTensor and BiasTensor, when given, hold the scale and the bias instead of the attributes."""
    if isinstance(x, SelectedRows):
        rows = np.array(to_host(x.rows), dtype=np.int64)
        return SelectedRows(rows, _scaled(ctx, x.values, scale_tensor, bias_tensor), x.height)
    return _scaled(ctx, x, scale_tensor, bias_tensor)


def _grad_scale(g: GradContext) -> list[OpSpec]:
    """dX = scale * dOut: a scale op, with the forward op's ScaleTensor when it has one."""
    outputs = grad_outputs(g, "X")
    if not outputs:
        return []
    inputs = {"X": g.output_grad("Out")}
    if g.op.inputs.get("ScaleTensor"):
        inputs["ScaleTensor"] = g.input("ScaleTensor")
    attrs = {"scale": g.op.attr("scale"), "bias": 0.0, "bias_after_scale": True}
    return [OpSpec("scale", inputs, {"Out": outputs["X@GRAD"]}, attrs)]


SCALE = OpSchema(
    "scale",
    inputs=(
        Slot("X"),
        Slot("ScaleTensor", optional=True, no_grad=True),
        Slot("BiasTensor", optional=True, no_grad=True),
    ),
    outputs=(Slot("Out"),),
    attrs=_SCALE_ATTRS,
    infer=_infer_scale,
    grad=_grad_scale,
    kernel=_scale,
    share_lod=(("X", "Out"),),
    doc="Out = scale * X + bias (bias_after_scale) or scale * (X + bias); X dense or SelectedRows.",
)

_CAST_ATTRS = (AttrDef("in_dtype", AttrType.INT), AttrDef("out_dtype", AttrType.INT), *_MKLDNN)


# cast converts between every dtype numpy has (the narrow and unsigned integers too: what other kernels compute
# widened); assign copies every one
_CAST_DTYPES = ALL_DTYPES | {"int8", "int16", "uint8", "uint16", "uint32", "uint64", "complex64", "complex128"}


def _infer_cast(ctx: InferContext) -> None:
    """Out: X's shape in out_dtype. in_dtype must name a dtype, but X's own dtype is what is converted (Paddle
    does not compare them either; the gradient, cast back to in_dtype, has X's dtype when they agree)."""
    x = check_dtype(ctx, "X", _CAST_DTYPES)
    dtype_attr(ctx, "in_dtype")
    out_dtype = dtype_attr(ctx, "out_dtype")
    if out_dtype not in _CAST_DTYPES:
        ctx.fail(f"out_dtype={ctx.attr('out_dtype')} ({out_dtype}) is not supported; supported: {sorted(_CAST_DTYPES)}")
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
    x = check_dtype(ctx, "X", _CAST_DTYPES)
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
    if all(v.kind is VarKind.LOD_TENSOR_ARRAY for v in ctx.inputs("X")):  # gradients of a tensor array
        for out in ctx.outputs("Out"):
            out.kind = VarKind.LOD_TENSOR_ARRAY
        return
    first, shape = merge_shapes(ctx, "X", NUMBERS)
    ctx.set_output("Out", shape, first.dtype, lod_level=first.lod_level)
    kinds = {v.kind for v in ctx.inputs("X")}
    kind = VarKind.SELECTED_ROWS if kinds == {VarKind.SELECTED_ROWS} else VarKind.LOD_TENSOR
    for out in ctx.outputs("Out"):
        if out.kind is not kind:
            out.kind = kind


def _sum(ctx: KernelContext, xs: list[Any]) -> Any:
    """The sum of dense arrays and SelectedRows (rows scatter-added, repeats accumulated); SelectedRows
    only: a SelectedRows holding every input's rows and values. Tensor arrays add position by position."""
    xp = ctx.xp
    if isinstance(xs[0], TensorArray):
        return functools.reduce(lambda a, b: add_gradients(xp, a, b), xs)
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

# -- arg_max, arg_min -----------------------------------------------------------------------------------------

_ARG_ATTRS = (
    AttrDef("axis", AttrType.LONG),
    AttrDef("keepdims", AttrType.BOOLEAN, False),
    AttrDef("flatten", AttrType.BOOLEAN, False),
    AttrDef("dtype", AttrType.INT, DTYPE_TO_PROTO["int64"]),  # of the indices: INT32 or INT64 (-1: INT64)
)
_INDEX_DTYPES = {DTYPE_TO_PROTO["int32"]: "int32", DTYPE_TO_PROTO["int64"]: "int64", -1: "int64"}


def _infer_arg(ctx: InferContext) -> None:
    """Out: X's shape without ``axis`` (1 there with ``keepdims``); with ``flatten`` 0-D ([1] * rank with
    ``keepdims``), as Paddle 3."""
    x, axis, keep = check_dtype(ctx, "X", NUMBERS), ctx.attr("axis"), ctx.attr("keepdims")
    code = ctx.attr("dtype")
    if code not in _INDEX_DTYPES:
        ctx.fail(f"dtype={code}: the indices are int32 (2) or int64 (3, or -1)")
    rank = len(x.shape)
    if rank == 0:
        if axis not in (0, -1):
            ctx.fail(f"axis {axis} is out of range for a 0-D X {fmt(x)} (0 or -1)")
        shape: tuple[int, ...] = ()
    elif ctx.attr("flatten"):
        shape = (1,) * rank if keep else ()
    else:
        axis = normalize_axis(ctx, axis, rank)
        shape = tuple(1 if i == axis else d for i, d in enumerate(x.shape) if keep or i != axis)
    ctx.set_output("Out", shape, _INDEX_DTYPES[code])


def _arg_extremum(ctx: KernelContext, x: Any, largest: bool) -> Any:
    """The index of the first largest (smallest) entry along ``axis`` or of all X (``flatten``); NaN never wins
    (Paddle compares with > and <)."""
    xp, attrs = ctx.xp, ctx.attrs
    flat = attrs["flatten"] or x.ndim == 0
    data, axis = (x.reshape(-1), 0) if flat else (x, attrs["axis"] % x.ndim)
    if data.shape[axis] == 0:
        raise kernel_error(ctx, f"X of shape {list(x.shape)} has no entries to choose from")
    if data.dtype.kind == "f":
        data = xp.where(xp.isnan(data), -math.inf if largest else math.inf, data)
    index = data.argmax(axis=axis) if largest else data.argmin(axis=axis)
    if flat:
        index = index.reshape((1,) * x.ndim if attrs["keepdims"] else ())
    elif attrs["keepdims"]:
        index = xp.expand_dims(index, axis)
    return xp.asarray(index).astype(_INDEX_DTYPES[attrs["dtype"]])  # numpy's argmax of a vector is a scalar


def _arg_op(op_type: str, largest: bool) -> OpSchema:
    which = "largest" if largest else "smallest"
    return OpSchema(
        op_type,
        inputs=(Slot("X", no_grad=True),),
        outputs=(Slot("Out"),),
        attrs=_ARG_ATTRS,
        infer=_infer_arg,
        kernel=lambda ctx, x: _arg_extremum(ctx, x, largest),
        doc=f"The index of the first {which} entry of X along `axis` (of all X with flatten), int64 or int32.",
    )


ARG_MAX, ARG_MIN = _arg_op("arg_max", largest=True), _arg_op("arg_min", largest=False)

# -- fill_constant ------------------------------------------------------------------------------------------

_FILL_ATTRS = (
    AttrDef("shape", AttrType.LONGS, ()),
    AttrDef("dtype", AttrType.INT, DTYPE_TO_PROTO["float32"]),
    AttrDef("value", AttrType.FLOAT, 0.0),
    AttrDef("str_value", AttrType.STRING, ""),  # the value in full precision, when not empty
    AttrDef("force_cpu", AttrType.BOOLEAN, False),
    AttrDef("place_type", AttrType.INT, -1),
    AttrDef("use_mkldnn", AttrType.BOOLEAN, False),
    AttrDef("use_onednn", AttrType.BOOLEAN, False),
)
_SHAPE_DTYPES = frozenset({"int32", "int64"})


def _fill_value(str_value: str, value: float) -> float:
    """The value to fill with: ``str_value`` read as a double (as Paddle 3; "inf", "-inf", "nan" too) when it
    is not empty, else ``value``; a ValueError when ``str_value`` is no number."""
    return float(str_value) if str_value else value


def _infer_fill_constant(ctx: InferContext) -> None:
    dtype = dtype_attr(ctx, "dtype")
    if dtype not in ALL_DTYPES:
        ctx.fail(f"dtype={ctx.attr('dtype')} ({dtype}) is not supported; supported: {sorted(ALL_DTYPES)}")
    try:
        _fill_value(ctx.attr("str_value"), ctx.attr("value"))
    except ValueError:
        ctx.fail(f"str_value {ctx.attr('str_value')!r} is not a number")
    if ctx.has_input("ValueTensor"):
        value = check_dtype(ctx, "ValueTensor", ALL_DTYPES)
        if numel(value.shape) not in (-1, 1):
            ctx.fail(f"ValueTensor {fmt(value)} must hold one value")
    if ctx.has_input("ShapeTensor"):
        dims = check_dtype(ctx, "ShapeTensor", _SHAPE_DTYPES)
        if len(dims.shape) != 1 or dims.shape[0] < 0:
            ctx.fail(f"ShapeTensor {fmt(dims)} must be a vector of known length (one entry per dim)")
        shape = [-1] * dims.shape[0]
    elif ctx.has_input("ShapeTensorList"):
        for dim in ctx.tensors("ShapeTensorList"):
            if dim.dtype not in _SHAPE_DTYPES or numel(dim.shape) not in (-1, 1):
                ctx.fail(f"ShapeTensorList entry {fmt(dim)} must be one int32 or int64 value")
        shape = [-1] * len(ctx.inputs("ShapeTensorList"))
    else:
        shape = list(ctx.attr("shape"))
        if any(d < 0 for d in shape):
            ctx.fail(f"shape {shape} must not have negative dimensions")
    ctx.set_output("Out", shape, dtype)


def _fill_constant(
    ctx: KernelContext, value_tensor: Any = None, shape_tensor: Any = None, shape_list: Sequence[Any] = ()
) -> Any:
    """A new array of the shape ShapeTensor or ShapeTensorList holds, else ``shape``, filled with ValueTensor's
    value, else the attributes' (converted to ``dtype`` as C++ does: truncated toward zero for integers). With
    no inputs given, an initializer (what the parameter servers call it as)."""
    attrs = ctx.attrs
    if shape_tensor is not None:
        shape = [int(d) for d in to_host(shape_tensor).reshape(-1).tolist()]
    elif shape_list:
        shape = [int(to_host(dim).reshape(-1)[0]) for dim in shape_list]
    else:
        shape = list(attrs["shape"])
    if any(d < 0 for d in shape):
        raise kernel_error(ctx, f"shape {shape} must not have negative dimensions")
    if value_tensor is not None:
        return fill(ctx.xp, value_tensor.reshape(()), shape, np_dtype(attrs["dtype"]))
    out = ctx.xp.empty(tuple(shape), dtype=np_dtype(attrs["dtype"]))
    out.fill(_fill_value(attrs["str_value"], attrs["value"]))
    return out


FILL_CONSTANT = OpSchema(
    "fill_constant",
    inputs=(
        Slot("ValueTensor", optional=True, no_grad=True),
        Slot("ShapeTensor", optional=True, no_grad=True),
        Slot("ShapeTensorList", duplicable=True, optional=True, no_grad=True),
    ),
    outputs=(Slot("Out"),),
    attrs=_FILL_ATTRS,
    infer=_infer_fill_constant,
    kernel=_fill_constant,
    doc="A tensor of `shape` (or ShapeTensor's, ShapeTensorList's) and `dtype` (proto code) filled with `value` "
    "(str_value when given, ValueTensor's when given); force_cpu asks placement for the host.",
)

# -- einsum ----------------------------------------------------------------------------------------------------

_LETTERS = string.ascii_letters


def einsum_terms(equation: str, ranks: Sequence[int]) -> tuple[list[str], str]:
    """Each operand's subscripts and the output's for ``equation`` over operands of ``ranks``: ``...`` expanded to
    letters of its own (right-aligned, shared by the operands as numpy broadcasts them), the implicit output (no
    ``->``: the broadcast dims, then the letters used once, sorted) made explicit. ValueError says what is wrong."""
    eq = "".join(equation.split())
    lhs, arrow, rhs = eq.partition("->")
    terms = lhs.split(",")
    if len(terms) != len(ranks):
        raise ValueError(f"equation {equation!r} has {len(terms)} operand terms for {len(ranks)} operands")
    for term in [*terms, rhs]:
        odd = set(term.replace("...", "", 1)) - set(_LETTERS)
        if odd:
            raise ValueError(f"equation {equation!r}: {''.join(sorted(odd))!r} in term {term!r} is not a subscript")
    extra = []
    for term, rank in zip(terms, ranks):
        named = len(term.replace("...", ""))
        if rank < named or (rank != named and "..." not in term):
            raise ValueError(f"equation {equation!r}: term {term!r} does not fit an operand of rank {rank}")
        extra.append(rank - named)
    free = [c for c in _LETTERS if c not in eq]
    broadcast = "".join(free[: max(extra, default=0)])
    if len(broadcast) < max(extra, default=0):
        raise ValueError(f"equation {equation!r}: too many dims under '...'")
    expanded = [t.replace("...", broadcast[len(broadcast) - k :]) for t, k in zip(terms, extra)]
    used = "".join(expanded)
    if not arrow:
        return expanded, broadcast + "".join(sorted(c for c in set(used) if used.count(c) == 1))
    if broadcast and "..." not in rhs:
        raise ValueError(f"equation {equation!r}: the output has no '...' for the operands' broadcast dims")
    out = rhs.replace("...", broadcast)
    if len(set(out)) != len(out) or not set(out) <= set(used):
        raise ValueError(f"equation {equation!r}: output subscripts {rhs!r} repeat or name no operand dim")
    return expanded, out


def einsum_sizes(terms: Sequence[str], shapes: Sequence[Sequence[int]]) -> dict[str, int]:
    """The size of each subscript (-1 unknown): the operands' dims of that letter, those of size 1 broadcast.
    ValueError names two that differ."""
    sizes: dict[str, int] = {}
    for k, (term, shape) in enumerate(zip(terms, shapes)):
        for c, d in zip(term, shape):
            known = sizes.get(c, 1)
            if known == 1 or (known < 0 and d not in (1, -1)):
                sizes[c] = d
            elif d not in (1, -1, known):
                raise ValueError(f"subscript {c!r} is {known} in one operand and {d} in operand {k}")
    return sizes


# numpy's einsum contracts through BLAS only with ``optimize``; CuPy's contracts pair by pair with cuBLAS anyway


def _einsum_plan(ctx: KernelContext, operands: Sequence[Any]) -> tuple[list[str], str, dict[str, int], list[Any]]:
    """The terms, output subscripts and sizes, and the operands broadcast to those sizes (views)."""
    try:
        terms, out = einsum_terms(ctx.attrs["equation"], [x.ndim for x in operands])
        sizes = einsum_sizes(terms, [x.shape for x in operands])
    except ValueError as e:
        raise kernel_error(ctx, f"einsum: {e}") from None
    full = [ctx.xp.broadcast_to(x, tuple(sizes[c] for c in t)) for x, t in zip(operands, terms)]
    return terms, out, sizes, full


def _infer_einsum(ctx: InferContext) -> None:
    xs = ctx.tensors("Operands")
    if not xs:
        ctx.fail("Operands is empty")
    first = check_dtype(ctx, "Operands", NUMBERS)
    for x in xs[1:]:
        same_dtype(ctx, first, x)
    try:
        terms, out = einsum_terms(ctx.attr("equation"), [len(x.shape) for x in xs])
        sizes = einsum_sizes(terms, [x.shape for x in xs])
    except ValueError as e:
        ctx.fail(f"{e} (operands {', '.join(fmt(x) for x in xs)})")
    ctx.set_output("Out", [sizes[c] for c in out], first.dtype)
    for i, x in enumerate(xs):
        ctx.set_output("XShape", (0, *x.shape), x.dtype, index=i)
        ctx.set_output("InnerCache", (0,), x.dtype, index=i)


def _einsum(ctx: KernelContext, operands: list[Any]) -> tuple[Any, Any, Any]:
    """Out = the Einstein sum of the operands; XShape ([0, *shape]) and InnerCache (empty) per operand."""
    xp = ctx.xp
    terms, out, _, full = _einsum_plan(ctx, operands)
    result = xp.asarray(xp.einsum(f"{','.join(terms)}->{out}", *full, optimize=xp is np))
    if len(operands) == 1:  # a transpose or diagonal is a view of the operand
        result = result.copy()
    xshape = [xp.empty((0, *x.shape), x.dtype) for x in operands] if ctx.wants[2] else None
    cache = [xp.empty((0,), x.dtype) for x in operands] if ctx.wants[1] else None
    return result.astype(operands[0].dtype, copy=False), cache, xshape


def _on_diagonal(xp: Any, g: Any, term: str, sizes: dict[str, int], unused: Sequence[str]) -> Any:
    """``g`` (indexed by the distinct letters of ``term``, in order) placed on the diagonals of an array
    indexed by ``term`` (its repeated letters), zeros elsewhere: each repeat renamed and tied by an identity."""
    renamed, eyes, spare = [], [], iter(unused)
    for k, c in enumerate(term):
        if c in term[:k]:
            r = next(spare)
            renamed.append(r)
            index = xp.arange(sizes[c])
            eyes.append((c + r, (index[:, None] == index).astype(g.dtype)))
        else:
            renamed.append(c)
    subs = ",".join(["".join(dict.fromkeys(term)), *(s for s, _ in eyes)])
    return xp.einsum(f"{subs}->{''.join(renamed)}", g, *(e for _, e in eyes))


def _einsum_grad(ctx: KernelContext, operands: list[Any], dout: Any) -> list[Any] | None:
    """dOperand i = the Einstein sum of dOut and the other operands over the letters of operand i (ones for
    its letters nothing else has), put on its diagonals for repeated letters, summed where it broadcast."""
    if not ctx.wants[0]:
        return None
    xp = ctx.xp
    terms, out, sizes, full = _einsum_plan(ctx, operands)
    unused = [c for c in _LETTERS if c not in "".join(terms)]
    grads = []
    for i, (x, term) in enumerate(zip(operands, terms)):
        distinct = "".join(dict.fromkeys(term))
        others = [(t, a) for j, (t, a) in enumerate(zip(terms, full)) if j != i]
        seen = set(out).union(*(t for t, _ in others))
        alone = [c for c in distinct if c not in seen]
        subs = ",".join([out, *(t for t, _ in others), *alone])
        ones = [xp.ones(sizes[c], dtype=dout.dtype) for c in alone]
        g = xp.einsum(f"{subs}->{distinct}", dout, *(a for _, a in others), *ones, optimize=xp is np)
        g = xp.asarray(g)
        if len(distinct) < len(term):
            g = _on_diagonal(xp, g, term, sizes, unused)
        axes = tuple(k for k, c in enumerate(term) if x.shape[k] == 1 and sizes[c] != 1)
        grads.append((g.sum(axis=axes, keepdims=True) if axes else g).astype(x.dtype))
    return grads


_EINSUM_ATTRS = (AttrDef("equation", AttrType.STRING),)

EINSUM_GRAD = OpSchema(
    "einsum_grad",
    inputs=(Slot("Operands", duplicable=True), Slot("Out@GRAD")),
    outputs=(Slot("Operands@GRAD", duplicable=True),),
    attrs=_EINSUM_ATTRS,
    infer=infer_grads("Operands"),
    kernel=_einsum_grad,
    doc="Gradient of einsum: each operand's an Einstein sum of dOut and the other operands.",
)

EINSUM = OpSchema(
    "einsum",
    inputs=(Slot("Operands", duplicable=True),),
    outputs=(
        Slot("Out"),
        Slot("InnerCache", duplicable=True, optional=True, no_grad=True),
        Slot("XShape", duplicable=True, optional=True, no_grad=True),
    ),
    attrs=_EINSUM_ATTRS,
    infer=_infer_einsum,
    grad=lambda g: grad_op(g, EINSUM_GRAD, ("Operands", "Out@GRAD"), ("Operands",)),
    kernel=_einsum,
    doc="The Einstein sum `equation` (numpy's notation: `...` broadcasts, no `->` sums letters used twice) of "
    "Operands; InnerCache and XShape are Paddle's caches (empty here: the gradient reads Operands).",
)

SCHEMAS: tuple[OpSchema, ...] = (
    MUL,
    MUL_GRAD,
    MATMUL,
    MATMUL_GRAD,
    MATMUL_V2,
    MATMUL_V2_GRAD,
    ELEMENTWISE_ADD,
    ELEMENTWISE_ADD_GRAD,
    ELEMENTWISE_SUB,
    ELEMENTWISE_SUB_GRAD,
    ELEMENTWISE_MUL,
    ELEMENTWISE_MUL_GRAD,
    ELEMENTWISE_DIV,
    ELEMENTWISE_DIV_GRAD,
    ELEMENTWISE_POW,
    ELEMENTWISE_POW_GRAD,
    ELEMENTWISE_MAX,
    ELEMENTWISE_MAX_GRAD,
    ELEMENTWISE_MIN,
    ELEMENTWISE_MIN_GRAD,
    ELEMENTWISE_MOD,
    ELEMENTWISE_MOD_GRAD,
    ELEMENTWISE_FLOORDIV,
    RELU,
    RELU_GRAD,
    SIGMOID,
    SIGMOID_GRAD,
    TANH,
    TANH_GRAD,
    SQUARE,
    SQUARE_GRAD,
    GELU,
    GELU_GRAD,
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
    ARG_MAX,
    ARG_MIN,
    FILL_CONSTANT,
    EINSUM,
    EINSUM_GRAD,
)
