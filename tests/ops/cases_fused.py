"""Test cases of the fused ops (blockir.ops.fused), as data: expected values in plain numpy.

The references compute in float64 what the fused op stands for, spelled out:
``fc`` as an ``einsum`` of the flattened input with W plus the bias, then the
activation; ``fused_elemwise_activation`` as the activation of ``X + Y`` with Y
placed by Paddle's ``axis``; ``coalesce_tensor`` as the inputs' elements one
after the other (or the constant). Its outputs viewing the buffer, and inputs
already laid out in one, are tests/ops/test_coalesce_tensor.py's. Gradient cases hold float64 values whose
pre-activation sums stay away from relu's kink, so finite differences are exact
enough.
"""

from __future__ import annotations

import numpy as np

from blockir.ops.values import LoDTensor
from tests.ops.cases_math import ACTIVATION_REFS, away_from_zero, paddle_y, rand
from tests.ops.cases_nn import SOFTMAX_WITH_CROSS_ENTROPY
from tests.ops.harness import Case

ACTIVATIONS = ("relu", "sigmoid", "tanh")


def _act(name: str, x: np.ndarray) -> np.ndarray:
    return ACTIVATION_REFS[name](x) if name else x


# -- fc ----------------------------------------------------------------------------------------------------


def ref_fc(x: np.ndarray, w: np.ndarray, b: np.ndarray | None, n: int, act: str) -> np.ndarray:
    rows = x.astype(np.float64).reshape(int(np.prod(x.shape[:n])), -1)
    pre = np.einsum("ik,kj->ij", rows, w.astype(np.float64))
    if b is not None:
        pre = pre + b.reshape(1, -1)
    return _act(act, pre).reshape(*x.shape[:n], w.shape[1]).astype(x.dtype)


def _fc_case(
    xs: tuple[int, ...],
    size: int,
    act: str,
    name: str,
    dtype: str = "float64",
    n: int = 1,
    bias: tuple[int, ...] | None = (-1,),
    lod: list[list[int]] | None = None,
) -> Case:
    """Inputs whose pre-activation sums are at least 0.05 away from 0 (drawn again until they are)."""
    k = int(np.prod(xs[n:]))
    for _ in range(100):
        x, w = rand(*xs, dtype=dtype), rand(k, size, dtype=dtype, low=-1.0, high=1.0)
        b = None if bias is None else rand(*(size if d == -1 else d for d in bias), dtype=dtype)
        if np.abs(ref_fc(x, w, b, n, "")).min() > 0.05:
            break
    else:
        raise AssertionError(f"fc case {name}: no inputs away from the kink in 100 draws")
    inputs = {"Input": x, "W": w} if b is None else {"Input": x, "W": w, "Bias": b}
    out = ref_fc(x, w, b, n, act)
    return Case(
        inputs,
        {"in_num_col_dims": n, "activation_type": act},
        {"Out": LoDTensor(out, lod) if lod else out},
        grad=tuple(inputs) if dtype == "float64" else (),
        rtol=1e-5 if dtype == "float64" else 1e-4,
        lod={"Input": lod} if lod else {},
        name=name,
    )


FC = [
    _fc_case((4, 5), 3, "relu", "relu_float32", dtype="float32"),
    *(_fc_case((3, 4), 2, act, f"{act or 'no_activation'}") for act in ("", *ACTIVATIONS)),
    _fc_case((2, 3, 4), 2, "relu", "in_num_col_dims_2", n=2),
    _fc_case((2, 3, 2), 3, "tanh", "input_flattened", n=1),
    _fc_case((3, 4), 2, "sigmoid", "bias_1_by_n", bias=(1, -1)),
    _fc_case((3, 4), 2, "relu", "no_bias", bias=None),
    _fc_case((3, 4), 4, "sigmoid", "square_w"),  # fc_grad may write dInput into Out's buffer
    _fc_case((3, 4), 2, "relu", "lod_shared", lod=[[0, 1, 3]]),
]

# -- fused_elemwise_activation ------------------------------------------------------------------------------

# (name, X shape, Y shape, axis): elementwise_add's broadcasts
BROADCASTS = [
    ("same_shape", (3, 4), (3, 4), -1),
    ("bias_axis_1", (4, 5), (5,), 1),
    ("axis_0", (2, 3, 4), (2,), 0),
    ("y_dim_1_at_axis", (2, 3, 4), (1, 4), 1),
    ("numpy_trailing", (2, 3, 4), (4,), -1),
]


def _fused_case(act: str, name: str, xs: tuple[int, ...], ys: tuple[int, ...], axis: int, dtype: str) -> Case:
    """X + Y is drawn away from 0 first, then X = sum - Y: relu's kink stays out of reach."""
    y = rand(*ys, dtype=dtype)
    total = away_from_zero(*xs, dtype=dtype)
    x = (total - paddle_y(total, y, axis)).astype(dtype)
    return Case(
        {"X": x, "Y": y},
        {"functor_list": [act, "elementwise_add"], "axis": axis},
        {"Out": _act(act, (x.astype(np.float64) + paddle_y(x, y, axis)).astype(dtype))},
        grad=("X", "Y") if dtype == "float64" else (),
        rtol=1e-5 if dtype == "float64" else 1e-4,
        name=f"{act}_{name}_{dtype}",
    )


def _lod_case() -> Case:
    x, y = away_from_zero(3, 2), np.zeros(2)
    lod = [[0, 2, 3]]
    return Case(
        {"X": x, "Y": y},
        {"functor_list": ["tanh", "elementwise_add"], "axis": 1},
        {"Out": LoDTensor(np.tanh(x), lod)},
        grad=("X", "Y"),
        lod={"X": lod},
        name="lod_shared",
    )


def _fused_mul_case(act: str, name: str, xs: tuple[int, ...], ys: tuple[int, ...], axis: int) -> Case:
    """ACT(X * Y), float64 (relu: X away from 0 and Y positive, so the product keeps clear of the kink)."""
    x, y = away_from_zero(*xs), rand(*ys, low=0.5, high=2.0)
    return Case(
        {"X": x, "Y": y},
        {"functor_list": [act, "elementwise_mul"], "axis": axis},
        {"Out": _act(act, x * paddle_y(x, y, axis))},
        grad=("X", "Y"),
        name=f"{act}_mul_{name}",
    )


FUSED_ELEMWISE_ACTIVATION = [
    _fused_mul_case("sigmoid", "same_shape", (3, 4), (3, 4), -1),
    _fused_mul_case("relu", "y_at_axis", (2, 3, 4), (3,), 1),
    *(
        _fused_case(act, name, xs, ys, axis, dtype)
        for act in ACTIVATIONS
        for name, xs, ys, axis in BROADCASTS
        for dtype in ("float32", "float64")
    ),
    _lod_case(),
]

# -- coalesce_tensor ----------------------------------------------------------------------------------------

_SHAPES = ((2, 3), (4,), (), (1, 1, 2))


def _coalesce_case(name: str, dtype: str, copy_data: bool, set_constant: bool, constant: float = 0.0) -> Case:
    inputs = [rand(*shape, dtype=dtype) for shape in _SHAPES]
    if copy_data:
        outputs = inputs
    else:  # the constant, or (neither) a new buffer's zeros
        outputs = [np.full(x.shape, constant if set_constant else 0.0, dtype) for x in inputs]
    flat = np.array([v for x in outputs for v in x.reshape(-1).tolist()], dtype)
    attrs = {"copy_data": copy_data, "set_constant": set_constant, "constant": constant, "dtype": _CODES[dtype]}
    return Case({"Input": inputs}, attrs, {"Output": outputs, "FusedOutput": flat}, rtol=0, atol=0, name=name)


_CODES = {"float32": 5, "float64": 6}
COALESCE_TENSOR = [
    _coalesce_case("copy_data_float32", "float32", copy_data=True, set_constant=False),
    _coalesce_case("copy_data_float64", "float64", copy_data=True, set_constant=False),
    _coalesce_case("set_constant", "float32", copy_data=False, set_constant=True, constant=1.5),
    _coalesce_case("neither_zeros", "float64", copy_data=False, set_constant=False, constant=3.0),
    Case(
        {"Input": [np.arange(3, dtype="float32")]},
        {"copy_data": True, "dtype": 5},
        {"Output": [np.arange(3, dtype="float32")], "FusedOutput": np.arange(3, dtype="float32")},
        name="one_input",
    ),
]

# -- softmax_with_cross_entropy_mean ------------------------------------------------------------------------


def _swce_mean_case(case: Case) -> Case:
    """A softmax_with_cross_entropy case, its Loss replaced by the mean over the rows (ignored ones as 0)."""
    loss = case.expected["Loss"]
    mean = np.array([loss.astype(np.float64).mean()], loss.dtype)
    return Case(
        case.inputs, case.attrs, {**case.expected, "Loss": mean}, case.grad, case.rtol, case.atol, name=case.name
    )


SOFTMAX_WITH_CROSS_ENTROPY_MEAN = [_swce_mean_case(case) for case in SOFTMAX_WITH_CROSS_ENTROPY]

CASES: dict[str, list[Case]] = {
    "fc": FC,
    "fused_elemwise_activation": FUSED_ELEMWISE_ACTIVATION,
    "softmax_with_cross_entropy_mean": SOFTMAX_WITH_CROSS_ENTROPY_MEAN,
    "coalesce_tensor": COALESCE_TENSOR,
}

# -- bad input ------------------------------------------------------------------------------------------------

_f32 = np.zeros((3, 4), np.float32)
_w = np.zeros((4, 2), np.float32)
_relu_add = ["relu", "elementwise_add"]

# (op type, case, pattern the ShapeError raised by inference must match)
INFER_ERRORS: list[tuple[str, Case, str]] = [
    ("fc", Case({"Input": _f32, "W": np.zeros((5, 2), np.float32)}), r"\[3, 4\].* 4 columns but W .*\[5, 2\].* 5 rows"),
    ("fc", Case({"Input": _f32, "W": np.zeros((4, 2, 1), np.float32)}), r"W .*\[4, 2, 1\]\) must be a matrix"),
    (
        "fc",
        Case({"Input": _f32, "W": _w, "Bias": np.zeros(3, np.float32)}),
        r"Bias .* must have shape \[2\] or \[1, 2\]",
    ),
    ("fc", Case({"Input": _f32, "W": _w}, {"activation_type": "gelu"}), r"activation 'gelu' is not supported"),
    ("fc", Case({"Input": _f32, "W": _w}, {"in_num_col_dims": 2}), r"in_num_col_dims=2 must be in \[1, 2\)"),
    ("fc", Case({"Input": _f32, "W": np.zeros((4, 2))}), r"different dtypes"),
    ("fc", Case({"Input": np.zeros((3, 4), np.int64), "W": np.zeros((4, 2), np.int64)}), r"has dtype int64"),
    (
        "fc_grad",
        Case({"Input": _f32, "W": _w, "Out@GRAD": np.zeros((3, 2), np.float32)}, {"activation_type": "relu"}),
        r"activation_type='relu' needs Out",
    ),
    (
        "fused_elemwise_activation",
        Case({"X": _f32, "Y": _f32}, {"functor_list": ["elementwise_add", "relu"]}),
        r"functor_list \['elementwise_add', 'relu'\] is not supported",
    ),
    (
        "fused_elemwise_activation",
        Case({"X": _f32, "Y": _f32}, {"functor_list": ["gelu", "elementwise_add"]}),
        r"activation 'gelu' is not supported",
    ),
    (
        "fused_elemwise_activation",
        Case({"X": _f32, "Y": np.zeros((3, 5), np.float32)}, {"functor_list": _relu_add}),
        r"\[3, 4\].*\[3, 5\].* do not broadcast",
    ),
    (
        "coalesce_tensor",
        Case({"Input": [np.zeros(2)]}, {"copy_data": True, "dtype": 5}),
        r"Input 'in.Input_0' \(float64 \[2\]\) has dtype float64, not float32 \(the dtype attribute\)",
    ),
    (
        "coalesce_tensor",
        Case({"Input": [_f32]}, {"copy_data": True, "set_constant": True, "dtype": 5}),
        r"copy_data and set_constant cannot both be true",
    ),
    ("coalesce_tensor", Case({"Input": [_f32]}, {"dtype": 7}), r"attribute dtype=7 is not a dtype code"),
    (
        "coalesce_tensor",
        Case({"Input": [_f32, _f32]}, {"dtype": 5}),
        r"Output names 1 variables for 2 Input variables: it needs one per input",
    ),
    (
        "softmax_with_cross_entropy_mean",
        Case({"Logits": _f32, "Label": np.zeros((3, 2), np.int64)}),
        r"Label .*\[3, 2\].* does not match .*: dim 1 must be 1",
    ),
    (
        "softmax_with_cross_entropy_mean_grad",
        Case({"Label": np.zeros((3, 1), np.int64), "Softmax": _f32, "Loss@GRAD": np.zeros(2, np.float32)}),
        r"Loss@GRAD .*\[2\].* must have one element",
    ),
]

# (op type, case, pattern the BlockirError raised by the kernel must match)
KERNEL_ERRORS: list[tuple[str, Case, str]] = [
    (
        "coalesce_tensor",
        Case({"Input": [_f32, np.zeros(2)]}, {"copy_data": True, "dtype": 5}),
        r"coalesce_tensor: Input 1 has dtype float64, not float32 \(the dtype attribute\)",
    ),
    (
        "fc",
        Case({"Input": _f32, "W": np.zeros((5, 2), np.float32)}),
        r"fc: Input of shape \[3, 4\] flattened at in_num_col_dims=1 has 4 columns but W of shape \[5, 2\] has 5 rows",
    ),
]
