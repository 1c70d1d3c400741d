"""The executor: runs programs on a place, through plans compiled once and cached."""

from __future__ import annotations

import dataclasses
import os
import weakref
from collections.abc import Iterable, Mapping, Sequence
from typing import Any, NamedTuple, TypeVar

import numpy as np

from blockir.errors import BlockirError
from blockir.ir.core import Program
from blockir.ir.defaults import default_main_program
from blockir.ir.devices import HOST, checked_device
from blockir.passes.auto_place import AutoPlace
from blockir.passes.manager import PassReport
from blockir.passes.manager import run as run_pipeline
from blockir.passes.pipelines import DefaultDevicePipeline
from blockir.runtime.compiled import (
    AUTO_PLACE_WITH_DATA_PARALLEL,
    BuildStrategy,
    CompiledProgram,
    Fusions,
    build_strategy_or_default,
    fuse_pipeline,
)
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


def _off_host(program: Program) -> bool:
    """Whether any op, block, variable or the program itself names a device other than the host."""
    devices = {
        program.device,
        *(b.device for b in program.blocks),
        *(op.device for op in program.ops()),
        *(v.device for v in program.list_vars()),
    }
    return any(checked_device(d, "a device of the program") != HOST for d in devices if d)


_NONE: frozenset[tuple[str, str]] = frozenset()


def _on_gpu(feed: Mapping[str, Any]) -> frozenset[tuple[str, str]]:
    """(name, device) of the values of ``feed`` that are not on the host."""
    if all(type(value) is np.ndarray for value in feed.values()):  # the common case, first: every run asks
        return _NONE
    return frozenset((name, device) for name, value in feed.items() if (device := value_device(value)) != HOST)


class _Prepared(NamedTuple):
    program: Program  # what the plans are compiled from: the pipeline's result, or the program itself
    report: PassReport  # the report of the pipeline that made it


class Executor:
    """Runs programs, Fluid's ``Executor``; ``place`` (``"cpu"``, ``"cpu:2"``, ``"cuda:0"``, ``CPUPlace()``)
    is where ops that the program places nowhere run.

    A program runs as a pipeline of passes makes of it, through the pass
    manager in its cheap mode (no snapshots) on a clone; the program itself is
    never changed. First the fusion passes ``build_strategy`` asks for (a
    :class:`~blockir.runtime.compiled.BuildStrategy`, every fusion on by
    default; a :class:`~blockir.runtime.compiled.CompiledProgram` brings its
    own): ``fuse{keep=FETCHED,FED ...}`` (:mod:`blockir.passes.fuse`), which
    never fuses away a value the run fetches or feeds. Then, for a program
    with anything off the host (an op, block, variable or program device, an
    executor place other than ``cpu``, more than one compute stream, or a
    value fed already on a GPU), the named pipeline
    ``default-device-pipeline{default=PLACE compute=N fed=NAME@DEVICE,...}``
    (:mod:`blockir.passes.pipelines`: ``place``, ``insert-copies``,
    ``streams``). A program needing neither runs as it is (the empty
    pipeline). :meth:`pass_report` gives the pipeline's
    :class:`~blockir.passes.PassReport` (its ``pipeline`` is the string
    ``blockir opt -p`` reruns) and :meth:`compiled_program` its result.
    Each program block is compiled into a :class:`~blockir.runtime.plan.Plan`
    once per (program, program state, feed names, fetch names, fusion flags)
    and the plan is cached; a program changed through the IR API is
    transformed and compiled again on its next run. The cache keeps the plans
    of at most ``max_plans`` program states.

    The ``streams`` pass of that pipeline gives each device ``compute_streams``
    compute streams (independent branches round-robin over them); a block whose
    ops all have an ``op_stream`` already keeps its streams.

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
        build_strategy: BuildStrategy | None = None,
    ) -> None:
        if not isinstance(max_plans, int) or max_plans < 1:
            raise BlockirError(f"max_plans must be a positive int, got {max_plans!r}")
        if scheduler not in SCHEDULERS:
            raise BlockirError(f"scheduler must be one of {', '.join(SCHEDULERS)}, got {scheduler!r}")
        if num_threads is not None and (not isinstance(num_threads, int) or num_threads < 1):
            raise BlockirError(f"num_threads must be a positive int or None, got {num_threads!r}")
        self.place: Place = as_place(place)
        self._pipeline = DefaultDevicePipeline(default=str(self.place), compute=compute_streams)  # checks them
        get_device(str(self.place), "the executor's place")  # an error now when this machine lacks it
        self.max_plans = max_plans
        self.scheduler = scheduler
        self.num_threads = num_threads
        self.check_nan_inf = check_nan_inf
        self.build_strategy = build_strategy_or_default(build_strategy)
        self._pool = WorkerPool()
        self._finalizer = weakref.finalize(self, self._pool.close)
        # (id, mutation, feed names, fetch names, GPU feeds, fusions, check) -> plan
        self._plans: dict[tuple, Plan] = {}
        # (id, mutation, GPU feeds, the fuse pipeline: its flags and the names it keeps) -> the program as it runs
        self._prepared: dict[tuple, _Prepared] = {}
        # (id, mutation, devices, batch) -> the cost file of this machine's calibration on it (auto-placement)
        self._calibrated: dict[tuple, str] = {}

    def plan(self, program: Program, feed_names: Iterable[str] = (), fetch_list: Iterable[Any] | None = None) -> Plan:
        """The (cached) plan that :meth:`run` uses for these feed names and fetch targets. With
        ``BuildStrategy.auto_place`` and no cost file, what a run calibrated (no values are fed here to
        calibrate with): before any run, the placement of the cost model's fallback."""
        fetch = None if fetch_list is None else tuple(_name(f) for f in fetch_list)
        auto = self._auto_place(program, self.build_strategy, None, fetch, None)
        return self._plan(program, frozenset(feed_names), fetch, auto=auto)

    def _plan(
        self,
        program: Program,
        feed_names: frozenset[str],
        fetch: tuple[str, ...] | None,
        on_gpu: frozenset[tuple[str, str]] = frozenset(),
        fusions: Fusions | None = None,
        auto: AutoPlace | None = None,
    ) -> Plan:
        """The plan for these feeds and fetch targets; ``fusions`` (default: the executor's build strategy's)
        say which fusion passes run, ``auto`` the auto-place pass."""
        if fusions is None:
            fusions = self.build_strategy.fusions()
        check_nan_inf = bool(self.check_nan_inf)
        key = (id(program), program.mutation, feed_names, fetch, on_gpu, fusions, auto, check_nan_inf)
        plan = self._plans.get(key)
        if plan is None:
            plan = _remember(
                self._plans,
                key,
                compile_plan(
                    self._prepare(program, on_gpu, feed_names, fetch, fusions, auto).program,
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

    def pass_report(
        self, program: Program, feed: Mapping[str, Any] | None = None, fetch_list: Iterable[Any] | None = None
    ) -> PassReport:
        """The report of the pipeline this executor applies to ``program`` (in its current state) when it runs
        with ``feed`` and ``fetch_list`` (the names fetched and fed are kept from fusion; which values are on a
        GPU matters); ``report.pipeline`` is that pipeline, empty for a program that runs as it is.
        Transforms the program if no run did yet."""
        return self._prepare_for(program, feed or {}, fetch_list).report

    def compiled_program(
        self, program: Program, feed: Mapping[str, Any] | None = None, fetch_list: Iterable[Any] | None = None
    ) -> Program:
        """A copy of what this executor compiles ``program`` into plans from when it runs with ``feed`` and
        ``fetch_list``: the result of the pipeline :meth:`pass_report` describes."""
        return self._prepare_for(program, feed or {}, fetch_list).program.clone()

    def _prepare_for(self, program: Program, feed: Mapping[str, Any], fetch_list: Iterable[Any] | None) -> _Prepared:
        fetch = None if fetch_list is None else tuple(_name(f) for f in fetch_list)
        auto = self._auto_place(program, self.build_strategy, feed or None, fetch, None)  # no feed: none to calibrate
        return self._prepare(program, _on_gpu(feed), frozenset(feed), fetch, self.build_strategy.fusions(), auto)

    def _auto_place(
        self,
        program: Program,
        strategy: BuildStrategy,
        feed: Mapping[str, Any] | None,
        fetch: tuple[str, ...] | None,
        scope: Scope | None,
    ) -> AutoPlace | None:
        """The auto-place pass ``strategy`` asks for, None when it asks for none; without a cost file, this
        machine's cached calibration, made first on ``program`` fed ``feed`` when it has not been (``feed``
        None: the last one made here for ``program``, else the fallback)."""
        placing = strategy.placing()
        if placing is None:
            return None
        devices, costs = placing
        if costs:
            return AutoPlace(devices=devices, costs=costs)
        if feed is None:
            made = [
                path
                for (i, mutation, d, _), path in self._calibrated.items()
                if (i, mutation, d) == (id(program), program.mutation, devices)
            ]
            costs = made[-1] if made else ""
        else:
            from blockir.runtime.calibration import cached_costs, feed_batch  # it runs executors: imported here

            key = (id(program), program.mutation, devices, feed_batch(program, feed))
            costs = self._calibrated.get(key, "")
            if not costs:
                costs = cached_costs(program, feed, devices, fetch_list=fetch, scope=scope, build_strategy=strategy)
                _remember(self._calibrated, key, costs, self.max_plans)
        return AutoPlace(devices=devices, costs=costs)

    def _prepare(
        self,
        program: Program,
        on_gpu: frozenset[tuple[str, str]],
        feed_names: frozenset[str],
        fetch: tuple[str, ...] | None,
        fusions: Fusions,
        auto: AutoPlace | None = None,
    ) -> _Prepared:
        """``program`` itself when it runs as it is, else its clone through the fusion passes, ``auto`` (the
        auto-place pass) and the default pipeline (cached); ``on_gpu``: (name, device) of the variables fed
        with values already on a GPU; ``feed_names`` and ``fetch`` are kept from fusion."""
        fuse = fuse_pipeline(fusions, feed_names | set(fetch or ()))
        devices = (
            auto is not None
            or self._pipeline.default != HOST
            or self._pipeline.compute != 1
            or bool(on_gpu)
            or _off_host(program)
        )
        if fuse is None and not devices:
            return _Prepared(program, PassReport(""))
        key = (id(program), program.mutation, on_gpu, fuse, auto)
        prepared = self._prepared.get(key)
        if prepared is None:
            for block in program.blocks:  # errors name the ops as the program has them, before passes trip on them
                check_block(block)
            pipeline = [dataclasses.replace(self._pipeline, fed=tuple(sorted(f"{n}@{d}" for n, d in on_gpu)))]
            passes = [p for p in (fuse, auto) if p is not None] + (pipeline if devices else [])
            prepared = _Prepared(*run_pipeline(program, passes, verify=False, snapshots=False))
            _remember(self._prepared, key, prepared, self.max_plans)
        return prepared

    def run(
        self,
        program: Program | CompiledProgram | None = None,
        feed: Mapping[str, Any] | Sequence[Mapping[str, Any]] | None = None,
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
        any. A :class:`~blockir.runtime.compiled.CompiledProgram` with data
        parallelism runs as its replicated program: ``feed`` (one batch, or
        Fluid's list of one dict per place, joined in order) is split over the
        replicas and each fetched variable comes back joined along axis 0 (a
        scalar loss as one value per replica). Persistable variables are read from and written to ``scope``
        (default: :func:`global_scope`); temporaries are freed after their last
        use and never reach the scope. With ``return_numpy`` fetched LoD
        tensors come back as their data arrays and selected rows as dense
        arrays; otherwise as they are. A failing kernel raises
        :class:`~blockir.errors.ExecutionError` naming the op and its inputs,
        once all other work of the run has stopped. ``trace`` names a file to
        write a Chrome trace-event JSON of the run to (one event per op, on its
        device and stream: :mod:`blockir.runtime.trace`), for Perfetto and ``blockir viz``; it names the
        program it ran by digest. The
        program itself is never modified.
        """
        fetch = None if fetch_list is None else tuple(_name(f) for f in fetch_list)
        strategy = self.build_strategy
        if program is None:
            program = default_main_program()
        elif isinstance(program, CompiledProgram):
            strategy = program.build_strategy
            if program.places:  # with data parallelism
                if strategy.auto_place:
                    raise BlockirError(AUTO_PLACE_WITH_DATA_PARALLEL)
                per_place = feed is not None and not isinstance(feed, Mapping)  # Fluid's list of dicts
                if feed is not None:
                    feed = program.merged_feed(feed)
                program = program.replicated(fetch or (), sections=per_place)
            else:
                program = program.program
        elif not isinstance(program, Program):
            raise BlockirError(f"Executor.run needs a Program or a CompiledProgram, got {type(program).__name__}")
        if feed is None:
            feed = {}
        elif not isinstance(feed, Mapping):
            raise BlockirError(f"feed must be a dict of variable name -> value, got {type(feed).__name__}")
        feed_names, on_gpu, fusions = frozenset(feed), _on_gpu(feed), strategy.fusions()
        auto = self._auto_place(program, strategy, feed, fetch, scope)
        plan = self._plan(program, feed_names, fetch, on_gpu, fusions, auto)
        if not self._finalizer.alive:
            raise BlockirError("this executor is closed")
        tracer = None
        if trace is not None:
            prepared = self._prepare(program, on_gpu, feed_names, fetch, fusions, auto)
            ran = {"program": program.digest(), "compiled": prepared.program.digest()}
            tracer = Tracer(plan.steps, plan.copies_from, dict(ran, pipeline=prepared.report.pipeline))
        fetched = plan.run(feed, global_scope() if scope is None else scope, return_numpy, self._pool, tracer)
        if tracer is not None and trace is not None:
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
