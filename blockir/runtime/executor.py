"""The executor: runs programs on a place, through plans compiled once and cached."""

from __future__ import annotations

import os
import weakref
from collections.abc import Iterable, Mapping
from typing import Any, TypeVar

from blockir.errors import BlockirError
from blockir.ir.core import Program, Variable
from blockir.ir.defaults import default_main_program
from blockir.ir.devices import HOST, checked_device
from blockir.passes.copies import InsertCopies
from blockir.passes.place import Place as PlacePass
from blockir.passes.streams import STREAM_ATTR, Streams
from blockir.runtime.device import get_device, value_device
from blockir.runtime.place import Place, as_place
from blockir.runtime.plan import SCHEDULERS, Plan, check_block, compile_plan
from blockir.runtime.scheduler import WorkerPool
from blockir.runtime.scope import Scope, global_scope
from blockir.runtime.trace import Tracer

__all__ = ["Executor"]

T = TypeVar("T")


def _name(target: Any) -> str:
    """The variable name a fetch-list entry stands for (a name, or anything with ``.name``)."""
    name = target if isinstance(target, str) else getattr(target, "name", None)
    if not isinstance(name, str):
        raise BlockirError(f"fetch_list entries must be variable names or variables, got {target!r}")
    return name


def _remember(cache: dict[Any, T], key: tuple, value: T, limit: int) -> T:
    """Store ``value`` under ``key`` = ``(id(program), program.mutation, ...)`` in a cache of at most ``limit``."""
    # Entries of earlier states of this program can never be used again (mutation counters only grow).
    for old in [k for k in cache if k[0] == key[0] and k[1] != key[1]]:
        del cache[old]
    while len(cache) >= limit:
        del cache[next(iter(cache))]
    cache[key] = value
    return value


def _program_var(program: Program, name: str) -> Variable:
    block = program.global_block()
    if name not in block.vars:
        raise BlockirError(f"feed {name!r} is not a variable of the program")
    return block.vars[name]


def _off_host(program: Program) -> bool:
    """Whether any op, block, variable or the program itself names a device other than the host."""
    devices = {
        program.device,
        *(b.device for b in program.blocks),
        *(op.device for op in program.ops()),
        *(v.device for v in program.list_vars()),
    }
    return any(checked_device(d, "a device of the program") != HOST for d in devices if d)


class Executor:
    """Runs programs, Fluid's ``Executor``; ``place`` (``"cpu"``, ``"cpu:2"``, ``"cuda:0"``, ``CPUPlace()``)
    is where ops that the program places nowhere run.

    A program with anything off the host (an op, block, variable or program
    device, or an executor place other than ``cpu``) runs as the default
    pipeline, ``place{default=PLACE},insert-copies,streams{compute=N}``, transforms a
    clone of it; the program itself is never changed. Each program block is
    compiled into a :class:`~blockir.runtime.plan.Plan` once per (program,
    program state, feed names, fetch names) and the plan is cached; a program
    changed through the IR API is transformed and compiled again on its next
    run. The cache keeps the plans of at most ``max_plans`` program states.

    The ``streams`` pass of that pipeline gives each device ``compute_streams``
    compute streams (independent branches round-robin over them: with more
    than one, host programs go through the pipeline too); a program whose ops
    all have an ``op_stream`` already keeps its streams.

    ``scheduler="dataflow"`` (the default) runs the ops of a block that spans
    several streams as a dataflow: the host stream on the calling thread, other
    CPU streams on worker threads (at most ``num_threads``; None: one per
    stream), CUDA streams by asynchronous launches, each op starting once what
    it depends on is done (:mod:`blockir.runtime.scheduler`); a block on one
    stream runs in program order either way. ``scheduler="sequential"`` runs
    every block in program order on the calling thread; the results are the
    same. The workers are threads of this executor, idle between runs; they end
    with :meth:`close` (or the ``with`` block, or when the executor is
    collected).

    ``check_nan_inf=True`` (Fluid's ``FLAGS_check_nan_inf``) stops a run at the
    first op that produces NaN or inf in an output variable that anything reads:
    :class:`~blockir.errors.NanInfError` (an ``ExecutionError``) names the op in
    its text form, each such output with its NaN and inf counts, and each input
    (name, dtype, shape, min, max and mean of its finite elements, NaN and inf
    counts). Ops of go and select blocks are checked too; copies and the
    concurrency ops themselves are not (they make no new values). Values are
    tested on their device, with its array module. The check is compiled into
    the plans: with it off (the default) they hold the kernels themselves and
    cost nothing more; with it on, every op's outputs are scanned once and no
    kernel writes into its dead inputs. The attribute may be changed between
    runs (plans are cached per setting).
    """

    def __init__(
        self,
        place: str | Place = "cpu",
        max_plans: int = 64,
        scheduler: str = "dataflow",
        num_threads: int | None = None,
        compute_streams: int = 1,
        check_nan_inf: bool = False,
    ) -> None:
        if not isinstance(max_plans, int) or max_plans < 1:
            raise BlockirError(f"max_plans must be a positive int, got {max_plans!r}")
        if scheduler not in SCHEDULERS:
            raise BlockirError(f"scheduler must be one of {', '.join(SCHEDULERS)}, got {scheduler!r}")
        if num_threads is not None and (not isinstance(num_threads, int) or num_threads < 1):
            raise BlockirError(f"num_threads must be a positive int or None, got {num_threads!r}")
        self._streams = Streams(compute=compute_streams)  # checks compute_streams
        self.place: Place = as_place(place)
        get_device(str(self.place), "the executor's place")  # an error now when this machine lacks it
        self.max_plans = max_plans
        self.scheduler = scheduler
        self.num_threads = num_threads
        self.check_nan_inf = check_nan_inf
        self._pool = WorkerPool()
        self._finalizer = weakref.finalize(self, self._pool.close)
        self._plans: dict[tuple, Plan] = {}  # (id, mutation, feed names, fetch names, GPU feeds, check) -> plan
        self._placements: dict[tuple, Program] = {}  # (id, mutation, GPU feeds) -> the program as it runs

    def plan(self, program: Program, feed_names: Iterable[str] = (), fetch_list: Iterable[Any] | None = None) -> Plan:
        """The (cached) plan that :meth:`run` uses for these feed names and fetch targets."""
        fetch = None if fetch_list is None else tuple(_name(f) for f in fetch_list)
        return self._plan(program, frozenset(feed_names), fetch)

    def _plan(
        self,
        program: Program,
        feed_names: frozenset[str],
        fetch: tuple[str, ...] | None,
        on_gpu: frozenset[tuple[str, str]] = frozenset(),
    ) -> Plan:
        check_nan_inf = bool(self.check_nan_inf)
        key = (id(program), program.mutation, feed_names, fetch, on_gpu, check_nan_inf)
        plan = self._plans.get(key)
        if plan is None:
            plan = _remember(
                self._plans,
                key,
                compile_plan(
                    self._placed(program, on_gpu),
                    feed_names,
                    fetch,
                    self.place,
                    self.scheduler,
                    self.num_threads,
                    check_nan_inf=check_nan_inf,
                ),
                self.max_plans,
            )
        return plan

    def _placed(self, program: Program, on_gpu: frozenset[tuple[str, str]]) -> Program:
        """``program`` itself when it all runs on the host, else its clone through the default pipeline (cached);
        ``on_gpu``: (name, device) of the variables fed with values already on a GPU."""
        if str(self.place) == HOST and self._streams.compute == 1 and not on_gpu and not _off_host(program):
            return program
        key = (id(program), program.mutation, on_gpu)
        placed = self._placements.get(key)
        if placed is None:
            for block in program.blocks:  # errors name the ops as the program has them, before passes trip on them
                check_block(block)
            placed = program.clone()
            for name, device in on_gpu:  # the fed value lives there: copies go from there
                _program_var(placed, name).device = device
            PlacePass(default=str(self.place)).run(placed)
            InsertCopies().run(placed)
            if any(STREAM_ATTR not in op.attrs for op in placed.global_block().ops):
                self._streams.run(placed)  # a program whose ops all have streams keeps them
            _remember(self._placements, key, placed, self.max_plans)
        return placed

    def run(
        self,
        program: Program | None = None,
        feed: Mapping[str, Any] | None = None,
        fetch_list: Iterable[Any] | None = None,
        scope: Scope | None = None,
        return_numpy: bool = True,
        trace: str | os.PathLike[str] | None = None,
    ) -> list[Any]:
        """Run ``program``'s global block once and return the fetched values, in ``fetch_list`` order.

        ``program`` defaults to the DSL's default main program. ``feed`` maps
        variable names to numpy arrays (or array-likes), ``LoDTensor`` or
        ``SelectedRows``; each is checked against the variable's dtype, shape
        (-1 matches any size) and LoD level. ``fetch_list`` holds names or
        variables; None fetches the targets of the program's ``fetch`` ops, if
        any. Persistable variables are read from and written to ``scope``
        (default: :func:`global_scope`); temporaries are freed after their last
        use and never reach the scope. With ``return_numpy`` fetched LoD
        tensors come back as their data arrays and selected rows as dense
        arrays; otherwise as they are. A failing kernel raises
        :class:`~blockir.errors.ExecutionError` naming the op and its inputs,
        once all other work of the run has stopped. ``trace`` names a file to
        write a Chrome trace-event JSON of the run to (one event per op, on its
        device and stream: :mod:`blockir.runtime.trace`), for Perfetto. The
        program itself is never modified.
        """
        if program is None:
            program = default_main_program()
        elif not isinstance(program, Program):
            raise BlockirError(f"Executor.run needs a Program, got {type(program).__name__}")
        if feed is None:
            feed = {}
        elif not isinstance(feed, Mapping):
            raise BlockirError(f"feed must be a dict of variable name -> value, got {type(feed).__name__}")
        fetch = None if fetch_list is None else tuple(_name(f) for f in fetch_list)
        on_gpu = frozenset((name, device) for name, value in feed.items() if (device := value_device(value)) != HOST)
        plan = self._plan(program, frozenset(feed), fetch, on_gpu)
        if not self._finalizer.alive:
            raise BlockirError("this executor is closed")
        tracer = None if trace is None else Tracer(plan.steps, plan.copies_from)
        fetched = plan.run(feed, global_scope() if scope is None else scope, return_numpy, self._pool, tracer)
        if tracer is not None:
            tracer.write(trace)
        return fetched

    def close(self) -> None:
        """End the worker threads; the executor cannot run programs afterwards. Closing twice is a no-op."""
        self._finalizer()

    def __enter__(self) -> Executor:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def __repr__(self) -> str:
        return f"Executor({str(self.place)!r}, scheduler={self.scheduler!r})"
