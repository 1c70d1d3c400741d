"""The pattern-rewrite engine of the fusion passes: patterns as data, a greedy driver, lineage, dry runs.

A :class:`Pattern` names ops connected through variables, like MLIR's
declarative rewrite rules or tinygrad's ``UPat``: each :class:`OpPattern`
gives the op types it accepts, a *symbol* per slot (the same symbol is the
same variable; ``"db?"`` marks a slot that may be empty) and attribute
constraints (a value, or a predicate on the value); a ``where`` predicate
relates the matched ops (shapes, one op's attributes to another's). Its
:class:`Create` entries say what replaces the match: each replaces a group of
the matched ops by one new op, which reads and writes symbols of the match.
The symbols the matched ops write and no new op writes are the match's
*intermediates*: their values disappear. For example, ``mul`` then
``elementwise_add`` into ``fc``::

    Pattern(
        "mul-add",
        ops=(
            OpPattern("mul", ("mul",), {"X": "x", "Y": "w"}, {"Out": "t"}),
            OpPattern("add", ("elementwise_add",), {"X": "t", "Y": "b"}, {"Out": "out"}),
        ),
        creates=(Create("fc", ("mul", "add"), {"Input": "x", "W": "w", "Bias": "b"}, {"Out": "out"}),),
    )

Matching starts at an op of the first pattern op's types (the anchor) and
finds each further op among the readers or writers of a variable already
bound (each pattern op shares a symbol with an earlier one); a reader of an
intermediate that a matched op writes, when other ops write that variable
too, among the readers of that op's value (such a match is refused anyway:
the cut keeps the refusals to the ops a value connects). A slot the
pattern does not name must be empty, an op a pattern names must not be a
prune target (``is_target``), and an intermediate's variable is bound to no
other symbol. A structural match fires only when it is legal:

- every matched op runs on the same device and stream (its ``op_device`` and
  ``op_stream``, as written): nothing fuses across devices;
- every intermediate is written once, by its matched op, read only by
  matched ops, declared in the match's block and used by no other block, and
  is not persistable nor in ``keep`` (the values the caller fetches or feeds);
- a matched op reading a variable after a matched op wrote it reads it from
  one of them (the values flowing inside the match are those the new ops compute),
  and the new ops, each at the position of the last op of its group (or of
  its first, as its :class:`Create` says), leave
  every other op reading the same values as before (the same writer, or the
  new op standing for it), read what the matched ops read, and leave every
  variable with the same final writer: the program computes what it computed.

An :class:`OpPattern` may name outputs that hand an input back unchanged (``passes``: ``batch_norm``'s
``MeanOut`` with global statistics); they are not writes, so the variable keeps its writer when the op goes.
A pattern may make new variables: its *fresh* symbols (:class:`Fresh`, named after a matched variable), each
written by a *helper*, a :class:`Create` replacing no op, placed where the match's first op was, and read
by the other new ops (``fold-conv-bn``'s ``conv_bn_fold`` computes the folded filter its convolution reads).

The driver (:func:`rewrite`) sweeps every block, trying the patterns in
their order at each anchor, and fires the first legal match; it sweeps again
until nothing fires (a fixed point: each rewrite removes ops of the types
matched, and makes none but helpers, whose types no pattern matches). Each new op
carries its lineage (``op_pass``, ``op_origin`` listing every op of its
group, :func:`~blockir.passes.base.mark_created`) and the common attributes of
its group: its ``op_device`` and ``op_stream``, the union of the ``op_role``
bits and ``op_role_var`` pairs, the first ``op_namescope``. The
intermediates' variables, which nothing uses any more, are removed from the
block. What fired and what matched but
was refused (with the reason) are notes of the pass report and a detail
(``fused``, ``refused``); a :class:`RewritePass` with ``dry_run=true`` does
the same on a copy and reports what would fire, leaving the program as it is.
"""

from __future__ import annotations

import bisect
import functools
import heapq
import operator
import sys
from collections.abc import Callable, Collection, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, ClassVar, NamedTuple

from blockir.errors import BlockirError
from blockir.ir import Block, Operator, Program, Variable
from blockir.ir.core import op_reads_writes
from blockir.ir.devices import checked_device
from blockir.ir.schema import EMPTY_VAR
from blockir.passes.base import Pass, mark_created, origin_key
from blockir.passes.manager import note, record_detail

__all__ = [
    "Create",
    "Fired",
    "Fresh",
    "Match",
    "OpPattern",
    "Pattern",
    "Refused",
    "RewritePass",
    "Rewrites",
    "fresh_name",
    "insert_created",
    "placement",
    "rewrite",
]

_OPTIONAL = "?"


def _symbol(entry: str) -> tuple[str, bool]:
    """(symbol, whether the slot may be empty) of a slot entry: ``"db?"`` is symbol ``db``, optional."""
    return (entry[:-1], True) if entry.endswith(_OPTIONAL) else (entry, False)


@dataclass(frozen=True)
class OpPattern:
    """One op of a pattern: its name in the pattern, the types it accepts, a symbol per slot, attribute constraints.

    An attribute constraint is a value the attribute must equal (defaults filled in from the schema) or a
    predicate on it. ``passes`` names output slots that hand an input's variable back unchanged (bound to the
    symbol of that input, which the match checks): batch_norm's ``MeanOut`` with global statistics. They are
    not writes: the variable keeps its value and its writer when the op goes.
    """

    name: str
    types: tuple[str, ...]
    inputs: Mapping[str, str] = field(default_factory=dict)
    outputs: Mapping[str, str] = field(default_factory=dict)
    attrs: Mapping[str, Any] = field(default_factory=dict)
    passes: tuple[str, ...] = ()

    def __post_init__(self) -> None:
        inputs = set(self.symbols(self.inputs))
        for slot in self.passes:
            if slot not in self.outputs or _symbol(self.outputs[slot])[0] not in inputs:
                raise BlockirError(
                    f"op pattern {self.name!r}: output {slot!r} passes an input through, so its symbol must be "
                    "one of the op's input symbols"
                )

    def symbols(self, slots: Mapping[str, str], required_only: bool = False) -> list[str]:
        """The symbols of ``slots`` (its ``inputs`` or ``outputs``); with ``required_only``, not the optional ones."""
        return [s for s, optional in map(_symbol, slots.values()) if not (required_only and optional)]

    def written(self) -> list[str]:
        """The symbols of its outputs but those that pass an input through (``passes``)."""
        return [_symbol(entry)[0] for slot, entry in self.outputs.items() if slot not in self.passes]


@dataclass(frozen=True)
class Create:
    """A new op replacing the group ``replaces`` (pattern op names): its type, slots by symbol, attributes.

    A slot whose symbol is bound to nothing (an optional slot left empty) is left out; ``attrs`` computes
    the op's own attributes from the match; ``at`` says where the new op goes: at the place of the group's
    ``"last"`` op (the default: it reads what its group read, every input made by then) or of its ``"first"``
    (its outputs are read before the group's last op, e.g. a gradient op that an update joins).

    An empty ``replaces`` makes a *helper*: an op that computes fresh values (:class:`Fresh`) for the other new
    ops from what the matched ops read (a convolution's filter with a batch_norm folded in), at the place of
    the match's first op (whatever ``at`` says); it stands for no op, and its lineage names every matched op.
    """

    type: str
    replaces: tuple[str, ...]
    inputs: Mapping[str, str]
    outputs: Mapping[str, str]
    attrs: Callable[[Match], Mapping[str, Any]] | None = None
    at: str = "last"

    def __post_init__(self) -> None:
        if self.at not in ("first", "last"):
            raise BlockirError(f"create {self.type!r}: at must be 'first' or 'last', got {self.at!r}")


@dataclass(frozen=True)
class Fresh:
    """A variable new ops make that no matched op has (a *fresh* symbol of the pattern): named after the
    variable of symbol ``like`` with ``suffix`` (made unique in the program), of the shape and dtype ``spec``
    computes from the match."""

    like: str
    suffix: str
    spec: Callable[[Match], tuple[tuple[int, ...], str]]


@dataclass(frozen=True)
class Pattern:
    """Ops to find (the first is the anchor) and the ops that replace them; see the module docstring.

    Checked when made: distinct op names, each op after the first sharing a required symbol with the ops
    before it, the creates replacing every op once by fewer ops (helpers aside), reading only what the
    matched ops read and writing only what they write, but for the ``fresh`` symbols: each written by one
    helper and read by the other new ops. ``intermediates``: the symbols the matched ops write (outputs that
    pass an input through aside) and no new op writes. A helper's type must be one no pattern of its pass
    matches, so that a fixed point is reached (each rewrite removes ops of the types matched).
    """

    name: str
    ops: tuple[OpPattern, ...]
    creates: tuple[Create, ...]
    where: Callable[[Match], bool] | None = None
    fresh: Mapping[str, Fresh] = field(default_factory=dict)
    intermediates: frozenset[str] = field(init=False)

    def __post_init__(self) -> None:
        names = [p.name for p in self.ops]
        if not names or len(set(names)) != len(names):
            raise BlockirError(f"pattern {self.name!r}: its ops need distinct names, got {names}")
        required: set[str] = set()
        for p in self.ops:
            mine = p.symbols(p.inputs, True) + p.symbols(p.outputs, True)
            if required and not required & {s for s in p.symbols(p.inputs) + p.symbols(p.outputs)}:
                raise BlockirError(f"pattern {self.name!r}: op {p.name!r} shares no variable with the ops before it")
            required.update(mine)
        replaced = [n for c in self.creates for n in c.replaces]
        replacing = [c for c in self.creates if c.replaces]
        if sorted(replaced) != sorted(names) or len(replacing) >= len(self.ops):
            raise BlockirError(
                f"pattern {self.name!r}: its creates must replace each op once ({names}) by fewer ops, got {replaced}"
            )
        fresh = set(self.fresh)
        read = {s for p in self.ops for s in p.symbols(p.inputs)}
        written = {s for p in self.ops for s in p.written()}
        if fresh & (read | written | {s for p in self.ops for s in p.symbols(p.outputs)}):
            raise BlockirError(f"pattern {self.name!r}: fresh symbols {sorted(fresh)} must be bound by no op")
        helper_writes = {_symbol(e)[0] for c in self.creates if not c.replaces for e in c.outputs.values()}
        if helper_writes != fresh:
            raise BlockirError(
                f"pattern {self.name!r}: helpers (creates replacing nothing) must write exactly the fresh symbols "
                f"{sorted(fresh)}, got {sorted(helper_writes)}"
            )
        read |= fresh
        written |= fresh
        created_reads = {_symbol(e)[0] for c in self.creates for e in c.inputs.values()}
        created_writes = {_symbol(e)[0] for c in self.creates for e in c.outputs.values()}
        if not created_reads <= read or not created_writes <= written:
            raise BlockirError(
                f"pattern {self.name!r}: new ops may read only what the matched ops read and write only what they "
                f"write; extra: {sorted((created_reads - read) | (created_writes - written))}"
            )
        intermediates = frozenset(written - created_writes)
        if created_reads & intermediates:
            raise BlockirError(
                f"pattern {self.name!r}: new ops read values that vanish: {sorted(created_reads & intermediates)}"
            )
        object.__setattr__(self, "intermediates", intermediates)


@dataclass(frozen=True)
class Match:
    """A structural match: the op bound to each pattern op, the variable bound to each symbol."""

    pattern: Pattern
    block: Block
    ops: Mapping[str, Operator]
    values: Mapping[str, str | None]

    def op(self, name: str) -> Operator:
        """The op bound to the pattern op ``name``."""
        return self.ops[name]

    def var(self, symbol: str) -> Variable:
        """The variable bound to ``symbol`` (which must be bound)."""
        name = self.values[symbol]
        if name is None:
            raise BlockirError(f"pattern {self.pattern.name!r}: symbol {symbol!r} is bound to no variable")
        return self.block.find_var_recursive(name)


class Fired(NamedTuple):
    """A rewrite the driver made: the pattern, the block, the origin keys of the ops replaced and created."""

    pattern: str
    block: int
    replaced: tuple[str, ...]
    created: tuple[str, ...]


class Refused(NamedTuple):
    """A structural match the driver did not fire: the pattern, the block, its anchor's origin key, why."""

    pattern: str
    block: int
    anchor: str
    reason: str


class Rewrites(NamedTuple):
    """What :func:`rewrite` did: the rewrites in order, and the matches it refused (each once)."""

    fired: list[Fired]
    refused: list[Refused]


# -- the uses of variables in a block --------------------------------------------------------------------


class _Uses:
    """Who reads and writes each variable of a block (sub-blocks count as their owner's), in block order, kept
    up to date as rewrites replace ops: each op has a sort key (its index at first; a new op takes the key
    of the op whose place it takes). The same lists by op type too, where matching looks for candidates."""

    def __init__(self, block: Block) -> None:
        self.key: dict[int, int] = {}  # op id -> sort key
        self.accesses: dict[int, tuple[set[str], set[str]]] = {}  # op id -> (reads, writes)
        self.readers: dict[str, list[Operator]] = {}
        self.writers: dict[str, list[Operator]] = {}
        self.typed_readers: dict[tuple[str, str], list[Operator]] = {}  # (variable, op type) -> its readers
        self.typed_writers: dict[tuple[str, str], list[Operator]] = {}
        for i, op in enumerate(block.ops):
            self._add(op, i)

    def _key(self, op: Operator) -> int:
        return self.key[id(op)]

    def _tables(self) -> tuple[tuple[dict[str, list[Operator]], dict[tuple[str, str], list[Operator]]], ...]:
        return (self.readers, self.typed_readers), (self.writers, self.typed_writers)

    def _add(self, op: Operator, key: int) -> None:
        reads, writes = (names - {EMPTY_VAR} for names in op_reads_writes(op))
        self.key[id(op)], self.accesses[id(op)] = key, (reads, writes)
        for names, (table, typed) in zip((reads, writes), self._tables()):
            for name in names:
                bisect.insort(table.setdefault(name, []), op, key=self._key)
                bisect.insort(typed.setdefault((name, op.type), []), op, key=self._key)

    def _drop(self, ops: list[Operator], op: Operator) -> None:
        """Remove ``op`` from ``ops`` (sorted by key), found by its key."""
        at = bisect.bisect_left(ops, self.key[id(op)], key=self._key)
        if at < len(ops) and ops[at] is op:
            del ops[at]
        else:  # not where its key says: as list.remove would, by identity
            ops.remove(op)

    def replace(self, removed: Iterable[Operator], added: Iterable[tuple[Operator, Operator]]) -> None:
        """Forget ``removed``; add each new op of ``added`` (new op, the removed op whose place it takes)."""
        keys = {id(old): self.key[id(old)] for _, old in added}
        for op in removed:
            reads, writes = self.accesses.pop(id(op))
            for names, (table, typed) in zip((reads, writes), self._tables()):
                for name in names:
                    self._drop(table[name], op)
                    self._drop(typed[name, op.type], op)
            del self.key[id(op)]
        for op, old in added:
            self._add(op, keys[id(old)])

    def typed(self, name: str, types: Iterable[str], writers: bool) -> list[Operator]:
        """The readers (``writers``: writers) of ``name`` whose type is one of ``types``, in block order."""
        typed = self.typed_writers if writers else self.typed_readers
        lists = [ops for t in dict.fromkeys(types) if (ops := typed.get((name, t)))]
        if len(lists) <= 1:
            return lists[0] if lists else []
        return list(heapq.merge(*lists, key=self._key))

    def window(self, ops: list[Operator], low: int, high: int) -> list[Operator]:
        """The ops of ``ops`` (sorted by key) with keys in [low, high]."""
        return ops[bisect.bisect_left(ops, low, key=self._key) : bisect.bisect_right(ops, high, key=self._key)]

    def value_of(self, name: str, matched: Iterable[Operator]) -> tuple[int, int] | None:
        """The keys (low, high) of the ops that may read the value of ``name`` that an op of ``matched`` writes
        (after it, up to the next writer, which may read it too); None when no op of ``matched`` writes it or
        no other op does."""
        writers = self.writers.get(name, [])
        if len(writers) < 2:
            return None
        writer = next((op for op in matched if name in self.accesses[id(op)][1]), None)
        if writer is None:
            return None
        key = self.key[id(writer)]
        after = bisect.bisect_right(writers, key, key=self._key)
        return key + 1, self.key[id(writers[after])] if after < len(writers) else sys.maxsize

    def touching(self, name: str, low: int, high: int, also: Iterable[Operator] = ()) -> list[Operator]:
        """The ops reading or writing ``name`` with sort keys in [low, high], and ``also``, in block order."""
        ops = {
            id(op): op for table in (self.readers, self.writers) for op in self.window(table.get(name, []), low, high)
        }
        ops.update((id(op), op) for op in also)
        return sorted((op for op in ops.values() if low <= self.key[id(op)] <= high), key=lambda o: self.key[id(o)])


class _UsedIn:
    """Which blocks' ops name each variable (by block index), for the blocks other than the one being rewritten:
    made once per :func:`rewrite` and brought up to date for a block once its rewriting is done (rewriting a
    block changes only what its own ops name)."""

    def __init__(self, program: Program) -> None:
        self.blocks: dict[str, dict[int, int]] = {}  # name -> block index -> how many blocks of that index use it
        self.names = [self._names(block) for block in program.blocks]
        for block, names in zip(program.blocks, self.names):
            self._count(names, block.idx, 1)
        self._elsewhere: dict[tuple[str, int], int | None] = {}  # what elsewhere said since the last update

    @staticmethod
    def _names(block: Block) -> set[str]:
        return {name for op in block.ops for name in (*op.input_names(), *op.output_names())}

    def _count(self, names: Iterable[str], idx: int, step: int) -> None:
        for name in names:
            counts = self.blocks.setdefault(name, {})
            counts[idx] = counts.get(idx, 0) + step
            if not counts[idx]:
                del counts[idx]

    def elsewhere(self, name: str, idx: int) -> int | None:
        """The least index of a block other than ``idx`` whose ops name ``name``; None when there is none."""
        key = (name, idx)
        if key not in self._elsewhere:
            self._elsewhere[key] = min((i for i in self.blocks.get(name, {}) if i != idx), default=None)
        return self._elsewhere[key]

    def update(self, position: int, block: Block) -> None:
        """Take what the ops of ``block`` (at ``position`` in the program) name now."""
        self._elsewhere.clear()
        self._count(self.names[position], block.idx, -1)
        self.names[position] = self._names(block)
        self._count(self.names[position], block.idx, 1)


# -- matching --------------------------------------------------------------------------------------------


def _bind(p: OpPattern, op: Operator, values: dict[str, str | None]) -> dict[str, str | None] | None:
    """``values`` extended by binding ``op`` to ``p``; None when it does not fit."""
    if op.type not in p.types or op.is_target:
        return None
    bound = dict(values)
    for slots, given in ((p.inputs, op.inputs), (p.outputs, op.outputs)):
        if any(slot not in slots and any(n != EMPTY_VAR for n in names) for slot, names in given.items()):
            return None
        for slot, entry in slots.items():
            symbol, optional = _symbol(entry)
            names = [n for n in given.get(slot, ()) if n != EMPTY_VAR]
            if len(names) > 1 or not (names or optional):
                return None
            name = names[0] if names else None
            if bound.setdefault(symbol, name) != name:
                return None
    for attr, want in p.attrs.items():
        value = op.attr(attr, None)
        if not (want(value) if callable(want) else value == want):
            return None
    return bound


def _candidates(
    p: OpPattern,
    values: Mapping[str, str | None],
    uses: _Uses,
    intermediates: Collection[str],
    matched: Iterable[Operator],
) -> list[Operator]:
    """The ops that may bind ``p``: those of its types among the readers (writers) of the variable of one of
    its input (output) symbols bound so far, the fewest such, in block order. An op binding ``p`` reads
    (writes) the variable of every bound symbol of its inputs (outputs), so any of them lists every op that
    binds, in the same order: the fewest only spare the tries of ops that cannot bind (every other op that
    writes a variable many ops read, say).

    One more cut: an input symbol that is an intermediate, bound to a variable that a matched op writes and
    other ops write too, is read only by the ops reading that op's value (after it, up to the next writer).
    Such a match never fires (an intermediate is written by its matched op alone), so the cut changes
    nothing that fires; it keeps the matches refused to those of ops one value connects, rather than every
    pair of a writer and a reader of a variable that N ops write (N * N matches, each refused)."""
    best: list[Operator] | None = None
    windows: list[tuple[int, int]] = []
    for slots, writers in ((p.inputs, False), (p.outputs, True)):
        for symbol in p.symbols(slots):
            name = values.get(symbol)
            if name is None:
                continue
            ops = uses.typed(name, p.types, writers)
            window = None if writers or symbol not in intermediates else uses.value_of(name, matched)
            if window is not None:
                ops = uses.window(ops, *window)
                windows.append(window)
            if best is None or len(ops) < len(best):
                best = ops
    if best is None:
        return []  # its symbols bound so far are optional ones left empty
    return [op for op in best if all(low <= uses.key[id(op)] <= high for low, high in windows)] if windows else best


def _aliased(pattern: Pattern, values: Mapping[str, str | None]) -> bool:
    """Whether an intermediate's variable is also bound to another symbol (it would vanish from under it)."""
    names = [n for n in values.values() if n is not None]
    return any(names.count(name) > 1 for s in pattern.intermediates if (name := values[s]) is not None)


def _structural(pattern: Pattern, anchor: Operator, uses: _Uses) -> Iterator[Match]:
    """Every binding of the pattern's ops that starts at ``anchor``: distinct ops, and no intermediate
    variable bound to two symbols."""

    def extend(k: int, ops: dict[str, Operator], values: dict[str, str | None]) -> Iterator[Match]:
        if k == len(pattern.ops):
            match = Match(pattern, anchor.block, dict(ops), dict(values))
            if not _aliased(pattern, values) and (pattern.where is None or pattern.where(match)):
                yield match
            return
        p = pattern.ops[k]
        taken = {id(op) for op in ops.values()}
        for op in [anchor] if k == 0 else _candidates(p, values, uses, pattern.intermediates, ops.values()):
            bound = None if id(op) in taken else _bind(p, op, values)
            if bound is not None:
                yield from extend(k + 1, {**ops, p.name: op}, bound)

    return extend(0, {}, {})


# -- legality --------------------------------------------------------------------------------------------


def placement(op: Operator) -> tuple[str, str]:
    """(canonical op_device, op_stream) of ``op``, '' for either when it has none."""
    return (checked_device(op.device, op) if op.device else "", op.attrs.get("op_stream", ""))


def _same_place(match: Match) -> str | None:
    """Why the matched ops may not fuse for where they run, or None."""
    places = {placement(op) for op in match.ops.values()}
    devices = {device for device, _ in places}
    if len(devices) > 1:
        return f"its ops run on different devices ({', '.join(sorted(d or '(unplaced)' for d in devices))})"
    if len(places) > 1:
        return f"its ops run on different streams ({', '.join(sorted(s or '(none)' for _, s in places))})"
    return None


def _vanishing(match: Match, uses: _Uses, keep: Collection[str], used_in: _UsedIn) -> str | None:
    """Why an intermediate of the match may not vanish, or None."""
    matched = {id(op) for op in match.ops.values()}
    block = match.block
    for symbol in sorted(match.pattern.intermediates):
        name = match.values[symbol]
        if name is None:
            continue
        if name in keep:
            return f"{name!r} is fetched or fed"
        if not block.has_var(name):
            return f"{name!r} is declared in an enclosing block"
        if block.var(name).persistable:
            return f"{name!r} is persistable"
        other = next((op for op in uses.readers.get(name, []) if id(op) not in matched), None)
        if other is not None:
            return f"{name!r} is also read by {other}"
        if len(uses.writers.get(name, [])) != 1:
            return f"{name!r} is written by other ops too"
        elsewhere = used_in.elsewhere(name, block.idx)
        if elsewhere is not None:
            return f"{name!r} is used in block {elsewhere}"
    return None


class _New(NamedTuple):
    """A new op before it exists: its create, the op of its group whose place it takes, its slots."""

    create: Create
    place: Operator
    inputs: dict[str, list[str]]
    outputs: dict[str, list[str]]

    @property
    def reads(self) -> set[str]:
        return {n for names in self.inputs.values() for n in names}

    @property
    def writes(self) -> set[str]:
        return {n for names in self.outputs.values() for n in names}


def _slots(slots: Mapping[str, str], values: Mapping[str, str | None]) -> dict[str, list[str]]:
    """Slot -> [variable] for the slots whose symbol is bound to a variable."""
    return {slot: [name] for slot, entry in slots.items() if (name := values[_symbol(entry)[0]]) is not None}


def _group(match: Match, create: Create) -> list[Operator]:
    """The matched ops a new op stands for: its group, or every matched op for a helper (its lineage)."""
    return [match.ops[n] for n in create.replaces] if create.replaces else list(match.ops.values())


def _new_ops(match: Match, uses: _Uses) -> list[_New]:
    def key(op: Operator) -> int:
        return uses.key[id(op)]

    return [
        _New(
            c,
            (max if c.at == "last" and c.replaces else min)(_group(match, c), key=key),
            _slots(c.inputs, match.values),
            _slots(c.outputs, match.values),
        )
        for c in match.pattern.creates
    ]


def _dataflow(match: Match, new: list[_New], uses: _Uses) -> str | None:
    """Why the new ops would change what the block computes (module docstring), or None.

    For each variable the matched or new ops use, walks its readers and writers from the first matched op
    to the last twice, as the block is and rewritten, recording for each read the op that last wrote it
    (an op id; new op ``k`` is ``-1 - k``; None: a value from before). As the block is, a matched op
    reading a variable after a matched op wrote it must read it from one of them: the values flowing inside
    the match are the ones the new ops compute (an update in place reads the value from before, then
    writes). Then, with each matched op standing for the new op of its group, the walks must agree for
    every other op, each new op must see what the matched ops reading the variable saw, and the variable
    (unless an intermediate) must leave the window with the same last writer: the ops after it then see
    what they saw. Other variables are not touched by the rewrite.
    """
    group = {id(match.ops[n]): -1 - k for k, item in enumerate(new) for n in item.create.replaces}
    placed = {id(item.place): k for k, item in enumerate(new)}
    if len(placed) < len(new):
        return "two new ops would take the place of one op"
    fresh = {match.values[s] for s in match.pattern.fresh}
    passing = {  # (op id, variable) of the outputs that pass an input through: no writes
        (id(match.ops[p.name]), match.values[_symbol(p.outputs[slot])[0]])
        for p in match.pattern.ops
        for slot in p.passes
    }

    def standing(writer: int | None) -> int | None:
        """What an op of the block as it is stands for in the rewritten block."""
        return None if writer is None else group.get(writer, writer)

    keys = [uses.key[op_id] for op_id in group]
    low, high = min(keys), max(keys)
    variables = {n for op_id in group for names in uses.accesses[op_id] for n in names}
    variables |= {n for item in new for n in item.reads | item.writes}
    vanishing = {match.values[s] for s in match.pattern.intermediates}
    for name in sorted(variables - fresh):
        inside = {id(op) for op in match.ops.values() if name in uses.accesses[id(op)][1]}  # matched writers
        matched_saw: set[int | None] = set()  # what the matched ops reading the variable saw
        new_saw: list[tuple[int, int | None]] = []  # (new op, what it sees)
        old_last: int | None = None
        new_last: int | None = None
        matched_wrote = False  # whether a matched op wrote the variable yet
        places = [item.place for item in new if name in item.reads or name in item.writes]
        for op in uses.touching(name, low, high, places):
            op_id = id(op)
            reads, writes = (name in names for names in uses.accesses[op_id])
            writes = writes and (op_id, name) not in passing
            if op_id in group:
                if reads:
                    if matched_wrote and old_last not in inside:
                        return f"{op} reads {name!r} from an op outside the match"
                    matched_saw.add(standing(old_last))
                matched_wrote = matched_wrote or writes
                if op_id in placed:
                    item = new[placed[op_id]]
                    if name in item.reads:
                        new_saw.append((placed[op_id], new_last))
                    if name in item.writes:
                        new_last = -1 - placed[op_id]
            else:
                if reads and standing(old_last) != new_last:
                    return f"{op} would read another value of {name!r}"
                if writes:
                    new_last = op_id
            if writes:
                old_last = op_id
        for k, seen in new_saw:
            if matched_saw != {seen}:
                return f"the new {new[k].create.type} would read another value of {name!r}"
        if name not in vanishing and standing(old_last) != new_last:
            return f"{name!r} would end the block with another value"
    return None


# -- rewriting -------------------------------------------------------------------------------------------


def _common_attrs(ops: Sequence[Operator]) -> dict[str, Any]:
    """The attributes a new op takes from its group: the op_role bits, the op_role_var pairs, the first
    op_namescope."""
    attrs: dict[str, Any] = {}
    roles = [op.attrs["op_role"] for op in ops if "op_role" in op.attrs]
    if roles:
        attrs["op_role"] = functools.reduce(operator.or_, roles)
    pairs: list[tuple[str, str]] = []
    for op in ops:
        names = op.attrs.get("op_role_var", ())
        pairs.extend(pair for pair in zip(names[::2], names[1::2]) if pair not in pairs)
    if pairs:
        attrs["op_role_var"] = [name for pair in pairs for name in pair]
    scopes = [op.attrs["op_namescope"] for op in ops if op.attrs.get("op_namescope")]
    if scopes:
        attrs["op_namescope"] = scopes[0]
    return attrs


def insert_created(
    block: Block,
    index: int,
    type: str,
    inputs: Mapping[str, Sequence[str]],
    outputs: Mapping[str, Sequence[str]],
    attrs: Mapping[str, Any],
    group: Sequence[Operator],
    pass_name: str,
) -> Operator:
    """Insert at ``index`` of ``block`` a new op standing for the ops of ``group`` (all on one device and stream):
    ``attrs`` and the group's common attributes, its lineage, the first op's ``op_stream`` and ``op_device``."""
    op = block.insert_op(index, type, inputs, outputs, {**attrs, **_common_attrs(group)})
    mark_created(op, pass_name, list(group))
    device, stream = placement(group[0])
    if stream:
        op.set_attr("op_stream", stream)
    if device:
        op.set_attr("op_device", device)  # last, as the text form prints it
    return op


def fresh_name(program: Program, base: str, taken: Collection[str | None] = ()) -> str:
    """``base``, or ``base.N`` with the least N >= 1, whichever no block of ``program`` declares and ``taken``
    does not hold."""
    name, n = base, 0
    while any(b.has_var(name) for b in program.blocks) or name in taken:
        n += 1
        name = f"{base}.{n}"
    return name


def _with_fresh(match: Match) -> Match:
    """``match`` with each fresh symbol bound to a new name: its ``like`` variable's, the suffix, and a number
    when the program has that name already."""
    program, values = match.block.program, dict(match.values)
    for symbol, fresh in match.pattern.fresh.items():
        values[symbol] = fresh_name(program, f"{values[fresh.like]}@{fresh.suffix}", set(values.values()))
    return Match(match.pattern, match.block, match.ops, values)


def _apply(match: Match, new: list[_New], pass_name: str) -> list[Operator]:
    """Replace the matched ops by the new ops and drop the intermediates (nothing uses them any more)."""
    block = match.block
    for symbol, fresh in match.pattern.fresh.items():
        shape, dtype = fresh.spec(match)
        block.create_var(str(match.values[symbol]), shape=shape, dtype=dtype)
    created = []
    for item in new:
        group = _group(match, item.create)
        attrs = dict(item.create.attrs(match)) if item.create.attrs is not None else {}
        index = block.ops.index(item.place) + 1
        op = insert_created(block, index, item.create.type, item.inputs, item.outputs, attrs, group, pass_name)
        created.append(op)
    for op in match.ops.values():
        block.remove_op(op)
    for symbol in sorted(match.pattern.intermediates):
        name = match.values[symbol]
        if name is not None:
            block.remove_var(name)
    return created


@dataclass
class _Context:
    """What a :func:`rewrite` call keeps, names and collects."""

    keep: Collection[str]
    pass_name: str
    fired: list[Fired] = field(default_factory=list)
    refused: dict[tuple[str, tuple[int, ...]], Refused] = field(default_factory=dict)  # each match once


def _fire_at(anchor: Operator, patterns: Sequence[Pattern], uses: _Uses, used_in: _UsedIn, context: _Context) -> bool:
    """Fire the first legal match of the first pattern that has one at ``anchor``; whether one fired."""
    for pattern in patterns:
        if anchor.type not in pattern.ops[0].types:
            continue
        for match in _structural(pattern, anchor, uses):
            if pattern.fresh:
                match = _with_fresh(match)
            new = _new_ops(match, uses)
            reason = _same_place(match) or _vanishing(match, uses, context.keep, used_in) or _dataflow(match, new, uses)
            if reason is not None:
                key = (pattern.name, tuple(sorted(id(op) for op in match.ops.values())))
                context.refused.setdefault(key, Refused(pattern.name, anchor.block.idx, origin_key(anchor), reason))
                continue
            replaced = tuple(origin_key(op) for op in match.ops.values())
            created = _apply(match, new, context.pass_name)
            uses.replace(match.ops.values(), [(op, item.place) for op, item in zip(created, new)])
            context.fired.append(Fired(pattern.name, anchor.block.idx, replaced, tuple(map(origin_key, created))))
            return True
    return False


def _sweep(block: Block, patterns: Sequence[Pattern], context: _Context, used_in: _UsedIn) -> bool:
    """Try every op of the block as an anchor, in order; whether anything fired."""
    uses, changed, index = _Uses(block), False, 0
    while index < len(block.ops):
        if _fire_at(block.ops[index], patterns, uses, used_in, context):
            changed = True  # the op now at ``index`` is the next one, or a new one
        else:
            index += 1
    return changed


def rewrite(program: Program, patterns: Sequence[Pattern], keep: Collection[str], pass_name: str) -> Rewrites:
    """Apply ``patterns`` to every block of ``program`` to a fixed point (see the module docstring).

    ``keep``: variables whose values must stay (fetched or fed); ``pass_name`` is each new op's ``op_pass``.
    """
    context = _Context(keep, pass_name)
    used_in = _UsedIn(program)
    for position, block in enumerate(program.blocks):
        changed = False
        while _sweep(block, patterns, context, used_in):
            changed = True
        if changed:
            used_in.update(position, block)
    return Rewrites(context.fired, list(context.refused.values()))


@dataclass(frozen=True)
class RewritePass(Pass):
    """A pass applying the class's ``patterns`` with :func:`rewrite`, noting what fired and what was refused.

    With ``dry_run`` it rewrites a copy of the program: the notes and details say what would be fused, and
    the program is left as it is.
    """

    patterns: ClassVar[tuple[Pattern, ...]] = ()

    keep: tuple[str, ...] = field(
        default=(), metadata={"help": "variables whose values must stay (fetched or fed): never fused away"}
    )
    dry_run: bool = field(default=False, metadata={"help": "report what would be fused and change nothing"})

    def run(self, program: Program) -> bool:
        done = rewrite(program.clone() if self.dry_run else program, self.patterns, set(self.keep), self.name)
        verb = "would fuse" if self.dry_run else "fused"
        for f in done.fired:
            note(f"block {f.block}: {f.pattern}: {verb} {', '.join(f.replaced)} into {', '.join(f.created)}")
        for r in done.refused:
            note(f"block {r.block}: {r.pattern}: not fused at {r.anchor}: {r.reason}")
        record_detail("fused", done.fired)
        record_detail("refused", done.refused)
        return bool(done.fired) and not self.dry_run
