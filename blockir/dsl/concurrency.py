"""Channels, go blocks and select in programs (the DSL side of :mod:`blockir.ops.channel`).

```python
ch = bir.make_channel(capacity=4, place="cpu:1")   # a channel variable of the program
bir.channel.send(ch, [image, label])               # one message of two values
image2, label2, ok = bir.channel.recv(ch, status=True)
with bir.go():                                     # a block that runs concurrently
    ...
with bir.select() as select:                       # Go's select, cases as blocks
    with select.recv(ch) as (image3, label3): ...
    with select.send(other, [x]): ...
    with select.default(): ...
chans = bir.channel_list.make("chan_list", places=["cpu:0", "cpu:1"], capacity=4)
```

Channels are persistable variables: programs run in one scope share a channel
by its name (the first ``channel_create`` to run makes it; the others find it).
A receiver declares what it receives: ``recv`` takes the layout (shapes, dtypes,
LoD levels) of the message from ``like=[variables]``, else from the last
message built for a channel of that name with ``send`` in this process (the
producer program is usually built first), else it is an error.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator, Sequence
from types import SimpleNamespace

from blockir.dsl import framework, unique_name
from blockir.dsl.variable import Variable
from blockir.errors import BlockirError
from blockir.ir import core
from blockir.ir.core import Block, outer_temporaries
from blockir.ir.devices import require_device
from blockir.ir.dtypes import VarKind, to_dtype

__all__ = [
    "ChannelList",
    "Select",
    "channel",
    "channel_close",
    "channel_list",
    "channel_list_make",
    "channel_recv",
    "channel_send",
    "go",
    "make_channel",
    "select",
]

_Layout = tuple[tuple[tuple[int, ...], str, int], ...]  # per value: shape, dtype, lod_level
_layouts: dict[str, _Layout] = {}  # channel name -> the layout of the last message built for it


def _main_block() -> Block:
    return framework.default_main_program().global_block()


def _check_channel(ch: object, what: str) -> core.Variable:
    if not isinstance(ch, core.Variable) or ch.kind is not VarKind.CHANNEL:
        raise BlockirError(f"{what}: expected a channel variable (make_channel), got {ch!r}")
    return ch


def make_channel(
    dtype: str = "float32",
    capacity: int = 0,
    place: str | None = None,
    name: str | None = None,
    bytes_limit: int | None = None,
) -> Variable:
    """A channel variable of the main program and the ``channel_create`` op that makes (or finds) it.

    ``capacity`` 0 is unbuffered; ``place`` is the channel's device (its ops run
    there and what is sent is copied there), the host by default; ``dtype`` is
    recorded in the variable (messages may mix dtypes); ``bytes_limit`` bounds
    the bytes buffered.
    """
    if not isinstance(capacity, int) or isinstance(capacity, bool) or capacity < 0:
        raise BlockirError(f"make_channel: capacity must be an int >= 0, got {capacity!r}")
    if bytes_limit is not None and (not isinstance(bytes_limit, int) or bytes_limit < 0):
        raise BlockirError(f"make_channel: bytes_limit must be an int >= 0 or None, got {bytes_limit!r}")
    device = require_device(place, "make_channel place") if place is not None else ""
    name = name or unique_name.generate("channel")
    block = _main_block()
    if name in block.vars:
        raise BlockirError(f"make_channel: the program already has a variable {name!r}")
    var = block.add_var(
        Variable(name, kind=VarKind.CHANNEL, dtype=to_dtype(dtype), capacity=capacity, persistable=True, device=device)
    )
    framework.append_op(
        block,
        "channel_create",
        {},
        {"Out": [var]},
        {"capacity": capacity, "bytes_limit": -1 if bytes_limit is None else bytes_limit},
        layer="make_channel",
        device=device,
    )
    return var


def channel_send(ch: core.Variable, values: core.Variable | Sequence[core.Variable]) -> None:
    """Send ``values`` on ``ch`` as one message (blocking as Go's send does)."""
    ch = _check_channel(ch, "channel.send")
    values = [values] if isinstance(values, core.Variable) else list(values)
    if not values or not all(isinstance(v, core.Variable) for v in values):
        raise BlockirError(f"channel.send on {ch.name!r}: values must be a non-empty list of variables")
    _layouts[ch.name] = tuple((tuple(v.shape or ()), v.dtype or "float32", v.lod_level) for v in values)
    block = framework.default_main_program().current_block()
    framework.append_op(block, "channel_send", {"Channel": [ch], "X": values}, {}, layer="channel.send")


def _layout(ch: core.Variable, like: Sequence[core.Variable] | None, what: str) -> _Layout:
    if like is not None:
        return tuple((tuple(v.shape or ()), v.dtype or "float32", v.lod_level) for v in like)
    layout = _layouts.get(ch.name)
    if layout is None:
        raise BlockirError(
            f"{what} on {ch.name!r}: the layout of its messages is unknown: build the program "
            "that sends on it first, or give like=[variables shaped as the message]"
        )
    return layout


def _received_vars(ch: core.Variable, layout: _Layout) -> list[Variable]:
    block = framework.default_main_program().current_block()
    return [
        block.add_var(
            Variable(
                unique_name.generate(f"{ch.name}.recv"), shape=shape, dtype=dtype, lod_level=lod, stop_gradient=True
            )
        )
        for shape, dtype, lod in layout
    ]


def _status_var() -> Variable:
    block = framework.default_main_program().current_block()
    return block.add_var(Variable(unique_name.generate("channel.status"), shape=(1,), dtype="bool", stop_gradient=True))


def channel_recv(
    ch: core.Variable, status: bool = False, like: Sequence[core.Variable] | None = None
) -> list[Variable]:
    """Receive one message from ``ch``: its values, plus a bool[1] status variable when ``status``
    (false once the channel is closed and drained; the values are then zero-row)."""
    ch = _check_channel(ch, "channel.recv")
    outs = _received_vars(ch, _layout(ch, like, "channel.recv"))
    status_vars = [_status_var()] if status else []
    outputs: dict[str, list[core.Variable]] = {"Out": list(outs)}
    if status_vars:
        outputs["Status"] = list(status_vars)
    block = framework.default_main_program().current_block()
    framework.append_op(block, "channel_recv", {"Channel": [ch]}, outputs, layer="channel.recv")
    return [*outs, *status_vars]


def channel_close(ch: core.Variable) -> None:
    """Close ``ch``: receivers drain what is buffered, then get a false status; senders fail."""
    ch = _check_channel(ch, "channel.close")
    framework.append_op(
        framework.default_main_program().current_block(), "channel_close", {"Channel": [ch]}, {}, layer="channel.close"
    )


@contextlib.contextmanager
def go(name: str | None = None) -> Iterator[Block]:
    """Ops built inside run as a go block: concurrently, on their own thread, in a child scope. The run
    that starts it returns once it has finished. It shares values with the rest of the program through
    channels and persistable variables; the temporaries it reads are taken when ``go`` runs."""
    with framework.sub_block() as block:
        yield block
    parent = framework.default_main_program().current_block()
    reads = [parent.find_var_recursive(n) for n in outer_temporaries(block)]
    framework.append_op(parent, "go", {"X": reads}, {}, {"sub_block": block.idx}, layer=name or "go")


class Select:
    """Builds a ``select`` op: ``with select.recv(ch) as values:``, ``with select.send(ch, values):``,
    ``with select.default():``; the op is appended when the ``with bir.select()`` block ends."""

    def __init__(self) -> None:
        self.kinds: list[str] = []
        self.channels: list[core.Variable] = []
        self.case_channel: list[int] = []
        self.counts: list[int] = []
        self.blocks: list[Block] = []
        self.sent: list[core.Variable] = []
        self.outs: list[core.Variable] = []
        self.statuses: list[core.Variable] = []

    def _channel_index(self, ch: core.Variable, what: str) -> int:
        ch = _check_channel(ch, what)
        if ch not in self.channels:
            self.channels.append(ch)
        return self.channels.index(ch)

    @contextlib.contextmanager
    def _case(self, kind: str, channel: int, count: int, yielded: object) -> Iterator[object]:
        self.kinds.append(kind)
        self.case_channel.append(channel)
        self.counts.append(count)
        with framework.sub_block() as block:
            self.blocks.append(block)
            yield yielded

    def send(
        self, ch: core.Variable, values: core.Variable | Sequence[core.Variable]
    ) -> contextlib.AbstractContextManager[None]:
        """A case sending ``values`` on ``ch``; its block runs after the send."""
        values = [values] if isinstance(values, core.Variable) else list(values)
        index = self._channel_index(ch, "select.send")
        _layouts[ch.name] = tuple((tuple(v.shape or ()), v.dtype or "float32", v.lod_level) for v in values)
        self.sent.extend(values)
        return self._case("send", index, len(values), None)  # type: ignore[return-value]

    def recv(
        self, ch: core.Variable, like: Sequence[core.Variable] | None = None
    ) -> contextlib.AbstractContextManager[list[Variable]]:
        """A case receiving from ``ch``; yields the received variables and the status variable last."""
        index = self._channel_index(ch, "select.recv")
        outs = _received_vars(ch, _layout(ch, like, "select.recv"))
        status = _status_var()
        self.outs.extend(outs)
        self.statuses.append(status)
        return self._case("recv", index, len(outs), [*outs, status])  # type: ignore[return-value]

    def default(self) -> contextlib.AbstractContextManager[None]:
        """The case taken when no other is ready."""
        if "default" in self.kinds:
            raise BlockirError("select: at most one default case")
        return self._case("default", -1, 0, None)  # type: ignore[return-value]

    def _append(self) -> None:
        if not self.kinds:
            raise BlockirError("select: no cases")
        block = framework.default_main_program().current_block()
        reads = sorted({n for b in self.blocks for n in outer_temporaries(b)} - {v.name for v in self.outs})
        framework.append_op(
            block,
            "select",
            {"Channel": self.channels, "X": self.sent, "Reads": [block.find_var_recursive(n) for n in reads]},
            {"Out": self.outs, "Status": self.statuses},
            {
                "case_kinds": self.kinds,
                "case_channel": self.case_channel,
                "case_count": self.counts,
                "cases": [b.idx for b in self.blocks],
            },
            layer="select",
        )


@contextlib.contextmanager
def select() -> Iterator[Select]:
    """Go's select in a program: build its cases inside the ``with`` block (see :class:`Select`)."""
    builder = Select()
    yield builder
    builder._append()


class ChannelList(list):
    """Channel variables ``NAME.0``, ``NAME.1``, ... one per place (``places``)."""

    def __init__(self, channels: list[Variable], places: list[str]) -> None:
        super().__init__(channels)
        self.places = places


def channel_list_make(name: str, places: Sequence[str], capacity: int = 0, dtype: str = "float32") -> ChannelList:
    """Named channels, one per place, that programs run in the same scope share (``NAME.i`` on ``places[i]``)."""
    if not isinstance(name, str) or not name:
        raise BlockirError(f"channel_list.make: name must be a non-empty string, got {name!r}")
    if isinstance(places, str) or not places:
        raise BlockirError(f"channel_list.make {name!r}: places must be a non-empty list of devices, got {places!r}")
    devices = [require_device(p, f"channel_list.make {name!r} place") for p in places]
    return ChannelList([make_channel(dtype, capacity, d, name=f"{name}.{i}") for i, d in enumerate(devices)], devices)


channel = SimpleNamespace(send=channel_send, recv=channel_recv, close=channel_close)  # bir.channel.send(...)
channel_list = SimpleNamespace(make=channel_list_make)  # bir.channel_list.make(...)
