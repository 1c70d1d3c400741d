"""Helpers shared by the op modules: errors, dtype codes, shape inference, broadcasting, families.

Three families keep most ops to a few lines (DESIGN.md, "Ops"):

- :func:`unary_family`: ``Out = f(X)`` of the same shape and dtype, with a
  gradient op ``T_grad`` reading ``X`` or ``Out`` and ``Out@GRAD``;
- :func:`binary_family`: ``Out = f(X, Y)`` with Paddle's ``axis`` broadcasting,
  with a gradient op reducing each input's gradient back to its shape;
- :func:`reduce_family`: ``reduce_*`` over ``dim`` / ``keep_dim`` / ``reduce_all``.

Broadcasting follows Paddle's elementwise ops (:func:`elementwise_views`): the
operand of lower rank has its dims placed from dim ``axis`` of the other's
(``axis=-1``: aligned to the right, as numpy does; its trailing 1s are dropped
when they would run past the other's rank, as Fluid did), then both broadcast
numpy's way, either side. :func:`unbroadcast` sums a gradient back to an
input's shape.
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import numpy as np

from blockir.errors import BlockirError
from blockir.ir.attrs import AttrType
from blockir.ir.dtypes import PROTO_TO_DTYPE
from blockir.ir.schema import (
    EMPTY_VAR,
    AttrDef,
    GradContext,
    InferContext,
    KernelContext,
    OpSchema,
    OpSpec,
    Slot,
    Tensor,
)

FLOATS = frozenset({"float16", "float32", "float64"})
NUMBERS = FLOATS | {"int32", "int64"}
ALL_DTYPES = NUMBERS | {"bool"}

Kernel = Callable[..., Any]

# -- errors and values ------------------------------------------------------------------------


def kernel_error(ctx: KernelContext, message: str) -> BlockirError:
    """A runtime error of a kernel, naming the op in its text form."""
    return BlockirError(f"{message}\n  in: {ctx.op_text}" if ctx.op_text else message)


def to_host(a: Any) -> np.ndarray:
    """``a`` as a host numpy array (a cupy array is copied back with ``.get()``; numpy is not copied)."""
    return a.get() if hasattr(a, "get") else np.asarray(a)


def host_copy(a: Any) -> np.ndarray:
    """A new host numpy array holding ``a`` (a cupy array is copied back with ``.get()``)."""
    return a.get() if hasattr(a, "get") else np.array(a, copy=True)


def min_max(xp: Any, a: Any) -> tuple[int, int]:
    """The least and the greatest element of the non-empty integer array ``a`` (of array module ``xp``), read
    back to the host in one transfer (each read of a device value waits for the device)."""
    if xp is np:
        return int(a.min()), int(a.max())
    low, high = to_host(xp.stack((a.min(), a.max()))).tolist()
    return int(low), int(high)


def in_range(a: Any, bound: int) -> bool:
    """Whether every element of the non-empty integer array ``a`` lies in [0, ``bound``): one reduction (one read
    back from a device) over ``a`` seen as unsigned integers, where a negative element is huge."""
    return int(a.view(_unsigned(a.dtype)).max()) < bound


@functools.cache
def _unsigned(dtype: np.dtype) -> np.dtype:
    return np.dtype(f"u{dtype.itemsize}")


def fill(xp: Any, value: Any, shape: Sequence[int], dtype: Any) -> Any:
    """A new writable array of ``shape`` holding ``value`` broadcast (``value`` may be an array)."""
    out = xp.empty(tuple(shape), dtype=dtype)
    out[...] = value
    return out


# -- dtypes --------------------------------------------------------------------------------------


def dtype_attr(ctx: InferContext, name: str) -> str:
    """The numpy dtype name of the proto ``VarType.Type`` code in attribute ``name``; fail if unknown."""
    code = ctx.attr(name)
    dtype = PROTO_TO_DTYPE.get(code)
    if dtype is None:
        ctx.fail(f"attribute {name}={code} is not a dtype code (BOOL=0, INT32=2, INT64=3, FP32=5, FP64=6)")
    return dtype


def np_dtype(code: int) -> np.dtype:
    """The numpy dtype of a proto ``VarType.Type`` code (in kernels: inference has checked the code)."""
    return np.dtype(PROTO_TO_DTYPE[code])


# -- inference helpers -------------------------------------------------------------------------------


def fmt(var: Any) -> str:
    """``'x' (float32 [-1, 4])``: a variable for error messages."""
    return f"{var.name!r} ({var.dtype} {list(var.shape or ())})"


def compatible(a: int, b: int) -> bool:
    """Whether two dims can be equal (-1 is unknown)."""
    return a < 0 or b < 0 or a == b


def numel(shape: Sequence[int]) -> int:
    """The number of elements of ``shape``, -1 when a dim is unknown."""
    n = 1
    for d in shape:
        if d < 0:
            return -1
        n *= d
    return n


def check_dtype(ctx: InferContext, slot: str, allowed: frozenset[str]) -> Tensor:
    """The (first) variable of input ``slot``; fail when there is none or its dtype is not in ``allowed``."""
    var = ctx.tensor(slot)
    if var.dtype not in allowed:
        ctx.fail(f"{slot} {fmt(var)} has dtype {var.dtype}; expected one of {', '.join(sorted(allowed))}")
    return var


def one_value(ctx: InferContext, slot: str, dtypes: frozenset[str] = NUMBERS) -> Tensor:
    """The variable of input ``slot``, which must hold one value of ``dtypes`` (a scalar given as a tensor)."""
    var = check_dtype(ctx, slot, dtypes)
    if numel(var.shape) not in (-1, 1):
        ctx.fail(f"{slot} {fmt(var)} must hold one value")
    return var


def same_dtype(ctx: InferContext, first: Any, second: Any) -> None:
    """Fail unless two variables have the same dtype (no op converts implicitly)."""
    if first.dtype != second.dtype:
        ctx.fail(f"{fmt(first)} and {fmt(second)} have different dtypes; cast one of them first")


def merge_shapes(
    ctx: InferContext,
    slot: str,
    dtypes: frozenset[str],
    axis: int | None = None,
) -> tuple[Any, list[int]]:
    """The first variable of duplicable input ``slot`` and the shape its variables share (known dims
    win over -1); fail unless all have the first one's dtype and rank, and compatible dims except on ``axis``."""
    first = check_dtype(ctx, slot, dtypes)
    xs = ctx.tensors(slot)
    shape = list(first.shape)
    for var in xs[1:]:
        same_dtype(ctx, first, var)
        if len(var.shape) != len(shape) or not all(
            compatible(a, b) for i, (a, b) in enumerate(zip(shape, var.shape)) if i != axis
        ):
            ctx.fail(
                f"{slot} {fmt(var)} does not match {fmt(first)}" + (f" outside axis {axis}" if axis is not None else "")
            )
        shape = [b if a < 0 else a for a, b in zip(shape, var.shape)]
    return first, shape


def normalize_axis(ctx: InferContext, axis: int, rank: int, what: str = "axis") -> int:
    """``axis`` in ``[0, rank)``; negative counts from the end; fail when out of range."""
    if not -rank <= axis < rank:
        ctx.fail(f"{what} {axis} is out of range for rank {rank}")
    return axis % rank


def infer_like(ctx: InferContext, src: str, dst: str, index: int = 0) -> None:
    """Give output ``dst`` (entry ``index``) the shape, dtype and LoD level of input ``src`` (gradients)."""
    names = ctx.op.inputs.get(src, ())
    if index < len(names):
        var = ctx.block.find_var_recursive(names[index])
        if var.shape is not None and var.dtype is not None:  # a tensor
            ctx.set_output(dst, var.shape, var.dtype, lod_level=var.lod_level, index=index)


def infer_grads(*slots: str) -> Callable[[InferContext], None]:
    """An ``infer`` giving each ``S@GRAD`` output (every entry) the shape and dtype of input ``S``."""

    def infer(ctx: InferContext) -> None:
        for slot in slots:
            for i in range(len(ctx.op.outputs.get(slot + "@GRAD", []))):
                infer_like(ctx, slot, slot + "@GRAD", i)

    return infer


# -- gradient makers --------------------------------------------------------------------------------


def forward_attrs(g: GradContext, schema: OpSchema) -> dict[str, Any]:
    """The forward op's values of ``schema``'s attributes, for its gradient op."""
    return {a.name: g.op.attr(a.name) for a in schema.attrs}


def grad_outputs(g: GradContext, *slots: str) -> dict[str, list[str]]:
    """``{"X@GRAD": [...]}`` for the input slots among ``slots`` that need a gradient (others left out)."""
    out = {}
    for slot in slots:
        names = g.input_grad(slot)
        if any(n != EMPTY_VAR for n in names):
            out[slot + "@GRAD"] = names
    return out


def grad_op(g: GradContext, schema: OpSchema, inputs: Sequence[str], of: Sequence[str]) -> list[OpSpec]:
    """One gradient op ``schema``: reads forward slots ``inputs`` (``"Out@GRAD"`` names an output's
    gradient), writes the gradients of forward inputs ``of``; none when no gradient is needed."""
    slots = {}
    for slot in inputs:
        if slot.endswith("@GRAD"):
            slots[slot] = g.output_grad(slot[: -len("@GRAD")])
        else:
            slots[slot] = g.input(slot) if g.op.inputs.get(slot) else g.output(slot)
    return grad_spec(g, schema, slots, of)


def grad_spec(g: GradContext, schema: OpSchema, inputs: Mapping[str, list[str]], of: Sequence[str]) -> list[OpSpec]:
    """One gradient op ``schema`` reading the variables ``inputs`` names per slot (empty slots, optional ones the
    forward op left unbound, are left out) and writing the gradients of forward inputs ``of``; none when no
    gradient is needed."""
    outputs = grad_outputs(g, *of)
    if not outputs:
        return []
    slots = {slot: names for slot, names in inputs.items() if names}
    return [OpSpec(schema.type, slots, outputs, forward_attrs(g, schema))]


# -- broadcasting ------------------------------------------------------------------------------------


def trim_ones(shape: Sequence[int]) -> tuple[int, ...]:
    """``shape`` without its trailing 1s (Fluid ignored them when matching Y against X)."""
    end = len(shape)
    while end and shape[end - 1] == 1:
        end -= 1
    return tuple(shape[:end])


def elementwise_views(
    x_shape: Sequence[int], y_shape: Sequence[int], axis: int
) -> tuple[tuple[int, ...], tuple[int, ...]]:
    """X's and Y's shapes as numpy broadcasts them under Paddle's ``axis`` (numpy's leading 1s left implied).

    Equal shapes are themselves whatever ``axis``; other operands of one rank take ``axis`` -1 or 0 and
    broadcast as they are. Otherwise the dims of the operand of lower rank are placed from dim ``axis`` of
    the other's (-1: aligned to the right) and followed by 1s; when they would run past the other's rank,
    their trailing 1s are dropped first (Fluid: Y [3, 1] at axis=1 of X [2, 3]). A ValueError says why
    ``axis`` places nothing (Paddle's kernels take -1 or 0 <= axis < the larger rank)."""
    xs, ys = tuple(x_shape), tuple(y_shape)
    if xs == ys:
        return xs, ys
    if len(xs) == len(ys):
        if axis not in (-1, 0):
            raise ValueError(f"axis={axis} must be -1 or 0 for operands of the same rank")
        return xs, ys
    big, small = (xs, ys) if len(xs) > len(ys) else (ys, xs)
    if not -1 <= axis < len(big):
        raise ValueError(f"axis={axis} must be -1 or in [0, {len(big)})")
    start = len(big) - len(small) if axis == -1 else axis
    core = small if start + len(small) <= len(big) else trim_ones(small)
    if start + len(core) > len(big):
        raise ValueError(f"axis={axis} places the dims {list(small)} from dim {start} of {list(big)}, past its end")
    view = (*core, *(1,) * (len(big) - start - len(core)))
    return (xs, view) if len(xs) > len(ys) else (view, ys)


def broadcast_dims(a: Sequence[int], b: Sequence[int]) -> tuple[int, ...] | None:
    """numpy broadcasting of two shapes with -1 for unknown dims; None when they cannot broadcast."""
    out = []
    for i in range(1, max(len(a), len(b)) + 1):
        p = a[-i] if i <= len(a) else 1
        q = b[-i] if i <= len(b) else 1
        if p == 1 or q == 1:
            out.append(q if p == 1 else p)
        elif p < 0 or q < 0:
            out.append(max(p, q))
        elif p != q:
            return None
        else:
            out.append(p)
    return tuple(reversed(out))


def broadcast_shapes(ctx: InferContext, x: Any, y: Any, axis: int) -> tuple[int, ...]:
    """The output shape of an elementwise op on variables ``x`` and ``y`` (:func:`elementwise_views`)."""
    try:
        xv, yv = elementwise_views(x.shape, y.shape, axis)
    except ValueError as e:
        ctx.fail(f"X {fmt(x)} and Y {fmt(y)}: {e}")
    out = broadcast_dims(xv, yv)
    if out is None:
        placed = "" if len(xv) == len(yv) else f" (axis={axis} aligns them as {list(xv)} and {list(yv)})"
        ctx.fail(f"X {fmt(x)} and Y {fmt(y)} do not broadcast{placed}")
    return out


def unbroadcast(xp: Any, grad: Any, shape: Sequence[int]) -> Any:
    """``grad`` (of a broadcast result) summed over the broadcast dims back to ``shape``."""
    shape = tuple(shape)
    if grad.shape == shape:
        return grad
    lead = grad.ndim - len(shape)
    if grad.shape[lead:] == shape:  # the common case: only leading dims were added (a bias)
        return grad.sum(axis=0) if lead == 1 else grad.sum(axis=tuple(range(lead)))
    axes = (*range(lead), *(lead + i for i, d in enumerate(shape) if d == 1 and grad.shape[lead + i] != 1))
    return grad.sum(axis=axes).reshape(shape) if axes else grad.reshape(shape)


# -- families ---------------------------------------------------------------------------------------------


def unary_family(
    op_type: str,
    kernel: Kernel,
    grad_kernel: Kernel | None = None,
    grad_input: str = "Out",
    dtypes: frozenset[str] = FLOATS,
    attrs: tuple[AttrDef, ...] = (),
    check: Callable[[InferContext, Any], None] | None = None,
    grad: Callable[[GradContext], list[OpSpec]] | None = None,
    doc: str = "",
) -> tuple[OpSchema, ...]:
    """``Out = kernel(ctx, X)``, same shape and dtype as X, sharing X's LoD.

    ``check(ctx, x)`` validates attributes against X at inference. With
    ``grad_kernel`` a gradient op ``<op_type>_grad`` is made too, reading
    ``grad_input`` (``"X"`` or ``"Out"``) and ``Out@GRAD`` and writing ``X@GRAD``;
    ``grad`` is a gradient maker reusing other ops instead.
    """

    def infer(ctx: InferContext) -> None:
        x = check_dtype(ctx, "X", dtypes)
        if check is not None:
            check(ctx, x)
        ctx.set_output("Out", x.shape, x.dtype, lod_level=x.lod_level)

    def forward(maker: Callable[[GradContext], list[OpSpec]] | None) -> OpSchema:
        return OpSchema(
            op_type,
            inputs=(Slot("X"),),
            outputs=(Slot("Out"),),
            attrs=attrs,
            infer=infer,
            grad=maker,
            kernel=kernel,
            share_lod=(("X", "Out"),),
            doc=doc,
        )

    if grad_kernel is None:
        return (forward(grad),)
    backward = OpSchema(
        f"{op_type}_grad",
        inputs=(Slot(grad_input), Slot("Out@GRAD")),
        outputs=(Slot("X@GRAD"),),
        attrs=attrs,
        infer=lambda ctx: infer_like(ctx, grad_input, "X@GRAD"),
        kernel=grad_kernel,
        share_lod=((grad_input, "X@GRAD"),),
        doc=f"Gradient of {op_type}.",
    )
    return forward(lambda g: grad_op(g, backward, (grad_input, "Out@GRAD"), ("X",))), backward


_AXIS = (AttrDef("axis", AttrType.INT, -1),)


class Broadcast:
    """An elementwise kernel's view of its operands under the op's ``axis`` (:func:`elementwise_views`):
    X and Y shaped to broadcast, and the reductions of a gradient of the output back to each."""

    __slots__ = ("xp", "x_shape", "y_shape", "x_view", "y_view")

    def __init__(self, ctx: KernelContext, x: Any, y: Any) -> None:
        self.xp, self.x_shape, self.y_shape = ctx.xp, tuple(x.shape), tuple(y.shape)
        try:
            self.x_view, self.y_view = elementwise_views(self.x_shape, self.y_shape, ctx.attrs["axis"])
        except ValueError as e:
            raise kernel_error(ctx, f"X {list(x.shape)} and Y {list(y.shape)}: {e}") from None
        if self.x_view != self.y_view and broadcast_dims(self.x_view, self.y_view) is None:
            raise kernel_error(
                ctx, f"X {list(x.shape)} and Y {list(y.shape)} do not broadcast (axis={ctx.attrs['axis']})"
            )

    def x(self, x: Any) -> Any:
        """X shaped to broadcast against Y."""
        return x if self.x_view == self.x_shape else x.reshape(self.x_view)

    def y(self, y: Any) -> Any:
        """Y shaped to broadcast against X."""
        return y if self.y_view == self.y_shape else y.reshape(self.y_view)

    def dx(self, grad: Any) -> Any:
        """A gradient of the output's shape summed back to X's shape."""
        out = unbroadcast(self.xp, grad, self.x_view)
        return out if self.x_view == self.x_shape else out.reshape(self.x_shape)

    def dy(self, grad: Any) -> Any:
        """A gradient of the output's shape summed back to Y's shape."""
        out = unbroadcast(self.xp, grad, self.y_view)
        return out if self.y_view == self.y_shape else out.reshape(self.y_shape)


def binary_family(
    op_type: str,
    kernel: Kernel,
    grad_kernel: Kernel | None,
    grad_inputs: tuple[str, ...],
    dtypes: frozenset[str] = NUMBERS,
    attrs: tuple[AttrDef, ...] = _AXIS,
    doc: str = "",
) -> tuple[OpSchema, ...]:
    """``Out = kernel(ctx, X, Y)`` with Paddle's ``axis`` broadcasting, and its gradient op (none without
    ``grad_kernel``).

    ``attrs`` (the op's and its gradient op's) hold ``axis``. The gradient op reads ``grad_inputs``
    (forward slots, e.g. ``("X", "Y", "Out@GRAD")``) and writes ``X@GRAD`` and ``Y@GRAD``; its kernel
    returns ``(dX, dY)``, either None when ``ctx.wants`` says nobody reads it.
    """

    def infer(ctx: InferContext) -> None:
        x, y = check_dtype(ctx, "X", dtypes), check_dtype(ctx, "Y", dtypes)
        same_dtype(ctx, x, y)
        ctx.set_output("Out", broadcast_shapes(ctx, x, y, ctx.attr("axis")), x.dtype, lod_level=x.lod_level)

    def forward(grad: Callable[[GradContext], list[OpSpec]] | None) -> OpSchema:
        return OpSchema(
            op_type,
            inputs=(Slot("X"), Slot("Y")),
            outputs=(Slot("Out"),),
            attrs=attrs,
            infer=infer,
            grad=grad,
            kernel=kernel,
            share_lod=(("X", "Out"),),
            doc=doc,
        )

    if grad_kernel is None:
        return (forward(None),)
    backward = OpSchema(
        f"{op_type}_grad",
        inputs=tuple(Slot(s) for s in grad_inputs),
        outputs=(Slot("X@GRAD"), Slot("Y@GRAD")),
        attrs=attrs,
        infer=infer_grads("X", "Y"),
        kernel=grad_kernel,
        share_lod=(("X", "X@GRAD"),),
        doc=f"Gradient of {op_type}.",
    )
    return forward(lambda g: grad_op(g, backward, grad_inputs, ("X", "Y"))), backward


REDUCE_ATTRS = (
    AttrDef("dim", AttrType.INTS, [0]),
    AttrDef("keep_dim", AttrType.BOOLEAN, False),
    AttrDef("reduce_all", AttrType.BOOLEAN, False),
    AttrDef("in_dtype", AttrType.INT, -1),  # X's dtype code, or -1
    AttrDef("out_dtype", AttrType.INT, -1),  # -1: X's dtype; else X is converted to it first
    AttrDef("use_mkldnn", AttrType.BOOLEAN, False),
)


def reduce_axes(dims: Sequence[int], rank: int, reduce_all: bool) -> tuple[int, ...]:
    """The sorted distinct axes a reduce op reduces (negative dims count from the end)."""
    if reduce_all or rank == 0:
        return tuple(range(rank))
    return tuple(sorted({d % rank for d in dims}))


def reduced_shape(shape: Sequence[int], axes: Sequence[int], keep_dim: bool) -> tuple[int, ...]:
    """The shape after reducing ``axes``; Fluid gives ``[1]`` when every dim goes."""
    if keep_dim:
        return tuple(1 if i in axes else d for i, d in enumerate(shape))
    return tuple(d for i, d in enumerate(shape) if i not in axes) or (1,)


def reduce_family(
    op_type: str,
    kernel: Kernel,
    grad_kernel: Kernel | None,
    dtypes: frozenset[str],
    doc: str = "",
    grad_inputs: tuple[str, ...] = ("X", "Out@GRAD"),
    out_dtype: str | None = None,
) -> tuple[OpSchema, ...]:
    """``Out = kernel(ctx, X, axes)`` over the attributes ``dim``, ``keep_dim``, ``reduce_all``, X first converted
    to ``out_dtype`` (the attribute, a dtype code; -1: X's dtype). Out's dtype is X's, or ``out_dtype`` (the
    argument) when given (``reduce_all``'s bool). With ``grad_kernel`` a gradient op reading the forward slots
    ``grad_inputs`` (e.g. ``("X", "Out", "Out@GRAD")``): ``grad_kernel(ctx, *their values, axes)``, its dX
    converted to X's dtype."""

    def axes_of(ctx: KernelContext, x: Any) -> tuple[int, ...]:
        return reduce_axes(ctx.attrs["dim"], x.ndim, ctx.attrs["reduce_all"])

    def converted(ctx: KernelContext, x: Any) -> Any:
        code = ctx.attrs["out_dtype"]
        return x if code == -1 else x.astype(np_dtype(code), copy=False)

    def infer(ctx: InferContext) -> None:
        x = check_dtype(ctx, "X", dtypes)
        dims = ctx.attr("dim")
        if not dims and not ctx.attr("reduce_all"):
            ctx.fail("dim is empty; list the dims to reduce or set reduce_all")
        for d in dims:
            normalize_axis(ctx, d, max(len(x.shape), 1), "dim")
        if ctx.attr("in_dtype") != -1 and dtype_attr(ctx, "in_dtype") != x.dtype:
            ctx.fail(f"in_dtype={ctx.attr('in_dtype')} is not the dtype of X {fmt(x)} (nor -1)")
        dtype = x.dtype if ctx.attr("out_dtype") == -1 else dtype_attr(ctx, "out_dtype")
        if dtype not in dtypes:
            ctx.fail(f"out_dtype={ctx.attr('out_dtype')} ({dtype}) is not one of {', '.join(sorted(dtypes))}")
        axes = reduce_axes(dims, len(x.shape), ctx.attr("reduce_all"))
        ctx.set_output("Out", reduced_shape(x.shape, axes, ctx.attr("keep_dim")), out_dtype or dtype)

    def forward(grad: Callable[[GradContext], list[OpSpec]] | None) -> OpSchema:
        return OpSchema(
            op_type,
            inputs=(Slot("X"),),
            outputs=(Slot("Out"),),
            attrs=REDUCE_ATTRS,
            infer=infer,
            grad=grad,
            kernel=lambda ctx, x: kernel(ctx, converted(ctx, x), axes_of(ctx, x)),
            doc=doc,
        )

    if grad_kernel is None:
        return (forward(None),)
    differentiate: Kernel = grad_kernel

    def backward(ctx: KernelContext, x: Any, *rest: Any) -> Any:
        return differentiate(ctx, converted(ctx, x), *rest, axes_of(ctx, x)).astype(x.dtype, copy=False)

    schema = OpSchema(
        f"{op_type}_grad",
        inputs=tuple(Slot(s) for s in grad_inputs),
        outputs=(Slot("X@GRAD"),),
        attrs=REDUCE_ATTRS,
        infer=infer_grads("X"),
        kernel=backward,
        doc=f"Gradient of {op_type}: dOut broadcast back over the reduced dims.",
    )
    return forward(lambda g: grad_op(g, schema, grad_inputs, ("X",))), schema


def expand_reduced(xp: Any, dout: Any, shape: Sequence[int], axes: Sequence[int], scale: float = 1.0) -> Any:
    """A new array of ``shape``: ``dout`` (reduced over ``axes``) times ``scale`` broadcast back."""
    kept = tuple(1 if i in axes else d for i, d in enumerate(shape))
    value = dout.reshape(kept)
    if scale != 1.0:
        value = value * scale
    return fill(xp, value, shape, dout.dtype)
