"""``fuse-optimizer``: the sgd, momentum or adam updates of a program in one op over coalesced buffers.

Fluid's ``fuse_all_optimizer_ops`` (its ``fuse_sgd_op_pass``, ``fuse_momentum_op_pass``,
``fuse_adam_op_pass``), adapted to blockir: the updates of the global block are
grouped by what one update can do for all of them (the op type, its attributes,
the ``LearningRate`` variable, the device and stream, the dtypes, the optional
outputs bound). Each group of two or more becomes, where its first update was:

1. ``coalesce_tensor{copy_data=true}`` of the parameters into ``P@FUSED`` (``P``
   the first parameter's name): one contiguous buffer, each parameter a view of
   its part. The op allocates and copies on the first run only: the plan binds
   the parameters' names to the views in the scope (the schema's ``views``,
   :meth:`~blockir.runtime.scope.Scope.bind`), and from then on the op finds its
   inputs already laid out in one buffer and returns that buffer as it is
   (``coalesce_tensor`` in :mod:`blockir.ops.fused`). So the plan stays a list of
   steps, with no initialisation phase and no state of its own, and a value
   that replaces a view in the scope (:meth:`~blockir.runtime.scope.ScopeVariable.set`)
   is coalesced again by the next run;
2. the same for each optimizer state (``Velocity``; ``Moment1``, ``Moment2``,
   ``Beta1Pow``, ``Beta2Pow``);
3. ``coalesce_tensor{copy_data=true}`` of the gradients into ``G@FUSED`` (``G``
   the first gradient's name): they are made anew by every run, so this one
   copies them every run;
4. one ``sgd``, ``momentum`` or ``adam`` over the buffers, with the group's
   attributes and ``LearningRate``. The arithmetic is elementwise, so every
   parameter gets exactly the update it got alone; ``adam`` uses the first of
   the (equal) powers of beta and advances all (:mod:`blockir.ops.optimizer`).

The buffers are not persistable (a save holds each parameter once, by its
name): the scope keeps each parameter, and its state, as a view of its buffer,
and setting or loading one copies into its view. Each new op records its
lineage (the group's ops) and the group's device, stream and common attributes
(:func:`~blockir.passes.rewrite.insert_created`).

An update joins its group only where moving it to the group's first update and
keeping its parameter and state as views from then on computes what the program
computed. Its gradient must be a dense temporary that an op of the block makes
before the group's first update (so that it is where the update runs: a fed
gradient is on the host), its parameter and state persistable, of static shape
and of the parameter's dtype, and none of them used by another update of the
group; its parameter has at most ``max_size`` elements (option, 8192 by default:
coalescing copies the gradients every run, which for a larger parameter costs
more than the dispatch that fusing it saves; docs/passes.md has the figures).
No other op may write its parameter or state before the group's first update
(the buffer would be replaced every run) nor use them after it (such an op
would read the buffer the fused update writes, with no variable of theirs in
common to order the two), and no op between the group's first update and its
own may write what it reads. The pass never fuses across
devices: every op using the update's parameter, gradient or state, and each of
those variables, must be on the device the update declares (none, for an
unplaced program, which then runs on one device), so that no copy that the
``insert-copies`` pass would add comes between a parameter and its view. An
update that does not join is left as it is, and noted with the reason.
"""

from __future__ import annotations

import bisect
import itertools
import math
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any, ClassVar, NamedTuple

from blockir.ir import Block, Operator, Program, VarKind
from blockir.ir.core import op_reads_writes
from blockir.ir.devices import checked_device
from blockir.ir.dtypes import DTYPE_TO_PROTO
from blockir.ir.schema import EMPTY_VAR, find, lookup
from blockir.passes.base import Pass, origin_key, register_pass
from blockir.passes.manager import note, record_detail
from blockir.passes.rewrite import Fired, Refused, insert_created, placement

__all__ = ["FUSED_SUFFIX", "FuseOptimizer"]

FUSED_SUFFIX = "@FUSED"
# The optimizer ops fused, and their state slots (each with its output slot NAME + "Out", in place).
STATES: dict[str, tuple[str, ...]] = {
    "sgd": (),
    "momentum": ("Velocity",),
    "adam": ("Moment1", "Moment2", "Beta1Pow", "Beta2Pow"),
}
_POWERS = ("Beta1Pow", "Beta2Pow")  # adam's: one element per parameter, not the parameter's shape


class _Update(NamedTuple):
    """An optimizer op of the block: its index there, and its variable per input slot."""

    op: Operator
    at: int
    vars: dict[str, str]  # Param, Grad, LearningRate and the state slots -> variable

    @property
    def members(self) -> list[str]:
        """The variables only this update may use: its parameter, gradient and state."""
        return [name for slot, name in self.vars.items() if slot != "LearningRate"]

    @property
    def kept(self) -> list[str]:
        """The variables it updates, which the scope keeps as views once fused: its parameter and state."""
        return [name for slot, name in self.vars.items() if slot not in ("Grad", "LearningRate")]


def _one(op: Operator, slot: str) -> str | None:
    names = [n for n in op.inputs.get(slot, ()) if n != EMPTY_VAR]
    return names[0] if len(names) == 1 else None


def _update(op: Operator, index: int) -> _Update | None:
    """``op`` as an update the pass may fuse: an op of :data:`STATES`, not a prune target, with one variable per slot
    and a dense gradient; else None."""
    if op.type not in STATES or op.is_target:
        return None
    found = {slot: _one(op, slot) for slot in ("Param", "Grad", "LearningRate", *STATES[op.type])}
    names = {slot: name for slot, name in found.items() if name is not None}
    if len(names) != len(found) or op.block.find_var_recursive(names["Grad"]).kind is not VarKind.LOD_TENSOR:
        return None
    return _Update(op, index, names)


def _key(block: Block, u: _Update) -> tuple[Any, ...]:
    """What one update over all the updates of a group shares: the updates with equal keys form a group."""
    op = u.op
    schema = lookup(op.type)
    return (
        op.type,
        placement(op),
        tuple((a.name, op.attr(a.name)) for a in schema.attrs),
        u.vars["LearningRate"],
        tuple(slot.name for slot in schema.outputs if any(n != EMPTY_VAR for n in op.outputs.get(slot.name, ()))),
        block.find_var_recursive(u.vars["Param"]).dtype,
        tuple(block.find_var_recursive(u.vars[s]).dtype for s in _POWERS if s in u.vars),
    )


def _device(op: Operator) -> str:
    """The device ``op`` declares it runs on: the one its schema's ``device_attr`` names (a copy's destination),
    else its ``op_device`` ('' when it has none: the place pass decides)."""
    schema = find(op.type)
    if schema is not None and schema.device_attr:
        return checked_device(op.attr(schema.device_attr), op)
    return placement(op)[0]


def _unfit(block: Block, u: _Update, max_size: int) -> str | None:
    """Why the variables of ``u`` cannot be coalesced, or None."""
    param = block.find_var_recursive(u.vars["Param"])
    device = _device(u.op)
    size = math.prod(param.shape or ())
    if max_size and size > max_size:
        return f"{param.name!r} has {size} elements, more than max_size={max_size}"
    for slot, name in u.vars.items():
        if slot == "LearningRate":
            continue
        var = block.find_var_recursive(name)
        if var.device and checked_device(var.device, f"variable {name!r}") != device:
            return f"{name!r} is declared on {var.device}, its update on {device or 'no device'}"
        if (slot == "Grad") == var.persistable:  # a persistable gradient would be bound to the gradients' buffer
            return f"{name!r} is {'' if var.persistable else 'not '}persistable"
        if var.shape is None or any(d < 0 for d in var.shape) or var.dtype is None:
            return f"{name!r} has no static shape and dtype"
        if slot not in _POWERS and var.dtype != param.dtype:
            return f"{name!r} is {var.dtype}, its parameter {param.dtype}"
    return None


class _Accesses(NamedTuple):
    """What each op of the block reads and writes (its sub-blocks' outer accesses included), and by variable the
    indices of the ops using it and of those writing it, in order."""

    uses: list[tuple[set[str], set[str]]]
    users: dict[str, list[int]]
    writers: dict[str, list[int]]


def _accesses(block: Block) -> _Accesses:
    uses = [op_reads_writes(op) for op in block.ops]
    users: dict[str, list[int]] = {}
    writers: dict[str, list[int]] = {}
    for i, (read, written) in enumerate(uses):
        for name in read | written:
            users.setdefault(name, []).append(i)
        for name in written:
            writers.setdefault(name, []).append(i)
    return _Accesses(uses, users, writers)


def _conflict(block: Block, u: _Update, group: set[int], first: int, accesses: _Accesses) -> str | None:
    """Why ``u`` cannot be moved to the group's first update (index ``first``) and its parameter and state kept as
    views from then on (module docstring), or None. ``group``: the ids of the group's ops.

    Only the ops using a variable of ``u`` can say why: those using its parameter, gradient or state, and the
    first one writing its learning rate between the fused update and its own (the group's updates all read
    it), taken in block order; the cost is theirs, not the block's."""
    reads, kept, members, device = set(u.vars.values()), set(u.kept), set(u.members), _device(u.op)
    grad, made = u.vars["Grad"], False
    touching = {i for name in members for i in accesses.users.get(name, ())}
    lr_writers = accesses.writers.get(u.vars["LearningRate"], [])
    between = lr_writers[bisect.bisect_right(lr_writers, first) : bisect.bisect_left(lr_writers, u.at)]
    touching.update(itertools.islice((i for i in between if id(block.ops[i]) not in group), 1))
    for i in sorted(touching):
        read, written = accesses.uses[i]
        op = block.ops[i]
        if id(op) in group:
            continue
        used = read | written
        made = made or (i < first and grad in written)
        if used & members and _device(op) != device:
            name = sorted(used & members)[0]
            return f"{op} uses {name!r} on {_device(op) or 'no device'}, its update runs on {device or 'no device'}"
        if i < first and written & kept:
            return f"{op} writes {sorted(written & kept)[0]!r} before its update"
        if i > first and used & kept:
            return f"{op} uses {sorted(used & kept)[0]!r} after the fused update"
        if first < i < u.at and written & reads:
            return f"{op} writes {sorted(written & reads)[0]!r} between the fused update and its own"
    return None if made else f"{grad!r} is made by no op before the updates (it is fed, or the scope's)"


def _shared(updates: Sequence[_Update]) -> dict[int, str]:
    """The updates (by op id) whose parameter, gradient or state another update of ``updates`` also uses, with
    the first such variable."""
    users: dict[str, list[_Update]] = {}
    for u in updates:
        for name in u.members:
            users.setdefault(name, []).append(u)
    shared: dict[int, str] = {}
    for name, us in users.items():
        if len(us) > 1:
            for u in us:
                shared.setdefault(id(u.op), name)
    return shared


class _Group(NamedTuple):
    updates: list[_Update]
    refused: list[tuple[_Update, str]]


def _settle(block: Block, updates: list[_Update], uses: _Accesses, max_size: int) -> _Group:
    """The updates of one key that may be fused (module docstring), and those refused with the reason: updates
    are dropped until every one left may move to the first one left."""
    refused: list[tuple[_Update, str]] = []
    for u in updates:
        reason = _unfit(block, u, max_size)
        if reason is not None:
            refused.append((u, reason))
    shared = _shared(updates)
    refused += [(u, f"{shared[id(u.op)]!r} is used by another update") for u in updates if id(u.op) in shared]
    left = [u for u in updates if all(u is not r for r, _ in refused)]
    while len(left) > 1:
        group, first = {id(u.op) for u in left}, left[0].at
        conflicts = [(u, reason) for u in left if (reason := _conflict(block, u, group, first, uses)) is not None]
        if not conflicts:
            break
        refused += conflicts
        left = [u for u in left if all(u is not r for r, _ in conflicts)]
    return _Group(left, refused)


def _fresh(block: Block, name: str) -> str:
    """``NAME@FUSED`` (the buffer of the variables coalesced from ``name`` on), numbered when the program has it."""
    taken = {n for b in block.program.blocks for n in b.vars}
    fused, k = name + FUSED_SUFFIX, 0
    while fused in taken:
        k += 1
        fused = f"{name}{FUSED_SUFFIX}{k}"
    return fused


def _groups(block: Block, pass_name: str, max_size: int) -> list[_Group]:
    """The groups of the block's updates (by :func:`_key`; updates this pass made are left alone), settled."""
    keys: dict[tuple[Any, ...], list[_Update]] = {}
    for i, op in enumerate(block.ops):
        u = _update(op, i)
        if u is not None and op.attrs.get("op_pass") != pass_name:
            keys.setdefault(_key(block, u), []).append(u)
    uses = _accesses(block)
    return [_settle(block, updates, uses, max_size) for updates in keys.values() if len(updates) > 1]


def _fuse_group(block: Block, updates: list[_Update], pass_name: str) -> list[Operator]:
    """Replace ``updates`` by the coalesce_tensor ops and the one update over their buffers, where the first one
    was; return the new ops."""
    first = updates[0]
    ops = [u.op for u in updates]
    schema = lookup(first.op.type)
    at = block.ops.index(ops[0])
    created = []
    fused: dict[str, str] = {}
    for slot in ("Param", *STATES[first.op.type], "Grad"):
        names = [u.vars[slot] for u in updates]
        buffer = fused[slot] = _fresh(block, names[0])
        dtype = block.find_var_recursive(names[0]).dtype
        if dtype is None:  # _unfit refused the variables without one
            raise TypeError(f"{pass_name}: {names[0]!r} has no dtype")
        block.create_var(buffer, dtype=dtype)
        attrs = {"copy_data": True, "dtype": DTYPE_TO_PROTO[dtype]}
        slots = {"Output": names, "FusedOutput": [buffer]}
        created.append(insert_created(block, at, "coalesce_tensor", {"Input": names}, slots, attrs, ops, pass_name))
        at += 1
    inputs = {**{slot: [name] for slot, name in fused.items()}, "LearningRate": [first.vars["LearningRate"]]}
    outputs = {
        slot.name: [fused[slot.name.removesuffix("Out")]]
        for slot in schema.outputs
        if any(n != EMPTY_VAR for n in first.op.outputs.get(slot.name, ()))
    }
    attrs = {a.name: first.op.attr(a.name) for a in schema.attrs}
    created.append(insert_created(block, at, first.op.type, inputs, outputs, attrs, ops, pass_name))
    where = {id(op): i for i, op in enumerate(block.ops)}
    for i in sorted((where[id(op)] for op in ops), reverse=True):  # by index: no search of the block per op
        block.remove_op(i)
    return created


@register_pass
@dataclass(frozen=True)
class FuseOptimizer(Pass):
    """The sgd, momentum or adam updates of the global block in one op each over coalesced buffers (module
    docstring)."""

    name: ClassVar[str] = "fuse-optimizer"
    summary: ClassVar[str] = (
        "sgd/momentum/adam updates into one per group over coalesce_tensor buffers (fuse_all_optimizer_ops)"
    )

    max_size: int = field(
        default=8192,
        metadata={"help": "updates of parameters of more elements stay as they are (0: no limit)"},
    )

    def run(self, program: Program) -> bool:
        block = program.global_block()
        fired: list[Fired] = []
        refused: dict[tuple[str, str], Refused] = {}  # each refusal once
        while True:  # one group at a time, each seeing the block as the groups before left it
            groups = _groups(block, self.name, self.max_size)
            for group in groups:
                for u, reason in group.refused:
                    refused.setdefault(
                        (origin_key(u.op), reason), Refused(u.op.type, block.idx, origin_key(u.op), reason)
                    )
            ready = next((group.updates for group in groups if len(group.updates) > 1), None)
            if ready is None:
                break
            replaced = tuple(origin_key(u.op) for u in ready)
            created = _fuse_group(block, ready, self.name)
            fired.append(Fired(ready[0].op.type, block.idx, replaced, tuple(origin_key(op) for op in created)))
        for f in fired:
            note(f"block {f.block}: {f.pattern}: fused {', '.join(f.replaced)} into {', '.join(f.created)}")
        for r in refused.values():
            note(f"block {r.block}: {r.pattern}: not fused: {r.anchor}: {r.reason}")
        record_detail("fused", fired)
        record_detail("refused", list(refused.values()))
        return bool(fired)
