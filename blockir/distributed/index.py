"""The id index of a sparse-table shard: int64 ids to rows, a batch at a time, in numpy arrays.

:class:`IdIndex` hands out rows ``0, 1, ...`` to the ids added (a removed id's row first, from a free list
kept as an array) and finds them again. It is an open-addressing hash table with linear probing whose slots
hold row numbers (int32 while the rows fit in one, else int64); the key of a slot is read from the id of
its row (:meth:`IdIndex.row_ids`), so the table stores no key of its own. The table's size is a power of
two; live ids and tombstones fill at most 60% of it, a rebuilt table at most 45% (so it is rebuilt, larger,
once the ids have grown by a third): 6.7-18 bytes per id in slots, and 8 in the row's id, which the shard
needs anyway. Every operation probes all the ids of a batch together, one vectorised round per probe step,
so its cost is that of a few numpy passes over the batch, whatever the table's size. A removed id leaves a
tombstone that probes walk past and insertions fill; tombstones count towards the load, and the table is
rebuilt (from the live rows alone) when they fill it.

:func:`unique_ids` is ``np.unique`` of a batch's ids by one sort (:func:`run_starts` marks where each run of equal
ids begins in a sorted array), and :func:`sort_ids` the stable sort of a batch's ids with where each one's run of
equal ids is, which the worker's communicator uses; :func:`merge_rows` sums the rows of repeated keys by one sort
(a push's rows by id on the worker, sorted once for its lookup and its push; a push's rows by table row on the
server).
"""

from __future__ import annotations

import os
from concurrent.futures import ThreadPoolExecutor
from typing import NamedTuple

import numpy as np

__all__ = ["IdIndex", "SortedIds", "grown", "merge_rows", "run_starts", "sort_ids", "unique_ids"]

_EMPTY = -1  # a slot never used since the table was built
_GONE = -2  # a slot whose id was removed (a tombstone)
_GOLDEN = np.uint64(0x9E3779B97F4A7C15)  # Fibonacci hashing: 2**64 / the golden ratio
_MAX_LOAD = 0.6  # live ids and tombstones over slots, at most
_REBUILT_LOAD = 0.45  # at most, in a rebuilt table
_INT32_ROWS = int(np.iinfo(np.int32).max)
_CHECKED = 1 << 18  # rows checked at a time by IdIndex.restored


def _tally(slots: np.ndarray) -> tuple[int, int, int, int]:
    """The least and the greatest of ``slots`` (a part of a table), its live slots and its tombstones."""
    return int(slots.min()), int(slots.max()), int(np.count_nonzero(slots >= 0)), int(np.count_nonzero(slots == _GONE))


def grown(array: np.ndarray, size: int) -> np.ndarray:
    """``array`` in one of at least ``size`` rows, twice as many when it grows (amortised doubling); the new
    rows are uninitialised (memory the system maps only once they are written)."""
    if size <= len(array):
        return array
    out = np.empty((max(size, 2 * len(array), 16), *array.shape[1:]), array.dtype)
    out[: len(array)] = array
    return out


def unique_ids(ids: np.ndarray) -> np.ndarray:
    """``np.unique(ids)`` of a 1-D array of ids, by one sort: numpy's own (2.3 and later) hashes integers, which
    costs several times as much for a batch's ids (about 80 against 15 us for 720 of them, 36 against 2.4 ms for
    88,000, on the 2-core VM)."""
    ordered = np.sort(ids)
    return ordered[run_starts(ordered)]


def run_starts(ordered: np.ndarray) -> np.ndarray:
    """Of a sorted array, whether each value is the first of its run of equal values (a mask)."""
    first = np.empty(len(ordered), bool)
    first[:1] = True
    np.not_equal(ordered[1:], ordered[:-1], out=first[1:])
    return first


class SortedIds(NamedTuple):
    """A stable sort of a 1-D array of ids (:func:`sort_ids`): ``order`` (``np.argsort(ids, kind="stable")``),
    ``ordered`` (the ids in that order), ``first`` (:func:`run_starts` of ``ordered``) and ``run`` (the distinct id
    of each sorted position: 0 for the least, ...)."""

    order: np.ndarray
    ordered: np.ndarray
    first: np.ndarray
    run: np.ndarray

    @property
    def distinct(self) -> np.ndarray:
        """The distinct ids, sorted (``np.unique``'s)."""
        return self.ordered[self.first]

    def inverse(self) -> np.ndarray:
        """Where each of the ids is among :attr:`distinct` (``np.unique``'s ``return_inverse``)."""
        inverse = np.empty(len(self.order), np.int64)
        inverse[self.order] = self.run
        return inverse


def sort_ids(ids: np.ndarray) -> SortedIds:
    """The :class:`SortedIds` of ``ids`` (any integer keys, one dimension): one stable sort."""
    order = np.argsort(ids, kind="stable")
    ordered = ids[order]
    first = run_starts(ordered)
    run = np.cumsum(first)
    run -= 1
    return SortedIds(order, ordered, first, run)


def merge_rows(ids: np.ndarray, rows: np.ndarray, sort: SortedIds | None = None) -> tuple[np.ndarray, np.ndarray]:
    """The rows of repeated ``ids`` (any integer keys) summed, ids sorted (one sort of the ids; ``sort``: the ids'
    :func:`sort_ids` when known, a worker's lookup of the same ids having sorted them). The rows of an id are added
    in the order given: its first row, then its second, and so on, each rank by one fancy-indexed ``+=`` over
    the ids that have a row of that rank (distinct ids: no ``add.at``, which costs several times as much per
    element)."""
    order, ordered, first, run = sort_ids(ids) if sort is None else sort
    out = rows.take(order[first], axis=0)
    if len(out) == len(ordered):
        return ordered, out
    again = np.flatnonzero(~first)  # the sorted positions of the rows after an id's first
    rank = again - np.flatnonzero(first).take(run.take(again))  # 1 for an id's second row, 2 for its third...
    by_rank = np.argsort(rank, kind="stable")  # by rank, then by id
    again, rank = again.take(by_rank), rank.take(by_rank)
    to = run.take(again)
    values = rows.take(order.take(again), axis=0)
    cuts = (np.flatnonzero(rank[1:] != rank[:-1]) + 1).tolist()
    for begin, end in zip([0, *cuts], [*cuts, len(again)]):
        out[to[begin:end]] += values[begin:end]
    return ordered[first], out


class IdIndex:
    """A map from ids (int64, at least 0) to the rows it hands out (module docstring)."""

    def __init__(self) -> None:
        self._slots = np.full(16, _EMPTY, np.int32)
        self._shift = np.uint64(64 - 4)  # 64 - log2(slots)
        self._ids = np.zeros(0, np.int64)  # the id of each row handed out; -1 for a free row
        self._end = 0  # rows handed out so far: rows 0..end-1 are live or free
        self._free = np.zeros(0, np.int64)  # free rows, a stack
        self._free_count = 0
        self._live = 0
        self._gone = 0  # tombstones in the table

    def __len__(self) -> int:
        return self._live

    @property
    def end(self) -> int:
        """One past the highest row ever handed out: every live row is below it."""
        return self._end

    @property
    def free(self) -> int:
        """How many rows below :attr:`end` are free (handed out again before new ones)."""
        return self._free_count

    @property
    def nbytes(self) -> int:
        """The bytes of the index in use: its table, the ids of its rows, its free list (the arrays' capacity
        beyond them is never written, so the system does not map it)."""
        return self._slots.nbytes + 8 * (self._end + self._free_count)

    @property
    def slots(self) -> np.ndarray:
        """The table: a row (or empty, or a tombstone) per slot. A full save keeps it beside the ids, so that a
        load need not build it again (:meth:`restored`)."""
        return self._slots

    @classmethod
    def restored(cls, ids: np.ndarray, slots: np.ndarray) -> IdIndex | None:
        """The index of ``ids`` (distinct, at rows 0, 1, ...: no row free) over ``slots``, the table of an index
        that held them so (its :attr:`slots`, saved); None where ``slots`` is no such table (then one is built).
        Checked whole: the table's size and load, each slot's row, as many live slots as rows, and a look-up of
        the id of each row finding that row (:meth:`_finds_rows`). Each row found in a slot of its own, and live
        slots as many as rows: every live slot holds a row of its own, and no id is at two rows. It costs a
        random read of the table per id, a fraction of building it: passes over parts of the table and batches
        of :data:`_CHECKED` rows (their arrays stay in the cache) run on threads side by side (numpy's passes
        release the GIL)."""
        n, size = len(ids), slots.size
        if slots.ndim != 1 or slots.dtype not in (np.int32, np.int64) or size < 16 or size & (size - 1) or n == 0:
            return None
        with ThreadPoolExecutor(min(8, os.cpu_count() or 1)) as pool:
            tallies = list(pool.map(_tally, np.array_split(slots, max(1, size // (4 * _CHECKED)))))
            low, high = min(t[0] for t in tallies), max(t[1] for t in tallies)
            live, gone = sum(t[2] for t in tallies), sum(t[3] for t in tallies)
            if low < _GONE or high >= n or live != n or live + gone > _MAX_LOAD * size:  # (an empty slot ends probes)
                return None
            index = cls()
            index._slots, index._shift = slots, np.uint64(64 - size.bit_length() + 1)
            index._ids, index._end, index._live, index._gone = ids, n, n, gone
            return index if all(pool.map(index._finds_rows, range(0, n, _CHECKED))) else None

    def _finds_rows(self, start: int) -> bool:
        """Whether a look-up of the id of each of the rows ``start`` to ``start + _CHECKED`` (none free) finds that
        row: the probe from the id's home slot passes only full slots (tombstones, or rows of other ids) before the
        slot holding its row. As :meth:`find` would look it up, but the id of a row is read only where a probe
        passes a row not its own: most ids are at their home slot, and the row sought is known."""
        ids, mask = self._ids[: self._end], self._slots.size - 1
        pos = self._hash(ids[start : start + _CHECKED])
        at = np.take(self._slots, pos, mode="clip")  # (every position is in the table: no bound to check)
        todo = np.flatnonzero(at != np.arange(start, start + len(pos), dtype=at.dtype))
        pos, row, todo = pos[todo], at[todo].astype(np.int64), todo + start
        while todo.size:
            if np.any(row == _EMPTY):
                return False  # a probe that ends before the row of its id
            full = row >= 0
            if np.any(ids[row[full]] == ids[todo[full]]):
                return False  # another row of the same id, passed over
            pos = (pos + 1) & mask
            row = np.take(self._slots, pos).astype(np.int64)
            on = row != todo
            todo, pos, row = todo[on], pos[on], row[on]
        return True

    def row_ids(self) -> np.ndarray:
        """The id of every row below :attr:`end` (-1 for a free row); a view, valid until the next change."""
        return self._ids[: self._end]

    def live_rows(self) -> np.ndarray:
        """The rows in use, ascending."""
        if self._free_count == 0:
            return np.arange(self._end, dtype=np.int64)
        return np.flatnonzero(self._ids[: self._end] >= 0)

    def find(self, ids: np.ndarray) -> np.ndarray:
        """The row of each of ``ids`` (-1 for an id not in the index)."""
        return self._probe(np.asarray(ids, np.int64))[0]

    def add(self, ids: np.ndarray) -> np.ndarray:
        """Add ``ids`` (distinct, none in the index); their rows, free rows first."""
        keys = np.asarray(ids, np.int64)
        n = keys.size
        reused = min(n, self._free_count)
        rows = np.empty(n, np.int64)
        rows[:reused] = self._free[self._free_count - reused : self._free_count]
        self._free_count -= reused
        rows[reused:] = np.arange(self._end, self._end + n - reused)
        self._end += n - reused
        self._ids = grown(self._ids, self._end)
        self._ids[rows] = keys
        wide = self._slots.dtype == np.int32 and self._end > _INT32_ROWS
        if wide or self._live + self._gone + n > _MAX_LOAD * self._slots.size:
            self._live += n
            self._rebuild()
        else:
            self._live += n
            self._place(keys, rows)
        return rows

    def remove(self, ids: np.ndarray) -> np.ndarray:
        """Remove those of ``ids`` in the index (their rows become free); the row each had (-1: none)."""
        rows, slots = self._probe(np.asarray(ids, np.int64))
        hit = rows >= 0
        at, first = np.unique(slots[hit], return_index=True)  # an id given twice is removed once
        gone = rows[hit][first]
        self._slots[at] = _GONE
        self._ids[gone] = -1
        self._free = grown(self._free, self._free_count + gone.size)
        self._free[self._free_count : self._free_count + gone.size] = gone
        self._free_count += gone.size
        self._live -= gone.size
        self._gone += gone.size
        return rows

    # -- the table ---------------------------------------------------------------------------------------
    def _rebuild(self) -> None:
        """A new table for the live rows (the tombstones dropped), sized for a load of at most :data:`_REBUILT_LOAD`."""
        size = 16
        while size * _REBUILT_LOAD < self._live:
            size *= 2
        self._slots = np.full(size, _EMPTY, np.int32 if self._ids.size <= _INT32_ROWS else np.int64)
        self._shift = np.uint64(64 - size.bit_length() + 1)
        self._gone = 0
        rows = self.live_rows()
        self._place(self._ids[rows], rows)

    def _hash(self, keys: np.ndarray) -> np.ndarray:
        """The home slot of each key (ids are at least 0: their bits read as uint64 without a copy)."""
        slots = keys.view(np.uint64) * _GOLDEN
        slots >>= self._shift
        return slots.view(np.int64)

    def _probe(self, keys: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """The row and the slot of each key (-1 and -1 for a key not in the table)."""
        if self._end == 0:
            return np.full(keys.size, -1, np.int64), np.full(keys.size, -1, np.int64)
        mask = self._slots.size - 1
        where = self._hash(keys)
        rows = self._slots[where].astype(np.int64)  # the first probe of every key: most end there
        hit = self._ids[rows] == keys  # (row -1 or -2 reads an id of the last rows: hit is cleared below)
        hit &= rows >= 0
        on = ~hit & (rows != _EMPTY)
        rows[~hit] = -1
        todo = np.flatnonzero(on)
        pos = (where[todo] + 1) & mask
        where[~hit] = -1
        while todo.size:
            row = self._slots[pos].astype(np.int64)
            found = row >= 0
            found[found] = self._ids[row[found]] == keys[todo[found]]
            rows[todo[found]] = row[found]
            where[todo[found]] = pos[found]
            on = (row != _EMPTY) & ~found
            todo, pos = todo[on], (pos[on] + 1) & mask
        return rows, where

    def _place(self, keys: np.ndarray, rows: np.ndarray) -> None:
        """Put ``keys`` (none in the table) with their ``rows`` into free slots (empty, or a tombstone)."""
        mask = self._slots.size - 1
        pos = self._hash(keys)
        while rows.size:
            was = self._slots[pos]
            free = was < 0
            at, mine = pos[free], rows[free]
            self._slots[at] = mine  # several keys may want one slot: one of them gets it
            won = free.copy()
            won[free] = self._slots[at] == mine
            self._gone -= int(np.count_nonzero(was[won] == _GONE))
            lost = ~won
            rows, pos = rows[lost], (pos[lost] + 1) & mask
