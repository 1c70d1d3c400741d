"""Neural-network ops: cross-entropy losses, top-k and accuracy, embedding lookup.

Semantics follow PaddlePaddle's legacy operators (``cross_entropy``,
``softmax_with_cross_entropy``, ``top_k``, ``top_k_v2``, ``accuracy``, ``auc``,
``lookup_table``, ``lookup_table_v2``).
Kernels are written once against the array module ``ctx.xp``.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any

import numpy as np

from blockir.ir.attrs import AttrType
from blockir.ir.dtypes import FLOAT_DTYPES, VarKind
from blockir.ir.schema import EMPTY_VAR, AttrDef, GradContext, InferContext, KernelContext, OpSchema, OpSpec, Slot
from blockir.ops.common import (
    FLOATS,
    NUMBERS,
    Kernel,
    check_dtype,
    compatible,
    fmt,
    grad_op,
    in_range,
    infer_like,
    kernel_error,
    min_max,
    normalize_axis,
    numel,
    same_dtype,
    to_host,
)
from blockir.ops.values import SelectedRows, add_rows

ID_DTYPES = ("int64", "int32")


def _float_input(ctx: InferContext, slot: str) -> Any:
    var = ctx.tensor(slot)
    if var.dtype not in FLOAT_DTYPES:
        ctx.fail(f"{slot} {fmt(var)} must be a floating-point tensor")
    if not var.shape:
        ctx.fail(f"{slot} {fmt(var)} must have at least one dimension")
    return var


def _check_label(ctx: InferContext, x: Any, label: Any, axis: int) -> None:
    """Hard labels: integer, same shape as ``x`` but 1 on ``axis``; soft labels: ``x``'s dtype and shape."""
    soft = ctx.attr("soft_label")
    if len(label.shape) != len(x.shape):
        ctx.fail(f"Label {fmt(label)} must have the rank of {fmt(x)}")
    if soft:
        if label.dtype != x.dtype:
            ctx.fail(f"soft Label {fmt(label)} must have the dtype of {fmt(x)}")
    elif label.dtype not in ID_DTYPES:
        ctx.fail(
            f"Label {fmt(label)} must be int64 class indices (soft_label=False); use soft_label=True "
            "for a distribution over classes"
        )
    for i, (d, e) in enumerate(zip(x.shape, label.shape)):
        want = d if soft or i != axis else 1
        if not compatible(want, e):
            ctx.fail(f"Label {fmt(label)} does not match {fmt(x)}: dim {i} must be {want}")


def _label_mask(ctx: KernelContext, label: Any, classes: int) -> tuple[Any, Any]:
    """(valid rows, labels with ignored rows set to 0) of hard labels; raise on labels out of range."""
    xp = ctx.xp
    ignore = ctx.attrs["ignore_index"]
    valid = label != ignore
    bad = valid & ((label < 0) | (label >= classes))
    if bool(bad.any()):
        value = int(label[bad].reshape(-1)[0])
        raise kernel_error(ctx, f"label {value} is out of range [0, {classes}) (ignore_index={ignore})")
    return valid, xp.where(valid, label, 0)


# -- cross_entropy ---------------------------------------------------------------------------

# Fluid declares ignore_index an int for cross_entropy and an int64 for softmax_with_cross_entropy.
_CE_ATTRS = (AttrDef("soft_label", AttrType.BOOLEAN, False), AttrDef("ignore_index", AttrType.INT, -100))


def _infer_cross_entropy(ctx: InferContext) -> None:
    x = _float_input(ctx, "X")
    label = ctx.tensor("Label")
    _check_label(ctx, x, label, len(x.shape) - 1)
    ctx.set_output("Y", (*x.shape[:-1], 1), x.dtype, lod_level=x.lod_level)


def _row_labels(ctx: KernelContext, x: Any, label: Any, slot: str = "X") -> tuple[Any, Any, Any]:
    """(``x``, input ``slot``, as [rows, classes] (a view when ``x`` is C-contiguous), hard labels flattened to one
    per row with ignored rows set to 0, the mask of rows that count or None when all do); raise on labels out of
    range or not one per row."""
    classes = x.shape[-1]
    rows = x.reshape(-1, classes)
    flat = label.reshape(-1)
    if flat.shape[0] != rows.shape[0]:
        raise kernel_error(ctx, f"Label {list(label.shape)} must hold one label per row of {slot} {list(x.shape)}")
    ignore = ctx.attrs["ignore_index"]
    if flat.size and not 0 <= ignore < classes and in_range(flat, classes):
        return rows, flat, None  # the common case, for one reduction: every label a class, so none ignored
    valid, safe = _label_mask(ctx, flat, classes)
    return rows, safe, valid


def _cross_entropy(ctx: KernelContext, x: Any, label: Any) -> Any:
    """Y = -log(X[label]) per row (0 for ``ignore_index``); soft labels: -sum(label * log(X))."""
    xp = ctx.xp
    if ctx.attrs["soft_label"]:
        return -(label * xp.log(x)).sum(axis=-1, keepdims=True)
    rows, flat, valid = _row_labels(ctx, x, label)
    picked = rows[xp.arange(flat.shape[0]), flat]  # a new array: fancy indexing copies
    if valid is not None:
        picked = xp.where(valid, picked, 1)
    xp.log(picked, out=picked)
    xp.negative(picked, out=picked)
    return picked.reshape(*x.shape[:-1], 1)


def _cross_entropy_grad_kernel(ctx: KernelContext, x: Any, label: Any, dy: Any) -> Any:
    xp = ctx.xp
    if ctx.attrs["soft_label"]:
        return -dy * label / x
    rows, flat, valid = _row_labels(ctx, x, label)
    at = (xp.arange(flat.shape[0]), flat)
    picked = rows[at]
    if valid is not None:
        picked = xp.where(valid, picked, 1)
    coef = xp.divide(dy.reshape(-1), picked, out=picked)  # dy is [rows, 1] like Y
    xp.negative(coef, out=coef)
    if valid is not None:
        coef = xp.where(valid, coef, 0)
    dx = xp.zeros(x.shape, dtype=x.dtype)
    dx.reshape(rows.shape)[at] = coef  # a view: dx is C-contiguous
    return dx


CROSS_ENTROPY_GRAD = OpSchema(
    "cross_entropy_grad",
    inputs=(Slot("X"), Slot("Label", no_grad=True), Slot("Y@GRAD")),
    outputs=(Slot("X@GRAD"),),
    attrs=_CE_ATTRS,
    infer=lambda ctx: infer_like(ctx, "X", "X@GRAD"),
    kernel=_cross_entropy_grad_kernel,
    doc="Gradient of cross_entropy: -dY / X[label] at the label, 0 elsewhere (soft: -dY * Label / X).",
)

CROSS_ENTROPY = OpSchema(
    "cross_entropy",
    inputs=(Slot("X"), Slot("Label", no_grad=True)),
    outputs=(Slot("Y"),),
    attrs=_CE_ATTRS,
    infer=_infer_cross_entropy,
    grad=lambda g: grad_op(g, CROSS_ENTROPY_GRAD, ("X", "Label", "Y@GRAD"), ("X",)),
    kernel=_cross_entropy,
    doc="Cross-entropy of probabilities X [N, D] with int64 labels [N, 1] (or soft labels [N, D]): Y [N, 1].",
)


# -- softmax_with_cross_entropy -------------------------------------------------------------------

_SWCE_ATTRS = (
    AttrDef("soft_label", AttrType.BOOLEAN, False),
    AttrDef("ignore_index", AttrType.LONG, -100),
    AttrDef("axis", AttrType.INT, -1),
)


def _infer_softmax_with_cross_entropy(ctx: InferContext) -> None:
    logits = _float_input(ctx, "Logits")
    axis = normalize_axis(ctx, ctx.attr("axis"), len(logits.shape))
    _check_label(ctx, logits, ctx.tensor("Label"), axis)
    loss_shape = list(logits.shape)
    loss_shape[axis] = 1
    ctx.set_output("Softmax", logits.shape, logits.dtype, lod_level=logits.lod_level)
    ctx.set_output("Loss", loss_shape, logits.dtype, lod_level=logits.lod_level)


def _classes_first(a: Any, axis: int) -> Any:
    """A copy of ``a`` with ``axis`` swapped with the first, in C order: reductions over the classes then
    combine whole rows of the other elements at a time (along a short last axis numpy reduces element by
    element, several times slower)."""
    return a.swapaxes(axis, 0).copy()


def _label_columns(ctx: KernelContext, classes_first: Any, label: Any, slot: str) -> tuple[Any, Any, Any, Any]:
    """(``classes_first`` as [classes, columns] (a view), the flat hard labels per column with ignored ones set
    to 0, the mask of the columns that count or None when all do, the column indices) for the hard ``label``,
    its class axis swapped first; raise on labels out of range or not one per column."""
    xp = ctx.xp
    table = classes_first.reshape(classes_first.shape[0], -1)
    _, flat, valid = _row_labels(ctx, table.T, label.reshape(-1), slot)
    return table, flat, valid, xp.arange(flat.shape[0])


def _softmax_with_cross_entropy(ctx: KernelContext, logits: Any, label: Any) -> tuple[Any, Any]:
    """Softmax and cross-entropy in one numerically stable pass (log-sum-exp with the max subtracted), the
    classes swapped first in a buffer of the kernel's own; hard labels checked with one reduction and picked by
    fancy indexing. Softmax is that buffer seen with the classes back at ``axis``."""
    xp = ctx.xp
    axis = ctx.attrs["axis"] % logits.ndim
    shifted = _classes_first(logits, axis)
    shifted -= shifted.max(axis=0)
    target = label.swapaxes(axis, 0)
    scale = valid = None
    if ctx.attrs["soft_label"]:  # -sum(label * (shifted - lse)) = lse * sum(label) - sum(label * shifted)
        minus = (target * shifted).sum(axis=0)
        scale = target.sum(axis=0)
    else:  # lse - shifted[label]
        table, flat, valid, columns = _label_columns(ctx, shifted, target, "Logits")
        minus = table[flat, columns].reshape(shifted.shape[1:])  # a copy: the exp below overwrites shifted
    exp = xp.exp(shifted, out=shifted)
    denom = exp.sum(axis=0)
    loss = xp.log(denom)  # lse, then the loss in its buffer
    exp /= denom
    if scale is not None:
        loss *= scale
    loss -= minus
    if valid is not None:
        loss = xp.where(valid.reshape(loss.shape), loss, 0)
    return exp.swapaxes(0, axis), loss[None].swapaxes(0, axis)


def _softmax_with_cross_entropy_grad_kernel(
    ctx: KernelContext, label: Any, softmax: Any, dloss: Any, dsoftmax: Any
) -> Any:
    """dLogits from dLoss, (Softmax - onehot(Label)) * dLoss (soft: (Softmax - Label) * dLoss; 0 for
    ignored rows), plus, when the Softmax output is used too, Softmax * (dSoftmax - sum(dSoftmax * Softmax)).
    The first term is a C-order array: with the classes last it is computed in that order (the product reading
    dLogits next, with few classes, runs 3x faster on it than on the transposed array the forward kernel's
    Softmax is), else with the classes swapped first, as the forward kernel computes."""
    xp = ctx.xp
    axis = ctx.attrs["axis"] % softmax.ndim
    out = None
    if dloss is not None and axis == softmax.ndim - 1:
        out = xp.array(softmax, order="C")
        if ctx.attrs["soft_label"]:
            out -= label
        else:
            table = out.reshape(-1, out.shape[-1])
            _, flat, valid = _row_labels(ctx, table, label, "Softmax")
            table[xp.arange(flat.shape[0]), flat] -= 1
            if valid is not None:  # dLoss may be broadcast from fewer elements: the mask takes the rows' shape
                dloss = xp.where(valid.reshape(*out.shape[:-1], 1), dloss, 0)
        out *= dloss
    elif dloss is not None:
        grad = _classes_first(softmax, axis)
        target, dloss = label.swapaxes(axis, 0), dloss.swapaxes(axis, 0)
        if ctx.attrs["soft_label"]:
            grad -= target
        else:
            table, flat, valid, columns = _label_columns(ctx, grad, target, "Softmax")
            table[flat, columns] -= 1
            if valid is not None:  # dLoss may be broadcast from fewer elements: the mask takes the rows' shape
                dloss = xp.where(valid.reshape(1, *grad.shape[1:]), dloss, 0)
        grad *= dloss
        out = xp.ascontiguousarray(grad.swapaxes(0, axis))
    if dsoftmax is not None:
        through = dsoftmax * softmax
        through -= softmax * through.sum(axis=axis, keepdims=True)
        out = through if out is None else xp.add(out, through, out=out)
    return xp.zeros_like(softmax) if out is None else out


def swce_schemas(
    type: str,
    infer: Callable[[InferContext], None],
    kernel: Kernel,
    grad_infer: Callable[[InferContext], None],
    grad_kernel: Kernel,
    doc: str,
) -> tuple[OpSchema, OpSchema]:
    """The schemas of softmax_with_cross_entropy and its gradient op, or of a fused loss with its slots
    (``type`` and ``type_grad``): the gradient op reads the gradient of each output that has one (usually
    only Loss)."""
    grad_schema = OpSchema(
        f"{type}_grad",
        inputs=(
            Slot("Label", no_grad=True),
            Slot("Softmax"),
            Slot("Loss@GRAD", optional=True),
            Slot("Softmax@GRAD", optional=True),
        ),
        outputs=(Slot("Logits@GRAD"),),
        attrs=_SWCE_ATTRS,
        infer=grad_infer,
        kernel=grad_kernel,
        doc=f"Gradient of {type} with respect to Logits.",
    )

    def grad(g: GradContext) -> list[OpSpec]:
        reads = [f"{slot}@GRAD" for slot in ("Loss", "Softmax") if any(n != EMPTY_VAR for n in g.output_grad(slot))]
        return grad_op(g, grad_schema, ("Label", "Softmax", *reads), ("Logits",))

    schema = OpSchema(
        type,
        inputs=(Slot("Logits"), Slot("Label", no_grad=True)),
        outputs=(Slot("Softmax"), Slot("Loss")),
        attrs=_SWCE_ATTRS,
        infer=infer,
        grad=grad,
        kernel=kernel,
        doc=doc,
    )
    return schema, grad_schema


SOFTMAX_WITH_CROSS_ENTROPY, SOFTMAX_WITH_CROSS_ENTROPY_GRAD = swce_schemas(
    "softmax_with_cross_entropy",
    _infer_softmax_with_cross_entropy,
    _softmax_with_cross_entropy,
    lambda ctx: infer_like(ctx, "Softmax", "Logits@GRAD"),
    _softmax_with_cross_entropy_grad_kernel,
    "softmax(Logits) along axis and the cross-entropy Loss against Label, computed stably.",
)


# -- top_k, top_k_v2 and accuracy -----------------------------------------------------------------------------


def _infer_top_k(ctx: InferContext, axis: int) -> None:
    """Out and Indices (int64): X's shape with k along ``axis`` (unknown when the K input holds k)."""
    x, k = check_dtype(ctx, "X", NUMBERS), ctx.attr("k")
    if ctx.has_input("K"):
        given = check_dtype(ctx, "K", frozenset(ID_DTYPES))
        if numel(given.shape) not in (-1, 1):
            ctx.fail(f"K {fmt(given)} must hold one value")
        k = -1
    elif k < 1:
        ctx.fail(f"k must be at least 1, got {k}")
    if not x.shape:
        if axis not in (0, -1) or k > 1:
            ctx.fail(f"a 0-D X {fmt(x)} takes axis 0 or -1 and k=1 (axis={axis}, k={k})")
        shape: list[int] = []
    else:
        axis = normalize_axis(ctx, axis, len(x.shape))
        if k > x.shape[axis] >= 0:
            where = "the last dimension" if axis == len(x.shape) - 1 else f"dimension {axis}"
            ctx.fail(f"k={k} exceeds {where} of X {fmt(x)}")
        shape = [k if i == axis else d for i, d in enumerate(x.shape)]
    ctx.set_output("Out", shape, x.dtype, lod_level=x.lod_level)
    ctx.set_output("Indices", shape, "int64", lod_level=x.lod_level)


def _k_of(ctx: KernelContext, k_tensor: Any) -> int:
    """k: the K input's value when given, else the attribute."""
    k = ctx.attrs["k"] if k_tensor is None else int(to_host(k_tensor).reshape(-1)[0])
    if k < 1:
        raise kernel_error(ctx, f"k must be at least 1, got {k}")
    return k


def _top_k_along(ctx: KernelContext, x: Any, k: int, axis: int, largest: bool) -> tuple[Any, Any]:
    """The k largest (``largest``) or smallest entries of X along ``axis``, ordered, and their int64 indices.

    A stable sort: equal values keep their order, the lower index first (Paddle leaves it unspecified); NaN
    ranks above every number, as in Paddle's comparisons (first when largest, last when smallest).
    """
    xp = ctx.xp
    if x.ndim == 0:
        if k != 1:
            raise kernel_error(ctx, f"k={k} exceeds the single entry of a 0-D X")
        return x.copy(), xp.zeros((), dtype="int64")
    if k > x.shape[axis]:
        raise kernel_error(ctx, f"k={k} exceeds dimension {axis} of X {list(x.shape)}")
    key = (-x if x.dtype.kind == "f" else ~x) if largest else x  # ~x reverses integers without -x's overflow
    order = xp.argsort(key, axis=axis, kind="stable")  # NaN sorts last
    if largest and x.dtype.kind == "f":
        nan = xp.take_along_axis(xp.isnan(x), order, axis=axis)
        if bool(nan.any()):  # NaN first, each part in its order
            order = xp.take_along_axis(order, xp.argsort(~nan, axis=axis, kind="stable"), axis=axis)
    indices = xp.take(order, xp.arange(k), axis=axis)
    return xp.take_along_axis(x, indices, axis=axis), indices.astype("int64", copy=False)


def _top_k(ctx: KernelContext, x: Any, k_tensor: Any) -> tuple[Any, Any]:
    """The k largest values of X's last axis, in descending order, and their int64 indices."""
    return _top_k_along(ctx, x, _k_of(ctx, k_tensor), x.ndim - 1, largest=True)


TOP_K = OpSchema(
    "top_k",
    inputs=(Slot("X"), Slot("K", optional=True, no_grad=True)),
    outputs=(Slot("Out"), Slot("Indices", no_grad=True)),
    attrs=(AttrDef("k", AttrType.INT, 1),),
    infer=lambda ctx: _infer_top_k(ctx, -1),
    kernel=_top_k,
    doc="The k largest entries of X's last axis (Out) and their positions (Indices, int64); K overrides k.",
)

_TOP_K_V2_ATTRS = (
    AttrDef("k", AttrType.INT, 1),
    AttrDef("axis", AttrType.INT, -1),
    AttrDef("largest", AttrType.BOOLEAN, True),
    AttrDef("sorted", AttrType.BOOLEAN, True),  # false leaves the order to Paddle's kernel: sorted here
)


def _top_k_v2(ctx: KernelContext, x: Any, k_tensor: Any) -> tuple[Any, Any]:
    """The k largest (smallest) entries of X along ``axis`` and their int64 indices (:func:`_top_k_along`)."""
    axis = ctx.attrs["axis"] % x.ndim if x.ndim else 0
    return _top_k_along(ctx, x, _k_of(ctx, k_tensor), axis, ctx.attrs["largest"])


def _top_k_v2_grad(ctx: KernelContext, x: Any, indices: Any, dout: Any) -> Any:
    """X@GRAD: Out@GRAD at the positions Indices gives along ``axis``, 0 elsewhere."""
    xp = ctx.xp
    if x.ndim == 0:
        return dout.copy()
    axis = ctx.attrs["axis"] % x.ndim
    picked = xp.moveaxis(indices, axis, -1)
    rows, k = math.prod(picked.shape[:-1]), picked.shape[-1]
    grad = xp.zeros((rows, x.shape[axis]), dtype=dout.dtype)
    grad[xp.arange(rows)[:, None], picked.reshape(rows, k)] = xp.moveaxis(dout, axis, -1).reshape(rows, k)
    grad = xp.moveaxis(grad.reshape(*picked.shape[:-1], x.shape[axis]), -1, axis)
    return grad if axis == x.ndim - 1 else xp.ascontiguousarray(grad)


TOP_K_V2_GRAD = OpSchema(
    "top_k_v2_grad",
    inputs=(Slot("X"), Slot("Indices", no_grad=True), Slot("Out@GRAD")),
    outputs=(Slot("X@GRAD"),),
    attrs=_TOP_K_V2_ATTRS,
    infer=lambda ctx: infer_like(ctx, "X", "X@GRAD"),
    kernel=_top_k_v2_grad,
    share_lod=(("X", "X@GRAD"),),
    doc="Gradient of top_k_v2: Out@GRAD scattered to Indices.",
)

TOP_K_V2 = OpSchema(
    "top_k_v2",
    inputs=(Slot("X"), Slot("K", optional=True, no_grad=True)),
    outputs=(Slot("Out"), Slot("Indices", no_grad=True)),
    attrs=_TOP_K_V2_ATTRS,
    infer=lambda ctx: _infer_top_k(ctx, ctx.attr("axis")),
    grad=lambda g: grad_op(g, TOP_K_V2_GRAD, ("X", "Indices", "Out@GRAD"), ("X",)),
    kernel=_top_k_v2,
    share_lod=(("X", "Out"), ("X", "Indices")),
    doc="The k largest (smallest: largest=false) entries of X along `axis`, ordered, and their int64 indices; "
    "K overrides k.",
)


def _infer_accuracy(ctx: InferContext) -> None:
    indices, label = ctx.tensor("Indices"), ctx.tensor("Label")
    if indices.dtype not in ID_DTYPES or len(indices.shape) != 2:
        ctx.fail(f"Indices {fmt(indices)} must be an int64 [N, k] tensor (the output of top_k)")
    if label.dtype not in ID_DTYPES:
        ctx.fail(f"Label {fmt(label)} must be int64 class indices")
    if len(label.shape) != 2 or not compatible(label.shape[1], 1) or not compatible(label.shape[0], indices.shape[0]):
        ctx.fail(f"Label {fmt(label)} must have shape [N, 1] for Indices {fmt(indices)}")
    ctx.set_output("Accuracy", (1,), "float32")
    ctx.set_output("Correct", (1,), "int64")
    ctx.set_output("Total", (1,), "int64")


def _accuracy(ctx: KernelContext, out: Any, indices: Any, label: Any) -> tuple[Any, Any, Any]:
    """The fraction of rows whose label is among their top-k ``Indices`` (0 for an empty batch)."""
    xp = ctx.xp
    rows = indices.shape[0]
    if label.size != rows:
        raise kernel_error(
            ctx, f"Label {list(label.shape)} must have one entry per row of Indices {list(indices.shape)}"
        )
    hits = (indices == label.reshape(rows, 1)).any(axis=1)
    correct = hits.sum(dtype="int64").reshape(1)
    accuracy = correct.astype("float32") / max(rows, 1)
    return accuracy, correct, xp.full((1,), rows, dtype="int64")


ACCURACY = OpSchema(
    "accuracy",
    inputs=(Slot("Out", no_grad=True), Slot("Indices", no_grad=True), Slot("Label", no_grad=True)),
    outputs=(Slot("Accuracy"), Slot("Correct"), Slot("Total")),
    infer=_infer_accuracy,
    kernel=_accuracy,
    doc="Top-k accuracy: Accuracy (float32 [1]) = Correct / Total (int64 [1] each).",
)

# -- auc -------------------------------------------------------------------------------------------


def _infer_auc(ctx: InferContext) -> None:
    predict, label = ctx.tensor("Predict"), ctx.tensor("Label")
    if predict.dtype not in FLOAT_DTYPES or len(predict.shape) != 2 or predict.shape[1] not in (-1, 1, 2):
        ctx.fail(f"Predict {fmt(predict)} must be a float [N, 2] (or [N, 1]) tensor of probabilities")
    if label.dtype not in ID_DTYPES or len(label.shape) != 2 or not compatible(label.shape[0], predict.shape[0]):
        ctx.fail(f"Label {fmt(label)} must be an int [N, 1] tensor for Predict {fmt(predict)}")
    if ctx.attr("curve") != "ROC":
        ctx.fail(f"curve {ctx.attr('curve')!r}: only 'ROC' is computed")
    if ctx.attr("num_thresholds") < 1 or ctx.attr("slide_steps") < 0:
        ctx.fail("num_thresholds must be >= 1 and slide_steps >= 0")
    width = ctx.attr("num_thresholds") + 1
    rows = max(ctx.attr("slide_steps"), 1)
    for slot in ("StatPos", "StatNeg"):
        stat = ctx.tensor(slot)
        if stat.dtype != "int64" or len(stat.shape) != 2 or not all(map(compatible, stat.shape, (rows, width))):
            ctx.fail(f"{slot} {fmt(stat)} must be int64 [{rows}, {width}] (slide_steps rows of num_thresholds + 1)")
    ctx.set_output("AUC", (1,), "float64")
    ctx.set_output("StatPosOut", (rows, width), "int64")
    ctx.set_output("StatNegOut", (rows, width), "int64")


def roc_auc_of(pos: Any, neg: Any) -> float:
    """The area under the ROC curve of positives and negatives counted per threshold bucket (ascending),
    by the trapezoid rule from the highest bucket down (0 when a class is missing)."""
    pos, neg = pos[::-1].astype("float64"), neg[::-1].astype("float64")
    tp = pos.cumsum()  # true positives at each threshold, highest first
    if not tp.size or tp[-1] == 0 or neg.sum() == 0:
        return 0.0
    area = (neg * (tp + (tp - pos))).sum() / 2.0  # each bucket's new negatives times the mean true positives
    return float(area / tp[-1] / neg.sum())


def _auc(ctx: KernelContext, predict: Any, label: Any, stat_pos: Any, stat_neg: Any) -> tuple[Any, Any, Any]:
    xp, thresholds, steps = ctx.xp, ctx.attrs["num_thresholds"], ctx.attrs["slide_steps"]
    if label.size != predict.shape[0]:
        raise kernel_error(
            ctx, f"Label {list(label.shape)} must have one entry per row of Predict {list(predict.shape)}"
        )
    positive = predict[:, -1]
    bucket = xp.clip((positive * thresholds).astype("int64"), 0, thresholds)
    is_pos = label.reshape(-1) > 0
    pos = xp.bincount(bucket[is_pos], minlength=thresholds + 1).astype("int64")
    neg = xp.bincount(bucket[~is_pos], minlength=thresholds + 1).astype("int64")
    if steps == 0:  # accumulate for ever: one row
        stat_pos, stat_neg = stat_pos + pos, stat_neg + neg
    else:  # a window of the last slide_steps batches: the oldest row goes
        stat_pos = xp.concatenate([stat_pos[1:], pos[None]])
        stat_neg = xp.concatenate([stat_neg[1:], neg[None]])
    auc = roc_auc_of(to_host(stat_pos.sum(axis=0)), to_host(stat_neg.sum(axis=0)))
    return xp.asarray([auc], dtype="float64"), stat_pos, stat_neg


AUC = OpSchema(
    "auc",
    inputs=(
        Slot("Predict", no_grad=True),
        Slot("Label", no_grad=True),
        Slot("StatPos", no_grad=True),
        Slot("StatNeg", no_grad=True),
    ),
    outputs=(Slot("AUC"), Slot("StatPosOut"), Slot("StatNegOut")),
    attrs=(
        AttrDef("curve", AttrType.STRING, "ROC"),
        AttrDef("num_thresholds", AttrType.INT, 4095),
        AttrDef("slide_steps", AttrType.INT, 1),
    ),
    infer=_infer_auc,
    kernel=_auc,
    doc="Streaming ROC AUC: each row's positive probability (Predict's last column) counted into one of "
    "num_thresholds + 1 buckets by label; slide_steps = 0 accumulates for ever, N > 0 keeps the last N batches.",
)

# -- lookup_table, lookup_table_v2 -----------------------------------------------------------------------

_LOOKUP_ATTRS = (
    AttrDef("is_sparse", AttrType.BOOLEAN, False),
    AttrDef("padding_idx", AttrType.LONG, -1),
    # Parameter-server training (the distribute pass): a table on the servers, and the admission of its new ids.
    AttrDef("is_distributed", AttrType.BOOLEAN, False),
    AttrDef("entry", AttrType.STRING, ""),
)
_LOOKUP_V2_ATTRS = (
    AttrDef("padding_idx", AttrType.LONG, -1),
    AttrDef("is_sparse", AttrType.BOOLEAN, False),
    # Paddle's parameter-server training: where the table lives and how it is fetched (a lookup here).
    AttrDef("is_distributed", AttrType.BOOLEAN, False),
    AttrDef("remote_prefetch", AttrType.BOOLEAN, False),
    AttrDef("trainer_id", AttrType.INT, 0),
    AttrDef("slot", AttrType.INT, 0),
    AttrDef("height_sections", AttrType.LONGS, ()),
    AttrDef("epmap", AttrType.STRINGS, ()),
    AttrDef("table_names", AttrType.STRINGS, ()),
)


def _check_table(ctx: InferContext) -> tuple[Any, Any]:
    """(W, Ids): W a floating-point [vocab, dim] table, Ids int64 or int32, padding_idx -1 or a row of W."""
    w, ids = ctx.tensor("W"), ctx.tensor("Ids")
    if w.dtype not in FLOAT_DTYPES or len(w.shape) != 2:
        ctx.fail(f"W {fmt(w)} must be a floating-point [vocab, dim] table")
    if ids.dtype not in ID_DTYPES:
        ctx.fail(f"Ids {fmt(ids)} must be int64 or int32")
    padding = ctx.attr("padding_idx")
    if padding != -1 and (padding < 0 or 0 <= w.shape[0] <= padding):
        ctx.fail(f"padding_idx {padding} is out of range for table W {fmt(w)} (-1: no padding)")
    return w, ids


def _infer_lookup_table(ctx: InferContext) -> None:
    w, ids = _check_table(ctx)
    if not ids.shape or not compatible(ids.shape[-1], 1):
        ctx.fail(f"Ids {fmt(ids)} must have a last dimension of 1, e.g. [N, 1] (lookup_table_v2 takes any shape)")
    ctx.set_output("Out", (*ids.shape[:-1], w.shape[1]), w.dtype, lod_level=ids.lod_level)


def _infer_lookup_table_v2(ctx: InferContext) -> None:
    w, ids = _check_table(ctx)
    ctx.set_output("Out", (*ids.shape, w.shape[1]), w.dtype, lod_level=ids.lod_level)


def flat_ids(ctx: KernelContext, ids: Any, height: int) -> Any:
    """Ids flattened to one dimension, checked against the table height."""
    flat = ids.reshape(-1)
    if flat.size:
        low, high = min_max(ctx.xp, flat)
        if low < 0 or high >= height:
            raise kernel_error(
                ctx,
                f"id {low if low < 0 else high} is out of range for a table of height "
                f"{height} (valid ids: 0..{height - 1})",
            )
    return flat


def _looked_up(ctx: KernelContext, w: Any, ids: Any) -> Any:
    """W[Ids] for the Ids flattened, [Ids.size, dim]; rows whose id is ``padding_idx`` are zero."""
    flat = flat_ids(ctx, ids, w.shape[0])
    out = ctx.xp.take(w, flat, axis=0)
    padding = ctx.attrs["padding_idx"]
    if padding != -1:
        out[flat == padding] = 0
    return out


def _lookup_table(ctx: KernelContext, w: Any, ids: Any) -> Any:
    """Out[i] = W[Ids[i]] for Ids [..., 1]: Out [..., dim]."""
    return _looked_up(ctx, w, ids).reshape(*ids.shape[:-1], w.shape[1])


def _lookup_table_v2(ctx: KernelContext, w: Any, ids: Any) -> Any:
    """Out[i] = W[Ids[i]] for Ids of any shape: Out [*Ids.shape, dim]."""
    return _looked_up(ctx, w, ids).reshape(*ids.shape, w.shape[1])


def _lookup_table_grad_kernel(ctx: KernelContext, w: Any, ids: Any, dout: Any) -> Any:
    """W@GRAD: dense (rows of dOut added at their ids) or, with ``is_sparse``, a SelectedRows.

    The SelectedRows keeps repeated ids as separate rows (consumers accumulate);
    rows of ``padding_idx`` are left out, as they get no gradient.
    """
    xp = ctx.xp
    flat = flat_ids(ctx, ids, w.shape[0])
    values = dout.reshape(flat.shape[0], w.shape[1])
    padding = ctx.attrs["padding_idx"]
    if padding != -1:
        keep = flat != padding
        flat, values = flat[keep], values[keep]
    if ctx.attrs["is_sparse"]:
        return SelectedRows(to_host(flat).astype("int64", copy=False), values, int(w.shape[0]))
    grad = xp.zeros(w.shape, dtype=dout.dtype)
    add_rows(grad, flat, values, xp)
    return grad


def _infer_lookup_table_grad(ctx: InferContext) -> None:
    infer_like(ctx, "W", "W@GRAD")
    if ctx.attr("is_sparse"):
        for var in ctx.outputs("W@GRAD"):
            var.kind = VarKind.SELECTED_ROWS


def _lookup_ops(
    op_type: str, attrs: tuple[AttrDef, ...], infer: Callable[[InferContext], None], kernel: Kernel, doc: str
) -> tuple[OpSchema, OpSchema]:
    """An embedding lookup op and its gradient op (dense, or SelectedRows with ``is_sparse``)."""
    backward = OpSchema(
        f"{op_type}_grad",
        inputs=(Slot("W"), Slot("Ids", no_grad=True), Slot("Out@GRAD")),
        outputs=(Slot("W@GRAD"),),
        attrs=attrs,
        infer=_infer_lookup_table_grad,
        kernel=_lookup_table_grad_kernel,
        doc=f"Gradient of {op_type}: dense [V, D], or SelectedRows(rows=Ids, values=dOut) with is_sparse.",
    )
    forward = OpSchema(
        op_type,
        inputs=(Slot("W"), Slot("Ids", no_grad=True)),
        outputs=(Slot("Out"),),
        attrs=attrs,
        infer=infer,
        grad=lambda g: grad_op(g, backward, ("W", "Ids", "Out@GRAD"), ("W",)),
        kernel=kernel,
        share_lod=(("Ids", "Out"),),
        doc=doc,
    )
    return forward, backward


LOOKUP_TABLE, LOOKUP_TABLE_GRAD = _lookup_ops(
    "lookup_table",
    _LOOKUP_ATTRS,
    _infer_lookup_table,
    _lookup_table,
    "Embedding lookup: rows of W [V, D] for int64 Ids [N, 1] -> Out [N, D].",
)
LOOKUP_TABLE_V2, LOOKUP_TABLE_V2_GRAD = _lookup_ops(
    "lookup_table_v2",
    _LOOKUP_V2_ATTRS,
    _infer_lookup_table_v2,
    _lookup_table_v2,
    "Embedding lookup: rows of W [V, D] for int64 or int32 Ids of any shape -> Out [*Ids.shape, D].",
)


# -- attention (ONNX's Attention; no Paddle op: not exportable to Paddle) ---------------------------------------

_ATTENTION_ATTRS = (
    AttrDef("scale", AttrType.FLOAT, 0.0),  # 0: 1 / sqrt(head size)
    AttrDef("is_causal", AttrType.BOOLEAN, False),
    AttrDef("q_num_heads", AttrType.INT, 0),  # 3-D inputs only: heads of Q, and of K and V
    AttrDef("kv_num_heads", AttrType.INT, 0),
    AttrDef("softcap", AttrType.FLOAT, 0.0),  # > 0: scores become softcap * tanh(scores / softcap)
    AttrDef("softmax_dtype", AttrType.STRING, ""),  # "": Q's dtype
    AttrDef("qk_matmul_output_mode", AttrType.INT, 0),
    AttrDef("left_window_size", AttrType.INT, -1),  # -1: unbounded
    AttrDef("right_window_size", AttrType.INT, -1),
)


def _heads(ctx: InferContext, var: Any, heads_attr: str) -> tuple[int, int, int, int]:
    """(batch, heads, sequence, head size) of a 3-D [B, S, heads * size] or 4-D [B, heads, S, size] input."""
    shape = tuple(var.shape)
    if len(shape) == 4:
        return shape[0], shape[1], shape[2], shape[3]
    heads = ctx.attr(heads_attr)
    if len(shape) != 3 or heads <= 0:
        ctx.fail(f"{fmt(var)} must be 4-D [B, heads, S, size], or 3-D [B, S, hidden] with {heads_attr} > 0")
    return shape[0], heads, shape[1], -1 if shape[2] < 0 else shape[2] // heads


def _infer_attention(ctx: InferContext) -> None:
    q, k, v = (check_dtype(ctx, slot, FLOATS) for slot in ("Q", "K", "V"))
    if not len(q.shape) == len(k.shape) == len(v.shape):
        ctx.fail(f"Q {fmt(q)}, K {fmt(k)} and V {fmt(v)} must have one rank (3 or 4)")
    batch, q_heads, q_len, _ = _heads(ctx, q, "q_num_heads")
    _, kv_heads, kv_len, size = _heads(ctx, k, "kv_num_heads")
    v_size = _heads(ctx, v, "kv_num_heads")[3]
    if q_heads > 0 and kv_heads > 0 and q_heads % kv_heads:
        ctx.fail(f"Q's {q_heads} heads must be a multiple of K's {kv_heads}")
    if ctx.has_input("PastKey"):
        past = ctx.tensor("PastKey").shape[2]
        kv_len = -1 if past < 0 or kv_len < 0 else past + kv_len
    if len(q.shape) == 3:
        ctx.set_output("Y", (batch, q_len, -1 if min(q_heads, v_size) < 0 else q_heads * v_size), q.dtype)
    else:
        ctx.set_output("Y", (batch, q_heads, q_len, v_size), q.dtype)
    ctx.set_output("PresentKey", (batch, kv_heads, kv_len, size), q.dtype)
    ctx.set_output("PresentValue", (batch, kv_heads, kv_len, v_size), q.dtype)
    ctx.set_output("QKMatmulOutput", (batch, q_heads, q_len, kv_len), q.dtype)


def _split_heads(a: Any, heads: int) -> Any:
    """[B, S, heads * size] -> [B, heads, S, size]."""
    return a.reshape(a.shape[0], a.shape[1], heads, -1).transpose(0, 2, 1, 3)


def _attention_bias(ctx: KernelContext, q: Any, kv_len: int, mask: Any, past: int, nonpad: Any) -> Any:
    """The additive bias of the scores: the mask (boolean: 0 where true, -inf where false; padded with -inf
    to the keys' length), then -inf where causality, the window or nonpad_kv_seqlen forbid a key."""
    xp, a = ctx.xp, ctx.attrs
    zero, ninf = q.dtype.type(0), q.dtype.type(-np.inf)
    q_len = q.shape[2]
    bias = xp.zeros((q_len, kv_len), q.dtype)
    if mask is not None:
        if mask.shape[-1] < kv_len:
            widths = [(0, 0)] * (mask.ndim - 1) + [(0, kv_len - mask.shape[-1])]
            mask = xp.pad(mask, widths, constant_values=False if mask.dtype == bool else -np.inf)
        bias = bias + (xp.where(mask, zero, ninf) if mask.dtype == bool else mask.astype(q.dtype, copy=False))
    left, right = a["left_window_size"], a["right_window_size"]
    if a["is_causal"] or left >= 0 or right >= 0:
        # a query at i attends a key at j when j - i is within [offset - left, offset + right], offset the keys
        # before this block of queries: the past's length, or per batch nonpad_kv_seqlen - q_len
        per_batch = nonpad is not None and past == 0
        offset = (nonpad.reshape(-1, 1, 1) - q_len) if per_batch else past
        ahead = xp.arange(kv_len).reshape(1, kv_len) - xp.arange(q_len).reshape(q_len, 1) - offset
        allowed = xp.ones(ahead.shape, bool)
        if a["is_causal"]:
            allowed &= ahead <= 0
        if left >= 0:
            allowed &= -ahead <= left
        if right >= 0:
            allowed &= ahead <= right
        allowed = allowed.reshape(-1, 1, q_len, kv_len) if per_batch else allowed
        bias = bias + xp.where(allowed, zero, ninf)
    if nonpad is not None:
        keep = xp.arange(kv_len).reshape(1, kv_len) < nonpad.reshape(-1, 1)
        bias = bias + xp.where(keep, zero, ninf).reshape(-1, 1, 1, kv_len)
    return bias


def _guarded_softmax(xp: Any, scores: Any) -> Any:
    """Softmax over the last axis; a row of -inf only gives zeros (not NaN)."""
    top = scores.max(axis=-1, keepdims=True)
    exp = xp.exp(scores - xp.where(xp.isneginf(top), 0, top))
    total = exp.sum(axis=-1, keepdims=True)
    return exp / xp.where(total == 0, 1, total)


def _attention(
    ctx: KernelContext, q: Any, k: Any, v: Any, mask: Any, past_key: Any, past_value: Any, nonpad: Any
) -> tuple[Any, Any, Any, Any]:
    xp, a = ctx.xp, ctx.attrs
    three_d = q.ndim == 3
    if three_d:
        q, k, v = (
            _split_heads(q, a["q_num_heads"]),
            _split_heads(k, a["kv_num_heads"]),
            _split_heads(v, a["kv_num_heads"]),
        )
    if (past_key is None) != (past_value is None):
        raise kernel_error(ctx, "PastKey and PastValue must be given together")
    if past_key is not None:
        k, v = xp.concatenate((past_key, k), axis=2), xp.concatenate((past_value, v), axis=2)
    present_key, present_value = k, v
    scale = a["scale"] or 1.0 / math.sqrt(q.shape[3])
    root = q.dtype.type(math.sqrt(scale))  # Q and K each scaled by its root, as ONNX's function body does
    bias = _attention_bias(ctx, q, k.shape[2], mask, 0 if past_key is None else past_key.shape[2], nonpad)
    if q.shape[1] != k.shape[1]:
        if q.shape[1] % k.shape[1]:
            raise kernel_error(ctx, f"Q's {q.shape[1]} heads are not a multiple of K's {k.shape[1]}")
        k, v = (xp.repeat(t, q.shape[1] // k.shape[1], axis=1) for t in (k, v))  # grouped-query: h0, h0, h1, ...
    scores = xp.matmul(q * root, xp.swapaxes(k * root, -1, -2))
    if a["softcap"] > 0:
        scores = xp.tanh(scores / q.dtype.type(a["softcap"])) * q.dtype.type(a["softcap"])
    biased = scores + bias
    if a["softmax_dtype"]:
        biased = biased.astype(a["softmax_dtype"])
    probs = _guarded_softmax(xp, biased)
    probs = xp.where(xp.isneginf(bias.max(axis=-1, keepdims=True)), 0, probs).astype(q.dtype)  # no key at all: 0
    mode = a["qk_matmul_output_mode"]
    qk = {2: biased.astype(q.dtype), 3: probs}.get(mode, scores) if ctx.wants[3] else None
    y = xp.matmul(probs, v)
    if three_d:
        y = y.transpose(0, 2, 1, 3).reshape(y.shape[0], y.shape[2], -1)
    return y, present_key, present_value, qk


ATTENTION = OpSchema(
    "attention",
    inputs=(
        Slot("Q"),
        Slot("K"),
        Slot("V"),
        Slot("AttnMask", optional=True),
        Slot("PastKey", optional=True),
        Slot("PastValue", optional=True),
        Slot("NonpadKVSeqlen", optional=True, no_grad=True),
    ),
    outputs=(
        Slot("Y"),
        Slot("PresentKey", optional=True),
        Slot("PresentValue", optional=True),
        Slot("QKMatmulOutput", optional=True),
    ),
    attrs=_ATTENTION_ATTRS,
    infer=_infer_attention,
    kernel=_attention,
    doc="ONNX's Attention (opsets 23-25): softmax(Q K^T * scale + mask) V over heads, with a causal or "
    "sliding-window mask, grouped-query heads, a KV cache (Past* in, Present* out), softcap and the scores "
    "(QKMatmulOutput: 0 or 1 the scaled (softcapped) product, 2 with the mask added, 3 the probabilities). "
    "Paddle has no such op.",
)


# -- linear_attention (ONNX's LinearAttention; no Paddle op) ------------------------------------------------------

_UPDATE_RULES = {"linear": (False, False), "gated": (True, False), "delta": (False, True), "gated_delta": (True, True)}


def _infer_linear_attention(ctx: InferContext) -> None:
    q, k, v = (check_dtype(ctx, slot, FLOATS) for slot in ("Query", "Key", "Value"))
    q_heads, kv_heads, rule = ctx.attr("q_num_heads"), ctx.attr("kv_num_heads"), ctx.attr("update_rule")
    if rule not in _UPDATE_RULES:
        ctx.fail(f"update_rule={rule!r} must be one of {', '.join(_UPDATE_RULES)}")
    gating, delta = _UPDATE_RULES[rule]
    for slot, needed in (("Decay", gating), ("Beta", delta)):
        if ctx.has_input(slot) != needed:
            ctx.fail(f"update_rule={rule!r} {'takes' if needed else 'takes no'} {slot}")
    if q_heads <= 0 or kv_heads <= 0 or q_heads % kv_heads:
        ctx.fail(f"q_num_heads={q_heads} must be a positive multiple of kv_num_heads={kv_heads}")
    if not len(q.shape) == len(k.shape) == len(v.shape) == 3:
        ctx.fail(f"Query {fmt(q)}, Key {fmt(k)} and Value {fmt(v)} must be 3-D [B, T, heads * size]")
    key_size = -1 if q.shape[2] < 0 else q.shape[2] // q_heads
    value_size = -1 if v.shape[2] < 0 else v.shape[2] // kv_heads
    ctx.set_output("Output", (q.shape[0], q.shape[1], -1 if value_size < 0 else q_heads * value_size), q.dtype)
    state_dtype = ctx.tensor("PastState").dtype if ctx.has_input("PastState") else q.dtype
    ctx.set_output("PresentState", (q.shape[0], kv_heads, key_size, value_size), state_dtype)


def _linear_attention(
    ctx: KernelContext, query: Any, key: Any, value: Any, past: Any, decay: Any, beta: Any
) -> tuple[Any, Any]:
    """The recurrence S_t = exp(g_t) S_{t-1} + k_t (x) v'_t, v'_t = beta_t (v_t - S^T k_t) with delta
    correction (else v_t), o_t = scale * q_t S_t (grouped query heads reading their KV head's state), one step
    per position, in float32 at least."""
    xp, a = ctx.xp, ctx.attrs
    q_heads, kv_heads = a["q_num_heads"], a["kv_num_heads"]
    gating, delta = _UPDATE_RULES[a["update_rule"]]
    work = np.promote_types(query.dtype, np.float32)
    batch, steps = query.shape[:2]
    q, k, v = (_split_heads(t, h).astype(work) for t, h in ((query, q_heads), (key, kv_heads), (value, kv_heads)))
    key_size, value_size = k.shape[3], v.shape[3]
    if decay is not None:  # [B, T, kv heads] or [B, T, kv heads * key size] -> [B, kv heads, T, 1 or key size]
        decay = _split_heads(decay, kv_heads).astype(work)
    if beta is not None:  # [B, T, kv heads or 1] -> [B, kv heads or 1, T, 1]
        beta = beta.reshape(batch, steps, -1, 1).transpose(0, 2, 1, 3).astype(work)
    shape = (batch, kv_heads, key_size, value_size)
    if past is not None and tuple(past.shape) != shape:
        raise kernel_error(ctx, f"PastState of shape {list(past.shape)} must be {list(shape)}")
    state = xp.zeros(shape, work) if past is None else past.astype(work)
    scale = a["scale"] or 1.0 / math.sqrt(key_size)
    out = xp.empty((batch, q_heads, steps, value_size), work)
    for t in range(steps):
        k_t, v_t = k[:, :, t], v[:, :, t]
        if gating:
            state = state * xp.exp(decay[:, :, t])[..., None]
        if delta:
            v_t = beta[:, :, t] * (v_t - xp.einsum("bhdm,bhd->bhm", state, k_t))
        state = state + k_t[..., :, None] * v_t[..., None, :]
        read = xp.repeat(state, q_heads // kv_heads, axis=1)
        out[:, :, t] = scale * xp.einsum("bhd,bhdm->bhm", q[:, :, t], read)
    output = out.transpose(0, 2, 1, 3).reshape(batch, steps, -1).astype(query.dtype)
    return output, state.astype(query.dtype if past is None else past.dtype)


LINEAR_ATTENTION = OpSchema(
    "linear_attention",
    inputs=(
        Slot("Query"),
        Slot("Key"),
        Slot("Value"),
        Slot("PastState", optional=True),
        Slot("Decay", optional=True),
        Slot("Beta", optional=True),
    ),
    outputs=(Slot("Output"), Slot("PresentState", optional=True)),
    attrs=(
        AttrDef("q_num_heads", AttrType.INT),
        AttrDef("kv_num_heads", AttrType.INT),
        AttrDef("scale", AttrType.FLOAT, 0.0),  # 0: 1 / sqrt(key head size)
        AttrDef("update_rule", AttrType.STRING, "gated_delta"),
    ),
    infer=_infer_linear_attention,
    kernel=_linear_attention,
    doc="ONNX's LinearAttention (opset 27): a recurrent state [B, kv heads, dk, dv] updated per position by the "
    "linear, gated (decay), delta (beta) or gated_delta rule and read by the queries; 3-D [B, T, heads * size] "
    "inputs. Paddle has no such op.",
)


# -- rotary_embedding (ONNX's RotaryEmbedding; Paddle's fused_rotary_position_embedding differs) -------------------


def _infer_rotary_embedding(ctx: InferContext) -> None:
    x = check_dtype(ctx, "X", FLOATS)
    for slot in ("CosCache", "SinCache"):
        same_dtype(ctx, x, check_dtype(ctx, slot, FLOATS))
    if len(x.shape) not in (3, 4) or (len(x.shape) == 3 and ctx.attr("num_heads") <= 0):
        ctx.fail(f"X {fmt(x)} must be 4-D [B, heads, S, size], or 3-D [B, S, hidden] with num_heads > 0")
    ctx.set_output("Out", x.shape, x.dtype)


def _rotary_embedding(ctx: KernelContext, x: Any, cos: Any, sin: Any, position_ids: Any) -> Any:
    """Rotate the first rotary_dim features of each head (pairs: halves, or neighbours when interleaved) by the
    angles of the caches' rows at the positions (position_ids, else the caches are [B, S, rotary_dim / 2])."""
    xp, a = ctx.xp, ctx.attrs
    heads = x.transpose(0, 2, 1, 3) if x.ndim == 4 else x.reshape(x.shape[0], x.shape[1], a["num_heads"], -1)
    dim = a["rotary_embedding_dim"] or heads.shape[3]
    if position_ids is not None:
        cos, sin = cos[position_ids], sin[position_ids]
    if cos.shape[-1] != dim // 2 or sin.shape[-1] != dim // 2:
        raise kernel_error(ctx, f"the caches' last dim {cos.shape[-1]} must be rotary_embedding_dim / 2 = {dim // 2}")
    cos, sin = cos[:, :, None], sin[:, :, None]  # [B, S, 1, dim / 2]
    rotated = heads[..., :dim]
    if a["interleaved"]:
        x1, x2 = rotated[..., 0::2], rotated[..., 1::2]
        turned = xp.stack((cos * x1 - sin * x2, sin * x1 + cos * x2), axis=-1).reshape(rotated.shape)
    else:
        x1, x2 = rotated[..., : dim // 2], rotated[..., dim // 2 :]
        turned = xp.concatenate((cos * x1 - sin * x2, sin * x1 + cos * x2), axis=-1)
    out = xp.concatenate((turned, heads[..., dim:]), axis=-1).astype(x.dtype, copy=False)
    return out.transpose(0, 2, 1, 3) if x.ndim == 4 else out.reshape(x.shape)


ROTARY_EMBEDDING = OpSchema(
    "rotary_embedding",
    inputs=(Slot("X"), Slot("CosCache"), Slot("SinCache"), Slot("PositionIds", optional=True, no_grad=True)),
    outputs=(Slot("Out"),),
    attrs=(
        AttrDef("interleaved", AttrType.BOOLEAN, False),
        AttrDef("rotary_embedding_dim", AttrType.INT, 0),  # 0: the whole head
        AttrDef("num_heads", AttrType.INT, 0),  # 3-D X only
    ),
    infer=_infer_rotary_embedding,
    kernel=_rotary_embedding,
    doc="ONNX's RotaryEmbedding (opset 23): rotary position embedding of 4-D [B, heads, S, size] or 3-D "
    "[B, S, hidden] X by cos and sin caches ([max position, dim / 2] read at PositionIds [B, S], or [B, S, "
    "dim / 2]). Paddle's fused_rotary_position_embedding has other inputs and layout.",
)


# -- dft and stft (ONNX's DFT and STFT: complex values as a last dim of 2; no Paddle op) ---------------------------


def _complex(xp: Any, x: Any) -> Any:
    """[..., 1] (real) or [..., 2] (real, imaginary) as complex values [...]."""
    return x[..., 0] if x.shape[-1] == 1 else x[..., 0] + 1j * x[..., 1]


def _pairs(xp: Any, z: Any, dtype: Any) -> Any:
    """Complex values [...] as [..., 2] of ``dtype``."""
    return xp.stack((z.real, z.imag), axis=-1).astype(dtype)


def _check_signal(ctx: InferContext, slot: str) -> Any:
    x = check_dtype(ctx, slot, FLOATS)
    if len(x.shape) < 2 or x.shape[-1] not in (1, 2, -1):
        ctx.fail(f"{slot} {fmt(x)} must end in a dim of 1 (real) or 2 (real, imaginary)")
    return x


def _dft_size(attrs: Any, size: int) -> int:
    """The transform's length: dft_length, else the axis's size (2 (size - 1) for a one-sided inverse)."""
    if attrs["dft_length"] > 0:
        return int(attrs["dft_length"])
    if size < 0:
        return -1
    return 2 * (size - 1) if attrs["inverse"] and attrs["onesided"] else size


def _infer_dft(ctx: InferContext) -> None:
    x = _check_signal(ctx, "X")
    axis = normalize_axis(ctx, ctx.attr("axis"), len(x.shape) - 1)
    length = _dft_size({k: ctx.attr(k) for k in ("dft_length", "inverse", "onesided")}, x.shape[axis])
    shape = list(x.shape)
    if ctx.attr("inverse"):
        shape[axis], shape[-1] = length, 1 if ctx.attr("onesided") else 2
    else:
        shape[axis] = length // 2 + 1 if ctx.attr("onesided") and length >= 0 else length
        shape[-1] = 2
    ctx.set_output("Out", shape, x.dtype)


def _dft(ctx: KernelContext, x: Any) -> Any:
    """The discrete Fourier transform along ``axis``, or its inverse (normalized by 1/n); one-sided: the first
    n / 2 + 1 bins of a forward transform, or the real signal of an inverse one from those bins."""
    xp, a = ctx.xp, ctx.attrs
    axis = a["axis"] % (x.ndim - 1)
    n = _dft_size(a, x.shape[axis])
    z = _complex(xp, x)
    if not a["inverse"]:
        out = xp.fft.fft(z, n=n, axis=axis)
        return _pairs(xp, out[(slice(None),) * axis + (slice(0, n // 2 + 1),)] if a["onesided"] else out, x.dtype)
    if a["onesided"]:
        return xp.fft.irfft(z, n=n, axis=axis)[..., None].astype(x.dtype)
    return _pairs(xp, xp.fft.ifft(z, n=n, axis=axis), x.dtype)


DFT = OpSchema(
    "dft",
    inputs=(Slot("X"),),
    outputs=(Slot("Out"),),
    attrs=(
        AttrDef("axis", AttrType.INT, 1),  # a dim of X before its last
        AttrDef("inverse", AttrType.BOOLEAN, False),
        AttrDef("onesided", AttrType.BOOLEAN, False),
        AttrDef("dft_length", AttrType.INT, 0),  # 0: see _dft_size
    ),
    infer=_infer_dft,
    kernel=_dft,
    doc="ONNX's DFT: the (inverse, one-sided) discrete Fourier transform along axis of X [..., 1 or 2] "
    "(real, or real and imaginary parts), zero-padded or cut to dft_length. Paddle's fft_c2c, fft_r2c and "
    "fft_c2r take complex tensors, which blockir lacks.",
)


def _infer_stft(ctx: InferContext) -> None:
    x = _check_signal(ctx, "Signal")
    if len(x.shape) != 3:
        ctx.fail(f"Signal {fmt(x)} must be [batch, length, 1 or 2]")
    frame, step = ctx.attr("frame_length"), ctx.attr("frame_step")
    if frame <= 0 or step <= 0:
        ctx.fail(f"frame_length={frame} and frame_step={step} must be positive")
    frames = -1 if x.shape[1] < 0 else (x.shape[1] - frame) // step + 1
    bins = frame // 2 + 1 if ctx.attr("onesided") else frame
    ctx.set_output("Out", (x.shape[0], frames, bins, 2), x.dtype)


def _stft(ctx: KernelContext, signal: Any, window: Any) -> Any:
    """The DFT of each frame (frame_length samples every frame_step, times Window), one-sided if asked."""
    xp, a = ctx.xp, ctx.attrs
    frame, step = a["frame_length"], a["frame_step"]
    frames = (signal.shape[1] - frame) // step + 1
    if frames <= 0:
        raise kernel_error(ctx, f"a signal of {signal.shape[1]} samples holds no frame of {frame}")
    at = (xp.arange(frames) * step)[:, None] + xp.arange(frame)  # [frames, frame_length]
    z = _complex(xp, signal)[:, at]
    if window is not None:
        z = z * window
    out = xp.fft.fft(z, axis=-1)
    return _pairs(xp, out[..., : frame // 2 + 1] if a["onesided"] else out, signal.dtype)


STFT = OpSchema(
    "stft",
    inputs=(Slot("Signal"), Slot("Window", optional=True)),
    outputs=(Slot("Out"),),
    attrs=(
        AttrDef("frame_step", AttrType.INT),
        AttrDef("frame_length", AttrType.INT),
        AttrDef("onesided", AttrType.BOOLEAN, True),
    ),
    infer=_infer_stft,
    kernel=_stft,
    doc="ONNX's STFT: the DFT of each windowed frame of Signal [batch, length, 1 or 2] -> [batch, frames, "
    "bins, 2]. Paddle's stft takes complex tensors and other parameters.",
)


SCHEMAS: tuple[OpSchema, ...] = (
    AUC,
    CROSS_ENTROPY,
    CROSS_ENTROPY_GRAD,
    SOFTMAX_WITH_CROSS_ENTROPY,
    SOFTMAX_WITH_CROSS_ENTROPY_GRAD,
    TOP_K,
    TOP_K_V2,
    TOP_K_V2_GRAD,
    ACCURACY,
    LOOKUP_TABLE,
    LOOKUP_TABLE_GRAD,
    LOOKUP_TABLE_V2,
    LOOKUP_TABLE_V2_GRAD,
    ATTENTION,
    LINEAR_ATTENTION,
    ROTARY_EMBEDDING,
    DFT,
    STFT,
)
