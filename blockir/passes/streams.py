"""``streams``: put every op on a stream of its device, and find the waits between streams.

A stream is an ordered work queue of one device, named ``DEVICE/NAME``: the
device as ``place`` writes it (``cpu``, ``cpu:1``, ``cuda:0``) and ``compute0``,
``compute1``, ... or ``copy``. ``cpu/compute0`` is the host stream, the one the
calling thread runs. The pass writes each op's stream into its ``op_stream``
attribute, in every block (the device of an op is its ``op_device``, or where
``place`` would put it; a copy, ``memcpy``, runs on the device its schema's
``device_attr`` names, ``dst_device``):

1. Ops that ``place`` keeps on the host (feed, fetch, save/load, data reading)
   run on ``cpu/compute0``.
2. With ``copy=true``, a copy runs on a copy stream, so that copies
   overlap compute: the ``copy`` stream of its CUDA end when one end is a CUDA
   device (the destination when both are), else of its destination. Its source
   is the device of the op that last wrote its input in the block, else where
   the input variable lives, else the host. A collective (``device_allreduce``)
   runs on the copy stream of its first device (on CUDA it launches its work on
   the same stream of each of its devices).
3. Every other op runs on a compute stream of its device. With ``compute=1``
   that is ``DEVICE/compute0``. With more, an op continues the stream of one of
   its same-device predecessors in the dependency graph
   (:func:`~blockir.passes.deps.dependency_graph`) whose op is the last one put
   on that stream so far (the latest such predecessor), so a chain stays on one
   stream; else it starts on the device's next compute stream, round-robin.

With ``keep=true`` an op that has an ``op_stream`` keeps it and the others get
theirs by these rules (the executor's pipeline uses it: a program streamed by
hand, wholly or in part, e.g. by ``data-parallel``, runs as it says).

Each stream runs its ops in program order. :func:`stream_waits` gives, for
each op, the ops on other streams it must wait for: the fewest waits that,
with the streams' own order, keep every dependency between two streams. The
pass records them in its report entry
(``report.record("streams").details["waits"]``: block index -> op index ->
indices waited for) and notes the streams and waits of each block. The
assignment depends only on the program, so running the pass twice changes
nothing.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import ClassVar

import networkx as nx

from blockir.errors import BlockirError
from blockir.ir import Block, Operator, Program
from blockir.ir.devices import HOST, checked_device, device_kind
from blockir.ir.schema import collective_devices, find
from blockir.passes.base import Pass, register_pass
from blockir.passes.copies import is_copy, value_devices
from blockir.passes.deps import dependency_graph
from blockir.passes.manager import note, record_detail
from blockir.passes.place import Placement, find_var

__all__ = ["HOST_STREAM", "STREAM_ATTR", "Streams", "copy_stream", "op_stream", "stream_waits"]

STREAM_ATTR = "op_stream"
HOST_STREAM = f"{HOST}/compute0"


def compute_stream(device: str, k: int) -> str:
    """``DEVICE/compute<k>``."""
    return f"{device}/compute{k}"


def copy_stream(src: str, dst: str) -> str:
    """The stream of a copy from ``src`` to ``dst``: the copy stream of its CUDA end (``dst`` first), else ``dst``'s."""
    device = src if device_kind(src) == "cuda" and device_kind(dst) != "cuda" else dst
    return f"{device}/copy"


def op_stream(op: Operator, device: str) -> str:
    """The stream ``op`` runs on: its ``op_stream`` attribute, else ``DEVICE/compute0`` of its ``device``."""
    return op.attrs.get(STREAM_ATTR) or compute_stream(device, 0)


def stream_waits(
    block: Block | None, streams: Sequence[str], graph: nx.DiGraph | None = None
) -> dict[int, tuple[int, ...]]:
    """For each op index of ``block`` that must wait, the sorted indices of the ops on other streams it waits for.

    ``streams[i]`` is the stream of op ``i``; ``graph`` the block's dependencies
    (default :func:`~blockir.passes.deps.dependency_graph`). Every stream runs
    its ops in program order, so an edge ``i -> j`` between two streams needs
    no wait of its own when ``j``, or an earlier op of ``j``'s stream, already
    waits for ``i`` or a later op of ``i``'s stream, directly or through other
    waits. Vector clocks track this: per op, the latest op of every stream
    known done when it is done. The result is sound (the stream orders and the
    waits imply every edge) and minimal (dropping any wait loses an edge).
    ``block`` may be None when ``graph`` is given (over ``0..len(streams)-1``).
    """
    where = "the graph" if block is None else f"block {block.idx}"
    if graph is None:
        if block is None:
            raise BlockirError("stream_waits: give the block or its dependency graph")
        graph = dependency_graph(block)
    if len(streams) != graph.number_of_nodes():
        raise BlockirError(f"stream_waits: {len(streams)} streams for the {graph.number_of_nodes()} ops of {where}")
    known: dict[str, dict[str, int]] = {}  # stream -> the clock of its last op so far
    clocks: list[dict[str, int]] = []  # op -> the latest op of each stream known done once it is done
    waits: dict[int, tuple[int, ...]] = {}
    for j, stream in enumerate(streams):
        clock = dict(known.get(stream, {}))
        pending: dict[str, int] = {}  # other stream -> its latest op j depends on that j does not know done
        for i in graph.predecessors(j):
            if i >= j:
                raise BlockirError(f"stream_waits: the dependency {i} -> {j} of {where} goes against program order")
            if streams[i] != stream and clock.get(streams[i], -1) < i:
                pending[streams[i]] = max(pending.get(streams[i], -1), i)
        # An earlier op of a stream is done once its latest is (clocks grow along a stream): of the ops of one
        # stream, only the latest may need a wait, and only the latest of another can make it needless.
        tops = pending.values()
        needed = sorted(i for i in tops if not any(k != i and clocks[k].get(streams[i], -1) >= i for k in tops))
        for i in needed:
            for s, latest in clocks[i].items():
                clock[s] = max(clock.get(s, -1), latest)
        clock[stream] = j
        clocks.append(clock)
        known[stream] = clock
        if needed:
            waits[j] = tuple(needed)
    return waits


def describe(block: Block, streams: Sequence[str], waits: dict[int, tuple[int, ...]]) -> str:
    """``block 0: 12 ops on 3 streams (cpu/compute0, cpu/copy, cpu:1/compute0), 2 waits``."""
    used = sorted(set(streams))
    listed = f" ({', '.join(used)})" if used else ""
    return (
        f"block {block.idx}: {len(streams)} ops on {len(used)} streams{listed}, {sum(map(len, waits.values()))} waits"
    )


def _set_stream(op: Operator, stream: str) -> bool:
    """Set ``op_stream``, keeping ``op_device`` the last attribute (as the text form prints it)."""
    if op.attrs.get(STREAM_ATTR) == stream:
        return False
    device = op.attrs.get("op_device")
    op.set_attr(STREAM_ATTR, stream)
    if device is not None:
        op.remove_attr("op_device")
        op.set_attr("op_device", device)
    return True


@register_pass
@dataclass(frozen=True)
class Streams(Pass):
    """Set ``op_stream`` on every op and record the waits between streams (module docstring)."""

    name: ClassVar[str] = "streams"
    summary: ClassVar[str] = "put every op on a compute or copy stream of its device; record the cross-stream waits"

    compute: int = field(
        default=1, metadata={"help": "compute streams per device; independent branches take them round-robin"}
    )
    copy: bool = field(
        default=True, metadata={"help": "memcpy ops run on a copy stream (false: on the compute streams)"}
    )
    keep: bool = field(
        default=False, metadata={"help": "ops that have an op_stream keep it (false: every op reassigned)"}
    )

    def __post_init__(self) -> None:
        if isinstance(self.compute, bool) or not isinstance(self.compute, int) or self.compute < 1:
            raise BlockirError(f"the streams option compute must be an int >= 1, got {self.compute!r}")
        for option in ("copy", "keep"):
            if not isinstance(getattr(self, option), bool):
                raise BlockirError(f"the streams option {option} must be true or false, got {getattr(self, option)!r}")

    def run(self, program: Program) -> bool:
        placement = Placement(program)
        changed = False
        waits: dict[int, dict[int, tuple[int, ...]]] = {}
        for block in program.blocks:
            graph = dependency_graph(block)
            streams = self.assign(block, placement, graph)
            for op, stream in zip(block.ops, streams):
                changed = _set_stream(op, stream) or changed
            waits[block.idx] = stream_waits(block, streams, graph)
            note(describe(block, streams, waits[block.idx]))
        record_detail("waits", waits)
        return changed

    def assign(self, block: Block, placement: Placement, graph: nx.DiGraph) -> list[str]:
        """The stream of each op of ``block``, by the rules of the module docstring."""
        devices = [placement.runs_on(op) for op in block.ops]
        where: dict[str, str] = {}  # variable -> device of the op that last wrote it
        last: dict[str, int] = {}  # stream -> the last op put on it
        turn: dict[str, int] = {}  # device -> how many compute streams were started on it
        streams: list[str] = []
        for j, (op, device) in enumerate(zip(block.ops, devices)):
            schema = find(op.type)
            if self.keep and STREAM_ATTR in op.attrs:
                stream = op.attrs[STREAM_ATTR]
            elif schema is not None and schema.host:
                stream = HOST_STREAM
            elif self.copy and is_copy(op):
                stream = copy_stream(self.source(block, op, where), device)
            elif self.copy and collective_devices(op) is not None:
                stream = f"{device}/copy"
            else:
                chained = [
                    i
                    for i in graph.predecessors(j)
                    if devices[i] == device and streams[i].startswith(f"{device}/compute") and last[streams[i]] == i
                ]
                if chained:
                    stream = streams[max(chained)]
                else:
                    started = turn.get(device, 0)
                    turn[device] = started + 1
                    stream = compute_stream(device, started % self.compute)
            streams.append(stream)
            last[stream] = j
            where.update(value_devices(op, device)[1])
        return streams

    @staticmethod
    def source(block: Block, op: Operator, where: dict[str, str]) -> str:
        """The device the input of the ``memcpy`` ``op`` is on (``where``: the devices of the block's writes so far)."""
        name = op.input("X")[0]
        if name in where:
            return where[name]
        var = find_var(block, name)
        return checked_device(var.device, f"variable {name!r}") if var is not None and var.device else HOST
