"""``AsyncExecutor``: Hogwild training from MultiSlot files, Fluid's ``AsyncExecutor``.

    desc = bir.DataFeedDesc("data.prototxt")
    exe = bir.Executor("cpu"); exe.run(startup)
    async_exe = bir.AsyncExecutor("cpu")
    loss, acc = async_exe.run_from_files(main, desc, files, thread_num=4, fetch=[avg_cost, acc])

Workers are threads. The files go into a queue; each worker takes the next file, reads it with its
own :class:`~blockir.runtime.multislot.MultiSlotReader` (so a file's last batch may be smaller than
the batch size) and runs the program once per batch through its own compiled plan, in its own child
scope of the root scope. Batches feed the program's data variables by slot name.

Hogwild: the parameters and optimizer state stay in the root scope and every worker updates them
without locks. The optimizer kernels (``sgd``, ``momentum``, ``adagrad``, ``adam``) update their
arrays in place, so each worker's updates land in the one shared array as they happen and the
plan's write-back stores that same array again. A persistable that an op replaces by a new array
instead (e.g. a counter) is written back at the end of each batch: workers race on it at batch
granularity, still without a lock. numpy releases the GIL in large array operations only, so
threads scale as far as the kernels do.
"""

from __future__ import annotations

import math
import os
import queue
import threading
import time
from collections.abc import Callable, Iterable, Sequence
from contextlib import ExitStack
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from blockir.errors import BlockirError
from blockir.ir.core import Program, Variable
from blockir.ops.values import LoDTensor
from blockir.runtime.data_feed import DataFeedDesc
from blockir.runtime.device import get_device
from blockir.runtime.executor import Executor, _name
from blockir.runtime.multislot import MultiSlotReader
from blockir.runtime.place import Place, as_place
from blockir.runtime.plan import Plan
from blockir.runtime.scope import Scope, global_scope

__all__ = ["AsyncExecutor", "AsyncStats", "WorkerStats", "MODES"]

MODES = ("thread", "process")


@dataclass
class WorkerStats:
    """What one worker did in a run: the files it read, its instances, skipped lines and batches."""

    worker: int
    files: list[str] = field(default_factory=list)
    instances: int = 0
    skipped_lines: int = 0
    batches: int = 0
    seconds: float = 0.0


@dataclass
class AsyncStats:
    """Statistics of a :meth:`AsyncExecutor.run_from_files` run: totals and per worker."""

    instances: int
    skipped_lines: int
    seconds: float
    workers: list[WorkerStats]

    @property
    def instances_per_second(self) -> float:
        return self.instances / self.seconds if self.seconds > 0 else 0.0


@dataclass(frozen=True)
class _Binding:
    """A used slot and the variable it feeds; ``ids_only``: a sparse slot fed to a variable without LoD,
    one value per instance (Paddle's label slots)."""

    name: str
    ids_only: bool

    def value(self, batch_value: Any) -> Any:
        if not self.ids_only:
            return batch_value
        assert isinstance(batch_value, LoDTensor)
        if len(batch_value.data) != len(batch_value.lod[0]) - 1:
            raise BlockirError(f"slot {self.name!r} feeds a variable without LoD, so each instance needs "
                               f"exactly one value; a batch of {len(batch_value.lod[0]) - 1} instances has "
                               f"{len(batch_value.data)}")
        return batch_value.data


class _Failure(Exception):
    """Raised inside a worker: what it was doing when its error happened."""


class AsyncExecutor:
    """Trains a program on MultiSlot files with several workers updating shared parameters (Hogwild)."""

    def __init__(self, place: str | Place = "cpu") -> None:
        self.place: Place = as_place(place)
        get_device(str(self.place), "the async executor's place")
        self.last_stats: AsyncStats | None = None

    def run_from_files(self, program: Program, data_feed_desc: DataFeedDesc, filelist: Sequence[str | os.PathLike[str]],
                       thread_num: int | None, fetch: Iterable[Any], debug: bool = False, *, mode: str = "thread",
                       skip_bad_lines: bool = False, scope: Scope | None = None,
                       progress: Callable[[int], None] | None = None) -> list[float]:
        """Run ``program`` once per batch of the files, with ``thread_num`` workers; return the fetches.

        ``thread_num`` (None or 0: the desc's ``thread_num``, else 1) is capped at the number of files.
        Every used slot of ``data_feed_desc`` feeds the variable of its name, and every data variable of
        the program needs a used slot. ``scope`` (default: :func:`global_scope`) holds the parameters.
        The result has one float per ``fetch`` entry: per worker, the mean over its batches of the
        variable's first element, averaged over the workers that ran a batch (NaN when none did); a
        fetched variable's last dimension must be 1. ``debug`` prints each worker's progress after each
        file. ``progress``, if given, is called from the workers with the instance count of every batch
        run. Statistics go to :attr:`last_stats`. A failing worker stops the others between batches;
        its error, naming the worker and file (and the op or line), reaches the caller.
        """
        if mode not in MODES:
            raise BlockirError(f"mode must be one of {', '.join(MODES)}, got {mode!r}")
        if mode == "process":
            raise BlockirError("run_from_files: process mode is not built yet; use mode='thread'")
        if not isinstance(program, Program):
            raise BlockirError(f"run_from_files needs a Program, got {type(program).__name__}")
        if not isinstance(data_feed_desc, DataFeedDesc):
            raise BlockirError(f"run_from_files needs a DataFeedDesc, got {type(data_feed_desc).__name__}")
        files = [os.fspath(f) for f in ([filelist] if isinstance(filelist, (str, os.PathLike)) else filelist)]
        if not files:
            raise BlockirError("run_from_files: the filelist is empty")
        workers = min(_thread_num(thread_num, data_feed_desc), len(files))
        fetch_names = [_name(f) for f in fetch]
        bindings = _bind(program, data_feed_desc)
        _check_fetches(program, fetch_names)
        root = global_scope() if scope is None else scope

        todo: queue.SimpleQueue[str] = queue.SimpleQueue()
        for path in files:
            todo.put(path)
        stop = threading.Event()
        errors: list[BaseException] = []
        stats = [WorkerStats(k) for k in range(workers)]
        sums = [np.zeros(len(fetch_names)) for _ in range(workers)]
        with ExitStack() as stack:
            plans = []
            for _ in range(workers):  # each its own executor and plan, compiled here so that errors come first
                exe = stack.enter_context(Executor(self.place, scheduler="sequential"))
                plans.append(exe.plan(program, [b.name for b in bindings], fetch_names))
            job = _Job(data_feed_desc, bindings, fetch_names, skip_bad_lines, todo, stop, progress, debug)
            threads = [threading.Thread(target=job.work, args=(k, plans[k], Scope(root), stats[k], sums[k], errors),
                                        name=f"blockir-async-{k}") for k in range(workers)]
            start = time.perf_counter()
            try:
                for t in threads:
                    t.start()
                for t in threads:
                    t.join()
            finally:  # also on KeyboardInterrupt: no worker is left running
                stop.set()
                for t in threads:
                    if t.is_alive():
                        t.join()
            seconds = time.perf_counter() - start
        self.last_stats = AsyncStats(sum(s.instances for s in stats), sum(s.skipped_lines for s in stats), seconds,
                                     stats)
        if errors:
            raise errors[0]
        means = [total / s.batches for total, s in zip(sums, stats) if s.batches]
        if not means:
            return [math.nan] * len(fetch_names)
        return [float(v) for v in np.mean(means, axis=0)]

    def __repr__(self) -> str:
        return f"AsyncExecutor({str(self.place)!r})"


@dataclass
class _Job:
    """What every worker of one run shares."""

    desc: DataFeedDesc
    bindings: list[_Binding]
    fetch_names: list[str]
    skip_bad_lines: bool
    todo: queue.SimpleQueue[str]
    stop: threading.Event
    progress: Callable[[int], None] | None
    debug: bool

    def work(self, k: int, plan: Plan, scope: Scope, stats: WorkerStats, sums: np.ndarray,
             errors: list[BaseException]) -> None:
        """Worker ``k``: files from the queue until it is empty or the run stops; the first error stops the run."""
        start = time.perf_counter()
        path = None
        try:
            while not self.stop.is_set():
                try:
                    path = self.todo.get_nowait()
                except queue.Empty:
                    break
                self._read(k, path, plan, scope, stats, sums)
        except BaseException as e:  # reported to the caller by run_from_files
            if not self.stop.is_set():
                self.stop.set()
                error = BlockirError(f"async worker {k} failed on file {path}: {e}")
                error.__cause__ = e
                errors.append(error)
        finally:
            stats.seconds = time.perf_counter() - start

    def _read(self, k: int, path: str, plan: Plan, scope: Scope, stats: WorkerStats, sums: np.ndarray) -> None:
        stats.files.append(path)
        reader = MultiSlotReader(self.desc, [path], self.skip_bad_lines)
        batches = iter(reader)
        try:
            for batch in batches:
                fetched = plan.run({b.name: b.value(batch[b.name]) for b in self.bindings}, scope)
                for i, (name, value) in enumerate(zip(self.fetch_names, fetched)):
                    sums[i] += _first(name, value)
                size = _instances(next(iter(batch.values())))
                stats.batches += 1
                stats.instances += size
                if self.progress is not None:
                    self.progress(size)
                if self.stop.is_set():
                    return
        finally:
            batches.close()  # ends a pipe_command early
            stats.skipped_lines += reader.skipped_lines
        if self.debug:
            means = "".join(f", {n}={s / max(stats.batches, 1):.6g}" for n, s in zip(self.fetch_names, sums))
            print(f"async worker {k}: {path}: {reader.instances} instances, {reader.skipped_lines} skipped lines; "
                  f"{stats.instances} instances in {stats.batches} batches so far{means}", flush=True)


def _instances(value: Any) -> int:
    """How many instances a batch value holds."""
    return len(value.lod[0]) - 1 if isinstance(value, LoDTensor) else len(value)


def _first(name: str, value: np.ndarray) -> float:
    """The first element of a fetched value whose last dimension is 1."""
    if value.ndim == 0 or value.shape[-1] != 1:
        raise BlockirError(f"fetch {name!r}: the last dimension of a fetched variable must be 1, "
                           f"got shape {list(value.shape)}")
    return float(value.flat[0])


def _thread_num(thread_num: int | None, desc: DataFeedDesc) -> int:
    if thread_num is not None and (isinstance(thread_num, bool) or not isinstance(thread_num, int) or thread_num < 0):
        raise BlockirError(f"thread_num must be a positive int (or None/0: the data feed's), got {thread_num!r}")
    return thread_num or desc.thread_num or 1


def _bind(program: Program, desc: DataFeedDesc) -> list[_Binding]:
    """The used slots, each bound to the program variable of its name; every data variable needs one."""
    block = program.global_block()
    used = [s for s in desc.slots if s.is_used]
    missing = [s.name for s in used if s.name not in block.vars]
    if missing:
        raise BlockirError(f"used slot(s) {', '.join(map(repr, missing))} of {desc.source} name no variable of "
                           f"the program (set_use_slots chooses the slots to use)")
    names = {s.name for s in used}
    unfed = [v.name for v in block.vars.values() if v.need_check_feed and v.name not in names]
    if unfed:
        raise BlockirError(f"data variable(s) {', '.join(map(repr, unfed))} of the program are fed by no used "
                           f"slot of {desc.source} (used: {', '.join(sorted(names))})")
    return [_Binding(s.name, not s.is_dense and block.vars[s.name].lod_level == 0) for s in used]


def _check_fetches(program: Program, names: list[str]) -> None:
    """Fetched variables must exist and (where their shape is declared) end in a dimension of 1."""
    block = program.global_block()
    for name in names:
        var: Variable | None = block.vars.get(name)
        if var is None:
            raise BlockirError(f"fetch {name!r} is not a variable of the program")
        if var.shape is not None and (not var.shape or var.shape[-1] not in (1, -1)):
            raise BlockirError(f"fetch {name!r}: the last dimension of a fetched variable must be 1, "
                               f"it is declared {list(var.shape)}")
