"""The ONNX op table: one row per ONNX op and opset range, naming the blockir ops it becomes and how its
attributes convert, and the ONNX ops refused with the reason (:data:`REFUSED`).

A row's converter receives a :class:`blockir.io.onnx.Node` and appends blockir ops; it raises
:class:`~blockir.io.onnx.Refused` (an attribute value or input blockir cannot honour, saying which) or
:class:`~blockir.io.onnx.NeedsConstant` (an input blockir's op takes as an attribute but the model computes at
run time). ``docs/onnx.md`` lists the table.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass
from typing import Any, cast

import numpy as np

from blockir.io.onnx import Converter, Node, Refused, dtype_name
from blockir.ir.dtypes import DTYPE_TO_PROTO

__all__ = ["REFUSED", "RULES", "OpRule", "rule_for"]

_NEWEST = 1 << 30
_INT_MAX = (1 << 63) - 1


@dataclass(frozen=True)
class OpRule:
    """ONNX op ``onnx`` at opsets ``since`` to ``until`` (inclusive) becomes the blockir ``ops``."""

    onnx: str
    since: int
    convert: Converter
    ops: tuple[str, ...]
    until: int = _NEWEST
    note: str = ""


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


_NARROW = {"int8": "int32", "int16": "int32", "uint8": "int32"}  # integers blockir's kernels compute widened


def _binary(type: str) -> Converter:
    def convert(n: Node) -> None:
        narrow = _NARROW.get(n.dtype(0))
        if narrow is None:
            n.binary(type, n.x(0), n.x(1), out=n.y(), attrs={"axis": _legacy_axis(n)})
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
        narrow = _NARROW.get(n.dtype(0))
        if narrow is not None:
            names = [n.cast(name, narrow) for name in names]
        acc = names[0]
        for k, name in enumerate(names[1:], 1):
            last = k == len(names) - 1 and narrow is None
            acc = n.binary(type, acc, name, out=n.y() if last else None)
        if narrow is not None:
            n.cast(acc, n.dtype(0), out=n.y())

    return convert


def _mean(n: Node) -> None:
    names = [n.x(i) for i in range(len(n.inputs)) if n.has(i)]
    acc = names[0]
    for name in names[1:]:
        acc = n.binary("elementwise_add", acc, name)
    n.emit("scale", {"X": acc}, {"Out": n.y()}, {"scale": 1.0 / len(names)})


def _round(n: Node) -> None:
    """Half to even (blockir's round, as Paddle's, rounds half away from zero)."""
    x = n.x(0)
    away = n.unary("round", x)
    even = n.unary("scale", n.unary("round", n.unary("scale", x, {"scale": 0.5})), {"scale": 2.0})
    frac = n.unary("abs", n.binary("elementwise_sub", x, n.unary("floor", x)))
    half = n.binary("equal", frac, n.constant(np.asarray(0.5, n.dtype(0))))
    n.emit("where", {"Condition": half, "X": even, "Y": away}, {"Out": n.y()})


def _neg(n: Node) -> None:
    n.emit("scale", {"X": n.x(0)}, {"Out": n.y()}, {"scale": -1.0})


def _identity(n: Node) -> None:
    n.emit("assign", {"X": n.x(0)}, {"Out": n.y()})


def _pow(n: Node) -> None:
    y = n.cast(n.x(1), n.dtype(0))
    n.binary("elementwise_pow", n.x(0), y, out=n.y())


def _mod(n: Node) -> None:
    if n.attr("fmod", 0) and n.dtype(0).startswith("int"):
        raise Refused("fmod=1 on integers (C's remainder; blockir's elementwise_mod is Python's)")
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
    else:
        for i, slot in ((1, "Min"), (2, "Max")):
            if n.has(i):
                inputs[slot] = n.cast(n.x(i), n.dtype(0))
    if n.dtype(0) != "float32" and n.dtype(0) != "float64" and n.opset >= 11:
        raise Refused(f"Clip on {n.dtype(0)} (blockir's clip takes floating-point bounds)")
    n.emit("clip", inputs, {"Out": n.y()}, {"min": lo, "max": hi})


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
    n.emit("size", {"Input": n.x(0)}, {"Out": n.y()})


def _reshape(n: Node) -> None:
    shape = n.const(1) if n.opset >= 5 else np.asarray(n.attr("shape"))
    if shape is not None:
        dims = _ints(shape)
        if n.attr("allowzero", 0) and 0 in dims:
            if -1 in dims:
                raise Refused("allowzero=1 with both 0 and -1 in the shape")
        elif 0 in dims:
            src = n.shape(0)
            if src is not None:
                dims = [src[i] if d == 0 and i < len(src) and src[i] != -1 else d for i, d in enumerate(dims)]
        n.emit("reshape2", {"X": n.x(0)}, {"Out": n.y(), "XShape": n.tmp("xshape")}, {"shape": dims})
        return
    if n.attr("allowzero", 0):
        raise Refused("allowzero=1 with a shape computed at run time")
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
    if n.attr("batch_dims", 0):
        raise Refused("batch_dims other than 0")
    n.emit("gather_nd", {"X": n.x(0), "Index": n.x(1)}, {"Out": n.y()})


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
    shapes = [n.shape(i) for i in range(3)]
    if any(s is None for s in shapes) or len({tuple(s) for s in shapes if s is not None}) != 1:
        zero_x = n.tmp("zeros")
        n.emit("fill_any_like", {"X": x}, {"Out": zero_x}, {"value": 0.0, "dtype": -1})
        zero_y = n.tmp("zeros")
        n.emit("fill_any_like", {"X": y}, {"Out": zero_y}, {"value": 0.0, "dtype": -1})
        base = n.binary("elementwise_add", zero_x, zero_y)
        c = n.cast(cond, n.dtype(1))
        c = n.binary("elementwise_add", c, n.binary("elementwise_add", base, n.binary("elementwise_mul", base, base)))
        cond = n.cast(c, "bool")
        x = n.binary("elementwise_add", x, base)
        y = n.binary("elementwise_add", y, base)
    n.emit("where", {"Condition": cond, "X": x, "Y": y}, {"Out": n.y()})


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


def _spatial(n: Node, kernel: list[int]) -> tuple[dict[str, Any], int]:
    """Strides, dilations and paddings of Conv, ConvTranspose and the pools, as blockir's (2-D) attributes; and
    the number of spatial dims (a 1-D op's attributes are those of a 2-D one over an image 1 high)."""
    dims = len(kernel)
    if dims not in (1, 2):
        raise Refused(f"{dims}-D {n.op_type} (blockir's ops are 2-D)")
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
    if dims == 1:
        strides, dilations, pairs = [1, *strides], [1, *dilations], [(0, 0), *pairs]
    paddings = [pairs[0][0], pairs[0][1], pairs[1][0], pairs[1][1]]
    return {"strides": strides, "dilations": dilations, "paddings": paddings, "padding_algorithm": algorithm}, dims


def _lifted(n: Node, i: int, dims: int) -> str:
    """Input ``i``, a 1-D op's given a height of 1 (dim 2) for blockir's 2-D op; itself for a 2-D op."""
    if dims == 2:
        return n.x(i)
    out = n.tmp("2d")
    n.emit("unsqueeze2", {"X": n.x(i)}, {"Out": out, "XShape": n.tmp("xshape")}, {"axes": [2]})
    return out


def _lowered(n: Node, made: str, dims: int, out: str) -> None:
    """The 2-D op's output ``made`` as the 1-D op's ``out`` (dim 2 dropped), or copied for a 2-D op."""
    if dims == 2:
        n.emit("assign", {"X": made}, {"Out": out})
    else:
        n.emit("squeeze2", {"X": made}, {"Out": out, "XShape": n.tmp("xshape")}, {"axes": [2]})


def _conv(n: Node) -> None:
    w = n.shape(1)
    if w is None:
        raise Refused("a weight of unknown rank")
    kernel = list(n.attr("kernel_shape", w[2:]))
    attrs, dims = _spatial(n, kernel)
    attrs["groups"] = int(n.attr("group", 1))
    made = n.tmp("conv")
    n.emit("conv2d", {"Input": _lifted(n, 0, dims), "Filter": _lifted(n, 1, dims)}, {"Output": made}, attrs)
    if n.has(2):
        made = n.binary("elementwise_add", made, n.x(2), attrs={"axis": 1})
    _lowered(n, made, dims, n.y())


def _conv_transpose(n: Node) -> None:
    w = n.shape(1)
    if w is None:
        raise Refused("a weight of unknown rank")
    kernel = list(n.attr("kernel_shape", w[2:]))
    attrs, dims = _spatial(n, kernel)
    if dims != 2:
        raise Refused(f"{dims}-D ConvTranspose (blockir's op is 2-D)")
    if attrs["padding_algorithm"] != "EXPLICIT":
        raise Refused(f"auto_pad {n.attr('auto_pad')!r}")
    attrs["groups"] = int(n.attr("group", 1))
    attrs["output_padding"] = list(n.attr("output_padding", []))
    if n.attr("output_shape") is not None:
        shape = n.shape(0)
        if shape is None or -1 in shape[2:]:
            raise Refused("output_shape with an input whose spatial dims are known only at run time")
        target = list(n.attr("output_shape"))[-dims:]
        pads = []
        for k, (size, kk, s, d) in enumerate(zip(shape[2:], kernel, attrs["strides"], attrs["dilations"])):
            op_ = attrs["output_padding"][k] if attrs["output_padding"] else 0
            total = s * (size - 1) + op_ + ((kk - 1) * d + 1) - target[k]
            first = total // 2 if n.attr("auto_pad", "NOTSET") != "SAME_UPPER" else total - total // 2
            pads += [first, total - first]
        attrs["paddings"] = pads
    out = n.tmp("convt") if n.has(2) else n.y()
    n.emit("conv2d_transpose", {"Input": n.x(0), "Filter": n.x(1)}, {"Output": out}, attrs)
    if n.has(2):
        n.binary("elementwise_add", out, n.x(2), out=n.y(), attrs={"axis": 1})


def _pool(kind: str) -> Converter:
    def convert(n: Node) -> None:
        if n.wants(1):
            raise Refused("the Indices output")
        kernel = list(n.attr("kernel_shape"))
        attrs, dims = _spatial(n, kernel)
        if any(d != 1 for d in attrs.pop("dilations")):
            raise Refused("dilations other than 1")
        if attrs["padding_algorithm"] == "SAME":
            raise Refused("auto_pad SAME of an input whose spatial dims are known only at run time")
        attrs.update(
            pooling_type=kind,
            ksize=[1, *kernel] if dims == 1 else kernel,
            ceil_mode=bool(n.attr("ceil_mode", 0)),
            exclusive=not n.attr("count_include_pad", 0),
        )
        made = n.tmp("pool")
        n.emit("pool2d", {"X": _lifted(n, 0, dims)}, {"Out": made}, attrs)
        _lowered(n, made, dims, n.y())

    return convert


def _global_pool(kind: str) -> Converter:
    def convert(n: Node) -> None:
        if n.rank(0) != 4:
            raise Refused(f"{n.rank(0)}-D input (blockir's pool2d is 2-D)")
        attrs = {"pooling_type": kind, "ksize": [1, 1], "global_pooling": True}
        n.emit("pool2d", {"X": n.x(0)}, {"Out": n.y()}, attrs)

    return convert


def _batch_norm(n: Node) -> None:
    if n.attr("training_mode", 0) or any(n.wants(i) for i in range(1, 5)) or n.attr("is_test", 1) == 0 and n.opset < 7:
        raise Refused("training mode (blockir imports inference models)")
    if n.opset < 9 and n.attr("spatial", 1) != 1:
        raise Refused("spatial=0")
    outs = {slot: n.tmp(slot) for slot in ("MeanOut", "VarianceOut", "SavedMean", "SavedVariance", "ReserveSpace")}
    n.emit(
        "batch_norm",
        {"X": n.x(0), "Scale": n.x(1), "Bias": n.x(2), "Mean": n.x(3), "Variance": n.x(4)},
        {"Y": n.y(), **outs},
        {"epsilon": float(n.attr("epsilon", 1e-5)), "is_test": True, "use_global_stats": True},
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
    dtype = n.graph.block.var(scores).dtype or "float32"
    safe = target
    mask = None
    if ignore is not None:
        keep = n.binary("not_equal", target, n.constant(np.asarray(ignore, n.graph.block.var(target).dtype)))
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
    wrapped = n.tmp("index")  # negative indices count from depth
    n.emit("elementwise_mod", {"X": index, "Y": n.constant(np.asarray(depth, "int64"))}, {"Out": wrapped}, {"axis": -1})
    hot = n.tmp("hot")
    n.emit("one_hot_v2", {"X": wrapped}, {"Out": hot}, {"depth": depth, "dtype": DTYPE_TO_PROTO[n.dtype(2)]})
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
    n.binary("elementwise_div", n.x(0), norm, out=n.y())


def _scatter_nd(n: Node) -> None:
    reduction = n.attr("reduction", "none")
    if reduction == "add":
        n.emit("scatter_nd_add", {"X": n.x(0), "Index": n.x(1), "Updates": n.x(2)}, {"Out": n.y()})
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
    training = n.const(2) if n.opset >= 12 and n.has(2) else None
    if training is not None and bool(training.reshape(-1)[0]):
        raise Refused("training_mode=True (random)")
    n.emit("assign", {"X": n.x(0)}, {"Out": n.y()})
    if n.wants(1):
        n.emit("fill_any_like", {"X": n.x(0)}, {"Out": n.y(1)}, {"value": 1.0, "dtype": DTYPE_TO_PROTO["bool"]})


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
        if type == "logsumexp":
            attrs = {"axis": attrs["dim"], "keepdim": attrs["keep_dim"], "reduce_all": attrs["reduce_all"]}
        scalar = not n.attr("keepdims", 1) and (axes is None or len({_axis(a, rank) for a in axes}) == rank)
        out = n.tmp(type) if post or scalar else n.y()
        n.emit(type, {"X": x}, {"Out": out}, attrs)
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
    n.emit("top_k_v2", {"X": n.x(0)}, {"Out": values, "Indices": indices}, attrs)


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


def _resize_matrix(n: Node, size: int, out: int, scale: float, roi: tuple[float, float] | None) -> np.ndarray:
    """The (size, out) matrix W with resize(x) = x @ W along one axis: ONNX's reference evaluator resizing the
    identity, so every mode, coordinate transformation, cubic coefficient and antialias is ONNX's own."""
    from blockir.io.onnx import onnx_module

    onnx = onnx_module()
    from onnx.reference import ReferenceEvaluator

    helper = onnx.helper
    attrs = {k: v for k, v in n.attrs.items() if k not in ("axes", "keep_aspect_ratio_policy")}
    if n.op_type == "Upsample" or n.opset < 11:
        attrs["coordinate_transformation_mode"] = "asymmetric"
        if attrs.get("mode", "nearest") == "nearest":
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
    return np.asarray(outputs[0])


def _resize(n: Node) -> None:
    """Resize and Upsample of an input of known shape, one axis after another: a product with the axis's
    interpolation matrix (a gather of rows for nearest)."""
    shape = n.shape(0)
    if shape is None:
        raise Refused("an input of unknown rank")
    if n.attr("keep_aspect_ratio_policy", "stretch") != "stretch":
        raise Refused(f"keep_aspect_ratio_policy {n.attr('keep_aspect_ratio_policy')!r}")
    rank = len(shape)
    axes = [_axis(a, rank) for a in n.attr("axes", range(rank))]
    roi, scales, sizes = _resize_inputs(n)
    if scales is None and sizes is None:
        raise Refused("neither scales nor sizes")
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
        if out == size or (out < 0 and scale == 1.0 and span is None):
            continue
        if size == -1:
            raise Refused(f"resizing dim {a}, whose size is known only at run time")
        steps.append((a, _resize_matrix(n, size, out, scale, span)))
    if not steps:
        n.emit("assign", {"X": x}, {"Out": n.y()})
        return
    for k, (a, w) in enumerate(steps):
        last = k == len(steps) - 1
        result = n.y() if last else n.tmp("resize")
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
        x = result


def _compare(type: str) -> Converter:
    def convert(n: Node) -> None:
        x, y = n.x(0), n.x(1)
        narrow = _NARROW.get(n.dtype(0))
        if narrow is not None:
            x, y = n.cast(x, narrow), n.cast(y, narrow)
        n.emit(type, {"X": x, "Y": y}, {"Out": n.y()}, {"axis": _legacy_axis(n)})

    return convert


def _logical(type: str) -> Converter:
    def convert(n: Node) -> None:
        if type == "logical_not":
            n.emit(type, {"X": n.x(0)}, {"Out": n.y()})
        else:
            n.emit(type, {"X": n.x(0), "Y": n.x(1)}, {"Out": n.y()})

    return convert


# -- the table -----------------------------------------------------------------------------------


def _rows() -> list[OpRule]:
    rows = []

    def add(
        onnx: str, since: int, convert: Converter, ops: tuple[str, ...], until: int = _NEWEST, note: str = ""
    ) -> None:
        rows.append(OpRule(onnx, since, convert, ops, until, note))

    for onnx, bir in (
        ("Relu", "relu"), ("Sigmoid", "sigmoid"), ("Tanh", "tanh"), ("Exp", "exp"), ("Log", "log"),
        ("Sqrt", "sqrt"), ("Abs", "abs"), ("Reciprocal", "reciprocal"), ("Floor", "floor"), ("Ceil", "ceil"),
("Sin", "sin"), ("Cos", "cos"), ("Tan", "tan"), ("Atan", "atan"), ("Erf", "erf"),
        ("Sign", "sign"), ("Softsign", "softsign"), ("Mish", "mish"),
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
    add("GatherND", 11, _gather_nd, ("gather_nd",))
    add("Expand", 8, _expand, ("expand_v2", "fill_constant", "elementwise_mul"))
    add("Tile", 6, _tile, ("tile",))
    add("Range", 11, _range, ("range",))
    add("Pad", 1, _pad, ("pad", "pad3d"))
    add("MatMul", 1, _matmul, ("matmul_v2",))
    add("Gemm", 1, _gemm, ("matmul_v2", "scale", "elementwise_add"))
    add("Conv", 1, _conv, ("conv2d", "elementwise_add"), note="2-D")
    add("ConvTranspose", 1, _conv_transpose, ("conv2d_transpose", "elementwise_add"), note="2-D")
    add("MaxPool", 1, _pool("max"), ("pool2d",), note="2-D, no Indices output, no dilations")
    add("AveragePool", 1, _pool("avg"), ("pool2d",), note="2-D, no dilations")
    add("GlobalMaxPool", 1, _global_pool("max"), ("pool2d",))
    add("GlobalAveragePool", 1, _global_pool("avg"), ("pool2d",))
    add("BatchNormalization", 1, _batch_norm, ("batch_norm",), note="inference")
    add("InstanceNormalization", 1, _instance_norm, ("instance_norm",))
    add("LayerNormalization", 17, _layer_norm, ("layer_norm", "elementwise_mul", "elementwise_add"))
    add("NegativeLogLikelihoodLoss", 12, _nll_loss, ("take_along_axis", "gather", "reduce_sum", "elementwise_div"))
    add("SoftmaxCrossEntropyLoss", 12, _softmax_cross_entropy, ("log_softmax", "take_along_axis", "reduce_sum"))
    add("Hardmax", 1, _hardmax, ("arg_max", "one_hot_v2", "transpose2"))
    add("OneHot", 9, _one_hot, ("one_hot_v2", "elementwise_mul", "elementwise_add", "transpose2"))
    add("IsNaN", 9, _is_nan, ("not_equal",))
    add("IsInf", 10, _is_inf, ("equal", "logical_or"))
    add("CumProd", 26, _cumprod, ("cumprod",))
    add("LpNormalization", 1, _lp_normalization, ("p_norm", "elementwise_div"))
    add("ScatterND", 11, _scatter_nd, ("scatter_nd_add", "fill_any_like"), note="reduction none or add")
    add("Trilu", 14, _trilu, ("tril_triu",))
    add("NonZero", 9, _non_zero, ("where_index", "transpose2"))
    add("RMSNormalization", 23, _rms_norm, ("square", "reduce_mean", "rsqrt", "elementwise_mul"))
    add("LRN", 1, _lrn, ("square", "pool2d", "scale", "pow", "elementwise_div"))
    add("Dropout", 1, _dropout, ("assign",), note="inference: the identity")
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
    return rows


RULES: tuple[OpRule, ...] = tuple(_rows())

_CONTROL = "control flow: maps onto blockir's while and conditional_block ops once they exist"
_RNN = "recurrent: maps onto blockir's rnn op once it exists"
REFUSED: dict[str, str] = {
    "Loop": _CONTROL,
    "If": _CONTROL,
    "Scan": _CONTROL,
    "LSTM": _RNN,
    "GRU": _RNN,
    "RNN": _RNN,
}


@functools.cache
def _by_op() -> dict[str, list[OpRule]]:
    table: dict[str, list[OpRule]] = {}
    for row in RULES:
        table.setdefault(row.onnx, []).append(row)
    return table


def rule_for(op_type: str, opset: int) -> OpRule | str:
    """The row for ``op_type`` at ``opset``, or why there is none."""
    if op_type in REFUSED:
        return REFUSED[op_type]
    rows = _by_op().get(op_type)
    if not rows:
        return "blockir has no op for it"
    for row in rows:
        if row.since <= opset <= row.until:
            return row
    spans = ", ".join(f"{r.since}-{r.until if r.until != _NEWEST else 'newest'}" for r in rows)
    return f"opset {opset}: blockir maps it at opsets {spans}"
