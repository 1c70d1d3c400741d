"""The same device tests on every device kind (DESIGN.md, "Runtime"): the host, a virtual CPU device,
``cuda:0`` through the CuPy stand-in (tests/runtime/fake_cupy.py), and a real ``cuda:0`` (marked ``gpu``;
it skips cleanly without CuPy or a GPU).

Storage: ``put`` / ``transfer`` round trips of dense arrays, LoD tensors and selected rows, in new buffers.
Streams: named ``compute<k>`` and ``copy``, made once; events ordered with the work recorded before them;
work on one stream that waits for another stream's event sees that stream's results; a stream can wait for
a host event.
"""

from __future__ import annotations

import threading
from typing import Any

import numpy as np
import pytest

import blockir as bir
from blockir.errors import BlockirError
from blockir.runtime.device import Device, HostEvent, get_device, transfer
from tests.gpu import real_cupy
from tests.runtime import fake_cupy


@pytest.fixture(params=["cpu", "cpu:1", "stand-in", pytest.param("cuda:0", marks=pytest.mark.gpu)])
def dev(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> Device:
    if request.param == "stand-in":
        fake_cupy.install(monkeypatch, gpus=1)
        return get_device("cuda:0")
    if request.param == "cuda:0":
        real_cupy()
    return get_device(request.param)


def _arrays(value: Any) -> list[Any]:
    if isinstance(value, bir.LoDTensor):
        return [value.data]
    if isinstance(value, bir.SelectedRows):
        return [value.values]
    return [value]


VALUES = {
    "float32": np.arange(12, dtype="float32").reshape(3, 4),
    "int64": np.array([[3], [-1]], "int64"),
    "strided": np.arange(12, dtype="float64").reshape(3, 4).T,
    "empty": np.zeros((0, 5), "float32"),
    "lod_tensor": bir.LoDTensor(np.arange(10, dtype="float32").reshape(5, 2), [[0, 2, 5]]),
    "selected_rows": bir.SelectedRows(np.array([4, 0, 4]), np.ones((3, 2), "float32"), 6),
}


@pytest.mark.parametrize("name", VALUES)
def test_put_and_transfer_round_trip_every_kind_of_value_in_new_buffers(dev, name):
    value = VALUES[name]
    kind = type(value) if isinstance(value, (bir.LoDTensor, bir.SelectedRows)) else None
    there = dev.put(value)
    assert kind is None or type(there) is kind
    for array in _arrays(there):
        assert isinstance(array, dev.xp.ndarray) and not any(
            np.shares_memory(array, a) for a in _arrays(value) if dev.xp is np
        )
    back = transfer(there, "cpu")
    again = transfer(value, dev.name)
    for copy in (back, transfer(again, "cpu")):
        assert type(copy) is (kind or np.ndarray)
        for got, want in zip(_arrays(copy), _arrays(value)):
            assert isinstance(got, np.ndarray) and got.dtype == want.dtype and not np.shares_memory(got, want)
            np.testing.assert_array_equal(got, want)
        if isinstance(value, bir.LoDTensor):
            assert copy.lod == value.lod
        if isinstance(value, bir.SelectedRows):
            assert copy.height == value.height and list(copy.rows) == list(value.rows)


def test_streams_are_named_compute_k_or_copy_and_made_once(dev):
    compute1, copy = dev.stream("compute1"), dev.stream("copy")
    assert dev.stream("compute1") is compute1 and compute1 is not dev.stream("compute0")
    assert (str(compute1), str(copy)) == (f"{dev.name}/compute1", f"{dev.name}/copy")
    assert {compute1, copy} <= set(dev.streams())
    assert compute1.is_async is copy.is_async is (dev.kind == "cuda")
    for bad in ("compute", "compute01", "copy1", "default", 3):
        with pytest.raises(
            BlockirError,
            match=rf"{bad!r} is not a stream of {dev.name} "
            r"\(expected compute<N> or copy\)",
        ):
            dev.stream(bad)


def _size(dev: Device) -> int:
    """The side of the matrices of :func:`_slow_ones`: large on a real GPU, where the work must outlast the
    launches by far for a missing wait to show, small elsewhere."""
    return 2048 if dev.kind == "cuda" and not isinstance(dev.xp, fake_cupy.FakeCupy) else 128


def _slow_ones(xp: Any, n: int, rounds: int = 10) -> Any:
    """An [n, n] array of ones (n a power of two: exact), computed the long way, by matrix products."""
    x = xp.ones((n, n), dtype="float32")
    for _ in range(rounds):
        x = x @ x
        x /= n
    return x


def test_an_event_is_done_once_the_work_recorded_before_it_is(dev):
    stream = dev.stream("compute0")
    first = stream.record_event()
    n = _size(dev)
    out = stream.launch(_slow_ones, dev.xp, n)
    last = stream.record_event()
    last.synchronize()
    assert last.query() and first.query()  # an earlier event is done before a later one
    stream.launch(out.__imul__, 3)
    after = stream.record_event()
    stream.synchronize()
    assert after.query()
    np.testing.assert_array_equal(transfer(out, "cpu"), np.full((n, n), 3, "float32"))


@pytest.mark.parametrize("other", ["compute1", "copy"])
def test_work_that_waits_for_another_streams_event_sees_its_results(dev, other):
    producer, consumer = dev.stream("compute0"), dev.stream(other)
    n = _size(dev)
    made = producer.launch(_slow_ones, dev.xp, n)
    consumer.wait_event(producer.record_event())
    total = consumer.launch(lambda: made + 1)
    done = consumer.record_event()
    dev.synchronize()
    assert done.query()
    np.testing.assert_array_equal(transfer(total, "cpu"), np.full((n, n), 2, "float32"))


def test_a_stream_waits_for_a_host_event(dev):
    stream, gate = dev.stream("copy"), HostEvent()
    timer = threading.Timer(0.05, gate.set)
    timer.start()
    stream.wait_event(gate)
    assert gate.query()  # the wait returned once the timer set the event, not before
    timer.join()
    out = stream.launch(dev.xp.ones, 3)
    stream.synchronize()
    np.testing.assert_array_equal(transfer(out, "cpu"), np.ones(3))
