"""The data-parallel ops against numpy: split_batch, allreduce (dense and SelectedRows), device_allreduce, broadcast.

They have no gradients (the ``data-parallel`` pass places them after autodiff), so numpy references only.
"""

from __future__ import annotations

import numpy as np
import pytest

import blockir as bir
from blockir.errors import BlockirError
from blockir.ir import Program
from blockir.ops.parallel import split_sizes
from blockir.ops.values import LoDTensor, SelectedRows
from blockir.passes import run
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


@pytest.mark.parametrize("count", [2, 3])
def test_device_allreduce_gives_every_device_its_own_copy_of_the_sum(count: int) -> None:
    xs = [RNG.normal(size=(2, 3)) for _ in range(count)]
    outs = run_op("device_allreduce", {"X": xs}, {"devices": [f"cpu:{k}" for k in range(count)]})["Out"]
    assert len(outs) == count
    for out in outs:
        np.testing.assert_allclose(out, sum(xs), rtol=1e-12)
    assert len({id(o) for o in outs}) == count  # each device's own array: an update of one leaves the others


def test_device_allreduce_runs_over_cpu_devices_reading_each_input_where_it_is() -> None:
    """In a program: X[i] is made on devices[i] and read there (no copy inserted), Out[i] is there after."""
    program = Program()
    block = program.global_block()
    for name in ("a", "b", "a2", "b2", "sa", "sb"):
        block.create_var(name, shape=(2,), dtype="float64", need_check_feed=name in ("a", "b"))
    block.append_op("scale", {"X": "a"}, {"Out": "a2"}, {"scale": 2.0, "op_device": "cpu:0"})
    block.append_op("scale", {"X": "b"}, {"Out": "b2"}, {"scale": 3.0, "op_device": "cpu:1"})
    block.append_op(
        "device_allreduce",
        {"X": ["a2", "b2"]},
        {"Out": ["sa", "sb"]},
        {"devices": ["cpu:0", "cpu:1"], "op_device": "cpu:0"},
    )
    result, _ = run(program, "insert-copies,streams")
    text = str(result)
    assert "memcpy(X=%a2" not in text and "memcpy(X=%b2" not in text
    assert 'op_stream="cpu/copy"' in text.split("device_allreduce")[1]
    a, b = np.array([1.0, 2.0]), np.array([0.5, -1.0])
    sa, sb = bir.Executor("cpu").run(result, feed={"a": a, "b": b}, fetch_list=["sa", "sb"])
    np.testing.assert_allclose(sa, 2 * a + 3 * b)
    np.testing.assert_allclose(sb, 2 * a + 3 * b)


def test_a_device_allreduce_reading_a_value_on_the_wrong_device_is_refused_naming_it() -> None:
    program = Program()
    block = program.global_block()
    for name in ("a", "b", "sa", "sb"):
        block.create_var(name, shape=(2,), dtype="float64", need_check_feed=name in ("a", "b"))
    block.append_op(
        "device_allreduce",
        {"X": ["a", "b"]},
        {"Out": ["sa", "sb"]},
        {"devices": ["cpu:0", "cpu:1"], "op_device": "cpu:0"},
    )
    with pytest.raises(BlockirError, match=r"reads 'b' as its input on cpu:1, which is on cpu .*device_allreduce"):
        bir.Executor("cpu").run(program, feed={"a": np.zeros(2), "b": np.zeros(2)}, fetch_list=["sa"])


@pytest.mark.parametrize(
    ("devices", "message"),
    [
        (["cpu:0"], "1 devices need as many X and Out variables"),
        (["cpu:0", "cpu:0"], "names a device twice"),
        (["cpu:0", "cuda:0"], "mixes kinds of device"),
        (["cpu:0", "tpu:1"], "'tpu:1', which is not a device"),
    ],
)
def test_device_allreduce_refuses_bad_devices(devices: list[str], message: str) -> None:
    program = Program()
    block = program.global_block()
    xs = [block.create_var(f"x{k}", shape=(2,), dtype="float32").name for k in range(len(devices))]
    outs = [block.create_var(f"o{k}").name for k in range(len(devices))]
    with pytest.raises(BlockirError, match=message):
        block.append_op("device_allreduce", {"X": xs}, {"Out": outs}, {"devices": devices})
