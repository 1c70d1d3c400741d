"""The worker's distributed ops against numpy, with a client standing in for the communicator."""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import pytest

import blockir as bir
from blockir.errors import BlockirError, ExecutionError
from blockir.ir import Program, VarKind
from blockir.ops.distributed import PS_CLIENT, batch_weight
from blockir.ops.values import LoDTensor


class TableClient:
    """A client over one in-memory table (``rows[i] = i * 10 + column``) that records what it is sent."""

    def __init__(self) -> None:
        self.table = np.arange(50 * 3, dtype=np.float32).reshape(50, 3)
        self.pushes: list[tuple[dict, list, int]] = []
        self.fresh: dict[str, np.ndarray] | None = None

    def pull_sparse(self, table: str, ids: np.ndarray) -> np.ndarray:
        assert table == "emb" and ids.dtype == np.int64 and ids.ndim == 1
        return self.table[ids].copy()

    def push(self, dense: dict, sparse: list, weight: int) -> None:
        self.pushes.append((dense, sparse, weight))

    def pull_dense(self, names: Sequence[str]) -> dict[str, np.ndarray] | None:
        return self.fresh


def _program(padding: int = -1) -> Program:
    program = Program()
    block = program.global_block()
    block.create_var("ids", shape=(-1, 1), dtype="int64", lod_level=1, need_check_feed=True)
    block.create_var("out", shape=(-1, 3), dtype="float32")
    block.create_var("g", shape=(-1, 3), dtype="float32", need_check_feed=True)
    block.create_var("w", shape=(2, 2), dtype="float32", persistable=True)
    block.create_var("w@GRAD", shape=(2, 2), dtype="float32", need_check_feed=True)
    block.create_var(PS_CLIENT, kind=VarKind.RAW, persistable=True)
    block.create_var("token", shape=(1,), dtype="int64")
    block.append_op(
        "distributed_lookup_table",
        {"Ids": ["ids"], "Client": [PS_CLIENT]},
        {"Out": ["out"]},
        {"table": "emb", "height": 50, "dim": 3, "padding_idx": padding},
    )
    block.append_op(
        "send",
        {"X": ["w@GRAD"], "Ids": ["ids"], "Rows": ["g"], "Batch": ["ids"], "Client": [PS_CLIENT]},
        {"Token": ["token"]},
        {"params": ["w"], "tables": ["emb"], "padding_idx": [padding]},
    )
    block.append_op(
        "recv", {"Token": ["token"], "Current": ["w"], "Client": [PS_CLIENT]}, {"Out": ["w"]}, {"params": ["w"]}
    )
    return program


def _run(program: Program, client: TableClient, ids: LoDTensor) -> tuple[np.ndarray, np.ndarray, bir.Scope]:
    scope = bir.Scope()
    scope.set(PS_CLIENT, client)
    w = np.zeros((2, 2), np.float32)
    scope.set("w", w)
    grad = np.arange(len(ids.data) * 3, dtype=np.float32).reshape(-1, 3)
    feed = {"ids": ids, "g": grad, "w@GRAD": np.ones((2, 2), np.float32)}
    (out,) = bir.Executor("cpu").run(program, feed=feed, fetch_list=["out"], scope=scope)
    return out, grad, scope


@pytest.mark.parametrize("padding", [-1, 7])
def test_lookup_send_and_recv_do_what_numpy_says(padding: int) -> None:
    client = TableClient()
    client.fresh = {"w": np.full((2, 2), 5.0, np.float32)}
    ids = LoDTensor.from_lengths(np.array([[3], [7], [3], [40]], dtype=np.int64), [3, 1])
    out, grad, scope = _run(_program(padding), client, ids)
    want = client.table[[3, 7, 3, 40]]
    if padding == 7:
        want[1] = 0
    np.testing.assert_array_equal(out, want)
    ((dense, sparse, weight),) = client.pushes
    assert weight == 2  # two sequences
    np.testing.assert_array_equal(dense["w"], np.ones((2, 2)))
    ((table, pushed_ids, rows),) = sparse
    keep = [0, 2, 3] if padding == 7 else [0, 1, 2, 3]  # padding rows get no gradient
    assert table == "emb" and pushed_ids.tolist() == [[3, 7, 3, 40][i] for i in keep]
    np.testing.assert_array_equal(rows, grad[keep])
    np.testing.assert_array_equal(scope.get("w"), np.full((2, 2), 5.0))  # recv updated w in place


def test_recv_keeps_the_parameters_when_there_is_nothing_new() -> None:
    client = TableClient()
    _, _, scope = _run(_program(), client, LoDTensor.from_lengths(np.array([[1]], dtype=np.int64), [1]))
    np.testing.assert_array_equal(scope.get("w"), np.zeros((2, 2)))


def test_an_id_beyond_the_tables_height_names_it() -> None:
    with pytest.raises(ExecutionError, match="id 50 is out of range for a table of height 50"):
        _run(_program(), TableClient(), LoDTensor.from_lengths(np.array([[50]], dtype=np.int64), [1]))


def test_batch_weight_counts_sequences_or_rows() -> None:
    assert batch_weight(LoDTensor.from_lengths(np.zeros((5, 1)), [2, 3])) == 2
    assert batch_weight(np.zeros((4, 2))) == 4


def test_the_client_must_be_a_raw_variable() -> None:
    program = Program()
    block = program.global_block()
    block.create_var("ids", shape=(-1, 1), dtype="int64")
    block.create_var("c", shape=(1,), dtype="float32")
    block.create_var("out")
    with pytest.raises(BlockirError, match="Client 'c' must be a raw variable"):
        block.append_op(
            "distributed_lookup_table",
            {"Ids": ["ids"], "Client": ["c"]},
            {"Out": ["out"]},
            {"table": "t", "height": 5, "dim": 2},
        )


def test_geo_sync_hands_the_client_the_parameters_and_the_ids_each_table_was_read_at() -> None:
    class GeoClient:
        def __init__(self) -> None:
            self.calls: list[tuple[dict, dict]] = []

        def geo_step(self, params: dict, touched: dict) -> None:
            self.calls.append((dict(params), {t: ids.copy() for t, ids in touched.items()}))
            params["w"][...] += 1  # the servers' values, written in place

    program = Program()
    block = program.global_block()
    block.create_var("ids", shape=(-1, 1), dtype="int64", need_check_feed=True)
    block.create_var("ids2", shape=(-1, 1), dtype="int64", need_check_feed=True)
    block.create_var("w", shape=(2,), dtype="float32", persistable=True)
    block.create_var("t", shape=(10, 2), dtype="float32", persistable=True)
    block.create_var(PS_CLIENT, kind=VarKind.RAW, persistable=True)
    block.append_op(
        "geo_sync",
        {"Params": ["w", "t"], "Ids": ["ids", "ids2"], "Client": [PS_CLIENT]},
        {"Out": ["w", "t"]},
        {"params": ["w", "t"], "id_tables": ["t", "t"]},
    )
    client, scope = GeoClient(), bir.Scope()
    scope.set(PS_CLIENT, client)
    scope.set("w", np.zeros(2, np.float32))
    scope.set("t", np.zeros((10, 2), np.float32))
    feed = {"ids": np.array([[3], [1]], dtype=np.int64), "ids2": np.array([[1], [9]], dtype=np.int64)}
    bir.Executor("cpu").run(program, feed=feed, scope=scope)
    ((params, touched),) = client.calls
    assert sorted(params) == ["t", "w"] and touched["t"].tolist() == [3, 1, 1, 9]
    np.testing.assert_array_equal(scope.get("w"), [1, 1])  # updated in place, kept in the scope


def _v2_program(ids_shape: tuple[int, ...], attrs: dict) -> Program:
    program = Program()
    block = program.global_block()
    block.create_var("ids", shape=ids_shape, dtype="int64", need_check_feed=True)
    block.create_var("out", dtype="float32")
    block.create_var(PS_CLIENT, kind=VarKind.RAW, persistable=True)
    block.append_op(
        "distributed_lookup_table",
        {"Ids": ["ids"], "Client": [PS_CLIENT]},
        {"Out": ["out"]},
        {"table": "emb", "height": 50, "dim": 3, **attrs},
    )
    return program


def test_a_lookup_table_v2_lookup_keeps_every_dimension_of_its_ids() -> None:
    """lookup_table_version=lookup_table_v2: Out [*Ids.shape, dim] (a lookup_table's drops Ids' last 1)."""
    program = _v2_program((-1, 4), {"lookup_table_version": "lookup_table_v2", "padding_idx": 9})
    assert program.global_block().var("out").shape == (-1, 4, 3)
    scope, client = bir.Scope(), TableClient()
    scope.set(PS_CLIENT, client)
    ids = np.array([[1, 9, 3, 3], [40, 2, 0, 9]], np.int64)
    (out,) = bir.Executor("cpu").run(program, feed={"ids": ids}, fetch_list=["out"], scope=scope)
    want = client.table[ids]
    want[ids == 9] = 0
    np.testing.assert_array_equal(out, want)


@pytest.mark.parametrize(
    ("ids_shape", "attrs", "message"),
    [
        ((-1, 4), {}, r"Ids .* of a lookup_table must have a last dimension of 1 \(lookup_table_v2: any shape\)"),
        ((-1, 1), {"lookup_table_version": "lookup_table_v3"}, r"lookup_table_version 'lookup_table_v3' must be one"),
    ],
)
def test_a_lookup_its_version_cannot_read_is_refused(ids_shape: tuple[int, ...], attrs: dict, message: str) -> None:
    with pytest.raises(BlockirError, match=message):
        _v2_program(ids_shape, attrs)
