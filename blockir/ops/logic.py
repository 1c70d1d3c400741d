"""Comparisons, logical ops and ``where``.

The comparisons (``equal``, ``not_equal``, ``less_than``, ``less_equal``, ``greater_than``, ``greater_equal``)
broadcast as the elementwise ops do (Paddle's ``axis``, :func:`blockir.ops.common.elementwise_views`) and give a
bool Out; the logical ops (``logical_and``, ``logical_or``, ``logical_xor``, ``logical_not``) take any dtype (nonzero
is true), broadcast numpy's way and give a bool Out; ``where`` picks from X where Condition holds, else from Y, all
three broadcast numpy's way. None but ``where`` has a gradient. Each comparison and logical op is a row of a table.
The bitwise ops (``bitwise_and``, ``bitwise_or``, ``bitwise_xor``, ``bitwise_not``, ``bitwise_left_shift``,
``bitwise_right_shift``: Paddle's) take integers (unsigned too) or, but the shifts, bools, and broadcast numpy's way.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from blockir.ir.attrs import AttrType
from blockir.ir.dtypes import INT_DTYPES
from blockir.ir.schema import AttrDef, InferContext, KernelContext, OpSchema, Slot
from blockir.ops.common import (
    ALL_DTYPES,
    Broadcast,
    broadcast_dims,
    broadcast_shapes,
    check_dtype,
    fmt,
    grad_op,
    infer_grads,
    kernel_error,
    same_dtype,
    unary_family,
    unbroadcast,
)

# op type -> the array module's function
COMPARISONS = {
    "equal": "equal",
    "not_equal": "not_equal",
    "less_than": "less",
    "less_equal": "less_equal",
    "greater_than": "greater",
    "greater_equal": "greater_equal",
}
LOGICAL = {"logical_and": "logical_and", "logical_or": "logical_or", "logical_xor": "logical_xor"}

_COMPARE_ATTRS = (
    AttrDef("axis", AttrType.INT, -1),
    AttrDef("force_cpu", AttrType.BOOLEAN, False),
    AttrDef("use_mkldnn", AttrType.BOOLEAN, False),
)


def _infer_compare(ctx: InferContext) -> None:
    x, y = check_dtype(ctx, "X", ALL_DTYPES), check_dtype(ctx, "Y", ALL_DTYPES)
    same_dtype(ctx, x, y)
    ctx.set_output("Out", broadcast_shapes(ctx, x, y, ctx.attr("axis")), "bool")


def _comparison(op_type: str, function: str) -> OpSchema:
    def kernel(ctx: KernelContext, x: Any, y: Any) -> Any:
        b = Broadcast(ctx, x, y)
        return getattr(ctx.xp, function)(b.x(x), b.y(y))

    return OpSchema(
        op_type,
        inputs=(Slot("X", no_grad=True), Slot("Y", no_grad=True)),
        outputs=(Slot("Out"),),
        attrs=_COMPARE_ATTRS,
        infer=_infer_compare,
        kernel=kernel,
        doc=f"Out = {function}(X, Y) elementwise (bool), broadcast as elementwise_add; force_cpu places nothing.",
    )


def _numpy_broadcast(ctx: InferContext, *slots: str) -> tuple[int, ...]:
    """The shape the inputs of ``slots`` broadcast to, numpy's way; the op's error when they do not."""
    shape: tuple[int, ...] | None = ()
    tensors = [ctx.tensor(slot) for slot in slots]
    for var in tensors:
        shape = broadcast_dims(shape, var.shape) if shape is not None else None
    if shape is None:
        ctx.fail(f"{', '.join(f'{s} {fmt(v)}' for s, v in zip(slots, tensors))} do not broadcast")
    return shape


def _infer_logical(ctx: InferContext) -> None:
    check_dtype(ctx, "X", ALL_DTYPES)
    check_dtype(ctx, "Y", ALL_DTYPES)
    ctx.set_output("Out", _numpy_broadcast(ctx, "X", "Y"), "bool")


def _logical(op_type: str, function: str) -> OpSchema:
    def kernel(ctx: KernelContext, x: Any, y: Any) -> Any:
        try:
            return getattr(ctx.xp, function)(x, y)
        except ValueError:
            raise kernel_error(ctx, f"X {list(x.shape)} and Y {list(y.shape)} do not broadcast") from None

    return OpSchema(
        op_type,
        inputs=(Slot("X", no_grad=True), Slot("Y", no_grad=True)),
        outputs=(Slot("Out"),),
        infer=_infer_logical,
        kernel=kernel,
        doc=f"Out = {function}(X, Y) (bool; nonzero is true), broadcast numpy's way.",
    )


def _infer_not(ctx: InferContext) -> None:
    x = check_dtype(ctx, "X", ALL_DTYPES)
    ctx.set_output("Out", x.shape, "bool", lod_level=x.lod_level)


LOGICAL_NOT = OpSchema(
    "logical_not",
    inputs=(Slot("X", no_grad=True),),
    outputs=(Slot("Out"),),
    infer=_infer_not,
    kernel=lambda ctx, x: ctx.xp.logical_not(x),
    share_lod=(("X", "Out"),),
    doc="Out = not X (bool; nonzero is true).",
)

# -- where -----------------------------------------------------------------------------------------------------


def _infer_where(ctx: InferContext) -> None:
    check_dtype(ctx, "Condition", frozenset({"bool"}))
    x, y = check_dtype(ctx, "X", ALL_DTYPES), check_dtype(ctx, "Y", ALL_DTYPES)
    same_dtype(ctx, x, y)
    ctx.set_output("Out", _numpy_broadcast(ctx, "Condition", "X", "Y"), x.dtype)


def _where(ctx: KernelContext, condition: Any, x: Any, y: Any) -> Any:
    try:
        return ctx.xp.where(condition, x, y)
    except ValueError:
        shapes = f"Condition {list(condition.shape)}, X {list(x.shape)} and Y {list(y.shape)}"
        raise kernel_error(ctx, f"{shapes} do not broadcast") from None


def _where_grad(ctx: KernelContext, condition: Any, x: Any, y: Any, dout: Any) -> tuple[Any, Any]:
    """dOut where Condition holds to X, elsewhere to Y, each summed back to its shape."""
    xp = ctx.xp
    dx = unbroadcast(xp, xp.where(condition, dout, 0), x.shape) if ctx.wants[0] else None
    dy = unbroadcast(xp, xp.where(condition, 0, dout), y.shape) if ctx.wants[1] else None
    return dx, dy


_WHERE_INPUTS = (Slot("Condition", no_grad=True), Slot("X"), Slot("Y"))
WHERE_GRAD = OpSchema(
    "where_grad",
    inputs=(*_WHERE_INPUTS, Slot("Out@GRAD")),
    outputs=(Slot("X@GRAD"), Slot("Y@GRAD")),
    infer=infer_grads("X", "Y"),
    kernel=_where_grad,
    doc="Gradient of where.",
)
WHERE = OpSchema(
    "where",
    inputs=_WHERE_INPUTS,
    outputs=(Slot("Out"),),
    infer=_infer_where,
    grad=lambda g: grad_op(g, WHERE_GRAD, ("Condition", "X", "Y", "Out@GRAD"), ("X", "Y")),
    kernel=_where,
    doc="Out = X where Condition holds, else Y; the three broadcast numpy's way.",
)

# -- bitwise ops (Paddle's bitwise_and/or/xor/not and bitwise_left_shift/right_shift) --------------------------

BITWISE = {"bitwise_and": "bitwise_and", "bitwise_or": "bitwise_or", "bitwise_xor": "bitwise_xor"}
_BITWISE_DTYPES = INT_DTYPES | {"bool"}


def _infer_bitwise(dtypes: frozenset[str]) -> Callable[[InferContext], None]:
    def infer(ctx: InferContext) -> None:
        x, y = check_dtype(ctx, "X", dtypes), check_dtype(ctx, "Y", dtypes)
        same_dtype(ctx, x, y)
        ctx.set_output("Out", _numpy_broadcast(ctx, "X", "Y"), x.dtype)

    return infer


def _bitwise(op_type: str, function: str) -> OpSchema:
    return OpSchema(
        op_type,
        inputs=(Slot("X", no_grad=True), Slot("Y", no_grad=True)),
        outputs=(Slot("Out"),),
        infer=_infer_bitwise(_BITWISE_DTYPES),
        kernel=lambda ctx, x, y: getattr(ctx.xp, function)(x, y),
        doc=f"Out = {function}(X, Y) on integers or bools, broadcast numpy's way.",
    )


(BITWISE_NOT,) = unary_family(
    "bitwise_not",
    lambda ctx, x: ctx.xp.invert(x),
    dtypes=_BITWISE_DTYPES,
    doc="Out = ~X on integers (logical not on bools).",
)


def _shift(left: bool) -> Callable[..., Any]:
    """X shifted by Y bits (numpy broadcasting). A shift below 0 or of the width or more gives 0 (right and
    arithmetic: -1 for a negative X); is_arithmetic=False shifts a signed X right as its unsigned bits."""

    def kernel(ctx: KernelContext, x: Any, y: Any) -> Any:
        xp = ctx.xp
        bits = x.dtype.itemsize * 8
        valid = (y >= 0) & (y < bits)
        unsigned = f"u{x.dtype.itemsize}"
        by = xp.where(valid, y, 0).astype(unsigned)
        arithmetic = ctx.attrs["is_arithmetic"] and x.dtype.kind == "i"
        if left:
            shifted = xp.left_shift(x.view(unsigned), by).view(x.dtype)
            return xp.where(valid, shifted, x.dtype.type(0))
        if arithmetic:
            shifted = xp.right_shift(x, by.astype(x.dtype))
            return xp.where(valid, shifted, xp.where(x < 0, x.dtype.type(-1), x.dtype.type(0)))
        shifted = xp.right_shift(x.view(unsigned), by).view(x.dtype)
        return xp.where(valid, shifted, x.dtype.type(0))

    return kernel


def _shift_op(op_type: str, left: bool) -> OpSchema:
    return OpSchema(
        op_type,
        inputs=(Slot("X", no_grad=True), Slot("Y", no_grad=True)),
        outputs=(Slot("Out"),),
        attrs=(AttrDef("is_arithmetic", AttrType.BOOLEAN, True),),
        infer=_infer_bitwise(INT_DTYPES),
        kernel=_shift(left),
        doc=f"Out = X {'<<' if left else '>>'} Y on integers, broadcast numpy's way; a shift below 0 or of X's width "
        "or more gives 0 (-1 for a negative X shifted right arithmetically); is_arithmetic=False shifts signed "
        "integers as their unsigned bits.",
    )


SCHEMAS: tuple[OpSchema, ...] = (
    *(_comparison(op_type, function) for op_type, function in COMPARISONS.items()),
    *(_logical(op_type, function) for op_type, function in LOGICAL.items()),
    LOGICAL_NOT,
    WHERE,
    WHERE_GRAD,
    *(_bitwise(op_type, function) for op_type, function in BITWISE.items()),
    BITWISE_NOT,
    _shift_op("bitwise_left_shift", True),
    _shift_op("bitwise_right_shift", False),
)
