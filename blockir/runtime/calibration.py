"""Calibration runs: measure a program's ops on this machine's devices into a cost model for ``auto-place``.

:func:`calibrate` runs the program a few times on one device of each kind named, in a scratch scope (the
persistables are copies of the given scope's, so no parameter changes; the feed is the one given, so no
reader is read; random ops draw from their own seeded generators, so no random state advances; a
persistable the scope lacks is zeros), op by op on the calling thread, each op timed by the executor's
tracer (:mod:`blockir.runtime.trace`) to the end of its work on its device (a GPU synchronized after each),
and keeps per op type, input shapes and device kind the median of the timed runs (the first run, which
compiles and warms up, is not timed). Copies between devices in those runs measure the links' bandwidth.
The result is a :class:`~blockir.passes.costs.CostModel` of this machine at the feed's batch size, naming
the program it measured (:func:`program_tag`): ``blockir profile`` saves it, and an executor with
``BuildStrategy.auto_place`` and no ``cost_file`` merges it into this machine's cache under the user's cache
directory (:func:`cached_costs`), which a program already named there skips.
"""

from __future__ import annotations

import copy
import os
import statistics
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any, TypedDict, Unpack

import numpy as np

from blockir.errors import BlockirError
from blockir.ir import Operator, Program, VarKind
from blockir.ir.devices import checked_device, device_kind
from blockir.ir.schema import Lowering, find
from blockir.passes.costs import CostModel, Link, device_key, machine, measure_speeds, op_key
from blockir.runtime.compiled import BuildStrategy
from blockir.runtime.executor import Executor
from blockir.runtime.scope import Scope, global_scope
from blockir.runtime.trace import Tracer

__all__ = ["CalibrationOptions", "cache_path", "cached_costs", "calibrate", "feed_batch", "program_tag"]


def cache_path() -> Path:
    """Where an executor keeps this machine's calibrated costs: ``$XDG_CACHE_HOME/blockir`` (default
    ``~/.cache/blockir``), one file per machine description."""
    root = Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "blockir"
    name = "".join(c if c.isalnum() else "-" for c in machine()).strip("-")
    return root / f"costs-{name[:120]}.json"


def feed_batch(program: Program, feed: Mapping[str, Any]) -> int:
    """The batch size a feed gives the ``-1`` dimensions of the variables it feeds (1 when none has one)."""
    block = program.global_block()
    for name, value in feed.items():
        var = block.vars.get(name)
        shape = np.shape(getattr(value, "data", value))
        if var is not None and var.shape is not None:
            for want, got in zip(var.shape, shape):
                if want == -1:
                    return int(got)
    return 1


def program_tag(program: Program, batch: int) -> str:
    """How a cost file names a program it measured: ``DIGEST@BATCH``."""
    return f"{program.digest()}@{batch}"


def _check_calibratable(program: Program) -> None:
    for op in program.ops():
        schema = find(op.type)
        if schema is not None and schema.host and schema.lowering not in (Lowering.FEED, Lowering.FETCH):
            raise BlockirError(
                f"calibration cannot run the program: op {op.type!r} reads data or files, which a calibration "
                f"run must not consume; give a cost file (blockir profile with a feed): {op}"
            )


def _scratch_scope(program: Program, scope: Scope, batch: int) -> Scope:
    """A scope holding copies of the persistables ``scope`` has for ``program``, and zeros (each ``-1``
    dimension ``batch``) for the dense ones it lacks or holds in a shape the program does not declare (a value
    of another program's variable of that name)."""
    scratch = Scope()
    for var in program.list_vars():
        if not var.persistable:
            continue
        found = scope.find_var(var.name)
        value = found.get_tensor() if found is not None and found.is_initialized() else None
        shape = getattr(value, "shape", None)
        fits = (
            var.shape is None
            or shape is None
            or (len(shape) == len(var.shape) and all(d < 0 or d == n for d, n in zip(var.shape, shape)))
        )
        if found is not None and value is not None and fits:
            scratch.set(var.name, copy.deepcopy(value), found.device)
        elif var.kind is VarKind.LOD_TENSOR and var.shape is not None and var.dtype:
            scratch.set(var.name, np.zeros([batch if d < 0 else d for d in var.shape], var.dtype))
    return scratch


def calibrate(
    program: Program,
    feed: Mapping[str, Any],
    devices: Sequence[str],
    *,
    fetch_list: Iterable[Any] | None = None,
    scope: Scope | None = None,
    build_strategy: BuildStrategy | None = None,
    runs: int = 3,
) -> CostModel:
    """Measure ``program``'s ops fed ``feed`` on one device of each kind among ``devices`` (module
    docstring); ``scope`` (default: the global scope) lends copies of its persistables; ``build_strategy``'s
    fusions are applied as a run would (its ``auto_place`` is not). The model's ``programs`` name ``program``."""
    if runs < 1:
        raise BlockirError(f"calibration needs runs >= 1, got {runs}")
    checked = [checked_device(d, "a calibration device") for d in devices]
    if not checked:
        raise BlockirError("calibration needs at least one device")
    _check_calibratable(program)
    batch = feed_batch(program, feed)
    model = CostModel.for_machine(batch)
    model.programs.append(program_tag(program, batch))
    strategy = copy.copy(build_strategy) if build_strategy is not None else BuildStrategy()
    strategy.auto_place = False
    fetch = None if fetch_list is None else [getattr(f, "name", f) for f in fetch_list]
    samples: dict[str, list[float]] = {}
    work: dict[str, float] = {}
    copied: dict[str, list[tuple[float, float]]] = {}  # "src->dst" -> (bytes, seconds)
    for device in _one_per_kind(checked):
        scratch = _scratch_scope(program, scope if scope is not None else global_scope(), batch)
        with Executor(device, build_strategy=strategy) as exe:
            plan = exe.plan(program, feed, fetch)
            compiled = {op.id: op for op in exe.compiled_program(program, feed, fetch).ops()}
            for k in range(runs + 1):  # op by op on this thread, each timed to its end on its device
                tracer = Tracer(plan.steps, plan.copies_from, synchronize=True)
                plan.run(feed, scratch, True, None, tracer)
                if k:  # the first run compiles and warms up
                    _collect(tracer, compiled, device, model, samples, work, copied)
    for key, times in samples.items():
        model.ops[key] = {"seconds": statistics.median(times), "work": work[key], "runs": float(len(times))}
    latency = measure_speeds()[1].latency
    for pair, pairs in copied.items():
        nbytes, seconds = sum(b for b, _ in pairs), sum(s for _, s in pairs)
        if nbytes > 0 and seconds > latency * len(pairs):
            model.links[pair] = Link(latency, nbytes / (seconds - latency * len(pairs)))
    return model


def _one_per_kind(devices: list[str]) -> list[str]:
    """The first device of each kind (CPU devices share the host's cores: one stands for all)."""
    first: dict[str, str] = {}
    for d in devices:
        first.setdefault(device_kind(d), d)
    return list(first.values())


def _collect(
    tracer: Tracer,
    compiled: dict[int, Operator],
    device: str,
    model: CostModel,
    samples: dict[str, list[float]],
    work: dict[str, float],
    copied: dict[str, list[tuple[float, float]]],
) -> None:
    """Add the op times of one traced run to ``samples`` by op key, and its copies to ``copied``."""
    for step, _, _, start, end in tracer.ops:
        op = compiled.get(tracer.steps[step].op_id)
        if op is None:
            continue
        seconds = (end - start) / 1e9
        where = op.device or device
        schema = find(op.type)
        if schema is not None and schema.device_attr:
            src = op.block.find_var_recursive(op.input_names()[0]).device or "cpu"
            pair = f"{device_key(src)}->{device_key(where)}"
            copied.setdefault(pair, []).append((model.var_bytes(op.block, op.input_names()[0]), seconds))
            continue
        key = op_key(op.type, model.shapes(op), device_kind(where))
        samples.setdefault(key, []).append(seconds)
        work.setdefault(key, model.work_seconds(op, where))


class CalibrationOptions(TypedDict, total=False):
    """The keyword options of :func:`calibrate`, which :func:`cached_costs` passes on."""

    fetch_list: Iterable[Any] | None
    scope: Scope | None
    build_strategy: BuildStrategy | None
    runs: int


def cached_costs(
    program: Program, feed: Mapping[str, Any], devices: Sequence[str], **options: Unpack[CalibrationOptions]
) -> str:
    """The path of this machine's cached cost file (:func:`cache_path`), calibrated (:func:`calibrate`, with
    ``options``) on ``program`` at ``feed``'s batch size first when it does not name that program yet (a file
    that cannot be read is calibrated anew)."""
    path = cache_path()
    try:
        model: CostModel | None = CostModel.load(path) if path.exists() else None
    except BlockirError:
        model = None
    if model is None or program_tag(program, feed_batch(program, feed)) not in model.programs:
        new = calibrate(program, feed, devices, **options)
        model = new if model is None else model.merged(new)
        path.parent.mkdir(parents=True, exist_ok=True)
        model.save(path)
    return str(path)
