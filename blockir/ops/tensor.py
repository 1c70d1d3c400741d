"""Tensor creation and replication with Paddle's semantics: ``shape``, ``size``, ``assign_value``,
``fill_any_like``, ``range``, ``linspace``, ``expand_v2``, ``expand_as_v2``, ``tile``, ``stack``, ``unstack``,
``flip``, ``roll``, with gradient ops where Paddle has one; and ``bitcast`` (ONNX's BitCast, which Paddle lacks).

Values Paddle's programs may give as tensors (``Shape`` / ``expand_shapes_tensor``, ``RepeatTimes`` /
``repeat_times_tensor``, ``ShiftsTensor``) win over the attributes and are read when the op runs; inference then
gives -1 for the dims they decide. Kernels are written once against ``ctx.xp``.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

import numpy as np

from blockir.ir.attrs import AttrType
from blockir.ir.schema import AttrDef, GradContext, InferContext, KernelContext, OpSchema, OpSpec, Slot
from blockir.ops.common import (
    ALL_DTYPES,
    check_dtype,
    dtype_attr,
    fmt,
    grad_op,
    grad_outputs,
    grad_spec,
    infer_grads,
    kernel_error,
    merge_shapes,
    normalize_axis,
    np_dtype,
    numel,
    one_value,
    to_host,
    unbroadcast,
)

_INDEX_DTYPES = frozenset({"int32", "int64"})
_ONEDNN = (AttrDef("use_mkldnn", AttrType.BOOLEAN, False), AttrDef("mkldnn_data_type", AttrType.STRING, "float32"))


def _ints_of(ctx: KernelContext, tensor: Any, tensors: Sequence[Any], attr: str) -> list[int]:
    """The integers a 1-D tensor holds, else those of a list of one-value tensors, else attribute ``attr``'s."""
    if tensor is not None:
        return [int(v) for v in to_host(tensor).reshape(-1).tolist()]
    if tensors:
        return [int(to_host(t).reshape(-1)[0]) for t in tensors]
    return [int(v) for v in ctx.attrs[attr]]


def _count_of(ctx: InferContext, tensor: str, tensors: str, attr: str) -> int | None:
    """How many integers a tensor input (or a list of one-value tensors) gives; None when the attribute does."""
    if ctx.has_input(tensor):
        t = check_dtype(ctx, tensor, _INDEX_DTYPES)
        if len(t.shape) != 1 or t.shape[0] < 0:
            ctx.fail(f"{tensor} {fmt(t)} must be a vector of known length")
        return t.shape[0]
    if ctx.has_input(tensors):
        for t in ctx.tensors(tensors):
            if t.dtype not in _INDEX_DTYPES or numel(t.shape) not in (-1, 1):
                ctx.fail(f"{tensors} entry {fmt(t)} must be one int32 or int64 value")
        return len(ctx.inputs(tensors))
    return None


# -- shape, size -----------------------------------------------------------------------------------------------


def _infer_shape(ctx: InferContext) -> None:
    x = ctx.tensor("Input")
    ctx.set_output("Out", (len(x.shape),), "int32")


def _infer_size(ctx: InferContext) -> None:
    ctx.tensor("Input")
    ctx.set_output("Out", (), "int64")


SHAPE = OpSchema(
    "shape",
    inputs=(Slot("Input", no_grad=True),),
    outputs=(Slot("Out"),),
    attrs=_ONEDNN,
    infer=_infer_shape,
    kernel=lambda ctx, x: ctx.xp.asarray(np.array(x.shape, np.int32)),
    doc="Out = the shape of Input (int32 [rank]).",
)
SIZE = OpSchema(
    "size",
    inputs=(Slot("Input", no_grad=True),),
    outputs=(Slot("Out"),),
    infer=_infer_size,
    kernel=lambda ctx, x: ctx.xp.asarray(np.array(x.size, np.int64)),
    doc="Out = the number of elements of Input (int64, 0-D).",
)

# -- assign_value, fill_any_like -------------------------------------------------------------------------------

_VALUE_LISTS = {  # dtype -> the attribute holding its values
    "bool": "bool_values",
    "float32": "fp32_values",
    "float64": "fp64_values",
    "int32": "int32_values",
    "int64": "int64_values",
}
_ASSIGN_VALUE_ATTRS = (
    AttrDef("shape", AttrType.INTS),
    AttrDef("dtype", AttrType.INT),
    AttrDef("bool_values", AttrType.INTS, ()),
    AttrDef("fp32_values", AttrType.FLOATS, ()),
    AttrDef("fp64_values", AttrType.FLOAT64S, ()),
    AttrDef("int32_values", AttrType.INTS, ()),
    AttrDef("int64_values", AttrType.LONGS, ()),
    AttrDef("values", AttrType.SCALARS, ()),
)


def _assign_values(attrs: dict[str, Any], dtype: str) -> Sequence[Any]:
    """The values of an assign_value: ``values`` (Paddle 3's scalars) when set, else the list of ``dtype``."""
    return attrs["values"] or attrs[_VALUE_LISTS[dtype]]


def _infer_assign_value(ctx: InferContext) -> None:
    dtype, shape = dtype_attr(ctx, "dtype"), list(ctx.attr("shape"))
    if dtype not in _VALUE_LISTS:
        ctx.fail(f"dtype={ctx.attr('dtype')} ({dtype}) is not one of {', '.join(sorted(_VALUE_LISTS))}")
    if any(d < 0 for d in shape):
        ctx.fail(f"shape {shape} must not have negative dimensions")
    attrs = {name: ctx.attr(name) for name in ("values", _VALUE_LISTS[dtype])}
    count = len(_assign_values(attrs, dtype))
    if count != math.prod(shape):
        ctx.fail(f"{count} values do not fill shape {shape} ({math.prod(shape)} elements)")
    ctx.set_output("Out", shape, dtype)


def _assign_value(ctx: KernelContext) -> Any:
    dtype = np_dtype(ctx.attrs["dtype"])
    values = np.array(_assign_values(ctx.attrs, dtype.name)).astype(dtype)
    return ctx.xp.asarray(values.reshape(ctx.attrs["shape"]))


ASSIGN_VALUE = OpSchema(
    "assign_value",
    outputs=(Slot("Out"),),
    attrs=_ASSIGN_VALUE_ATTRS,
    infer=_infer_assign_value,
    kernel=_assign_value,
    doc="Out = a constant of `shape` and `dtype` whose values the attribute of its dtype lists (bool_values, "
    "fp32_values, fp64_values, int32_values, int64_values), or `values` (scalars) when set.",
)

_FILL_ANY_LIKE_ATTRS = (AttrDef("value", AttrType.FLOAT, 0.0), AttrDef("dtype", AttrType.INT, -1))


def _infer_fill_any_like(ctx: InferContext) -> None:
    x = check_dtype(ctx, "X", ALL_DTYPES)
    dtype = x.dtype if ctx.attr("dtype") == -1 else dtype_attr(ctx, "dtype")
    ctx.set_output("Out", x.shape, dtype, lod_level=x.lod_level)


def _fill_any_like(ctx: KernelContext, x: Any) -> Any:
    dtype = x.dtype if ctx.attrs["dtype"] == -1 else np_dtype(ctx.attrs["dtype"])
    return ctx.xp.full(x.shape, ctx.attrs["value"], dtype=dtype)


FILL_ANY_LIKE = OpSchema(
    "fill_any_like",
    inputs=(Slot("X", no_grad=True),),
    outputs=(Slot("Out"),),
    attrs=_FILL_ANY_LIKE_ATTRS,
    infer=_infer_fill_any_like,
    kernel=_fill_any_like,
    share_lod=(("X", "Out"),),
    doc="Out = `value` in X's shape, of `dtype` (-1: X's).",
)

# -- range, linspace ---------------------------------------------------------------------------------------------


def _infer_range(ctx: InferContext) -> None:
    start = one_value(ctx, "Start")
    for slot in ("End", "Step"):
        one_value(ctx, slot)
    ctx.set_output("Out", (-1,), start.dtype)


def _scalar(tensor: Any) -> Any:
    return to_host(tensor).reshape(-1)[0].item()


def _range(ctx: KernelContext, start: Any, end: Any, step: Any) -> Any:
    """[Start, End) by Step, in Start's dtype: ceil(|End - Start| / |Step|) values."""
    first, last, by = _scalar(start), _scalar(end), _scalar(step)
    if by == 0:
        raise kernel_error(ctx, "Step must not be 0")
    count = max(math.ceil((last - first) / by), 0)
    return ctx.xp.asarray((first + np.arange(count) * by).astype(start.dtype))


RANGE = OpSchema(
    "range",
    inputs=(Slot("Start", no_grad=True), Slot("End", no_grad=True), Slot("Step", no_grad=True)),
    outputs=(Slot("Out"),),
    infer=_infer_range,
    kernel=_range,
    doc="Out = Start, Start + Step, ... up to End (excluded), in Start's dtype.",
)


def _infer_linspace(ctx: InferContext) -> None:
    one_value(ctx, "Start")
    one_value(ctx, "Stop")
    num = one_value(ctx, "Num")
    if num.dtype not in _INDEX_DTYPES:
        ctx.fail(f"Num {fmt(num)} must be int32 or int64")
    ctx.set_output("Out", (-1,), dtype_attr(ctx, "dtype"))


def _linspace(ctx: KernelContext, start: Any, stop: Any, num: Any) -> Any:
    """``num`` values from Start to Stop: the first half counted up from Start, the rest down from Stop, as
    Paddle's kernel (both ends exact)."""
    first, last, count = float(_scalar(start)), float(_scalar(stop)), int(_scalar(num))
    if count < 1:
        raise kernel_error(ctx, f"Num {count} must be positive")
    step = (last - first) / (count - 1) if count > 1 else 0.0
    i = np.arange(count)
    values = np.where(i < count // 2, first + step * i, last - step * (count - 1 - i))
    return ctx.xp.asarray(values.astype(np_dtype(ctx.attrs["dtype"])))


LINSPACE = OpSchema(
    "linspace",
    inputs=(Slot("Start", no_grad=True), Slot("Stop", no_grad=True), Slot("Num", no_grad=True)),
    outputs=(Slot("Out"),),
    attrs=(AttrDef("dtype", AttrType.INT),),
    infer=_infer_linspace,
    kernel=_linspace,
    doc="Out = Num evenly spaced values from Start to Stop (both included), of `dtype`.",
)

# -- expand_v2, expand_as_v2 -------------------------------------------------------------------------------------

_EXPAND_ATTRS = (AttrDef("shape", AttrType.INTS, ()), *_ONEDNN)


def _expanded(fail: Any, x_shape: Sequence[int], target: Sequence[int]) -> list[int]:
    """The shape X of ``x_shape`` expands to: ``target`` with -1 keeping X's dim (aligned right); a dim of X that
    is not 1 must equal its target. ``fail`` reports what does not fit."""
    if len(target) < len(x_shape):
        fail(f"shape {list(target)} has fewer dims than X {list(x_shape)}")
    lead = len(target) - len(x_shape)
    out = []
    for i, t in enumerate(target):
        d = x_shape[i - lead] if i >= lead else 1
        if t == -1:
            if i < lead:
                fail(f"shape {list(target)}: -1 at dim {i} has no dim of X {list(x_shape)} to keep")
            out.append(d)
        elif t < 1 and not (t == 0 and d in (0, 1)):
            fail(f"shape {list(target)} has a dim {t}: expected a positive size or -1")
        elif d not in (1, -1, t):
            fail(f"dim {i - lead} of X {list(x_shape)} is {d}: it expands to {t} only from 1")
        else:
            out.append(t)
    return out


def _infer_expand(ctx: InferContext) -> None:
    x = check_dtype(ctx, "X", ALL_DTYPES)
    count = _count_of(ctx, "Shape", "expand_shapes_tensor", "shape")
    if count is not None:
        if count < len(x.shape):
            ctx.fail(f"Shape gives {count} dims, fewer than X {fmt(x)}")
        ctx.set_output("Out", [-1] * count, x.dtype)
        return
    ctx.set_output("Out", _expanded(ctx.fail, x.shape, ctx.attr("shape")), x.dtype)


def _kernel_fail(ctx: KernelContext) -> Any:
    def fail(message: str) -> None:
        raise kernel_error(ctx, message)

    return fail


def _expand(ctx: KernelContext, x: Any, shape: Any, shapes: Sequence[Any]) -> Any:
    target = _expanded(_kernel_fail(ctx), x.shape, _ints_of(ctx, shape, shapes, "shape"))
    return ctx.xp.broadcast_to(x, target).copy()


def _expand_grad(ctx: KernelContext, x: Any, dout: Any, *tensors: Any) -> Any:
    """dOut summed back over the dims X was expanded along."""
    return unbroadcast(ctx.xp, dout, x.shape)


_EXPAND_TENSORS = (
    Slot("Shape", optional=True, no_grad=True),
    Slot("expand_shapes_tensor", duplicable=True, optional=True, no_grad=True),
)
EXPAND_V2_GRAD = OpSchema(
    "expand_v2_grad",
    inputs=(Slot("X"), Slot("Out@GRAD"), *_EXPAND_TENSORS),
    outputs=(Slot("X@GRAD"),),
    attrs=_EXPAND_ATTRS,
    infer=infer_grads("X"),
    kernel=_expand_grad,
    doc="Gradient of expand_v2: dOut summed over the expanded dims.",
)
EXPAND_V2 = OpSchema(
    "expand_v2",
    inputs=(Slot("X"), *_EXPAND_TENSORS),
    outputs=(Slot("Out"),),
    attrs=_EXPAND_ATTRS,
    infer=_infer_expand,
    grad=lambda g: grad_op(g, EXPAND_V2_GRAD, ("X", "Out@GRAD", "Shape", "expand_shapes_tensor"), ("X",)),
    kernel=_expand,
    doc="Out = X broadcast to `shape` (Shape's or expand_shapes_tensor's values when given; -1 keeps X's dim).",
)

_EXPAND_AS_ATTRS = (AttrDef("target_shape", AttrType.INTS, ()),)


def _infer_expand_as(ctx: InferContext) -> None:
    x = check_dtype(ctx, "X", ALL_DTYPES)
    target = ctx.tensor("Y").shape if ctx.has_input("Y") else tuple(ctx.attr("target_shape"))
    if not ctx.has_input("Y") and not target:
        ctx.fail("neither Y nor target_shape gives the shape to expand to")
    if len(target) < len(x.shape):
        ctx.fail(f"the target shape {list(target)} has fewer dims than X {fmt(x)}")
    lead, shape = len(target) - len(x.shape), []
    for i, t in enumerate(target):  # a -1 of Y's shape is unknown, not "keep X's dim"
        d = x.shape[i - lead] if i >= lead else 1
        if t >= 0 and d not in (1, -1, t):
            ctx.fail(f"dim {i - lead} of X {fmt(x)} is {d}: it expands to {t} only from 1")
        shape.append(t if t >= 0 or d == 1 else d)
    ctx.set_output("Out", shape, x.dtype)


def _expand_as(ctx: KernelContext, x: Any, y: Any) -> Any:
    target = y.shape if y is not None else ctx.attrs["target_shape"]
    return ctx.xp.broadcast_to(x, _expanded(_kernel_fail(ctx), x.shape, target)).copy()


EXPAND_AS_V2_GRAD = OpSchema(
    "expand_as_v2_grad",
    inputs=(Slot("X"), Slot("Out@GRAD")),
    outputs=(Slot("X@GRAD"),),
    attrs=_EXPAND_AS_ATTRS,
    infer=infer_grads("X"),
    kernel=_expand_grad,
    doc="Gradient of expand_as_v2: dOut summed over the expanded dims.",
)
EXPAND_AS_V2 = OpSchema(
    "expand_as_v2",
    inputs=(Slot("X"), Slot("Y", optional=True, no_grad=True)),
    outputs=(Slot("Out"),),
    attrs=_EXPAND_AS_ATTRS,
    infer=_infer_expand_as,
    grad=lambda g: grad_op(g, EXPAND_AS_V2_GRAD, ("X", "Out@GRAD"), ("X",)),
    kernel=_expand_as,
    doc="Out = X broadcast to Y's shape (target_shape when there is no Y).",
)

# -- tile ----------------------------------------------------------------------------------------------------------

_TILE_ATTRS = (AttrDef("repeat_times", AttrType.INTS, ()), *_ONEDNN)
_TILE_TENSORS = (
    Slot("RepeatTimes", optional=True, no_grad=True),
    Slot("repeat_times_tensor", duplicable=True, optional=True, no_grad=True),
)


def _tiled(fail: Any, x_shape: Sequence[int], repeats: Sequence[int]) -> list[int]:
    """X's shape tiled: both padded with leading 1s to the same rank, then multiplied dim by dim."""
    if any(r < 0 for r in repeats):
        fail(f"repeat_times {list(repeats)} must not be negative")
    rank = max(len(x_shape), len(repeats))
    dims = [1] * (rank - len(x_shape)) + list(x_shape)
    times = [1] * (rank - len(repeats)) + list(repeats)
    return [-1 if d < 0 else d * r for d, r in zip(dims, times)]


def _infer_tile(ctx: InferContext) -> None:
    x = check_dtype(ctx, "X", ALL_DTYPES)
    count = _count_of(ctx, "RepeatTimes", "repeat_times_tensor", "repeat_times")
    if count is not None:
        ctx.set_output("Out", [-1] * max(count, len(x.shape)), x.dtype)
        return
    ctx.set_output("Out", _tiled(ctx.fail, x.shape, ctx.attr("repeat_times")), x.dtype)


def _repeats(ctx: KernelContext, x: Any, tensor: Any, tensors: Sequence[Any]) -> list[int]:
    repeats = _ints_of(ctx, tensor, tensors, "repeat_times")
    _tiled(_kernel_fail(ctx), x.shape, repeats)
    return [1] * (x.ndim - len(repeats)) + repeats


def _tile(ctx: KernelContext, x: Any, tensor: Any, tensors: Sequence[Any]) -> Any:
    return ctx.xp.tile(x, _repeats(ctx, x, tensor, tensors))


def _tile_grad(ctx: KernelContext, x: Any, dout: Any, tensor: Any, tensors: Sequence[Any]) -> Any:
    """dOut as [r0, d0, r1, d1, ...] summed over the repeats."""
    repeats = _repeats(ctx, x, tensor, tensors)
    dims = [1] * (len(repeats) - x.ndim) + list(x.shape)
    split = dout.reshape([n for pair in zip(repeats, dims) for n in pair])
    return split.sum(axis=tuple(range(0, 2 * len(dims), 2))).reshape(x.shape)


TILE_GRAD = OpSchema(
    "tile_grad",
    inputs=(Slot("X"), Slot("Out@GRAD"), *_TILE_TENSORS),
    outputs=(Slot("X@GRAD"),),
    attrs=_TILE_ATTRS,
    infer=infer_grads("X"),
    kernel=_tile_grad,
    doc="Gradient of tile: dOut summed over the copies.",
)
TILE = OpSchema(
    "tile",
    inputs=(Slot("X"), *_TILE_TENSORS),
    outputs=(Slot("Out"),),
    attrs=_TILE_ATTRS,
    infer=_infer_tile,
    grad=lambda g: grad_op(g, TILE_GRAD, ("X", "Out@GRAD", "RepeatTimes", "repeat_times_tensor"), ("X",)),
    kernel=_tile,
    doc="Out = X repeated repeat_times[i] times along dim i (RepeatTimes' or repeat_times_tensor's values when "
    "given); the shorter of X's shape and repeat_times padded with leading 1s.",
)

# -- stack, unstack ---------------------------------------------------------------------------------------------

_AXIS = (AttrDef("axis", AttrType.INT, 0),)


def _infer_stack(ctx: InferContext) -> None:
    first, shape = merge_shapes(ctx, "X", ALL_DTYPES)
    axis = normalize_axis(ctx, ctx.attr("axis"), len(shape) + 1)
    shape.insert(axis, len(ctx.inputs("X")))
    ctx.set_output("Y", shape, first.dtype)


def _stack(ctx: KernelContext, xs: list[Any]) -> Any:
    try:
        return ctx.xp.stack(xs, axis=ctx.attrs["axis"])
    except ValueError:
        raise kernel_error(ctx, f"inputs of shapes {[list(x.shape) for x in xs]} do not stack") from None


def _unstacked(ctx: KernelContext, y: Any) -> list[Any]:
    axis = ctx.attrs["axis"] % y.ndim
    return [y[(slice(None),) * axis + (i,)] for i in range(y.shape[axis])]


def _infer_parts(ctx: InferContext, source: str, parts: str) -> None:
    """Each entry of output ``parts``: input ``source`` without its dim ``axis``."""
    y = ctx.tensor(source)
    axis = normalize_axis(ctx, ctx.attr("axis"), max(len(y.shape), 1))
    count = len(ctx.outputs(parts))
    if y.shape and y.shape[axis] >= 0 and y.shape[axis] != count:
        ctx.fail(f"{source} {fmt(y)} has {y.shape[axis]} entries along axis {axis}, but {parts} has {count}")
    shape = [d for i, d in enumerate(y.shape) if i != axis]
    for i in range(count):
        ctx.set_output(parts, shape, y.dtype, index=i)


def _grad_stack(g: GradContext) -> list[OpSpec]:
    return grad_spec(g, STACK_GRAD, {"Y@GRAD": g.output_grad("Y")}, ("X",))


STACK_GRAD = OpSchema(
    "stack_grad",
    inputs=(Slot("Y@GRAD"),),
    outputs=(Slot("X@GRAD", duplicable=True),),
    attrs=_AXIS,
    infer=lambda ctx: _infer_parts(ctx, "Y@GRAD", "X@GRAD"),
    kernel=_unstacked,
    doc="Gradient of stack: dY taken apart along `axis`.",
)
STACK = OpSchema(
    "stack",
    inputs=(Slot("X", duplicable=True),),
    outputs=(Slot("Y"),),
    attrs=(*_AXIS, AttrDef("use_mkldnn", AttrType.BOOLEAN, False)),
    infer=_infer_stack,
    grad=_grad_stack,
    kernel=_stack,
    doc="Y = the inputs (all of one shape) joined along a new dim `axis` (negative counts from the end of Y).",
)

_UNSTACK_ATTRS = (*_AXIS, AttrDef("num", AttrType.INT))


def _infer_unstack(ctx: InferContext) -> None:
    check_dtype(ctx, "X", ALL_DTYPES)
    if len(ctx.outputs("Y")) != ctx.attr("num"):
        ctx.fail(f"num={ctx.attr('num')} but Y has {len(ctx.outputs('Y'))} outputs")
    _infer_parts(ctx, "X", "Y")


def _unstack(ctx: KernelContext, x: Any) -> list[Any]:
    if not x.ndim or x.shape[ctx.attrs["axis"] % x.ndim] != ctx.attrs["num"]:
        raise kernel_error(ctx, f"X {list(x.shape)} does not have num={ctx.attrs['num']} entries along the axis")
    return [part.copy() for part in _unstacked(ctx, x)]


def _unstack_grad(ctx: KernelContext, dys: list[Any]) -> Any:
    return ctx.xp.stack(dys, axis=ctx.attrs["axis"])


def _infer_unstack_grad(ctx: InferContext) -> None:
    first, shape = merge_shapes(ctx, "Y@GRAD", ALL_DTYPES)
    axis = normalize_axis(ctx, ctx.attr("axis"), len(shape) + 1)
    shape.insert(axis, len(ctx.inputs("Y@GRAD")))
    ctx.set_output("X@GRAD", shape, first.dtype)


def _grad_unstack(g: GradContext) -> list[OpSpec]:
    return grad_spec(g, UNSTACK_GRAD, {"Y@GRAD": g.output_grad("Y")}, ("X",))


UNSTACK_GRAD = OpSchema(
    "unstack_grad",
    inputs=(Slot("Y@GRAD", duplicable=True),),
    outputs=(Slot("X@GRAD"),),
    attrs=_UNSTACK_ATTRS,
    infer=_infer_unstack_grad,
    kernel=_unstack_grad,
    doc="Gradient of unstack: the dY stacked along `axis`.",
)
UNSTACK = OpSchema(
    "unstack",
    inputs=(Slot("X"),),
    outputs=(Slot("Y", duplicable=True),),
    attrs=_UNSTACK_ATTRS,
    infer=_infer_unstack,
    grad=_grad_unstack,
    kernel=_unstack,
    doc="Y = the num slices of X along `axis`, that dim removed.",
)

# -- flip, roll ---------------------------------------------------------------------------------------------------


def _infer_flip(ctx: InferContext) -> None:
    x = check_dtype(ctx, "X", ALL_DTYPES)
    for a in ctx.attr("axis"):
        normalize_axis(ctx, a, max(len(x.shape), 1))
    ctx.set_output("Out", x.shape, x.dtype)


def _grad_flip(g: GradContext) -> list[OpSpec]:
    """Flipping is its own gradient: a flip of dOut."""
    outputs = grad_outputs(g, "X")
    return (
        [OpSpec("flip", {"X": g.output_grad("Out")}, {"Out": outputs["X@GRAD"]}, {"axis": g.op.attr("axis")})]
        if outputs
        else []
    )


FLIP = OpSchema(
    "flip",
    inputs=(Slot("X"),),
    outputs=(Slot("Out"),),
    attrs=(AttrDef("axis", AttrType.INTS),),
    infer=_infer_flip,
    grad=_grad_flip,
    kernel=lambda ctx, x: ctx.xp.flip(x, tuple(a % x.ndim for a in ctx.attrs["axis"])).copy() if x.ndim else x.copy(),
    doc="Out = X reversed along each dim of `axis`.",
)

_ROLL_ATTRS = (AttrDef("shifts", AttrType.LONGS, ()), AttrDef("axis", AttrType.LONGS, ()))


def _infer_roll(ctx: InferContext) -> None:
    x = check_dtype(ctx, "X", ALL_DTYPES)
    shifts, axes = ctx.attr("shifts"), ctx.attr("axis")
    for a in axes:
        normalize_axis(ctx, a, max(len(x.shape), 1))
    if ctx.has_input("ShiftsTensor"):
        check_dtype(ctx, "ShiftsTensor", _INDEX_DTYPES)
    elif axes and len(shifts) != len(axes):
        ctx.fail(f"shifts {list(shifts)} and axis {list(axes)} differ in length")
    elif not axes and len(shifts) != 1:
        ctx.fail(f"shifts {list(shifts)} must be one value when axis is empty (X flattened)")
    ctx.set_output("Out", x.shape, x.dtype, lod_level=x.lod_level)


def _rolled(ctx: KernelContext, x: Any, shifts_tensor: Any, sign: int) -> Any:
    shifts = [sign * s for s in _ints_of(ctx, shifts_tensor, (), "shifts")]
    axes = list(ctx.attrs["axis"])
    if not axes:
        return ctx.xp.roll(x.reshape(-1), shifts[0]).reshape(x.shape)
    if len(shifts) != len(axes):
        raise kernel_error(ctx, f"shifts {shifts} and axis {axes} differ in length")
    return ctx.xp.roll(x, shifts, axis=axes)


_ROLL_INPUTS = (Slot("X"), Slot("ShiftsTensor", optional=True, no_grad=True))
ROLL_GRAD = OpSchema(
    "roll_grad",
    inputs=(*_ROLL_INPUTS, Slot("Out@GRAD")),
    outputs=(Slot("X@GRAD"),),
    attrs=_ROLL_ATTRS,
    infer=infer_grads("X"),
    kernel=lambda ctx, x, shifts, dout: _rolled(ctx, dout, shifts, -1),
    doc="Gradient of roll: dOut rolled back.",
)
ROLL = OpSchema(
    "roll",
    inputs=_ROLL_INPUTS,
    outputs=(Slot("Out"),),
    attrs=_ROLL_ATTRS,
    infer=_infer_roll,
    grad=lambda g: grad_op(g, ROLL_GRAD, ("X", "ShiftsTensor", "Out@GRAD"), ("X",)),
    kernel=lambda ctx, x, shifts: _rolled(ctx, x, shifts, 1),
    share_lod=(("X", "Out"),),
    doc="Out = X rolled by shifts[i] along axis[i] (X flattened when axis is empty; ShiftsTensor's values when given).",
)

# -- tril_triu, where_index ------------------------------------------------------------------------------------

_TRIL_TRIU_ATTRS = (AttrDef("diagonal", AttrType.INT, 0), AttrDef("lower", AttrType.BOOLEAN, False))


def _infer_tril_triu(ctx: InferContext) -> None:
    x = check_dtype(ctx, "X", ALL_DTYPES)
    if len(x.shape) < 2:
        ctx.fail(f"X {fmt(x)} must have at least 2 dims (a matrix, or a batch of them)")
    ctx.set_output("Out", x.shape, x.dtype)


def _tril_triu(ctx: KernelContext, x: Any) -> Any:
    """The lower (``lower``) or upper triangle of each matrix of X from diagonal ``diagonal``, zeros elsewhere."""
    xp, k = ctx.xp, ctx.attrs["diagonal"]
    above = xp.arange(x.shape[-1])[None, :] - xp.arange(x.shape[-2])[:, None]  # j - i
    keep = above <= k if ctx.attrs["lower"] else above >= k
    return xp.where(keep, x, xp.zeros((), x.dtype))


TRIL_TRIU_GRAD = OpSchema(
    "tril_triu_grad",
    inputs=(Slot("Out@GRAD"),),
    outputs=(Slot("X@GRAD"),),
    attrs=_TRIL_TRIU_ATTRS,
    infer=lambda ctx: ctx.set_output("X@GRAD", ctx.tensor("Out@GRAD").shape, ctx.tensor("Out@GRAD").dtype),
    kernel=_tril_triu,
    doc="Gradient of tril_triu: dOut masked by the same triangle.",
)
TRIL_TRIU = OpSchema(
    "tril_triu",
    inputs=(Slot("X"),),
    outputs=(Slot("Out"),),
    attrs=_TRIL_TRIU_ATTRS,
    infer=_infer_tril_triu,
    grad=lambda g: grad_op(g, TRIL_TRIU_GRAD, ("Out@GRAD",), ("X",)),
    kernel=_tril_triu,
    doc="Out = the lower (`lower`) or upper triangle of each matrix of X, from diagonal `diagonal` (0: the main "
    "one, k > 0 above it), zeros elsewhere (Paddle's tril and triu; ONNX's Trilu).",
)


def _infer_where_index(ctx: InferContext) -> None:
    cond = check_dtype(ctx, "Condition", ALL_DTYPES)
    ctx.set_output("Out", (-1, len(cond.shape)), "int64")


WHERE_INDEX = OpSchema(
    "where_index",
    inputs=(Slot("Condition", no_grad=True),),
    outputs=(Slot("Out"),),
    infer=_infer_where_index,
    kernel=lambda ctx, cond: ctx.xp.stack(ctx.xp.nonzero(cond), axis=1).astype("int64").reshape(-1, cond.ndim),
    doc="Out[i] = the index (one value per dim) of the i-th nonzero entry of Condition, in row-major order "
    "(Paddle's nonzero; ONNX's NonZero is its transpose).",
)

# -- bitcast (ONNX's BitCast; Paddle has no op of this meaning: not exported to Paddle) ------------------------

_BITCAST_DTYPES = ALL_DTYPES | {"int8", "int16", "uint8", "uint16", "uint32", "uint64", "complex64", "complex128"}


def _infer_bitcast(ctx: InferContext) -> None:
    x = check_dtype(ctx, "X", _BITCAST_DTYPES)
    dtype = dtype_attr(ctx, "dtype")
    if np.dtype(dtype).itemsize != np.dtype(x.dtype).itemsize:
        ctx.fail(f"dtype {dtype} is {np.dtype(dtype).itemsize} bytes wide, X's {x.dtype} {np.dtype(x.dtype).itemsize}")
    ctx.set_output("Out", x.shape, dtype)


BITCAST = OpSchema(
    "bitcast",
    inputs=(Slot("X", no_grad=True),),
    outputs=(Slot("Out"),),
    attrs=(AttrDef("dtype", AttrType.INT),),
    infer=_infer_bitcast,
    kernel=lambda ctx, x: ctx.xp.asarray(x).view(np_dtype(ctx.attrs["dtype"])),  # same width: any strides view
    doc="Out = X's bits read as dtype (a proto VarType code of the same width), shape kept (ONNX's BitCast).",
)

SCHEMAS: tuple[OpSchema, ...] = (
    BITCAST,
    TRIL_TRIU,
    TRIL_TRIU_GRAD,
    WHERE_INDEX,
    SHAPE,
    SIZE,
    ASSIGN_VALUE,
    FILL_ANY_LIKE,
    RANGE,
    LINSPACE,
    EXPAND_V2,
    EXPAND_V2_GRAD,
    EXPAND_AS_V2,
    EXPAND_AS_V2_GRAD,
    TILE,
    TILE_GRAD,
    STACK,
    STACK_GRAD,
    UNSTACK,
    UNSTACK_GRAD,
    FLIP,
    ROLL,
    ROLL_GRAD,
)
