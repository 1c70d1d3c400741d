"""Test cases of the tensor-math ops (blockir.ops.math), as data.

Expected values are computed here in plain numpy, independently of the kernels:
broadcasting by explicit reshapes instead of Paddle's trimming rules, products
with ``einsum``, activations in float64 then cast. Cases whose ``grad`` names
inputs hold float64 values away from kinks (relu at 0) and poles (division by 0).

``INFER_ERRORS`` and ``KERNEL_ERRORS`` list bad inputs each op must reject, with
a pattern its message must match.
"""

from __future__ import annotations

import math
from collections.abc import Callable

import numpy as np

from blockir.ir.dtypes import DTYPE_TO_PROTO
from blockir.ops.values import LoDTensor, SelectedRows
from tests.ops.harness import Case

RNG = np.random.default_rng(20240602)
FLOAT_CODES = {"float32": 5, "float64": 6, "int32": 2, "int64": 3, "bool": 0}


def rand(*shape: int, dtype: str = "float64", low: float = -2.0, high: float = 2.0) -> np.ndarray:
    if dtype in ("int32", "int64"):
        return RNG.integers(-5, 6, size=shape).astype(dtype)
    if dtype == "bool":
        return RNG.random(shape) < 0.5
    return RNG.uniform(low, high, size=shape).astype(dtype)


def away_from_zero(*shape: int, dtype: str = "float64") -> np.ndarray:
    """Values with |v| in [0.5, 2], random signs."""
    return (RNG.uniform(0.5, 2.0, size=shape) * RNG.choice([-1.0, 1.0], size=shape)).astype(dtype)


# -- mul and matmul ------------------------------------------------------------------------------


def ref_mul(x: np.ndarray, y: np.ndarray, xn: int = 1, yn: int = 1) -> np.ndarray:
    rows, inner = int(np.prod(x.shape[:xn])), int(np.prod(x.shape[xn:]))
    out = np.einsum("ik,kj->ij", x.reshape(rows, inner), y.reshape(inner, -1))
    return out.reshape(*x.shape[:xn], *y.shape[yn:]).astype(x.dtype)


def _mul_case(
    xs: tuple[int, ...],
    ys: tuple[int, ...],
    dtype: str,
    name: str,
    xn: int = 1,
    yn: int = 1,
    lod: list[list[int]] | None = None,
) -> Case:
    x, y = rand(*xs, dtype=dtype), rand(*ys, dtype=dtype)
    out = ref_mul(x, y, xn, yn)
    return Case(
        {"X": x, "Y": y},
        {"x_num_col_dims": xn, "y_num_col_dims": yn},
        {"Out": LoDTensor(out, lod) if lod else out},
        grad=("X", "Y") if dtype == "float64" else (),
        lod={"X": lod} if lod else {},
        name=name,
    )


MUL = [
    _mul_case((4, 5), (5, 3), "float32", "matrix_float32"),
    _mul_case((3, 4), (4, 2), "float64", "matrix_float64"),
    _mul_case((2, 3, 4), (4, 5), "float64", "x_num_col_dims_2", xn=2),
    _mul_case((2, 3, 2), (6, 3), "float64", "x_flattened", xn=1),
    _mul_case((2, 6), (2, 3, 4), "float64", "y_num_col_dims_2", yn=2),
    _mul_case((3, 4), (4, 2), "int64", "int64"),
    _mul_case((3, 4), (4, 2), "int32", "int32"),
    _mul_case((3, 4), (4, 2), "float64", "lod_shared", lod=[[0, 1, 3]]),
]


def ref_matmul(x: np.ndarray, y: np.ndarray, tx: bool = False, ty: bool = False, alpha: float = 1.0) -> np.ndarray:
    a = x if x.ndim == 1 else np.swapaxes(x, -1, -2) if tx else x
    b = y if y.ndim == 1 else np.swapaxes(y, -1, -2) if ty else y
    a2 = a.reshape(1, -1) if a.ndim == 1 else a
    b2 = b.reshape(-1, 1) if b.ndim == 1 else b
    out = np.einsum("...ij,...jk->...ik", a2, b2) * alpha
    if x.ndim == 1:
        out = out[..., 0, :]
    if y.ndim == 1:
        out = out[..., 0]
    return np.asarray(out).astype(x.dtype)  # vector @ vector: 0-D, as Paddle 3


def _matmul_case(
    xs: tuple[int, ...],
    ys: tuple[int, ...],
    dtype: str,
    name: str,
    tx: bool = False,
    ty: bool = False,
    alpha: float = 1.0,
) -> Case:
    x, y = rand(*xs, dtype=dtype), rand(*ys, dtype=dtype)
    return Case(
        {"X": x, "Y": y},
        {"transpose_X": tx, "transpose_Y": ty, "alpha": alpha},
        {"Out": ref_matmul(x, y, tx, ty, alpha)},
        grad=("X", "Y") if dtype == "float64" else (),
        name=name,
    )


MATMUL = [
    _matmul_case((3, 4), (4, 5), "float32", "matrix_float32"),
    _matmul_case((3, 4), (4, 2), "float64", "matrix"),
    _matmul_case((4, 3), (4, 2), "float64", "transpose_x", tx=True),
    _matmul_case((3, 4), (2, 4), "float64", "transpose_y", ty=True),
    _matmul_case((4, 3), (2, 4), "float64", "transpose_both_alpha", tx=True, ty=True, alpha=-1.5),
    _matmul_case((2, 3, 4), (2, 4, 2), "float64", "batched"),
    _matmul_case((2, 3, 3, 4), (2, 3, 4, 2), "float64", "same_batch_dims_rank4"),
    _matmul_case((3, 4), (2, 4, 5), "float64", "matrix_broadcast_over_y_batch"),
    _matmul_case((2, 2, 3, 4), (4, 2), "float64", "matrix_broadcast_over_x_batch"),
    _matmul_case((2, 4, 3), (4, 2), "float64", "batched_x_transposed", tx=True),
    _matmul_case((4,), (4, 3), "float64", "vector_matrix"),
    _matmul_case((3, 4), (4,), "float64", "matrix_vector"),
    _matmul_case((4,), (4,), "float64", "vector_vector"),
    _matmul_case((2, 3, 4), (4,), "float64", "batched_matrix_vector"),
    _matmul_case((3, 4), (4, 2), "int64", "int64"),
]

# -- elementwise -----------------------------------------------------------------------------------------


def paddle_y(x: np.ndarray, y: np.ndarray, axis: int) -> np.ndarray:
    """Y padded with 1s to X's rank, its dims placed from ``axis`` (-1: numpy's right alignment)."""
    if axis == -1:
        return y
    return y.reshape((1,) * axis + y.shape + (1,) * (x.ndim - axis - y.ndim))


ELEMENTWISE_REFS: dict[str, Callable[[np.ndarray, np.ndarray], np.ndarray]] = {
    "elementwise_add": np.add,
    "elementwise_sub": np.subtract,
    "elementwise_mul": np.multiply,
    "elementwise_div": np.divide,
}
# (name, X shape, Y shape, axis)
BROADCASTS = [
    ("same_shape", (3, 4), (3, 4), -1),
    ("bias_axis_1", (4, 5), (5,), 1),
    ("axis_0", (2, 3, 4), (2,), 0),
    ("axis_1_middle", (2, 3, 4, 2), (3, 4), 1),
    ("trailing_ones_of_y", (2, 3, 4), (3, 1), 1),
    ("y_dim_1_at_axis", (2, 3, 4), (1, 4), 1),
    ("numpy_trailing", (2, 3, 4), (4,), -1),
    ("numpy_both_sides", (3, 1), (1, 4), -1),
    ("numpy_x_lower_rank", (4,), (3, 4), -1),
    ("scalar_y", (3, 4), (1,), -1),
]


def _elementwise_cases(op_type: str) -> list[Case]:
    ref = ELEMENTWISE_REFS[op_type]
    make_y = away_from_zero if op_type == "elementwise_div" else rand
    cases = []
    for name, xs, ys, axis in BROADCASTS:
        for dtype in ("float32", "float64"):
            x, y = rand(*xs, dtype=dtype), make_y(*ys, dtype=dtype)
            cases.append(
                Case(
                    {"X": x, "Y": y},
                    {"axis": axis},
                    {"Out": ref(x, paddle_y(x, y, axis)).astype(dtype)},
                    grad=("X", "Y") if dtype == "float64" else (),
                    name=f"{name}_{dtype}",
                )
            )
    for dtype in ("int32", "int64"):
        x, y = rand(3, 4, dtype=dtype), rand(4, dtype=dtype)
        if op_type == "elementwise_div":
            x = np.array([[-7, 7, -7, 7], [6, -6, 5, 0], [1, 2, 3, 4]], dtype)
            y = np.array([2, -2, -3, 4], dtype)
            expected = np.trunc(x.astype(np.float64) / y).astype(dtype)  # C-style: toward zero
        else:
            expected = ref(x.astype(np.float64), y.astype(np.float64)).astype(dtype)
        cases.append(Case({"X": x, "Y": y}, {}, {"Out": expected}, name=dtype))
    lod = [[0, 2, 3]]
    x, y = rand(3, 2), make_y(2)
    cases.append(
        Case(
            {"X": x, "Y": y},
            {"axis": 1},
            {"Out": LoDTensor(ref(x, y), lod)},
            grad=("X", "Y"),
            lod={"X": lod},
            name="lod_shared",
        )
    )
    return cases


# -- activations -----------------------------------------------------------------------------------------


def ref_sigmoid(x: np.ndarray) -> np.ndarray:
    with np.errstate(over="ignore"):
        return (1.0 / (1.0 + np.exp(-x.astype(np.float64)))).astype(x.dtype)


ACTIVATION_REFS: dict[str, Callable[[np.ndarray], np.ndarray]] = {
    "relu": lambda x: np.where(x > 0, x, np.zeros_like(x)),
    "sigmoid": ref_sigmoid,
    "tanh": lambda x: np.tanh(x.astype(np.float64)).astype(x.dtype),
    "square": lambda x: x * x,
}
INT_ACTIVATIONS = ("relu", "square")


def _activation_cases(op_type: str) -> list[Case]:
    ref = ACTIVATION_REFS[op_type]
    inputs = [
        ("float32", rand(4, 5, dtype="float32")),
        ("float64", away_from_zero(3, 4)),
        ("rank3", away_from_zero(2, 3, 2)),
        ("rank1", away_from_zero(5)),
        ("rank4_short_rows", away_from_zero(2, 30, 3, 3)),  # relu views it as rows of 270
        ("large_magnitudes_float32", np.array([-100.0, -30.0, 0.0, 30.0, 100.0], np.float32)),
    ]
    if op_type in INT_ACTIVATIONS:
        inputs += [("int32", rand(3, 4, dtype="int32")), ("int64", rand(6, dtype="int64"))]
    cases = [
        Case({"X": x}, {}, {"Out": ref(x)}, grad=("X",) if x.dtype == np.float64 else (), name=name)
        for name, x in inputs
    ]
    lod = [[0, 1, 4]]
    x = away_from_zero(4, 2)
    cases.append(Case({"X": x}, {}, {"Out": LoDTensor(ref(x), lod)}, grad=("X",), lod={"X": lod}, name="lod_shared"))
    return cases


def ref_softmax(x: np.ndarray, axis: int = -1) -> np.ndarray:
    moved = np.moveaxis(x.astype(np.float64), axis, -1)
    rows = moved.reshape(-1, moved.shape[-1])
    out = np.array([np.exp(r - r.max()) / np.exp(r - r.max()).sum() for r in rows]).reshape(moved.shape)
    return np.moveaxis(out, -1, axis).astype(x.dtype)


def _softmax_case(x: np.ndarray, name: str, axis: int = -1) -> Case:
    return Case(
        {"X": x}, {"axis": axis}, {"Out": ref_softmax(x, axis)}, grad=("X",) if x.dtype == np.float64 else (), name=name
    )


SOFTMAX = [
    _softmax_case(rand(3, 5, dtype="float32"), "float32"),
    _softmax_case(rand(3, 4), "float64"),
    _softmax_case(rand(2, 3, 4), "axis_1", axis=1),
    _softmax_case(rand(3, 2), "axis_0", axis=0),
    _softmax_case(rand(5), "rank1"),
    _softmax_case(
        np.array([[1000.0, 0.0, -1000.0], [-1e4, -1e4 + 1, -1e4 + 2]], np.float32), "huge_values_stay_finite"
    ),
]

# -- scale, cast, assign --------------------------------------------------------------------------------------


def _scale_case(x: np.ndarray, name: str, scale: float = 1.0, bias: float = 0.0, after: bool = True) -> Case:
    wide = x.astype(np.float64)
    expected = (scale * wide + bias if after else scale * (wide + bias)).astype(x.dtype)
    return Case(
        {"X": x},
        {"scale": scale, "bias": bias, "bias_after_scale": after},
        {"Out": expected},
        grad=("X",) if x.dtype == np.float64 else (),
        name=name,
    )


SCALE = [
    _scale_case(rand(3, 4, dtype="float32"), "defaults"),
    _scale_case(rand(3, 4, dtype="float32"), "scale_and_bias_float32", 2.5, 0.5),
    _scale_case(rand(2, 3), "bias_after_scale", -1.5, 0.25),
    _scale_case(rand(2, 3), "bias_before_scale", -1.5, 0.25, after=False),
    _scale_case(rand(3, 2, dtype="int32"), "int32", 3.0, 1.0),
    _scale_case(rand(4, dtype="int64"), "int64_bias_before_scale", 2.0, -1.0, after=False),
]


def _cast_case(x: np.ndarray, out_dtype: str, name: str) -> Case:
    return Case(
        {"X": x},
        {"in_dtype": FLOAT_CODES[x.dtype.name], "out_dtype": FLOAT_CODES[out_dtype]},
        {"Out": np.array(x.tolist(), dtype=out_dtype)},
        grad=("X",) if x.dtype == np.float64 and out_dtype == "float64" else (),
        name=name,
    )


CAST = [
    _cast_case(np.array([[-1.7, -0.2, 0.0], [0.9, 2.5, 3.99]], np.float32), "int32", "float32_to_int32_truncates"),
    _cast_case(rand(3, 2, dtype="int64"), "float32", "int64_to_float32"),
    _cast_case(rand(2, 3), "float32", "float64_to_float32"),
    _cast_case(rand(4, dtype="bool"), "int64", "bool_to_int64"),
    _cast_case(np.array([0.0, -2.0, 0.5], np.float32), "bool", "float32_to_bool"),
    _cast_case(rand(2, 3), "float64", "float64_identity"),
]
# the narrow integers and complex numbers, which cast converts to and from (ONNX's models hold them)
CAST += [
    Case(
        {"X": x},
        {"in_dtype": DTYPE_TO_PROTO[x.dtype.name], "out_dtype": DTYPE_TO_PROTO[out]},
        {"Out": np.array(x.tolist(), dtype=out)},
        name=f"{x.dtype.name}_to_{out}",
    )
    for x, out in (
        (np.array([-128, -1, 0, 127], np.int8), "int32"),
        (np.array([-300, 5, 32000], np.int32), "int16"),
        (np.array([0, 200, 255], np.int64), "uint8"),
        (np.array([7, 0, 255], np.uint8), "float32"),
        (np.array([1.5, -2.0], np.float64), "complex64"),
    )
]

_lod_x = rand(3, 2)
_sparse = SelectedRows(np.array([4, 0, 4], np.int64), rand(3, 2), height=6)
ASSIGN = [
    Case({"X": x}, {}, {"Out": x.copy()}, grad=("X",) if x.dtype == np.float64 else (), name=name)
    for name, x in (
        ("float32", rand(3, 4, dtype="float32")),
        ("float64", rand(2, 3)),
        ("int64", rand(5, dtype="int64")),
        ("bool", rand(2, 2, dtype="bool")),
    )
] + [
    Case(
        {"X": _lod_x},
        {},
        {"Out": LoDTensor(_lod_x.copy(), [[0, 1, 3]])},
        lod={"X": [[0, 1, 3]]},
        grad=("X",),
        name="lod_shared",
    ),
    Case(
        {"X": _sparse}, {}, {"Out": SelectedRows(_sparse.rows.copy(), _sparse.values.copy(), 6)}, name="selected_rows"
    ),
]

# -- reductions ----------------------------------------------------------------------------------------------


def _mean_case(x: np.ndarray, name: str) -> Case:
    return Case(
        {"X": x},
        {},
        {"Out": np.array([x.astype(np.float64).sum() / x.size], x.dtype)},
        grad=("X",) if x.dtype == np.float64 else (),
        name=name,
    )


MEAN = [
    _mean_case(rand(3, 4, dtype="float32"), "float32"),
    _mean_case(rand(3, 4), "float64"),
    _mean_case(rand(5), "rank1"),
    _mean_case(rand(2, 3, 2), "rank3"),
    _mean_case(np.full((280, 250), 1.0, np.float16), "float16_sum_beyond_float16_range"),
]

# (name, X shape, dim, keep_dim, reduce_all)
REDUCTIONS = [
    ("dim0", (3, 4), [0], False, False),
    ("dim1", (3, 4), [1], False, False),
    ("negative_dim", (2, 3, 4), [-1], False, False),
    ("two_dims", (2, 3, 4), [0, 2], False, False),
    ("keep_dim", (2, 3, 4), [1], True, False),
    ("reduce_all", (2, 3), [0], False, True),
    ("reduce_all_keep_dim", (2, 3), [0], True, True),
    ("every_dim_listed", (2, 3), [0, 1], False, False),
    ("rank1", (5,), [0], False, False),
]


def _reduce_cases(op_type: str, dtypes: tuple[str, ...]) -> list[Case]:
    cases = []
    for name, shape, dim, keep, everything in REDUCTIONS:
        for dtype in dtypes:
            x = rand(*shape, dtype=dtype)
            axes = tuple(range(x.ndim)) if everything else tuple(d % x.ndim for d in dim)
            total = x.astype(np.float64).sum(axis=axes, keepdims=keep)
            if op_type == "reduce_mean":
                total = total / np.prod([x.shape[a] for a in axes])
            expected = np.asarray(total).reshape(np.shape(total) or (1,)).astype(dtype)
            cases.append(
                Case(
                    {"X": x},
                    {"dim": dim, "keep_dim": keep, "reduce_all": everything},
                    {"Out": expected},
                    grad=("X",) if dtype == "float64" else (),
                    name=f"{name}_{dtype}",
                )
            )
    return cases


# -- sum ---------------------------------------------------------------------------------------------------


def _dense_sum(values: list[np.ndarray]) -> np.ndarray:
    total = np.zeros(values[0].shape)
    for v in values:
        total = total + v
    return total.astype(values[0].dtype)


def _rows_added(dense: np.ndarray, sparse: list[SelectedRows]) -> np.ndarray:
    out = dense.astype(np.float64)
    for s in sparse:
        for row, value in zip(s.rows.tolist(), s.values):
            out[row] += value
    return out.astype(dense.dtype)


_two = [rand(3, 4, dtype="float32") for _ in range(2)]
_three = [rand(2, 3) for _ in range(3)]
_ints = [rand(4, dtype="int64") for _ in range(3)]
_sr_a = SelectedRows(np.array([1, 3, 1], np.int64), rand(3, 2), height=5)
_sr_b = SelectedRows(np.array([0, 1], np.int64), rand(2, 2), height=5)
_dense_b = rand(5, 2)
SUM = [
    Case({"X": _two}, {}, {"Out": _dense_sum(_two)}, name="two_float32"),
    Case({"X": _three}, {}, {"Out": _dense_sum(_three)}, grad=("X",), name="three_float64"),
    Case({"X": [_three[0]]}, {}, {"Out": _three[0].copy()}, grad=("X",), name="single_input"),
    Case({"X": _ints}, {}, {"Out": _dense_sum(_ints)}, name="int64"),
    Case({"X": [_dense_b, _sr_a]}, {}, {"Out": _rows_added(_dense_b, [_sr_a])}, name="dense_and_repeated_rows"),
    Case(
        {"X": [_sr_a, _dense_b, _sr_b]}, {}, {"Out": _rows_added(_dense_b, [_sr_a, _sr_b])}, name="selected_rows_first"
    ),
    Case(
        {"X": [_sr_a, _sr_b]},
        {},
        {"Out": SelectedRows(np.array([1, 3, 1, 0, 1], np.int64), np.concatenate([_sr_a.values, _sr_b.values]), 5)},
        name="selected_rows_only",
    ),
    Case(
        {"X": _three[:2]},
        {},
        {"Out": LoDTensor(_dense_sum(_three[:2]), [[0, 2]])},
        grad=("X",),
        lod={"X": [[0, 2]]},
        name="lod_of_first_input",
    ),
]

# -- fill_constant ---------------------------------------------------------------------------------------------


def _fill_case(shape: list[int], dtype: str, value: float, name: str) -> Case:
    return Case(
        {},
        {"shape": shape, "dtype": FLOAT_CODES[dtype], "value": value},
        {"Out": np.full(shape, value).astype(dtype)},
        name=name,
    )


FILL_CONSTANT = [
    _fill_case([2, 3], "float32", 1.5, "float32"),
    _fill_case([4], "float64", -0.25, "float64"),
    _fill_case([2, 2], "int64", 7.0, "int64"),
    _fill_case([3], "int32", -3.0, "int32"),
    _fill_case([1, 2], "bool", 1.0, "bool"),
    _fill_case([], "float32", 2.0, "scalar"),
    _fill_case([0, 3], "float32", 1.0, "empty"),
    Case({}, {"shape": [2]}, {"Out": np.zeros(2, np.float32)}, name="defaults"),
]

# -- matmul_v2 -------------------------------------------------------------------------------------------------


def _matmul_v2_case(
    xs: tuple[int, ...], ys: tuple[int, ...], dtype: str, name: str, tx: bool = False, ty: bool = False, **extra: object
) -> Case:
    x, y = rand(*xs, dtype=dtype), rand(*ys, dtype=dtype)
    return Case(
        {"X": x, "Y": y},
        {"trans_x": tx, "trans_y": ty, **extra},
        {"Out": ref_matmul(x, y, tx, ty)},
        grad=("X", "Y") if dtype == "float64" else (),
        name=name,
    )


_mm_lod = [[0, 1, 3]]
_mm_x, _mm_y = rand(3, 4), rand(4, 2)
MATMUL_V2 = [
    _matmul_v2_case((3, 4), (4, 5), "float32", "matrix_float32"),
    _matmul_v2_case((3, 4), (4, 2), "float64", "matrix"),
    _matmul_v2_case((4, 3), (4, 2), "float64", "trans_x", tx=True),
    _matmul_v2_case((3, 4), (2, 4), "float64", "trans_y", ty=True),
    _matmul_v2_case((2, 4, 3), (2, 2, 4), "float64", "trans_both_batched", tx=True, ty=True),
    _matmul_v2_case((2, 1, 3, 4), (3, 4, 2), "float64", "batch_broadcast"),
    _matmul_v2_case((2, 1, 3, 4), (1, 5, 4, 2), "float64", "batch_broadcast_both_ways"),
    _matmul_v2_case((2, 3, 4), (4, 5), "float32", "batched_x_matrix_y_float32"),
    _matmul_v2_case((4,), (4, 3), "float64", "vector_matrix"),
    _matmul_v2_case((3, 4), (4,), "float64", "matrix_vector"),
    _matmul_v2_case((4,), (4,), "float64", "vector_vector_is_0d"),
    _matmul_v2_case((4,), (3, 4), "float64", "vector_flags_ignored", tx=True, ty=True),
    _matmul_v2_case((4,), (2, 4, 3), "float64", "vector_batched_matrix"),
    _matmul_v2_case((2, 3, 4), (4,), "float64", "batched_matrix_vector"),
    _matmul_v2_case((3, 4), (4, 2), "int64", "int64"),
    _matmul_v2_case(
        (3, 4), (4, 2), "float32", "onednn_attributes_change_nothing", use_mkldnn=True, force_fp32_output=True
    ),
    Case(
        {"X": _mm_x, "Y": _mm_y},
        {},
        {"Out": LoDTensor(ref_matmul(_mm_x, _mm_y), _mm_lod)},
        grad=("X", "Y"),
        lod={"X": _mm_lod},
        name="lod_of_x_shared",
    ),
]

# -- Paddle 2's elementwise broadcasting; elementwise_pow, _max, _min ------------------------------------------

# (name, X shape, Y shape, axis, X's and Y's shapes as placed for numpy, written out by hand)
PLACED_BROADCASTS = [
    ("x_lower_rank_at_axis", (3,), (2, 3, 4), 1, (3, 1), (2, 3, 4)),
    ("both_ways_at_axis", (2, 1, 4), (3,), 1, (2, 1, 4), (3, 1)),
    ("y_dim_1_under_x_dim_1", (2, 3, 1), (3, 4), 1, (2, 3, 1), (3, 4)),
    ("fluid_trims_trailing_ones_of_y", (2, 3, 4), (4, 1), 2, (2, 3, 4), (4,)),
    ("fluid_trims_two_ones", (2, 3, 4, 5), (5, 1, 1), 3, (2, 3, 4, 5), (5,)),
    ("equal_shapes_any_axis", (2, 3), (2, 3), 1, (2, 3), (2, 3)),
    ("equal_ranks_axis_0_both_ways", (2, 1, 4), (1, 3, 4), 0, (2, 1, 4), (1, 3, 4)),
]
BINARY_REFS: dict[str, Callable[[np.ndarray, np.ndarray], np.ndarray]] = {
    **ELEMENTWISE_REFS,
    "elementwise_pow": np.power,
    "elementwise_max": np.maximum,
    "elementwise_min": np.minimum,
}


def _operands(op_type: str, xs: tuple[int, ...], ys: tuple[int, ...], dtype: str) -> tuple[np.ndarray, np.ndarray]:
    """Operands away from each op's poles and kinks: positive X for pow (log X in dY), Y away from 0 for div."""
    if op_type == "elementwise_pow":
        return rand(*xs, dtype=dtype, low=0.5, high=2.0), rand(*ys, dtype=dtype, low=-1.5, high=1.5)
    return rand(*xs, dtype=dtype), (away_from_zero if op_type == "elementwise_div" else rand)(*ys, dtype=dtype)


def _placed_cases(op_type: str) -> list[Case]:
    ref, cases = BINARY_REFS[op_type], []
    for name, xs, ys, axis, xv, yv in PLACED_BROADCASTS:
        x, y = _operands(op_type, xs, ys, "float64")
        expected = ref(x.reshape(xv), y.reshape(yv))
        cases.append(Case({"X": x, "Y": y}, {"axis": axis}, {"Out": expected}, grad=("X", "Y"), name=name))
    return cases


def _binary_cases(op_type: str) -> list[Case]:
    """elementwise_pow, _max, _min: the broadcasts of the first four ops in float32 and float64, integers."""
    ref, cases = BINARY_REFS[op_type], []
    for name, xs, ys, axis in BROADCASTS:
        for dtype in ("float32", "float64"):
            x, y = _operands(op_type, xs, ys, dtype)
            cases.append(
                Case(
                    {"X": x, "Y": y},
                    {"axis": axis},
                    {"Out": ref(x, paddle_y(x, y, axis)).astype(dtype)},
                    grad=("X", "Y") if dtype == "float64" else (),
                    name=f"{name}_{dtype}",
                )
            )
    for dtype in ("int32", "int64"):
        x, y = rand(3, 4, dtype=dtype), rand(4, dtype=dtype)
        if op_type == "elementwise_pow":
            y = np.abs(y) % 4  # numpy refuses negative integer powers (see int64_negative_exponents_round)
        cases.append(Case({"X": x, "Y": y}, {}, {"Out": ref(x, y)}, name=dtype))
    return cases


# 2 ** -1 and 3 ** -2 round to 0, 0 ** 0 is 1, (-2) ** 3 is -8: the power of doubles rounded (Paddle)
_int_base = np.array([2, 3, 0, -2, 5, -3], np.int64)
_int_exponent = np.array([-1, -2, 0, 3, 2, 1], np.int64)
ELEMENTWISE_POW = [
    *_binary_cases("elementwise_pow"),
    Case(
        {"X": _int_base, "Y": _int_exponent},
        {},
        {"Out": np.array([round(float(b) ** float(e)) for b, e in zip(_int_base, _int_exponent)], np.int64)},
        name="int64_negative_exponents_round",
    ),
]

_nan_x = np.array([np.nan, 1.0, 2.0, -np.inf], np.float32)
_nan_y = np.array([1.0, np.nan, 3.0, 0.0], np.float32)
ELEMENTWISE_MAX = [
    *_binary_cases("elementwise_max"),
    Case({"X": _nan_x, "Y": _nan_y}, {}, {"Out": np.array([np.nan, np.nan, 3.0, 0.0], np.float32)}, name="nan_wins"),
]
ELEMENTWISE_MIN = [
    *_binary_cases("elementwise_min"),
    Case(
        {"X": _nan_x, "Y": _nan_y}, {}, {"Out": np.array([np.nan, np.nan, 2.0, -np.inf], np.float32)}, name="nan_wins"
    ),
]


def _tie_case(op_type: str) -> Case:
    """The gradient where X and Y are equal (no finite difference there): halved between them, as Paddle 3."""
    x, y, dout = np.array([1.0, 2.0, 3.0]), np.array([1.0, 1.0, 4.0]), np.array([2.0, 4.0, 8.0])
    wins = np.greater if op_type == "elementwise_max_grad" else np.less
    tie = (x == y) * 0.5
    return Case(
        {"X": x, "Y": y, "Out@GRAD": dout},
        {},
        {"X@GRAD": dout * (wins(x, y) + tie), "Y@GRAD": dout * (wins(y, x) + tie)},
        name="ties_share_the_gradient",
    )


# -- gelu --------------------------------------------------------------------------------------------------------


def ref_gelu(x: np.ndarray, approximate: bool = False) -> np.ndarray:
    """x * Phi(x) with Python's erfc (erfc, not 1 + erf, keeps the left tail accurate), or the tanh form."""
    if approximate:
        a = math.sqrt(2 / math.pi)
        out = [0.5 * v * (1 + math.tanh(a * (v + 0.044715 * v**3))) for v in x.astype(np.float64).ravel()]
    else:
        out = [0.5 * v * math.erfc(-v / math.sqrt(2)) for v in x.astype(np.float64).ravel()]
    return np.array(out).reshape(x.shape).astype(x.dtype)


def _gelu_case(x: np.ndarray, name: str, approximate: bool = False, rtol: float = 1e-5, grad: bool = True) -> Case:
    return Case(
        {"X": x},
        {"approximate": approximate},
        {"Out": ref_gelu(x, approximate)},
        grad=("X",) if grad and x.dtype == np.float64 else (),
        rtol=rtol,
        atol=0.0 if rtol < 1e-6 else 1e-6,
        name=name,
    )


_gelu_lod = [[0, 1, 3]]
_gelu_lod_x = rand(3, 2)
GELU = [
    _gelu_case(rand(3, 5, dtype="float32", low=-4, high=4), "exact_float32"),
    _gelu_case(rand(3, 4, low=-4, high=4), "exact_float64"),
    _gelu_case(rand(2, 3, 4, low=-3, high=3), "exact_rank3"),
    _gelu_case(rand(3, 5, dtype="float32", low=-4, high=4), "approximate_float32", approximate=True),
    _gelu_case(rand(3, 4, low=-4, high=4), "approximate_float64", approximate=True),
    _gelu_case(rand(4, 3, dtype="float16", low=-3, high=3), "float16_computes_in_float32", rtol=2e-3),
    # erf to float64's rounding: Cody's three ranges, their borders (0.46875, 4) and tiny values
    _gelu_case(
        np.concatenate([np.linspace(-8.0, 8.0, 1601), [0.46875 * 2**0.5, 4 * 2**0.5, 1e-300, -1e-20]]),
        "exact_to_float64_rounding",
        rtol=3e-14,  # erfc's relative error is below 1e-15; rounding x / sqrt(2) adds up to 2 z^2 ulps
        grad=False,
    ),
    _gelu_case(np.linspace(-37.0, -8.0, 300), "exact_left_tail", rtol=1e-12, grad=False),
    _gelu_case(np.array([-40.0, -10.0, 0.0, 10.0, 40.0]), "exact_saturates", grad=False),
    Case(
        {"X": _gelu_lod_x},
        {"use_mkldnn": True, "use_cudnn": True},
        {"Out": LoDTensor(ref_gelu(_gelu_lod_x), _gelu_lod)},
        grad=("X",),
        lod={"X": _gelu_lod},
        name="lod_shared_extra_attributes",
    ),
]

# -- arg_max, arg_min ------------------------------------------------------------------------------------------


def ref_arg(x: np.ndarray, largest: bool, axis: int, keepdims: bool = False, flatten: bool = False) -> np.ndarray:
    """The index of the first largest (smallest) entry of each line along ``axis``, NaN never taken (Paddle)."""

    def first(line: np.ndarray) -> int:
        best = None
        for i, v in enumerate(line.tolist()):
            if v == v and (best is None or (v > line[best] if largest else v < line[best])):
                best = i
        return 0 if best is None else best

    if flatten or x.ndim == 0:
        index = np.array(first(x.reshape(-1)))
        return index.reshape((1,) * x.ndim) if keepdims else index
    out = np.apply_along_axis(first, axis, x)
    return np.expand_dims(out, axis) if keepdims else out


def _arg_case(op_type: str, x: np.ndarray, name: str, axis: int = -1, dtype: int = 3, **flags: bool) -> Case:
    out = ref_arg(x, op_type == "arg_max", axis % max(x.ndim, 1), **flags)
    return Case(
        {"X": x},
        {"axis": axis, "dtype": dtype, **flags},
        {"Out": out.astype("int32" if dtype == 2 else "int64")},
        name=name,
    )


def _arg_cases(op_type: str) -> list[Case]:
    ties = np.array([[1.0, 3.0, 3.0, 0.0], [0.0, 0.0, -1.0, -1.0]], np.float32)
    nan = np.array([[1.0, np.nan, 3.0, np.nan], [np.nan, -1.0, -2.0, 5.0]], np.float32)
    return [
        _arg_case(op_type, rand(3, 5, dtype="float32"), "last_axis_float32"),
        _arg_case(op_type, rand(3, 5), "axis_0_float64", axis=0),
        _arg_case(op_type, rand(2, 3, 4), "middle_axis_keepdims", axis=1, keepdims=True),
        _arg_case(op_type, rand(2, 3, 4), "negative_axis", axis=-2),
        _arg_case(op_type, rand(2, 3, 4), "flatten_is_0d", axis=0, flatten=True),
        _arg_case(op_type, rand(2, 3, 4), "flatten_keepdims", axis=0, flatten=True, keepdims=True),
        _arg_case(op_type, rand(4, 6, dtype="int64"), "int64_values_int32_indices", axis=1, dtype=2),
        _arg_case(op_type, rand(5, dtype="int32"), "rank1_is_0d_dtype_minus_1", axis=0, dtype=-1),
        _arg_case(op_type, np.array(2.5, np.float32), "0d_x", axis=0),
        _arg_case(op_type, ties, "ties_first_index", axis=1),
        _arg_case(op_type, nan, "nan_never_wins", axis=1),
    ]


# -- scale's tensors, integers and SelectedRows; cast; fill_constant's tensors and str_value ---------------------

_scale_x = rand(2, 3)
_scale_sr = SelectedRows(np.array([4, 0, 4], np.int64), rand(3, 2, dtype="float32"), height=6)
SCALE_MORE = [
    # an integer X: scale and bias truncated toward zero first (Paddle 3: 2.5 -> 2, 0.7 -> 0, -1.5 -> -1)
    Case(
        {"X": np.array([3, -3, 5], np.int64)},
        {"scale": 2.5, "bias": 0.7},
        {"Out": np.array([6, -6, 10], np.int64)},
        name="int64_fractional_scale_and_bias_truncate",
    ),
    Case(
        {"X": np.array([3, -3, 5], np.int32)},
        {"scale": -1.5, "bias": 2.9, "bias_after_scale": False},
        {"Out": np.array([-5, 1, -7], np.int32)},
        name="int32_bias_before_scale_truncates",
    ),
    Case(
        {"X": _scale_x, "ScaleTensor": np.array([4.0])},
        {"scale": 2.0, "bias": 1.0},
        {"Out": 4.0 * _scale_x + 1.0},
        grad=("X",),
        name="scale_tensor_overrides_scale",
    ),
    Case(
        {"X": _scale_x, "BiasTensor": np.array([-3.0], np.float32)},
        {"scale": 2.0, "bias": 1.0, "bias_after_scale": False},
        {"Out": 2.0 * (_scale_x - 3.0)},
        grad=("X",),
        name="bias_tensor_overrides_bias",
    ),
    Case(
        {"X": _scale_sr},
        {"scale": -2.0, "bias": 0.5, "use_mkldnn": True},
        {"Out": SelectedRows(_scale_sr.rows.copy(), (-2.0 * _scale_sr.values + 0.5).astype(np.float32), 6)},
        name="selected_rows",
    ),
]

CAST_MORE = [
    Case(
        {"X": np.array([1.5, -2.5, 0.0], np.float32)},
        {"in_dtype": FLOAT_CODES["float64"], "out_dtype": FLOAT_CODES["int32"]},
        {"Out": np.array([1, -2, 0], np.int32)},
        name="in_dtype_unchecked_as_paddle",
    ),
    Case(
        {"X": np.array([1.5, 0.0, -0.1])},
        {"in_dtype": FLOAT_CODES["float64"], "out_dtype": FLOAT_CODES["bool"], "use_mkldnn": True},
        {"Out": np.array([True, False, True])},
        name="float64_to_bool_extra_attributes",
    ),
]

FILL_CONSTANT_MORE = [
    Case(
        {},
        {"shape": [2], "dtype": FLOAT_CODES["int64"], "value": 1.0, "str_value": "12345678901234567"},
        {"Out": np.full(2, float("12345678901234567")).astype(np.int64)},  # read as a double, as Paddle 3
        name="str_value_int64",
    ),
    Case(
        {},
        {"shape": [3], "dtype": FLOAT_CODES["int32"], "str_value": "-2.7"},
        {"Out": np.full(3, -2, np.int32)},
        name="str_value_truncates",
    ),
    Case({}, {"shape": [2], "str_value": "-inf"}, {"Out": np.full(2, -np.inf, np.float32)}, name="str_value_inf"),
    Case(
        {},
        {"shape": [2], "dtype": FLOAT_CODES["float64"], "value": 0.1, "str_value": "0.1"},
        {"Out": np.full(2, 0.1)},
        name="str_value_full_precision",
    ),
    Case(
        {"ValueTensor": np.array([3.5])},
        {"shape": [2, 2], "value": 1.0, "place_type": 0, "use_mkldnn": True},
        {"Out": np.full((2, 2), 3.5, np.float32)},
        name="value_tensor",
    ),
    Case(
        {"ShapeTensor": np.array([2, 3], np.int32)},
        {"shape": [7], "dtype": FLOAT_CODES["int64"], "value": 4.0},
        {"Out": np.full((2, 3), 4, np.int64)},
        name="shape_tensor",
    ),
    Case(
        {"ShapeTensorList": [np.array([2], np.int64), np.array([1], np.int32)]},
        {"value": -1.0},
        {"Out": np.full((2, 1), -1.0, np.float32)},
        name="shape_tensor_list",
    ),
    Case({}, {"value": 2.0}, {"Out": np.array(2.0, np.float32)}, name="default_shape_is_0d"),
]

# Paddle's oneDNN / cuDNN / quantization attributes with values other than their defaults change nothing.
_extra_x, _extra_y = rand(2, 3, dtype="float32"), rand(3, dtype="float32")
EXTRA_ATTRIBUTES = {
    "elementwise_add": Case(
        {"X": _extra_x, "Y": _extra_y},
        {"use_mkldnn": True, "mkldnn_data_type": "bfloat16", "Scale_x": 0.5, "x_data_format": "NCHW"},
        {"Out": _extra_x + _extra_y},
        name="extra_attributes_change_nothing",
    ),
    "relu": Case(
        {"X": _extra_x},
        {"use_cudnn": True, "use_onednn": True},
        {"Out": np.maximum(_extra_x, 0)},
        name="extra_attributes_change_nothing",
    ),
    "softmax": Case(
        {"X": _extra_x},
        {"axis": 0, "data_format": "NHWC", "use_cudnn": True, "is_test": True},
        {"Out": ref_softmax(_extra_x, 0)},
        name="extra_attributes_change_nothing",
    ),
    "mul": Case(
        {"X": _extra_x, "Y": _extra_x.T.copy()},
        {"scale_y": [0.5, 2.0], "force_fp32_output": True},
        {"Out": ref_mul(_extra_x, _extra_x.T.copy())},
        name="extra_attributes_change_nothing",
    ),
    "matmul": Case(
        {"X": _extra_x, "Y": _extra_x},
        {"transpose_Y": True, "use_quantizer": True, "Scale_out": 3.0, "head_number": 1},
        {"Out": ref_matmul(_extra_x, _extra_x, ty=True)},
        name="extra_attributes_change_nothing",
    ),
}

# -- elementwise_mod, elementwise_floordiv (no gradient) ---------------------------------------------------------


def _remainder_case(op_type: str, x: np.ndarray, y: np.ndarray, axis: int, name: str) -> Case:
    """Python's % and // (the remainder takes the divisor's sign, the quotient rounds down), per element."""
    fn = (lambda a, b: a % b) if op_type == "elementwise_mod" else (lambda a, b: a // b)
    yv = paddle_y(x, y, axis)
    full = np.broadcast_arrays(x, yv)
    expected = np.array([fn(a.item(), b.item()) for a, b in zip(full[0].ravel(), full[1].ravel())])
    grad = ("X", "Y") if op_type == "elementwise_mod" and x.dtype == np.float64 else ()
    out = expected.reshape(full[0].shape).astype(x.dtype)
    return Case({"X": x, "Y": y}, {"axis": axis}, {"Out": out}, grad=grad, name=name)


REMAINDERS = {
    op_type: [
        _remainder_case(
            op_type, np.array([[7, -7, 7, -7], [5, 0, -1, 9]], dtype), np.array([3, 3, -3, -3], dtype), -1, dtype
        )
        for dtype in ("int32", "int64")
    ]
    + [
        _remainder_case(op_type, rand(3, 4), away_from_zero(4), -1, "float64"),
        _remainder_case(op_type, rand(2, 3, 2, dtype="float32"), away_from_zero(3, dtype="float32"), 1, "axis_1"),
    ]
    for op_type in ("elementwise_mod", "elementwise_floordiv")
}

# -- einsum -----------------------------------------------------------------------------------------------


def _einsum_case(equation: str, *shapes: tuple[int, ...], dtype: str = "float64", name: str = "") -> Case:
    operands = [rand(*shape, dtype=dtype) for shape in shapes]
    out = np.asarray(np.einsum(equation, *operands)).astype(dtype)
    grad = ("Operands",) if dtype == "float64" else ()
    return Case({"Operands": operands}, {"equation": equation}, {"Out": out}, grad=grad, name=name or equation)


EINSUM = [
    _einsum_case("ij,jk->ik", (3, 4), (4, 2), name="matmul"),
    _einsum_case("bij,bjk->bik", (2, 3, 4), (2, 4, 2), name="batch_matmul"),
    _einsum_case("ij,jk,kl->il", (2, 3), (3, 4), (4, 2), name="chain_of_three"),
    _einsum_case("ii->i", (3, 3), name="diagonal"),
    _einsum_case("ii", (3, 3), name="trace_implicit"),
    _einsum_case("iij,jk->ik", (3, 3, 2), (2, 4), name="diagonal_times_matrix"),
    _einsum_case("...ii->...i", (2, 3, 3), name="batch_diagonal"),
    _einsum_case("...ij,...jk->...ik", (2, 1, 3, 4), (5, 4, 2), name="ellipsis_broadcast"),
    _einsum_case("ij,ij->ij", (1, 3), (2, 3), name="size_1_broadcast"),
    _einsum_case("ij,k->i", (2, 3), (4,), name="summed_alone"),
    _einsum_case("ij->", (2, 3), name="sum_all"),
    _einsum_case("i,j", (3,), (2,), name="outer_implicit"),
    _einsum_case("ji", (2, 3), name="transpose_implicit"),
    _einsum_case(" i , i -> ", (4,), (4,), name="inner_with_spaces"),
    _einsum_case("bij,bjk->bik", (2, 3, 4), (2, 4, 2), dtype="float32", name="float32"),
    _einsum_case("ij,jk", (3, 4), (4, 2), dtype="int64", name="int64"),
]

CASES: dict[str, list[Case]] = {
    **REMAINDERS,
    "einsum": EINSUM,
    "mul": MUL,
    "matmul": MATMUL,
    **{op_type: _elementwise_cases(op_type) + _placed_cases(op_type) for op_type in ELEMENTWISE_REFS},
    **{op_type: _activation_cases(op_type) for op_type in ACTIVATION_REFS},
    "softmax": SOFTMAX,
    "scale": SCALE + SCALE_MORE,
    "cast": CAST + CAST_MORE,
    "assign": ASSIGN,
    "mean": MEAN,
    "reduce_sum": _reduce_cases("reduce_sum", ("float32", "float64", "int32", "int64")),
    "reduce_mean": _reduce_cases("reduce_mean", ("float32", "float64")),
    "sum": SUM,
    "fill_constant": FILL_CONSTANT + FILL_CONSTANT_MORE,
    "matmul_v2": MATMUL_V2,
    "elementwise_pow": ELEMENTWISE_POW + _placed_cases("elementwise_pow"),
    "elementwise_max": ELEMENTWISE_MAX + _placed_cases("elementwise_max"),
    "elementwise_min": ELEMENTWISE_MIN + _placed_cases("elementwise_min"),
    "elementwise_max_grad": [_tie_case("elementwise_max_grad")],
    "elementwise_min_grad": [_tie_case("elementwise_min_grad")],
    "gelu": GELU,
    "arg_max": _arg_cases("arg_max"),
    "arg_min": _arg_cases("arg_min"),
}
for _op_type, _case in EXTRA_ATTRIBUTES.items():
    CASES[_op_type].append(_case)

# -- bad input ------------------------------------------------------------------------------------------------

_f32 = np.zeros((3, 4), np.float32)

# (op type, case, pattern the ShapeError raised by inference must match)
INFER_ERRORS: list[tuple[str, Case, str]] = [
    ("mul", Case({"X": _f32, "Y": np.zeros((5, 2), np.float32)}), r"\[3, 4\].* 4 columns .*\[5, 2\].* 5 rows"),
    ("einsum", Case({"Operands": [_f32]}, {"equation": "ij,jk->ik"}), r"2 operand terms for 1 operands"),
    ("einsum", Case({"Operands": [_f32]}, {"equation": "ijk->i"}), r"term 'ijk' does not fit an operand of rank 2"),
    ("einsum", Case({"Operands": [_f32, _f32]}, {"equation": "ij,jk->ik"}), r"'j' is 4 in one operand and 3 in"),
    ("einsum", Case({"Operands": [_f32]}, {"equation": "ij->ii"}), r"output subscripts 'ii' repeat"),
    ("einsum", Case({"Operands": [_f32]}, {"equation": "i1->i"}), r"'1' in term 'i1' is not a subscript"),
    ("einsum", Case({"Operands": [_f32, np.zeros((4, 3))]}, {"equation": "ij,jk"}), r"different dtypes"),
    ("mul", Case({"X": _f32, "Y": np.zeros((4, 2))}), r"float32 \[3, 4\].*float64 \[4, 2\].* different dtypes"),
    ("mul", Case({"X": _f32, "Y": np.zeros((4, 2), np.float32)}, {"x_num_col_dims": 2}), r"x_num_col_dims=2"),
    ("matmul", Case({"X": _f32, "Y": _f32}), r"\[3, 4\].*\[3, 4\].* cannot be multiplied"),
    (
        "matmul",
        Case({"X": np.zeros((2, 3, 4)), "Y": np.zeros((3, 4, 2))}),
        r"batch dims of X .*\[2, 3, 4\]\) and Y .*\[3, 4, 2\]\) differ: matmul broadcasts an operand without",
    ),
    (
        "matmul",
        Case({"X": np.zeros((2, 2), np.int64), "Y": np.zeros((2, 2), np.int64)}, {"alpha": 2.0}),
        r"alpha=2.0 needs floating-point X and Y, not int64",
    ),
    ("elementwise_add", Case({"X": _f32, "Y": np.zeros((3, 5), np.float32)}), r"\[3, 4\].*\[3, 5\].* do not broadcast"),
    (
        "elementwise_mul",
        Case({"X": np.zeros((2, 3, 4)), "Y": np.zeros(4)}, {"axis": 1}),
        r"X .*\[2, 3, 4\]\) and Y .*\[4\]\) do not broadcast \(axis=1 aligns them as \[2, 3, 4\] and \[4, 1\]\)",
    ),
    (
        "elementwise_sub",
        Case({"X": _f32, "Y": np.zeros(4, np.float32)}, {"axis": 2}),
        r"\[3, 4\]\) and Y .*\[4\]\): axis=2 must be -1 or in \[0, 2\)",
    ),
    ("elementwise_div", Case({"X": _f32, "Y": np.zeros(4, np.int32)}), r"different dtypes"),
    ("elementwise_add", Case({"X": np.zeros(3, bool), "Y": np.zeros(3, bool)}), r"dtype bool"),
    ("relu", Case({"X": np.zeros(3, bool)}), r"relu: X .* has dtype bool"),
    ("sigmoid", Case({"X": np.zeros(3, np.int32)}), r"has dtype int32"),
    ("softmax", Case({"X": _f32}, {"axis": 2}), r"axis 2 is out of range for rank 2"),
    ("mean", Case({"X": np.zeros(3, np.int64)}), r"mean: X .* has dtype int64"),
    ("reduce_sum", Case({"X": _f32}, {"dim": [2]}), r"dim 2 is out of range for rank 2"),
    ("reduce_mean", Case({"X": _f32}, {"dim": []}), r"dim is empty"),
    ("sum", Case({"X": [_f32, np.zeros((3, 5), np.float32)]}), r"\[3, 5\]\) does not match .*\[3, 4\]\)\n"),
    ("sum", Case({"X": [_f32, np.zeros((3, 4))]}), r"different dtypes"),
    ("cast", Case({"X": _f32}, {"in_dtype": 5, "out_dtype": 99}), r"out_dtype=99 is not a dtype code"),
    ("fill_constant", Case({}, {"shape": [2, -1]}), r"negative dimensions"),
    (
        "matmul_v2",
        Case({"X": _f32, "Y": _f32}),
        r"\[3, 4\].*\[3, 4\].* cannot be multiplied \(trans_x=False, trans_y=False\)",
    ),
    (
        "matmul_v2",
        Case({"X": np.zeros((2, 3, 4)), "Y": np.zeros((3, 4, 2))}),
        r"the batch dims of X .*\[2, 3, 4\]\) and Y .*\[3, 4, 2\]\) do not broadcast",
    ),
    ("matmul_v2", Case({"X": np.zeros(()), "Y": np.zeros(3)}), r"must have at least one dimension"),
    ("matmul_v2", Case({"X": _f32, "Y": np.zeros((4, 2))}), r"different dtypes"),
    ("matmul_v2", Case({"X": _f32, "Y": _f32.T}, {"use_addto": True}), r"use_addto=True: gradients accumulated"),
    (
        "matmul",
        Case({"X": _f32, "Y": _f32.T}, {"fused_reshape_X": [4, 3], "fused_transpose_X": [1, 0]}),
        r"matmul: attribute fused_reshape_X=\[4, 3\]: oneDNN's fused layouts are not supported",
    ),
    ("matmul", Case({"X": _f32, "Y": _f32.T}, {"head_number": 2}), r"head_number=2: MKLML's multi-head"),
    (
        "elementwise_add",
        Case({"X": _f32, "Y": np.zeros((1, 3), np.float32)}, {"axis": 1}),
        r"axis=1 must be -1 or 0 for operands of the same rank",
    ),
    (
        "elementwise_max",
        Case({"X": np.zeros((2, 3, 4)), "Y": np.zeros(3)}, {"axis": -2}),
        r"axis=-2 must be -1 or in \[0, 3\)",
    ),
    (
        "elementwise_pow",
        Case({"X": np.zeros((2, 3, 4)), "Y": np.zeros((4, 2))}, {"axis": 2}),
        r"axis=2 places the dims \[4, 2\] from dim 2 of \[2, 3, 4\], past its end",
    ),
    ("elementwise_min", Case({"X": _f32, "Y": np.zeros(4, np.int64)}), r"different dtypes"),
    ("gelu", Case({"X": np.zeros(3, np.int64)}), r"gelu: X .* has dtype int64"),
    ("arg_max", Case({"X": _f32}, {"axis": 1, "dtype": 5}), r"dtype=5: the indices are int32 \(2\) or int64"),
    ("arg_max", Case({"X": _f32}, {"axis": 2}), r"axis 2 is out of range for rank 2"),
    ("arg_min", Case({"X": np.zeros((), np.float32)}, {"axis": 1}), r"axis 1 is out of range for a 0-D X"),
    ("arg_min", Case({"X": np.zeros(3, bool)}, {"axis": 0}), r"arg_min: X .* has dtype bool"),
    ("scale", Case({"X": _f32, "ScaleTensor": np.ones(2, np.float32)}), r"ScaleTensor .*\[2\]\) must hold one value"),
    ("scale", Case({"X": np.zeros(3, bool)}), r"scale: X .* has dtype bool"),
    ("cast", Case({"X": _f32}, {"in_dtype": 5, "out_dtype": 22}), r"out_dtype=22 \(bfloat16\) is not supported"),
    ("fill_constant", Case({}, {"shape": [2], "str_value": "two"}), r"str_value 'two' is not a number"),
    ("fill_constant", Case({}, {"shape": [2], "dtype": 22}), r"dtype=22 \(bfloat16\) is not supported"),
    (
        "fill_constant",
        Case({"ShapeTensor": np.array([2.0, 3.0])}),
        r"ShapeTensor .*float64 \[2\]\) has dtype float64; expected one of int32, int64",
    ),
    (
        "fill_constant",
        Case({"ShapeTensorList": [np.array([2], np.int64), np.array([1, 2], np.int64)]}),
        r"ShapeTensorList entry .*\[2\]\) must be one int32 or int64 value",
    ),
    ("fill_constant", Case({"ValueTensor": np.ones((2, 2))}), r"ValueTensor .*\[2, 2\]\) must hold one value"),
]

# (op type, case, pattern the BlockirError raised by the kernel must match)
KERNEL_ERRORS: list[tuple[str, Case, str]] = [
    (
        "elementwise_mod",
        Case({"X": np.ones(3, np.int32), "Y": np.array([1, 0, 2], np.int32)}),
        r"elementwise_mod: integer division by zero",
    ),
    (
        "elementwise_floordiv",
        Case({"X": np.ones(3, np.int64), "Y": np.array([0, 1, 2], np.int64)}),
        r"elementwise_floordiv: integer division by zero",
    ),
    (
        "elementwise_div",
        Case({"X": np.ones(3, np.int64), "Y": np.array([1, 0, 2], np.int64)}),
        r"integer division by zero",
    ),
    ("sum", Case({"X": [_sr_a, SelectedRows(np.array([0]), rand(1, 2), height=7)]}), r"heights differ: \[5, 7\]"),
    ("sum", Case({"X": [_f32, np.zeros((4, 3), np.float32)]}), r"different shapes: \[\[3, 4\], \[4, 3\]\]"),
    (
        "matmul_v2",
        Case({"X": _f32, "Y": np.zeros((5, 2), np.float32)}),
        r"X \[3, 4\] and Y \[5, 2\] cannot be multiplied",
    ),
    (
        "matmul",
        Case({"X": np.zeros((2, 3, 4)), "Y": np.zeros((3, 4, 2))}),
        r"the batch dims of X \[2, 3, 4\] and Y \[3, 4, 2\] differ",
    ),
    ("elementwise_add", Case({"X": _f32, "Y": np.zeros(3, np.float32)}), r"X \[3, 4\] and Y \[3\] do not broadcast"),
    ("elementwise_mul", Case({"X": _f32, "Y": np.zeros(4, np.float32)}, {"axis": 5}), r"axis=5 must be -1 or in"),
    ("arg_max", Case({"X": np.zeros((0, 3), np.float32)}, {"axis": 0}), r"X of shape \[0, 3\] has no entries"),
    (
        "fill_constant",
        Case({"ShapeTensor": np.array([2, -3], np.int64)}),
        r"shape \[2, -3\] must not have negative dimensions",
    ),
]
