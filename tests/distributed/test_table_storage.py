"""A sparse table's storage on a server: the id index against a dict, a dropped row's slot handed out again, the
cost of a batch of new ids whatever the table's size, and one lock per table."""

from __future__ import annotations

import threading
from collections.abc import Callable
from pathlib import Path

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

import blockir as bir
from blockir.distributed.index import IdIndex
from blockir.distributed.server import ParameterServer
from blockir.passes.distribute import split
from tests.ir.complexity import cpu_seconds

TABLE = "embedding_0.w_0"

_ids = st.lists(st.integers(0, 2**40), max_size=40)
_ops = st.lists(st.tuples(st.sampled_from(["add", "remove", "find"]), _ids), max_size=40)


@settings(max_examples=200, deadline=None)
@given(_ops)
def test_the_index_maps_ids_to_rows_as_a_dict_does_and_hands_out_free_rows_first(ops: list) -> None:
    index, reference = IdIndex(), {}
    for kind, ids in ops:
        keys = np.array(ids, np.int64)
        if kind == "add":
            new = list(dict.fromkeys(i for i in ids if i not in reference))
            free, end = set(range(index.end)) - set(reference.values()), index.end
            rows = index.add(np.array(new, np.int64)).tolist()
            reused = min(len(new), len(free))  # free rows first, then new ones
            assert len(set(rows[:reused])) == reused and set(rows[:reused]) <= free
            assert rows[reused:] == list(range(end, end + len(new) - reused))
            reference.update(zip(new, rows, strict=True))
        elif kind == "remove":
            had = [reference.get(i, -1) for i in ids]
            assert index.remove(keys).tolist() == had
            for i in ids:
                reference.pop(i, None)
        assert index.find(keys).tolist() == [reference.get(i, -1) for i in ids]
        assert len(index) == len(reference)
    live = index.live_rows()
    assert dict(zip(index.row_ids()[live].tolist(), live.tolist(), strict=True)) == reference


def test_the_index_finds_a_million_ids_after_removals_and_rebuilds() -> None:
    rng = np.random.default_rng(0)
    ids = rng.permutation(4_000_000)[:1_000_000].astype(np.int64)
    index = IdIndex()
    rows = np.concatenate([index.add(part) for part in np.array_split(ids, 50)])
    gone = ids[::3]
    index.remove(gone)
    again = index.add(gone[: len(gone) // 2])  # into the free rows
    assert set(again.tolist()) <= set(rows[::3].tolist())
    np.testing.assert_array_equal(index.find(ids[1::3]), rows[1::3])
    assert (index.find(gone[len(gone) // 2 :]) == -1).all()
    assert index.nbytes / len(index) <= 24 + 8  # table and the rows' ids (the free rows' ids beside)


def _server(height: int, tables: int = 1, entry: object = None) -> ParameterServer:
    main, startup = bir.Program(), bir.Program()
    with bir.program_guard(main, startup), bir.unique_name.guard():
        ids = bir.layers.data("ids", [-1, 1], dtype="int64")
        init = bir.ParamAttr(initializer=bir.initializer.Constant(0.5))
        embs = [
            bir.layers.embedding(ids, size=[height, 4], is_sparse=True, param_attr=init, entry=entry)  # type: ignore[arg-type]
            for _ in range(tables)
        ]
        loss = bir.layers.mean(embs[0])
        for emb in embs[1:]:
            loss = bir.layers.elementwise_add(loss, bir.layers.mean(emb))
        bir.optimizer.Adagrad(0.1).minimize(loss)
    return ParameterServer(0, split(main, 1, 1), startup, "async")


def test_a_row_dropped_by_shrink_is_reused_by_a_new_id_with_fresh_values_and_state(tmp_path: Path) -> None:
    srv = _server(100)
    srv.push(0, {}, {TABLE: (np.arange(10, dtype=np.int64), np.ones((10, 4), np.float32))})
    srv.save_shards(str(tmp_path))
    srv.commit_save()
    srv.pull_sparse(TABLE, np.arange(5, dtype=np.int64))  # 0..4 carried since the save
    srv.commit_save()
    assert srv.shrink(2) == {TABLE: 5}
    shard = srv.shards[TABLE]
    freed = set(range(5, 10))
    srv.push(0, {}, {TABLE: (np.arange(50, 55, dtype=np.int64), np.zeros((5, 4), np.float32))})
    assert set(shard.rows(np.arange(50, 55)).tolist()) == freed and shard.index.end == 10
    np.testing.assert_array_equal(srv.pull_sparse(TABLE, np.arange(50, 55, dtype=np.int64)), 0.5)
    state = [n for n in shard.store if n != TABLE][0]
    np.testing.assert_array_equal(shard.arrays[state][np.isin(shard.ids, np.arange(50, 55))], 0.0)
    rows, ids = shard.dirty_rows()
    assert ids.tolist() == [50, 51, 52, 53, 54] and shard.removed_ids().tolist() == [5, 6, 7, 8, 9]


def _stream(rows: int, batch: int = 5000, batches: int = 10) -> Callable[[], None]:
    """A server whose table holds ``rows`` rows, and the work of pushing ``batches`` batches of new ids into it."""
    srv = _server(rows + 4 * batches * batch)
    grad = np.full((batch, 4), 0.01, np.float32)
    fresh = iter(np.random.default_rng(rows).permutation(rows + 4 * batches * batch).reshape(-1, batch))

    def push() -> None:
        for _ in range(batches):
            srv.push(0, {}, {TABLE: (next(fresh), grad)})

    while srv.table_size(TABLE) < rows:
        srv.push(0, {}, {TABLE: (next(fresh), grad)})
    return push


def test_a_batch_of_new_ids_costs_the_same_in_a_table_ten_times_larger() -> None:
    """Process CPU time of pushing 10 batches of 5,000 new ids (in a random order) into a table of 200,000 and
    one of 2,000,000 rows, the least of 3 each, the two alternating (so that both see the machine as it is)."""
    small, large = 200_000, 2_000_000
    work = {small: _stream(small), large: _stream(large)}
    times: dict[int, list[float]] = {small: [], large: []}
    for _ in range(3):
        for rows, push in work.items():
            times[rows].append(cpu_seconds(push, runs=1))
    at_small, at_large = min(times[small]), min(times[large])
    assert at_large < 2 * at_small, f"{at_small:.4f} s at {small:,} rows, {at_large:.4f} s at {large:,} rows"


def test_a_pull_of_one_table_does_not_wait_for_another_tables_update() -> None:
    srv = _server(100, tables=2)
    other = next(t for t in srv.shards if t != TABLE)
    got: list[np.ndarray] = []
    with srv._table_locks[other]:  # an update of the other table in progress
        puller = threading.Thread(target=lambda: got.append(srv.pull_sparse(TABLE, np.arange(3, dtype=np.int64))))
        puller.start()
        puller.join(10)
        assert got, "the pull waited for the other table"
    np.testing.assert_array_equal(got[0], 0.5)


def test_pushes_to_two_tables_from_two_threads_equal_the_same_pushes_one_after_the_other() -> None:
    rng = np.random.default_rng(3)
    batches = [
        (rng.integers(0, 1000, 64).astype(np.int64), rng.normal(size=(64, 4)).astype(np.float32)) for _ in range(40)
    ]
    alone, together = _server(1000, tables=2), _server(1000, tables=2)
    names = sorted(alone.shards)
    for name in names:
        for ids, grad in batches:
            alone.push(0, {}, {name: (ids, grad)})

    def pushes(name: str) -> None:
        for ids, grad in batches:
            together.push(0, {}, {name: (ids, grad)})
            together.pull_sparse(next(n for n in names if n != name), ids)

    threads = [threading.Thread(target=pushes, args=(name,)) for name in names]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(60)
    assert together.version() == alone.version() == 2 * len(batches)
    for name in names:
        ids, rows = alone.table_rows(name)
        again, rows_again = together.table_rows(name)
        np.testing.assert_array_equal(rows_again[np.argsort(again)], rows[np.argsort(ids)])
