"""The layers of blockir.dsl.math_layers (activations, math, reductions, comparisons, indexing, creation) in
programs: each builds its op, infers the result's dtype, runs on the CPU executor against plain numpy, and a
differentiable one gets its gradient through ``append_backward`` (the ops' gradients themselves are checked against
finite differences in ``tests/ops``)."""

from __future__ import annotations

import math
from collections.abc import Callable

import numpy as np
import pytest

import blockir as bir
from blockir.dsl import Parameter
from blockir.errors import BlockirError

RNG = np.random.default_rng(11)
L = bir.layers
X = RNG.uniform(0.2, 2.0, (2, 3, 4)) * RNG.choice([-1.0, 1.0], (2, 3, 4))
POSITIVE = np.abs(X) + 0.1
_sig = lambda a: 1 / (1 + np.exp(-a))  # noqa: E731
F32_FIFTH = float(np.float32(0.2))  # float attributes are float32

# (layer call on x [-1, 3, 4] float64, numpy reference on x's value, op type, x's value)
UNARY = [
    (lambda x: L.relu6(x, 1.0), lambda a: np.clip(a, 0, 1.0), "relu6", X),
    (L.hard_swish, lambda a: a * np.clip(a + 3, 0, 6) / 6, "hard_swish", X),
    (L.hard_sigmoid, lambda a: np.clip(F32_FIFTH * a + 0.5, 0, 1), "hard_sigmoid", X),
    (lambda x: L.swish(x, 2.0), lambda a: a * _sig(2 * a), "swish", X),
    (L.silu, lambda a: a * _sig(a), "silu", X),
    (L.mish, lambda a: a * np.tanh(np.log1p(np.exp(a))), "mish", X),
    (L.elu, lambda a: np.where(a > 0, a, np.expm1(a)), "elu", X),
    (L.selu, lambda a: 1.0507009873554805 * np.where(a > 0, a, 1.6732632423543772 * np.expm1(a)), "selu", X),
    (lambda x: L.celu(x, 2.0), lambda a: np.where(a > 0, a, 2 * np.expm1(a / 2)), "celu", X),
    (lambda x: L.leaky_relu(x, 0.5), lambda a: np.where(a > 0, a, 0.5 * a), "leaky_relu", X),
    (lambda x: L.brelu(x, -1.0, 1.0), lambda a: np.clip(a, -1, 1), "brelu", X),
    (L.softplus, lambda a: np.log1p(np.exp(a)), "softplus", X),
    (L.softsign, lambda a: a / (1 + np.abs(a)), "softsign", X),
    (L.softshrink, lambda a: np.where(a > 0.5, a - 0.5, np.where(a < -0.5, a + 0.5, 0)), "softshrink", X),
    (L.hard_shrink, lambda a: np.where(np.abs(a) > 0.5, a, 0), "hard_shrink", X),
    (L.tanh_shrink, lambda a: a - np.tanh(a), "tanh_shrink", X),
    (L.thresholded_relu, lambda a: np.where(a > 1.0, a, 0), "thresholded_relu", X),
    (L.logsigmoid, lambda a: np.log(_sig(a)), "logsigmoid", X),
    (lambda x: L.log_softmax(x, 1), lambda a: a - np.log(np.exp(a).sum(1, keepdims=True)), "log_softmax", X),
    (L.abs, np.abs, "abs", X),
    (L.exp, np.exp, "exp", X),
    (L.expm1, np.expm1, "expm1", X),
    (L.log, np.log, "log", POSITIVE),
    (L.log1p, np.log1p, "log1p", POSITIVE),
    (L.log2, np.log2, "log2", POSITIVE),
    (L.log10, np.log10, "log10", POSITIVE),
    (L.sqrt, np.sqrt, "sqrt", POSITIVE),
    (L.rsqrt, lambda a: 1 / np.sqrt(a), "rsqrt", POSITIVE),
    (L.reciprocal, lambda a: 1 / a, "reciprocal", X),
    (L.square, np.square, "square", X),
    (L.sin, np.sin, "sin", X),
    (L.cos, np.cos, "cos", X),
    (L.tan, np.tan, "tan", X / 2),
    (L.atan, np.arctan, "atan", X),
    (L.erf, np.vectorize(math.erf), "erf", X),
    (lambda x: L.pow(x, 3.0), lambda a: a**3, "pow", X),
    (lambda x: L.clip(x, -0.5, 1.0), lambda a: np.clip(a, -0.5, 1.0), "clip", X),
    (lambda x: L.reduce_max(x, 1), lambda a: a.max(1), "reduce_max", X),
    (lambda x: L.reduce_min(x, [1, 2], keep_dim=True), lambda a: a.min((1, 2), keepdims=True), "reduce_min", X),
    (lambda x: L.reduce_prod(x, -1), lambda a: a.prod(-1), "reduce_prod", X),
    (lambda x: L.logsumexp(x, 2), lambda a: np.log(np.exp(a).sum(2)), "logsumexp", X),
    (lambda x: L.p_norm(x, 2.0, 1), lambda a: np.sqrt((a * a).sum(1)), "p_norm", X),
    (lambda x: L.cumsum(x, 1, reverse=True), lambda a: np.flip(np.flip(a, 1).cumsum(1), 1), "cumsum", X),
    (lambda x: L.cumprod(x, 2), lambda a: a.cumprod(2), "cumprod", X),
    (lambda x: L.expand(x, [2, -1, 3, 4]), lambda a: np.broadcast_to(a, (2, 2, 3, 4)), "expand_v2", X),
    (lambda x: L.tile(x, [1, 2, 1]), lambda a: np.tile(a, (1, 2, 1)), "tile", X),
    (lambda x: L.flip(x, [1]), lambda a: np.flip(a, 1), "flip", X),
    (lambda x: L.roll(x, 1, 2), lambda a: np.roll(a, 1, 2), "roll", X),
    (lambda x: L.stack([x, x], axis=1), lambda a: np.stack([a, a], 1), "stack", X),
]


@pytest.mark.parametrize(("build", "reference", "op_type", "value"), UNARY, ids=[row[2] for row in UNARY])
def test_differentiable_layers(progs, build: Callable, reference: Callable, op_type: str, value: np.ndarray):
    main, _ = progs
    x = bir.data("x", shape=[-1, 3, 4], dtype="float64")
    x.stop_gradient = False
    out = build(x)
    assert [op.type for op in main.global_block().ops] == [op_type]
    assert out.dtype == "float64"
    bir.append_backward(L.mean(out))
    bir.ir.verify(main)
    result, grad = bir.Executor("cpu").run(main, feed={"x": value}, fetch_list=[out, "x@GRAD"])
    np.testing.assert_allclose(result, reference(value), rtol=1e-10, atol=1e-12)
    assert grad.shape == value.shape and np.isfinite(grad).all()


def _ints() -> np.ndarray:
    return RNG.integers(-3, 4, (2, 3)).astype(np.int64)


A, B = _ints(), _ints()
VALUES = RNG.uniform(-2, 2, (4, 3))

# (layer call on x [-1, 3] int64 and y [-1, 3] int64, numpy reference, result dtype)
BINARY = [
    (L.equal, np.equal, "bool"),
    (L.not_equal, np.not_equal, "bool"),
    (L.less_than, np.less, "bool"),
    (L.less_equal, np.less_equal, "bool"),
    (L.greater_than, np.greater, "bool"),
    (L.greater_equal, np.greater_equal, "bool"),
    (L.logical_and, np.logical_and, "bool"),
    (L.logical_or, np.logical_or, "bool"),
    (L.logical_xor, np.logical_xor, "bool"),
    (L.elementwise_mod, lambda a, b: np.mod(a, np.where(b == 0, 1, b)), "int64"),
    (L.elementwise_floordiv, lambda a, b: np.floor_divide(a, np.where(b == 0, 1, b)), "int64"),
]


@pytest.mark.parametrize(("build", "reference", "dtype"), BINARY, ids=[row[1].__name__ for row in BINARY])
def test_binary_layers(progs, build: Callable, reference: Callable, dtype: str):
    x = bir.data("x", shape=[-1, 3], dtype="int64")
    y = bir.data("y", shape=[-1, 3], dtype="int64")
    out = build(x, y)
    assert out.dtype == dtype
    b = np.where(B == 0, 1, B)
    (result,) = bir.Executor("cpu").run(progs[0], feed={"x": A, "y": b}, fetch_list=[out])
    np.testing.assert_array_equal(result, reference(A, b))


def _put_added(x: np.ndarray, picks: np.ndarray) -> np.ndarray:
    """x with twice the picked entries added at them, one pick at a time."""
    out = x.copy()
    for i, row in enumerate(picks):
        for j in row:
            out[i, j] += 2 * x[i, j]
    return out


def test_indexing_layers(progs):
    main, _ = progs
    x = bir.data("x", shape=[-1, 3], dtype="float64")
    index = bir.data("index", shape=[-1], dtype="int64")
    rows = bir.data("rows", shape=[-1, 2], dtype="int64")
    cols = bir.data("cols", shape=[-1, 2], dtype="int64")
    mask = bir.data("mask", shape=[-1, 3], dtype="bool")
    outs = [
        L.gather(x, index),
        L.index_select(x, index, axis=0),
        L.gather_nd(x, rows),
        L.scatter(x, index, L.gather(x, index)),
        L.scatter_nd_add(x, rows, L.gather_nd(x, rows)),
        L.index_sample(x, cols),
        L.take_along_axis(x, cols, 1),
        L.put_along_axis(x, cols, L.scale(L.take_along_axis(x, cols, 1), 2.0), 1, "add"),
        L.masked_select(x, mask),
        L.where(mask, x, L.scale(x, -1.0)),
        *L.argsort(x, axis=1, descending=True),
        L.one_hot(index, 4),
        L.logical_not(mask),
        L.reduce_all(mask, 1),
        L.reduce_any(mask),
        L.shape(x),
        L.size(x),
        L.full_like(x, 2.0, "int32"),
        L.expand_as(L.reduce_max(x, 1, keep_dim=True), x),
        *L.unstack(x, axis=1),
    ]
    bir.ir.verify(main)
    idx, pairs, m = np.array([3, 0, 3]), np.array([[0, 2], [3, 1]]), VALUES > 0
    picks = np.array([[0, 2], [1, 1], [2, 0], [0, 0]])
    feed = {"x": VALUES, "index": idx, "rows": pairs, "cols": picks, "mask": m}
    results = bir.Executor("cpu").run(main, feed=feed, fetch_list=outs)
    scattered = VALUES.copy()
    scattered[[0, 3]] = VALUES[[0, 3]]
    nd_added = VALUES.copy()
    for r, c in pairs:
        nd_added[r, c] += VALUES[r, c]
    order = np.argsort(-VALUES, axis=1, kind="stable")
    expected = [
        VALUES[idx],
        VALUES[idx],
        VALUES[pairs[:, 0], pairs[:, 1]],
        scattered,
        nd_added,
        np.array([[VALUES[i, j] for j in row] for i, row in enumerate(picks)]),
        np.array([[VALUES[i, j] for j in row] for i, row in enumerate(picks)]),
        _put_added(VALUES, picks),
        VALUES[m],
        np.where(m, VALUES, -VALUES),
        np.take_along_axis(VALUES, order, 1),
        order,
        np.eye(4, dtype=np.float32)[idx],
        ~m,
        m.all(1),
        np.array([m.any()]),
        np.array([4, 3], np.int32),
        np.array(12),
        np.full((4, 3), 2, np.int32),
        np.broadcast_to(VALUES.max(1, keepdims=True), (4, 3)),
        *(VALUES[:, i] for i in range(3)),
    ]
    assert len(results) == len(expected)
    for i, (got, want) in enumerate(zip(results, expected)):
        np.testing.assert_array_equal(got, want, err_msg=f"output {i}")


def test_creation_layers(progs):
    main, _ = progs
    constant = L.assign_value(np.array([[1.5, 2.0]], np.float32))
    ints = L.assign_value(np.array([3, -4], np.int64))
    steps = L.range(0, 10, 3, "int64")
    spaced = L.linspace(0.0, 1.0, 5, "float64")
    assert (constant.shape, ints.dtype, steps.dtype, spaced.dtype) == ((1, 2), "int64", "int64", "float64")
    results = bir.Executor("cpu").run(main, fetch_list=[constant, ints, steps, spaced])
    np.testing.assert_array_equal(results[0], [[1.5, 2.0]])
    np.testing.assert_array_equal(results[1], [3, -4])
    np.testing.assert_array_equal(results[2], [0, 3, 6, 9])
    np.testing.assert_allclose(results[3], [0, 0.25, 0.5, 0.75, 1.0])


def test_prelu_learns_its_slope(progs):
    main, startup = progs
    x = bir.data("x", shape=[-1, 3, 2, 2], dtype="float32")
    out = L.prelu(x, "channel")
    (alpha,) = [v for v in main.global_block().vars.values() if isinstance(v, Parameter)]
    assert alpha.shape == (3,)
    bir.append_backward(L.mean(out))
    exe = bir.Executor("cpu")
    exe.run(startup)
    value = -np.ones((2, 3, 2, 2), np.float32)
    result, grad = exe.run(main, feed={"x": value}, fetch_list=[out, alpha.name + "@GRAD"])
    np.testing.assert_allclose(result, -0.25 * np.ones_like(value))
    np.testing.assert_allclose(grad, np.full(3, -8 / 24), rtol=1e-6)


def test_layer_errors_name_the_layer(progs):
    x = bir.data("x", shape=[-1, 3], dtype="float32")
    with pytest.raises(BlockirError, match=r"layers.prelu: mode 'row' is not one of"):
        L.prelu(x, "row")
    with pytest.raises(BlockirError, match=r"layers.assign_value: value of dtype float16"):
        L.assign_value(np.zeros(2, np.float16))
    with pytest.raises(BlockirError, match=r"clip: min=2.0 is greater than max=1.0"):
        L.clip(x, 2.0, 1.0)
