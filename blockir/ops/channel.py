"""Concurrency ops: channels, ``go`` blocks and ``select``.

Their kernels need the run they are part of (the scope, the threads it started,
other blocks compiled into plans), so the runtime provides them
(:mod:`blockir.runtime.control`); here are the schemas: slots, attributes and
checks. Every one has side effects (pruning keeps them) and runs on the device
of the channel it uses (the ``place`` pass); a send's values are copied onto
the channel's device like any input read from another device (``insert-copies``).

- ``channel_create``: ``Out`` = the channel that variable already holds in the
  scope of the run, else a new one with ``capacity`` and ``bytes_limit`` (-1:
  none), put in the scope at once (go blocks started later find it there).
  Programs run in one scope so share channels by name.
- ``channel_send``: send the values ``X`` (one message) on ``Channel``.
- ``channel_recv``: receive one message into ``Out`` (as many variables as were
  sent together) and ``Status`` (bool[1]: false once the channel is closed and
  drained; ``Out`` then holds zero-row values of the declared shapes).
- ``channel_close``: close ``Channel``.
- ``go``: run ``sub_block`` concurrently, in its own child scope, on its own
  thread; ``X`` are the outer temporaries it reads (their values when ``go``
  runs are what it sees). The run that started it returns once it has finished.
- ``select``: wait until one of the cases can proceed (uniformly at random among
  the ready ones), do its channel operation, then run its block. ``case_kinds``
  lists ``send`` / ``recv`` / ``default`` per case, ``cases`` their blocks;
  ``case_channel`` the index in ``Channel`` of each case's channel (-1 for the
  default); a send case sends ``case_count`` values taken in turn from ``X``,
  a recv case receives ``case_count`` values into the next outputs of ``Out``
  (and its status into ``Status[k]``, k counting recv cases; the outputs of the
  cases not chosen get zero-row values and a false status). ``Reads`` are the
  outer temporaries the case blocks read. Go and case blocks share values with
  the rest of the program through channels and persistable variables (the
  scope), not through temporaries they write.
"""

from __future__ import annotations

from blockir.ir.attrs import AttrType
from blockir.ir.dtypes import VarKind
from blockir.ir.schema import AttrDef, InferContext, Lowering, OpSchema, Slot

__all__ = ["CHANNEL_CLOSE", "CHANNEL_CREATE", "CHANNEL_RECV", "CHANNEL_SEND", "GO", "SCHEMAS", "SELECT"]

_CHANNELS = (VarKind.CHANNEL,)


def _check_channels(ctx: InferContext, slot: str) -> None:
    for var in ctx.inputs(slot):
        if var.kind not in _CHANNELS:
            ctx.fail(f"{slot} {var.name!r} must be a channel, not {var.kind.text}")


def _status(ctx: InferContext) -> None:
    for k in range(len(ctx.outputs("Status"))):
        ctx.set_output("Status", (1,), "bool", index=k)


def _infer_create(ctx: InferContext) -> None:
    for var in ctx.outputs("Out"):
        if var.kind not in _CHANNELS:
            ctx.fail(f"Out {var.name!r} must be a channel, not {var.kind.text}")
    if ctx.attr("capacity") < 0:
        ctx.fail(f"capacity {ctx.attr('capacity')} must not be negative")


def _infer_send(ctx: InferContext) -> None:
    _check_channels(ctx, "Channel")


def _infer_recv(ctx: InferContext) -> None:
    _check_channels(ctx, "Channel")
    _status(ctx)


def _infer_select(ctx: InferContext) -> None:
    _check_channels(ctx, "Channel")
    kinds, channels, counts = ctx.attr("case_kinds"), ctx.attr("case_channel"), ctx.attr("case_count")
    blocks = ctx.attr("cases")
    if not len(kinds) == len(channels) == len(counts) == len(blocks):
        ctx.fail(
            f"case_kinds, case_channel, case_count and cases must have one entry per case, got "
            f"{len(kinds)}, {len(channels)}, {len(counts)} and {len(blocks)}"
        )
    if any(k not in ("send", "recv", "default") for k in kinds) or kinds.count("default") > 1:
        ctx.fail(f"case_kinds must be send, recv or default (at most one default), got {kinds}")
    n_channels = len(ctx.inputs("Channel"))
    for kind, channel in zip(kinds, channels):
        if (kind == "default") != (channel == -1) or not -1 <= channel < n_channels:
            ctx.fail(f"case_channel {channels} does not match case_kinds {kinds} and {n_channels} channel(s)")
    sent = sum(c for k, c in zip(kinds, counts) if k == "send")
    received = sum(c for k, c in zip(kinds, counts) if k == "recv")
    if sent != len(ctx.inputs("X")) or received != len(ctx.outputs("Out")):
        ctx.fail(
            f"case_count {counts} needs {sent} value(s) in X and {received} in Out, got "
            f"{len(ctx.inputs('X'))} and {len(ctx.outputs('Out'))}"
        )


def _infer_select_and_status(ctx: InferContext) -> None:
    _infer_select(ctx)
    _status(ctx)


CHANNEL_CREATE = OpSchema(
    "channel_create",
    outputs=(Slot("Out"),),
    attrs=(AttrDef("capacity", AttrType.INT, 0), AttrDef("bytes_limit", AttrType.LONG, -1)),
    infer=_infer_create,
    side_effects=True,
    lowering=Lowering.CONTROL,
    doc="Out = the channel the scope already holds under its name, else a new channel of capacity.",
)

CHANNEL_SEND = OpSchema(
    "channel_send",
    inputs=(Slot("Channel", no_grad=True), Slot("X", duplicable=True, lod=True, no_grad=True)),
    infer=_infer_send,
    side_effects=True,
    lowering=Lowering.CONTROL,
    doc="Send the values X, as one message, on Channel (blocks as Go's send does).",
)

CHANNEL_RECV = OpSchema(
    "channel_recv",
    inputs=(Slot("Channel", no_grad=True),),
    outputs=(Slot("Out", duplicable=True, lod=True), Slot("Status", optional=True)),
    infer=_infer_recv,
    side_effects=True,
    lowering=Lowering.CONTROL,
    doc="Out = the next message on Channel; Status = false once it is closed and drained.",
)

CHANNEL_CLOSE = OpSchema(
    "channel_close",
    inputs=(Slot("Channel", no_grad=True),),
    infer=_infer_send,
    side_effects=True,
    lowering=Lowering.CONTROL,
    doc="Close Channel (closing twice does nothing).",
)

GO = OpSchema(
    "go",
    inputs=(Slot("X", duplicable=True, optional=True, lod=True, no_grad=True),),
    attrs=(AttrDef("sub_block", AttrType.BLOCK),),
    side_effects=True,
    lowering=Lowering.CONTROL,
    doc="Run sub_block concurrently in a child scope; X: the outer temporaries it reads.",
)

SELECT = OpSchema(
    "select",
    inputs=(
        Slot("Channel", duplicable=True, no_grad=True),
        Slot("X", duplicable=True, optional=True, lod=True, no_grad=True),
        Slot("Reads", duplicable=True, optional=True, lod=True, no_grad=True),
    ),
    outputs=(Slot("Out", duplicable=True, optional=True, lod=True), Slot("Status", duplicable=True, optional=True)),
    attrs=(
        AttrDef("case_kinds", AttrType.STRINGS),
        AttrDef("case_channel", AttrType.INTS),
        AttrDef("case_count", AttrType.INTS),
        AttrDef("cases", AttrType.BLOCKS),
    ),
    infer=_infer_select_and_status,
    side_effects=True,
    lowering=Lowering.CONTROL,
    doc="Do the channel operation of one ready case (uniformly at random), then run its block.",
)

SCHEMAS = (CHANNEL_CREATE, CHANNEL_SEND, CHANNEL_RECV, CHANNEL_CLOSE, GO, SELECT)
