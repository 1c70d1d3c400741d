"""Running a plan's steps: in program order on the calling thread, or as a dataflow over streams and threads.

A step is one op of a compiled plan (:mod:`blockir.runtime.plan`), bound to a
stream (``DEVICE/compute<k>`` or ``DEVICE/copy``, set by the ``streams`` pass:
:mod:`blockir.passes.streams`). :func:`compile_schedule` turns the steps and
their dependency graph (:func:`blockir.passes.deps.dependency_graph`) into
*lanes*, the op sequences of the threads that run them:

- lane 0 is the calling thread. It runs the host stream (``cpu/compute0``)
  and launches the work of asynchronous (CUDA) streams, which returns at once;
- every other CPU stream gets a worker lane (``num_threads`` caps how many: with
  fewer workers than streams, streams share a worker round-robin);
- a lane runs its steps in program order, so a chain of ops on one stream never
  hops threads, and since every lane follows one global order no set of waits
  can deadlock.

Each step waits only for what it depends on across streams: the minimal waits of
:func:`blockir.passes.streams.stream_waits`, less those its lane's order already
implies. A wait on a step of another lane blocks on that step's gate (a
:class:`~blockir.runtime.device.HostEvent` set when it is done, or, for a CUDA
step, launched); a wait on a CUDA step is then an event wait on the waiting
step's stream (``wait_event``: a device-side wait for CUDA, a host wait for
CPU).

Values are freed as early as is safe: a value dies at its last use in program
order only if every other use of it is known done by then (vector clocks over
lanes and asynchronous streams); and on an asynchronous stream only if all its
uses are on that stream. Otherwise it lives to the end of the run.

A kernel that raises stops the run: the error is recorded, every gate is set
so that no lane stays blocked, every lane stops at its next step, the calling
thread waits for the workers and the devices, and the error is raised naming
the op. Workers are persistent threads of a :class:`WorkerPool` (one per
executor), idle between runs.
"""

from __future__ import annotations

import functools
import queue
import sys
import threading
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, NamedTuple, cast

import networkx as nx
import numpy as np

from blockir.errors import ExecutionError
from blockir.ir.devices import HOST
from blockir.ir.schema import KernelContext
from blockir.ops.values import describe_value
from blockir.passes.streams import stream_waits
from blockir.runtime.channel import blocked_on, register_thread, unregister_thread
from blockir.runtime.device import HostEvent, Stream, get_device

__all__ = [
    "HOST_STREAM",
    "Schedule",
    "Sequential",
    "Step",
    "WorkerPool",
    "compile_schedule",
    "compile_steps",
    "execute",
]

HOST_STREAM = f"{HOST}/compute0"
Gather = Callable[[list], Sequence[Any]]
Scatter = Callable[[list, Any], None]


class Step(NamedTuple):
    """One op of the plan: ``scatter(values, kernel(ctx, *gather(values)))``, then free ``free``; a step whose
    scatter only stores the result in one value slot has ``store``, that slot, and the run loop stores it."""

    kernel: Callable[..., Any]
    ctx: KernelContext
    gather: Gather
    scatter: Scatter
    free: tuple[int, ...]
    reuse: tuple[tuple[int, int], ...]  # inputs the kernel may overwrite: (argument position, value slot)
    inputs: tuple[tuple[str, str, int], ...]  # (slot name, variable name, value slot), for error messages
    stream: str  # DEVICE/compute<k> or DEVICE/copy
    op_id: int
    store: int = -1  # the value slot the scatter stores the result in as it is, or -1: the scatter does more


# -- reusing dead buffers ---------------------------------------------------------------


def _references(args: Sequence[Any], k: int) -> int:
    return sys.getrefcount(args[k])


# What ``_references`` reads for an element that nothing but its sequence references (2 on CPython 3.11:
# the sequence's reference and the argument's), measured rather than assumed.
_ALONE = _references((object(),), 0)


def _reusable(args: Sequence[Any], candidates: tuple[tuple[int, int], ...]) -> list[bool]:
    """Per argument, whether the kernel may overwrite it: a candidate that nothing but ``args`` references
    and that owns its memory (``base`` is None: not a view), an array (a numpy scalar, which a ufunc gives for
    0-d operands, has ``base`` None too but cannot be written)."""
    reuse = [False] * len(args)
    for k, _ in candidates:
        alone = _references(args, k) == _ALONE  # before any other reference to the argument is taken
        reuse[k] = alone and getattr(args[k], "base", False) is None and not np.isscalar(args[k])
    return reuse


def kernel_error(step: Step, values: list, args: Any, error: Exception) -> ExecutionError:
    """``error`` raised by ``step``'s kernel as an ExecutionError naming the op and its inputs."""
    if isinstance(error, ExecutionError):
        return error
    for k, i in step.reuse:  # for the message: the inputs cleared before the kernel ran
        if args is not None and values[i] is None:
            values[i] = args[k]
    inputs = ", ".join(f"{slot}={name}: {describe_value(values[i])}" for slot, name, i in step.inputs)
    return ExecutionError(f"{type(error).__name__}: {error}\n  in op: {step.ctx.op_text}\n  inputs: {inputs or 'none'}")


Sequential = Callable[[list, Sequence[Callable[..., Any]]], None]


def compile_steps(steps: tuple[Step, ...]) -> Sequential:
    """The sequential scheduler: ``run(values, kernels)`` runs ``steps`` in program order on the calling thread,
    ``kernels[j]`` as step ``j``'s kernel (the steps' own, or a tracer's wrappers of them).

    It is straight-line code generated for the steps (as torch.fx generates the code of a graph): per step its
    gather, the dead inputs it is offered for reuse cleared and checked, the kernel call, the store (or its
    scatter) and the frees, each step's constants bound as the function's globals; no loop over the steps,
    no unpacking of them, no branch on what a step has. A kernel's error is raised naming the op."""
    env: dict[str, Any] = {"_reusable": _reusable, "_kernel_error": kernel_error, "steps": steps}
    body: list[str] = []
    for j, step in enumerate(steps):
        env[f"g{j}"], env[f"c{j}"] = step.gather, step.ctx
        body += [f"j = {j}", f"args = g{j}(values)"]
        if step.reuse:
            env[f"r{j}"] = step.reuse
            body += [f"values[{i}] = None" for _, i in step.reuse]
            # the flags before the call, which builds its own tuple of the arguments: the offers count references
            body += [f"flags = _reusable(args, r{j})", f"result = kernels[{j}](c{j}, *args, reuse=flags)"]
        else:
            body.append(f"result = kernels[{j}](c{j}, *args)")
        if step.store >= 0:
            body.append(f"values[{step.store}] = result")
        else:
            env[f"s{j}"] = step.scatter
            body.append(f"s{j}(values, result)")
        body.append("del result")  # the values alone hold it: the reuse offers count references
        body += [f"values[{i}] = None" for i in step.free]
    source = "\n".join(
        [
            "def run(values, kernels):",
            "    j = args = None",
            "    try:",
            *(f"        {line}" for line in body or ["pass"]),
            "    except Exception as e:",
            "        error = _kernel_error(steps[j], values, args, e)",
            "        if error is e:  # an ExecutionError already (the NaN check's, say): raised as it is",
            "            raise",
            "        raise error from e",
        ]
    )
    exec(compile(source, f"<the steps of a plan: {len(steps)}>", "exec"), env)
    return cast(Sequential, env["run"])


# -- compiling a schedule ------------------------------------------------------------------


@dataclass(frozen=True)
class Schedule:
    """The steps of a plan arranged in lanes, with their cross-stream waits (see the module docstring)."""

    streams: tuple[Stream, ...]  # per step
    lanes: tuple[tuple[int, ...], ...]  # step indices per lane, program order; lane 0: the calling thread
    lane_of: tuple[int, ...]  # per step
    waits: tuple[tuple[int, ...], ...]  # per step: the steps on other streams it waits for
    gated: tuple[bool, ...]  # per step: whether a step on another lane waits for it
    recorded: tuple[bool, ...]  # per step: an asynchronous step some other stream waits for (records an event)
    free: tuple[tuple[int, ...], ...]  # per step: the slots freed after it
    reuse: tuple[tuple[tuple[int, int], ...], ...]  # per step: the dead inputs its kernel may overwrite
    channels: bool = False  # whether ops use channels: then waits count as blocked for deadlock detection

    @property
    def workers(self) -> int:
        return len(self.lanes) - 1

    def async_streams(self) -> list[Stream]:
        return list({str(s): s for s in self.streams if s.is_async}.values())


def compile_schedule(
    steps: tuple[Step, ...],
    graph: nx.DiGraph,
    reads: Sequence[set[int]],
    writes: Sequence[set[int]],
    num_threads: int | None,
    channels: bool = False,
) -> Schedule:
    """The schedule of ``steps``; ``graph`` is their dependency graph over step indices, ``reads`` /
    ``writes`` the value slots of each step; ``channels``: whether some step uses a channel."""
    n = len(steps)
    streams = tuple(
        get_device(s.stream.rpartition("/")[0], s.ctx.op_text).stream(s.stream.rpartition("/")[2]) for s in steps
    )
    lane_of = _lanes(steps, streams, num_threads)
    lanes = tuple(tuple(j for j in range(n) if lane_of[j] == lane) for lane in range(max(lane_of, default=0) + 1))
    raw = stream_waits(None, [s.stream for s in steps], graph)
    waits = []
    for j in range(n):
        # A synchronous step on the same lane ran before: the lane's order implies the wait.
        waits.append(tuple(i for i in raw.get(j, ()) if streams[i].is_async or lane_of[i] != lane_of[j]))
    gated = [False] * n
    recorded = [False] * n
    for j, ws in enumerate(waits):
        for i in ws:
            gated[i] = gated[i] or lane_of[i] != lane_of[j]
            recorded[i] = recorded[i] or streams[i].is_async
    free, reuse = _frees(steps, streams, lane_of, waits, reads, writes)
    return Schedule(streams, lanes, tuple(lane_of), tuple(waits), tuple(gated), tuple(recorded), free, reuse, channels)


def _lanes(steps: tuple[Step, ...], streams: tuple[Stream, ...], num_threads: int | None) -> list[int]:
    """Per step, its lane: 0 for the host stream and asynchronous streams, workers 1..k for other CPU streams."""
    worker_streams = list(
        dict.fromkeys(s.stream for s, st in zip(steps, streams) if s.stream != HOST_STREAM and not st.is_async)
    )
    k = len(worker_streams) if num_threads is None else min(num_threads, len(worker_streams))
    lane = {name: 1 + i % k for i, name in enumerate(worker_streams)}
    return [lane.get(s.stream, 0) for s in steps]


def _frees(
    steps: tuple[Step, ...],
    streams: tuple[Stream, ...],
    lane_of: list[int],
    waits: list[tuple[int, ...]],
    reads: Sequence[set[int]],
    writes: Sequence[set[int]],
) -> tuple[tuple[tuple[int, ...], ...], tuple[tuple[tuple[int, int], ...], ...]]:
    """Per step, the slots of its sequential ``free`` that are safe to free there, and its reuse offers among them."""
    # Units of ordering: a lane's synchronous steps, or one asynchronous stream (launched from lane 0).
    unit = [str(streams[j]) if streams[j].is_async else lane_of[j] for j in range(len(steps))]
    position: list[int] = []
    clocks: list[dict[Any, int]] = []  # per step: unit -> last position known done before the step starts
    last_in_unit: dict[Any, int] = {}
    last_sync_on_lane0: int | None = None
    for j in range(len(steps)):
        clock: dict[Any, int] = {}
        before = [last_in_unit.get(unit[j])]
        if streams[j].is_async:
            before.append(last_sync_on_lane0)  # launched after the calling thread ran its earlier steps
        for i in (*[b for b in before if b is not None], *waits[j]):
            for u, p in clocks[i].items():
                clock[u] = max(clock.get(u, -1), p)
            clock[unit[i]] = max(clock.get(unit[i], -1), position[i])
        position.append(position[last_in_unit[unit[j]]] + 1 if unit[j] in last_in_unit else 0)
        clocks.append(clock)
        last_in_unit[unit[j]] = j
        if lane_of[j] == 0 and not streams[j].is_async:
            last_sync_on_lane0 = j
    # Per slot, per unit, the position of the last step there using the slot (positions grow along a unit): a
    # step's condition on all the users of a slot in a unit is one on that last one, whatever their number.
    last_use: dict[int, dict[Any, int]] = {}
    for j in range(len(steps)):
        for s in reads[j] | writes[j]:
            last_use.setdefault(s, {})[unit[j]] = position[j]

    def safe(j: int, s: int) -> bool:
        """Whether every other step using slot ``s`` is done before step ``j`` ends: on ``j``'s own unit, an
        earlier step (a synchronous ``j``; an asynchronous one frees on its stream, whose own steps alone
        are ordered with it), on another, one that ``j``'s clock knows done."""
        last = last_use.get(s, {})
        if streams[j].is_async:
            return all(u == unit[j] for u in last)
        return all(p <= (position[j] if u == unit[j] else clocks[j].get(u, -1)) for u, p in last.items())

    free = tuple(tuple(s for s in step.free if safe(j, s)) for j, step in enumerate(steps))
    reuse = tuple(tuple((k, s) for k, s in step.reuse if s in free[j]) for j, step in enumerate(steps))
    return free, reuse


# -- running a schedule ------------------------------------------------------------------


def _wait(schedule: Schedule, event: HostEvent, what: str) -> None:
    """``event.synchronize()``, counted as blocked by the channels' deadlock detection when the run uses
    channels (a lane waiting for a lane blocked on a channel is blocked too)."""
    if not schedule.channels or event.query():
        event.synchronize()
        return
    with blocked_on(what, over=event.query):
        event.synchronize()


class _Run:
    """One run's shared state: the values, gates and events, and the first error."""

    __slots__ = ("values", "gates", "events", "error", "lock")

    def __init__(self, schedule: Schedule, values: list) -> None:
        self.values = values
        self.gates = [HostEvent() if g else None for g in schedule.gated]
        self.events: list[Any] = [None] * len(schedule.gated)
        self.error: BaseException | None = None
        self.lock = threading.Lock()

    def fail(self, error: BaseException) -> None:
        with self.lock:
            if self.error is None:
                self.error = error
        for gate in self.gates:  # nobody stays blocked on a step that will never run
            if gate is not None:
                gate.set()


def _run_lane(schedule: Schedule, steps: tuple[Step, ...], lane: int, run: _Run) -> None:
    """Run one lane's steps in order; any error is recorded in ``run`` (never raised)."""
    values = run.values
    j = args = None
    try:
        for j in schedule.lanes[lane]:
            stream = schedule.streams[j]
            for i in schedule.waits[j]:
                if schedule.lane_of[i] != lane:
                    _wait(schedule, run.gates[i], f"waiting for {steps[i].ctx.op_text}")  # type: ignore[arg-type]  # waited on across lanes: gated
                if run.error is not None:
                    return
                if schedule.streams[i].is_async:
                    stream.wait_event(run.events[i])
            if run.error is not None:
                return
            kernel, ctx, gather, scatter = steps[j][:4]
            args = gather(values)
            reuse = schedule.reuse[j]
            if reuse:
                for _, i in reuse:
                    values[i] = None
                flags = _reusable(args, reuse)
                result = stream.launch(kernel, ctx, *args, reuse=flags)
            else:
                result = stream.launch(kernel, ctx, *args)
            if steps[j].store < 0:
                scatter(values, result)
            else:
                values[steps[j].store] = result
            for i in schedule.free[j]:
                values[i] = None
            if schedule.recorded[j]:
                run.events[j] = stream.record_event()
            if schedule.gated[j]:
                run.gates[j].set()  # type: ignore[union-attr]  # schedule.gated[j]: it has a gate
    except Exception as e:
        run.fail(kernel_error(steps[j], values, args, e))  # type: ignore[index]
    except BaseException as e:  # KeyboardInterrupt, SystemExit: stop everybody, then re-raise as it is
        run.fail(e)


class _Worker:
    """A worker thread, its job queue, and how many of its queued jobs may use channels (while any does,
    it counts for the channels' deadlock detection)."""

    def __init__(self, index: int) -> None:
        self.jobs: queue.SimpleQueue = queue.SimpleQueue()
        self.channel_jobs = 0
        self.lock = threading.Lock()
        self.thread = threading.Thread(target=self.work, name=f"blockir-worker-{index}", daemon=True)
        self.thread.start()

    def submit(self, job: Callable[[], None], channels: bool) -> HostEvent:
        if channels:
            with self.lock:
                self.channel_jobs += 1
                register_thread(self.thread)  # before it runs: no false deadlock while it gets started
        done = HostEvent()
        self.jobs.put((job, done, channels))
        return done

    def work(self) -> None:
        while (item := self.jobs.get()) is not None:
            self._do(*item)
            # Idle, the thread references nothing of its last job: a failed run's error holds, through its
            # traceback, the frames that ran it, the executor's among them, which would keep the executor
            # (whose collection ends this thread) alive for as long as this thread lives.
            del item

    def _do(self, job: Callable[[], None], done: HostEvent, channels: bool) -> None:
        try:
            job()
        finally:
            done.set()
            if channels:
                with self.lock:
                    self.channel_jobs -= 1
                    if not self.channel_jobs:
                        unregister_thread()  # idle, it neither runs channel work nor blocks anybody


class WorkerPool:
    """Persistent worker threads, one job queue each; :meth:`close` ends them."""

    def __init__(self) -> None:
        self._workers: list[_Worker] = []
        self._lock = threading.Lock()

    def submit(self, worker: int, job: Callable[[], None], channels: bool = False) -> HostEvent:
        """Run ``job`` on worker ``worker`` (started if need be); the event is set when it returns.
        ``channels``: the job may use channels (the worker counts for deadlock detection while it runs)."""
        with self._lock:
            while len(self._workers) <= worker:
                self._workers.append(_Worker(len(self._workers)))
            chosen = self._workers[worker]
        return chosen.submit(job, channels)

    def close(self) -> None:
        """End the workers (after the jobs they hold) and wait for them."""
        with self._lock:
            workers, self._workers = self._workers, []
        for worker in workers:
            worker.jobs.put(None)
        for worker in workers:
            if worker.thread is not threading.current_thread():
                worker.thread.join()

    def __len__(self) -> int:
        return len(self._workers)


def execute(schedule: Schedule, steps: tuple[Step, ...], values: list, pool: WorkerPool) -> None:
    """Run the schedule: workers take lanes 1.., the calling thread lane 0; return when all is done,
    raising the first error."""
    run = _Run(schedule, values)
    if schedule.channels:
        register_thread()  # the calling thread takes part before any worker can block waiting for it
    done = [
        pool.submit(lane - 1, functools.partial(_run_lane, schedule, steps, lane, run), schedule.channels)
        for lane in range(1, len(schedule.lanes))
    ]
    try:
        _run_lane(schedule, steps, 0, run)
    finally:
        for event in done:
            _wait(schedule, event, "waiting for the worker threads of its run")
        for stream in schedule.async_streams():
            try:
                stream.synchronize()
            except Exception as e:  # an asynchronous kernel failure surfaces here
                run.fail(ExecutionError(f"{type(e).__name__} on stream {stream}: {e}"))
    error = run.error
    if error is not None:
        try:
            raise error
        finally:
            del error, run  # its traceback holds this frame: no cycle through the frame back to the error
