"""Parameter-server training through the fleet API and `launch`, in-process backend (test_ray.py runs the same
scenarios against Ray): sync equals one worker on the whole batch, dense and sparse; rows land on their servers
lazily; async reaches the single process's accuracy; a failing worker ends the launch naming it."""

from __future__ import annotations

import json
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest

from blockir.distributed.backend import InProcessBackend
from blockir.distributed.communicator import PULL_EVERY
from blockir.distributed.launch import launch
from tests.distributed import scenarios

pytestmark = pytest.mark.timeout(120)


@pytest.fixture(autouse=True)
def _nothing_left_behind() -> Iterator[None]:
    yield
    names = [
        t.name
        for t in threading.enumerate()
        if t.name.startswith(("blockir-ps-", "blockir-communicator", "blockir-server", "blockir-worker "))
    ]
    assert not names, f"threads left behind: {names}"


@pytest.mark.parametrize(("model", "optimizer"), scenarios.SYNC_CASES)
def test_sync_training_on_two_servers_equals_one_worker_on_the_whole_batch(
    tmp_path: Path, model: str, optimizer: str
) -> None:
    for servers, workers in ((1, 1), (2, 2)):
        run = scenarios.sync_run(tmp_path / f"{servers}x{workers}", "inprocess", servers, workers, model, optimizer)
        assert run["failures"] == {}
    scenarios.check_sync_equal(tmp_path / "1x1", tmp_path / "2x2", 2)
    if model == "dense":
        scenarios.check_matches_plain_training(tmp_path / "1x1", optimizer)
    else:
        scenarios.check_rows_on_their_servers(tmp_path / "2x2", 2)


def test_async_training_reaches_the_single_process_accuracy(tmp_path: Path) -> None:
    assert scenarios.async_run(tmp_path, "inprocess") == {}
    report = scenarios.check_async_accuracy(tmp_path, scenarios.single_process_bow_accuracy())
    assert report["stats"]["requests"] > 0 and report["stats"]["bytes_sent"] > 0


def test_async_training_saved_half_way_and_restarted_from_the_save_reaches_the_same_accuracy(tmp_path: Path) -> None:
    save = tmp_path / "save"
    assert scenarios.async_run(tmp_path / "first", "inprocess", save=save, phase="save") == {}
    assert scenarios.async_run(tmp_path / "second", "inprocess", save=save, phase="load") == {}
    scenarios.check_async_accuracy(tmp_path / "second", scenarios.single_process_bow_accuracy())


@pytest.mark.parametrize("model", ["dense", "sparse"])
def test_geo_with_one_worker_exchanging_every_step_equals_local_training(tmp_path: Path, model: str) -> None:
    assert scenarios.sync_run(tmp_path, "inprocess", 1, 1, model, "adagrad", mode="geo1")["failures"] == {}
    scenarios.check_matches_plain_training(tmp_path, "adagrad", model)


def test_geo_training_reaches_the_single_process_accuracy(tmp_path: Path) -> None:
    assert scenarios.async_run(tmp_path, "inprocess", k_steps=4) == {}
    scenarios.check_async_accuracy(tmp_path, scenarios.single_process_bow_accuracy())


def test_a_failing_worker_ends_the_launch_naming_it() -> None:
    failures = launch(scenarios.SCRIPTS / "failing.py", 2, 2, [], timeout=60).failures
    scenarios.check_failing(failures)


def test_a_script_that_does_not_exist_or_fails_on_import_is_named(tmp_path: Path) -> None:
    from blockir.errors import BlockirError

    with pytest.raises(BlockirError, match=r"the script '.*nope.py' does not exist"):
        launch(tmp_path / "nope.py", 1, 1)
    bad = tmp_path / "bad.py"
    bad.write_text("import no_such_module_here\n")
    failures = launch(bad, 1, 2).failures
    assert set(failures) == {"server 0", "worker 0", "worker 1"}
    assert all("no_such_module_here" in text for text in failures.values())


def test_every_role_reads_the_launchs_arguments_however_late_it_starts(tmp_path: Path) -> None:
    """The roles of an in-process launch share sys.argv: one that ended must not take it from one still starting
    (a server reading the test runner's arguments instead of its script's once hung a launch)."""
    import sys

    script = tmp_path / "late.py"
    script.write_text(
        "import sys, time\n"
        "from blockir.distributed import fleet\n"
        "fleet.init()\n"
        "time.sleep(0.2 if fleet.is_server() else 0.6)  # every role started; the server ends before the workers\n"
        "assert sys.argv[1:] == ['a', 'b'], sys.argv\n"
    )
    argv = list(sys.argv)
    assert launch(script, 1, 2, ["a", "b"], timeout=30).failures == {}
    assert sys.argv == argv  # restored once every role ended


def test_a_server_published_after_its_run_was_stopped_stops_at_once() -> None:
    """A role failed while a server was still starting (loading a save, say): published, it must not wait for
    workers that already ended."""

    class Server:
        stopped = False

        def stop(self) -> None:
            self.stopped = True

    backend, server = InProcessBackend(), Server()
    backend.stop_run("late-run")
    try:
        backend.serve("late-run", 0, server)  # type: ignore[arg-type]  # what serve calls of a server: stop
        assert server.stopped
    finally:
        backend.end_run("late-run")


def test_blockir_launch_prefixes_each_role_and_exits_1_naming_the_failed_role(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    from blockir.cli import main

    out = tmp_path / "ok"
    out.mkdir()
    script = str(scenarios.SCRIPTS / "sync_train.py")
    assert main(["launch", "--servers", "2", "--workers", "2", script, str(out), "dense", "sgd", "2", "sync"]) == 0
    assert sorted(p.name for p in out.iterdir()) == ["server0.npz", "server1.npz", "worker0.npz", "worker1.npz"]
    assert main(["launch", "--servers", "1", "--workers", "2", str(scenarios.SCRIPTS / "failing.py")]) == 1
    err = capsys.readouterr().err
    first = next(line for line in err.splitlines() if line.startswith("blockir launch:"))
    assert first == "blockir launch: worker 1 failed: RuntimeError: worker 1 gives up"  # the cause comes first
    assert "[worker 1] RuntimeError: worker 1 gives up" in err  # its traceback, prefixed with its role


def test_process_workers_inside_a_ps_worker_are_refused(tmp_path: Path) -> None:
    import blockir as bir
    from blockir.errors import BlockirError
    from blockir.passes.distribute import split
    from tests.distributed.scripts import ps_models

    main, startup = bir.Program(), bir.Program()
    with bir.program_guard(main, startup), bir.unique_name.guard():
        ps_models.OPTIMIZERS["sgd"]().minimize(ps_models.build("sparse"))
    worker = split(main, 1, 1).worker
    desc = bir.DataFeedDesc(
        'name: "MultiSlotDataFeed" batch_size: 2 multi_slot_desc { '
        'slots { name: "words" type: "uint64" is_dense: false is_used: true } '
        'slots { name: "label" type: "uint64" is_dense: true is_used: true shape: 1 } }'
    )
    with bir.AsyncExecutor("cpu") as exe, pytest.raises(BlockirError, match="mode='process' cannot run a program"):
        exe.run_from_files(worker, desc, [str(tmp_path / "part-0")], thread_num=2, fetch=[], mode="process")


def test_async_executor_thread_workers_inside_ps_workers_train_from_files(tmp_path: Path) -> None:
    import json

    assert launch(scenarios.SCRIPTS / "files_bow.py", 2, 2, [str(tmp_path), str(tmp_path / "data")], timeout=120).ok
    report = json.loads((tmp_path / "files.json").read_text())
    # Four Hogwild trainers (two workers of two threads) on stale rows and parameters: within two points of the
    # single process on the same files (measured 0.853-0.862 against 0.8645).
    assert report["accuracy"] >= report["reference"] - 0.02, report
    assert report["stats"]["prefetched_rows"] > 0  # rows of coming batches pulled while one ran
    assert report["settings"] == [PULL_EVERY, 8]  # the strategy's settings reach the worker, defaults and given


@pytest.mark.parametrize(("model", "optimizer"), [("sparse", "adam"), ("sparse", "adagrad"), ("dense", "adam")])
@pytest.mark.parametrize("servers_after", [1, 3])
def test_training_n_steps_saving_and_m_more_from_the_save_equals_n_plus_m_straight(
    tmp_path: Path, model: str, optimizer: str, servers_after: int
) -> None:
    """Saved by 2 servers, loaded by 1 or 3 (the rows resharded), the optimizer state of rows and blocks kept."""
    scenarios.check_restart(tmp_path, "inprocess", model, optimizer, servers_after)


def test_a_bad_save_is_refused_naming_what_is_wrong(tmp_path: Path) -> None:
    from blockir.io.persistence import MANIFEST_FILE

    save = tmp_path / "save"
    assert (
        scenarios.sync_run(tmp_path / "a", "inprocess", 2, 1, "sparse", "sgd", save=save, phase="save")["failures"]
        == {}
    )
    shard = next((save).rglob("base-000-of-002.npys"))
    good = shard.read_bytes()

    def load_failure(run: str) -> str:
        return scenarios.sync_run(tmp_path / run, "inprocess", 2, 1, "sparse", "sgd", save=save, phase="load")[
            "failures"
        ]["server 0"]

    data = bytearray(good)
    data[len(data) // 2] ^= 0xFF
    shard.write_bytes(bytes(data))
    failure = load_failure("b")
    assert "checksum mismatch" in failure and "base-000-of-002.npys" in failure
    shard.write_bytes(good[: len(good) - 100])
    failure = load_failure("truncated")
    assert "truncated" in failure and "base-000-of-002.npys" in failure, failure
    shard.write_bytes(good)
    manifest = json.loads((save / MANIFEST_FILE).read_text())
    (save / MANIFEST_FILE).write_text(json.dumps({**manifest, "version": manifest["version"] + 1}))
    failure = load_failure("version")
    assert f"manifest version {manifest['version'] + 1}" in failure and MANIFEST_FILE in failure, failure
    (save / MANIFEST_FILE).unlink()
    failures = scenarios.sync_run(tmp_path / "c", "inprocess", 2, 1, "sparse", "sgd", save=save, phase="load")[
        "failures"
    ]
    assert "is not a save: it has no manifest.json" in failures["server 0"]


def test_init_server_refuses_var_names_that_are_not_sparse_tables(tmp_path: Path) -> None:
    import blockir as bir
    from blockir.distributed import fleet
    from tests.distributed.scripts import ps_models

    def script() -> None:
        fleet.init()
        loss = ps_models.build("sparse")
        fleet.distributed_optimizer(bir.optimizer.SGD(0.1), fleet.DistributedStrategy()).minimize(loss)
        if fleet.is_server():
            fleet.init_server(tmp_path, var_names=["fc_0.w_0"])
        else:
            fleet.init_worker()

    failures = launch(script, 1, 1, timeout=30).failures
    assert "var_names entry 'fc_0.w_0' is not a sparse table of the program" in failures["server 0"]
    assert "will not start: the run was stopped" in failures["worker 0"]  # not a wait of 30 s


def test_blockir_ps_inspects_a_save_and_reshards_it(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    import json

    import numpy as np

    from blockir.cli import main

    save = tmp_path / "save"
    first = scenarios.sync_run(tmp_path / "a", "inprocess", 2, 2, "sparse", "adam", steps=2, save=save, phase="save")
    assert first["failures"] == {}
    assert main(["ps", "inspect", str(save), "--json"]) == 0
    report = json.loads(capsys.readouterr().out)
    table = report["tables"]["embedding_0.w_0"]
    seen = np.load(tmp_path / "a" / "worker0.npz")["seen"]
    assert table["servers"] == 2 and sum(table["rows"]) == len(seen) and table["bytes"] > 0
    assert table["rows"] == [int((seen % 2 == k).sum()) for k in range(2)]
    assert table["states"] == ["embedding_0.w_0_moment1_0", "embedding_0.w_0_moment2_0"]
    assert "fc_0.w_0_moment1_0" in report["dense"] and "learning_rate_0" in report["dense"]
    assert report["info"] == {"step": 2, "versions": [2, 2]}  # worker 0's step 2; two sync steps on each server
    assert main(["ps", "inspect", str(save)]) == 0
    text = capsys.readouterr().out
    assert text.startswith(f"table embedding_0.w_0: float64[40, 8], {len(seen)} rows on 2 servers")
    assert text.endswith("taken at worker 0's step 2; updates each server had applied: 2, 2\n")
    moved = tmp_path / "moved"
    assert main(["ps", "reshard", str(save), str(moved), "--servers", "3"]) == 0
    assert main(["ps", "inspect", str(moved), "--json"]) == 0
    assert json.loads(capsys.readouterr().out.split("\n", 1)[1])["tables"]["embedding_0.w_0"]["servers"] == 3
    # the moved save restarts training as the original does
    for name, where in (("orig", save), ("moved", moved)):
        run = scenarios.sync_run(
            tmp_path / name, "inprocess", 3, 2, "sparse", "adam", steps=2, save=where, phase="load"
        )
        assert run["failures"] == {}
    scenarios.check_sync_equal(tmp_path / "orig", tmp_path / "moved", 2)


def test_a_base_and_delta_save_restarts_training_exactly(tmp_path: Path) -> None:
    """2 steps, a full save, 2 steps, a delta save (the rows those steps changed), 2 more from the save on 3
    servers: equal to 6 steps straight."""

    from blockir.cli import main

    save = tmp_path / "save"
    runs = [
        scenarios.sync_run(tmp_path / "straight", "inprocess", 2, 2, "sparse", "adam", steps=6),
        scenarios.sync_run(tmp_path / "first", "inprocess", 2, 2, "sparse", "adam", steps=2, save=save, phase="delta"),
        scenarios.sync_run(tmp_path / "second", "inprocess", 3, 2, "sparse", "adam", steps=2, save=save, phase="load"),
    ]
    assert [run["failures"] for run in runs] == [{}, {}, {}]
    scenarios.check_sync_equal(tmp_path / "straight", tmp_path / "second", 2)
    assert main(["ps", "inspect", str(save), "--json"]) == 0


def test_fleet_shrink_drops_the_rows_unseen_since_the_last_saves(tmp_path: Path) -> None:
    import numpy as np

    import blockir as bir
    from blockir.distributed import fleet
    from blockir.distributed.saves import inspect, reshard
    from tests.distributed.scripts import ps_models

    dropped: list[dict[str, int]] = []

    def script() -> None:
        fleet.init()
        loss = ps_models.build("sparse")
        fleet.distributed_optimizer(bir.optimizer.SGD(0.1), fleet.DistributedStrategy(a_sync=False)).minimize(loss)
        exe = scenarios.serve_or_start_worker()
        if exe is None:
            return
        exe.run(fleet.main_program, feed=ps_models.batch("sparse"))
        fleet.save_persistables(exe, tmp_path / "save")  # one save interval passes for every row
        dropped.append(fleet.shrink(2))  # none unseen for two intervals yet
        fleet.save_persistables(exe, tmp_path / "save", mode=1)
        dropped.append(fleet.shrink(2))  # every row now: nothing carried them since
        fleet.save_persistables(exe, tmp_path / "save", mode=1)
        fleet.stop_worker()

    assert launch(script, 2, 1, timeout=60).ok
    seen = len(np.unique(ps_models.batch("sparse")["words"].data))
    assert dropped == [{ps_models.TABLE: 0}, {ps_models.TABLE: seen}]
    report = inspect(tmp_path / "save")
    assert [sum(d) for d in report["tables"][ps_models.TABLE]["deltas"]] == [0, 0]  # rows unchanged, then gone
    reshard(tmp_path / "save", tmp_path / "moved", 1)  # the chain applied: the removed rows stay removed
    assert inspect(tmp_path / "moved")["tables"][ps_models.TABLE]["rows"] == [0]


def test_a_call_before_minimize_says_to_call_minimize_first() -> None:
    import blockir as bir
    from blockir.distributed import fleet

    def script() -> None:
        fleet.init()
        if fleet.is_server():
            fleet.init_server()
        else:
            fleet.save_persistables(bir.Executor("cpu"), "unused")

    failures = launch(script, 1, 1, timeout=30).failures
    for role, caller in (("server 0", "init_server"), ("worker 0", "save_persistables")):
        assert f"{caller}: call fleet.distributed_optimizer(...).minimize(loss) first" in failures[role], failures
        assert "AssertionError" not in failures[role]
