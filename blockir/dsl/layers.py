"""Layers: functions that append ops to the default main program (Fluid 1.x names and signatures).

Every layer checks its arguments, creates its output variables and appends its
ops; the ops' schemas infer the outputs' shapes and dtypes at once (-1 for the
batch), and an input they reject raises a :class:`~blockir.errors.ShapeError`
naming the layer, e.g. ``layers.fc: mul: ...``.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

from blockir.dsl import control_flow, framework, math_layers
from blockir.dsl.control_flow import *  # noqa: F403  (its __all__, re-exported: control flow and tensor arrays)
from blockir.dsl.entry import CountFilterEntry, ProbabilityEntry
from blockir.dsl.initializer import Constant, Initializer, Normal
from blockir.dsl.layer_helper import LayerHelper
from blockir.dsl.param_attr import ParamAttr
from blockir.dsl.rnn_layers import gru, lstm, simple_rnn
from blockir.dsl.variable import Variable, tensor_dtype, tensor_shape
from blockir.dsl.vision import (
    affine_channel,
    image_resize,
    pad,
    pad3d,
    pixel_shuffle,
    pixel_unshuffle,
    resize_bicubic,
    resize_bilinear,
    resize_linear,
    resize_nearest,
    resize_trilinear,
)
from blockir.errors import BlockirError
from blockir.ir import core
from blockir.ir.dtypes import DTYPE_TO_PROTO, to_dtype

__all__ = [
    "accuracy",
    "adaptive_pool2d",
    "adaptive_pool3d",
    "affine_channel",
    "assign",
    "auc",
    "batch_norm",
    "cast",
    "concat",
    "conv2d",
    "conv2d_transpose",
    "conv3d",
    "conv3d_transpose",
    "cross_entropy",
    "data",
    "dropout",
    "elementwise_add",
    "elementwise_div",
    "elementwise_mul",
    "elementwise_sub",
    "embedding",
    "fc",
    "fill_constant",
    "flatten",
    "group_norm",
    "gru",
    "image_resize",
    "instance_norm",
    "layer_norm",
    "lstm",
    "matmul",
    "mean",
    "pad",
    "pad3d",
    "pixel_shuffle",
    "pixel_unshuffle",
    "pool2d",
    "pool3d",
    "reduce_mean",
    "reduce_sum",
    "relu",
    "reshape",
    "resize_bicubic",
    "resize_bilinear",
    "resize_linear",
    "resize_nearest",
    "resize_trilinear",
    "scale",
    "sequence_pool",
    "sigmoid",
    "simple_rnn",
    "slice",
    "softmax",
    "softmax_with_cross_entropy",
    "split",
    "square_error_cost",
    "squeeze",
    "tanh",
    "transpose",
    "unsqueeze",
]
__all__ += control_flow.__all__
__all__ += math_layers.__all__  # activations, math, comparisons, indexing: served by __getattr__ below

_POOL_TYPES = ("SUM", "AVERAGE", "SQRT", "MAX", "LAST", "FIRST")
_LABEL_DTYPES = ("int64",)


def __getattr__(name: str) -> Any:
    """The layers of :mod:`blockir.dsl.math_layers` (``layers.relu6``, ``layers.gather``, ...), looked up there so
    that those named like builtins (``range``, ``abs``, ``round``, ``pow``) do not shadow them in this module."""
    if name in math_layers.__all__:
        return getattr(math_layers, name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def data(name: str, shape: Sequence[int | None], dtype: Any = "float32", lod_level: int = 0) -> Variable:
    """A variable fed from outside (``fluid.data``): ``shape`` as given, -1 (or None) for unknown dims.

    It lives in the main program's global block, is checked against what is fed
    (``need_check_feed``) and never gets a gradient (``stop_gradient``).
    """
    if not isinstance(name, str) or not name:
        raise BlockirError(f"data: name must be a non-empty string, got {name!r}")
    if isinstance(shape, (str, bytes)) or not isinstance(shape, Sequence):
        raise BlockirError(f"data {name!r}: shape must be a list of ints, got {shape!r}")
    dims = [-1 if d is None else d for d in shape]
    if any(isinstance(d, bool) or not isinstance(d, int) or d < -1 for d in dims):
        raise BlockirError(f"data {name!r}: shape {list(shape)} must hold ints >= 0, or -1 / None for unknown")
    if not isinstance(lod_level, int) or lod_level < 0:
        raise BlockirError(f"data {name!r}: lod_level must be a non-negative int, got {lod_level!r}")
    block = framework.default_main_program().global_block()
    var = Variable(
        name, dtype=to_dtype(dtype), shape=dims, lod_level=lod_level, stop_gradient=True, need_check_feed=True
    )
    return block.add_var(var)


# -- fully connected and embedding ------------------------------------------------


def fc(
    input: core.Variable | Sequence[core.Variable],
    size: int,
    num_flatten_dims: int = 1,
    param_attr: Any = None,
    bias_attr: Any = None,
    act: str | None = None,
    name: str | None = None,
) -> Variable:
    """``act(sum_i flatten(input_i) @ W_i + b)``.

    Each input is flattened to a matrix at ``num_flatten_dims`` (-1: all but the
    last dim) and multiplied by its own weight (``mul``); several inputs are
    summed (``sum``). ``param_attr`` may be a list, one per input.
    ``bias_attr=False`` means no bias.
    """
    helper = LayerHelper("fc", name)
    inputs = [helper.check_variable(x, "input") for x in (input if isinstance(input, (list, tuple)) else [input])]
    if not inputs:
        raise helper.error("input is an empty list")
    for x in inputs:
        helper.check_float(x, "input")
    dtype = tensor_dtype(inputs[0])
    if any(x.dtype != dtype for x in inputs):
        raise helper.error(f"inputs have different dtypes: {', '.join(f'{x.name}: {x.dtype}' for x in inputs)}")
    if isinstance(size, bool) or not isinstance(size, int) or size <= 0:
        raise helper.error(f"size must be a positive int, got {size!r}")
    attrs = _param_attrs(helper, param_attr, len(inputs))
    products: list[Variable] = []
    for x, attr in zip(inputs, attrs):
        shape = tensor_shape(x)
        flatten = len(shape) - 1 if num_flatten_dims == -1 else num_flatten_dims
        if not 1 <= flatten < len(shape):
            raise helper.error(
                f"num_flatten_dims={num_flatten_dims} is out of range for input {x.name!r} of shape {list(shape)}"
            )
        if any(d < 0 for d in shape[flatten:]):
            raise helper.error(
                f"input {x.name!r} of shape {list(shape)}: the dims from num_flatten_dims="
                f"{flatten} on make the weight's height and must be known"
            )
        w = helper.create_parameter(attr, [math.prod(shape[flatten:]), size], dtype)
        product = helper.create_tmp(dtype)
        helper.append_op(
            "mul", {"X": [x], "Y": [w]}, {"Out": [product]}, {"x_num_col_dims": flatten, "y_num_col_dims": 1}
        )
        products.append(product)
    if len(products) == 1:
        pre_bias = products[0]
    else:
        pre_bias = helper.create_tmp(dtype)
        helper.append_op("sum", {"X": products}, {"Out": [pre_bias]})
    pre_act = helper.append_bias(pre_bias, ParamAttr.to_attr(bias_attr), dim_start=flatten)  # type: ignore[possibly-undefined]  # inputs is not empty
    return helper.append_activation(pre_act, act)


def _param_attrs(helper: LayerHelper, arg: Any, count: int) -> list[ParamAttr]:
    """One ParamAttr per input (a single one is used for every input, as in Fluid)."""
    items = list(arg) if isinstance(arg, (list, tuple)) else [arg]
    if len(items) not in (1, count):
        raise helper.error(f"{len(items)} param_attrs given for {count} inputs")
    attrs = [ParamAttr.to_attr(a) for a in items]
    if any(a is False for a in attrs):
        raise helper.error("param_attr=False: a weight cannot be omitted")
    return attrs * count if len(attrs) == 1 else attrs  # type: ignore[return-value]


def embedding(
    input: core.Variable,
    size: Sequence[int],
    is_sparse: bool = False,
    padding_idx: int | None = None,
    param_attr: Any = None,
    dtype: Any = "float32",
    is_distributed: bool = False,
    entry: CountFilterEntry | ProbabilityEntry | None = None,
) -> Variable:
    """Rows of a ``size = [vocab, dim]`` table for int64 ids of shape [N, 1] (``lookup_table``).

    ``is_sparse=True`` makes the table's gradient a SelectedRows. Ids equal to
    ``padding_idx`` (negative: counted from the end) give zero rows. In
    parameter-server training (``docs/distributed.md``) a sparse table
    (``is_sparse`` or ``is_distributed``) lives on the servers, sharded by id,
    its rows made as ids arrive; ``entry`` (``CountFilterEntry(n)``,
    ``ProbabilityEntry(p)``) decides which new ids get a row.
    """
    helper = LayerHelper("embedding")
    helper.check_variable(input, "input")
    helper.check_dtype(input, "input", _LABEL_DTYPES)
    size = list(size)
    if len(size) != 2 or any(isinstance(d, bool) or not isinstance(d, int) or d <= 0 for d in size):
        raise helper.error(f"size must be [vocab_size, dim] of positive ints, got {size!r}")
    if padding_idx is None:
        padding = -1
    else:
        padding = padding_idx if padding_idx >= 0 else size[0] + padding_idx
        if not 0 <= padding < size[0]:
            raise helper.error(f"padding_idx {padding_idx} is out of range for vocabulary size {size[0]}")
    attr = ParamAttr.to_attr(param_attr)
    if attr is False:
        raise helper.error("param_attr=False: the table cannot be omitted")
    w = helper.create_parameter(attr, size, to_dtype(dtype))
    out = helper.create_tmp(w.dtype)
    attrs: dict[str, Any] = {"is_sparse": bool(is_sparse), "padding_idx": padding}
    if is_distributed:
        attrs["is_distributed"] = True
    if entry is not None:
        if not isinstance(entry, (CountFilterEntry, ProbabilityEntry)):
            raise helper.error(f"entry must be a CountFilterEntry or a ProbabilityEntry, got {entry!r}")
        if not (is_sparse or is_distributed):
            raise helper.error("entry needs a sparse table (is_sparse=True or is_distributed=True)")
        attrs["entry"] = str(entry)
    helper.append_op("lookup_table", {"W": [w], "Ids": [input]}, {"Out": [out]}, attrs)
    return out


# -- activations ---------------------------------------------------------------------


def _activation(op_type: str, x: core.Variable, name: str | None, attrs: dict[str, Any] | None = None) -> Variable:
    helper = LayerHelper(op_type, name)
    helper.check_variable(x, "x")
    return helper.unary(op_type, x, attrs)


def relu(x: core.Variable, name: str | None = None) -> Variable:
    """max(x, 0)."""
    return _activation("relu", x, name)


def sigmoid(x: core.Variable, name: str | None = None) -> Variable:
    """1 / (1 + exp(-x))."""
    return _activation("sigmoid", x, name)


def tanh(x: core.Variable, name: str | None = None) -> Variable:
    """tanh(x)."""
    return _activation("tanh", x, name)


def softmax(input: core.Variable, axis: int = -1, name: str | None = None) -> Variable:
    """exp(x) / sum(exp(x)) along ``axis``."""
    return _activation("softmax", input, name, {"axis": axis})


# -- arithmetic ----------------------------------------------------------------------------


def _elementwise(
    op_type: str, x: core.Variable, y: core.Variable, axis: int, act: str | None, name: str | None
) -> Variable:
    helper = LayerHelper(op_type, name)
    helper.check_variable(x, "x")
    helper.check_variable(y, "y")
    out = helper.create_tmp(x.dtype)
    helper.append_op(op_type, {"X": [x], "Y": [y]}, {"Out": [out]}, {"axis": axis})
    return helper.append_activation(out, act)


def elementwise_add(
    x: core.Variable, y: core.Variable, axis: int = -1, act: str | None = None, name: str | None = None
) -> Variable:
    """x + y with broadcasting (``axis``: where y's dims start in x's; -1: numpy rules)."""
    return _elementwise("elementwise_add", x, y, axis, act, name)


def elementwise_sub(
    x: core.Variable, y: core.Variable, axis: int = -1, act: str | None = None, name: str | None = None
) -> Variable:
    """x - y with broadcasting."""
    return _elementwise("elementwise_sub", x, y, axis, act, name)


def elementwise_mul(
    x: core.Variable, y: core.Variable, axis: int = -1, act: str | None = None, name: str | None = None
) -> Variable:
    """x * y with broadcasting."""
    return _elementwise("elementwise_mul", x, y, axis, act, name)


def elementwise_div(
    x: core.Variable, y: core.Variable, axis: int = -1, act: str | None = None, name: str | None = None
) -> Variable:
    """x / y with broadcasting."""
    return _elementwise("elementwise_div", x, y, axis, act, name)


def matmul(
    x: core.Variable,
    y: core.Variable,
    transpose_x: bool = False,
    transpose_y: bool = False,
    alpha: float = 1.0,
    name: str | None = None,
) -> Variable:
    """alpha * op(x) @ op(y), batched over leading dims."""
    helper = LayerHelper("matmul", name)
    helper.check_variable(x, "x")
    helper.check_variable(y, "y")
    out = helper.create_tmp(x.dtype)
    helper.append_op(
        "matmul",
        {"X": [x], "Y": [y]},
        {"Out": [out]},
        {"transpose_X": bool(transpose_x), "transpose_Y": bool(transpose_y), "alpha": float(alpha)},
    )
    return out


def scale(
    x: core.Variable,
    scale: float = 1.0,
    bias: float = 0.0,
    bias_after_scale: bool = True,
    act: str | None = None,
    name: str | None = None,
) -> Variable:
    """scale * x + bias (or scale * (x + bias) when ``bias_after_scale`` is False)."""
    helper = LayerHelper("scale", name)
    helper.check_variable(x, "x")
    out = helper.unary(
        "scale", x, {"scale": float(scale), "bias": float(bias), "bias_after_scale": bool(bias_after_scale)}
    )
    return helper.append_activation(out, act)


# -- reductions ---------------------------------------------------------------------


def mean(x: core.Variable, name: str | None = None) -> Variable:
    """The mean of all elements, shape [1]."""
    return _activation("mean", x, name)


def _reduce(
    op_type: str, input: core.Variable, dim: int | Sequence[int] | None, keep_dim: bool, name: str | None
) -> Variable:
    helper = LayerHelper(op_type, name)
    helper.check_variable(input, "input")
    dims = [0] if dim is None else [dim] if isinstance(dim, int) else list(dim)
    return helper.unary(op_type, input, {"dim": dims, "keep_dim": bool(keep_dim), "reduce_all": dim is None})


def reduce_sum(
    input: core.Variable, dim: int | Sequence[int] | None = None, keep_dim: bool = False, name: str | None = None
) -> Variable:
    """Sum over ``dim`` (an int or a list; None: every dim)."""
    return _reduce("reduce_sum", input, dim, keep_dim, name)


def reduce_mean(
    input: core.Variable, dim: int | Sequence[int] | None = None, keep_dim: bool = False, name: str | None = None
) -> Variable:
    """Mean over ``dim`` (an int or a list; None: every dim)."""
    return _reduce("reduce_mean", input, dim, keep_dim, name)


# -- losses and metrics -------------------------------------------------------------------


def _check_label(helper: LayerHelper, input: core.Variable, label: core.Variable, soft_label: bool) -> None:
    helper.check_variable(input, "input")
    helper.check_variable(label, "label")
    helper.check_float(input, "input")
    if soft_label:
        helper.check_dtype(label, "soft label", (tensor_dtype(input),))
    else:
        helper.check_dtype(label, "label", _LABEL_DTYPES)


def cross_entropy(
    input: core.Variable, label: core.Variable, soft_label: bool = False, ignore_index: int = -100
) -> Variable:
    """-log(input[label]) per row, for probabilities ``input`` [N, C] and int64 labels [N, 1]
    (``soft_label``: -sum(label * log(input)) with label [N, C])."""
    helper = LayerHelper("cross_entropy")
    _check_label(helper, input, label, soft_label)
    out = helper.create_tmp(input.dtype)
    helper.append_op(
        "cross_entropy",
        {"X": [input], "Label": [label]},
        {"Y": [out]},
        {"soft_label": bool(soft_label), "ignore_index": ignore_index},
    )
    return out


def softmax_with_cross_entropy(
    logits: core.Variable,
    label: core.Variable,
    soft_label: bool = False,
    ignore_index: int = -100,
    return_softmax: bool = False,
    axis: int = -1,
) -> Variable | tuple[Variable, Variable]:
    """cross_entropy(softmax(logits), label), computed stably; with ``return_softmax``, (loss, softmax)."""
    helper = LayerHelper("softmax_with_cross_entropy")
    _check_label(helper, logits, label, soft_label)
    softmax_out = helper.create_tmp(logits.dtype)
    loss = helper.create_tmp(logits.dtype)
    helper.append_op(
        "softmax_with_cross_entropy",
        {"Logits": [logits], "Label": [label]},
        {"Softmax": [softmax_out], "Loss": [loss]},
        {"soft_label": bool(soft_label), "ignore_index": ignore_index, "axis": axis},
    )
    return (loss, softmax_out) if return_softmax else loss


def square_error_cost(input: core.Variable, label: core.Variable) -> Variable:
    """(input - label) ** 2, elementwise."""
    helper = LayerHelper("square_error_cost")
    helper.check_variable(input, "input")
    helper.check_variable(label, "label")
    diff = helper.create_tmp(input.dtype)
    helper.append_op("elementwise_sub", {"X": [input], "Y": [label]}, {"Out": [diff]})
    return helper.unary("square", diff)


def accuracy(input: core.Variable, label: core.Variable, k: int = 1) -> Variable:
    """The fraction of rows whose label is among the ``k`` largest scores of ``input`` (top_k + accuracy)."""
    helper = LayerHelper("accuracy")
    helper.check_variable(input, "input")
    helper.check_variable(label, "label")
    helper.check_dtype(label, "label", _LABEL_DTYPES)
    if isinstance(k, bool) or not isinstance(k, int) or k < 1:
        raise helper.error(f"k must be a positive int, got {k!r}")
    values = helper.create_tmp(input.dtype, stop_gradient=True)
    indices = helper.create_tmp("int64", stop_gradient=True)
    helper.append_op("top_k", {"X": [input]}, {"Out": [values], "Indices": [indices]}, {"k": k})
    acc = helper.create_tmp("float32", stop_gradient=True)
    correct = helper.create_tmp("int64", stop_gradient=True)
    total = helper.create_tmp("int64", stop_gradient=True)
    helper.append_op(
        "accuracy",
        {"Out": [values], "Indices": [indices], "Label": [label]},
        {"Accuracy": [acc], "Correct": [correct], "Total": [total]},
    )
    return acc


def auc(
    input: core.Variable,
    label: core.Variable,
    curve: str = "ROC",
    num_thresholds: int = 2**12 - 1,
    topk: int = 1,
    slide_steps: int = 1,
) -> tuple[Variable, Variable, list[Variable]]:
    """Streaming ROC AUC of ``input`` (an [N, 2] softmax, or [N, 1] positive probabilities) against ``label``.

    Fluid's ``layers.auc``: returns ``(auc, batch_auc, [batch_stat_pos, batch_stat_neg, stat_pos,
    stat_neg])``. ``auc`` covers everything since the startup program ran (its counts per threshold bucket,
    ``stat_pos``/``stat_neg``, are persistable, saved and restored with the model); ``batch_auc`` covers the
    last ``slide_steps`` batches. ``topk`` is accepted for Fluid's signature and must be 1.
    """
    helper = LayerHelper("auc")
    helper.check_variable(input, "input")
    helper.check_variable(label, "label")
    helper.check_float(input, "input")
    helper.check_dtype(label, "label", _LABEL_DTYPES)
    if curve != "ROC":
        raise helper.error(f"curve must be 'ROC' (the only one computed), got {curve!r}")
    for arg, value, low in (("num_thresholds", num_thresholds, 1), ("slide_steps", slide_steps, 1), ("topk", topk, 1)):
        if isinstance(value, bool) or not isinstance(value, int) or value < low:
            raise helper.error(f"{arg} must be an int >= {low}, got {value!r}")
    if topk != 1:
        raise helper.error(f"topk must be 1, got {topk}")
    outputs: list[Variable] = []
    stats: list[Variable] = []
    for steps, rows in ((slide_steps, slide_steps), (0, 1)):  # the window of batches, then everything
        pos, neg = (
            helper.create_global_var(
                f"{helper.name}.{kind}", (rows, num_thresholds + 1), "int64", 0.0, persistable=True
            )
            for kind in ("batch_stat_pos" if steps else "stat_pos", "batch_stat_neg" if steps else "stat_neg")
        )
        out = helper.create_tmp("float64", stop_gradient=True)
        helper.append_op(
            "auc",
            {"Predict": [input], "Label": [label], "StatPos": [pos], "StatNeg": [neg]},
            {"AUC": [out], "StatPosOut": [pos], "StatNegOut": [neg]},
            {"curve": curve, "num_thresholds": num_thresholds, "slide_steps": steps},
        )
        outputs.append(out)
        stats += [pos, neg]
    batch_auc, global_auc = outputs
    return global_auc, batch_auc, stats


# -- tensors --------------------------------------------------------------------------------


def concat(input: Sequence[core.Variable], axis: int = 0, name: str | None = None) -> Variable:
    """Join ``input`` along ``axis``."""
    helper = LayerHelper("concat", name)
    inputs = [helper.check_variable(x, "input") for x in (input if isinstance(input, (list, tuple)) else [input])]
    if not inputs:
        raise helper.error("input is an empty list")
    out = helper.create_tmp(inputs[0].dtype)
    helper.append_op("concat", {"X": inputs}, {"Out": [out]}, {"axis": axis})
    return out


def reshape(x: core.Variable, shape: Sequence[int], act: str | None = None, name: str | None = None) -> Variable:
    """``x`` with a new shape: 0 copies the input's dim, one -1 is inferred (``reshape2``)."""
    helper = LayerHelper("reshape", name)
    helper.check_variable(x, "x")
    out = _shape_op(helper, "reshape2", x, {"shape": _int_list(helper, shape, "shape")})
    return helper.append_activation(out, act)


# -- shape ops


def _int_list(helper: LayerHelper, value: Any, arg: str) -> list[int]:
    """``value`` as a list of ints; an error naming ``arg`` when it is not one."""
    if (
        isinstance(value, (str, bytes))
        or not isinstance(value, Sequence)
        or any(isinstance(d, bool) or not isinstance(d, int) for d in value)
    ):
        raise helper.error(f"{arg} must be a list of ints, got {value!r}")
    return list(value)


def _shape_op(helper: LayerHelper, op_type: str, x: core.Variable, attrs: dict[str, Any]) -> Variable:
    """``Out`` of ``op_type(X=x)``, which also writes ``XShape`` (Paddle's record of X's shape for the gradient)."""
    out = helper.create_tmp(x.dtype)
    x_shape = helper.create_tmp(x.dtype, stop_gradient=True)
    helper.append_op(op_type, {"X": [x]}, {"Out": [out], "XShape": [x_shape]}, attrs)
    return out


def transpose(x: core.Variable, perm: Sequence[int], name: str | None = None) -> Variable:
    """``x`` with its dims permuted: dim ``i`` of the result is dim ``perm[i]`` of ``x`` (``transpose2``)."""
    helper = LayerHelper("transpose", name)
    helper.check_variable(x, "x")
    return _shape_op(helper, "transpose2", x, {"axis": _int_list(helper, perm, "perm")})


def flatten(x: core.Variable, axis: int = 1, name: str | None = None) -> Variable:
    """``x`` as a matrix, Fluid's ``flatten``: the dims before ``axis`` (in [0, rank]) make the rows, the others
    the columns; ``axis`` 0 gives one row, the rank one column.

    Paddle's ``flatten_contiguous_range`` does it (Fluid's ``flatten2`` is no op here): dims 0 to ``axis - 1``
    into one, then dims ``axis`` on into one; ``unsqueeze2`` gives the 1 of an empty side.
    """
    helper = LayerHelper("flatten", name)
    helper.check_variable(x, "x")
    rank = len(tensor_shape(x))
    if isinstance(axis, bool) or not isinstance(axis, int) or not 0 <= axis <= rank:
        raise helper.error(f"axis must be an int in [0, {rank}] (the rank of x {x.name!r}), got {axis!r}")
    rows: core.Variable = x
    if axis == 0:
        rows = _shape_op(helper, "unsqueeze2", x, {"axes": [0]})
    elif axis > 1:
        rows = _shape_op(helper, "flatten_contiguous_range", x, {"start_axis": 0, "stop_axis": axis - 1})
    if axis == rank:
        return _shape_op(helper, "unsqueeze2", rows, {"axes": [1]})
    return _shape_op(helper, "flatten_contiguous_range", rows, {"start_axis": 1, "stop_axis": -1})


def squeeze(input: core.Variable, axes: Sequence[int], name: str | None = None) -> Variable:
    """``input`` without its dims of size 1 listed in ``axes`` (every dim of size 1 when ``axes`` is empty); a
    listed dim of another size stays, as in Paddle (``squeeze2``)."""
    helper = LayerHelper("squeeze", name)
    helper.check_variable(input, "input")
    return _shape_op(helper, "squeeze2", input, {"axes": _int_list(helper, axes, "axes")})


def unsqueeze(input: core.Variable, axes: int | Sequence[int], name: str | None = None) -> Variable:
    """``input`` with a dim of size 1 inserted at each of ``axes`` in turn, each counted in the shape made so far
    (``unsqueeze2``)."""
    helper = LayerHelper("unsqueeze", name)
    helper.check_variable(input, "input")
    listed = [axes] if isinstance(axes, int) and not isinstance(axes, bool) else axes
    return _shape_op(helper, "unsqueeze2", input, {"axes": _int_list(helper, listed, "axes")})


def split(
    input: core.Variable, num_or_sections: int | Sequence[int], dim: int = -1, name: str | None = None
) -> list[Variable]:
    """``input`` cut along ``dim`` into ``num_or_sections`` equal parts, or into parts of the sizes it lists (one
    may be -1: what the others leave)."""
    helper = LayerHelper("split", name)
    helper.check_variable(input, "input")
    if isinstance(dim, bool) or not isinstance(dim, int):
        raise helper.error(f"dim must be an int, got {dim!r}")
    if isinstance(num_or_sections, int) and not isinstance(num_or_sections, bool):
        if num_or_sections < 1:
            raise helper.error(f"num_or_sections must be a positive int or a list of ints, got {num_or_sections}")
        count, attrs = num_or_sections, {"num": num_or_sections, "sections": []}
    else:
        sections = _int_list(helper, num_or_sections, "num_or_sections")
        count, attrs = len(sections), {"num": 0, "sections": sections}
    outs = [helper.create_tmp(input.dtype) for _ in range(count)]
    helper.append_op("split", {"X": [input]}, {"Out": outs}, {"axis": dim, **attrs})
    return outs


def slice(input: core.Variable, axes: Sequence[int], starts: Sequence[int], ends: Sequence[int]) -> Variable:
    """``input[starts[i]:ends[i]]`` on each dim ``axes[i]``: negative bounds count from the end, bounds past a dim
    are clamped to it (``slice``)."""
    helper = LayerHelper("slice")
    helper.check_variable(input, "input")
    axes = _int_list(helper, axes, "axes")
    attrs = {
        "axes": axes,
        "starts": _int_list(helper, starts, "starts"),
        "ends": _int_list(helper, ends, "ends"),
        "infer_flags": [1] * len(axes),
    }
    out = helper.create_tmp(input.dtype)
    helper.append_op("slice", {"Input": [input]}, {"Out": [out]}, attrs)
    return out


def cast(x: core.Variable, dtype: Any) -> Variable:
    """``x`` converted to ``dtype``."""
    helper = LayerHelper("cast")
    helper.check_variable(x, "x")
    out_dtype = to_dtype(dtype)
    return helper.unary(
        "cast", x, {"in_dtype": DTYPE_TO_PROTO[tensor_dtype(x)], "out_dtype": DTYPE_TO_PROTO[out_dtype]}, out_dtype
    )


def fill_constant(
    shape: Sequence[int], dtype: Any, value: float, force_cpu: bool = False, out: core.Variable | None = None
) -> Variable:
    """A tensor of ``shape`` filled with ``value`` (no gradient flows through it)."""
    helper = LayerHelper("fill_constant")
    dims = list(shape)
    if any(isinstance(d, bool) or not isinstance(d, int) or d < 0 for d in dims):
        raise helper.error(f"shape {dims!r} must be a list of non-negative ints")
    dtype = to_dtype(dtype)
    if out is None:
        out = helper.create_tmp(dtype, stop_gradient=True)
    else:
        helper.check_variable(out, "out")
    helper.append_op(
        "fill_constant",
        outputs={"Out": [out]},
        attrs={"shape": dims, "dtype": DTYPE_TO_PROTO[dtype], "value": float(value), "force_cpu": bool(force_cpu)},
    )
    return out  # type: ignore[return-value]


def assign(input: core.Variable, output: core.Variable | None = None) -> Variable:
    """A copy of ``input`` (into ``output`` when given)."""
    helper = LayerHelper("assign")
    helper.check_variable(input, "input")
    if output is None:
        return helper.unary("assign", input)
    helper.check_variable(output, "output")
    helper.append_op("assign", {"X": [input]}, {"Out": [output]})
    return output  # type: ignore[return-value]


# -- sequences --------------------------------------------------------------------------------


def sequence_pool(input: core.Variable, pool_type: str, is_test: bool = False, pad_value: float = 0.0) -> Variable:
    """One row per sequence of a LoD level-1 ``input``: sum, average, sqrt (sum / sqrt(len)), max, last or
    first. Empty sequences give ``pad_value``."""
    helper = LayerHelper("sequence_pool")
    helper.check_variable(input, "input")
    pooltype = pool_type.upper() if isinstance(pool_type, str) else pool_type
    if pooltype not in _POOL_TYPES:
        raise helper.error(f"pool_type {pool_type!r} is not one of {', '.join(p.lower() for p in _POOL_TYPES)}")
    out = helper.create_tmp(input.dtype)
    max_index = helper.create_tmp("int32", stop_gradient=True)
    helper.append_op(
        "sequence_pool",
        {"X": [input]},
        {"Out": [out], "MaxIndex": [max_index]},
        {"pooltype": pooltype, "is_test": bool(is_test), "pad_value": float(pad_value)},
    )
    return out


# -- normalization and dropout


def batch_norm(
    input: core.Variable,
    act: str | None = None,
    is_test: bool = False,
    momentum: float = 0.9,
    epsilon: float = 1e-05,
    param_attr: Any = None,
    bias_attr: Any = None,
    data_layout: str = "NCHW",
    name: str | None = None,
    moving_mean_name: str | None = None,
    moving_variance_name: str | None = None,
    use_global_stats: bool = False,
) -> Variable:
    """``act(scale * (input - mean) / sqrt(variance + epsilon) + bias)`` per channel (dim 1 for ``NCHW``,
    the last dim for ``NHWC``).

    In training the batch's mean and variance normalize, and the moving mean and variance (persistable,
    not trainable, starting at 0 and 1; named ``moving_mean_name`` / ``moving_variance_name`` when given)
    are updated in place: ``moving = momentum * moving + (1 - momentum) * batch``. ``is_test`` (which
    ``Program.clone(for_test=True)`` sets) or ``use_global_stats`` normalize with the moving statistics.
    The scale starts at 1, the bias at 0; a float16 ``input`` keeps them and the statistics in float32.
    """
    helper = LayerHelper("batch_norm", name)
    helper.check_variable(input, "input")
    helper.check_float(input, "input")
    if data_layout not in ("NCHW", "NHWC"):
        raise helper.error(f"data_layout must be 'NCHW' or 'NHWC', got {data_layout!r}")
    shape = tensor_shape(input)
    if len(shape) < 2:
        raise helper.error(f"input {input.name!r} of shape {list(shape)} must have rank 2 or more")
    channels = shape[1 if data_layout == "NCHW" else -1]
    if channels < 0:
        raise helper.error(
            f"input {input.name!r} of shape {list(shape)}: the channel dim ({data_layout}) must be known"
        )
    scale_attr, shift_attr = ParamAttr.to_attr(param_attr), ParamAttr.to_attr(bias_attr)
    if scale_attr is False or shift_attr is False:
        raise helper.error("param_attr=False / bias_attr=False: batch_norm always has a scale and a bias")
    dtype = "float32" if input.dtype == "float16" else tensor_dtype(input)
    scale = helper.create_parameter(scale_attr, [channels], dtype, default_initializer=Constant(1.0))
    bias = helper.create_parameter(shift_attr, [channels], dtype, is_bias=True)
    mean, variance = (
        helper.create_parameter(
            ParamAttr(name=stat_name, initializer=Constant(value), trainable=False), [channels], dtype
        )
        for stat_name, value in ((moving_mean_name, 0.0), (moving_variance_name, 1.0))
    )
    saved_mean = helper.create_tmp(dtype, stop_gradient=True)
    saved_variance = helper.create_tmp(dtype, stop_gradient=True)
    out = helper.create_tmp(input.dtype)
    helper.append_op(
        "batch_norm",
        {"X": [input], "Scale": [scale], "Bias": [bias], "Mean": [mean], "Variance": [variance]},
        {
            "Y": [out],
            "MeanOut": [mean],
            "VarianceOut": [variance],
            "SavedMean": [saved_mean],
            "SavedVariance": [saved_variance],
        },
        {
            "momentum": float(momentum),
            "epsilon": float(epsilon),
            "is_test": bool(is_test),
            "data_layout": data_layout,
            "use_global_stats": bool(use_global_stats),
        },
    )
    return helper.append_activation(out, act)


def layer_norm(
    input: core.Variable,
    scale: bool = True,
    shift: bool = True,
    begin_norm_axis: int = 1,
    epsilon: float = 1e-05,
    param_attr: Any = None,
    bias_attr: Any = None,
    act: str | None = None,
    name: str | None = None,
) -> Variable:
    """``act`` of each row of ``input`` (flattened to a matrix at ``begin_norm_axis``) normalized to mean 0
    and variance 1, times a learned scale (``scale``, starting at 1) plus a learned bias (``shift``, starting
    at 0), both of the row's size."""
    helper = LayerHelper("layer_norm", name)
    helper.check_variable(input, "input")
    helper.check_float(input, "input")
    shape = tensor_shape(input)
    if (
        isinstance(begin_norm_axis, bool)
        or not isinstance(begin_norm_axis, int)
        or not 0 <= begin_norm_axis < len(shape)
    ):
        raise helper.error(f"begin_norm_axis must be an int in [0, {len(shape)}), got {begin_norm_axis!r}")
    if any(d < 0 for d in shape[begin_norm_axis:]):
        raise helper.error(
            f"input {input.name!r} of shape {list(shape)}: the dims from begin_norm_axis={begin_norm_axis} on "
            "make the scale and bias and must be known"
        )
    dtype = "float32" if input.dtype == "float16" else tensor_dtype(input)
    width = [math.prod(shape[begin_norm_axis:])]
    inputs: dict[str, list[core.Variable]] = {"X": [input]}
    if scale:
        attr = ParamAttr.to_attr(param_attr)
        if attr is False:
            raise helper.error("param_attr=False: use scale=False for no scale")
        inputs["Scale"] = [helper.create_parameter(attr, width, dtype, default_initializer=Constant(1.0))]
    if shift:
        attr = ParamAttr.to_attr(bias_attr)
        if attr is False:
            raise helper.error("bias_attr=False: use shift=False for no bias")
        inputs["Bias"] = [helper.create_parameter(attr, width, dtype, is_bias=True)]
    mean = helper.create_tmp(dtype, stop_gradient=True)
    variance = helper.create_tmp(dtype, stop_gradient=True)
    out = helper.create_tmp(input.dtype)
    helper.append_op(
        "layer_norm",
        inputs,
        {"Y": [out], "Mean": [mean], "Variance": [variance]},
        {"epsilon": float(epsilon), "begin_norm_axis": begin_norm_axis},
    )
    return helper.append_activation(out, act)


def _norm_affine(
    helper: LayerHelper, input: core.Variable, channels: int, param_attr: Any, bias_attr: Any
) -> dict[str, list[core.Variable]]:
    """The inputs of group_norm and instance_norm: X, and a scale (starting at 1) and a bias (at 0) of
    ``channels`` unless ``param_attr`` / ``bias_attr`` is False; float32 ones for a float16 ``input``."""
    if channels < 0:
        raise helper.error(f"input {input.name!r} of shape {list(tensor_shape(input))}: its channel dim must be known")
    dtype = "float32" if input.dtype == "float16" else tensor_dtype(input)
    inputs: dict[str, list[core.Variable]] = {"X": [input]}
    scale, shift = ParamAttr.to_attr(param_attr), ParamAttr.to_attr(bias_attr)
    if scale is not False:
        inputs["Scale"] = [helper.create_parameter(scale, [channels], dtype, default_initializer=Constant(1.0))]
    if shift is not False:
        inputs["Bias"] = [helper.create_parameter(shift, [channels], dtype, is_bias=True)]
    return inputs


def group_norm(
    input: core.Variable,
    groups: int,
    epsilon: float = 1e-05,
    param_attr: Any = None,
    bias_attr: Any = None,
    act: str | None = None,
    data_layout: str = "NCHW",
    name: str | None = None,
) -> Variable:
    """``act`` of each image's ``groups`` groups of channels (dim 1 for ``NCHW``, the last dim for ``NHWC``)
    normalized to mean 0 and variance 1, times a learned scale plus a learned bias per channel.

    The scale starts at 1 and the bias at 0; ``param_attr=False`` / ``bias_attr=False`` leave them out, as Fluid's
    documentation says (Paddle 3.3.1's ``static.nn.group_norm``, Fluid's code, adds them only for an attribute
    given: none by default)."""
    helper = LayerHelper("group_norm", name)
    helper.check_variable(input, "input")
    helper.check_float(input, "input")
    if data_layout not in ("NCHW", "NHWC"):
        raise helper.error(f"data_layout must be 'NCHW' or 'NHWC', got {data_layout!r}")
    shape = tensor_shape(input)
    if not 2 <= len(shape) <= 5:
        raise helper.error(f"input {input.name!r} of shape {list(shape)} must have rank 2 to 5")
    if isinstance(groups, bool) or not isinstance(groups, int) or groups < 1:
        raise helper.error(f"groups must be a positive int, got {groups!r}")
    inputs = _norm_affine(helper, input, shape[1 if data_layout == "NCHW" else -1], param_attr, bias_attr)
    dtype = "float32" if input.dtype == "float16" else tensor_dtype(input)
    mean = helper.create_tmp(dtype, stop_gradient=True)
    variance = helper.create_tmp(dtype, stop_gradient=True)
    out = helper.create_tmp(input.dtype)
    helper.append_op(
        "group_norm",
        inputs,
        {"Y": [out], "Mean": [mean], "Variance": [variance]},
        {"epsilon": float(epsilon), "groups": groups, "data_layout": data_layout},
    )
    return helper.append_activation(out, act)


def instance_norm(
    input: core.Variable,
    epsilon: float = 1e-05,
    param_attr: Any = None,
    bias_attr: Any = None,
    name: str | None = None,
) -> Variable:
    """Each image's channels (``input`` N, C, ...) normalized to mean 0 and variance 1, times a learned scale
    plus a learned bias per channel (starting at 1 and 0); ``param_attr=False`` and ``bias_attr=False``
    (together, as in Fluid) leave both out. (Paddle 3.3.1's ``static.nn.instance_norm`` adds them only when both
    attributes are given: none by default.)"""
    helper = LayerHelper("instance_norm", name)
    helper.check_variable(input, "input")
    helper.check_float(input, "input")
    if (param_attr is False) != (bias_attr is False):
        raise helper.error("param_attr and bias_attr must be False together (no scale and no bias) or neither")
    shape = tensor_shape(input)
    if not 2 <= len(shape) <= 5:
        raise helper.error(f"input {input.name!r} of shape {list(shape)} must have rank 2 to 5")
    inputs = _norm_affine(helper, input, shape[1], param_attr, bias_attr)
    dtype = "float32" if input.dtype == "float16" else tensor_dtype(input)
    saved_mean = helper.create_tmp(dtype, stop_gradient=True)
    saved_variance = helper.create_tmp(dtype, stop_gradient=True)
    out = helper.create_tmp(input.dtype)
    helper.append_op(
        "instance_norm",
        inputs,
        {"Y": [out], "SavedMean": [saved_mean], "SavedVariance": [saved_variance]},
        {"epsilon": float(epsilon)},
    )
    return out


def dropout(
    x: core.Variable,
    dropout_prob: float,
    is_test: bool = False,
    seed: int | None = None,
    name: str | None = None,
    dropout_implementation: str = "downgrade_in_infer",
) -> Variable:
    """``x`` with each element zeroed with probability ``dropout_prob``.

    ``downgrade_in_infer``: training keeps the other elements as they are and a test (``is_test``, which
    ``Program.clone(for_test=True)`` sets) multiplies everything by ``1 - dropout_prob``;
    ``upscale_in_train``: training divides the kept elements by ``1 - dropout_prob`` and a test passes
    ``x`` through. As in Fluid, a ``seed`` (else a non-zero ``random_seed`` of the program, from which
    each dropout derives its own) fixes the mask: the same elements are dropped at every run. Without
    one every run draws a fresh mask.
    """
    helper = LayerHelper("dropout", name)
    helper.check_variable(x, "x")
    if isinstance(dropout_prob, bool) or not isinstance(dropout_prob, (int, float)):
        raise helper.error(f"dropout_prob must be a number in [0, 1], got {dropout_prob!r}")
    if seed is not None and (isinstance(seed, bool) or not isinstance(seed, int)):
        raise helper.error(f"seed must be an int or None, got {seed!r}")
    out = helper.create_tmp(x.dtype)
    mask = helper.create_tmp("uint8", stop_gradient=True)
    program_seed = helper.main_program.random_seed
    if not seed and program_seed:
        seed = framework.derive_seed(program_seed, "dropout", out.name)
    helper.append_op(
        "dropout",
        {"X": [x]},
        {"Out": [out], "Mask": [mask]},
        {
            "dropout_prob": float(dropout_prob),
            "is_test": bool(is_test),
            "fix_seed": seed is not None,
            "seed": seed or 0,
            "dropout_implementation": dropout_implementation,
        },
    )
    return out


# -- convolution and pooling

_LAYOUTS = {2: ("NCHW", "NHWC"), 3: ("NCDHW", "NDHWC")}  # spatial dims -> the data formats of a layer


def _ints(helper: LayerHelper, value: Any, arg: str, dims: int) -> list[int]:
    """An int or a list of ``dims`` ints as a list of ``dims`` (Fluid's ``convert_to_list``)."""
    values = _int_list(helper, [value] * dims if isinstance(value, int) else value, arg)
    if len(values) != dims:
        raise helper.error(f"{arg} must be an int or a list of {dims} ints, got {value!r}")
    return values


def _channel_axis(data_format: str) -> int:
    """The channel dim of an image in ``data_format`` (one of ``_LAYOUTS``'): the last for NHWC and NDHWC, else 1."""
    return len(data_format) - 1 if data_format.endswith("C") else 1


def _spatial_axes(data_format: str) -> range:
    """The spatial dims of an image in ``data_format`` (one of ``_LAYOUTS``'), in order."""
    first = 1 if data_format.endswith("C") else 2
    return range(first, first + len(data_format) - 2)


def _known_channels(input: Any, data_format: str, dims: int) -> int:
    """The channels of ``input`` (a ``dims``-D image in ``data_format``) where the layer can read them before checking
    its arguments (to pick its op type, as Fluid does); -1 where it cannot."""
    if data_format not in _LAYOUTS[dims] or not isinstance(input, core.Variable) or input.shape is None:
        return -1
    shape = tensor_shape(input)
    return shape[_channel_axis(data_format)] if len(shape) == dims + 2 else -1


def _paddings(helper: LayerHelper, padding: Any, data_format: str) -> tuple[list[int], str]:
    """The ``paddings`` and ``padding_algorithm`` attributes for a layer's ``padding`` over the spatial dims of
    ``data_format``: "SAME" or "VALID", an int, one int per spatial dim, a (before, after) pair of ints per spatial
    dim flattened ([top, bottom, left, right]; 3-D [front, back, top, bottom, left, right]), or one [before, after]
    pair per dim of ``data_format``."""
    spatial = _spatial_axes(data_format)
    dims = len(spatial)
    if isinstance(padding, str):
        if padding.upper() not in ("SAME", "VALID"):
            raise helper.error(f"padding {padding!r}: a string padding is 'SAME' or 'VALID'")
        return [0] * dims, padding.upper()
    if (
        isinstance(padding, (list, tuple))
        and len(padding) == dims + 2
        and all(isinstance(p, (list, tuple)) for p in padding)
    ):
        if any(list(p) != [0, 0] for i, p in enumerate(padding) if i not in spatial):
            raise helper.error(f"padding {padding!r} pads the batch or channel dim")
        padding = [v for i in spatial for v in padding[i]]
    if isinstance(padding, (list, tuple)) and len(padding) == 2 * dims:
        values = _int_list(helper, padding, "padding")
        return (values[::2] if values[::2] == values[1::2] else values), "EXPLICIT"
    return _ints(helper, padding, "padding", dims), "EXPLICIT"


def _check_layout(helper: LayerHelper, input: core.Variable, data_format: str, dims: int) -> list[int]:
    """The shape of ``input``; an error unless it is a ``dims``-D image (4-D or 5-D) and ``data_format`` one of
    ``_LAYOUTS[dims]``."""
    if data_format not in _LAYOUTS[dims]:
        raise helper.error(f"data_format must be {' or '.join(map(repr, _LAYOUTS[dims]))}, got {data_format!r}")
    shape = list(tensor_shape(input))
    if len(shape) != dims + 2:
        raise helper.error(f"input {input.name!r} of shape {shape} must be {dims + 2}-D ({data_format})")
    return shape


def _check_conv(
    helper: LayerHelper, input: Any, num_filters: Any, groups: Any, use_cudnn: Any, data_format: str, dims: int
) -> tuple[list[int], int, int]:
    """(shape, channels, groups) of a convolution layer's float ``input``, its channel dim known; an error naming
    what is wrong with ``input``, ``num_filters``, ``groups`` (None: 1) or ``use_cudnn``."""
    helper.check_variable(input, "input")
    helper.check_float(input, "input")
    shape = _check_layout(helper, input, data_format, dims)
    channels = shape[_channel_axis(data_format)]
    if channels < 0:
        raise helper.error(f"input {input.name!r}: its channel dim (data_format {data_format}) must be known")
    if isinstance(num_filters, bool) or not isinstance(num_filters, int) or num_filters < 1:
        raise helper.error(f"num_filters must be a positive int, got {num_filters!r}")
    if groups is not None and (isinstance(groups, bool) or not isinstance(groups, int) or groups < 1):
        raise helper.error(f"groups must be a positive int, got {groups!r}")
    if not isinstance(use_cudnn, bool):
        raise helper.error(f"use_cudnn must be True or False, got {use_cudnn!r}")
    return shape, channels, groups or 1


def _conv_op(
    helper: LayerHelper,
    input: core.Variable,
    filter_shape: list[int],
    initializer: Initializer | None,
    param_attr: Any,
    attrs: dict[str, Any],
) -> Variable:
    """Output of a convolution op (``helper``'s type) of ``input`` by a new filter parameter of ``filter_shape``
    (``initializer``: its default, None for Xavier's)."""
    attr = ParamAttr.to_attr(param_attr)
    if attr is False:
        raise helper.error("param_attr=False: the filter cannot be omitted")
    dtype = tensor_dtype(input)
    w = helper.create_parameter(attr, filter_shape, dtype, default_initializer=initializer)
    out = helper.create_tmp(dtype)
    helper.append_op(helper.layer_type, {"Input": [input], "Filter": [w]}, {"Output": [out]}, attrs)
    return out


def _bias_and_activation(
    helper: LayerHelper, out: Variable, channels: int, bias_attr: Any, axis: int, act: str | None
) -> Variable:
    """``act(out + b)``, a bias of ``channels`` (none with ``bias_attr=False``) added along dim ``axis``."""
    bias = ParamAttr.to_attr(bias_attr)
    if bias is not False:
        b = helper.create_parameter(bias, [channels], tensor_dtype(out), is_bias=True)
        biased = helper.create_tmp(tensor_dtype(out))
        helper.append_op("elementwise_add", {"X": [out], "Y": [b]}, {"Out": [biased]}, {"axis": axis})
        out = biased
    return helper.append_activation(out, act)


def _conv(
    op_type: str,
    dims: int,
    *,
    input: Any,
    num_filters: int,
    filter_size: int | Sequence[int],
    stride: int | Sequence[int],
    padding: int | str | Sequence[Any],
    dilation: int | Sequence[int],
    groups: int | None,
    param_attr: Any,
    bias_attr: Any,
    use_cudnn: bool,
    act: str | None,
    name: str | None,
    data_format: str,
) -> Variable:
    """conv2d's and conv3d's layer (the layer's arguments by keyword): ``act(op_type(input, W) + b)`` over ``dims``
    spatial dims."""
    helper = LayerHelper(op_type, name)
    _, channels, groups = _check_conv(helper, input, num_filters, groups, use_cudnn, data_format, dims)
    if channels % groups:
        raise helper.error(f"input {input.name!r} has {channels} channels, not divisible by groups={groups}")
    ksize = _ints(helper, filter_size, "filter_size", dims)
    paddings, algorithm = _paddings(helper, padding, data_format)
    attrs = {
        "strides": _ints(helper, stride, "stride", dims),
        "paddings": paddings,
        "padding_algorithm": algorithm,
        "dilations": _ints(helper, dilation, "dilation", dims),
        "groups": groups,
        "use_cudnn": use_cudnn,
        "data_format": data_format,
    }
    std = (2.0 / (math.prod(ksize) * channels)) ** 0.5
    out = _conv_op(helper, input, [num_filters, channels // groups, *ksize], Normal(0.0, std), param_attr, attrs)
    return _bias_and_activation(helper, out, num_filters, bias_attr, _channel_axis(data_format), act)


def conv2d(
    input: core.Variable,
    num_filters: int,
    filter_size: int | Sequence[int],
    stride: int | Sequence[int] = 1,
    padding: int | str | Sequence[Any] = 0,
    dilation: int | Sequence[int] = 1,
    groups: int | None = None,
    param_attr: Any = None,
    bias_attr: Any = None,
    use_cudnn: bool = True,
    act: str | None = None,
    name: str | None = None,
    data_format: str = "NCHW",
) -> Variable:
    """``act(conv(input, W) + b)``: ``conv2d``, or ``depthwise_conv2d`` where Fluid picks it (groups equal to the
    input's channels, num_filters a multiple of them, use_cudnn False).

    The filter ``[num_filters, C / groups, kh, kw]`` starts as Normal(0, sqrt(2 / (kh * kw * C))) (Fluid's
    default); the bias ``[num_filters]`` (none with ``bias_attr=False``) is added along the channel dim.
    ``padding``: an int, [pad_h, pad_w], [top, bottom, left, right], one pair per dim, "SAME" or "VALID".
    """
    channels = _known_channels(input, data_format, 2)
    depthwise = (
        channels > 0
        and groups == channels
        and not use_cudnn
        and isinstance(num_filters, int)
        and num_filters % channels == 0
    )
    return _conv(
        "depthwise_conv2d" if depthwise else "conv2d",
        2,
        input=input,
        num_filters=num_filters,
        filter_size=filter_size,
        stride=stride,
        padding=padding,
        dilation=dilation,
        groups=groups,
        param_attr=param_attr,
        bias_attr=bias_attr,
        use_cudnn=use_cudnn,
        act=act,
        name=name,
        data_format=data_format,
    )


def conv3d(
    input: core.Variable,
    num_filters: int,
    filter_size: int | Sequence[int],
    stride: int | Sequence[int] = 1,
    padding: int | str | Sequence[Any] = 0,
    dilation: int | Sequence[int] = 1,
    groups: int | None = None,
    param_attr: Any = None,
    bias_attr: Any = None,
    use_cudnn: bool = True,
    act: str | None = None,
    name: str | None = None,
    data_format: str = "NCDHW",
) -> Variable:
    """``act(conv3d(input, W) + b)`` over NCDHW (or NDHWC) ``input``: conv2d's layer with a depth dim.

    The filter ``[num_filters, C / groups, kd, kh, kw]`` starts as Normal(0, sqrt(2 / (kd * kh * kw * C))) (Fluid's
    default); the bias ``[num_filters]`` (none with ``bias_attr=False``) is added along the channel dim.
    ``padding``: an int, [pad_d, pad_h, pad_w], [front, back, top, bottom, left, right], one pair per dim, "SAME" or
    "VALID".
    """
    return _conv(
        "conv3d",
        3,
        input=input,
        num_filters=num_filters,
        filter_size=filter_size,
        stride=stride,
        padding=padding,
        dilation=dilation,
        groups=groups,
        param_attr=param_attr,
        bias_attr=bias_attr,
        use_cudnn=use_cudnn,
        act=act,
        name=name,
        data_format=data_format,
    )


def _conv_transpose(
    op_type: str,
    dims: int,
    *,
    input: Any,
    num_filters: int,
    output_size: int | Sequence[int] | None,
    filter_size: int | Sequence[int] | None,
    padding: int | str | Sequence[Any],
    stride: int | Sequence[int],
    dilation: int | Sequence[int],
    groups: int | None,
    param_attr: Any,
    bias_attr: Any,
    use_cudnn: bool,
    act: str | None,
    name: str | None,
    data_format: str,
) -> Variable:
    """conv2d_transpose's and conv3d_transpose's layer (the layer's arguments by keyword): ``act(op_type(input, W)
    + b)`` over ``dims`` spatial dims."""
    helper = LayerHelper(op_type, name)
    shape, channels, groups = _check_conv(helper, input, num_filters, groups, use_cudnn, data_format, dims)
    if channels % groups or num_filters % groups:
        raise helper.error(
            f"input {input.name!r} has {channels} channels and num_filters={num_filters}: both must be divisible "
            f"by groups={groups}"
        )
    strides, dilations = _ints(helper, stride, "stride", dims), _ints(helper, dilation, "dilation", dims)
    paddings, algorithm = _paddings(helper, padding, data_format)
    sizes = [] if output_size is None else _ints(helper, output_size, "output_size", dims)
    if filter_size is None:
        spatial = [shape[axis] for axis in _spatial_axes(data_format)]
        if not sizes or any(d < 0 for d in spatial):
            raise helper.error("filter_size=None needs output_size and the input's spatial dims known")
        pairs = list(zip(paddings, paddings)) if len(paddings) == dims else list(zip(paddings[::2], paddings[1::2]))
        ksize = [
            (size - (length - 1) * s + before + after - 1) // d + 1
            for size, length, s, (before, after), d in zip(sizes, spatial, strides, pairs, dilations)
        ]
    else:
        ksize = _ints(helper, filter_size, "filter_size", dims)
    if any(k < 1 for k in ksize):
        raise helper.error(f"the filter size {ksize} must be positive")
    attrs = {
        "output_size": sizes,
        "strides": strides,
        "paddings": paddings,
        "padding_algorithm": algorithm,
        "dilations": dilations,
        "groups": groups,
        "use_cudnn": use_cudnn,
        "data_format": data_format,
    }
    out = _conv_op(helper, input, [channels, num_filters // groups, *ksize], None, param_attr, attrs)
    return _bias_and_activation(helper, out, num_filters, bias_attr, _channel_axis(data_format), act)


def conv2d_transpose(
    input: core.Variable,
    num_filters: int,
    output_size: int | Sequence[int] | None = None,
    filter_size: int | Sequence[int] | None = None,
    padding: int | str | Sequence[Any] = 0,
    stride: int | Sequence[int] = 1,
    dilation: int | Sequence[int] = 1,
    groups: int | None = None,
    param_attr: Any = None,
    bias_attr: Any = None,
    use_cudnn: bool = True,
    act: str | None = None,
    name: str | None = None,
    data_format: str = "NCHW",
) -> Variable:
    """``act(conv_transpose(input, W) + b)``: ``conv2d_transpose``, or ``depthwise_conv2d_transpose`` where Fluid
    picks it (groups and num_filters equal to the input's channels, use_cudnn False).

    The filter ``[C, num_filters / groups, kh, kw]`` starts as Xavier's (Fluid's default); the bias
    ``[num_filters]`` (none with ``bias_attr=False``) is added along the channel dim. Output size per spatial dim:
    ``(L - 1) * stride - paddings + dilation * (k - 1) + 1``; ``output_size`` picks one in ``[that, that + stride)``,
    and without ``filter_size`` it gives the filter size (as Fluid, from the paddings given). ``padding`` as
    conv2d's."""
    channels = _known_channels(input, data_format, 2)
    depthwise = channels > 0 and groups == channels and num_filters == channels and not use_cudnn
    return _conv_transpose(
        "depthwise_conv2d_transpose" if depthwise else "conv2d_transpose",
        2,
        input=input,
        num_filters=num_filters,
        output_size=output_size,
        filter_size=filter_size,
        padding=padding,
        stride=stride,
        dilation=dilation,
        groups=groups,
        param_attr=param_attr,
        bias_attr=bias_attr,
        use_cudnn=use_cudnn,
        act=act,
        name=name,
        data_format=data_format,
    )


def conv3d_transpose(
    input: core.Variable,
    num_filters: int,
    output_size: int | Sequence[int] | None = None,
    filter_size: int | Sequence[int] | None = None,
    padding: int | str | Sequence[Any] = 0,
    stride: int | Sequence[int] = 1,
    dilation: int | Sequence[int] = 1,
    groups: int | None = None,
    param_attr: Any = None,
    bias_attr: Any = None,
    use_cudnn: bool = True,
    act: str | None = None,
    name: str | None = None,
    data_format: str = "NCDHW",
) -> Variable:
    """``act(conv3d_transpose(input, W) + b)`` over NCDHW (or NDHWC) ``input``: conv2d_transpose's layer with a
    depth dim.

    The filter ``[C, num_filters / groups, kd, kh, kw]`` starts as Xavier's (Fluid's default); output sizes,
    ``output_size`` and a filter size from it as conv2d_transpose's, per spatial dim; ``padding`` as conv3d's."""
    return _conv_transpose(
        "conv3d_transpose",
        3,
        input=input,
        num_filters=num_filters,
        output_size=output_size,
        filter_size=filter_size,
        padding=padding,
        stride=stride,
        dilation=dilation,
        groups=groups,
        param_attr=param_attr,
        bias_attr=bias_attr,
        use_cudnn=use_cudnn,
        act=act,
        name=name,
        data_format=data_format,
    )


def _pool(
    dims: int,
    *,
    input: Any,
    pool_size: int | Sequence[int],
    pool_type: str,
    pool_stride: int | Sequence[int],
    pool_padding: int | str | Sequence[Any],
    global_pooling: bool,
    use_cudnn: bool,
    ceil_mode: bool,
    name: str | None,
    exclusive: bool,
    data_format: str,
) -> Variable:
    """pool2d's and pool3d's layer (the layer's arguments by keyword) over ``dims`` spatial dims."""
    op_type = f"pool{dims}d"
    helper = LayerHelper(op_type, name)
    helper.check_variable(input, "input")
    helper.check_float(input, "input")
    _check_layout(helper, input, data_format, dims)
    if pool_type not in ("max", "avg"):
        raise helper.error(f"pool_type must be 'max' or 'avg', got {pool_type!r}")
    if not global_pooling and pool_size == -1:
        raise helper.error("pool_size must be given unless global_pooling is True")
    if not isinstance(use_cudnn, bool):
        raise helper.error(f"use_cudnn must be True or False, got {use_cudnn!r}")
    paddings, algorithm = _paddings(helper, pool_padding, data_format)
    if algorithm == "VALID" and ceil_mode:
        raise helper.error("pool_padding 'VALID' needs ceil_mode=False")
    return helper.unary(
        op_type,
        input,
        {
            "pooling_type": pool_type,
            "ksize": _ints(helper, pool_size, "pool_size", dims),
            "global_pooling": bool(global_pooling),
            "strides": _ints(helper, pool_stride, "pool_stride", dims),
            "paddings": paddings,
            "padding_algorithm": algorithm,
            "use_cudnn": use_cudnn,
            "ceil_mode": bool(ceil_mode),
            "exclusive": bool(exclusive),
            "data_format": data_format,
        },
    )


def pool2d(
    input: core.Variable,
    pool_size: int | Sequence[int] = -1,
    pool_type: str = "max",
    pool_stride: int | Sequence[int] = 1,
    pool_padding: int | str | Sequence[Any] = 0,
    global_pooling: bool = False,
    use_cudnn: bool = True,
    ceil_mode: bool = False,
    name: str | None = None,
    exclusive: bool = True,
    data_format: str = "NCHW",
) -> Variable:
    """Max or average pooling over ``pool_size`` windows (``pool2d``); ``global_pooling``: over the whole
    image. ``exclusive`` leaves the padding out of averages; ``ceil_mode`` rounds the output size up.
    ``pool_padding`` as conv2d's ``padding``."""
    return _pool(
        2,
        input=input,
        pool_size=pool_size,
        pool_type=pool_type,
        pool_stride=pool_stride,
        pool_padding=pool_padding,
        global_pooling=global_pooling,
        use_cudnn=use_cudnn,
        ceil_mode=ceil_mode,
        name=name,
        exclusive=exclusive,
        data_format=data_format,
    )


def pool3d(
    input: core.Variable,
    pool_size: int | Sequence[int] = -1,
    pool_type: str = "max",
    pool_stride: int | Sequence[int] = 1,
    pool_padding: int | str | Sequence[Any] = 0,
    global_pooling: bool = False,
    use_cudnn: bool = True,
    ceil_mode: bool = False,
    name: str | None = None,
    exclusive: bool = True,
    data_format: str = "NCDHW",
) -> Variable:
    """pool2d's layer over NCDHW (or NDHWC) ``input`` (``pool3d``): ``pool_size``, ``pool_stride`` an int or 3
    ints, ``pool_padding`` as conv3d's ``padding``."""
    return _pool(
        3,
        input=input,
        pool_size=pool_size,
        pool_type=pool_type,
        pool_stride=pool_stride,
        pool_padding=pool_padding,
        global_pooling=global_pooling,
        use_cudnn=use_cudnn,
        ceil_mode=ceil_mode,
        name=name,
        exclusive=exclusive,
        data_format=data_format,
    )


def _adaptive_pool(
    dims: int, *, input: Any, pool_size: int | Sequence[int], pool_type: str, require_index: bool, name: str | None
) -> Variable | tuple[Variable, Variable]:
    """adaptive_pool2d's and adaptive_pool3d's layer (the layer's arguments by keyword) over ``dims`` spatial dims."""
    op_type = f"max_pool{dims}d_with_index" if pool_type == "max" else f"pool{dims}d"
    helper = LayerHelper(op_type, name)
    helper.check_variable(input, "input")
    helper.check_float(input, "input")
    _check_layout(helper, input, _LAYOUTS[dims][0], dims)
    if pool_type not in ("max", "avg"):
        raise helper.error(f"pool_type must be 'max' or 'avg', got {pool_type!r}")
    if require_index and pool_type == "avg":
        raise helper.error("require_index=True needs pool_type 'max'")
    ksize = _ints(helper, pool_size, "pool_size", dims)
    if pool_type == "avg":
        return helper.unary(op_type, input, {"pooling_type": "avg", "ksize": ksize, "adaptive": True})
    out = helper.create_tmp(input.dtype)
    mask = helper.create_tmp("int32", stop_gradient=True)
    helper.append_op(op_type, {"X": [input]}, {"Out": [out], "Mask": [mask]}, {"ksize": ksize, "adaptive": True})
    return (out, mask) if require_index else out


def adaptive_pool2d(
    input: core.Variable,
    pool_size: int | Sequence[int],
    pool_type: str = "max",
    require_index: bool = False,
    name: str | None = None,
) -> Variable | tuple[Variable, Variable]:
    """Pooling of NCHW ``input`` to ``pool_size`` [oh, ow], bin ``i`` spanning ``floor(i * H / oh)`` to
    ``ceil((i + 1) * H / oh)``: ``pool2d`` (avg) or ``max_pool2d_with_index`` (max), as Fluid builds it; with
    ``require_index`` (max only), also the int32 position ``h * W + w`` of each maximum."""
    return _adaptive_pool(
        2, input=input, pool_size=pool_size, pool_type=pool_type, require_index=require_index, name=name
    )


def adaptive_pool3d(
    input: core.Variable,
    pool_size: int | Sequence[int],
    pool_type: str = "max",
    require_index: bool = False,
    name: str | None = None,
) -> Variable | tuple[Variable, Variable]:
    """Pooling of NCDHW ``input`` to ``pool_size`` [od, oh, ow], bins as adaptive_pool2d's per spatial dim:
    ``pool3d`` (avg) or ``max_pool3d_with_index`` (max); with ``require_index`` (max only), also the int32 position
    ``(d * H + h) * W + w`` of each maximum."""
    return _adaptive_pool(
        3, input=input, pool_size=pool_size, pool_type=pool_type, require_index=require_index, name=name
    )
