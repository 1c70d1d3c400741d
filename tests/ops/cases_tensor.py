"""Test cases of the creation and replication ops (blockir.ops.tensor), as data; expected values built with
explicit loops and Python lists, not the kernels' calls."""

from __future__ import annotations

import math

import numpy as np

from tests.ops.harness import Case

RNG = np.random.default_rng(20260604)
CODES = {"bool": 0, "int32": 2, "int64": 3, "float32": 5, "float64": 6}


def rand(*shape: int, dtype: str = "float64") -> np.ndarray:
    return RNG.uniform(-2, 2, shape).astype(dtype)


SHAPE = [
    Case({"Input": rand(2, 3, 4)}, {}, {"Out": np.array([2, 3, 4], np.int32)}, name="rank3"),
    Case({"Input": np.zeros((), np.int64)}, {}, {"Out": np.zeros(0, np.int32)}, name="0d"),
]
SIZE = [
    Case({"Input": rand(2, 3, 4)}, {}, {"Out": np.array(24, np.int64)}, name="rank3"),
    Case({"Input": np.zeros((0, 3), np.float32)}, {}, {"Out": np.array(0, np.int64)}, name="empty"),
]


def _assign_value_case(values: list, dtype: str, shape: list[int], name: str, scalars: bool = False) -> Case:
    attr = (
        "values"
        if scalars
        else {"bool": "bool_values", "float32": "fp32_values", "float64": "fp64_values"}.get(dtype, f"{dtype}_values")
    )
    expected = np.array(values, dtype).reshape(shape)
    return Case({}, {"shape": shape, "dtype": CODES[dtype], attr: values}, {"Out": expected}, name=name)


ASSIGN_VALUE = [
    _assign_value_case([1.5, -2.0, 3.25, 0.0, 1.0, 2.0], "float32", [2, 3], "fp32"),
    _assign_value_case([0.1, 0.2], "float64", [2], "fp64"),
    _assign_value_case([1, -2, 3], "int32", [3, 1], "int32"),
    _assign_value_case([2**40, -1], "int64", [2], "int64"),
    _assign_value_case([1, 0, 1], "bool", [3], "bool"),
    _assign_value_case([1.5, 2.5], "float32", [2], "scalars", scalars=True),
    _assign_value_case([7], "int64", [], "0d"),
]

_like = rand(2, 3)
FILL_ANY_LIKE = [
    Case({"X": _like}, {"value": 1.5}, {"Out": np.full((2, 3), 1.5)}, name="keeps_dtype"),
    Case({"X": _like}, {"value": 3.0, "dtype": 3}, {"Out": np.full((2, 3), 3, np.int64)}, name="int64"),
]


def _range_case(start: float, end: float, step: float, dtype: str, name: str) -> Case:
    count = max(math.ceil((end - start) / step), 0)
    values = [start + i * step for i in range(count)]
    return Case(
        {"Start": np.array([start], dtype), "End": np.array([end], dtype), "Step": np.array([step], dtype)},
        {},
        {"Out": np.array(values, dtype)},
        name=name,
    )


RANGE = [
    _range_case(0, 5, 1, "int64", "int64"),
    _range_case(1.0, 2.0, 0.25, "float32", "float32"),
    _range_case(5, 0, -2, "int32", "negative_step"),
    _range_case(3, 1, 1, "int64", "empty"),
]


def _linspace_case(start: float, stop: float, num: int, dtype: str, name: str) -> Case:
    step = (stop - start) / (num - 1) if num > 1 else 0.0
    values = [start + step * i if i < num // 2 else stop - step * (num - 1 - i) for i in range(num)]
    return Case(
        {
            "Start": np.array([start], np.float32),
            "Stop": np.array([stop], np.float32),
            "Num": np.array([num], np.int32),
        },
        {"dtype": CODES[dtype]},
        {"Out": np.array(values, dtype)},
        name=name,
    )


LINSPACE = [
    _linspace_case(0.0, 1.0, 5, "float32", "float32"),
    _linspace_case(-2.0, 3.0, 6, "float64", "float64"),
    _linspace_case(2.0, 2.0, 1, "float32", "one"),
    _linspace_case(0.0, 10.0, 4, "int64", "int64"),
]


def _broadcast(x: np.ndarray, shape: list[int]) -> np.ndarray:
    """X broadcast by explicit index arithmetic."""
    lead = len(shape) - x.ndim
    out = np.empty(shape, x.dtype)
    for pos in np.ndindex(*shape):
        out[pos] = x[tuple(0 if x.shape[i] == 1 else pos[i + lead] for i in range(x.ndim))]
    return out


def _expand_case(x: np.ndarray, shape: list[int], target: list[int], name: str, **tensors: np.ndarray) -> Case:
    return Case(
        {"X": x, **tensors},
        {"shape": shape},
        {"Out": _broadcast(x, target)},
        grad=("X",) if x.dtype == np.float64 else (),
        name=name,
    )


EXPAND_V2 = [
    _expand_case(rand(3, 1), [3, 4], [3, 4], "last_dim"),
    _expand_case(rand(1, 3), [2, -1, 3], [2, 1, 3], "new_leading_dim_and_keep"),
    _expand_case(rand(3, dtype="float32"), [2, 3], [2, 3], "float32"),
    _expand_case(rand(2, 1), [], [2, 3], "shape_tensor", Shape=np.array([2, 3], np.int32)),
    _expand_case(
        rand(1, 2), [], [3, 2], "shape_list", expand_shapes_tensor=[np.array([3], np.int64), np.array([-1], np.int64)]
    ),
    _expand_case(np.array([True, False]), [2, 2], [2, 2], "bool"),
]
_as_x = rand(3, 1)
EXPAND_AS_V2 = [
    Case({"X": x, "Y": np.zeros((2, 3, 4), np.float32)}, {}, {"Out": _broadcast(x, [2, 3, 4])}, grad=("X",), name=n)
    for n, x in (("rank_up", rand(3, 1)), ("same_rank", rand(1, 3, 4)))
] + [Case({"X": _as_x}, {"target_shape": [3, 2]}, {"Out": _broadcast(_as_x, [3, 2])}, grad=("X",), name="target_shape")]


def _tile_ref(x: np.ndarray, repeats: list[int]) -> np.ndarray:
    rank = max(x.ndim, len(repeats))
    base = x.reshape([1] * (rank - x.ndim) + list(x.shape))
    times = [1] * (rank - len(repeats)) + repeats
    out = np.empty([d * r for d, r in zip(base.shape, times)], x.dtype)
    for pos in np.ndindex(*out.shape):
        out[pos] = base[tuple(p % d for p, d in zip(pos, base.shape))]
    return out


def _tile_case(x: np.ndarray, repeats: list[int], name: str, tensor: bool = False) -> Case:
    inputs = {"X": x, "RepeatTimes": np.array(repeats, np.int32)} if tensor else {"X": x}
    return Case(
        inputs,
        {} if tensor else {"repeat_times": repeats},
        {"Out": _tile_ref(x, repeats)},
        grad=("X",) if x.dtype == np.float64 else (),
        name=name,
    )


TILE = [
    _tile_case(rand(2, 3), [2, 1], "rows"),
    _tile_case(rand(2, 3), [2, 2, 3], "more_repeats_than_dims"),
    _tile_case(rand(2, 3, 2), [3], "fewer_repeats"),
    _tile_case(rand(3, dtype="float32"), [2], "float32"),
    _tile_case(rand(2, 2), [1, 3], "repeat_tensor", tensor=True),
    _tile_case(np.arange(4, dtype=np.int64).reshape(2, 2), [2, 2], "int64"),
]


def _stack_ref(xs: list[np.ndarray], axis: int) -> np.ndarray:
    axis %= xs[0].ndim + 1
    shape = list(xs[0].shape)
    shape.insert(axis, len(xs))
    out = np.empty(shape, xs[0].dtype)
    for pos in np.ndindex(*shape):
        out[pos] = xs[pos[axis]][pos[:axis] + pos[axis + 1 :]]
    return out


def _stack_case(xs: list[np.ndarray], axis: int, name: str) -> Case:
    grad = ("X",) if xs[0].dtype == np.float64 else ()
    return Case({"X": xs}, {"axis": axis}, {"Y": _stack_ref(xs, axis)}, grad=grad, name=name)


STACK = [
    _stack_case([rand(2, 3) for _ in range(3)], 0, "axis_0"),
    _stack_case([rand(2, 3) for _ in range(2)], 1, "axis_1"),
    _stack_case([rand(2, 3) for _ in range(2)], -1, "last"),
    _stack_case([rand(4, dtype="float32") for _ in range(2)], 0, "float32"),
]


def _unstack_case(x: np.ndarray, axis: int, name: str) -> Case:
    parts = [np.take(x, i, axis=axis) for i in range(x.shape[axis])]
    grad = ("X",) if x.dtype == np.float64 else ()
    return Case({"X": x}, {"axis": axis, "num": len(parts)}, {"Y": parts}, grad=grad, name=name)


UNSTACK = [
    _unstack_case(rand(3, 2), 0, "axis_0"),
    _unstack_case(rand(2, 3, 2), 1, "axis_1"),
    _unstack_case(rand(2, 4, dtype="float32"), -1, "last"),
]


def _flip_case(x: np.ndarray, axis: list[int], name: str) -> Case:
    out = x.copy()
    for a in axis:
        out = np.flip(out, a)
    return Case({"X": x}, {"axis": axis}, {"Out": out.copy()}, grad=("X",) if x.dtype == np.float64 else (), name=name)


FLIP = [
    _flip_case(rand(2, 3), [0], "axis_0"),
    _flip_case(rand(2, 3, 2), [0, -1], "two_axes"),
    _flip_case(np.arange(6, dtype=np.int32).reshape(2, 3), [1], "int32"),
]


def _roll_ref(x: np.ndarray, shifts: list[int], axes: list[int]) -> np.ndarray:
    if not axes:
        flat = x.reshape(-1).tolist()
        n = len(flat)
        return np.array([flat[(i - shifts[0]) % n] for i in range(n)], x.dtype).reshape(x.shape)
    out = np.empty_like(x)
    for pos in np.ndindex(*x.shape):
        src = list(pos)
        for s, a in zip(shifts, axes):
            src[a % x.ndim] = (src[a % x.ndim] - s) % x.shape[a % x.ndim]
        out[pos] = x[tuple(src)]
    return out


def _roll_case(x: np.ndarray, shifts: list[int], axes: list[int], name: str, tensor: bool = False) -> Case:
    inputs = {"X": x, "ShiftsTensor": np.array(shifts, np.int64)} if tensor else {"X": x}
    return Case(
        inputs,
        {"shifts": [] if tensor else shifts, "axis": axes},
        {"Out": _roll_ref(x, shifts, axes)},
        grad=("X",) if x.dtype == np.float64 else (),
        name=name,
    )


ROLL = [
    _roll_case(rand(3, 4), [1], [0], "axis_0"),
    _roll_case(rand(3, 4), [-1, 2], [0, -1], "two_axes"),
    _roll_case(rand(2, 3), [2], [], "flattened"),
    _roll_case(rand(2, 3), [1], [1], "shifts_tensor", tensor=True),
]


def _triangle(x: np.ndarray, k: int, lower: bool) -> np.ndarray:
    """Entry (.., i, j) kept when j - i <= k (lower) or j - i >= k (upper), by explicit indices."""
    out = np.zeros_like(x)
    for pos in np.ndindex(*x.shape):
        i, j = pos[-2], pos[-1]
        if (j - i <= k) if lower else (j - i >= k):
            out[pos] = x[pos]
    return out


TRIL_TRIU = [
    Case(
        {"X": x},
        {"diagonal": k, "lower": lower},
        {"Out": _triangle(x, k, lower)},
        grad=("X",) if x.dtype == np.float64 else (),
        name=name,
    )
    for x, k, lower, name in (
        (rand(3, 4), 0, True, "tril"),
        (rand(3, 4), 1, False, "triu_above"),
        (rand(2, 4, 3), -1, True, "batched_tril_below"),
        (rand(3, 3), 5, False, "triu_past_the_corner"),
        (np.arange(12, dtype=np.int64).reshape(3, 4), -2, False, "int64_triu"),
    )
]

_cond = np.array([[0, 3, 0], [1, 0, 2]], np.int64)
WHERE_INDEX = [
    Case(
        {"Condition": c},
        {},
        {"Out": np.array([list(p) for p in np.ndindex(*c.shape) if c[p]], np.int64).reshape(-1, c.ndim)},
        name=name,
    )
    for c, name in (
        (_cond, "int64"),
        (_cond.astype(bool), "bool"),
        (np.zeros((2, 2), np.float32), "none_nonzero"),
        (np.array([0.0, 1.5, -2.0]), "one_dim"),
    )
]

CASES: dict[str, list[Case]] = {
    "tril_triu": TRIL_TRIU,
    "where_index": WHERE_INDEX,
    "shape": SHAPE,
    "size": SIZE,
    "assign_value": ASSIGN_VALUE,
    "fill_any_like": FILL_ANY_LIKE,
    "range": RANGE,
    "linspace": LINSPACE,
    "expand_v2": EXPAND_V2,
    "expand_as_v2": EXPAND_AS_V2,
    "tile": TILE,
    "stack": STACK,
    "unstack": UNSTACK,
    "flip": FLIP,
    "roll": ROLL,
}

_f32 = np.zeros((3, 4), np.float32)

INFER_ERRORS: list[tuple[str, Case, str]] = [
    ("assign_value", Case({}, {"shape": [2, 2], "dtype": 5, "fp32_values": [1.0]}), r"1 values do not fill shape"),
    ("assign_value", Case({}, {"shape": [1], "dtype": 4, "values": [1.0]}), r"dtype=4 \(float16\) is not one of"),
    ("expand_v2", Case({"X": _f32}, {"shape": [3, 5]}), r"dim 1 of X \[3, 4\] is 4: it expands to 5 only from 1"),
    ("expand_v2", Case({"X": _f32}, {"shape": [4]}), r"fewer dims than X"),
    ("expand_v2", Case({"X": _f32}, {"shape": [-1, 3, 4]}), r"-1 at dim 0 has no dim of X"),
    ("tile", Case({"X": _f32}, {"repeat_times": [2, -1]}), r"must not be negative"),
    ("stack", Case({"X": [_f32, np.zeros((3, 5), np.float32)]}), r"does not match"),
    ("stack", Case({"X": [_f32, _f32]}, {"axis": 3}), r"axis 3 is out of range for rank 3"),
    ("roll", Case({"X": _f32}, {"shifts": [1, 2], "axis": [0]}), r"differ in length"),
    ("tril_triu", Case({"X": np.zeros(3, np.float32)}), r"must have at least 2 dims"),
    ("linspace", Case({"Start": np.zeros(1), "Stop": np.ones(1), "Num": np.ones(1)}, {"dtype": 5}), r"Num .* int32"),
]

KERNEL_ERRORS: list[tuple[str, Case, str]] = [
    ("expand_v2", Case({"X": _f32, "Shape": np.array([3, 5], np.int32)}), r"is 4: it expands to 5 only from 1"),
    ("range", Case({"Start": np.array([0]), "End": np.array([3]), "Step": np.array([0])}), r"Step must not be 0"),
]

# -- bitcast: the same bytes read as another dtype of the same width ------------------------------------------

_BITS = np.array([[1.5, -2.0, np.inf], [0.0, -0.0, 3.25]], np.float32)
CASES["bitcast"] = [
    Case({"X": _BITS}, {"dtype": 2}, {"Out": np.frombuffer(_BITS.tobytes(), np.int32).reshape(2, 3)}, name="f32_i32"),
    Case({"X": _BITS.T}, {"dtype": 37}, {"Out": _BITS.T.copy().view(np.uint32)}, name="strided_to_uint32"),
    Case({"X": np.array(-1, np.int64)}, {"dtype": 6}, {"Out": np.array(-1, np.int64).view(np.float64)}, name="0d"),
    Case({"X": np.array([True, False])}, {"dtype": 20}, {"Out": np.array([1, 0], np.uint8)}, name="bool_uint8"),
]
INFER_ERRORS.append(("bitcast", Case({"X": _BITS}, {"dtype": 3}), r"dtype int64 is 8 bytes wide, X's float32 4"))
