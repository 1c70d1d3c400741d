"""blockir inference programs exported as ONNX models (``save_inference_model(..., format="onnx")``).

:func:`to_onnx` maps each op of a framed inference program (feed ops: graph inputs; fetch ops: graph
outputs; persistable variables: initializers) through :data:`EXPORTS`, one function per blockir op type
writing ONNX nodes at opset :data:`EXPORT_OPSET`. Ops without an ONNX equivalent, or with attributes ONNX
cannot express, are listed all at once, naming each op.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

from blockir.errors import BlockirError
from blockir.io.onnx import DTYPE_TO_ONNX, onnx_module
from blockir.ir import Operator, Program
from blockir.ir.dtypes import PROTO_TO_DTYPE
from blockir.ir.proto_io import atomic_write
from blockir.ir.schema import Lowering, lowering_of

__all__ = ["EXPORTS", "EXPORT_OPSET", "to_onnx", "write_model"]

EXPORT_OPSET = 18


class _Refused(BlockirError):
    """An op the export cannot write: its reason, collected with the others'."""


class _Writer:
    """The ONNX graph being written: nodes, initializers, fresh names."""

    def __init__(self, program: Program, values: dict[str, np.ndarray]) -> None:
        self.onnx = onnx_module()
        self.block = program.global_block()
        self.values = values
        self.nodes: list[Any] = []
        self.initializers: dict[str, np.ndarray] = {}
        self.count = 0
        self.current: Operator | None = None

    @property
    def op(self) -> Operator:
        """The op being exported."""
        if self.current is None:
            raise BlockirError("ONNX export: no op is being exported")
        return self.current

    # -- names and values ---------------------------------------------------------------------------
    def fresh(self, hint: str) -> str:
        self.count += 1
        return f"{hint}__{self.count}"

    def const(self, value: Any, dtype: str | None = None) -> str:
        name = self.fresh("const")
        self.initializers[name] = np.asarray(value, dtype=dtype)
        return name

    def i(self, slot: str, k: int = 0) -> str:
        return self.op.input(slot)[k]

    def has(self, slot: str) -> bool:
        return bool(self.op.input(slot))

    def o(self, slot: str = "Out", k: int = 0) -> str:
        return self.op.output(slot)[k]

    def attr(self, name: str, default: Any = None) -> Any:
        return self.op.attrs.get(name, default)

    def shape(self, name: str) -> list[int] | None:
        if name in self.values:
            return list(self.values[name].shape)
        var = self.block.find_var_recursive(name)
        return None if var.shape is None else list(var.shape)

    def rank(self, name: str) -> int:
        shape = self.shape(name)
        if shape is None:
            raise _Refused(f"the rank of {name!r} is unknown")
        return len(shape)

    def dtype(self, name: str) -> str:
        if name in self.values:
            return self.values[name].dtype.name
        return self.block.find_var_recursive(name).dtype or "float32"

    # -- nodes --------------------------------------------------------------------------------------
    def node(self, op_type: str, inputs: Sequence[str], outputs: Sequence[str] | None = None, **attrs: Any) -> str:
        """Append an ONNX node; returns its first output (a fresh name unless ``outputs`` says)."""
        outs = list(outputs) if outputs is not None else [self.fresh(op_type)]
        name = self.fresh(f"{self.op.type}/{op_type}")
        self.nodes.append(self.onnx.helper.make_node(op_type, list(inputs), outs, name=name, **attrs))
        return outs[0]

    def ints(self, values: Sequence[int]) -> str:
        return self.const(np.asarray(list(values), "int64"))


Exporter = Callable[[_Writer], None]


# -- exporters -------------------------------------------------------------------------------------


def _simple(onnx_type: str, slot: str = "X", **fixed: Any) -> Exporter:
    def export(w: _Writer) -> None:
        w.node(onnx_type, [w.i(slot)], [w.o()], **fixed)

    return export


def _renamed(onnx_type: str, names: dict[str, str]) -> Exporter:
    def export(w: _Writer) -> None:
        w.node(onnx_type, [w.i("X")], [w.o()], **{onnx: float(w.attr(bir)) for bir, onnx in names.items()})

    return export


def _y_aligned(w: _Writer) -> str:
    """Y of an elementwise op, reshaped so numpy broadcasting puts its dims at X's dim ``axis``."""
    x, y, axis = w.i("X"), w.i("Y"), w.attr("axis", -1)
    xr, yr = w.rank(x), w.rank(y)
    if axis == -1 or axis == xr - yr or yr >= xr:
        return y
    trailing = xr - axis - yr
    return w.node("Unsqueeze", [y, w.ints(range(yr, yr + trailing))])


def _binary(onnx_type: str) -> Exporter:
    def export(w: _Writer) -> None:
        w.node(onnx_type, [w.i("X"), _y_aligned(w)], [w.o()])

    return export


def _python_mod(w: _Writer) -> None:
    x, y = w.i("X"), _y_aligned(w)
    if w.dtype(x).startswith("int"):
        w.node("Mod", [x, y], [w.o()], fmod=0)
        return
    q = w.node("Floor", [w.node("Div", [x, y])])
    w.node("Sub", [x, w.node("Mul", [q, y])], [w.o()])


def _not_equal(w: _Writer) -> None:
    w.node("Not", [w.node("Equal", [w.i("X"), _y_aligned(w)])], [w.o()])


def _scale(w: _Writer) -> None:
    if w.has("ScaleTensor") or w.has("BiasTensor"):
        raise _Refused("ScaleTensor or BiasTensor inputs")
    x, dtype = w.i("X"), w.dtype(w.i("X"))
    scale, bias = float(w.attr("scale", 1.0)), float(w.attr("bias", 0.0))
    s, b = w.const(np.asarray(scale, dtype)), w.const(np.asarray(bias, dtype))
    if w.attr("bias_after_scale", True):
        w.node("Add", [w.node("Mul", [x, s]), b], [w.o()])
    else:
        w.node("Mul", [w.node("Add", [x, b]), s], [w.o()])


def _gelu(w: _Writer) -> None:
    x, dtype = w.i("X"), w.dtype(w.i("X"))
    half, one = w.const(np.asarray(0.5, dtype)), w.const(np.asarray(1.0, dtype))
    if w.attr("approximate", False):
        c, k = w.const(np.asarray(np.sqrt(2 / np.pi), dtype)), w.const(np.asarray(0.044715, dtype))
        cube = w.node("Mul", [w.node("Mul", [x, x]), x])
        inner = w.node("Mul", [c, w.node("Add", [x, w.node("Mul", [k, cube])])])
        w.node("Mul", [w.node("Mul", [half, x]), w.node("Add", [one, w.node("Tanh", [inner])])], [w.o()])
        return
    root = w.const(np.asarray(np.sqrt(2.0), dtype))
    w.node("Mul", [w.node("Mul", [half, x]), w.node("Add", [one, w.node("Erf", [w.node("Div", [x, root])])])], [w.o()])


def _swish(w: _Writer) -> None:
    x = w.i("X")
    beta = float(w.attr("beta", 1.0)) if w.op.type == "swish" else 1.0
    scaled = x if beta == 1.0 else w.node("Mul", [x, w.const(np.asarray(beta, w.dtype(x)))])
    w.node("Mul", [x, w.node("Sigmoid", [scaled])], [w.o()])


def _clip_between(lo: str, hi: str) -> Exporter:
    def export(w: _Writer) -> None:
        dtype = w.dtype(w.i("X"))
        bounds = [w.const(np.asarray(w.attr(lo), dtype)), w.const(np.asarray(w.attr(hi), dtype))]
        w.node("Clip", [w.i("X"), *bounds], [w.o()])

    return export


def _relu6(w: _Writer) -> None:
    dtype = w.dtype(w.i("X"))
    bounds = [w.const(np.asarray(0, dtype)), w.const(np.asarray(w.attr("threshold", 6.0), dtype))]
    w.node("Clip", [w.i("X"), *bounds], [w.o()])


def _clip(w: _Writer) -> None:
    dtype = w.dtype(w.i("X"))
    lo = (
        w.node("Cast", [w.i("Min")], to=DTYPE_TO_ONNX[dtype])
        if w.has("Min")
        else w.const(np.asarray(w.attr("min"), dtype))
    )
    hi = (
        w.node("Cast", [w.i("Max")], to=DTYPE_TO_ONNX[dtype])
        if w.has("Max")
        else w.const(np.asarray(w.attr("max"), dtype))
    )
    w.node("Clip", [w.i("X"), lo, hi], [w.o()])


def _shrink(kind: str) -> Exporter:
    def export(w: _Writer) -> None:
        lambd = float(w.attr("lambda" if kind == "soft" else "threshold", 0.5))
        w.node("Shrink", [w.i("X")], [w.o()], lambd=lambd, bias=lambd if kind == "soft" else 0.0)

    return export


def _unary_chain(*ops: str) -> Exporter:
    def export(w: _Writer) -> None:
        x = w.i("X")
        for k, op in enumerate(ops):
            x = w.node(op, [x], [w.o()] if k == len(ops) - 1 else None)

    return export


def _logsigmoid(w: _Writer) -> None:
    w.node("Neg", [w.node("Softplus", [w.node("Neg", [w.i("X")])])], [w.o()])


def _tanh_shrink(w: _Writer) -> None:
    w.node("Sub", [w.i("X"), w.node("Tanh", [w.i("X")])], [w.o()])


def _log1p(w: _Writer) -> None:
    w.node("Log", [w.node("Add", [w.i("X"), w.const(np.asarray(1, w.dtype(w.i("X"))))])], [w.o()])


def _square(w: _Writer) -> None:
    w.node("Mul", [w.i("X"), w.i("X")], [w.o()])


def _softplus(w: _Writer) -> None:
    if float(w.attr("beta", 1.0)) != 1.0:
        raise _Refused(f"beta {w.attr('beta')}")
    w.node("Softplus", [w.i("X")], [w.o()])


def _hard_swish(w: _Writer) -> None:
    if (w.attr("threshold", 6.0), w.attr("scale", 6.0), w.attr("offset", 3.0)) != (6.0, 6.0, 3.0):
        raise _Refused("threshold, scale and offset other than 6, 6 and 3")
    w.node("HardSwish", [w.i("X")], [w.o()])


def _thresholded_relu(w: _Writer) -> None:
    if float(w.attr("value", 0.0)) != 0.0:
        raise _Refused("value other than 0")
    w.node("ThresholdedRelu", [w.i("X")], [w.o()], alpha=float(w.attr("threshold", 1.0)))


def _selu(w: _Writer) -> None:
    w.node("Selu", [w.i("X")], [w.o()], alpha=float(w.attr("alpha")), gamma=float(w.attr("scale")))


def _hard_sigmoid(w: _Writer) -> None:
    w.node("HardSigmoid", [w.i("X")], [w.o()], alpha=float(w.attr("slope")), beta=float(w.attr("offset")))


def _last_two_swapped(w: _Writer, name: str) -> str:
    rank = w.rank(name)
    if rank < 2:
        return name
    perm = [*range(rank - 2), rank - 1, rank - 2]
    return w.node("Transpose", [name], perm=perm)


def _matmul(x_flag: str, y_flag: str) -> Exporter:
    def export(w: _Writer) -> None:
        x, y = w.i("X"), w.i("Y")
        if w.attr(x_flag, False):
            x = _last_two_swapped(w, x)
        if w.attr(y_flag, False):
            y = _last_two_swapped(w, y)
        alpha = float(w.attr("alpha", 1.0))
        out = w.node("MatMul", [x, y], [w.o()] if alpha == 1.0 else None)
        if alpha != 1.0:
            w.node("Mul", [out, w.const(np.asarray(alpha, w.dtype(w.i("X"))))], [w.o()])

    return export


def _flat2(w: _Writer, name: str, cols: int) -> str:
    """``name`` reshaped to 2-D, its first ``cols`` dims the rows (Flatten's axis)."""
    if w.rank(name) == 2 and cols == 1:
        return name
    return w.node("Flatten", [name], axis=cols)


def _out_shape(w: _Writer, name: str) -> str:
    shape = w.shape(name)
    if shape is None or sum(d == -1 for d in shape) > 1:
        raise _Refused(f"the shape of {name!r} is not known to within one dim")
    return w.ints(shape)


def _mul(w: _Writer) -> None:
    xn, yn = int(w.attr("x_num_col_dims", 1)), int(w.attr("y_num_col_dims", 1))
    product = w.node("MatMul", [_flat2(w, w.i("X"), xn), _flat2(w, w.i("Y"), yn)])
    w.node("Reshape", [product, _out_shape(w, w.o())], [w.o()])


def _fc(w: _Writer) -> None:
    cols = int(w.attr("in_num_col_dims", 1))
    product = w.node("MatMul", [_flat2(w, w.i("Input"), cols), w.i("W")])
    act = w.attr("activation_type", "")
    if act not in ("", "relu"):
        raise _Refused(f"activation_type {act!r}")
    if w.has("Bias"):
        product = w.node("Add", [product, w.i("Bias")])
    if w.rank(w.o()) != 2:
        product = w.node("Reshape", [product, _out_shape(w, w.o())])
    w.node("Relu" if act else "Identity", [product], [w.o()])


def _spatial_pads(w: _Writer) -> dict[str, Any]:
    """ONNX's auto_pad or pads ([all befores, all afters]) for a 2-D or 3-D conv or pool op (one padding per
    spatial axis, or a (before, after) pair per axis)."""
    algorithm = w.attr("padding_algorithm", "EXPLICIT")
    if w.attr("data_format", "NCHW") not in ("NCHW", "NCDHW", "AnyLayout"):
        raise _Refused(f"data_format {w.attr('data_format')!r}")
    if algorithm == "SAME":
        return {"auto_pad": "SAME_UPPER"}
    if algorithm == "VALID":
        return {"auto_pad": "VALID"}
    p, dims = list(w.attr("paddings", [])), 3 if "3d" in w.op.type else 2
    p = p or [0] * dims
    pairs = [(v, v) for v in p] if len(p) == dims else [(p[2 * a], p[2 * a + 1]) for a in range(dims)]
    return {"pads": [b for b, _ in pairs] + [a for _, a in pairs]}


def _conv(w: _Writer) -> None:
    inputs = [w.i("Input"), w.i("Filter")]
    if w.has("ResidualData"):
        raise _Refused("ResidualData")
    if w.has("Bias"):
        inputs.append(w.node("Reshape", [w.i("Bias"), w.ints([-1])]))
    attrs = _spatial_pads(w)
    w.node(
        "Conv",
        inputs,
        [w.o("Output")],
        strides=list(w.attr("strides")),
        dilations=list(w.attr("dilations")),
        group=int(w.attr("groups", 1)),
        **attrs,
    )


def _conv_transpose(w: _Writer) -> None:
    if w.attr("output_size"):
        raise _Refused("output_size")
    inputs = [w.i("Input"), w.i("Filter")]
    if w.has("Bias"):
        inputs.append(w.node("Reshape", [w.i("Bias"), w.ints([-1])]))
    attrs = _spatial_pads(w)
    if "auto_pad" in attrs:
        raise _Refused(f"padding_algorithm {w.attr('padding_algorithm')!r}")
    extra = {"output_padding": list(w.attr("output_padding"))} if w.attr("output_padding") else {}
    w.node(
        "ConvTranspose",
        inputs,
        [w.o("Output")],
        strides=list(w.attr("strides")),
        dilations=list(w.attr("dilations")),
        group=int(w.attr("groups", 1)),
        **attrs,
        **extra,
    )


def _pool(w: _Writer) -> None:
    kind = w.attr("pooling_type")
    x = w.i("X")
    if w.attr("global_pooling") or (w.attr("adaptive") and all(k == 1 for k in w.attr("ksize"))):
        w.node("GlobalMaxPool" if kind == "max" else "GlobalAveragePool", [x], [w.o()])
        return
    if w.attr("adaptive"):
        raise _Refused("adaptive pooling to other than a single window")
    attrs = _spatial_pads(w)
    attrs.update(
        kernel_shape=list(w.attr("ksize")), strides=list(w.attr("strides")), ceil_mode=int(w.attr("ceil_mode", False))
    )
    if kind == "max":
        w.node("MaxPool", [x], [w.o()], **attrs)
    else:
        w.node("AveragePool", [x], [w.o()], count_include_pad=int(not w.attr("exclusive", True)), **attrs)


def _batch_norm(w: _Writer) -> None:
    if w.attr("data_layout", "NCHW") != "NCHW":
        raise _Refused(f"data_layout {w.attr('data_layout')!r}")
    inputs = [w.i(s) for s in ("X", "Scale", "Bias", "Mean", "Variance")]
    w.node("BatchNormalization", inputs, [w.o("Y")], epsilon=float(w.attr("epsilon", 1e-5)))


def _layer_norm(w: _Writer) -> None:
    x = w.i("X")
    axis = int(w.attr("begin_norm_axis", 1))
    shape = w.shape(x)
    if shape is None or -1 in shape[axis:]:
        raise _Refused("normalized dims known only at run time")
    dtype = w.dtype(x)
    trailing = shape[axis:]
    scale = w.node("Reshape", [w.i("Scale"), w.ints(trailing)]) if w.has("Scale") else w.const(np.ones(trailing, dtype))
    bias = w.node("Reshape", [w.i("Bias"), w.ints(trailing)]) if w.has("Bias") else w.const(np.zeros(trailing, dtype))
    w.node("LayerNormalization", [x, scale, bias], [w.o("Y")], axis=axis, epsilon=float(w.attr("epsilon", 1e-5)))


def _instance_norm(w: _Writer) -> None:
    x = w.i("X")
    shape = w.shape(x)
    channels = shape[1] if shape is not None else -1
    if channels == -1:
        raise _Refused("channels known only at run time")
    dtype = w.dtype(x)
    scale = w.i("Scale") if w.has("Scale") else w.const(np.ones(channels, dtype))
    bias = w.i("Bias") if w.has("Bias") else w.const(np.zeros(channels, dtype))
    w.node("InstanceNormalization", [x, scale, bias], [w.o("Y")], epsilon=float(w.attr("epsilon", 1e-5)))


def _dropout(w: _Writer) -> None:
    if w.attr("dropout_implementation", "downgrade_in_infer") == "upscale_in_train":
        w.node("Identity", [w.i("X")], [w.o()])
        return
    keep = w.const(np.asarray(1.0 - float(w.attr("dropout_prob", 0.5)), w.dtype(w.i("X"))))
    w.node("Mul", [w.i("X"), keep], [w.o()])


def _reshape(w: _Writer) -> None:
    if w.has("ShapeTensor"):
        raise _Refused("ShapeTensor inputs")
    shape = w.node("Cast", [w.i("Shape")], to=7) if w.has("Shape") else w.ints(w.attr("shape"))
    w.node("Reshape", [w.i("X"), shape], [w.o()])


def _transpose(w: _Writer) -> None:
    w.node("Transpose", [w.i("X")], [w.o()], perm=list(w.attr("axis")))


def _concat(w: _Writer) -> None:
    if w.has("AxisTensor"):
        raise _Refused("AxisTensor")
    axis = int(w.attr("axis", 0))
    w.node("Concat", list(w.op.input("X")), [w.o()], axis=axis if axis >= 0 else axis + w.rank(w.i("X")))


def _split(w: _Writer) -> None:
    outs = list(w.op.output("Out"))
    axis = int(w.attr("axis", 0))
    sections = list(w.attr("sections", []))
    shape = w.shape(w.i("X"))
    if not sections:
        size = shape[axis] if shape is not None else -1
        if size == -1:
            raise _Refused("split into equal parts of a dim known only at run time")
        sections = [size // len(outs)] * len(outs)
    if -1 in sections:
        size = shape[axis] if shape is not None else -1
        if size == -1:
            raise _Refused("a -1 section of a dim known only at run time")
        sections[sections.index(-1)] = size - sum(s for s in sections if s != -1)
    w.node("Split", [w.i("X"), w.ints(sections)], outs, axis=axis)


def _flatten_range(w: _Writer) -> None:
    x = w.i("X")
    rank = w.rank(x)
    start, stop = int(w.attr("start_axis", 1)) % max(rank, 1), int(w.attr("stop_axis", 1)) % max(rank, 1)
    shape = w.shape(x) or []
    trailing = shape[stop + 1 :]
    if -1 in trailing:
        raise _Refused("dims after stop_axis known only at run time")
    w.node("Reshape", [x, w.ints([0] * start + [-1] + trailing)], [w.o()])


def _squeeze(w: _Writer) -> None:
    axes = list(w.attr("axes", []))
    w.node("Squeeze", [w.i("X"), w.ints(axes)] if axes else [w.i("X")], [w.o()])


def _unsqueeze(w: _Writer) -> None:
    if w.has("AxesTensor") or w.has("AxesTensorList"):
        raise _Refused("AxesTensor inputs")
    w.node("Unsqueeze", [w.i("X"), w.ints(w.attr("axes"))], [w.o()])


def _slice(w: _Writer) -> None:
    if any(w.has(s) for s in ("StartsTensor", "EndsTensor", "StartsTensorList", "EndsTensorList")):
        raise _Refused("starts or ends as tensors")
    axes = list(w.attr("axes"))
    decrease = list(w.attr("decrease_axis", []))
    inputs = [w.i("Input"), w.ints(w.attr("starts")), w.ints(w.attr("ends")), w.ints(axes)]
    out = w.node("Slice", inputs, None if decrease else [w.o()])
    if decrease:
        w.node("Squeeze", [out, w.ints(decrease)], [w.o()])


def _gather(w: _Writer) -> None:
    if w.has("Axis"):
        raise _Refused("Axis as a tensor")
    w.node("Gather", [w.i("X"), w.i("Index")], [w.o()], axis=int(w.attr("axis", 0)))


def _index_select(w: _Writer) -> None:
    w.node("Gather", [w.i("X"), w.i("Index")], [w.o()], axis=int(w.attr("dim", 0)))


def _take_along_axis(w: _Writer) -> None:
    w.node("GatherElements", [w.i("Input"), w.i("Index")], [w.o("Result")], axis=int(w.attr("Axis")))


def _lookup_table(w: _Writer) -> None:
    if int(w.attr("padding_idx", -1)) != -1:
        raise _Refused("padding_idx")
    w.node("Gather", [w.i("W"), w.i("Ids")], [w.o()], axis=0)


def _cast(w: _Writer) -> None:
    dtype = PROTO_TO_DTYPE[int(w.attr("out_dtype"))]
    w.node("Cast", [w.i("X")], [w.o()], to=DTYPE_TO_ONNX[dtype])


def _shape(w: _Writer) -> None:
    shape = w.node("Shape", [w.i("Input")])
    w.node("Cast", [shape], [w.o()], to=DTYPE_TO_ONNX[w.dtype(w.o())])


def _fill_constant(w: _Writer) -> None:
    if w.has("ShapeTensor") or w.has("ShapeTensorList") or w.has("ValueTensor"):
        raise _Refused("shape or value as tensors")
    dtype = PROTO_TO_DTYPE[int(w.attr("dtype", 5))]
    w.initializers[w.o()] = np.full(list(w.attr("shape")), w.attr("value", 0.0), dtype=dtype)


def _assign_value(w: _Writer) -> None:
    dtype = PROTO_TO_DTYPE[int(w.attr("dtype"))]
    for field in ("values", "fp32_values", "int32_values", "int64_values", "bool_values", "fp64_values"):
        found = w.attr(field, ())
        if len(found):
            w.initializers[w.o()] = np.asarray(found, dtype=dtype).reshape(list(w.attr("shape")))
            return
    w.initializers[w.o()] = np.zeros(list(w.attr("shape")), dtype=dtype)


def _fill_any_like(w: _Writer) -> None:
    code = int(w.attr("dtype", -1))
    dtype = w.dtype(w.i("X")) if code == -1 else PROTO_TO_DTYPE[code]
    value = w.onnx.numpy_helper.from_array(np.asarray([w.attr("value", 0.0)], dtype=dtype))
    w.node("ConstantOfShape", [w.node("Shape", [w.i("X")])], [w.o()], value=value)


def _softmax(onnx_type: str) -> Exporter:
    def export(w: _Writer) -> None:
        w.node(onnx_type, [w.i("X")], [w.o()], axis=int(w.attr("axis", -1)))

    return export


def _reduce(onnx_type: str) -> Exporter:
    def export(w: _Writer) -> None:
        x = w.i("X")
        rank = w.rank(x)
        keep = bool(w.attr("keep_dim", False))
        every = w.attr("reduce_all", False) or rank == 0
        axes = list(range(rank)) if every else [int(d) % rank for d in w.attr("dim", [0])]
        reduced = w.node(onnx_type, [x, w.ints(axes)], keepdims=int(keep))
        w.node("Reshape", [reduced, _out_shape(w, w.o())], [w.o()])

    return export


def _logsumexp(w: _Writer) -> None:
    x = w.i("X")
    rank = w.rank(x)
    axes = list(range(rank)) if w.attr("reduce_all", False) else [int(d) % rank for d in w.attr("axis", [0])]
    reduced = w.node("ReduceLogSumExp", [x, w.ints(axes)], keepdims=int(bool(w.attr("keepdim", False))))
    w.node("Reshape", [reduced, _out_shape(w, w.o())], [w.o()])


def _mean(w: _Writer) -> None:
    reduced = w.node("ReduceMean", [w.i("X")], keepdims=0)
    w.node("Reshape", [reduced, _out_shape(w, w.o())], [w.o()])


def _sum(w: _Writer) -> None:
    w.node("Sum", list(w.op.input("X")), [w.o()])


def _stack(w: _Writer) -> None:
    names = list(w.op.input("X"))
    axis = int(w.attr("axis", 0))
    axis = axis if axis >= 0 else axis + w.rank(names[0]) + 1
    parts = [w.node("Unsqueeze", [n, w.ints([axis])]) for n in names]
    w.node("Concat", parts, [w.o("Y")], axis=axis)


def _unstack(w: _Writer) -> None:
    outs = list(w.op.output("Y"))
    axis = int(w.attr("axis", 0))
    parts = [w.fresh("part") for _ in outs]
    w.node("Split", [w.i("X"), w.ints([1] * len(outs))], parts, axis=axis)
    for part, out in zip(parts, outs):
        w.node("Squeeze", [part, w.ints([axis])], [out])


def _arg(onnx_type: str) -> Exporter:
    def export(w: _Writer) -> None:
        if w.attr("flatten", False):
            raise _Refused("flatten")
        out = w.node(onnx_type, [w.i("X")], axis=int(w.attr("axis")), keepdims=int(bool(w.attr("keepdims", False))))
        w.node("Cast", [out], [w.o()], to=DTYPE_TO_ONNX[w.dtype(w.o())])

    return export


def _top_k(w: _Writer) -> None:
    if w.has("K"):
        raise _Refused("K as a tensor")
    w.node(
        "TopK",
        [w.i("X"), w.ints([int(w.attr("k", 1))])],
        [w.o("Out"), w.o("Indices")],
        axis=int(w.attr("axis", -1)),
        largest=int(bool(w.attr("largest", True))),
        sorted=int(bool(w.attr("sorted", True))),
    )


def _expand(w: _Writer) -> None:
    if w.has("Shape") or w.has("expand_shapes_tensor"):
        raise _Refused("shape as tensors")
    w.node("Expand", [w.i("X"), w.ints([1 if d == -1 else d for d in w.attr("shape")])], [w.o()])


def _tile(w: _Writer) -> None:
    if w.has("RepeatTimes") or w.has("repeat_times_tensor"):
        raise _Refused("repeat_times as tensors")
    x, repeats = w.i("X"), list(w.attr("repeat_times"))
    rank = w.rank(x)
    if len(repeats) > rank:
        x = w.node("Unsqueeze", [x, w.ints(range(len(repeats) - rank))])
    repeats = [1] * (rank - len(repeats)) + repeats
    w.node("Tile", [x, w.ints(repeats)], [w.o()])


def _where(w: _Writer) -> None:
    w.node("Where", [w.i("Condition"), w.i("X"), w.i("Y")], [w.o()])


def _range(w: _Writer) -> None:
    squeeze = [w.node("Reshape", [w.i(s), w.ints([])]) for s in ("Start", "End", "Step")]
    w.node("Range", squeeze, [w.o()])


def _pad(w: _Writer) -> None:
    p = list(w.attr("paddings"))
    value = w.const(np.asarray(w.attr("pad_value", 0.0), w.dtype(w.i("X"))))
    w.node("Pad", [w.i("X"), w.ints(p[0::2] + p[1::2]), value], [w.o()], mode="constant")


_PAD_MODES = {"constant": "constant", "reflect": "reflect", "replicate": "edge", "circular": "wrap"}


def _pad3d(w: _Writer) -> None:
    if w.has("Paddings"):
        raise _Refused("Paddings as a tensor")
    x = w.i("X")
    rank = w.rank(x)
    left, right, top, bottom, front, back = list(w.attr("paddings"))
    fmt = w.attr("data_format", "NCDHW")
    if fmt != "NCDHW":
        raise _Refused(f"data_format {fmt!r}")
    begins, ends = [0, 0, front, top, left], [0, 0, back, bottom, right]
    if rank != 5:
        raise _Refused(f"a {rank}-D input")
    mode = _PAD_MODES[w.attr("mode", "constant")]
    value = w.const(np.asarray(w.attr("value", 0.0), w.dtype(x)))
    w.node("Pad", [x, w.ints(begins + ends), value], [w.o()], mode=mode)


def _interp(w: _Writer) -> None:
    if any(w.has(s) for s in ("OutSize", "SizeTensor", "Scale")):
        raise _Refused("sizes or scales as tensors")
    if w.attr("data_layout", "NCHW") != "NCHW":
        raise _Refused(f"data_layout {w.attr('data_layout')!r}")
    mode = {"nearest_interp_v2": "nearest", "bilinear_interp_v2": "linear", "bicubic_interp_v2": "cubic"}[w.op.type]
    corners, align_mode = bool(w.attr("align_corners", True)), int(w.attr("align_mode", 1))
    if corners and mode != "nearest":
        ctm = "align_corners"
    elif mode == "nearest" or align_mode == 1:
        ctm = "asymmetric"
    else:
        ctm = "half_pixel"
    if mode == "nearest" and corners:
        raise _Refused("nearest with align_corners")
    out = w.shape(w.o())
    if out is None or -1 in out[2:]:
        raise _Refused("an output size known only at run time")
    x = w.i("X")
    sizes = w.ints(out[2:])
    extra: dict[str, Any] = {"nearest_mode": "floor"} if mode == "nearest" else {}
    if mode == "cubic":
        extra["cubic_coeff_a"] = -0.75
    w.node("Resize", [x, "", "", sizes], [w.o()], mode=mode, coordinate_transformation_mode=ctm, axes=[2, 3], **extra)


def _pixel_shuffle(w: _Writer) -> None:
    if w.attr("data_format", "NCHW") != "NCHW":
        raise _Refused(f"data_format {w.attr('data_format')!r}")
    w.node("DepthToSpace", [w.i("X")], [w.o()], blocksize=int(w.attr("upscale_factor")), mode="CRD")


def _prelu(w: _Writer) -> None:
    x, alpha = w.i("X"), w.i("Alpha")
    mode = w.attr("mode", "all")
    rank = w.rank(x)
    if mode == "channel":
        alpha = w.node("Reshape", [alpha, w.ints([-1] + [1] * (rank - 2))])
    elif mode == "element":
        shape = w.shape(x) or []
        alpha = w.node("Reshape", [alpha, w.ints(shape[1:])])
    else:
        alpha = w.node("Reshape", [alpha, w.ints([])])
    w.node("PRelu", [x, alpha], [w.o()])


def _cumsum(w: _Writer) -> None:
    if w.attr("flatten", False):
        raise _Refused("flatten")
    w.node(
        "CumSum",
        [w.i("X"), w.const(np.asarray(int(w.attr("axis", -1)), "int64"))],
        [w.o()],
        exclusive=int(bool(w.attr("exclusive"))),
        reverse=int(bool(w.attr("reverse"))),
    )


def _flip(w: _Writer) -> None:
    axes = list(w.attr("axis"))
    big = (1 << 63) - 1
    w.node(
        "Slice",
        [w.i("X"), w.ints([-1] * len(axes)), w.ints([-big] * len(axes)), w.ints(axes), w.ints([-1] * len(axes))],
        [w.o()],
    )


def _pow(w: _Writer) -> None:
    if w.has("FactorTensor"):
        raise _Refused("FactorTensor")
    w.node("Pow", [w.i("X"), w.const(np.asarray(w.attr("factor", 1.0), w.dtype(w.i("X"))))], [w.o()])


def _logical(onnx_type: str) -> Exporter:
    def export(w: _Writer) -> None:
        w.node(onnx_type, [w.i("X"), w.i("Y")], [w.o()])

    return export


def _p_norm(w: _Writer) -> None:
    p = float(w.attr("porder", 2.0))
    if w.attr("asvector", False) or not np.isfinite(p) or p == 0:
        raise _Refused(f"porder {p}" if not w.attr("asvector", False) else "asvector")
    x, keep = w.i("X"), int(bool(w.attr("keepdim", False)))
    axes = w.ints([int(w.attr("axis", -1))])
    if p in (1.0, 2.0):
        w.node("ReduceL2" if p == 2.0 else "ReduceL1", [x, axes], [w.o()], keepdims=keep)
        return
    power, root = w.const(np.asarray(p, w.dtype(x))), w.const(np.asarray(1.0 / p, w.dtype(x)))
    total = w.node("ReduceSum", [w.node("Pow", [w.node("Abs", [x]), power]), axes], keepdims=keep)
    w.node("Pow", [total, root], [w.o()])


def _tril_triu(w: _Writer) -> None:
    k = w.const(np.asarray(int(w.attr("diagonal", 0)), "int64"))
    w.node("Trilu", [w.i("X"), k], [w.o()], upper=int(not w.attr("lower", False)))


def _where_index(w: _Writer) -> None:
    w.node("Transpose", [w.node("NonZero", [w.i("Condition")])], [w.o()], perm=[1, 0])


def _gather_nd(w: _Writer) -> None:
    w.node("GatherND", [w.i("X"), w.i("Index")], [w.o()])


def _one_hot(w: _Writer) -> None:
    if w.has("depth_tensor") or w.attr("allow_out_of_range", False):
        raise _Refused("depth_tensor or allow_out_of_range")
    dtype = PROTO_TO_DTYPE[int(w.attr("dtype", 5))]
    values = w.const(np.asarray([0, 1], dtype))
    w.node("OneHot", [w.i("X"), w.const(np.asarray(int(w.attr("depth")), "int64")), values], [w.o()], axis=-1)


def _argsort(w: _Writer) -> None:
    x = w.i("X")
    axis = int(w.attr("axis", -1))
    shape = w.shape(x)
    if shape is None or shape[axis] == -1:
        raise _Refused("a dim known only at run time")
    if w.attr("stable", False):
        raise _Refused("stable=True (TopK's order among equal values is unspecified)")
    w.node(
        "TopK",
        [x, w.ints([shape[axis]])],
        [w.o("Out"), w.o("Indices")],
        axis=axis,
        largest=int(bool(w.attr("descending", False))),
        sorted=1,
    )


EXPORTS: dict[str, Exporter] = {
    **{
        bir: _simple(onnx)
        for bir, onnx in (
            ("relu", "Relu"),
            ("sigmoid", "Sigmoid"),
            ("tanh", "Tanh"),
            ("exp", "Exp"),
            ("log", "Log"),
            ("sqrt", "Sqrt"),
            ("abs", "Abs"),
            ("floor", "Floor"),
            ("ceil", "Ceil"),
            ("sin", "Sin"),
            ("cos", "Cos"),
            ("tan", "Tan"),
            ("atan", "Atan"),
            ("erf", "Erf"),
            ("sign", "Sign"),
            ("reciprocal", "Reciprocal"),
            ("softsign", "Softsign"),
            ("assign", "Identity"),
            ("mish", "Mish"),
            ("logical_not", "Not"),
            ("round", "Round"),
        )
    },  # fmt: skip
    "leaky_relu": _renamed("LeakyRelu", {"alpha": "alpha"}),
    "elu": _renamed("Elu", {"alpha": "alpha"}),
    "celu": _renamed("Celu", {"alpha": "alpha"}),
    "selu": _selu,
    "hard_sigmoid": _hard_sigmoid,
    "hard_swish": _hard_swish,
    "thresholded_relu": _thresholded_relu,
    "softplus": _softplus,
    "gelu": _gelu,
    "swish": _swish,
    "silu": _swish,
    "relu6": _relu6,
    "brelu": _clip_between("t_min", "t_max"),
    "clip": _clip,
    "softshrink": _shrink("soft"),
    "hard_shrink": _shrink("hard"),
    "logsigmoid": _logsigmoid,
    "tanh_shrink": _tanh_shrink,
    "rsqrt": _unary_chain("Sqrt", "Reciprocal"),
    "log1p": _log1p,
    "square": _square,
    "scale": _scale,
    "elementwise_add": _binary("Add"),
    "elementwise_sub": _binary("Sub"),
    "elementwise_mul": _binary("Mul"),
    "elementwise_div": _binary("Div"),
    "elementwise_pow": _binary("Pow"),
    "elementwise_max": _binary("Max"),
    "elementwise_min": _binary("Min"),
    "elementwise_mod": _python_mod,
    "equal": _binary("Equal"),
    "not_equal": _not_equal,
    "greater_than": _binary("Greater"),
    "greater_equal": _binary("GreaterOrEqual"),
    "less_than": _binary("Less"),
    "less_equal": _binary("LessOrEqual"),
    "logical_and": _logical("And"),
    "logical_or": _logical("Or"),
    "logical_xor": _logical("Xor"),
    "matmul_v2": _matmul("trans_x", "trans_y"),
    "matmul": _matmul("transpose_X", "transpose_Y"),
    "mul": _mul,
    "fc": _fc,
    "conv2d": _conv,
    "depthwise_conv2d": _conv,
    "conv2d_transpose": _conv_transpose,
    "depthwise_conv2d_transpose": _conv_transpose,
    "conv3d": _conv,
    "conv3d_transpose": _conv_transpose,
    "pool2d": _pool,
    "pool3d": _pool,
    "batch_norm": _batch_norm,
    "layer_norm": _layer_norm,
    "instance_norm": _instance_norm,
    "dropout": _dropout,
    "reshape2": _reshape,
    "transpose2": _transpose,
    "concat": _concat,
    "split": _split,
    "flatten_contiguous_range": _flatten_range,
    "squeeze2": _squeeze,
    "unsqueeze2": _unsqueeze,
    "slice": _slice,
    "gather": _gather,
    "index_select": _index_select,
    "take_along_axis": _take_along_axis,
    "gather_nd": _gather_nd,
    "tril_triu": _tril_triu,
    "where_index": _where_index,
    "one_hot_v2": _one_hot,
    "argsort": _argsort,
    "lookup_table_v2": _lookup_table,
    "cast": _cast,
    "shape": _shape,
    "fill_constant": _fill_constant,
    "assign_value": _assign_value,
    "fill_any_like": _fill_any_like,
    "softmax": _softmax("Softmax"),
    "log_softmax": _softmax("LogSoftmax"),
    "reduce_sum": _reduce("ReduceSum"),
    "reduce_mean": _reduce("ReduceMean"),
    "reduce_max": _reduce("ReduceMax"),
    "reduce_min": _reduce("ReduceMin"),
    "reduce_prod": _reduce("ReduceProd"),
    "logsumexp": _logsumexp,
    "mean": _mean,
    "sum": _sum,
    "stack": _stack,
    "unstack": _unstack,
    "arg_max": _arg("ArgMax"),
    "arg_min": _arg("ArgMin"),
    "top_k_v2": _top_k,
    "expand_v2": _expand,
    "tile": _tile,
    "where": _where,
    "range": _range,
    "pad": _pad,
    "pad3d": _pad3d,
    "nearest_interp_v2": _interp,
    "bilinear_interp_v2": _interp,
    "bicubic_interp_v2": _interp,
    "pixel_shuffle": _pixel_shuffle,
    "prelu": _prelu,
    "cumsum": _cumsum,
    "flip": _flip,
    "pow": _pow,
    "p_norm": _p_norm,
}


def _value_info(w: _Writer, name: str) -> Any:
    var = w.block.find_var_recursive(name)
    dtype = var.dtype or "float32"
    if dtype not in DTYPE_TO_ONNX:
        raise BlockirError(f"variable {name!r} is {dtype}, which ONNX export does not write")
    shape = None if var.shape is None else [d if d >= 0 else f"{name}_d{k}" for k, d in enumerate(var.shape)]
    return w.onnx.helper.make_tensor_value_info(name, DTYPE_TO_ONNX[dtype], shape)


def to_onnx(program: Program, values: dict[str, np.ndarray], where: str = "<program>") -> Any:
    """The ``ModelProto`` of an inference ``program`` (framed by feed and fetch ops) whose persistable variables
    hold ``values``; an error listing every op that has no ONNX export."""
    w = _Writer(program, values)
    feeds: list[tuple[int, str]] = []
    fetches: list[tuple[int, str]] = []
    problems: dict[str, list[str]] = {}
    for op in w.block.ops:
        lowering = lowering_of(op.type)
        if lowering is Lowering.FEED:
            feeds.append((op.attrs.get("col", 0), op.output("Out")[0]))
            continue
        if lowering is Lowering.FETCH:
            fetches.append((op.attrs.get("col", 0), op.input("X")[0]))
            continue
        export = EXPORTS.get(op.type)
        if export is None:
            problems.setdefault(op.type, []).append("no ONNX equivalent")
            continue
        w.current = op
        try:
            export(w)
        except _Refused as e:
            problems.setdefault(op.type, []).append(str(e))
    if problems:
        listed = "; ".join(f"{t} ({len(r)}: {', '.join(sorted(set(r)))})" for t, r in sorted(problems.items()))
        raise BlockirError(f"{where}: ops ONNX export cannot write: {listed}")
    onnx = w.onnx
    used = {n for node in w.nodes for n in node.input}
    inits = [onnx.numpy_helper.from_array(np.asarray(v), name) for name, v in values.items() if name in used]
    inits += [onnx.numpy_helper.from_array(np.asarray(v), name) for name, v in w.initializers.items()]
    graph = onnx.helper.make_graph(
        w.nodes,
        "blockir",
        [_value_info(w, n) for _, n in sorted(feeds)],
        [_value_info(w, n) for _, n in sorted(fetches)],
        initializer=inits,
    )
    model = onnx.helper.make_model(
        graph, opset_imports=[onnx.helper.make_opsetid("", EXPORT_OPSET)], producer_name="blockir"
    )
    model.ir_version = 8
    return model


def write_model(path: str | os.PathLike[str], program: Program, values: dict[str, np.ndarray]) -> None:
    """Write ``program`` as the ONNX model file ``path`` (atomically), checked by ``onnx.checker``."""
    model = to_onnx(program, values, str(path))
    onnx = onnx_module()
    try:
        onnx.checker.check_model(model, full_check=True)
    except Exception as e:  # noqa: BLE001  # onnx's ValidationError or an inference error: our bug, said plainly
        raise BlockirError(f"{path}: the exported model fails onnx.checker: {str(e).splitlines()[0]}") from None
    atomic_write(path, model.SerializeToString())
