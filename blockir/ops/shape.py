"""Shape ops with Paddle's semantics: ``concat``, ``reshape2``, ``transpose2``, ``flatten_contiguous_range``,
``squeeze2``, ``unsqueeze2``, ``split``, ``slice`` and their gradient ops, and ``fill_zeros_like`` (the zeros that
stand in for the gradient of an output of ``split`` nothing differentiates).

Negative axes count from the end. Values Paddle's programs may give as tensors (``AxisTensor``, ``Shape`` /
``ShapeTensor``, ``AxesTensor`` / ``AxesTensorList``, ``SectionsTensorList``, ``StartsTensor`` / ``EndsTensor`` and
their lists) are read when the op runs, in Paddle's order of precedence; inference gives -1 for the dims they
decide, as Paddle's does. ``XShape`` (``[0, *X.shape]``, no data) is Paddle's record of X's shape for the gradient
op, which reads it instead of X. Kernels are written once against ``ctx.xp``, return views of their input where
they can, and reject at run time what inference could not see (values of tensors, unknown dims).

LoD passes from X to Out where Paddle passes it: when Out keeps X's dim 0 (``reshape2``, ``squeeze2``,
``unsqueeze2``, ``flatten_contiguous_range``), when ``concat`` (the first input's) and ``split`` work on another
axis than 0 and when ``slice`` leaves dim 0 alone; ``transpose2`` drops it, as Paddle's does. Paddle's ``concat``
also hands the first input's LoD to a join on axis 0, where it no longer fits the rows: dropped here.
"""

from __future__ import annotations

import contextlib
import itertools
from collections.abc import Callable, Sequence
from typing import Any, NoReturn

from blockir.ir.attrs import AttrType
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
    grad_name,
)
from blockir.ops.common import (
    ALL_DTYPES,
    check_dtype,
    fmt,
    grad_op,
    grad_outputs,
    infer_grads,
    kernel_error,
    merge_shapes,
    normalize_axis,
    numel,
    same_dtype,
    to_host,
)
from blockir.ops.values import LoDTensor

Fail = Callable[[str], NoReturn]
"""Reports a problem: ``InferContext.fail`` at inference, :func:`_kernel_fail` in a kernel."""

_INDEX_DTYPES = frozenset({"int32", "int64"})

# oneDNN's and the quantizer's settings: programs carry them, they change nothing here
_USE_MKLDNN = AttrDef("use_mkldnn", AttrType.BOOLEAN, False)
_MKLDNN_DATA_TYPE = AttrDef("mkldnn_data_type", AttrType.STRING, "float32")
_USE_QUANTIZER = AttrDef("use_quantizer", AttrType.BOOLEAN, False)
_ONEDNN = (_USE_MKLDNN, _MKLDNN_DATA_TYPE)


def _kernel_fail(ctx: KernelContext, op_type: str) -> Fail:
    """A :data:`Fail` raising the kernel's error, naming ``op_type`` and the op."""

    def fail(message: str) -> NoReturn:
        raise kernel_error(ctx, f"{op_type}: {message}")

    return fail


def _axis(axis: int, rank: int, what: str, fail: Fail) -> int:
    """``axis`` in ``[0, rank)``, negative counting from the end."""
    if not -rank <= axis < rank:
        fail(f"{what} {axis} is out of range for rank {rank}")
    return axis % rank


# -- integers given as tensors -----------------------------------------------------------------------


def _index_tensor(ctx: InferContext, slot: str) -> int:
    """How many integers the 1-D int32/int64 tensor of input ``slot`` holds (-1 when unknown)."""
    var = check_dtype(ctx, slot, _INDEX_DTYPES)
    if len(var.shape) != 1:
        ctx.fail(f"{slot} {fmt(var)} must be a 1-D tensor")
    return var.shape[0]


def _index_list(ctx: InferContext, slot: str) -> int:
    """How many tensors input ``slot`` binds, each one int32/int64 integer (shape [1])."""
    for var in ctx.tensors(slot):
        if var.dtype not in _INDEX_DTYPES or len(var.shape) > 1 or any(d not in (1, -1) for d in var.shape):
            ctx.fail(f"{slot} {fmt(var)} must be an int32 or int64 tensor of shape [1]")
    return len(ctx.op.inputs[slot])


def _ints(value: Any) -> list[int]:
    """The integers of an int tensor, read back to the host."""
    return [int(v) for v in to_host(value).reshape(-1).tolist()]


def _given_ints(sources: Sequence[Any], attr: Sequence[int]) -> list[int]:
    """The integers of the first source given (an int tensor, or a non-empty list of one-integer tensors), else
    ``attr``: the caller lists the sources in Paddle's order of precedence."""
    for source in sources:
        if isinstance(source, list):
            if source:
                return [v for t in source for v in _ints(t)]
        elif source is not None:
            return _ints(source)
    return list(attr)


def _check_axis_tensor(ctx: InferContext) -> None:
    """AxisTensor must be one int32/int64 integer (shape [1] or [])."""
    var = check_dtype(ctx, "AxisTensor", _INDEX_DTYPES)
    if len(var.shape) > 1 or numel(var.shape) not in (1, -1):
        ctx.fail(f"AxisTensor {fmt(var)} must hold one integer")


def _axis_of(ctx: KernelContext, axis_tensor: Any, rank: int, fail: Fail) -> int:
    """The op's axis: AxisTensor's value when given, else attribute ``axis``."""
    return _axis(_given_ints((axis_tensor,), (ctx.attrs["axis"],))[0], rank, "axis", fail)


def _data(x: Any) -> Any:
    """The array of a LoDTensor or an array (an input of a slot declared ``lod=True``)."""
    return x.data if isinstance(x, LoDTensor) else x


def _lod_kept(out: Any, x: Any, keep: bool = True) -> Any:
    """``out`` with X's LoD when X has one, ``keep`` and ``out`` has X's dim 0 (Paddle passes it on then)."""
    if keep and isinstance(x, LoDTensor) and x.lod and out.ndim and x.data.ndim and out.shape[0] == x.data.shape[0]:
        return LoDTensor(out, x.lod)
    return out


# -- concat --------------------------------------------------------------------------------------------------


def _infer_concat(ctx: InferContext) -> None:
    first = check_dtype(ctx, "X", ALL_DTYPES)
    if ctx.has_input("AxisTensor"):  # the axis is known when the op runs: every dim may change
        _check_axis_tensor(ctx)
        for var in ctx.tensors("X")[1:]:
            same_dtype(ctx, first, var)
            if len(var.shape) != len(first.shape):
                ctx.fail(f"X {fmt(var)} does not have the rank of {fmt(first)}")
        ctx.set_output("Out", [-1] * len(first.shape), first.dtype, lod_level=first.lod_level)
        return
    axis = normalize_axis(ctx, ctx.attr("axis"), len(first.shape))
    first, shape = merge_shapes(ctx, "X", ALL_DTYPES, axis)
    sizes = [v.shape[axis] for v in ctx.tensors("X")]
    shape[axis] = -1 if any(d < 0 for d in sizes) else sum(sizes)
    ctx.set_output("Out", shape, first.dtype, lod_level=first.lod_level if axis else 0)


def _concat(ctx: KernelContext, xs: list[Any], axis_tensor: Any) -> Any:
    """The inputs joined, with the first one's LoD when the axis is not 0."""
    fail, arrays = _kernel_fail(ctx, "concat"), [_data(x) for x in xs]
    axis = _axis_of(ctx, axis_tensor, arrays[0].ndim, fail)
    try:
        out = ctx.xp.concatenate(arrays, axis=axis)
    except ValueError:
        fail(f"inputs of shapes {[list(x.shape) for x in arrays]} do not join along axis {axis}")
    return _lod_kept(out, xs[0], axis != 0)


def _concat_grad(ctx: KernelContext, xs: list[Any], dout: Any, axis_tensor: Any) -> list[Any]:
    """dOut split back into pieces the sizes of the inputs along the axis (views of dOut)."""
    axis = _axis_of(ctx, axis_tensor, dout.ndim, _kernel_fail(ctx, "concat_grad"))
    return ctx.xp.split(dout, list(itertools.accumulate(x.shape[axis] for x in xs[:-1])), axis=axis)


_CONCAT_ATTRS = (AttrDef("axis", AttrType.INT, 0), _USE_QUANTIZER, *_ONEDNN)
CONCAT_GRAD = OpSchema(
    "concat_grad",
    inputs=(Slot("X", duplicable=True), Slot("Out@GRAD"), Slot("AxisTensor", optional=True)),
    outputs=(Slot("X@GRAD", duplicable=True),),
    attrs=_CONCAT_ATTRS,
    infer=infer_grads("X"),
    kernel=_concat_grad,
    doc="Gradient of concat: dOut split.",
)
CONCAT = OpSchema(
    "concat",
    inputs=(Slot("X", duplicable=True, lod=True), Slot("AxisTensor", optional=True, no_grad=True)),
    outputs=(Slot("Out", lod=True),),
    attrs=_CONCAT_ATTRS,
    infer=_infer_concat,
    grad=lambda g: grad_op(g, CONCAT_GRAD, ("X", "Out@GRAD", "AxisTensor"), ("X",)),
    kernel=_concat,
    doc="The inputs joined along `axis` (AxisTensor's value when given).",
)

# -- ops writing XShape, differentiated through it ------------------------------------------------------------


def _xshape_family(
    op_type: str,
    attrs: tuple[AttrDef, ...],
    out_shape: Callable[[InferContext, Tensor], list[int]],
    kernel: Callable[..., Any],
    grad_kernel: Callable[[KernelContext, Any, Any], Any] | None = None,
    extra_inputs: tuple[Slot, ...] = (),
    keeps_lod: bool = True,
    doc: str = "",
) -> tuple[OpSchema, OpSchema]:
    """``Out = kernel(ctx, X, *extra_inputs)`` of shape ``out_shape(ctx, X)`` with X's dtype (and, with
    ``keeps_lod``, X's LoD when Out keeps X's dim 0), and ``XShape``; the gradient op ``<op_type>_grad`` reads XShape
    and dOut and gives ``grad_kernel(ctx, XShape, dOut)`` (default: dOut reshaped to X's shape)."""

    def infer(ctx: InferContext) -> None:
        x = check_dtype(ctx, "X", ALL_DTYPES)
        shape = out_shape(ctx, x)
        keeps = keeps_lod and bool(x.shape) and bool(shape) and shape[0] == x.shape[0]
        ctx.set_output("Out", shape, x.dtype, lod_level=x.lod_level if keeps else 0)
        ctx.set_output("XShape", (0, *x.shape), x.dtype)

    def forward(ctx: KernelContext, x: Any, *extra: Any) -> tuple[Any, Any]:
        data = _data(x)
        xshape = ctx.xp.empty((0, *data.shape), dtype=data.dtype) if ctx.wants[1] else None
        return _lod_kept(kernel(ctx, data, *extra), x), xshape

    def infer_grad(ctx: InferContext) -> None:
        xshape = ctx.tensor("XShape")
        ctx.set_output("X@GRAD", xshape.shape[1:], xshape.dtype)

    backward = OpSchema(
        f"{op_type}_grad",
        inputs=(Slot("XShape"), Slot("Out@GRAD")),
        outputs=(Slot("X@GRAD"),),
        attrs=attrs,
        infer=infer_grad,
        kernel=grad_kernel or (lambda ctx, xshape, dout: dout.reshape(xshape.shape[1:])),
        doc=f"Gradient of {op_type}: dOut given X's shape (read from XShape).",
    )
    schema = OpSchema(
        op_type,
        inputs=(Slot("X", lod=keeps_lod), *extra_inputs),
        outputs=(Slot("Out", lod=keeps_lod), Slot("XShape", optional=True, no_grad=True)),
        attrs=attrs,
        infer=infer,
        grad=lambda g: grad_op(g, backward, ("XShape", "Out@GRAD"), ("X",)),
        kernel=forward,
        doc=doc,
    )
    return schema, backward


# -- reshape2 ------------------------------------------------------------------------------------------------


def _reshaped(xs: Sequence[int], target: Sequence[int], x_text: str, fail: Fail) -> list[int]:
    """The shape X of dims ``xs`` (-1: unknown) takes for ``target``: a 0 copies X's dim at its position, one -1
    is what the others leave (-1 still when X's unknown dims keep it from being known)."""
    if target.count(-1) > 1 or any(d < -1 for d in target):
        fail(f"shape {list(target)} may hold one -1 and no other negative dim")
    if any(d == 0 and i >= len(xs) for i, d in enumerate(target)):
        fail(f"shape {list(target)}: a 0 copies X's dim at its position, but X {x_text} has rank {len(xs)}")
    copied = [d == 0 for d in target] + [False] * (len(xs) - len(target))
    shape = [xs[i] if d == 0 else d for i, d in enumerate(target)]
    total = numel([d for d, c in zip(xs, copied) if not c])  # a copied dim is in both sizes: leave it out
    size = numel([d for d, c in zip(shape, copied) if not c and d != -1])
    if total < 0:
        return shape
    free = -1 in target
    if (free and (size == 0 or total % size)) or (not free and total != size):
        fail(f"X {x_text} cannot be reshaped to {list(target)}")
    if free:
        shape[target.index(-1)] = total // size
    return shape


def _reshape2_shape(ctx: InferContext, x: Tensor) -> list[int]:
    if ctx.has_input("ShapeTensor"):  # the attribute may hold the dims known when the program was built
        count, attr = _index_list(ctx, "ShapeTensor"), list(ctx.attr("shape"))
        if len(attr) != count:
            return [-1] * count
        return [x.shape[i] if d == 0 and i < len(x.shape) else d if d > 0 else -1 for i, d in enumerate(attr)]
    if ctx.has_input("Shape"):
        count = _index_tensor(ctx, "Shape")
        if count < 0:
            ctx.fail(f"Shape {fmt(ctx.tensor('Shape'))} must have a known length (the rank of Out)")
        return [-1] * count
    return _reshaped(x.shape, list(ctx.attr("shape")), fmt(x), ctx.fail)


def _reshape2(ctx: KernelContext, x: Any, shape: Any, shape_tensor: list[Any]) -> Any:
    """X with the new shape (a view when possible): ShapeTensor's values, else Shape's, else attribute ``shape``.

    A target without 0 (which copies X's dim) and with no dim below -1 means the same to numpy's reshape, which
    checks it some 10x faster than :func:`_reshaped` (a per-op cost of the inference programs' many reshapes);
    what numpy refuses, :func:`_reshaped` reports."""
    target = _given_ints((shape_tensor, shape), ctx.attrs["shape"])
    if 0 not in target and min(target, default=0) >= -1:
        with contextlib.suppress(ValueError):  # what numpy refuses is reported below, by the checks
            return x.reshape(target)
    return x.reshape(_reshaped(x.shape, target, f"of shape {list(x.shape)}", _kernel_fail(ctx, "reshape2")))


RESHAPE2, RESHAPE2_GRAD = _xshape_family(
    "reshape2",
    (AttrDef("shape", AttrType.INTS, []), _USE_QUANTIZER, *_ONEDNN),
    _reshape2_shape,
    _reshape2,
    extra_inputs=(
        Slot("Shape", optional=True, no_grad=True),
        Slot("ShapeTensor", duplicable=True, optional=True, no_grad=True),
    ),
    doc="X with a new shape (ShapeTensor's values, else Shape's, else `shape`): 0 copies X's dim at that "
    "position, one -1 is inferred.",
)

# -- transpose2 ----------------------------------------------------------------------------------------------


def _perm(axis: Sequence[int], rank: int, x_text: str, fail: Fail) -> list[int]:
    """``axis`` with negative entries counted from the end: a permutation of X's dims."""
    perm = [a + rank if -rank <= a < 0 else a for a in axis]
    if sorted(perm) != list(range(rank)):
        fail(f"axis {list(axis)} is not a permutation of the {rank} dims of X {x_text}")
    return perm


def _transpose2(ctx: KernelContext, x: Any) -> Any:
    """X's dims permuted by ``axis`` (a view): numpy's transpose counts negative entries from the end too, and what
    it refuses, :func:`_perm` reports."""
    with contextlib.suppress(ValueError):  # what numpy refuses is reported below, by the checks
        return x.transpose(ctx.attrs["axis"])
    return x.transpose(_perm(ctx.attrs["axis"], x.ndim, f"of shape {list(x.shape)}", _kernel_fail(ctx, "transpose2")))


def _transpose2_grad(ctx: KernelContext, xshape: Any, dout: Any) -> Any:
    """dOut permuted back: dim ``axis[i]`` of dX is dim ``i`` of dOut."""
    perm = _perm(
        ctx.attrs["axis"], dout.ndim, f"(dOut of shape {list(dout.shape)})", _kernel_fail(ctx, "transpose2_grad")
    )
    return dout.transpose([perm.index(i) for i in range(len(perm))])


TRANSPOSE2, TRANSPOSE2_GRAD = _xshape_family(
    "transpose2",
    (
        AttrDef("axis", AttrType.INTS),
        AttrDef("data_format", AttrType.STRING, "AnyLayout"),  # oneDNN's layout: no effect on the math
        _USE_QUANTIZER,
        *_ONEDNN,
    ),
    lambda ctx, x: [x.shape[i] for i in _perm(ctx.attr("axis"), len(x.shape), fmt(x), ctx.fail)],
    _transpose2,
    _transpose2_grad,
    keeps_lod=False,
    doc="X with its dims permuted: dim i of Out is dim axis[i] of X.",
)

# -- flatten_contiguous_range --------------------------------------------------------------------------------


def _flattened(xs: Sequence[int], start: int, stop: int, fail: Fail) -> list[int]:
    """X's dims ``start`` to ``stop`` (inclusive) made one; a 0-D X (start and stop 0 or -1) gives [1]."""
    if not xs:
        if start not in (0, -1) or stop not in (0, -1):
            fail(f"start_axis={start} and stop_axis={stop} must be 0 or -1 for a 0-D X")
        return [1]
    first, last = _axis(start, len(xs), "start_axis", fail), _axis(stop, len(xs), "stop_axis", fail)
    if last < first:
        fail(f"stop_axis={stop} comes before start_axis={start} in X of rank {len(xs)}")
    return [*xs[:first], numel(xs[first : last + 1]), *xs[last + 1 :]]


FLATTEN_CONTIGUOUS_RANGE, FLATTEN_CONTIGUOUS_RANGE_GRAD = _xshape_family(
    "flatten_contiguous_range",
    (AttrDef("start_axis", AttrType.INT, 1), AttrDef("stop_axis", AttrType.INT, 1), *_ONEDNN),
    lambda ctx, x: _flattened(x.shape, ctx.attr("start_axis"), ctx.attr("stop_axis"), ctx.fail),
    lambda ctx, x: x.reshape(
        _flattened(
            x.shape, ctx.attrs["start_axis"], ctx.attrs["stop_axis"], _kernel_fail(ctx, "flatten_contiguous_range")
        )
    ),
    doc="X with its dims start_axis to stop_axis (inclusive) made one.",
)

# -- squeeze2, unsqueeze2 --------------------------------------------------------------------------------------


def _squeezed(xs: Sequence[int], axes: Sequence[int], fail: Fail) -> list[int]:
    """X's dims without those of size 1 among ``axes`` (every one of size 1 when ``axes`` is empty); a listed dim
    of another size stays, and, as in Paddle's inference, a listed unknown (-1) dim is taken to be 1."""
    listed = {_axis(a, len(xs), "axes entry", fail) for a in axes} if axes else set(range(len(xs)))
    squeezable = (1, -1) if axes else (1,)
    return [d for i, d in enumerate(xs) if not (i in listed and d in squeezable)]


def _unsqueezed(xs: Sequence[int], axes: Sequence[int], fail: Fail) -> list[int]:
    """X's dims with a 1 inserted at each of ``axes`` in turn, each counted in the shape made so far (a negative
    one from its end: -1 appends)."""
    shape = list(xs)
    for a in axes:
        at = a + len(shape) + 1 if a < 0 else a
        if not 0 <= at <= len(shape):
            fail(f"axes entry {a} is out of range for inserting a dim into rank {len(shape)}")
        shape.insert(at, 1)
    return shape


def _unsqueeze2_shape(ctx: InferContext, x: Tensor) -> list[int]:
    if ctx.has_input("AxesTensorList"):
        return [-1] * (len(x.shape) + _index_list(ctx, "AxesTensorList"))
    if ctx.has_input("AxesTensor"):
        count = _index_tensor(ctx, "AxesTensor")
        if count < 0:
            ctx.fail(f"AxesTensor {fmt(ctx.tensor('AxesTensor'))} must have a known length")
        return [-1] * (len(x.shape) + count)
    return _unsqueezed(x.shape, ctx.attr("axes"), ctx.fail)


def _unsqueeze2(ctx: KernelContext, x: Any, axes_tensor: Any, axes_list: list[Any]) -> Any:
    """X reshaped with the new dims: AxesTensorList's values, else AxesTensor's, else attribute ``axes``."""
    axes = _given_ints((axes_list, axes_tensor), ctx.attrs["axes"])
    return x.reshape(_unsqueezed(x.shape, axes, _kernel_fail(ctx, "unsqueeze2")))


SQUEEZE2, SQUEEZE2_GRAD = _xshape_family(
    "squeeze2",
    (AttrDef("axes", AttrType.INTS, []), *_ONEDNN),
    lambda ctx, x: _squeezed(x.shape, ctx.attr("axes"), ctx.fail),
    lambda ctx, x: x.reshape(_squeezed(x.shape, ctx.attrs["axes"], _kernel_fail(ctx, "squeeze2"))),
    doc="X without its dims of size 1 listed in `axes` (all of them when `axes` is empty); other listed dims stay.",
)
UNSQUEEZE2, UNSQUEEZE2_GRAD = _xshape_family(
    "unsqueeze2",
    (AttrDef("axes", AttrType.INTS, []),),
    _unsqueeze2_shape,
    _unsqueeze2,
    extra_inputs=(
        Slot("AxesTensor", optional=True, no_grad=True),
        Slot("AxesTensorList", duplicable=True, optional=True, no_grad=True),
    ),
    doc="X with a dim of size 1 inserted at each of `axes` in turn (AxesTensorList's, else AxesTensor's values).",
)

# -- split ---------------------------------------------------------------------------------------------------


def _split_sizes(dim: int, num: int, sections: Sequence[int], count: int | None, fail: Fail) -> list[int]:
    """The size of each part along the split axis of size ``dim`` (-1: unknown, then -1 where it decides): ``num``
    equal parts, else ``sections``, one of which may be -1 (what the others leave, at least 1). ``count``: the
    number of outputs, when known."""
    if num > 0:
        if dim >= 0 and dim % num:
            fail(f"X's dim {dim} on the split axis does not divide into num={num} parts")
        if count is not None and count != num:
            fail(f"num={num} parts but {count} outputs Out")
        return [dim // num if dim >= 0 else -1] * num
    if not sections:
        fail("give num (> 0) or sections")
    if list(sections).count(-1) > 1 or any(s < -1 for s in sections):
        fail(f"sections {list(sections)} may hold one -1 and no other negative size")
    known, sizes = sum(s for s in sections if s >= 0), list(sections)
    if dim >= 0 and -1 in sections:
        if known >= dim:
            fail(f"sections {sizes} leave nothing of X's dim {dim} on the split axis for the -1")
        sizes[sizes.index(-1)] = dim - known
    elif dim >= 0 and known != dim:
        fail(f"sections {sizes} add up to {known}, not to X's dim {dim} on the split axis")
    if count is not None and count != len(sections):
        fail(f"sections {list(sections)} make {len(sections)} parts but there are {count} outputs Out")
    return sizes


def _infer_split(ctx: InferContext) -> None:
    x = check_dtype(ctx, "X", ALL_DTYPES)
    if not x.shape:
        ctx.fail(f"X {fmt(x)} must have at least one dimension")
    count, num = len(ctx.op.outputs.get("Out", ())), ctx.attr("num")
    if ctx.has_input("AxisTensor"):
        _check_axis_tensor(ctx)
        axis, dim = None, -1
    else:
        axis = normalize_axis(ctx, ctx.attr("axis"), len(x.shape))
        dim = x.shape[axis]
    if num <= 0 and ctx.has_input("SectionsTensorList"):
        parts = _index_list(ctx, "SectionsTensorList")
        if parts != count:
            ctx.fail(f"SectionsTensorList makes {parts} parts but there are {count} outputs Out")
        sizes = [-1] * count
    else:
        sizes = _split_sizes(dim, num, ctx.attr("sections"), count, ctx.fail)
    lod_level = x.lod_level if axis != 0 else 0
    for i, size in enumerate(sizes):
        shape = [-1] * len(x.shape) if axis is None else [size if j == axis else d for j, d in enumerate(x.shape)]
        ctx.set_output("Out", shape, x.dtype, lod_level=lod_level, index=i)


def _split(ctx: KernelContext, x: Any, axis_tensor: Any, sections_list: list[Any]) -> list[Any]:
    """Views of X's parts along the axis: ``num`` equal ones, else of SectionsTensorList's or ``sections``' sizes;
    each with X's LoD when the axis is not 0."""
    fail, data = _kernel_fail(ctx, "split"), _data(x)
    if data.ndim == 0:
        fail("X must have at least one dimension")
    axis, num = _axis_of(ctx, axis_tensor, data.ndim, fail), ctx.attrs["num"]
    sections = ctx.attrs["sections"] if num > 0 else _given_ints((sections_list,), ctx.attrs["sections"])
    sizes = _split_sizes(data.shape[axis], num, sections, None, fail)
    ends = list(itertools.accumulate(sizes))
    before = (slice(None),) * axis  # basic slices: numpy's split costs some 3 us more a call, its own checks
    parts = [data[(*before, slice(end - size, end))] for size, end in zip(sizes, ends)]
    return [_lod_kept(part, x, axis != 0) for part in parts]


def _grad_split(g: GradContext) -> list[OpSpec]:
    """Paddle's: dX is the output gradients joined by ``concat``; an output nothing differentiates gives zeros
    (``fill_zeros_like``, as Paddle's backward fills them in)."""
    outputs = grad_outputs(g, "X")
    if not outputs:
        return []
    specs, douts = [], []
    for out, dout in zip(g.output("Out"), g.output_grad("Out")):
        if dout == EMPTY_VAR:
            dout = grad_name(out)
            specs.append(OpSpec("fill_zeros_like", {"X": [out]}, {"Out": [dout]}))
        douts.append(dout)
    inputs = {"X": douts, **({"AxisTensor": g.input("AxisTensor")} if g.input("AxisTensor") else {})}
    return [*specs, OpSpec("concat", inputs, {"Out": outputs["X@GRAD"]}, {"axis": g.op.attr("axis")})]


SPLIT = OpSchema(
    "split",
    inputs=(
        Slot("X", lod=True),
        Slot("AxisTensor", optional=True, no_grad=True),
        Slot("SectionsTensorList", duplicable=True, optional=True, no_grad=True),
    ),
    outputs=(Slot("Out", duplicable=True, lod=True),),
    attrs=(
        AttrDef("axis", AttrType.INT, 0),
        AttrDef("num", AttrType.INT, 0),
        AttrDef("sections", AttrType.INTS, []),
        *_ONEDNN,
    ),
    infer=_infer_split,
    grad=_grad_split,
    kernel=_split,
    doc="X cut along `axis` (AxisTensor's value when given) into `num` equal parts, else parts of the sizes "
    "SectionsTensorList or `sections` give (one may be -1: what the others leave).",
)


def _infer_fill_zeros_like(ctx: InferContext) -> None:
    x = check_dtype(ctx, "X", ALL_DTYPES)
    ctx.set_output("Out", x.shape, x.dtype, lod_level=x.lod_level)


FILL_ZEROS_LIKE = OpSchema(
    "fill_zeros_like",
    inputs=(Slot("X", no_grad=True),),
    outputs=(Slot("Out"),),
    infer=_infer_fill_zeros_like,
    kernel=lambda ctx, x: ctx.xp.zeros_like(x),
    share_lod=(("X", "Out"),),
    doc="Zeros of X's shape and dtype (and X's LoD).",
)

# -- slice ---------------------------------------------------------------------------------------------------

_SLICE_TENSORS = ("StartsTensor", "EndsTensor", "StartsTensorList", "EndsTensorList")


def _slice_axes(axes: Sequence[int], rank: int, fail: Fail) -> list[int]:
    out = [_axis(a, rank, "axes entry", fail) for a in axes]
    if len(set(out)) != len(out):
        fail(f"axes {list(axes)} name a dim twice")
    return out


def _bounds(start: int, end: int, dim: int, fail: Fail) -> tuple[int, int]:
    """Paddle's bounds of a slice of a dim of size ``dim``: negatives count from the end, both are clamped into
    ``[0, dim]``; an end before the start is an error (an empty slice is not)."""
    start = min(max(start + dim if start < 0 else start, 0), dim)
    end = min(max(end + dim if end < 0 else end, 0), dim)
    if end < start:
        fail(f"the slice [{start}, {end}) of a dim of size {dim} ends before it starts")
    return start, end


def _decrease_axes(decrease_axis: Sequence[int], rank: int, fail: Fail) -> set[int]:
    """The dims ``decrease_axis`` names, negative ones counted from the end."""
    return {_axis(a, rank, "decrease_axis entry", fail) for a in decrease_axis}


def _decreased(shape: Sequence[int], decrease: set[int], fail: Fail) -> list[int]:
    """``shape`` without the dims in ``decrease`` (:func:`_decrease_axes`), each of which must be 1 (or unknown)."""
    for axis in sorted(decrease):
        if shape[axis] not in (1, -1):
            fail(f"decrease_axis drops dim {axis}, where the slice keeps {shape[axis]} entries, not 1")
    return [d for i, d in enumerate(shape) if i not in decrease]


def _slice_values(ctx: InferContext, attr: str, tensor: str, tensors: str, count: int) -> list[int] | None:
    """The starts (or ends) the attribute gives, None when a tensor gives them; each way ``count`` of them."""
    for slot, given_by in ((tensor, _index_tensor), (tensors, _index_list)):
        if ctx.has_input(slot):
            given = given_by(ctx, slot)
            if given not in (count, -1):
                ctx.fail(f"{slot} gives {given} {attr} for {count} axes")
            return None
    values = list(ctx.attr(attr))
    if len(values) != count:
        ctx.fail(f"{attr} {values} must have one entry per entry of axes {list(ctx.attr('axes'))}")
    return values


def _infer_slice(ctx: InferContext) -> None:
    x = check_dtype(ctx, "Input", ALL_DTYPES)
    rank = len(x.shape)
    axes = _slice_axes(ctx.attr("axes"), rank, ctx.fail)
    starts = _slice_values(ctx, "starts", "StartsTensor", "StartsTensorList", len(axes))
    ends = _slice_values(ctx, "ends", "EndsTensor", "EndsTensorList", len(axes))
    flags = list(ctx.attr("infer_flags")) or [1] * len(axes)
    if len(flags) != len(axes):
        ctx.fail(f"infer_flags {flags} must have one entry per entry of axes {list(ctx.attr('axes'))}")
    shape = list(x.shape)
    for i, axis in enumerate(axes):
        if starts is None or ends is None or flags[i] == -1:  # decided when the op runs
            shape[axis] = -1
        elif shape[axis] >= 0:
            start, end = _bounds(starts[i], ends[i], shape[axis], ctx.fail)
            shape[axis] = end - start
    decrease = _decrease_axes(ctx.attr("decrease_axis"), rank, ctx.fail)
    lod_level = 0 if 0 in decrease or 0 in axes else x.lod_level
    ctx.set_output("Out", _decreased(shape, decrease, ctx.fail), x.dtype, lod_level=lod_level)


def _slice_index(
    ctx: KernelContext, shape: Sequence[int], tensors: Sequence[Any], op_type: str
) -> tuple[tuple[Any, ...], list[int], bool]:
    """The index of the slice into an Input of ``shape`` (StartsTensor's, else StartsTensorList's, else attribute
    ``starts``; ends alike), the shape of Out (decrease_axis dropped) and whether Out keeps Input's dim 0."""
    fail, attrs, rank = _kernel_fail(ctx, op_type), ctx.attrs, len(shape)
    axes = _slice_axes(attrs["axes"], rank, fail)
    starts_tensor, ends_tensor, starts_list, ends_list = tensors
    starts = _given_ints((starts_tensor, starts_list), attrs["starts"])
    ends = _given_ints((ends_tensor, ends_list), attrs["ends"])
    flags = attrs["infer_flags"] or (1,) * len(axes)
    if not len(starts) == len(ends) == len(flags) == len(axes):
        fail(f"{len(starts)} starts, {len(ends)} ends and {len(flags)} infer_flags for axes {list(attrs['axes'])}")
    decrease = _decrease_axes(attrs["decrease_axis"], rank, fail)
    index, sliced = [slice(None)] * rank, list(shape)
    for i, axis in enumerate(axes):
        start, end = starts[i], ends[i]
        if start == -1 and end == 0 and flags[i] == -1 and axis in decrease:  # Paddle's x[-1] by a tensor index
            end = shape[axis]
        start, end = _bounds(start, end, shape[axis], fail)
        index[axis], sliced[axis] = slice(start, end), end - start
    return tuple(index), _decreased(sliced, decrease, fail), 0 not in axes and 0 not in decrease


def _slice(ctx: KernelContext, x: Any, *tensors: Any) -> Any:
    """The slice, with Input's LoD when it leaves dim 0 alone."""
    data = _data(x)
    index, shape, keeps_dim0 = _slice_index(ctx, data.shape, tensors, "slice")
    return _lod_kept(data[index].reshape(shape), x, keeps_dim0)


def _slice_grad(ctx: KernelContext, x: Any, dout: Any, *tensors: Any) -> Any:
    """Zeros of Input's shape holding dOut where the slice was."""
    index, _, _ = _slice_index(ctx, x.shape, tensors, "slice_grad")
    dx = ctx.xp.zeros(x.shape, dtype=dout.dtype)
    dx[index] = dout.reshape(dx[index].shape)
    return dx


_SLICE_ATTRS = (
    AttrDef("axes", AttrType.INTS),
    AttrDef("starts", AttrType.INTS, []),
    AttrDef("ends", AttrType.INTS, []),
    AttrDef("infer_flags", AttrType.INTS, []),
    AttrDef("decrease_axis", AttrType.INTS, []),
    *_ONEDNN,
)
SLICE_GRAD = OpSchema(
    "slice_grad",
    inputs=(Slot("Input"), Slot("Out@GRAD"), *(Slot(s, optional=True) for s in _SLICE_TENSORS)),
    outputs=(Slot("Input@GRAD"),),
    attrs=_SLICE_ATTRS,
    infer=infer_grads("Input"),
    kernel=_slice_grad,
    doc="Gradient of slice: dOut where the slice was, zeros elsewhere.",
)
SLICE = OpSchema(
    "slice",
    inputs=(Slot("Input", lod=True), *(Slot(s, optional=True, no_grad=True) for s in _SLICE_TENSORS)),
    outputs=(Slot("Out", lod=True),),
    attrs=_SLICE_ATTRS,
    infer=_infer_slice,
    grad=lambda g: grad_op(g, SLICE_GRAD, ("Input", "Out@GRAD", *_SLICE_TENSORS), ("Input",)),
    kernel=_slice,
    doc="Input[starts:ends] on each of `axes` (negative bounds count from the end, all clamped into the dim; "
    "tensors may give starts and ends), the dims in `decrease_axis` (each of size 1) dropped.",
)

SCHEMAS: tuple[OpSchema, ...] = (
    CONCAT,
    CONCAT_GRAD,
    RESHAPE2,
    RESHAPE2_GRAD,
    TRANSPOSE2,
    TRANSPOSE2_GRAD,
    FLATTEN_CONTIGUOUS_RANGE,
    FLATTEN_CONTIGUOUS_RANGE_GRAD,
    SQUEEZE2,
    SQUEEZE2_GRAD,
    UNSQUEEZE2,
    UNSQUEEZE2_GRAD,
    SPLIT,
    FILL_ZEROS_LIKE,
    SLICE,
    SLICE_GRAD,
)
