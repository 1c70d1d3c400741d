"""Test cases of the activations and unary math (blockir.ops.activation), as data.

Each row of ``UNARY_ROWS`` is one op: a reference written per element with Python's ``math`` (independent of the
kernels' array formulas), the attributes of each case, the domain its inputs are drawn from and the kinks they keep
away from (finite differences straddling a kink are meaningless). Every row gets a float32 case and float64 cases
whose gradient is checked against finite differences.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np

from blockir.ops.values import LoDTensor
from tests.ops.harness import Case

RNG = np.random.default_rng(20260601)


def _sigmoid(v: float) -> float:
    return 1 / (1 + math.exp(-v)) if v >= 0 else math.exp(v) / (1 + math.exp(v))


def _softplus(v: float) -> float:
    return max(v, 0.0) + math.log1p(math.exp(-abs(v)))


def _round_half_away(v: float, decimals: int) -> float:
    scaled = v * 10.0**decimals
    return math.copysign(math.floor(abs(scaled) + 0.5), scaled) / 10.0**decimals


@dataclass(frozen=True)
class Row:
    op: str
    ref: Callable[[float, dict[str, Any]], float]
    attrs: tuple[dict[str, Any], ...] = ({},)
    domain: tuple[float, float] = (-3.0, 3.0)
    kinks: tuple[float, ...] = ()
    ints: bool = False  # also takes int32 / int64
    grad: bool = True
    radius: float = 0.05  # how far the inputs stay from the kinks


UNARY_ROWS: tuple[Row, ...] = (
    Row("relu6", lambda v, a: min(max(v, 0.0), a.get("threshold", 6.0)), ({}, {"threshold": 2.0}), (-8, 8), (0, 2, 6)),
    Row(
        "hard_swish",
        lambda v, a: v * min(max(v + a.get("offset", 3.0), 0.0), a.get("threshold", 6.0)) / a.get("scale", 6.0),
        ({}, {"threshold": 4.0, "scale": 5.0, "offset": 2.0}),
        (-6, 6),
        (-3, 3, -2, 2),
    ),
    Row(
        "hard_sigmoid",
        lambda v, a: min(max(v * a.get("slope", 0.2) + a.get("offset", 0.5), 0.0), 1.0),
        ({}, {"slope": 0.1666667, "offset": 0.5}),
        (-5, 5),
        (-2.5, 2.5, -3, 3),
    ),
    Row("swish", lambda v, a: v * _sigmoid(a.get("beta", 1.0) * v), ({}, {"beta": 1.7})),
    Row("silu", lambda v, a: v * _sigmoid(v)),
    Row(
        "mish",
        lambda v, a: v * math.tanh(v if v > a.get("threshold", 20.0) else _softplus(v)),
        ({}, {"threshold": 1.0}),
        kinks=(1.0,),
    ),
    Row("elu", lambda v, a: v if v > 0 else a.get("alpha", 1.0) * math.expm1(v), ({}, {"alpha": 0.3}), kinks=(0,)),
    Row(
        "selu",
        lambda v, a: (
            a.get("scale", 1.0507009873554805) * (v if v > 0 else a.get("alpha", 1.6732632423543772) * math.expm1(v))
        ),
        ({}, {"scale": 2.0, "alpha": 0.5}),
        kinks=(0,),
    ),
    Row(
        "celu",
        lambda v, a: max(v, 0.0) + min(a.get("alpha", 1.0) * math.expm1(v / a.get("alpha", 1.0)), 0.0),
        ({}, {"alpha": 2.0}),
        kinks=(0,),
    ),
    Row("leaky_relu", lambda v, a: v if v > 0 else a.get("alpha", 0.02) * v, ({}, {"alpha": 0.3}), kinks=(0,)),
    Row(
        "brelu",
        lambda v, a: min(max(v, a.get("t_min", 0.0)), a.get("t_max", 24.0)),
        ({}, {"t_min": -1.0, "t_max": 1.0}),
        (-30, 30),
        (0, 24, -1, 1),
    ),
    Row(
        "softplus",
        lambda v, a: (
            v
            if a.get("beta", 1.0) * v > a.get("threshold", 20.0)
            else _softplus(a.get("beta", 1.0) * v) / a.get("beta", 1.0)
        ),
        ({}, {"beta": 2.0, "threshold": 3.0}),
        kinks=(1.5,),
    ),
    Row("softsign", lambda v, a: v / (1 + abs(v)), kinks=(0,)),
    Row(
        "softshrink",
        lambda v, a: (
            v - a.get("lambda", 0.5)
            if v > a.get("lambda", 0.5)
            else v + a.get("lambda", 0.5)
            if v < -a.get("lambda", 0.5)
            else 0.0
        ),
        ({}, {"lambda": 1.0}),
        kinks=(-0.5, 0.5, -1, 1),
    ),
    Row(
        "hard_shrink",
        lambda v, a: v if abs(v) > a.get("threshold", 0.5) else 0.0,
        ({}, {"threshold": 1.0}),
        kinks=(-0.5, 0.5, -1, 1),
    ),
    Row("tanh_shrink", lambda v, a: v - math.tanh(v)),
    Row(
        "thresholded_relu",
        lambda v, a: v if v > a.get("threshold", 1.0) else a.get("value", 0.0),
        ({}, {"threshold": -0.5, "value": 0.25}),
        kinks=(1.0, -0.5),
    ),
    Row("logsigmoid", lambda v, a: -_softplus(-v), domain=(-40, 40)),
    Row("abs", lambda v, a: abs(v), kinks=(0,), ints=True),
    Row("sign", lambda v, a: float(np.sign(v)), kinks=(0,), ints=True),
    Row("floor", lambda v, a: float(math.floor(v)), kinks=(-3, -2, -1, 0, 1, 2, 3)),
    Row("ceil", lambda v, a: float(math.ceil(v)), kinks=(-3, -2, -1, 0, 1, 2, 3)),
    Row(
        "round",
        lambda v, a: _round_half_away(v, a.get("decimals", 0)),
        ({}, {"decimals": 1}),
        kinks=tuple(k / 10 + 0.05 for k in range(-31, 31)),
        radius=0.01,
    ),
    Row("exp", lambda v, a: math.exp(v)),
    Row("expm1", lambda v, a: math.expm1(v)),
    Row("log", lambda v, a: math.log(v), domain=(0.2, 5)),
    Row("log1p", lambda v, a: math.log1p(v), domain=(-0.8, 5)),
    Row("log2", lambda v, a: math.log2(v), domain=(0.2, 5)),
    Row("log10", lambda v, a: math.log10(v), domain=(0.2, 5)),
    Row("sqrt", lambda v, a: math.sqrt(v), domain=(0.2, 5)),
    Row("rsqrt", lambda v, a: 1 / math.sqrt(v), domain=(0.2, 5)),
    Row("reciprocal", lambda v, a: 1 / v, domain=(0.3, 4)),
    Row("sin", lambda v, a: math.sin(v)),
    Row("cos", lambda v, a: math.cos(v)),
    Row("tan", lambda v, a: math.tan(v), domain=(-1.2, 1.2)),
    Row("atan", lambda v, a: math.atan(v)),
    Row("asin", lambda v, a: math.asin(v), domain=(-0.9, 0.9)),
    Row("acos", lambda v, a: math.acos(v), domain=(-0.9, 0.9)),
    Row("sinh", lambda v, a: math.sinh(v)),
    Row("cosh", lambda v, a: math.cosh(v)),
    Row("asinh", lambda v, a: math.asinh(v)),
    Row("acosh", lambda v, a: math.acosh(v), domain=(1.1, 4.0)),
    Row("atanh", lambda v, a: math.atanh(v), domain=(-0.9, 0.9)),
    Row("erf", lambda v, a: math.erf(v), domain=(-5, 5)),
)


def _draw(row: Row, shape: tuple[int, ...], dtype: str) -> np.ndarray:
    """Values of the row's domain at least ``row.radius`` from its kinks."""
    low, high = row.domain
    values = RNG.uniform(low, high, size=math.prod(shape))
    for i, v in enumerate(values):
        while any(abs(v - k) < row.radius for k in row.kinks):
            v = RNG.uniform(low, high)
        values[i] = v
    return values.reshape(shape).astype(dtype)


def ref_unary(row: Row, x: np.ndarray, attrs: dict[str, Any]) -> np.ndarray:
    flat = [row.ref(float(v), attrs) for v in x.astype(np.float64).ravel()]
    return np.array(flat, np.float64).reshape(x.shape).astype(x.dtype)


def _unary_cases(row: Row) -> list[Case]:
    cases = []
    for k, attrs in enumerate(row.attrs):
        for name, shape, dtype in (("float32", (3, 4), "float32"), ("float64", (2, 3, 4), "float64")):
            x = _draw(row, shape, dtype)
            grad = ("X",) if dtype == "float64" and row.grad else ()
            expected = ref_unary(row, x, attrs)
            cases.append(Case({"X": x}, attrs, {"Out": expected}, grad=grad, name=f"{name}_attrs{k}", rtol=1e-5))
    if row.ints:
        for dtype in ("int32", "int64"):
            x = RNG.integers(-5, 6, size=(3, 4)).astype(dtype)
            expected = np.array([row.ref(float(v), {}) for v in x.ravel()]).reshape(x.shape).astype(dtype)
            cases.append(Case({"X": x}, {}, {"Out": expected}, name=dtype))
    lod = [[0, 1, 3]]
    x = _draw(row, (3, 2), "float64")
    cases.append(
        Case({"X": x}, {}, {"Out": LoDTensor(ref_unary(row, x, {}), lod)}, grad=("X",), lod={"X": lod}, name="lod")
    )
    return cases


# -- prelu ---------------------------------------------------------------------------------------------------


def ref_prelu(x: np.ndarray, alpha: np.ndarray, mode: str, layout: str = "NCHW") -> np.ndarray:
    out = np.empty_like(x)
    for pos in np.ndindex(*x.shape):
        if mode == "all":
            a = alpha.ravel()[0]
        elif mode == "channel":
            a = alpha.ravel()[pos[-1] if layout == "NHWC" else pos[1]]
        else:
            a = alpha.reshape(x.shape[1:])[pos[1:]]
        out[pos] = x[pos] if x[pos] > 0 else a * x[pos]
    return out


def _away(*shape: int) -> np.ndarray:
    return (RNG.uniform(0.2, 2.0, size=shape) * RNG.choice([-1.0, 1.0], size=shape)).astype(np.float64)


def _prelu_case(x: np.ndarray, alpha: np.ndarray, mode: str, name: str, layout: str = "NCHW") -> Case:
    return Case(
        {"X": x, "Alpha": alpha},
        {"mode": mode, "data_format": layout},
        {"Out": ref_prelu(x, alpha, mode, layout)},
        grad=("X", "Alpha") if x.dtype == np.float64 else (),
        name=name,
    )


PRELU = [
    _prelu_case(_away(2, 3, 2, 2), np.array([0.25]), "all", "all"),
    _prelu_case(_away(2, 3, 2, 2), _away(3), "channel", "channel_nchw"),
    _prelu_case(_away(2, 2, 2, 3), _away(3), "channel", "channel_nhwc", layout="NHWC"),
    _prelu_case(_away(2, 3, 2), _away(1, 3, 2), "element", "element"),
    _prelu_case(_away(4, 3).astype(np.float32), np.array([0.1], np.float32), "all", "float32"),
]

# -- log_softmax, maxout -------------------------------------------------------------------------------------


def ref_log_softmax(x: np.ndarray, axis: int = -1) -> np.ndarray:
    moved = np.moveaxis(x.astype(np.float64), axis, -1)
    out = np.empty_like(moved)
    for pos in np.ndindex(*moved.shape[:-1]):
        row = moved[pos]
        top = row.max()
        out[pos] = row - top - math.log(sum(math.exp(v - top) for v in row))
    return np.moveaxis(out, -1, axis).astype(x.dtype)


LOG_SOFTMAX = [
    Case({"X": x}, {"axis": axis}, {"Out": ref_log_softmax(x, axis)}, grad=grad, name=name)
    for name, x, axis, grad in (
        ("float32", RNG.uniform(-3, 3, (3, 5)).astype(np.float32), -1, ()),
        ("float64", RNG.uniform(-3, 3, (3, 4)), -1, ("X",)),
        ("axis_1", RNG.uniform(-3, 3, (2, 3, 4)), 1, ("X",)),
        ("huge", np.array([[1000.0, 0.0, -1000.0]], np.float32), -1, ()),
    )
]


def ref_maxout(x: np.ndarray, groups: int, axis: int = 1) -> np.ndarray:
    moved = np.moveaxis(x, axis, 1)
    n, c = moved.shape[:2]
    out = np.empty((n, c // groups, *moved.shape[2:]), x.dtype)
    for i in range(c // groups):
        out[:, i] = moved[:, i * groups : (i + 1) * groups].max(axis=1)
    return np.moveaxis(out, 1, axis)


def _distinct(*shape: int) -> np.ndarray:
    """Values that differ by 0.1 at least (no ties within a group: finite differences stay on one side)."""
    return (RNG.permutation(math.prod(shape)) * 0.1 - 1.0).reshape(shape).astype(np.float64)


_ties = np.array([[[[1.0]], [[1.0]], [[0.5]], [[2.0]]]])
MAXOUT = [
    Case({"X": x}, {"groups": g, "axis": axis}, {"Out": ref_maxout(x, g, axis)}, grad=("X",), name=name)
    for name, x, g, axis in (
        ("nchw", _distinct(2, 4, 2, 3), 2, 1),
        ("groups_3", _distinct(1, 6, 2, 2), 3, 1),
        ("nhwc", _distinct(2, 2, 3, 4), 2, -1),
    )
] + [Case({"X": _ties}, {"groups": 2}, {"Out": ref_maxout(_ties, 2)}, name="ties")]

# -- clip, pow -------------------------------------------------------------------------------------------------


def _clip_case(x: np.ndarray, lo: float, hi: float, name: str, **tensors: np.ndarray) -> Case:
    low = float(tensors["Min"][0]) if "Min" in tensors else lo
    high = float(tensors["Max"][0]) if "Max" in tensors else hi
    expected = np.array([min(max(v, low), high) for v in x.astype(np.float64).ravel()]).reshape(x.shape)
    return Case(
        {"X": x, **tensors},
        {"min": lo, "max": hi},
        {"Out": expected.astype(x.dtype) if x.dtype.kind == "f" else np.trunc(expected).astype(x.dtype)},
        grad=("X",) if x.dtype == np.float64 else (),
        name=name,
    )


def _off_bounds(*shape: int, bounds: tuple[float, ...]) -> np.ndarray:
    x = RNG.uniform(-3, 3, shape)
    for pos in np.ndindex(*shape):
        while any(abs(x[pos] - b) < 0.05 for b in bounds):
            x[pos] = RNG.uniform(-3, 3)
    return x


CLIP = [
    _clip_case(_off_bounds(3, 4, bounds=(-1, 1)).astype(np.float32), -1.0, 1.0, "float32"),
    _clip_case(_off_bounds(3, 4, bounds=(-0.5, 2)), -0.5, 2.0, "float64"),
    _clip_case(_off_bounds(2, 5, bounds=(-2, 0.5)), -1.0, 1.0, "tensors", Min=np.array([-2.0]), Max=np.array([0.5])),
    _clip_case(RNG.integers(-5, 6, (3, 3)).astype(np.int64), -2.0, 3.0, "int64"),
]


def _pow_case(x: np.ndarray, factor: float, name: str, tensor: bool = False) -> Case:
    if x.dtype.kind == "f":
        expected = np.array([float(v) ** factor for v in x.astype(np.float64).ravel()]).reshape(x.shape)
    else:
        expected = np.array([math.trunc(float(v) ** factor) for v in x.ravel()]).reshape(x.shape)
    inputs = {"X": x, "FactorTensor": np.array([factor], np.float32)} if tensor else {"X": x}
    return Case(
        inputs,
        {"factor": 1.0 if tensor else factor},
        {"Out": expected.astype(x.dtype)},
        grad=("X",) if x.dtype == np.float64 else (),
        name=name,
    )


POW = [
    _pow_case(RNG.uniform(0.5, 2, (3, 4)).astype(np.float32), 2.5, "float32"),
    _pow_case(RNG.uniform(0.5, 2, (3, 4)), -1.5, "float64"),
    _pow_case(RNG.uniform(-2, 2, (2, 3)), 3.0, "integer_factor"),
    _pow_case(RNG.uniform(0.5, 2, (2, 3)), 0.5, "factor_tensor", tensor=True),
    # 0.75 and 0.25 by square roots where X is positive (LRN's beta), numpy's power where it is not
    _pow_case(RNG.uniform(1e-3, 50, (2, 3, 4)).astype(np.float32), 0.75, "three_quarters"),
    _pow_case(RNG.uniform(0.5, 50, (3, 4)), 0.25, "quarter"),
    _pow_case(np.array([1e30, 3e38, 1e-30, 1.5], np.float32), 0.75, "three_quarters_of_large_and_tiny"),
    Case(
        {"X": np.array([4.0, 0.0, -1.0, np.inf, -np.inf, 2.0], np.float32)},
        {"factor": 0.75},
        {"Out": np.array([4.0**0.75, 0.0, np.nan, np.inf, np.inf, 2.0**0.75], np.float32)},
        name="three_quarters_not_positive",
    ),
    _pow_case(RNG.integers(0, 5, (2, 3)).astype(np.int32), 2.0, "int32"),
]

CASES: dict[str, list[Case]] = {
    **{row.op: _unary_cases(row) for row in UNARY_ROWS},
    "prelu": PRELU,
    "log_softmax": LOG_SOFTMAX,
    "maxout": MAXOUT,
    "clip": CLIP,
    "pow": POW,
}

_f32 = np.zeros((3, 4), np.float32)

INFER_ERRORS: list[tuple[str, Case, str]] = [
    ("relu6", Case({"X": np.zeros(3, np.int64)}), r"relu6: X .* has dtype int64"),
    ("prelu", Case({"X": _f32, "Alpha": np.zeros(3, np.float32)}, {"mode": "channel"}), r"Alpha .* has 3 slopes; "),
    ("prelu", Case({"X": _f32, "Alpha": np.zeros(1, np.float32)}, {"mode": "row"}), r"mode='row' must be one of"),
    ("prelu", Case({"X": _f32, "Alpha": np.zeros(1)}), r"different dtypes"),
    ("log_softmax", Case({"X": _f32}, {"axis": 2}), r"axis 2 is out of range for rank 2"),
    ("maxout", Case({"X": np.zeros((1, 6, 2, 2))}, {"groups": 4}), r"6 channels .* do not split into groups of 4"),
    ("maxout", Case({"X": _f32}, {"groups": 2}), r"must have rank 4"),
    ("clip", Case({"X": _f32}, {"min": 2.0, "max": 1.0}), r"min=2.0 is greater than max=1.0"),
    ("clip", Case({"X": _f32, "Min": np.zeros(2, np.float32)}, {"min": 0.0, "max": 1.0}), r"Min .* must hold one"),
    ("pow", Case({"X": np.zeros(3, bool)}), r"pow: X .* has dtype bool"),
]

KERNEL_ERRORS: list[tuple[str, Case, str]] = [
    (
        "clip",
        Case({"X": _f32, "Min": np.array([3.0], np.float32)}, {"min": 0.0, "max": 1.0}),
        r"min 3.0 is greater than max 1.0",
    ),
]

# float16 silu and swish, their sigmoid computed in float32 (in float16, 0.5 tanh(x / 2) + 0.5 cancels to 5e-3 off)
_x16 = np.linspace(-6.0, 6.0, 12).reshape(3, 4).astype(np.float16)
_silu16 = (_x16 / (1.0 + np.exp(-_x16.astype(np.float64)))).astype(np.float16)
for _op, _attrs in (("silu", {}), ("swish", {"beta": 1.0})):
    CASES[_op].append(Case({"X": _x16}, _attrs, {"Out": _silu16}, rtol=1e-3, name="float16"))
