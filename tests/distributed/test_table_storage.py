"""A sparse table's storage on a server: the id index against a dict, a dropped row's slot handed out again, the
cost of a batch of new ids whatever the table's size, and one lock per table."""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterator
from pathlib import Path

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import blockir as bir
from blockir.distributed.index import IdIndex, run_starts, unique_ids
from blockir.distributed.server import ParameterServer, _FullSave, _Shard
from blockir.io.manifest import TableEntry
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


@settings(max_examples=200, deadline=None)
@given(
    st.lists(st.integers(-5, 5) | st.integers(-(2**63), 2**63 - 1), max_size=60), st.sampled_from([np.int64, np.int32])
)
def test_unique_ids_is_numpys_unique_by_one_sort(ids: list, dtype: type) -> None:
    keys = np.array(ids, np.int64).astype(dtype)
    got, want = unique_ids(keys), np.unique(keys)
    assert got.dtype == want.dtype and got.tolist() == want.tolist()
    ordered = np.sort(keys)
    assert run_starts(ordered).tolist() == [k == 0 or ordered[k] != ordered[k - 1] for k in range(len(ordered))]


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
    height = rows + 4 * batches * batch
    srv = _server(height)
    grad = np.full((batch, 4), 0.01, np.float32)
    order = np.random.default_rng(rows).permutation(height)
    fresh = iter(order[rows:].reshape(-1, batch))

    def push() -> None:
        for _ in range(batches):
            srv.push(0, {}, {TABLE: (next(fresh), grad)})

    for part in np.array_split(order[:rows], max(1, rows // 100_000)):  # filled in large pushes: cheaper
        srv.push(0, {}, {TABLE: (part, np.full((len(part), 4), 0.01, np.float32))})
    return push


def test_a_batch_of_new_ids_costs_the_same_in_a_table_ten_times_larger() -> None:
    """Process CPU time of pushing 10 batches of 5,000 new ids (in a random order) into a table of 100,000 and
    one of 1,000,000 rows, the least of 3 each, the two alternating (so that both see the machine as it is)."""
    small, large = 100_000, 1_000_000
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


def test_a_paddle_style_worker_running_its_own_startup_program_allocates_no_distributed_table() -> None:
    """A [10^9, 16] table (60 GB in full): the worker runs ``default_startup_program()`` itself, as Paddle's
    parameter-server scripts do, which ``minimize`` rewrote in place; it trains a step on ids at both ends."""
    from blockir.distributed import fleet
    from blockir.distributed.launch import launch

    seen: dict[str, object] = {}

    def script() -> None:
        fleet.init()
        ids = bir.layers.data("ids", [-1, 1], dtype="int64")
        emb = bir.layers.embedding(ids, size=[10**9, 16], is_sparse=True)
        loss = bir.layers.mean(bir.layers.fc(emb, 1))
        strategy = fleet.DistributedStrategy()
        strategy.a_sync = True
        fleet.distributed_optimizer(bir.optimizer.SGD(0.1), strategy).minimize(loss)
        if fleet.is_server():
            fleet.init_server()
            fleet.run_server()
            seen["rows"] = fleet.server().table_size(TABLE)
            return
        exe = bir.Executor("cpu")
        exe.run(bir.default_startup_program())
        fleet.init_worker()
        feed = {"ids": np.array([[0], [10**9 - 1]], np.int64)}
        seen["loss"] = exe.run(fleet.main_program, feed=feed, fetch_list=[loss])[0]
        seen["scope"] = bir.global_scope().find_var(TABLE)
        seen["rewritten"] = fleet.startup_program is bir.default_startup_program()
        fleet.stop_worker()

    result = launch(script, 1, 1, timeout=60)
    assert result.ok, result.failures
    assert seen["scope"] is None and seen["rewritten"] is True
    assert np.isfinite(seen["loss"]).all() and seen["rows"] == 2


def _saved(srv: ParameterServer, base: Path, chain: list[dict], delta: bool) -> dict:
    """Save ``srv``'s table into a new directory under ``base`` (``delta``: as a delta after ``chain``); its
    manifest entry with the chain so far (the server's save left uncommitted)."""
    directory = base / f"g{len(list(base.iterdir()))}"
    directory.mkdir()
    written = srv.save_shards(str(directory), delta)[TABLE]
    shard = {k: (Path(v).relative_to(base).as_posix() if k == "file" else v) for k, v in written.items()}
    chain.append({k: v for k, v in shard.items() if k != "states"})
    table = srv.shards[TABLE].table
    entry = {"height": table.height, "dim": table.dim, "dtype": table.dtype, "servers": 1, "rule": "id % servers"}
    return entry | {"states": written["states"], "shards": [chain[0]], "deltas": [{"shards": [s]} for s in chain[1:]]}


def _loaded(base: Path, entry: dict, height: int) -> dict[int, np.ndarray]:
    fresh = _server(height)
    fresh.load_tables(str(base), {TABLE: entry}, None)
    ids, rows = fresh.table_rows(TABLE)
    return dict(zip(ids.tolist(), rows, strict=True))


def _rows(srv: ParameterServer) -> dict[int, np.ndarray]:
    ids, rows = srv.table_rows(TABLE)
    return dict(zip(ids.tolist(), rows, strict=True))


def _same(got: dict[int, np.ndarray], want: dict[int, np.ndarray]) -> None:
    assert sorted(got) == sorted(want)
    for i, row in want.items():
        np.testing.assert_array_equal(got[i], row)


def test_a_row_changed_while_a_save_completes_is_in_the_next_delta(tmp_path: Path) -> None:
    srv, chain = _server(100), []
    grad = np.ones((10, 4), np.float32)
    srv.push(0, {}, {TABLE: (np.arange(10, dtype=np.int64), grad)})
    _saved(srv, tmp_path, chain, delta=False)
    srv.push(0, {}, {TABLE: (np.array([3], dtype=np.int64), grad[:1])})  # after the rows were written
    srv.commit_save()  # the save completes: 3's new value is not in it
    assert srv.shards[TABLE].dirty_rows()[1].tolist() == [3]
    srv.push(0, {}, {TABLE: (np.array([4], dtype=np.int64), grad[:1])})
    _saved(srv, tmp_path, list(chain), delta=True)  # a save that never completes (no commit)
    srv.push(0, {}, {TABLE: (np.array([4, 5], dtype=np.int64), grad[:2])})
    entry = _saved(srv, tmp_path, chain, delta=True)  # 3, 4 (logged twice) and 5, once each
    assert chain[-1]["rows"] == 3
    _same(_loaded(tmp_path, entry, 100), _rows(srv))


def _every_row(shard: _Shard) -> dict[int, np.ndarray]:
    """id -> its row and each state's, side by side (read as the caller holds the table's lock)."""
    both = np.concatenate([shard.arrays[name] for name in sorted(shard.store)], axis=1)
    return dict(zip(shard.ids.tolist(), both, strict=True))


@pytest.mark.parametrize("free", [False, True])
def test_pushes_during_a_full_save_are_neither_lost_nor_torn(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, free: bool
) -> None:
    """A full save holds the table's lock only between parts (pulls, pushes, a shrink and new ids in rows it
    freed go through meanwhile, each from a thread that must finish within 10 s); the base holds every row and
    its state as they were when the save began, and the delta after it every change made while it was written."""
    monkeypatch.setattr(_FullSave, "PART_BYTES", 512)  # parts of 32 rows: many chances to interleave
    rng = np.random.default_rng(7)
    srv = _server(10**6)
    ids = rng.permutation(10**6)[:4000].astype(np.int64)
    srv.push(0, {}, {TABLE: (ids, rng.normal(size=(4000, 4)).astype(np.float32))})
    shard = srv.shards[TABLE]
    if free:  # rows free when the save begins: it writes the live ones
        shard.drop(ids[:100])
    began: dict[int, np.ndarray] = {}
    begin_save = shard.begin_save
    monkeypatch.setattr(shard, "begin_save", lambda: (began.update(_every_row(shard)), begin_save()))
    read, changed = _FullSave._read, []

    def meanwhile(k: int) -> None:
        some = rng.choice(ids[100:], 50, replace=False)
        with srv._table_locks[TABLE]:
            shard.drop(some[:5])  # as shrink does: their rows are free ...
        fresh = rng.integers(0, 10**6, 10).astype(np.int64)
        grad = rng.normal(size=(55, 4)).astype(np.float32)
        srv.push(0, {}, {TABLE: (np.concatenate([some[5:], fresh]), grad)})  # ... and new ids take them
        srv.pull_sparse(TABLE, some)
        changed.append(k)

    def interleaved(self: _FullSave, name: str, lock: threading.Lock) -> Iterator[np.ndarray]:
        for k, part in enumerate(read(self, name, lock)):
            if k % 20 == 0:
                thread = threading.Thread(target=meanwhile, args=(k,))
                thread.start()
                thread.join(10)
                assert not thread.is_alive(), "a push waited for the save's write"
            yield part

    monkeypatch.setattr(_FullSave, "_read", interleaved)
    chain: list[dict] = []
    base = _saved(srv, tmp_path, chain, delta=False)
    srv.commit_save()
    monkeypatch.setattr(_FullSave, "_read", read)
    monkeypatch.setattr(shard, "begin_save", begin_save)
    assert len(changed) > 10 and not shard.writing
    loaded = _server(10**6)
    loaded.load_tables(str(tmp_path), {TABLE: base}, None)
    _same(_every_row(loaded.shards[TABLE]), began)  # a consistent cut: as the save began
    entry = _saved(srv, tmp_path, chain, delta=True)
    again = _server(10**6)
    again.load_tables(str(tmp_path), {TABLE: entry}, None)
    with srv._table_locks[TABLE]:
        now = _every_row(shard)
    assert set(now) != set(began)  # ids dropped and made meanwhile
    _same(_every_row(again.shards[TABLE]), now)  # nothing pushed meanwhile lost


_steps = st.lists(
    st.one_of(
        st.tuples(st.just("push"), st.lists(st.integers(0, 60), min_size=1, max_size=12)),
        st.tuples(st.just("pull"), st.lists(st.integers(0, 60), min_size=1, max_size=12)),
        st.tuples(st.just("shrink"), st.integers(1, 2)),
        st.tuples(st.just("save"), st.booleans()),
    ),
    max_size=14,
)


@settings(max_examples=40, deadline=None)
@given(_steps)
def test_a_chain_of_a_base_and_deltas_loads_as_the_table_was_when_it_was_saved(steps: list) -> None:
    """Pushes, pulls, shrinks and saves (each complete) in any order: a load of the last base and the deltas after it
    holds the rows the table held at the last save, and a reshard of it the same."""
    import tempfile

    from blockir.distributed.saves import replay

    srv, chain, entry, want = _server(61), [], None, None
    with tempfile.TemporaryDirectory() as tmp:
        base = Path(tmp)
        for kind, arg in steps:
            if kind == "push":
                ids = np.array(arg, np.int64)
                srv.push(0, {}, {TABLE: (ids, np.full((len(ids), 4), 0.25, np.float32))})
            elif kind == "pull":
                srv.pull_sparse(TABLE, np.array(arg, np.int64))
            elif kind == "shrink":
                srv.shrink(arg)
            else:
                delta = arg and entry is not None
                base = base if delta else Path(tempfile.mkdtemp(dir=tmp))
                entry = _saved(srv, base, chain if delta else (chain := []), delta)
                srv.commit_save()
                want, saved_in = _rows(srv), base
        if entry is None:
            return
        _same(_loaded(saved_in, entry, 61), want)
        done = replay(saved_in, TABLE, TableEntry.from_json(entry, "the test's entry", TABLE), [TABLE])
        live = done.index.live_rows()
        _same(dict(zip(done.index.row_ids()[live].tolist(), done.arrays[TABLE][live], strict=True)), want)


def test_a_shard_holding_another_servers_id_is_refused_naming_it(tmp_path: Path) -> None:
    from blockir.errors import BlockirError

    srv, chain = _server(100), []
    srv.push(0, {}, {TABLE: (np.arange(4, dtype=np.int64), np.ones((4, 4), np.float32))})
    entry = _saved(srv, tmp_path, chain, delta=False)
    two = entry | {"servers": 2, "shards": [chain[0], chain[0]]}  # shard 0 of 2 holds ids 1 and 3 too
    main, startup = bir.Program(), bir.Program()
    with bir.program_guard(main, startup), bir.unique_name.guard():
        ids = bir.layers.data("ids", [-1, 1], dtype="int64")
        bir.optimizer.Adagrad(0.1).minimize(bir.layers.mean(bir.layers.embedding(ids, size=[100, 4], is_sparse=True)))
    server0 = ParameterServer(0, split(main, 2, 1), startup, "async")
    with pytest.raises(BlockirError, match=r"shard g0/.* of server 0 of 2 holds id 1 \('ids'\), which the rule"):
        server0.load_tables(str(tmp_path), {TABLE: two}, None)


def test_an_index_restored_from_its_saved_table_finds_every_id_and_a_wrong_table_is_not_taken() -> None:
    rng = np.random.default_rng(5)
    ids = rng.permutation(10**6)[:5000].astype(np.int64)
    index = IdIndex()
    index.add(ids)
    index.remove(ids[:100])
    index.add(ids[:100][::-1])  # the free rows reused: none free, tombstones left in the table
    assert index.free == 0
    row_ids = index.row_ids().copy()
    again = IdIndex.restored(row_ids, index.slots.copy())
    assert again is not None and len(again) == 5000
    np.testing.assert_array_equal(again.find(ids), index.find(ids))
    again.add(np.array([10**6 + 1], np.int64))  # and it goes on growing
    assert again.find(np.array([10**6 + 1]))[0] == 5000
    wrong = {
        "another id": np.where(row_ids == row_ids[7], row_ids[8], row_ids),  # an id twice, one missing
        "fewer rows": row_ids[:-1],
    }
    for what, table_ids in wrong.items():
        assert IdIndex.restored(table_ids, index.slots.copy()) is None, what
    assert IdIndex.restored(row_ids, index.slots[:-1].copy()) is None  # not a power of two
    bad = index.slots.copy()
    bad[np.flatnonzero(bad >= 0)[0]] = 5000  # a slot naming a row that is not there
    assert IdIndex.restored(row_ids, bad) is None


def test_a_load_takes_the_index_saved_with_a_full_save(tmp_path: Path) -> None:
    srv, chain = _server(10**6), []
    ids = np.random.default_rng(1).permutation(10**6)[:3000].astype(np.int64)
    srv.push(0, {}, {TABLE: (ids, np.ones((3000, 4), np.float32))})
    entry = _saved(srv, tmp_path, chain, delta=False)
    assert "index_slots" in chain[0]["arrays"]
    fresh = _server(10**6)
    fresh.load_tables(str(tmp_path), {TABLE: entry}, None)
    np.testing.assert_array_equal(fresh.shards[TABLE].index.slots, srv.shards[TABLE].index.slots)
    _same(_rows(fresh), _rows(srv))


def test_an_index_table_that_misplaces_a_row_or_cuts_a_probe_short_is_not_taken() -> None:
    """The check of a saved table catches a table whose every row is in one slot, with as many live slots as
    rows, but not where a look-up of its id finds it: two rows swapped, a row moved past an empty slot."""
    rng = np.random.default_rng(6)
    ids = rng.permutation(10**6)[:4000].astype(np.int64)
    index = IdIndex()
    index.add(ids)
    row_ids = index.row_ids().copy()
    assert IdIndex.restored(row_ids, index.slots.copy()) is not None
    live = np.flatnonzero(index.slots >= 0)
    swapped = index.slots.copy()
    swapped[live[[10, 2000]]] = swapped[live[[2000, 10]]]  # each row at the other's slot
    assert IdIndex.restored(row_ids, swapped) is None
    empty = np.flatnonzero(index.slots == -1)
    moved = index.slots.copy()
    slot = live[live < empty[-1]][-1]  # a row, and an empty slot after it: the row put there is past its probe
    target = empty[empty > slot][0] + 1  # one past that empty slot (itself empty or a row's: moved to the next)
    while moved[target % moved.size] != -1:
        target += 1
    moved[target % moved.size], moved[slot] = moved[slot], -1
    assert IdIndex.restored(row_ids, moved) is None


def test_a_load_builds_the_index_when_the_saved_table_does_not_check_out(tmp_path: Path) -> None:
    """A full save whose index table was written wrong (its checksums right) still loads every row: the table
    is refused by its check and the index built."""
    from blockir.io.persistence import write_shard

    srv, chain = _server(10**6), []
    ids = np.random.default_rng(2).permutation(10**6)[:3000].astype(np.int64)
    srv.push(0, {}, {TABLE: (ids, np.ones((3000, 4), np.float32))})
    entry = _saved(srv, tmp_path, chain, delta=False)
    shard = srv.shards[TABLE]
    slots = shard.index.slots.copy()
    live = np.flatnonzero(slots >= 0)
    slots[live[[10, 2000]]] = slots[live[[2000, 10]]]  # each row at the other's slot, far from its own
    arrays = {"ids": shard.ids, **shard.arrays, "pending_ids": np.zeros(0, np.int64)}
    arrays |= {"pending_counts": np.zeros(0, np.int64), "removed_ids": np.zeros(0, np.int64), "index_slots": slots}
    path = tmp_path / "wrong" / "base.npys"
    written = {"file": path.relative_to(tmp_path).as_posix(), **write_shard(path, arrays)}
    fresh = _server(10**6)
    fresh.load_tables(str(tmp_path), {TABLE: entry | {"shards": [written]}}, None)
    assert not np.array_equal(fresh.shards[TABLE].index.slots, slots)  # built, not taken
    _same(_rows(fresh), _rows(srv))
    np.testing.assert_array_equal(fresh.shards[TABLE].rows(ids), srv.shards[TABLE].rows(ids))


def test_a_save_of_a_taller_table_loads_only_if_its_ids_fit(tmp_path: Path) -> None:
    """A save of a table of another height loads where every id is below the program's height; an id that is
    not is an error naming it (read_shard checks the ids against the save's height alone)."""
    from blockir.errors import BlockirError

    srv, chain = _server(10**6), []
    srv.push(0, {}, {TABLE: (np.array([3, 500_000], np.int64), np.ones((2, 4), np.float32))})
    entry = _saved(srv, tmp_path, chain, delta=False)
    with pytest.raises(BlockirError, match=r"table 'embedding_0.w_0': id 500000 is out of range \(valid ids: 0..999\)"):
        _server(1000).load_tables(str(tmp_path), {TABLE: entry}, None)
    small, chain, base = _server(10), [], tmp_path / "small"
    small.push(0, {}, {TABLE: (np.array([3, 7], np.int64), np.ones((2, 4), np.float32))})
    base.mkdir()
    _same(_loaded(base, _saved(small, base, chain, delta=False), 1000), _rows(small))
