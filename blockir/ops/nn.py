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

from blockir.ir.attrs import AttrType
from blockir.ir.dtypes import FLOAT_DTYPES, VarKind
from blockir.ir.schema import EMPTY_VAR, AttrDef, GradContext, InferContext, KernelContext, OpSchema, OpSpec, Slot
from blockir.ops.common import (
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
)
