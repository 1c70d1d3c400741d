"""Test cases of the comparisons, logical ops and ``where`` (blockir.ops.logic), as data; expected values by
Python's operators per element over explicitly broadcast operands."""

from __future__ import annotations

import functools
import operator
from collections.abc import Callable
from typing import Any

import numpy as np

from tests.ops.harness import Case

RNG = np.random.default_rng(20260603)

COMPARE_REFS: dict[str, Callable[[Any, Any], bool]] = {
    "equal": operator.eq,
    "not_equal": operator.ne,
    "less_than": operator.lt,
    "less_equal": operator.le,
    "greater_than": operator.gt,
    "greater_equal": operator.ge,
}
LOGICAL_REFS: dict[str, Callable[[Any, Any], bool]] = {
    "logical_and": lambda a, b: bool(a) and bool(b),
    "logical_or": lambda a, b: bool(a) or bool(b),
    "logical_xor": lambda a, b: bool(a) != bool(b),
}


def _elementwise(fn: Callable[..., Any], *arrays: np.ndarray, dtype: Any = bool) -> np.ndarray:
    shape = np.broadcast_shapes(*(a.shape for a in arrays))
    full = [np.broadcast_to(a, shape) for a in arrays]
    return np.array([fn(*(a[pos].item() for a in full)) for pos in np.ndindex(*shape)], dtype).reshape(shape)


def _small(*shape: int, dtype: str = "int64") -> np.ndarray:
    return RNG.integers(-2, 3, size=shape).astype(dtype)


def _compare_cases(op_type: str) -> list[Case]:
    ref, cases = COMPARE_REFS[op_type], []
    for dtype in ("float32", "float64", "int32", "int64", "bool"):
        x = _small(3, 4, dtype=dtype)
        y = _small(3, 4, dtype=dtype)
        cases.append(Case({"X": x, "Y": y}, {}, {"Out": _elementwise(ref, x, y)}, name=dtype))
    x, y = _small(2, 3, 4, dtype="float32"), _small(3, dtype="float32")
    cases.append(Case({"X": x, "Y": y}, {"axis": 1}, {"Out": _elementwise(ref, x, y.reshape(3, 1))}, name="axis_1"))
    x, y = _small(3, 1), _small(1, 4)
    cases.append(Case({"X": x, "Y": y}, {}, {"Out": _elementwise(ref, x, y)}, name="both_broadcast"))
    return cases


def _logical_cases(op_type: str) -> list[Case]:
    ref = LOGICAL_REFS[op_type]
    pairs = (
        ("bool", RNG.random((3, 4)) < 0.5, RNG.random((3, 4)) < 0.5),
        ("broadcast", RNG.random((2, 1, 3)) < 0.5, RNG.random((4, 1)) < 0.5),
        ("float32_nonzero_is_true", _small(3, dtype="float32"), _small(3, dtype="float32")),
    )
    return [Case({"X": x, "Y": y}, {}, {"Out": _elementwise(ref, x, y)}, name=name) for name, x, y in pairs]


_not_inputs = (("bool", RNG.random((3, 4)) < 0.5), ("int32", _small(5, dtype="int32")))
LOGICAL_NOT = [Case({"X": x}, {}, {"Out": _elementwise(lambda a: not a, x)}, name=name) for name, x in _not_inputs]


def _where_case(shapes: tuple[tuple[int, ...], ...], dtype: str, name: str) -> Case:
    condition = RNG.random(shapes[0]) < 0.5
    x, y = RNG.uniform(-2, 2, shapes[1]).astype(dtype), RNG.uniform(-2, 2, shapes[2]).astype(dtype)
    expected = _elementwise(lambda c, a, b: a if c else b, condition, x, y, dtype=dtype)
    grad = ("X", "Y") if dtype == "float64" else ()
    return Case({"Condition": condition, "X": x, "Y": y}, {}, {"Out": expected}, grad=grad, name=name)


WHERE = [
    _where_case(((3, 4), (3, 4), (3, 4)), "float32", "float32"),
    _where_case(((3, 4), (3, 4), (3, 4)), "float64", "float64"),
    _where_case(((3, 1), (1, 4), (4,)), "float64", "broadcast"),
    _where_case(((2, 3), (2, 3), (1,)), "float64", "scalar_like_y"),
]

CASES: dict[str, list[Case]] = {
    **{op_type: _compare_cases(op_type) for op_type in COMPARE_REFS},
    **{op_type: _logical_cases(op_type) for op_type in LOGICAL_REFS},
    "logical_not": LOGICAL_NOT,
    "where": WHERE,
}

_f32 = np.zeros((3, 4), np.float32)

INFER_ERRORS: list[tuple[str, Case, str]] = [
    ("greater_than", Case({"X": _f32, "Y": np.zeros(3, np.float32)}), r"\[3, 4\].*\[3\].* do not broadcast"),
    ("equal", Case({"X": _f32, "Y": np.zeros(4, np.int64)}), r"different dtypes"),
    ("logical_and", Case({"X": np.zeros(3, bool), "Y": np.zeros(4, bool)}), r"X .*\[3\].*Y .*\[4\].* do not broadcast"),
    (
        "where",
        Case({"Condition": np.zeros(3), "X": np.zeros(3), "Y": np.zeros(3)}),
        r"Condition .* has dtype float64; expected one of bool",
    ),
    (
        "where",
        Case({"Condition": np.zeros(3, bool), "X": np.zeros(3), "Y": np.zeros(3, np.float32)}),
        r"different dtypes",
    ),
]

# -- bitwise ops: expected values by Python's operators on each element (unbounded ints, wrapped to the width) --

BITWISE_REFS: dict[str, Callable[[Any, Any], Any]] = {
    "bitwise_and": operator.and_,
    "bitwise_or": operator.or_,
    "bitwise_xor": operator.xor,
}


def _ints(dtype: str, *shape: int) -> np.ndarray:
    info = np.iinfo(dtype)
    return RNG.integers(info.min, info.max, size=shape, endpoint=True, dtype=dtype)


def _bitwise_cases(op_type: str) -> list[Case]:
    ref, cases = BITWISE_REFS[op_type], []
    for dtype in ("int8", "int16", "int32", "int64", "uint8", "uint16", "uint32", "uint64"):
        x, y = _ints(dtype, 3, 4), _ints(dtype, 4)
        cases.append(Case({"X": x, "Y": y}, {}, {"Out": _elementwise(ref, x, y, dtype=dtype)}, name=dtype))
    x, y = RNG.random((2, 3)) < 0.5, RNG.random((2, 3)) < 0.5
    cases.append(Case({"X": x, "Y": y}, {}, {"Out": _elementwise(ref, x, y)}, name="bool"))
    return cases


def _shifted(x: int, y: int, bits: int, left: bool, arithmetic: bool) -> int:
    """x shifted by y as C's operators on ``bits``-bit integers, 0 (or -1: an arithmetic right shift of a
    negative x) for a shift out of [0, bits)."""
    if not 0 <= y < bits:
        return -1 if (not left and arithmetic and x < 0) else 0
    if left:
        return x << y
    return x >> y if arithmetic else (x % (1 << bits)) >> y


def _wrapped(values: np.ndarray, dtype: str) -> np.ndarray:
    bits = np.iinfo(dtype).bits
    wrapped = values.astype(object) % (1 << bits)
    if np.iinfo(dtype).min < 0:
        wrapped = np.where(wrapped >= 1 << (bits - 1), wrapped - (1 << bits), wrapped)
    return wrapped.astype(dtype)


def _shift_cases(op_type: str) -> list[Case]:
    left, cases = op_type == "bitwise_left_shift", []
    for dtype in ("int8", "int32", "int64", "uint8", "uint16", "uint64"):
        bits = np.iinfo(dtype).bits
        for arithmetic in (True, False):
            x = _ints(dtype, 3, 4)
            y = RNG.integers(0 if dtype.startswith("u") else -2, bits + 2, size=(4,)).astype(dtype)
            shift = functools.partial(_shifted, bits=bits, left=left, arithmetic=arithmetic)
            out = _wrapped(_elementwise(shift, x, y, dtype=object), dtype)
            name = f"{dtype}_{'arithmetic' if arithmetic else 'logical'}"
            cases.append(Case({"X": x, "Y": y}, {"is_arithmetic": arithmetic}, {"Out": out}, name=name))
    return cases


CASES.update(
    {
        **{op_type: _bitwise_cases(op_type) for op_type in BITWISE_REFS},
        "bitwise_not": [
            *(
                Case({"X": (x := _ints(dtype, 2, 3))}, {}, {"Out": _wrapped(-x.astype(object) - 1, dtype)}, name=dtype)
                for dtype in ("int8", "int64", "uint8", "uint32")
            ),
            Case({"X": np.array([True, False])}, {}, {"Out": np.array([False, True])}, name="bool"),
        ],
        "bitwise_left_shift": _shift_cases("bitwise_left_shift"),
        "bitwise_right_shift": _shift_cases("bitwise_right_shift"),
    }
)
INFER_ERRORS += [
    ("bitwise_and", Case({"X": np.zeros(3, np.int32), "Y": np.zeros(3, np.int64)}), r"different dtypes"),
    ("bitwise_left_shift", Case({"X": _f32, "Y": _f32}), r"has dtype float32; expected one of int16"),
]
