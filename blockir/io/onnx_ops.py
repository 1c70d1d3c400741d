"""The ONNX op table: one row per ONNX op and opset range, naming the blockir ops it becomes and how its
attributes convert.

A row's converter receives a :class:`blockir.io.onnx.Node` and appends blockir ops; it raises
:class:`~blockir.io.onnx.Refused` (an attribute value or input blockir cannot honour, saying which) or
:class:`~blockir.io.onnx.NeedsConstant` (an input blockir's op takes as an attribute but the model computes at
run time). ``docs/onnx.md`` lists the table.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, cast

import numpy as np

from blockir.io.onnx import Converter, Node, Refused, dtype_name
from blockir.ir import Variable
from blockir.ir.dtypes import DTYPE_TO_PROTO, VarKind

__all__ = ["RULES", "OpRule", "rule_for"]

_NEWEST = 1 << 30
_INT_MAX = (1 << 63) - 1


@dataclass(frozen=True)
class OpRule:
    """ONNX op ``onnx`` at opsets ``since`` to ``until`` (inclusive) becomes the blockir ``ops``; ``domain``: its
    domain ("" the default one), whose versions the opsets are."""

    onnx: str
    since: int
    convert: Converter
    ops: tuple[str, ...]
    until: int = _NEWEST
    note: str = ""
    domain: str = ""


# -- helpers -------------------------------------------------------------------------------------


def _axis(axis: int, rank: int) -> int:
    if not -rank <= axis < max(rank, 1):
        raise Refused(f"axis {axis} is out of range for rank {rank}")
    return axis % rank if rank else 0


def _ints(value: Any) -> list[int]:
    return [int(v) for v in np.asarray(value).reshape(-1)]


def _unary(type: str, **fixed: Any) -> Converter:
    def convert(n: Node) -> None:
        n.emit(type, {"X": n.x(0)}, {"Out": n.y()}, fixed)

    return convert


def _unary_attrs(type: str, mapping: dict[str, tuple[str, float]]) -> Converter:
    """A unary op whose ONNX attributes (``onnx name -> (blockir name, ONNX default)``) carry over."""

    def convert(n: Node) -> None:
        attrs = {bir: float(n.attr(name, default)) for name, (bir, default) in mapping.items()}
        n.emit(type, {"X": n.x(0)}, {"Out": n.y()}, attrs)

    return convert


def _legacy_axis(n: Node) -> int:
    """Before opset 7, ``broadcast=1`` put B's dims at A's dim ``axis`` (suffix-aligned without it): Paddle's
    ``axis``; -1 (numpy's broadcasting) from opset 7."""
    return int(n.attr("axis", -1)) if n.opset < 7 and n.attr("broadcast", 0) else -1


# integers blockir's kernels compute widened: exact, but for uint64 (as int64: exact modulo 2**64 for Add, Sub and
# Mul; ordered by _ordered for the comparisons, Max, Min and TopK; Div and Mod exact below 2**63)
_NARROW = {
    "int8": "int32",
    "int16": "int32",
    "uint8": "int32",
    "uint16": "int32",
    "uint32": "int64",
    "uint64": "int64",
}


def _ordered(n: Node, x: str, dtype: str) -> str:
    """``x`` (of ``dtype``) widened so that the signed order of the result is ``x``'s order: uint64 as int64 with
    its top bit flipped; :func:`_unordered` undoes it."""
    wide = n.cast(x, _NARROW[dtype])
    if dtype != "uint64":
        return wide
    return n.binary("bitwise_xor", wide, n.constant(np.int64(-(1 << 63))))


def _unordered(n: Node, x: str, dtype: str, out: str) -> None:
    if dtype == "uint64":
        x = n.binary("bitwise_xor", x, n.constant(np.int64(-(1 << 63))))
    n.cast(x, dtype, out=out)


def _per_channel(n: Node) -> np.ndarray | None:
    """B as Paddle's per-channel operand when it is a constant that numpy's broadcasting puts on dim 1 of an A of
    rank 3 or more (``[1, C, 1, 1]`` or ``[C, 1, 1]`` over ``[N, C, H, W]``, C known): its C values, for ``axis=1``
    (the form of a convolution's bias, which the fusion passes take into the convolution); else None."""
    b = n.const(1)
    if b is None or b.ndim == 0 or _legacy_axis(n) != -1:
        return None
    shape = n.shape(0)
    if shape is None or len(shape) < 3 or b.ndim > len(shape):
        return None
    aligned = (1,) * (len(shape) - b.ndim) + b.shape
    channel_only = all(d == 1 for k, d in enumerate(aligned) if k != 1)
    return b.reshape(-1) if channel_only and aligned[1] == shape[1] else None


def _into_batch_norm(n: Node, type: str, channels: np.ndarray) -> bool:
    """A Mul or Add of per-channel constants ``channels`` (``m``, ``a``) right after an inference
    BatchNormalization, or after a Mul or Add already folded into one (caffe2's exports put a Mul and an Add after
    every batch norm), folds into its ``batch_norm``, as onnxruntime folds them when it builds a session: Scale and
    Bias become new constants, ``scale * m`` and ``bias * m`` for a Mul, ``bias + a`` for an Add (computed in
    float64, stored in their type), and the batch_norm writes this node's output. Only where this node alone reads
    its input X (no other node, subgraph or graph output: X is then no value of the program), in the batch_norm's
    block, and the batch_norm's Scale and Bias are constants of ``channels``' type and shape. False: nothing done
    (the node imports as an ``axis=1`` op)."""
    graph, x = n.graph, n.inputs[0]
    bn = graph.batch_norms.get(x)
    if type not in ("elementwise_mul", "elementwise_add") or bn is None or graph.readers[x] != 1:
        return False
    if bn.block is not graph.block or n.const(0) is not None or bn.output("Y") != (n.x(0),):
        return False
    names = {slot: bn.input(slot)[0] for slot in ("Scale", "Bias")}
    values = {slot: graph.values.get(name) for slot, name in names.items()}
    if any(v is None or v.dtype != channels.dtype or v.shape != channels.shape for v in values.values()):
        return False
    scale, bias, c = (np.asarray(v, np.float64) for v in (values["Scale"], values["Bias"], channels))
    folded = {"Scale": scale * c, "Bias": bias * c} if type == "elementwise_mul" else {"Bias": bias + c}
    for slot, value in folded.items():
        bn.set_input(slot, [n.constant(value.astype(channels.dtype))])
        graph.replaced.add(names[slot])
    before, after = graph.find(n.x(0)), graph.find(n.y())
    after.shape, after.dtype = before.shape, before.dtype
    bn.rename_output(before.name, after.name)
    graph.block.remove_var(before.name)
    bn.set_attr("op_origin", [*bn.attr("op_origin"), n.origin()])
    del graph.names.of[x], graph.batch_norms[x]
    graph.batch_norms[n.outputs[0]] = bn
    return True


def _binary(type: str) -> Converter:
    def convert(n: Node) -> None:
        narrow = _NARROW.get(n.dtype(0))
        if narrow is None:
            channels = _per_channel(n)
            if channels is None:
                n.binary(type, n.x(0), n.x(1), out=n.y(), attrs={"axis": _legacy_axis(n)})
            elif not _into_batch_norm(n, type, channels):
                n.binary(type, n.x(0), n.constant(channels), out=n.y(), attrs={"axis": 1})
            return
        wide = n.binary(type, n.cast(n.x(0), narrow), n.cast(n.x(1), narrow), attrs={"axis": _legacy_axis(n)})
        n.cast(wide, n.dtype(0), out=n.y())

    return convert


def _variadic(type: str) -> Converter:
    """Max, Min, Sum: a chain of the binary op over the inputs (numpy broadcasting)."""

    def convert(n: Node) -> None:
        names = [n.x(i) for i in range(len(n.inputs)) if n.has(i)]
        if len(names) == 1:
            n.emit("assign", {"X": names[0]}, {"Out": n.y()})
            return
        dtype, ordered = n.dtype(0), type != "elementwise_add"  # Max and Min compare; Sum adds (modulo)
        narrow = dtype in _NARROW
        if narrow:
            names = [_ordered(n, name, dtype) if ordered else n.cast(name, _NARROW[dtype]) for name in names]
        acc = names[0]
        for k, name in enumerate(names[1:], 1):
            last = k == len(names) - 1 and not narrow
            acc = n.binary(type, acc, name, out=n.y() if last else None)
        if narrow and ordered:
            _unordered(n, acc, dtype, n.y())
        elif narrow:
            n.cast(acc, dtype, out=n.y())

    return convert


def _mean(n: Node) -> None:
    names = [n.x(i) for i in range(len(n.inputs)) if n.has(i)]
    acc = names[0]
    for name in names[1:]:
        acc = n.binary("elementwise_add", acc, name)
    n.emit("scale", {"X": acc}, {"Out": n.y()}, {"scale": 1.0 / len(names)})


def _round(n: Node) -> None:
    _round_even(n, n.x(0), n.dtype(0), n.y())


def _round_even(n: Node, x: str, dtype: str, out: str | None = None) -> str:
    """``x`` (of float ``dtype``) rounded half to even (blockir's round, as Paddle's, rounds half away from zero)."""
    away = n.unary("round", x)
    even = n.unary("scale", n.unary("round", n.unary("scale", x, {"scale": 0.5})), {"scale": 2.0})
    frac = n.unary("abs", n.binary("elementwise_sub", x, n.unary("floor", x)))
    half = n.binary("equal", frac, n.constant(np.asarray(0.5, dtype)))
    out = out or n.tmp("round")
    n.emit("where", {"Condition": half, "X": even, "Y": away}, {"Out": out})
    return out


def _neg(n: Node) -> None:
    n.emit("scale", {"X": n.x(0)}, {"Out": n.y()}, {"scale": -1.0})


def _identity(n: Node) -> None:
    n.emit("assign", {"X": n.x(0)}, {"Out": n.y()})


def _pow(n: Node) -> None:
    y = n.cast(n.x(1), n.dtype(0))
    n.binary("elementwise_pow", n.x(0), y, out=n.y())


def _mod(n: Node) -> None:
    if n.attr("fmod", 0) and "int" in n.dtype(0):  # C's remainder: Python's, less y where the signs differ
        dtype = n.dtype(0)
        x, y = (n.cast(n.x(i), _NARROW[dtype]) if dtype in _NARROW else n.x(i) for i in (0, 1))
        r = n.binary("elementwise_mod", x, y)
        zero = n.constant(np.zeros((), n.graph.find(r).dtype))
        signs = n.binary("logical_xor", n.binary("less_than", r, zero), n.binary("less_than", x, zero))
        fix = n.binary("logical_and", n.binary("not_equal", r, zero), signs)
        out = n.tmp("fmod") if dtype in _NARROW else n.y()
        n.emit("where", {"Condition": fix, "X": n.binary("elementwise_sub", r, y), "Y": r}, {"Out": out})
        if dtype in _NARROW:
            n.cast(out, dtype, out=n.y())
        return
    if n.attr("fmod", 0):
        x, y = n.x(0), n.x(1)
        q = n.binary("elementwise_div", x, y)
        t = n.unary("sign", q)
        a = n.unary("floor", n.unary("abs", q))
        n.binary("elementwise_sub", x, n.binary("elementwise_mul", n.binary("elementwise_mul", t, a), y), out=n.y())
        return
    _binary("elementwise_mod")(n)


def _prelu(n: Node) -> None:
    x, slope = n.x(0), n.x(1)
    pos = n.unary("relu", x)
    neg = n.binary("elementwise_sub", x, pos)
    shape = n.shape(1)
    legacy = n.opset < 7 and shape is not None and len(shape) == 1 and shape[0] != 1  # one slope per channel
    scaled = n.binary("elementwise_mul", neg, slope, attrs={"axis": 1 if legacy else -1})
    n.binary("elementwise_add", pos, scaled, out=n.y())


def _clip(n: Node) -> None:
    inputs: dict[str, Any] = {"X": n.x(0)}
    lo, hi = -np.inf, np.inf
    if n.opset < 11:
        lo, hi = float(n.attr("min", lo)), float(n.attr("max", hi))
    elif n.dtype(0) not in ("float32", "float64") or any(n.has(i) and n.const(i) is None for i in (1, 2)):
        _clip_bounds(n)
        return
    else:
        for i, slot in ((1, "Min"), (2, "Max")):
            if n.has(i):
                inputs[slot] = n.cast(n.x(i), n.dtype(0))
        bounds = [float(n.const(i).reshape(-1)[0]) if n.has(i) else None for i in (1, 2)]  # type: ignore[union-attr]
        if bounds[0] is not None and bounds[1] is not None and bounds[0] > bounds[1]:
            _clip_bounds(n)  # min > max: every value becomes max
            return
    n.emit("clip", inputs, {"Out": n.y()}, {"min": lo, "max": hi})


def _clip_bounds(n: Node) -> None:
    """Clip as Min(max, Max(x, min)) (ONNX's definition: max wins where min > max), integers widened."""
    dtype = n.dtype(0)
    narrow = dtype in _NARROW
    acc = _ordered(n, n.x(0), dtype) if narrow else n.x(0)
    for i, type in ((1, "elementwise_max"), (2, "elementwise_min")):
        if n.has(i):
            bound = n.cast(n.x(i), dtype)
            acc = n.binary(type, acc, _ordered(n, bound, dtype) if narrow else bound)
    if narrow:
        _unordered(n, acc, dtype, n.y())
    else:
        n.cast(acc, dtype, out=n.y())


def _gelu(n: Node) -> None:
    n.emit("gelu", {"X": n.x(0)}, {"Out": n.y()}, {"approximate": n.attr("approximate", "none") == "tanh"})


def _shrink(n: Node) -> None:
    lambd, bias = float(n.attr("lambd", 0.5)), float(n.attr("bias", 0.0))
    if bias == lambd:
        n.emit("softshrink", {"X": n.x(0)}, {"Out": n.y()}, {"lambda": lambd})
    elif bias == 0.0:
        n.emit("hard_shrink", {"X": n.x(0)}, {"Out": n.y()}, {"threshold": lambd})
    else:
        raise Refused(f"bias {bias} neither 0 (hard_shrink) nor lambd {lambd} (softshrink)")


def _softplus(n: Node) -> None:
    n.emit("softplus", {"X": n.x(0)}, {"Out": n.y()}, {"beta": 1.0, "threshold": float("inf")})


def _selu(n: Node) -> None:
    attrs = {
        "alpha": float(n.attr("alpha", 1.67326319217681884765625)),
        "scale": float(n.attr("gamma", 1.05070102214813232421875)),
    }
    n.emit("selu", {"X": n.x(0)}, {"Out": n.y()}, attrs)


def _hard_sigmoid(n: Node) -> None:
    attrs = {"slope": float(n.attr("alpha", 0.2)), "offset": float(n.attr("beta", 0.5))}
    n.emit("hard_sigmoid", {"X": n.x(0)}, {"Out": n.y()}, attrs)


def _hard_swish(n: Node) -> None:
    n.emit("hard_swish", {"X": n.x(0)}, {"Out": n.y()}, {"threshold": 6.0, "scale": 6.0, "offset": 3.0})


def _swish(n: Node) -> None:
    n.emit("swish", {"X": n.x(0)}, {"Out": n.y()}, {"beta": float(n.attr("alpha", 1.0))})


def _swiglu(n: Node) -> None:
    """Swish_alpha(A) * B (A and B of one shape)."""
    gate = n.unary("swish", n.x(0), {"beta": float(n.attr("alpha", 1.0))})
    n.binary("elementwise_mul", gate, n.x(1), out=n.y())


def _thresholded_relu(n: Node) -> None:
    n.emit("thresholded_relu", {"X": n.x(0)}, {"Out": n.y()}, {"threshold": float(n.attr("alpha", 1.0))})


# -- tensors -------------------------------------------------------------------------------------


def _constant(n: Node) -> None:
    onnx_name = n.outputs[0]
    value = _constant_value(n)
    n.graph.consts[onnx_name] = value


def _constant_value(n: Node) -> np.ndarray:
    from blockir.io.onnx import onnx_module

    onnx = onnx_module()
    if "value" in n.attrs:
        t = n.attrs["value"]
        dtype_name(t.data_type, "its value")
        return onnx.numpy_helper.to_array(t)
    for name, dtype in (
        ("value_float", "float32"),
        ("value_floats", "float32"),
        ("value_int", "int64"),
        ("value_ints", "int64"),
    ):
        if name in n.attrs:
            return np.asarray(n.attrs[name], dtype=dtype)
    raise Refused(f"a Constant with {', '.join(n.attrs) or 'no value'} (sparse and string values are refused)")


def _constant_of_shape(n: Node) -> None:
    value = np.zeros(1, "float32")
    if "value" in n.attrs:
        value = _constant_value(n).reshape(-1)
    dtype = value.dtype.name
    shape = n.const(0)
    out = n.y()
    if shape is not None:
        n.emit("fill_constant", {}, {"Out": out}, _fill_attrs(_ints(shape), dtype, value[0]))
        return
    n.emit("fill_constant", {"ShapeTensor": n.x(0)}, {"Out": out}, _fill_attrs([], dtype, value[0]))


def _fill_attrs(shape: list[int], dtype: str, value: Any) -> dict[str, Any]:
    return {"shape": shape, "dtype": DTYPE_TO_PROTO[dtype], "value": float(value), "str_value": repr(value.item())}


def _cast(n: Node) -> None:
    to = n.attr("to")
    if isinstance(to, str):  # opset 1 names the type
        from blockir.io.onnx import onnx_module

        to = onnx_module().TensorProto.DataType.Value(to.upper())
    dtype = dtype_name(int(to), "its target type")
    n.cast(n.x(0), dtype, out=n.y())


def _cast_like(n: Node) -> None:
    value = n.const(0)
    if value is not None and n.const(1) is None and n.graph.find(n.x(1)).dtype:  # only input 1's dtype read
        n.graph.consts[n.outputs[0]] = value.astype(n.dtype(1))  # a constant, as Pad's constant_value must be
        return
    n.cast(n.x(0), n.dtype(1), out=n.y())


def _shape(n: Node) -> None:
    shape = n.shape(0)
    start, end = n.attr("start", 0), n.attr("end")
    if shape is not None and -1 not in shape:  # known at import: a constant
        n.graph.consts[n.outputs[0]] = np.asarray(shape[slice(start, end)], "int64")
        return
    full = n.tmp("shape")
    n.emit("shape", {"Input": n.x(0)}, {"Out": full})
    full = n.cast(full, "int64")
    if start == 0 and end is None:
        n.emit("assign", {"X": full}, {"Out": n.y()})
        return
    rank = n.rank(0)
    lo, hi = (
        start % rank if start < 0 else min(start, rank),
        rank if end is None else (end % rank if end < 0 else min(end, rank)),
    )
    n.emit("slice", {"Input": full}, {"Out": n.y()}, {"axes": [0], "starts": [lo], "ends": [max(hi, lo)]})


def _size(n: Node) -> None:
    shape = n.shape(0)
    if shape is not None and -1 not in shape:  # known at import: a constant
        n.graph.consts[n.outputs[0]] = np.asarray(int(np.prod(shape)), "int64")
        return
    n.emit("size", {"Input": n.x(0)}, {"Out": n.y()})


def _reshape(n: Node) -> None:
    allowzero = n.opset >= 5 and n.attr("allowzero", 0)
    shape = n.value(1, "shape with allowzero=1") if allowzero else n.const(1) if n.opset >= 5 else n.attr("shape")
    if shape is not None:
        dims = _ints(shape)
        if allowzero and 0 in dims:
            if -1 in dims:
                raise Refused("allowzero=1 with both 0 and -1 in the shape")
            src = n.shape(0)
            if src is not None and -1 not in src and 0 not in src:
                raise Refused(f"allowzero=1: shape {dims} has no element, input 0 of shape {list(src)} has some")
            n.graph.consts[n.outputs[0]] = np.zeros(dims, n.dtype(0))  # a 0 dim kept: an empty tensor
            return
        if 0 in dims:
            src = n.shape(0)
            if src is not None:
                dims = [src[i] if d == 0 and i < len(src) and src[i] != -1 else d for i, d in enumerate(dims)]
        n.emit("reshape2", {"X": n.x(0)}, {"Out": n.y(), "XShape": n.tmp("xshape")}, {"shape": dims})
        return
    n.emit("reshape2", {"X": n.x(0), "Shape": n.cast(n.x(1), "int64")}, {"Out": n.y(), "XShape": n.tmp("xshape")})


def _flatten(n: Node) -> None:
    rank = n.rank(0)
    axis = n.attr("axis", 1)
    axis = axis + rank if axis < 0 else axis
    x = n.x(0)
    if axis == 0:
        n.emit("reshape2", {"X": x}, {"Out": n.y(), "XShape": n.tmp("xshape")}, {"shape": [1, -1]})
        return
    if axis == rank:
        mid = n.tmp("flat")
        n.emit(
            "flatten_contiguous_range",
            {"X": x},
            {"Out": mid, "XShape": n.tmp("xshape")},
            {"start_axis": 0, "stop_axis": -1},
        )
        n.emit("unsqueeze2", {"X": mid}, {"Out": n.y(), "XShape": n.tmp("xshape")}, {"axes": [1]})
        return
    mid = n.tmp("flat")
    n.emit(
        "flatten_contiguous_range",
        {"X": x},
        {"Out": mid, "XShape": n.tmp("xshape")},
        {"start_axis": axis, "stop_axis": -1},
    )
    n.emit(
        "flatten_contiguous_range",
        {"X": mid},
        {"Out": n.y(), "XShape": n.tmp("xshape")},
        {"start_axis": 0, "stop_axis": axis - 1},
    )


def _transpose(n: Node) -> None:
    perm = n.attr("perm")
    if perm is None:
        perm = list(range(n.rank(0)))[::-1]
    n.emit("transpose2", {"X": n.x(0)}, {"Out": n.y(), "XShape": n.tmp("xshape")}, {"axis": list(perm)})


def _concat(n: Node) -> None:
    names = [n.x(i) for i in range(len(n.inputs)) if n.has(i)]
    n.emit("concat", {"X": names}, {"Out": n.y()}, {"axis": int(n.attr("axis", 1 if n.opset < 4 else 0))})


def _einsum(n: Node) -> None:
    names = [n.x(i) for i in range(len(n.inputs))]
    n.emit("einsum", {"Operands": names}, {"Out": n.y()}, {"equation": n.attr("equation")})


def _split(n: Node) -> None:
    axis = int(n.attr("axis", 0))
    if (n.opset >= 13 or n.opset == 1) and n.has(1):
        sections = _ints(n.value(1, "split"))
    else:
        sections = list(n.attr("split", []))
    count = len(n.outputs)
    outs = [n.y(i) if n.wants(i) else n.tmp("unused") for i in range(count)]
    if sections:
        n.emit("split", {"X": n.x(0)}, {"Out": outs}, {"axis": axis, "sections": sections})
        return
    shape = n.shape(0)
    dim = shape[_axis(axis, len(shape))] if shape is not None else -1
    if dim != -1 and dim % count:
        per = -(-dim // count)
        n.emit(
            "split",
            {"X": n.x(0)},
            {"Out": outs},
            {"axis": axis, "sections": [per] * (count - 1) + [dim - per * (count - 1)]},
        )
        return
    n.emit("split", {"X": n.x(0)}, {"Out": outs}, {"axis": axis, "num": count})


def _axes_arg(n: Node, since: int, index: int = 1) -> list[int] | None:
    """The axes of Squeeze, Unsqueeze, reductions: an attribute before opset ``since``, an input from it."""
    if n.opset < since:
        axes = n.attr("axes")
        return None if axes is None else list(axes)
    if not n.has(index):
        return None
    return _ints(n.value(index, "axes"))


def _squeeze(n: Node) -> None:
    axes = _axes_arg(n, 13)
    if axes is None:
        shape = n.shape(0)
        if shape is None or -1 in shape:
            raise Refused("Squeeze without axes of an input whose shape is known only at run time")
        axes = [i for i, d in enumerate(shape) if d == 1]
    n.emit("squeeze2", {"X": n.x(0)}, {"Out": n.y(), "XShape": n.tmp("xshape")}, {"axes": axes})


def _unsqueeze(n: Node) -> None:
    axes = _axes_arg(n, 13)
    if axes is None:
        raise Refused("Unsqueeze without axes")
    rank = n.rank(0) + len(axes)
    axes = sorted(a % rank for a in axes)
    n.emit("unsqueeze2", {"X": n.x(0)}, {"Out": n.y(), "XShape": n.tmp("xshape")}, {"axes": axes})


def _slice(n: Node) -> None:
    if n.opset < 10:
        starts, ends = list(n.attr("starts")), list(n.attr("ends"))
        axes = list(n.attr("axes", range(len(starts))))
        steps = [1] * len(starts)
    elif (n.const(1) is None or n.const(2) is None) and (not n.has(4) or set(_ints(n.value(4, "steps"))) == {1}):
        _slice_at_run_time(n)
        return
    else:
        starts, ends = _ints(n.value(1, "starts")), _ints(n.value(2, "ends"))
        axes = _ints(n.value(3, "axes")) if n.has(3) else list(range(len(starts)))
        steps = _ints(n.value(4, "steps")) if n.has(4) else [1] * len(starts)
    rank = n.rank(0)
    axes = [_axis(a, rank) for a in axes]
    x = n.x(0)
    if all(s == 1 for s in steps):
        ends = [min(e, _INT_MAX >> 1) for e in ends]
        n.emit("slice", {"Input": x}, {"Out": n.y()}, {"axes": axes, "starts": starts, "ends": ends})
        return
    shape = n.shape(0)
    if shape is None or any(shape[a] == -1 for a in axes):
        raise Refused("Slice with steps other than 1 along a dim known only at run time")
    index = x
    for k, (a, s, e, st) in enumerate(zip(axes, starts, ends, steps)):
        picked = np.arange(shape[a])[slice(s, e, st)]
        out = n.y() if k == len(axes) - 1 else n.tmp("slice")
        n.emit("index_select", {"X": index, "Index": n.constant(picked.astype("int64"))}, {"Out": out}, {"dim": a})
        index = out


def _slice_at_run_time(n: Node) -> None:
    """Slice of steps 1 whose starts or ends are computed: slice's StartsTensor and EndsTensor."""
    count = n.shape(1)
    if count is None or len(count) != 1 or count[0] == -1:
        raise Refused("Slice with computed starts of unknown length")
    axes = _ints(n.value(3, "axes")) if n.has(3) else list(range(count[0]))
    rank = n.rank(0)
    inputs = {"Input": n.x(0), "StartsTensor": n.cast(n.x(1), "int64"), "EndsTensor": n.cast(n.x(2), "int64")}
    attrs = {"axes": [_axis(a, rank) for a in axes], "starts": [0] * len(axes), "ends": [0] * len(axes)}
    n.emit("slice", inputs, {"Out": n.y()}, attrs)


def _gather(n: Node) -> None:
    axis = int(n.attr("axis", 0))
    rank = n.rank(0)
    axis = _axis(axis, rank)
    indices = n.const(1)
    shape = n.shape(0)
    if indices is not None:
        if shape is not None and shape[axis] != -1:
            indices = np.where(indices < 0, indices + shape[axis], indices)
        index = n.constant(indices.reshape(-1).astype("int64"))
        ishape = list(indices.shape)
    else:
        ishape_known = n.shape(1)
        if ishape_known is None or (len(ishape_known) != 1 and -1 in ishape_known):
            raise Refused("Gather with multi-dim indices of a shape known only at run time")
        ishape = list(ishape_known)
        index = n.x(1)
        if shape is not None and shape[axis] != -1:  # negative indices count from the end, as ONNX's do
            negative = n.cast(n.binary("less_than", index, n.constant(np.asarray(0, n.dtype(1)))), n.dtype(1))
            index = n.binary("elementwise_add", index, n.unary("scale", negative, {"scale": float(shape[axis])}))
        if len(ishape) != 1:
            index = _flat(n, index)
    flat = n.tmp("gather") if len(ishape) != 1 else n.y()
    n.emit("gather", {"X": n.x(0), "Index": index}, {"Out": flat}, {"axis": axis})
    if len(ishape) == 1:
        return
    if shape is None or any(d == -1 for i, d in enumerate(shape) if i != axis):
        out_shape = [0] * axis + ishape + [-1] if axis + 1 < rank else [0] * axis + ishape
        if sum(d == -1 for d in out_shape) > 1:
            raise Refused("Gather of multi-dim indices from data whose shape is known only at run time")
    else:
        out_shape = list(shape[:axis]) + ishape + list(shape[axis + 1 :])
    n.emit("reshape2", {"X": flat}, {"Out": n.y(), "XShape": n.tmp("xshape")}, {"shape": out_shape})


def _gather_elements(n: Node) -> None:
    axis = _axis(int(n.attr("axis", 0)), n.rank(0))
    n.emit("take_along_axis", {"Input": n.x(0), "Index": n.x(1)}, {"Result": n.y()}, {"Axis": axis, "broadcast": False})


def _scatter_elements(n: Node) -> None:
    reduction = n.attr("reduction", "none")
    table = {"none": "assign", "add": "add", "mul": "mul", "max": "amax", "min": "amin"}
    if reduction not in table:
        raise Refused(f"reduction {reduction!r}")
    axis = _axis(int(n.attr("axis", 0)), n.rank(0))
    n.emit(
        "put_along_axis",
        {"Input": n.x(0), "Index": n.x(1), "Value": n.x(2)},
        {"Result": n.y()},
        {"Axis": axis, "Reduce": table[reduction], "broadcast": False},
    )


def _gather_nd(n: Node) -> None:
    """gather_nd; with batch_dims b, each index tuple prefixed with the b batch coordinates of its position."""
    batch = int(n.attr("batch_dims", 0))
    index = n.x(1)
    if batch:
        shape = n.shape(1)
        if shape is None or -1 in shape:
            raise Refused("batch_dims with indices of a shape known only at run time")
        coords = np.moveaxis(np.indices(shape[:batch]), 0, -1)  # [B..., b]: each position's batch coordinates
        coords = coords.reshape(*shape[:batch], *[1] * (len(shape) - 1 - batch), batch)
        coords = np.broadcast_to(coords, (*shape[:-1], batch)).astype(n.dtype(1))
        index = n.tmp("index")
        n.emit("concat", {"X": [n.constant(coords), n.x(1)]}, {"Out": index}, {"axis": -1})
    n.emit("gather_nd", {"X": n.x(0), "Index": index}, {"Out": n.y()})


def _expand(n: Node) -> None:
    x = n.x(0)
    target = n.const(1)
    shape = n.shape(0)
    if target is not None and shape is not None:
        dims = _ints(target)
        rank = max(len(dims), len(shape))
        a = [1] * (rank - len(shape)) + list(shape)
        b = [1] * (rank - len(dims)) + dims
        out = [ad if bd == 1 else bd for ad, bd in zip(a, b)]
        if len(shape) < rank:
            x2 = n.tmp("expand")
            n.emit("reshape2", {"X": x}, {"Out": x2, "XShape": n.tmp("xshape")}, {"shape": [0] * 0 + a})
            x = x2
        n.emit("expand_v2", {"X": x}, {"Out": n.y()}, {"shape": [-1 if ad == o else o for ad, o in zip(a, out)]})
        return
    ones = n.tmp("ones")
    n.emit(
        "fill_constant",
        {"ShapeTensor": n.cast(n.x(1), "int64")},
        {"Out": ones},
        _fill_attrs([], n.dtype(0), np.ones(1, n.dtype(0))[0]),
    )
    if n.dtype(0) == "bool":
        n.binary("logical_and", x, ones, out=n.y())
    else:
        n.binary("elementwise_mul", x, ones, out=n.y())


def _tile(n: Node) -> None:
    repeats = n.const(1)
    if repeats is not None:
        n.emit("tile", {"X": n.x(0)}, {"Out": n.y()}, {"repeat_times": _ints(repeats)})
        return
    n.emit("tile", {"X": n.x(0), "RepeatTimes": n.cast(n.x(1), "int32")}, {"Out": n.y()})


def _where(n: Node) -> None:
    cond, x, y = n.x(0), n.x(1), n.x(2)
    dtype = n.dtype(1)
    wide = _NARROW.get(dtype, dtype)  # blockir's where and fill_any_like compute narrow integers widened
    x, y = n.cast(x, wide), n.cast(y, wide)
    shapes = [n.shape(i) for i in range(3)]
    if any(s is None for s in shapes) or len({tuple(s) for s in shapes if s is not None}) != 1:
        zero_x = n.tmp("zeros")
        n.emit("fill_any_like", {"X": x}, {"Out": zero_x}, {"value": 0.0, "dtype": -1})
        zero_y = n.tmp("zeros")
        n.emit("fill_any_like", {"X": y}, {"Out": zero_y}, {"value": 0.0, "dtype": -1})
        base = n.binary("elementwise_add", zero_x, zero_y)
        c = n.cast(cond, wide)
        c = n.binary("elementwise_add", c, n.binary("elementwise_add", base, n.binary("elementwise_mul", base, base)))
        cond = n.cast(c, "bool")
        x = n.binary("elementwise_add", x, base)
        y = n.binary("elementwise_add", y, base)
    out = n.y() if wide == dtype else n.tmp("where")
    n.emit("where", {"Condition": cond, "X": x, "Y": y}, {"Out": out})
    if wide != dtype:
        n.cast(out, dtype, out=n.y())


def _range(n: Node) -> None:
    n.emit("range", {"Start": n.x(0), "End": n.x(1), "Step": n.x(2)}, {"Out": n.y()})


def _pad(n: Node) -> None:
    mode = n.attr("mode", "constant")
    if n.opset < 11:
        pads, value = list(n.attr("pads", n.attr("paddings", []))), float(n.attr("value", 0.0))
    else:
        pads = _ints(n.value(1, "pads"))
        value = float(n.value(2, "constant_value").reshape(-1)[0]) if n.has(2) else 0.0
    rank = n.rank(0)
    if n.opset >= 18 and n.has(3):
        axes = [_axis(a, rank) for a in _ints(n.value(3, "axes"))]
        full = [0] * (2 * rank)
        for k, a in enumerate(axes):
            full[a], full[a + rank] = pads[k], pads[k + len(axes)]
        pads = full
    pairs = [v for i in range(rank) for v in (pads[i], pads[i + rank])]
    if mode == "constant":
        if any(p < 0 for p in pairs):
            raise Refused("negative pads")
        n.emit("pad", {"X": n.x(0)}, {"Out": n.y()}, {"paddings": pairs, "pad_value": value})
        return
    if rank not in (4, 5) or any(pairs[:4]):
        raise Refused(f"mode {mode!r} on other than the spatial dims of a 4-D or 5-D input")
    spatial = pairs[4:]
    if rank == 4:
        spatial = [spatial[2], spatial[3], spatial[0], spatial[1], 0, 0]
    else:
        spatial = [spatial[4], spatial[5], spatial[2], spatial[3], spatial[0], spatial[1]]
    x = n.x(0)
    if rank == 4:
        x = n.tmp("5d")
        n.emit("unsqueeze2", {"X": n.x(0)}, {"Out": x, "XShape": n.tmp("xshape")}, {"axes": [2]})
    out = n.y() if rank == 5 else n.tmp("pad3d")
    table = {"reflect": "reflect", "edge": "replicate", "wrap": "circular"}
    if mode not in table:
        raise Refused(f"mode {mode!r}")
    n.emit("pad3d", {"X": x}, {"Out": out}, {"paddings": spatial, "mode": table[mode], "value": value})
    if rank == 4:
        n.emit("squeeze2", {"X": out}, {"Out": n.y(), "XShape": n.tmp("xshape")}, {"axes": [2]})


# -- nn ------------------------------------------------------------------------------------------


def _matmul(n: Node) -> None:
    n.emit("matmul_v2", {"X": n.x(0), "Y": n.x(1)}, {"Out": n.y()}, {"trans_x": False, "trans_y": False})


def _gemm(n: Node) -> None:
    alpha, beta = float(n.attr("alpha", 1.0)), float(n.attr("beta", 1.0))
    product = n.tmp("gemm") if (n.has(2) or alpha != 1.0) else n.y()
    n.emit(
        "matmul_v2",
        {"X": n.x(0), "Y": n.x(1)},
        {"Out": product},
        {"trans_x": bool(n.attr("transA", 0)), "trans_y": bool(n.attr("transB", 0))},
    )
    if alpha != 1.0:
        scaled = n.tmp("alpha") if n.has(2) else n.y()
        n.emit("scale", {"X": product}, {"Out": scaled}, {"scale": alpha})
        product = scaled
    if n.has(2):
        c = n.x(2)
        if beta != 1.0:
            c = n.unary("scale", c, {"scale": beta})
        n.binary("elementwise_add", product, c, out=n.y())


def _windows(n: Node, kernel: list[int]) -> tuple[list[int], list[int], list[tuple[int, int]], str]:
    """The strides, dilations, (before, after) paddings per spatial axis and blockir's padding_algorithm of Conv,
    ConvTranspose and the pools (auto_pad SAME resolved where the spatial dims are known)."""
    dims = len(kernel)
    strides = list(n.attr("strides", [1] * dims))
    dilations = list(n.attr("dilations", [1] * dims))
    auto_pad = n.attr("auto_pad", "NOTSET")
    algorithm = "EXPLICIT"
    if auto_pad in ("NOTSET", ""):
        pads = list(n.attr("pads", [0] * (2 * dims)))
        pairs = [(pads[k], pads[k + dims]) for k in range(dims)]
    elif auto_pad == "VALID":
        pairs, algorithm = [(0, 0)] * dims, "VALID"
    elif auto_pad in ("SAME_UPPER", "SAME_LOWER"):
        shape = n.shape(0)
        if shape is None or -1 in shape[2:]:
            if auto_pad == "SAME_LOWER":
                raise Refused("auto_pad SAME_LOWER of an input whose spatial dims are known only at run time")
            pairs, algorithm = [(0, 0)] * dims, "SAME"
        else:
            pairs = []
            for size, k, s, d in zip(shape[2:], kernel, strides, dilations):
                total = max((-(-size // s) - 1) * s + (k - 1) * d + 1 - size, 0)
                small = total // 2
                pairs.append((total - small, small) if auto_pad == "SAME_LOWER" else (small, total - small))
    else:
        raise Refused(f"auto_pad {auto_pad!r}")
    return strides, dilations, pairs, algorithm


def _spatial(n: Node, kernel: list[int]) -> tuple[dict[str, Any], int]:
    """Strides, dilations and paddings of Conv, ConvTranspose and the pools, as blockir's attributes (of its 2-D
    ops for a 1-D or 2-D op, of its 3-D ops for a 3-D op); and the number of spatial dims (a 1-D op's attributes
    are those of a 2-D one over an image 1 high)."""
    dims = len(kernel)
    if dims not in (1, 2, 3):
        raise Refused(f"{dims}-D {n.op_type} (blockir's ops are 2-D and 3-D)")
    strides, dilations, pairs, algorithm = _windows(n, kernel)
    if dims == 1:
        strides, dilations, pairs = [1, *strides], [1, *dilations], [(0, 0), *pairs]
    paddings = [p for pair in pairs for p in pair]
    return {"strides": strides, "dilations": dilations, "paddings": paddings, "padding_algorithm": algorithm}, dims


def _nd(type: str, dims: int) -> str:
    """The blockir op of a 2-D op type (conv2d, pool2d, ...) for an ONNX op of ``dims`` spatial dims: its 3-D
    counterpart for 3, itself for 1 and 2 (a 1-D op runs as a 2-D one)."""
    return type.replace("2d", "3d") if dims == 3 else type


def _lifted(n: Node, i: int, dims: int) -> str:
    """Input ``i``, a 1-D op's given a height of 1 (dim 2) for blockir's 2-D op; itself for a 2-D or 3-D op."""
    if dims != 1:
        return n.x(i)
    out = n.tmp("2d")
    n.emit("unsqueeze2", {"X": n.x(i)}, {"Out": out, "XShape": n.tmp("xshape")}, {"axes": [2]})
    return out


def _lowered(n: Node, made: str, dims: int, out: str) -> None:
    """The blockir op's output ``made`` as the 1-D op's ``out`` (dim 2 dropped), or copied for a 2-D or 3-D op."""
    if dims != 1:
        n.emit("assign", {"X": made}, {"Out": out})
    else:
        n.emit("squeeze2", {"X": made}, {"Out": out, "XShape": n.tmp("xshape")}, {"axes": [2]})


def _weighted(n: Node) -> tuple[dict[str, Any], int, list[int]]:
    """A Conv's or ConvTranspose's spatial attributes and ``groups``; the spatial dims; the kernel (its
    attribute, else the weight's dims)."""
    w = n.shape(1)
    if w is None:
        raise Refused("a weight of unknown rank")
    kernel = list(n.attr("kernel_shape", w[2:]))
    attrs, dims = _spatial(n, kernel)
    attrs["groups"] = int(n.attr("group", 1))
    return attrs, dims, kernel


def _conv(n: Node) -> None:
    attrs, dims, _ = _weighted(n)
    made = n.tmp("conv")
    n.emit(_nd("conv2d", dims), {"Input": _lifted(n, 0, dims), "Filter": _lifted(n, 1, dims)}, {"Output": made}, attrs)
    if n.has(2):
        made = n.binary("elementwise_add", made, n.x(2), attrs={"axis": 1})
    _lowered(n, made, dims, n.y())


def _col2im(n: Node) -> None:
    image, block = _ints(n.value(1, "image_shape")), _ints(n.value(2, "block_shape"))
    if len(image) == 3 and len(block) == 3:
        _col2im_3d(n, image, block)
        return
    if len(image) != 2 or len(block) != 2:
        raise Refused(f"a {len(image)}-D image: Paddle's fold (col2im) is 2-D, and 3-D images run as conv3d_transpose")
    attrs = {
        "output_sizes": image,
        "kernel_sizes": block,
        "strides": list(n.attr("strides", [1, 1])),
        "paddings": list(n.attr("pads", [0, 0, 0, 0])),  # [h begin, w begin, h end, w end]: Paddle's order
        "dilations": list(n.attr("dilations", [1, 1])),
    }
    n.emit("fold", {"X": n.x(0)}, {"Y": n.y()}, attrs)


def _col2im_3d(n: Node, image: list[int], block: list[int]) -> None:
    """Col2Im of a 3-D image, which Paddle's fold lacks, as the transposed convolution that adds each block back:
    the columns [N, C * taps, blocks] seen as an image of [N, C * taps, *blocks] and conv3d_transpose'd (groups
    C) by the filter that takes row ``c * taps + t`` to tap ``t`` of channel ``c``; output_size is the image."""
    shape = n.shape(0)
    taps = int(np.prod(block))
    if shape is None or len(shape) != 3 or shape[1] < 0 or shape[1] % taps:
        raise Refused(f"input of shape {shape}: its dim 1 must be known and a multiple of the {taps} taps")
    strides, dilations = list(n.attr("strides", [1, 1, 1])), list(n.attr("dilations", [1, 1, 1]))
    pads = list(n.attr("pads", [0] * 6))
    blocks = [
        (size + pads[a] + pads[a + 3] - (dilations[a] * (k - 1) + 1)) // strides[a] + 1
        for a, (size, k) in enumerate(zip(image, block))
    ]
    if min(blocks) < 1:
        raise Refused(f"block_shape {block} with dilations {dilations} leave no block in image_shape {image}")
    channels = shape[1] // taps
    cube = n.tmp("blocks")
    n.emit("reshape2", {"X": n.x(0)}, {"Out": cube, "XShape": n.tmp("xshape")}, {"shape": [0, shape[1], *blocks]})
    one_hot = np.tile(np.eye(taps, dtype=n.dtype(0)), (channels, 1)).reshape(channels * taps, 1, *block)
    attrs = {
        "strides": strides,
        "dilations": dilations,
        "paddings": [p for a in range(3) for p in (pads[a], pads[a + 3])],
        "groups": channels,
        "output_size": image,
    }
    n.emit("conv3d_transpose", {"Input": cube, "Filter": n.constant(one_hot)}, {"Output": n.y()}, attrs)


def _grid_sample(n: Node) -> None:
    mode = n.attr("mode", "bilinear" if n.opset < 20 else "linear")
    shape, dtype = n.shape(0), n.dtype(0)
    if shape is None or len(shape) not in (4, 5):
        raise Refused(f"X of rank {'unknown' if shape is None else len(shape)}: grid_sampler samples 4-D and 5-D X")
    if dtype not in ("float16", "float32", "float64"):
        raise Refused(f"X of {dtype}: grid_sampler samples floats")
    attrs = {
        "mode": {"nearest": "nearest", "cubic": "bicubic", "bicubic": "bicubic"}.get(mode, "bilinear"),
        "padding_mode": n.attr("padding_mode", "zeros"),
        "align_corners": bool(n.attr("align_corners", 0)),
    }
    n.emit("grid_sampler", {"X": n.x(0), "Grid": n.cast(n.x(1), dtype)}, {"Output": n.y()}, attrs)


def _deform_conv(n: Node) -> None:
    """Paddle's deformable_conv (2-D, each axis padded alike at both ends; offset_group its deformable_groups),
    plus B per output channel."""
    shape = n.shape(1)
    if shape is None or len(shape) != 4:
        raise Refused(f"W of rank {'unknown' if shape is None else len(shape)}: deformable_conv is 2-D")
    pads = [int(p) for p in n.attr("pads", [0, 0, 0, 0])]
    if pads[:2] != pads[2:]:
        raise Refused(f"pads {pads}: deformable_conv pads each axis alike at both ends")
    attrs = {
        "strides": [int(s) for s in n.attr("strides", [1, 1])],
        "paddings": pads[:2],
        "dilations": [int(d) for d in n.attr("dilations", [1, 1])],
        "groups": int(n.attr("group", 1)),
        "deformable_groups": int(n.attr("offset_group", 1)),
    }
    inputs = {"Input": n.x(0), "Offset": n.x(2), "Filter": n.x(1), **({"Mask": n.x(4)} if n.has(4) else {})}
    out = n.tmp("deformed") if n.has(3) else n.y()
    n.emit("deformable_conv", inputs, {"Output": out}, attrs)
    if n.has(3):
        n.binary("elementwise_add", out, n.x(3), out=n.y(), attrs={"axis": 1})


def _conv_transpose(n: Node) -> None:
    attrs, dims, kernel = _weighted(n)
    auto_pad = n.attr("auto_pad", "NOTSET")
    attrs["padding_algorithm"] = "EXPLICIT"
    if auto_pad == "VALID":
        attrs["paddings"] = [0] * len(attrs["paddings"])
    extra = list(n.attr("output_padding", [0] * dims))
    shape = n.shape(0)
    target = n.attr("output_shape")
    if target is None and auto_pad in ("SAME_UPPER", "SAME_LOWER") and shape is not None:
        target = [size * s for size, s in zip(shape[2:], attrs["strides"][-dims:])]
    if target is not None:
        if shape is None or -1 in shape[2:]:
            raise Refused("output_shape or auto_pad SAME of an input whose spatial dims are known only at run time")
        pads = []
        strides, dilations, target = attrs["strides"][-dims:], attrs["dilations"][-dims:], list(target)[-dims:]
        for k, (size, kk, s, d) in enumerate(zip(shape[2:], kernel, strides, dilations)):
            total = s * (size - 1) + extra[k] + ((kk - 1) * d + 1) - target[k]
            if total < 0:  # a larger output than the strides give: zeros after, as output_padding
                extra[k] -= total
                total = 0
            first = total // 2 if auto_pad == "SAME_UPPER" else total - total // 2
            pads.append((first, total - first))
        pads = [(0, 0), *pads] if dims == 1 else pads
        attrs["paddings"] = [p for pair in pads for p in pair]
    elif auto_pad in ("SAME_UPPER", "SAME_LOWER"):
        raise Refused("auto_pad SAME of an input of unknown rank")
    attrs["output_padding"] = [0, *extra] if dims == 1 else extra
    made = n.tmp("convt")
    inputs = {"Input": _lifted(n, 0, dims), "Filter": _lifted(n, 1, dims)}
    n.emit(_nd("conv2d_transpose", dims), inputs, {"Output": made}, attrs)
    if n.has(2):
        made = n.binary("elementwise_add", made, n.x(2), attrs={"axis": 1})
    _lowered(n, made, dims, n.y())


def _pool_attrs(n: Node, kind: str) -> tuple[dict[str, Any], int, list[int]]:
    """pool2d's or pool3d's attributes for MaxPool or AveragePool; the spatial dims; the kernel."""
    kernel = list(n.attr("kernel_shape"))
    attrs, dims = _spatial(n, kernel)
    if any(d != 1 for d in attrs.pop("dilations")):
        raise Refused("dilations other than 1 with the Indices output")
    if attrs["padding_algorithm"] == "SAME":
        raise Refused("auto_pad SAME of an input whose spatial dims are known only at run time")
    attrs.update(
        pooling_type=kind,
        ksize=[1, *kernel] if dims == 1 else kernel,
        ceil_mode=bool(n.attr("ceil_mode", 0)) and _ceil_adds_a_window(n, attrs, kernel),
        exclusive=not n.attr("count_include_pad", 0),
    )
    return attrs, dims, kernel


def _ceil_adds_a_window(n: Node, attrs: dict[str, Any], kernel: list[int]) -> bool:
    """Whether ceil_mode gives more windows than floor on some axis once, as ONNX does, a last window starting
    in the far padding is dropped (Paddle's pool2d keeps it); True when a size is known only at run time."""
    shape = n.shape(0)
    if shape is None or -1 in shape[2:]:
        return True
    pads = attrs["paddings"][-2 * len(kernel) :]
    for k, (size, window) in enumerate(zip(shape[2:], kernel)):
        stride, before, after = attrs["strides"][-len(kernel) + k], pads[2 * k], pads[2 * k + 1]
        span = size + before + after - window
        ceil = -(-span // stride) + 1
        if (ceil - 1) * stride >= size + before:
            ceil -= 1
        if ceil > span // stride + 1:
            return True
    return False


def _pool(kind: str) -> Converter:
    def convert(n: Node) -> None:
        dtype = n.dtype(0)
        floating = dtype in ("float16", "float32", "float64")
        if not floating and kind != "max":
            raise Refused(f"AveragePool of {dtype}")
        if not n.wants(1) and _needs_gather(n, kind):
            # integers: the maximum of their float64 values, exact up to 2^53
            made = _gathered_pool(n, kind, n.x(0) if floating else n.cast(n.x(0), "float64"))
            n.cast(made, dtype, out=n.y())
            return
        attrs, dims, _ = _pool_attrs(n, kind)
        made = n.tmp("pool")
        if n.wants(1):
            _max_pool_with_indices(n, attrs, dims, made)
        elif floating:
            n.emit(_nd("pool2d", dims), {"X": _lifted(n, 0, dims)}, {"Out": made}, attrs)
        else:
            n.emit(_nd("pool2d", dims), {"X": n.cast(_lifted(n, 0, dims), "float64")}, {"Out": made}, attrs)
            made = n.cast(made, dtype)
        _lowered(n, made, dims, n.y())

    return convert


def _needs_gather(n: Node, kind: str) -> bool:
    """Whether pool2d and pool3d cannot compute this MaxPool or AveragePool: dilations, or an average counting its
    padding whose pads differ before and after (Paddle's divisor measures the far side with the near padding)."""
    if any(d != 1 for d in n.attr("dilations", [])):
        return True
    if kind != "avg" or not n.attr("count_include_pad", 0):
        return False
    _, _, pairs, _ = _windows(n, list(n.attr("kernel_shape")))
    return any(before != after for before, after in pairs)


def _gathered_pool(n: Node, kind: str, x: str) -> str:
    """The pooling ``kind`` ("max", "avg" or "sum") of ``x`` (input 0 or a function of it, of its shape) over
    ONNX's windows, dilations included, as ops pool2d and pool3d lack (Paddle's have no dilations, and their
    average measures the far side with the near padding): one pad by the reduction's identity, then per spatial
    axis an index_select of every window's taps, laid out [windows, taps], and a reduction over the taps; "avg"
    divides by each window's count of taps inside the input (count_include_pad: inside the padded input). Needs
    the spatial dims at import. A last window that ceil_mode would start in the far padding is dropped, as
    ONNX does."""
    kernel = list(n.attr("kernel_shape"))
    shape = n.shape(0)
    if shape is None or -1 in shape[2:] or len(shape) != len(kernel) + 2:
        raise Refused("dilations or LpPool of an input whose spatial dims are known only at import")
    strides, dilations, pairs, _ = _windows(n, kernel)
    ceil_mode, include_pad = bool(n.attr("ceil_mode", 0)), bool(n.attr("count_include_pad", 0))
    widths, indices, counts = [], [], []
    for size, k, stride, dilation, (before, after) in zip(shape[2:], kernel, strides, dilations, pairs):
        span = size + before + after - (dilation * (k - 1) + 1)
        out = (-(-span // stride) if ceil_mode else span // stride) + 1
        if ceil_mode and (out - 1) * stride >= size + before:
            out -= 1
        if out < 1:
            raise Refused(f"kernel_shape {kernel} with dilations {dilations} leave no window in {list(shape)}")
        taps = np.arange(out)[:, None] * stride + np.arange(k)[None, :] * dilation  # in the padded input
        widths.append((before, max(int(taps.max()) + 1 - size - before, 0)))
        indices.append(taps.reshape(-1))
        inside = taps < size + before + after if include_pad else (taps >= before) & (taps < size + before)
        counts.append(inside.sum(axis=1))
    identity = float("-inf") if kind == "max" else 0.0
    y = n.unary("pad", x, {"paddings": [0, 0, 0, 0, *(w for pair in widths for w in pair)], "pad_value": identity})
    sizes = [size + before + after for size, (before, after) in zip(shape[2:], widths)]
    for axis, (index, k) in enumerate(zip(indices, kernel)):
        taps = n.tmp("taps")
        n.emit("index_select", {"X": y, "Index": n.constant(index, "int64")}, {"Out": taps}, {"dim": 2 + axis})
        sizes[axis] = len(index) // k
        split = [0, 0, *sizes[:axis], sizes[axis], k, *sizes[axis + 1 :]]
        windows = n.tmp("windows")
        n.emit("reshape2", {"X": taps}, {"Out": windows, "XShape": n.tmp("xshape")}, {"shape": split})
        reduction = "reduce_max" if kind == "max" else "reduce_sum"
        y = n.unary(reduction, windows, {"dim": [3 + axis], "keep_dim": False})
    if kind != "avg":
        return y
    divisor = functools.reduce(np.multiply.outer, counts).astype(n.dtype(0))
    return n.binary("elementwise_div", y, n.constant(divisor))


def _max_pool_with_indices(n: Node, attrs: dict[str, Any], dims: int, made: str) -> None:
    """MaxPool's Indices: max_pool2d_with_index's Mask (h * W + w in each image; w * H + h with storage_order 1,
    column-major) plus the image's offset in the flattened input."""
    shape = n.shape(0)
    pads = attrs["paddings"]
    if dims != 2 or shape is None or -1 in shape or pads[0] != pads[1] or pads[2] != pads[3]:
        raise Refused("the Indices output of other than a 2-D pool of known shape with symmetric pads")
    if attrs["padding_algorithm"] != "EXPLICIT":
        raise Refused(f"the Indices output with auto_pad {n.attr('auto_pad')!r}")
    mask = n.tmp("mask")
    n.emit(
        "max_pool2d_with_index",
        {"X": n.x(0)},
        {"Out": made, "Mask": mask},
        {k: attrs[k] for k in ("ksize", "strides", "ceil_mode")} | {"paddings": [pads[0], pads[2]]},
    )
    batch, channels, height, width = shape
    offsets = (np.arange(batch * channels, dtype="int64") * height * width).reshape(batch, channels, 1, 1)
    index = n.cast(mask, "int64")
    if n.attr("storage_order", 0):
        w = n.constant(np.asarray(width, "int64"))
        column = n.binary("elementwise_mul", n.binary("elementwise_mod", index, w), n.constant(np.asarray(height)))
        index = n.binary("elementwise_add", column, n.binary("elementwise_floordiv", index, w))
    n.binary("elementwise_add", index, n.constant(offsets), out=n.y(1))


_GATHERED_POOL_OPS = ("pad", "index_select", "reshape2")  # and a reduction: _gathered_pool's ops


def _lp_pool(n: Node) -> None:
    """(the sum of |x|^p over each window)^(1/p): the window sums of |x|^p by :func:`_gathered_pool`."""
    p = float(n.attr("p", 2))
    powered = n.unary("pow", n.unary("abs", n.x(0)), {"factor": p})
    n.unary("pow", _gathered_pool(n, "sum", powered), {"factor": 1.0 / p}, out=n.y())


def _global_pool(kind: str) -> Converter:
    def convert(n: Node) -> None:
        rank = n.rank(0)
        if rank not in (4, 5):
            raise Refused(f"{rank}-D input (blockir's pool2d and pool3d are 2-D and 3-D)")
        attrs = {"pooling_type": kind, "ksize": [1] * (rank - 2), "global_pooling": True}
        n.emit(_nd("pool2d", rank - 2), {"X": n.x(0)}, {"Out": n.y()}, attrs)

    return convert


def _batch_norm(n: Node) -> None:
    if n.opset >= 14 and n.attr("training_mode", 0):
        _batch_norm_training(n)
        return
    if n.attr("training_mode", 0) or any(n.wants(i) for i in range(1, 5)) or n.attr("is_test", 1) == 0 and n.opset < 7:
        raise Refused("training mode (blockir imports inference models)")
    if n.opset < 9 and n.attr("spatial", 1) != 1:
        raise Refused("spatial=0")
    outs = {slot: n.tmp(slot) for slot in ("SavedMean", "SavedVariance", "ReserveSpace")}
    # global statistics: MeanOut and VarianceOut hand Mean and Variance back, into the same variables where those
    # are constants (Paddle's form, which fold-conv-bn folds into a convolution), else into temporaries
    for i, slot in ((3, "MeanOut"), (4, "VarianceOut")):
        outs[slot] = n.x(i) if n.const(i) is not None else n.tmp(slot)
    n.graph.batch_norms[n.outputs[0]] = n.emit(
        "batch_norm",
        {"X": n.x(0), "Scale": n.x(1), "Bias": n.x(2), "Mean": n.x(3), "Variance": n.x(4)},
        {"Y": n.y(), **outs},
        {"epsilon": float(n.attr("epsilon", 1e-5)), "is_test": True, "use_global_stats": True},
    )


def _batch_norm_training(n: Node) -> None:
    """training_mode=1 (opset 14 on): normalized by the batch's statistics over every dim but the channels; the
    running mean and variance (outputs 1, 2) updated as input * momentum + batch's * (1 - momentum)."""
    outs = {slot: n.tmp(slot) for slot in ("SavedMean", "SavedVariance", "ReserveSpace")}
    for i, slot in ((1, "MeanOut"), (2, "VarianceOut")):
        outs[slot] = n.y(i) if n.wants(i) else n.tmp(slot)
    attrs = {"epsilon": float(n.attr("epsilon", 1e-5)), "momentum": float(n.attr("momentum", 0.9))}
    n.emit(
        "batch_norm",
        {"X": n.x(0), "Scale": n.x(1), "Bias": n.x(2), "Mean": n.x(3), "Variance": n.x(4)},
        {"Y": n.y(), **outs},
        {**attrs, "is_test": False, "use_global_stats": False},
    )


def _instance_norm(n: Node) -> None:
    outs = {slot: n.tmp(slot) for slot in ("SavedMean", "SavedVariance")}
    n.emit(
        "instance_norm",
        {"X": n.x(0), "Scale": n.x(1), "Bias": n.x(2)},
        {"Y": n.y(), **outs},
        {"epsilon": float(n.attr("epsilon", 1e-5))},
    )


def _layer_norm(n: Node) -> None:
    rank = n.rank(0)
    axis = _axis(int(n.attr("axis", -1)), rank)
    if n.wants(1) or n.wants(2):  # Mean and InvStdDev, keeping the normalized dims as 1s
        dims = {"dim": list(range(axis, rank)), "keep_dim": True, "reduce_all": False}
        mean = n.y(1) if n.wants(1) else n.tmp("mean")
        n.emit("reduce_mean", {"X": n.x(0)}, {"Out": mean}, dims)
        if n.wants(2):
            centered = n.binary("elementwise_sub", n.x(0), mean)
            var = n.unary("reduce_mean", n.unary("square", centered), dims)
            eps = n.constant(np.asarray(float(n.attr("epsilon", 1e-5)), n.dtype(0)))
            n.emit("rsqrt", {"X": n.binary("elementwise_add", var, eps)}, {"Out": n.y(2)})
    shape = n.shape(0)
    inputs: dict[str, Any] = {"X": n.x(0)}
    norm_shape = n.shape(1)
    if (
        shape is not None
        and norm_shape is not None
        and tuple(norm_shape) == tuple(shape[axis:])
        and len(norm_shape) == 1
    ):
        inputs["Scale"] = n.x(1)
        if n.has(2):
            inputs["Bias"] = n.x(2)
        outs = {slot: n.tmp(slot) for slot in ("Mean", "Variance")}
        n.emit(
            "layer_norm",
            inputs,
            {"Y": n.y(), **outs},
            {"epsilon": float(n.attr("epsilon", 1e-5)), "begin_norm_axis": axis},
        )
        return
    plain = n.tmp("normed")
    outs = {slot: n.tmp(slot) for slot in ("Mean", "Variance")}
    n.emit(
        "layer_norm", inputs, {"Y": plain, **outs}, {"epsilon": float(n.attr("epsilon", 1e-5)), "begin_norm_axis": axis}
    )
    scaled = n.binary("elementwise_mul", plain, n.x(1), out=None if n.has(2) else n.y())
    if n.has(2):
        n.binary("elementwise_add", scaled, n.x(2), out=n.y())


def _nll(n: Node, scores: str, target: str, out: str) -> None:
    """NegativeLogLikelihoodLoss of ``scores`` (N, C, d...) at ``target`` (N, d...) into ``out``; weight input 2."""
    reduction = n.attr("reduction", "mean")
    ignore = n.attr("ignore_index")
    dtype = n.graph.find(scores).dtype or "float32"
    safe = target
    mask = None
    if ignore is not None:
        keep = n.binary("not_equal", target, n.constant(np.asarray(ignore, n.graph.find(target).dtype)))
        mask = n.cast(keep, dtype)
        zero = n.tmp("zero")
        n.emit("fill_any_like", {"X": target}, {"Out": zero}, {"value": 0.0, "dtype": -1})
        safe = n.tmp("target")
        n.emit("where", {"Condition": keep, "X": target, "Y": zero}, {"Out": safe})
    index = n.tmp("index")
    n.emit("unsqueeze2", {"X": safe}, {"Out": index, "XShape": n.tmp("xshape")}, {"axes": [1]})
    picked = n.tmp("picked")
    n.emit("take_along_axis", {"Input": scores, "Index": index}, {"Result": picked}, {"Axis": 1, "broadcast": False})
    picked = _squeezed(n, picked, 1)
    weight = None
    if n.has(2):
        weight = n.tmp("weight")
        n.emit("gather", {"X": n.x(2), "Index": _flat(n, safe)}, {"Out": weight}, {"axis": 0})
        weight = _reshaped_like(n, weight, picked)
    if mask is not None:
        weight = mask if weight is None else n.binary("elementwise_mul", weight, mask)
    loss = n.unary("scale", picked, {"scale": -1.0})
    if weight is not None:
        loss = n.binary("elementwise_mul", loss, weight)
    if reduction == "none":
        n.emit("assign", {"X": loss}, {"Out": out})
        return
    every = {"dim": [0], "keep_dim": False, "reduce_all": True}
    total = n.unary("reduce_sum", loss, every)
    if reduction == "sum":
        n.emit("reshape2", {"X": total}, {"Out": out, "XShape": n.tmp("xshape")}, {"shape": []})
        return
    if reduction != "mean":
        raise Refused(f"reduction {reduction!r}")
    if weight is None:
        count = n.tmp("count")
        n.emit("fill_any_like", {"X": loss}, {"Out": count}, {"value": 1.0, "dtype": -1})
        weight = count
    mean = n.binary("elementwise_div", total, n.unary("reduce_sum", weight, every))
    n.emit("reshape2", {"X": mean}, {"Out": out, "XShape": n.tmp("xshape")}, {"shape": []})


def _squeezed(n: Node, x: str, axis: int) -> str:
    out = n.tmp("squeezed")
    n.emit("squeeze2", {"X": x}, {"Out": out, "XShape": n.tmp("xshape")}, {"axes": [axis]})
    return out


def _flat(n: Node, x: str) -> str:
    out = n.tmp("flat")
    n.emit("reshape2", {"X": x}, {"Out": out, "XShape": n.tmp("xshape")}, {"shape": [-1]})
    return out


def _reshaped_like(n: Node, x: str, like: str) -> str:
    shape = n.tmp("shape")
    n.emit("shape", {"Input": like}, {"Out": shape})
    out = n.tmp("reshaped")
    n.emit("reshape2", {"X": x, "Shape": n.cast(shape, "int64")}, {"Out": out, "XShape": n.tmp("xshape")})
    return out


def _nll_loss(n: Node) -> None:
    _nll(n, n.x(0), n.x(1), n.y())


def _softmax_cross_entropy(n: Node) -> None:
    log_prob = n.y(1) if n.wants(1) else n.tmp("log_prob")
    n.emit("log_softmax", {"X": n.x(0)}, {"Out": log_prob}, {"axis": 1})
    _nll(n, log_prob, n.x(1), n.y())


def _hardmax(n: Node) -> None:
    rank = n.rank(0)
    axis = _axis(int(n.attr("axis", -1 if n.opset >= 13 else 1)), rank)
    shape = n.shape(0)
    if n.opset < 13 and axis != rank - 1:
        raise Refused("axis other than the last before opset 13 (coerced to 2-D)")
    if shape is None or shape[axis] == -1:
        raise Refused("a dim known only at run time")
    index = n.tmp("index")
    n.emit(
        "arg_max",
        {"X": n.x(0)},
        {"Out": index},
        {"axis": axis, "keepdims": False, "flatten": False, "dtype": DTYPE_TO_PROTO["int64"]},
    )
    hot = n.tmp("hot")
    n.emit("one_hot_v2", {"X": index}, {"Out": hot}, {"depth": shape[axis], "dtype": DTYPE_TO_PROTO[n.dtype(0)]})
    if axis == rank - 1:
        n.emit("assign", {"X": hot}, {"Out": n.y()})
        return
    perm = [*range(axis), rank - 1, *range(axis, rank - 1)]
    n.emit("transpose2", {"X": hot}, {"Out": n.y(), "XShape": n.tmp("xshape")}, {"axis": perm})


def _one_hot(n: Node) -> None:
    depth = int(n.value(1, "depth").reshape(-1)[0])
    values = n.x(2)
    rank = n.rank(0)
    axis = _axis(int(n.attr("axis", -1)), rank + 1)
    index = n.cast(n.x(0), "int64")
    # negative indices count from depth; one outside [-depth, depth) matches no position (every value off)
    below = n.cast(n.binary("less_than", index, n.constant(np.asarray(0, "int64"))), "int64")
    wrapped = n.binary("elementwise_add", index, n.binary("elementwise_mul", below, n.constant(np.int64(depth))))
    column = n.tmp("index")
    n.emit("unsqueeze2", {"X": wrapped}, {"Out": column, "XShape": n.tmp("xshape")}, {"axes": [-1]})
    hot = n.cast(n.binary("equal", column, n.constant(np.arange(depth, dtype="int64"))), n.dtype(2))
    off, on = n.tmp("off"), n.tmp("on")
    n.emit("slice", {"Input": values}, {"Out": off}, {"axes": [0], "starts": [0], "ends": [1]})
    n.emit("slice", {"Input": values}, {"Out": on}, {"axes": [0], "starts": [1], "ends": [2]})
    mixed = n.binary("elementwise_add", n.binary("elementwise_mul", hot, n.binary("elementwise_sub", on, off)), off)
    if axis == rank:
        n.emit("assign", {"X": mixed}, {"Out": n.y()})
        return
    perm = [*range(axis), rank, *range(axis, rank)]
    n.emit("transpose2", {"X": mixed}, {"Out": n.y(), "XShape": n.tmp("xshape")}, {"axis": perm})


def _is_nan(n: Node) -> None:
    n.binary("not_equal", n.x(0), n.x(0), out=n.y())


def _is_inf(n: Node) -> None:
    x = n.x(0)
    dtype = n.dtype(0)
    checks = []
    if n.attr("detect_positive", 1):
        checks.append(n.binary("equal", x, n.constant(np.asarray(np.inf, dtype))))
    if n.attr("detect_negative", 1):
        checks.append(n.binary("equal", x, n.constant(np.asarray(-np.inf, dtype))))
    if not checks:
        n.emit("fill_any_like", {"X": x}, {"Out": n.y()}, {"value": 0.0, "dtype": DTYPE_TO_PROTO["bool"]})
    elif len(checks) == 1:
        n.emit("assign", {"X": checks[0]}, {"Out": n.y()})
    else:
        n.emit("logical_or", {"X": checks[0], "Y": checks[1]}, {"Out": n.y()})


def _cumprod(n: Node) -> None:
    axis = int(n.value(1, "axis").reshape(-1)[0])
    attrs = {"dim": axis, "exclusive": bool(n.attr("exclusive", 0)), "reverse": bool(n.attr("reverse", 0))}
    n.emit("cumprod", {"X": n.x(0)}, {"Out": n.y()}, attrs)


def _lp_normalization(n: Node) -> None:
    p = int(n.attr("p", 2))
    if p not in (1, 2):
        raise Refused(f"p={p}")
    axis = int(n.attr("axis", -1))
    norm = n.tmp("norm")
    n.emit("p_norm", {"X": n.x(0)}, {"Out": norm}, {"porder": float(p), "axis": axis, "keepdim": True, "epsilon": 0.0})
    zero = n.cast(n.binary("equal", norm, n.constant(np.asarray(0, n.dtype(0)))), n.dtype(0))
    n.binary("elementwise_div", n.x(0), n.binary("elementwise_add", norm, zero), out=n.y())  # 0 where the norm is


def _scatter_nd(n: Node) -> None:
    reduction = n.attr("reduction", "none")
    if reduction == "add":
        n.emit("scatter_nd_add", {"X": n.x(0), "Index": n.x(1), "Updates": n.x(2)}, {"Out": n.y()})
        return
    if reduction in ("mul", "max", "min"):
        _scatter_nd_reduce(n, {"mul": "mul", "max": "amax", "min": "amin"}[reduction])
        return
    if reduction != "none":
        raise Refused(f"reduction {reduction!r}")
    zeros, ones = n.tmp("zeros"), n.tmp("ones")
    n.emit("fill_any_like", {"X": n.x(0)}, {"Out": zeros}, {"value": 0.0, "dtype": -1})
    n.emit("fill_any_like", {"X": n.x(2)}, {"Out": ones}, {"value": 1.0, "dtype": -1})
    hit, placed = n.tmp("hit"), n.tmp("placed")
    n.emit("scatter_nd_add", {"X": zeros, "Index": n.x(1), "Updates": ones}, {"Out": hit})
    n.emit("scatter_nd_add", {"X": zeros, "Index": n.x(1), "Updates": n.x(2)}, {"Out": placed})
    miss = n.binary(
        "elementwise_sub", n.binary("elementwise_add", zeros, n.unary("scale", zeros, {"scale": 0.0, "bias": 1.0})), hit
    )
    n.binary("elementwise_add", n.binary("elementwise_mul", n.x(0), miss), placed, out=n.y())


def _scatter_nd_reduce(n: Node, reduce: str) -> None:
    """ScatterND with a reduction as put_along_axis on the data seen as [P, R] (P the positions the index
    tuples address, each a row of R values): each tuple becomes its row number."""
    shape, index_shape = n.shape(0), n.shape(1)
    if shape is None or index_shape is None or -1 in shape or -1 in index_shape:
        raise Refused("a reduction on data or indices of a shape known only at run time")
    depth = index_shape[-1]
    rows, width, count = int(np.prod(shape[:depth])), int(np.prod(shape[depth:])), int(np.prod(index_shape[:-1]))
    strides = np.cumprod((*shape[1:depth], 1)[::-1])[::-1].astype("int64")
    index = n.cast(n.x(1), "int64")
    wrapped = n.binary("elementwise_mod", index, n.constant(np.asarray(shape[:depth], "int64")))  # negative: from end
    scaled = n.binary("elementwise_mul", wrapped, n.constant(strides))
    row = n.unary("reduce_sum", scaled, {"dim": [-1], "keep_dim": True})
    flat_row, rows_index = n.tmp("row"), n.tmp("rows")
    n.emit("reshape2", {"X": row}, {"Out": flat_row, "XShape": n.tmp("xshape")}, {"shape": [count, 1]})
    n.emit("expand_v2", {"X": flat_row}, {"Out": rows_index}, {"shape": [count, width]})
    data, values, result = n.tmp("data"), n.tmp("values"), n.tmp("result")
    n.emit("reshape2", {"X": n.x(0)}, {"Out": data, "XShape": n.tmp("xshape")}, {"shape": [rows, width]})
    n.emit("reshape2", {"X": n.x(2)}, {"Out": values, "XShape": n.tmp("xshape")}, {"shape": [count, width]})
    inputs = {"Input": data, "Index": rows_index, "Value": values}
    n.emit("put_along_axis", inputs, {"Result": result}, {"Axis": 0, "Reduce": reduce, "broadcast": False})
    n.emit("reshape2", {"X": result}, {"Out": n.y(), "XShape": n.tmp("xshape")}, {"shape": list(shape)})


def _lrn(n: Node) -> None:
    """x / (bias + alpha / size * (sum of x^2 over ``size`` channels around))^beta: the sum an average pool
    (zeros counted) over the channels of x^2 seen as an (N, 1, C, H*W) image."""
    size = int(n.attr("size"))
    alpha, beta, bias = float(n.attr("alpha", 1e-4)), float(n.attr("beta", 0.75)), float(n.attr("bias", 1.0))
    if n.rank(0) != 4:
        raise Refused(f"a {n.rank(0)}-D input (4-D, NCHW, here)")
    flat = n.tmp("flat")
    n.emit(
        "flatten_contiguous_range",
        {"X": n.unary("square", n.x(0))},
        {"Out": flat, "XShape": n.tmp("xshape")},
        {"start_axis": 2, "stop_axis": 3},
    )
    image = n.tmp("image")
    n.emit("unsqueeze2", {"X": flat}, {"Out": image, "XShape": n.tmp("xshape")}, {"axes": [1]})
    before, after = (size - 1) // 2, size - 1 - (size - 1) // 2
    mean = n.tmp("mean")
    n.emit(
        "pool2d",
        {"X": image},
        {"Out": mean},
        {
            "pooling_type": "avg",
            "ksize": [size, 1],
            "strides": [1, 1],
            "paddings": [before, after, 0, 0],
            "exclusive": False,
        },
    )
    shape = n.tmp("shape")
    n.emit("shape", {"Input": n.x(0)}, {"Out": shape})
    window = n.tmp("window")
    n.emit("reshape2", {"X": mean, "Shape": n.cast(shape, "int64")}, {"Out": window, "XShape": n.tmp("xshape")})
    scaled = n.unary("scale", window, {"scale": alpha, "bias": bias})
    n.binary("elementwise_div", n.x(0), n.unary("pow", scaled, {"factor": beta}), out=n.y())


def _trilu(n: Node) -> None:
    k = int(n.value(1, "k").reshape(-1)[0]) if n.has(1) else 0
    n.emit("tril_triu", {"X": n.x(0)}, {"Out": n.y()}, {"diagonal": k, "lower": not n.attr("upper", 1)})


def _non_zero(n: Node) -> None:
    index = n.tmp("index")
    n.emit("where_index", {"Condition": n.x(0)}, {"Out": index})
    n.emit("transpose2", {"X": index}, {"Out": n.y(), "XShape": n.tmp("xshape")}, {"axis": [1, 0]})


def _rms_norm(n: Node) -> None:
    """X / sqrt(mean(X^2 over the dims from ``axis``) + epsilon) * Scale."""
    rank = n.rank(0)
    axis = _axis(int(n.attr("axis", -1)), rank)
    dims = {"dim": list(range(axis, rank)), "keep_dim": True, "reduce_all": False}
    mean = n.unary("reduce_mean", n.unary("square", n.x(0)), dims)
    eps = n.constant(np.asarray(float(n.attr("epsilon", 1e-5)), n.dtype(0)))
    normed = n.binary("elementwise_mul", n.x(0), n.unary("rsqrt", n.binary("elementwise_add", mean, eps)))
    n.binary("elementwise_mul", normed, n.x(1), out=n.y())


def _dropout(n: Node) -> None:
    """Inference: the identity (and an all-true mask). Training (opset 12's training_mode, a constant): dropout
    upscale_in_train, its mask drawn from ``seed`` when given (numpy's RandomState(seed), as ONNX's reference),
    else afresh at every run."""
    if not (n.opset >= 12 and n.has(2) and bool(n.value(2, "training_mode").reshape(-1)[0])):
        n.emit("assign", {"X": n.x(0)}, {"Out": n.y()})
        if n.wants(1):
            n.emit("fill_any_like", {"X": n.x(0)}, {"Out": n.y(1)}, {"value": 1.0, "dtype": DTYPE_TO_PROTO["bool"]})
        return
    ratio = float(n.value(1, "ratio").reshape(-1)[0]) if n.has(1) else 0.5
    seed = int(n.attr("seed", 0)) % 2**32  # the kernel's seeds are int32, taken modulo 2**32
    attrs = {
        "dropout_prob": ratio,
        "is_test": False,
        "fix_seed": "seed" in n.attrs,
        "seed": seed - 2**32 if seed >= 2**31 else seed,
        "dropout_implementation": "upscale_in_train",
    }
    mask = n.tmp("mask")
    n.emit("dropout", {"X": n.x(0)}, {"Out": n.y(), "Mask": mask}, attrs)
    if n.wants(1):
        n.cast(mask, "bool", out=n.y(1))


def _softmax(type: str) -> Converter:
    def convert(n: Node) -> None:
        rank = n.rank(0)
        axis = _axis(int(n.attr("axis", -1 if n.opset >= 13 else 1)), rank)
        if n.opset >= 13 or axis == rank - 1:
            n.emit(type, {"X": n.x(0)}, {"Out": n.y()}, {"axis": axis})
            return
        shape = n.tmp("shape")
        n.emit("shape", {"Input": n.x(0)}, {"Out": shape})
        flat = n.tmp("flat")
        n.emit(
            "flatten_contiguous_range",
            {"X": n.x(0)},
            {"Out": flat, "XShape": n.tmp("xshape")},
            {"start_axis": axis, "stop_axis": -1},
        )
        done = n.unary(type, flat, {"axis": -1})
        n.emit("reshape2", {"X": done, "Shape": n.cast(shape, "int64")}, {"Out": n.y(), "XShape": n.tmp("xshape")})

    return convert


_BOOL_REDUCTION = {"reduce_max": "reduce_any", "reduce_min": "reduce_all"}
# ONNX's value of a reduction over no element (its identity) where numpy's has none: (float, bool) values; an
# integer's is its dtype's least (max) or greatest (min) value
_EMPTY_REDUCTION = {"reduce_max": (-np.inf, False), "reduce_min": (np.inf, True), "logsumexp": (-np.inf, False)}


def _reduces_nothing(n: Node, dims: list[int], keep: bool, type: str) -> bool:
    """For a reduction over dims of which one is known to be empty (input 0 of known shape): the output filled
    with the reduction's identity (ONNX's value over an empty set); False (nothing done) otherwise."""
    shape = n.shape(0)
    if shape is None or -1 in shape or all(shape[d] for d in dims):
        return False
    dtype = n.dtype(0)
    value, truth = _EMPTY_REDUCTION[type]
    if dtype == "bool":
        fill: Any = np.bool_(truth)
    elif np.issubdtype(np.dtype(dtype), np.integer):
        info = np.iinfo(dtype)
        fill = np.asarray(info.min if value < 0 else info.max, dtype)
    else:
        fill = np.asarray(value, dtype)
    out = [1 if d in dims else s for d, s in enumerate(shape) if keep or d not in dims]
    n.graph.consts[n.outputs[0]] = np.full(out, fill, dtype)
    return True


def _reduce(type: str, since: int, pre: str = "", post: str = "") -> Converter:
    """ReduceX: ``pre`` (abs, square) applied first, ``post`` (sqrt, log) after; axes an input from opset
    ``since``."""

    def convert(n: Node) -> None:
        axes = _axes_arg(n, since) or None
        x = n.x(0)
        if axes is None and n.opset >= since and n.attr("noop_with_empty_axes", 0):
            n.emit("assign", {"X": x}, {"Out": n.y()})
            return
        if pre:
            x = n.unary(pre, x)
        rank = n.rank(0)
        attrs: dict[str, Any] = {"keep_dim": bool(n.attr("keepdims", 1))}
        if axes is None or not axes:
            attrs.update(dim=list(range(rank)), reduce_all=True)
        else:
            attrs.update(dim=[_axis(a, rank) for a in axes], reduce_all=False)
        if type in _EMPTY_REDUCTION and _reduces_nothing(n, attrs["dim"], attrs["keep_dim"], type):
            return
        op = type
        if n.dtype(0) == "bool" and type in _BOOL_REDUCTION:
            op = _BOOL_REDUCTION[type]
        if type == "logsumexp":
            attrs = {"axis": attrs["dim"], "keepdim": attrs["keep_dim"], "reduce_all": attrs["reduce_all"]}
        scalar = not n.attr("keepdims", 1) and (axes is None or len({_axis(a, rank) for a in axes}) == rank)
        out = n.tmp(type) if post or scalar else n.y()
        n.emit(op, {"X": x}, {"Out": out}, attrs)
        if post:
            out = n.unary(post, out, out=None if scalar else n.y())
        if scalar:  # Fluid's reductions of every dim give [1], ONNX's a 0-D value
            n.emit("reshape2", {"X": out}, {"Out": n.y(), "XShape": n.tmp("xshape")}, {"shape": []})

    return convert


def _arg(type: str) -> Converter:
    def convert(n: Node) -> None:
        axis = _axis(int(n.attr("axis", 0)), n.rank(0))
        attrs = {
            "axis": axis,
            "keepdims": bool(n.attr("keepdims", 1)),
            "flatten": False,
            "dtype": DTYPE_TO_PROTO["int64"],
        }
        if not n.attr("select_last_index", 0):
            n.emit(type, {"X": n.x(0)}, {"Out": n.y()}, attrs)
            return
        shape = n.shape(0)
        if shape is None or shape[axis] == -1:
            raise Refused("select_last_index=1 along a dim known only at run time")
        flipped = n.unary("flip", n.x(0), {"axis": [axis]})
        index = n.tmp(type)
        n.emit(type, {"X": flipped}, {"Out": index}, attrs)
        n.emit("scale", {"X": index}, {"Out": n.y()}, {"scale": -1.0, "bias": float(shape[axis] - 1)})

    return convert


def _topk(n: Node) -> None:
    k = int(n.value(1, "K").reshape(-1)[0]) if n.opset >= 10 else int(n.attr("k"))
    axis = int(n.attr("axis", -1))
    attrs = {"k": k, "axis": axis, "largest": bool(n.attr("largest", 1)), "sorted": bool(n.attr("sorted", 1))}
    values = n.y(0) if n.wants(0) else n.tmp("values")
    indices = n.y(1) if n.wants(1) else n.tmp("indices")
    dtype = n.dtype(0)
    if dtype not in _NARROW:
        n.emit("top_k_v2", {"X": n.x(0)}, {"Out": values, "Indices": indices}, attrs)
        return
    wide = n.tmp("values")
    n.emit("top_k_v2", {"X": _ordered(n, n.x(0), dtype)}, {"Out": wide, "Indices": indices}, attrs)
    _unordered(n, wide, dtype, values)


def _cumsum(n: Node) -> None:
    axis = int(n.value(1, "axis").reshape(-1)[0])
    attrs = {"axis": axis, "exclusive": bool(n.attr("exclusive", 0)), "reverse": bool(n.attr("reverse", 0))}
    n.emit("cumsum", {"X": n.x(0)}, {"Out": n.y()}, attrs)


def _depth_to_space(n: Node) -> None:
    if n.attr("mode", "DCR") != "CRD":
        shape = n.shape(0)
        if shape is None or -1 in shape[1:]:
            raise Refused("mode DCR of an input whose dims are known only at run time")
        b = int(n.attr("blocksize"))
        _, c, h, w = shape
        t1, t2 = n.tmp("dcr"), n.tmp("dcr")
        n.emit(
            "reshape2", {"X": n.x(0)}, {"Out": t1, "XShape": n.tmp("xshape")}, {"shape": [0, b, b, c // (b * b), h, w]}
        )
        n.emit("transpose2", {"X": t1}, {"Out": t2, "XShape": n.tmp("xshape")}, {"axis": [0, 3, 4, 1, 5, 2]})
        n.emit(
            "reshape2", {"X": t2}, {"Out": n.y(), "XShape": n.tmp("xshape")}, {"shape": [0, c // (b * b), h * b, w * b]}
        )
        return
    n.emit("pixel_shuffle", {"X": n.x(0)}, {"Out": n.y()}, {"upscale_factor": int(n.attr("blocksize"))})


def _space_to_depth(n: Node) -> None:
    shape = n.shape(0)
    if shape is None or -1 in shape[1:]:
        raise Refused("an input whose dims are known only at run time")
    b = int(n.attr("blocksize"))
    _, c, h, w = shape
    t1, t2 = n.tmp("s2d"), n.tmp("s2d")
    n.emit("reshape2", {"X": n.x(0)}, {"Out": t1, "XShape": n.tmp("xshape")}, {"shape": [0, c, h // b, b, w // b, b]})
    order = [0, 1, 3, 5, 2, 4] if n.attr("mode", "DCR") == "CRD" else [0, 3, 5, 1, 2, 4]
    n.emit("transpose2", {"X": t1}, {"Out": t2, "XShape": n.tmp("xshape")}, {"axis": order})
    n.emit("reshape2", {"X": t2}, {"Out": n.y(), "XShape": n.tmp("xshape")}, {"shape": [0, c * b * b, h // b, w // b]})


_INTERP = {"nearest": "nearest_interp_v2", "linear": "bilinear_interp_v2", "cubic": "bicubic_interp_v2"}


def _resize_inputs(n: Node) -> tuple[np.ndarray | None, np.ndarray | None, np.ndarray | None]:
    """(roi, scales, sizes) of Resize or Upsample, each None when absent (an error when computed at run time)."""
    if n.op_type == "Upsample":
        return None, np.asarray(n.attr("scales"), "float32") if n.opset < 9 else n.value(1, "scales"), None
    if n.opset < 11:
        return None, n.value(1, "scales"), None
    roi: np.ndarray | None = n.value(1, "roi") if n.has(1) else None
    scales: np.ndarray | None = n.value(2, "scales") if n.has(2) else None
    sizes = n.value(3, "sizes") if n.has(3) else None
    if scales is not None and scales.size == 0:
        scales = None
    if roi is not None and roi.size == 0:
        roi = None
    return roi, scales, sizes


def _resize_matrix(
    n: Node,
    size: int,
    out: int,
    scale: float,
    roi: tuple[float, float] | None,
    extrapolation: float | None = None,
    binding: tuple[int, int] | None = None,
) -> np.ndarray:
    """The (size, out) matrix W with resize(x) = x @ W along one axis: ONNX's reference evaluator resizing the
    identity, so every mode, coordinate transformation, cubic coefficient and antialias is ONNX's own
    (``extrapolation``: another extrapolation_value than the node's). ``binding``: with a keep_aspect_ratio_policy,
    the (size, requested size) of the axis whose ratio decides the common scale, resized beside this one (``out``
    then this axis's requested size) so that the evaluator picks that scale itself."""
    from blockir.io.onnx import onnx_module

    onnx = onnx_module()
    from onnx.reference import ReferenceEvaluator

    helper = onnx.helper
    attrs = {k: v for k, v in n.attrs.items() if k not in ("axes", "keep_aspect_ratio_policy")}
    if extrapolation is not None:
        attrs["extrapolation_value"] = extrapolation
    if n.op_type == "Upsample" or n.opset < 11:
        attrs["coordinate_transformation_mode"] = "asymmetric"
        if n.attr("mode", "nearest") == "nearest":  # n.attr decodes the bytes a string attribute holds
            attrs["nearest_mode"] = "floor"
        attrs.pop("scales", None)
    opset = max(n.opset, 11)
    feeds: dict[str, np.ndarray] = {"X": np.eye(size, dtype="float64")}
    if roi is not None:
        feeds["roi"] = np.asarray([0.0, roi[0], 1.0, roi[1]], "float64")
    if out < 0:
        feeds["scales"] = np.asarray([1.0, scale], "float32")
    else:
        feeds["sizes"] = np.asarray([size, out], "int64")
    if binding is not None:  # X [size, size, binding size]: the identity on axis 1, constant along axis 2
        feeds["X"] = np.repeat(feeds["X"][:, :, None], binding[0], axis=2)
        feeds["sizes"] = np.asarray([out, binding[1]], "int64")
        if roi is not None:
            feeds["roi"] = np.asarray([roi[0], 0.0, roi[1], 1.0], "float64")
        attrs.update(axes=[1, 2], keep_aspect_ratio_policy=n.attr("keep_aspect_ratio_policy"))
    names = [k if k in feeds else "" for k in ("X", "roi", "scales", "sizes")]
    while not names[-1]:
        names.pop()
    node = helper.make_node("Resize", names, ["Y"], **attrs)
    types: dict[str, int] = {
        "X": onnx.TensorProto.DOUBLE,
        "roi": onnx.TensorProto.DOUBLE,
        "scales": onnx.TensorProto.FLOAT,
    }
    graph = helper.make_graph(
        [node],
        "axis",
        [helper.make_tensor_value_info(k, types.get(k, onnx.TensorProto.INT64), None) for k in feeds],
        [helper.make_tensor_value_info("Y", onnx.TensorProto.DOUBLE, None)],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)])
    outputs = cast("list[Any]", ReferenceEvaluator(model).run(None, feeds))  # onnx types it loosely
    return np.asarray(outputs[0]) if binding is None else np.asarray(outputs[0])[:, :, 0]


def _aspect_binding(n: Node, dims: list[int], sizes: np.ndarray | None) -> tuple[int, int] | None:
    """With keep_aspect_ratio_policy not_larger (not_smaller) and sizes: the (size, requested size) of the axis of
    least (greatest) ratio, whose ratio is the scale of every axis; None for stretch."""
    policy = n.attr("keep_aspect_ratio_policy", "stretch")
    if policy == "stretch" or sizes is None:
        return None
    if policy not in ("not_larger", "not_smaller"):
        raise Refused(f"keep_aspect_ratio_policy {policy!r}")
    if -1 in dims:
        raise Refused(f"keep_aspect_ratio_policy {policy!r} on dims {dims}, some known only at run time")
    requested = _ints(sizes)
    ratios = [r / d for r, d in zip(requested, dims)]
    k = ratios.index(min(ratios) if policy == "not_larger" else max(ratios))
    return dims[k], requested[k]


def _resize(n: Node) -> None:
    """Resize and Upsample of an input of known shape, one axis after another: a product with the axis's
    interpolation matrix (a gather of rows for nearest)."""
    shape = n.shape(0)
    if shape is None:
        raise Refused("an input of unknown rank")
    rank = len(shape)
    axes = [_axis(a, rank) for a in n.attr("axes", range(rank))]
    roi, scales, sizes = _resize_inputs(n)
    if scales is None and sizes is None:
        raise Refused("neither scales nor sizes")
    binding = _aspect_binding(n, [shape[a] for a in axes], sizes)
    x = n.x(0)
    nearest = n.attr("mode", "nearest") == "nearest"
    if not nearest and n.dtype(0) not in ("float32", "float64", "float16"):
        raise Refused(f"mode {n.attr('mode')!r} on {n.dtype(0)}")
    steps = []
    for k, a in enumerate(axes):
        size = shape[a]
        out = int(_ints(sizes)[k]) if sizes is not None else -1
        scale = float(np.asarray(scales).reshape(-1)[k]) if scales is not None else 1.0
        span = (float(roi.reshape(-1)[k]), float(roi.reshape(-1)[k + len(axes)])) if roi is not None else None
        if binding is not None:
            if binding[1] != binding[0]:  # a common scale other than 1 (else every axis is kept)
                steps.append((a, _resize_matrix(n, size, out, scale, span, binding=binding), np.zeros(0, bool)))
            continue
        if out == size or (out < 0 and scale == 1.0 and span is None):
            continue
        if size == -1:
            raise Refused(f"resizing dim {a}, whose size is known only at run time")
        w = _resize_matrix(n, size, out, scale, span)
        outside = np.zeros(w.shape[1], bool)
        if n.attr("coordinate_transformation_mode") == "tf_crop_and_resize":  # columns the extrapolation fills
            outside = np.any(w != _resize_matrix(n, size, out, scale, span, extrapolation=1.0 + w.max()), axis=0)
            w[:, outside] = 0.0
        steps.append((a, w, outside))
    if not steps:
        n.emit("assign", {"X": x}, {"Out": n.y()})
        return
    extrapolated = float(n.attr("extrapolation_value", 10.0))
    for k, (a, w, outside) in enumerate(steps):
        last = k == len(steps) - 1
        result = n.tmp("resize") if not last or outside.any() else n.y()
        if nearest:
            picked = np.argmax(w, axis=0).astype("int64")
            n.emit("index_select", {"X": x, "Index": n.constant(picked)}, {"Out": result}, {"dim": a})
        elif a == rank - 1:
            n.emit("matmul_v2", {"X": x, "Y": n.constant(w.astype(n.dtype(0)))}, {"Out": result})
        else:
            perm = list(range(rank))
            perm[a], perm[-1] = perm[-1], perm[a]
            moved, done = n.tmp("moved"), n.tmp("resized")
            n.emit("transpose2", {"X": x}, {"Out": moved, "XShape": n.tmp("xshape")}, {"axis": perm})
            n.emit("matmul_v2", {"X": moved, "Y": n.constant(w.astype(n.dtype(0)))}, {"Out": done})
            n.emit("transpose2", {"X": done}, {"Out": result, "XShape": n.tmp("xshape")}, {"axis": perm})
        if outside.any():  # result * inside + extrapolation_value * outside, along axis a
            along = (-1,) + (1,) * (rank - 1 - a)
            inside = n.constant((~outside).astype(n.dtype(0)).reshape(along))
            fill = n.constant((outside * extrapolated).astype(n.dtype(0)).reshape(along))
            kept = n.binary("elementwise_mul", result, inside)
            result = n.binary("elementwise_add", kept, fill, out=n.y() if last else None)
        x = result


def _compare(type: str) -> Converter:
    def convert(n: Node) -> None:
        x, y, dtype = n.x(0), n.x(1), n.dtype(0)
        if dtype in _NARROW:
            x, y = _ordered(n, x, dtype), _ordered(n, y, dtype)
        n.emit(type, {"X": x, "Y": y}, {"Out": n.y()}, {"axis": _legacy_axis(n)})

    return convert


def _unique(n: Node) -> None:
    axis = n.attr("axis")
    attrs = {
        "axis": [] if axis is None else [_axis(int(axis), n.rank(0))], "is_sorted": bool(n.attr("sorted", 1)),
        "return_index": True, "return_inverse": True, "return_counts": True, "dtype": DTYPE_TO_PROTO["int64"],
    }  # fmt: skip
    outs = {slot: n.y(k) if n.wants(k) else n.tmp(slot) for k, slot in enumerate(("Out", "Indices", "Index", "Counts"))}
    n.emit("unique", {"X": n.x(0)}, outs, attrs)


def _non_max_suppression(n: Node) -> None:
    slots = ("Boxes", "Scores", "MaxOutputBoxesPerClass", "IouThreshold", "ScoreThreshold")
    inputs = {slot: n.x(i) for i, slot in enumerate(slots) if n.has(i)}
    attrs = {"center_point_box": int(n.attr("center_point_box", 0))}
    n.emit("non_max_suppression", inputs, {"SelectedIndices": n.y()}, attrs)


def _tfidf_vectorizer(n: Node) -> None:
    names = ("mode", "min_gram_length", "max_gram_length", "max_skip_count", "ngram_counts", "ngram_indexes")
    attrs = {name: n.attr(name) for name in (*names, "pool_int64s", "weights") if n.attr(name) is not None}
    if n.attr("pool_strings") is not None:
        raise Refused("a pool of strings")
    n.emit("tfidf_vectorizer", {"X": n.x(0)}, {"Y": n.y()}, attrs)


def _compress(n: Node) -> None:
    """index_select of the positions where the condition holds (where_index), along axis (of X flattened
    without one)."""
    found, index, x = n.tmp("found"), n.tmp("index"), n.x(0)
    n.emit("where_index", {"Condition": n.cast(n.x(1), "bool")}, {"Out": found})
    n.emit("reshape2", {"X": found}, {"Out": index, "XShape": n.tmp("xshape")}, {"shape": [-1]})
    axis = n.attr("axis")
    if axis is None:
        x = n.tmp("flat")
        n.emit("reshape2", {"X": n.x(0)}, {"Out": x, "XShape": n.tmp("xshape")}, {"shape": [-1]})
    dim = 0 if axis is None else _axis(axis, n.rank(0))
    n.emit("index_select", {"X": x, "Index": index}, {"Out": n.y()}, {"dim": dim})


def _bitcast(n: Node) -> None:
    dtype = dtype_name(int(n.attr("to")), "its target type")
    n.emit("bitcast", {"X": n.x(0)}, {"Out": n.y()}, {"dtype": DTYPE_TO_PROTO[dtype]})


def _bit_shift(n: Node) -> None:
    direction = n.attr("direction", "")
    if direction not in ("LEFT", "RIGHT"):
        raise Refused(f"direction {direction!r} (LEFT or RIGHT)")
    type = "bitwise_left_shift" if direction == "LEFT" else "bitwise_right_shift"
    n.emit(type, {"X": n.x(0), "Y": n.x(1)}, {"Out": n.y()}, {"is_arithmetic": True})


def _logical(type: str) -> Converter:
    def convert(n: Node) -> None:
        if type in ("logical_not", "bitwise_not"):
            n.emit(type, {"X": n.x(0)}, {"Out": n.y()})
        else:
            n.emit(type, {"X": n.x(0), "Y": n.x(1)}, {"Out": n.y()})

    return convert


# -- attention -----------------------------------------------------------------------------------


def _attention(n: Node) -> None:
    scale = n.attr("scale")
    if scale is not None and float(scale) == 0.0:
        raise Refused("scale 0 (blockir's attention reads 0 as 1 / sqrt(head size))")
    precision = n.attr("softmax_precision")
    attrs = {
        "scale": 0.0 if scale is None else float(scale),
        "is_causal": bool(n.attr("is_causal", 0)),
        "q_num_heads": int(n.attr("q_num_heads", 0)),
        "kv_num_heads": int(n.attr("kv_num_heads", 0)),
        "softcap": float(n.attr("softcap", 0.0)),
        "softmax_dtype": "" if precision is None else dtype_name(int(precision), "its softmax_precision"),
        "qk_matmul_output_mode": int(n.attr("qk_matmul_output_mode", 0)),
        "left_window_size": int(n.attr("left_window_size", -1)),
        "right_window_size": int(n.attr("right_window_size", -1)),
    }
    n.emit(
        "attention",
        _given(n, ("Q", "K", "V", "AttnMask", "PastKey", "PastValue", "NonpadKVSeqlen")),
        _wanted(n, ("Y", "PresentKey", "PresentValue", "QKMatmulOutput")),
        attrs,
    )


_SOFTMAX_DTYPES = ("float16", "float32", "float64")


def _flex_attention(n: Node) -> None:
    """FlexAttention (ai.onnx.preview) as ONNX's reference computes it: scores = (Q * r) @ (K * r)^T with r =
    sqrt(scale) in the inputs' type, cast to the softmax precision (float32, or float64 for float64 inputs, unless
    softmax_precision says), through score_mod, softmax over the last dim, through prob_mod, times V in that
    precision, cast back. Each modifier graph is imported inline, its input bound to the scores or probabilities.
    Grouped-query heads: K and V's heads repeated (query head h reads K/V head h // (Hq / Hkv))."""
    shapes = [n.shape(i) or () for i in range(3)]
    if any(len(shape) != 4 for shape in shapes):
        given = ", ".join(
            f"{name} {'of unknown rank' if n.shape(i) is None else list(shape)}"
            for i, (name, shape) in enumerate(zip("QKV", shapes))
        )
        raise Refused(f"Q, K and V must be rank-4 (batch, heads, sequence, head size), got {given}")
    (_, q_heads, _, head_size), (_, kv_heads, _, _), (_, v_heads, _, _) = shapes
    if min(q_heads, kv_heads, v_heads) < 0:
        raise Refused(f"the head counts of Q, K and V ({q_heads}, {kv_heads}, {v_heads}) must be known at import")
    if kv_heads != v_heads or not kv_heads or q_heads % kv_heads:
        raise Refused(
            f"Q's {q_heads} heads must be a multiple of K's {kv_heads}, and V must have K's heads (it has {v_heads})"
        )
    dtype = n.dtype(0)
    precision = n.attr("softmax_precision")
    compute = "float64" if dtype == "float64" else "float32"
    if precision is not None:
        compute = dtype_name(int(precision), "its softmax_precision")
        if compute not in _SOFTMAX_DTYPES:
            raise Refused(f"softmax_precision {precision} ({compute}): one of {', '.join(_SOFTMAX_DTYPES)}")
    scale = n.attr("scale")
    if scale is None and head_size < 0:
        raise Refused("no scale, and Q's head size (its default 1 / sqrt(head size)) is known only at run time")
    root = np.sqrt(np.float32(1.0 / np.sqrt(head_size) if scale is None else scale))
    root_value = n.constant(np.asarray(root, dtype))
    q = n.binary("elementwise_mul", n.x(0), root_value)
    group = q_heads // kv_heads
    k = _kv_heads(n, n.binary("elementwise_mul", n.x(1), root_value), kv_heads, group)
    scores = n.tmp("scores")
    n.emit("matmul_v2", {"X": q, "Y": k}, {"Out": scores}, {"trans_x": False, "trans_y": True})
    scores = _modifier(n, "score_mod", n.cast(scores, compute), compute)
    probs = _modifier(n, "prob_mod", n.unary("softmax", scores, {"axis": -1}), compute)
    v = n.cast(_kv_heads(n, n.x(2), kv_heads, group), compute)
    out = n.y() if compute == n.dtype(2) else n.tmp("out")
    n.emit("matmul_v2", {"X": probs, "Y": v}, {"Out": out}, {"trans_x": False, "trans_y": False})
    if out != n.y():
        n.cast(out, n.dtype(2), out=n.y())


def _kv_heads(n: Node, x: str, heads: int, group: int) -> str:
    """K or V ``x`` [B, heads, S, *] with each head repeated ``group`` times (``x`` itself for a group of 1)."""
    if group == 1:
        return x
    return _index_select(n, x, n.constant(np.arange(heads * group, dtype="int64") // group), 1)


def _modifier(n: Node, attr: str, x: str, dtype: str) -> str:
    """``x`` through FlexAttention's modifier graph ``attr`` (score_mod, prob_mod), imported into the node's block
    with its one input bound to ``x``, its output cast to ``dtype``; ``x`` itself without one."""
    if attr not in n.attrs:
        return x
    _, outputs = n.subgraph(attr, [x], n.graph.block)
    if len(outputs) != 1:
        raise Refused(f"its {attr} gives {len(outputs)} outputs (a modifier gives 1)")
    return n.cast(outputs[0], dtype)


def _given(n: Node, slots: tuple[str, ...]) -> dict[str, str]:
    """The blockir op's input slots for the node's inputs given (by position; "" for an input read otherwise)."""
    return {slot: n.x(i) for i, slot in enumerate(slots) if slot and n.has(i)}


def _wanted(n: Node, slots: tuple[str, ...]) -> dict[str, str]:
    """The blockir op's output slots for the node's outputs wanted (by position)."""
    return {slot: n.y(i) for i, slot in enumerate(slots) if n.wants(i)}


# -- quantization: compositions in float (float64 where integer sums must be exact) --------------------------


def _along(n: Node, i: int, like: int, axis: int, block: int, dtype: str) -> str:
    """Input ``i`` (a scale or zero point: one value, one per index of ``axis`` of input ``like``, or one per
    ``block`` indices there) as ``dtype``, broadcastable against input ``like``."""
    shape, rank = n.shape(i) or (), n.rank(like)
    value = n.cast(n.x(i), dtype)
    if int(np.prod(shape)) == 1 and not block:
        return value
    axis = _axis(axis, rank)
    if block:
        dim = (n.shape(like) or ())[axis]
        if dim == -1:
            raise Refused("blocked quantization along a dim known only at run time")
        index = n.constant((np.arange(dim) // block).astype("int64"))
        return _index_select(n, value, index, axis)
    out = n.tmp("along")
    n.emit("reshape2", {"X": value}, {"Out": out, "XShape": n.tmp("xshape")}, {"shape": [-1] + [1] * (rank - axis - 1)})
    return out


def _index_select(n: Node, x: str, index: str, dim: int) -> str:
    out = n.tmp("select")
    n.emit("index_select", {"X": x, "Index": index}, {"Out": out}, {"dim": dim})
    return out


def _quant_dtype(n: Node, zero_point: int) -> str:
    if n.has(zero_point):
        return n.dtype(zero_point)
    code = n.attr("output_dtype", 0)
    return dtype_name(int(code), "its output_dtype") if code else "uint8"


def _saturated(n: Node, x: str, dtype: str, out: str) -> None:
    """Float ``x`` (integral values) clipped to the range of integer ``dtype`` and cast to it."""
    if not np.issubdtype(np.dtype(dtype), np.integer):
        raise Refused(f"quantizing to {dtype}")
    info = np.iinfo(dtype)
    n.cast(n.unary("clip", x, {"min": float(info.min), "max": float(info.max)}), dtype, out=out)


def _quantize_linear(n: Node) -> None:
    if n.attr("precision", 0):
        raise Refused("the precision attribute")
    axis, block = int(n.attr("axis", 1)), int(n.attr("block_size", 0))
    dtype = _quant_dtype(n, 2)
    scaled = n.binary("elementwise_div", n.cast(n.x(0), "float32"), _along(n, 1, 0, axis, block, "float32"))
    q = _round_even(n, scaled, "float32")
    if n.has(2):
        q = n.binary("elementwise_add", q, _along(n, 2, 0, axis, block, "float32"))
    _saturated(n, q, dtype, n.y())


def _dequantize_linear(n: Node) -> None:
    axis, block = int(n.attr("axis", 1)), int(n.attr("block_size", 0))
    code = n.attr("output_dtype", 0)
    dtype = dtype_name(int(code), "its output_dtype") if code else n.dtype(1)
    x = n.cast(n.x(0), "float32")
    if n.has(2):
        x = n.binary("elementwise_sub", x, _along(n, 2, 0, axis, block, "float32"))
    y = n.binary("elementwise_mul", x, _along(n, 1, 0, axis, block, "float32"))
    n.cast(y, dtype, out=n.y())


def _dynamic_quantize_linear(n: Node) -> None:
    """y_scale = (max(x, 0) - min(x, 0)) / 255 (1 / 255 when that range is 0), y_zero_point =
    saturate(round(-min(x, 0) / y_scale)), y = saturate(round(x / y_scale) + y_zero_point), as uint8."""
    x, zero = n.cast(n.x(0), "float32"), n.constant(np.zeros((), "float32"))
    whole = {"dim": [0], "keep_dim": False, "reduce_all": True}
    bounds = []
    for type, bound in (("reduce_min", "elementwise_min"), ("reduce_max", "elementwise_max")):
        whole_x = n.tmp(type)  # 0-d, as ONNX's scale and zero point
        n.emit("reshape2", {"X": n.unary(type, x, whole)}, {"Out": whole_x, "XShape": n.tmp("xshape")}, {"shape": []})
        bounds.append(n.binary(bound, whole_x, zero))
    low, high = bounds
    span, empty = n.binary("elementwise_sub", high, low), n.tmp("span")
    one = n.constant(np.ones((), "float32"))
    n.emit("where", {"Condition": n.binary("equal", span, zero), "X": one, "Y": span}, {"Out": empty})
    scale = n.binary("elementwise_div", empty, n.constant(np.asarray(255.0, "float32")), out=n.y(1))
    point = _round_even(n, n.binary("elementwise_div", n.unary("scale", low, {"scale": -1.0}), scale), "float32")
    point = n.unary("clip", point, {"min": 0.0, "max": 255.0})
    n.cast(point, "uint8", out=n.y(2))
    q = n.binary("elementwise_add", _round_even(n, n.binary("elementwise_div", x, scale), "float32"), point)
    _saturated(n, q, "uint8", n.y(0))


def _centred(n: Node, i: int, zero_point: int, trailing: int = 0) -> str:
    """Integer input ``i`` less its zero point (input ``zero_point``, if any), as float64 (exact). ``trailing``: a
    1-D zero point holds one value per index of the dim that many dims before the last (A's rows in
    MatMulInteger: 1; a convolution's output channels: 3)."""
    x = n.cast(n.x(i), "float64")
    if not n.has(zero_point):
        return x
    point = n.cast(n.x(zero_point), "float64")
    shape = n.shape(zero_point) or ()
    if trailing and len(shape) == 1 and shape[0] != 1:
        column = n.tmp("point")
        attrs = {"shape": [-1] + [1] * trailing}
        n.emit("reshape2", {"X": point}, {"Out": column, "XShape": n.tmp("xshape")}, attrs)
        point = column
    return n.binary("elementwise_sub", x, point)


def _matmul_integer(n: Node) -> None:
    product = n.tmp("product")
    n.emit("matmul_v2", {"X": _centred(n, 0, 2, trailing=1), "Y": _centred(n, 1, 3)}, {"Out": product})
    n.cast(product, "int32", out=n.y())


def _qlinear_matmul(n: Node) -> None:
    """(A - a_zero_point) @ (B - b_zero_point) exact in float64, times a_scale * b_scale / y_scale (computed in the
    scales' dtype), rounded half to even, plus y_zero_point, saturated."""
    product = n.tmp("product")
    n.emit("matmul_v2", {"X": _centred(n, 0, 2, trailing=1), "Y": _centred(n, 3, 5)}, {"Out": product})
    _requantized(n, product)


def _requantized(n: Node, product: str, axis: int = -1) -> None:
    """``product`` (float64, the integer result) times x_scale * w_scale / y_scale (inputs 1, 4, 6, in the scales'
    dtype; w_scale broadcast at ``axis``), rounded half to even, plus y_zero_point (input 7), saturated."""
    scales = n.binary("elementwise_mul", n.x(4), n.cast(n.x(1), n.dtype(4)))
    ratio = n.binary("elementwise_div", scales, n.cast(n.x(6), n.dtype(4)))
    scaled = n.binary("elementwise_mul", product, n.cast(ratio, "float64"), attrs={"axis": axis})
    y = n.binary("elementwise_add", _round_even(n, scaled, "float64"), n.cast(n.x(7), "float64"))
    _saturated(n, y, n.dtype(7), n.y())


def _integer_conv(n: Node, x: int, x_point: int, w: int, w_point: int) -> str:
    """The convolution of the integer inputs less their zero points, exact in float64 (2-D)."""
    shape = n.shape(w)
    if shape is None:
        raise Refused("a weight of unknown rank")
    attrs, dims = _spatial(n, list(n.attr("kernel_shape", shape[2:])))
    if dims != 2:
        raise Refused(f"{dims}-D {n.op_type} (blockir's op is 2-D)")
    made = n.tmp("conv")
    inputs = {"Input": _centred(n, x, x_point), "Filter": _centred(n, w, w_point, trailing=3)}
    n.emit("conv2d", inputs, {"Output": made}, {**attrs, "groups": int(n.attr("group", 1))})
    return made


def _conv_integer(n: Node) -> None:
    n.cast(_integer_conv(n, 0, 2, 1, 3), "int32", out=n.y())


def _qlinear_conv(n: Node) -> None:
    product = _integer_conv(n, 0, 2, 3, 5)
    if n.has(8):
        product = n.binary("elementwise_add", product, n.cast(n.x(8), "float64"), attrs={"axis": 1})
    _requantized(n, product, axis=1 if int(np.prod(n.shape(4) or ())) > 1 else -1)


# -- recurrent ops: Paddle's rnn ---------------------------------------------------------------------

# ONNX op -> (rnn's mode, ONNX's gate blocks in Paddle's order, the default activations)
_RECURRENT = {
    "LSTM": ("LSTM", (0, 2, 3, 1), ("Sigmoid", "Tanh", "Tanh")),  # ONNX i, o, f, c -> Paddle i, f, c, o
    "GRU": ("GRU", (1, 0, 2), ("Sigmoid", "Tanh")),  # ONNX z, r, h -> Paddle r, z, n
    "RNN": ("RNN_TANH", (0,), ("Tanh",)),
}


def _recurrent_mode(n: Node) -> str:
    mode, _, defaults = _RECURRENT[n.op_type]
    activations = tuple(n.attr("activations", ()) or ()) or defaults
    activations = tuple(a.decode() if isinstance(a, bytes) else a for a in activations)
    if n.op_type == "RNN" and activations in (("Relu",), ("Relu", "Relu")):
        return "RNN_RELU"
    if activations not in (defaults, defaults * 2):
        raise Refused(f"activations {list(activations)} (rnn's cell computes {list(defaults)})")
    for name in ("clip", "activation_alpha", "activation_beta"):
        if n.attr(name) is not None:
            raise Refused(f"the {name} attribute (rnn's cells have none)")
    if n.attr("input_forget", 0):
        raise Refused("input_forget=1 (rnn's LSTM has independent input and forget gates)")
    return mode


def _recurrent(n: Node) -> None:
    """Onto Paddle's rnn (time-major, gates in cuDNN's order, one weight per tensor): the weights reordered at
    import (they must be constants), a reverse direction as a forward one over the input flipped in time."""
    mode = _recurrent_mode(n)
    if n.op_type == "GRU" and not n.attr("linear_before_reset", 0):
        _gru_reset_first(n)
        return
    if n.op_type == "LSTM" and n.has(7) and np.any(n.value(7, "peepholes")):
        _lstm_peepholes(n)
        return
    order = _RECURRENT[n.op_type][1]
    direction = n.attr("direction", "forward")
    hidden, batchwise = int(n.attr("hidden_size")), bool(n.attr("layout", 0))
    w, r = n.value(1, "W"), n.value(2, "R")
    dirs = w.shape[0]
    gates = len(order)
    bias = n.value(3, "B") if n.has(3) else np.zeros((dirs, 2 * gates * hidden), w.dtype)
    if direction == "reverse" and n.has(4):
        raise Refused("direction reverse with sequence_lens")

    def paddle(m: np.ndarray) -> np.ndarray:  # gate blocks (rows of H) in Paddle's order
        return np.concatenate([m[k * hidden : (k + 1) * hidden] for k in order])

    weights = [n.constant(paddle(m[d])) for d in range(dirs) for m in (w, r)]
    weights += [n.constant(paddle(half)) for d in range(dirs) for half in np.split(bias[d], 2)]
    x = n.x(0)
    if batchwise:
        x = _transposed(n, x, [1, 0, 2])
    shape = n.shape(0)
    if shape is None or shape[1 - batchwise] == -1:
        raise Refused("a batch size known only at run time (the initial states are made at import)")
    batch = shape[1 - batchwise]
    states = []
    for k in range(2 if mode == "LSTM" else 1):
        slot = 5 + k
        states.append(
            (_transposed(n, n.x(slot), [1, 0, 2]) if batchwise else n.x(slot))
            if n.has(slot)
            else n.constant(np.zeros((dirs, batch, hidden), w.dtype))
        )
    if direction == "reverse":
        x = n.unary("flip", x, {"axis": [0]})
    out = n.tmp("out")
    finals = [n.tmp("state") for _ in states]
    inputs: dict[str, Any] = {"Input": x, "PreState": states, "WeightList": weights}
    if n.has(4):
        inputs["SequenceLength"] = n.cast(n.x(4), "int32")
    attrs = {
        "mode": mode, "hidden_size": hidden, "input_size": int(w.shape[2]), "num_layers": 1,
        "is_bidirec": direction == "bidirectional", "is_test": True, "dropout_prob": 0.0,
    }  # fmt: skip
    outputs = {"Out": out, "State": finals, "Reserve": n.tmp("reserve"), "DropoutState": n.tmp("dropout")}
    n.emit("rnn", inputs, outputs, attrs)
    if direction == "reverse":
        out = n.unary("flip", out, {"axis": [0]})
    if n.wants(0):  # [T, B, D * H] -> [T, D, B, H] (layout 1: [B, T, D, H])
        split = n.tmp("split")
        n.emit("reshape2", {"X": out}, {"Out": split, "XShape": n.tmp("xshape")}, {"shape": [0, 0, dirs, hidden]})
        _transposed(n, split, [1, 0, 2, 3] if batchwise else [0, 2, 1, 3], n.y(0))
    for k, final in enumerate(finals, 1):
        if n.wants(k):
            _transposed(n, final, [1, 0, 2], n.y(k)) if batchwise else n.emit("assign", {"X": final}, {"Out": n.y(k)})


# A recurrent cell as ops: (direction, the input's projection at the step [B, G H], the states [B, H] (h first))
# -> the new states
_Cell = Callable[[int, str, list[str]], list[str]]


def _gru_reset_first(n: Node) -> None:
    """GRU with linear_before_reset=0 (n = tanh(x W_h + (r * h) R_h + b), which rnn's cell cannot compute): a
    loop of its cell's ops (:func:`_recurrent_loop`)."""
    hidden, r = int(n.attr("hidden_size")), n.value(2, "R")
    bias = n.value(3, "B") if n.has(3) else np.zeros((r.shape[0], 6 * hidden), r.dtype)

    def cell(d: int, xw: str, states: list[str]) -> list[str]:
        (h,) = states
        hr = _matmul_t(n, h, r[d, : 2 * hidden])
        hr = n.binary("elementwise_add", hr, n.constant(bias[d, 3 * hidden : 5 * hidden]))
        gates = n.unary("sigmoid", n.binary("elementwise_add", _columns(n, xw, 0, 2 * hidden), hr))
        z, reset = _columns(n, gates, 0, hidden), _columns(n, gates, hidden, 2 * hidden)
        rh = _matmul_t(n, n.binary("elementwise_mul", reset, h), r[d, 2 * hidden :])
        candidate = n.binary("elementwise_add", rh, n.constant(bias[d, 5 * hidden :]))
        candidate = n.binary("elementwise_add", _columns(n, xw, 2 * hidden, 3 * hidden), candidate)
        candidate = n.unary("tanh", candidate)
        kept = n.binary("elementwise_mul", z, n.binary("elementwise_sub", h, candidate))
        return [n.binary("elementwise_add", candidate, kept)]  # (1 - z) * candidate + z * h

    _recurrent_loop(n, cell, bias[:, : 3 * hidden], 1)


def _lstm_peepholes(n: Node) -> None:
    """LSTM with peepholes (input P: gates i and f see the last cell state, gate o the new one, which rnn's cell
    does not): a loop of its cell's ops (:func:`_recurrent_loop`)."""
    hidden, r, peepholes = int(n.attr("hidden_size")), n.value(2, "R"), n.value(7, "peepholes")
    bias = n.value(3, "B") if n.has(3) else np.zeros((r.shape[0], 8 * hidden), r.dtype)

    def cell(d: int, xw: str, states: list[str]) -> list[str]:
        h, c = states
        gates = n.binary("elementwise_add", xw, _matmul_t(n, h, r[d]))  # blocks i, o, f, c; P's i, o, f

        def gate(k: int, state: str) -> str:
            peeped = n.binary("elementwise_mul", state, n.constant(peepholes[d, k * hidden : (k + 1) * hidden]))
            return n.unary(
                "sigmoid", n.binary("elementwise_add", _columns(n, gates, k * hidden, (k + 1) * hidden), peeped)
            )

        candidate = n.unary("tanh", _columns(n, gates, 3 * hidden, 4 * hidden))
        kept = n.binary("elementwise_mul", gate(2, c), c)
        new_c = n.binary("elementwise_add", kept, n.binary("elementwise_mul", gate(0, c), candidate))
        return [n.binary("elementwise_mul", gate(1, new_c), n.unary("tanh", new_c)), new_c]

    _recurrent_loop(n, cell, bias[:, : 4 * hidden] + bias[:, 4 * hidden :], 2)


def _recurrent_loop(n: Node, cell: _Cell, input_bias: np.ndarray, count: int) -> None:
    """A recurrent op whose cell Paddle's rnn cannot compute: per direction a while loop over time of ``cell``'s
    ops (the input's projection, x W^T + ``input_bias``, made for every step before it) carrying ``count`` states
    (ONNX's initial_h, initial_c), a step past a sequence's length keeping them and giving zeros."""
    hidden, batchwise = int(n.attr("hidden_size")), bool(n.attr("layout", 0))
    w = n.value(1, "W")
    dirs, dtype = w.shape[0], w.dtype
    x = _transposed(n, n.x(0), [1, 0, 2]) if batchwise else n.x(0)
    shape = n.shape(0)
    if shape is None or shape[1 - batchwise] == -1:
        raise Refused("a batch size known only at run time (the initial states are made at import)")
    batch = shape[1 - batchwise]
    full, length = n.tmp("shape"), n.tmp("length")
    n.emit("shape", {"Input": x}, {"Out": full})
    n.emit("slice", {"Input": full}, {"Out": length}, {"axes": [0], "starts": [0], "ends": [1]})
    length = n.cast(length, "int64")
    lengths = n.cast(n.x(4), "int64") if n.has(4) else None
    backward = [n.attr("direction", "forward") == "reverse"] if dirs == 1 else [False, True]
    outs: list[str] = []
    finals: list[list[str]] = [[] for _ in range(count)]
    for d in range(dirs):
        projected = n.tmp("projected")  # x W^T + input_bias: [T, B, G H]
        n.emit("matmul_v2", {"X": x, "Y": n.constant(w[d].T.copy())}, {"Out": projected})
        projected = n.binary("elementwise_add", projected, n.constant(input_bias[d]))
        held = [n.unary("assign", _initial_state(n, 5 + k, d, batch, hidden, dtype, batchwise)) for k in range(count)]
        step = n.unary("assign", n.constant(np.zeros(1, "int64")))
        cond = n.binary("less_than", step, length)
        array = n.graph.names.fresh(f"{n.y_base()}.steps")  # of [B, H] tensors
        n.graph.block.create_var(array, kind=VarKind.LOD_TENSOR_ARRAY, dtype=dtype.name, shape=[batch, hidden])
        block = n.sub_block()
        with n.building(block):
            t = n.binary("elementwise_sub", n.unary("scale", length, {"bias": -1.0}), step) if backward[d] else step
            picked, xw = n.tmp("picked"), n.tmp("xw")
            n.emit("gather", {"X": projected, "Index": t}, {"Out": picked}, {"axis": 0})
            n.emit("squeeze2", {"X": picked}, {"Out": xw, "XShape": n.tmp("xshape")}, {"axes": [0]})
            new = cell(d, xw, held)
            y = new[0]
            if lengths is not None:  # valid: [B, 1], 1 where t < the sequence's length
                valid = n.unary("unsqueeze2", n.cast(n.binary("less_than", t, lengths), dtype.name), {"axes": [1]})
                invalid = n.unary("scale", valid, {"scale": -1.0, "bias": 1.0})
                y = n.binary("elementwise_mul", new[0], valid)
                new = [
                    n.binary(
                        "elementwise_add",
                        n.binary("elementwise_mul", v, valid),
                        n.binary("elementwise_mul", h, invalid),
                    )
                    for v, h in zip(new, held)
                ]
            n.emit("write_to_array", {"X": y, "I": t}, {"Out": array})
            for v, h in zip(new, held):
                n.emit("assign", {"X": v}, {"Out": h})
            n.emit("increment", {"X": step}, {"Out": step}, {"step": 1.0})
            n.binary("less_than", step, length, out=cond)
        n.control("while", block, {"Condition": cond}, {"is_test": True})
        stacked = n.tmp("stacked")
        _stacked(n, array, stacked)
        outs.append(stacked)
        for k, h in enumerate(held):
            finals[k].append(h)
    if n.wants(0):  # [T, D, B, H] (layout 1: [B, T, D, H])
        joined = n.tmp("joined") if batchwise else n.y(0)
        n.emit("stack", {"X": outs}, {"Y": joined}, {"axis": 1})
        if batchwise:
            _transposed(n, joined, [2, 0, 1, 3], n.y(0))
    for k, states in enumerate(finals, 1):
        if n.wants(k):
            n.emit("stack", {"X": states}, {"Y": n.y(k)}, {"axis": 1 if batchwise else 0})


def _initial_state(n: Node, slot: int, d: int, batch: int, hidden: int, dtype: np.dtype, batchwise: bool) -> str:
    """Direction ``d``'s initial state from input ``slot`` (initial_h, initial_c), zeros without it."""
    if not n.has(slot):
        return n.constant(np.zeros((batch, hidden), dtype))
    picked = n.tmp("state0")
    axis = [int(batchwise)]  # initial_h and initial_c are [D, B, H] (layout 1: [B, D, H])
    attrs = {"axes": axis, "starts": [d], "ends": [d + 1], "decrease_axis": axis}
    n.emit("slice", {"Input": n.x(slot)}, {"Out": picked}, attrs)
    return picked


def _matmul_t(n: Node, x: str, weight: np.ndarray) -> str:
    """x @ weight^T (weight a constant)."""
    out = n.tmp("matmul")
    n.emit("matmul_v2", {"X": x, "Y": n.constant(weight.T.copy())}, {"Out": out})
    return out


def _columns(n: Node, x: str, start: int, end: int) -> str:
    out = n.tmp("columns")
    n.emit("slice", {"Input": x}, {"Out": out}, {"axes": [1], "starts": [start], "ends": [end]})
    return out


def _transposed(n: Node, x: str, perm: list[int], out: str | None = None) -> str:
    out = out or n.tmp("transposed")
    n.emit("transpose2", {"X": x}, {"Out": out, "XShape": n.tmp("xshape")}, {"axis": perm})
    return out


# -- control flow: subgraphs as sub-blocks ----------------------------------------------------------


def _outer(n: Node, hint: str, like: Variable | None = None, kind: VarKind = VarKind.LOD_TENSOR) -> str:
    """A new variable of the block the node is in (``like``'s dtype and shape)."""
    name = n.graph.names.fresh(f"{n.y_base()}.{hint}")
    fields: dict[str, Any] = {"kind": kind}
    if like is not None:
        fields.update(dtype=like.dtype, shape=like.shape)
    n.graph.block.create_var(name, **fields)
    return name


def _if(n: Node) -> None:
    """Each branch a conditional_block (the else branch's on the negated condition) assigning its outputs to
    variables outside it; select_input picks the results of the branch that ran. A condition known at import
    imports the branch it takes alone, in the node's block."""
    known = n.const(0)
    if known is not None:
        attr = "then_branch" if bool(known.reshape(-1)[0]) else "else_branch"
        names = [o.name for o in n.attrs[attr].output]
        _, outputs = n.subgraph(attr, [], n.graph.block)
        for k, (name, out) in enumerate(zip(names, outputs)):
            if name in n.graph.consts:
                n.graph.consts[n.outputs[k]] = n.graph.consts[name]
            elif n.wants(k):
                n.emit("assign", {"X": out}, {"Out": n.y(k)})
        return
    cond = n.x(0) if n.dtype(0) == "bool" else n.cast(n.x(0), "bool")
    results = []
    for attr, pred in (("else_branch", n.unary("logical_not", cond)), ("then_branch", cond)):
        block, outputs = n.subgraph(attr, [])
        made = [_outer(n, attr, block.find_var_recursive(like)) for like in outputs]
        with n.building(block):
            for out, name in zip(outputs, made):
                n.emit("assign", {"X": out}, {"Out": name})
        n.control("conditional_block", block, {"Cond": pred}, {"is_scalar_condition": True})
        results.append(made)
    mask = n.cast(cond, "int32")
    for k, (no, yes) in enumerate(zip(*results)):
        if n.wants(k):
            n.emit("select_input", {"X": [no, yes], "Mask": mask}, {"Out": n.y(k)})


def _carry(n: Node, outputs: list[str], states: list[str]) -> None:
    """``states = outputs`` at the end of a loop's iteration (through copies where an output is a state)."""
    sources = [n.unary("assign", o) if o in states else o for o in outputs]
    for source, state in zip(sources, states):
        n.emit("assign", {"X": source}, {"Out": state})


def _stacked(n: Node, array: str, out: str, axis: int = 0, reverse: bool = False, rank: int = 1) -> None:
    """The tensors of tensor array ``array`` stacked on a new dim ``axis`` of the ``rank`` dims of the result (in
    reverse order with ``reverse``)."""
    stacked = n.tmp("stacked") if reverse or axis else out
    outs = {"Out": stacked, "OutIndex": n.tmp("index")}
    n.emit("tensor_array_to_tensor", {"X": array}, outs, {"axis": 0, "use_stack": True})
    if reverse:
        flipped = n.tmp("flipped") if axis else out
        n.emit("flip", {"X": stacked}, {"Out": flipped}, {"axis": [0]})
        stacked = flipped
    if axis:
        perm = [*range(1, axis + 1), 0, *range(axis + 1, rank)]
        n.emit("transpose2", {"X": stacked}, {"Out": out, "XShape": n.tmp("xshape")}, {"axis": perm})


def _finish_loop(n: Node, block: Any, outputs: list[str], states: list[str], step: str) -> list[str]:
    """End the loop's block: its scan outputs written to tensor arrays at ``step`` (returned), ``states`` given
    the block's ``outputs`` (the first ``len(states)``), ``step`` incremented."""
    scans = outputs[len(states) :]
    arrays = [_outer(n, "scan", block.find_var_recursive(v), VarKind.LOD_TENSOR_ARRAY) for v in scans]
    with n.building(block):
        for value, array in zip(scans, arrays):
            n.emit("write_to_array", {"X": value, "I": step}, {"Out": array})
        _carry(n, outputs[: len(states)], states)
        n.emit("increment", {"X": step}, {"Out": step}, {"step": 1.0})
    return arrays


def _loop(n: Node) -> None:
    """A while loop: the iteration count, the condition and the loop-carried values are variables its block
    updates at the end of each iteration; the scan outputs are tensor arrays, stacked after it."""
    step = n.unary("assign", n.constant(np.zeros((), "int64")))
    limit = n.x(0) if n.has(0) else None
    cond = _outer(n, "cond")
    go = n.unary("assign", n.x(1)) if n.has(1) else n.constant(np.ones((), bool))
    if limit is not None:
        go = n.binary("logical_and", go, n.binary("less_than", step, limit))
    n.emit("assign", {"X": go}, {"Out": cond})
    states = [n.unary("assign", n.x(i)) for i in range(2, len(n.inputs))]
    block, outputs = n.subgraph("body", [step, cond, *states])
    if len(outputs) < 1 + len(states):
        raise Refused(f"its body gives {len(outputs)} outputs for {len(states)} loop-carried values and the condition")
    arrays = _finish_loop(n, block, outputs, [cond, *states], step)
    if limit is not None:
        with n.building(block):
            n.binary("logical_and", cond, n.binary("less_than", step, limit), out=cond)
    n.control("while", block, {"Condition": cond}, {"is_test": True})
    for k, state in enumerate(states):
        if n.wants(k):
            n.emit("assign", {"X": state}, {"Out": n.y(k)})
    for k, array in enumerate(arrays, len(states)):
        if n.wants(k):
            _stacked(n, array, n.y(k))


def _scan(n: Node) -> None:
    """A while loop over the scan axis (:func:`_scan_loop`). Opset 8's batched form: one loop per batch entry
    (a batch size known at import), their results stacked."""
    scanned = int(n.attr("num_scan_inputs"))
    first = len(n.inputs) - scanned
    if n.opset >= 9:
        in_axes = [_axis(a, n.rank(first + k)) for k, a in enumerate(n.attr("scan_input_axes", [0] * scanned))]
        in_reverse = list(n.attr("scan_input_directions", [0] * scanned))
        xs = [n.x(i) for i in range(first, len(n.inputs))]
        finals, outs = _scan_loop(n, [n.x(i) for i in range(first)], xs, in_axes, in_reverse)
        for k, value in enumerate([*finals, *outs]):
            if n.wants(k):
                n.emit("assign", {"X": value}, {"Out": n.y(k)})
        return
    if n.has(0):
        raise Refused("sequence_lens (opset 8)")
    shape = n.shape(first)
    if shape is None or shape[0] == -1:
        raise Refused("a batch size known only at run time (opset 8's batched Scan)")
    reverse = list(n.attr("directions", [0] * scanned))
    per_batch = []
    for b in range(shape[0]):
        entry = [_entry(n, n.x(i), b) for i in range(1, len(n.inputs))]
        finals, outs = _scan_loop(n, entry[: first - 1], entry[first - 1 :], [0] * scanned, reverse)
        per_batch.append([*finals, *outs])
    for k, values in enumerate(zip(*per_batch)):
        if n.wants(k):
            n.emit("stack", {"X": list(values)}, {"Y": n.y(k)}, {"axis": 0})


def _entry(n: Node, x: str, b: int) -> str:
    """Entry ``b`` of ``x``'s first dim."""
    out = n.tmp("entry")
    n.emit("slice", {"Input": x}, {"Out": out}, {"axes": [0], "starts": [b], "ends": [b + 1], "decrease_axis": [0]})
    return out


def _scan_loop(
    n: Node, initial: list[str], xs: list[str], in_axes: list[int], in_reverse: list[int]
) -> tuple[list[str], list[str]]:
    """A while loop over the scan axis of ``xs``: each iteration gathers one slice of each, the states (from
    ``initial``) are variables its block updates, the scan outputs tensor arrays stacked (moved, reversed by the
    node's scan_output_axes and scan_output_directions) after it. The final states and the scan outputs."""
    states = [n.unary("assign", x) for x in initial]
    shape, length = n.tmp("shape"), n.tmp("length")
    n.emit("shape", {"Input": xs[0]}, {"Out": shape})
    n.emit("slice", {"Input": shape}, {"Out": length}, {"axes": [0], "starts": [in_axes[0]], "ends": [in_axes[0] + 1]})
    length = n.cast(length, "int64")
    step = n.unary("assign", n.constant(np.zeros(1, "int64")))
    cond = _outer(n, "cond")
    n.binary("less_than", step, length, out=cond)
    block = n.sub_block()
    slices = []
    with n.building(block):
        back = n.binary("elementwise_sub", n.unary("scale", length, {"bias": -1.0}), step)
        for k, (axis, reverse) in enumerate(zip(in_axes, in_reverse)):
            one = n.tmp("slice")
            n.emit("gather", {"X": xs[k], "Index": back if reverse else step}, {"Out": one}, {"axis": axis})
            slices.append(n.tmp("item"))
            n.emit("squeeze2", {"X": one}, {"Out": slices[-1], "XShape": n.tmp("xshape")}, {"axes": [axis]})
    _, outputs = n.subgraph("body", [*states, *slices], block)
    arrays = _finish_loop(n, block, outputs, states, step)
    with n.building(block):
        n.binary("less_than", step, length, out=cond)
    n.control("while", block, {"Condition": cond}, {"is_test": True})
    out_axes = list(n.attr("scan_output_axes", [0] * len(arrays)))
    out_reverse = list(n.attr("scan_output_directions", [0] * len(arrays)))
    outs = []
    for k, array in enumerate(arrays):
        rank = len(block.find_var_recursive(outputs[len(states) + k]).shape or ()) + 1
        outs.append(n.tmp("scanned"))
        _stacked(n, array, outs[-1], _axis(out_axes[k], rank), bool(out_reverse[k]), rank)
    return states, outs


def _linear_attention(n: Node) -> None:
    if n.attr("q_num_heads") is None or n.attr("kv_num_heads") is None:
        raise Refused("q_num_heads or kv_num_heads missing (both are required)")
    attrs = {
        "q_num_heads": int(n.attr("q_num_heads")),
        "kv_num_heads": int(n.attr("kv_num_heads")),
        "scale": float(n.attr("scale", 0.0)),
        "update_rule": n.attr("update_rule", "gated_delta"),
    }  # chunk_size: a hint for chunked kernels, no effect on the result
    inputs = _given(n, ("Query", "Key", "Value", "PastState", "Decay", "Beta"))
    n.emit("linear_attention", inputs, _wanted(n, ("Output", "PresentState")), attrs)


def _rotary_embedding(n: Node) -> None:
    attrs = {
        "interleaved": bool(n.attr("interleaved", 0)),
        "rotary_embedding_dim": int(n.attr("rotary_embedding_dim", 0)),
        "num_heads": int(n.attr("num_heads", 0)),
    }
    n.emit("rotary_embedding", _given(n, ("X", "CosCache", "SinCache", "PositionIds")), {"Out": n.y()}, attrs)


_WINDOWS = {  # cosine-sum coefficients a_k of w[n] = sum_k (-1)^k a_k cos(2 pi k n / N)
    "HannWindow": (0.5, 0.5),
    "HammingWindow": (25 / 46, 21 / 46),
    "BlackmanWindow": (0.42, 0.5, 0.08),
}


def _window(n: Node) -> None:
    """A window of the constant size (N = size when periodic, else size - 1): a constant made at import."""
    size = int(n.value(0, "size").reshape(-1)[0])
    span = size if n.attr("periodic", 1) else size - 1
    angle = 2 * np.pi * np.arange(size, dtype="float64") / span
    value = sum((-1) ** k * a * np.cos(k * angle) for k, a in enumerate(_WINDOWS[n.op_type]))
    dtype = dtype_name(int(n.attr("output_datatype", 1)), "its output_datatype")
    n.graph.consts[n.outputs[0]] = np.asarray(value, "float64").astype(dtype)


def _mel_weight_matrix(n: Node) -> None:
    """ONNX's triangular mel filters [dft_length // 2 + 1, num_mel_bins] of the constant inputs, a constant made
    at import (ONNX's definition, in the inputs' types as its reference: num_mel_bins + 2 edges from
    lower_edge_hertz, evenly spaced in mel by the span over num_mel_bins + 2, each at spectrogram bin
    floor((dft_length + 1) * hertz / sample_rate); filter i rises from edge i to 1 at edge i + 1 and falls to 0 at
    edge i + 2)."""
    names = ("num_mel_bins", "dft_length", "sample_rate", "lower_edge_hertz", "upper_edge_hertz")
    bins, dft, rate, low, high = (n.value(i, what).reshape(-1)[0] for i, what in enumerate(names))
    if bins < 1 or dft < 1 or rate < 1:
        raise Refused(f"num_mel_bins {bins}, dft_length {dft} and sample_rate {rate} must be >= 1")
    spectrum = int(dft) // 2 + 1
    low_mel, high_mel = (2595 * np.log1p(hertz / 700) / np.log(10) for hertz in (low, high))
    mels = np.arange(int(bins) + 2) * ((high_mel - low_mel) / (int(bins) + 2)) + low_mel
    edges = (((dft + 1) * (700 * np.expm1(mels / 2595 * np.log(10)))) // rate).astype(np.int64)
    if edges[0] < 0 or max(edges[-2], edges[-1] - 1) >= spectrum:
        raise Refused(
            f"num_mel_bins {bins}, sample_rate {rate}, edges {low:g} to {high:g} Hz put the filters' bins "
            f"{edges.tolist()} outside the {spectrum} bins of a {dft}-point DFT"
        )
    left, centre, right = edges[:-2], edges[1:-1], edges[2:]
    j = np.arange(spectrum)[:, None]
    rising = np.where(centre > left, (j - left) / np.maximum(centre - left, 1), 1.0) * ((j >= left) & (j <= centre))
    falling = (right - j) / np.maximum(right - centre, 1)
    value = np.where((j >= centre) & (j < right), falling, rising)
    dtype = dtype_name(int(n.attr("output_datatype", 1)), "its output_datatype")
    n.graph.consts[n.outputs[0]] = value.astype(dtype)


def _reverse_sequence(n: Node) -> None:
    """take_along_axis of X along time at index t + (t < L) * (L - 1 - 2t): the first L steps of each batch
    entry reversed (L its sequence length), the others kept. The time dim must be known at import."""
    rank, shape = n.rank(0), n.shape(0) or ()
    time, batch = _axis(int(n.attr("time_axis", 0)), rank), _axis(int(n.attr("batch_axis", 1)), rank)
    if shape[time] == -1:
        raise Refused(f"a time dim (axis {time}) known only at run time")
    along = [1] * rank
    along[time] = shape[time]
    steps = np.arange(shape[time], dtype="int64").reshape(along)
    per_batch = [1] * rank
    per_batch[batch] = -1
    lengths = n.tmp("lengths")
    n.emit(
        "reshape2",
        {"X": n.cast(n.x(1), "int64")},
        {"Out": lengths, "XShape": n.tmp("xshape")},
        {"shape": per_batch},
    )
    t = n.constant(steps)
    inside = n.cast(n.binary("less_than", t, lengths), "int64")
    flip = n.binary("elementwise_mul", inside, n.binary("elementwise_sub", lengths, n.constant(2 * steps + 1)))
    index = n.binary("elementwise_add", t, flip)
    n.emit("take_along_axis", {"Input": n.x(0), "Index": index}, {"Result": n.y()}, {"Axis": time})


def _tensor_scatter(n: Node) -> None:
    """put_along_axis of update into past_cache along ``axis`` at write_indices[b] + s (modulo the cache's length
    with mode circular) for step s of batch entry b. The update's sequence dim must be known at import."""
    rank, shape = n.rank(0), n.shape(1) or ()
    axis = _axis(int(n.attr("axis", -2)), rank)
    if axis == 0 or shape[axis] == -1:
        raise Refused(f"axis {axis}: the batch axis, or a sequence dim known only at run time")
    along = [1] * rank
    along[axis] = shape[axis]
    index = n.constant(np.arange(shape[axis], dtype="int64").reshape(along))
    if n.has(2):
        per_batch = [1] * rank
        per_batch[0] = -1
        starts = n.tmp("starts")
        shaped = {"Out": starts, "XShape": n.tmp("xshape")}
        n.emit("reshape2", {"X": n.cast(n.x(2), "int64")}, shaped, {"shape": per_batch})
        index = n.binary("elementwise_add", index, starts)
    mode = n.attr("mode", "linear")
    if mode == "circular":
        length = (n.shape(0) or ())[axis]
        if length == -1:
            raise Refused("mode circular with a cache length known only at run time")
        index = n.binary("elementwise_mod", index, n.constant(np.asarray(length, "int64")))
    elif mode != "linear":
        raise Refused(f"mode {mode!r}")
    inputs = {"Input": n.x(0), "Index": index, "Value": n.x(1)}
    n.emit("put_along_axis", inputs, {"Result": n.y()}, {"Axis": axis, "Reduce": "assign", "broadcast": True})


def _max_unpool(n: Node) -> None:
    """X's values put at I (flat indices into the tensor of the shape the pooling inverts: (in - 1) * stride +
    kernel - pads per spatial dim) in zeros, as put_along_axis on the flat tensors; then padded at the end of
    each dim to output_shape when given (as ONNX's reference does). Shapes known at import."""
    shape = n.shape(0)
    if shape is None or -1 in shape:
        raise Refused(f"input 0 of shape {shape} (a shape known at import is needed)")
    kernel = [int(k) for k in n.attr("kernel_shape")]
    dims = len(kernel)
    strides = [int(s) for s in n.attr("strides", [1] * dims)]
    pads = [int(p) for p in n.attr("pads", [0] * 2 * dims)]
    spatial = [(shape[2 + d] - 1) * strides[d] - pads[d] - pads[dims + d] + kernel[d] for d in range(dims)]
    inverted = [*shape[:2], *spatial]
    wanted = _ints(n.value(2, "output_shape")) if n.has(2) else inverted
    if len(wanted) != len(inverted) or any(w < d for w, d in zip(wanted, inverted)):
        raise Refused(f"output_shape {wanted} smaller than the unpooled shape {inverted}")
    flat_x, flat_i, zeros, spread = n.tmp("x"), n.tmp("index"), n.tmp("zeros"), n.tmp("spread")
    n.emit("reshape2", {"X": n.x(0)}, {"Out": flat_x, "XShape": n.tmp("xshape")}, {"shape": [1, -1]})
    n.emit("reshape2", {"X": n.cast(n.x(1), "int64")}, {"Out": flat_i, "XShape": n.tmp("xshape")}, {"shape": [1, -1]})
    blank = np.zeros(1, n.dtype(0))[0]
    n.emit("fill_constant", {}, {"Out": zeros}, _fill_attrs([1, int(np.prod(inverted))], n.dtype(0), blank))
    put = {"Axis": 1, "Reduce": "assign", "broadcast": False}
    n.emit("put_along_axis", {"Input": zeros, "Index": flat_i, "Value": flat_x}, {"Result": spread}, put)
    same = wanted == inverted
    unpooled = n.y() if same else n.tmp("unpooled")
    n.emit("reshape2", {"X": spread}, {"Out": unpooled, "XShape": n.tmp("xshape")}, {"shape": inverted})
    if not same:
        pairs = [v for w, d in zip(wanted, inverted) for v in (0, w - d)]
        n.emit("pad", {"X": unpooled}, {"Out": n.y()}, {"paddings": pairs, "pad_value": 0.0})


def _roi_align(n: Node) -> None:
    """Paddle's roi_align over X's image of each region (gathered by batch_indices, one region per image):
    coordinate_transformation_mode half_pixel is its aligned, output_half_pixel not; mode avg or max (blockir's
    extension of roi_align)."""
    transform = n.attr("coordinate_transformation_mode", "half_pixel" if n.opset >= 16 else "output_half_pixel")
    if transform not in ("half_pixel", "output_half_pixel"):
        raise Refused(f"coordinate_transformation_mode {transform!r}")
    images, ones = n.tmp("images"), n.tmp("rois_num")
    n.emit("gather", {"X": n.x(0), "Index": n.cast(n.x(2), "int64")}, {"Out": images}, {"axis": 0})
    n.emit("fill_any_like", {"X": n.x(2)}, {"Out": ones}, {"value": 1.0, "dtype": DTYPE_TO_PROTO["int32"]})
    attrs = {
        "spatial_scale": float(n.attr("spatial_scale", 1.0)),
        "pooled_height": int(n.attr("output_height", 1)),
        "pooled_width": int(n.attr("output_width", 1)),
        "sampling_ratio": int(n.attr("sampling_ratio", 0)),
        "aligned": transform == "half_pixel",
    }
    if n.attr("mode", "avg") != "avg":  # Paddle's op has no mode: set only where it is blockir's extension
        attrs["mode"] = n.attr("mode")
    n.emit("roi_align", {"X": images, "ROIs": n.x(1), "RoisNum": ones}, {"Out": n.y()}, attrs)


def _mean_variance_normalization(n: Node) -> None:
    """(X - E[X]) / (sqrt(E[X^2] - E[X]^2) + 1e-9) over ``axes`` (default 0, 2, 3), as ONNX's function."""
    rank = n.rank(0)
    dims = {"dim": [_axis(a, rank) for a in n.attr("axes", [0, 2, 3])], "keep_dim": True, "reduce_all": False}
    x = n.x(0)
    mean = n.unary("reduce_mean", x, dims)
    variance = n.binary("elementwise_sub", n.unary("reduce_mean", n.unary("square", x), dims), n.unary("square", mean))
    eps = n.constant(np.asarray(1e-9, n.dtype(0)))
    std = n.binary("elementwise_add", n.unary("sqrt", variance), eps)
    n.binary("elementwise_div", n.binary("elementwise_sub", x, mean), std, out=n.y())


def _det(n: Node) -> None:
    n.emit("determinant", {"Input": n.x(0)}, {"Out": n.y()})


def _eye_like(n: Node) -> None:
    """Ones on diagonal k of a 2-D input of known shape, zeros elsewhere: a constant made at import."""
    shape = n.shape(0)
    if shape is None or len(shape) != 2 or -1 in shape:
        raise Refused(f"input 0 of shape {shape} (a 2-D shape known at import is needed)")
    dtype = dtype_name(int(n.attr("dtype")), "its dtype") if "dtype" in n.attrs else n.dtype(0)
    n.graph.consts[n.outputs[0]] = np.eye(shape[0], shape[1], int(n.attr("k", 0)), dtype=dtype)


def _scalar_input(n: Node, i: int, what: str, default: int) -> int:
    return int(n.value(i, what).reshape(-1)[0]) if n.has(i) else default


def _dft(n: Node) -> None:
    rank = n.rank(0)
    axis = _scalar_input(n, 2, "axis", -2) if n.opset >= 20 else int(n.attr("axis", 1))
    attrs = {
        "axis": _axis(axis, rank),
        "inverse": bool(n.attr("inverse", 0)),
        "onesided": bool(n.attr("onesided", 0)),
        "dft_length": _scalar_input(n, 1, "dft_length", 0),
    }
    if attrs["axis"] == rank - 1:
        raise Refused("axis the last dim (it holds the real and imaginary parts)")
    n.emit("dft", {"X": n.x(0)}, {"Out": n.y()}, attrs)


def _stft(n: Node) -> None:
    window = n.shape(2) if n.has(2) else None
    length = _scalar_input(n, 3, "frame_length", window[0] if window else -1)
    if length <= 0:
        raise Refused("neither frame_length nor a window of known length")
    attrs = {
        "frame_step": _scalar_input(n, 1, "frame_step", 0),
        "frame_length": length,
        "onesided": bool(n.attr("onesided", 1)),
    }
    n.emit("stft", _given(n, ("Signal", "", "Window")), {"Out": n.y()}, attrs)


def _group_norm(n: Node) -> None:
    """Opset 21: Scale and Bias per channel, as Paddle's group_norm; opset 18: per group, repeated over the
    group's channels."""
    groups = int(n.attr("num_groups"))
    scale, bias = n.x(1), n.x(2)
    if n.opset < 21:
        shape = n.shape(0)
        if shape is None or len(shape) < 2 or shape[1] == -1:
            raise Refused("per-group scale and bias (opset 18) of an input whose channels are unknown")
        index = n.constant(np.arange(shape[1], dtype="int64") // (shape[1] // groups))
        scale, bias = n.tmp("scale"), n.tmp("bias")
        n.emit("gather", {"X": n.x(1), "Index": index}, {"Out": scale}, {"axis": 0})
        n.emit("gather", {"X": n.x(2), "Index": index}, {"Out": bias}, {"axis": 0})
    outs = {slot: n.tmp(slot) for slot in ("Mean", "Variance")}
    attrs = {"epsilon": float(n.attr("epsilon", 1e-5)), "groups": groups}
    n.emit("group_norm", {"X": n.x(0), "Scale": scale, "Bias": bias}, {"Y": n.y(), **outs}, attrs)


def _center_crop_pad(n: Node) -> None:
    """Each named axis cut to the target size around its centre (the extra start on the left), or padded with
    zeros around it (the extra pad on the right): a slice, then a pad, of the known input shape."""
    shape = n.shape(0)
    target = _ints(n.value(1, "shape"))
    if shape is None:
        raise Refused("an input of unknown rank")
    axes = [_axis(a, len(shape)) for a in n.attr("axes", range(len(shape)))]
    starts, ends, pads = [], [], [0] * (2 * len(shape))
    for a, size in zip(axes, target):
        if shape[a] == -1:
            raise Refused(f"dim {a}, known only at run time")
        if size < shape[a]:
            starts.append((shape[a] - size) // 2)
            ends.append(starts[-1] + size)
        else:
            pads[2 * a] = (size - shape[a]) // 2
            pads[2 * a + 1] = size - shape[a] - pads[2 * a]
    cut = [a for a, size in zip(axes, target) if size < shape[a]]
    x = n.x(0)
    if cut:
        x = n.tmp("crop")
        n.emit("slice", {"Input": n.x(0)}, {"Out": x}, {"axes": cut, "starts": starts, "ends": ends})
    n.emit("pad", {"X": x}, {"Out": n.y()}, {"paddings": pads, "pad_value": 0.0})


def _affine_grid(n: Node) -> None:
    """theta [N, k, k + 1] times the homogeneous coordinates (x, y[, z], 1) in [-1, 1] of every point of the
    constant size's k spatial dims: a constant [points, k + 1] matrix by theta^T, reshaped [N, ..., k]."""
    size = _ints(n.value(1, "size"))[2:]
    if len(size) not in (2, 3):
        raise Refused(f"a size of {len(size)} spatial dims (2 or 3 here)")
    if n.attr("align_corners", 0):
        axes = [np.linspace(-1.0, 1.0, s) for s in size]
    else:
        axes = [(2 * np.arange(s) + 1) / s - 1 for s in size]
    mesh = np.meshgrid(*axes, indexing="ij")
    base = np.stack([*mesh[::-1], np.ones(size)], axis=-1).reshape(-1, len(size) + 1)
    flat = n.tmp("grid")
    n.emit(
        "matmul_v2",
        {"X": n.constant(base.astype(n.dtype(0))), "Y": n.x(0)},
        {"Out": flat},
        {"trans_x": False, "trans_y": True},
    )
    n.emit("reshape2", {"X": flat}, {"Out": n.y(), "XShape": n.tmp("xshape")}, {"shape": [0, *size, len(size)]})


def _causal_conv_with_state(n: Node) -> None:
    """A depthwise 1-D convolution over [B, C, L] whose left context is past_state (zeros when absent): the
    input and its context concatenated, conv2d over it seen 1 high, bias, optional SiLU; present_state the
    context's last k - 1 positions."""
    activation = n.attr("activation", "none")
    if activation not in ("none", "silu", "swish"):
        raise Refused(f"activation {activation!r}")
    w = n.shape(1)
    if w is None or len(w) != 3 or w[2] == -1 or n.rank(0) != 3:
        raise Refused("an input other than [B, C, L] or a weight other than [C, 1, k] of known k")
    channels, k = w[0], w[2]
    if n.has(3):
        padded = n.tmp("padded")
        n.emit("concat", {"X": [n.x(3), n.x(0)]}, {"Out": padded}, {"axis": 2})
    else:
        padded = n.unary("pad", n.x(0), {"paddings": [0, 0, 0, 0, k - 1, 0], "pad_value": 0.0})
    image, kernel = n.tmp("image"), n.tmp("kernel")
    n.emit("unsqueeze2", {"X": padded}, {"Out": image, "XShape": n.tmp("xshape")}, {"axes": [2]})
    n.emit("unsqueeze2", {"X": n.x(1)}, {"Out": kernel, "XShape": n.tmp("xshape")}, {"axes": [2]})
    conv = n.tmp("conv")
    attrs = {"strides": [1, 1], "paddings": [0, 0, 0, 0], "dilations": [1, 1], "groups": channels}
    n.emit("conv2d", {"Input": image, "Filter": kernel}, {"Output": conv}, attrs)
    out = _squeezed(n, conv, 2)
    if n.has(2):
        out = n.binary("elementwise_add", out, n.x(2), attrs={"axis": 1})
    if activation == "none":
        n.emit("assign", {"X": out}, {"Out": n.y()})
    else:
        n.emit("silu", {"X": out}, {"Out": n.y()})
    if n.wants(1):
        # the last k - 1 positions: a slice from -(k - 1), or nothing for k = 1
        end = (1 << 31) - 1
        start = -(k - 1) if k > 1 else end
        n.emit("slice", {"Input": padded}, {"Out": n.y(1)}, {"axes": [2], "starts": [start], "ends": [end]})


# -- the table -----------------------------------------------------------------------------------


def _rows() -> list[OpRule]:
    rows = []

    def add(
        onnx: str,
        since: int,
        convert: Converter,
        ops: tuple[str, ...],
        until: int = _NEWEST,
        note: str = "",
        domain: str = "",
    ) -> None:
        rows.append(OpRule(onnx, since, convert, ops, until, note, domain))

    for onnx, bir in (
        ("Relu", "relu"), ("Sigmoid", "sigmoid"), ("Tanh", "tanh"), ("Exp", "exp"), ("Log", "log"),
        ("Sqrt", "sqrt"), ("Abs", "abs"), ("Reciprocal", "reciprocal"), ("Floor", "floor"), ("Ceil", "ceil"),
("Sin", "sin"), ("Cos", "cos"), ("Tan", "tan"), ("Atan", "atan"), ("Erf", "erf"),
        ("Sign", "sign"), ("Softsign", "softsign"), ("Mish", "mish"),
        ("Asin", "asin"), ("Acos", "acos"), ("Sinh", "sinh"), ("Cosh", "cosh"), ("Asinh", "asinh"),
        ("Acosh", "acosh"), ("Atanh", "atanh"),
    ):  # fmt: skip
        add(onnx, 1, _unary(bir), (bir,))
    add("Elu", 1, _unary_attrs("elu", {"alpha": ("alpha", 1.0)}), ("elu",))
    add("Celu", 12, _unary_attrs("celu", {"alpha": ("alpha", 1.0)}), ("celu",))
    add("LeakyRelu", 1, _unary_attrs("leaky_relu", {"alpha": ("alpha", 0.01)}), ("leaky_relu",))
    add("Selu", 1, _selu, ("selu",))
    add("HardSigmoid", 1, _hard_sigmoid, ("hard_sigmoid",))
    add("HardSwish", 14, _hard_swish, ("hard_swish",))
    add("ThresholdedRelu", 10, _thresholded_relu, ("thresholded_relu",))
    add("Softplus", 1, _softplus, ("softplus",))
    add("Gelu", 20, _gelu, ("gelu",))
    add("Swish", 24, _swish, ("swish",))
    add("Shrink", 9, _shrink, ("softshrink", "hard_shrink"), note="bias 0 or equal to lambd")
    add("Round", 11, _round, ("round", "scale", "floor", "abs", "equal", "where"), note="half to even")
    add("Neg", 1, _neg, ("scale",))
    add("Identity", 1, _identity, ("assign",))
    for onnx, bir in (
        ("Add", "elementwise_add"),
        ("Sub", "elementwise_sub"),
        ("Mul", "elementwise_mul"),
        ("Div", "elementwise_div"),
    ):
        add(onnx, 1, _binary(bir), (bir,), note="before opset 7: broadcast and axis as Paddle's axis")
    add("Pow", 1, _pow, ("elementwise_pow", "cast"))
    add("Mod", 10, _mod, ("elementwise_mod",), note="fmod=1 on floats as x - trunc(x / y) * y")
    add("Max", 1, _variadic("elementwise_max"), ("elementwise_max",))
    add("Min", 1, _variadic("elementwise_min"), ("elementwise_min",))
    add("Sum", 1, _variadic("elementwise_add"), ("elementwise_add",))
    add("Mean", 1, _mean, ("elementwise_add", "scale"))
    add("PRelu", 1, _prelu, ("relu", "elementwise_sub", "elementwise_mul", "elementwise_add"))
    add("Clip", 1, _clip, ("clip",))
    for onnx, bir in (
        ("Equal", "equal"), ("Greater", "greater_than"), ("Less", "less_than"),
        ("GreaterOrEqual", "greater_equal"), ("LessOrEqual", "less_equal"),
    ):  # fmt: skip
        add(onnx, 1, _compare(bir), (bir,))
    for onnx, bir in (("And", "logical_and"), ("Or", "logical_or"), ("Xor", "logical_xor"), ("Not", "logical_not")):
        add(onnx, 1, _logical(bir), (bir,))
    for onnx, bir in (
        ("BitwiseAnd", "bitwise_and"), ("BitwiseOr", "bitwise_or"), ("BitwiseXor", "bitwise_xor"),
        ("BitwiseNot", "bitwise_not"),
    ):  # fmt: skip
        add(onnx, 18, _logical(bir), (bir,))
    add("BitShift", 11, _bit_shift, ("bitwise_left_shift", "bitwise_right_shift"))
    add("QuantizeLinear", 10, _quantize_linear, ("elementwise_div", "round", "where", "clip", "cast"))
    add("DequantizeLinear", 10, _dequantize_linear, ("elementwise_sub", "elementwise_mul", "cast"))
    add("DynamicQuantizeLinear", 11, _dynamic_quantize_linear, ("reduce_min", "reduce_max", "round", "clip", "cast"))
    add("MatMulInteger", 10, _matmul_integer, ("cast", "elementwise_sub", "matmul_v2"), note="in float64 (exact)")
    add("QLinearMatMul", 10, _qlinear_matmul, ("matmul_v2", "elementwise_mul", "round", "clip", "cast"))
    add("Unique", 11, _unique, ("unique",))
    add("NonMaxSuppression", 10, _non_max_suppression, ("non_max_suppression",), note="not exported to Paddle")
    add("TfIdfVectorizer", 9, _tfidf_vectorizer, ("tfidf_vectorizer",), note="integers; not exported to Paddle")
    add("Compress", 9, _compress, ("where_index", "reshape2", "index_select"))
    add("BitCast", 26, _bitcast, ("bitcast",), note="not exported to Paddle")
    add("Scatter", 9, _scatter_elements, ("put_along_axis",), until=10)
    for onnx in _RECURRENT:
        note = "constant weights; GRU's linear_before_reset=0 and LSTM's peepholes: while loops of the cell's ops"
        add(onnx, 7, _recurrent, ("rnn", "flip", "transpose2", "reshape2", "while"), note=note)
    add("ConvInteger", 10, _conv_integer, ("cast", "elementwise_sub", "conv2d"), note="2-D; in float64 (exact)")
    add("QLinearConv", 10, _qlinear_conv, ("conv2d", "elementwise_mul", "round", "clip", "cast"), note="2-D")
    add("If", 1, _if, ("conditional_block", "logical_not", "assign", "select_input"), note="branches as sub-blocks")
    loop_ops = ("while", "write_to_array", "increment", "tensor_array_to_tensor")
    add("Loop", 1, _loop, loop_ops, note="body as a sub-block")
    scan_ops = ("while", "gather", "write_to_array", "tensor_array_to_tensor")
    add("Scan", 8, _scan, scan_ops, note="body as a sub-block; opset 8: a batch size known at import")
    add("Where", 9, _where, ("where",))
    add("Constant", 1, _constant, (), note="a constant (folded)")
    add("ConstantOfShape", 9, _constant_of_shape, ("fill_constant",))
    add("Cast", 1, _cast, ("cast",))
    add("CastLike", 15, _cast_like, ("cast",))
    add("Shape", 1, _shape, ("shape", "cast", "slice"))
    add("Size", 1, _size, ("size",))
    add("Reshape", 1, _reshape, ("reshape2",))
    add("Flatten", 1, _flatten, ("flatten_contiguous_range", "reshape2"))
    add("Transpose", 1, _transpose, ("transpose2",))
    add("Concat", 1, _concat, ("concat",))
    add("Split", 1, _split, ("split",))
    add("Squeeze", 1, _squeeze, ("squeeze2",))
    add("Unsqueeze", 1, _unsqueeze, ("unsqueeze2",))
    add("Slice", 1, _slice, ("slice", "index_select"), note="steps other than 1 on statically known dims")
    add("Gather", 1, _gather, ("gather", "reshape2"))
    add("GatherElements", 11, _gather_elements, ("take_along_axis",))
    add("ScatterElements", 11, _scatter_elements, ("put_along_axis",))
    add("GatherND", 11, _gather_nd, ("gather_nd", "concat"))
    add("Expand", 8, _expand, ("expand_v2", "fill_constant", "elementwise_mul"))
    add("Tile", 6, _tile, ("tile",))
    add("Range", 11, _range, ("range",))
    add("Pad", 1, _pad, ("pad", "pad3d"))
    add("MatMul", 1, _matmul, ("matmul_v2",))
    add("Einsum", 12, _einsum, ("einsum",))
    add("Gemm", 1, _gemm, ("matmul_v2", "scale", "elementwise_add"))
    add("Conv", 1, _conv, ("conv2d", "conv3d", "elementwise_add"), note="1-D to 3-D")
    add(
        "ConvTranspose",
        1,
        _conv_transpose,
        ("conv2d_transpose", "conv3d_transpose", "elementwise_add"),
        note="1-D to 3-D",
    )
    add(
        "Col2Im",
        18,
        _col2im,
        ("fold", "reshape2", "conv3d_transpose"),
        note="2-D and 3-D; constant image_shape and block_shape",
    )
    add("GridSample", 16, _grid_sample, ("grid_sampler", "cast"), note="4-D and 5-D")
    add("DeformConv", 19, _deform_conv, ("deformable_conv", "elementwise_add"), note="2-D; symmetric pads")
    add(
        "MaxPool",
        1,
        _pool("max"),
        ("pool2d", "pool3d", "max_pool2d_with_index", *_GATHERED_POOL_OPS, "reduce_max"),
        note="1-D to 3-D; dilations gathered; Indices of a 2-D pool of symmetric pads, no dilations",
    )
    add("LpPool", 1, _lp_pool, ("abs", "pow", *_GATHERED_POOL_OPS, "reduce_sum"), note="gathered")
    add(
        "AveragePool",
        1,
        _pool("avg"),
        ("pool2d", "pool3d", *_GATHERED_POOL_OPS, "reduce_sum", "elementwise_div"),
        note="1-D to 3-D; dilations gathered",
    )
    add("GlobalMaxPool", 1, _global_pool("max"), ("pool2d", "pool3d"))
    add("GlobalAveragePool", 1, _global_pool("avg"), ("pool2d", "pool3d"))
    add("BatchNormalization", 1, _batch_norm, ("batch_norm",), note="inference; training_mode from opset 14")
    add("InstanceNormalization", 1, _instance_norm, ("instance_norm",))
    add("LayerNormalization", 17, _layer_norm, ("layer_norm", "elementwise_mul", "elementwise_add"))
    add("NegativeLogLikelihoodLoss", 12, _nll_loss, ("take_along_axis", "gather", "reduce_sum", "elementwise_div"))
    add("SoftmaxCrossEntropyLoss", 12, _softmax_cross_entropy, ("log_softmax", "take_along_axis", "reduce_sum"))
    add("Hardmax", 1, _hardmax, ("arg_max", "one_hot_v2", "transpose2"))
    add("OneHot", 9, _one_hot, ("less_than", "unsqueeze2", "equal", "elementwise_mul", "elementwise_add", "transpose2"))
    add("IsNaN", 9, _is_nan, ("not_equal",))
    add("IsInf", 10, _is_inf, ("equal", "logical_or"))
    add("CumProd", 26, _cumprod, ("cumprod",))
    add("LpNormalization", 1, _lp_normalization, ("p_norm", "elementwise_div"))
    add("ScatterND", 11, _scatter_nd, ("scatter_nd_add", "fill_any_like"), note="reduction none or add")
    add("Trilu", 14, _trilu, ("tril_triu",))
    add("NonZero", 9, _non_zero, ("where_index", "transpose2"))
    add("RMSNormalization", 23, _rms_norm, ("square", "reduce_mean", "rsqrt", "elementwise_mul"))
    add("LRN", 1, _lrn, ("square", "pool2d", "scale", "pow", "elementwise_div"))
    add("Dropout", 1, _dropout, ("assign", "fill_any_like", "dropout", "cast"), note="training: seeded by seed")
    add("Softmax", 1, _softmax("softmax"), ("softmax",))
    add("LogSoftmax", 1, _softmax("log_softmax"), ("log_softmax",))
    for onnx, bir, since, pre, post in (
        ("ReduceSum", "reduce_sum", 13, "", ""), ("ReduceMean", "reduce_mean", 18, "", ""),
        ("ReduceMax", "reduce_max", 18, "", ""), ("ReduceMin", "reduce_min", 18, "", ""),
        ("ReduceProd", "reduce_prod", 18, "", ""), ("ReduceL1", "reduce_sum", 18, "abs", ""),
        ("ReduceL2", "reduce_sum", 18, "square", "sqrt"), ("ReduceSumSquare", "reduce_sum", 18, "square", ""),
        ("ReduceLogSum", "reduce_sum", 18, "", "log"), ("ReduceLogSumExp", "logsumexp", 18, "", ""),
    ):  # fmt: skip
        add(onnx, 1, _reduce(bir, since, pre, post), tuple(o for o in (pre, bir, post) if o))
    add("ArgMax", 1, _arg("arg_max"), ("arg_max",))
    add("ArgMin", 1, _arg("arg_min"), ("arg_min",))
    add("TopK", 1, _topk, ("top_k_v2",))
    add("CumSum", 11, _cumsum, ("cumsum",))
    add("DepthToSpace", 1, _depth_to_space, ("pixel_shuffle", "reshape2", "transpose2"))
    add("SpaceToDepth", 1, _space_to_depth, ("reshape2", "transpose2"))
    add("Resize", 10, _resize, ("index_select", "matmul_v2", "transpose2"), note="inputs of known shape")
    add("Upsample", 7, _resize, ("index_select", "matmul_v2", "transpose2"), until=9)
    add("Attention", 23, _attention, ("attention",))
    add("LinearAttention", 27, _linear_attention, ("linear_attention",))
    flex_ops = ("elementwise_mul", "index_select", "matmul_v2", "cast", "softmax")
    note = "score_mod and prob_mod imported inline; head counts known at import"
    add("FlexAttention", 1, _flex_attention, flex_ops, note=note, domain="ai.onnx.preview")
    add("RotaryEmbedding", 23, _rotary_embedding, ("rotary_embedding",))
    add("GroupNormalization", 18, _group_norm, ("group_norm", "gather"))
    add("CenterCropPad", 18, _center_crop_pad, ("slice", "pad"), note="inputs of known shape")
    add("AffineGrid", 20, _affine_grid, ("matmul_v2", "reshape2"), note="a constant size")
    add("DFT", 17, _dft, ("dft",))
    add("STFT", 17, _stft, ("stft",))
    for window in _WINDOWS:
        add(window, 17, _window, (), note="a constant of the constant size")
    add("EyeLike", 9, _eye_like, (), note="a constant of the input's known shape")
    add("MelWeightMatrix", 17, _mel_weight_matrix, (), note="a constant of the constant inputs")
    revseq_ops = ("reshape2", "less_than", "elementwise_mul", "take_along_axis")
    add("ReverseSequence", 10, _reverse_sequence, revseq_ops, note="a time dim known at import")
    mvn_ops = ("reduce_mean", "square", "sqrt", "elementwise_sub", "elementwise_div")
    add("MeanVarianceNormalization", 9, _mean_variance_normalization, mvn_ops)
    scatter_ops = ("reshape2", "elementwise_add", "elementwise_mod", "put_along_axis")
    add("TensorScatter", 24, _tensor_scatter, scatter_ops, note="a sequence dim known at import")
    unpool_ops = ("reshape2", "fill_constant", "put_along_axis", "pad")
    add("MaxUnpool", 9, _max_unpool, unpool_ops, note="shapes known at import")
    add("RoiAlign", 10, _roi_align, ("gather", "fill_any_like", "roi_align"))
    add("SwiGLU", 28, _swiglu, ("swish", "elementwise_mul"))
    add("Det", 11, _det, ("determinant",))
    add(
        "CausalConvWithState",
        27,
        _causal_conv_with_state,
        ("concat", "pad", "conv2d", "elementwise_add", "silu", "slice"),
    )
    return rows


RULES: tuple[OpRule, ...] = tuple(_rows())


@functools.cache
def _by_op() -> dict[str, list[OpRule]]:
    table: dict[str, list[OpRule]] = {}
    for row in RULES:
        table.setdefault(row.onnx, []).append(row)
    return table


def rule_for(op_type: str, opset: int, domain: str = "") -> OpRule | str:
    """The row for ``op_type`` of ``domain`` ("" the default one) at ``opset`` (the model's version of that domain,
    0 when it imports none), or why there is none."""
    rows = [row for row in _by_op().get(op_type, ()) if row.domain == domain]
    if not rows and domain:
        others = ", ".join(sorted(f"{row.onnx} of {row.domain}" for row in RULES if row.domain))
        return f"domain {domain!r} (blockir imports the default ONNX domain, and {others})"
    if not rows:
        return "blockir has no op for it"
    for row in rows:
        if row.since <= opset <= row.until:
            return row
    if not opset:
        return f"the model imports no version of domain {domain!r}"
    spans = ", ".join(f"{r.since}-{r.until if r.until != _NEWEST else 'newest'}" for r in rows)
    return f"opset {opset}: blockir maps it at opsets {spans}"
