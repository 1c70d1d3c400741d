"""The distribute pass beyond its golden cases: the server programs it records, where the blocks go, what it
refuses, and (a property) that training through its programs computes what plain training computes."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import blockir as bir
from blockir.distributed import fleet
from blockir.distributed.launch import launch
from blockir.dsl.layer_helper import LayerHelper
from blockir.errors import BlockirError
from blockir.ir import parse_program
from blockir.passes import run
from blockir.passes.distribute import split
from tests.distributed import scenarios


def mlp(widths: list[int], optimizer: Any) -> tuple[bir.Program, bir.Program, Any]:
    main, startup = bir.Program(), bir.Program()
    main.random_seed = startup.random_seed = 2
    with bir.program_guard(main, startup), bir.unique_name.guard():
        h = bir.layers.data("x", [-1, 3], dtype="float64")
        for w in widths:
            h = bir.layers.fc(h, w, act="tanh")
        y = bir.layers.data("y", [-1, widths[-1]], dtype="float64")
        loss = bir.layers.mean(bir.layers.square_error_cost(h, y))
        optimizer().minimize(loss)
    return main, startup, loss


def test_the_report_holds_each_servers_program() -> None:
    main, _, _ = mlp([64, 2], lambda: bir.optimizer.Adam(0.1))
    _, report = run(main, "distribute{servers=2 workers=3 min_block_size=100}")
    servers = list(report.record("distribute").details["programs"].values())
    assert len(servers) == 2
    held = [sorted(v for v, var in p.global_block().vars.items() if var.is_parameter) for p in servers]
    assert held == [
        ["fc_0.w_0.block0", "fc_1.b_0", "fc_1.w_0.block0"],
        ["fc_0.b_0", "fc_0.w_0.block1", "fc_1.w_0.block1"],
    ]
    assert report.record("distribute").notes == ["6 dense blocks, 0 sparse tables over 2 servers"]
    text = str(servers[1])
    assert "adam(Param=%fc_0.w_0.block1, Grad=%fc_0.w_0@GRAD.block1" in text  # its own block, moments, pows
    assert "Beta1Pow=%fc_0.w_0_beta1_pow_acc_0.block1" in text


def test_blocks_are_spread_by_size() -> None:
    main, _, _ = mlp([300, 40, 7], lambda: bir.optimizer.SGD(0.1))
    s = split(main, 3, 1, min_block_size=1000)
    load = [0, 0, 0]
    for b in s.blocks:
        shape = main.global_block().var(b.param).shape
        load[b.server] += (b.end - b.begin) * int(np.prod(shape[1:]))
    whole = max(
        (b.end - b.begin) * int(np.prod(main.global_block().var(b.param).shape[1:])) for b in s.blocks if b.count == 1
    )
    assert whole == 900 and max(load) - min(load) <= whole  # largest first onto the least loaded: within one block
    assert {b.count for b in s.blocks if b.param == "fc_1.w_0"} == {3}  # [300, 40]: cut in three


def test_refused_programs_are_named() -> None:
    main, _, _ = mlp([4], lambda: bir.optimizer.SGD(0.1))
    with pytest.raises(BlockirError, match="the distribute option servers must be an int >= 1, got 0"):
        run(main, "distribute{servers=0}")
    plain = bir.Program()
    with bir.program_guard(plain, bir.Program()), bir.unique_name.guard():
        bir.layers.fc(bir.layers.data("x", [-1, 3]), 2)
    with pytest.raises(BlockirError, match="no optimizer ops"):
        split(plain, 1, 1)
    shared = bir.Program()
    with bir.program_guard(shared, bir.Program()), bir.unique_name.guard():
        ids = bir.layers.data("ids", [-1, 1], dtype="int64")
        attr = bir.ParamAttr(name="table")
        a = bir.layers.embedding(ids, [10, 2], is_sparse=True, param_attr=attr)
        b = bir.layers.embedding(ids, [10, 2], is_sparse=False, param_attr=attr)
        bir.optimizer.SGD(0.1).minimize(bir.layers.mean(bir.layers.elementwise_add(a, b)))
    with pytest.raises(BlockirError, match="table 'table' is read densely"):
        split(shared, 1, 1)


@settings(max_examples=6, deadline=None)
@given(
    widths=st.lists(st.integers(1, 40), min_size=1, max_size=3),
    optimizer=st.sampled_from(["sgd", "adam", "adagrad"]),
    servers=st.integers(1, 3),
    workers=st.integers(1, 3),
    min_block=st.sampled_from([1, 50, 8192]),
)
def test_sync_training_through_the_split_equals_plain_training(
    widths: list[int], optimizer: str, servers: int, workers: int, min_block: int
) -> None:
    make = {
        "sgd": lambda: bir.optimizer.SGD(0.1),
        "adam": lambda: bir.optimizer.Adam(0.05),
        "adagrad": lambda: bir.optimizer.Adagrad(0.1),
    }[optimizer]
    rng = np.random.default_rng(len(widths))
    x, y = rng.normal(size=(7, 3)), rng.normal(size=(7, widths[-1]))
    got: dict[str, np.ndarray] = {}

    def script() -> None:
        fleet.init()
        main, startup = bir.default_main_program(), bir.default_startup_program()
        main.random_seed = startup.random_seed = 2
        h = bir.layers.data("x", [-1, 3], dtype="float64")
        for w in widths:
            h = bir.layers.fc(h, w, act="tanh")
        target = bir.layers.data("y", [-1, widths[-1]], dtype="float64")
        loss = bir.layers.mean(bir.layers.square_error_cost(h, target))
        strategy = fleet.DistributedStrategy(a_sync=False, min_block_size=min_block)
        fleet.distributed_optimizer(make(), strategy).minimize(loss)
        exe = scenarios.serve_or_start_worker()
        if exe is None:
            return
        k, n = fleet.worker_index(), fleet.worker_num()
        for _ in range(2):
            exe.run(fleet.main_program, feed={"x": np.array_split(x, n)[k], "y": np.array_split(y, n)[k]})
        if k == 0:
            got.update((p.name, np.array(bir.global_scope().get(p.name))) for p in fleet.main_program.all_parameters())
        fleet.stop_worker()

    assert launch(script, servers, workers, timeout=60).ok
    main, startup, _ = mlp(widths, make)
    scope = bir.Scope()
    with bir.Executor("cpu") as exe:
        exe.run(startup, scope=scope)
        for _ in range(2):
            exe.run(main, feed={"x": x, "y": y}, scope=scope)
    for param in main.all_parameters():
        np.testing.assert_allclose(got[param.name], scope.get(param.name), rtol=1e-10, atol=1e-12, err_msg=param.name)


def test_a_lookup_table_v2_table_trains_in_sync_on_two_servers_as_on_one() -> None:
    """Paddle 2's embedding (lookup_table_v2, ids [N, 4]) as a sparse table on the servers: two servers and two
    workers fed halves of each batch end where one of each fed the whole batch does (rows and dense)."""
    rng = np.random.default_rng(5)
    words = rng.integers(0, 60, size=(3, 8, 4)).astype(np.int64)  # 3 steps of 8 documents of 4 words
    labels = rng.integers(0, 2, size=(3, 8, 1)).astype(np.int64)
    used = np.unique(words)
    results: dict[int, dict[str, np.ndarray]] = {}

    def script(servers: int) -> None:
        fleet.init()
        main, startup = bir.default_main_program(), bir.default_startup_program()
        main.random_seed = startup.random_seed = 4
        ids = bir.layers.data("words", [-1, 4], dtype="int64")
        label = bir.layers.data("label", [-1, 1], dtype="int64")
        helper = LayerHelper("embedding")
        table = helper.create_parameter(bir.ParamAttr.to_attr(None), [60, 5], "float32")
        emb = helper.create_tmp(table.dtype)
        helper.append_op("lookup_table_v2", {"W": [table], "Ids": [ids]}, {"Out": [emb]}, {"is_sparse": True})
        pred = bir.layers.fc(bir.layers.reduce_sum(emb, dim=1), 2, act="softmax")
        loss = bir.layers.mean(bir.layers.cross_entropy(pred, label))
        fleet.distributed_optimizer(bir.optimizer.Adagrad(0.2), fleet.DistributedStrategy(a_sync=False)).minimize(loss)
        exe = scenarios.serve_or_start_worker()
        if exe is None:
            return
        k, n = fleet.worker_index(), fleet.worker_num()
        first = fleet.communicator().pull_sparse(table.name, used)
        for step in range(3):
            half = {"words": np.array_split(words[step], n)[k], "label": np.array_split(labels[step], n)[k]}
            exe.run(fleet.main_program, feed=half)
        if k == 0:
            got = {p.name: np.array(bir.global_scope().get(p.name)) for p in fleet.main_program.all_parameters()}
            got["table"] = fleet.communicator().pull_sparse(table.name, used)
            got["first"] = first
            results[servers] = got
        fleet.stop_worker()

    for servers in (1, 2):
        assert launch(lambda s=servers: script(s), servers, servers, timeout=60).ok
    assert set(results[1]) == set(results[2]) and results[1]["table"].shape == (len(used), 5)
    assert np.abs(results[1]["table"] - results[1]["first"]).min() > 0  # every row used was trained
    for name, value in results[1].items():
        np.testing.assert_allclose(results[2][name], value, rtol=1e-5, atol=1e-6, err_msg=name)


def test_fleet_finds_a_lookup_table_v2_table_among_the_sparse_variables() -> None:
    text = (Path(__file__).parent / "golden" / "distribute" / "sparse_table_v2.before.txt").read_text()
    program = parse_program("\n".join(line for line in text.splitlines() if not line.startswith("#")))
    assert [v.name for v in fleet.sparse_vars(program)] == ["embedding_0.w_0"]
    assert "embedding_0.w_0" not in {v.name for v in fleet.dense_vars(program)}
