"""``auto-place``: place the ops a user did not pin over several devices, by a list scheduler (HEFT) on measured costs.

``auto-place{devices=cpu:0,cpu:1 costs=costs.json}`` decides the device of each *forward* op of the global
block that nothing else decides; ``place``, ``insert-copies`` and ``streams`` (``default-device-pipeline``)
then do the rest as usual. How (docs/placement.md, "Automatic placement"):

1. **What is decided.** Kept as they are: an op with an ``op_device`` that ``auto-place`` did not write (its
   lineage attribute ``op_placement`` says it did: running the pass again decides those ops again), host
   ops, channel ops, copies; an op whose type has no kernel on any of the devices is left to ``place``. A
   pinned op whose device has no kernel for it is an error naming it. Gradient and optimizer ops are not
   decided: they follow their forward op or parameter by the ``place`` rules, so a parameter never lives on
   two devices by accident; their cost counts in the cost of the forward op they follow.
2. **The schedule.** The forward ops form a task graph (:class:`TaskGraph`): each task's time per device
   from the cost model (:mod:`blockir.passes.costs`), each edge the bytes of the values it carries. HEFT
   (:func:`heft`; Topcuoglu et al., 2002) orders the tasks by upward rank (the longest path to an exit, with
   average times) and puts each on the device where it finishes first, inserting it into an idle slot of a
   device when one fits. A move off the device its inputs come from (the one sending it the most bytes) must
   save more than 5% of its time there (``margin``), copies included.
3. **The choice.** The whole placed program (its gradient and optimizer ops and copies too) is scored by
   :func:`simulate`, as the runtime runs it: each device's ops in program order, copies on copy streams.
   The pass keeps the best of the HEFT placement and every single-device placement (a single device on a
   tie), so a chain stays on one device and the result is never slower than one device under the model;
   then, on programs small enough (:data:`REFINE_WORK`), :func:`refine` moves single ops to another device
   while that shortens the predicted run by more than 0.1%.
4. **The record.** Each op decided gets ``op_device`` and ``op_placement`` (its rank and its best and second
   best device with their finish times, or why one device won); the pass report gets a note per choice and
   the details ``schedule`` (the predicted :class:`Schedule` of the result) and ``candidates`` (each
   placement's predicted makespan).

``simulate(program, costs)`` predicts the makespan of any placed program, so hand placements can be
compared with automatic ones.
"""

from __future__ import annotations

import bisect
import itertools
import math
import random
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any, ClassVar

from blockir.errors import BlockirError
from blockir.ir import Block, Operator, Program, Variable
from blockir.ir.core import is_training_op
from blockir.ir.devices import HOST, checked_device, device_kind
from blockir.ir.schema import find
from blockir.passes.base import Pass, register_pass
from blockir.passes.costs import CostModel
from blockir.passes.deps import RAW, dependency_graph
from blockir.passes.manager import note, record_detail
from blockir.passes.place import Placement

__all__ = [
    "AutoPlace",
    "Heft",
    "Schedule",
    "ScheduledOp",
    "TaskGraph",
    "heft",
    "list_schedule",
    "random_task_graph",
    "refine",
    "simulate",
]

PLACEMENT_ATTR = "op_placement"
MARGIN = 0.05
REFINE_WORK = 2_000_000  # refinement sweeps when decided ops x devices x ops stays under this (each move a simulation)


# -- task graphs and HEFT --------------------------------------------------------------------------------


@dataclass
class TaskGraph:
    """Tasks in a topological order (every edge goes from a lower index to a higher one).

    ``costs[i]``: seconds of task ``i`` on each device it can run on. ``succ[i]``: successor -> bytes it
    receives from ``i``. ``comm(bytes, src, dst)``: seconds to move them (0 on one device). ``inputs[i]``:
    (device, bytes) of values ``i`` reads from outside the graph (a feed on the host).
    """

    costs: list[dict[str, float]]
    succ: list[dict[int, float]]
    comm: Callable[[float, str, str], float]
    inputs: list[list[tuple[str, float]]] = field(default_factory=list)

    def __post_init__(self) -> None:
        if not self.inputs:
            self.inputs = [[] for _ in self.costs]
        self.pred: list[dict[int, float]] = [{} for _ in self.costs]
        for i, succ in enumerate(self.succ):
            for j, nbytes in succ.items():
                if j <= i:
                    raise BlockirError(
                        f"task graph: edge {i} -> {j} goes backwards (tasks must be in topological order)"
                    )
                self.pred[j][i] = nbytes

    def __len__(self) -> int:
        return len(self.costs)

    def ready(self, i: int, device: str, finish: Sequence[float], where: Sequence[str]) -> float:
        """When task ``i``'s inputs can be on ``device``, its predecessors having finished at ``finish`` on
        ``where``."""
        comm, ready = self.comm, 0.0
        for src, nbytes in self.inputs[i]:
            t = comm(nbytes, src, device)
            if t > ready:
                ready = t
        for p, nbytes in self.pred[i].items():
            t = finish[p] if where[p] == device else finish[p] + comm(nbytes, where[p], device)
            if t > ready:
                ready = t
        return ready


@dataclass
class Heft:
    """HEFT's schedule: per task its device, start, finish, upward rank and every device's finish time."""

    device: list[str]
    start: list[float]
    finish: list[float]
    rank: list[float]
    options: list[list[tuple[float, str]]]  # per task: (finish, device), best first
    kept: list[bool]  # per task: kept on its inputs' device by the margin although another finished first

    @property
    def makespan(self) -> float:
        return max(self.finish, default=0.0)

    @property
    def order(self) -> list[int]:
        """The tasks by decreasing upward rank (ties in index order): a topological order."""
        return sorted(range(len(self.rank)), key=lambda i: (-self.rank[i], i))


def upward_ranks(graph: TaskGraph, devices: Sequence[str]) -> list[float]:
    """Each task's upward rank: its mean time plus the longest mean path (times and copies) to an exit."""
    pairs = [(a, b) for a in devices for b in devices if a != b]
    means: dict[float, float] = {}

    def mean_comm(nbytes: float) -> float:
        mean = means.get(nbytes)
        if mean is None:
            mean = means[nbytes] = sum(graph.comm(nbytes, a, b) for a, b in pairs) / len(pairs) if pairs else 0.0
        return mean

    rank = [0.0] * len(graph)
    for i in reversed(range(len(graph))):
        costs = graph.costs[i].values()
        mean = sum(costs) / len(costs) if costs else 0.0
        rank[i] = mean + max((mean_comm(b) + rank[j] for j, b in graph.succ[i].items()), default=0.0)
    return rank


def heft(graph: TaskGraph, devices: Sequence[str], margin: float = MARGIN) -> Heft:
    """Schedule ``graph`` over ``devices`` by HEFT with insertion; a task moves off the device its inputs come
    from only when it finishes there more than ``margin`` of its time earlier."""
    n = len(graph)
    rank = upward_ranks(graph, devices)
    result = Heft([""] * n, [0.0] * n, [0.0] * n, rank, [[] for _ in range(n)], [False] * n)
    position = {d: k for k, d in enumerate(devices)}  # a pinned task may be on a device not among ``devices``
    busy: dict[str, _Timeline] = {}
    for i in result.order:
        options: list[tuple[float, float, str]] = []  # (finish, start, device)
        for d, w in graph.costs[i].items():
            timeline = busy.get(d)
            if timeline is None:
                timeline = busy[d] = _Timeline()
            start = timeline.slot(graph.ready(i, d, result.finish, result.device), w)
            options.append((start + w, start, d))
        if not options:
            raise BlockirError(f"task graph: task {i} has no device to run on")
        options.sort(key=lambda o: (o[0], position.get(o[2], len(devices))))
        finish, start, device = options[0]
        home = _home(graph, i, result.device)
        at_home = next((o for o in options if o[2] == home), None)
        if at_home is not None and device != home and at_home[0] - finish <= margin * graph.costs[i][home]:
            finish, start, device = at_home
            result.kept[i] = True
        busy[device].add(start, finish)
        result.device[i], result.start[i], result.finish[i] = device, start, finish
        result.options[i] = [(f, d) for f, _, d in options]
    return result


class _Timeline:
    """A device's busy intervals (sorted, disjoint: ``starts[k]`` to ``ends[k]``) and the idle gaps of positive
    length between them (``gap_starts[g]`` to ``gap_ends[g]``; the first from minus infinity), so that a slot is
    found by bisection: a list schedule leaves few gaps, which are all a task of positive length can fit in."""

    def __init__(self) -> None:
        self.starts: list[float] = []
        self.ends: list[float] = []
        self.gap_starts: list[float] = []
        self.gap_ends: list[float] = []
        self.end = -math.inf  # the end of the last interval

    def slot(self, ready: float, w: float) -> float:
        """The earliest start at or after ``ready`` of a ``w``-long idle gap (after the last interval at worst)."""
        if w <= 0:  # fits between two touching intervals too
            return _slot(self.starts, self.ends, ready, w)
        for g in range(bisect.bisect_right(self.gap_ends, ready), len(self.gap_ends)):
            start = max(ready, self.gap_starts[g])
            if start + w <= self.gap_ends[g]:
                return start
        return max(ready, self.end)

    def add(self, start: float, finish: float) -> None:
        """Mark ``start`` to ``finish`` busy (a slot :meth:`slot` found)."""
        # after the intervals starting there, a zero-length one before them: the ends stay sorted too
        at = (bisect.bisect if finish > start else bisect.bisect_left)(self.starts, start)
        self.starts.insert(at, start)
        self.ends.insert(at, finish)
        if start >= self.end:
            if start > self.end:
                self.gap_starts.append(self.end)
                self.gap_ends.append(start)
            self.end = finish
            return
        g = bisect.bisect_right(self.gap_starts, start) - 1  # the gap it is in, if any (none between touching ones)
        if g < 0 or start > self.gap_ends[g]:
            return
        gs, ge = self.gap_starts[g], self.gap_ends[g]
        parts = [p for p in ((gs, start), (finish, ge)) if p[1] > p[0]]
        self.gap_starts[g : g + 1] = [p[0] for p in parts]
        self.gap_ends[g : g + 1] = [p[1] for p in parts]


def _slot(starts: list[float], ends: list[float], ready: float, w: float) -> float:
    """The earliest start at or after ``ready`` of a ``w``-long gap between a device's busy intervals (sorted,
    disjoint: ``starts[k]`` to ``ends[k]``)."""
    start = ready
    for k in range(bisect.bisect_right(ends, ready), len(starts)):  # the intervals ending after ``ready``
        if start + w <= starts[k]:
            return start
        start = max(start, ends[k])
    return start


def _home(graph: TaskGraph, i: int, where: Sequence[str]) -> str:
    """The device sending task ``i`` the most bytes ('' when it reads nothing)."""
    sent: dict[str, float] = {}
    for src, nbytes in graph.inputs[i]:
        sent[src] = sent.get(src, 0.0) + nbytes
    for p, nbytes in graph.pred[i].items():
        sent[where[p]] = sent.get(where[p], 0.0) + nbytes
    return max(sent, key=lambda d: sent[d]) if sent else ""


def refine(
    assignment: Sequence[str],
    candidates: Sequence[Sequence[str]],
    score: Callable[[list[str]], float],
    rounds: int = 2,
    gain: float = 1e-3,
) -> tuple[list[str], float]:
    """Improve ``assignment`` (a device per task) by moving one task at a time to another of its
    ``candidates`` while that lowers ``score`` by more than ``gain`` of it, for at most ``rounds`` sweeps;
    returns the assignment and its score."""
    best = list(assignment)
    value = score(best)
    for _ in range(rounds):
        moved = False
        for i, devices in enumerate(candidates):
            for d in devices:
                if d == best[i]:
                    continue
                trial = [*best[:i], d, *best[i + 1 :]]
                trial_value = score(trial)
                if trial_value < value * (1 - gain):
                    best, value, moved = trial, trial_value, True
        if not moved:
            break
    return best, value


def list_schedule(graph: TaskGraph, device: Sequence[str], order: Sequence[int]) -> float:
    """The makespan of running the tasks on ``device`` (per task), each device taking its tasks in ``order``
    (a topological order) without insertion."""
    n = len(graph)
    finish = [0.0] * n
    free: dict[str, float] = {}
    for i in order:
        d = device[i]
        start = max(graph.ready(i, d, finish, device), free.get(d, 0.0))
        finish[i] = free[d] = start + graph.costs[i][d]
    return max(finish, default=0.0)


def random_task_graph(rng: random.Random, n: int, devices: list[str], ccr: float, heterogeneity: float) -> TaskGraph:
    """A layered random DAG of ``n`` tasks (layers of 1 to 3), for simulations: mean task time 1, edges carrying
    ``ccr`` on average (a copy between two devices takes its size), each device's time a factor in
    [1 - h/2, 1 + h/2] of the task's."""
    layers: list[list[int]] = []
    i = 0
    while i < n:
        width = min(rng.randint(1, 3), n - i)
        layers.append(list(range(i, i + width)))
        i += width
    costs = []
    for _ in range(n):
        base = rng.uniform(0.5, 1.5)
        costs.append({d: base * rng.uniform(1 - heterogeneity / 2, 1 + heterogeneity / 2) for d in devices})
    succ: list[dict[int, float]] = [{} for _ in range(n)]
    for upper, lower in itertools.pairwise(layers):
        for j in lower:
            for p in rng.sample(upper, rng.randint(1, len(upper))):
                succ[p][j] = rng.uniform(0.5, 1.5) * ccr
    return TaskGraph(costs, succ, lambda nbytes, a, b: 0.0 if a == b else nbytes)


# -- simulating a placed program -----------------------------------------------------------------------------


@dataclass(frozen=True)
class ScheduledOp:
    """One op of a predicted schedule; times in seconds from the start of the run."""

    op_id: int
    type: str
    device: str
    start: float
    finish: float


@dataclass
class Schedule:
    """The predicted run of a placed program's global block (:func:`simulate`)."""

    ops: list[ScheduledOp]
    copies: int  # values copied between devices

    @property
    def makespan(self) -> float:
        return max((o.finish for o in self.ops), default=0.0)

    def to_json(self) -> dict[str, Any]:
        return {
            "makespan": self.makespan,
            "copies": self.copies,
            "ops": [
                {"id": o.op_id, "type": o.type, "device": o.device, "start": o.start, "finish": o.finish}
                for o in self.ops
            ],
        }


def op_cost(costs: CostModel, op: Operator, device: str) -> float:
    """Seconds ``op`` takes on ``device``, the ops of its sub-blocks included (each once)."""
    total = costs.op_seconds(op, device)
    for sub in op.sub_blocks():
        total += sum(op_cost(costs, inner, device) for inner in sub.ops)
    return total


def simulate(program: Program, costs: CostModel) -> Schedule:
    """Predict how ``program``'s global block runs (placed or not: the ``place`` rules fill in what is not):
    each device runs its ops in program order, an op starting once its inputs are on its device and the ops
    reading what it overwrites are done; a value read on another device is copied there once (a ``memcpy``
    op of the program, or an implied copy) taking the link's time; feeds start on the host."""
    placement = Placement(program)
    simulation = Simulation(program, costs)
    devices = [placement.runs_on(op) for op in simulation.ops]
    return simulation.run(devices, lambda var: placement.var_home(var) or HOST)


Times = tuple[list[float], list[float], int]  # each op's start and finish, and the number of copies


class Simulation:
    """What :func:`simulate` needs of a program's global block, gathered once for many placements of it."""

    def __init__(self, program: Program, costs: CostModel) -> None:
        self.costs = costs
        self.block = block = program.global_block()
        self.ops = list(block.ops)
        self.inputs = [op.input_names() for op in self.ops]
        self.outputs = [op.output_names() for op in self.ops]
        self.copies = [bool((schema := find(op.type)) is not None and schema.device_attr) for op in self.ops]
        written: set[str] = set()
        self.vars: dict[str, Variable | None] = {}  # the values read before any op writes them (from ``home``)
        for inputs, outputs in zip(self.inputs, self.outputs):
            self.vars.update((name, _var(block, name)) for name in inputs if name not in written)
            written.update(outputs)
        self.nbytes = {name: costs.var_bytes(block, name) for names in self.inputs for name in names}
        self.flat = [not op.sub_blocks() for op in self.ops]
        self._seconds: list[dict[str, float]] = [{} for _ in self.ops]  # per op position: device -> op_cost
        self._by_work: dict[tuple[float, float, str, str], float] = {}  # (CostModel.work, device) -> op_cost
        self._work: list[tuple[float, float, str] | None] = [None] * len(self.ops)  # per op: CostModel.work

    def seconds(self, k: int, device: str) -> float:
        """:func:`op_cost` of the op at position ``k`` on ``device`` (remembered; one answer for the ops of no
        sub-block that do the same work: what the cost model answers by)."""
        found = self._seconds[k].get(device)
        if found is None:
            op = self.ops[k]
            if self.flat[k]:
                work = self._work[k]
                if work is None:
                    work = self._work[k] = self.costs.work(op)
                memo = (*work, device)
                found = self._by_work.get(memo)
                if found is None:
                    found = self._by_work[memo] = op_cost(self.costs, op, device)
            else:
                found = op_cost(self.costs, op, device)
            self._seconds[k][device] = found
        return found

    def run(self, devices: Sequence[str], home: Callable[[Variable], str]) -> Schedule:
        """The predicted run with op ``k`` on ``devices[k]``; ``home(var)``: where a value nobody wrote yet is."""
        return self.schedule(devices, self.times(devices, home))

    def schedule(self, devices: Sequence[str], times: Times) -> Schedule:
        """The run with op ``k`` on ``devices[k]`` that :meth:`times` predicted ``times`` of."""
        starts, finishes, count = times
        ops = [ScheduledOp(op.id, op.type, *row) for op, row in zip(self.ops, zip(devices, starts, finishes))]
        return Schedule(ops, count)

    def makespan(self, devices: Sequence[str], home: Callable[[Variable], str]) -> float:
        """:meth:`run`'s makespan, without building its schedule."""
        return max(self.times(devices, home)[1], default=0.0)

    def times(self, devices: Sequence[str], home: Callable[[Variable], str]) -> Times:
        """Each op's start and finish in :meth:`run`, and how many values are copied."""
        copy_seconds, nbytes, seconds, values = self.costs.copy_seconds, self.nbytes, self.seconds, self.vars
        free: dict[str, float] = {}
        at: dict[str, tuple[float, str]] = {}  # value -> (ready, device) of its current version
        copied: dict[str, dict[str, float]] = {}  # value -> device -> when its copy is there
        read_done: dict[str, float] = {}  # value -> when its current version's last reader finishes
        starts: list[float] = []
        finishes: list[float] = []
        count = 0
        for k, (inputs, outputs, is_copy) in enumerate(zip(self.inputs, self.outputs, self.copies)):
            device = devices[k]
            ready = 0.0
            for name in outputs:  # the readers of what it overwrites are done
                t = read_done.get(name, 0.0)
                if t > ready:
                    ready = t
            for name in inputs:
                found = at.get(name)
                if found is None:
                    var = values[name]
                    t, where = 0.0, home(var) if var is not None else HOST
                else:
                    t, where = found
                if where != device:
                    if is_copy:  # a copy op: on its own stream, the link's time
                        count += 1
                        t += copy_seconds(nbytes[name], where, device)
                    else:
                        copies = copied.setdefault(name, {})
                        if device not in copies:
                            copies[device] = t + copy_seconds(nbytes[name], where, device)
                            count += 1
                        t = copies[device]
                if t > ready:
                    ready = t
            if is_copy:
                start = finish = ready
            else:
                start = max(ready, free.get(device, 0.0))
                finish = free[device] = start + seconds(k, device)
            for name in inputs:
                if finish > read_done.get(name, 0.0):
                    read_done[name] = finish
            for name in outputs:
                at[name] = (finish, device)
                read_done[name] = finish
                copied.pop(name, None)
            starts.append(start)
            finishes.append(finish)
        return starts, finishes, count


# -- the pass ------------------------------------------------------------------------------------------------------


def _fmt(seconds: float) -> str:
    return f"{seconds * 1e3:.4g}ms"


@register_pass
@dataclass(frozen=True)
class AutoPlace(Pass):
    """Place the unpinned forward ops over ``devices`` by HEFT on measured costs (module docstring)."""

    name: ClassVar[str] = "auto-place"
    summary: ClassVar[str] = "place unpinned ops over devices by a list scheduler (HEFT) on measured costs"

    devices: tuple[str, ...] = field(metadata={"help": "the devices to place over, e.g. cpu:0,cpu:1"})
    costs: str = field(default="", metadata={"help": "a cost file of this machine (blockir profile); else FLOPs/bytes"})
    batch: int = field(default=0, metadata={"help": "the size of -1 dimensions (0: the cost file's calibration)"})

    def __post_init__(self) -> None:
        self.checked_devices()
        if self.batch < 0:
            raise BlockirError(f"auto-place: batch must be >= 0, got {self.batch}")

    def checked_devices(self) -> list[str]:
        """The devices, each checked and in its canonical spelling, without repeats."""
        devices = [checked_device(d, "the auto-place option devices") for d in self.devices]
        if not devices:
            raise BlockirError("auto-place needs devices=DEVICE,... (e.g. devices=cpu:0,cpu:1)")
        return list(dict.fromkeys(devices))

    def model(self) -> CostModel:
        """The cost model: the cost file's (refused when another machine's), else this machine's fallback."""
        model = CostModel.load(self.costs) if self.costs else CostModel.for_machine()
        if self.batch:
            model.batch = self.batch
        return model

    def run(self, program: Program) -> bool:
        devices = self.checked_devices()
        costs = self.model()
        block = program.global_block()
        changed = False
        for op in block.ops:  # this pass's own earlier decisions are decided again
            if PLACEMENT_ATTR in op.attrs:
                op.remove_attr(PLACEMENT_ATTR)
                op.remove_attr("op_device")
                changed = True
        placement = Placement(program)
        forward = [op for op in block.ops if not is_training_op(op)]
        index = {op: i for i, op in enumerate(forward)}
        candidates = [_candidates(op, devices, placement) for op in forward]
        fixed = [placement.runs_on(op) if not c else "" for op, c in zip(forward, candidates)]
        decided = [i for i, c in enumerate(candidates) if c]
        if not decided:
            note("no op to decide: every forward op is pinned, on the host, or has no kernel on these devices")
            return changed
        score = _Scorer(program, costs, placement, {forward[i]: k for k, i in enumerate(decided)})
        graph = _task_graph(score.simulation, forward, index, candidates, fixed, placement)
        schedule = heft(graph, devices)

        options = [(d, [d if d in candidates[i] else candidates[i][0] for i in decided]) for d in devices]
        options.append(("heft", [schedule.device[i] for i in decided]))
        timed: dict[tuple[str, ...], Times] = {}  # a candidate equal to another (HEFT's on a chain) runs once
        for _, assignment in options:
            if tuple(assignment) not in timed:
                timed[tuple(assignment)] = score.times(assignment)
        scored = [(max(timed[tuple(a)][1], default=0.0), label, a) for label, a in options]
        makespan, label, start = min(scored, key=lambda s: s[0])  # the first on a tie: one device before HEFT
        assignment = start
        if len(decided) * len(devices) * len(block.ops) <= REFINE_WORK:
            assignment, makespan = refine(start, [candidates[i] for i in decided], score)
        moved = sum(a != b for a, b in zip(assignment, start))
        for k, i in enumerate(decided):
            forward[i].set_attr("op_device", assignment[k])
            reason = _reason(schedule, i, label, scored)
            if assignment[k] != start[k]:
                reason += f"; moved to {assignment[k]} by refinement"
            forward[i].set_attr(PLACEMENT_ATTR, reason)
        changed = True
        result = score.schedule(assignment, timed.get(tuple(assignment)))
        for m, name, _ in scored:
            note(f"{'HEFT' if name == 'heft' else 'all on ' + name}: predicted {_fmt(m)}")
        chosen = "the HEFT placement" if label == "heft" else f"one device, {label}"
        refined = f", {moved} ops moved by refinement" if moved else ""
        note(f"kept {chosen}{refined}: predicted {_fmt(makespan)} over {len(decided)} ops, {result.copies} copies")
        note(costs.describe())
        record_detail("schedule", result)
        record_detail("candidates", {**{name: m for m, name, _ in scored}, "chosen": makespan})
        return changed


class _Scorer:
    """The predicted makespan of the program with the decided ops on given devices, the other ops where the
    ``place`` rules put them (a gradient or optimizer op with its decided forward op), without placing it."""

    def __init__(self, program: Program, costs: CostModel, placement: Placement, decided: dict[Operator, int]) -> None:
        self.simulation = Simulation(program, costs)
        # per op: a device, or the index of the decided op whose device it takes, with its kernels' kinds
        self.rules: list[str | tuple[int, frozenset[str] | None]] = []
        for op in self.simulation.ops:
            if op in decided:
                self.rules.append((decided[op], None))
            elif (leader := self._leader(op, placement, decided)) is not None:
                schema = find(op.type)
                self.rules.append((decided[leader], schema.devices if schema is not None else None))
            else:
                self.rules.append(placement.runs_on(op))
        position = {op: k for k, op in enumerate(self.simulation.ops)}
        self.homes: dict[str, str] = {}  # variable -> its device, when not the device of an op it lives with
        self.tied: list[tuple[str, int]] = []  # (variable, the position of the op it lives with)
        for var in self.simulation.vars.values():
            if var is not None:
                home = placement.home_op(var)
                if home in position:
                    self.tied.append((var.name, position[home]))
                else:
                    self.homes[var.name] = placement.var_home(var) or HOST

    @staticmethod
    def _leader(op: Operator, placement: Placement, decided: dict[Operator, int]) -> Operator | None:
        """The decided op whose device ``op`` follows (rule 4 of ``place``), None when it follows none."""
        schema = find(op.type)
        if op.device or (schema is not None and (schema.host or schema.device_attr)) or placement.channel_device(op):
            return None
        leader = placement.follows(op)
        if isinstance(leader, Variable):
            leader = placement.home_op(leader)
        return leader if isinstance(leader, Operator) and leader in decided else None

    def __call__(self, assignment: Sequence[str]) -> float:
        return self.simulation.makespan(*self._placed(assignment))

    def times(self, assignment: Sequence[str]) -> Times:
        """:meth:`Simulation.times` with decided op ``k`` on ``assignment[k]``."""
        return self.simulation.times(*self._placed(assignment))

    def schedule(self, assignment: Sequence[str], times: Times | None = None) -> Schedule:
        """The predicted run with decided op ``k`` on ``assignment[k]`` (``times``: already predicted)."""
        devices, home = self._placed(assignment)
        return self.simulation.run(devices, home) if times is None else self.simulation.schedule(devices, times)

    def _placed(self, assignment: Sequence[str]) -> tuple[list[str], Callable[[Variable], str]]:
        """Each op's device and where each value nobody wrote yet is, with decided op ``k`` on ``assignment[k]``."""
        devices: list[str] = []
        for rule in self.rules:
            if isinstance(rule, str):
                devices.append(rule)
            else:
                device = assignment[rule[0]]
                devices.append(device if rule[1] is None or device_kind(device) in rule[1] else HOST)
        homes = {**self.homes, **{name: devices[k] for name, k in self.tied}}
        return devices, lambda var: homes.get(var.name, HOST)


def _candidates(op: Operator, devices: list[str], placement: Placement) -> list[str]:
    """The devices ``op`` may be put on: [] when it is not for this pass to decide (module docstring)."""
    schema = find(op.type)
    if op.device:
        device = checked_device(op.device, op)
        if schema is not None and not schema.host and device_kind(device) not in schema.devices:
            raise BlockirError(
                f"auto-place: op type {op.type!r} has no kernel for {device}, where it is pinned "
                f"(it has {', '.join(sorted(schema.devices)) or 'none'}): {op}"
            )
        return []
    if schema is not None and (schema.host or schema.device_attr):
        return []
    if placement.channel_device(op):
        return []
    return [d for d in devices if schema is None or device_kind(d) in schema.devices]


def _task_graph(
    simulation: Simulation,
    forward: list[Operator],
    index: dict[Operator, int],
    candidates: list[list[str]],
    fixed: list[str],
    placement: Placement,
) -> TaskGraph:
    """The forward ops as tasks: a task's time per device counts the gradient and optimizer ops following it."""
    block, costs = simulation.block, simulation.costs
    position = {op: k for k, op in enumerate(simulation.ops)}
    stands_for: list[list[int]] = [[position[op]] for op in forward]  # per task: the positions of its ops
    for op in block.ops:
        if is_training_op(op):
            leader = placement.follows(op)
            if isinstance(leader, Variable):
                leader = placement.home_op(leader)
            if isinstance(leader, Operator) and leader in index:
                stands_for[index[leader]].append(position[op])
    task_costs = [
        {d: sum(simulation.seconds(k, d) for k in stands_for[i]) for d in (candidates[i] or [fixed[i]])}
        for i in range(len(forward))
    ]
    graph = dependency_graph(block)
    succ: list[dict[int, float]] = [{} for _ in forward]
    inputs: list[list[tuple[str, float]]] = [[] for _ in forward]
    written = {n for op in forward for n in op.output_names()}
    for i, op in enumerate(forward):
        for _, k, data in graph.out_edges(position[op], data=True):
            j = index.get(block.ops[k])
            if j is not None:
                raw = [name for kind, name in data["deps"] if kind == RAW]
                succ[i][j] = sum(costs.var_bytes(block, name) for name in raw)
        for name in op.input_names():
            var = _var(block, name)
            if name not in written and var is not None and not var.persistable:
                inputs[i].append((placement.var_home(var) or HOST, costs.var_bytes(block, name)))
    return TaskGraph(task_costs, succ, costs.copy_seconds, inputs)


def _var(block: Block, name: str) -> Variable | None:
    try:
        return block.find_var_recursive(name)
    except BlockirError:
        return None


def _reason(schedule: Heft, i: int, label: str, scored: list[tuple[float, str, list[str]]]) -> str:
    """The ``op_placement`` text of decided task ``i``."""
    options = schedule.options[i]
    ranked = ", ".join(f"{d} finishes {_fmt(f)}" for f, d in options[:2])
    text = f"rank {_fmt(schedule.rank[i])}; {ranked}"
    if schedule.kept[i]:
        text += f"; kept on {schedule.device[i]}, its inputs' device (a move saves under {MARGIN:.0%})"
    if label != "heft":
        predicted = {name: m for m, name, _ in scored}
        text += f"; one device: {label} predicts {_fmt(predicted[label])}, HEFT {_fmt(predicted['heft'])}"
    return text
