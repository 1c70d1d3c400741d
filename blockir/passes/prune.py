"""Dead-code elimination for fetch targets (``prune``) and the helpers it shares.

Liveness over a block, walking backwards from the targets: an op is kept when
it writes a variable that is still needed (or has side effects, e.g. an
optimizer update or a channel send, unless ``keep_side_effects`` is false); a
kept op's writes stop being needed above it and its reads become needed. Feed
variables are provided from outside, so their producers are never needed, and
they are marked ``need_check_feed``.
Sub-blocks count as part of the op that owns them: their reads of outer
variables are the op's reads, their writes the op's (non-killing) writes.

The :class:`Prune` pass (``prune{targets=loss,acc feeds=x keep_side_effects=true}``)
runs :func:`prune` in a pipeline; without targets it keeps what the ops with
side effects (fetch ops, optimizer updates) need.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import ClassVar

from blockir.ir import Block, Operator, Program
from blockir.ir.core import op_reads_writes
from blockir.ir.schema import find
from blockir.passes.base import Pass, register_pass


def has_side_effects(op: Operator) -> bool:
    schema = find(op.type)
    return schema is not None and schema.side_effects


def remove_unused_vars(block: Block, keep: Iterable[str] = ()) -> bool:
    """Drop the block's variables no op of it (or of its sub-blocks) refers to, except ``keep``."""
    used = set(keep)
    for op in block.ops:
        r, w = op_reads_writes(op)
        used |= r | w
    unused = [name for name in block.vars if name not in used]
    for name in unused:
        block.remove_var(name)
    return bool(unused)


def prune(program: Program, targets: Iterable[str], feeds: Iterable[str] = (), keep_side_effects: bool = True) -> bool:
    """Cut the global block down to the ops the targets need; in place. Returns whether it changed."""
    block = program.global_block()
    targets, feeds = list(targets), set(feeds)
    for name in targets:
        block.find_var_recursive(name)  # an unknown target is an error naming it
    needed = set(targets) - feeds
    kept: list[Operator] = []
    for op in reversed(block.ops):
        reads, writes = op_reads_writes(op)
        if writes & needed or (keep_side_effects and has_side_effects(op)):
            kept.append(op)
            needed -= set(op.output_names()) - reads
            needed |= reads - feeds
    kept.reverse()
    changed = len(kept) != len(block.ops)
    if changed:
        for op in [op for op in block.ops if op not in kept]:
            block.remove_op(op)
    for name in feeds:  # now given from outside: the executor checks what is fed, the verifier accepts it
        var = block.vars.get(name)
        if var is not None and not var.persistable and not var.need_check_feed:
            var.need_check_feed = changed = True
    return remove_unused_vars(block, keep=[*targets, *feeds]) or changed


@register_pass
@dataclass(frozen=True)
class Prune(Pass):
    """:func:`prune` as a pass."""

    name: ClassVar[str] = "prune"
    summary: ClassVar[str] = "remove the ops the targets (and the ops with side effects) do not need"

    targets: tuple[str, ...] = field(default=(), metadata={"help": "variables to keep computing"})
    feeds: tuple[str, ...] = field(default=(), metadata={"help": "variables given from outside"})
    keep_side_effects: bool = field(
        default=True,
        metadata={"help": "keep ops with side effects (optimizer updates, fetch, channel ops) even when unneeded"},
    )

    def run(self, program: Program) -> bool:
        return prune(program, self.targets, self.feeds, self.keep_side_effects)
