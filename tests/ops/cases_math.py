"""Test cases of the tensor-math ops (blockir.ops.math), as data.

Expected values are computed here in plain numpy, independently of the kernels:
broadcasting by explicit reshapes instead of Paddle's trimming rules, products
with ``einsum``, activations in float64 then cast. Cases whose ``grad`` names
inputs hold float64 values away from kinks (relu at 0) and poles (division by 0).

``INFER_ERRORS`` and ``KERNEL_ERRORS`` list bad inputs each op must reject, with
a pattern its message must match.
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np

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
    return out.reshape(out.shape or (1,)).astype(x.dtype)


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
    _matmul_case((2, 1, 3, 4), (3, 4, 2), "float64", "batch_broadcast"),
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

# -- concat, reshape2 ------------------------------------------------------------------------------------------


def _concat_case(parts: list[np.ndarray], axis: int, name: str) -> Case:
    return Case(
        {"X": parts},
        {"axis": axis},
        {"Out": np.concatenate(parts, axis=axis)},
        grad=("X",) if parts[0].dtype == np.float64 else (),
        name=name,
    )


CONCAT = [
    _concat_case([rand(2, 3, dtype="float32"), rand(1, 3, dtype="float32")], 0, "axis0_float32"),
    _concat_case([rand(2, 3), rand(2, 1), rand(2, 2)], 1, "three_inputs_axis1"),
    _concat_case([rand(2, 1, 2), rand(2, 2, 2)], -2, "negative_axis"),
    _concat_case([rand(3), rand(2)], 0, "rank1"),
    _concat_case([rand(2, 2)], 0, "single_input"),
    _concat_case([rand(2, 2, dtype="int64"), rand(2, 1, dtype="int64")], 1, "int64"),
    _concat_case([rand(1, 2, dtype="bool"), rand(1, 2, dtype="bool")], 0, "bool"),
]


def _reshape_case(x: np.ndarray, shape: list[int], expected_shape: tuple[int, ...], name: str) -> Case:
    return Case(
        {"X": x},
        {"shape": shape},
        {"Out": x.ravel().reshape(expected_shape), "XShape": np.empty((0, *x.shape), x.dtype)},
        grad=("X",) if x.dtype == np.float64 else (),
        name=name,
    )


RESHAPE2 = [
    _reshape_case(rand(2, 3, 4, dtype="float32"), [6, 4], (6, 4), "explicit_float32"),
    _reshape_case(rand(2, 3, 4), [0, -1], (2, 12), "copy_dim_and_infer"),
    _reshape_case(rand(2, 6), [-1], (12,), "flatten"),
    _reshape_case(rand(2, 6), [0, 3, 2], (2, 3, 2), "split_dim"),
    _reshape_case(rand(4, 3), [3, -1, 2], (3, 2, 2), "infer_middle"),
    _reshape_case(rand(3, 4, dtype="int64"), [4, 3], (4, 3), "int64"),
    _reshape_case(rand(3, 2, dtype="bool"), [-1, 1], (6, 1), "bool"),
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

CASES: dict[str, list[Case]] = {
    "mul": MUL,
    "matmul": MATMUL,
    **{op_type: _elementwise_cases(op_type) for op_type in ELEMENTWISE_REFS},
    **{op_type: _activation_cases(op_type) for op_type in ACTIVATION_REFS},
    "softmax": SOFTMAX,
    "scale": SCALE,
    "cast": CAST,
    "assign": ASSIGN,
    "mean": MEAN,
    "reduce_sum": _reduce_cases("reduce_sum", ("float32", "float64", "int32", "int64")),
    "reduce_mean": _reduce_cases("reduce_mean", ("float32", "float64")),
    "sum": SUM,
    "concat": CONCAT,
    "reshape2": RESHAPE2,
    "fill_constant": FILL_CONSTANT,
}

# -- bad input ------------------------------------------------------------------------------------------------

_f32 = np.zeros((3, 4), np.float32)

# (op type, case, pattern the ShapeError raised by inference must match)
INFER_ERRORS: list[tuple[str, Case, str]] = [
    ("mul", Case({"X": _f32, "Y": np.zeros((5, 2), np.float32)}), r"\[3, 4\].* 4 columns .*\[5, 2\].* 5 rows"),
    ("mul", Case({"X": _f32, "Y": np.zeros((4, 2))}), r"float32 \[3, 4\].*float64 \[4, 2\].* different dtypes"),
    ("mul", Case({"X": _f32, "Y": np.zeros((4, 2), np.float32)}, {"x_num_col_dims": 2}), r"x_num_col_dims=2"),
    ("matmul", Case({"X": _f32, "Y": _f32}), r"\[3, 4\].*\[3, 4\].* cannot be multiplied"),
    ("matmul", Case({"X": np.zeros((2, 3, 4)), "Y": np.zeros((3, 4, 2))}), r"batch dims .* do not broadcast"),
    (
        "matmul",
        Case({"X": np.zeros((2, 2), np.int64), "Y": np.zeros((2, 2), np.int64)}, {"alpha": 2.0}),
        r"alpha=2.0 needs floating-point X and Y, not int64",
    ),
    ("elementwise_add", Case({"X": _f32, "Y": np.zeros((3, 5), np.float32)}), r"\[3, 4\].*\[3, 5\].* do not broadcast"),
    (
        "elementwise_mul",
        Case({"X": np.zeros((2, 3, 4)), "Y": np.zeros(4)}, {"axis": 1}),
        r"Y .*\[4\]\) does not match X .*\[2, 3, 4\]\) at axis=1",
    ),
    ("elementwise_sub", Case({"X": _f32, "Y": np.zeros(4, np.float32)}, {"axis": 2}), r"axis=2 does not place Y"),
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
    (
        "concat",
        Case({"X": [_f32, np.zeros((2, 5), np.float32)]}),
        r"\[2, 5\]\) does not match .*\[3, 4\]\) outside axis 0",
    ),
    ("concat", Case({"X": [_f32]}, {"axis": 3}), r"axis 3 is out of range"),
    ("reshape2", Case({"X": _f32}, {"shape": [5, -1]}), r"12 elements cannot be reshaped to \[5, -1\]"),
    ("reshape2", Case({"X": _f32}, {"shape": [5, 2]}), r"cannot be reshaped to \[5, 2\] \(10 elements\)"),
    ("reshape2", Case({"X": _f32}, {"shape": [-1, -1]}), r"one -1"),
    ("reshape2", Case({"X": _f32}, {"shape": [1, 1, 0]}), r"0 copies X's dim"),
    ("cast", Case({"X": _f32}, {"in_dtype": 6, "out_dtype": 5}), r"in_dtype=6 \(float64\) does not match X"),
    ("cast", Case({"X": _f32}, {"in_dtype": 5, "out_dtype": 99}), r"out_dtype=99 is not a dtype code"),
    ("fill_constant", Case({}, {"shape": [2, -1]}), r"negative dimensions"),
]

# (op type, case, pattern the BlockirError raised by the kernel must match)
KERNEL_ERRORS: list[tuple[str, Case, str]] = [
    (
        "elementwise_div",
        Case({"X": np.ones(3, np.int64), "Y": np.array([1, 0, 2], np.int64)}),
        r"integer division by zero",
    ),
    ("reshape2", Case({"X": _f32}, {"shape": [5, -1]}), r"X of shape \[3, 4\] cannot be reshaped to \[5, -1\]"),
    ("sum", Case({"X": [_sr_a, SelectedRows(np.array([0]), rand(1, 2), height=7)]}), r"heights differ: \[5, 7\]"),
    ("sum", Case({"X": [_f32, np.zeros((4, 3), np.float32)]}), r"different shapes: \[\[3, 4\], \[4, 3\]\]"),
]
