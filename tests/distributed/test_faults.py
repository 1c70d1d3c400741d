"""Faults in parameter-server training, where they apply in-process (test_ray.py kills processes by their pid):
the launcher restarts a failed worker, which rejoins; worker 0 checkpoints every N steps; a restarted server
restores exactly what the checkpoint holds; a worker waits for a lost server, reports what it lost, fails
clearly when it will not come back; fleet.save_inference_model exports a model that runs without the servers."""

from __future__ import annotations

import json
from collections.abc import Callable
from concurrent.futures import Future
from pathlib import Path
from typing import Any

import numpy as np
import pytest

import blockir as bir
from blockir.distributed import fleet
from blockir.distributed.api import SERVER_METHODS, ServerControl, ServerHandle, ServerLost
from blockir.distributed.communicator import SyncCommunicator
from blockir.distributed.launch import launch
from blockir.distributed.server import ParameterServer
from blockir.errors import BlockirError
from blockir.io.persistence import saved_info
from tests.distributed import scenarios
from tests.distributed.scripts import ps_models
from tests.distributed.test_server import TABLE, _split

pytestmark = pytest.mark.timeout(120)


def test_a_worker_that_fails_is_restarted_and_rejoins_while_worker_0_checkpoints(tmp_path: Path) -> None:
    checkpoints = tmp_path / "checkpoints"
    args = [str(tmp_path), str(scenarios.FAULT_DOCS), str(scenarios.HELDOUT_DOCS), "0", "10"]
    result = launch(
        scenarios.SCRIPTS / "faults.py",
        2,
        2,
        args,
        timeout=60,
        max_restarts=1,
        checkpoint_dir=checkpoints,
        checkpoint_every=scenarios.CHECKPOINT_EVERY,
    )
    assert result.failures == {}
    assert list(result.restarts) == ["worker 1"]
    assert result.restarts["worker 1"] == ["RuntimeError: worker 1 fails at step 10"]
    reports = scenarios.fault_reports(tmp_path)
    assert reports[1]["restarts"] == 1 and reports[1]["steps"] == reports[0]["steps"] == 125  # its share, again
    info = saved_info(checkpoints)  # the last checkpoint: worker 0's step 120, each server's updates then
    assert info["step"] == 120 and len(info["versions"]) == 2 and min(info["versions"]) > 0
    reference = scenarios.single_process_bow_accuracy(scenarios.FAULT_DOCS)
    assert json.loads((tmp_path / "accuracy.json").read_text())["accuracy"] >= reference - 0.02


def test_without_restarts_the_same_failure_ends_the_launch(tmp_path: Path) -> None:
    args = [str(tmp_path), str(scenarios.FAULT_DOCS), str(scenarios.HELDOUT_DOCS), "0", "3"]
    result = launch(scenarios.SCRIPTS / "faults.py", 1, 2, args, timeout=60)
    assert result.failures["worker 1"] == "RuntimeError: worker 1 fails at step 3" and result.restarts == {}


def test_a_restarted_server_restores_exactly_what_the_checkpoint_holds(tmp_path: Path) -> None:
    """Sync training, 2 servers and 2 workers, Adam (state per row and per block), a checkpoint at the last step:
    a server restarted from it holds what the server that ran holds."""
    checkpoints = tmp_path / "checkpoints"
    compared: dict[int, list[str]] = {}

    def script() -> None:
        fleet.init()
        loss = ps_models.build("sparse")
        strategy = fleet.DistributedStrategy()
        strategy.a_sync = False
        strategy.min_block_size = ps_models.MIN_BLOCK
        fleet.distributed_optimizer(ps_models.OPTIMIZERS["adam"](), strategy).minimize(loss)
        if fleet.is_worker():
            exe = bir.Executor("cpu")
            exe.run(fleet.startup_program)
            fleet.init_worker()
            for _ in range(2):
                exe.run(fleet.main_program, feed=ps_models.batch("sparse", fleet.worker_index(), 2))
            fleet.stop_worker()
            return
        fleet.init_server()
        fleet.run_server()
        ran = fleet.server()
        again = ParameterServer(ran.index, ran.split, bir.default_startup_program(), "sync", restart=1)
        life = again.restore(str(checkpoints))
        assert life == {"restart": 1, "checkpoint": str(checkpoints), "step": 2, "version": 2}
        assert again.version() == ran.version() == 2
        names = [n for n, v in ran.program.global_block().vars.items() if v.persistable and ran.scope.find_var(n)]
        for name in names:
            np.testing.assert_array_equal(again.scope.get(name), ran.scope.get(name), err_msg=name)
        for table, shard in ran.shards.items():
            ids, rows = again.table_rows(table)
            order = np.argsort(shard.ids)
            np.testing.assert_array_equal(np.sort(ids), shard.ids[order])
            for state, array in shard.arrays.items():
                np.testing.assert_array_equal(again.shards[table].arrays[state][np.argsort(ids)], array[order])
        compared[ran.index] = names

    result = launch(script, 2, 2, timeout=60, checkpoint_dir=checkpoints, checkpoint_every=2)
    assert result.ok, result.failures
    assert sorted(compared) == [0, 1]
    assert any(".block" in n for names in compared.values() for n in names)  # a cut parameter's state too


class _Flaky(ServerHandle):
    """A handle to ``server`` that is lost for its first ``lost`` requests (then answers as ``life``)."""

    def __init__(self, server: ParameterServer, lost: int, life: dict[str, Any], final: bool = False) -> None:
        self.server, self.lost, self.life, self.final = server, lost, life, final
        self.calls: list[str] = []

    def submit(self, method: Callable[..., Any], *args: Any, **kwargs: Any) -> Future:
        self.calls.append(SERVER_METHODS[method])
        future: Future = Future()
        if self.lost:
            self.lost -= 1
            future.set_exception(ServerLost("the actor died", final=self.final))
        elif method is ServerControl.incarnation:
            future.set_result(self.life)
        else:
            future.set_result(getattr(self.server, SERVER_METHODS[method])(*args, **kwargs))
        return future

    def close(self) -> None:
        pass


def _communicator(lost: int, life: dict[str, Any], final: bool = False, timeout: float = 5.0) -> SyncCommunicator:
    split, startup = _split(1)
    server = ParameterServer(0, split, startup, "sync", timeout=5)
    handle = _Flaky(server, 0, {"restart": 0, "checkpoint": None, "step": None, "version": None}, final)
    mine = SyncCommunicator(split, [handle], 0, timeout=timeout)
    mine.know_servers()
    scope = bir.Scope()
    bir.Executor("cpu").run(startup, scope=scope)
    mine.init_dense({b.param: scope.get(b.param) for b in split.blocks})  # worker 0's init_worker
    handle.lost, handle.life = lost, life
    return mine


def test_a_worker_waits_for_a_lost_server_reports_what_it_lost_and_resumes_sync_steps(
    capsys: pytest.CaptureFixture[str],
) -> None:
    life = {"restart": 1, "checkpoint": "ckpt", "step": 2, "version": 2}
    mine = _communicator(lost=0, life=life)
    ids = np.array([3], np.int64)
    for _ in range(5):  # five sync steps: the server's version 5
        mine.push({}, [(TABLE, ids, np.ones((1, 4), np.float32))], 1)
    handle = mine.handles[0]
    assert isinstance(handle, _Flaky)
    handle.lost = 3  # the next push, then two questions whether it is back, find it gone
    mine.push({}, [(TABLE, ids, np.ones((1, 4), np.float32))], 1)
    assert mine.recoveries == [
        {"server": 0, "restart": 1, "checkpoint": "ckpt", "checkpoint_step": 2, "lost_updates": 3, "worker_step": 5}
    ]
    assert handle.server.version() == 6  # resumed at the workers' step 5, then this push: step 6
    assert handle.calls[-4:] == ["incarnation", "incarnation", "resume", "exchange"]  # a sync push
    err = capsys.readouterr().err
    assert "worker 0: parameter server 0 does not answer (the actor died); waiting up to 5 s" in err
    assert "restarted from the checkpoint of step 2 (ckpt): the updates it applied after it are lost, at least 3" in err


def test_a_lost_server_that_answers_as_the_same_life_lost_nothing() -> None:
    mine = _communicator(lost=1, life={"restart": 0, "checkpoint": None, "step": None, "version": None})
    mine.push({}, [(TABLE, np.array([3], np.int64), np.ones((1, 4), np.float32))], 1)
    assert mine.recoveries == []


@pytest.mark.parametrize(
    ("lost", "final", "life", "message"),
    [
        (5, True, {}, r"parameter server 0 is gone and will not come back \(the actor died\); blockir launch restarts"),
        (10**6, False, {}, r"parameter server 0 did not come back within 0.3 s \(the actor died\)"),
        (1, False, {"restart": 1, "checkpoint": None}, "restarted with no checkpoint to restore"),
    ],
)
def test_a_server_that_does_not_come_back_is_a_clear_error(
    lost: int, final: bool, life: dict[str, Any], message: str
) -> None:
    mine = _communicator(lost, life, final, timeout=0.3)
    with pytest.raises(BlockirError, match=message):
        mine.push({}, [(TABLE, np.array([3], np.int64), np.ones((1, 4), np.float32))], 1)


def test_resume_moves_only_a_sync_server_forward() -> None:
    split, startup = _split(1)
    sync, asynchronous = (ParameterServer(0, split, startup, mode) for mode in ("sync", "async"))
    sync.resume(4)
    asynchronous.resume(4)
    assert (sync.version(), asynchronous.version()) == (4, 0)
    sync.resume(2)  # never backwards
    assert sync.version() == 4


def test_a_checkpoint_of_other_servers_is_refused_naming_it(tmp_path: Path) -> None:
    from blockir.io.persistence import save_sharded

    save_sharded(tmp_path, {}, lambda _: {}, {"step": 3, "versions": [1, 2, 3]})
    split, startup = _split(2)
    with pytest.raises(BlockirError, match=r"not a checkpoint of 2 parameter servers \(its manifest info: "):
        ParameterServer(0, split, startup).restore(str(tmp_path))


def test_fleet_save_inference_model_exports_a_model_that_runs_without_the_servers(tmp_path: Path) -> None:
    """Trained on 2 servers, exported by worker 0: the exported model computes what the training program computes
    with the servers' values (dense pulled, the table made whole from the rows they hold)."""
    exported = tmp_path / "model"
    batch = ps_models.batch("sparse")
    want: dict[str, np.ndarray] = {}

    def script() -> None:
        fleet.init()
        loss = ps_models.build("sparse")
        strategy = fleet.DistributedStrategy()
        strategy.a_sync = False
        fleet.distributed_optimizer(ps_models.OPTIMIZERS["adagrad"](), strategy).minimize(loss)
        exe = scenarios.serve_or_start_worker()
        if exe is None:
            return
        for _ in range(3):
            (loss_now,) = exe.run(fleet.main_program, feed=batch, fetch_list=[loss])
            want.setdefault("first", loss_now)
        fleet.save_inference_model(exe, exported, ["words", "label"], [loss])
        scope = bir.Scope()  # the training program's forward on the servers' values
        for name, value in fleet.communicator().pull_all().items():
            scope.set(name, value)
        table = np.zeros((ps_models.HEIGHT, 8))
        table[np.unique(batch["words"].data)] = fleet.communicator().pull_sparse(TABLE, np.unique(batch["words"].data))
        scope.set(TABLE, table)
        test = bir.default_main_program().clone(for_test=True)
        (want["loss"],) = exe.run(test, feed=batch, fetch_list=[loss.name], scope=scope)
        fleet.stop_worker()

    assert launch(script, 2, 1, timeout=60).ok
    with bir.Executor("cpu") as exe:
        program, feeds, fetches = bir.io.load_inference_model(str(exported), exe)
        assert feeds == ["words", "label"]
        assert {op.type for op in program.global_block().ops}.isdisjoint({"send", "recv", "distributed_lookup_table"})
        (got,) = exe.run(program, feed=batch, fetch_list=fetches)
    np.testing.assert_allclose(got, want["loss"], rtol=1e-12)
    assert got.item() < want["first"].item()  # trained
