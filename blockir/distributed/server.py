"""A parameter server: its dense blocks and sparse-table shards, and the optimizer applied to them.

:class:`ParameterServer` ``k`` of a :class:`~blockir.passes.distribute.Split`
holds the dense blocks placed on it and, of every sparse table, the rows whose
id ``i`` has ``i % servers == k``. Its program (``split.servers[k]``) holds the
optimizer ops of what it holds; it applies each one's kernel directly on the
arrays (the kernel the executor would run, without a program run per push): a
dense block's op on the block (in place), a table's op on the rows a push names
(gathered from the shard, then written back).

- **Dense blocks** get their first values from worker 0 (:meth:`init_dense`,
  called by ``fleet.init_worker``); their optimizer state (moments, ``beta_pow``
  accumulators, the learning rate) is made here by the startup program's ops for
  those variables, cut to the block's rows.
- **Sparse rows** are made on first use, a batch of new ids at a time, by the
  table's initializer op of the startup program: a random one (``uniform_random``,
  ``gaussian_random``) draws each row from the stream that its seed and the id key
  (:mod:`blockir.distributed.seeded`), so that a row's first value depends on
  nothing but the table's seed and its id, never on arrival order or on how many
  servers there are. The optimizer state of a row is made the same way from its
  own startup op. An entry policy (the lookup's ``entry`` attribute) admits new
  ids: ``""`` every id, ``count_filter:N`` an id seen N times in pushes,
  ``probability:P`` an id drawn with probability P at each push that carries it (a
  draw keyed by the table's seed, the id and its sightings so far). Until admitted an id reads as zeros and its
  gradients are dropped, the gradient of the push that admits it included.
- **Modes.** ``sync``: a push waits for the pushes of every worker of the same
  step; the gradients are averaged, weighted by each worker's batch, and
  applied once, then the step's pulls are answered (equal to one worker on the
  whole batch). ``async``: each push is applied as it comes (Downpour). A
  push normally carries every dense block a server holds: their optimizer ops
  then run as one program. ``geo`` (GEO-SGD): a push carries the change of a
  worker's parameters over its last ``k_steps`` local steps, added as it comes;
  tables start from worker 0's (:meth:`init_rows`).

Every method is safe to call from several threads at once (the Ray actor runs
them on a thread pool; the in-process backend calls them from the workers'
threads). Each table has its own lock, and the dense blocks theirs, beside the
server's own (versions, sync steps, barriers): an update of one table does not
hold up a pull or an update of another (async and GEO; a sync step is applied
whole before its pulls are answered). A sync wait longer than ``timeout`` seconds is an error naming the
workers that did not push.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from blockir.distributed.index import IdIndex, grown, merge_rows
from blockir.distributed.saves import Replayed, checkpoint_info, replay
from blockir.distributed.seeded import SAMPLERS, SIGHTING, first_rows, uniforms
from blockir.errors import BlockirError
from blockir.io.manifest import TableEntry
from blockir.io.persistence import ArrayParts, saved_tables, saved_values, write_shard
from blockir.ir import Operator, Program
from blockir.ir.schema import EMPTY_VAR, KernelContext, lookup
from blockir.passes.distribute import DenseBlock, SparseTable, Split
from blockir.runtime.plan import describe_value, shape_matches
from blockir.runtime.scope import Scope, ScopeVariable

__all__ = ["MODES", "ParameterServer"]

MODES = ("sync", "async", "geo")


def _attrs(op: Operator) -> dict[str, Any]:
    """Every attribute of ``op``, its schema's default where the op has none."""
    return {a.name: op.attrs.get(a.name, a.default) for a in lookup(op.type).attrs}


def _run_init(op: Operator, shape: Sequence[int]) -> np.ndarray:
    """What the startup op ``op`` (an initializer: no inputs) makes, for ``shape``."""
    attrs = _attrs(op) | {"shape": [int(d) for d in shape]}
    ctx = KernelContext(xp=np, attrs=attrs, wants=(True,), op_text=str(op))
    return np.asarray(lookup(op.type).kernel(ctx))  # type: ignore[misc]


class _Update:
    """An optimizer op of the server program, applied on arrays: its schema's kernel called with the op's
    attributes and inputs as the executor's plan calls it (the same arithmetic, in place), without a program run,
    a plan's feed and fetch or a scope per push. The gradient is checked as the plan checks a feed."""

    def __init__(self, op: Operator) -> None:
        schema = lookup(op.type)
        slots = (*schema.inputs, *schema.outputs)
        if schema.kernel is None or schema.updates or any(s.duplicable for s in slots) or "Grad" not in op.inputs:
            raise BlockirError(f"a parameter server applies optimizer ops, not {op.type!r}: {op}")
        self.kernel = schema.kernel
        wants = tuple(bool(op.outputs.get(s.name)) for s in schema.outputs)
        self.ctx = KernelContext(xp=np, attrs=_attrs(op), wants=wants, op_text=str(op))
        self.inputs = tuple(_bound(op.inputs.get(s.name, ())) for s in schema.inputs)  # None: unbound
        self.outputs = tuple(_bound(op.outputs.get(s.name, ())) for s in schema.outputs)
        # per output: the input it updates in place (its position; -1: none)
        self.updates = tuple(self.inputs.index(n) if n is not None and n in self.inputs else -1 for n in self.outputs)
        self.grad = op.input("Grad")[0]
        var = op.block.var(self.grad)
        self.dtype, self.shape = np.dtype(var.dtype), var.shape

    def check(self, grad: Any) -> None:
        """An error naming the gradient when ``grad`` is not an array of its variable's dtype and shape."""
        if (
            not isinstance(grad, np.ndarray)
            or grad.dtype != self.dtype
            or (self.shape is not None and not shape_matches(self.shape, grad.shape))
        ):
            shape = "?" if self.shape is None else list(self.shape)
            raise BlockirError(
                f"the gradient {self.grad!r} must be {self.dtype}{shape} (-1 = any size), got {describe_value(grad)}"
            )

    def run(self, grad: np.ndarray, read: Callable[[str], Any]) -> dict[str, Any]:
        """Apply the update of ``grad`` (checked) to the op's other inputs (``read`` gives each by name), in place:
        the outputs the kernel made new arrays of instead (by name; none for the optimizer ops of ``blockir.ops``)."""
        args = [grad if n == self.grad else None if n is None else read(n) for n in self.inputs]
        result = self.kernel(self.ctx, *args)
        if len(self.outputs) == 1:
            result = (result,)
        return {
            n: r for n, r, i in zip(self.outputs, result, self.updates) if n is not None and (i < 0 or r is not args[i])
        }


def _bound(names: Sequence[str]) -> str | None:
    """The variable a slot of one variable binds (None: unbound)."""
    return next((n for n in names if n != EMPTY_VAR), None)


def _init_rows(op: Operator, ids: np.ndarray, dim: int) -> np.ndarray:
    """Rows of an initializer op for ``ids``: a random op's drawn from each id's own stream."""
    if lookup(op.type).random:
        return first_rows(op.type, _attrs(op), ids, dim)
    return _run_init(op, (len(ids), dim))


@dataclass
class _Entry:
    """An admission policy of new ids."""

    kind: str  # "", "count_filter", "probability"
    value: float

    @staticmethod
    def parse(text: str, table: str) -> _Entry:
        kind, _, value = text.partition(":")
        if kind == "":
            return _Entry("", 0.0)
        try:
            number = float(value)
        except ValueError:
            number = -1.0
        if kind == "count_filter" and number >= 1 and number == int(number):
            return _Entry(kind, number)
        if kind == "probability" and 0 < number <= 1:
            return _Entry(kind, number)
        raise BlockirError(
            f"table {table!r}: entry {text!r} is not a policy (count_filter:N with N >= 1, probability:P in (0, 1])"
        )


class _Log:
    """Values appended a batch at a time to an array that grows by doubling."""

    def __init__(self, dtype: type) -> None:
        self.array: np.ndarray = np.zeros(0, dtype)
        self.count = 0

    def append(self, values: np.ndarray) -> None:
        self.array = grown(self.array, self.count + len(values))
        self.array[self.count : self.count + len(values)] = values
        self.count += len(values)

    def view(self) -> np.ndarray:
        return self.array[: self.count]

    def keep(self, values: np.ndarray) -> None:
        """Hold ``values`` alone (a copy)."""
        self.array = np.array(values, self.array.dtype)
        self.count = len(values)


class _FullSave:
    """A full save of a shard being written while pushes go on: the shard's rows as they were when it began (a
    consistent cut), read a part at a time. It keeps the arrays as they were then (an array that grows is
    replaced by a larger copy, so the one kept is not written again) and, before a row of them is changed in
    place (an update, ``shrink``), its values then, once (:meth:`keep`): what it holds beyond the shard is the
    rows changed while it is written, those the next delta holds. Every call holds the table's lock."""

    PART_BYTES = 16 << 20  # about the bytes of one part of an array read under the lock

    def __init__(self, shard: _Shard) -> None:
        self.end = shard.index.end
        self.live = shard._live()  # the rows saved, ascending
        self.count = self.end if isinstance(self.live, slice) else len(self.live)
        self.arrays = {"ids": shard.index.row_ids(), **{n: a[: self.end] for n, a in shard.store.items()}}
        self.kept = np.zeros(self.end, bool)  # rows whose values then are in `old`
        self.group = min(self._part_rows(name) for name in self.arrays)  # `old` is by rows // group
        self.old: dict[int, list[tuple[np.ndarray, dict[str, np.ndarray]]]] = {}

    def _part_rows(self, name: str) -> int:
        return max(1, self.PART_BYTES // max(1, self.arrays[name][:1].nbytes))

    def keep(self, shard: _Shard, rows: np.ndarray) -> None:
        """``rows`` (distinct) of ``shard`` are about to change in place: keep the values they had when the save
        began (those of rows it saves and has not kept yet)."""
        rows = rows[rows < self.end]
        rows = rows[~self.kept[rows]]
        if not rows.size:
            return
        self.kept[rows] = True
        rows = np.sort(rows)
        values = {"ids": shard.index.row_ids()[rows], **{n: a[rows] for n, a in shard.store.items()}}
        cuts = np.flatnonzero(np.diff(rows // self.group)) + 1
        for part in np.split(np.arange(len(rows)), cuts):
            at = rows[part]
            self.old.setdefault(int(at[0] // self.group), []).append((at, {n: v[part] for n, v in values.items()}))

    def parts(self, name: str, lock: threading.Lock) -> ArrayParts:
        """The array ``name`` (``ids``, or a variable's rows) as the save began, a part at a time, each read
        under ``lock``."""
        array = self.arrays[name]
        return ArrayParts(array.dtype, (self.count, *array.shape[1:]), self._read(name, lock))

    def _read(self, name: str, lock: threading.Lock) -> Iterator[np.ndarray]:
        array, step = self.arrays[name], self._part_rows(name)
        for start in range(0, self.count, step):
            with lock:
                if isinstance(self.live, slice):
                    rows: np.ndarray | slice = slice(start, min(start + step, self.count))
                    first, last = start, min(start + step, self.count) - 1
                else:
                    rows = self.live[start : start + step]
                    first, last = int(rows[0]), int(rows[-1])
                part = array[rows].copy() if isinstance(rows, slice) else array[rows]
                for k in range(first // self.group, last // self.group + 1):
                    for at, values in self.old.get(k, ()):
                        hit = (at >= first) & (at <= last)
                        if isinstance(rows, slice):
                            part[at[hit] - first] = values[name][hit]
                        else:
                            pos = np.searchsorted(rows, at[hit])
                            mine = rows[np.minimum(pos, len(rows) - 1)] == at[hit]
                            part[pos[mine]] = values[name][hit][mine]
            yield part


class _Shard:
    """This server's rows of one sparse table: values and optimizer state per admitted id, grown on demand.

    The rows live in arrays of a capacity that doubles as they fill (``store``, one per variable: the table's
    and each optimizer state's), at the rows the id index hands out (a dropped row's slot is handed out again).
    What a row needs besides is in arrays aligned with the rows: the save interval it last changed in
    (``stamp``: ``epoch`` counts the saves begun, and a row is dirty, changed since the last complete save, while
    its stamp is at least ``clean``), the save it was last carried at. The rows whose stamp moved to the current
    interval are logged as they change (``changed``), so that a delta save reads those and no others; the ids
    not yet admitted have their own index, with their sightings beside it."""

    def __init__(self, table: SparseTable, init: Operator, states: dict[str, Operator]) -> None:
        self.table = table
        self.entry = _Entry.parse(table.entry, table.name)
        for name, op in ((table.name, init), *states.items()):
            if lookup(op.type).random and op.type not in SAMPLERS:
                raise BlockirError(
                    f"table {table.name!r}: {name!r} is made by {op.type!r}, a random op a parameter server cannot "
                    f"draw rows of one id at a time (it can: {', '.join(SAMPLERS)})"
                )
        self.init = init
        self.state_init = states  # state variable -> its startup op
        self.index = IdIndex()  # id -> row of the arrays
        dtype = np.dtype(table.dtype)
        self.store = {name: np.zeros((0, table.dim), dtype) for name in (table.name, *states)}
        self.stamp = np.zeros(0, np.int32)  # per row: the save interval it last changed in (0: clean since made)
        self.epoch = 1  # the current save interval: 1 + the saves begun
        self.clean = 1  # rows stamped before it are saved (by the last complete save)
        self.changed = _Log(np.int64)  # the rows whose stamp moved to the current interval (or an earlier one)
        self.carried = np.zeros(0, np.int32)  # per row: `saves` when a pull or push last carried it
        self.saves = 0  # completed saves
        self.removed = _Log(np.int64)  # ids whose row shrink dropped since the last save (one may recur)
        self.pending = IdIndex()  # ids seen but not yet admitted -> their row of `sightings`
        self.sightings = np.zeros(0, np.int64)
        # a save in progress: its interval, and how many of `changed` and `removed` it saw (None: none)
        self.saving: tuple[int, int, int] | None = None
        self.writing: list[_FullSave] = []  # full saves being written
        self.scratch: dict[str, np.ndarray] = {}  # per variable: the rows an update gathers (:meth:`gather`)

    def __len__(self) -> int:
        return len(self.index)

    @property
    def ids(self) -> np.ndarray:
        """The ids of the rows, in row order (a view while no row is free)."""
        return self.index.row_ids()[self._live()]

    @property
    def arrays(self) -> dict[str, np.ndarray]:
        """Every variable's rows, aligned with :attr:`ids` (views while no row is free)."""
        live = self._live()
        return {name: array[live] for name, array in self.store.items()}

    def _live(self) -> slice | np.ndarray:
        return slice(0, self.index.end) if self.index.free == 0 else self.index.live_rows()

    def rows(self, ids: np.ndarray) -> np.ndarray:
        """Row positions of ``ids`` (-1: not admitted)."""
        return self.index.find(ids)

    def gather(self, rows: np.ndarray) -> dict[str, np.ndarray]:
        """Every variable's ``rows`` (rows it holds), in arrays kept from one update to the next (valid until the
        next call, made with the table's lock held): a batch's rows in fresh arrays cost page faults at every
        update (the allocator hands memory of this size back to the system once freed)."""
        out = {}
        for name, array in self.store.items():
            self.scratch[name] = grown(self.scratch.get(name, array[:0]), len(rows))
            # (every row in range: "clip" checks nothing, which spares `take` a buffered copy into `out`)
            out[name] = np.take(array, rows, axis=0, out=self.scratch[name][: len(rows)], mode="clip")
        return out

    def admit(self, ids: np.ndarray) -> np.ndarray:
        """Count a push's sightings of ``ids``; make the rows of those admitted now; the positions of those
        admitted before this push (-1 for the others, whose gradients are dropped)."""
        before = self.rows(ids)
        missing = before < 0
        if self.entry.kind == "":
            return self.made(ids, before)
        if not missing.any():
            return before
        new, counts = np.unique(ids[missing], return_counts=True)
        at = self.pending.find(new)
        first = at < 0
        if first.any():
            at[first] = self.pending.add(new[first])
            self.sightings = grown(self.sightings, self.pending.end)
            self.sightings[at[first]] = 0
        self.sightings[at] += counts
        seen = self.sightings[at]
        if self.entry.kind == "count_filter":
            admitted = new[seen >= self.entry.value]
        else:  # one draw per push, keyed by the table's seed, the id and its sightings so far
            draws = uniforms(int(self.init.attrs.get("seed", 0)), SIGHTING, new, seen[:, None])[:, 0]
            admitted = new[draws < self.entry.value]
        if admitted.size:  # the admitting push's gradient is dropped too: `before` is -1 there
            self.pending.remove(admitted)
            self._make(admitted)
        return before

    def made(self, ids: np.ndarray, rows: np.ndarray) -> np.ndarray:
        """``rows`` (the rows of ``ids``, -1 for an id without one) with a row made for each id that had none."""
        missing = rows < 0
        if missing.any():
            new, inverse = np.unique(ids[missing], return_inverse=True)
            rows[missing] = self._make(new)[inverse]
        return rows

    def _make(self, ids: np.ndarray) -> np.ndarray:
        """Rows for ``ids`` (distinct, none admitted), made by the initializers; the rows."""
        rows = self.index.add(ids)
        end = self.index.end
        for name, array in self.store.items():
            op = self.init if name == self.table.name else self.state_init[name]
            self.store[name] = array = grown(array, end)
            array[rows] = _init_rows(op, ids, self.table.dim)
        self.stamp = grown(self.stamp, end)
        self.stamp[rows] = 0
        self.carried = grown(self.carried, end)
        self.touch(rows)
        return rows

    def touch(self, rows: np.ndarray) -> None:
        """``rows`` (distinct) changed and were carried by a push (or made)."""
        new = rows[self.stamp[rows] != self.epoch]
        self.stamp[new] = self.epoch
        self.changed.append(new)
        self.carried[rows] = self.saves

    def shrink(self, threshold: int) -> int:
        """Drop the rows no pull or push carried for ``threshold`` save intervals; how many."""
        live = self.index.live_rows()
        gone = live[self.saves - self.carried[live] >= threshold]
        self._drop_rows(gone)
        return len(gone)

    def drop(self, ids: np.ndarray) -> None:
        """Remove the rows of ``ids`` (recorded as removed for the next delta save)."""
        rows = self.rows(ids)
        self._drop_rows(np.unique(rows[rows >= 0]))

    def changing(self, rows: np.ndarray) -> None:
        """``rows`` (distinct) are about to change in place: every full save being written keeps them as they
        were when it began."""
        for save in self.writing:
            save.keep(self, rows)

    def _drop_rows(self, rows: np.ndarray) -> None:
        self.changing(rows)
        ids = self.index.row_ids()[rows]
        self.index.remove(ids)
        self.stamp[rows] = 0
        self.removed.append(ids)

    def install(self, ids: np.ndarray, arrays: dict[str, np.ndarray]) -> None:
        """Set the rows of ``ids`` (made if new) to ``arrays`` (worker 0's first rows in GEO mode)."""
        at = self.made(ids, self.rows(ids))
        self.changing(np.unique(at))
        for name, values in arrays.items():
            self.store[name][at] = values

    def adopt(self, rows: Replayed) -> None:
        """Hold ``rows`` (a loaded save's, this shard empty): its index and arrays as they are, every row saved."""
        self.index = rows.index
        self.store = {name: rows.arrays[name] for name in self.store}
        self.stamp = np.zeros(self.index.end, np.int32)
        self.carried = np.zeros(self.index.end, np.int32)
        self.set_sighted(rows.pending, rows.counts)

    def dirty_rows(self) -> tuple[np.ndarray, np.ndarray]:
        """The rows changed since the last complete save and their ids, by id."""
        rows = self.changed.view()
        rows = rows[self.stamp[rows] >= self.clean]
        ids = self.index.row_ids()[rows]
        order = np.argsort(ids)
        rows, ids = rows[order], ids[order]
        once = np.ones(len(ids), bool)  # a save begun and never completed leaves a row logged twice
        once[1:] = ids[1:] != ids[:-1]
        return rows[once], ids[once]

    def removed_ids(self) -> np.ndarray:
        """The ids dropped since the last complete save and not made again, ascending."""
        ids = np.unique(self.removed.view())
        return ids[self.rows(ids) < 0]

    def sighted(self) -> tuple[np.ndarray, np.ndarray]:
        """The ids not yet admitted (ascending) and their sightings."""
        at = self.pending.live_rows()
        ids = self.pending.row_ids()[at]
        order = np.argsort(ids)
        return ids[order], self.sightings[at[order]]

    def set_sighted(self, ids: np.ndarray, counts: np.ndarray) -> None:
        """The sightings of the ids not yet admitted (a loaded save's), those admitted since left out."""
        self.pending = IdIndex()
        out = self.rows(ids) < 0
        at = self.pending.add(ids[out])
        self.sightings = np.zeros(self.pending.end, np.int64)
        self.sightings[at] = counts[out]

    def begin_save(self) -> None:
        """A save writes the rows and the removed ids as they are now: what changes from now on is the next
        interval's."""
        self.saving = (self.epoch, self.changed.count, self.removed.count)
        self.epoch += 1

    def commit_save(self) -> None:
        """The save in progress (if any) is complete: the rows it wrote are saved (not those changed since it
        began); a save interval passed (shrink counts it)."""
        if self.saving is not None:
            epoch, changed, removed = self.saving
            self.clean = epoch + 1
            self.changed.keep(self.changed.view()[changed:])
            self.removed.keep(self.removed.view()[removed:])
            self.saving = None
        self.saves += 1


class ParameterServer:
    """Server ``index`` of ``split`` (module docstring); ``startup`` is the program the workers initialize with."""

    def __init__(
        self, index: int, split: Split, startup: Program, mode: str = "async", timeout: float = 300.0, restart: int = 0
    ) -> None:
        if mode not in MODES:
            raise BlockirError(f"parameter server mode must be one of {', '.join(MODES)}, got {mode!r}")
        self.index = index
        self.split = split
        self.servers = len(split.servers)
        self.mode = mode
        self.timeout = timeout
        self.scope = Scope()
        # Locks, taken in this order and never one while holding a later one: ``_lock`` (the version, a sync
        # step's pushes, barriers, the workers that finished, the stats), ``_dense_lock`` (the dense blocks and
        # every value of the scope but the tables'), then a table's own (its shard): a pull or an update of one
        # table never waits for another table's update.
        self._lock = threading.Condition()
        self._dense_lock = threading.Lock()
        self._table_locks = {t.name: threading.Lock() for t in split.tables}
        self._version = 0  # updates applied (sync: steps)
        self._pending: dict[int, tuple[dict[str, np.ndarray], dict[str, tuple[np.ndarray, np.ndarray]], int]] = {}
        self._stopped = False
        self._finished: set[int] = set()
        self._barrier_arrived: set[int] = set()
        self._barrier_generation = 0
        self.program = split.servers[index]
        self.blocks = {b.name: b for b in split.blocks if b.server == index}
        self._ops = {self._param_of(op): op for op in self.program.global_block().ops}  # by block or table name
        self._updates = {name: _Update(op) for name, op in self._ops.items()}
        self._holders: dict[str, ScopeVariable] = {}  # the scope's variables an update reads (:meth:`_read`)
        inits = _initializers(startup)
        self.shards = {t.name: self._shard(t, inits) for t in split.tables}
        self._init_states(inits)
        self.stats = {"pushes": 0, "pulls": 0, "bytes_in": 0, "bytes_out": 0}
        # which life of this server this is: restarted by the launcher (``restart`` > 0), from which checkpoint
        self._incarnation: dict[str, Any] = {"restart": restart, "checkpoint": None, "step": None, "version": None}

    # -- set-up ---------------------------------------------------------------------------------------
    @staticmethod
    def _param_of(op: Operator) -> str:
        return op.input("Param")[0]

    def _shard(self, table: SparseTable, inits: dict[str, Operator]) -> _Shard:
        if self.mode == "geo":  # the rows only: the workers keep the optimizer's state
            return _Shard(table, _init_of(inits, table.name), {})
        op = self._ops[table.name]
        states = [
            n for slot, names in op.inputs.items() if slot not in ("Param", "Grad", "LearningRate") for n in names
        ]
        per_row = {
            s: _init_of(inits, s)
            for s in states
            if (self.program.global_block().var(s).shape or ())[-1:] == (table.dim,)
        }
        return _Shard(table, _init_of(inits, table.name), per_row)

    def _init_states(self, inits: dict[str, Operator]) -> None:
        """The optimizer state of the dense blocks and the tables' scalar states (``beta_pow``), and the learning
        rates: made by their startup ops, a dense block's cut to its rows."""
        block = self.program.global_block()
        per_row = {s for shard in self.shards.values() for s in shard.state_init} | set(self.shards)
        for name, var in block.vars.items():
            if not var.persistable or name in per_row or name in self.blocks:
                continue
            source, held = self._source(name)
            value = _run_init(_init_of(inits, source), _startup_shape(inits, source))
            if held is not None and value.shape[:1] == (self._rows_of(held.param),):
                value = value[held.begin : held.end]
            self.scope.set(name, np.ascontiguousarray(value))

    def _source(self, name: str) -> tuple[str, DenseBlock | None]:
        """The worker variable a server variable holds (part of), and the block when it is a block's."""
        for held in self.blocks.values():
            if held.count > 1 and name.endswith(f".block{held.index}"):
                source = name.removesuffix(f".block{held.index}")
                if source in self.split.optimizer_states.get(held.param, ()):
                    return source, held
        return name, next((b for b in self.blocks.values() if name in self.split.optimizer_states[b.param]), None)

    def _rows_of(self, param: str) -> int:
        return max(b.end for b in self.split.blocks if b.param == param)

    # -- the API the workers call ------------------------------------------------------------------------
    def init_dense(self, values: dict[str, np.ndarray]) -> None:
        """The dense blocks' first values (worker 0's, by block name)."""
        with self._dense_lock:
            for name, value in values.items():
                if name not in self.blocks:
                    raise BlockirError(f"parameter server {self.index} holds no dense block {name!r}")
                self.scope.set(name, np.array(value, copy=True))

    def init_rows(self, table: str, ids: np.ndarray, rows: np.ndarray) -> None:
        """GEO: rows' first values (worker 0's local table, which every worker starts from)."""
        with self._holding(table) as shard:
            ids = np.asarray(ids, np.int64)
            self._check_ids(shard, ids)
            shard.install(ids, {table: rows})

    def pull_dense(self, names: Sequence[str], after: int = 0) -> dict[str, np.ndarray]:
        """The dense blocks ``names``; in sync mode once ``after`` steps are applied."""
        with self._lock:
            self._wait(after)
            self._wait_for(
                lambda: all(self.scope.find_var(n) is not None for n in names),
                f"the first values of {list(names)} (fleet.init_worker on worker 0 gives them)",
            )
            with self._dense_lock:
                values = {n: np.array(self.scope.get(n), copy=True) for n in names}
            self.stats["pulls"] += 1
            self.stats["bytes_out"] += sum(v.nbytes for v in values.values())
            return values

    def pull_sparse(self, table: str, ids: np.ndarray, after: int = 0) -> np.ndarray:
        """Rows of ``table`` at ``ids`` (ids this server holds; zeros for ids not admitted); in sync mode once
        ``after`` steps are applied."""
        if self.mode == "sync":
            with self._lock:
                self._wait(after)
        with self._holding(table) as shard:
            ids = np.asarray(ids, np.int64)
            self._check_ids(shard, ids)
            rows = shard.rows(ids)
            if shard.entry.kind == "":  # no entry policy: rows are made on first use
                rows = shard.made(ids, rows)
            known = rows >= 0
            values = shard.store[table]
            if known.all():
                shard.carried[rows] = shard.saves
                out = values.take(rows, axis=0)  # (a copy, as values[rows] makes, in about 0.6x the time)
            else:
                shard.carried[rows[known]] = shard.saves
                out = np.zeros((len(ids), shard.table.dim), values.dtype)
                out[known] = values[rows[known]]
        with self._lock:
            self.stats["pulls"] += 1
            self.stats["bytes_out"] += out.nbytes
        return out

    def push(
        self,
        worker: int,
        dense: dict[str, np.ndarray],
        sparse: dict[str, tuple[np.ndarray, np.ndarray]],
        weight: int = 1,
    ) -> int:
        """One worker's gradients: dense by block name, sparse by table as (ids, rows).
        Sync: waits until every worker pushed this step and the update is applied. Returns the version."""
        with self._lock:
            if self._stopped:
                raise BlockirError(f"parameter server {self.index} is stopped: worker {worker}'s push is refused")
            self.stats["pushes"] += 1
            self.stats["bytes_in"] += sum(v.nbytes for v in dense.values()) + sum(
                i.nbytes + r.nbytes for i, r in sparse.values()
            )
            for table, (ids, _) in sparse.items():
                self._check_ids(self._table(table), np.asarray(ids, np.int64))
            if self.mode == "sync":
                step = self._version + 1
                while worker in self._pending:  # its previous step still waits for the others
                    self._wait_for(lambda: worker not in self._pending, f"worker {worker}'s step {step} to be applied")
                    step = self._version + 1
                self._pending[worker] = (dense, sparse, weight)
                if len(self._pending) == self.split.workers:
                    self._apply_step()
                else:
                    self._wait(step)
                return self._version
        self._apply(dense, sparse)  # outside ``_lock``: under the dense lock, then each table's
        with self._lock:
            self._version += 1
            return self._version

    def exchange(
        self,
        worker: int,
        dense: dict[str, np.ndarray],
        sparse: dict[str, tuple[np.ndarray, np.ndarray]],
        weight: int,
        blocks: Sequence[str],
        rows: dict[str, np.ndarray],
    ) -> tuple[int, dict[str, np.ndarray], dict[str, np.ndarray]]:
        """An async worker's request at the end of its window: its push, then the dense ``blocks`` and the
        ``rows`` (ids by table) as they are after it, in one request; with the version after the push."""
        version = self.push(worker, dense, sparse, weight)
        return version, self.pull_dense(blocks), {t: self.pull_sparse(t, ids) for t, ids in rows.items()}

    # -- saving and loading (fleet.save_persistables, init_server(dirname)) -----------------------------
    def values(self, names: Sequence[str]) -> dict[str, np.ndarray]:
        """Variables of this server's scope (the dense blocks' optimizer state, learning rates) by name."""
        with self._dense_lock:
            return {n: np.array(self.scope.get(n), copy=True) for n in names}

    def init_values(self, values: dict[str, np.ndarray]) -> None:
        """Set variables this server declares (worker 0's loaded optimizer state); others are refused."""
        block = self.program.global_block()
        with self._dense_lock:
            for name, value in values.items():
                if not block.has_var(name):
                    raise BlockirError(f"parameter server {self.index} has no variable {name!r}")
                self.scope.set(name, np.array(value, copy=True))

    def save_shards(self, directory: str, delta: bool = False) -> dict[str, dict[str, Any]]:
        """Write this server's shard of every table into ``directory`` (a save's generation directory): every
        row (``delta``: only the rows changed since the last complete save) with its optimizer state, and the
        admission state of the ids not yet admitted (their sightings), so that no load forgets them. Per
        table, the shard's manifest entry. The rows count as saved once :meth:`commit_save` says the save is
        complete.

        Each table's rows are those it held at one moment (a consistent cut): a delta's are gathered under the
        table's lock; a full save takes its lock for a moment to begin and then a part of an array at a time
        (:class:`_FullSave`), so that pulls and pushes go on while it writes; a row they change is in the next
        delta."""
        entries = {}
        for name in self.shards:
            kind = "delta" if delta else "base"
            path = Path(directory) / "tables" / name / f"{kind}-{self.index:03d}-of-{self.servers:03d}.npys"
            lock, whole = self._table_locks[name], None
            with self._holding(name) as shard:
                shard.begin_save()
                rows: dict[str, np.ndarray | ArrayParts]
                if delta:
                    at, ids = shard.dirty_rows()
                    rows = {"ids": ids, **{k: v[at] for k, v in shard.store.items()}}
                else:  # every row, as the shard holds them, a part at a time
                    whole = _FullSave(shard)
                    shard.writing.append(whole)
                    rows = {key: whole.parts(key, lock) for key in ("ids", *shard.store)}
                    if shard.index.free == 0:  # the rows in the index's order: its table, for a load to take
                        rows["index_slots"] = shard.index.slots.copy()
                pending, counts = shard.sighted()
                removed = shard.removed_ids() if delta else np.zeros(0, np.int64)
                states = [k for k in shard.store if k != name]
            try:
                arrays = {**rows, "pending_ids": pending, "pending_counts": counts, "removed_ids": removed}
                entries[name] = {"file": str(path), "states": states, **write_shard(path, arrays)}
            finally:
                if whole is not None:
                    with lock:
                        shard.writing.remove(whole)
        return entries

    def commit_save(self) -> None:
        """The save :meth:`save_shards` wrote is complete (its manifest written): its rows are saved."""
        for name in self.shards:
            with self._holding(name) as shard:
                shard.commit_save()

    def table_rows(self, table: str) -> tuple[np.ndarray, np.ndarray]:
        """The ids of ``table`` this server holds and their rows (an inference model's table is made of them)."""
        with self._holding(table) as shard:
            return shard.ids.copy(), shard.arrays[table].copy()

    def restore(self, dirname: str) -> dict[str, Any]:
        """This server restarted from the checkpoint ``dirname`` (a save of
        ``fleet.save_persistables`` whose manifest info has the ``step`` and the servers' ``versions``): every
        table's rows it holds, its dense blocks and their optimizer state, cut from the saved values, and its
        version as saved. Everything is read and checked before anything changes. Its incarnation, which
        workers compare with the one they knew to learn what was lost."""
        info = checkpoint_info(dirname)
        versions = info.get("versions")
        if versions is None or len(versions) != self.servers or "step" not in info:
            raise BlockirError(
                f"{dirname}: not a checkpoint of {self.servers} parameter servers (its manifest info: {info!r})"
            )
        values = saved_values(dirname)
        block = self.program.global_block()
        restored = {}
        for name, var in block.vars.items():
            source, held = (self.blocks[name].param, self.blocks[name]) if name in self.blocks else self._source(name)
            if not var.persistable or name in self.shards or source not in values:
                continue
            value, shape = np.asarray(values[source]), tuple(var.shape or ())
            if held is not None and value.shape[:1] == (self._rows_of(held.param),) and value.shape != shape:
                value = value[held.begin : held.end]
            if var.shape is not None and -1 not in shape and value.shape != shape:
                raise BlockirError(
                    f"{dirname}: {source!r} is saved as {list(value.shape)}, parameter server {self.index}'s "
                    f"{name!r} is {list(var.shape)}"
                )
            restored[name] = np.ascontiguousarray(value)
        self.load_tables(dirname, saved_tables(dirname), None)
        with self._lock, self._dense_lock:
            for name, value in restored.items():
                self.scope.set(name, value)
            self._version = int(versions[self.index])
            self._incarnation.update(checkpoint=str(dirname), step=info["step"], version=self._version)
            return dict(self._incarnation)

    def incarnation(self) -> dict[str, Any]:
        """Which life of this server this is: ``restart`` (0: never restarted), and, when restored, the
        ``checkpoint`` it came back from, that checkpoint's ``step`` and the ``version`` it held."""
        with self._lock:
            return dict(self._incarnation)

    def resume(self, step: int) -> None:
        """Sync mode, after a restart from a checkpoint: the workers are at ``step``; the steps in between are
        lost, and the next step is ``step + 1``."""
        with self._lock:
            if self.mode == "sync" and self._version < step:
                self._version = step
                self._lock.notify_all()

    def shrink(self, threshold: int) -> dict[str, int]:
        """Drop, from every table, the rows no pull or push carried for ``threshold`` save intervals (completed
        saves); they are gone from the next save (a delta records them as removed). Rows dropped per table."""
        if isinstance(threshold, bool) or not isinstance(threshold, int) or threshold < 1:
            raise BlockirError(f"shrink: threshold must be an int >= 1 (save intervals), got {threshold!r}")
        dropped = {}
        for name in self.shards:
            with self._holding(name) as shard:
                dropped[name] = shard.shrink(threshold)
        return dropped

    def load_tables(
        self, dirname: str, tables: Mapping[str, TableEntry | dict[str, Any]], names: Sequence[str] | None
    ) -> None:
        """Load the rows of ``tables`` (a save's entries, or their JSON, checked as a manifest's; only ``names``
        when given) this server holds by the
        rule ``id % servers``, whatever the number of servers that made the save (one by as many servers: only
        its own shards are read), the base and each delta replayed (:func:`~blockir.distributed.saves.replay`).
        Everything is read and checked before any shard of this server changes."""
        chosen = list(tables) if names is None else list(names)
        loaded = {}
        for name in chosen:
            shard = self._table(name)
            if name not in tables:
                raise BlockirError(f"{dirname}: the save has no table {name!r} (it has {sorted(tables)})")
            entry = TableEntry.from_json(tables[name], dirname, name)
            if entry.dim != shard.table.dim or entry.dtype != shard.table.dtype:
                raise BlockirError(
                    f"{dirname}: table {name!r} is saved as {entry.dtype}[-1, {entry.dim}], the program "
                    f"declares {shard.table.dtype}[{shard.table.height}, {shard.table.dim}]"
                )
            missing = sorted(set(shard.store) - {name} - set(entry.states))
            if missing:
                raise BlockirError(f"{dirname}: table {name!r} is saved without the optimizer state {missing}")
            rows = replay(dirname, name, entry, list(shard.store), (self.index, self.servers))
            if entry.height > shard.table.height:  # (read_shard checked the ids against the save's height)
                self._check_range(shard, rows.index.row_ids()[rows.index.live_rows()])
            loaded[name] = rows  # (replay keeps only this server's ids by the rule)
        fresh = {}
        for name, rows in loaded.items():
            shard = self._table(name)
            fresh[name] = _Shard(shard.table, shard.init, shard.state_init)
            fresh[name].adopt(rows)
        for name, shard in fresh.items():
            with self._table_locks[name]:
                self.shards[name] = shard

    def finish(self, worker: int) -> None:
        """Worker ``worker`` is done (``fleet.stop_worker``)."""
        with self._lock:
            self._finished.add(worker)
            self._lock.notify_all()

    def wait_finished(self, timeout: float | None = None) -> None:
        """Return once every worker finished (or the server was stopped); an error after ``timeout`` s."""
        deadline = None if timeout is None else time.monotonic() + timeout
        with self._lock:
            while len(self._finished) < self.split.workers and not self._stopped:
                if deadline is not None and time.monotonic() >= deadline:
                    missing = sorted(set(range(self.split.workers)) - self._finished)
                    raise BlockirError(
                        f"parameter server {self.index}: workers {missing} did not finish in {timeout:g} s"
                    )
                self._lock.wait(1.0)

    def barrier(self, worker: int) -> None:
        """Wait until every worker reached the barrier as many times as ``worker`` has."""
        with self._lock:
            generation = self._barrier_generation
            self._barrier_arrived.add(worker)
            if len(self._barrier_arrived) == self.split.workers:
                self._barrier_arrived = set()
                self._barrier_generation += 1
                self._lock.notify_all()
                return
            self._wait_for(lambda: self._barrier_generation > generation, "the other workers at barrier_worker")

    def stop(self) -> None:
        """Refuse pushes from now on; wake every waiter."""
        with self._lock:
            self._stopped = True
            self._lock.notify_all()

    def version(self) -> int:
        with self._lock:
            return self._version

    def table_size(self, table: str) -> int:
        """How many rows of ``table`` this server holds."""
        with self._holding(table) as shard:
            return len(shard)

    def table_ids(self, table: str) -> np.ndarray:
        with self._holding(table) as shard:
            return shard.ids.copy()

    # -- applying ----------------------------------------------------------------------------------------
    def _wait(self, version: int) -> None:
        if self.mode == "sync" and self._version < version:
            self._wait_for(lambda: self._version >= version, f"step {version}")

    def _wait_for(self, done: Any, what: str) -> None:
        deadline = time.monotonic() + self.timeout
        while not done():
            if self._stopped:
                raise BlockirError(f"parameter server {self.index} stopped while waiting for {what}")
            left = deadline - time.monotonic()
            if left <= 0:
                missing = sorted(set(range(self.split.workers)) - set(self._pending))
                raise BlockirError(
                    f"parameter server {self.index}: waited {self.timeout:g} s for {what}; workers {missing} have not "
                    f"pushed it"
                )
            self._lock.wait(min(left, 1.0))

    def _apply_step(self) -> None:
        pending, self._pending = self._pending, {}
        total = sum(weight for _, _, weight in pending.values())
        dense: dict[str, np.ndarray] = {}
        sparse: dict[str, tuple[list[np.ndarray], list[np.ndarray]]] = {}
        for worker in sorted(pending):
            grads, rows, weight = pending[worker]
            share = weight / total
            for name, g in grads.items():
                scaled = g * g.dtype.type(share)
                dense[name] = dense[name] + scaled if name in dense else scaled
            for table, (ids, values) in rows.items():
                parts = sparse.setdefault(table, ([], []))
                parts[0].append(np.asarray(ids, np.int64))
                parts[1].append(values * values.dtype.type(share))
        self._apply(dense, {t: (np.concatenate(i), np.concatenate(v)) for t, (i, v) in sparse.items()})
        self._version += 1
        self._lock.notify_all()

    def _apply(self, dense: dict[str, np.ndarray], sparse: dict[str, tuple[np.ndarray, np.ndarray]]) -> None:
        unknown = [name for name in dense if name not in self.blocks]
        if unknown:
            raise BlockirError(f"parameter server {self.index} holds no dense block {unknown[0]!r}")
        with self._dense_lock:
            if self.mode == "geo":  # deltas: added
                for name, delta in dense.items():
                    self.scope.get(name)[...] += delta.reshape(self.scope.get(name).shape)
            else:
                for name, grad in dense.items():  # every gradient checked before any block changes
                    self._updates[name].check(grad)
                for name, grad in dense.items():
                    for var, value in self._updates[name].run(grad, self._read).items():
                        self.scope.set(var, value)
        for table, (ids, values) in sparse.items():
            with self._holding(table) as shard:
                self._apply_rows(shard, np.asarray(ids, np.int64), values)

    def _apply_rows(self, shard: _Shard, ids: np.ndarray, values: np.ndarray) -> None:
        rows = shard.admit(ids)
        keep = rows >= 0
        if not keep.any():
            return
        grad = values.reshape(-1, shard.table.dim)
        if not keep.all():
            rows, grad = rows[keep], grad[keep]
        if not _ascending(ids):  # perhaps an id twice (a sync step's pushes, a push not merged): rows summed
            rows, grad = merge_rows(rows, grad)
        shard.touch(rows)
        name = shard.table.name
        shard.changing(rows)
        if self.mode == "geo":
            shard.store[name][rows] += grad
            return
        self._updates[name].check(grad)
        gathered = shard.gather(rows)
        made = self._updates[name].run(grad, lambda var: gathered[var] if var in gathered else self._read(var))
        for var, array in shard.store.items():
            array[rows] = made.pop(var, gathered[var])
        for var, value in made.items():  # a state of the table as a whole (adam's beta powers)
            self.scope.set(var, value)

    def _read(self, name: str) -> Any:
        """The value of ``name`` in the scope (its variable looked up once: a variable stays, its value changes)."""
        holder = self._holders.get(name)
        if holder is None:
            holder = self.scope.find_var(name)
            if holder is None:
                return self.scope.get(name)  # (an error naming it: it is not there yet)
            self._holders[name] = holder
        return holder.get_tensor()

    def _table(self, table: str) -> _Shard:
        shard = self.shards.get(table)
        if shard is None:
            raise BlockirError(f"parameter server {self.index} holds no sparse table {table!r}")
        return shard

    @contextmanager
    def _holding(self, table: str) -> Iterator[_Shard]:
        """The shard of ``table`` with its lock held."""
        self._table(table)
        with self._table_locks[table]:
            yield self.shards[table]

    def _check_ids(self, shard: _Shard, ids: np.ndarray) -> None:
        """``ids`` are ids of ``shard``'s table that this server holds."""
        self._check_range(shard, ids)
        if self.servers == 1:  # (holds every id)
            return
        wrong = ids[ids % self.servers != self.index]
        if wrong.size:
            raise BlockirError(
                f"parameter server {self.index} does not hold id {int(wrong[0])} of {shard.table.name!r}"
            )

    @staticmethod
    def _check_range(shard: _Shard, ids: np.ndarray) -> None:
        """``ids`` are ids of ``shard``'s table (within its height)."""
        if ids.size == 0:
            return
        low, high = int(ids.min()), int(ids.max())
        if low < 0 or high >= shard.table.height:
            raise BlockirError(
                f"table {shard.table.name!r}: id {low if low < 0 else high} is out of range (valid ids: "
                f"0..{shard.table.height - 1})"
            )


def _ascending(ids: np.ndarray) -> bool:
    """Whether ``ids`` ascend strictly, so that none is there twice (a merged push's: the communicator's)."""
    return bool((ids[1:] > ids[:-1]).all())


def _initializers(startup: Program) -> dict[str, Operator]:
    """Variable -> the startup op that makes it."""
    return {name: op for op in startup.global_block().ops for name in op.output_names()}


def _init_of(inits: dict[str, Operator], name: str) -> Operator:
    op = inits.get(name)
    if op is None:
        raise BlockirError(f"the startup program has no op making {name!r}, which a parameter server holds")
    return op


def _startup_shape(inits: dict[str, Operator], name: str) -> list[int]:
    return [int(d) for d in inits[name].attrs.get("shape", [1])]
