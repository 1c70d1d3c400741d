"""Parameter-server scenarios run against a backend, and the checks of their results.

The same scenarios run in this process against the in-process backend (test_fleet.py) and, inside a
loopback-only network namespace, against the Ray backend (ray_driver.py, run by test_ray.py); the same checks
judge both.
"""

from __future__ import annotations

import json
import os
import signal
import threading
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from functools import partial
from pathlib import Path
from typing import Any

import numpy as np

import blockir as bir
from blockir.distributed import fleet
from blockir.distributed.launch import launch
from blockir.io.persistence import MANIFEST_FILE, saved_info
from tests.distributed.scripts import ps_models

SCRIPTS = Path(__file__).parent / "scripts"
ASYNC_EPOCHS, ASYNC_DOCS, HELDOUT_DOCS = 1, 16000, 4000  # enough to come near the corpus's best accuracy


def sync_dense_role() -> Any:
    """A test script's role on the dense model in sync mode (SGD 0.1): ``fleet.init`` and ``minimize`` done; the
    loss."""
    fleet.init()
    loss = ps_models.build("dense")
    strategy = fleet.DistributedStrategy()
    strategy.a_sync = False
    fleet.distributed_optimizer(bir.optimizer.SGD(0.1), strategy).minimize(loss)
    return loss


def serve_or_start_worker() -> bir.Executor | None:
    """A fleet role's start in a test script: a server serves until the workers stop (None); a worker runs the
    startup program and ``init_worker`` (its executor)."""
    if fleet.is_server():
        fleet.init_server()
        fleet.run_server()
        return None
    exe = bir.Executor("cpu")
    exe.run(fleet.startup_program)
    fleet.init_worker()
    return exe


def sync_run(
    out: Path,
    backend: str,
    servers: int,
    workers: int,
    model: str,
    optimizer: str,
    entry: str = "",
    mode: str = "sync",
    steps: int = 3,
    save: Path | None = None,
    phase: str = "",
) -> dict:
    """Train ``model`` ``steps`` steps (in sync mode, or ``mode``; with ``save``, saving there at the end or
    starting from it: ``phase`` ``save`` or ``load``); the launch's failures."""
    out.mkdir(parents=True, exist_ok=True)
    args = [str(out), model, optimizer, str(steps), mode, entry]
    if save is not None:
        args += [str(save), phase]
    result = launch(SCRIPTS / "sync_train.py", servers, workers, args, backend=backend, timeout=120)
    return {"failures": result.failures}


def sync_failures(
    out: Path, backend: str, servers: int, workers: int, model: str, optimizer: str, mode: str = "sync"
) -> dict:
    """The failures of :func:`sync_run` with its default steps."""
    return sync_run(out, backend, servers, workers, model, optimizer, mode=mode)["failures"]


SYNC_CASES = [(model, optimizer) for model in ("dense", "sparse") for optimizer in ("sgd", "adam", "adagrad")]


def _restart(root: Path, backend: str, model: str, optimizer: str) -> dict[str, Any]:
    """check_restart's verdict as a launch's failures: none, or what the check found."""
    try:
        check_restart(root, backend, model, optimizer, 3)
        return {}
    except AssertionError as e:  # judged in the test process
        return {"check": str(e)[:2000]}


def all_scenarios(root: Path, backend: str) -> dict[str, Callable[[], Any]]:
    """Every scenario, by name, results under ``root``: each runs its launches and gives their failures. The
    longest come first (:func:`run_all` starts them in this order)."""
    found: dict[str, Callable[[], Any]] = {}
    for model, optimizer in (("sparse", "adam"), ("dense", "adam")):
        found[f"restart-{model}"] = partial(_restart, root / f"restart-{model}", backend, model, optimizer)
    if backend == "ray":  # a role's process killed by its pid
        for name, kill in FAULTS.items():
            found[name] = partial(fault_run, root / name, backend, kill, final=name == "fault-server-final")
    found["async-bow"] = partial(async_run, root / "async-bow", backend)
    found["geo-bow"] = partial(async_run, root / "geo-bow", backend, k_steps=4)
    found["failing"] = lambda: launch(SCRIPTS / "failing.py", 2, 2, [], backend=backend, timeout=60).failures
    for model, optimizer in SYNC_CASES:
        for servers, workers in ((2, 2), (1, 1)):
            name = f"sync-{model}-{optimizer}-{servers}x{workers}"
            found[name] = partial(sync_failures, root / name, backend, servers, workers, model, optimizer)
    for model in ("dense", "sparse"):
        found[f"geo-{model}"] = partial(sync_failures, root / f"geo-{model}", backend, 1, 1, model, "adagrad", "geo1")
    return found


def run_all(
    scenarios: dict[str, Callable[[], Any]], parallel: int = 1, seconds: dict[str, float] | None = None
) -> dict[str, Any]:
    """Run ``scenarios`` (:func:`all_scenarios`), up to ``parallel`` at once; what each gave, by name. With
    ``seconds``, how long each took goes there."""

    def timed(name: str) -> Any:
        start = time.monotonic()
        try:
            return scenarios[name]()
        finally:
            if seconds is not None:
                seconds[name] = round(time.monotonic() - start, 1)

    with ThreadPoolExecutor(parallel) as pool:
        return dict(zip(scenarios, pool.map(timed, scenarios)))


FAULT_DOCS, FAULT_STEP_S, CHECKPOINT_EVERY = 8000, 0.02, 20  # 125 steps a worker; a checkpoint every 20 of them


def worker_past(step: int) -> Callable[[Path], bool]:
    """Kill when worker 1 made ``step`` steps."""
    return lambda out: _number(out / "worker1.step") >= step


def checkpoint_past(step: int, worker_step: int) -> Callable[[Path], bool]:
    """Kill when worker 0 checkpointed at ``step`` or later and went on to ``worker_step``: updates are lost."""

    def ready(out: Path) -> bool:
        where = out / "checkpoints"
        if not (where / MANIFEST_FILE).is_file() or saved_info(where).get("step", 0) < step:
            return False
        return _number(out / "worker0.step") >= worker_step

    return ready


# scenario -> (the role whose process is killed, when)
FAULTS: dict[str, tuple[str, Callable[[Path], bool]]] = {
    "fault-worker": ("worker1", worker_past(30)),
    "fault-server": ("server1", checkpoint_past(CHECKPOINT_EVERY, 50)),
    "fault-server-final": ("server1", worker_past(10)),
}


def _number(path: Path) -> int:
    try:
        return int(path.read_text())
    except (FileNotFoundError, ValueError):
        return 0


def fault_run(
    out: Path, backend: str, kill: tuple[str, Callable[[Path], bool]], final: bool = False, raise_at: int = -1
) -> dict[str, Any]:
    """Train faults.py on 2 servers and 2 workers, async, while the process of role ``kill[0]`` is killed (SIGKILL,
    by its pid) once ``kill[1]`` holds: restarts allowed and a checkpoint every CHECKPOINT_EVERY steps, or, with
    ``final``, neither. The launch's failures and restarts, how long it took, and whether the kill happened.
    The killer waits for that state however long the run takes to reach it (a loaded machine is slow), not for
    a time: it gives up only when the launch ended."""
    out.mkdir(parents=True, exist_ok=True)
    role, ready = kill
    killed: dict[str, Any] = {}

    def killer() -> None:
        while not killed.get("stop"):
            pid = _number(out / f"{role}.pid.0")
            if pid and ready(out):
                os.kill(pid, signal.SIGKILL)
                killed.update(pid=pid, at=time.monotonic())
                return
            time.sleep(0.02)

    thread = threading.Thread(target=killer, daemon=True)
    thread.start()
    start = time.monotonic()
    args = [str(out), str(FAULT_DOCS), str(HELDOUT_DOCS), str(FAULT_STEP_S), str(raise_at)]
    result = launch(
        SCRIPTS / "faults.py",
        2,
        2,
        args,
        backend=backend,
        timeout=60,
        max_restarts=0 if final else 1,
        checkpoint_dir=None if final else out / "checkpoints",
        checkpoint_every=0 if final else CHECKPOINT_EVERY,
    )
    took = time.monotonic() - start
    killed["stop"] = True
    thread.join()
    return {
        "failures": result.failures,
        "restarts": result.restarts,
        "seconds": took,
        "killed": "pid" in killed,
        "after_kill_s": took - (killed["at"] - start) if "at" in killed else None,
    }


def async_run(out: Path, backend: str, k_steps: int = 0, save: Path | None = None, phase: str = "") -> dict:
    """Train the bag-of-words model on 2 servers and 2 workers, async (Downpour) or, with ``k_steps``, GEO; with
    ``save``, the first half of the batches then saved there (``phase`` ``save``), or the second half from it
    (``load``)."""
    out.mkdir(parents=True, exist_ok=True)
    args = [str(out), str(ASYNC_EPOCHS), str(ASYNC_DOCS), str(HELDOUT_DOCS), str(k_steps)]
    if save is not None:
        args += [str(save), phase]
    return launch(SCRIPTS / "async_bow.py", 2, 2, args, backend=backend, timeout=300).failures


# -- checks ------------------------------------------------------------------------------------------------


def check_sync_equal(one: Path, many: Path, workers: int) -> None:
    """N workers on N servers computed what one worker on one server computed on the whole batch."""
    want = np.load(one / "worker0.npz")
    for k in range(workers):
        got = np.load(many / f"worker{k}.npz")
        for name in want.files:
            if name in ("losses", "seen", "table") and k:
                continue
            if name == "losses":
                continue  # per worker: its share's loss
            np.testing.assert_allclose(got[name], want[name], rtol=1e-10, atol=1e-12, err_msg=f"{many}: {name}")


def check_matches_plain_training(out: Path, optimizer: str, model: str = "dense") -> None:
    """What the servers hold equals plain Executor training on the whole batch (a dense program in sync mode;
    any program in GEO mode with one worker exchanging every step)."""
    main, startup = bir.Program(), bir.Program()
    with bir.program_guard(main, startup), bir.unique_name.guard():
        loss = ps_models.build(model)
        ps_models.OPTIMIZERS[optimizer]().minimize(loss)
    scope = bir.Scope()
    with bir.Executor("cpu") as exe:
        exe.run(startup, scope=scope)
        for _ in range(3):
            exe.run(main, feed=ps_models.batch(model), scope=scope)
    got = np.load(out / "worker0.npz")
    for param in main.all_parameters():
        if param.name != ps_models.TABLE:
            np.testing.assert_allclose(got[param.name], scope.get(param.name), rtol=1e-10, atol=1e-12)
    if model == "sparse":  # the table's rows as the servers hold them
        want = np.asarray(scope.get(ps_models.TABLE))[got["seen"]]
        np.testing.assert_allclose(got["table"], want, rtol=1e-10, atol=1e-12)


def check_restart(root: Path, backend: str, model: str, optimizer: str, servers_after: int) -> None:
    """2 steps on 2 servers and 2 workers, saved; 2 more from the save on ``servers_after`` servers: equal to 4
    steps straight."""
    save = root / "save"
    runs = [
        sync_run(root / "straight", backend, 2, 2, model, optimizer, steps=4),
        sync_run(root / "first", backend, 2, 2, model, optimizer, steps=2, save=save, phase="save"),
        sync_run(root / "second", backend, servers_after, 2, model, optimizer, steps=2, save=save, phase="load"),
    ]
    assert [run["failures"] for run in runs] == [{}, {}, {}]
    check_sync_equal(root / "straight", root / "second", 2)


def check_rows_on_their_servers(out: Path, servers: int) -> None:
    """Each server holds the rows of its ids (id % servers), made for the ids the batch had and no others."""
    seen = set(np.load(out / "worker0.npz")["seen"].tolist())
    held: set[int] = set()
    for k in range(servers):
        ids = np.load(out / f"server{k}.npz")[ps_models.TABLE]
        assert (ids % servers == k).all(), f"server {k} holds {ids}"
        held |= set(ids.tolist())
    assert held == seen


def single_process_bow_accuracy(docs: int = ASYNC_DOCS) -> float:
    """The async script's model trained by one process on all the data, as accurate as it gets there."""
    bow = ps_models.bow_classifier()
    main, startup = bir.Program(), bir.Program()
    with bir.program_guard(main, startup), bir.unique_name.guard():
        cost, accuracy = ps_models.bow(bow.VOCAB)
        test = main.clone(for_test=True)
        bir.optimizer.Adagrad(0.05).minimize(cost)
    scope = bir.Scope()
    with bir.Executor("cpu") as exe:
        exe.run(startup, scope=scope)
        words_, labels, _ = bow.make_corpus(docs, seed=0)
        for epoch in range(ASYNC_EPOCHS):
            for w, y in bow.batches(words_, labels, 32, np.random.default_rng(epoch)):
                exe.run(main, feed={"words": w, "label": y}, scope=scope)
        test_words, test_labels, _ = bow.make_corpus(HELDOUT_DOCS, seed=99)
        (acc,) = exe.run(test, feed={"words": test_words, "label": test_labels}, fetch_list=[accuracy], scope=scope)
    return float(acc[0])


def check_async_accuracy(out: Path, reference: float) -> dict:
    """Async training with 2 workers and 2 servers reaches the single process's accuracy, to within a point."""
    report = json.loads((out / "accuracy.json").read_text())
    assert report["accuracy"] >= reference - 0.01, (report["accuracy"], reference)  # reaches it (or beats it)
    return report


def fault_reports(out: Path) -> dict[str, Any]:
    """What each worker of a faults.py run wrote at its end."""
    return {k: json.loads((out / f"worker{k}.json").read_text()) for k in range(2)}


def check_worker_killed(out: Path, run: dict[str, Any], reference: float) -> None:
    """Worker 1, killed mid-epoch, was restarted once and trained its share again; the others went on; the
    model is as accurate as the single process's, to within two points."""
    assert run["killed"], run
    assert run["failures"] == {}, run
    assert list(run["restarts"]) == ["worker 1"] and len(run["restarts"]["worker 1"]) == 1, run
    reports = fault_reports(out)
    assert reports[1]["restarts"] == 1 and reports[0]["restarts"] == 0
    assert reports[0]["recoveries"] == reports[1]["recoveries"] == []  # no server lost anything
    pids = [(out / f"worker1.pid.{restart}").read_text() for restart in (0, 1)]
    assert pids[0] != pids[1]  # another process
    assert json.loads((out / "accuracy.json").read_text())["accuracy"] >= reference - 0.02


def check_server_killed(out: Path, run: dict[str, Any], reference: float) -> None:
    """Server 1, killed after a checkpoint, came back from it; the workers waited, said what it lost (the
    updates after that checkpoint) and went on; the model still learns."""
    assert run["killed"], run
    assert run["failures"] == {}, run
    assert list(run["restarts"]) == ["server 1"], run
    for k, report in fault_reports(out).items():
        assert report["restarts"] == 0
        recovery = report["recoveries"]
        assert len(recovery) == 1 and recovery[0]["server"] == 1 and recovery[0]["restart"] == 1, (k, recovery)
        step = recovery[0]["checkpoint_step"]
        assert step >= CHECKPOINT_EVERY and step % CHECKPOINT_EVERY == 0, recovery
        assert recovery[0]["lost_updates"] >= 1, recovery
    assert json.loads((out / "accuracy.json").read_text())["accuracy"] >= reference - 0.05


def check_server_killed_for_good(run: dict[str, Any]) -> None:
    """Server 1, killed with no restarts allowed: the launch failed naming it, the workers with a message naming
    it, soon (no hang)."""
    assert run["killed"], run
    assert run["restarts"] == {}
    assert "server 1" in run["failures"], run
    workers = [text for role, text in run["failures"].items() if role.startswith("worker")]
    assert workers and all("parameter server 1" in text or "stopped" in text for text in workers), run
    assert run["after_kill_s"] < 30, run


def check_failing(failures: dict) -> None:
    """Worker 1 failed, named with its error; the launch ended (nobody waits for ever on it)."""
    assert "worker 1" in failures and "worker 1 gives up" in failures["worker 1"], failures
