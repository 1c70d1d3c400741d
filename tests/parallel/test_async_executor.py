"""AsyncExecutor: Hogwild training from MultiSlot files, against a plain Executor loop over the same batches."""

from __future__ import annotations

import multiprocessing
import os
import signal
import subprocess
import sys
import threading
from collections.abc import Callable
from multiprocessing import resource_tracker
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from threadpoolctl import ThreadpoolController, threadpool_limits

import blockir as bir
from blockir.cli import main as cli_main
from blockir.cli.train import Progress
from blockir.datafeed.multislot import MultiSlotReader, write_multislot
from blockir.errors import BlockirError
from blockir.parallel.async_executor import MODES, _blas_share
from blockir.runtime import executor as executor_module

VOCAB = 200
PROTOTXT = """\
batch_size: 16
thread_num: 2
multi_slot_desc {
    slots { name: "words" type: "uint64" is_used: true }
    slots { name: "label" type: "uint64" is_dense: true is_used: true shape: 1 }
    slots { name: "weight" type: "float" is_used: false }
}
"""


def corpus(n: int, seed: int) -> list[dict[str, Any]]:
    """Documents of 3..12 word ids; words 1..10 are positive, 11..20 negative; the label is the sign."""
    rng = np.random.default_rng(seed)
    docs = []
    while len(docs) < n:
        words = rng.integers(21, VOCAB, size=int(rng.integers(3, 13)))
        planted = rng.integers(1, 21, size=int(rng.integers(1, 4)))
        signal = int((planted <= 10).sum() - (planted > 10).sum())
        if signal:
            docs.append(
                {"words": rng.permutation(np.concatenate([words, planted])), "label": int(signal > 0), "weight": 1.0}
            )
    return docs


def write_parts(directory: Path, desc: bir.DataFeedDesc, parts: int, docs: int, seed: int = 0) -> list[str]:
    paths = []
    for i in range(parts):
        path = directory / f"part-{i}"
        write_multislot(path, corpus(docs, seed + i), desc)
        paths.append(str(path))
    return paths


def bow(seed: int = 1, lr: float = 0.1) -> tuple[bir.Program, bir.Program, bir.Program, Any, Any, Any]:
    main, startup = bir.Program(), bir.Program()
    main.random_seed = startup.random_seed = seed
    with bir.program_guard(main, startup):
        words = bir.data("words", shape=[-1, 1], dtype="int64", lod_level=1)
        label = bir.data("label", shape=[-1, 1], dtype="int64")
        emb = bir.layers.embedding(words, size=[VOCAB, 8], is_sparse=True)
        pred = bir.layers.fc(bir.layers.sequence_pool(emb, pool_type="sum"), size=2, act="softmax")
        loss = bir.layers.mean(bir.layers.cross_entropy(pred, label))
        acc = bir.layers.accuracy(pred, label)
        test = main.clone()
        bir.optimizer.Adagrad(learning_rate=lr).minimize(loss)
    return main, startup, test, pred, loss, acc


@pytest.fixture
def desc() -> bir.DataFeedDesc:
    return bir.DataFeedDesc(PROTOTXT)


@pytest.fixture
def shm_here(monkeypatch: pytest.MonkeyPatch) -> Callable[[], set[str]]:
    """The files of /dev/shm this process made during the test (shared memory blocks, named semaphores: what it
    registers with multiprocessing's resource tracker) that are still there. Only these: another process on the
    machine may make and remove its own there at any time."""
    made: set[str] = set()
    register = resource_tracker.register

    def noting(name: str, rtype: str) -> None:
        if rtype == "shared_memory":
            made.add(name.lstrip("/"))
        elif rtype == "semaphore":
            made.add("sem." + name.lstrip("/"))
        register(name, rtype)

    monkeypatch.setattr(resource_tracker, "register", noting)
    return lambda: {name for name in made if os.path.exists(f"/dev/shm/{name}")}


def started(startup: bir.Program) -> bir.Scope:
    scope = bir.Scope()
    bir.Executor("cpu").run(startup, scope=scope)
    return scope


def params(main: bir.Program, scope: bir.Scope) -> dict[str, np.ndarray]:
    return {v.name: np.array(scope.get(v.name)) for v in main.list_vars() if v.persistable}


@pytest.mark.parametrize("mode", MODES)
def test_one_worker_equals_a_plain_executor_loop(tmp_path: Path, desc: bir.DataFeedDesc, mode: str) -> None:
    files = write_parts(tmp_path, desc, parts=2, docs=50)
    main, startup, _, _, loss, acc = bow()
    scope_async, scope_plain = started(startup), started(startup)
    fetched = bir.AsyncExecutor("cpu").run_from_files(main, desc, files, 1, [loss, acc], mode=mode, scope=scope_async)

    exe, firsts = bir.Executor("cpu"), []
    for batch in MultiSlotReader(desc, files):  # batches run on across a worker's files: 100 docs, 7 batches
        firsts.append([float(v.flat[0]) for v in exe.run(main, batch, [loss, acc], scope=scope_plain)])
    assert len(firsts) == 7
    assert fetched == [float(x) for x in np.mean(firsts, axis=0)]
    expected = params(main, scope_plain)
    assert expected and all(np.array_equal(expected[n], v) for n, v in params(main, scope_async).items())


def accuracy(test: bir.Program, pred: Any, scope: bir.Scope, docs: list[dict[str, Any]]) -> float:
    words = bir.LoDTensor.from_lengths(
        np.concatenate([d["words"] for d in docs]).reshape(-1, 1).astype(np.int64), [len(d["words"]) for d in docs]
    )
    labels = np.array([[d["label"]] for d in docs], dtype=np.int64)
    (probs,) = bir.Executor("cpu").run(test, {"words": words, "label": labels}, [pred], scope=scope)
    return float((probs.argmax(axis=1) == labels[:, 0]).mean())


@pytest.mark.parametrize("mode, workers", [("thread", 2), ("thread", 4), ("process", 2)])
def test_workers_train_a_bag_of_words_model(tmp_path: Path, desc: bir.DataFeedDesc, mode: str, workers: int) -> None:
    files = write_parts(tmp_path, desc, parts=4, docs=150)
    main, startup, test, pred, loss, acc = bow()
    scope = started(startup)
    held_out = corpus(300, seed=99)
    before = accuracy(test, pred, scope, held_out)
    shared = {n: scope.get(n) for n in params(main, scope)}
    async_exe = bir.AsyncExecutor()
    for _ in range(3):
        cost, train_acc = async_exe.run_from_files(main, desc, files, workers, [loss, acc], mode=mode, scope=scope)
    stats = async_exe.last_stats
    assert len(stats.workers) == workers and stats.instances == 600
    assert sorted(f for w in stats.workers for f in w.files) == files
    assert accuracy(test, pred, scope, held_out) > 0.9 > before
    assert train_acc > 0.85 and cost < 0.5
    assert all(scope.get(n) is array for n, array in shared.items())  # one copy, updated in place


def test_scope_defaults_to_the_global_scope(tmp_path: Path, desc: bir.DataFeedDesc) -> None:
    files = write_parts(tmp_path, desc, parts=1, docs=20)
    main, startup, _, _, loss, _ = bow()
    with bir.scope_guard(started(startup)) as scope:
        w = next(v.name for v in main.list_vars() if v.is_parameter)
        first = np.array(scope.get(w))
        bir.AsyncExecutor().run_from_files(main, desc, files, 1, [loss])
        assert not np.array_equal(first, scope.get(w))


def test_thread_num_is_capped_at_the_files_and_defaults_to_the_desc(tmp_path: Path, desc: bir.DataFeedDesc) -> None:
    files = write_parts(tmp_path, desc, parts=3, docs=10)
    main, startup, _, _, loss, _ = bow()
    scope = started(startup)
    async_exe = bir.AsyncExecutor()
    async_exe.run_from_files(main, desc, files, 8, [loss], scope=scope)
    assert len(async_exe.last_stats.workers) == 3
    async_exe.run_from_files(main, desc, files, None, [loss], scope=scope)
    assert len(async_exe.last_stats.workers) == desc.thread_num == 2
    async_exe.run_from_files(main, desc, files[:1], 0, [loss], scope=scope)
    assert len(async_exe.last_stats.workers) == 1


def test_stats_count_instances_and_skipped_lines(tmp_path: Path, desc: bir.DataFeedDesc) -> None:
    files = write_parts(tmp_path, desc, parts=2, docs=30)
    with open(files[1], "a") as f:
        f.write("2 5 6 1 1 1 0.5 extra\n3 1 2\n")  # a trailing token; a line ending early
    main, startup, _, _, loss, _ = bow()
    scope = started(startup)
    async_exe = bir.AsyncExecutor()
    async_exe.run_from_files(main, desc, files, 2, [loss], skip_bad_lines=True, scope=scope)
    stats = async_exe.last_stats
    assert (stats.instances, stats.skipped_lines) == (60, 2)
    assert sum(w.instances for w in stats.workers) == 60 and sum(w.skipped_lines for w in stats.workers) == 2
    assert sum(w.batches for w in stats.workers) == 4  # 30 = 16 + 14 per file
    assert stats.seconds > 0 and all(w.seconds > 0 for w in stats.workers)


def test_fetches_are_per_worker_batch_means_averaged_over_workers(tmp_path: Path) -> None:
    desc = bir.DataFeedDesc(
        'batch_size: 4\nmulti_slot_desc { slots { name: "x" type: "float" is_dense: true is_used: true shape: 1 } }'
    )
    values = {f"f{i}": np.arange(10 * i, 10 * i + 6 + 3 * i, dtype=np.float32) for i in range(3)}
    for name, xs in values.items():
        write_multislot(tmp_path / name, [{"x": float(x)} for x in xs], desc)
    main = bir.Program()
    with bir.program_guard(main, bir.Program()):
        x = bir.data("x", shape=[-1, 1], dtype="float32")
        m = bir.layers.mean(x)
    async_exe = bir.AsyncExecutor()
    files = [str(tmp_path / n) for n in values]
    (fetched,) = async_exe.run_from_files(main, desc, files, 2, [m], scope=bir.Scope())
    per_worker = []
    for w in async_exe.last_stats.workers:
        xs = np.concatenate([values[Path(n).name] for n in w.files]) if w.files else []
        means = [xs[i : i + 4].mean() for i in range(0, len(xs), 4)]  # batches run on across a worker's files
        if means:
            per_worker.append(np.mean(means))
    assert fetched == pytest.approx(np.mean(per_worker), rel=1e-6)


def test_debug_prints_each_workers_progress(
    tmp_path: Path, desc: bir.DataFeedDesc, capsys: pytest.CaptureFixture[str]
) -> None:
    files = write_parts(tmp_path, desc, parts=2, docs=20)
    main, startup, _, _, loss, _ = bow()
    bir.AsyncExecutor().run_from_files(main, desc, files, 2, [loss], debug=True, scope=started(startup))
    out = capsys.readouterr().out
    assert all(f": {f}: 20 instances" in out for f in files) and "async worker" in out and loss.name in out


def test_bad_arguments_are_clear_errors(tmp_path: Path, desc: bir.DataFeedDesc) -> None:
    files = write_parts(tmp_path, desc, parts=1, docs=5)
    main, startup, _, pred, loss, _ = bow()
    scope = started(startup)
    run = bir.AsyncExecutor().run_from_files
    with pytest.raises(BlockirError, match="filelist is empty"):
        run(main, desc, [], 2, [loss], scope=scope)
    with pytest.raises(BlockirError, match="last dimension .* must be 1.*declared \\[-1, 2\\]"):
        run(main, desc, files, 1, [pred], scope=scope)
    with pytest.raises(BlockirError, match="mode must be one of"):
        run(main, desc, files, 1, [loss], mode="fiber", scope=scope)
    with pytest.raises(BlockirError, match="thread_num must be"):
        run(main, desc, files, -1, [loss], scope=scope)
    with pytest.raises(BlockirError, match="fetch 'nope' is not a variable"):
        run(main, desc, files, 1, ["nope"], scope=scope)
    desc.set_use_slots(["words", "label", "weight"])
    with pytest.raises(BlockirError, match="used slot\\(s\\) 'weight' .* name no variable"):
        run(main, desc, files, 1, [loss], scope=scope)
    desc.set_use_slots(["words"])
    with pytest.raises(BlockirError, match="data variable\\(s\\) 'label' .* fed by no used slot"):
        run(main, desc, files, 1, [loss], scope=scope)


def test_a_sparse_slot_feeds_a_variable_without_lod_one_id_per_instance(tmp_path: Path) -> None:
    desc = bir.DataFeedDesc(PROTOTXT.replace("is_dense: true ", ""))  # label as Paddle's IMDB example has it
    files = write_parts(tmp_path, desc, parts=1, docs=20)
    main, startup, _, _, loss, _ = bow()
    assert np.isfinite(bir.AsyncExecutor().run_from_files(main, desc, files, 1, [loss], scope=started(startup))[0])
    write_multislot(tmp_path / "two", [{"words": [1, 2], "label": [0, 1], "weight": 1.0}], desc)
    with pytest.raises(BlockirError, match="slot 'label' feeds a variable without LoD.*exactly one value"):
        bir.AsyncExecutor().run_from_files(main, desc, [tmp_path / "two"], 1, [loss], scope=started(startup))


def test_a_failing_worker_stops_all_and_its_error_names_worker_file_and_line(
    tmp_path: Path, desc: bir.DataFeedDesc
) -> None:
    bad, good = tmp_path / "bad", tmp_path / "good"
    bad.write_text("2 5 x 1 1 1 0.5\n")
    write_multislot(good, corpus(4000, seed=0), desc)  # 250 batches: far more than run before the stop
    main, startup, _, _, loss, _ = bow()
    baseline = threading.active_count()
    async_exe = bir.AsyncExecutor()
    with pytest.raises(
        BlockirError, match=f"async worker \\d failed on file {bad}: {bad}:1: value 'x' of slot 'words'"
    ) as info:
        async_exe.run_from_files(main, desc, [bad, good], 2, [loss], scope=started(startup))
    assert isinstance(info.value.__cause__, BlockirError)
    assert threading.active_count() == baseline
    assert async_exe.last_stats.instances < 2000  # the other worker stopped early


def test_a_failing_batch_names_the_files_it_came_from(tmp_path: Path, desc: bir.DataFeedDesc) -> None:
    good, bad = tmp_path / "good", tmp_path / "bad"
    write_multislot(good, corpus(3, seed=0), desc)
    write_multislot(bad, [{"words": [1, VOCAB + 5], "label": 1, "weight": 1.0}], desc)
    main, startup, _, _, loss, _ = bow()
    with pytest.raises(BlockirError, match=f"async worker 0 failed on file {good}, {bad}: .*out of range"):
        bir.AsyncExecutor().run_from_files(main, desc, [good, bad], 1, [loss], scope=started(startup))


def test_a_failing_process_stops_the_others_and_leaves_nothing_behind(
    tmp_path: Path, desc: bir.DataFeedDesc, shm_here: Callable[[], set[str]]
) -> None:
    bad, good = tmp_path / "bad", tmp_path / "good"
    write_multislot(bad, [{"words": [1, VOCAB + 5], "label": 1, "weight": 1.0}], desc)
    write_multislot(good, corpus(4000, seed=0), desc)
    main, startup, _, _, loss, _ = bow()
    scope = started(startup)
    before = params(main, scope)
    with pytest.raises(
        BlockirError, match=f"(?s)async worker \\d failed on file {bad}(, {good})?: .*out of range.*lookup_table"
    ):
        bir.AsyncExecutor().run_from_files(main, desc, [bad, good], 2, [loss], mode="process", scope=scope)
    assert multiprocessing.active_children() == []
    assert shm_here() == set()  # the shared memory is freed
    after = params(main, scope)  # the scope holds its own arrays again, with what the good worker learnt
    assert all(isinstance(scope.get(n), np.ndarray) and scope.get(n).base is None for n in after)
    assert after.keys() == before.keys()


def kill_worker_0(*_: Any) -> None:
    for child in multiprocessing.active_children():
        if child.name == "blockir-async-0":
            os.kill(child.pid, signal.SIGKILL)


def interrupt(*_: Any) -> None:  # in process mode, progress is called in the calling thread
    raise KeyboardInterrupt


@pytest.mark.parametrize("keep_workers", [False, True])
@pytest.mark.parametrize(
    "progress, raised, match",
    [
        (kill_worker_0, BlockirError, "^async worker 0 exited with status -9 and no report$"),
        (interrupt, KeyboardInterrupt, None),
    ],
    ids=["worker-killed", "interrupted"],
)
def test_a_run_whose_worker_dies_or_that_is_interrupted_ends_its_workers(
    tmp_path: Path,
    desc: bir.DataFeedDesc,
    keep_workers: bool,
    progress: Any,
    raised: type[BaseException],
    match: str | None,
    shm_here: Callable[[], set[str]],
) -> None:
    files = write_parts(tmp_path, desc, parts=8, docs=3000)  # work left for worker 0 when it is killed
    main, startup, _, _, loss, _ = bow()
    scope = started(startup)
    with bir.AsyncExecutor(keep_workers=keep_workers) as async_exe:
        with pytest.raises(raised, match=match):
            async_exe.run_from_files(main, desc, files, 2, [loss], mode="process", scope=scope, progress=progress)
        assert multiprocessing.active_children() == []  # the other worker stopped, and ended too
        assert shm_here() == set()
        assert all(scope.get(n).base is None for n in params(main, scope))  # the scope's own arrays again
        async_exe.run_from_files(main, desc, files[:1], 2, [loss], mode="process", scope=scope)  # new workers
        assert async_exe.last_stats.instances == 3000


def test_kept_worker_processes_serve_later_runs_until_closed(tmp_path: Path, desc: bir.DataFeedDesc) -> None:
    files = write_parts(tmp_path, desc, parts=3, docs=100)
    main, startup, test, _, loss, acc = bow()
    scope = started(startup)
    async_exe = bir.AsyncExecutor(keep_workers=True)
    assert repr(async_exe) == "AsyncExecutor('cpu', keep_workers=True)"
    pids = []
    for workers, program in [(2, main), (2, main), (3, main), (1, test), (3, main)]:
        (cost,) = async_exe.run_from_files(program, desc, files, workers, [loss], mode="process", scope=scope)
        assert np.isfinite(cost) and async_exe.last_stats.instances == 300
        pids.append(sorted(p.pid for p in multiprocessing.active_children()))
    assert len(pids[0]) == 2 and pids[1] == pids[0] and len(pids[2]) == 3 and set(pids[0]) < set(pids[2])
    assert pids[4] == pids[3] == pids[2]  # the same processes, whichever program and worker count
    reference = started(startup)  # kept workers train as fresh ones do: one worker, same batches, same result
    for exe in (async_exe, bir.AsyncExecutor()):
        exe.run_from_files(main, desc, files, 1, [loss], mode="process", scope=reference)
    async_exe.close()
    assert multiprocessing.active_children() == []
    again = bir.AsyncExecutor(keep_workers=True)
    again.run_from_files(main, desc, files, 2, [loss], mode="process", scope=started(startup))
    assert len(multiprocessing.active_children()) == 2
    del again  # garbage-collected: its workers end
    assert multiprocessing.active_children() == []

    bad = tmp_path / "bad"
    bad.write_text("2 5 x 1 1 1 0.5\n")
    with bir.AsyncExecutor(keep_workers=True) as failing:
        failing.run_from_files(main, desc, files, 2, [loss], mode="process", scope=scope)
        with pytest.raises(BlockirError, match=f"failed on file {bad}: {bad}:1: "):
            failing.run_from_files(main, desc, [files[0], bad], 2, [loss], mode="process", scope=scope)
        assert multiprocessing.active_children() == []  # a failed run leaves no worker behind


def test_a_persistable_the_program_makes_is_shared_in_the_root_scope(tmp_path: Path) -> None:
    desc = bir.DataFeedDesc(
        'batch_size: 2\nmulti_slot_desc { slots { name: "x" type: "float" is_dense: true is_used: true shape: 1 } }'
    )
    write_multislot(tmp_path / "a", [{"x": 1.0}, {"x": 3.0}], desc)
    main = bir.Program()
    with bir.program_guard(main, bir.Program()):
        x = bir.data("x", shape=[-1, 1], dtype="float32")
        total = main.global_block().create_var(name="total", shape=[1], dtype="float32", persistable=True)
        main.global_block().append_op("mean", inputs={"X": [x]}, outputs={"Out": [total]})
    scope = bir.Scope()
    with pytest.raises(BlockirError, match="persistable\\(s\\) 'total' that the program writes have none yet"):
        bir.AsyncExecutor().run_from_files(main, desc, [tmp_path / "a"], 1, [total], mode="process", scope=scope)
    bir.AsyncExecutor().run_from_files(main, desc, [tmp_path / "a"], 1, [total], scope=scope)
    assert scope.names() == ["total"] and scope.get("total").tolist() == [2.0]
    scope.set("total", np.zeros(1, np.float32))
    write_multislot(tmp_path / "b", [{"x": 5.0}, {"x": 7.0}], desc)
    bir.AsyncExecutor().run_from_files(main, desc, [tmp_path / "b"], 1, [total], mode="process", scope=scope)
    assert scope.get("total").tolist() == [6.0]  # the mean op replaces the array: copied into the shared block


def test_a_failing_op_is_named_in_the_error(tmp_path: Path, desc: bir.DataFeedDesc) -> None:
    path = tmp_path / "big-ids"
    write_multislot(path, [{"words": [1, VOCAB + 5], "label": 1, "weight": 1.0}], desc)
    main, startup, _, _, loss, _ = bow()
    baseline = threading.active_count()
    with pytest.raises(
        BlockirError, match=f"(?s)async worker 0 failed on file {path}: .*out of range.*in op: .* = lookup_table"
    ):
        bir.AsyncExecutor().run_from_files(main, desc, [path], 1, [loss], scope=started(startup))
    assert threading.active_count() == baseline


@pytest.mark.parametrize("mode", MODES)
def test_progress_reports_instances_batches_and_fetch_sums(tmp_path: Path, desc: bir.DataFeedDesc, mode: str) -> None:
    files = write_parts(tmp_path, desc, parts=3, docs=100)
    main, startup, _, _, loss, acc = bow()
    calls: list[tuple[int, int, np.ndarray]] = []
    lock = threading.Lock()

    def progress(instances: int, batches: int, sums: np.ndarray) -> None:
        with lock:
            calls.append((instances, batches, np.array(sums)))

    async_exe = bir.AsyncExecutor()
    fetched = async_exe.run_from_files(
        main, desc, files, 1, [loss, acc], mode=mode, scope=started(startup), progress=progress
    )
    assert calls and all(i > 0 and b > 0 and s.shape == (2,) for i, b, s in calls)
    assert sum(i for i, _, _ in calls) == 300 and sum(b for _, b, _ in calls) == 19  # 300 = 18 * 16 + 12
    assert (sum(s for _, _, s in calls) / 19).tolist() == pytest.approx(fetched, rel=1e-9)  # one worker: the mean
    if mode == "thread":
        assert len(calls) == 19  # after each batch


def test_plans_compiled_for_a_run_serve_the_next(
    tmp_path: Path, desc: bir.DataFeedDesc, monkeypatch: pytest.MonkeyPatch
) -> None:
    files = write_parts(tmp_path, desc, parts=4, docs=40)
    main, startup, _, _, loss, _ = bow()
    scope = started(startup)
    compiled: list[int] = []
    compile_plan = executor_module.compile_plan
    monkeypatch.setattr(
        executor_module, "compile_plan", lambda *args, **kwargs: compiled.append(1) or compile_plan(*args, **kwargs)
    )
    async_exe = bir.AsyncExecutor()

    def run(workers: int, mode: str = "thread") -> int:
        compiled.clear()
        async_exe.run_from_files(main, desc, files, workers, [loss], mode=mode, scope=scope)
        return len(compiled)

    assert [run(2), run(2), run(3), run(1), run(1, "process")] == [2, 0, 1, 0, 0]
    main.global_block().create_var(name="unused", shape=[1], dtype="float32")  # a changed program: compiled again
    assert run(1) == 1

    # Two runs at once: each worker still has a plan of its own.
    compiled.clear()
    both_running = threading.Barrier(2, timeout=30)

    def meet() -> Any:  # a run's first batch waits for the other run's
        first = threading.Lock()

        def progress(instances: int, batches: int, sums: np.ndarray) -> None:
            if first.acquire(blocking=False):
                both_running.wait()

        return progress

    thread = threading.Thread(
        target=lambda: async_exe.run_from_files(main, desc, files[:2], 2, [loss], scope=scope, progress=meet())
    )
    thread.start()
    async_exe.run_from_files(main, desc, files[2:], 2, [loss], scope=scope, progress=meet())
    thread.join(timeout=60)
    assert len(compiled) == 3 and len(async_exe._idle) == 4  # 2 of the 3 idle executors had the old program's


FORKSERVER_SCRIPT = """import sys
import blockir as bir
from blockir.datafeed.multislot import write_multislot

with open(sys.argv[1], "a") as log:  # each time this script runs, and as what
    log.write(__name__ + "\\n")
if __name__ == "__mp_main__" and "fail" in sys.argv:
    raise RuntimeError("this script fails where workers run it")

if __name__ == "__main__":
    desc = bir.DataFeedDesc('batch_size: 2\\nmulti_slot_desc { slots { name: "x" type: "float" is_dense: true '
                            'is_used: true shape: 1 } }')
    write_multislot(sys.argv[2], [{"x": 1.0}, {"x": 3.0}], desc)
    main = bir.Program()
    with bir.program_guard(main, bir.Program()):
        total = bir.layers.mean(bir.data("x", shape=[-1, 1], dtype="float32"))
    async_exe = bir.AsyncExecutor()
    for _ in range(3):
        print(async_exe.run_from_files(main, desc, [sys.argv[2]] * 2, 2, [total], mode="process", scope=bir.Scope()))
"""


@pytest.mark.parametrize("fail", [False, True])
def test_worker_processes_do_not_run_the_main_script_again(tmp_path: Path, fail: bool) -> None:
    """The forkserver runs the caller's script once, so its workers (6 here) need not; if it fails there,
    each worker runs it, as multiprocessing does, and its error reaches the caller."""
    script, log = tmp_path / "train.py", tmp_path / "log"
    script.write_text(FORKSERVER_SCRIPT)
    done = subprocess.run(
        [sys.executable, str(script), str(log), str(tmp_path / "data"), *(["fail"] * fail)],
        capture_output=True,
        text=True,
        timeout=120,
    )
    ran = log.read_text().split()
    if fail:
        assert done.returncode == 1 and "async worker 0 exited with status 1 and no report" in done.stderr
        assert "this script fails where workers run it" in done.stderr
        assert ran.count("__main__") == 1 and ran.count("__mp_main__") >= 2  # the forkserver, then a worker
    else:
        assert done.returncode == 0, done.stderr
        assert done.stdout.split() == ["[2.0]"] * 3
        assert ran == ["__main__", "__mp_main__"]


def blas_threads() -> int:
    return max(lib["num_threads"] for lib in ThreadpoolController().select(user_api="blas").info())


def test_workers_share_the_cores_among_their_blas_threads(tmp_path: Path, desc: bir.DataFeedDesc) -> None:
    files = write_parts(tmp_path, desc, parts=2, docs=40)
    main, startup, _, _, loss, _ = bow()
    cores = len(os.sched_getaffinity(0))
    seen: list[int] = []
    with threadpool_limits(limits=4 * cores, user_api="blas"):
        before = blas_threads()
        bir.AsyncExecutor().run_from_files(
            main, desc, files, 2, [loss], scope=started(startup), progress=lambda *_: seen.append(blas_threads())
        )
        assert set(seen) == {max(1, cores // 2)} and blas_threads() == before  # restored after the run
        with threadpool_limits(limits=1, user_api="blas"), _blas_share(1):
            assert blas_threads() == 1  # never raised


def test_readers_parse_ahead_in_a_thread_only_where_a_core_is_spare(tmp_path: Path, desc: bir.DataFeedDesc) -> None:
    files = write_parts(tmp_path, desc, parts=4, docs=40)
    main, startup, _, _, loss, _ = bow()
    cores = len(os.sched_getaffinity(0))
    for workers in (1, cores):
        seen: set[int] = set()
        bir.AsyncExecutor().run_from_files(
            main,
            desc,
            files,
            workers,
            [loss],
            scope=started(startup),
            progress=lambda *_, seen=seen: seen.add(
                sum(t.name.startswith("blockir-staged") for t in threading.enumerate())
            ),
        )
        assert max(seen) == (workers if workers < cores else 0)
        assert not any(t.name.startswith("blockir-staged") for t in threading.enumerate())


def test_cli_progress_line_shows_the_rate_and_averaged_fetches(capsys: pytest.CaptureFixture[str]) -> None:
    progress = Progress(2, ["loss", "acc"], enabled=True)
    progress(100, 2, np.array([1.5, 1.0]))
    progress(28, 1, np.array([0.0, 0.25]))  # within 0.2 s of the last line: not shown
    assert "epoch 2: 100 instances, " in capsys.readouterr().err
    assert progress.line(progress.start + 2.0) == "epoch 2: 128 instances, 64/s  loss=0.5  acc=0.4167"


@pytest.mark.parametrize("mode", MODES)
def test_cli_train_saves_each_epoch(
    tmp_path: Path, desc: bir.DataFeedDesc, capsys: pytest.CaptureFixture[str], mode: str
) -> None:
    data = tmp_path / "train_data"
    data.mkdir()
    write_parts(data, desc, parts=3, docs=100)
    (tmp_path / "data.prototxt").write_text(desc.desc())
    main, startup, _, _, loss, acc = bow()
    main.save(tmp_path / "main.pb")
    startup.save(tmp_path / "startup.pb")
    out = tmp_path / "out"
    status = cli_main(
        [
            "train",
            str(tmp_path / "main.pb"),
            "--startup",
            str(tmp_path / "startup.pb"),
            "--data-feed",
            str(tmp_path / "data.prototxt"),
            "--files",
            str(data / "part-*"),
            "--threads",
            "2",
            "--epochs",
            "3",
            "--mode",
            mode,
            "--fetch",
            loss.name,
            acc.name,
            "--save-dir",
            str(out),
        ]
    )
    printed = capsys.readouterr().out
    assert status == 0, printed
    lines = [line for line in printed.splitlines() if line.startswith("epoch")]
    assert len(lines) == 3 and all("300 instances" in line and "2 workers" in line for line in lines)
    last_acc = float(lines[-1].split(f"{acc.name}=")[1])
    assert last_acc > 0.8
    for epoch in range(3):
        assert set(bir.io.load_params(bir.Executor("cpu"), out / f"epoch{epoch}", main, scope=bir.Scope())) >= {
            v.name for v in main.list_vars() if v.is_parameter
        }
    scope = bir.Scope()
    bir.io.load_persistables(bir.Executor("cpu"), out / "epoch2", main, scope=scope)
    assert all(n in scope for n in params(main, started(startup)))


def test_cli_train_errors_are_one_line(
    tmp_path: Path, desc: bir.DataFeedDesc, capsys: pytest.CaptureFixture[str]
) -> None:
    (tmp_path / "data.prototxt").write_text(desc.desc())
    main, *_ = bow()
    main.save(tmp_path / "main.pb")
    status = cli_main(
        [
            "train",
            str(tmp_path / "main.pb"),
            "--data-feed",
            str(tmp_path / "data.prototxt"),
            "--files",
            str(tmp_path / "none-*"),
        ]
    )
    err = capsys.readouterr().err
    assert status == 2 and err.count("\n") == 1 and "matches no file" in err


@pytest.mark.timeout(120)
def test_stress_many_runs_with_failures_leave_nothing_behind(
    tmp_path: Path, desc: bir.DataFeedDesc, shm_here: Callable[[], set[str]]
) -> None:
    """Runs of random modes, worker counts and file sets, some with a bad file: each trains every instance
    or fails naming the bad file, and no thread, process or shared memory block outlives it (of those this
    process made: other processes come and go in /dev/shm)."""
    rng = np.random.default_rng(7)
    good = write_parts(tmp_path, desc, parts=8, docs=60)
    bad = tmp_path / "bad"
    bad.write_text("2 5 x 1 1 1 0.5\n")
    main, startup, _, _, loss, _ = bow()
    scope = started(startup)
    threads = threading.active_count()
    executors = [bir.AsyncExecutor(), bir.AsyncExecutor(keep_workers=True)]
    for _ in range(40):
        files = list(rng.choice(good, size=int(rng.integers(1, 9)), replace=False))
        broken = rng.random() < 0.3
        if broken:
            files.insert(int(rng.integers(0, len(files) + 1)), str(bad))
        mode, workers, async_exe = str(rng.choice(MODES)), int(rng.integers(1, 5)), executors[int(rng.integers(2))]
        if broken:
            with pytest.raises(BlockirError, match=f"failed on file {bad}: {bad}:1: "):
                async_exe.run_from_files(main, desc, files, workers, [loss], mode=mode, scope=scope)
        else:
            (cost,) = async_exe.run_from_files(main, desc, files, workers, [loss], mode=mode, scope=scope)
            assert async_exe.last_stats.instances == 60 * len(files) and np.isfinite(cost)
        kept = executors[1]._kept
        assert threading.active_count() == threads
        assert len(multiprocessing.active_children()) == sum(len(pool.workers) for pool in kept) <= 4
        left = shm_here()
        assert len(left) == len(kept) and all(name.startswith("sem.mp-") for name in left)  # kept workers' lock
        if broken and async_exe is executors[1] and mode == "process":
            assert not kept  # a failed run ends the kept workers
    executors[1].close()
    assert multiprocessing.active_children() == [] and shm_here() == set()


def _mean_program() -> bir.Program:
    main_p, startup = bir.Program(), bir.Program()
    with bir.unique_name.guard(), bir.program_guard(main_p, startup):
        bir.layers.mean(bir.data("x", shape=[-1, 3], dtype="float32"))
    return main_p


def _dense_desc(shape: str) -> bir.DataFeedDesc:
    return bir.DataFeedDesc(
        'name: "MultiSlotDataFeed"\nbatch_size: 2\nmulti_slot_desc {\n'
        f'  slots {{ name: "x" type: "float" is_dense: true is_used: true {shape}}}\n}}\n'
    )


@pytest.mark.parametrize("mode", ["thread", "process"])
def test_a_slot_the_reader_cannot_parse_fails_before_the_workers(tmp_path: Path, mode: str) -> None:
    """A dense slot without a shape: one error naming the data feed (it used to be lost in a thread worker)."""
    (tmp_path / "part-0").write_text("3 1 2 3\n")
    with bir.AsyncExecutor("cpu") as exe, pytest.raises(bir.BlockirError, match="dense slot 'x' has no shape"):
        exe.run_from_files(_mean_program(), _dense_desc(""), [str(tmp_path / "part-0")], 1, [], mode=mode)


def test_a_thread_worker_failing_before_its_batches_is_reported(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Whatever fails in a thread worker reaches the caller, also outside the batch loop."""
    import blockir.parallel.async_executor as ae

    def broken(*args: object, **kwargs: object) -> None:
        raise OSError("the reader could not start")

    monkeypatch.setattr(ae, "MultiSlotReader", broken)
    (tmp_path / "part-0").write_text("3 1 2 3\n")
    with (
        bir.AsyncExecutor("cpu") as exe,
        pytest.raises(bir.BlockirError, match="async worker 0 failed: the reader could not start"),
    ):
        exe.run_from_files(_mean_program(), _dense_desc("shape: 3 "), [str(tmp_path / "part-0")], 1, [])
