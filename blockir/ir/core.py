"""The in-memory IR: Program, Block, Operator, Variable.

Plain mutable Python objects. Every change made through these classes bumps the
owning program's mutation counter, which executors and pass pipelines cache on.
``to_proto``/``from_proto`` (in :mod:`blockir.ir.proto_io`) round-trip losslessly
and the text form (:mod:`blockir.ir.text`) prints and parses back identically.
"""

from __future__ import annotations

import itertools
from collections.abc import Iterable, Iterator
from typing import Any

from blockir.errors import BlockirError
from blockir.ir import attrs as _attrs
from blockir.ir.attrs import AttrType
from blockir.ir.dtypes import VarKind, to_dtype
from blockir.ir.schema import COMMON_ATTRS, REQUIRED, InferContext, OpRole, find

# Global so that counters of different programs never collide: a cached
# (id(program), mutation) pair can never be reused by another program state.
_MUTATIONS = itertools.count(1)

TENSOR_KINDS = frozenset({VarKind.LOD_TENSOR, VarKind.SELECTED_ROWS, VarKind.LOD_TENSOR_ARRAY})


class Variable:
    """A named value of a block.

    ``shape`` uses -1 for an unknown dimension (the batch); ``dtype`` is a numpy
    name. Kinds without a tensor description (feed/fetch lists, readers, ...)
    have ``dtype`` and ``shape`` None. Channels have ``dtype`` and ``capacity``.
    ``device`` is where the value lives (``""``: not decided; the ``place`` pass
    decides it, and keeps a persistable's or a fed variable's device, e.g. one
    pinned by ``ParamAttr(device=...)``).
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
        if not isinstance(name, str) or not name:
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
        object.__setattr__(self, key, value)
        block = self.__dict__.get("block")
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


class Operator:
    """One op: type, inputs and outputs by slot (lists of variable names), typed attributes."""

    def __init__(
        self,
        block: Block,
        type: str,
        inputs: dict[str, list[str]] | None = None,
        outputs: dict[str, list[str]] | None = None,
        attrs: dict[str, Any] | None = None,
        attr_types: dict[str, AttrType] | None = None,
        id: int | None = None,
        is_target: bool = False,
    ) -> None:
        if not isinstance(type, str) or not type:
            raise BlockirError(f"op type must be a non-empty string, got {type!r}")
        self.block = block
        self.type = type
        self.inputs: dict[str, list[str]] = {k: list(v) for k, v in (inputs or {}).items()}
        self.outputs: dict[str, list[str]] = {k: list(v) for k, v in (outputs or {}).items()}
        self.attrs: dict[str, Any] = {}
        self.attr_types: dict[str, AttrType] = {}
        self.is_target = bool(is_target)
        self.id = block.program._new_op_id() if id is None else id
        for name, value in (attrs or {}).items():
            self.set_attr(name, value, (attr_types or {}).get(name))

    # -- attributes -------------------------------------------------------
    def set_attr(self, name: str, value: Any, type: AttrType | None = None) -> None:
        """Set an attribute; its type comes from ``type``, else the schema, else the value."""
        if type is None:
            schema = find(self.type)
            adef = schema.attr_def(name) if schema else None
            for known in (adef.type if adef else None, COMMON_ATTRS.get(name), self.attr_types.get(name)):
                if known is not None:
                    type = known
                    break
            else:
                type = _attrs.infer_type(value, name)
        self.attrs[name] = _attrs.normalize(value, type, name)
        self.attr_types[name] = AttrType(type)
        self.block.program._touch()

    def attr(self, name: str, default: Any = REQUIRED) -> Any:
        """The attribute's value, else the schema default, else ``default``, else an error."""
        if name in self.attrs:
            return self.attrs[name]
        schema = find(self.type)
        adef = schema.attr_def(name) if schema else None
        if adef is not None and adef.default is not REQUIRED:
            return adef.default
        if default is not REQUIRED:
            return default
        raise BlockirError(f"op has no attribute {name!r}: {self}")

    def remove_attr(self, name: str) -> None:
        self.attrs.pop(name, None)
        self.attr_types.pop(name, None)
        self.block.program._touch()

    def has_attr(self, name: str) -> bool:
        return name in self.attrs

    @property
    def device(self) -> str:
        return self.attrs.get("op_device", "")

    # -- inputs and outputs ----------------------------------------------
    def input(self, slot: str) -> list[str]:
        return self.inputs.get(slot, [])

    def output(self, slot: str) -> list[str]:
        return self.outputs.get(slot, [])

    def set_input(self, slot: str, names: list[str]) -> None:
        self.inputs[slot] = list(names)
        self.block.program._touch()

    def set_output(self, slot: str, names: list[str]) -> None:
        self.outputs[slot] = list(names)
        self.block.program._touch()

    def rename_input(self, old: str, new: str) -> None:
        for names in self.inputs.values():
            names[:] = [new if n == old else n for n in names]
        self.block.program._touch()

    def rename_output(self, old: str, new: str) -> None:
        for names in self.outputs.values():
            names[:] = [new if n == old else n for n in names]
        self.block.program._touch()

    def input_names(self) -> list[str]:
        return [n for names in self.inputs.values() for n in names]

    def output_names(self) -> list[str]:
        return [n for names in self.outputs.values() for n in names]

    def sub_block_indices(self) -> list[int]:
        """The block indices this op's BLOCK / BLOCKS attributes hold (not checked to exist)."""
        idx: list[int] = []
        for name, t in self.attr_types.items():
            if t is AttrType.BLOCK:
                idx.append(self.attrs[name])
            elif t is AttrType.BLOCKS:
                idx.extend(self.attrs[name])
        return idx

    def sub_blocks(self) -> list[Block]:
        """The blocks this op's BLOCK / BLOCKS attributes refer to."""
        program = self.block.program
        return [program.block(i) for i in self.sub_block_indices()]

    def __str__(self) -> str:
        from blockir.ir.text import format_op

        return format_op(self)

    __repr__ = __str__


class Block:
    """A list of ops over a table of variables; may have a parent block (for sub-blocks)."""

    def __init__(
        self, program: Program, idx: int, parent_idx: int = -1, forward_block_idx: int = -1, device: str = ""
    ) -> None:
        self.program = program
        self.idx = idx
        self.parent_idx = parent_idx
        self.forward_block_idx = forward_block_idx
        self.device = device
        self.vars: dict[str, Variable] = {}
        self.ops: list[Operator] = []

    @property
    def parent_block(self) -> Block | None:
        return self.program.block(self.parent_idx) if self.parent_idx >= 0 else None

    # -- variables ---------------------------------------------------------
    def var(self, name: str) -> Variable:
        try:
            return self.vars[name]
        except KeyError:
            raise BlockirError(f"variable {name!r} not found in block {self.idx}") from None

    def has_var(self, name: str) -> bool:
        return name in self.vars

    def find_var_recursive(self, name: str) -> Variable:
        block: Block | None = self
        while block is not None:
            if name in block.vars:
                return block.vars[name]
            block = block.parent_block
        raise BlockirError(f"variable {name!r} not found in block {self.idx} or its ancestors")

    def add_var(self, var: Variable) -> Variable:
        if var.name in self.vars:
            raise BlockirError(f"variable {var.name!r} already exists in block {self.idx}")
        var.block = self
        self.vars[var.name] = var
        self.program._touch()
        return var

    def create_var(self, name: str, **fields: Any) -> Variable:
        return self.add_var(Variable(name, **fields))

    def remove_var(self, name: str) -> None:
        self.vars.pop(name).block = None
        self.program._touch()

    def rename_var(self, old: str, new: str) -> None:
        """Rename a variable and every use of it by ops of this block."""
        var = self.vars.pop(old)
        object.__setattr__(var, "name", new)
        self.vars[new] = var
        for op in self.ops:
            op.rename_input(old, new)
            op.rename_output(old, new)
        self.program._touch()

    # -- ops ---------------------------------------------------------------
    def _make_op(
        self, type: str, inputs: dict[str, Any] | None, outputs: dict[str, Any] | None, attrs: dict[str, Any] | None
    ) -> Operator:
        op = Operator(self, type, _names(inputs), _names(outputs))
        for name, value in (attrs or {}).items():
            op.set_attr(name, value)
        return op

    def append_op(
        self,
        type: str,
        inputs: dict[str, Any] | None = None,
        outputs: dict[str, Any] | None = None,
        attrs: dict[str, Any] | None = None,
        infer: bool = True,
    ) -> Operator:
        """Append an op; slot values may be Variables, names or lists of them.

        With ``infer`` the op's schema (when registered) sets its outputs' shape and dtype.
        """
        return self.insert_op(len(self.ops), type, inputs, outputs, attrs, infer)

    def insert_op(
        self,
        index: int,
        type: str,
        inputs: dict[str, Any] | None = None,
        outputs: dict[str, Any] | None = None,
        attrs: dict[str, Any] | None = None,
        infer: bool = True,
    ) -> Operator:
        op = self._make_op(type, inputs, outputs, attrs)
        if infer:
            schema = find(type)
            if schema is not None and schema.infer is not None:
                schema.infer(InferContext(op, self))
        self.ops.insert(index, op)
        self.program._touch()
        return op

    def prepend_op(
        self,
        type: str,
        inputs: dict[str, Any] | None = None,
        outputs: dict[str, Any] | None = None,
        attrs: dict[str, Any] | None = None,
        infer: bool = True,
    ) -> Operator:
        return self.insert_op(0, type, inputs, outputs, attrs, infer)

    def remove_op(self, op: Operator | int) -> Operator:
        index = op if isinstance(op, int) else self.ops.index(op)
        removed = self.ops.pop(index)
        self.program._touch()
        return removed

    def __str__(self) -> str:
        from blockir.ir.text import format_block

        return format_block(self)


def _names(slots: dict[str, Any] | None) -> dict[str, list[str]]:
    out: dict[str, list[str]] = {}
    for slot, value in (slots or {}).items():
        items = value if isinstance(value, (list, tuple)) else [value]
        out[slot] = [v if isinstance(v, str) else v.name for v in items]
    return out


class Program:
    """A list of blocks; block 0 is the global block."""

    def __init__(self) -> None:
        self.version = 0
        self.random_seed = 0
        self.device = ""
        self._op_ids = itertools.count()
        self._mutation = next(_MUTATIONS)
        self.blocks: list[Block] = [Block(self, 0)]
        self.current_block_idx = 0

    # -- bookkeeping ---------------------------------------------------------
    def _touch(self) -> None:
        self._mutation = next(_MUTATIONS)

    @property
    def mutation(self) -> int:
        """Changes whenever the program changes through the IR API; cache keys use it."""
        return self._mutation

    def _new_op_id(self) -> int:
        return next(self._op_ids)

    def __setattr__(self, key: str, value: Any) -> None:
        object.__setattr__(self, key, value)
        if key in ("version", "random_seed", "device") and "_mutation" in self.__dict__:
            self._touch()

    # -- blocks -----------------------------------------------------------
    def global_block(self) -> Block:
        return self.blocks[0]

    def block(self, idx: int) -> Block:
        if not 0 <= idx < len(self.blocks):
            raise BlockirError(f"block index {idx} out of range (program has {len(self.blocks)} blocks)")
        return self.blocks[idx]

    @property
    def num_blocks(self) -> int:
        return len(self.blocks)

    def current_block(self) -> Block:
        return self.blocks[self.current_block_idx]

    def create_block(self, parent_idx: int | None = None) -> Block:
        """Create a sub-block of the current block (or of ``parent_idx``) and make it current."""
        parent = self.current_block_idx if parent_idx is None else parent_idx
        block = Block(self, len(self.blocks), parent)
        self.blocks.append(block)
        self.current_block_idx = block.idx
        self._touch()
        return block

    def rollback(self) -> None:
        """Make the current block's parent current again."""
        self.current_block_idx = max(self.current_block().parent_idx, 0)

    # -- queries ------------------------------------------------------------
    def list_vars(self) -> Iterator[Variable]:
        for block in self.blocks:
            yield from block.vars.values()

    def all_parameters(self) -> list[Variable]:
        return [v for v in self.global_block().vars.values() if v.is_parameter]

    def ops(self) -> Iterator[Operator]:
        for block in self.blocks:
            yield from block.ops

    # -- copies and serialisation ------------------------------------------------
    def clone(self, for_test: bool = False) -> Program:
        """A deep copy: same blocks, variables (same classes), ops (same ids), attributes.

        ``for_test=True`` (Fluid's evaluation idiom) makes the copy a test program: without the backward,
        optimizer and learning-rate-schedule ops, with ``is_test`` set where the op has it
        (:func:`strip_training`). Every variable and block stays, under its name and index, so the test
        program runs in the scope of the training program, on its parameters; the original is unchanged.
        """
        new = Program()
        new.blocks = []
        for block in self.blocks:
            nb = Block(new, block.idx, block.parent_idx, block.forward_block_idx, block.device)
            new.blocks.append(nb)
            for var in block.vars.values():
                var.copy_to(nb)
            for op in block.ops:
                nb.ops.append(
                    Operator(
                        nb, op.type, op.inputs, op.outputs, op.attrs, op.attr_types, id=op.id, is_target=op.is_target
                    )
                )
        new.version, new.random_seed, new.device = self.version, self.random_seed, self.device
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
        return self.to_proto().SerializeToString()

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
    """Outer variables a block (with its nested sub-blocks) reads and writes."""
    reads: set[str] = set()
    writes: set[str] = set()
    for op in block.ops:
        r, w = op_reads_writes(op)
        reads |= r
        writes |= w
    local = set(block.vars)
    return reads - local, writes - local


def op_reads_writes(op: Operator) -> tuple[set[str], set[str]]:
    """Variables an op reads and writes, its sub-blocks' outer accesses included."""
    reads = set(op.input_names())
    writes = set(op.output_names())
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
