"""``AsyncExecutor``: Hogwild training from MultiSlot files, Fluid's ``AsyncExecutor``.

    desc = bir.DataFeedDesc("data.prototxt")
    exe = bir.Executor("cpu"); exe.run(startup)
    async_exe = bir.AsyncExecutor("cpu")
    loss, acc = async_exe.run_from_files(main, desc, files, thread_num=4, fetch=[avg_cost, acc])

The files go into a queue; each worker has its own
:class:`~blockir.datafeed.multislot.MultiSlotReader`, which takes the next file from the queue when it
is done with the one before (so batches run on across the worker's files and only its last one may
be smaller; where a core is spare, it parses ahead in a thread), and runs the program once per batch
through its own compiled plan, in its own child scope of the root scope. Batches feed the program's
data variables by slot name. BLAS is limited to the cores shared out among the workers.

Hogwild: the parameters and optimizer state stay in the root scope and every worker updates them
without locks. The optimizer kernels (``sgd``, ``momentum``, ``adagrad``, ``adam``) update their
arrays in place, so each worker's updates land in the one shared array as they happen and the
plan's write-back stores that same array again. A persistable that an op replaces by a new array
instead (e.g. a counter) is written back at the end of each batch: workers race on it at batch
granularity, still without a lock. The workers' plans are built without ``fuse_all_optimizer_ops``
(the other fusions stay on): a fused update works on a buffer of its own that its plan lays the
parameters out in, where each worker must update the arrays the others update.

``mode="thread"`` (the default): workers are threads. numpy releases the GIL in large array
operations only, so threads scale as far as the kernels do. ``mode="process"``: workers are
processes (forked from a server process that has imported blockir and run the main script, started
by the first such run; each is sent the program as its binary ProgramDesc). As with any
``multiprocessing`` code, a script that uses it runs under ``if __name__ == "__main__":``, since the
main module is imported where workers start. For the run, every value the program reads from the
scope moves into its own ``multiprocessing.shared_memory`` block: the scope holds a numpy array over
the block, and each worker process maps the same blocks into its scope, so in-place updates are
shared at once; a value an op replaces is copied into its block after each batch. Afterwards the
scope's original arrays receive the trained values (the scope keeps the same array objects) and the
blocks are freed. Process mode shares dense host arrays only (no ``SelectedRows`` or ``LoDTensor``
values in the scope), and a persistable the program writes needs a value in the scope before the
run. With ``keep_workers=True`` the worker processes (and their plans) wait for the next run instead
of ending with this one, until :meth:`AsyncExecutor.close`; a failed run ends them all the same.
"""

from __future__ import annotations

import collections
import gc
import math
import multiprocessing as mp
import os
import queue
import threading
import time
import weakref
from collections.abc import Callable, Iterable, Iterator, Sequence
from contextlib import ExitStack, contextmanager, suppress
from dataclasses import dataclass, field
from multiprocessing import connection as mp_connection
from multiprocessing import forkserver
from multiprocessing.shared_memory import SharedMemory
from typing import Any

import numpy as np
from threadpoolctl import ThreadpoolController

from blockir.datafeed.desc import DataFeedDesc
from blockir.datafeed.multislot import MultiSlotReader, slot_layout
from blockir.errors import BlockirError, DataFeedError
from blockir.ir.core import Program, Variable
from blockir.ir.dtypes import VarKind
from blockir.ops.distributed import DISTRIBUTED_LOOKUP_TABLE, PS_CLIENT
from blockir.ops.values import LoDTensor
from blockir.runtime.compiled import BuildStrategy
from blockir.runtime.device import get_device
from blockir.runtime.executor import Executor, _name
from blockir.runtime.memory import keep_freed_memory, release_freed_memory
from blockir.runtime.place import Place, as_place
from blockir.runtime.plan import Plan
from blockir.runtime.scope import Scope, global_scope

__all__ = ["AsyncExecutor", "AsyncStats", "WorkerStats", "Progress", "MODES"]

MODES = ("thread", "process")
_PREFETCH = 2  # chunks a worker's reader parses ahead, in a thread of its own, where a core is spare


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
        if not isinstance(batch_value, LoDTensor):
            raise TypeError(
                f"slot {self.name!r}: a sparse slot's batch is a LoDTensor, got {type(batch_value).__name__}"
            )
        if len(batch_value.data) != len(batch_value.lod[0]) - 1:
            raise BlockirError(
                f"slot {self.name!r} feeds a variable without LoD, so each instance needs "
                f"exactly one value; a batch of {len(batch_value.lod[0]) - 1} instances has "
                f"{len(batch_value.data)}"
            )
        return batch_value.data


class AsyncExecutor:
    """Trains a program on MultiSlot files with several workers updating shared parameters (Hogwild).

    ``keep_workers``: process mode's worker processes serve later runs (a training loop's epochs) until
    :meth:`close`, the end of a ``with`` block or garbage collection; by default each run ends its own.
    ``check_nan_inf``: every worker, thread or process, stops at the first op producing NaN or inf, as
    :class:`~blockir.runtime.executor.Executor`'s option of that name does; the run fails with its error.
    """

    def __init__(self, place: str | Place = "cpu", *, keep_workers: bool = False, check_nan_inf: bool = False) -> None:
        self.place: Place = as_place(place)
        get_device(str(self.place), "the async executor's place")
        self.keep_workers = keep_workers
        self.check_nan_inf = check_nan_inf
        self.last_stats: AsyncStats | None = None
        self._idle: list[Executor] = []  # one per worker of earlier runs, with the plans compiled for them
        self._kept: list[_Pool] = []  # process mode with keep_workers: the worker processes of the last run
        self._lock = threading.Lock()
        self._finalizer = weakref.finalize(self, _close_pools, self._kept)

    def close(self) -> None:
        """End the worker processes kept for the next run (``keep_workers``), if any. Also done by the
        ``with`` block and when the executor is garbage-collected."""
        _close_pools(self._kept)

    def __enter__(self) -> AsyncExecutor:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def run_from_files(
        self,
        program: Program,
        data_feed_desc: DataFeedDesc,
        filelist: Sequence[str | os.PathLike[str]],
        thread_num: int | None,
        fetch: Iterable[Any],
        debug: bool = False,
        *,
        mode: str = "thread",
        skip_bad_lines: bool = False,
        scope: Scope | None = None,
        progress: Progress | None = None,
    ) -> list[float]:
        """Run ``program`` once per batch of the files, with ``thread_num`` workers; return the fetches.

        ``thread_num`` (None or 0: the desc's ``thread_num``, else 1) is capped at the number of files.
        Every used slot of ``data_feed_desc`` feeds the variable of its name, and every data variable of
        the program needs a used slot. ``scope`` (default: :func:`global_scope`) holds the parameters.
        ``mode="thread"`` runs the workers as threads, ``mode="process"`` as processes over parameters
        in shared memory (see the module's doc). The result has one float per ``fetch`` entry: per
        worker, the mean over its batches of the variable's first element, averaged over the workers
        that ran a batch (NaN when none did); a fetched variable's last dimension must be 1. ``debug``
        prints each worker's progress after each file. ``progress``, if given, is called as
        ``progress(instances, batches, sums)`` with what ran since the last call: instances, batches,
        and per fetch the sum of the batches' first elements (from the workers after each batch; in
        process mode from the calling thread, up to ten times a second). Statistics go to
        :attr:`last_stats`. A failing worker stops the others between batches; its error, naming the
        worker and file (and the op or line), reaches the caller.
        """
        if mode not in MODES:
            raise BlockirError(f"mode must be one of {', '.join(MODES)}, got {mode!r}")
        if not isinstance(program, Program):
            raise BlockirError(f"run_from_files needs a Program, got {type(program).__name__}")
        if not isinstance(data_feed_desc, DataFeedDesc):
            raise BlockirError(f"run_from_files needs a DataFeedDesc, got {type(data_feed_desc).__name__}")
        files = [os.fspath(f) for f in ([filelist] if isinstance(filelist, (str, os.PathLike)) else filelist)]
        if not files:
            raise BlockirError("run_from_files: the filelist is empty")
        shared = [n for n, v in program.global_block().vars.items() if v.kind is VarKind.RAW]
        if mode == "process" and shared:
            raise BlockirError(
                f"run_from_files: mode='process' cannot run a program reading {shared[0]!r}, an object of this process "
                f"(a parameter-server worker's communicator): use mode='thread', whose workers share it"
            )
        workers = min(_thread_num(thread_num, data_feed_desc), len(files))
        fetch_names = [_name(f) for f in fetch]
        bindings = _bind(program, data_feed_desc)
        _check_fetches(program, fetch_names)
        root = global_scope() if scope is None else scope
        job = _Job(
            data_feed_desc,
            bindings,
            fetch_names,
            skip_bad_lines,
            debug,
            _PREFETCH if workers < _cores() else 0,
            _lookups(program, bindings),
        )
        run = self._threads if mode == "thread" else self._processes
        start = time.perf_counter()
        results = run(program, job, files, workers, root, progress)
        stats = [r[0] for r in results]
        self.last_stats = AsyncStats(
            sum(s.instances for s in stats), sum(s.skipped_lines for s in stats), time.perf_counter() - start, stats
        )
        errors = [r[2] for r in results if r[2] is not None]
        if errors:
            raise errors[0]
        means = [total / s.batches for s, total, _ in results if s.batches]
        if not means:
            return [math.nan] * len(fetch_names)
        return [float(v) for v in np.mean(means, axis=0)]

    @contextmanager
    def _plans(self, program: Program, job: _Job, workers: int) -> Iterator[list[Plan]]:
        """A plan of ``program`` per worker, each from an executor of its own (which keeps it for later runs:
        an epoch after the first compiles nothing); compiled here, so that their errors come first."""
        with self._lock:
            lent, self._idle = self._idle[:workers], self._idle[workers:]
        lent += [_worker_executor(self.place) for _ in range(workers - len(lent))]
        for exe in lent:
            exe.check_nan_inf = self.check_nan_inf
        try:
            yield [exe.plan(program, [b.name for b in job.bindings], job.fetch_names) for exe in lent]
        finally:
            with self._lock:
                self._idle += lent

    def _threads(
        self, program: Program, job: _Job, files: list[str], workers: int, root: Scope, progress: Progress | None
    ) -> list[_Result]:
        todo: queue.SimpleQueue[str] = queue.SimpleQueue()
        for path in files:
            todo.put(path)

        def next_file() -> str | None:
            try:
                return todo.get_nowait()
            except queue.Empty:
                return None

        stop = threading.Event()
        results: list[_Result] = [(WorkerStats(k), np.zeros(len(job.fetch_names)), None) for k in range(workers)]

        def work(k: int, plan: Plan) -> None:
            try:
                results[k] = job.work(k, plan, Scope(root), next_file, stop, progress)
            except BaseException as e:  # before its batches (opening the reader): reported as a process worker's
                stop.set()
                error = BlockirError(f"async worker {k} failed: {e}")
                results[k] = WorkerStats(k), np.zeros(len(job.fetch_names)), error

        with ExitStack() as stack:
            plans = stack.enter_context(self._plans(program, job, workers))
            for written in plans[0].writebacks:  # a persistable the program makes lands in the root, shared
                if written.name not in root:
                    root.var(written.name)
            threads = [
                threading.Thread(target=work, args=(k, plans[k]), name=f"blockir-async-{k}") for k in range(workers)
            ]
            try:
                stack.enter_context(_blas_share(workers))
                for t in threads:
                    t.start()
                for t in threads:
                    t.join()
            finally:  # also on KeyboardInterrupt: no worker is left running
                stop.set()
                for t in threads:
                    if t.is_alive():
                        t.join()
        return results

    def _processes(
        self, program: Program, job: _Job, files: list[str], workers: int, root: Scope, progress: Progress | None
    ) -> list[_Result]:
        with self._plans(program, job, 1) as plans:  # its errors come first, and it names the values
            plan = plans[0]
        made = {written.name for written in plan.writebacks}
        missing = sorted(n for n in made if getattr(root.find_var(n), "value", None) is None)
        if missing:
            raise BlockirError(
                f"process mode shares the scope's values; persistable(s) "
                f"{', '.join(map(repr, missing))} that the program writes have none yet (set them "
                f"first, or use mode='thread')"
            )
        names = sorted(made | {name for _, name, *_ in plan.scope_inputs})
        with self._lock:
            pool = self._kept.pop() if self._kept else None
        keep = False
        try:
            if pool is None:
                pool = _Pool(str(self.place))
            with _SharedValues(root, names) as layout, _Control(len(job.fetch_names), pool.lock) as control:
                spec = _ProcessSpec(
                    program.serialize(),
                    job,
                    files,
                    layout,
                    workers,
                    control.name,
                    progress is not None,
                    self.check_nan_inf,
                )
                results = pool.run(spec, control, progress)
            keep = self.keep_workers and not pool.broken and all(error is None for *_, error in results)
            return results
        finally:  # also on errors and KeyboardInterrupt: no worker is left running, unless kept idle
            if keep and pool is not None:
                with self._lock:
                    self._kept.append(pool)
                    pool = self._kept.pop(0) if len(self._kept) > 1 else None  # one kept by a run meanwhile
            if pool is not None:
                pool.close()

    def __repr__(self) -> str:
        return (
            f"AsyncExecutor({str(self.place)!r}{', keep_workers=True' if self.keep_workers else ''}"
            f"{', check_nan_inf=True' if self.check_nan_inf else ''})"
        )


_Result = tuple[WorkerStats, np.ndarray, BlockirError | None]  # a worker's stats, sums of its fetches, error
Progress = Callable[[int, int, np.ndarray], None]  # instances, batches, sums of the fetches, since the last call


@dataclass
class _Job:
    """What every worker of a run does: read the files it takes from the queue, run the plan per batch,
    sum the fetches."""

    desc: DataFeedDesc
    bindings: list[_Binding]
    fetch_names: list[str]
    skip_bad_lines: bool
    debug: bool
    prefetch: int  # chunks the reader parses ahead (MultiSlotReader's prefetch)
    lookups: list[tuple[str, str]]  # (table, slot) of each parameter-server lookup of a fed slot's ids

    def __getstate__(self) -> dict[str, Any]:  # sent to worker processes: the desc as its text
        return {**self.__dict__, "desc": self.desc.desc()}

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.__dict__.update(state, desc=DataFeedDesc(state["desc"]))

    def work(
        self,
        k: int,
        plan: Plan,
        scope: Scope,
        next_file: Callable[[], str | None],
        stop: Any,
        progress: Progress | None,
        after_batch: Callable[[], None] | None = None,
    ) -> _Result:
        """Worker ``k``: batches of the files from ``next_file``, run through ``plan`` until there are no
        files left or ``stop`` is set; an error sets it. Batches run on across the worker's files."""
        start = time.perf_counter()
        stats, sums = WorkerStats(k), np.zeros(len(self.fetch_names))
        read = [0, 0]  # instances and skipped lines the reader had when it opened the current file

        def files() -> Iterator[str]:  # the next file once the reader is done with the one before
            while not stop.is_set() and (path := next_file()) is not None:
                self._report(k, stats, sums, reader, read)
                stats.files.append(path)
                yield path

        reader = MultiSlotReader(self.desc, files(), self.skip_bad_lines, prefetch=self.prefetch)
        batches = iter(reader)
        ahead, depth = self._prefetcher(scope)
        try:
            for batch in _looking_ahead(batches, ahead, depth):
                fetched = plan.run({b.name: b.value(batch[b.name]) for b in self.bindings}, scope)
                if after_batch is not None:
                    after_batch()
                firsts = np.array([_first(name, value) for name, value in zip(self.fetch_names, fetched)])
                sums += firsts
                size = _instances(next(iter(batch.values())))
                stats.batches += 1
                stats.instances += size
                if progress is not None:
                    progress(size, 1, firsts)
                if stop.is_set():
                    break
            self._report(k, stats, sums, reader, read)
        except BaseException as e:  # reported to the caller by run_from_files
            stop.set()
            failed = (
                [reader.file] if isinstance(e, DataFeedError) or not reader.batch_files else reader.batch_files
            )  # the file the reader failed on, or those of the batch that failed
            error = BlockirError(f"async worker {k} failed on file {', '.join(map(str, failed))}: {e}")
            error.__cause__ = e  # in the same process: the caller sees the original traceback too
            return stats, sums, error
        finally:
            batches.close()  # ends a pipe_command early
            stats.skipped_lines = reader.skipped_lines
            stats.seconds = time.perf_counter() - start
        return stats, sums, None

    def _prefetcher(self, scope: Scope) -> tuple[Callable[[dict[str, Any]], None] | None, int]:
        """For a parameter-server worker's program whose communicator prefetches: what asks it for the rows of
        a batch's ids, called as the batch is read, and how many batches ahead of the one running (the
        communicator's ``prefetching``); (None, 0) otherwise."""
        holder = scope.find_var(PS_CLIENT) if self.lookups else None
        client = holder.value if holder is not None else None
        depth = int(getattr(client, "prefetching", 0) or 0)
        if client is None or not hasattr(client, "prefetch") or depth < 1:
            return None, 0

        def ahead(batch: dict[str, Any]) -> None:
            for table, slot in self.lookups:
                value = batch[slot]
                client.prefetch(table, np.asarray(value.data if isinstance(value, LoDTensor) else value).reshape(-1))

        return ahead, depth

    def _report(self, k: int, stats: WorkerStats, sums: np.ndarray, reader: MultiSlotReader, read: list[int]) -> None:
        """With ``debug``: worker ``k``'s progress once the reader is done with a file."""
        if self.debug and reader.file is not None:
            means = "".join(f", {n}={s / max(stats.batches, 1):.6g}" for n, s in zip(self.fetch_names, sums))
            print(
                f"async worker {k}: {reader.file}: {reader.instances - read[0]} instances, "
                f"{reader.skipped_lines - read[1]} skipped lines; {stats.instances} instances in "
                f"{stats.batches} batches run so far{means}",
                flush=True,
            )
        read[:] = reader.instances, reader.skipped_lines


# -- process mode -----------------------------------------------------------------------------------

_Layout = list[tuple[str, str, tuple[int, ...], str]]  # (variable, shared memory block, shape, dtype)


class _SharedValues:
    """Moves the scope's values ``names`` into shared memory for the ``with`` block, and back after it.

    Inside, each variable holds a numpy array over its own shared memory block (the entered value
    lists them); afterwards the original arrays hold the values the block left there, and the blocks
    are freed."""

    def __init__(self, scope: Scope, names: list[str]) -> None:
        self.holders = []
        for name in names:
            holder = scope.find_var(name)
            if holder is None or holder.value is None:
                raise BlockirError(f"variable {name!r} has no value in the scope (run the startup program first)")
            if not isinstance(holder.value, np.ndarray):
                raise BlockirError(
                    f"process mode shares dense host arrays; variable {name!r} holds "
                    f"{type(holder.value).__name__} on {holder.device}"
                )
            self.holders.append(holder)
        self.blocks: list[tuple[Any, SharedMemory, np.ndarray]] = []  # (holder, block, original array)

    def __enter__(self) -> _Layout:
        try:
            for holder in self.holders:
                original = holder.value
                block = SharedMemory(create=True, size=max(original.nbytes, 1))
                self.blocks.append((holder, block, original))
                shared = np.ndarray(original.shape, original.dtype, buffer=block.buf)
                shared[...] = original
                holder.set(shared, holder.device)
        except BaseException:
            self.__exit__()
            raise
        return [(h.name, b.name, o.shape, o.dtype.str) for h, b, o in self.blocks]

    def __exit__(self, *exc: object) -> None:
        for holder, block, original in self.blocks:
            original[...] = holder.value
            holder.set(original, holder.device)
            with suppress(BufferError):  # an array still over it keeps the mapping; the block goes anyway
                block.close()
            block.unlink()
        self.blocks.clear()


@dataclass(frozen=True)
class _ProcessSpec:
    """What a worker process is sent for a run: the program as a binary ProgramDesc, where the shared
    values are, and the run's control block."""

    program: bytes
    job: _Job
    files: list[str]
    layout: _Layout
    workers: int
    control: str  # the name of the run's _Control block
    counting: bool  # whether workers add their progress to the control block
    check_nan_inf: bool  # the executor's option of that name


class _Control:
    """A run's shared state in a shared memory block of float64: the index of the next file to take, the
    stop flag, and the progress so far (instances, batches, per fetch the sum of the first elements).
    Made by the caller (``fetches``) or mapped by a worker (``name``); counted under the pool's ``lock``;
    it is the run's stop flag."""

    NEXT, STOP, COUNTS = 0, 1, 2

    def __init__(self, fetches: int, lock: Any, name: str | None = None) -> None:
        self.lock = lock
        size = 8 * (self.COUNTS + 2 + fetches)
        self.owner = name is None
        self.block = SharedMemory(name=name, create=self.owner, size=size if self.owner else 0)
        self.name = self.block.name
        self.values = np.ndarray((size // 8,), np.float64, buffer=self.block.buf)
        if self.owner:
            self.values[:] = 0

    def is_set(self) -> bool:
        return bool(self.values[self.STOP])

    def set(self) -> None:
        self.values[self.STOP] = 1

    def take(self) -> int:
        """The index of the next file."""
        with self.lock:
            i = int(self.values[self.NEXT])
            self.values[self.NEXT] = i + 1
        return i

    def add(self, instances: int, batches: int, sums: np.ndarray) -> None:
        with self.lock:
            self.values[self.COUNTS :] += [instances, batches, *sums]

    def counts(self) -> np.ndarray:
        with self.lock:
            return self.values[self.COUNTS :].copy()

    def __enter__(self) -> _Control:
        return self

    def __exit__(self, *exc: object) -> None:
        """Unmap the block; the caller, who made it, also frees it."""
        del self.values  # the block's one view here: closing it would fail while the view lives
        with suppress(BufferError):  # a view still over it keeps the mapping; the block goes anyway
            self.block.close()
        if self.owner:
            self.block.unlink()


class _Pool:
    """Worker processes, each serving runs (:func:`_serve`) until closed; one lock for the runs' control
    blocks. ``broken``: a worker died or a run was interrupted, so the pool is not to be used again."""

    def __init__(self, place: str) -> None:
        self.place = place
        self.ctx = _start_method()
        self.lock = self.ctx.Lock()
        self.workers: list[tuple[Any, Any]] = []  # (process, connection)
        self.broken = False

    def run(self, spec: _ProcessSpec, control: _Control, progress: Progress | None) -> list[_Result]:
        """Run ``spec`` on ``spec.workers`` of the processes (started if need be); their reports, passing on
        progress meanwhile. A worker that dies without a report is an error (and breaks the pool)."""
        if not all(process.is_alive() for process, _ in self.workers):  # one kept idle has died: start afresh
            self.close()
        while len(self.workers) < spec.workers:
            mine, theirs = self.ctx.Pipe()
            process = self.ctx.Process(
                target=_serve,
                args=(theirs, self.lock, self.place),
                name=f"blockir-async-{len(self.workers)}",
                daemon=True,
            )
            process.start()
            theirs.close()
            self.workers.append((process, mine))
        fetches = len(spec.job.fetch_names)
        results: dict[int, _Result] = {}
        try:
            for k, (_, conn) in enumerate(self.workers[: spec.workers]):
                # a worker that died before taking the run (its start failed: its script raised) has closed its
                # end; the wait below finds it dead and reports its exit status
                with suppress(BrokenPipeError, ConnectionResetError):
                    conn.send((k, spec))
            shown = np.zeros(2 + fetches)
            while len(results) < spec.workers:
                waiting = {k: self.workers[k] for k in range(spec.workers) if k not in results}
                mp_connection.wait([c for _, c in waiting.values()] + [p.sentinel for p, _ in waiting.values()], 0.1)
                for k, (process, conn) in waiting.items():
                    try:
                        if conn.poll():
                            results[k] = conn.recv()
                            continue
                    except (EOFError, OSError):  # it died: its end of the connection closed (or was reset)
                        process.join(timeout=10)
                    if not process.is_alive():
                        self.broken = True
                        control.set()
                        results[k] = (
                            WorkerStats(k),
                            np.zeros(fetches),
                            BlockirError(f"async worker {k} exited with status {process.exitcode} and no report"),
                        )
                if progress is not None:
                    now = control.counts()
                    if now[1] != shown[1]:
                        progress(int(now[0] - shown[0]), int(now[1] - shown[1]), now[2:] - shown[2:])
                        shown = now
        except BaseException:  # e.g. KeyboardInterrupt: the workers stop after their batch and are ended
            self.broken = True
            control.set()
            self.close()
            raise
        return [results[k] for k in range(spec.workers)]

    def close(self) -> None:
        """End the workers: each sees its connection close once it is done with a run (it stops early when
        the run's stop flag is set); one still running after 10 s is killed."""
        workers, self.workers = self.workers, []
        for _, conn in workers:
            conn.close()
        for process, _ in workers:
            process.join(timeout=10)
            if process.is_alive():
                process.kill()
                process.join()


def _close_pools(pools: list[_Pool]) -> None:
    while pools:
        pools.pop().close()


def _worker_executor(place: str | Place) -> Executor:
    """An executor for a worker: sequential, its plans without fused optimizer updates (module docstring)."""
    strategy = BuildStrategy()
    strategy.fuse_all_optimizer_ops = False
    return Executor(place, scheduler="sequential", build_strategy=strategy)


def _serve(conn: Any, lock: Any, place: str) -> None:
    """A worker process: runs each spec it is sent, sends back the report, until its connection closes."""
    gc.freeze()  # what the process was forked with: never traversed by its collections (and not copied)
    keep_freed_memory()
    program: tuple[bytes, Program] | None = None  # the last one, parsed
    with _worker_executor(place) as exe:  # its plans serve later runs of the same program
        while True:
            try:
                k, spec = conn.recv()
            except EOFError:
                return
            if program is None or program[0] != spec.program:
                program = (spec.program, Program.parse(spec.program))
            result = _work(k, spec, program[1], exe, lock)
            try:
                conn.send(result)
            except (BrokenPipeError, EOFError):  # the caller closed the pool meanwhile
                return
            if result[2] is not None:  # its traceback may hold arrays over the run's blocks: unmapped now
                del result
                gc.collect()
            release_freed_memory()


def _work(k: int, spec: _ProcessSpec, program: Program, exe: Executor, lock: Any) -> _Result:
    """Worker ``k``'s part of a run, in a worker process: its scope holds the shared values."""
    fetches = len(spec.job.fetch_names)
    try:
        control = _Control(fetches, lock, spec.control)
    except BaseException as e:
        return WorkerStats(k), np.zeros(fetches), BlockirError(f"async worker {k} failed: {e}")
    with control:
        blocks: list[SharedMemory] = []
        shared: dict[str, np.ndarray] = {}
        scope = Scope()
        try:
            for name, block_name, shape, dtype in spec.layout:
                blocks.append(SharedMemory(name=block_name))
                shared[name] = np.ndarray(shape, np.dtype(dtype), buffer=blocks[-1].buf)
                scope.set(name, shared[name])
            exe.check_nan_inf = spec.check_nan_inf
            plan = exe.plan(program, [b.name for b in spec.job.bindings], spec.job.fetch_names)

            def take_file() -> str | None:
                i = control.take()
                return spec.files[i] if i < len(spec.files) else None

            written = [(w.name, shared[w.name]) for w in plan.writebacks if w.name in shared]

            def write_back() -> None:  # a value an op replaced (instead of updating it in place) goes to the block
                for name, array in written:
                    holder = scope.find_var(name)
                    if holder is not None and holder.value is not array:
                        array[...] = holder.value
                        holder.set(array)

            count = control.add if spec.counting else None
            with _blas_share(spec.workers):
                return spec.job.work(k, plan, Scope(scope), take_file, control, count, write_back)
        except BaseException as e:
            control.set()
            return WorkerStats(k), np.zeros(fetches), BlockirError(f"async worker {k} failed: {e}")
        finally:  # no reference to the blocks' arrays is left, so that they unmap now (a kept worker lives on)
            shared.clear()
            scope = Scope()
            written = []
            for block in blocks:
                with suppress(BufferError):  # an array still over it (an error's traceback): unmapped when freed
                    block.close()


def _blas_share(workers: int) -> Any:
    """A context that limits BLAS to this machine's cores shared out among ``workers`` (never raising the
    limit): BLAS pools of their own beside every worker oversubscribe the cores, and then workers run
    several times slower."""
    blas = ThreadpoolController().select(user_api="blas")
    current = max((lib["num_threads"] for lib in blas.info()), default=1)
    return blas.limit(limits=min(current, max(1, _cores() // workers)))


def _cores() -> int:
    """The cores this process may run on."""
    return len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count() or 1


def _start_method() -> Any:
    """Workers fork from a server process that has imported blockir and run the caller's main script
    (``forkserver``; ``spawn`` where there is none): only the first run of a process pays for starting
    Python, importing and running the script; ``fork`` would copy the caller's threads' state."""
    if "forkserver" not in mp.get_all_start_methods():
        return mp.get_context("spawn")
    from blockir.parallel import _forkserver_main  # here: the forkserver imports it after this module

    ctx = mp.get_context("forkserver")
    ctx.set_forkserver_preload([__name__, _forkserver_main.__name__])
    with _environ(_forkserver_main.MAIN_ENV, _forkserver_main.main_script()):  # read by a forkserver this starts
        forkserver.ensure_running()
    return ctx


@contextmanager
def _environ(name: str, value: str | None) -> Iterator[None]:
    """The environment variable ``name`` set to ``value`` (if not None) for the ``with`` block."""
    if value is None:
        yield
        return
    os.environ[name] = value
    try:
        yield
    finally:
        os.environ.pop(name, None)


def _instances(value: Any) -> int:
    """How many instances a batch value holds."""
    return len(value.lod[0]) - 1 if isinstance(value, LoDTensor) else len(value)


def _first(name: str, value: np.ndarray) -> float:
    """The first element of a fetched value whose last dimension is 1."""
    if value.ndim == 0 or value.shape[-1] != 1:
        raise BlockirError(
            f"fetch {name!r}: the last dimension of a fetched variable must be 1, got shape {list(value.shape)}"
        )
    return float(value.flat[0])


def _thread_num(thread_num: int | None, desc: DataFeedDesc) -> int:
    if thread_num is not None and (isinstance(thread_num, bool) or not isinstance(thread_num, int) or thread_num < 0):
        raise BlockirError(f"thread_num must be a positive int (or None/0: the data feed's), got {thread_num!r}")
    return thread_num or desc.thread_num or 1


def _looking_ahead(
    batches: Iterator[dict[str, Any]], ahead: Callable[[dict[str, Any]], None] | None, depth: int
) -> Iterator[Any]:
    """``batches``, each handed to ``ahead`` (when given) as soon as it is read, ``depth`` batches before it is
    yielded (the first ones are read together, before the first is yielded)."""
    if ahead is None:
        yield from batches
        return
    read: collections.deque[dict[str, Any]] = collections.deque()
    for batch in batches:
        ahead(batch)
        read.append(batch)
        if len(read) > depth:
            yield read.popleft()
    while read:
        yield read.popleft()


def _lookups(program: Program, bindings: list[_Binding]) -> list[tuple[str, str]]:
    """(table, slot) of each ``distributed_lookup_table`` reading a fed slot's ids directly."""
    fed = {b.name for b in bindings}
    return [
        (str(op.attrs["table"]), op.input("Ids")[0])
        for op in program.global_block().ops
        if op.type == DISTRIBUTED_LOOKUP_TABLE.type and op.input("Ids")[0] in fed
    ]


def _bind(program: Program, desc: DataFeedDesc) -> list[_Binding]:
    """The used slots, each bound to the program variable of its name; every data variable needs one."""
    slot_layout(desc)  # a slot the readers cannot parse fails here, before any worker starts
    block = program.global_block()
    used = [s for s in desc.slots if s.is_used]
    missing = [s.name for s in used if s.name not in block.vars]
    if missing:
        raise BlockirError(
            f"used slot(s) {', '.join(map(repr, missing))} of {desc.source} name no variable of "
            f"the program (set_use_slots chooses the slots to use)"
        )
    names = {s.name for s in used}
    unfed = [v.name for v in block.vars.values() if v.need_check_feed and v.name not in names]
    if unfed:
        raise BlockirError(
            f"data variable(s) {', '.join(map(repr, unfed))} of the program are fed by no used "
            f"slot of {desc.source} (used: {', '.join(sorted(names))})"
        )
    return [_Binding(s.name, not s.is_dense and block.vars[s.name].lod_level == 0) for s in used]


def _check_fetches(program: Program, names: list[str]) -> None:
    """Fetched variables must exist and (where their shape is declared) end in a dimension of 1."""
    block = program.global_block()
    for name in names:
        var: Variable | None = block.vars.get(name)
        if var is None:
            raise BlockirError(f"fetch {name!r} is not a variable of the program")
        if var.shape is not None and (not var.shape or var.shape[-1] not in (1, -1)):
            raise BlockirError(
                f"fetch {name!r}: the last dimension of a fetched variable must be 1, it is declared {list(var.shape)}"
            )
