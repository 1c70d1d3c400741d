"""bir.reader.staged: batches loaded in a producer thread and put on a device ahead of use."""

from __future__ import annotations

import threading
import time
from collections import namedtuple
from collections.abc import Iterator
from typing import Any

import numpy as np
import pytest

import blockir as bir
from blockir.errors import BlockirError
from tests.gpu import real_cupy
from tests.runtime import fake_cupy

pytestmark = pytest.mark.timeout(30)

Pair = namedtuple("Pair", "x y")


def batches(n: int) -> list[dict[str, np.ndarray]]:
    return [{"x": np.full((4, 3), i, "float32"), "y": np.full((4, 1), i, "int64")} for i in range(n)]


def staged_threads() -> int:
    return sum(t.name.startswith("blockir-staged") for t in threading.enumerate())


def wait_for(condition: Any, seconds: float = 5.0) -> None:
    deadline = time.monotonic() + seconds
    while not condition():
        assert time.monotonic() < deadline, "timed out"
        time.sleep(0.002)


@pytest.mark.parametrize("capacity", [1, 2, 5])
def test_host_prefetches_the_loaders_own_objects_in_order(capacity):
    data = batches(20)
    got = list(bir.reader.staged(iter(data), "cpu", capacity=capacity))
    assert len(got) == len(data) and all(g is d for g, d in zip(got, data))


def test_a_place_object_and_cpu_0_are_the_host():
    data = batches(3)
    assert all(g is d for g, d in zip(bir.reader.staged(data, bir.CPUPlace()), data))
    assert all(g is d for g, d in zip(bir.reader.staged(data, "cpu:0"), data))


def test_virtual_device_copies_every_value_keeping_the_structure():
    lod = bir.LoDTensor(np.arange(10, dtype="float32").reshape(5, 2), [[0, 2, 5]])
    rows = bir.SelectedRows(np.array([3, 0]), np.ones((2, 4), "float32"), height=6)
    dense = np.arange(6, dtype="float64").reshape(2, 3)
    data = [{"x": dense, "lod": lod}, (dense, rows), [dense, lod], Pair(dense, rows), dense, *batches(10)]
    got = list(bir.reader.staged(iter(data), "cpu:1", capacity=2))
    assert [type(g) for g in got] == [type(d) for d in data]
    for g, d in zip(got, data):
        pairs = (
            zip(g.values(), d.values())
            if isinstance(d, dict)
            else zip(g, d)
            if isinstance(d, (tuple, list))
            else [(g, d)]
        )
        for a, b in pairs:
            assert type(a) is type(b)
            if isinstance(b, bir.LoDTensor):
                assert a.lod == b.lod
                a, b = a.data, b.data
            elif isinstance(b, bir.SelectedRows):
                assert a.height == b.height
                np.testing.assert_array_equal(a.rows, b.rows)
                a, b = a.values, b.values
            np.testing.assert_array_equal(a, b)
            assert a.dtype == b.dtype and not np.shares_memory(a, b)


def test_loading_overlaps_the_consumers_work():
    """While the consumer holds batch i, the loader loads batch i + 1: a reader that loaded only when asked
    would never get there. (How much time that saves: benchmarks/bench_staging.py.)"""
    n = 10
    loaded = [threading.Event() for _ in range(n)]

    def loader() -> Iterator[dict[str, np.ndarray]]:
        for i, b in enumerate(batches(n)):
            loaded[i].set()
            yield b

    for i, batch in enumerate(bir.reader.staged(loader(), "cpu")):
        assert batch["x"][0, 0] == i
        if i + 1 < n:
            assert loaded[i + 1].wait(5), f"batch {i + 1} not loaded while the consumer held batch {i}"


@pytest.mark.parametrize("place", ["cpu", "cpu:1"])
def test_a_loader_error_is_raised_where_its_batch_would_have_come(place):
    def loader() -> Iterator[dict[str, np.ndarray]]:
        yield from batches(3)
        raise ValueError("batch 3 is corrupt")

    reader = bir.reader.staged(loader(), place, capacity=5)
    wait_for(lambda: len(reader._state.ready) == 4)  # the producer ran ahead, into the error
    assert [int(b["x"][0, 0]) for b in (next(reader), next(reader), next(reader))] == [0, 1, 2]
    with pytest.raises(ValueError, match="batch 3 is corrupt"):
        next(reader)
    assert staged_threads() == 0
    with pytest.raises(StopIteration):
        next(reader)


class Unconvertible:
    def __array__(self, dtype: Any = None, copy: Any = None) -> np.ndarray:
        raise RuntimeError("no array here")


def test_a_staging_error_is_raised_in_order():
    reader = bir.reader.staged(iter([np.zeros(2), Unconvertible(), np.ones(2)]), "cpu:1")
    np.testing.assert_array_equal(next(reader), np.zeros(2))
    with pytest.raises(RuntimeError, match="no array here"):
        next(reader)
    assert staged_threads() == 0


def endless(loaded: list[int], pause: float = 0.0) -> Iterator[np.ndarray]:
    i = 0
    while True:
        time.sleep(pause)
        loaded.append(i)
        yield np.full(3, i)
        i += 1


def test_leaving_the_loop_early_joins_the_producer():
    before = threading.active_count()
    loaded: list[int] = []
    for batch in bir.reader.staged(endless(loaded), "cpu", capacity=2):
        if batch[0] == 3:
            break
    assert threading.active_count() == before and staged_threads() == 0
    count = len(loaded)
    time.sleep(0.05)
    assert len(loaded) == count <= 3 + 1 + 2


@pytest.mark.parametrize("how", ["close", "with"])
def test_closing_stops_a_producer_in_the_middle_of_a_batch_promptly(how):
    before = threading.active_count()
    loaded: list[int] = []
    reader = bir.reader.staged(endless(loaded, pause=0.2), "cpu:1", capacity=3)
    assert next(reader)[0] == 0
    count = len(loaded)  # the producer is loading batch `count` (0.2 s each)
    if how == "close":
        reader.close()
        reader.close()  # closing twice is a no-op
    else:
        with reader:
            pass
    assert len(loaded) <= count + 1  # the batch being loaded, not the 3 more that would fill the queue
    assert threading.active_count() == before
    with pytest.raises(StopIteration):
        next(reader)


def test_a_dropped_reader_joins_its_producer():
    before = threading.active_count()
    reader = bir.reader.staged(endless([]), "cpu", capacity=1)
    next(reader)
    del reader
    assert threading.active_count() == before


@pytest.mark.parametrize("capacity", [1, 3])
def test_capacity_bounds_the_batches_loaded_ahead(capacity):
    loaded: list[int] = []
    reader = bir.reader.staged(endless(loaded), "cpu", capacity=capacity)
    with reader:
        for taken in range(1, 5):
            assert next(reader)[0] == taken - 1
            wait_for(lambda taken=taken: len(loaded) == taken + capacity)  # the producer fills up to capacity ...
            time.sleep(0.02)
            assert len(loaded) == taken + capacity  # ... and no further


@pytest.mark.parametrize("capacity", [0, -1, 1.5, True, "2", None])
def test_capacity_must_be_a_positive_int(capacity):
    with pytest.raises(BlockirError, match=r"staged: capacity must be an int >= 1, got"):
        bir.reader.staged(iter([]), "cpu", capacity=capacity)
    assert staged_threads() == 0


def test_a_place_this_machine_lacks_is_refused_before_anything_runs(monkeypatch):
    monkeypatch.setattr(bir.runtime.cuda, "_cupy", lambda: None)
    monkeypatch.setattr(bir.runtime.device, "_devices", {})  # forget a real cuda:0 an earlier test made
    with pytest.raises(BlockirError, match=r"cuda:0 is not available.*the staged reader's place"):
        bir.reader.staged(iter([]), "cuda:0")
    with pytest.raises(BlockirError, match="gpu0"):
        bir.reader.staged(iter([]), "gpu0")
    assert staged_threads() == 0


# -- CUDA, against the stand-in of CuPy ---------------------------------------------------------------


def pinned_memory(array: np.ndarray) -> Any:
    base: Any = array
    while isinstance(base, np.ndarray):
        base = base.base
    return base.obj if isinstance(base, memoryview) else base


def test_cuda_copies_through_reused_pinned_buffers_on_the_copy_stream(monkeypatch):
    """Each batch is written into pinned buffers, copied on the copy stream, and an event recorded after the
    copies is waited for by the compute stream and the consumer's current stream before the batch is
    yielded; a batch's pinned buffers keep its bytes until the consumer releases it, and then take later
    batches; on release the copy stream waits for the consumer's streams."""
    fake = fake_cupy.install(monkeypatch, gpus=1)
    pinned_of: dict[int, list[np.ndarray]] = {}  # batch -> the pinned arrays it was copied from
    set_on_device = fake_cupy.FakeArray.set

    def recording_set(self: Any, arr: np.ndarray, stream: Any = None) -> None:
        pinned_of.setdefault(int(arr.flat[0]), []).append(arr)
        set_on_device(self, arr, stream)

    monkeypatch.setattr(fake_cupy.FakeArray, "set", recording_set)
    n, capacity = 8, 2
    device = bir.runtime.device.get_device("cuda:0")
    copy, compute = device.stream("copy").cuda_stream, device.stream("compute0").cuda_stream
    null = fake.get_current_stream()
    with bir.reader.staged(iter(batches(n)), "cuda:0", capacity=capacity) as reader:
        for k, batch in enumerate(reader):
            assert isinstance(batch["x"], fake.ndarray) and batch["x"].gpu == 0
            np.testing.assert_array_equal(batch["x"].view(np.ndarray), np.full((4, 3), k, "float32"))
            np.testing.assert_array_equal(batch["y"].view(np.ndarray), np.full((4, 1), k, "int64"))
            fake.calls.append(("got", k))
            wait_for(lambda k=k: len(reader._state.ready) == min(capacity, n - 1 - k))  # the producer ran ahead
            assert [a[0, 0] for a in pinned_of[k]] == [k, k]  # the held batch's pinned buffers are untouched
    calls = fake.calls
    h2d = [i for i, c in enumerate(calls) if c[0] == "h2d"]
    assert len(h2d) == 2 * n and all(calls[i][1] is copy and calls[i][2] for i in h2d)
    for k in range(n):
        got = calls.index(("got", k))
        waits = [c for c in calls[:got] if c[0] == "wait" and c[1] in (compute, null)][-2:]
        assert [c[1] for c in waits] == [compute, null] and waits[0][2] is waits[1][2]
        recorded = calls.index(("record", copy, waits[0][2]))
        assert sum(i < recorded for i in h2d) == 2 * (k + 1)  # recorded after the batch's copies
    assert len(fake.entries("pinned")) == 2 * (capacity + 1)  # capacity + 1 sets of buffers, reused
    assert len({id(pinned_memory(a)) for arrays in pinned_of.values() for a in arrays}) == 2 * (capacity + 1)
    released = [c for c in calls if c[0] == "wait" and c[1] is copy]
    assert len(released) == 2 * n  # each batch released: the copy stream waits for both consumer streams
    assert staged_threads() == 0


def test_cuda_values_of_every_kind_arrive(monkeypatch):
    fake_cupy.install(monkeypatch, gpus=2)
    lod = bir.LoDTensor(np.arange(10, dtype="float32").reshape(5, 2), [[0, 2, 5]])
    rows = bir.SelectedRows(np.array([3, 0]), np.ones((2, 4), "float32"), height=6)
    data = [(lod, rows, np.zeros((0, 3), "float32")), np.arange(6).reshape(2, 3).T]
    (got_lod, got_rows, empty), dense = bir.reader.staged(iter(data), "cuda:1")
    assert got_lod.data.gpu == 1 and got_lod.lod == lod.lod
    np.testing.assert_array_equal(got_lod.data.view(np.ndarray), lod.data)
    assert got_rows.values.gpu == 1 and got_rows.height == 6 and isinstance(got_rows.rows, np.ndarray)
    np.testing.assert_array_equal(got_rows.values.view(np.ndarray), rows.values)
    assert empty.shape == (0, 3) and empty.gpu == 1
    np.testing.assert_array_equal(dense.view(np.ndarray), data[1])


# -- a real GPU -----------------------------------------------------------------------------------------


@pytest.mark.gpu
def test_real_gpu_batches_are_complete_when_the_consumer_computes():
    """16 MB batches from a fast loader: the consumer's sum is launched while the batch's copy may still be
    running, on a stream of its own; only the wait on the copy's event makes the sums right."""
    cupy = real_cupy()
    rng = np.random.default_rng(0)
    data = [{"x": rng.normal(size=(2048, 2048)).astype("float32"), "i": np.array([i])} for i in range(12)]
    expected = [float(d["x"].sum(dtype="float64")) for d in data]
    with cupy.cuda.Stream(non_blocking=True):
        sums = [(float(b["x"].sum()), int(b["i"][0])) for b in bir.reader.staged(iter(data), "cuda:0")]
    assert [i for _, i in sums] == list(range(12))
    np.testing.assert_allclose([s for s, _ in sums], expected, rtol=1e-4, atol=0.5)
    assert staged_threads() == 0
