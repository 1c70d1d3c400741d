"""The in-memory IR: Program, Block, Operator, Variable.

Plain mutable Python objects that change only through their methods (and the
plain fields of programs, blocks and variables): an op's inputs, outputs and
attributes, a block's ops and variables and a program's blocks are read-only
views. Every change bumps the owning program's mutation counter, which
executors and pass pipelines cache on, and an attribute is checked against its
declared type when it is set. The loaders (proto and text) build programs
through a private unchecked path and leave the judging to the verifier.
``to_proto``/``from_proto`` (in :mod:`blockir.ir.proto_io`) round-trip losslessly
and the text form (:mod:`blockir.ir.text`) prints and parses back identically.
"""

from __future__ import annotations

import hashlib
import itertools
import sys
from collections.abc import Iterable, Iterator, Mapping, Sequence
from types import MappingProxyType
from typing import Any, TypeGuard, TypeVar, overload

from blockir.errors import BlockirError
from blockir.ir import attrs as _attrs
from blockir.ir.attrs import AttrType
from blockir.ir.dtypes import VarKind, to_dtype
from blockir.ir.schema import COMMON_ATTRS, REQUIRED, InferContext, OpRole, find

# Global so that counters of different programs never collide: a cached
# (id(program), mutation) pair can never be reused by another program state.
_MUTATIONS = itertools.count(1)


def _is_name(value: object) -> TypeGuard[str]:
    """Whether ``value`` is a non-empty string (a name, a type, a slot)."""
    return isinstance(value, str) and value != ""


TENSOR_KINDS = frozenset({VarKind.LOD_TENSOR, VarKind.SELECTED_ROWS, VarKind.LOD_TENSOR_ARRAY})

MAX_BLOCK_DEPTH = 64
"""How deep blocks may nest: a block has at most 64 ancestors (the global block has none). Paddle's programs
nest a few levels (a ``while`` in a ``conditional_block``, ...); the loaders refuse a program nesting deeper
and the verifier reports one."""

TOO_DEEP = f"nested more than {MAX_BLOCK_DEPTH} blocks deep, the limit of block nesting"
"""What the loaders and the verifier say of a block nested deeper than :data:`MAX_BLOCK_DEPTH`."""


def block_chains(parents: Sequence[int]) -> tuple[list[int], list[int | None]]:
    """The parent chains of the blocks whose ``parent_idx`` are ``parents``, in time linear in their number.

    A block's chain is the block, its parent, the parent's parent, ..., ending before a parent index that is
    not a block (-1) or before a block already in the chain (the parents form a cycle). Returns per block the
    length of its chain and, where the chain ends at a cycle, the block the chain would have come back to
    (None where it ends at -1 or an invalid index). An acyclic chain of length ``n`` is a block ``n - 1``
    levels deep.
    """
    n = len(parents)
    lengths = [0] * n
    cycles: list[int | None] = [None] * n
    state = bytearray(n)  # 0: not seen, 1: on the walk at hand, 2: done
    for start in range(n):
        if state[start]:
            continue
        path: list[int] = []
        v = start
        while 0 <= v < n and not state[v]:
            state[v] = 1
            path.append(v)
            v = parents[v]
        length: int = 0
        cycle: int | None = None
        if 0 <= v < n and state[v] == 1:  # the walk came back to block v: the blocks from v on are a cycle
            at = path.index(v)
            for b in path[at:]:
                lengths[b], cycles[b], state[b] = len(path) - at, b, 2
            del path[at:]
            length, cycle = lengths[v], v  # the blocks before v continue into the cycle
        elif 0 <= v < n:  # a block done before: the walk's chains continue into its chain
            length, cycle = lengths[v], cycles[v]
        for b in reversed(path):
            length += 1
            lengths[b], cycles[b], state[b] = length, cycle, 2
    return lengths, cycles


def too_deep(parents: Sequence[int]) -> int | None:
    """The first block (by index) of the blocks whose ``parent_idx`` are ``parents`` that is nested deeper than
    :data:`MAX_BLOCK_DEPTH` (its chain of parents reaching -1 or an invalid index); None when there is none.
    Parents forming a cycle are left to the verifier."""
    lengths, cycles = block_chains(parents)
    return next((i for i, (n, c) in enumerate(zip(lengths, cycles)) if c is None and n - 1 > MAX_BLOCK_DEPTH), None)


class Variable:
    """A named value of a block.

    ``shape`` uses -1 for an unknown dimension (the batch); ``dtype`` is a numpy
    name. Kinds without a tensor description (feed/fetch lists, readers, ...)
    have ``dtype`` and ``shape`` None. Channels have ``dtype`` and ``capacity``.
    ``device`` is where the value lives (``""``: not decided; the ``place`` pass
    decides it, and keeps a persistable's or a fed variable's device, e.g. one
    pinned by ``ParamAttr(device=...)``).

    Setting a field of a variable that belongs to a block counts as a change of
    its program; its name changes only through :meth:`Block.rename_var`.
    """

    _FIELDS = (
        "name",
        "kind",
        "dtype",
        "shape",
        "lod_level",
        "persistable",
        "stop_gradient",
        "is_parameter",
        "need_check_feed",
        "capacity",
        "device",
    )

    def __init__(
        self,
        name: str,
        kind: VarKind = VarKind.LOD_TENSOR,
        dtype: Any = "float32",
        shape: Iterable[int] | None = (),
        lod_level: int = 0,
        persistable: bool = False,
        stop_gradient: bool = False,
        is_parameter: bool = False,
        need_check_feed: bool = False,
        capacity: int = 0,
        device: str = "",
    ) -> None:
        if not _is_name(name):
            raise BlockirError(f"variable name must be a non-empty string, got {name!r}")
        self.block: Block | None = None
        self.name = name
        self.kind = VarKind(kind)
        has_tensor = self.kind in TENSOR_KINDS or self.kind is VarKind.CHANNEL or self.kind is VarKind.CHANNEL_LIST
        self.dtype = to_dtype(dtype) if has_tensor and dtype is not None else None
        self.shape = tuple(int(d) for d in shape) if self.kind in TENSOR_KINDS and shape is not None else None
        self.lod_level = int(lod_level)
        self.persistable = bool(persistable)
        self.stop_gradient = bool(stop_gradient)
        self.is_parameter = bool(is_parameter)
        self.need_check_feed = bool(need_check_feed)
        self.capacity = int(capacity)
        self.device = str(device)

    def __setattr__(self, key: str, value: Any) -> None:
        block = self.__dict__.get("block")
        if key == "name" and block is not None:
            raise BlockirError(f"variable {self.name!r}: rename it with Block.rename_var, which renames its uses")
        object.__setattr__(self, key, value)
        if block is not None and key != "block":
            block.program._touch()

    def fields(self) -> dict[str, Any]:
        return {f: getattr(self, f) for f in self._FIELDS}

    def copy_to(self, block: Block) -> Variable:
        """A copy of this variable (same class) added to ``block``."""
        new = object.__new__(type(self))
        new.__dict__.update({k: v for k, v in self.__dict__.items() if k != "block"})
        new.__dict__["block"] = None
        return block.add_var(new)

    def __repr__(self) -> str:
        from blockir.ir.text import format_var

        return format_var(self)


_OP_READ_ONLY = frozenset({"type", "inputs", "outputs", "attrs", "attr_types"})


class Operator:
    """One op: its type, inputs and outputs by slot (tuples of variable names), typed attributes.

    ``inputs``, ``outputs``, ``attrs`` and ``attr_types`` are read-only views: every
    change goes through the methods (:meth:`set_input`, :meth:`set_output`,
    :meth:`remove_input`, :meth:`remove_output`, :meth:`rename_input`,
    :meth:`rename_output`, :meth:`set_attr`, :meth:`remove_attr`, setting
    ``is_target``), which bump the program's mutation counter. List attributes are
    tuples, so no value can be changed in place either.
    """

    block: Block
    id: int
    type: str
    inputs: Mapping[str, tuple[str, ...]]
    """Input slot -> the names it binds, in slot order."""
    outputs: Mapping[str, tuple[str, ...]]
    """Output slot -> the names it binds, in slot order."""
    attrs: Mapping[str, Any]
    """Attribute name -> value, in the order they were set."""
    attr_types: Mapping[str, AttrType]
    """Attribute name -> its :class:`AttrType`."""
    # What the views show, changed by the methods only.
    _inputs: dict[str, tuple[str, ...]]
    _outputs: dict[str, tuple[str, ...]]
    _attrs: dict[str, Any]
    _attr_types: dict[str, AttrType]
    _is_target: bool

    def __init__(
        self,
        block: Block,
        type: str,
        inputs: Mapping[str, Iterable[Any]] | None = None,
        outputs: Mapping[str, Iterable[Any]] | None = None,
        attrs: Mapping[str, Any] | None = None,
        attr_types: Mapping[str, AttrType] | None = None,
        is_target: bool = False,
    ) -> None:
        """An op of ``block`` (not yet in its list of ops: :meth:`Block.append_op` makes and adds one).

        Slots hold variable names or Variables; each attribute is set as :meth:`set_attr` sets it, with its
        type from ``attr_types`` when given there.
        """
        if not _is_name(type):
            raise BlockirError(f"op type must be a non-empty string, got {type!r}")
        self._init(block, type, {}, {}, {}, {}, None, is_target)
        for slot, names in (inputs or {}).items():
            self._inputs[self._slot(slot, "input")] = self._names(slot, names)
        for slot, names in (outputs or {}).items():
            self._outputs[self._slot(slot, "output")] = self._names(slot, names)
        types = attr_types or {}
        for name, value in (attrs or {}).items():
            self.set_attr(name, value, types.get(name))

    def _init(
        self,
        block: Block,
        type: str,
        inputs: dict[str, tuple[str, ...]],
        outputs: dict[str, tuple[str, ...]],
        attrs: dict[str, Any],
        attr_types: dict[str, AttrType],
        id: int | None,
        is_target: bool,
    ) -> None:
        """Fill in the op (from :meth:`__init__`, or unchecked from :meth:`Block._load_op`)."""
        self.__dict__.update(
            block=block,
            id=block.program._new_op_id() if id is None else id,
            type=type,
            _is_target=bool(is_target),
            _inputs=inputs,
            _outputs=outputs,
            _attrs=attrs,
            _attr_types=attr_types,
            inputs=MappingProxyType(inputs),
            outputs=MappingProxyType(outputs),
            attrs=MappingProxyType(attrs),
            attr_types=MappingProxyType(attr_types),
        )

    def _touch(self) -> None:
        self.block.program._touch()

    def __setattr__(self, key: str, value: Any) -> None:
        if key in _OP_READ_ONLY:
            raise AttributeError(f"Operator.{key} is read-only; an op changes through its methods (set_input, ...)")
        object.__setattr__(self, key, value)

    @property
    def is_target(self) -> bool:
        return self._is_target

    @is_target.setter
    def is_target(self, value: bool) -> None:
        self._is_target = bool(value)
        self._touch()

    # -- attributes -------------------------------------------------------
    def declared_attr_type(self, name: str) -> AttrType | None:
        """The type the op's schema (or :data:`~blockir.ir.schema.COMMON_ATTRS`) gives attribute ``name``."""
        schema = find(self.type)
        adef = schema.attr_def(name) if schema is not None else None
        return adef.type if adef is not None else COMMON_ATTRS.get(name)

    def set_attr(self, name: str, value: Any, type: AttrType | None = None) -> None:
        """Set an attribute, typed by the schema (or ``COMMON_ATTRS``), else by ``type``, else as it was,
        else by the value (:func:`blockir.ir.attrs.infer_type`).

        Attributes no schema declares are allowed (Paddle's ops carry such extras; the verifier reports
        them on registered ops). A value that does not fit the type, or a ``type`` other than the one the
        schema declares, is a :class:`BlockirError` naming the attribute and the op, raised here.
        """
        try:
            if not _is_name(name):
                raise BlockirError(f"attribute name must be a non-empty string, got {name!r}")
            t = self._attr_type(name, value, type)
            normalized = _attrs.normalize(value, t, name)
        except BlockirError as e:
            raise BlockirError(f"{e}\n  in: {self}") from None
        self._attrs[name] = normalized
        self._attr_types[name] = t
        self._touch()

    def _attr_type(self, name: str, value: Any, given: AttrType | None) -> AttrType:
        """The type attribute ``name`` takes (see :meth:`set_attr`)."""
        if given is not None:
            try:
                given = AttrType(given)
            except ValueError:
                raise BlockirError(f"attribute {name!r}: {given!r} is not an AttrType") from None
        declared = self.declared_attr_type(name)
        if declared is not None:
            if given is not None and given is not declared:
                raise BlockirError(f"attribute {name!r} is {declared.name} for {self.type}, not {given.name}")
            return declared
        if given is not None:
            return given
        current = self._attr_types.get(name)
        return current if current is not None else _attrs.infer_type(value, name)

    def attr(self, name: str, default: Any = REQUIRED) -> Any:
        """The attribute's value, else the schema default, else ``default``, else an error."""
        if name in self._attrs:
            return self._attrs[name]
        schema = find(self.type)
        adef = schema.attr_def(name) if schema else None
        if adef is not None and adef.default is not REQUIRED:
            return adef.default
        if default is not REQUIRED:
            return default
        raise BlockirError(f"op has no attribute {name!r}: {self}")

    def remove_attr(self, name: str) -> None:
        """Remove attribute ``name`` (nothing when the op does not have it)."""
        if name in self._attrs:
            del self._attrs[name], self._attr_types[name]
            self._touch()

    def has_attr(self, name: str) -> bool:
        return name in self._attrs

    @property
    def device(self) -> str:
        return self._attrs.get("op_device", "")

    # -- inputs and outputs ----------------------------------------------
    def input(self, slot: str) -> tuple[str, ...]:
        return self._inputs.get(slot, ())

    def output(self, slot: str) -> tuple[str, ...]:
        return self._outputs.get(slot, ())

    def _slot(self, slot: object, kind: str) -> str:
        if not _is_name(slot):
            raise BlockirError(f"{kind} slot must be a non-empty string, got {slot!r}\n  in: {self}")
        return slot

    def _names(self, slot: str, names: Iterable[Any]) -> tuple[str, ...]:
        """Variable names (a Variable stands for its name, a single one for a slot of one)."""
        items = names if isinstance(names, (list, tuple)) else [names]
        return tuple(self._name(item, f"slot {slot}") for item in items)

    def _name(self, item: Any, where: str) -> str:
        name = item if isinstance(item, str) else getattr(item, "name", item)
        if not _is_name(name):
            raise BlockirError(f"{where}: {name!r} is not a variable or variable name\n  in: {self}")
        return name

    def set_input(self, slot: str, names: Iterable[Any]) -> None:
        """Bind input ``slot`` to ``names`` (variable names or Variables; ``[]`` keeps the slot, empty)."""
        self._inputs[self._slot(slot, "input")] = self._names(slot, names)
        self._touch()

    def set_output(self, slot: str, names: Iterable[Any]) -> None:
        """Bind output ``slot`` to ``names`` (variable names or Variables; ``[]`` keeps the slot, empty)."""
        self._outputs[self._slot(slot, "output")] = self._names(slot, names)
        self._touch()

    def remove_input(self, slot: str) -> None:
        """Drop input ``slot`` (nothing when the op does not have it)."""
        if self._inputs.pop(slot, None) is not None:
            self._touch()

    def remove_output(self, slot: str) -> None:
        """Drop output ``slot`` (nothing when the op does not have it)."""
        if self._outputs.pop(slot, None) is not None:
            self._touch()

    def rename_input(self, old: str, new: str) -> None:
        """Read ``new`` wherever the op reads ``old``."""
        if _rename_in(self._inputs, old, self._name(new, "rename_input")):
            self._touch()

    def rename_output(self, old: str, new: str) -> None:
        """Write ``new`` wherever the op writes ``old``."""
        if _rename_in(self._outputs, old, self._name(new, "rename_output")):
            self._touch()

    def _rename(self, old: str, new: str) -> None:
        """``old`` becomes ``new`` in the inputs, outputs and ``op_role_var`` (for :meth:`Block.rename_var`)."""
        _rename_in(self._inputs, old, new)
        _rename_in(self._outputs, old, new)
        role_var = self._attrs.get("op_role_var")
        if isinstance(role_var, tuple) and old in role_var:
            self._attrs["op_role_var"] = tuple(new if n == old else n for n in role_var)

    def input_names(self) -> list[str]:
        return [n for names in self._inputs.values() for n in names]

    def output_names(self) -> list[str]:
        return [n for names in self._outputs.values() for n in names]

    def sub_block_indices(self) -> list[int]:
        """The block indices this op's BLOCK / BLOCKS attributes hold (not checked to exist)."""
        idx: list[int] = []
        for name, t in self._attr_types.items():
            if t is AttrType.BLOCK:
                idx.append(self._attrs[name])
            elif t is AttrType.BLOCKS:
                idx.extend(self._attrs[name])
        return idx

    def sub_blocks(self) -> list[Block]:
        """The blocks this op's BLOCK / BLOCKS attributes refer to."""
        program = self.block.program
        return [program.block(i) for i in self.sub_block_indices()]

    def __str__(self) -> str:
        from blockir.ir.text import format_op

        return format_op(self)

    __repr__ = __str__


def _rename_in(slots: dict[str, tuple[str, ...]], old: str, new: str) -> bool:
    """Replace ``old`` by ``new`` in every slot; whether any held it."""
    changed = False
    for slot, names in slots.items():
        if old in names:
            slots[slot] = tuple(new if n == old else n for n in names)
            changed = True
    return changed


_T = TypeVar("_T")
_V = TypeVar("_V", bound="Variable")  # a Variable subclass (the DSL's) comes back as itself


class SequenceView(Sequence[_T]):
    """A read-only view of a list (``Block.ops``, ``Program.blocks``): indexing, slicing (a list), ``len``,
    iteration, ``in``, ``index``; equal to a list or tuple of the same items."""

    __slots__ = ("_items",)

    def __init__(self, items: list[_T]) -> None:
        self._items = items

    def __len__(self) -> int:
        return len(self._items)

    @overload
    def __getitem__(self, index: int) -> _T: ...
    @overload
    def __getitem__(self, index: slice) -> list[_T]: ...
    def __getitem__(self, index: int | slice) -> _T | list[_T]:
        return self._items[index]

    def __iter__(self) -> Iterator[_T]:
        return iter(self._items)

    def __reversed__(self) -> Iterator[_T]:
        return reversed(self._items)

    def __contains__(self, item: object) -> bool:
        return item in self._items

    def index(self, item: Any, start: int = 0, stop: int = sys.maxsize) -> int:
        return self._items.index(item, start, stop)

    def __eq__(self, other: object) -> bool:
        if isinstance(other, SequenceView):
            other = other._items
        return (
            isinstance(other, (list, tuple))
            and len(other) == len(self._items)
            and all(a == b for a, b in zip(self._items, other))
        )

    __hash__ = None  # type: ignore[assignment]  # equal to lists, which do not hash

    def __repr__(self) -> str:
        return repr(self._items)


_BLOCK_FIELDS = frozenset({"parent_idx", "forward_block_idx", "device"})


class Block:
    """A list of ops over a table of variables; may have a parent block (for sub-blocks).

    ``ops`` and ``vars`` are read-only views: ops change through :meth:`append_op`,
    :meth:`insert_op`, :meth:`prepend_op`, :meth:`remove_op`, :meth:`reorder_ops` and
    the :class:`Operator` methods, variables through :meth:`add_var`,
    :meth:`create_var`, :meth:`remove_var`, :meth:`rename_var` and their fields;
    setting ``parent_idx``, ``forward_block_idx`` or ``device`` counts as a change too.
    """

    def __init__(
        self, program: Program, idx: int, parent_idx: int = -1, forward_block_idx: int = -1, device: str = ""
    ) -> None:
        self.program = program
        self.idx = idx
        self.parent_idx = parent_idx
        self.forward_block_idx = forward_block_idx
        self.device = device
        self._vars: dict[str, Variable] = {}
        self._ops: list[Operator] = []
        self.__dict__.update(vars=MappingProxyType(self._vars), ops=SequenceView(self._ops))

    vars: Mapping[str, Variable]
    """Name -> variable, in declaration order."""
    ops: SequenceView[Operator]
    """The ops in order."""

    def __setattr__(self, key: str, value: Any) -> None:
        if key in ("vars", "ops"):
            raise AttributeError(f"Block.{key} is read-only; a block changes through its methods (append_op, ...)")
        object.__setattr__(self, key, value)
        if key in _BLOCK_FIELDS and "_ops" in self.__dict__:
            self.program._touch()

    @property
    def parent_block(self) -> Block | None:
        return self.program.block(self.parent_idx) if self.parent_idx >= 0 else None

    # -- variables ---------------------------------------------------------
    def var(self, name: str) -> Variable:
        try:
            return self._vars[name]
        except KeyError:
            raise BlockirError(f"variable {name!r} not found in block {self.idx}") from None

    def has_var(self, name: str) -> bool:
        return name in self._vars

    def find_var_recursive(self, name: str) -> Variable:
        """The variable ``name`` of this block or the nearest ancestor having it; a gradient block (one with a
        ``forward_block_idx``) also sees its forward block's variables, before its parent's (as Paddle's
        ``FindVarRecursive``)."""
        block: Block | None = self
        while block is not None:
            if name in block._vars:
                return block._vars[name]
            if block.forward_block_idx >= 0:
                forward = self.program.block(block.forward_block_idx)
                if name in forward._vars:
                    return forward._vars[name]
            block = block.parent_block
        raise BlockirError(f"variable {name!r} not found in block {self.idx} or its ancestors")

    def add_var(self, var: _V) -> _V:
        if var.name in self._vars:
            raise BlockirError(f"variable {var.name!r} already exists in block {self.idx}")
        var.block = self
        self._vars[var.name] = var
        self.program._touch()
        return var

    def create_var(self, name: str, **fields: Any) -> Variable:
        return self.add_var(Variable(name, **fields))

    def remove_var(self, name: str) -> None:
        """Remove variable ``name`` from the block (ops using it are left as they are)."""
        self.var(name).block = None
        del self._vars[name]
        self.program._touch()

    def rename_var(self, old: str, new: str) -> None:
        """Rename variable ``old`` of this block to ``new``, and every use of it: the inputs, outputs and
        ``op_role_var`` of the ops of this block and of its sub-blocks (at any depth) that see it, that is
        of the blocks between which and this one no block declares a variable ``old`` of its own."""
        var = self.var(old)
        if not _is_name(new):
            raise BlockirError(f"variable name must be a non-empty string, got {new!r}")
        if new in self._vars:
            raise BlockirError(f"cannot rename {old!r} to {new!r}: block {self.idx} has a variable {new!r}")
        entries = [(new if name == old else name, v) for name, v in self._vars.items()]  # keeps the order
        self._vars.clear()
        self._vars.update(entries)
        object.__setattr__(var, "name", new)
        for block in self._blocks_seeing(old):
            for op in block._ops:
                op._rename(old, new)
        self.program._touch()

    def _blocks_seeing(self, name: str) -> list[Block]:
        """This block and the blocks below it whose lookup of ``name`` reaches this block."""
        blocks = self.program._blocks
        seeing = []
        for block in blocks:
            b: Block | None = block
            for _ in range(len(blocks)):  # parent chains are acyclic in valid programs; bounded anyway
                if b is None or b is self or name in b._vars:
                    break
                b = blocks[b.parent_idx] if 0 <= b.parent_idx < len(blocks) else None
            if b is self:
                seeing.append(block)
        return seeing

    # -- ops ---------------------------------------------------------------
    def append_op(
        self,
        type: str,
        inputs: Mapping[str, Any] | None = None,
        outputs: Mapping[str, Any] | None = None,
        attrs: Mapping[str, Any] | None = None,
        infer: bool = True,
    ) -> Operator:
        """Append an op; slot values may be Variables, names or lists of them.

        With ``infer`` the op's schema (when registered) sets its outputs' shape and dtype.
        """
        return self.insert_op(len(self._ops), type, inputs, outputs, attrs, infer)

    def insert_op(
        self,
        index: int,
        type: str,
        inputs: Mapping[str, Any] | None = None,
        outputs: Mapping[str, Any] | None = None,
        attrs: Mapping[str, Any] | None = None,
        infer: bool = True,
    ) -> Operator:
        op = Operator(self, type, inputs, outputs, attrs)
        if infer:
            schema = find(type)
            if schema is not None and schema.infer is not None:
                schema.infer(InferContext(op, self))
        self._ops.insert(index, op)
        self.program._touch()
        return op

    def prepend_op(
        self,
        type: str,
        inputs: Mapping[str, Any] | None = None,
        outputs: Mapping[str, Any] | None = None,
        attrs: Mapping[str, Any] | None = None,
        infer: bool = True,
    ) -> Operator:
        return self.insert_op(0, type, inputs, outputs, attrs, infer)

    def remove_op(self, op: Operator | int) -> Operator:
        """Remove an op (or the op at an index) from the block; return it."""
        index = op if isinstance(op, int) else self._index(op)
        removed = self._ops.pop(index)
        self.program._touch()
        return removed

    def reorder_ops(self, ops: Iterable[Operator]) -> None:
        """Put the block's ops in the order of ``ops``: the same ops, each once."""
        order = list(ops)
        if len(order) != len(self._ops) or {id(op) for op in order} != {id(op) for op in self._ops}:
            raise BlockirError(f"reorder_ops: not an order of the {len(self._ops)} ops of block {self.idx}")
        if any(a is not b for a, b in zip(order, self._ops)):
            self._ops[:] = order
            self.program._touch()

    def _index(self, op: Operator) -> int:
        """``op``'s position, searched from the end: an importer or a pass removes the op it just added."""
        for i in range(len(self._ops) - 1, -1, -1):
            if self._ops[i] is op:
                return i
        raise BlockirError(f"op is not in block {self.idx}: {op}")

    def _load_op(
        self,
        type: str,
        inputs: dict[str, tuple[str, ...]],
        outputs: dict[str, tuple[str, ...]],
        attrs: dict[str, Any],
        attr_types: dict[str, AttrType],
        is_target: bool = False,
        id: int | None = None,
    ) -> Operator:
        """Append an op made of exactly what it is given, unchecked, taking ownership of the dicts: the fast
        path of the proto reader, the text parser and :meth:`Program.clone`, which hold what a file held
        (the verifier judges it). Slot values are tuples of names; attribute values are in their in-memory
        form (:func:`blockir.ir.attrs.normalize`) or what a file held."""
        op = object.__new__(Operator)
        op._init(self, type, inputs, outputs, attrs, attr_types, id, is_target)
        self._ops.append(op)
        return op

    def __str__(self) -> str:
        from blockir.ir.text import format_block

        return format_block(self)


class Program:
    """A list of blocks; block 0 is the global block.

    ``blocks`` is a read-only view (:meth:`create_block` adds one); setting
    ``version``, ``random_seed`` or ``device`` counts as a change. ``op_versions``
    is Paddle's ``op_version_map`` (op type -> the version of its definition a
    program was written with), kept from a file and written back.
    """

    def __init__(self) -> None:
        self.version = 0
        self.random_seed = 0
        self.device = ""
        self.op_versions: dict[str, int] = {}
        self._op_ids = itertools.count()
        self._mutation = next(_MUTATIONS)
        self._blocks: list[Block] = [Block(self, 0)]
        self.__dict__["blocks"] = SequenceView(self._blocks)
        self.current_block_idx = 0

    blocks: SequenceView[Block]
    """The blocks, block 0 first."""

    @classmethod
    def _bare(cls) -> Program:
        """A program without blocks, for the loaders to fill (:meth:`_load_block`, :meth:`Block._load_op`)."""
        program = cls()
        program._blocks.clear()
        return program

    def _load_block(self, parent_idx: int, forward_block_idx: int = -1, device: str = "") -> Block:
        """Append a block as a file declares it, unchecked (the loaders' fast path)."""
        block = Block(self, len(self._blocks), parent_idx, forward_block_idx, device)
        self._blocks.append(block)
        return block

    # -- bookkeeping ---------------------------------------------------------
    def _touch(self) -> None:
        self.__dict__["_mutation"] = next(_MUTATIONS)

    @property
    def mutation(self) -> int:
        """Changes whenever the program changes through the IR API; cache keys use it."""
        return self._mutation

    def _new_op_id(self) -> int:
        return next(self._op_ids)

    def __setattr__(self, key: str, value: Any) -> None:
        if key == "blocks":
            raise AttributeError("Program.blocks is read-only; create_block adds a block")
        object.__setattr__(self, key, value)
        if key in ("version", "random_seed", "device") and "_mutation" in self.__dict__:
            self._touch()

    # -- blocks -----------------------------------------------------------
    def global_block(self) -> Block:
        return self._blocks[0]

    def block(self, idx: int) -> Block:
        if not 0 <= idx < len(self._blocks):
            raise BlockirError(f"block index {idx} out of range (program has {len(self._blocks)} blocks)")
        return self._blocks[idx]

    @property
    def num_blocks(self) -> int:
        return len(self._blocks)

    def current_block(self) -> Block:
        return self._blocks[self.current_block_idx]

    def create_block(self, parent_idx: int | None = None) -> Block:
        """Create a sub-block of the current block (or of ``parent_idx``) and make it current."""
        parent = self.current_block_idx if parent_idx is None else parent_idx
        block = self._load_block(parent)
        self.current_block_idx = block.idx
        self._touch()
        return block

    def rollback(self) -> None:
        """Make the current block's parent current again."""
        self.current_block_idx = max(self.current_block().parent_idx, 0)

    # -- queries ------------------------------------------------------------
    def list_vars(self) -> Iterator[Variable]:
        for block in self._blocks:
            yield from block._vars.values()

    def all_parameters(self) -> list[Variable]:
        return [v for v in self.global_block().vars.values() if v.is_parameter]

    def ops(self) -> Iterator[Operator]:
        for block in self._blocks:
            yield from block._ops

    # -- copies and serialisation ------------------------------------------------
    def clone(self, for_test: bool = False) -> Program:
        """A deep copy: same blocks, variables (same classes), ops (same ids), attributes.

        ``for_test=True`` (Fluid's evaluation idiom) makes the copy a test program: without the backward,
        optimizer and learning-rate-schedule ops, with ``is_test`` set where the op has it
        (:func:`strip_training`). Every variable and block stays, under its name and index, so the test
        program runs in the scope of the training program, on its parameters; the original is unchanged.
        """
        new = Program._bare()
        for block in self._blocks:
            nb = new._load_block(block.parent_idx, block.forward_block_idx, block.device)
            for var in block._vars.values():
                var.copy_to(nb)
            for op in block._ops:
                nb._load_op(
                    op.type,
                    dict(op._inputs),
                    dict(op._outputs),
                    dict(op._attrs),
                    dict(op._attr_types),
                    op.is_target,
                    op.id,
                )
        new.version, new.random_seed, new.device = self.version, self.random_seed, self.device
        new.op_versions = dict(self.op_versions)
        new.current_block_idx = self.current_block_idx
        top = max((op.id for op in self.ops()), default=-1)
        new._op_ids = itertools.count(top + 1)
        if for_test:
            strip_training(new)
        return new

    def to_proto(self) -> Any:
        from blockir.ir.proto_io import program_to_proto

        return program_to_proto(self)

    @staticmethod
    def from_proto(desc: Any) -> Program:
        from blockir.ir.proto_io import program_from_proto

        return program_from_proto(desc)

    def serialize(self) -> bytes:
        """The ``ProgramDesc`` bytes (deterministic: the same program gives the same bytes)."""
        return self.to_proto().SerializeToString(deterministic=True)

    def digest(self) -> str:
        """sha256 (hex) of :meth:`serialize`: names this program in pass reports and run traces."""
        return hashlib.sha256(self.serialize()).hexdigest()

    @staticmethod
    def parse(data: bytes, source: str = "<bytes>") -> Program:
        from blockir.ir.proto_io import program_from_bytes

        return program_from_bytes(data, source)

    def save(self, path: str) -> None:
        """Write the binary ProgramDesc to ``path`` atomically."""
        from blockir.ir.proto_io import save_program

        save_program(self, path)

    def __str__(self) -> str:
        from blockir.ir.text import format_program

        return format_program(self)


# -- training and test programs ------------------------------------------------

_TRAINING_ROLES = OpRole.BACKWARD | OpRole.OPTIMIZE | OpRole.LR_SCHED


def is_training_op(op: Operator) -> bool:
    """Whether ``op`` only trains: a backward, optimizer or learning-rate-schedule op by its ``op_role``, or
    a ``*_grad`` op (for programs that carry no roles)."""
    role = op.attrs.get("op_role", OpRole.FORWARD)
    return (isinstance(role, int) and bool(role & _TRAINING_ROLES)) or op.type.endswith("_grad")


def strip_training(program: Program) -> bool:
    """Make ``program`` compute as in a test, in place: drop its training ops (:func:`is_training_op`) from
    every block, and set ``is_test`` on every op whose schema has that attribute. Variables and blocks stay
    (a sub-block whose owner op was dropped stays too, so that block indices keep their meaning). Returns
    whether anything changed."""
    changed = False
    for block in program.blocks:
        for op in [op for op in block.ops if is_training_op(op)]:
            block.remove_op(op)
            changed = True
        for op in block.ops:
            schema = find(op.type)
            if schema is not None and schema.attr_def("is_test") is not None and op.attr("is_test") is not True:
                op.set_attr("is_test", True)
                changed = True
    return changed


# -- what blocks read and write ------------------------------------------------


def block_reads_writes(block: Block) -> tuple[set[str], set[str]]:
    """Outer variables a block (with its nested sub-blocks) reads and writes. A gradient block's reads of its
    forward block's variables are not among them: the forward run kept those values for it (a loop's
    ``StepScopes``), they come from no block around it."""
    reads: set[str] = set()
    writes: set[str] = set()
    for op in block.ops:
        r, w = op_reads_writes(op)
        reads |= r
        writes |= w
    local = set(block.vars)
    if block.forward_block_idx >= 0:
        local |= set(block.program.block(block.forward_block_idx).vars)
    return reads - local, writes - local


def op_reads_writes(op: Operator) -> tuple[set[str], set[str]]:
    """Variables an op reads and writes, its sub-blocks' outer accesses included; an op updating outputs in place
    (its schema's ``updates`` slots: ``write_to_array``) reads them too."""
    reads = set(op.input_names())
    writes = set(op.output_names())
    schema = find(op.type)
    if schema is not None:
        reads.update(n for slot in schema.updates for n in op.output(slot))
    for sub in op.sub_blocks():
        r, w = block_reads_writes(sub)
        reads |= r
        writes |= w
    return reads, writes


def outer_temporaries(block: Block) -> list[str]:
    """The variables outside ``block`` that it (and its sub-blocks) read, other than persistables and
    channels, sorted: what a go or case block must be given when it starts."""
    reads, _ = block_reads_writes(block)
    return sorted(
        n
        for n in reads
        if not (var := block.find_var_recursive(n)).persistable
        and var.kind not in (VarKind.CHANNEL, VarKind.CHANNEL_LIST)
    )
