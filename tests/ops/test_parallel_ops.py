"""The data-parallel ops against numpy: split_batch, allreduce (dense and SelectedRows), broadcast.

They have no gradients (the ``data-parallel`` pass places them after autodiff), so numpy references only.
"""

from __future__ import annotations

import numpy as np
import pytest

from blockir.ops.parallel import split_sizes
from blockir.ops.values import LoDTensor, SelectedRows
from tests.ops.harness import run_op

RNG = np.random.default_rng(7)


@pytest.mark.parametrize(("rows", "parts"), [(8, 2), (7, 2), (7, 3), (3, 3), (10, 4)])
def test_split_batch_cuts_rows_as_array_split_and_gives_each_part_its_share(rows: int, parts: int) -> None:
    x = RNG.normal(size=(rows, 3))
    out = run_op("split_batch", {"X": x}, {"replicas": parts})
    expected = np.array_split(x, parts)
    assert [p.shape[0] for p in out["Out"]] == [len(e) for e in expected] == split_sizes(rows, parts)
    for got, want in zip(out["Out"], expected):
        np.testing.assert_array_equal(got, want)
    np.testing.assert_allclose(np.concatenate(out["Share"]), [len(e) / rows for e in expected])
    assert out["Share"][0].dtype == np.float64


def test_split_batch_cuts_a_lod_tensor_by_whole_sequences() -> None:
    lengths = [2, 1, 3, 2, 1]
    x = LoDTensor.from_lengths(np.arange(9.0).reshape(9, 1), lengths)
    out = run_op("split_batch", {"X": x}, {"replicas": 2})
    first, second = out["Out"]
    assert first.lengths() == [2, 1, 3] and second.lengths() == [2, 1]
    np.testing.assert_array_equal(np.asarray(first.data).ravel(), np.arange(6.0))
    np.testing.assert_array_equal(np.asarray(second.data).ravel(), np.arange(6.0, 9.0))
    np.testing.assert_allclose(np.concatenate(out["Share"]), [3 / 5, 2 / 5])


def test_split_batch_cuts_a_two_level_lod_tensor_by_outer_sequences() -> None:
    x = LoDTensor(np.arange(7.0).reshape(7, 1), [[0, 2, 3, 5], [0, 1, 3, 5, 6, 7]])
    first, second = run_op("split_batch", {"X": x}, {"replicas": 2})["Out"]
    assert first.lod == [[0, 2, 3], [0, 1, 3, 5]] and second.lod == [[0, 2], [0, 1, 2]]
    np.testing.assert_array_equal(np.asarray(second.data).ravel(), [5.0, 6.0])


@pytest.mark.parametrize("x", [np.zeros((1, 2)), LoDTensor.from_lengths(np.zeros((3, 1)), [3])])
def test_a_batch_smaller_than_the_replicas_is_an_error(x: object) -> None:
    with pytest.raises(ValueError, match="cannot be split over 2 replicas"):
        run_op("split_batch", {"X": x}, {"replicas": 2})


def test_allreduce_is_the_share_weighted_sum() -> None:
    xs = [RNG.normal(size=(3, 4)) for _ in range(3)]
    shares = [np.array([0.5]), np.array([0.25]), np.array([0.25])]
    out = run_op("allreduce", {"X": xs, "Share": shares})["Out"]
    np.testing.assert_allclose(out, 0.5 * xs[0] + 0.25 * xs[1] + 0.25 * xs[2], rtol=1e-12)
    plain = run_op("allreduce", {"X": xs})["Out"]  # scale=one: no Share, a plain sum
    np.testing.assert_allclose(plain, xs[0] + xs[1] + xs[2], rtol=1e-12)


def test_allreduce_merges_sparse_rows_without_densifying() -> None:
    a = SelectedRows(np.array([3, 1, 3]), RNG.normal(size=(3, 2)), 6)
    b = SelectedRows(np.array([1, 5]), RNG.normal(size=(2, 2)), 6)
    out = run_op("allreduce", {"X": [a, b], "Share": [np.array([0.6]), np.array([0.4])]})["Out"]
    assert isinstance(out, SelectedRows)
    assert out.rows.tolist() == [1, 3, 5] and out.height == 6  # duplicate ids summed
    np.testing.assert_allclose(out.to_dense(), 0.6 * a.to_dense() + 0.4 * b.to_dense(), rtol=1e-12)


def test_allreduce_refuses_mixed_sparse_and_dense() -> None:
    a = SelectedRows(np.array([0]), np.ones((1, 2)), 3)
    with pytest.raises(ValueError, match="mixes SelectedRows and dense"):
        run_op("allreduce", {"X": [a, np.ones((3, 2))], "Share": [np.array([0.5]), np.array([0.5])]})


def test_broadcast_copies_and_with_init_only_keeps_a_value_already_there() -> None:
    x = RNG.normal(size=(2, 2))
    copied = run_op("broadcast", {"X": x}, {"dst_device": "cpu:1"})["Out"]
    np.testing.assert_array_equal(copied, x)
    assert copied is not x and not np.shares_memory(copied, x)
    current = np.zeros((2, 2))
    kept = run_op("broadcast", {"X": x, "Current": current}, {"dst_device": "cpu:1", "init_only": True})["Out"]
    np.testing.assert_array_equal(kept, current)
    first = run_op("broadcast", {"X": x, "Current": None}, {"dst_device": "cpu:1", "init_only": True})["Out"]
    np.testing.assert_array_equal(first, x)
    every = run_op("broadcast", {"X": x, "Current": current}, {"dst_device": "cpu:1"})["Out"]
    np.testing.assert_array_equal(every, x)  # without init_only: a copy every run


def test_split_batch_cuts_where_sections_say() -> None:
    x = RNG.normal(size=(9, 2))
    out = run_op("split_batch", {"X": x, "Sections": np.array([2, 7])}, {"replicas": 2})
    np.testing.assert_array_equal(out["Out"][0], x[:2])
    np.testing.assert_array_equal(out["Out"][1], x[2:])
    np.testing.assert_allclose(np.concatenate(out["Share"]), [2 / 9, 7 / 9])
    lod = LoDTensor.from_lengths(np.arange(6.0).reshape(6, 1), [1, 2, 3])
    first, second = run_op("split_batch", {"X": lod, "Sections": np.array([2, 1])}, {"replicas": 2})["Out"]
    assert first.lengths() == [1, 2] and second.lengths() == [3]
    with pytest.raises(
        ValueError, match=r"Sections \[3, 7\] must be 2 sizes of at least 1 that add up to the batch's 9"
    ):
        run_op("split_batch", {"X": x, "Sections": np.array([3, 7])}, {"replicas": 2})
