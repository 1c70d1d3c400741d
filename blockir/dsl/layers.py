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

from blockir.dsl import framework
from blockir.dsl.entry import CountFilterEntry, ProbabilityEntry
from blockir.dsl.layer_helper import LayerHelper
from blockir.dsl.param_attr import ParamAttr
from blockir.dsl.variable import Variable, tensor_dtype, tensor_shape
from blockir.errors import BlockirError
from blockir.ir import core
from blockir.ir.dtypes import DTYPE_TO_PROTO, to_dtype

__all__ = [
    "accuracy",
    "assign",
    "auc",
    "cast",
    "concat",
    "cross_entropy",
    "data",
    "elementwise_add",
    "elementwise_div",
    "elementwise_mul",
    "elementwise_sub",
    "embedding",
    "fc",
    "fill_constant",
    "matmul",
    "mean",
    "reduce_mean",
    "reduce_sum",
    "relu",
    "reshape",
    "scale",
    "sequence_pool",
    "sigmoid",
    "softmax",
    "softmax_with_cross_entropy",
    "square_error_cost",
    "tanh",
]

_POOL_TYPES = ("SUM", "AVERAGE", "SQRT", "MAX", "LAST", "FIRST")
_LABEL_DTYPES = ("int64",)


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
    if (
        isinstance(shape, (str, bytes))
        or not isinstance(shape, Sequence)
        or any(isinstance(d, bool) or not isinstance(d, int) for d in shape)
    ):
        raise helper.error(f"shape must be a list of ints, got {shape!r}")
    out = helper.create_tmp(x.dtype)
    x_shape = helper.create_tmp(x.dtype, stop_gradient=True)
    helper.append_op("reshape2", {"X": [x]}, {"Out": [out], "XShape": [x_shape]}, {"shape": list(shape)})
    return helper.append_activation(out, act)


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
