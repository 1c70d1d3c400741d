"""The async communicator against a parameter server in this process: a window of ``pull_every`` steps pushed once,
its gradients summed, whatever the queue holds; prefetches of ``prefetch // 2`` batches in one request; a lookup
that waits only for the prefetches holding its missing rows; noted ids kept by a window's refresh; an
AsyncExecutor worker reading ``prefetch`` batches ahead."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterator
from concurrent.futures import Future
from typing import Any

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import blockir as bir
from blockir.distributed.api import SERVER_METHODS, ParameterServerAPI, ServerHandle, ServerLost
from blockir.distributed.communicator import (
    MAPPED_HEIGHT,
    AsyncCommunicator,
    SyncCommunicator,
    _MappedRows,
    _merge_sparse,
    _RowCache,
    _sum_distinct,
    _TableRows,
)
from blockir.distributed.index import merge_rows, sort_ids
from blockir.distributed.server import ParameterServer
from blockir.errors import BlockirError
from blockir.parallel.async_executor import _looking_ahead
from tests.distributed.test_server import TABLE, _split


class _Handle(ServerHandle):
    """Server ``server`` in this process; the requests ``gated`` holds answer once ``gate`` is set."""

    def __init__(self, server: ParameterServer) -> None:
        self.server = server
        self.calls: list[str] = []
        self.gate = threading.Event()
        self.gated: set[int] = set()  # ids whose pull_sparse waits for the gate
        self.lose_next = False  # the next request finds the server lost

    def submit(self, method: Callable[..., Any], *args: Any, **kwargs: Any) -> Future:
        name = SERVER_METHODS[method]
        self.calls.append(name)
        future: Future = Future()
        if self.lose_next:
            self.lose_next = False
            future.set_exception(ServerLost("the connection was closed"))
        elif method is ParameterServerAPI.pull_sparse and self.gated & set(np.asarray(args[1]).tolist()):

            def later() -> None:
                self.gate.wait(10)
                future.set_result(self.server.pull_sparse(*args))

            threading.Thread(target=later, daemon=True).start()
        else:
            future.set_result(getattr(self.server, name)(*args, **kwargs))
        return future

    def close(self) -> None:
        """Nothing to release: the server is in this process."""


_made: list[AsyncCommunicator] = []


@pytest.fixture(autouse=True)
def _stopped() -> Iterator[None]:
    """Every communicator a test made is stopped when it ends, passed or failed: no thread is left behind."""
    yield
    while _made:
        _made.pop().stop()


def _async(
    pull_every: int = 1, prefetch: int = 0, queue_size: int | None = 16, cache_windows: int = 1
) -> tuple[AsyncCommunicator, _Handle]:
    """A worker's communicator and the handle of its one server, which holds the dense parameters' first values
    (a cached row kept one window, unless ``cache_windows`` says otherwise)."""
    split, startup = _split(1)
    handle = _Handle(ParameterServer(0, split, startup, "async", timeout=5))
    mine = AsyncCommunicator(
        split, [handle], 0, pull_every=pull_every, queue_size=queue_size, prefetch=prefetch, cache_windows=cache_windows
    )
    _made.append(mine)
    scope = bir.Scope()
    bir.Executor("cpu").run(startup, scope=scope)
    mine.init_dense({b.param: scope.get(b.param) for b in split.blocks})
    return mine, handle


def _wait_for(handle: _Handle, method: str, count: int) -> None:
    deadline = time.monotonic() + 10
    while handle.calls.count(method) < count:
        assert time.monotonic() < deadline, f"no {count} {method} requests: {handle.calls}"
        time.sleep(0.001)


@pytest.mark.timeout(30)
def test_a_window_of_pull_every_steps_is_pushed_once_with_its_gradients_summed() -> None:
    mine, handle = _async(pull_every=4)
    ids = np.array([2, 7], np.int64)
    start = handle.server.pull_sparse(TABLE, ids)
    grads = [np.full((2, 4), k + 1, np.float32) for k in range(10)]
    for k, g in enumerate(grads):
        if k in (4, 8):  # the window before was exchanged: these steps start the next one
            _wait_for(handle, "exchange", k // 4)
        mine.push({}, [(TABLE, ids, g)], 1)
    mine.stop()  # the last two steps: pushed at the stop
    assert handle.server.stats["pushes"] == 3  # steps 1-4, 5-8, 9-10
    assert handle.calls.count("exchange") == 2 and handle.calls.count("push") == 1
    np.testing.assert_allclose(handle.server.pull_sparse(TABLE, ids), start - 0.5 * sum(grads), rtol=1e-6)


@pytest.mark.timeout(30)
def test_with_pull_every_1_every_step_is_pushed_even_when_steps_queue_up() -> None:
    mine, handle = _async(pull_every=1)
    ids = np.array([1], np.int64)
    start = handle.server.pull_sparse(TABLE, ids)
    handle.server._lock.acquire()  # the server is busy: the steps queue up behind the first exchange
    try:
        for _ in range(3):
            mine.push({}, [(TABLE, ids, np.ones((1, 4), np.float32))], 1)
    finally:
        handle.server._lock.release()
    mine.stop()
    assert handle.server.stats["pushes"] == 3 and handle.calls.count("exchange") == 3  # a window is one step
    np.testing.assert_allclose(handle.server.pull_sparse(TABLE, ids), start - 0.5 * 3, rtol=1e-6)


@pytest.mark.timeout(30)
def test_stale_steps_count_the_steps_the_dense_values_a_recv_gives_lack() -> None:
    mine, handle = _async(pull_every=1)
    ids = np.array([1], np.int64)
    handle.server._lock.acquire()  # the server is busy: no exchange answers, the worker trains on its first values
    try:
        for _ in range(3):
            mine.push({}, [(TABLE, ids, np.ones((1, 4), np.float32))], 1)
            assert mine.pull_dense([]) is None
    finally:
        handle.server._lock.release()
    assert mine.stats["stale_steps"] == 1 + 2 + 3
    deadline = time.monotonic() + 10
    while (fresh := mine._fresh) is None or fresh[0] < 3:  # the three exchanges answered
        assert time.monotonic() < deadline
        time.sleep(0.001)
    assert mine.pull_dense([]) is not None and mine.stats["stale_steps"] == 6  # values of all 3 steps: none lacked
    mine.push({}, [(TABLE, ids, np.ones((1, 4), np.float32))], 1)
    mine.stop()
    assert mine.pull_dense([]) is not None and mine.stats["stale_steps"] == 6


def test_the_queue_holds_one_window_by_default() -> None:
    for pull_every, size in ((1, 1), (2, 2), (8, 8)):
        mine, _ = _async(pull_every=pull_every, queue_size=None)
        assert mine._queue.maxsize == size


def test_the_rows_of_prefetch_over_2_batches_are_asked_for_in_one_request() -> None:
    mine, handle = _async(pull_every=100, prefetch=4)  # groups of 2 batches
    mine.prefetch(TABLE, np.array([3, 1, 3], np.int64))
    assert "pull_sparse" not in handle.calls  # noted: the group is not full yet
    mine.prefetch(TABLE, np.array([1, 5], np.int64))
    assert handle.calls.count("pull_sparse") == 1
    got = mine.pull_sparse(TABLE, np.array([5, 3, 1], np.int64))
    np.testing.assert_array_equal(got, handle.server.pull_sparse(TABLE, np.array([5, 3, 1], np.int64)))
    assert mine.stats["prefetched_rows"] == 3 and handle.calls.count("pull_sparse") == 1  # one request, 3 rows
    mine.prefetch(TABLE, np.array([1, 9], np.int64))  # 1 is cached: only 9 is missing, not yet asked for
    got = mine.pull_sparse(TABLE, np.array([9], np.int64))  # the lookup asks for the noted group first
    np.testing.assert_array_equal(got, handle.server.pull_sparse(TABLE, np.array([9], np.int64)))
    assert mine.stats["prefetched_rows"] == 4 and handle.calls.count("pull_sparse") == 2
    mine.stop()


def _next_window(mine: AsyncCommunicator, ids: np.ndarray) -> None:
    """Push a step with the gradient of ``ids`` (pull_every 1: a window) and wait until its exchange refreshed
    the cache."""
    mine.push({}, [(TABLE, ids, np.ones((len(ids), 4), np.float32))], 1)
    deadline = time.monotonic() + 10
    while mine.pull_dense([]) is None:  # the dense values come with the cache's refresh
        assert time.monotonic() < deadline, "no exchange"
        time.sleep(0.001)


@pytest.mark.timeout(30)
def test_a_windows_refresh_keeps_the_rows_of_batches_read_ahead() -> None:
    mine, handle = _async(pull_every=1, prefetch=2)
    mine.pull_sparse(TABLE, np.array([4, 5], np.int64))
    _next_window(mine, np.array([4, 5], np.int64))  # the window used 4 and 5: both stay, refreshed
    mine.prefetch(TABLE, np.array([4], np.int64))  # a batch read ahead needs 4 again: cached, nothing to pull
    _next_window(mine, np.array([6], np.int64))  # a window that used neither
    pulls = handle.calls.count("pull_sparse")
    got = mine.pull_sparse(TABLE, np.array([4], np.int64))
    assert handle.calls.count("pull_sparse") == pulls  # 4 stayed in the cache, refreshed
    np.testing.assert_array_equal(got, handle.server.pull_sparse(TABLE, np.array([4], np.int64)))
    mine.pull_sparse(TABLE, np.array([5], np.int64))
    assert handle.calls.count("pull_sparse") == pulls + 1  # 5 left it: pulled
    mine.stop()


@pytest.mark.timeout(30)
def test_a_cached_row_stays_as_it_was_until_its_id_went_unused_for_cache_windows_windows() -> None:
    mine, handle = _async(pull_every=1, cache_windows=2)
    four = np.array([4], np.int64)
    mine.pull_sparse(TABLE, four)
    _next_window(mine, four)  # window 1 used 4: refreshed
    then = handle.server.pull_sparse(TABLE, four)
    _next_window(mine, four)  # window 2 did not (its push changed the server's row): kept as it was
    pulls = handle.calls.count("pull_sparse")
    got = mine.pull_sparse(TABLE, four)  # window 3 uses it
    assert handle.calls.count("pull_sparse") == pulls
    np.testing.assert_array_equal(got, then)
    assert not np.array_equal(got, handle.server.pull_sparse(TABLE, four))
    _next_window(mine, np.array([6], np.int64))  # window 3 used it: refreshed
    np.testing.assert_array_equal(mine.pull_sparse(TABLE, four), handle.server.pull_sparse(TABLE, four))
    for _ in range(3):  # windows 4 (the lookup above), 5 and 6 end: unused in 5 and 6, it left at 6's refresh
        _next_window(mine, np.array([6], np.int64))
    mine.pull_sparse(TABLE, four)
    assert handle.calls.count("pull_sparse") == pulls + 1
    mine.stop()
    with pytest.raises(BlockirError, match="cache_windows"):
        AsyncCommunicator(mine.split, [handle], 0, cache_windows=0)


@pytest.mark.timeout(30)
def test_a_server_found_restarted_empties_the_row_cache(capsys: pytest.CaptureFixture[str]) -> None:
    mine, handle = _async(pull_every=1, cache_windows=4)
    mine.know_servers()
    four = np.array([4], np.int64)
    mine.pull_sparse(TABLE, four)
    _next_window(mine, four)  # 4 cached
    life = handle.server.incarnation()
    restored = dict(life, restart=int(life["restart"]) + 1, checkpoint="ckpt-1", step=1, version=0)
    handle.server.incarnation = lambda: restored  # type: ignore[method-assign]
    handle.lose_next = True
    mine.pull_sparse(TABLE, np.array([7], np.int64))  # a miss, whose pull finds the server restarted
    assert len(mine.recoveries) == 1 and "was restarted" in capsys.readouterr().err
    pulls = handle.calls.count("pull_sparse")
    np.testing.assert_array_equal(mine.pull_sparse(TABLE, four), handle.server.pull_sparse(TABLE, four))
    assert handle.calls.count("pull_sparse") == pulls + 1  # pulled again: the cache was emptied


def test_a_sync_step_is_one_request_per_server_and_its_recv_takes_the_reply() -> None:
    split, startup = _split(1)
    handle = _Handle(ParameterServer(0, split, startup, "sync", timeout=5))
    mine = SyncCommunicator(split, [handle], 0)
    scope = bir.Scope()
    bir.Executor("cpu").run(startup, scope=scope)
    dense = {b.param: np.asarray(scope.get(b.param)) for b in split.blocks}
    mine.init_dense(dense)
    asked = len(handle.calls)
    mine.push({n: np.ones_like(v) for n, v in dense.items()}, [(TABLE, np.array([3]), np.ones((1, 4), np.float32))], 1)
    got = mine.pull_dense(list(dense))
    assert handle.calls[asked:] == ["exchange"]  # the push and the step's dense blocks, in one request
    again = mine.pull_dense(list(dense))  # a second recv of the step asks the server
    assert handle.calls[-1] == "pull_dense"
    for name, value in dense.items():
        np.testing.assert_array_equal(got[name], again[name])
        assert not np.array_equal(got[name], value)  # the step's update


def test_merged_pushes_summed_by_id_equal_one_merge_of_all_their_rows() -> None:
    rng = np.random.default_rng(0)
    for _ in range(20):
        parts = []
        for _ in range(int(rng.integers(1, 6))):
            ids = rng.integers(0, 30, int(rng.integers(1, 12)))
            parts.append(merge_rows(ids, rng.standard_normal((len(ids), 3))))
        ids, rows = _sum_distinct(parts)
        want_ids, want_rows = merge_rows(np.concatenate([i for i, _ in parts]), np.concatenate([r for _, r in parts]))
        np.testing.assert_array_equal(ids, want_ids)
        np.testing.assert_allclose(rows, want_rows, rtol=1e-12)


@pytest.mark.timeout(30)
def test_a_lookup_waits_only_for_the_prefetches_holding_its_missing_rows() -> None:
    mine, handle = _async(pull_every=100, prefetch=2)
    far, near = np.array([10, 11], np.int64), np.array([20, 21], np.int64)
    handle.gated = {10, 11}  # the prefetch of a later batch is slow
    mine.prefetch(TABLE, far)
    mine.prefetch(TABLE, near)
    got = mine.pull_sparse(TABLE, near)  # does not wait for the gated request
    np.testing.assert_array_equal(got, handle.server.pull_sparse(TABLE, near))
    assert mine.stats["prefetched_rows"] == 2 and handle.calls.count("pull_sparse") == 2  # no pull of its own
    assert not handle.gate.is_set()
    handle.gate.set()
    np.testing.assert_array_equal(mine.pull_sparse(TABLE, far), handle.server.pull_sparse(TABLE, far))
    assert mine.stats["prefetched_rows"] == 4
    mine.stop()


def test_prefetching_is_off_by_default_and_in_sync_mode() -> None:
    mine, handle = _async()
    mine.prefetch(TABLE, np.array([1, 2], np.int64))
    assert "pull_sparse" not in handle.calls
    mine.stop()


@pytest.mark.parametrize("depth", [1, 2, 4])
def test_an_async_worker_hands_each_batch_over_depth_batches_before_it_runs(depth: int) -> None:
    events: list[str] = []
    batches = ({"k": k} for k in range(5))
    for batch in _looking_ahead(batches, lambda b: events.append(f"ahead {b['k']}"), depth):
        events.append(f"run {batch['k']}")
    runs = [e for e in events if e.startswith("run")]
    assert runs == [f"run {k}" for k in range(5)]
    for k in range(5):  # batch k+depth (or the last) is read before batch k runs
        assert events.index(f"ahead {min(k + depth, 4)}") < events.index(f"run {k}")
        if k + depth + 1 <= 4:
            assert events.index(f"ahead {k + depth + 1}") > events.index(f"run {k}")


_CACHE_HEIGHT = 50  # the mapped cache's table: ids 0..49 (the ids drawn for it go a little beyond)
_cache_ops = st.lists(
    st.tuples(
        st.sampled_from(["lookup", "insert", "note", "take", "replace"]),
        st.lists(st.integers(0, 2**40), max_size=12, unique=True),
        st.integers(0, 99),
    ),
    max_size=40,
)


@settings(max_examples=100, deadline=None)
@given(_cache_ops, st.booleans())
def test_the_row_cache_follows_its_rules_as_a_dict_does(ops: list, mapped: bool) -> None:
    """The worker's row cache against a dict kept by its documented rules: a lookup finds what was inserted and
    notes the ids used; an insert keeps a row the cache has (rule 4); a refresh replaces the cache with the
    rows asked for at the window's end, keeping (as they were) the rows used or noted since, and nothing else
    (rule 3). ``mapped``: a table of :data:`_CACHE_HEIGHT` ids, its rows found through an array by id, which
    never holds an id outside the table (one a batch read ahead may bring)."""
    cache = _RowCache({"t": 2}, 1, {"t": _CACHE_HEIGHT} if mapped else None)
    assert isinstance(cache.tables["t"], _MappedRows if mapped else _TableRows)
    if mapped:
        ops = [(kind, [i % (_CACHE_HEIGHT + 10) for i in ids], value) for kind, ids, value in ops]
        ops = [(kind, list(dict.fromkeys(ids)), value) for kind, ids, value in ops]

    def held(ids: object) -> dict[int, list[float]]:
        return {i: v for i, v in ids.items() if not mapped or i < _CACHE_HEIGHT}  # type: ignore[attr-defined]

    model: dict[int, list[float]] = {}
    used: set[int] = set()  # used or noted since the last take_used
    asked: list[int] | None = None
    for kind, ids, value in ops:
        uniq = np.array(sorted(ids), np.int64)
        if kind == "lookup":
            rows, missing = cache.lookup("t", uniq)
            assert uniq[missing].tolist() == [i for i in sorted(ids) if i not in model]
            want = np.array([model[i] for i in sorted(ids) if i in model], np.float32).reshape(-1, 2)
            np.testing.assert_array_equal(rows[~missing], want)
            assert (rows[missing] == 0).all()
            used |= set(ids)
        elif kind == "insert":
            cache.insert("t", uniq, np.full((len(uniq), 2), value, np.float32))
            for i in ids:
                model.setdefault(i, [float(value)] * 2)
            model = held(model)
        elif kind == "note":
            cache.note("t", uniq)
            used |= set(ids)
        elif kind == "take":
            asked = cache.take_used().get("t", np.zeros(0, np.int64)).tolist()
            assert asked == sorted(used)
            used = set()
        elif asked is not None:  # replace: the rows asked for, refreshed
            fresh = np.array(asked, np.int64)
            cache.replace({"t": (fresh, np.full((len(fresh), 2), value, np.float32))})
            model = held({i: model[i] for i in used if i in model} | {i: [float(value)] * 2 for i in asked})
            asked = None
        assert cache.missing("t", uniq).tolist() == [i for i in sorted(ids) if i not in model]


_table_ops = st.lists(st.tuples(st.booleans(), st.lists(st.integers(0, 2**40), max_size=12, unique=True)), max_size=30)


@settings(max_examples=200, deadline=None)
@given(_table_ops, st.booleans(), st.booleans())
def test_a_tables_cached_rows_find_ids_as_a_dict_does(ops: list, from_refresh: bool, mapped: bool) -> None:
    """The row cache's per-table store against a dict: ``find`` gives -1 for an id not held and, for one held,
    the row whose values were added with it, wherever later adds put their ids among the sorted keys (or, in a
    store ``mapped`` by id, a table of MAPPED_HEIGHT ids, the ids taken modulo that: its ``where``, renewed once
    by a refresh); a store made from a refresh's ids holds them at the refresh's rows; rows added in another
    dtype convert those it holds to it."""
    model: dict[int, float] = {}
    dtype: type = np.float32
    held: _TableRows | _MappedRows
    top = MAPPED_HEIGHT - 1 if mapped else 2**40
    if mapped:
        ops = [(add, list(dict.fromkeys(i % MAPPED_HEIGHT for i in ids))) for add, ids in ops]
        held = _MappedRows(np.array([5, 6], np.int64), np.zeros((2, 2), np.float32), np.full(MAPPED_HEIGHT, -1))
    else:
        held = _TableRows(np.zeros(0, np.int64), np.zeros((0, 2), np.float32))
    if from_refresh:  # as a window's refresh makes it: the ids asked for, their rows taken as they are
        held = held.renewed(np.array([3, 8, top], np.int64), np.array([[3.0, 3.0], [8.0, 8.0], [9.0, 9.0]], np.float32))
        model = {3: 3.0, 8: 8.0, top: 9.0}
    elif mapped:
        held = held.renewed(np.zeros(0, np.int64), np.zeros((0, 2), np.float32))  # 5 and 6 leave
    for add, ids in ops:
        if add:
            new = sorted(i for i in ids if i not in model)
            wide = len(new) % 3 == 2  # some adds bring float64 rows: what the store holds takes their dtype
            rows = np.array([[i % 1000, i % 7] for i in new], np.float64 if wide else np.float32).reshape(-1, 2)
            held.add(np.array(new, np.int64), rows)
            model.update({i: float(i % 1000) for i in new})
            dtype = (np.float64 if wide else np.float32) if new else dtype  # the last rows added
            assert held.rows.dtype == dtype
        at = held.find(np.array(sorted(ids), np.int64))
        assert [a >= 0 for a in at] == [i in model for i in sorted(ids)]
        assert held.rows[at[at >= 0], 0].tolist() == [model[i] for i in sorted(ids) if i in model]
        assert held.count == len(model)
        if isinstance(held, _TableRows):
            assert held.keys.tolist() == sorted(model)
            assert sorted(held.slots.tolist()) == list(range(len(model)))  # each row held once, none lost
        else:
            assert sorted(held.ids[: held.count].tolist()) == sorted(model)  # each id at one row, none lost
            assert held.find(held.ids[: held.count]).tolist() == list(range(held.count))


@settings(max_examples=200, deadline=None)
@given(st.lists(st.integers(0, 20), max_size=40), st.integers(0, 2**32 - 1))
def test_merged_rows_sum_an_ids_rows_in_the_order_given(ids: list, seed: int) -> None:
    """A push's merge against a dict summing each id's rows one after the other, in float32, as given: the same
    bits (the order of a float sum matters), ids sorted."""
    rows = np.random.default_rng(seed).standard_normal((len(ids), 3)).astype(np.float32)
    model: dict[int, np.ndarray] = {}
    for i, row in zip(ids, rows, strict=True):
        model[i] = model[i] + row if i in model else row.copy()
    keys = np.array(ids, np.int64)
    want = np.array([model[i] for i in sorted(model)], np.float32).reshape(-1, 3)
    for sort in (None, sort_ids(keys)):  # sorted here, or by the lookup of the same ids
        got_ids, got_rows = merge_rows(keys, rows, sort)
        assert got_ids.tolist() == sorted(model) and got_rows.dtype == np.float32
        np.testing.assert_array_equal(got_rows, want)


@settings(max_examples=100, deadline=None)
@given(st.lists(st.integers(0, 20), min_size=1, max_size=40), st.integers(0, 2**32 - 1))
def test_a_push_takes_the_sort_of_the_lookup_of_its_ids_and_no_other(ids: list, seed: int) -> None:
    """A push merged with the sort a lookup of the same ids made (the worker's step: the lookup's ids are the
    push's) gives the bits of a merge that sorts them itself; a sort of other ids (a lookup of other ids, the
    push leaving padding out) is not taken."""
    rng = np.random.default_rng(seed)
    keys = np.array(ids, np.int64)
    rows = rng.standard_normal((len(ids), 3)).astype(np.float32)
    other = rng.permutation(keys)
    want_ids, want_rows = merge_rows(keys, rows)
    for looked_up in (keys, other, keys[1:]):
        sorts = {"t": (looked_up.copy(), sort_ids(looked_up))}
        got_ids, got_rows = _merge_sparse([("t", keys, rows)], sorts)["t"]
        np.testing.assert_array_equal(got_ids, want_ids)
        np.testing.assert_array_equal(got_rows, want_rows)


@pytest.mark.timeout(30)
def test_a_lookup_gives_the_rows_it_found_when_a_refresh_comes_while_it_pulls() -> None:
    """A lookup's rows are those the cache held when it looked and those it pulled, and the pulled ones go into
    the cache, whether the window's refresh replaced the cache while the pull was away (then they are inserted
    into the new one: rule 4) or not (then added where the lookup looked, its rows gathered once)."""
    mine, handle = _async(pull_every=1)
    server = handle.server
    first = np.array([1, 2, 3], np.int64)
    mine.pull_sparse(TABLE, first)
    _next_window(mine, first)  # 1, 2 and 3 cached as the exchange left them (pushed once: changed)
    cached = server.pull_sparse(TABLE, first)
    pulls = handle.calls.count("pull_sparse")
    mine.pull_sparse(TABLE, np.array([3, 4], np.int64))  # no refresh meanwhile: 4 added where 3 was found
    assert handle.calls.count("pull_sparse") == pulls + 1
    server.push(1, {}, {TABLE: (np.array([2, 3, 4, 5], np.int64), np.ones((4, 4), np.float32))}, 1)  # servers move
    ids = np.array([5, 2, 3, 5], np.int64)  # 2 and 3 cached (the old values), 5 missing (pulled: the new)
    pull = mine._pull_rows

    def refreshed_meanwhile(table: str, wanted: np.ndarray, after: int, waited: bool) -> np.ndarray:
        got = pull(table, wanted, after, waited)
        with mine._lock:  # the window's refresh lands while the pull is away
            mine._cache.replace({TABLE: (np.array([2], np.int64), np.full((1, 4), 7.0, np.float32))})
        return got

    mine._pull_rows = refreshed_meanwhile  # type: ignore[method-assign]
    got = mine.pull_sparse(TABLE, ids)
    mine._pull_rows = pull  # type: ignore[method-assign]
    np.testing.assert_array_equal(got[[1, 2]], cached[[1, 2]])  # as the cache held them when the lookup looked
    np.testing.assert_array_equal(got[[0, 3]], server.pull_sparse(TABLE, np.array([5, 5], np.int64)))
    with mine._lock:
        rows, missing = mine._cache.lookup(TABLE, np.array([2, 3, 5], np.int64), note=False)
    assert not missing.any()  # 2 refreshed, 3 kept (used since), 5 inserted into the new cache
    np.testing.assert_array_equal(rows[0], np.full(4, 7.0, np.float32))
    np.testing.assert_array_equal(rows[1], cached[2])
    np.testing.assert_array_equal(rows[2], got[0])
    mine.stop()
