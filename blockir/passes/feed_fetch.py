"""``feed-fetch``: frame the global block with feed and fetch ops, as inference models have them.

The block's feed and fetch ops (the ops whose schemas lower as
:attr:`~blockir.ir.schema.Lowering.FEED` / ``FETCH``) are replaced: one feed
op per name of ``feeds`` at the start, ``Out`` = the i-th feed taken from
column ``col`` = i of the feed list variable ``feed``, and one fetch op per
name of ``targets`` at the end, storing the i-th target at column i of the
fetch list variable ``fetch``. The two list variables are declared when ops
use them (persistable, of kinds ``feed_minibatch`` and ``fetch_list``); a
variable of either name of another kind is an error. Without options the pass
removes the feed and fetch ops. A block framed as asked is left as it is.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import ClassVar

from blockir.errors import BlockirError
from blockir.ir import Block, Operator, Program, VarKind
from blockir.ir.schema import Lowering, find
from blockir.ops.transfer import FEED, FETCH
from blockir.passes.base import Pass, mark_created, register_pass

__all__ = ["FEED_VAR", "FETCH_VAR", "FeedFetch", "is_framing"]

FEED_VAR, FETCH_VAR = "feed", "fetch"  # the feed and fetch list variables (Fluid's names)
_FRAMING = (Lowering.FEED, Lowering.FETCH)


def is_framing(op: Operator) -> bool:
    """Whether ``op`` is a feed or a fetch op (by its schema's lowering)."""
    schema = find(op.type)
    return schema is not None and schema.lowering in _FRAMING


def _framing(op: Operator) -> tuple[str, list[str], list[str], object]:
    return op.type, list(op.input("X")), list(op.output("Out")), op.attrs.get("col")


def _declare(block: Block, name: str, kind: VarKind) -> None:
    if not block.has_var(name):
        block.create_var(name, kind=kind, persistable=True)
    elif block.var(name).kind is not kind:
        raise BlockirError(
            f"feed-fetch: the program has a variable named {name!r}, the name of the {kind.text} variable "
            f"of its feed and fetch ops"
        )


@register_pass
@dataclass(frozen=True)
class FeedFetch(Pass):
    """Replace the global block's feed and fetch ops (module docstring)."""

    name: ClassVar[str] = "feed-fetch"
    summary: ClassVar[str] = "replace the feed and fetch ops: one feed op per feed first, one fetch op per target last"

    feeds: tuple[str, ...] = field(default=(), metadata={"help": "the variables to feed, in column order"})
    targets: tuple[str, ...] = field(default=(), metadata={"help": "the variables to fetch, in column order"})

    def run(self, program: Program) -> bool:
        block = program.global_block()
        for name in (*self.feeds, *self.targets):
            if not block.has_var(name):
                raise BlockirError(f"feed-fetch: {name!r} is not a variable of the program's global block")
        wanted = [(FEED.type, [FEED_VAR], [n], col) for col, n in enumerate(self.feeds)]
        wanted += [(FETCH.type, [n], [FETCH_VAR], col) for col, n in enumerate(self.targets)]
        framing = [op for op in block.ops if is_framing(op)]
        ends = block.ops[: len(self.feeds)] + block.ops[len(block.ops) - len(self.targets) :]
        if len(framing) == len(wanted) and [_framing(op) for op in ends] == wanted:
            return False
        for op in framing:
            block.remove_op(op)
        if self.feeds:
            _declare(block, FEED_VAR, VarKind.FEED_MINIBATCH)
        if self.targets:
            _declare(block, FETCH_VAR, VarKind.FETCH_LIST)
        for col, name in reversed(list(enumerate(self.feeds))):
            op = block.prepend_op(FEED.type, {"X": [FEED_VAR]}, {"Out": [name]}, {"col": col}, infer=False)
            mark_created(op, self.name, [])
        for col, name in enumerate(self.targets):
            op = block.append_op(FETCH.type, {"X": [name]}, {"Out": [FETCH_VAR]}, {"col": col}, infer=False)
            mark_created(op, self.name, [])
        return True
