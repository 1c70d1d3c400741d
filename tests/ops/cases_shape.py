"""Test cases of the shape ops (blockir.ops.shape), as data: expected values in plain numpy.

The expected shapes are spelled out in each case (reshapes, flattens, squeezes) and the slices as numpy
index expressions, so that no case repeats the ops' rules for 0 and -1, negative axes, clamping or the order
in which unsqueeze inserts; transposes are gathered element by element. Values given as tensors
(``AxisTensor``, ``ShapeTensor``, ``StartsTensor`` and the like) are int32 or int64 arrays.

``INFER_ERRORS`` and ``KERNEL_ERRORS`` list bad inputs each op must reject, with a pattern its message must
match.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from blockir.ops.values import LoDTensor
from tests.ops.harness import Case

RNG = np.random.default_rng(20240611)


def rand(*shape: int, dtype: str = "float64") -> np.ndarray:
    if dtype in ("int32", "int64"):
        return RNG.integers(-5, 6, size=shape).astype(dtype)
    if dtype == "bool":
        return RNG.random(shape) < 0.5
    return RNG.uniform(-2.0, 2.0, size=shape).astype(dtype)


def i32(*values: int) -> np.ndarray:
    return np.array(values, np.int32)


def i64(*values: int) -> np.ndarray:
    return np.array(values, np.int64)


def _grad(x: np.ndarray, slot: str = "X") -> tuple[str, ...]:
    return (slot,) if x.dtype == np.float64 else ()


# -- concat --------------------------------------------------------------------------------------------------


def _concat_case(parts: list[np.ndarray], axis: int, name: str, joined_on: int | None = None, **inputs) -> Case:
    """``joined_on``: the axis the parts really join on, when AxisTensor (in ``inputs``) overrides ``axis``."""
    return Case(
        {"X": parts, **inputs},
        {"axis": axis},
        {"Out": np.concatenate(parts, axis=axis if joined_on is None else joined_on)},
        grad=_grad(parts[0]),
        name=name,
    )


CONCAT = [
    _concat_case([rand(2, 3, dtype="float32"), rand(1, 3, dtype="float32")], 0, "axis0_float32"),
    _concat_case([rand(2, 3), rand(2, 1), rand(2, 2)], 1, "three_inputs_axis1"),
    _concat_case([rand(2, 1, 2), rand(2, 2, 2)], -2, "negative_axis"),
    _concat_case([rand(3), rand(2)], 0, "rank1"),
    _concat_case([rand(2, 2)], 0, "single_input"),
    _concat_case([rand(2, 0), rand(2, 3)], 1, "empty_part"),
    _concat_case([rand(2, 2, dtype="int64"), rand(2, 1, dtype="int64")], 1, "int64"),
    _concat_case([rand(1, 2, dtype="bool"), rand(1, 2, dtype="bool")], 0, "bool"),
    _concat_case([rand(2, 3), rand(2, 2)], 0, "axis_tensor", joined_on=1, AxisTensor=i32(1)),
    _concat_case([rand(2, 3, 1), rand(2, 3, 2)], 0, "axis_tensor_negative", joined_on=2, AxisTensor=i64(-1)),
]

# -- reshape2 ------------------------------------------------------------------------------------------------


def _reshape_case(x: np.ndarray, attrs: dict, expected_shape: tuple[int, ...], name: str, **inputs) -> Case:
    return Case(
        {"X": x, **inputs},
        attrs,
        {"Out": x.reshape(expected_shape), "XShape": np.empty((0, *x.shape), x.dtype)},
        grad=_grad(x),
        name=name,
    )


RESHAPE2 = [
    _reshape_case(rand(2, 3, 4, dtype="float32"), {"shape": [6, 4]}, (6, 4), "explicit_float32"),
    _reshape_case(rand(2, 3, 4), {"shape": [0, -1]}, (2, 12), "copy_dim_and_infer"),
    _reshape_case(rand(2, 6), {"shape": [-1]}, (12,), "flatten"),
    _reshape_case(rand(2, 6), {"shape": [0, 3, 2]}, (2, 3, 2), "split_dim"),
    _reshape_case(rand(4, 3), {"shape": [3, -1, 2]}, (3, 2, 2), "infer_middle"),
    _reshape_case(rand(2, 3, 4), {"shape": [0, 0, 2, 2]}, (2, 3, 2, 2), "copy_two_dims"),
    _reshape_case(rand(1, 1), {"shape": []}, (), "to_0d"),
    _reshape_case(rand(3, 4, dtype="int64"), {"shape": [4, 3]}, (4, 3), "int64"),
    _reshape_case(rand(3, 2, dtype="bool"), {"shape": [-1, 1]}, (6, 1), "bool"),
    _reshape_case(rand(2, 3, 4), {"shape": [4, -1]}, (4, 6), "shape_tensor_list", ShapeTensor=[i32(4), i64(6)]),
    _reshape_case(rand(2, 3, 4), {"shape": [-1, -1]}, (2, 12), "tensor_list_copy", ShapeTensor=[i32(0), i32(-1)]),
    _reshape_case(rand(2, 3, 4), {}, (4, 3, 2), "shape_tensor", Shape=i32(4, 0, -1)),
    _reshape_case(
        rand(2, 3, 4),
        {"shape": [24]},
        (2, 12),
        "tensor_list_before_tensor_before_attribute",
        Shape=i64(6, 4),
        ShapeTensor=[i32(2), i32(12)],
    ),
    _reshape_case(
        rand(2, 3, 4, dtype="float32"),
        {"shape": [-1], "use_mkldnn": True, "mkldnn_data_type": "bfloat16", "use_quantizer": True},
        (24,),
        "onednn_attributes_ignored",
    ),
]

# -- transpose2 ----------------------------------------------------------------------------------------------


def ref_transpose(x: np.ndarray, perm: Sequence[int]) -> np.ndarray:
    """Out[i] = X[j] with j[perm[k]] = i[k], element by element (``perm`` without negative entries)."""
    out = np.empty([x.shape[p] for p in perm], x.dtype)
    for index in np.ndindex(*out.shape):
        source = [0] * x.ndim
        for k, p in enumerate(perm):
            source[p] = index[k]
        out[index] = x[tuple(source)]
    return out


def _transpose_case(x: np.ndarray, axis: list[int], perm: list[int], name: str, **attrs) -> Case:
    return Case(
        {"X": x},
        {"axis": axis, **attrs},
        {"Out": ref_transpose(x, perm), "XShape": np.empty((0, *x.shape), x.dtype)},
        grad=_grad(x),
        name=name,
    )


TRANSPOSE2 = [
    _transpose_case(rand(2, 3, dtype="float32"), [1, 0], [1, 0], "matrix_float32"),
    _transpose_case(rand(2, 3, 4), [2, 0, 1], [2, 0, 1], "rank3"),
    _transpose_case(rand(2, 3, 4), [-1, 0, -2], [2, 0, 1], "negative_axes"),
    _transpose_case(rand(2, 3, 1, 2), [0, 2, 3, 1], [0, 2, 3, 1], "nchw_to_nhwc"),
    _transpose_case(rand(3), [0], [0], "rank1"),
    _transpose_case(rand(), [], [], "rank0"),
    _transpose_case(rand(2, 3, dtype="int64"), [1, 0], [1, 0], "int64"),
    _transpose_case(rand(2, 1, 3, dtype="bool"), [2, 1, 0], [2, 1, 0], "bool"),
    _transpose_case(
        rand(2, 3, 2), [0, 2, 1], [0, 2, 1], "layout_attributes_ignored", data_format="NHWC", use_mkldnn=True
    ),
]

# -- flatten_contiguous_range ---------------------------------------------------------------------------------


def _flatten_case(x: np.ndarray, start: int, stop: int, expected_shape: tuple[int, ...], name: str) -> Case:
    return _reshape_case(x, {"start_axis": start, "stop_axis": stop}, expected_shape, name)


FLATTEN_CONTIGUOUS_RANGE = [
    _reshape_case(rand(2, 3, 4, dtype="float32"), {}, (2, 3, 4), "defaults_flatten_dim1_alone"),
    _flatten_case(rand(2, 3, 4), 1, 2, (2, 12), "trailing_dims"),
    _flatten_case(rand(2, 3, 4), 0, -1, (24,), "all"),
    _flatten_case(rand(2, 3, 4, 5), -2, -1, (2, 3, 20), "negative_axes"),
    _flatten_case(rand(2, 3, 4, dtype="int64"), 0, 1, (6, 4), "leading_int64"),
    _flatten_case(rand(5, dtype="bool"), 0, 0, (5,), "rank1_bool"),
    _flatten_case(rand(), 0, -1, (1,), "rank0_gives_1"),
]

# -- squeeze2, unsqueeze2 ---------------------------------------------------------------------------------------


def _squeeze_case(x: np.ndarray, axes: list[int], expected_shape: tuple[int, ...], name: str) -> Case:
    return _reshape_case(x, {"axes": axes}, expected_shape, name)


SQUEEZE2 = [
    _squeeze_case(rand(2, 1, 3, 1), [], (2, 3), "every_dim_of_1"),
    _squeeze_case(rand(1, 3, 1, 2, dtype="float32"), [2], (1, 3, 2), "listed_float32"),
    _squeeze_case(rand(1, 3, 1, 2), [-2, 0], (3, 2), "negative_axes"),
    _squeeze_case(rand(2, 3, 1), [1, 2], (2, 3), "listed_dim_not_1_stays"),
    _squeeze_case(rand(2, 3, 1), [2, -1], (2, 3), "dim_listed_twice"),
    _squeeze_case(rand(2, 3), [], (2, 3), "nothing_to_squeeze"),
    _squeeze_case(rand(1), [], (), "to_0d"),
    _squeeze_case(rand(3, 1, dtype="int64"), [1], (3,), "int64"),
    _squeeze_case(rand(1, 2, dtype="bool"), [0], (2,), "bool"),
]


def _unsqueeze_case(x: np.ndarray, axes: list[int], expected_shape: tuple[int, ...], name: str, **inputs) -> Case:
    return _reshape_case(x, {"axes": axes}, expected_shape, name, **inputs)


UNSQUEEZE2 = [
    _unsqueeze_case(rand(3, 4), [0], (1, 3, 4), "front"),
    _unsqueeze_case(rand(3, 4, dtype="float32"), [-1], (3, 4, 1), "back_float32"),
    _unsqueeze_case(rand(3, 4), [0, 2], (1, 3, 1, 4), "each_in_the_shape_made_so_far"),
    _unsqueeze_case(rand(3, 4), [1, 1], (3, 1, 1, 4), "same_place_twice"),
    _unsqueeze_case(rand(3, 4), [-1, 0], (1, 3, 4, 1), "negative_then_front"),
    _unsqueeze_case(rand(3, 4), [2], (3, 4, 1), "at_the_end"),
    _unsqueeze_case(rand(), [0], (1,), "rank0"),
    _unsqueeze_case(rand(3, dtype="int64"), [1], (3, 1), "int64"),
    _unsqueeze_case(rand(2, dtype="bool"), [0, 0], (1, 1, 2), "bool"),
    _unsqueeze_case(rand(3, 4), [], (1, 3, 4, 1), "axes_tensor", AxesTensor=i32(0, -1)),
    _unsqueeze_case(rand(3, 4), [], (1, 3, 1, 4), "axes_tensor_list", AxesTensorList=[i64(1), i32(0)]),
    _unsqueeze_case(
        rand(3, 4),
        [0],
        (3, 4, 1),
        "tensor_list_before_tensor_before_attribute",
        AxesTensor=i32(0),
        AxesTensorList=[i32(2)],
    ),
]

# -- split -------------------------------------------------------------------------------------------------------


def _split_case(x: np.ndarray, attrs: dict, parts: list[np.ndarray], name: str, **inputs) -> Case:
    return Case({"X": x, **inputs}, attrs, {"Out": parts}, grad=_grad(x), name=name)


_s1, _s2, _s3 = rand(2, 6), rand(3, 4, dtype="float32"), rand(2, 3, 6)
_s4, _s5, _s6 = rand(2, 4), rand(2, 4), rand(3)
SPLIT = [
    _split_case(_s1, {"axis": 1, "num": 3}, [_s1[:, 0:2], _s1[:, 2:4], _s1[:, 4:6]], "num_equal_parts"),
    _split_case(_s2, {"sections": [1, 2]}, [_s2[0:1], _s2[1:3]], "sections_float32"),
    _split_case(_s3, {"axis": -1, "sections": [2, -1, 1]}, [_s3[..., 0:2], _s3[..., 2:5], _s3[..., 5:6]], "infer_one"),
    _split_case(_s1, {"axis": 0, "num": 1}, [_s1], "one_part"),
    _split_case(_s6, {"sections": [0, 3]}, [_s6[0:0], _s6[0:3]], "empty_part"),
    _split_case(_s4, {"num": 2}, [_s4[:, 0:2], _s4[:, 2:4]], "axis_tensor", AxisTensor=i32(1)),
    _split_case(
        _s5,
        {"axis": 1, "sections": [-1, -1]},
        [_s5[:, 0:1], _s5[:, 1:4]],
        "sections_tensor_list",
        SectionsTensorList=[i32(1), i64(3)],
    ),
    _split_case(
        _s5,
        {"axis": 1, "num": 2},
        [_s5[:, 0:2], _s5[:, 2:4]],
        "num_before_sections_tensor_list",
        SectionsTensorList=[i32(1), i32(3)],
    ),
    _split_case(
        _s4.astype("int64"), {"axis": 1, "num": 2}, [_s4[:, :2].astype("int64"), _s4[:, 2:].astype("int64")], "int64"
    ),
    _split_case(_s4 > 0, {"sections": [1, 1]}, [_s4[:1] > 0, _s4[1:] > 0], "bool"),
]

FILL_ZEROS_LIKE = [
    Case({"X": rand(2, 3, dtype="float32")}, {}, {"Out": np.zeros((2, 3), np.float32)}, name="float32"),
    Case({"X": rand(4)}, {}, {"Out": np.zeros(4)}, name="float64"),
    Case({"X": rand(2, 2, dtype="int64")}, {}, {"Out": np.zeros((2, 2), np.int64)}, name="int64"),
    Case({"X": rand(3, dtype="bool")}, {}, {"Out": np.zeros(3, bool)}, name="bool"),
]

# -- slice -------------------------------------------------------------------------------------------------------


def _slice_case(x: np.ndarray, attrs: dict, out: np.ndarray, name: str, **inputs) -> Case:
    return Case({"Input": x, **inputs}, attrs, {"Out": out}, grad=_grad(x, "Input"), name=name)


_x, _xf, _xi, _xb = rand(3, 4, 5), rand(3, 4, dtype="float32"), rand(2, 5, dtype="int64"), rand(4, 2, dtype="bool")
SLICE = [
    _slice_case(_x, {"axes": [0, 2], "starts": [1, 0], "ends": [3, 2]}, _x[1:3, :, 0:2], "two_axes"),
    _slice_case(_x, {"axes": [1], "starts": [-3], "ends": [-1]}, _x[:, 1:3], "negative_bounds"),
    _slice_case(_x, {"axes": [0, 1], "starts": [-10, 2], "ends": [10, 1000]}, _x[0:3, 2:4], "clamped"),
    _slice_case(_x, {"axes": [-1], "starts": [1], "ends": [4]}, _x[..., 1:4], "negative_axis"),
    _slice_case(_x, {"axes": [0], "starts": [2], "ends": [2]}, _x[2:2], "empty"),
    _slice_case(_x, {"axes": [0], "starts": [5], "ends": [7]}, _x[3:3], "start_past_the_end_empty"),
    _slice_case(
        _x,
        {"axes": [0, 1], "starts": [1, 2], "ends": [2, 3], "decrease_axis": [0]},
        _x[1:2, 2:3, :].reshape(1, 5),
        "decrease_axis",
    ),
    _slice_case(
        _x[0, 0], {"axes": [0], "starts": [1], "ends": [2], "decrease_axis": [0]}, _x[0, 0, 1:2].reshape(()), "to_0d"
    ),
    _slice_case(
        _x, {"axes": [1], "starts": [1], "ends": [3], "infer_flags": [-1]}, _x[:, 1:3], "infer_flags_unknown_dim"
    ),
    _slice_case(
        _x,
        {"axes": [0, 2], "infer_flags": [-1, -1]},
        _x[1:3, :, 0:2],
        "starts_ends_tensors",
        StartsTensor=i32(1, 0),
        EndsTensor=i64(3, 2),
    ),
    _slice_case(
        _x,
        {"axes": [1], "infer_flags": [-1]},
        _x[:, 3:4],
        "tensor_lists",
        StartsTensorList=[i32(-1)],
        EndsTensorList=[i64(1000)],
    ),
    _slice_case(
        _x,
        {"axes": [0], "infer_flags": [-1], "decrease_axis": [0]},
        _x[2],
        "last_by_tensor_index",  # Paddle's x[-1]: starts -1, ends 0
        StartsTensorList=[i32(-1)],
        EndsTensorList=[i32(0)],
    ),
    _slice_case(
        _x,
        {"axes": [0], "starts": [1], "ends": [3]},
        _x[0:3],
        "tensor_before_tensor_list_before_attribute",
        StartsTensor=i32(0),
        StartsTensorList=[i32(2)],
    ),
    _slice_case(_xf, {"axes": [1], "starts": [1], "ends": [2]}, _xf[:, 1:2], "float32"),
    _slice_case(_xi, {"axes": [0, 1], "starts": [0, -2], "ends": [1, 4]}, _xi[0:1, 3:4], "int64"),
    _slice_case(_xb, {"axes": [0], "starts": [1], "ends": [3], "decrease_axis": []}, _xb[1:3], "bool"),
]

# -- LoD: passed on where Paddle passes it, dropped elsewhere --------------------------------------------------

_LOD = [[0, 2, 5]]
_q, _r, _t = rand(5, 4), rand(5, 2, 1), rand(5, 3)


def _lod_case(op_type: str, inputs: dict, attrs: dict, out: np.ndarray | list, kept: bool, name: str) -> Case:
    """A case whose first input slot holds LoD ``_LOD``; Out keeps it when ``kept``."""
    slot = next(iter(inputs))

    def lod(value: np.ndarray) -> np.ndarray | LoDTensor:
        return LoDTensor(value, _LOD) if kept else value

    expected = [lod(v) for v in out] if isinstance(out, list) else lod(out)
    grad = (slot,) if op_type != "fill_zeros_like" else ()
    return Case(inputs, attrs, {"Out": expected}, grad=grad, lod={slot: _LOD}, name=name)


LOD_CASES = [
    (op_type, _lod_case(op_type, *args))
    for op_type, *args in [
        ("reshape2", {"X": _q}, {"shape": [0, 2, 2]}, _q.reshape(5, 2, 2), True, "lod_kept_as_dim0_stays"),
        ("reshape2", {"X": _q}, {"shape": [2, 10]}, _q.reshape(2, 10), False, "lod_dropped_as_dim0_changes"),
        ("squeeze2", {"X": _r}, {"axes": [2]}, _r.reshape(5, 2), True, "lod_kept"),
        ("unsqueeze2", {"X": _t}, {"axes": [1]}, _t.reshape(5, 1, 3), True, "lod_kept"),
        ("unsqueeze2", {"X": _t}, {"axes": [0]}, _t.reshape(1, 5, 3), False, "lod_dropped_as_dim0_changes"),
        ("flatten_contiguous_range", {"X": _r}, {"start_axis": 1, "stop_axis": 2}, _r.reshape(5, 2), True, "lod_kept"),
        ("transpose2", {"X": _q}, {"axis": [0, 1]}, _q, False, "lod_dropped"),
        ("concat", {"X": [_q, _t]}, {"axis": 1}, np.concatenate([_q, _t], axis=1), True, "lod_of_first_kept_axis1"),
        ("concat", {"X": [_q, _q]}, {"axis": 0}, np.concatenate([_q, _q]), False, "lod_dropped_axis0"),
        ("split", {"X": _q}, {"axis": 1, "num": 2}, [_q[:, :2], _q[:, 2:]], True, "lod_kept_axis1"),
        ("split", {"X": _q}, {"sections": [2, 3]}, [_q[:2], _q[2:]], False, "lod_dropped_axis0"),
        ("slice", {"Input": _q}, {"axes": [1], "starts": [1], "ends": [3]}, _q[:, 1:3], True, "lod_kept"),
        ("slice", {"Input": _q}, {"axes": [0], "starts": [0], "ends": [5]}, _q, False, "lod_dropped_slicing_dim0"),
        ("fill_zeros_like", {"X": _q}, {}, np.zeros((5, 4)), True, "lod_kept"),
    ]
]

CASES: dict[str, list[Case]] = {
    op_type: [*cases, *(case for t, case in LOD_CASES if t == op_type)]
    for op_type, cases in [
        ("concat", CONCAT),
        ("reshape2", RESHAPE2),
        ("transpose2", TRANSPOSE2),
        ("flatten_contiguous_range", FLATTEN_CONTIGUOUS_RANGE),
        ("squeeze2", SQUEEZE2),
        ("unsqueeze2", UNSQUEEZE2),
        ("split", SPLIT),
        ("fill_zeros_like", FILL_ZEROS_LIKE),
        ("slice", SLICE),
    ]
}

# -- bad input ---------------------------------------------------------------------------------------------------

_f32 = np.zeros((3, 4), np.float32)
_x3 = np.zeros((3, 4, 5), np.float32)

# (op type, case, pattern the ShapeError raised by inference must match)
INFER_ERRORS: list[tuple[str, Case, str]] = [
    (
        "concat",
        Case({"X": [_f32, np.zeros((2, 5), np.float32)]}),
        r"\[2, 5\]\) does not match .*\[3, 4\]\) outside axis 0",
    ),
    ("concat", Case({"X": [_f32]}, {"axis": 3}), r"axis 3 is out of range for rank 2"),
    ("concat", Case({"X": [_f32, np.zeros((3, 4))]}), r"different dtypes"),
    ("concat", Case({"X": [_f32, _x3], "AxisTensor": i32(0)}), r"X .*\[3, 4, 5\]\) does not have the rank of"),
    ("concat", Case({"X": [_f32], "AxisTensor": np.zeros(1, np.float32)}), r"AxisTensor .* has dtype float32"),
    ("concat", Case({"X": [_f32], "AxisTensor": i32(0, 1)}), r"AxisTensor .*\[2\]\) must hold one integer"),
    (
        "reshape2",
        Case({"X": _f32}, {"shape": [5, -1]}),
        r"X 'in.X' \(float32 \[3, 4\]\) cannot be reshaped to \[5, -1\]",
    ),
    ("reshape2", Case({"X": _f32}, {"shape": [5, 2]}), r"\[3, 4\]\) cannot be reshaped to \[5, 2\]"),
    ("reshape2", Case({"X": _f32}, {"shape": [0, 5]}), r"cannot be reshaped to \[0, 5\]"),
    ("reshape2", Case({"X": _f32}, {"shape": [-1, -1]}), r"shape \[-1, -1\] may hold one -1"),
    ("reshape2", Case({"X": _f32}, {"shape": [2, -2]}), r"no other negative dim"),
    ("reshape2", Case({"X": _f32}, {"shape": [1, 1, 0]}), r"a 0 copies X's dim at its position, but X .* has rank 2"),
    ("reshape2", Case({"X": _f32, "Shape": np.zeros(2, np.float32)}), r"Shape .* has dtype float32"),
    ("reshape2", Case({"X": _f32, "Shape": np.zeros((1, 2), np.int32)}), r"Shape .*\[1, 2\]\) must be a 1-D tensor"),
    (
        "reshape2",
        Case({"X": _f32, "ShapeTensor": [i32(3, 4)]}),
        r"ShapeTensor .* must be an int32 or int64 tensor of shape \[1\]",
    ),
    ("transpose2", Case({"X": _f32}, {"axis": [0]}), r"axis \[0\] is not a permutation of the 2 dims of X 'in.X'"),
    ("transpose2", Case({"X": _f32}, {"axis": [1, 1]}), r"axis \[1, 1\] is not a permutation"),
    ("transpose2", Case({"X": _f32}, {"axis": [0, 2]}), r"axis \[0, 2\] is not a permutation"),
    (
        "flatten_contiguous_range",
        Case({"X": _x3}, {"start_axis": 2, "stop_axis": 1}),
        r"stop_axis=1 comes before start_axis=2",
    ),
    (
        "flatten_contiguous_range",
        Case({"X": _x3}, {"start_axis": 3, "stop_axis": 3}),
        r"start_axis 3 is out of range for rank 3",
    ),
    (
        "flatten_contiguous_range",
        Case({"X": np.float32(1.0)}, {}),
        r"start_axis=1 and stop_axis=1 must be 0 or -1 for a 0-D X",
    ),
    ("squeeze2", Case({"X": _f32}, {"axes": [2]}), r"axes entry 2 is out of range for rank 2"),
    ("squeeze2", Case({"X": _f32}, {"axes": [-3]}), r"axes entry -3 is out of range"),
    ("unsqueeze2", Case({"X": _f32}, {"axes": [3]}), r"axes entry 3 is out of range for inserting a dim into rank 2"),
    ("unsqueeze2", Case({"X": _f32}, {"axes": [-4]}), r"axes entry -4 is out of range"),
    ("unsqueeze2", Case({"X": _f32, "AxesTensor": np.zeros((1, 1), np.int32)}), r"AxesTensor .* must be a 1-D tensor"),
    ("unsqueeze2", Case({"X": _f32, "AxesTensorList": [np.zeros(1)]}), r"AxesTensorList .* must be an int32 or int64"),
    (
        "split",
        Case({"X": _f32}, {"axis": 1, "num": 3}),
        r"X's dim 4 on the split axis does not divide into num=3 parts",
    ),
    ("split", Case({"X": _f32}, {"axis": 1, "num": 2}), r"num=2 parts but 1 outputs Out"),
    ("split", Case({"X": _f32}, {"axis": 1, "sections": [3]}), r"sections \[3\] add up to 3, not to X's dim 4"),
    ("split", Case({"X": _f32}, {"axis": 1, "sections": [-1, -1]}), r"may hold one -1"),
    ("split", Case({"X": _f32}, {"axis": 1, "sections": [4, -1]}), r"leave nothing of X's dim 4 .* for the -1"),
    ("split", Case({"X": _f32}, {"axis": 1, "sections": [1, 3]}), r"make 2 parts but there are 1 outputs Out"),
    ("split", Case({"X": _f32}, {"axis": 1}), r"give num \(> 0\) or sections"),
    ("split", Case({"X": _f32}, {"axis": 2, "num": 1}), r"axis 2 is out of range for rank 2"),
    ("split", Case({"X": np.float32(1.0)}, {"num": 1}), r"X .* must have at least one dimension"),
    (
        "split",
        Case({"X": _f32, "SectionsTensorList": [i32(1), i32(3)]}),
        r"SectionsTensorList makes 2 parts but there are 1",
    ),
    (
        "slice",
        Case({"Input": _x3}, {"axes": [3], "starts": [0], "ends": [1]}),
        r"axes entry 3 is out of range for rank 3",
    ),
    (
        "slice",
        Case({"Input": _x3}, {"axes": [0, -3], "starts": [0, 0], "ends": [1, 1]}),
        r"axes \[0, -3\] name a dim twice",
    ),
    (
        "slice",
        Case({"Input": _x3}, {"axes": [0], "starts": [0, 1], "ends": [1]}),
        r"starts \[0, 1\] must have one entry per entry of axes \[0\]",
    ),
    (
        "slice",
        Case({"Input": _x3}, {"axes": [1], "starts": [3], "ends": [1]}),
        r"the slice \[3, 1\) of a dim of size 4 ends before it starts",
    ),
    (
        "slice",
        Case({"Input": _x3}, {"axes": [0], "starts": [0], "ends": [2], "decrease_axis": [0]}),
        r"decrease_axis drops dim 0, where the slice keeps 2 entries, not 1",
    ),
    (
        "slice",
        Case({"Input": _x3}, {"axes": [0], "starts": [0], "ends": [1], "infer_flags": [1, 1]}),
        r"infer_flags \[1, 1\] must have one entry",
    ),
    (
        "slice",
        Case({"Input": _x3, "StartsTensor": i32(0, 1)}, {"axes": [0], "ends": [1]}),
        r"StartsTensor gives 2 starts for 1 axes",
    ),
    (
        "slice",
        Case({"Input": _x3, "EndsTensorList": [i32(0), i32(1)]}, {"axes": [0], "starts": [0]}),
        r"EndsTensorList gives 2 ends for 1 axes",
    ),
]

# (op type, case, pattern the BlockirError raised by the kernel must match)
KERNEL_ERRORS: list[tuple[str, Case, str]] = [
    ("concat", Case({"X": [_f32, _f32], "AxisTensor": i32(2)}), r"concat: axis 2 is out of range for rank 2"),
    (
        "reshape2",
        Case({"X": _f32}, {"shape": [5, -1]}),
        r"reshape2: X of shape \[3, 4\] cannot be reshaped to \[5, -1\]",
    ),
    (
        "reshape2",
        Case({"X": _f32, "ShapeTensor": [i32(5), i32(-1)]}),
        r"X of shape \[3, 4\] cannot be reshaped to \[5, -1\]",
    ),
    ("reshape2", Case({"X": _f32, "Shape": i32(2, 0, 0)}), r"a 0 copies X's dim at its position"),
    ("unsqueeze2", Case({"X": _f32, "AxesTensor": i32(5)}), r"unsqueeze2: axes entry 5 is out of range"),
    (
        "split",
        Case({"X": _f32, "SectionsTensorList": [i32(1), i32(2)]}, {"axis": 1}),
        r"split: sections \[1, 2\] add up to 3, not to X's dim 4",
    ),
    ("split", Case({"X": _f32, "AxisTensor": i64(2)}, {"num": 1}), r"split: axis 2 is out of range for rank 2"),
    (
        "slice",
        Case({"Input": _x3, "StartsTensor": i32(3), "EndsTensor": i32(1)}, {"axes": [1]}),
        r"slice: the slice \[3, 1\) of a dim of size 4 ends before it starts",
    ),
    (
        "slice",
        Case({"Input": _x3, "StartsTensor": i32(0), "EndsTensor": i32(2)}, {"axes": [0], "decrease_axis": [0]}),
        r"slice: decrease_axis drops dim 0, where the slice keeps 2 entries",
    ),
]
