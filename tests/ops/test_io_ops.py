"""Behaviour of feed, fetch and memcpy: values, kinds and LoD kept, real copies, errors."""

from __future__ import annotations

import numpy as np
import pytest

from blockir.errors import BlockirError, ShapeError
from blockir.ir.core import Program
from blockir.ir.dtypes import VarKind
from blockir.ir.schema import KernelContext, lookup
from blockir.ops.values import LoDTensor, SelectedRows
from tests.ops.harness import run_op


def _values():
    return [
        np.arange(6.0).reshape(3, 2),
        LoDTensor(np.arange(5, dtype=np.int64).reshape(5, 1), [[0, 2, 5]]),
        SelectedRows(np.array([3, 0, 3]), np.ones((3, 2), np.float32), 4),
    ]


def feed(feed_list: list, col: int):
    """Run feed's kernel (the harness would turn the heterogeneous feed list into one array)."""
    return lookup("feed").kernel(KernelContext(np, {"col": col}, (True,), "feed"), feed_list)


def test_feed_takes_its_column():
    feed_list = _values()
    dense = feed(feed_list, 0)
    np.testing.assert_array_equal(dense, feed_list[0])
    lod = feed(feed_list, 1)
    assert isinstance(lod, LoDTensor) and lod.lod == [[0, 2, 5]]
    np.testing.assert_array_equal(lod.data, feed_list[1].data)


def test_feed_names_a_missing_column():
    with pytest.raises(BlockirError, match=r"feed: column 3 is missing from the feed list, which holds 3 value"):
        feed(_values(), 3)


def test_fetch_returns_host_copies_of_every_kind():
    dense, lod, rows = _values()
    got = run_op("fetch", {"X": dense})["Out"]
    np.testing.assert_array_equal(got, dense)
    dense[0, 0] = 99.0  # the program updating its value in place later must not change the fetched one
    assert got[0, 0] == 0.0
    got_lod = run_op("fetch", {"X": lod})["Out"]
    assert isinstance(got_lod, LoDTensor) and got_lod.lod == lod.lod
    assert not np.shares_memory(got_lod.data, lod.data)
    got_rows = run_op("fetch", {"X": rows})["Out"]
    assert isinstance(got_rows, SelectedRows) and got_rows.height == 4
    np.testing.assert_array_equal(got_rows.to_dense(), rows.to_dense())
    assert lookup("fetch").side_effects


@pytest.mark.parametrize("index", [0, 1, 2])
def test_memcpy_copies_and_keeps_the_kind(index):
    value = _values()[index]
    out = run_op("memcpy", {"X": value}, {"dst_device": "cpu:1"})["Out"]
    assert type(out) is type(value)
    if isinstance(value, LoDTensor):
        assert out.lod == value.lod and not np.shares_memory(out.data, value.data)
        np.testing.assert_array_equal(out.data, value.data)
    elif isinstance(value, SelectedRows):
        assert out.height == value.height and not np.shares_memory(out.values, value.values)
        np.testing.assert_array_equal(out.rows, value.rows)
        np.testing.assert_array_equal(out.values, value.values)
    else:
        assert not np.shares_memory(out, value)
        np.testing.assert_array_equal(out, value)


def _block():
    block = Program().global_block()
    block.create_var("feed", kind=VarKind.FEED_MINIBATCH)
    block.create_var("fetch", kind=VarKind.FETCH_LIST)
    block.create_var("x", shape=(-1, 3), dtype="float64", lod_level=1)
    block.create_var("rows", kind=VarKind.SELECTED_ROWS, shape=(10, 3))
    block.create_var("y")
    return block


def test_memcpy_inference_copies_the_description():
    block = _block()
    block.append_op("memcpy", {"X": "x"}, {"Out": "y"}, {"dst_device": "cuda:0"})
    y = block.var("y")
    assert (y.shape, y.dtype, y.lod_level, y.kind) == ((-1, 3), "float64", 1, VarKind.LOD_TENSOR)
    block.create_var("z")
    block.append_op("memcpy", {"X": "rows"}, {"Out": "z"}, {"dst_device": "cpu:1"})
    assert block.var("z").kind is VarKind.SELECTED_ROWS and block.var("z").shape == (10, 3)


def test_feed_and_fetch_inference_accept_their_list_variables():
    block = _block()
    block.append_op("feed", {"X": "feed"}, {"Out": "x"}, {"col": 0})
    block.append_op("fetch", {"X": "x"}, {"Out": "fetch"}, {"col": 1})
    assert block.var("x").shape == (-1, 3)  # the fed variable keeps its declaration


@pytest.mark.parametrize(
    "op_type, inputs, outputs, attrs, message",
    [
        ("memcpy", {"X": "x"}, {"Out": "y"}, {"dst_device": "gpu0"}, r"dst_device 'gpu0' is not a device"),
        ("feed", {"X": "x"}, {"Out": "y"}, {}, r"X 'x' must be a feed_minibatch variable, not lod_tensor"),
        ("feed", {"X": "feed"}, {"Out": "y"}, {"col": -1}, r"col -1 must not be negative"),
        ("fetch", {"X": "x"}, {"Out": "y"}, {}, r"Out 'y' must be a fetch_list variable"),
    ],
)
def test_bad_io_ops(op_type, inputs, outputs, attrs, message):
    with pytest.raises(ShapeError, match=message):
        _block().append_op(op_type, inputs, outputs, attrs)
