"""Indexing ops with Paddle's semantics: ``gather``, ``gather_nd``, ``scatter``, ``scatter_nd_add``,
``index_select``, ``index_sample``, ``take_along_axis``, ``one_hot_v2``, ``argsort``, ``masked_select`` and
``unique``, with their gradient ops where Paddle has one; and ``non_max_suppression`` (ONNX's
NonMaxSuppression, whose outputs Paddle's ``multiclass_nms`` ops do not give) and ``tfidf_vectorizer`` (ONNX's
TfIdfVectorizer on integers), which Paddle lacks.

Indices are int32 or int64; negative ones count from the end where Paddle's do (``index_select``,
``take_along_axis``), and indices out of range are the op's error (one read of the indices back to the host). A
gradient that gathered reads is scattered back with ``xp.add.at``, so repeated indices add up. Kernels are written
once against ``ctx.xp``.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from blockir.ir.attrs import AttrType
from blockir.ir.dtypes import DTYPE_TO_PROTO
from blockir.ir.schema import AttrDef, InferContext, KernelContext, OpSchema, Slot
from blockir.ops.common import (
    ALL_DTYPES,
    FLOATS,
    NUMBERS,
    check_dtype,
    compatible,
    dtype_attr,
    fmt,
    grad_op,
    infer_grads,
    kernel_error,
    min_max,
    normalize_axis,
    np_dtype,
    same_dtype,
    to_host,
    unbroadcast,
)

_INDEX_DTYPES = frozenset({"int32", "int64"})


def _checked(ctx: KernelContext, index: Any, bound: int, what: str, negative: bool = False) -> Any:
    """``index`` with every entry in [0, bound) (negative ones counted from ``bound`` when ``negative``); the op's
    error naming the first entry out of range."""
    if index.size == 0:
        return index
    low, high = min_max(ctx.xp, index)
    if (low < -bound if negative else low < 0) or high >= bound:
        bad = low if low < (-bound if negative else 0) else high
        raise kernel_error(ctx, f"{what} {bad} is out of range for a dim of size {bound}")
    return index % bound if negative and low < 0 else index


def _scatter_add(xp: Any, shape: tuple[int, ...], dtype: Any, axis: int, index: Any, values: Any) -> Any:
    """Zeros of ``shape`` with ``values`` added at ``index`` along ``axis`` (repeats add up)."""
    out = xp.zeros(shape, dtype=dtype)
    moved = xp.moveaxis(out, axis, 0)
    xp.add.at(moved, index, xp.moveaxis(values, axis, 0))
    return out


def _axis_grid(xp: Any, index: Any, axis: int) -> tuple[Any, ...]:
    """The coordinates an along-axis index names: each entry's own position, but ``index`` along ``axis`` (every
    array of ``index``'s shape)."""
    rank = index.ndim
    grid = [xp.arange(n).reshape([n if j == i else 1 for j in range(rank)]) for i, n in enumerate(index.shape)]
    grid[axis] = index
    return tuple(xp.broadcast_to(g, index.shape) for g in grid)


# -- gather, index_select -----------------------------------------------------------------------------------------


def _gather_index_shape(ctx: InferContext, index: Any) -> tuple[int, ...]:
    """What the index contributes to Out's shape: [N] for [N] or [N, 1], nothing for 0-D."""
    shape = tuple(index.shape)
    if len(shape) == 2 and shape[1] == 1:
        return shape[:1]
    if len(shape) > 1:
        ctx.fail(f"Index {fmt(index)} must be 0-D, [N] or [N, 1]")
    return shape


def _infer_gather(ctx: InferContext) -> None:
    x, index = check_dtype(ctx, "X", ALL_DTYPES), check_dtype(ctx, "Index", _INDEX_DTYPES)
    if ctx.has_input("Axis"):
        check_dtype(ctx, "Axis", _INDEX_DTYPES)
        ctx.set_output("Out", [-1] * (len(x.shape) + len(_gather_index_shape(ctx, index)) - 1), x.dtype)
        return
    axis = normalize_axis(ctx, ctx.attr("axis"), len(x.shape))
    shape = (*x.shape[:axis], *_gather_index_shape(ctx, index), *x.shape[axis + 1 :])
    ctx.set_output("Out", shape, x.dtype, lod_level=x.lod_level if axis else 0)


def _gather_axis(ctx: KernelContext, x: Any, axis_tensor: Any) -> int:
    axis = ctx.attrs["axis"] if axis_tensor is None else int(to_host(axis_tensor).reshape(-1)[0])
    if not -x.ndim <= axis < x.ndim:
        raise kernel_error(ctx, f"axis {axis} is out of range for X of rank {x.ndim}")
    return axis % x.ndim


def _flat_index(index: Any) -> Any:
    return index.reshape(-1) if index.ndim else index


def _gather(ctx: KernelContext, x: Any, index: Any, axis_tensor: Any) -> Any:
    axis = _gather_axis(ctx, x, axis_tensor)
    index = _checked(ctx, _flat_index(index), x.shape[axis], "Index")
    return ctx.xp.take(x, index, axis=axis)


def _gather_grad(ctx: KernelContext, x: Any, index: Any, axis_tensor: Any, dout: Any) -> Any:
    axis = _gather_axis(ctx, x, axis_tensor)
    index = _flat_index(index)
    values = dout if index.ndim else ctx.xp.expand_dims(dout, axis)
    return _scatter_add(ctx.xp, x.shape, dout.dtype, axis, index.reshape(-1), values)


_GATHER_ATTRS = (AttrDef("axis", AttrType.INT, 0),)
_GATHER_INPUTS = (Slot("X"), Slot("Index", no_grad=True), Slot("Axis", optional=True, no_grad=True))
GATHER_GRAD = OpSchema(
    "gather_grad",
    inputs=(*_GATHER_INPUTS, Slot("Out@GRAD")),
    outputs=(Slot("X@GRAD"),),
    attrs=_GATHER_ATTRS,
    infer=infer_grads("X"),
    kernel=_gather_grad,
    doc="Gradient of gather: dOut added back at Index.",
)
GATHER = OpSchema(
    "gather",
    inputs=_GATHER_INPUTS,
    outputs=(Slot("Out"),),
    attrs=_GATHER_ATTRS,
    infer=_infer_gather,
    grad=lambda g: grad_op(g, GATHER_GRAD, ("X", "Index", "Axis", "Out@GRAD"), ("X",)),
    kernel=_gather,
    doc="Out = the entries of X at Index (0-D, [N] or [N, 1]) along `axis` (Axis's value when given).",
)

_INDEX_SELECT_ATTRS = (AttrDef("dim", AttrType.INT, 0),)


def _infer_index_select(ctx: InferContext) -> None:
    x, index = check_dtype(ctx, "X", ALL_DTYPES), check_dtype(ctx, "Index", _INDEX_DTYPES)
    axis = normalize_axis(ctx, ctx.attr("dim"), len(x.shape), "dim")
    if len(index.shape) > 1 and not (len(index.shape) == 2 and index.shape[1] == 1):
        ctx.fail(f"Index {fmt(index)} must be a vector")
    count = index.shape[0] if index.shape else 1
    ctx.set_output("Out", (*x.shape[:axis], count, *x.shape[axis + 1 :]), x.dtype)


def _index_select(ctx: KernelContext, x: Any, index: Any) -> Any:
    axis = ctx.attrs["dim"] % x.ndim
    return ctx.xp.take(x, _checked(ctx, index.reshape(-1), x.shape[axis], "Index", negative=True), axis=axis)


def _index_select_grad(ctx: KernelContext, x: Any, index: Any, dout: Any) -> Any:
    axis = ctx.attrs["dim"] % x.ndim
    index = _checked(ctx, index.reshape(-1), x.shape[axis], "Index", negative=True)
    return _scatter_add(ctx.xp, x.shape, dout.dtype, axis, index, dout)


INDEX_SELECT_GRAD = OpSchema(
    "index_select_grad",
    inputs=(Slot("X"), Slot("Index", no_grad=True), Slot("Out@GRAD")),
    outputs=(Slot("X@GRAD"),),
    attrs=_INDEX_SELECT_ATTRS,
    infer=infer_grads("X"),
    kernel=_index_select_grad,
    doc="Gradient of index_select: dOut added back at Index.",
)
INDEX_SELECT = OpSchema(
    "index_select",
    inputs=(Slot("X"), Slot("Index", no_grad=True)),
    outputs=(Slot("Out"),),
    attrs=_INDEX_SELECT_ATTRS,
    infer=_infer_index_select,
    grad=lambda g: grad_op(g, INDEX_SELECT_GRAD, ("X", "Index", "Out@GRAD"), ("X",)),
    kernel=_index_select,
    doc="Out = the slices of X at Index along `dim` (negative indices count from the end).",
)

# -- gather_nd, scatter_nd_add ---------------------------------------------------------------------------------------


def _nd_shape(ctx: InferContext, x: Any, index: Any) -> tuple[int, ...]:
    """The shape of what ``index`` [..., k] picks from ``x``: index.shape[:-1] + x.shape[k:]."""
    if not index.shape:
        ctx.fail(f"Index {fmt(index)} must have at least one dim")
    k = index.shape[-1]
    if k > len(x.shape):
        ctx.fail(f"Index {fmt(index)} has {k} coordinates, more than X {fmt(x)} has dims")
    return (*index.shape[:-1], *x.shape[max(k, 0) :])


def _nd_coordinates(ctx: KernelContext, x_shape: tuple[int, ...], index: Any) -> tuple[Any, ...]:
    """Index [..., k] as a tuple of k coordinate arrays, each checked against its dim."""
    k = index.shape[-1]
    return tuple(_checked(ctx, index[..., i], x_shape[i], f"Index coordinate {i}") for i in range(k))


def _infer_gather_nd(ctx: InferContext) -> None:
    x, index = check_dtype(ctx, "X", ALL_DTYPES), check_dtype(ctx, "Index", _INDEX_DTYPES)
    ctx.set_output("Out", _nd_shape(ctx, x, index), x.dtype)


def _gather_nd(ctx: KernelContext, x: Any, index: Any) -> Any:
    return x[_nd_coordinates(ctx, x.shape, index)].copy()


def _gather_nd_grad(ctx: KernelContext, x: Any, index: Any, dout: Any) -> Any:
    dx = ctx.xp.zeros(x.shape, dtype=dout.dtype)
    ctx.xp.add.at(dx, _nd_coordinates(ctx, x.shape, index), dout)
    return dx


GATHER_ND_GRAD = OpSchema(
    "gather_nd_grad",
    inputs=(Slot("X"), Slot("Index", no_grad=True), Slot("Out@GRAD")),
    outputs=(Slot("X@GRAD"),),
    infer=infer_grads("X"),
    kernel=_gather_nd_grad,
    doc="Gradient of gather_nd: dOut added back at Index.",
)
GATHER_ND = OpSchema(
    "gather_nd",
    inputs=(Slot("X"), Slot("Index", no_grad=True)),
    outputs=(Slot("Out"),),
    infer=_infer_gather_nd,
    grad=lambda g: grad_op(g, GATHER_ND_GRAD, ("X", "Index", "Out@GRAD"), ("X",)),
    kernel=_gather_nd,
    doc="Out[i...] = X[Index[i..., 0], ..., Index[i..., k-1]] (the rest of X's dims kept).",
)


def _infer_scatter_nd_add(ctx: InferContext) -> None:
    x, index = check_dtype(ctx, "X", NUMBERS), check_dtype(ctx, "Index", _INDEX_DTYPES)
    updates = check_dtype(ctx, "Updates", NUMBERS)
    same_dtype(ctx, x, updates)
    want = _nd_shape(ctx, x, index)
    if len(want) != len(updates.shape) or not all(map(compatible, want, updates.shape)):
        ctx.fail(f"Updates {fmt(updates)} must have shape {list(want)} (Index's leading dims, X's trailing ones)")
    ctx.set_output("Out", x.shape, x.dtype)


def _scatter_nd_add(ctx: KernelContext, x: Any, index: Any, updates: Any) -> Any:
    out = x.copy()
    ctx.xp.add.at(out, _nd_coordinates(ctx, x.shape, index), updates)
    return out


def _scatter_nd_add_grad(ctx: KernelContext, index: Any, updates: Any, dout: Any) -> tuple[Any, Any]:
    dx = dout.copy() if ctx.wants[0] else None
    dupdates = dout[_nd_coordinates(ctx, dout.shape, index)].copy() if ctx.wants[1] else None
    return dx, dupdates


def _infer_scatter_grads(ctx: InferContext) -> None:
    """X@GRAD has dOut's shape, Updates@GRAD Updates'."""
    dout = ctx.tensor("Out@GRAD")
    ctx.set_output("X@GRAD", dout.shape, dout.dtype)
    infer_grads("Updates")(ctx)


SCATTER_ND_ADD_GRAD = OpSchema(
    "scatter_nd_add_grad",
    inputs=(Slot("Index", no_grad=True), Slot("Updates"), Slot("Out@GRAD")),
    outputs=(Slot("X@GRAD"), Slot("Updates@GRAD")),
    infer=_infer_scatter_grads,
    kernel=_scatter_nd_add_grad,
    doc="Gradient of scatter_nd_add: dOut to X, dOut at Index to Updates.",
)


SCATTER_ND_ADD = OpSchema(
    "scatter_nd_add",
    inputs=(Slot("X"), Slot("Index", no_grad=True), Slot("Updates")),
    outputs=(Slot("Out"),),
    infer=_infer_scatter_nd_add,
    grad=lambda g: grad_op(g, SCATTER_ND_ADD_GRAD, ("Index", "Updates", "Out@GRAD"), ("X", "Updates")),
    kernel=_scatter_nd_add,
    doc="Out = X with Updates added at the coordinates Index [..., k] gives (repeats add up).",
)

# -- scatter ----------------------------------------------------------------------------------------------------------

_SCATTER_ATTRS = (AttrDef("overwrite", AttrType.BOOLEAN, True),)


def _infer_scatter(ctx: InferContext) -> None:
    x, ids = check_dtype(ctx, "X", NUMBERS), check_dtype(ctx, "Ids", _INDEX_DTYPES)
    updates = check_dtype(ctx, "Updates", NUMBERS)
    same_dtype(ctx, x, updates)
    if len(ids.shape) > 1 and not (len(ids.shape) == 2 and ids.shape[1] == 1):
        ctx.fail(f"Ids {fmt(ids)} must be a vector")
    if not x.shape or len(updates.shape) != len(x.shape) or not all(map(compatible, updates.shape[1:], x.shape[1:])):
        ctx.fail(f"Updates {fmt(updates)} must be rows of X {fmt(x)}")
    ctx.set_output("Out", x.shape, x.dtype)


def _rows(ctx: KernelContext, ids: Any, height: int) -> Any:
    return _checked(ctx, ids.reshape(-1), height, "Ids")


def _last_occurrence(xp: Any, ids: Any) -> Any:
    """Which entries of ``ids`` are the last of their value (the rows an overwriting scatter keeps): sorted by
    value then position, an entry is last when the next one differs. O(n log n), on any array module."""
    n = ids.shape[0]
    order = xp.lexsort(xp.stack([xp.arange(n), ids]))
    ranked = ids[order]
    last = xp.ones(n, dtype=bool)
    last[:-1] = ranked[1:] != ranked[:-1]
    kept = xp.empty(n, dtype=bool)
    kept[order] = last
    return kept


def _scatter(ctx: KernelContext, x: Any, ids: Any, updates: Any) -> Any:
    """overwrite: the rows of X at Ids replaced by Updates (the last one wins); else those rows zeroed, then every
    update added."""
    ids, out = _rows(ctx, ids, x.shape[0]), x.copy()
    if updates.shape[0] != ids.shape[0]:
        raise kernel_error(ctx, f"Updates has {updates.shape[0]} rows for {ids.shape[0]} Ids")
    if ctx.attrs["overwrite"]:
        kept = _last_occurrence(ctx.xp, ids)  # CuPy assigns repeated rows in no set order: only the last ones
        out[ids[kept]] = updates[kept]
    else:
        out[ids] = 0
        ctx.xp.add.at(out, ids, updates)
    return out


def _scatter_grad(ctx: KernelContext, ids: Any, updates: Any, dout: Any) -> tuple[Any, Any]:
    """dX = dOut with the rows at Ids zeroed; dUpdates = dOut at Ids (overwrite: 0 for an update a later one
    replaced)."""
    xp, ids = ctx.xp, _rows(ctx, ids, dout.shape[0])
    dx = None
    if ctx.wants[0]:
        dx = dout.copy()
        dx[ids] = 0
    dupdates = None
    if ctx.wants[1]:
        dupdates = dout[ids]
        if ctx.attrs["overwrite"]:
            kept = _last_occurrence(xp, ids).reshape(-1, *(1,) * (dout.ndim - 1))
            dupdates = dupdates * kept
    return dx, dupdates


SCATTER_GRAD = OpSchema(
    "scatter_grad",
    inputs=(Slot("Ids", no_grad=True), Slot("Updates"), Slot("Out@GRAD")),
    outputs=(Slot("X@GRAD"), Slot("Updates@GRAD")),
    attrs=_SCATTER_ATTRS,
    infer=_infer_scatter_grads,
    kernel=_scatter_grad,
    doc="Gradient of scatter.",
)
SCATTER = OpSchema(
    "scatter",
    inputs=(Slot("X"), Slot("Ids", no_grad=True), Slot("Updates")),
    outputs=(Slot("Out"),),
    attrs=_SCATTER_ATTRS,
    infer=_infer_scatter,
    grad=lambda g: grad_op(g, SCATTER_GRAD, ("Ids", "Updates", "Out@GRAD"), ("X", "Updates")),
    kernel=_scatter,
    doc="Out = X with the rows at Ids replaced by Updates (overwrite; the last wins), or zeroed and the updates "
    "added (overwrite false: repeats add up).",
)

# -- index_sample, take_along_axis -------------------------------------------------------------------------------


def _infer_index_sample(ctx: InferContext) -> None:
    x, index = check_dtype(ctx, "X", ALL_DTYPES), check_dtype(ctx, "Index", _INDEX_DTYPES)
    if len(x.shape) != 2 or len(index.shape) != 2 or not compatible(x.shape[0], index.shape[0]):
        ctx.fail(f"X {fmt(x)} and Index {fmt(index)} must be matrices with as many rows")
    ctx.set_output("Out", index.shape, x.dtype)


def _index_sample(ctx: KernelContext, x: Any, index: Any) -> Any:
    return ctx.xp.take_along_axis(x, _checked(ctx, index, x.shape[1], "Index"), axis=1)


def _index_sample_grad(ctx: KernelContext, x: Any, index: Any, dout: Any) -> Any:
    xp = ctx.xp
    dx = xp.zeros(x.shape, dtype=dout.dtype)
    rows = xp.broadcast_to(xp.arange(x.shape[0]).reshape(-1, 1), index.shape)
    xp.add.at(dx, (rows, _checked(ctx, index, x.shape[1], "Index")), dout)
    return dx


INDEX_SAMPLE_GRAD = OpSchema(
    "index_sample_grad",
    inputs=(Slot("X"), Slot("Index", no_grad=True), Slot("Out@GRAD")),
    outputs=(Slot("X@GRAD"),),
    infer=infer_grads("X"),
    kernel=_index_sample_grad,
    doc="Gradient of index_sample.",
)
INDEX_SAMPLE = OpSchema(
    "index_sample",
    inputs=(Slot("X"), Slot("Index", no_grad=True)),
    outputs=(Slot("Out"),),
    infer=_infer_index_sample,
    grad=lambda g: grad_op(g, INDEX_SAMPLE_GRAD, ("X", "Index", "Out@GRAD"), ("X",)),
    kernel=_index_sample,
    doc="Out[i, j] = X[i, Index[i, j]].",
)

_TAKE_ATTRS = (AttrDef("Axis", AttrType.INT), AttrDef("broadcast", AttrType.BOOLEAN, True))


def _infer_take(ctx: InferContext) -> None:
    x, index = check_dtype(ctx, "Input", ALL_DTYPES), check_dtype(ctx, "Index", _INDEX_DTYPES)
    if len(x.shape) != len(index.shape):
        ctx.fail(f"Index {fmt(index)} must have the rank of Input {fmt(x)}")
    axis = normalize_axis(ctx, ctx.attr("Axis"), len(x.shape))
    shape = []
    for i, (d, n) in enumerate(zip(x.shape, index.shape)):
        if i != axis and not (compatible(d, n) or d == 1 or n == 1):
            ctx.fail(f"Index {fmt(index)} does not broadcast against Input {fmt(x)} outside axis {axis}")
        shape.append(n if i == axis or d == 1 else d if n == 1 else max(d, n))
    ctx.set_output("Result", shape, x.dtype)


def _taken(ctx: KernelContext, x: Any, index: Any) -> tuple[Any, Any, int]:
    """Input and Index broadcast against each other outside the axis, Index checked; and the axis."""
    xp, axis = ctx.xp, ctx.attrs["Axis"] % x.ndim
    index = _checked(ctx, index, x.shape[axis], "Index", negative=True)
    shape = [max(d, n) for d, n in zip(x.shape, index.shape)]
    x_view = xp.broadcast_to(x, [x.shape[axis] if i == axis else d for i, d in enumerate(shape)])
    index_view = xp.broadcast_to(index, [index.shape[axis] if i == axis else d for i, d in enumerate(shape)])
    return x_view, index_view, axis


def _take_along_axis(ctx: KernelContext, x: Any, index: Any) -> Any:
    x_view, index_view, axis = _taken(ctx, x, index)
    return ctx.xp.take_along_axis(x_view, index_view, axis=axis)


def _take_along_axis_grad(ctx: KernelContext, x: Any, index: Any, dout: Any) -> Any:
    xp = ctx.xp
    x_view, index_view, axis = _taken(ctx, x, index)
    dx = xp.zeros(x_view.shape, dtype=dout.dtype)
    xp.add.at(dx, _axis_grid(xp, index_view, axis), dout)
    lead = tuple(i for i, (a, b) in enumerate(zip(x.shape, dx.shape)) if a != b)
    return dx.sum(axis=lead, keepdims=True) if lead else dx


TAKE_ALONG_AXIS_GRAD = OpSchema(
    "take_along_axis_grad",
    inputs=(Slot("Input"), Slot("Index", no_grad=True), Slot("Result@GRAD")),
    outputs=(Slot("Input@GRAD"),),
    attrs=_TAKE_ATTRS,
    infer=infer_grads("Input"),
    kernel=_take_along_axis_grad,
    doc="Gradient of take_along_axis: dResult added back at Index.",
)
TAKE_ALONG_AXIS = OpSchema(
    "take_along_axis",
    inputs=(Slot("Input"), Slot("Index", no_grad=True)),
    outputs=(Slot("Result"),),
    attrs=_TAKE_ATTRS,
    infer=_infer_take,
    grad=lambda g: grad_op(g, TAKE_ALONG_AXIS_GRAD, ("Input", "Index", "Result@GRAD"), ("Input",)),
    kernel=_take_along_axis,
    doc="Result = the entries of Input at Index along `Axis` (numpy's take_along_axis; Input and Index broadcast "
    "against each other outside the axis).",
)

# -- one_hot_v2, argsort, masked_select ----------------------------------------------------------------------------

_ONE_HOT_ATTRS = (
    AttrDef("depth", AttrType.INT, -1),
    AttrDef("dtype", AttrType.INT, DTYPE_TO_PROTO["float32"]),
    AttrDef("allow_out_of_range", AttrType.BOOLEAN, False),
)


def _infer_one_hot(ctx: InferContext) -> None:
    x = check_dtype(ctx, "X", _INDEX_DTYPES)
    dtype = dtype_attr(ctx, "dtype")
    if ctx.has_input("depth_tensor"):
        check_dtype(ctx, "depth_tensor", _INDEX_DTYPES)
        depth = -1
    else:
        depth = ctx.attr("depth")
        if depth < 1:
            ctx.fail(f"depth={depth} must be positive (or given by depth_tensor)")
    ctx.set_output("Out", (*x.shape, depth), dtype)


def _one_hot(ctx: KernelContext, x: Any, depth_tensor: Any) -> Any:
    """1 at each id's position of a new last dim of size depth; an id outside [0, depth) is the op's error, or a
    row of zeros with allow_out_of_range."""
    xp = ctx.xp
    depth = ctx.attrs["depth"] if depth_tensor is None else int(to_host(depth_tensor).reshape(-1)[0])
    if not ctx.attrs["allow_out_of_range"]:
        _checked(ctx, x, depth, "id")
    return (x[..., None] == xp.arange(depth)).astype(np_dtype(ctx.attrs["dtype"]))


ONE_HOT_V2 = OpSchema(
    "one_hot_v2",
    inputs=(Slot("X", no_grad=True), Slot("depth_tensor", optional=True, no_grad=True)),
    outputs=(Slot("Out"),),
    attrs=_ONE_HOT_ATTRS,
    infer=_infer_one_hot,
    kernel=_one_hot,
    doc="Out = X's ids as one-hot rows of `depth` (depth_tensor's value when given), of `dtype`.",
)

_ARGSORT_ATTRS = (
    AttrDef("axis", AttrType.INT, -1),
    AttrDef("descending", AttrType.BOOLEAN, False),
    AttrDef("stable", AttrType.BOOLEAN, False),
)


def _infer_argsort(ctx: InferContext) -> None:
    x = check_dtype(ctx, "X", NUMBERS | {"bool"})
    normalize_axis(ctx, ctx.attr("axis"), max(len(x.shape), 1))
    ctx.set_output("Out", x.shape, x.dtype)
    ctx.set_output("Indices", x.shape, "int64")


def _argsort(ctx: KernelContext, x: Any) -> tuple[Any, Any]:
    """A stable sort along ``axis`` (descending: ties keep their order too), NaN last ascending, first
    descending."""
    xp = ctx.xp
    if x.ndim == 0:
        return x.copy(), xp.zeros((), dtype=np.int64)
    axis = ctx.attrs["axis"] % x.ndim
    key = -x if ctx.attrs["descending"] and x.dtype != bool else ~x if ctx.attrs["descending"] else x
    indices = xp.argsort(key, axis=axis, kind="stable").astype(np.int64)
    return xp.take_along_axis(x, indices, axis=axis), indices


def _argsort_grad(ctx: KernelContext, indices: Any, x: Any, dout: Any) -> Any:
    xp = ctx.xp
    if x.ndim == 0:
        return dout.copy()
    dx = xp.zeros(x.shape, dtype=dout.dtype)
    dx[_axis_grid(xp, indices, ctx.attrs["axis"] % x.ndim)] = dout  # Indices is a permutation along the axis
    return dx


ARGSORT_GRAD = OpSchema(
    "argsort_grad",
    inputs=(Slot("Indices"), Slot("X"), Slot("Out@GRAD")),
    outputs=(Slot("X@GRAD"),),
    attrs=_ARGSORT_ATTRS,
    infer=infer_grads("X"),
    kernel=_argsort_grad,
    doc="Gradient of argsort: dOut put back at Indices.",
)
ARGSORT = OpSchema(
    "argsort",
    inputs=(Slot("X"),),
    outputs=(Slot("Out"), Slot("Indices", no_grad=True)),
    attrs=_ARGSORT_ATTRS,
    infer=_infer_argsort,
    grad=lambda g: grad_op(g, ARGSORT_GRAD, ("Indices", "X", "Out@GRAD"), ("X",)),
    kernel=_argsort,
    doc="Out = X sorted along `axis` (descending when asked; stably, ties in index order), Indices = where each "
    "entry came from (int64).",
)


def _infer_masked_select(ctx: InferContext) -> None:
    x, mask = check_dtype(ctx, "X", ALL_DTYPES), check_dtype(ctx, "Mask", frozenset({"bool"}))
    if len(x.shape) != len(mask.shape) or not all(map(compatible, x.shape, mask.shape)):
        ctx.fail(f"Mask {fmt(mask)} must have the shape of X {fmt(x)}")
    ctx.set_output("Y", (-1,), x.dtype)


def _masked_select(ctx: KernelContext, x: Any, mask: Any) -> Any:
    if x.shape != mask.shape:
        raise kernel_error(ctx, f"Mask {list(mask.shape)} does not have the shape of X {list(x.shape)}")
    return x[mask]


def _masked_select_grad(ctx: KernelContext, x: Any, mask: Any, dy: Any) -> Any:
    dx = ctx.xp.zeros(x.shape, dtype=dy.dtype)
    dx[mask] = dy
    return dx


MASKED_SELECT_GRAD = OpSchema(
    "masked_select_grad",
    inputs=(Slot("X"), Slot("Mask", no_grad=True), Slot("Y@GRAD")),
    outputs=(Slot("X@GRAD"),),
    infer=infer_grads("X"),
    kernel=_masked_select_grad,
    doc="Gradient of masked_select: dY put back where Mask holds.",
)
MASKED_SELECT = OpSchema(
    "masked_select",
    inputs=(Slot("X"), Slot("Mask", no_grad=True)),
    outputs=(Slot("Y"),),
    infer=_infer_masked_select,
    grad=lambda g: grad_op(g, MASKED_SELECT_GRAD, ("X", "Mask", "Y@GRAD"), ("X",)),
    kernel=_masked_select,
    doc="Y = the entries of X where Mask holds, in row-major order (1-D).",
)

# -- put_along_axis ---------------------------------------------------------------------------------------------

_PUT_REDUCES = ("assign", "add", "mul", "multiply", "mean", "amin", "amax")
_PUT_ATTRS = (
    AttrDef("Axis", AttrType.INT),
    AttrDef("Reduce", AttrType.STRING, "assign"),
    AttrDef("Include_self", AttrType.BOOLEAN, True),
    AttrDef("broadcast", AttrType.BOOLEAN, True),
)


def _infer_put(ctx: InferContext) -> None:
    x, index = check_dtype(ctx, "Input", NUMBERS), check_dtype(ctx, "Index", _INDEX_DTYPES)
    value = check_dtype(ctx, "Value", NUMBERS)
    same_dtype(ctx, x, value)
    if ctx.attr("Reduce") not in _PUT_REDUCES:
        ctx.fail(f"Reduce={ctx.attr('Reduce')!r} must be one of {', '.join(_PUT_REDUCES)}")
    if len(index.shape) != len(x.shape):
        ctx.fail(f"Index {fmt(index)} must have the rank of Input {fmt(x)}")
    normalize_axis(ctx, ctx.attr("Axis"), len(x.shape))
    ctx.set_output("Result", x.shape, x.dtype)


def _put_grid(ctx: KernelContext, x: Any, index: Any, value: Any) -> tuple[tuple[Any, ...], Any]:
    """The coordinates of Input each entry of Index (broadcast to Input's shape outside the axis) names, and the
    values to put there (Value broadcast to them)."""
    xp, axis = ctx.xp, ctx.attrs["Axis"] % x.ndim
    index = _checked(ctx, index, x.shape[axis], "Index", negative=True)
    shape = [index.shape[axis] if i == axis else d for i, d in enumerate(x.shape)]
    if ctx.attrs["broadcast"]:
        index = xp.broadcast_to(index, shape)
    elif any(n != d for i, (n, d) in enumerate(zip(index.shape, x.shape)) if i != axis and n > d):
        raise kernel_error(ctx, f"Index {list(index.shape)} is larger than Input {list(x.shape)} outside the axis")
    try:
        values = xp.broadcast_to(value, index.shape)
    except ValueError:
        raise kernel_error(ctx, f"Value {list(value.shape)} does not broadcast to Index {list(index.shape)}") from None
    return _axis_grid(xp, index, axis), values


def _put_along_axis(ctx: KernelContext, x: Any, index: Any, value: Any) -> Any:
    """Input with Value put at Index along Axis: assigned (the last of repeated targets wins), or reduced into the
    targets (add, mul, mean, amin, amax), Input's values taking part unless Include_self is false."""
    xp, reduce, keep = ctx.xp, ctx.attrs["Reduce"], ctx.attrs["Include_self"]
    grid, values = _put_grid(ctx, x, index, value)
    out = x.copy()
    if reduce == "assign":
        last = _last_hits(xp, grid, x.shape)  # CuPy assigns repeated targets in no set order: only the last ones
        out[tuple(g[last] for g in grid)] = values[last]
    elif reduce == "mean":
        sums, counts = xp.zeros(x.shape, dtype="float64"), xp.zeros(x.shape, dtype="float64")
        xp.add.at(sums, grid, values)
        xp.add.at(counts, grid, 1.0)
        if keep:
            sums += x
            counts += 1
        out = xp.where(counts > 0, sums / xp.maximum(counts, 1), x).astype(x.dtype)
    else:
        ufunc = {"add": xp.add, "mul": xp.multiply, "multiply": xp.multiply, "amin": xp.minimum, "amax": xp.maximum}
        if not keep:  # each target starts from the last value naming it, the others reduce into it
            last = _last_hits(xp, grid, x.shape)
            out[tuple(g[last] for g in grid)] = values[last]
            grid, values = tuple(g[~last] for g in grid), values[~last]
        _reduce_at(xp, ufunc[reduce], out, grid, values)
    return out


def _reduce_at(xp: Any, ufunc: Any, out: Any, grid: tuple[Any, ...], values: Any) -> None:
    """``ufunc.at(out, grid, values)``: repeated targets reduce every value into them. CuPy has no
    ``multiply.at``: there the values go in rounds, the k-th value of each target in round k (targets are
    distinct within a round), as many rounds as the most repeated target has values."""
    if ufunc is not xp.multiply or xp is np:
        ufunc.at(out, grid, values)
        return
    flat = xp.ravel_multi_index(tuple(g.reshape(-1) for g in grid), out.shape)
    values = values.reshape(-1)
    order = xp.lexsort(xp.stack([xp.arange(flat.shape[0]), flat]))
    ranked = flat[order]
    rank = xp.arange(ranked.shape[0]) - xp.searchsorted(ranked, ranked, side="left")
    target = out.reshape(-1)
    for k in range(int(rank.max()) + 1 if rank.size else 0):
        pick = order[rank == k]
        target[flat[pick]] *= values[pick]


def _last_hits(xp: Any, grid: tuple[Any, ...], shape: tuple[int, ...]) -> Any:
    """Which entries of the coordinates ``grid`` are the last to name their target in row-major order (the
    entry an assignment keeps), so that the others reduce into it."""
    flat = xp.ravel_multi_index(tuple(g.reshape(-1) for g in grid), shape)
    return _last_occurrence(xp, flat).reshape(grid[0].shape)


def _put_along_axis_grad(ctx: KernelContext, x: Any, index: Any, value: Any, dout: Any) -> tuple[Any, Any]:
    """assign: dInput is dResult but at the targets, dValue dResult at the target each value reached (0 for a value
    a later one overwrote); add: dInput is dResult (0 at the targets without Include_self), dValue dResult at the
    targets. Other reductions have no gradient here: an error naming them."""
    xp, reduce = ctx.xp, ctx.attrs["Reduce"]
    if reduce not in ("assign", "add"):
        raise kernel_error(ctx, f"the gradient of put_along_axis with Reduce={reduce!r} is not supported")
    grid, _ = _put_grid(ctx, x, index, value)
    dx = None
    if ctx.wants[0]:
        dx = dout.copy()
        if reduce == "assign" or not ctx.attrs["Include_self"]:
            dx[grid] = 0
    dvalue = None
    if ctx.wants[1]:
        picked = dout[grid]
        if reduce == "assign":
            picked = picked * _last_hits(xp, grid, x.shape)
        dvalue = unbroadcast(xp, picked, value.shape)
    return dx, dvalue


_PUT_INPUTS = (Slot("Input"), Slot("Index", no_grad=True), Slot("Value"))
PUT_ALONG_AXIS_GRAD = OpSchema(
    "put_along_axis_grad",
    inputs=(*_PUT_INPUTS, Slot("Result@GRAD")),
    outputs=(Slot("Input@GRAD"), Slot("Value@GRAD")),
    attrs=_PUT_ATTRS,
    infer=infer_grads("Input", "Value"),
    kernel=_put_along_axis_grad,
    doc="Gradient of put_along_axis (Reduce assign or add).",
)
PUT_ALONG_AXIS = OpSchema(
    "put_along_axis",
    inputs=_PUT_INPUTS,
    outputs=(Slot("Result"),),
    attrs=_PUT_ATTRS,
    infer=_infer_put,
    grad=lambda g: grad_op(g, PUT_ALONG_AXIS_GRAD, ("Input", "Index", "Value", "Result@GRAD"), ("Input", "Value")),
    kernel=_put_along_axis,
    doc="Result = Input with Value put at Index along `Axis`, assigned or reduced (`Reduce`).",
)

# -- unique (Paddle's) ------------------------------------------------------------------------------------------

_UNIQUE_ATTRS = (
    AttrDef("dtype", AttrType.INT, DTYPE_TO_PROTO["int64"]),
    AttrDef("return_index", AttrType.BOOLEAN, False),
    AttrDef("return_inverse", AttrType.BOOLEAN, False),
    AttrDef("return_counts", AttrType.BOOLEAN, False),
    AttrDef("axis", AttrType.INTS, ()),
    AttrDef("is_sorted", AttrType.BOOLEAN, False),
)


def _infer_unique(ctx: InferContext) -> None:
    x = check_dtype(ctx, "X", ALL_DTYPES | {"int8", "int16", "uint8"})
    dtype = dtype_attr(ctx, "dtype")
    if dtype not in _INDEX_DTYPES:
        ctx.fail(f"dtype={ctx.attr('dtype')} ({dtype}) must be int32 or int64")
    axes = list(ctx.attr("axis"))
    if len(axes) > 1:
        ctx.fail(f"axis {axes} names more than one dim")
    shape = [-1]
    if axes:
        axis = normalize_axis(ctx, axes[0], len(x.shape))
        shape = [*x.shape[:axis], -1, *x.shape[axis + 1 :]]
    ctx.set_output("Out", shape, x.dtype)
    for slot in ("Indices", "Index", "Counts"):
        if ctx.has_output(slot):
            ctx.set_output(slot, (-1,), dtype)


def _unique(ctx: KernelContext, x: Any) -> tuple[Any, Any, Any, Any]:
    """The distinct values of X (or slices along ``axis``), sorted, or with ``is_sorted`` false in the order they
    first occur; the index of each one's first occurrence, the index into Out of each entry of X, the counts."""
    xp = ctx.xp
    axes = list(ctx.attrs["axis"])
    axis = axes[0] % x.ndim if axes else None
    out, first, inverse, counts = xp.unique(x, return_index=True, return_inverse=True, return_counts=True, axis=axis)
    inverse = inverse.reshape(-1)
    if not ctx.attrs["is_sorted"]:
        order = xp.argsort(first, kind="stable")
        rank = xp.empty_like(order)
        rank[order] = xp.arange(order.size)
        out = xp.take(out, order, axis=0 if axis is None else axis)
        first, counts, inverse = first[order], counts[order], rank[inverse]
    dtype = np_dtype(ctx.attrs["dtype"])
    return out, first.astype(dtype), inverse.astype(dtype), counts.astype(dtype)


UNIQUE = OpSchema(
    "unique",
    inputs=(Slot("X", no_grad=True),),
    outputs=(
        Slot("Out"),
        Slot("Indices", optional=True),
        Slot("Index", optional=True),
        Slot("Counts", optional=True),
    ),
    attrs=_UNIQUE_ATTRS,
    infer=_infer_unique,
    kernel=_unique,
    doc="Out = the distinct values of X (flattened) or slices along axis, sorted (is_sorted) or in the order they "
    "first occur; Indices: where each first occurs, Index: the position in Out of each entry, Counts: how often.",
)

# -- non_max_suppression (ONNX's NonMaxSuppression; Paddle's multiclass_nms differs: not exported to Paddle) -------


def _infer_nms(ctx: InferContext) -> None:
    boxes, scores = check_dtype(ctx, "Boxes", FLOATS), check_dtype(ctx, "Scores", FLOATS)
    same_dtype(ctx, boxes, scores)
    if len(boxes.shape) != 3 or boxes.shape[2] not in (4, -1) or len(scores.shape) != 3:
        ctx.fail(f"Boxes {fmt(boxes)} must be [batch, boxes, 4] and Scores {fmt(scores)} [batch, classes, boxes]")
    if not (compatible(boxes.shape[0], scores.shape[0]) and compatible(boxes.shape[1], scores.shape[2])):
        ctx.fail(f"Boxes {fmt(boxes)} and Scores {fmt(scores)} disagree on the batch or the number of boxes")
    ctx.set_output("SelectedIndices", (-1, 3), "int64")


def _corners(xp: Any, boxes: Any, centred: bool) -> tuple[Any, Any, Any, Any]:
    """x1, y1, x2, y2 (x1 <= x2, y1 <= y2) of boxes given as [y1, x1, y2, x2] corners (either diagonal) or as
    [x_center, y_center, width, height] (``centred``)."""
    a, b, c, d = (boxes[..., k] for k in range(4))
    if centred:
        return a - c / 2, b - d / 2, a + c / 2, b + d / 2
    return xp.minimum(b, d), xp.minimum(a, c), xp.maximum(b, d), xp.maximum(a, c)


def _overlaps(xp: Any, boxes: Any, centred: bool, threshold: float) -> Any:
    """[B, N, N]: whether box i's IoU with box j (of the same batch) exceeds ``threshold``."""
    x1, y1, x2, y2 = _corners(xp, boxes, centred)
    area = (x2 - x1) * (y2 - y1)
    width = xp.minimum(x2[:, :, None], x2[:, None, :]) - xp.maximum(x1[:, :, None], x1[:, None, :])
    height = xp.minimum(y2[:, :, None], y2[:, None, :]) - xp.maximum(y1[:, :, None], y1[:, None, :])
    inter = xp.where((width > 0) & (height > 0), width * height, 0)
    union = area[:, :, None] + area[:, None, :] - inter
    valid = (inter > 0) & (area[:, :, None] > 0) & (area[:, None, :] > 0) & (union > 0)
    return valid & (inter > threshold * xp.where(union > 0, union, 1))


def _one(value: Any, default: float) -> float:
    return default if value is None or value.size == 0 else float(to_host(value).reshape(-1)[0])


def _nms(ctx: KernelContext, boxes: Any, scores: Any, most: Any, iou: Any, least: Any) -> Any:
    """Greedy suppression for every (batch, class) at once: the candidates visited in order of falling score
    (ties: the lower box index first), one rank per step; a candidate is kept while its class keeps fewer than
    ``most`` and no kept box overlaps it by more than ``iou``. [batch, class, box] rows by batch, class, rank."""
    xp = ctx.xp
    batch, classes, count = scores.shape
    limit = min(max(int(_one(most, 0)), 0), count)
    over = _overlaps(xp, boxes, bool(ctx.attrs["center_point_box"]), _one(iou, 0.0))
    order = xp.argsort(-scores, axis=-1, kind="stable")
    alive = scores > _one(least, -np.inf)
    rank = xp.full(scores.shape, -1, np.int64)
    kept = xp.zeros((batch, classes), np.int64)
    bb, cc = xp.meshgrid(xp.arange(batch), xp.arange(classes), indexing="ij")
    for k in range(count if limit else 0):
        idx = order[:, :, k]
        take = alive[bb, cc, idx] & (kept < limit)
        rank[bb, cc, idx] = xp.where(take, k, rank[bb, cc, idx])
        kept += take
        alive &= ~(take[..., None] & over[bb, idx])
        alive[bb, cc, idx] = False
    b, c, i = xp.nonzero(rank >= 0)
    picked = xp.lexsort(xp.stack((rank[b, c, i], c, b)))
    return xp.stack((b, c, i), axis=1)[picked].astype(np.int64).reshape(-1, 3)


NON_MAX_SUPPRESSION = OpSchema(
    "non_max_suppression",
    inputs=(
        Slot("Boxes", no_grad=True),
        Slot("Scores", no_grad=True),
        Slot("MaxOutputBoxesPerClass", optional=True, no_grad=True),
        Slot("IouThreshold", optional=True, no_grad=True),
        Slot("ScoreThreshold", optional=True, no_grad=True),
    ),
    outputs=(Slot("SelectedIndices"),),
    attrs=(AttrDef("center_point_box", AttrType.INT, 0),),
    infer=_infer_nms,
    kernel=_nms,
    doc="ONNX's NonMaxSuppression: per batch and class, greedily the boxes of highest score (above "
    "ScoreThreshold) that overlap no kept one by an IoU above IouThreshold, at most MaxOutputBoxesPerClass (absent: "
    "none); rows [batch, class, box].",
)

# -- tfidf_vectorizer (ONNX's TfIdfVectorizer on integers; Paddle has none: not exported to Paddle) ---------------

_TFIDF_ATTRS = (
    AttrDef("mode", AttrType.STRING, "TF"),
    AttrDef("min_gram_length", AttrType.INT, 1),
    AttrDef("max_gram_length", AttrType.INT, 1),
    AttrDef("max_skip_count", AttrType.INT, 0),
    AttrDef("ngram_counts", AttrType.INTS, ()),
    AttrDef("ngram_indexes", AttrType.INTS, ()),
    AttrDef("pool_int64s", AttrType.LONGS, ()),
    AttrDef("weights", AttrType.FLOATS, ()),
)


def _infer_tfidf(ctx: InferContext) -> None:
    x = check_dtype(ctx, "X", _INDEX_DTYPES)
    if ctx.attr("mode") not in ("TF", "IDF", "TFIDF"):
        ctx.fail(f"mode {ctx.attr('mode')!r} is none of TF, IDF, TFIDF")
    indexes, counts = list(ctx.attr("ngram_indexes")), list(ctx.attr("ngram_counts"))
    if not indexes or not counts or len(x.shape) not in (1, 2):
        ctx.fail(f"X {fmt(x)} must be [N] or [B, N], and ngram_counts and ngram_indexes must be given")
    width = max(indexes) + 1
    ctx.set_output("Y", (width,) if len(x.shape) == 1 else (x.shape[0], width), "float32")


def _tfidf(ctx: KernelContext, x: Any) -> Any:
    """Per row, how often each n-gram of the pool occurs (n from min_gram_length to max_gram_length, its items
    1 to max_skip_count + 1 apart; unigrams counted once), placed at its ngram_indexes: TF the counts, IDF the
    weights of the n-grams present, TFIDF counts times weights."""
    xp, a = ctx.xp, ctx.attrs
    rows = x.reshape(1, -1) if x.ndim == 1 else x
    pool = np.asarray(a["pool_int64s"], np.int64)
    starts = [*a["ngram_counts"], pool.size]
    found = []
    for size in range(1, len(starts)):
        grams = xp.asarray(pool[starts[size - 1] : starts[size]].reshape(-1, size))
        count = xp.zeros((rows.shape[0], grams.shape[0]), np.float32)
        spacings = range(1, a["max_skip_count"] + 2) if size > 1 else (1,)
        for gap in spacings if a["min_gram_length"] <= size <= a["max_gram_length"] else ():
            length = rows.shape[1] - (size - 1) * gap
            if length <= 0 or not grams.size:
                continue
            window = xp.stack([rows[:, j * gap : j * gap + length] for j in range(size)], axis=-1)
            count += (window[:, :, None, :] == grams).all(axis=-1).sum(axis=1)
        found.append(count)
    counts = xp.concatenate(found, axis=1)
    weights = xp.asarray(np.asarray(a["weights"] or [1.0] * counts.shape[1], np.float32))
    values = {"TF": counts, "IDF": (counts > 0) * weights, "TFIDF": counts * weights}[a["mode"]]
    indexes = np.asarray(a["ngram_indexes"], np.int64)
    out = xp.zeros((rows.shape[0], int(indexes.max()) + 1), np.float32)
    out[:, xp.asarray(indexes)] = values.astype(np.float32)
    return out[0] if x.ndim == 1 else out


TFIDF_VECTORIZER = OpSchema(
    "tfidf_vectorizer",
    inputs=(Slot("X", no_grad=True),),
    outputs=(Slot("Y"),),
    attrs=_TFIDF_ATTRS,
    infer=_infer_tfidf,
    kernel=_tfidf,
    doc="ONNX's TfIdfVectorizer on integer tokens: the n-grams of the pool counted per row (with skips), as TF, "
    "IDF or TFIDF, at their ngram_indexes.",
)

SCHEMAS: tuple[OpSchema, ...] = (
    TFIDF_VECTORIZER,
    NON_MAX_SUPPRESSION,
    UNIQUE,
    GATHER,
    GATHER_GRAD,
    INDEX_SELECT,
    INDEX_SELECT_GRAD,
    GATHER_ND,
    GATHER_ND_GRAD,
    SCATTER_ND_ADD,
    SCATTER_ND_ADD_GRAD,
    SCATTER,
    SCATTER_GRAD,
    INDEX_SAMPLE,
    INDEX_SAMPLE_GRAD,
    TAKE_ALONG_AXIS,
    TAKE_ALONG_AXIS_GRAD,
    ONE_HOT_V2,
    ARGSORT,
    ARGSORT_GRAD,
    MASKED_SELECT,
    MASKED_SELECT_GRAD,
    PUT_ALONG_AXIS,
    PUT_ALONG_AXIS_GRAD,
)
