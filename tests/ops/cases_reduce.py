"""Test cases of the reductions and scans of blockir.ops.reduce, as data, with references computed in plain numpy
(loops over the reduced positions, not the kernels' calls)."""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any

import numpy as np

from tests.ops.harness import Case

RNG = np.random.default_rng(20260602)


def _distinct(*shape: int) -> np.ndarray:
    """float64 values 0.1 apart at least (a maximum stays one entry under finite differences), none near 0."""
    return ((RNG.permutation(math.prod(shape)) + 5) * 0.1 * RNG.choice([-1.0, 1.0], size=math.prod(shape))).reshape(
        shape
    )


def _reduce(x: np.ndarray, axes: tuple[int, ...], keep: bool, fn: Callable[[np.ndarray], Any]) -> np.ndarray:
    """``fn`` of the entries of each reduced group, looping over the kept positions."""
    kept = [d for i, d in enumerate(x.shape) if i not in axes]
    moved = np.moveaxis(x, axes, tuple(range(x.ndim - len(axes), x.ndim))).reshape(*kept, -1)
    out = np.array([fn(moved[pos]) for pos in np.ndindex(*kept)]).reshape(kept)
    if keep:
        out = out.reshape([1 if i in axes else d for i, d in enumerate(x.shape)])
    return out.reshape(out.shape or (1,))


REDUCE_REFS: dict[str, Callable[[np.ndarray], Any]] = {
    "reduce_max": lambda v: max(v.tolist()),
    "reduce_min": lambda v: min(v.tolist()),
    "reduce_prod": lambda v: math.prod(v.tolist()),
    "reduce_all": lambda v: all(v.tolist()),
    "reduce_any": lambda v: any(v.tolist()),
}
# (name, X shape, dim, keep_dim, reduce_all)
REDUCTIONS = [
    ("dim0", (3, 4), [0], False, False),
    ("negative_dim", (2, 3, 4), [-1], False, False),
    ("two_dims", (2, 3, 4), [0, 2], False, False),
    ("keep_dim", (2, 3, 4), [1], True, False),
    ("reduce_all", (2, 3), [0], False, True),
]


def _reduce_cases(op_type: str) -> list[Case]:
    ref, cases = REDUCE_REFS[op_type], []
    logical = op_type in ("reduce_all", "reduce_any")
    for name, shape, dim, keep, everything in REDUCTIONS:
        axes = tuple(range(len(shape))) if everything else tuple(d % len(shape) for d in dim)
        attrs = {"dim": dim, "keep_dim": keep, "reduce_all": everything}
        if logical:
            inputs = (("bool", RNG.random(shape) < 0.7), ("float32", (RNG.random(shape) < 0.7).astype(np.float32)))
        else:
            inputs = (("float64", _distinct(*shape)), ("int32", RNG.integers(-3, 4, shape).astype(np.int32)))
        for dtype, x in inputs:
            out_dtype = bool if logical else x.dtype
            expected = _reduce(x, axes, keep, ref).astype(out_dtype)
            grad = ("X",) if dtype == "float64" else ()
            cases.append(Case({"X": x}, attrs, {"Out": expected}, grad=grad, name=f"{name}_{dtype}"))
    if not logical:
        x = _distinct(2, 3)
        cases.append(
            Case(
                {"X": x.astype(np.float32)},
                {"dim": [1], "in_dtype": 5, "out_dtype": 6},
                {"Out": _reduce(x.astype(np.float32).astype(np.float64), (1,), False, ref)},
                name="out_dtype_float64",
            )
        )
    return cases


_ties = np.array([[1.0, 3.0, 3.0], [2.0, 2.0, 0.5]])
REDUCE_MAX_GRAD = [
    Case(
        {"X": _ties, "Out": np.array([3.0, 2.0]), "Out@GRAD": np.array([1.0, 2.0])},
        {"dim": [1]},
        {"X@GRAD": np.array([[0.0, 1.0, 1.0], [2.0, 2.0, 0.0]])},
        name="ties_each_take_all",
    )
]

# -- logsumexp, p_norm ----------------------------------------------------------------------------------------------


def ref_logsumexp(v: np.ndarray) -> float:
    top = max(v.tolist())
    return top + math.log(sum(math.exp(e - top) for e in v.tolist()))


def _logsumexp_case(x: np.ndarray, axis: list[int], keep: bool, name: str, everything: bool = False) -> Case:
    axes = tuple(range(x.ndim)) if everything or not axis else tuple(a % x.ndim for a in axis)
    return Case(
        {"X": x},
        {"axis": axis, "keepdim": keep, "reduce_all": everything},
        {"Out": _reduce(x.astype(np.float64), axes, keep, ref_logsumexp).astype(x.dtype)},
        grad=("X",) if x.dtype == np.float64 else (),
        name=name,
    )


LOGSUMEXP = [
    _logsumexp_case(RNG.uniform(-3, 3, (3, 4)).astype(np.float32), [1], False, "float32"),
    _logsumexp_case(RNG.uniform(-3, 3, (2, 3, 4)), [0, 2], False, "two_axes"),
    _logsumexp_case(RNG.uniform(-3, 3, (2, 3)), [-1], True, "keepdim"),
    _logsumexp_case(RNG.uniform(-3, 3, (2, 3)), [0], False, "reduce_all", everything=True),
    _logsumexp_case(np.array([[1000.0, 999.0], [-1000.0, -1001.0]]), [1], False, "large_values"),
]


def ref_p_norm(p: float) -> Callable[[np.ndarray], float]:
    def norm(v: np.ndarray) -> float:
        a = [abs(e) for e in v.tolist()]
        if p == math.inf:
            return max(a)
        if p == -math.inf:
            return min(a)
        if p == 0:
            return float(sum(e != 0 for e in a))
        return sum(e**p for e in a) ** (1 / p)

    return norm


def _p_norm_case(x: np.ndarray, p: float, axis: int, name: str, keep: bool = False, asvector: bool = False) -> Case:
    axes = tuple(range(x.ndim)) if asvector else (axis % x.ndim,)
    return Case(
        {"X": x},
        {"porder": p, "axis": axis, "keepdim": keep, "asvector": asvector},
        {"Out": _reduce(x.astype(np.float64), axes, keep, ref_p_norm(p)).astype(x.dtype)},
        grad=("X",) if x.dtype == np.float64 and p != 0 else (),
        name=name,
    )


P_NORM = [
    _p_norm_case(_distinct(3, 4).astype(np.float32), 2.0, -1, "float32"),
    _p_norm_case(_distinct(3, 4), 2.0, 1, "l2"),
    _p_norm_case(_distinct(3, 4), 1.0, 0, "l1_axis0"),
    _p_norm_case(_distinct(2, 3, 2), 3.0, 1, "p3_keepdim", keep=True),
    _p_norm_case(_distinct(3, 4), math.inf, 1, "inf"),
    _p_norm_case(_distinct(3, 4), -math.inf, 1, "minus_inf"),
    _p_norm_case(np.array([[0.0, 1.5, -2.0], [0.0, 0.0, 3.0]]), 0.0, 1, "zero_counts"),
    _p_norm_case(_distinct(2, 3), 2.0, -1, "asvector", asvector=True),
]

# -- cumsum, cumprod ----------------------------------------------------------------------------------------------


def ref_scan(x: np.ndarray, axis: int, exclusive: bool, reverse: bool, product: bool) -> np.ndarray:
    moved = np.moveaxis(x, axis, -1)
    out = np.empty_like(moved)
    n = moved.shape[-1]
    for pos in np.ndindex(*moved.shape[:-1]):
        row = moved[pos].tolist()
        for i in range(n):
            span = (range(i + 1, n) if exclusive else range(i, n)) if reverse else range(i if exclusive else i + 1)
            picked = [row[j] for j in span]
            out[pos + (i,)] = math.prod(picked) if product else sum(picked)
    return np.moveaxis(out, -1, axis)


def _cumsum_case(x: np.ndarray, name: str, axis: int = -1, **flags: bool) -> Case:
    data, at = (x.reshape(-1), 0) if flags.get("flatten") else (x, axis % x.ndim)
    expected = ref_scan(data, at, flags.get("exclusive", False), flags.get("reverse", False), product=False)
    return Case(
        {"X": x},
        {"axis": axis, **flags},
        {"Out": expected.astype(x.dtype)},
        grad=("X",) if x.dtype == np.float64 else (),
        name=name,
    )


CUMSUM = [
    _cumsum_case(RNG.uniform(-2, 2, (3, 4)).astype(np.float32), "float32"),
    _cumsum_case(RNG.uniform(-2, 2, (3, 4)), "axis_0", axis=0),
    _cumsum_case(RNG.uniform(-2, 2, (2, 3, 4)), "exclusive", axis=1, exclusive=True),
    _cumsum_case(RNG.uniform(-2, 2, (2, 3, 4)), "reverse", axis=2, reverse=True),
    _cumsum_case(RNG.uniform(-2, 2, (3, 4)), "exclusive_reverse", axis=1, exclusive=True, reverse=True),
    _cumsum_case(RNG.uniform(-2, 2, (2, 3)), "flatten", flatten=True),
    _cumsum_case(RNG.integers(-5, 6, (3, 4)).astype(np.int32), "int32"),
]


def _cumprod_case(x: np.ndarray, dim: int, name: str, **flags: bool) -> Case:
    expected = ref_scan(x, dim % x.ndim, flags.get("exclusive", False), flags.get("reverse", False), product=True)
    return Case(
        {"X": x},
        {"dim": dim, **flags},
        {"Out": expected.astype(x.dtype)},
        grad=("X",) if x.dtype == np.float64 else (),
        name=name,
    )


_with_zero = RNG.uniform(0.5, 1.5, (2, 4))
_with_zero[0, 1] = 0.0
CUMPROD = [
    _cumprod_case(RNG.uniform(0.5, 1.5, (3, 4)).astype(np.float32), -1, "float32"),
    _cumprod_case(RNG.uniform(-1.5, 1.5, (3, 4)), 0, "axis_0"),
    _cumprod_case(RNG.uniform(-1.5, 1.5, (2, 3, 4)), 1, "exclusive", exclusive=True),
    _cumprod_case(RNG.uniform(-1.5, 1.5, (2, 3, 4)), 2, "reverse", reverse=True),
    _cumprod_case(RNG.uniform(-1.5, 1.5, (3, 4)), 1, "exclusive_reverse", exclusive=True, reverse=True),
    _cumprod_case(_with_zero, 1, "a_zero_entry"),
    _cumprod_case(RNG.integers(-3, 4, (3, 4)).astype(np.int64), 1, "int64"),
]

CASES: dict[str, list[Case]] = {
    **{op_type: _reduce_cases(op_type) for op_type in REDUCE_REFS},
    "reduce_max_grad": REDUCE_MAX_GRAD,
    "logsumexp": LOGSUMEXP,
    "p_norm": P_NORM,
    "cumsum": CUMSUM,
    "cumprod": CUMPROD,
}

_f32 = np.zeros((3, 4), np.float32)

INFER_ERRORS: list[tuple[str, Case, str]] = [
    ("reduce_max", Case({"X": _f32}, {"dim": [2]}), r"dim 2 is out of range for rank 2"),
    ("reduce_min", Case({"X": np.zeros(3, bool)}), r"reduce_min: X .* has dtype bool"),
    ("reduce_prod", Case({"X": _f32}, {"in_dtype": 6}), r"in_dtype=6 is not the dtype of X"),
    ("reduce_max", Case({"X": _f32}, {"out_dtype": 0}), r"out_dtype=0 \(bool\) is not one of"),
    ("logsumexp", Case({"X": np.zeros(3, np.int64)}), r"logsumexp: X .* has dtype int64"),
    ("p_norm", Case({"X": _f32}, {"axis": 3}), r"axis 3 is out of range for rank 2"),
    ("cumsum", Case({"X": _f32}, {"axis": -3}), r"axis -3 is out of range for rank 2"),
    ("cumprod", Case({"X": _f32}, {"dim": 2}), r"dim 2 is out of range for rank 2"),
]


def _det_case(x: np.ndarray, name: str) -> Case:
    """The determinant by Laplace expansion along the first row (recursive, independent of LAPACK)."""

    def laplace(m: list[list[float]]) -> float:
        if len(m) == 1:
            return m[0][0]
        return sum((-1) ** j * m[0][j] * laplace([row[:j] + row[j + 1 :] for row in m[1:]]) for j in range(len(m)))

    flat = x.reshape(-1, *x.shape[-2:])
    expected = np.array([laplace(m.tolist()) for m in flat]).reshape(x.shape[:-2]).astype(x.dtype)
    return Case({"Input": x}, {}, {"Out": expected}, grad=("Input",) if x.dtype == np.float64 else (), name=name)


_singular = RNG.uniform(-1, 1, (2, 3, 3))
_singular[1, 2] = _singular[1, 0] + _singular[1, 1]  # its rows dependent: det 0 (grad left unchecked there)
CASES["determinant"] = [
    _det_case(RNG.uniform(-1, 1, (3, 3)), "one_matrix"),
    _det_case(RNG.uniform(-1, 1, (2, 3, 4, 4)), "batched"),
    _det_case(RNG.uniform(-1, 1, (1, 1)), "one_by_one"),
    _det_case(RNG.uniform(-1, 1, (2, 2, 2)).astype(np.float32), "float32"),
    Case({"Input": _singular}, {}, {"Out": np.array([np.linalg.det(_singular[0]), 0.0])}, atol=1e-12, name="singular"),
]
INFER_ERRORS += [
    ("determinant", Case({"Input": np.zeros((2, 3), np.float32)}), r"must be square matrices"),
    ("determinant", Case({"Input": np.zeros((2, 2), np.int64)}), r"determinant: Input .* has dtype int64"),
]
