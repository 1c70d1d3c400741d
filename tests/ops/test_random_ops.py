"""Behaviour of uniform_random and gaussian_random: moments, seeds, dtypes, shapes, bad attributes."""

from __future__ import annotations

import numpy as np
import pytest

from blockir.errors import ShapeError
from blockir.ir.core import Program
from blockir.ir.dtypes import DTYPE_TO_PROTO
from blockir.ir.schema import lookup
from tests.ops.harness import run_op

N = 200_000


def draw(op_type: str, **attrs) -> np.ndarray:
    return run_op(op_type, {}, attrs)["Out"]


def test_uniform_moments_and_range():
    low, high = -0.5, 2.0
    x = draw("uniform_random", shape=[N], min=low, max=high, seed=7, dtype=6)
    assert x.shape == (N,) and x.dtype == np.float64
    assert low <= x.min() and x.max() < high
    # standard errors: sd / sqrt(N) ~ 0.0016 for the mean; allow ~6 of them
    assert x.mean() == pytest.approx((low + high) / 2, abs=0.01)
    assert x.var() == pytest.approx((high - low) ** 2 / 12, rel=0.02)
    counts, _ = np.histogram(x, bins=10, range=(low, high))
    assert counts.min() > 0.9 * N / 10  # flat, not just the right mean


def test_gaussian_moments():
    x = draw("gaussian_random", shape=[400, 500], mean=1.5, std=0.25, seed=11)
    assert x.shape == (400, 500) and x.dtype == np.float32
    assert x.mean() == pytest.approx(1.5, abs=0.005)
    assert x.std() == pytest.approx(0.25, rel=0.01)
    z = (x - 1.5) / 0.25
    assert np.mean(np.abs(z) < 1) == pytest.approx(0.6827, abs=0.01)  # the shape of a normal


@pytest.mark.parametrize("op_type", ["uniform_random", "gaussian_random"])
def test_seeds(op_type):
    same = [draw(op_type, shape=[64], seed=42) for _ in range(2)]
    np.testing.assert_array_equal(*same)
    other = draw(op_type, shape=[64], seed=43)
    assert not np.array_equal(same[0], other)
    fresh = [draw(op_type, shape=[64], seed=0) for _ in range(2)]
    assert not np.array_equal(*fresh)
    assert lookup(op_type).random  # the DSL derives its seed from the program's random_seed


@pytest.mark.parametrize("op_type", ["uniform_random", "gaussian_random"])
@pytest.mark.parametrize("dtype", ["float16", "float32", "float64"])
def test_dtype_and_shape_are_honoured(op_type, dtype):
    x = draw(op_type, shape=[3, 0, 2] if dtype == "float16" else [3, 4, 2], dtype=DTYPE_TO_PROTO[dtype], seed=1)
    assert x.dtype == np.dtype(dtype)
    assert x.shape == ((3, 0, 2) if dtype == "float16" else (3, 4, 2))
    assert np.isfinite(x).all()


@pytest.mark.parametrize(
    "op_type, attrs, shape, dtype",
    [
        ("uniform_random", {"shape": [4, 5]}, (4, 5), "float32"),
        ("gaussian_random", {"shape": [7], "dtype": 6}, (7,), "float64"),
    ],
)
def test_inference(op_type, attrs, shape, dtype):
    block = Program().global_block()
    block.create_var("out")
    op = block.append_op(op_type, outputs={"Out": "out"}, attrs=attrs)
    assert (block.var("out").shape, block.var("out").dtype) == (shape, dtype)
    assert op.attr("seed") == 0


@pytest.mark.parametrize(
    "op_type, attrs, message",
    [
        ("uniform_random", {"shape": [2], "dtype": 3}, r"dtype 3 \(int64\) is not a floating-point type"),
        ("gaussian_random", {"shape": [2], "dtype": 99}, r"dtype=99 is not a dtype code"),
        ("uniform_random", {"shape": [-1, 2]}, r"shape \[-1, 2\] must not have negative dimensions"),
        ("uniform_random", {"shape": [2], "min": 1.0, "max": 0.0}, r"min 1\.0 is greater than max 0\.0"),
        ("gaussian_random", {"shape": [2], "std": -1.0}, r"std -1\.0 is negative"),
        ("gaussian_random", {"shape": [2], "seed": -3}, r"seed -3 must not be negative"),
    ],
)
def test_bad_attributes(op_type, attrs, message):
    block = Program().global_block()
    block.create_var("out")
    with pytest.raises(ShapeError, match=message):
        block.append_op(op_type, outputs={"Out": "out"}, attrs=attrs)
