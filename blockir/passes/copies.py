"""``insert-copies``: make every op read only values on its own device, with ``memcpy`` ops.

Each block is walked in program order, keeping where the current value of each
variable is (its writer's device; a variable read before any write is where it
lives, ``Variable.device``, the host when unset) and which copies of that value
exist on other devices. An op (other than ``memcpy``) reading a variable whose
value is elsewhere reads ``NAME@DEVICE`` instead, written by one ``memcpy``
inserted before the first such reader on that device and reused by every later
one until the variable is written again. Feeds come in on the host and so are
copied to their readers' devices; fetch ops run on the host and so get their
targets copied back.

A persistable variable must end every write on its own device, where the scope
keeps it between runs: an op writing one from another device writes
``NAME@DEVICE`` and a ``memcpy`` right after it carries the value home (so a
parameter updated on one device and read on another is copied again, in the
block, every iteration: readers always see the update). A sub-block starts
from where the values are when the op owning it runs (at the end of its parent
block when no op owns it) and treats the variables of the blocks around it the
same way: it reads copies of them and carries what it writes to them back; the values its op reads
as copies (a ``while``'s ``X``, handed to the block) it finds on their copies' devices.

``memcpy`` ops run on their ``dst_device`` and are the only ops reading across
devices, with collectives (``device_allreduce``), which read ``X[i]`` and write
``Out[i]`` on device ``i`` of their ``devices`` (copies are inserted to bring
each ``X[i]`` there); the copies made by an earlier run are found again, so running the pass
twice changes nothing. Each ``memcpy`` records its lineage (``op_pass``,
``op_origin``: the op that wrote the value, if any, and the first reader) and
the ``op_role`` of that reader. Ops without ``op_device`` count as ``place``
would place them.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

from blockir.errors import BlockirError
from blockir.ir import Block, Operator, Program, VarKind
from blockir.ir.core import block_reads_writes, op_reads_writes
from blockir.ir.devices import HOST, checked_device, is_valid_device
from blockir.ir.schema import EMPTY_VAR, Lowering, collective_devices, find
from blockir.ops.transfer import MEMCPY
from blockir.passes.base import Pass, mark_created, register_pass
from blockir.passes.place import Placement, find_var

__all__ = ["InsertCopies", "copied_from", "copy_name", "is_copy", "original_name", "value_devices"]

_COPYABLE = (VarKind.LOD_TENSOR, VarKind.SELECTED_ROWS)


def is_copy(op: Operator) -> bool:
    """Whether ``op`` is a copy between devices: its schema lowers as :attr:`Lowering.COPY`."""
    schema = find(op.type)
    return schema is not None and schema.lowering is Lowering.COPY


def value_devices(op: Operator, device: str) -> tuple[dict[str, str], dict[str, str]]:
    """Where ``op``, running on ``device``, reads each of its inputs and writes each of its outputs: on
    ``device``, but a collective's ``X[i]`` and ``Out[i]`` on device ``i`` of its ``devices``."""
    reads = dict.fromkeys((n for n in op.input_names() if n != EMPTY_VAR), device)
    writes = dict.fromkeys((n for n in op.output_names() if n != EMPTY_VAR), device)
    devices = collective_devices(op)
    if devices is not None:
        reads.update(zip(op.input("X"), devices))
        writes.update(zip(op.output("Out"), devices))
    return reads, writes


def copy_name(name: str, device: str) -> str:
    """The variable holding the copy of ``name`` on ``device``: ``NAME@DEVICE``."""
    return f"{name}@{device}"


def copied_from(name: str) -> tuple[str, str] | None:
    """``(NAME, DEVICE)`` for ``NAME@DEVICE``, the name of a copy (:func:`copy_name`); None for any other name."""
    base, _, device = name.rpartition("@")
    return (base, device) if base and is_valid_device(device) else None


def original_name(name: str) -> str:
    """``NAME`` for ``NAME@DEVICE``, the name of a copy; any other name itself."""
    copied = copied_from(name)
    return name if copied is None else copied[0]


class _Walk:
    """One block's walk: where values are, which copies exist, and the ops inserted."""

    def __init__(
        self,
        block: Block,
        placement: Placement,
        where: dict[str, str],
        pinned: set[str],
        unowned: dict[int, list[Block]],
    ) -> None:
        self.block = block
        self.placement = placement
        self.unowned = unowned  # parent index -> the sub-blocks of it that no op owns
        self.where = where  # variable -> device of its current value
        self.pinned = pinned  # variables whose value must stay on where[name]
        self.copies: dict[str, dict[str, str]] = {}  # variable -> device -> name of a current copy there
        self.writer: dict[str, Operator] = {}  # variable -> op that wrote its current value
        self.changed = False

    def location(self, name: str) -> str:
        if name not in self.where:
            var = self.block.find_var_recursive(name)
            self.where[name] = checked_device(var.device, f"variable {name!r}") if var.device else HOST
        return self.where[name]

    def run(self) -> bool:
        index = 0
        while index < len(self.block.ops):
            op = self.block.ops[index]
            device = self.placement.runs_on(op)
            reads, writes = value_devices(op, device)
            if not is_copy(op):
                for name, there in reads.items():
                    if self.location(name) != there:
                        count = len(self.block.ops)
                        op.rename_input(name, self.copy_to(name, there, op, index))
                        index += len(self.block.ops) - count
            for sub in op.sub_blocks():
                self.walk_sub_block(sub, op)
            index += 1 + self.record_writes(op, writes, index)
        for sub in self.unowned.get(self.block.idx, ()):  # sub-blocks no op owns see the block as it ends
            if sub is not self.block:
                self.walk_sub_block(sub)
        return self.changed

    def copy_to(self, name: str, device: str, reader: Operator, index: int) -> str:
        """The copy of ``name`` on ``device`` for ``reader`` (at ``index``), made there if there is none."""
        copies = self.copies.setdefault(name, {})
        if device not in copies:
            writer = self.writer.get(name)
            copies[device] = self.insert_copy(
                index,
                name,
                copy_name(name, device),
                device,
                reader,
                [writer, reader] if writer is not None else [reader],
            )
        return copies[device]

    def declare(self, src: str, dst: str, device: str, op: Operator) -> None:
        """Declare ``dst``, a copy of variable ``src`` on ``device`` (needed by ``op``), unless it exists."""
        var = self.block.find_var_recursive(src)
        if var.kind not in _COPYABLE:
            raise BlockirError(
                f"insert-copies: {src!r} is a {var.kind.text} variable on {self.location(src)}, "
                f"which cannot be copied to {device}: {op}"
            )
        if find_var(self.block, dst) is None:
            self.block.create_var(
                dst,
                kind=var.kind,
                dtype=var.dtype,
                shape=var.shape,
                lod_level=var.lod_level,
                stop_gradient=var.stop_gradient,
                device=device,
            )

    def insert_copy(self, index: int, src: str, dst: str, device: str, cause: Operator, origins: list[Operator]) -> str:
        """Insert ``dst = memcpy(src)`` onto ``device`` at ``index``, with the lineage ``origins``."""
        self.declare(src, dst, device, cause)
        attrs = {MEMCPY.device_attr: device}
        if "op_role" in cause.attrs:
            attrs["op_role"] = cause.attrs["op_role"]
        op = self.block.insert_op(index, MEMCPY.type, {"X": [src]}, {"Out": [dst]}, attrs)
        mark_created(op, InsertCopies.name, origins)
        op.set_attr("op_device", device)  # last, as the text form prints it
        self.record_write(dst, device, op)
        self.changed = True
        return dst

    def record_writes(self, op: Operator, writes: dict[str, str], index: int) -> int:
        """Note what ``op`` (at ``index``) wrote (``writes``: each output's device); returns how many ops it
        inserted after it."""
        inserted = 0
        for name, device in writes.items():
            self.copies.pop(name, None)
            home = self.location(name) if name in self.pinned else device
            if home == device:
                self.record_write(name, device, op)
                continue
            local = copy_name(name, device)  # written here, then carried home
            self.declare(name, local, device, op)
            op.rename_output(name, local)
            self.record_write(local, device, op)
            inserted += 1
            self.insert_copy(index + inserted, local, name, home, op, [op])
            self.copies[name] = {device: local}
        for name in op_reads_writes(op)[1] - set(op.output_names()):  # written inside its sub-blocks
            self.copies.pop(name, None)
        return inserted

    def record_write(self, name: str, device: str, op: Operator) -> None:
        self.where[name] = device
        self.writer[name] = op

    def walk_sub_block(self, sub: Block, owner: Operator | None = None) -> None:
        """Walk ``sub``, starting from where the values it uses are; those its ``owner`` op reads as copies (a
        loop's ``X``) it finds where the copies are (the op hands them to it)."""
        reads, writes = block_reads_writes(sub)
        outer = {name: self.location(name) for name in (reads | writes) - {EMPTY_VAR}}
        for name in owner.input_names() if owner is not None else ():
            copied = copied_from(name)
            if copied is not None and copied[0] in outer:
                outer[copied[0]] = copied[1]
        walk = _Walk(sub, self.placement, outer, set(outer) | _persistables(sub), self.unowned)
        self.changed = walk.run() or self.changed


def _persistables(block: Block) -> set[str]:
    return {name for name, var in block.vars.items() if var.persistable}


@register_pass
@dataclass(frozen=True)
class InsertCopies(Pass):
    """Insert the ``memcpy`` ops between devices (module docstring)."""

    name: ClassVar[str] = "insert-copies"
    summary: ClassVar[str] = "insert one memcpy per value and device wherever an op reads a value from another device"

    def run(self, program: Program) -> bool:
        block = program.global_block()
        owned = {i for op in program.ops() for i in op.sub_block_indices()}  # the pass adds no owner ops
        unowned: dict[int, list[Block]] = {}
        for sub in program.blocks:
            if sub.idx not in owned:
                unowned.setdefault(sub.parent_idx, []).append(sub)
        return _Walk(block, Placement(program), {}, _persistables(block), unowned).run()
