"""Activations, elementwise math, reductions, comparisons, logic and indexing layers, re-exported by
:mod:`blockir.dsl.layers`: Fluid 1.x's names and signatures where Fluid had the layer, else those of
``paddle.nn.functional`` or ``paddle`` (``silu``, ``celu``, ``log_softmax``, ``where``, ``index_select``,
``take_along_axis``, ``masked_select``, ``expand``, ``expand_as``, ``tile``, ``full_like``, ``logsumexp``,
``cumprod``, ``p_norm``)."""

from __future__ import annotations

import builtins
from collections.abc import Sequence
from typing import Any

import numpy as np

from blockir.dsl.initializer import Constant
from blockir.dsl.layer_helper import LayerHelper
from blockir.dsl.param_attr import ParamAttr
from blockir.dsl.variable import Variable, tensor_dtype, tensor_shape
from blockir.ir import core
from blockir.ir.dtypes import DTYPE_TO_PROTO, to_dtype

__all__ = [
    "abs",
    "argsort",
    "assign_value",
    "atan",
    "brelu",
    "ceil",
    "celu",
    "clip",
    "cos",
    "cumprod",
    "cumsum",
    "elementwise_floordiv",
    "elementwise_mod",
    "elu",
    "equal",
    "erf",
    "exp",
    "expand",
    "expand_as",
    "expm1",
    "flip",
    "floor",
    "full_like",
    "gather",
    "gather_nd",
    "greater_equal",
    "greater_than",
    "hard_shrink",
    "hard_sigmoid",
    "hard_swish",
    "index_sample",
    "index_select",
    "leaky_relu",
    "less_equal",
    "less_than",
    "linspace",
    "log",
    "log10",
    "log1p",
    "log2",
    "log_softmax",
    "logical_and",
    "logical_not",
    "logical_or",
    "logical_xor",
    "logsigmoid",
    "logsumexp",
    "masked_select",
    "maxout",
    "mish",
    "not_equal",
    "one_hot",
    "p_norm",
    "pow",
    "prelu",
    "put_along_axis",
    "range",
    "reciprocal",
    "reduce_all",
    "reduce_any",
    "reduce_max",
    "reduce_min",
    "reduce_prod",
    "relu6",
    "roll",
    "round",
    "rsqrt",
    "scatter",
    "scatter_nd_add",
    "selu",
    "shape",
    "sign",
    "silu",
    "sin",
    "size",
    "softplus",
    "softshrink",
    "softsign",
    "sqrt",
    "square",
    "stack",
    "swish",
    "tan",
    "take_along_axis",
    "tanh_shrink",
    "thresholded_relu",
    "tile",
    "unstack",
    "where",
]


def _unary(
    op_type: str, x: core.Variable, name: str | None, attrs: dict[str, Any] | None = None, dtype: str | None = None
) -> Variable:
    """``Out = op_type(X=x)`` into a new temporary (of ``dtype``, else x's)."""
    helper = LayerHelper(op_type, name)
    helper.check_variable(x, "x")
    return helper.unary(op_type, x, attrs, out_dtype=dtype)


def _binary(
    op_type: str,
    x: core.Variable,
    y: core.Variable,
    name: str | None,
    attrs: dict[str, Any] | None = None,
    dtype: str | None = None,
) -> Variable:
    helper = LayerHelper(op_type, name)
    helper.check_variable(x, "x")
    helper.check_variable(y, "y")
    out = helper.create_tmp(dtype or x.dtype, stop_gradient=dtype == "bool")
    helper.append_op(op_type, {"X": [x], "Y": [y]}, {"Out": [out]}, attrs)
    return out


# -- activations -------------------------------------------------------------------------------------------


def relu6(x: core.Variable, threshold: float = 6.0, name: str | None = None) -> Variable:
    """min(max(x, 0), threshold)."""
    return _unary("relu6", x, name, {"threshold": float(threshold)})


def hard_swish(
    x: core.Variable, threshold: float = 6.0, scale: float = 6.0, offset: float = 3.0, name: str | None = None
) -> Variable:
    """x * min(max(x + offset, 0), threshold) / scale."""
    return _unary(
        "hard_swish", x, name, {"threshold": float(threshold), "scale": float(scale), "offset": float(offset)}
    )


def hard_sigmoid(x: core.Variable, slope: float = 0.2, offset: float = 0.5, name: str | None = None) -> Variable:
    """min(max(slope * x + offset, 0), 1) (``paddle.nn.functional.hardsigmoid`` passes slope=1/6)."""
    return _unary("hard_sigmoid", x, name, {"slope": float(slope), "offset": float(offset)})


def swish(x: core.Variable, beta: float = 1.0, name: str | None = None) -> Variable:
    """x * sigmoid(beta * x)."""
    return _unary("swish", x, name, {"beta": float(beta)})


def silu(x: core.Variable, name: str | None = None) -> Variable:
    """x * sigmoid(x)."""
    return _unary("silu", x, name)


def mish(x: core.Variable, threshold: float = 20.0, name: str | None = None) -> Variable:
    """x * tanh(softplus(x)), softplus(x) taken as x beyond ``threshold``."""
    return _unary("mish", x, name, {"threshold": float(threshold)})


def elu(x: core.Variable, alpha: float = 1.0, name: str | None = None) -> Variable:
    """x for x > 0, else alpha * (exp(x) - 1)."""
    return _unary("elu", x, name, {"alpha": float(alpha)})


def selu(x: core.Variable, scale: float | None = None, alpha: float | None = None, name: str | None = None) -> Variable:
    """scale * (x for x > 0, else alpha * (exp(x) - 1)); None keeps the op's defaults."""
    attrs = {k: float(v) for k, v in (("scale", scale), ("alpha", alpha)) if v is not None}
    return _unary("selu", x, name, attrs)


def celu(x: core.Variable, alpha: float = 1.0, name: str | None = None) -> Variable:
    """max(x, 0) + min(alpha * (exp(x / alpha) - 1), 0)."""
    return _unary("celu", x, name, {"alpha": float(alpha)})


def leaky_relu(x: core.Variable, alpha: float = 0.02, name: str | None = None) -> Variable:
    """x for x > 0, else alpha * x."""
    return _unary("leaky_relu", x, name, {"alpha": float(alpha)})


def brelu(x: core.Variable, t_min: float = 0.0, t_max: float = 24.0, name: str | None = None) -> Variable:
    """min(max(x, t_min), t_max) (``paddle.nn.functional.hardtanh``)."""
    return _unary("brelu", x, name, {"t_min": float(t_min), "t_max": float(t_max)})


def softplus(x: core.Variable, beta: float = 1.0, threshold: float = 20.0, name: str | None = None) -> Variable:
    """log(1 + exp(beta * x)) / beta, x where beta * x > threshold."""
    return _unary("softplus", x, name, {"beta": float(beta), "threshold": float(threshold)})


def softsign(x: core.Variable, name: str | None = None) -> Variable:
    """x / (1 + |x|)."""
    return _unary("softsign", x, name)


def softshrink(x: core.Variable, alpha: float = 0.5, name: str | None = None) -> Variable:
    """x - alpha above alpha, x + alpha below -alpha, else 0 (the op's ``lambda``)."""
    return _unary("softshrink", x, name, {"lambda": float(alpha)})


def hard_shrink(x: core.Variable, threshold: float = 0.5, name: str | None = None) -> Variable:
    """x where |x| > threshold, else 0."""
    return _unary("hard_shrink", x, name, {"threshold": float(threshold)})


def tanh_shrink(x: core.Variable, name: str | None = None) -> Variable:
    """x - tanh(x)."""
    return _unary("tanh_shrink", x, name)


def thresholded_relu(x: core.Variable, threshold: float = 1.0, name: str | None = None) -> Variable:
    """x where x > threshold, else 0."""
    return _unary("thresholded_relu", x, name, {"threshold": float(threshold)})


def logsigmoid(x: core.Variable, name: str | None = None) -> Variable:
    """log(sigmoid(x))."""
    return _unary("logsigmoid", x, name)


def log_softmax(x: core.Variable, axis: int = -1, name: str | None = None) -> Variable:
    """log(softmax(x)) along ``axis``."""
    return _unary("log_softmax", x, name, {"axis": int(axis)})


def maxout(x: core.Variable, groups: int, axis: int = 1, name: str | None = None) -> Variable:
    """The maximum of each group of ``groups`` channels of a rank-4 ``x`` (channels on ``axis``: 1 or -1)."""
    return _unary("maxout", x, name, {"groups": int(groups), "axis": int(axis)})


def prelu(
    x: core.Variable, mode: str, param_attr: Any = None, data_format: str = "NCHW", name: str | None = None
) -> Variable:
    """x where x > 0, else alpha * x, with a learned alpha (initialised to 0.25): one (``mode="all"``), one per
    channel (``"channel"``) or one per element of a sample (``"element"``)."""
    helper = LayerHelper("prelu", name)
    helper.check_variable(x, "x")
    helper.check_float(x, "x")
    shape = tensor_shape(x)
    if mode == "all":
        alpha_shape = [1]
    elif mode == "channel":
        alpha_shape = [shape[-1] if data_format == "NHWC" else shape[1]]
    elif mode == "element":
        alpha_shape = [1, *shape[1:]]
    else:
        raise helper.error(f"mode {mode!r} is not one of all, channel, element")
    attr = ParamAttr.to_attr(param_attr)
    if attr is False:
        raise helper.error("param_attr=False: prelu's slopes cannot be omitted")
    alpha = helper.create_parameter(attr, alpha_shape, tensor_dtype(x), default_initializer=Constant(0.25))
    out = helper.create_tmp(x.dtype)
    helper.append_op("prelu", {"X": [x], "Alpha": [alpha]}, {"Out": [out]}, {"mode": mode, "data_format": data_format})
    return out


# -- elementwise math --------------------------------------------------------------------------------------


def abs(x: core.Variable, name: str | None = None) -> Variable:  # noqa: A001  # Fluid's name
    """|x|."""
    return _unary("abs", x, name)


def sign(x: core.Variable, name: str | None = None) -> Variable:
    """-1, 0 or 1."""
    return _unary("sign", x, name)


def floor(x: core.Variable, name: str | None = None) -> Variable:
    """floor(x)."""
    return _unary("floor", x, name)


def ceil(x: core.Variable, name: str | None = None) -> Variable:
    """ceil(x)."""
    return _unary("ceil", x, name)


def round(x: core.Variable, decimals: int = 0, name: str | None = None) -> Variable:  # noqa: A001  # Fluid's name
    """x rounded half away from zero (at ``decimals`` digits)."""
    return _unary("round", x, name, {"decimals": int(decimals)})


def exp(x: core.Variable, name: str | None = None) -> Variable:
    """exp(x)."""
    return _unary("exp", x, name)


def expm1(x: core.Variable, name: str | None = None) -> Variable:
    """exp(x) - 1."""
    return _unary("expm1", x, name)


def log(x: core.Variable, name: str | None = None) -> Variable:
    """ln(x)."""
    return _unary("log", x, name)


def log1p(x: core.Variable, name: str | None = None) -> Variable:
    """ln(1 + x)."""
    return _unary("log1p", x, name)


def log2(x: core.Variable, name: str | None = None) -> Variable:
    """log2(x)."""
    return _unary("log2", x, name)


def log10(x: core.Variable, name: str | None = None) -> Variable:
    """log10(x)."""
    return _unary("log10", x, name)


def sqrt(x: core.Variable, name: str | None = None) -> Variable:
    """sqrt(x)."""
    return _unary("sqrt", x, name)


def rsqrt(x: core.Variable, name: str | None = None) -> Variable:
    """1 / sqrt(x)."""
    return _unary("rsqrt", x, name)


def reciprocal(x: core.Variable, name: str | None = None) -> Variable:
    """1 / x."""
    return _unary("reciprocal", x, name)


def square(x: core.Variable, name: str | None = None) -> Variable:
    """x * x."""
    return _unary("square", x, name)


def sin(x: core.Variable, name: str | None = None) -> Variable:
    """sin(x)."""
    return _unary("sin", x, name)


def cos(x: core.Variable, name: str | None = None) -> Variable:
    """cos(x)."""
    return _unary("cos", x, name)


def tan(x: core.Variable, name: str | None = None) -> Variable:
    """tan(x)."""
    return _unary("tan", x, name)


def atan(x: core.Variable, name: str | None = None) -> Variable:
    """atan(x)."""
    return _unary("atan", x, name)


def erf(x: core.Variable, name: str | None = None) -> Variable:
    """erf(x)."""
    return _unary("erf", x, name)


def pow(x: core.Variable, factor: float = 1.0, name: str | None = None) -> Variable:  # noqa: A001  # Fluid's name
    """x ** factor."""
    return _unary("pow", x, name, {"factor": float(factor)})


def clip(x: core.Variable, min: float, max: float, name: str | None = None) -> Variable:  # noqa: A002
    """min(max(x, min), max)."""
    return _unary("clip", x, name, {"min": float(min), "max": float(max)})


def elementwise_mod(
    x: core.Variable, y: core.Variable, axis: int = -1, act: str | None = None, name: str | None = None
) -> Variable:
    """x mod y (the remainder takes y's sign), broadcast as elementwise_add."""
    return LayerHelper("elementwise_mod", name).append_activation(
        _binary("elementwise_mod", x, y, name, {"axis": axis}), act
    )


def elementwise_floordiv(
    x: core.Variable, y: core.Variable, axis: int = -1, act: str | None = None, name: str | None = None
) -> Variable:
    """floor(x / y), broadcast as elementwise_add."""
    out = _binary("elementwise_floordiv", x, y, name, {"axis": axis})
    return LayerHelper("elementwise_floordiv", name).append_activation(out, act)


# -- reductions and scans -----------------------------------------------------------------------------------


def _reduce(
    op_type: str, input: core.Variable, dim: int | Sequence[int] | None, keep_dim: bool, name: str | None
) -> Variable:
    dims = [0] if dim is None else [dim] if isinstance(dim, int) else list(dim)
    attrs = {"dim": dims, "keep_dim": bool(keep_dim), "reduce_all": dim is None}
    return _unary(op_type, input, name, attrs, dtype="bool" if op_type in ("reduce_all", "reduce_any") else None)


def reduce_max(
    input: core.Variable, dim: int | Sequence[int] | None = None, keep_dim: bool = False, name: str | None = None
) -> Variable:
    """Maximum over ``dim`` (an int or a list; None: every dim)."""
    return _reduce("reduce_max", input, dim, keep_dim, name)


def reduce_min(
    input: core.Variable, dim: int | Sequence[int] | None = None, keep_dim: bool = False, name: str | None = None
) -> Variable:
    """Minimum over ``dim`` (an int or a list; None: every dim)."""
    return _reduce("reduce_min", input, dim, keep_dim, name)


def reduce_prod(
    input: core.Variable, dim: int | Sequence[int] | None = None, keep_dim: bool = False, name: str | None = None
) -> Variable:
    """Product over ``dim`` (an int or a list; None: every dim)."""
    return _reduce("reduce_prod", input, dim, keep_dim, name)


def reduce_all(
    input: core.Variable, dim: int | Sequence[int] | None = None, keep_dim: bool = False, name: str | None = None
) -> Variable:
    """Whether every entry over ``dim`` is true (bool)."""
    return _reduce("reduce_all", input, dim, keep_dim, name)


def reduce_any(
    input: core.Variable, dim: int | Sequence[int] | None = None, keep_dim: bool = False, name: str | None = None
) -> Variable:
    """Whether some entry over ``dim`` is true (bool)."""
    return _reduce("reduce_any", input, dim, keep_dim, name)


def logsumexp(
    x: core.Variable, axis: int | Sequence[int] | None = None, keepdim: bool = False, name: str | None = None
) -> Variable:
    """log(sum(exp(x))) over ``axis`` (None: every dim)."""
    axes = [] if axis is None else [axis] if isinstance(axis, int) else list(axis)
    return _unary("logsumexp", x, name, {"axis": axes, "keepdim": bool(keepdim), "reduce_all": axis is None})


def p_norm(
    x: core.Variable,
    porder: float = 2.0,
    axis: int = -1,
    keepdim: bool = False,
    asvector: bool = False,
    epsilon: float = 1e-12,
    name: str | None = None,
) -> Variable:
    """The porder-norm of x along ``axis`` (of all x with ``asvector``)."""
    attrs = {"porder": float(porder), "axis": int(axis), "keepdim": bool(keepdim), "asvector": bool(asvector)}
    return _unary("p_norm", x, name, {**attrs, "epsilon": float(epsilon)})


def cumsum(
    x: core.Variable, axis: int | None = None, exclusive: bool = False, reverse: bool = False, name: str | None = None
) -> Variable:
    """Cumulative sums along ``axis`` (None: of x flattened)."""
    attrs = {"axis": -1 if axis is None else int(axis), "flatten": axis is None}
    return _unary("cumsum", x, name, {**attrs, "exclusive": bool(exclusive), "reverse": bool(reverse)})


def cumprod(x: core.Variable, dim: int, name: str | None = None) -> Variable:
    """Cumulative products along ``dim``."""
    return _unary("cumprod", x, name, {"dim": int(dim)})


# -- comparisons and logic ---------------------------------------------------------------------------------


def equal(x: core.Variable, y: core.Variable, name: str | None = None) -> Variable:
    """x == y elementwise (bool)."""
    return _binary("equal", x, y, name, dtype="bool")


def not_equal(x: core.Variable, y: core.Variable, name: str | None = None) -> Variable:
    """x != y elementwise (bool)."""
    return _binary("not_equal", x, y, name, dtype="bool")


def less_than(
    x: core.Variable,
    y: core.Variable,
    force_cpu: bool | None = None,
    cond: core.Variable | None = None,
    name: str | None = None,
) -> Variable:
    """x < y elementwise (bool); into ``cond`` when given (a loop updating its condition: ``layers.While``)."""
    attrs = {"force_cpu": bool(force_cpu)}
    if cond is None:
        return _binary("less_than", x, y, name, attrs, dtype="bool")
    helper = LayerHelper("less_than", name)
    for var, arg in ((x, "x"), (y, "y"), (cond, "cond")):
        helper.check_variable(var, arg)
    helper.append_op("less_than", {"X": [x], "Y": [y]}, {"Out": [cond]}, attrs)
    return cond  # type: ignore[return-value]


def less_equal(x: core.Variable, y: core.Variable, name: str | None = None) -> Variable:
    """x <= y elementwise (bool)."""
    return _binary("less_equal", x, y, name, dtype="bool")


def greater_than(x: core.Variable, y: core.Variable, name: str | None = None) -> Variable:
    """x > y elementwise (bool)."""
    return _binary("greater_than", x, y, name, dtype="bool")


def greater_equal(x: core.Variable, y: core.Variable, name: str | None = None) -> Variable:
    """x >= y elementwise (bool)."""
    return _binary("greater_equal", x, y, name, dtype="bool")


def logical_and(x: core.Variable, y: core.Variable, name: str | None = None) -> Variable:
    """x and y (bool; nonzero is true)."""
    return _binary("logical_and", x, y, name, dtype="bool")


def logical_or(x: core.Variable, y: core.Variable, name: str | None = None) -> Variable:
    """x or y (bool; nonzero is true)."""
    return _binary("logical_or", x, y, name, dtype="bool")


def logical_xor(x: core.Variable, y: core.Variable, name: str | None = None) -> Variable:
    """x xor y (bool; nonzero is true)."""
    return _binary("logical_xor", x, y, name, dtype="bool")


def logical_not(x: core.Variable, name: str | None = None) -> Variable:
    """not x (bool; nonzero is true)."""
    return _unary("logical_not", x, name, dtype="bool")


def where(condition: core.Variable, x: core.Variable, y: core.Variable, name: str | None = None) -> Variable:
    """x where ``condition`` holds, else y (``paddle.where``; Fluid's ``where`` gave indices)."""
    helper = LayerHelper("where", name)
    for value, arg in ((condition, "condition"), (x, "x"), (y, "y")):
        helper.check_variable(value, arg)
    out = helper.create_tmp(x.dtype)
    helper.append_op("where", {"Condition": [condition], "X": [x], "Y": [y]}, {"Out": [out]})
    return out


# -- indexing -------------------------------------------------------------------------------------------------


def _indexed(
    op_type: str,
    inputs: dict[str, core.Variable],
    name: str | None,
    attrs: dict[str, Any] | None = None,
    out_slot: str = "Out",
) -> Variable:
    """``op_type`` over ``inputs`` (the first one's dtype) into a new temporary."""
    helper = LayerHelper(op_type, name)
    for slot, value in inputs.items():
        helper.check_variable(value, slot)
    out = helper.create_tmp(next(iter(inputs.values())).dtype)
    helper.append_op(op_type, {slot: [v] for slot, v in inputs.items()}, {out_slot: [out]}, attrs)
    return out


def gather(input: core.Variable, index: core.Variable, axis: int = 0, name: str | None = None) -> Variable:
    """The slices of ``input`` at ``index`` along ``axis``."""
    return _indexed("gather", {"X": input, "Index": index}, name, {"axis": int(axis)})


def gather_nd(input: core.Variable, index: core.Variable, name: str | None = None) -> Variable:
    """input[index[..., 0], ..., index[..., k-1]]."""
    return _indexed("gather_nd", {"X": input, "Index": index}, name)


def scatter(
    input: core.Variable, index: core.Variable, updates: core.Variable, overwrite: bool = True, name: str | None = None
) -> Variable:
    """``input`` with the rows at ``index`` replaced by ``updates`` (or accumulated without ``overwrite``)."""
    return _indexed("scatter", {"X": input, "Ids": index, "Updates": updates}, name, {"overwrite": bool(overwrite)})


def scatter_nd_add(
    ref: core.Variable, index: core.Variable, updates: core.Variable, name: str | None = None
) -> Variable:
    """``ref`` with ``updates`` added at the coordinates ``index`` gives."""
    return _indexed("scatter_nd_add", {"X": ref, "Index": index, "Updates": updates}, name)


def index_select(x: core.Variable, index: core.Variable, axis: int = 0, name: str | None = None) -> Variable:
    """The slices of ``x`` at ``index`` along ``axis``."""
    return _indexed("index_select", {"X": x, "Index": index}, name, {"dim": int(axis)})


def index_sample(x: core.Variable, index: core.Variable, name: str | None = None) -> Variable:
    """out[i, j] = x[i, index[i, j]]."""
    return _indexed("index_sample", {"X": x, "Index": index}, name)


def take_along_axis(arr: core.Variable, indices: core.Variable, axis: int, name: str | None = None) -> Variable:
    """The entries of ``arr`` at ``indices`` along ``axis``."""
    return _indexed("take_along_axis", {"Input": arr, "Index": indices}, name, {"Axis": int(axis)}, "Result")


def put_along_axis(
    arr: core.Variable,
    indices: core.Variable,
    values: core.Variable,
    axis: int,
    reduce: str = "assign",
    include_self: bool = True,
    name: str | None = None,
) -> Variable:
    """``arr`` with ``values`` put at ``indices`` along ``axis``: assigned, or reduced into the targets (add, mul,
    mean, amin, amax), ``arr``'s values taking part unless ``include_self`` is False."""
    attrs = {"Axis": int(axis), "Reduce": reduce, "Include_self": bool(include_self)}
    inputs = {"Input": arr, "Index": indices, "Value": values}
    return _indexed("put_along_axis", inputs, name, attrs, "Result")


def masked_select(x: core.Variable, mask: core.Variable, name: str | None = None) -> Variable:
    """The entries of ``x`` where ``mask`` holds (1-D)."""
    return _indexed("masked_select", {"X": x, "Mask": mask}, name, out_slot="Y")


def one_hot(input: core.Variable, depth: int, allow_out_of_range: bool = False, name: str | None = None) -> Variable:
    """float32 one-hot rows of ``depth`` for the int ids of ``input`` (``one_hot_v2``: a new last dim)."""
    attrs = {"depth": int(depth), "allow_out_of_range": bool(allow_out_of_range), "dtype": DTYPE_TO_PROTO["float32"]}
    return _unary("one_hot_v2", input, name, attrs, dtype="float32")


def argsort(
    input: core.Variable, axis: int = -1, descending: bool = False, name: str | None = None
) -> tuple[Variable, Variable]:
    """(``input`` sorted along ``axis``, the int64 indices each entry came from)."""
    helper = LayerHelper("argsort", name)
    helper.check_variable(input, "input")
    out, indices = helper.create_tmp(input.dtype), helper.create_tmp("int64", stop_gradient=True)
    helper.append_op(
        "argsort",
        {"X": [input]},
        {"Out": [out], "Indices": [indices]},
        {"axis": int(axis), "descending": bool(descending)},
    )
    return out, indices


# -- creation and replication ----------------------------------------------------------------------------------


def shape(input: core.Variable, name: str | None = None) -> Variable:
    """The shape of ``input`` (int32 [rank])."""
    helper = LayerHelper("shape", name)
    helper.check_variable(input, "input")
    out = helper.create_tmp("int32", stop_gradient=True)
    helper.append_op("shape", {"Input": [input]}, {"Out": [out]})
    return out


def size(input: core.Variable, name: str | None = None) -> Variable:
    """The number of elements of ``input`` (int64, 0-D)."""
    helper = LayerHelper("size", name)
    helper.check_variable(input, "input")
    out = helper.create_tmp("int64", stop_gradient=True)
    helper.append_op("size", {"Input": [input]}, {"Out": [out]})
    return out


_VALUE_ATTRS = {"bool": "bool_values", "float32": "fp32_values", "float64": "fp64_values"}


def assign_value(value: Any, name: str | None = None) -> Variable:
    """A constant holding the numpy array ``value`` (bool, int32, int64, float32 or float64)."""
    helper = LayerHelper("assign_value", name)
    array = np.asarray(value)
    dtype = array.dtype.name
    if dtype not in ("bool", "int32", "int64", "float32", "float64"):
        raise helper.error(f"value of dtype {dtype}: expected bool, int32, int64, float32 or float64")
    out = helper.create_tmp(dtype, stop_gradient=True)
    values = array.reshape(-1).tolist()
    attrs = {
        "shape": list(array.shape),
        "dtype": DTYPE_TO_PROTO[dtype],
        _VALUE_ATTRS.get(dtype, f"{dtype}_values"): values,
    }
    helper.append_op("assign_value", {}, {"Out": [out]}, attrs)
    return out


def full_like(x: core.Variable, fill_value: float, dtype: Any = None, name: str | None = None) -> Variable:
    """``fill_value`` in x's shape, of ``dtype`` (None: x's)."""
    out_dtype = None if dtype is None else to_dtype(dtype)
    code = -1 if out_dtype is None else DTYPE_TO_PROTO[out_dtype]
    return _unary("fill_any_like", x, name, {"value": float(fill_value), "dtype": code}, dtype=out_dtype)


def _scalar(helper: LayerHelper, value: Any, dtype: str) -> core.Variable:
    """``value`` as a one-element variable (itself when it is one)."""
    if isinstance(value, core.Variable):
        return value
    out = helper.create_tmp(dtype, stop_gradient=True)
    attrs = {"shape": [1], "dtype": DTYPE_TO_PROTO[dtype], "value": float(value)}
    helper.append_op("fill_constant", {}, {"Out": [out]}, attrs)
    return out


def range(start: Any, end: Any, step: Any, dtype: Any, name: str | None = None) -> Variable:  # noqa: A001
    """start, start + step, ... up to ``end`` (excluded); each bound a number or a one-element variable."""
    helper = LayerHelper("range", name)
    kind = to_dtype(dtype)
    inputs = {slot: [_scalar(helper, v, kind)] for slot, v in (("Start", start), ("End", end), ("Step", step))}
    out = helper.create_tmp(kind, stop_gradient=True)
    helper.append_op("range", inputs, {"Out": [out]})
    return out


def linspace(start: Any, stop: Any, num: Any, dtype: Any = "float32", name: str | None = None) -> Variable:
    """``num`` evenly spaced values from ``start`` to ``stop`` (both included)."""
    helper = LayerHelper("linspace", name)
    kind = to_dtype(dtype)
    inputs = {
        "Start": [_scalar(helper, start, "float32")],
        "Stop": [_scalar(helper, stop, "float32")],
        "Num": [_scalar(helper, num, "int32")],
    }
    out = helper.create_tmp(kind, stop_gradient=True)
    helper.append_op("linspace", inputs, {"Out": [out]}, {"dtype": DTYPE_TO_PROTO[kind]})
    return out


def expand(x: core.Variable, shape: Sequence[int], name: str | None = None) -> Variable:
    """x broadcast to ``shape`` (-1 keeps x's dim; ``paddle.expand``, the ``expand_v2`` op)."""
    return _unary("expand_v2", x, name, {"shape": [int(d) for d in shape]})


def expand_as(x: core.Variable, y: core.Variable, name: str | None = None) -> Variable:
    """x broadcast to y's shape (``expand_as_v2``)."""
    helper = LayerHelper("expand_as_v2", name)
    helper.check_variable(x, "x")
    helper.check_variable(y, "y")
    out = helper.create_tmp(x.dtype)
    helper.append_op("expand_as_v2", {"X": [x], "Y": [y]}, {"Out": [out]}, {"target_shape": list(tensor_shape(y))})
    return out


def tile(x: core.Variable, repeat_times: Sequence[int], name: str | None = None) -> Variable:
    """x repeated ``repeat_times[i]`` times along dim i."""
    return _unary("tile", x, name, {"repeat_times": [int(r) for r in repeat_times]})


def stack(x: Sequence[core.Variable], axis: int = 0, name: str | None = None) -> Variable:
    """The variables (of one shape) joined along a new dim ``axis``."""
    helper = LayerHelper("stack", name)
    xs = [helper.check_variable(v, "x") for v in x]
    if not xs:
        raise helper.error("x is empty: nothing to stack")
    out = helper.create_tmp(xs[0].dtype)
    helper.append_op("stack", {"X": xs}, {"Y": [out]}, {"axis": int(axis)})
    return out


def unstack(x: core.Variable, axis: int = 0, num: int | None = None, name: str | None = None) -> list[Variable]:
    """The slices of x along ``axis`` (``num`` of them: x's dim when known)."""
    helper = LayerHelper("unstack", name)
    helper.check_variable(x, "x")
    dims = tensor_shape(x)
    count = dims[axis] if num is None else int(num)
    if count < 0:
        raise helper.error(f"dim {axis} of x {list(dims)} is unknown: give num")
    outs = [helper.create_tmp(x.dtype) for _ in builtins.range(count)]
    helper.append_op("unstack", {"X": [x]}, {"Y": outs}, {"axis": int(axis), "num": count})
    return outs


def flip(input: core.Variable, dims: Sequence[int], name: str | None = None) -> Variable:
    """``input`` reversed along each of ``dims``."""
    return _unary("flip", input, name, {"axis": [int(d) for d in dims]})


def roll(
    input: core.Variable, shifts: int | Sequence[int], dims: int | Sequence[int] | None = None, name: str | None = None
) -> Variable:
    """``input`` rolled by ``shifts`` along ``dims`` (None: flattened)."""
    shift_list = [shifts] if isinstance(shifts, int) else list(shifts)
    axes = [] if dims is None else [dims] if isinstance(dims, int) else list(dims)
    return _unary("roll", input, name, {"shifts": shift_list, "axis": axes})
