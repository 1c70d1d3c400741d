"""Draws keyed by a seed and an id (a server's first rows, an entry policy's draws): each id's the same in any
batch, distinct ids independent, the distributions the initializers promise."""

from __future__ import annotations

import time

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from blockir.distributed.seeded import ROW, SIGHTING, first_rows, uniforms

# dtype: the type codes of framework.proto (FP32 = 5, FP64 = 6)
UNIFORM = {"min": -0.5, "max": 0.25, "seed": 7, "dtype": 5}
GAUSSIAN = {"mean": 1.0, "std": 2.0, "seed": 7, "dtype": 6}


@settings(max_examples=100, deadline=None)
@given(st.lists(st.integers(0, 2**62), min_size=1, max_size=30, unique=True), st.randoms(use_true_random=False))
def test_a_rows_first_value_is_the_same_in_any_batch_and_order(ids: list[int], shuffle: object) -> None:
    batch = np.array(ids, np.int64)
    rows = first_rows("uniform_random", UNIFORM, batch, 8)
    order = list(range(len(ids)))
    shuffle.shuffle(order)  # type: ignore[attr-defined]
    np.testing.assert_array_equal(first_rows("uniform_random", UNIFORM, batch[order], 8), rows[order])
    for i, row in zip(ids, rows, strict=True):
        np.testing.assert_array_equal(first_rows("uniform_random", UNIFORM, np.array([i]), 8)[0], row)


def test_the_initializers_distributions_and_dtypes() -> None:
    ids = np.arange(20_000, dtype=np.int64)
    uniform = first_rows("uniform_random", UNIFORM, ids, 16)
    assert uniform.dtype == np.float32 and uniform.shape == (20_000, 16)
    assert uniform.min() >= -0.5 and uniform.max() < 0.25
    assert abs(uniform.mean() - (-0.125)) < 0.002 and abs(uniform.var() - 0.75**2 / 12) < 0.001
    gaussian = first_rows("gaussian_random", GAUSSIAN, ids, 16)
    assert gaussian.dtype == np.float64
    assert abs(gaussian.mean() - 1.0) < 0.01 and abs(gaussian.std() - 2.0) < 0.01
    assert abs(np.mean(np.abs(gaussian - 1.0) < 2.0) - 0.6827) < 0.005  # within one std
    # neighbouring ids and columns do not correlate
    assert abs(np.corrcoef(uniform[:-1, 0], uniform[1:, 0])[0, 1]) < 0.03
    assert abs(np.corrcoef(uniform[:, 0], uniform[:, 1])[0, 1]) < 0.03


def test_seeds_and_purposes_give_independent_streams() -> None:
    ids = np.arange(10_000, dtype=np.int64)
    one = first_rows("uniform_random", UNIFORM, ids, 4)
    other = first_rows("uniform_random", UNIFORM | {"seed": 8}, ids, 4)
    assert abs(np.corrcoef(one.ravel(), other.ravel())[0, 1]) < 0.03
    rows = uniforms(7, ROW, ids, np.ones((1, 1)))[:, 0]
    draws = uniforms(7, SIGHTING, ids, np.ones((1, 1)))[:, 0]
    assert abs(np.corrcoef(rows, draws)[0, 1]) < 0.03
    assert len(np.unique(rows)) == len(ids)


@pytest.mark.parametrize("op", ["uniform_random", "gaussian_random"])
def test_a_batch_of_first_rows_costs_a_few_numpy_passes(op: str) -> None:
    """Not a Python call per id: 100,000 rows take far less than 100,000 generators would (about 3 s)."""
    attrs = UNIFORM if op == "uniform_random" else GAUSSIAN
    start = time.process_time()
    first_rows(op, attrs, np.arange(100_000, dtype=np.int64), 16)
    assert time.process_time() - start < 0.5
