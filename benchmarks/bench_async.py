"""AsyncExecutor benchmark: Hogwild training of Paddle's bow_net from MultiSlot files, in one run.

    python benchmarks/bench_async.py [--parts 12] [--docs 4000] [--repeats 5] [--quick]

The data and the model are those of ``examples/async_bow.py`` (loaded by path): ``--parts`` files of
``--docs`` documents of a planted-signal corpus (ids of a 2,000-word vocabulary, a label), bow_net
(sparse embedding 2000 x 128, sum pooling, tanh, fc 128 tanh, fc 96 tanh, fc 2 softmax, Adagrad),
batch 32. BLAS runs on one thread, in this process (threadpoolctl) and in the worker processes
(``OPENBLAS_NUM_THREADS`` and its kind set before the first one starts), so that the workers are
the only parallelism. Four parts:

1. reading: full passes over the training files by bench_reader.py's contenders, alternating (medians):
   ``read`` (the bytes, ``open().read(chunk)``), ``reader`` (``MultiSlotReader``, every batch built),
   ``python`` (a plain per-token parse). MB/s, instances/s, time over ``read``'s.
2. training throughput: one epoch of the files per turn (``run_from_files`` on one scope), in
   alternating rounds (medians): threads and processes, 1 and 2 workers, each contender one
   ``AsyncExecutor(keep_workers=True)`` as a training loop over epochs has (in process mode its
   worker processes serve every epoch); and ``process x2, new workers``, a fresh executor whose two
   workers start and end within each epoch. The first process run, which starts the forkserver and
   the workers, is timed apart. Then, in rounds of their own (three times as many,
   over half the files, as a shared machine moves an epoch's time by 20% or more from one turn to
   the next), ``files x1`` (``run_from_files``, one thread worker) against ``memory x1``: the same
   batches read beforehand into a list, run by one worker's loop (a plan of the program compiled
   the same way, a child scope of the parameters' scope, the fetches' first elements summed).
   Goals: ``process x2`` >= 1.8x the speed of ``thread x1`` (threads: reported, aim >= 1.5x);
   ``files x1`` <= 1.05x the time of ``memory x1``. Speeds are instances over median seconds;
   ratios are medians over rounds of the ratios within a round (bench_executor.py's ``alternate``),
   so they need not equal the ratio of two speeds.
3. accuracy on the 10,000 held-out documents after one epoch from the same initial weights:
   ``thread x1``, ``thread x2``, ``process x2``. Goal: within 1 point of ``thread x1``.
4. peak memory: a fresh process per size trains one epoch (2 thread workers) of two files of 15,000
   documents (1x, about 2.3 MB each: several of the reader's 512 KiB chunks) or ten times as many
   (10x) and reports its peak RSS during the epoch above its RSS just before (Linux: ``VmHWM`` of
   ``/proc/self/status``, reset through ``/proc/self/clear_refs``; ``ru_maxrss`` would not do, as it
   keeps the parent's peak across the child's ``exec``). Reading is streamed, so the goal is that 10x
   peaks no higher than 1x (at most 1.25x, or 4 MB, above it).
"""

from __future__ import annotations

import argparse
import functools
import importlib.util
import multiprocessing as mp
import os
import tempfile
from collections.abc import Callable, Sequence
from pathlib import Path
from types import ModuleType
from typing import Any

import numpy as np
from bench_executor import alternate, per_call
from bench_reader import time_reading
from threadpoolctl import threadpool_limits

import blockir as bir
from blockir.datafeed.multislot import MultiSlotReader

REPO = Path(__file__).resolve().parent.parent
BLAS_ONE_THREAD = {"OPENBLAS_NUM_THREADS": "1", "OMP_NUM_THREADS": "1", "MKL_NUM_THREADS": "1"}
GOAL_PROCESSES, GOAL_THREADS, GOAL_FILES, GOAL_ACCURACY = 1.8, 1.5, 1.05, 0.01
GOAL_MEMORY, MEMORY_SLACK_MB = 1.25, 4.0
MEMORY_DOCS = 15_000  # per file at 1x
CONTENDERS = [("thread", 1), ("thread", 2), ("process", 1), ("process", 2)]  # with keep_workers, as epochs run


@functools.cache
def example() -> ModuleType:
    """examples/async_bow.py, loaded by path."""
    spec = importlib.util.spec_from_file_location("examples_async_bow", REPO / "examples" / "async_bow.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def started_net() -> tuple[Any, bir.Scope]:
    """bow_net and a scope holding its initial weights."""
    ab = example()
    net = ab.bow_net(ab.bow_classifier.VOCAB)
    scope = bir.Scope()
    bir.Executor("cpu").run(net.startup, scope=scope)
    return net, scope


def epoch(
    net: Any,
    desc: bir.DataFeedDesc,
    files: Sequence[str],
    workers: int,
    mode: str,
    scope: bir.Scope,
    keep_workers: bool = False,
) -> Callable[[], None]:
    """One epoch of ``files`` by ``run_from_files``."""
    async_exe = bir.AsyncExecutor("cpu", keep_workers=keep_workers)

    def run() -> None:
        async_exe.run_from_files(net.main, desc, files, workers, [net.avg_cost, net.acc], mode=mode, scope=scope)

    return run


def in_memory(
    net: Any, desc: bir.DataFeedDesc, files: Sequence[str], scope: bir.Scope, exe: bir.Executor
) -> Callable[[], None]:
    """One epoch of the same batches, read beforehand, by the loop of one worker."""
    batches = list(MultiSlotReader(desc, files))
    plan = exe.plan(net.main, ["words", "label"], [net.avg_cost, net.acc])
    child = bir.Scope(scope)

    def run() -> None:
        sums = np.zeros(2)
        for batch in batches:
            fetched = plan.run({"words": batch["words"], "label": batch["label"]}, child)
            sums += [float(v.flat[0]) for v in fetched]

    return run


def memory_kb(field: str) -> int:
    """A figure of ``/proc/self/status`` in kB: ``VmRSS`` (resident now), ``VmHWM`` (peak resident)."""
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith(f"{field}:"):
            return int(line.split()[1])
    raise KeyError(field)


def peak_growth(prototxt: str, files: list[str], report: Any) -> None:
    """In a fresh process: one epoch of ``files`` by 2 thread workers; puts the peak RSS during it above the RSS
    before it, in bytes."""
    net, scope = started_net()
    desc = bir.DataFeedDesc(prototxt)
    Path("/proc/self/clear_refs").write_text("5")  # the peak (VmHWM) starts again from the RSS now
    before = memory_kb("VmRSS")
    epoch(net, desc, files, 2, "thread", scope)()
    report.put((memory_kb("VmHWM") - before) * 1024)


def measure_peak(prototxt: Path, files: list[str]) -> int:
    ctx = mp.get_context("spawn")
    report = ctx.Queue()
    child = ctx.Process(target=peak_growth, args=(str(prototxt), files, report))
    child.start()
    growth = report.get(timeout=600)
    child.join()
    return growth


def row(what: str, figure: str, ratio: str = "", goal: str = "") -> None:
    print(f"  {what:34} {figure:>22} {ratio:>14}  {goal}", flush=True)


def verdict(ok: bool) -> str:
    return "met" if ok else "NOT met"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--parts", type=int, default=12, help="training files")
    parser.add_argument("--docs", type=int, default=4000, help="documents per training file")
    parser.add_argument("--repeats", type=int, default=5, help="timed rounds (medians)")
    parser.add_argument("--quick", action="store_true", help="tiny sizes, one round: a smoke test")
    args = parser.parse_args()
    memory_docs = MEMORY_DOCS
    if args.quick:
        args.parts, args.docs, args.repeats, memory_docs = 4, 300, 1, 300
    os.environ.update(BLAS_ONE_THREAD)  # read by the numpy of the worker processes, started later
    ab = example()
    goals: list[tuple[str, bool]] = []
    with (
        tempfile.TemporaryDirectory() as tmp,
        threadpool_limits(limits=1),
        bir.Executor("cpu", scheduler="sequential") as exe,
    ):
        corpus = ab.write_corpus(Path(tmp) / "data", args.parts, args.docs)
        desc = bir.DataFeedDesc(corpus.prototxt)
        files = corpus.train_files
        size = sum(os.path.getsize(f) for f in files)
        docs = args.parts * args.docs
        print(
            f"bow_net on {args.parts} files x {args.docs:,} documents ({size / 1e6:.1f} MB), batch {desc.batch_size}, "
            f"{os.cpu_count()} cores, BLAS 1 thread, medians of {args.repeats} rounds\n"
        )

        print("1. reading the training files")
        reading = time_reading(desc, [Path(f) for f in files], args.repeats)
        for name, seconds in reading.seconds.items():
            row(
                name, f"{size / seconds / 1e6:8.1f} MB/s {docs / seconds:11,.0f}/s", f"{reading.ratio[name]:6.1f}x read"
            )

        print("\n2. training throughput, one epoch per turn (instances/s)")
        net, scope = started_net()
        contenders = {
            f"{mode} x{n}": epoch(net, desc, files, n, mode, scope, keep_workers=True) for mode, n in CONTENDERS
        }
        contenders["process x2, new workers"] = epoch(net, desc, files, 2, "process", scope)
        first = per_call(contenders["process x1"], 1)
        training = alternate(contenders, n=1, repeats=args.repeats)
        for name, seconds in training.seconds.items():
            row(name, f"{docs / seconds:11,.0f}/s", f"{1 / training.ratio[name]:5.2f}x thread x1")
        threads = 1 / training.ratio["thread x2"]
        processes = 1 / training.ratio["process x2"]
        process_pair = training.ratio["process x1"] / training.ratio["process x2"]
        row("process x2", "", f"{process_pair:5.2f}x process x1")
        row(
            "first process run (forkserver, workers)",
            f"{first:8.2f} s",
            f"{first - training.seconds['process x1']:+.2f} s",
        )
        row(
            "goal: process x2",
            f"{processes:5.2f}x thread x1",
            f">= {GOAL_PROCESSES}x",
            verdict(processes >= GOAL_PROCESSES),
        )
        row("aim: thread x2", f"{threads:5.2f}x thread x1", f">= {GOAL_THREADS}x", verdict(threads >= GOAL_THREADS))
        half = files[: max(1, len(files) // 2)]
        pair = alternate(
            {
                "memory x1": in_memory(net, desc, half, scope, exe),
                "files x1": epoch(net, desc, half, 1, "thread", scope),
            },
            n=1,
            repeats=3 * args.repeats,
        )
        half_docs = len(half) * args.docs
        for name, seconds in pair.seconds.items():
            row(f"{name} ({len(half)} files)", f"{half_docs / seconds:11,.0f}/s", f"{pair.ratio[name]:5.3f}x memory x1")
        files_over_memory = pair.ratio["files x1"]
        row(
            "goal: files / memory (1 worker)",
            f"{files_over_memory:5.3f}x",
            f"<= {GOAL_FILES}x",
            verdict(files_over_memory <= GOAL_FILES),
        )
        goals += [
            ("process x2 speed-up", processes >= GOAL_PROCESSES),
            ("files vs memory", files_over_memory <= GOAL_FILES),
        ]

        print(
            f"\n3. held-out accuracy after one epoch ({ab.HELDOUT_DOCS:,} documents, Bayes {corpus.bayes_accuracy:.4f})"
        )
        accuracy = {
            f"{mode} x{n}": ab.train(corpus, n, mode, out=Path(tmp) / f"{mode}-{n}", verbose=False)["accuracy"]
            for mode, n in [("thread", 1), ("thread", 2), ("process", 2)]
        }
        single = accuracy["thread x1"]
        error = ab.standard_error(single, ab.HELDOUT_DOCS)
        for name, value in accuracy.items():
            row(name, f"{value:.4f}", f"{(value - single) * 100:+5.2f} points")
        gap = max(abs(v - single) for v in accuracy.values())
        row(
            f"goal: within {GOAL_ACCURACY * 100:.0f} point",
            f"{gap * 100:.2f} points",
            f"(1 s.e. {error * 100:.2f})",
            verdict(gap <= GOAL_ACCURACY),
        )
        goals.append(("accuracy", gap <= GOAL_ACCURACY))

        print("\n4. peak RSS growth while training (2 thread workers, 2 files, a fresh process each)")
        peaks = {}
        for scale in (1, 10):
            small = ab.write_corpus(Path(tmp) / f"memory{scale}", 2, memory_docs * scale, heldout_docs=1)
            mb = sum(os.path.getsize(f) for f in small.train_files) / 1e6
            peaks[scale] = measure_peak(small.prototxt, small.train_files)
            row(f"{scale:2d}x ({mb:.1f} MB of files)", f"{peaks[scale] / 1e6:8.1f} MB")
        ok = peaks[10] <= max(GOAL_MEMORY * peaks[1], peaks[1] + MEMORY_SLACK_MB * 1e6)
        row("goal: 10x / 1x", f"{peaks[10] / max(peaks[1], 1):5.2f}x", f"<= {GOAL_MEMORY}x", verdict(ok))
        goals.append(("memory", ok))
    print("\ngoals: " + ", ".join(f"{name} {verdict(ok)}" for name, ok in goals))


if __name__ == "__main__":
    main()
