"""The parameter server alone: rows made on first use, seeded per row (the same whatever the number of servers
or the order ids arrive in); entry policies; sync steps averaged by batch; the errors a worker can run into."""

from __future__ import annotations

import threading

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import blockir as bir
from blockir.distributed import CountFilterEntry, ProbabilityEntry
from blockir.distributed.server import ParameterServer
from blockir.errors import BlockirError
from blockir.passes.distribute import Split, split

TABLE = "embedding_0.w_0"


OPTIMIZERS = {
    "sgd": lambda: bir.optimizer.SGD(0.5),
    "momentum": lambda: bir.optimizer.Momentum(0.1, 0.9, use_nesterov=True),
    "adagrad": lambda: bir.optimizer.Adagrad(0.1),
    "adam": lambda: bir.optimizer.Adam(0.1),
}


def _split(servers: int, workers: int = 1, entry: object = None, optimizer: str = "sgd") -> tuple[Split, bir.Program]:
    main, startup = bir.Program(), bir.Program()
    main.random_seed = startup.random_seed = 7
    with bir.program_guard(main, startup), bir.unique_name.guard():
        ids = bir.layers.data("ids", [-1, 1], dtype="int64")
        y = bir.layers.data("y", [-1, 4], dtype="float32")
        emb = bir.layers.embedding(ids, size=[100, 4], is_sparse=True, entry=entry)  # type: ignore[arg-type]
        loss = bir.layers.mean(bir.layers.square_error_cost(bir.layers.fc(emb, 4), y))
        OPTIMIZERS[optimizer]().minimize(loss)
    return split(main, servers, workers), startup


def _servers(servers: int, workers: int = 1, mode: str = "sync", **kw: object) -> list[ParameterServer]:
    s, startup = _split(servers, workers, **kw)  # type: ignore[arg-type]
    return [ParameterServer(k, s, startup, mode, timeout=5) for k in range(servers)]


def test_a_rows_first_value_depends_only_on_the_tables_seed_and_its_id() -> None:
    one = _servers(1)[0]
    three = _servers(3)
    ids = np.array([57, 3, 99, 10, 3], dtype=np.int64)
    want = one.pull_sparse(TABLE, ids)
    for i, row in zip(ids, want):
        got = three[i % 3].pull_sparse(TABLE, np.array([i], dtype=np.int64))[0]  # another order, another shard
        np.testing.assert_array_equal(got, row)
    low, high = -0.9, 0.9  # the initializer's range (Xavier for [100, 4]: sqrt(6 / 104) = 0.24)
    assert (want > low).all() and (want < high).all() and len(np.unique(want)) == want.size - 4  # id 3 twice


def test_rows_are_made_on_first_use_only() -> None:
    server = _servers(1)[0]
    assert server.table_size(TABLE) == 0
    server.pull_sparse(TABLE, np.array([4, 8, 4], dtype=np.int64))
    assert sorted(server.table_ids(TABLE).tolist()) == [4, 8]


def test_count_filter_admits_an_id_on_its_nth_sighting_and_drops_the_gradients_before() -> None:
    server = _servers(1, mode="async", entry=CountFilterEntry(2))[0]
    ids = np.array([5], dtype=np.int64)
    assert (server.pull_sparse(TABLE, ids) == 0).all()  # not admitted: zeros, and no row made
    grad = np.ones((1, 4), np.float32)
    server.push(0, {}, {TABLE: (ids, grad)})  # first sighting: dropped
    assert server.table_size(TABLE) == 0
    server.push(0, {}, {TABLE: (ids, grad)})  # second: the row is made, this gradient dropped too
    first = _servers(1)[0].pull_sparse(TABLE, ids)  # the row's initial value (no entry policy)
    np.testing.assert_array_equal(server.pull_sparse(TABLE, ids), first)
    server.push(0, {}, {TABLE: (ids, grad)})  # admitted: applied (SGD, lr 0.5)
    np.testing.assert_allclose(server.pull_sparse(TABLE, ids), first - 0.5)


def test_probability_entry_admits_the_same_ids_in_every_run() -> None:
    admitted = []
    for _ in range(2):
        server = _servers(1, mode="async", entry=ProbabilityEntry(0.3))[0]
        ids = np.arange(100, dtype=np.int64)
        server.push(0, {}, {TABLE: (ids, np.zeros((100, 4), np.float32))})
        admitted.append(sorted(server.table_ids(TABLE).tolist()))
    assert admitted[0] == admitted[1]
    assert 15 <= len(admitted[0]) <= 45  # about 30 of 100


def test_sync_steps_are_averaged_by_batch_and_applied_once() -> None:
    server = _servers(1, workers=2)[0]
    ids = np.array([1], dtype=np.int64)
    start = server.pull_sparse(TABLE, ids)
    grads = [np.full((1, 4), 1.0, np.float32), np.full((1, 4), 4.0, np.float32)]
    threads = [
        threading.Thread(target=server.push, args=(k, {}, {TABLE: (ids, grads[k])}, weight))
        for k, weight in ((0, 3), (1, 1))
    ]
    for t in threads:
        t.start()
    for t in threads:
        t.join(10)
    assert server.version() == 1
    np.testing.assert_allclose(server.pull_sparse(TABLE, ids, after=1), start - 0.5 * (0.75 * 1 + 0.25 * 4))


def test_a_sync_step_some_worker_never_pushes_is_an_error_naming_it() -> None:
    server = _servers(1, workers=2)[0]
    server.timeout = 0.3
    with pytest.raises(BlockirError, match=r"waited 0.3 s for step 1; workers \[1\] have not pushed it"):
        server.push(0, {}, {TABLE: (np.array([2], dtype=np.int64), np.ones((1, 4), np.float32))})


def test_bad_requests_name_what_is_wrong() -> None:
    servers = _servers(2, mode="async")
    grad = np.ones((1, 4), np.float32)
    with pytest.raises(BlockirError, match=r"table 'embedding_0.w_0': id 100 is out of range \(valid ids: 0..99\)"):
        servers[0].pull_sparse(TABLE, np.array([100], dtype=np.int64))
    with pytest.raises(BlockirError, match="parameter server 0 does not hold id 3"):
        servers[0].push(0, {}, {TABLE: (np.array([3], dtype=np.int64), grad)})
    with pytest.raises(BlockirError, match="holds no sparse table 'nope'"):
        servers[0].pull_sparse("nope", np.array([0], dtype=np.int64))
    servers[1].stop()
    with pytest.raises(BlockirError, match="parameter server 1 is stopped: worker 0's push is refused"):
        servers[1].push(0, {}, {TABLE: (np.array([3], dtype=np.int64), grad)})
    with pytest.raises(BlockirError, match="unknown role 'boss'"):
        from blockir.distributed.fleet import Role

        Role("boss", 0, 1, 1)


@pytest.mark.parametrize(
    ("configs", "a_sync", "message"),
    [
        ({"k_steps": 4}, False, "k_steps \\(GEO\\) needs a_sync = True"),
        ({"pull_evry": 4}, True, "unknown keys \\['pull_evry'\\]"),
        ({"pull_every": 0}, True, "pull_every must be an int >= 1, got 0"),
        ({"cache_windows": 0}, True, "cache_windows must be an int >= 1, got 0"),
        ({"prefetch": -1}, True, r"prefetch must be a number of batches >= 0 \(or True, 1\), got -1"),
        ({"prefetch": "2"}, True, r"prefetch must be a number of batches >= 0 \(or True, 1\), got '2'"),
    ],
)
def test_bad_strategy_configs_are_named(configs: dict, a_sync: bool, message: str) -> None:
    from blockir.distributed.fleet import DistributedStrategy

    with pytest.raises(BlockirError, match=message):
        DistributedStrategy(a_sync=a_sync, a_sync_configs=configs).mode()
    assert DistributedStrategy(a_sync_configs={"k_steps": 2}).mode() == "geo"


@pytest.mark.parametrize(
    ("env", "message"),
    [
        ({}, "no role"),
        ({"BLOCKIR_ROLE": "pserver", "BLOCKIR_SERVERS": "1", "BLOCKIR_WORKERS": "1"}, "unknown role 'pserver'"),
        ({"BLOCKIR_ROLE": "server", "BLOCKIR_SERVERS": "0", "BLOCKIR_WORKERS": "1"}, "at least one server, got 0"),
        ({"BLOCKIR_ROLE": "worker", "BLOCKIR_SERVERS": "1"}, "BLOCKIR_WORKERS is not set"),
        ({"BLOCKIR_ROLE": "worker", "BLOCKIR_SERVERS": "x", "BLOCKIR_WORKERS": "1"}, "BLOCKIR_SERVERS='x'"),
        (
            {"BLOCKIR_ROLE": "worker", "BLOCKIR_ROLE_INDEX": "2", "BLOCKIR_SERVERS": "1", "BLOCKIR_WORKERS": "2"},
            "worker index 2 is out of range",
        ),
    ],
)
def test_a_bad_role_in_the_environment_is_named(env: dict[str, str], message: str) -> None:
    from blockir.distributed.fleet import Role

    with pytest.raises(BlockirError, match=message):
        Role.from_env(env)


def test_an_id_pushed_twice_gets_the_sum_of_its_gradients() -> None:
    """The server sums repeated ids of a push (a worker's unmerged rows) and takes merged ones as they are."""
    twice, merged = _servers(1, mode="async"), _servers(1, mode="async")
    ids = np.array([3, 5, 3], np.int64)
    start = twice[0].pull_sparse(TABLE, np.array([3, 5], np.int64))
    rows = np.arange(12, dtype=np.float32).reshape(3, 4)
    twice[0].push(0, {}, {TABLE: (ids, rows)})
    merged[0].push(0, {}, {TABLE: (np.array([5, 3], np.int64), np.stack([rows[1], rows[0] + rows[2]]))})
    want = start - 0.5 * np.stack([rows[0] + rows[2], rows[1]])
    for server in (twice[0], merged[0]):
        np.testing.assert_allclose(server.pull_sparse(TABLE, np.array([3, 5], np.int64)), want, rtol=1e-6)


_pushes = st.lists(st.tuples(st.lists(st.integers(0, 99), max_size=30), st.booleans()), min_size=1, max_size=8)


@settings(max_examples=60, deadline=None)
@given(_pushes, st.sampled_from([None, 2]))
def test_pushes_in_any_order_with_or_without_repeats_update_rows_as_a_dict_of_rows_does(
    pushes: list, count: int | None
) -> None:
    """Against a model (a dict of rows, SGD at 0.5): a push of ascending distinct ids (a merged push, taken as it
    comes) or of ids in any order with repeats (summed), of any size (the rows gathered for an update are kept
    from one push to the next), with or without ids not yet admitted (count_filter: their gradients dropped)."""
    server = _servers(1, mode="async", entry=None if count is None else CountFilterEntry(count))[0]
    first = _servers(1)[0].pull_sparse(TABLE, np.arange(100, dtype=np.int64))  # each id's initial row
    rows: dict[int, np.ndarray] = {}
    sightings: dict[int, int] = {}
    rng = np.random.default_rng(0)
    for ids, merged in pushes:
        if merged:
            ids = sorted(set(ids))
        grads = rng.standard_normal((len(ids), 4)).astype(np.float32)
        admitted = set(rows)
        for i in ids:
            sightings[i] = sightings.get(i, 0) + 1
            if i not in rows and (count is None or sightings[i] >= count):
                rows[i] = first[i].copy()
        summed: dict[int, np.ndarray] = {}
        for i, g in zip(ids, grads, strict=True):
            if count is None or i in admitted:  # the push that admits an id drops its gradient
                summed[i] = summed.get(i, np.zeros(4, np.float32)) + g
        for i, g in summed.items():
            rows[i] -= np.float32(0.5) * g
        server.push(0, {}, {TABLE: (np.array(ids, np.int64), grads)})
    assert sorted(server.table_ids(TABLE).tolist()) == sorted(rows)
    if rows:
        held = np.array(sorted(rows), np.int64)
        want = np.stack([rows[i] for i in held.tolist()])
        np.testing.assert_allclose(server.pull_sparse(TABLE, held), want, rtol=1e-6, atol=1e-7)


@pytest.mark.parametrize("optimizer", sorted(OPTIMIZERS))
def test_a_push_updates_as_the_executor_runs_the_server_programs_ops(optimizer: str) -> None:
    """The server applies each optimizer op's kernel on the arrays: the blocks, the rows and every optimizer
    state after two pushes are those of the executor running the server's program on them, bit for bit."""
    s, startup = _split(1, optimizer=optimizer)
    server = ParameterServer(0, s, startup, "async")
    program = s.servers[0]
    grads = {op.input("Param")[0]: op.input("Grad")[0] for op in program.global_block().ops}
    rng = np.random.default_rng(1)
    server.init_dense({name: rng.standard_normal(_shape(program, name), np.float32) for name in server.blocks})
    ids = np.array([3, 7, 42], np.int64)
    server.pull_sparse(TABLE, ids)  # the rows made
    shard = server.shards[TABLE]
    scope = bir.Scope()  # the executor's: the same values
    for name in server.scope._vars:
        scope.set(name, np.array(server.scope.get(name)))
    for name, rows in shard.arrays.items():
        scope.set(name, rows[np.argsort(shard.ids)].copy())
    exe = bir.Executor("cpu")
    for _ in range(2):
        dense = {n: rng.standard_normal(_shape(program, n), np.float32) for n in server.blocks}
        sparse = rng.standard_normal((3, 4), np.float32)
        server.push(0, dense, {TABLE: (ids, sparse)})
        exe.run(program, feed={grads[n]: g for n, g in dense.items()} | {grads[TABLE]: sparse}, scope=scope)
    for name in server.scope._vars:
        np.testing.assert_array_equal(server.scope.get(name), scope.get(name), err_msg=name)
    order = np.argsort(shard.ids)
    for name, rows in shard.arrays.items():
        np.testing.assert_array_equal(rows[order], scope.get(name), err_msg=name)


def _shape(program: bir.Program, name: str) -> tuple[int, ...]:
    return tuple(program.global_block().var(name).shape)


def test_a_gradient_of_another_dtype_or_shape_is_refused_naming_it() -> None:
    server = _servers(1, mode="async")[0]
    (block,) = [b for b in server.blocks if b.endswith(".w_0")]
    shape = _shape(server.program, block)
    server.init_dense({name: np.zeros(_shape(server.program, name), np.float32) for name in server.blocks})
    with pytest.raises(BlockirError, match=rf"the gradient '{block}@GRAD' must be float32\[4, 4\].*float64"):
        server.push(0, {block: np.zeros(shape, np.float64)}, {})
    with pytest.raises(BlockirError, match=rf"the gradient '{block}@GRAD' must be float32\[4, 4\]"):
        server.push(0, {block: np.zeros((2, 4), np.float32)}, {})
    with pytest.raises(BlockirError, match=rf"the gradient '{TABLE}@GRAD' must be float32\[-1, 4\]"):
        server.push(0, {}, {TABLE: (np.array([1], np.int64), np.zeros((1, 4), np.float64))})
