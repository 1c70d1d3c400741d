"""Control flow and tensor arrays, with Paddle's op names, slots and attributes.

Loops and conditionals (their kernels run sub-blocks, so the runtime makes them:
:mod:`blockir.runtime.control`; here are the schemas):

- ``while``: while ``Condition`` (bool, one element) holds, run ``sub_block``. ``X``
  are the outer variables the block reads, ``Out`` those it writes (the loop's
  state: each iteration starts from the values the last one left; the block must
  update ``Condition``). With ``is_test`` false and ``StepScopes`` bound, the op
  keeps what its gradient needs of each iteration there (the values of ``X`` when
  the iteration started and of the block's own variables when it ended), as
  Paddle keeps its step scopes. On a CUDA device the condition is read back to
  the host after every iteration.
- ``while_grad``: the gradient of a ``while``: its ``sub_block`` (the gradient
  ops of the loop's block) runs once per iteration kept in ``StepScopes``, last
  to first, on that iteration's values. The gradient of a variable the loop
  carries (in ``X`` and ``Out``) flows from one iteration to the one before; that
  of a variable the loop only reads is summed over the iterations.
- ``conditional_block``: run ``sub_block`` when ``Cond`` holds: with
  ``is_scalar_condition``, when ``Cond[0]`` (one element) is true; else when every
  ``Cond`` tensor has elements. ``Input``: the outer variables it reads; ``Out``:
  those it writes (they keep their values when the block does not run).
- ``conditional_block_grad``: runs the gradient block when the forward one ran.
- ``select_input``: ``Out = X[Mask]`` (Mask an int32 of one element); ``select_output``:
  ``Out[Mask] = X``, the other outputs untouched. Paddle's ``cond`` merges its two
  branches' results with ``select_input``.

Tensor arrays (``lod_tensor_array`` variables, :class:`~blockir.ops.values.TensorArray`
values) are updated in place, as in Paddle (the schemas' ``updates``):

- ``write_to_array``: ``Out[I] = X`` (the array grows as needed); gradient: ``read_from_array``.
- ``read_from_array``: ``Out = X[I]``; a position never written reads as zeros shaped as
  ``X_W`` when that is bound (a gradient array), else it is an error; gradient: ``write_to_array``.
- ``lod_array_length``: ``Out`` (int64 [1]) = the number of tensors in ``X``.
- ``tensor_array_to_tensor``: ``Out`` = the tensors concatenated along ``axis`` (stacked
  along a new ``axis`` with ``use_stack``), ``OutIndex`` (int32) = each one's size along it.
- ``increment``: ``Out = X + step`` (X of one element, its dtype kept).
"""

from __future__ import annotations

from typing import Any

from blockir.ir.attrs import AttrType
from blockir.ir.core import Variable
from blockir.ir.dtypes import VarKind
from blockir.ir.schema import (
    EMPTY_VAR,
    AttrDef,
    GradContext,
    InferContext,
    KernelContext,
    Lowering,
    OpSchema,
    OpSpec,
    Slot,
    Tensor,
)
from blockir.ops.common import NUMBERS, check_dtype, kernel_error, normalize_axis, numel, to_host
from blockir.ops.values import LoDTensor, TensorArray

__all__ = [
    "CONDITIONAL_BLOCK",
    "CONDITIONAL_BLOCK_GRAD",
    "SCHEMAS",
    "WHILE",
    "WHILE_GRAD",
    "add_gradients",
    "index_of",
    "zeros_like_value",
]

_ARRAYS = (VarKind.LOD_TENSOR_ARRAY,)


def index_of(ctx: KernelContext, i: Any) -> int:
    """The position an ``I`` input holds (one non-negative integer; read back from a device)."""
    flat = to_host(i).reshape(-1)
    if flat.size != 1 or flat.dtype.kind not in "iu" or int(flat[0]) < 0:
        raise kernel_error(ctx, f"I must hold one non-negative integer, got {flat.tolist()}")
    return int(flat[0])


def zeros_like_value(xp: Any, value: Any) -> Any:
    """Zeros shaped as ``value`` (an empty tensor array for a tensor array; the LoD kept for a LoDTensor)."""
    if isinstance(value, TensorArray):
        return TensorArray()
    if isinstance(value, LoDTensor):
        return LoDTensor(xp.zeros_like(value.data), value.lod)
    return xp.zeros_like(value)


def add_gradients(xp: Any, a: Any, b: Any) -> Any:
    """``a + b`` of two gradients: None is zero; tensor arrays add position by position (a position never
    written is zero), LoDTensors keep ``a``'s LoD."""
    if a is None or b is None:
        return b if a is None else a
    if isinstance(a, TensorArray) or isinstance(b, TensorArray):
        longest = max(len(a), len(b))
        return TensorArray(
            add_gradients(xp, a[k] if k < len(a) else None, b[k] if k < len(b) else None) for k in range(longest)
        )
    total = xp.add(a.data if isinstance(a, LoDTensor) else a, b.data if isinstance(b, LoDTensor) else b)
    return LoDTensor(total, a.lod) if isinstance(a, LoDTensor) else total


def _check_arrays(ctx: InferContext, slot: str, outputs: bool = False) -> None:
    for var in ctx.outputs(slot) if outputs else ctx.inputs(slot):
        if var.kind not in _ARRAYS:
            ctx.fail(f"{slot} {var.name!r} must be a lod_tensor_array, not {var.kind.text}")


def _check_index(ctx: InferContext) -> None:
    i = check_dtype(ctx, "I", frozenset({"int32", "int64"}))
    if numel(i.shape) not in (1, -1):
        ctx.fail(f"I {i.name!r} must hold one element, got shape {list(i.shape)}")


def _output_like(ctx: InferContext, var: Variable | Tensor, index: int = 0) -> None:
    """``Out`` (its ``index``-th variable) of ``var``'s shape, dtype and LoD level, when those are known."""
    if var.shape is not None and var.dtype is not None:
        ctx.set_output("Out", var.shape, var.dtype, lod_level=var.lod_level, index=index)


def _check_step_scopes(ctx: InferContext, slot: str) -> None:
    for var in ctx.outputs(slot):
        if var.kind is not VarKind.STEP_SCOPES:
            ctx.fail(f"{slot} {var.name!r} must be a step_scopes variable, not {var.kind.text}")


# -- increment ------------------------------------------------------------------------------------------------


def _infer_increment(ctx: InferContext) -> None:
    x = check_dtype(ctx, "X", NUMBERS)
    if numel(x.shape) not in (1, -1):
        ctx.fail(f"X {x.name!r} must hold one element, got shape {list(x.shape)}")
    ctx.set_output("Out", x.shape, x.dtype)


def _increment(ctx: KernelContext, x: Any) -> Any:
    return x + ctx.xp.asarray(ctx.attrs["step"]).astype(x.dtype)


INCREMENT = OpSchema(
    "increment",
    inputs=(Slot("X", no_grad=True),),
    outputs=(Slot("Out"),),
    attrs=(AttrDef("step", AttrType.FLOAT, 1.0),),
    infer=_infer_increment,
    kernel=_increment,
    doc="Out = X + step (X of one element, e.g. a loop counter; its dtype kept).",
)

# -- tensor arrays ----------------------------------------------------------------------------------------------


def _infer_write(ctx: InferContext) -> None:
    _check_index(ctx)
    _check_arrays(ctx, "Out", outputs=True)
    x = ctx.tensor("X")
    for out in ctx.outputs("Out"):
        if out.dtype is None or out.shape is None:
            _output_like(ctx, x)


def _write_to_array(ctx: KernelContext, x: Any, i: Any, current: list[Any]) -> TensorArray:
    array = current[0] if current and current[0] is not None else TensorArray()
    k = index_of(ctx, i)
    if k >= len(array):
        array.extend([None] * (k + 1 - len(array)))
    array[k] = x
    return array


def _x_grad(
    g: GradContext, op_type: str, inputs: dict[str, list[str]], slot: str = "Out", **attrs: Any
) -> list[OpSpec]:
    """The one gradient op of an op whose input ``X`` alone is differentiable, writing ``X@GRAD`` into its
    ``slot``; none when X needs no gradient."""
    dx = g.input_grad("X")[0]
    return [] if dx == EMPTY_VAR else [OpSpec(op_type, inputs, {slot: [dx]}, attrs)]


def _grad_write(g: GradContext) -> list[OpSpec]:
    return _x_grad(g, "read_from_array", {"X": g.output_grad("Out"), "I": g.input("I"), "X_W": g.input("X")})


WRITE_TO_ARRAY = OpSchema(
    "write_to_array",
    inputs=(Slot("X", lod=True), Slot("I", no_grad=True)),
    outputs=(Slot("Out", lod=True),),
    infer=_infer_write,
    grad=_grad_write,
    kernel=_write_to_array,
    updates=("Out",),
    doc="Out[I] = X: the tensor array Out, updated in place, grows as needed.",
)


def _infer_read(ctx: InferContext) -> None:
    _check_index(ctx)
    _check_arrays(ctx, "X")
    array = ctx.input("X")
    _output_like(ctx, ctx.inputs("X_W")[0] if ctx.has_input("X_W") else array)


def _read_from_array(ctx: KernelContext, array: Any, i: Any, like: Any) -> Any:
    k = index_of(ctx, i)
    value = array[k] if array is not None and k < len(array) else None
    if value is None:
        if like is None:
            size = 0 if array is None else len(array)
            raise kernel_error(ctx, f"read_from_array: position {k} of a tensor array of {size} was never written")
        return zeros_like_value(ctx.xp, like)
    return value


def _grad_read(g: GradContext) -> list[OpSpec]:
    return _x_grad(g, "write_to_array", {"X": g.output_grad("Out"), "I": g.input("I")})


READ_FROM_ARRAY = OpSchema(
    "read_from_array",
    inputs=(Slot("X", lod=True), Slot("I", no_grad=True), Slot("X_W", optional=True, lod=True, no_grad=True)),
    outputs=(Slot("Out", lod=True),),
    infer=_infer_read,
    grad=_grad_read,
    kernel=_read_from_array,
    doc="Out = X[I] (X a tensor array); zeros shaped as X_W for a position never written when X_W is bound.",
)


def _infer_length(ctx: InferContext) -> None:
    _check_arrays(ctx, "X")
    ctx.set_output("Out", (1,), "int64")


def _array_length(ctx: KernelContext, array: Any) -> Any:
    return ctx.xp.asarray([0 if array is None else len(array)], dtype="int64")


LOD_ARRAY_LENGTH = OpSchema(
    "lod_array_length",
    inputs=(Slot("X", lod=True, no_grad=True),),
    outputs=(Slot("Out"),),
    infer=_infer_length,
    kernel=_array_length,
    doc="Out (int64[1]) = the number of tensors in the tensor array X.",
)

_TO_TENSOR_ATTRS = (AttrDef("axis", AttrType.INT, 0), AttrDef("use_stack", AttrType.BOOLEAN, False))


def _infer_to_tensor(ctx: InferContext) -> None:
    _check_arrays(ctx, "X")
    x, axis, stack = ctx.input("X"), ctx.attr("axis"), ctx.attr("use_stack")
    if x.shape is None or x.dtype is None:
        ctx.fail(f"X {x.name!r}: the shape and dtype of its tensors are unknown")
    rank = len(x.shape) + (1 if stack else 0)
    axis = normalize_axis(ctx, axis, rank)
    shape = list(x.shape)
    if stack:
        shape.insert(axis, -1)
    else:
        shape[axis] = -1
    ctx.set_output("Out", shape, x.dtype)
    ctx.set_output("OutIndex", (-1,), "int32")


def _tensors(ctx: KernelContext, array: Any) -> tuple[list[Any], int, bool]:
    """The tensors of ``array`` (every position written), the axis they join along (non-negative) and whether
    they are stacked (``use_stack``)."""
    if not array or any(v is None for v in array):
        raise kernel_error(ctx, "tensor_array_to_tensor: the array is empty or has positions never written")
    tensors = [v.data if isinstance(v, LoDTensor) else v for v in array]
    stack = bool(ctx.attrs["use_stack"])
    return tensors, ctx.attrs["axis"] % (tensors[0].ndim + (1 if stack else 0)), stack


def _tensor_array_to_tensor(ctx: KernelContext, array: Any) -> tuple[Any, Any]:
    xp, (tensors, axis, stack) = ctx.xp, _tensors(ctx, array)
    out = xp.stack(tensors, axis=axis) if stack else xp.concatenate(tensors, axis=axis)
    sizes = [1 if stack else t.shape[axis] for t in tensors]
    return out, xp.asarray(sizes, dtype="int32")


def _grad_to_tensor(g: GradContext) -> list[OpSpec]:
    inputs = {"X": g.input("X"), "Out": g.output("Out"), "Out@GRAD": g.output_grad("Out")}
    return _x_grad(g, "tensor_array_to_tensor_grad", inputs, "X@GRAD", **g.attrs)


def _tensor_array_to_tensor_grad(ctx: KernelContext, array: Any, out: Any, dout: Any) -> TensorArray:
    xp, (tensors, axis, stack) = ctx.xp, _tensors(ctx, array)
    if stack:
        return TensorArray(xp.take(dout, k, axis=axis) for k in range(len(tensors)))
    bounds, at = [], 0
    for t in tensors[:-1]:
        at += t.shape[axis]
        bounds.append(at)
    return TensorArray(xp.split(dout, bounds, axis=axis))


def _infer_to_tensor_grad(ctx: InferContext) -> None:
    _check_arrays(ctx, "X@GRAD", outputs=True)


TENSOR_ARRAY_TO_TENSOR = OpSchema(
    "tensor_array_to_tensor",
    inputs=(Slot("X", lod=True),),
    outputs=(Slot("Out"), Slot("OutIndex", optional=True)),
    attrs=_TO_TENSOR_ATTRS,
    infer=_infer_to_tensor,
    grad=_grad_to_tensor,
    kernel=_tensor_array_to_tensor,
    doc="Out = the tensors of X concatenated along axis (stacked with use_stack); OutIndex: their sizes there.",
)

TENSOR_ARRAY_TO_TENSOR_GRAD = OpSchema(
    "tensor_array_to_tensor_grad",
    inputs=(Slot("X", lod=True), Slot("Out", optional=True), Slot("Out@GRAD")),
    outputs=(Slot("X@GRAD", lod=True),),
    attrs=_TO_TENSOR_ATTRS,
    infer=_infer_to_tensor_grad,
    kernel=_tensor_array_to_tensor_grad,
    doc="X@GRAD = Out@GRAD split back into the tensors of X.",
)

# -- select_input / select_output -------------------------------------------------------------------------------


def _branch(ctx: KernelContext, mask: Any, count: int) -> int:
    k = index_of(ctx, mask)
    if k >= count:
        raise kernel_error(ctx, f"Mask {k} out of range for {count} branch(es)")
    return k


def _infer_select_input(ctx: InferContext) -> None:
    check_dtype(ctx, "Mask", frozenset({"int32", "int64"}))
    first = ctx.inputs("X")[0]
    _output_like(ctx, first)
    if first.kind is not VarKind.LOD_TENSOR:
        for out in ctx.outputs("Out"):
            out.kind = first.kind


def _select_input(ctx: KernelContext, xs: list[Any], mask: Any) -> Any:
    value = xs[_branch(ctx, mask, len(xs))]
    if value is None:
        raise kernel_error(ctx, "select_input: the selected branch's value was never computed")
    return value


def _grad_select_input(g: GradContext) -> list[OpSpec]:
    dxs = g.input_grad("X")
    if all(n == EMPTY_VAR for n in dxs):
        return []
    return [OpSpec("select_output", {"X": g.output_grad("Out"), "Mask": g.input("Mask")}, {"Out": dxs})]


SELECT_INPUT = OpSchema(
    "select_input",
    inputs=(Slot("X", duplicable=True, optional=True, lod=True), Slot("Mask", no_grad=True)),
    outputs=(Slot("Out", lod=True),),
    infer=_infer_select_input,
    grad=_grad_select_input,
    kernel=_select_input,
    doc="Out = X[Mask]: the result of the branch that ran (Mask an integer of one element).",
)


def _infer_select_output(ctx: InferContext) -> None:
    check_dtype(ctx, "Mask", frozenset({"int32", "int64"}))
    x = ctx.input("X")
    for k in range(len(ctx.outputs("Out"))):
        _output_like(ctx, x, k)


def _select_output(ctx: KernelContext, x: Any, mask: Any, current: list[Any]) -> list[Any]:
    outs = list(current)
    outs[_branch(ctx, mask, len(outs))] = x
    return outs


def _grad_select_output(g: GradContext) -> list[OpSpec]:
    return _x_grad(g, "select_input", {"X": g.output_grad("Out"), "Mask": g.input("Mask")})


SELECT_OUTPUT = OpSchema(
    "select_output",
    inputs=(Slot("X", lod=True), Slot("Mask", no_grad=True)),
    outputs=(Slot("Out", duplicable=True, lod=True),),
    infer=_infer_select_output,
    grad=_grad_select_output,
    kernel=_select_output,
    updates=("Out",),
    doc="Out[Mask] = X; the other outputs keep their values (Mask an integer of one element).",
)

# -- while / conditional_block ----------------------------------------------------------------------------------


def _infer_while(ctx: InferContext) -> None:
    cond = ctx.tensor("Condition")
    if cond.dtype != "bool" or numel(cond.shape) not in (1, -1):
        ctx.fail(f"Condition {cond.name!r} must be a bool tensor of one element, got {cond.dtype}{list(cond.shape)}")
    _check_step_scopes(ctx, "StepScopes")


WHILE = OpSchema(
    "while",
    inputs=(
        Slot("X", duplicable=True, optional=True, lod=True),
        Slot("Condition", duplicable=True, no_grad=True),
    ),
    outputs=(Slot("Out", duplicable=True, optional=True, lod=True), Slot("StepScopes", optional=True)),
    attrs=(AttrDef("sub_block", AttrType.BLOCK), AttrDef("is_test", AttrType.BOOLEAN, False)),
    infer=_infer_while,
    lowering=Lowering.CONTROL,
    updates=("Out",),
    doc="While Condition holds, run sub_block; X: the outer variables it reads, Out: those it writes.",
)

WHILE_GRAD = OpSchema(
    "while_grad",
    inputs=(
        Slot("X", duplicable=True, optional=True, lod=True),
        Slot("Out", duplicable=True, optional=True, lod=True),
        Slot("Out@GRAD", duplicable=True, optional=True, lod=True),
        Slot("StepScopes"),
    ),
    outputs=(Slot("X@GRAD", duplicable=True, optional=True, lod=True),),
    attrs=(
        AttrDef("sub_block", AttrType.BLOCK),
        AttrDef("original_output_grad", AttrType.STRINGS, ()),
        AttrDef("is_test", AttrType.BOOLEAN, False),
    ),
    lowering=Lowering.CONTROL,
    doc="The gradient of a while: sub_block run on each kept iteration, last to first.",
)


def _infer_conditional(ctx: InferContext) -> None:
    if ctx.attr("is_scalar_condition"):
        for cond in ctx.tensors("Cond"):
            if numel(cond.shape) not in (1, -1):
                ctx.fail(f"Cond {cond.name!r} must hold one element with is_scalar_condition, got {list(cond.shape)}")
    _check_step_scopes(ctx, "Scope")


_CONDITIONAL_ATTRS = (AttrDef("sub_block", AttrType.BLOCK), AttrDef("is_scalar_condition", AttrType.BOOLEAN, False))

CONDITIONAL_BLOCK = OpSchema(
    "conditional_block",
    inputs=(
        Slot("Cond", duplicable=True, no_grad=True),
        Slot("Input", duplicable=True, optional=True, lod=True),
    ),
    outputs=(Slot("Out", duplicable=True, optional=True, lod=True), Slot("Scope", optional=True)),
    attrs=_CONDITIONAL_ATTRS,
    infer=_infer_conditional,
    lowering=Lowering.CONTROL,
    updates=("Out",),
    doc="Run sub_block when Cond holds; Input: the outer variables it reads, Out: those it writes.",
)

CONDITIONAL_BLOCK_GRAD = OpSchema(
    "conditional_block_grad",
    inputs=(
        Slot("Cond", duplicable=True, no_grad=True),
        Slot("Input", duplicable=True, optional=True, lod=True),
        Slot("Out", duplicable=True, optional=True, lod=True),
        Slot("Out@GRAD", duplicable=True, optional=True, lod=True),
        Slot("Scope", optional=True),
    ),
    outputs=(Slot("Input@GRAD", duplicable=True, optional=True, lod=True),),
    attrs=_CONDITIONAL_ATTRS,
    lowering=Lowering.CONTROL,
    doc="The gradient of a conditional_block: its gradient block, run when the forward block ran.",
)

SCHEMAS = (
    INCREMENT,
    WRITE_TO_ARRAY,
    READ_FROM_ARRAY,
    LOD_ARRAY_LENGTH,
    TENSOR_ARRAY_TO_TENSOR,
    TENSOR_ARRAY_TO_TENSOR_GRAD,
    SELECT_INPUT,
    SELECT_OUTPUT,
    WHILE,
    WHILE_GRAD,
    CONDITIONAL_BLOCK,
    CONDITIONAL_BLOCK_GRAD,
)
