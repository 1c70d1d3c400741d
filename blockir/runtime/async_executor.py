"""``AsyncExecutor``: Hogwild training from MultiSlot files, Fluid's ``AsyncExecutor``.

    desc = bir.DataFeedDesc("data.prototxt")
    exe = bir.Executor("cpu"); exe.run(startup)
    async_exe = bir.AsyncExecutor("cpu")
    loss, acc = async_exe.run_from_files(main, desc, files, thread_num=4, fetch=[avg_cost, acc])

The files go into a queue; each worker has its own
:class:`~blockir.runtime.multislot.MultiSlotReader`, which takes the next file from the queue when it
is done with the one before (so batches run on across the worker's files and only its last one may
be smaller; where a core is spare, it parses ahead in a thread), and runs the program once per batch
through its own compiled plan, in its own child scope of the root scope. Batches feed the program's
data variables by slot name. BLAS is limited to the cores shared out among the workers.

Hogwild: the parameters and optimizer state stay in the root scope and every worker updates them
without locks. The optimizer kernels (``sgd``, ``momentum``, ``adagrad``, ``adam``) update their
arrays in place, so each worker's updates land in the one shared array as they happen and the
plan's write-back stores that same array again. A persistable that an op replaces by a new array
instead (e.g. a counter) is written back at the end of each batch: workers race on it at batch
granularity, still without a lock.

``mode="thread"`` (the default): workers are threads. numpy releases the GIL in large array
operations only, so threads scale as far as the kernels do. ``mode="process"``: workers are
processes (forked from a server process that has imported blockir and run the main script, started
by the first such run; each is sent the program as its binary ProgramDesc). As with any
``multiprocessing`` code, a script that uses it runs under ``if __name__ == "__main__":``, since the
main module is imported where workers start. For
the run, every value the program reads from the scope moves into its own ``multiprocessing.shared_memory``
block: the scope holds a numpy array over the block, and each worker process maps the same blocks
into its scope, so in-place updates are shared at once; a value an op replaces is copied into its
block after each batch. Afterwards the scope's original arrays receive the trained values (the
scope keeps the same array objects) and the blocks are freed. Process mode shares dense host arrays
only (no ``SelectedRows`` or ``LoDTensor`` values in the scope), and a persistable the program writes
needs a value in the scope before the run.
"""

from __future__ import annotations

import ctypes
import gc
import math
import multiprocessing as mp
import os
import queue
import threading
import time
from collections.abc import Callable, Iterable, Iterator, Sequence
from contextlib import ExitStack, contextmanager, suppress
from dataclasses import dataclass, field
from multiprocessing import forkserver
from multiprocessing.shared_memory import SharedMemory
from typing import Any

import numpy as np
from threadpoolctl import ThreadpoolController

from blockir.errors import BlockirError, DataFeedError
from blockir.ir.core import Program, Variable
from blockir.ops.values import LoDTensor
from blockir.runtime.data_feed import DataFeedDesc
from blockir.runtime.device import get_device
from blockir.runtime.executor import Executor, _name
from blockir.runtime.multislot import MultiSlotReader
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
        assert isinstance(batch_value, LoDTensor)
        if len(batch_value.data) != len(batch_value.lod[0]) - 1:
            raise BlockirError(f"slot {self.name!r} feeds a variable without LoD, so each instance needs "
                               f"exactly one value; a batch of {len(batch_value.lod[0]) - 1} instances has "
                               f"{len(batch_value.data)}")
        return batch_value.data


class AsyncExecutor:
    """Trains a program on MultiSlot files with several workers updating shared parameters (Hogwild)."""

    def __init__(self, place: str | Place = "cpu") -> None:
        self.place: Place = as_place(place)
        get_device(str(self.place), "the async executor's place")
        self.last_stats: AsyncStats | None = None
        self._idle: list[Executor] = []  # one per worker of earlier runs, with the plans compiled for them
        self._lock = threading.Lock()

    def run_from_files(self, program: Program, data_feed_desc: DataFeedDesc, filelist: Sequence[str | os.PathLike[str]],
                       thread_num: int | None, fetch: Iterable[Any], debug: bool = False, *, mode: str = "thread",
                       skip_bad_lines: bool = False, scope: Scope | None = None,
                       progress: Progress | None = None) -> list[float]:
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
        workers = min(_thread_num(thread_num, data_feed_desc), len(files))
        fetch_names = [_name(f) for f in fetch]
        bindings = _bind(program, data_feed_desc)
        _check_fetches(program, fetch_names)
        root = global_scope() if scope is None else scope
        job = _Job(data_feed_desc, bindings, fetch_names, skip_bad_lines, debug,
                   _PREFETCH if workers < _cores() else 0)
        run = self._threads if mode == "thread" else self._processes
        start = time.perf_counter()
        results = run(program, job, files, workers, root, progress)
        stats = [r[0] for r in results]
        self.last_stats = AsyncStats(sum(s.instances for s in stats), sum(s.skipped_lines for s in stats),
                                     time.perf_counter() - start, stats)
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
        lent += [Executor(self.place, scheduler="sequential") for _ in range(workers - len(lent))]
        try:
            yield [exe.plan(program, [b.name for b in job.bindings], job.fetch_names) for exe in lent]
        finally:
            with self._lock:
                self._idle += lent

    def _threads(self, program: Program, job: _Job, files: list[str], workers: int, root: Scope,
                 progress: Progress | None) -> list[_Result]:
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
            results[k] = job.work(k, plan, Scope(root), next_file, stop, progress)

        with ExitStack() as stack:
            plans = stack.enter_context(self._plans(program, job, workers))
            for _, name, _ in plans[0].writebacks:  # a persistable the program makes lands in the root, shared
                if name not in root:
                    root.var(name)
            threads = [threading.Thread(target=work, args=(k, plans[k]), name=f"blockir-async-{k}")
                       for k in range(workers)]
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

    def _processes(self, program: Program, job: _Job, files: list[str], workers: int, root: Scope,
                   progress: Progress | None) -> list[_Result]:
        with self._plans(program, job, 1) as plans:  # its errors come first, and it names the values
            plan = plans[0]
        made = {name for _, name, _ in plan.writebacks}
        missing = sorted(n for n in made if root.find_var(n) is None or root.find_var(n).value is None)
        if missing:
            raise BlockirError(f"process mode shares the scope's values; persistable(s) "
                               f"{', '.join(map(repr, missing))} that the program writes have none yet (set them "
                               f"first, or use mode='thread')")
        names = sorted(made | {name for _, name, *_ in plan.scope_inputs})
        ctx = _start_method()
        next_file, stop, reports = ctx.Value("q", 0), ctx.Event(), ctx.Queue()
        # instances, batches, sums of the fetches; counted only for a progress callback
        counter = ctx.Array("d", 2 + len(job.fetch_names)) if progress is not None else None
        with _SharedValues(root, names) as layout:
            spec = _ProcessSpec(program.serialize(), str(self.place), job, files, layout, workers)
            procs = [ctx.Process(target=_process_worker, args=(k, spec, next_file, counter, stop, reports),
                                 name=f"blockir-async-{k}", daemon=True) for k in range(workers)]
            try:
                for p in procs:
                    p.start()
                return _collect(procs, reports, counter, progress, len(job.fetch_names))
            finally:  # also on errors and KeyboardInterrupt: no worker is left running
                stop.set()
                for p in procs:
                    if p.pid is not None:
                        p.join(timeout=10)
                        if p.is_alive():
                            p.kill()
                            p.join()
                reports.close()
                reports.join_thread()

    def __repr__(self) -> str:
        return f"AsyncExecutor({str(self.place)!r})"


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

    def __getstate__(self) -> dict[str, Any]:  # sent to worker processes: the desc as its text
        return {**self.__dict__, "desc": self.desc.desc()}

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.__dict__.update(state, desc=DataFeedDesc(state["desc"]))

    def work(self, k: int, plan: Plan, scope: Scope, next_file: Callable[[], str | None], stop: Any,
             progress: Progress | None, after_batch: Callable[[], None] | None = None) -> _Result:
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
        try:
            for batch in batches:
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
            files = [reader.file] if isinstance(e, DataFeedError) or not reader.batch_files \
                else reader.batch_files  # the file the reader failed on, or those of the batch that failed
            error = BlockirError(f"async worker {k} failed on file {', '.join(map(str, files))}: {e}")
            error.__cause__ = e  # in the same process: the caller sees the original traceback too
            return stats, sums, error
        finally:
            batches.close()  # ends a pipe_command early
            stats.skipped_lines = reader.skipped_lines
            stats.seconds = time.perf_counter() - start
        return stats, sums, None

    def _report(self, k: int, stats: WorkerStats, sums: np.ndarray, reader: MultiSlotReader, read: list[int]) -> None:
        """With ``debug``: worker ``k``'s progress once the reader is done with a file."""
        if self.debug and reader.file is not None:
            means = "".join(f", {n}={s / max(stats.batches, 1):.6g}" for n, s in zip(self.fetch_names, sums))
            print(f"async worker {k}: {reader.file}: {reader.instances - read[0]} instances, "
                  f"{reader.skipped_lines - read[1]} skipped lines; {stats.instances} instances in "
                  f"{stats.batches} batches run so far{means}", flush=True)
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
                raise BlockirError(f"process mode shares dense host arrays; variable {name!r} holds "
                                   f"{type(holder.value).__name__} on {holder.device}")
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
    """What a worker process is sent: the program as a binary ProgramDesc and where the shared values are."""

    program: bytes
    place: str
    job: _Job
    files: list[str]
    layout: _Layout
    workers: int


def _process_worker(k: int, spec: _ProcessSpec, next_file: Any, counter: Any, stop: Any, reports: Any) -> None:
    """A worker process: its scope holds the shared values; its report goes to ``reports``."""
    blocks: list[SharedMemory] = []
    shared: dict[str, np.ndarray] = {}
    scope: Scope | None = Scope()
    result = None
    gc.freeze()  # what the process was forked with: never traversed by its collections (and not copied)
    _keep_freed_memory()
    try:
        for name, block_name, shape, dtype in spec.layout:
            blocks.append(SharedMemory(name=block_name))
            shared[name] = np.ndarray(shape, np.dtype(dtype), buffer=blocks[-1].buf)
            scope.set(name, shared[name])
        with ExitStack() as stack:
            plan = stack.enter_context(Executor(spec.place, scheduler="sequential")).plan(
                Program.parse(spec.program), [b.name for b in spec.job.bindings], spec.job.fetch_names)

        def take_file() -> str | None:
            with next_file.get_lock():
                i = next_file.value
                next_file.value = i + 1
            return spec.files[i] if i < len(spec.files) else None

        def count(instances: int, batches: int, sums: np.ndarray) -> None:
            with counter.get_lock():
                counter[0] += instances
                counter[1] += batches
                for i, value in enumerate(sums, 2):
                    counter[i] += value

        written = [(name, shared[name]) for _, name, _ in plan.writebacks if name in shared]

        def write_back() -> None:  # a value an op replaced (instead of updating it in place) goes to the block
            for name, array in written:
                holder = scope.find_var(name)
                if holder.value is not array:
                    array[...] = holder.value
                    holder.set(array)

        with _blas_share(spec.workers):
            result = spec.job.work(k, plan, Scope(scope), take_file, stop, count if counter is not None else None,
                                   write_back)
    except BaseException as e:
        stop.set()
        result = (WorkerStats(k), np.zeros(len(spec.job.fetch_names)), BlockirError(f"async worker {k} failed: {e}"))
    finally:
        reports.put(result)
        shared.clear()
        scope = None
        for block in blocks:
            with suppress(BufferError):  # an array still over it: the mapping goes with the process
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


def _keep_freed_memory() -> None:
    """Have glibc's malloc keep freed memory for reuse in this process (no-op elsewhere).

    By default a fresh worker process hands the blocks of each batch's temporaries back to the system
    and faults them in again for the next batch: on bow_net about 140,000 page faults and 15% of the
    time per 40,000 instances. Fixed thresholds (which also end glibc's adjusting them) prevent that,
    at the cost of up to ``M_TRIM_THRESHOLD`` of freed memory kept by the worker."""
    try:
        mallopt = ctypes.CDLL(None).mallopt
    except (OSError, AttributeError):
        return
    mallopt(_M_TRIM_THRESHOLD, 256 << 20)
    mallopt(_M_MMAP_THRESHOLD, 32 << 20)  # glibc's largest


_M_TRIM_THRESHOLD, _M_MMAP_THRESHOLD = -1, -3  # mallopt parameters (malloc.h)


def _collect(procs: list[Any], reports: Any, counter: Any, progress: Progress | None, fetches: int) -> list[_Result]:
    """The workers' reports, passing on progress meanwhile; a worker that died without one is an error."""
    results: dict[int, _Result] = {}
    shown = np.zeros(2 + fetches)
    while len(results) < len(procs):
        try:
            stats, sums, error = reports.get(timeout=0.1)
            results[stats.worker] = (stats, sums, error)
        except queue.Empty:
            if all(not p.is_alive() for p in procs) and reports.empty():
                for k, p in enumerate(procs):
                    results.setdefault(k, (WorkerStats(k), np.zeros(fetches), BlockirError(
                        f"async worker {k} exited with status {p.exitcode} and no report")))
        if counter is not None and progress is not None:
            with counter.get_lock():
                now = np.array(counter[:])
            if now[1] != shown[1]:
                progress(int(now[0] - shown[0]), int(now[1] - shown[1]), now[2:] - shown[2:])
                shown = now
    return [results[k] for k in range(len(procs))]


def _start_method() -> Any:
    """Workers fork from a server process that has imported blockir and run the caller's main script
    (``forkserver``; ``spawn`` where there is none): only the first run of a process pays for starting
    Python, importing and running the script; ``fork`` would copy the caller's threads' state."""
    if "forkserver" not in mp.get_all_start_methods():
        return mp.get_context("spawn")
    from blockir.runtime import _forkserver_main  # here: the forkserver imports it after this module

    ctx = mp.get_context("forkserver")
    ctx.set_forkserver_preload([__name__, _forkserver_main.__name__])
    with _environ(_forkserver_main.MAIN_ENV, _forkserver_main.main_script()):  # read by the forkserver, if this starts it
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
