"""``place``: decide the device every op runs on and every variable lives on.

The rules (docs/placement.md has them with examples), for each op:

1. An op whose schema says ``host`` (feed, fetch; data reading, save/load) runs
   on the host, ``cpu``, whatever it asked for (a note says so when it asked
   for another device).
2. An op reading or writing a channel runs on the channel's device.
3. Else its own ``op_device`` (from ``device_guard``) wins.
4. Else a gradient op (role Backward, or a ``*_grad`` type) runs with its
   forward op: the op that first computed the variable whose gradient it reads
   or writes (``Out`` for ``Out@GRAD``), or with the parameter whose gradient
   it is; an optimizer op (role Optimize) runs with the parameter it updates
   (``op_role_var[0]``, else its ``Param`` input).
5. Else the block's default device (``Block.device``; a sub-block without one
   takes its owner op's device, else its parent's default), else the
   program's (``Program.device``), else the pass option ``default``, else the
   host. ``default`` is the fallback for programs that say nothing, not an
   override: a program's own defaults are more specific.

Then, when the op's type has no kernel for the chosen device kind
(``OpSchema.devices``), it runs on the host instead: a note in the pass report,
or an error naming the op with ``strict=true``.

Variables (``Variable.device``): a persistable variable keeps its device when
it has one (a ``ParamAttr(device=...)`` pin, or an earlier placement), else it
lives where the first forward op reading it runs, else where the first op using
it runs; a channel lives on its device, the host when it has none; any other
variable lives where its first writer runs, and one nobody writes (a feed)
where its ``device`` says, else on the host. The option ``fed``
(``NAME@DEVICE``, e.g. ``x@cuda:0``) sets that device first, for values fed
already on a device (the executor gives it for values fed on a GPU). Device
strings are written in their canonical spelling (``cpu`` for ``cpu:0``,
``cuda:0`` for ``cuda``). Placing a placed program changes nothing.

:func:`place_startup` places a startup program so that each initializer runs
where the main program keeps the variable it initialises.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import ClassVar

from blockir.errors import BlockirError
from blockir.ir import Block, Operator, Program, Variable, VarKind
from blockir.ir.devices import HOST, checked_device, device_kind
from blockir.ir.schema import GRAD_SUFFIX, OpRole, find
from blockir.passes.base import Pass, register_pass
from blockir.passes.inference import is_training_op
from blockir.passes.manager import note

__all__ = ["Place", "Placement", "place_startup"]

_CHANNELS = (VarKind.CHANNEL, VarKind.CHANNEL_LIST)


def _role(op: Operator) -> int:
    role = op.attrs.get("op_role", OpRole.FORWARD)
    return role if isinstance(role, int) else OpRole.FORWARD


def is_backward(op: Operator) -> bool:
    return bool(_role(op) & OpRole.BACKWARD) or op.type.endswith("_grad")


def find_var(block: Block, name: str) -> Variable | None:
    """The variable ``name`` of ``block`` or an enclosing block, None when there is none."""
    try:
        return block.find_var_recursive(name)
    except BlockirError:
        return None


class Placement:
    """Where the ops and variables of a program go under the rules above, computed on demand.

    Read-only: :class:`Place` applies it; ``insert-copies`` and
    :func:`place_startup` ask it. ``notes`` collects the fallbacks it decided.
    """

    def __init__(self, program: Program, default: str = "", strict: bool = False) -> None:
        self.program = program
        self.default = checked_device(default, "the place option default") if default else HOST
        self.strict = strict
        self.notes: list[str] = []
        self._ops: dict[Operator, str] = {}
        self._deciding: set[Operator] = set()
        self._blocks: dict[int, str] = {}
        self._resolving: set[int] = set()
        self._owner = {sub: op for block in program.blocks for op in block.ops for sub in op.sub_block_indices()}
        self._first_writer: dict[str, Operator] = {}
        self._forward_writer: dict[str, Operator] = {}
        self._forward_reader: dict[str, Operator] = {}
        self._first_user: dict[str, Operator] = {}
        for op in program.ops():
            forward = not is_training_op(op)
            for name in op.input_names():
                self._first_user.setdefault(name, op)
                if forward:
                    self._forward_reader.setdefault(name, op)
            for name in op.output_names():
                self._first_user.setdefault(name, op)
                self._first_writer.setdefault(name, op)
                if forward:
                    self._forward_writer.setdefault(name, op)

    def is_used(self, name: str) -> bool:
        return name in self._first_user

    # -- ops -----------------------------------------------------------------------
    def runs_on(self, op: Operator) -> str:
        """The device ``op`` runs on, placed or not: the one its schema's ``device_attr`` names (a copy's
        destination), else its ``op_device``, else :meth:`op_device`'s choice."""
        schema = find(op.type)
        if schema is not None and schema.device_attr:
            return checked_device(op.attr(schema.device_attr), op)
        return checked_device(op.device, op) if op.device else self.op_device(op)

    def op_device(self, op: Operator) -> str:
        """The device ``op`` runs on."""
        device = self._ops.get(op)
        if device is None:
            if op in self._deciding:  # a rule led back to this op: fall back to the defaults
                return self.block_default(op.block)
            self._deciding.add(op)
            try:
                device = self._decide(op)
            finally:
                self._deciding.discard(op)
            self._ops[op] = device
        return device

    def block_default(self, block: Block) -> str:
        """Where ops of ``block`` without their own device or a rule go."""
        device = self._blocks.get(block.idx)
        if device is not None:
            return device
        if block.idx in self._resolving:
            raise BlockirError(
                f"place: the default device of block {block.idx} depends on itself (its parents "
                "or the ops owning it form a cycle)"
            )
        self._resolving.add(block.idx)
        owner = self._owner.get(block.idx)
        parent = block.parent_block
        if block.device:
            device = checked_device(block.device, f"block {block.idx}")
        elif owner is not None:
            device = self.op_device(owner)
        elif parent is not None:
            device = self.block_default(parent)
        elif self.program.device:
            device = checked_device(self.program.device, "the program's device")
        else:
            device = self.default
        self._blocks[block.idx] = device
        return device

    def _decide(self, op: Operator) -> str:
        schema = find(op.type)
        own = checked_device(op.device, op) if op.device else ""
        if schema is not None and schema.host:
            if own not in ("", HOST):
                self.notes.append(f"{op.type} runs on the host, not on {own}: {op}")
            return HOST
        channel = self.channel_device(op)
        if channel:
            return channel
        device = own or self._rule_device(op) or self.block_default(op.block)
        if schema is None or device_kind(device) in schema.devices:
            return device
        if self.strict or device_kind(HOST) not in schema.devices:
            raise BlockirError(
                f"place: op type {op.type!r} has no kernel for {device} "
                f"(it has {', '.join(sorted(schema.devices)) or 'none'}): {op}"
            )
        self.notes.append(f"{op.type} has no {device_kind(device)} kernel: runs on the host instead of {device}: {op}")
        return HOST

    def channel_device(self, op: Operator) -> str:
        """The device of the channels ``op`` reads or writes ('' when it uses none)."""
        devices = set()
        for name in (*op.input_names(), *op.output_names()):
            var = find_var(op.block, name)
            if var is not None and var.kind in _CHANNELS:
                devices.add(self.var_home(var))
        if len(devices) > 1:
            raise BlockirError(f"place: op uses channels on different devices ({', '.join(sorted(devices))}): {op}")
        return devices.pop() if devices else ""

    def _rule_device(self, op: Operator) -> str:
        """The device a gradient or optimizer op follows; '' for other ops or when there is nothing to follow."""
        leader = self.follows(op)
        if isinstance(leader, Operator):
            return self.op_device(leader)
        return self.var_home(leader) if leader is not None else ""

    def follows(self, op: Operator) -> Operator | Variable | None:
        """What a gradient or optimizer op runs with (rule 4): the forward op that first computed the variable
        whose gradient it reads or writes, or the parameter it concerns; None for other ops or when there is
        nothing to follow."""
        if is_backward(op):
            for name in (*op.input_names(), *op.output_names()):
                forward, grad, _ = name.partition(GRAD_SUFFIX)
                if not grad:
                    continue
                producer = self._forward_writer.get(forward)
                if producer is not None:
                    return producer
                var = find_var(op.block, forward)
                if var is not None and var.is_parameter:
                    return var
        elif _role(op) & OpRole.OPTIMIZE:
            role_var = op.attrs.get("op_role_var")
            names = role_var[:1] if isinstance(role_var, tuple) and role_var else op.input("Param")[:1]
            return find_var(op.block, names[0]) if names else None
        return None

    def home_op(self, var: Variable) -> Operator | None:
        """The op whose device a persistable without a device of its own lives on (its first forward reader,
        else its first user); None for other variables."""
        if not var.persistable or var.device or var.kind in _CHANNELS:
            return None
        return self._forward_reader.get(var.name) or self._first_user.get(var.name)

    # -- variables ---------------------------------------------------------------------
    def var_home(self, var: Variable) -> str:
        """The device ``var`` lives on ('' for a persistable nothing uses)."""
        if var.kind in _CHANNELS:
            return checked_device(var.device, f"channel {var.name!r}") if var.device else HOST
        if var.persistable:
            if var.device:
                return checked_device(var.device, f"variable {var.name!r}")
            user = self.home_op(var)
            return self.op_device(user) if user is not None else ""
        writer = self._first_writer.get(var.name)
        if writer is not None:
            return self.op_device(writer)
        return checked_device(var.device, f"variable {var.name!r}") if var.device else HOST  # fed

    def var_homes(self) -> dict[str, str]:
        """Every used variable's device, by name (a sub-block's variable shadows an outer one of its name)."""
        return {var.name: self.var_home(var) for var in self.program.list_vars() if self.is_used(var.name)}


@register_pass
@dataclass(frozen=True)
class Place(Pass):
    """Set ``op_device`` on every op and ``device`` on every variable in use (module docstring)."""

    name: ClassVar[str] = "place"
    summary: ClassVar[str] = "decide the device of every op and variable (own device, block, program, default)"

    default: str = field(default="", metadata={"help": "device for ops the program places nowhere (else cpu)"})
    strict: bool = field(
        default=False, metadata={"help": "an op without a kernel for its device is an error, not a fallback to cpu"}
    )
    fed: tuple[str, ...] = field(
        default=(),
        metadata={"help": "variables fed with values already on a device, as NAME@DEVICE: they live there"},
    )

    def __post_init__(self) -> None:
        if self.default:
            checked_device(self.default, "the place option default")
        for item in self.fed:
            _fed_item(item)

    def run(self, program: Program) -> bool:
        changed = False
        block = program.global_block()
        for name, device in map(_fed_item, self.fed):  # the fed value is there: copies go from there
            if name not in block.vars:
                raise BlockirError(f"place: fed variable {name!r} is not a variable of the program's global block")
            if block.vars[name].device != device:
                block.vars[name].device = device
                changed = True
        placement = Placement(program, self.default, self.strict)
        changed = apply_placement(program, placement) or changed
        for message in placement.notes:
            note(message)
        return changed


def _fed_item(item: str) -> tuple[str, str]:
    """``(name, device)`` of an item ``NAME@DEVICE`` of the option ``fed`` (the device after the last ``@``)."""
    name, at, device = item.rpartition("@")
    if not at or not name:
        raise BlockirError(f"the place option fed takes NAME@DEVICE items, got {item!r}")
    return name, checked_device(device, f"the place option fed {item!r}")


def apply_placement(program: Program, placement: Placement, homes: dict[str, str] | None = None) -> bool:
    """Write ``placement`` into ``program``; ``homes`` (name -> device) overrides where variables live."""
    decided = [(op, placement.op_device(op)) for op in program.ops()]
    homes = {**placement.var_homes(), **(homes or {})}
    changed = False
    for op, device in decided:
        if op.attrs.get("op_device") != device:
            op.set_attr("op_device", device)
            changed = True
    for var in program.list_vars():
        home = homes.get(var.name, "") if placement.is_used(var.name) else ""
        if home and var.device != home:
            var.device = home
            changed = True
    return changed


def place_startup(startup: Program, main: Program, default: str = "", strict: bool = False) -> bool:
    """Place ``startup`` so that its variables live, and its initializers run, where ``main`` keeps them.

    An op of the startup program writing variables that ``main`` places on one
    device runs on that device (its own ``op_device`` is replaced); the rest of
    ``startup`` is placed by the usual rules. ``main`` is not changed. Returns
    whether ``startup`` changed.
    """
    wanted = {name: home for name, home in Placement(main, default, strict).var_homes().items() if home}
    changed = False
    for op in startup.ops():
        devices = {wanted[n] for n in op.output_names() if n in wanted}
        if len(devices) == 1:
            device = devices.pop()
            if op.attrs.get("op_device") != device:
                op.set_attr("op_device", device)
                changed = True
    placement = Placement(startup, default, strict)
    changed = apply_placement(startup, placement, {n: d for n, d in wanted.items() if placement.is_used(n)}) or changed
    for message in placement.notes:
        note(message)
    return changed
