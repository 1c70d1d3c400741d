"""A worker's communicator: what the ``distributed_lookup_table``, ``send`` and ``recv`` ops call.

One communicator per worker (every thread of the worker shares it: an
``AsyncExecutor`` with thread workers inside a PS worker pushes through it),
of the class of its mode, as Paddle's communicator is split:
:class:`SyncCommunicator`, :class:`AsyncCommunicator` and
:class:`GeoCommunicator` (:func:`new_communicator` makes the one of a mode),
over the :class:`Communicator` they share. Each sends its requests through a
:class:`Transport`, the same for every mode: it calls the servers' methods
through their handles (:class:`~blockir.distributed.api.ServerHandle`, the
typed methods of :class:`~blockir.distributed.api.ParameterServerAPI`), each
call a future, so the calls to several servers are in flight together; it
waits for a lost server and makes the call again, and counts requests, bytes
and waits.

- **Sparse pulls** ask each server for the distinct ids it holds
  (``id % servers``) and put the rows back in the order asked.
- **Pushes** cut each dense gradient into its blocks (by rows) and merge each
  sparse gradient (duplicate ids summed) before sending: one request per server
  per step, carrying every block and table that server holds.
- **sync** (:class:`SyncCommunicator`): a push waits for the servers to apply the step (every worker's
  gradients, averaged by batch); it is an exchange, whose replies carry the dense blocks as the step left
  them, which ``recv`` takes (a second ``recv`` of the step pulls them).
- **async** (Downpour, :class:`AsyncCommunicator`): a push goes into a bounded queue (``queue_size``
  steps, by default one window, ``pull_every``: a full queue blocks the
  step, never grows memory, and bounds how far the worker runs ahead of
  what it pushed, each queued step one more step the values it trains with
  lack) and returns; a communicator thread
  takes the steps, in order, into windows of exactly ``pull_every`` steps
  (Downpour's n_push = n_fetch: a thread that fell behind leaves the next
  steps queued for the next window, so a longer queue never means fewer
  updates). At the window's end it merges the window (dense gradients
  summed, sparse rows merged by id) and, in the same request to each
  server, pushes it and pulls the dense parameters, which the next ``recv``
  installs. Sparse rows are cached: a lookup pulls only the ids the cache
  lacks, and at each window's end the communicator thread pulls afresh the
  rows of the ids the window used and of those noted for batches read ahead
  (below), which replace the cache's (a row the window used is at most one
  window stale). The rows of ids used in one of the ``cache_windows - 1``
  windows before stay as they were (at most ``cache_windows`` windows stale:
  with one worker they are exact, as no other worker changes them); the
  others leave the cache, and are pulled fresh when they come back. Rows kept
  over several windows spare the lookups a round trip to a server for the
  ids of the vocabulary's long tail (with one window only, nearly every batch
  has an id the window before did not use, and waits for it:
  ``docs/distributed.md`` measures it), and cost no more bytes per exchange.
  The worker waits only for a lookup's missing rows and for a full queue
  (``stats["wait_s"]``); ``stop`` pushes what the window holds and drops the
  cache. With ``prefetch`` (n batches), an ``AsyncExecutor`` thread worker
  reads n batches ahead and calls :meth:`AsyncCommunicator.prefetch` for each
  batch it reads: the batch's ids are noted (kept and refreshed by the cache
  until the batch ran), and once ``n // 2`` batches are noted the rows of
  theirs the cache lacks are pulled in one request per server, without
  waiting, while the batches before them run. A lookup that misses rows
  waits only for the prefetches holding them (asking at once for noted ids
  not yet asked for; the other prefetches stay on their way) and puts their
  rows in the cache, where a row the cache already has is kept. A prefetched
  row is at most a window and n batches stale.
- **GEO** (:class:`GeoCommunicator`): the worker trains on its own copy;
  every ``k_steps`` steps it pushes the deltas of its dense parameters and of
  the rows its lookups read, and takes the servers' values of them.

:attr:`Communicator.stats` counts requests, bytes and the seconds the worker
waited on the servers; async mode also ``stale_steps``: over its ``recv`` s,
the sum of this worker's steps that the dense values it trains with lack
(divided by the steps: the mean staleness).

**A server lost.** A handle raises :class:`ServerLost` when its server's
process died or its script is not serving (Ray: the actor died or restarts).
The call waits (the worker's training waits with it: a full queue, a lookup)
while saying so on standard error, until the server answers again or the
``timeout`` passes (an error naming the server); it fails at once when the
server will not come back (``ServerLost.final``: no restarts left). A server
that came back restarted (:meth:`ParameterServer.incarnation`) was restored
from the launcher's last checkpoint: the updates it applied after it are lost,
and the communicator reports how many at least (the server's version when this
worker last heard from it less the checkpoint's), on standard error and in
:attr:`Communicator.recoveries`; in sync mode the server resumes at the
workers' step. Then the request is made again.
"""

from __future__ import annotations

import collections
import queue
import sys
import threading
import time
from abc import ABC, abstractmethod
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from typing import Any, ClassVar, Concatenate, Generic, ParamSpec, TypeVar, cast

import numpy as np

from blockir.distributed.api import ParameterServerAPI, Reply, ServerHandle, ServerLost
from blockir.distributed.index import SortedIds, grown, merge_rows, sort_ids, unique_ids
from blockir.errors import BlockirError
from blockir.passes.distribute import DenseBlock, Split

__all__ = [
    "CACHE_WINDOWS",
    "PULL_EVERY",
    "AsyncCommunicator",
    "Communicator",
    "GeoCommunicator",
    "SyncCommunicator",
    "Transport",
    "new_communicator",
]

RECONNECT_POLL_S = 0.2  # how often a worker asks a lost server whether it is back

# Async mode's defaults (``a_sync_configs``), chosen by measurement (docs/distributed.md, *Async defaults*): a
# window of 4 steps per exchange, and a cached row kept for 16 windows after the last use of its id.
PULL_EVERY = 4
CACHE_WINDOWS = 16

P = ParamSpec("P")
R = TypeVar("R")


@dataclass
class _Call(Generic[R]):
    """A request to a server, kept so that it can be made again once a lost server is back."""

    server: int
    method: Callable[..., R]
    args: tuple[Any, ...]
    kwargs: dict[str, Any]
    reply: Reply[R]


class Transport:
    """A worker's requests to its servers: :meth:`submit` sends a call of a method of
    :class:`~blockir.distributed.api.ParameterServerAPI` (or of its control calls) to one server and returns it in
    flight; :meth:`result` waits for it, waiting for a lost server to come back and making the call again (module
    docstring, *A server lost*); :attr:`stats` counts the requests, the bytes of their arrays and the seconds
    waited. ``progress``: the worker's step, for a recovery's report; ``restarted``: called with a server found
    restarted, once the report is made (sync mode resumes it at the worker's step)."""

    def __init__(
        self,
        handles: Sequence[ServerHandle],
        worker: int,
        timeout: float = 300.0,
        progress: Callable[[], int] = lambda: 0,
        restarted: Callable[[int], None] | None = None,
    ) -> None:
        self.handles = list(handles)
        self.worker = worker
        self.timeout = timeout  # how long a request waits for a lost server to come back
        self.progress = progress
        self.restarted = restarted
        self.recoveries: list[dict[str, Any]] = []  # servers found restarted, and what each lost
        self.stats: dict[str, float] = {"requests": 0, "bytes_sent": 0, "wait_s": 0.0, "communicator_s": 0.0}
        self._incarnations: list[int | None] = [None] * len(self.handles)  # each server's restart count, once known
        self._versions = [0] * len(self.handles)  # each server's version when it last answered a push
        self._recovering = threading.Lock()

    def submit(
        self, server: int, method: Callable[Concatenate[Any, P], R], *args: P.args, **kwargs: P.kwargs
    ) -> _Call[R]:
        """Send ``method`` (``ParameterServerAPI.push``, say) with these arguments to server ``server``."""
        self.stats["requests"] += 1
        self.stats["bytes_sent"] += _nbytes(args) + _nbytes(kwargs) if kwargs else _nbytes(args)
        return _Call(server, method, args, kwargs, self.handles[server].submit(method, *args, **kwargs))

    def result(self, call: _Call[R], waited: bool, retry: bool = True) -> R:
        """The call's result; the time it took counts as the worker's waiting when ``waited`` (a training
        thread's call), else as the communicator thread's. A lost server is waited for (unless ``retry`` is False:
        then :class:`ServerLost` is raised), and the call made again."""
        start = time.perf_counter()
        try:
            while True:
                try:
                    result = call.reply.result()
                except ServerLost as e:
                    if not retry:
                        raise
                    self._recover(call.server, e)
                    call = self.submit(call.server, call.method, *call.args, **call.kwargs)
                    continue
                if call.method is ParameterServerAPI.push:  # the server's version: what a restart would lose
                    self._heard(call.server, cast(int, result))
                elif call.method is ParameterServerAPI.exchange:
                    self._heard(call.server, cast(tuple, result)[0])
                return result
        finally:
            self.stats["wait_s" if waited else "communicator_s"] += time.perf_counter() - start

    def call(
        self,
        server: int,
        method: Callable[Concatenate[Any, P], R],
        *args: P.args,
        **kwargs: P.kwargs,
    ) -> R:
        """Call ``method`` of server ``server`` and wait for its answer (waiting for the server to come back when
        it was lost)."""
        return self.result(self.submit(server, method, *args, **kwargs), waited=True)

    def call_all(self, method: Callable[Concatenate[Any, P], R], *args: P.args, **kwargs: P.kwargs) -> list[R]:
        """:meth:`call` of ``method`` on every server, the requests in flight together; their answers in server
        order."""
        calls = [self.submit(k, method, *args, **kwargs) for k in range(len(self.handles))]
        return [self.result(call, waited=True) for call in calls]

    def call_all_once(self, method: Callable[Concatenate[Any, P], R], *args: P.args, **kwargs: P.kwargs) -> list[R]:
        """:meth:`call_all` without waiting for a lost server: :class:`ServerLost` is raised (a save that a lost
        server cannot complete)."""
        calls = [self.submit(k, method, *args, **kwargs) for k in range(len(self.handles))]
        return [self.result(call, waited=True, retry=False) for call in calls]

    def know_servers(self) -> None:
        """Learn which life of each server this worker starts with: a server found in a later one was restarted,
        and lost what it applied after its checkpoint."""
        lives = [handle.incarnation() for handle in self.handles]  # asked of every server at once
        self._incarnations = [int(life.result()["restart"]) for life in lives]

    def close(self) -> None:
        """Release the handles (no request can be made after)."""
        for handle in self.handles:
            handle.close()

    def _heard(self, server: int, version: int) -> None:
        self._versions[server] = max(self._versions[server], int(version))

    def _recover(self, server: int, lost: ServerLost) -> None:
        """Wait for server ``server`` to answer again (at most ``timeout`` s); if it was restarted, report what
        it lost and tell ``restarted``."""
        with self._recovering:  # one thread of the worker waits; the others find it back
            handle = self.handles[server]
            deadline = time.monotonic() + self.timeout
            said = False
            life: dict[str, Any] | None = None
            while life is None:
                try:
                    life = handle.incarnation().result()
                except ServerLost as e:
                    if e.final:
                        raise BlockirError(
                            f"worker {self.worker}: parameter server {server} is gone and will not come back ({e}); "
                            f"blockir launch restarts a server only with --max-restarts and --checkpoint-dir"
                        ) from None
                    if time.monotonic() > deadline:
                        raise BlockirError(
                            f"worker {self.worker}: parameter server {server} did not come back within "
                            f"{self.timeout:g} s ({lost})"
                        ) from None
                    if not said:
                        print(
                            f"worker {self.worker}: parameter server {server} does not answer ({lost}); waiting up "
                            f"to {self.timeout:g} s for it to be restarted",
                            file=sys.stderr,
                            flush=True,
                        )
                        said = True
                    time.sleep(RECONNECT_POLL_S)
            if life["restart"] == self._incarnations[server]:
                return  # the same life: nothing was lost
            self._incarnations[server] = int(life["restart"])
            if life["checkpoint"] is None:
                raise BlockirError(
                    f"worker {self.worker}: parameter server {server} was restarted with no checkpoint to restore "
                    f"(none was written yet): what it held is lost"
                )
            step = self.progress()
            recovery = {
                "server": server,
                "restart": int(life["restart"]),
                "checkpoint": life["checkpoint"],
                "checkpoint_step": int(life["step"]),
                "lost_updates": max(0, self._versions[server] - int(life["version"])),
                "worker_step": step,
            }
            self.recoveries.append(recovery)
            self._versions[server] = int(life["version"])
            print(
                f"worker {self.worker}: parameter server {server} was restarted from the checkpoint of step "
                f"{recovery['checkpoint_step']} ({life['checkpoint']}): the updates it applied after it are lost, "
                f"at least {recovery['lost_updates']} (this worker is at step {step})",
                file=sys.stderr,
                flush=True,
            )
            if self.restarted is not None:
                self.restarted(server)


class Communicator(ABC):
    """Worker ``worker``'s communicator over the servers ``handles`` (module docstring): what the ops call
    (:class:`blockir.ops.distributed.Client`), over a :class:`Transport`. One class per mode
    (:class:`SyncCommunicator`, :class:`AsyncCommunicator`, :class:`GeoCommunicator`; :func:`new_communicator`
    makes the one of a mode); this class has what they share: a pull of rows or dense parameters from the
    servers holding them, a push cut per server, the servers' first values, the step count and the
    checkpoints."""

    mode: ClassVar[str]

    def __init__(self, split: Split, handles: Sequence[ServerHandle], worker: int, timeout: float = 300.0) -> None:
        if len(handles) != len(split.servers):
            raise BlockirError(f"{len(handles)} server handles for {len(split.servers)} servers")
        self.split = split
        self.worker = worker
        self.transport = Transport(handles, worker, timeout, progress=lambda: self.steps)
        self.stats = self.transport.stats  # and the communicator's own counters
        self.stats.update(payload_bytes=0, prefetched_rows=0)
        self.checkpoint: Callable[[int], None] | None = None  # called with the step every checkpoint_every steps
        self.checkpoint_every = 0
        self.steps = 0  # steps pushed
        self._blocks: dict[str, list[DenseBlock]] = {}
        self._server_blocks: list[list[str]] = [[] for _ in handles]  # the dense blocks each server holds
        for b in split.blocks:
            self._blocks.setdefault(b.param, []).append(b)
            self._server_blocks[b.server].append(b.name)
        self._dims = {t.name: t.dim for t in split.tables}
        self._heights = {t.name: t.height for t in split.tables}
        self._lock = threading.Lock()
        self._sorts = threading.local()  # a training thread's last lookup of each table: its ids and their sort

    @property
    def handles(self) -> list[ServerHandle]:
        return self.transport.handles

    @property
    def recoveries(self) -> list[dict[str, Any]]:
        """Servers found restarted, and what each lost (module docstring, *A server lost*)."""
        return self.transport.recoveries

    # -- the ops' Client ----------------------------------------------------------------------------------
    def pull_sparse(self, table: str, ids: np.ndarray) -> np.ndarray:
        """Rows of ``table`` at ``ids``, from the servers holding them."""
        uniq, inverse = self._sorted(table, ids)
        return self._pull_rows(table, uniq, self._after(), waited=True).take(inverse, axis=0)

    def prefetch(self, table: str, ids: np.ndarray) -> None:  # noqa: B027 (nothing to do but in async mode)
        """The ids of a batch read ahead (``AsyncExecutor``'s thread workers call it): only the async communicator
        pulls their rows early."""

    @abstractmethod
    def push(self, dense: dict[str, np.ndarray], sparse: list[tuple[str, np.ndarray, np.ndarray]], weight: int) -> None:
        """A step's gradients (a ``send``)."""

    @abstractmethod
    def pull_dense(self, names: Sequence[str]) -> dict[str, np.ndarray] | None:
        """The dense parameters ``names`` for a ``recv`` (None: keep the current values)."""

    def geo_step(self, params: dict[str, Any], touched: dict[str, np.ndarray]) -> None:
        raise BlockirError(f"geo_sync needs the GEO communicator (a_sync_configs k_steps), not the {self.mode} one")

    # -- set-up and end ---------------------------------------------------------------------------------
    def init_dense(self, values: dict[str, np.ndarray]) -> None:
        """Give the servers the dense parameters' first values (worker 0, after running the startup program)."""
        per_server: dict[int, dict[str, np.ndarray]] = {}
        for name, value in values.items():
            for b in self._blocks.get(name, ()):
                per_server.setdefault(b.server, {})[b.name] = np.ascontiguousarray(np.asarray(value)[b.begin : b.end])
        calls = [self.transport.submit(k, ParameterServerAPI.init_dense, blocks) for k, blocks in per_server.items()]
        for call in calls:
            self.transport.result(call, waited=True)

    def pull_all(self) -> dict[str, np.ndarray]:
        """Every dense parameter as the servers hold it (waiting until worker 0 has given them values)."""
        return self._pull(list(self._blocks), 0, waited=True)

    def know_servers(self) -> None:
        """Learn which life of each server this worker starts with (``fleet.init_worker`` calls it)."""
        self.transport.know_servers()

    def stop(self) -> None:  # noqa: B027 (sync mode holds nothing)
        """Push what the communicator still holds (the async queue, GEO's last deltas); lookups go to the servers
        from now on."""

    def close(self) -> None:
        """:meth:`stop`, then release the handles (no request can be made after)."""
        try:
            self.stop()
        finally:
            self.transport.close()

    # -- inside ------------------------------------------------------------------------------------------
    def _sorted(self, table: str, ids: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """A lookup's ``ids`` (one dimension) of ``table``: the distinct ids, sorted, and where each of ``ids`` is
        among them (``np.unique``'s ``return_inverse``), by one stable sort, which the push of this step's rows at
        the same ids takes (:meth:`_merged`: the rows merged by id, not sorted again). The sort is this training
        thread's (each thread pushes what it looked up)."""
        flat = np.asarray(ids, np.int64).reshape(-1)
        sort = sort_ids(flat)
        self._sorts.__dict__.setdefault("tables", {})[table] = (flat.copy(), sort)
        return sort.distinct, sort.inverse()

    def _merged(self, sparse: list[tuple[str, np.ndarray, np.ndarray]]) -> dict[str, tuple[np.ndarray, np.ndarray]]:
        """One (ids, rows) per table of a push, the rows of an id summed, ids sorted (:func:`_merge_sparse`); a
        table pushed at the ids this thread last looked it up at takes that lookup's sort."""
        return _merge_sparse(sparse, self._sorts.__dict__.get("tables"))

    def _after(self) -> int:
        """The servers' step a pull waits for (sync mode: this worker's)."""
        return 0

    def _stepped(self) -> int:
        """A step was pushed: count it; every ``checkpoint_every`` steps, the checkpoint (worker 0's). The step."""
        with self._lock:
            self.steps += 1
            step = self.steps
        if self.checkpoint is not None and self.checkpoint_every and step % self.checkpoint_every == 0:
            self.checkpoint(step)
        return step

    def _count_payload(self, dense: dict[str, np.ndarray], sparse: dict[str, tuple[np.ndarray, np.ndarray]]) -> None:
        self.stats["payload_bytes"] += sum(g.nbytes for g in dense.values()) + sum(
            i.nbytes + r.nbytes for i, r in sparse.values()
        )

    def _pull_rows(self, table: str, uniq: np.ndarray, after: int, waited: bool) -> np.ndarray:
        """Rows of ``table`` at the sorted distinct ``uniq``, from the servers holding them."""
        calls = [
            (part, self.transport.submit(k, ParameterServerAPI.pull_sparse, table, part, after))
            for k, part in enumerate(_by_server(uniq, len(self.handles)))
            if part.size
        ]
        return _gathered(uniq, [(part, self.transport.result(call, waited)) for part, call in calls], self._dims[table])

    def _send(
        self,
        dense: dict[str, np.ndarray],
        sparse: dict[str, tuple[np.ndarray, np.ndarray]],
        weight: int,
        waited: bool,
    ) -> None:
        """Push to the servers their parts of the gradients (to those with a part)."""
        dense_parts, sparse_parts = self._parts(dense, sparse)
        calls = [
            self.transport.submit(k, ParameterServerAPI.push, self.worker, dense_parts[k], sparse_parts[k], weight)
            for k in range(len(self.handles))
            if dense_parts[k] or sparse_parts[k]
        ]
        for call in calls:
            self.transport.result(call, waited)

    def _exchanges(
        self,
        dense: dict[str, np.ndarray],
        sparse: dict[str, tuple[np.ndarray, np.ndarray]],
        weight: int,
        wanted: Sequence[dict[str, np.ndarray]],
    ) -> list[_Call[tuple[int, dict[str, np.ndarray], dict[str, np.ndarray]]]]:
        """One exchange per server (every server, with or without a part of the push): its parts of the gradients,
        and its dense blocks and its ``wanted`` rows (ids by table) asked back."""
        dense_parts, sparse_parts = self._parts(dense, sparse)
        return [
            self.transport.submit(
                k, ParameterServerAPI.exchange, self.worker, dense_parts[k], sparse_parts[k], weight, blocks, wanted[k]
            )
            for k, blocks in enumerate(self._server_blocks)
        ]

    def _joined(self, blocks: dict[str, np.ndarray], names: Iterable[str]) -> dict[str, np.ndarray]:
        """The dense parameters ``names`` from the values of their blocks."""
        return {name: _join([blocks[b.name] for b in self._blocks[name]]) for name in names}

    def _parts(
        self, dense: dict[str, np.ndarray], sparse: dict[str, tuple[np.ndarray, np.ndarray]]
    ) -> tuple[list[dict[str, np.ndarray]], list[dict[str, tuple[np.ndarray, np.ndarray]]]]:
        """A push cut per server: the dense gradients by block, the sparse rows by id."""
        servers = len(self.handles)
        dense_parts: list[dict[str, np.ndarray]] = [{} for _ in range(servers)]
        for name, grad in dense.items():
            for b in self._blocks[name]:
                dense_parts[b.server][b.name] = np.ascontiguousarray(grad[b.begin : b.end]) if b.count > 1 else grad
        if servers == 1:  # it holds every id
            return dense_parts, [dict(sparse)]
        sparse_parts: list[dict[str, tuple[np.ndarray, np.ndarray]]] = [{} for _ in range(servers)]
        for table, (ids, rows) in sparse.items():
            owner = ids % servers
            for k in range(servers):
                mine = owner == k
                if mine.all():  # this server holds them all
                    sparse_parts[k][table] = (ids, rows)
                elif mine.any():
                    sparse_parts[k][table] = (ids[mine], rows[mine])
        return dense_parts, sparse_parts

    def _pull(self, names: Sequence[str], after: int, waited: bool = False) -> dict[str, np.ndarray]:
        wanted = [b for name in names for b in self._blocks[name]]
        by_server: dict[int, list[str]] = {}
        for b in wanted:
            by_server.setdefault(b.server, []).append(b.name)
        calls = [
            self.transport.submit(k, ParameterServerAPI.pull_dense, blocks, after) for k, blocks in by_server.items()
        ]
        got: dict[str, np.ndarray] = {}
        for call in calls:
            values = self.transport.result(call, waited)
            got.update(values)
        return self._joined(got, names)


class SyncCommunicator(Communicator):
    """Sync mode: a push waits for the servers to apply the step (every worker's gradients, averaged by batch),
    and a pull waits for the servers to be at this worker's step; a server found restarted resumes at it. A
    push is an exchange: each server's reply carries its dense blocks as the step left them, which the step's
    ``recv`` takes instead of asking again (one round trip per server and step where there were two)."""

    mode = "sync"

    def __init__(self, split: Split, handles: Sequence[ServerHandle], worker: int, timeout: float = 300.0) -> None:
        super().__init__(split, handles, worker, timeout)
        self.transport.restarted = self._resume
        self._fresh: tuple[int, dict[str, np.ndarray]] | None = None  # the dense blocks after the last push's step

    def push(self, dense: dict[str, np.ndarray], sparse: list[tuple[str, np.ndarray, np.ndarray]], weight: int) -> None:
        merged = self._merged(sparse)
        self._count_payload(dense, merged)
        calls = self._exchanges(dense, merged, weight, [{}] * len(self.handles))  # a sync step counts every push
        fresh: dict[str, np.ndarray] = {}
        for call in calls:
            fresh.update(self.transport.result(call, waited=True)[1])
        self._fresh = (self._stepped(), fresh)

    def pull_dense(self, names: Sequence[str]) -> dict[str, np.ndarray]:
        fresh, self._fresh = self._fresh, None
        if fresh is not None and fresh[0] == self.steps:  # the blocks as this worker's last step left them
            return self._joined(fresh[1], names)
        return self._pull(names, self.steps, waited=True)

    def _after(self) -> int:
        return self.steps

    def _resume(self, server: int) -> None:
        """Server ``server`` came back restarted: it resumes at this worker's step."""
        self.handles[server].resume(self.steps).result()


_STOP = object()


class AsyncCommunicator(Communicator):
    """Async mode (Downpour, module docstring): pushes queued for the communicator thread, which pushes a window
    of ``pull_every`` steps in one exchange that refreshes the dense parameters and the cached rows the window
    used (the rows of the ids used in the ``cache_windows - 1`` windows before are kept as they are); ``prefetch``
    batches read ahead."""

    mode = "async"

    def __init__(
        self,
        split: Split,
        handles: Sequence[ServerHandle],
        worker: int,
        pull_every: int = PULL_EVERY,
        queue_size: int | None = None,
        prefetch: int = 0,
        timeout: float = 300.0,
        cache_windows: int = CACHE_WINDOWS,
    ) -> None:
        if queue_size is None:  # one window: the next window's steps queue while one is exchanged
            queue_size = pull_every
        if pull_every < 1 or queue_size < 1 or cache_windows < 1 or prefetch < 0:
            raise BlockirError(
                f"pull_every ({pull_every}), queue_size ({queue_size}) and cache_windows ({cache_windows}) must be at "
                f"least 1, prefetch ({prefetch}) at least 0"
            )
        super().__init__(split, handles, worker, timeout)
        self.pull_every = pull_every
        self.prefetching = prefetch  # batches read ahead whose missing rows are pulled early (0: none)
        self._fresh: tuple[int, dict[str, np.ndarray]] | None = None  # the last exchange's steps and dense values
        self._installed = 0  # the steps the dense values the worker has include (of its own)
        self.stats.update(stale_steps=0)  # summed over recvs: this worker's steps its dense values lack
        self._group = max(1, prefetch // 2)  # batches read ahead whose missing rows go in one request
        self.cache_windows = cache_windows
        self._cache = self._new_cache()
        self.transport.restarted = self._forget_rows
        self._coming: dict[str, list[np.ndarray]] = {}  # table -> the ids of batches read ahead, not yet asked for
        self._prefetching: dict[str, list[tuple[np.ndarray, _Call[np.ndarray]]]] = {}  # table -> rows on their way
        self._stopped = False
        self._error: BaseException | None = None
        self._queue: queue.Queue[Any] = queue.Queue(maxsize=queue_size)
        self._thread = threading.Thread(target=self._work, name=f"blockir-communicator-{worker}", daemon=True)
        self._thread.start()

    # -- the ops' Client ----------------------------------------------------------------------------------
    def pull_sparse(self, table: str, ids: np.ndarray) -> np.ndarray:
        self._raise()
        if self._stopped:  # no refresh keeps a cache fresh any more
            return super().pull_sparse(table, ids)
        uniq, inverse = self._sorted(table, ids)
        with self._lock:
            held, count, rows, at = self._cache.find(table, uniq)
        missing = at < 0
        if self.prefetching and missing.any() and self._take_prefetched(table, uniq[missing]):
            with self._lock:
                held, count, rows, at = self._cache.find(table, uniq, note=False)
            missing = at < 0
        if missing.any():
            wanted = uniq[missing]
            got = self._pull_rows(table, wanted, 0, waited=True)
            with self._lock:
                slots = self._cache.fill(table, held, count, wanted, got)
                now = held.rows
            if slots is None:  # the cache changed meanwhile: the rows it had at the lookup, and those pulled
                out = np.empty((len(uniq), got.shape[1]), got.dtype)
                out[~missing] = rows[at[~missing]]
                out[missing] = got
                return out.take(inverse, axis=0)
            at[missing] = slots
            rows = now
        return rows.take(at.take(inverse), axis=0)  # each id's row, gathered once from the cache's rows

    def prefetch(self, table: str, ids: np.ndarray) -> None:
        """Note the ids of a coming batch (read ahead), which the cache keeps and refreshes until it ran; once
        ``prefetch // 2`` batches are noted, start pulling the rows of theirs the cache lacks, in one request per
        server, without waiting. The lookup that needs them takes them (AsyncExecutor's thread workers call this
        ``prefetch`` batches ahead)."""
        if self._stopped or not self.prefetching:
            return
        uniq = unique_ids(np.asarray(ids, np.int64))
        with self._lock:
            self._cache.note(table, uniq)
            coming = self._coming.setdefault(table, [])
            coming.append(uniq)
            if len(coming) >= self._group:
                self._ask_coming(table)

    def push(self, dense: dict[str, np.ndarray], sparse: list[tuple[str, np.ndarray, np.ndarray]], weight: int) -> None:
        self._raise()
        merged = self._merged(sparse)
        self._count_payload(dense, merged)
        start = time.perf_counter()
        self._queue.put((dense, merged, weight))  # blocks while the queue is full: backpressure
        self.stats["wait_s"] += time.perf_counter() - start
        self._stepped()

    def pull_dense(self, names: Sequence[str]) -> dict[str, np.ndarray] | None:
        self._raise()
        with self._lock:
            fresh, self._fresh = self._fresh, None
            if fresh is not None:
                self._installed = fresh[0]
            self.stats["stale_steps"] += self.steps - self._installed
        return None if fresh is None else fresh[1]

    def stop(self) -> None:
        """Push what is queued and what the window holds, end the communicator thread and drop the cached rows
        (lookups go to the servers from now on); raise the thread's error, if it had one."""
        if self._thread.is_alive():
            self._queue.put(_STOP)
            self._thread.join()
        with self._lock:
            self._stopped = True
            self._cache = self._new_cache()
            self._coming, self._prefetching = {}, {}
        self._raise()

    # -- inside ------------------------------------------------------------------------------------------
    def _ask_coming(self, table: str) -> None:
        """(Holding the lock.) Start pulling the rows of the noted batches' ids of ``table`` that the cache lacks
        and no prefetch is bringing."""
        coming = self._coming.pop(table, [])
        if not coming:
            return
        missing = self._not_on_their_way(table, self._cache.missing(table, _union(coming)))
        pending = self._prefetching.setdefault(table, [])
        for k, part in enumerate(_by_server(missing, len(self.handles))):
            if part.size:
                pending.append((part, self.transport.submit(k, ParameterServerAPI.pull_sparse, table, part, 0)))

    def _not_on_their_way(self, table: str, ids: np.ndarray) -> np.ndarray:
        """(Holding the lock.) Those of ``ids`` whose rows no prefetch of ``table`` is bringing."""
        pending = self._prefetching.get(table)
        return ids[~np.isin(ids, np.concatenate([i for i, _ in pending]))] if pending else ids

    def _forget_rows(self, server: int) -> None:
        """Server ``server`` came back restarted from a checkpoint, without the updates it applied after it: every
        cached row is dropped (a kept one may hold values the server lost), and pulled again as the servers now
        have it."""
        with self._lock:
            self._cache = self._new_cache()

    def _new_cache(self) -> _RowCache:
        """An empty cache; it keeps a noted batch's ids as many windows as the batch can take to run (at most
        ``prefetch`` batches later)."""
        windows = 1 + -(-self.prefetching // self.pull_every)
        return _RowCache(self._dims, windows, self._heights, kept=self.cache_windows)

    def _take_prefetched(self, table: str, missing: np.ndarray) -> bool:
        """Put into the cache the prefetched rows of ``table`` that hold some of ``missing`` (waiting for those
        still on their way; noted ids not yet asked for are asked for first); the others stay on their way, for
        the lookups that need them. Whether any was."""
        with self._lock:
            if any(np.isin(ids, missing).any() for ids in self._coming.get(table, ())):
                self._ask_coming(table)
            pending = self._prefetching.get(table, [])
            holds = [np.isin(ids, missing, assume_unique=True).any() for ids, _ in pending]
            needed = [p for p, held in zip(pending, holds) if held]
            if not needed:
                return False
            self._prefetching[table] = [p for p, held in zip(pending, holds) if not held]
        for ids, call in needed:
            rows = self.transport.result(call, waited=True)
            self.stats["prefetched_rows"] += len(ids)
            with self._lock:
                self._cache.insert(table, ids, rows)  # a row the cache has is as fresh or fresher: kept
        return True

    def _work(self) -> None:
        """The communicator thread: merge what is queued into the window; at its end (``pull_every`` steps) push
        the window and pull, in one exchange; at the stop, push what the window holds."""
        window: list[Any] = []
        exchanged = 0  # steps pushed in exchanges
        try:
            while (item := self._queue.get()) is not _STOP:
                window.append(item)
                if len(window) == self.pull_every:
                    exchanged += len(window)
                    self._exchange(exchanged, *_merge_steps(window))
                    window = []
            if window:
                self._send(*_merge_steps(window), waited=False)
        except BaseException as e:  # raised to the worker at its next call
            self._error = e
            while True:  # unblock a worker waiting on a full queue
                try:
                    self._queue.get_nowait()
                except queue.Empty:
                    break

    def _exchange(
        self, steps: int, dense: dict[str, np.ndarray], sparse: dict[str, tuple[np.ndarray, np.ndarray]], weight: int
    ) -> None:
        """The end of a window of ``pull_every`` steps (the worker's first ``steps`` steps pushed with it): push,
        and in the same request to each server pull the dense parameters, for the next ``recv``, and the rows of
        the ids the window used, which replace the cache (ids it did not use leave it)."""
        servers = len(self.handles)
        with self._lock:
            used = self._cache.take_used()
            used = {t: self._not_on_their_way(t, ids) for t, ids in used.items()}  # not asked for twice
        parts = {t: _by_server(ids, servers) for t, ids in used.items()}
        wanted = [{t: p[k] for t, p in parts.items()} for k in range(servers)]
        got: dict[str, np.ndarray] = {}
        pieces: dict[str, list[tuple[np.ndarray, np.ndarray]]] = {t: [] for t in used}
        for k, call in enumerate(self._exchanges(dense, sparse, weight, wanted)):
            _, dense_values, row_values = self.transport.result(call, waited=False)
            got.update(dense_values)
            for t, values in row_values.items():
                pieces[t].append((wanted[k][t], values))
        rows = {t: _gathered(ids, pieces[t], self._dims[t]) for t, ids in used.items()}
        with self._lock:
            self._fresh = (steps, self._joined(got, self._blocks))
            self._cache.replace({t: (used[t], rows[t]) for t in used})

    def _raise(self) -> None:
        if self._error is not None:
            error, self._error = self._error, None
            raise BlockirError(f"worker {self.worker}'s communicator failed: {error}") from error


class GeoCommunicator(Communicator):
    """GEO-SGD: the worker trains locally; every ``k_steps`` steps (``geo_sync``) it pushes the deltas of its
    parameters and of the table rows its lookups read since the last exchange, and takes the servers' values."""

    mode = "geo"

    def __init__(
        self, split: Split, handles: Sequence[ServerHandle], worker: int, k_steps: int = 1, timeout: float = 300.0
    ) -> None:
        if k_steps < 1:
            raise BlockirError(f"k_steps must be at least 1, got {k_steps}")
        super().__init__(split, handles, worker, timeout)
        self.k_steps = k_steps
        self._snapshot: dict[str, np.ndarray] = {}  # the parameters and tables as of the last exchange
        self._params: dict[str, Any] | None = None  # the arrays of the last step, for the exchange at stop
        self._touched: dict[str, list[np.ndarray]] = {}  # the ids the lookups read since then

    def push(self, dense: dict[str, np.ndarray], sparse: list[tuple[str, np.ndarray, np.ndarray]], weight: int) -> None:
        raise BlockirError("a GEO worker exchanges deltas (geo_sync), it does not send gradients")

    def pull_dense(self, names: Sequence[str]) -> dict[str, np.ndarray] | None:
        raise BlockirError("a GEO worker takes the servers' values at its exchanges (geo_sync), it has no recv")

    def geo_step(self, params: dict[str, Any], touched: dict[str, np.ndarray]) -> None:
        for table, ids in touched.items():
            self._touched.setdefault(table, []).append(ids)
        self._params = params
        if (self.steps + 1) % self.k_steps == 0:
            self._exchange(params)
        self._stepped()

    def init_geo(self, values: dict[str, np.ndarray], first: bool) -> dict[str, np.ndarray]:
        """GEO's start: worker 0 (``first``) gives the servers its dense parameters and whole tables, the others
        take them; every worker keeps what it starts from as the base of its first deltas."""
        tables = {t.name for t in self.split.tables}
        if first:
            self.init_dense({n: v for n, v in values.items() if n not in tables})
            calls = []
            for table in tables:
                ids = np.arange(len(values[table]), dtype=np.int64)
                for k, mine in enumerate(_by_server(ids, len(self.handles))):
                    rows = np.asarray(values[table])[mine]
                    calls.append(self.transport.submit(k, ParameterServerAPI.init_rows, table, mine, rows))
            for call in calls:
                self.transport.result(call, waited=True)
            start = {n: np.array(v, copy=True) for n, v in values.items()}
        else:
            start = self.pull_all()
            for table in tables:
                start[table] = self._pull_rows(table, np.arange(len(values[table]), dtype=np.int64), 0, waited=True)
        self._snapshot = {n: np.array(v, copy=True) for n, v in start.items()}
        return start

    def stop(self) -> None:
        """Push the deltas of the steps since the last exchange."""
        if self._params is not None and self.steps % self.k_steps:
            self._exchange(self._params)
        self._params = None

    def _exchange(self, params: dict[str, Any]) -> None:
        """Push the deltas since the last exchange; take the servers' values, into ``params`` and the base."""
        tables = {t.name for t in self.split.tables}
        dense = {n: np.asarray(v) - self._snapshot[n] for n, v in params.items() if n not in tables}
        rows = {t: unique_ids(np.concatenate(parts)) for t, parts in self._touched.items()}
        self._touched = {}
        sparse = {t: (ids, np.asarray(params[t])[ids] - self._snapshot[t][ids]) for t, ids in rows.items()}
        self._count_payload(dense, sparse)
        self._send(dense, sparse, 1, waited=True)
        for name, value in self._pull(list(dense), 0, waited=True).items():
            params[name][...] = value
            self._snapshot[name] = np.array(value, copy=True)
        for table, ids in rows.items():
            value = self._pull_rows(table, ids, 0, waited=True)
            params[table][ids] = value
            self._snapshot[table][ids] = value


def new_communicator(
    split: Split,
    handles: Sequence[ServerHandle],
    worker: int,
    mode: str = "async",
    *,
    pull_every: int = PULL_EVERY,
    queue_size: int | None = None,
    prefetch: int = 0,
    cache_windows: int = CACHE_WINDOWS,
    k_steps: int = 1,
    timeout: float = 300.0,
) -> Communicator:
    """The communicator of ``mode`` (``sync``, ``async`` or ``geo``) with that mode's settings (those of another
    mode are not used)."""
    if mode == "sync":
        return SyncCommunicator(split, handles, worker, timeout)
    if mode == "async":
        return AsyncCommunicator(split, handles, worker, pull_every, queue_size, prefetch, timeout, cache_windows)
    if mode == "geo":
        return GeoCommunicator(split, handles, worker, k_steps, timeout)
    raise BlockirError(f"unknown parameter-server mode {mode!r} (expected sync, async or geo)")


class _TableRows:
    """The cached rows of one table: ``rows[slots[i]]`` is the row of ``keys[i]``, the ``keys`` sorted ascending and
    distinct. A look-up is one ``np.searchsorted`` of the batch's sorted ids; an insert appends the rows (an
    array that grows takes room for twice the rows it then holds) and merges the keys and their slots (16 bytes
    per cached id moved, never a row); a cache made from a refresh's sorted ids takes its rows as they are,
    without a copy."""

    def __init__(self, keys: np.ndarray, rows: np.ndarray) -> None:
        self.keys = keys  # sorted, distinct
        self.slots = np.arange(len(keys), dtype=np.int64)  # the row of each key
        self.rows = rows  # rows[:count] hold values; the rest is room to grow
        self.count = len(keys)

    def find(self, ids: np.ndarray) -> np.ndarray:
        """The row of each of ``ids`` (-1 for an id not held)."""
        n = self.keys.size
        if n == 0:
            return np.full(len(ids), -1, np.int64)
        pos = self.keys.searchsorted(ids)
        np.minimum(pos, n - 1, out=pos)
        return np.where(self.keys.take(pos) == ids, self.slots.take(pos), -1)

    def renewed(self, keys: np.ndarray, rows: np.ndarray) -> _TableRows:
        """A store of the refreshed ``rows`` of ``keys`` (sorted, distinct), taken as they are, in place of this one
        (which stays as it is: a lookup may still read it)."""
        return _TableRows(keys, rows)

    def add(self, ids: np.ndarray, rows: np.ndarray, at: np.ndarray | None = None) -> None:
        """Hold the ``rows`` of ``ids`` (sorted, distinct, none held; ``at``: ``rows[at]`` are theirs, gathered
        straight into the store); the rows' dtype becomes that of ``rows``. An array that grows takes room for as
        many rows again as it then holds (a window's refresh and the lookups that follow it add to it: a few
        adds, one copy)."""
        n = len(ids)
        if n == 0:
            return
        self.rows, end = _appended(self.rows, self.count, n, rows, at)
        at = self.keys.searchsorted(ids)  # where each goes among the keys held; then among all the keys
        at += np.arange(n)
        held = np.ones(len(self.keys) + n, bool)
        held[at] = False
        keys, slots = np.empty(len(held), np.int64), np.empty(len(held), np.int64)
        keys[at], keys[held] = ids, self.keys
        slots[at], slots[held] = np.arange(self.count, end), self.slots
        self.keys, self.slots, self.count = keys, slots, end


MAPPED_HEIGHT = 1 << 20  # a table of at most so many ids has its cached rows found through an array by id


class _MappedRows:
    """The cached rows of a table of ``len(where)`` ids (at most :data:`MAPPED_HEIGHT`), as :class:`_TableRows`
    holds them, found through ``where``, the row of every id of the table (-1: not held), which the stores of
    the table's successive refreshes share (each :meth:`renewed` clears its ids from it and puts the new
    store's): a look-up is one ``take``, an insert one assignment, whatever the ids held (no search among sorted
    keys, no merge of them). ``ids[:count]`` are the ids held, by row. Ids outside the table (which only a
    batch read ahead can bring: a lookup checks them) are not held: found missing, never added."""

    def __init__(self, keys: np.ndarray, rows: np.ndarray, where: np.ndarray) -> None:
        lo, hi = _in_range(keys, len(where))
        self.where = where
        self.ids = keys[lo:hi]  # sorted, distinct
        self.rows = rows[lo:hi]  # rows[:count] hold values; the rest is room to grow
        self.count = hi - lo
        where[self.ids] = np.arange(self.count)

    @classmethod
    def empty(cls, height: int, dim: int) -> _MappedRows:
        return cls(np.zeros(0, np.int64), np.zeros((0, dim), np.float32), np.full(height, -1, np.intp))

    def find(self, ids: np.ndarray) -> np.ndarray:
        """The row of each of ``ids`` (sorted; -1 for an id not held)."""
        lo, hi = _in_range(ids, len(self.where))
        if lo == 0 and hi == len(ids):
            return self.where.take(ids)
        at = np.full(len(ids), -1, np.intp)
        at[lo:hi] = self.where.take(ids[lo:hi])
        return at

    def renewed(self, keys: np.ndarray, rows: np.ndarray) -> _MappedRows:
        """A store of the refreshed ``rows`` of ``keys`` (sorted, distinct), taken as they are, in place of this one,
        whose ids leave ``where`` (its rows stay as they are: a lookup may still read them)."""
        self.where[self.ids[: self.count]] = -1
        return _MappedRows(keys, rows, self.where)

    def add(self, ids: np.ndarray, rows: np.ndarray, at: np.ndarray | None = None) -> None:
        """Hold the ``rows`` of ``ids`` (sorted, distinct, none held; those outside the table are left out;
        ``at``: ``rows[at]`` are theirs, gathered straight into the store); the rows' dtype becomes that of
        ``rows``; an array that grows takes room for as many rows again."""
        lo, hi = _in_range(ids, len(self.where))
        if lo or hi < len(ids):
            ids = ids[lo:hi]
            if at is None:
                rows = rows[lo:hi]
            else:
                at = at[lo:hi]
        n = len(ids)
        if n == 0:
            return
        self.rows, end = _appended(self.rows, self.count, n, rows, at)
        if end > len(self.ids):
            self.ids = grown(self.ids[: self.count], len(self.rows))
        self.ids[self.count : end] = ids
        self.where[ids] = np.arange(self.count, end)
        self.count = end


def _appended(store: np.ndarray, count: int, n: int, rows: np.ndarray, at: np.ndarray | None) -> tuple[np.ndarray, int]:
    """A store's array of rows (its first ``count`` held) with ``n`` more after them, and its new count: ``rows``
    (``rows[at]`` when ``at`` is given: gathered in place, the rows ``at`` being valid). The array becomes of
    ``rows``' dtype; one that grows takes room for ``2 * (count + n)`` rows."""
    end = count + n
    if store.dtype != rows.dtype:
        store = store[:count].astype(rows.dtype)
    if end > len(store):
        store = grown(store[:count], 2 * end)
    into = store[count:end]
    if at is None:
        into[...] = rows
    else:
        rows.take(at, axis=0, out=into, mode="clip")  # (mode "raise" would gather into a buffer first)
    return store, end


def _in_range(ids: np.ndarray, height: int) -> tuple[int, int]:
    """Of sorted ``ids``, the slice of those in ``0..height-1``."""
    n = len(ids)
    if n == 0 or (ids[0] >= 0 and ids[-1] < height):
        return 0, n
    return int(ids.searchsorted(0)), int(ids.searchsorted(height))


class _RowCache:
    """Async mode: the rows a worker pulled, by table (a :class:`_MappedRows` each for a table of at most
    :data:`MAPPED_HEIGHT` ids, whose ``heights`` are given, else a :class:`_TableRows`: a step costs a look-up of
    its ids among the cached ones, the rows it gathers and those it adds), the ids the current window of
    ``pull_every`` steps used and those each of the ``kept - 1`` windows before it used, and those of the batches
    read ahead (noted) in the last ``windows`` windows; the communicator thread replaces it at the window's end.
    Every array of ids given to it is sorted and distinct, as ``np.unique`` makes them. Not thread-safe: every call
    holds the communicator's lock.

    Its ordering rules (what makes a row the window used at most a window stale, a prefetched one a window and
    ``prefetch`` batches, a row kept unused at most ``kept`` windows, and a lookup never find a row it needs
    dropped):

    1. :meth:`note` comes before the noted batch runs (a reader thread notes the batch it reads ahead); a noted
       id is refreshed and kept for ``windows`` windows, as long as the batch can take to run.
    2. :meth:`take_used` comes at a window's end, before its exchange is sent, in the communicator thread: the
       ids it returns (used in the window or noted) are those the exchange asks for; the uses and notes after it
       belong to the next window.
    3. :meth:`replace` comes once that exchange answered, in the same thread, before the next :meth:`take_used`:
       the refreshed rows replace the cache's; a row used or noted between :meth:`take_used` and
       :meth:`replace` (so not asked for) is kept as it was, never dropped, and so is a row whose id one of the
       ``kept - 1`` windows before this one used (not refreshed: as the servers had it when it last was); every
       other row leaves.
    4. :meth:`insert` of a looked-up or prefetched row keeps a row the cache already has: a prefetch asked for
       before the last refresh may answer after it, and the refreshed row is the newer.
    """

    def __init__(
        self, dims: dict[str, int], windows: int, heights: dict[str, int] | None = None, kept: int = 1
    ) -> None:
        heights = heights or {}
        self.tables: dict[str, _TableRows | _MappedRows] = {
            t: _MappedRows.empty(heights[t], d)
            if 0 < heights.get(t, 0) <= MAPPED_HEIGHT
            else _TableRows(np.zeros(0, np.int64), np.zeros((0, d), np.float32))
            for t, d in dims.items()
        }
        self.used: dict[str, list[np.ndarray]] = {t: [] for t in dims}
        self.recent: collections.deque[dict[str, np.ndarray]] = collections.deque(maxlen=kept)  # windows' ids used
        self.noted: collections.deque[dict[str, list[np.ndarray]]] = collections.deque(maxlen=windows)
        self.noted.append({t: [] for t in dims})

    def note(self, table: str, uniq: np.ndarray) -> None:
        """The ids of a batch read ahead: kept, and refreshed with the used ones, for ``windows`` windows."""
        self.noted[-1][table].append(uniq)

    def lookup(self, table: str, uniq: np.ndarray, note: bool = True) -> tuple[np.ndarray, np.ndarray]:
        """Rows for the distinct ``uniq`` (zeros where missing), and which are missing (a mask); notes them used
        (unless ``note`` is False: a second lookup of the same ids)."""
        _, count, rows, at = self.find(table, uniq, note)
        missing = at < 0
        if count == 0:
            return np.zeros((len(uniq), rows.shape[1]), rows.dtype), missing
        if not missing.any():
            return rows.take(at, axis=0), missing
        out = rows.take(np.where(missing, 0, at), axis=0)
        out[missing] = 0
        return out, missing

    def find(
        self, table: str, uniq: np.ndarray, note: bool = True
    ) -> tuple[_TableRows | _MappedRows, int, np.ndarray, np.ndarray]:
        """Where the rows of the distinct ``uniq`` are: the table's store, the rows it holds, its array of rows
        and the row of each of ``uniq`` in it (-1 where missing); notes them used (unless ``note`` is False: a
        second lookup of the same ids). The array's rows up to the count never change (a store only adds rows,
        and a refresh makes another store): they can be read after the lock is released."""
        if note:
            self.used[table].append(uniq)
        held = self.tables[table]
        return held, held.count, held.rows, held.find(uniq)

    def fill(
        self, table: str, held: _TableRows | _MappedRows, count: int, ids: np.ndarray, rows: np.ndarray
    ) -> np.ndarray | None:
        """Add the ``rows`` of the distinct ``ids`` that :meth:`find` found missing in ``held`` when it held
        ``count`` rows. Where ``held`` is still the table's store and has not grown since, none of ``ids`` is
        held: their rows are added, and where they went returned (their rows in ``held.rows``); else (or where
        some were not added: ids outside the table) they are inserted as :meth:`insert` does, and None
        returned."""
        if self.tables[table] is held and held.count == count:
            held.add(ids, rows)
            return np.arange(count, count + len(ids)) if held.count == count + len(ids) else None
        self.insert(table, ids, rows)
        return None

    def missing(self, table: str, uniq: np.ndarray) -> np.ndarray:
        """Of the distinct ``uniq``, the ids the cache lacks."""
        return uniq[self.tables[table].find(uniq) < 0]

    def insert(self, table: str, ids: np.ndarray, rows: np.ndarray) -> None:
        """Add the rows of the distinct ``ids`` it lacks; a row it has is kept (rule 4)."""
        held = self.tables[table]
        new = held.find(ids) < 0
        if new.all():
            held.add(ids, rows)
        else:
            held.add(ids[new], rows[new])

    def take_used(self) -> dict[str, np.ndarray]:
        """The ids the window used or that batches read ahead will use (those to refresh), sorted; a new window
        starts."""
        window = {t: _union(p) for t, p in self.used.items() if p}
        self.recent.append(window)
        parts = {t: [ids] for t, ids in window.items()}
        for noted in self.noted:
            for t, p in noted.items():
                parts.setdefault(t, []).extend(p)
        self.used = {t: [] for t in self.used}
        self.noted.append({t: [] for t in self.used})
        return {t: _union(p) for t, p in parts.items() if p}

    def replace(self, fresh: dict[str, tuple[np.ndarray, np.ndarray]]) -> None:
        """The refreshed rows (sorted distinct ids; the arrays are taken, not copied); the rows of the ids used in
        the ``kept - 1`` windows before and since the refresh began that it did not cover stay as they were."""
        for table, old in self.tables.items():
            ids, rows = fresh.get(table, (np.zeros(0, np.int64), old.rows[:0]))
            recent = [w[table] for w in self.recent if table in w] + self.used[table] + self.noted[-1][table]
            kept = _union(recent) if recent else None
            at = old.find(kept) if kept is not None else None  # (before the new store: it may take old's map)
            new = self.tables[table] = old.renewed(ids, rows)
            if kept is not None and at is not None:
                keep = (at >= 0) & (new.find(kept) < 0)  # those refreshed are kept as refreshed
                if not keep.all():
                    kept, at = kept[keep], at[keep]
                new.add(kept, old.rows, at)


def _union(parts: list[np.ndarray]) -> np.ndarray:
    """The ids of ``parts`` (each sorted and distinct), sorted and distinct."""
    return parts[0] if len(parts) == 1 else unique_ids(np.concatenate(parts))


def _nbytes(value: Any) -> int:
    """The bytes of the arrays in ``value`` (an array, or a dict, list or tuple of them, nested)."""
    if isinstance(value, np.ndarray):
        return value.nbytes
    if isinstance(value, dict):
        value = value.values()
    elif not isinstance(value, (list, tuple)):
        return 0
    total = 0
    for v in value:
        if type(v) is np.ndarray:  # (the usual item: one test)
            total += v.nbytes
        elif isinstance(v, (np.ndarray, dict, list, tuple)):
            total += _nbytes(v)
    return total


def _by_server(ids: np.ndarray, servers: int) -> list[np.ndarray]:
    """The ids each server holds (``id % servers``), in their order (one server: ``ids`` itself)."""
    if servers == 1:
        return [ids]
    owner = ids % servers
    return [ids[owner == k] for k in range(servers)]


def _join(parts: list[np.ndarray]) -> np.ndarray:
    return parts[0] if len(parts) == 1 else np.concatenate(parts)


def _gathered(ids: np.ndarray, pieces: list[tuple[np.ndarray, np.ndarray]], dim: int) -> np.ndarray:
    """The rows of the sorted distinct ``ids`` from ``pieces``, each the ids a server was asked for (in their
    order) and its rows: one piece of them all taken as it comes, else each put at its ids (zeros where no piece
    has an id; the rows' dtype, float32 when there are none)."""
    pieces = [(part, values) for part, values in pieces if len(part)]
    if len(pieces) == 1 and len(pieces[0][0]) == len(ids):
        return pieces[0][1]
    rows = np.zeros((len(ids), dim), pieces[0][1].dtype if pieces else np.float32)
    for part, values in pieces:
        rows[np.searchsorted(ids, part)] = values
    return rows


def _merge_sparse(
    sparse: list[tuple[str, np.ndarray, np.ndarray]],
    sorts: dict[str, tuple[np.ndarray, SortedIds]] | None = None,
) -> dict[str, tuple[np.ndarray, np.ndarray]]:
    """One (ids, rows) per table, duplicates summed (a table looked up twice in a step gives two entries); a
    table of one entry whose ids are those of ``sorts`` (table -> ids and their sort: the lookup's) is merged by
    that sort, without sorting its ids again."""
    by_table: dict[str, tuple[list[np.ndarray], list[np.ndarray]]] = {}
    for table, ids, rows in sparse:
        parts = by_table.setdefault(table, ([], []))
        parts[0].append(np.asarray(ids, np.int64))
        parts[1].append(np.asarray(rows))
    merged = {}
    for table, (id_parts, row_parts) in by_table.items():
        if len(id_parts) > 1:
            merged[table] = merge_rows(np.concatenate(id_parts), np.concatenate(row_parts))
            continue
        ids, known = id_parts[0], sorts.get(table) if sorts is not None else None
        same = known is not None and known[0].shape == ids.shape and bool((known[0] == ids).all())
        merged[table] = merge_rows(ids, row_parts[0], known[1] if known is not None and same else None)
    return merged


def _merge_steps(
    steps: list[tuple[dict[str, np.ndarray], dict[str, tuple[np.ndarray, np.ndarray]], int]],
) -> tuple[dict[str, np.ndarray], dict[str, tuple[np.ndarray, np.ndarray]], int]:
    """Several queued steps as one push: dense gradients summed, sparse rows merged, batches added."""
    if len(steps) == 1:
        return steps[0]
    dense: dict[str, np.ndarray] = {}
    by_table: dict[str, list[tuple[np.ndarray, np.ndarray]]] = {}
    for grads, rows, _ in steps:
        for name, g in grads.items():
            if name in dense:
                dense[name] += g
            else:
                dense[name] = g.copy()
        for table, pair in rows.items():
            by_table.setdefault(table, []).append(pair)
    return dense, {t: _sum_distinct(parts) for t, parts in by_table.items()}, sum(w for _, _, w in steps)


def _sum_distinct(parts: list[tuple[np.ndarray, np.ndarray]]) -> tuple[np.ndarray, np.ndarray]:
    """The rows of several merged pushes (no id twice in one) summed by id, ids sorted. A push's ids being
    distinct, its rows add with one fancy-indexed ``+=`` (several times faster than ``add.at`` over all)."""
    if len(parts) == 1:
        return parts[0]
    uniq, inverse = np.unique(np.concatenate([ids for ids, _ in parts]), return_inverse=True)
    out = np.zeros((len(uniq), *parts[0][1].shape[1:]), np.result_type(*(rows.dtype for _, rows in parts)))
    start = 0
    for ids, rows in parts:
        out[inverse[start : start + len(ids)]] += rows
        start += len(ids)
    return uniq, out
