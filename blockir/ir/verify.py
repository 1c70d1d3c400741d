"""The program verifier: what every well-formed program satisfies.

:func:`verify` collects every problem and raises one :class:`VerifyError`
listing them, each naming the block index, the op index and the op in its text
form. The pass manager runs it after every pass in tests.

The plan compiler (:func:`blockir.runtime.plan.compile_plan`) runs the checks
of one op that a run would trip on (:func:`op_problems`) and
:func:`column_problems`, so that ``verify`` and the executor agree.

Checks:

* blocks are numbered in order, parent indices are valid and acyclic, block 0
  is the root, blocks nest at most ``MAX_BLOCK_DEPTH`` (64) levels below it
  (reported at the first level past it), ``forward_block_idx`` is -1 or an
  existing block;
* every variable an op reads or writes is declared in its block or an ancestor
  (``@EMPTY@``, the "no gradient" placeholder, excepted);
* every variable an op reads is defined before: written by an earlier op of the
  block, or of an ancestor block before the op owning the sub-block (any op of
  the parent for a sub-block no op owns, plus the ops of the forward block of a
  gradient block), or persistable, or fed (``need_check_feed`` or written by a
  ``feed`` op of the block or an ancestor);
* the op type is registered (unless ``allow_unknown_ops``), its slots are the
  schema's, required input slots bind a variable (not only ``@EMPTY@``),
  required output slots are given, non-duplicable slots hold at most one
  variable, attribute types match the schema (or ``COMMON_ATTRS``), required
  attributes are present and unknown attributes are errors;
* the ``feed`` ops of a block take distinct, non-negative columns (``col``),
  and so do its ``fetch`` ops;
* BLOCK / BLOCKS attributes refer to existing blocks whose parent is the op's
  block;
* device strings (``op_device``, ``Block.device``, ``Program.device``,
  ``Variable.device``) are ``cpu``, ``cpu:N``, ``cuda`` or ``cuda:N``.
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Iterator
from typing import Any

from blockir.errors import BlockirError, VerifyError
from blockir.ir.attrs import LIST_TYPES, AttrType, normalize
from blockir.ir.core import MAX_BLOCK_DEPTH, TOO_DEEP, Block, Operator, Program, Variable, block_chains
from blockir.ir.devices import DEVICE_FORMS, is_valid_device
from blockir.ir.dtypes import VarKind
from blockir.ir.schema import COMMON_ATTRS, EMPTY_VAR, GRAD_SUFFIX, REQUIRED, Lowering, OpSchema, find, lowering_of

__all__ = ["column_problems", "op_problems", "verify"]


class _Verifier:
    def __init__(self, program: Program, allow_unknown_ops: bool) -> None:
        self.program = program
        self.allow_unknown_ops = allow_unknown_ops
        self.problems: list[str] = []
        self.position = {id(b): i for i, b in enumerate(program.blocks)}
        # The chain of a block (block_chains): its length, and the block where it closes a cycle.
        self.lengths, self.cycles = block_chains([b.parent_idx for b in program.blocks])

    # -- reporting ---------------------------------------------------------
    def block_problem(self, block: Block, message: str) -> None:
        self.problems.append(f"block {self.position[id(block)]}: {message}")

    def op_problem(self, block: Block, index: int, op: Operator, message: str) -> None:
        self.problems.append(f"block {self.position[id(block)]}, op {index}: {message}\n    in: {op}")

    # -- blocks ------------------------------------------------------------
    def chain(self, i: int) -> Iterator[Block]:
        """Block ``i`` and its ancestors, stopping at an invalid parent or before a block already there."""
        blocks = self.program.blocks
        for _ in range(self.lengths[i]):
            yield blocks[i]
            i = blocks[i].parent_idx

    def check_blocks(self) -> None:
        n = len(self.program.blocks)
        if n == 0:
            self.problems.append("program: has no blocks")
        if self.program.device and not is_valid_device(self.program.device):
            self.problems.append(
                f"program: device {self.program.device!r} is not well formed (expected {DEVICE_FORMS})"
            )
        for i, block in enumerate(self.program.blocks):
            if block.idx != i:
                self.block_problem(block, f"has idx {block.idx} but is at position {i} of the program")
            if i == 0 and block.parent_idx != -1:
                self.block_problem(block, f"the global block must have parent -1, not {block.parent_idx}")
            elif i > 0 and not 0 <= block.parent_idx < n:
                self.block_problem(block, f"parent index {block.parent_idx} is not a block of the program")
            elif i > 0 and self.cycles[i] is not None:
                self.block_problem(block, f"its parents form a cycle through block {self.cycles[i]}")
            if self.cycles[i] is None and self.lengths[i] == MAX_BLOCK_DEPTH + 2:  # the first level too deep
                self.block_problem(block, f"{TOO_DEEP} (and so are the blocks below it)")
            if not -1 <= block.forward_block_idx < n:
                self.block_problem(block, f"forward_block_idx {block.forward_block_idx} is not a block of the program")
            if block.device and not is_valid_device(block.device):
                self.block_problem(block, f"device {block.device!r} is not well formed (expected {DEVICE_FORMS})")
            for var in block.vars.values():
                if var.device and not is_valid_device(var.device):
                    self.block_problem(
                        block,
                        f"variable {var.name!r} has device {var.device!r}, which is not "
                        f"well formed (expected {DEVICE_FORMS})",
                    )

    # -- variables ---------------------------------------------------------
    def lookup(self, block: Block, name: str) -> Variable | None:
        """The variable ``name`` as ``block`` sees it: in a block of its chain, or in a gradient block's forward
        block (:meth:`~blockir.ir.core.Block.find_var_recursive`)."""
        blocks = self.program.blocks
        for b in self.chain(self.position[id(block)]):
            if name in b.vars:
                return b.vars[name]
            forward = b.forward_block_idx
            if 0 <= forward < len(blocks) and name in blocks[forward].vars:
                return blocks[forward].vars[name]
        return None

    def check_ops(self) -> None:
        """Every op's checks, with what is defined where it runs (:class:`_Defined`); the blocks in the order
        of their chains' lengths (parents before children), the feed and fetch columns of each."""
        blocks = self.program.blocks
        defined = _Defined(self.program, self.lengths, self.cycles)
        for i in sorted(range(len(blocks)), key=lambda i: (self.lengths[i], i)):
            block = blocks[i]
            for index, op in enumerate(block.ops):
                self.check_op(block, index, op, functools.partial(defined, i=i, k=index))
            for index, problem in column_problems(block):
                self.op_problem(block, index, block.ops[index], problem)

    def check_op(self, block: Block, index: int, op: Operator, defined: Callable[[str], bool]) -> None:
        for slot, names in op.inputs.items():
            for name in names:
                if name == EMPTY_VAR:
                    continue
                var = self.lookup(block, name)
                if var is None:
                    self.op_problem(
                        block, index, op, f"input {name!r} (slot {slot}) is not declared in the block or its ancestors"
                    )
                elif not (
                    var.persistable or var.need_check_feed or var.kind is VarKind.LOD_TENSOR_ARRAY or defined(name)
                ):  # a tensor array no op wrote is empty
                    self.op_problem(
                        block,
                        index,
                        op,
                        f"input {name!r} (slot {slot}) is used before any "
                        "op defines it (and it is not persistable or fed)",
                    )
        for slot, names in op.outputs.items():
            for name in names:
                if name != EMPTY_VAR and self.lookup(block, name) is None:
                    self.op_problem(
                        block, index, op, f"output {name!r} (slot {slot}) is not declared in the block or its ancestors"
                    )
        schema = find(op.type)
        if schema is None:
            if not self.allow_unknown_ops:
                self.op_problem(block, index, op, f"op type {op.type!r} is not registered")
        else:
            for problem in _slot_problems(op, schema):
                self.op_problem(block, index, op, problem)
        for problem in _attr_problems(op, schema, unknown=True):
            self.op_problem(block, index, op, problem)
        for problem in _block_ref_problems(op, self.position[id(block)]):
            self.op_problem(block, index, op, problem)
        device = op.attrs.get("op_device")
        if isinstance(device, str) and device and not is_valid_device(device):
            self.op_problem(block, index, op, f"op_device {device!r} is not well formed (expected {DEVICE_FORMS})")


class _Defined:
    """Whether a variable is defined where op ``k`` of block ``i`` runs: written by an earlier op of the block;
    written by any op of the block's forward block; fed in the block or an ancestor; or defined where its
    owner op runs in its parent (the first op owning it), at the end of the parent when no op owns it.

    The blocks are checked in the order of their chains' lengths, parents first; a block inherits from its
    parent only when the parent comes first in that order (in a cycle of parents, some block's parent comes
    after it: that block starts from its fed variables alone). Each question walks up the parents, a few
    dict look-ups a level: nothing is copied per block or per owner op, so the cost is linear in the size of
    the program (times the nesting depth).
    """

    def __init__(self, program: Program, lengths: list[int], cycles: list[int | None]) -> None:
        blocks = program.blocks
        n = len(blocks)
        self.blocks, self.lengths, self.cycles = blocks, lengths, cycles
        # block -> variable -> the index of the first op writing it
        self.first_write: list[dict[str, int]] = []
        self.fed: list[set[str]] = []
        self.owner: dict[int, int] = {}  # sub-block -> the index of the first op of its parent owning it
        for i, b in enumerate(blocks):
            writes: dict[str, int] = {}
            fed: set[str] = set()
            for k, op in enumerate(b.ops):
                names = op.output_names()
                for name in names:
                    writes.setdefault(name, k)
                if lowering_of(op.type) is Lowering.FEED:
                    fed.update(names)
                for sub in op.sub_block_indices():
                    if 0 <= sub < n and blocks[sub].parent_idx == i:
                        self.owner.setdefault(sub, k)
            self.first_write.append(writes)
            self.fed.append(fed)
        self.chain_fed: dict[int, set[str]] = {}  # block -> what its chain feeds (blocks that inherit nothing)

    def inherits(self, i: int) -> bool:
        """Whether block ``i`` starts from what is defined in its parent (checked before it)."""
        p = self.blocks[i].parent_idx
        return 0 <= p < len(self.blocks) and (self.lengths[p], p) < (self.lengths[i], i)

    def fed_in_chain(self, i: int) -> set[str]:
        """What the blocks of block ``i``'s chain feed, for a block that inherits nothing: a block without a
        parent (a chain of one), or one of a cycle (whose chain is the cycle: computed once for all of it)."""
        found = self.chain_fed.get(i)
        if found is None:
            members, b = [], i
            for _ in range(self.lengths[i]):
                members.append(b)
                b = self.blocks[b].parent_idx
            found = set().union(*(self.fed[b] for b in members))
            for b in members if self.cycles[i] == i else [i]:  # every block of a cycle has the cycle as its chain
                self.chain_fed[b] = found
        return found

    def __call__(self, name: str, i: int, k: int) -> bool:
        blocks = self.blocks
        while True:
            written = self.first_write[i].get(name)
            if written is not None and written < k:
                return True
            forward = blocks[i].forward_block_idx
            if 0 <= forward < len(blocks) and name in self.first_write[forward]:
                return True
            if name in self.fed[i]:
                return True
            if not self.inherits(i):
                return name in self.fed_in_chain(i)
            parent = blocks[i].parent_idx
            i, k = parent, self.owner.get(i, len(blocks[parent].ops))


def _slot_problems(op: Operator, schema: OpSchema) -> list[str]:
    problems = []
    for kind, given, declared in (("input", op.inputs, schema.inputs), ("output", op.outputs, schema.outputs)):
        known = {s.name: s for s in declared}
        for slot, names in given.items():
            if slot not in known:
                expected = ", ".join(known) or "none"
                problems.append(f"{op.type} has no {kind} slot {slot!r} (its {kind} slots: {expected})")
            elif len(names) > 1 and not known[slot].duplicable:
                problems.append(f"{kind} slot {slot} holds {len(names)} variables but is not duplicable")
    # A required input binds a variable (its kernel gets no None there). A required output is there, if only
    # as @EMPTY@ (its value unused); gradient outputs (X@GRAD) excepted: gradient makers leave out those of
    # the inputs that need no gradient.
    problems += [
        f"required input slot {s.name} is missing"
        for s in schema.inputs
        if not s.optional and all(n == EMPTY_VAR for n in op.inputs.get(s.name, ()))
    ]
    problems += [
        f"required output slot {s.name} is missing"
        for s in schema.outputs
        if not s.optional and not s.name.endswith(GRAD_SUFFIX) and not op.outputs.get(s.name)
    ]
    return problems


def _attr_problems(op: Operator, schema: OpSchema | None, unknown: bool) -> list[str]:
    """Attributes of the wrong type, required ones missing; with ``unknown``, attributes the schema lacks."""
    problems: list[str] = []
    for name, t in op.attr_types.items():
        adef = schema.attr_def(name) if schema is not None else None
        expected = adef.type if adef is not None else COMMON_ATTRS.get(name)
        if expected is None and schema is not None and unknown:
            problems.append(f"unknown attribute {name!r} for {op.type}")
        elif expected is not None and t is not expected:
            problems += filter(None, [_attr_type_problem(name, op.attrs[name], t, expected)])
    if schema is not None:
        problems += [
            f"required attribute {a.name!r} is missing"
            for a in schema.attrs
            if a.default is REQUIRED and a.name not in op.attrs
        ]
    return problems


def _attr_type_problem(name: str, value: Any, t: AttrType, expected: AttrType) -> str:
    """Why an attribute of type ``t`` does not do where ``expected`` is; "" when it does: a SCALAR (SCALARS)
    whose value is a valid ``expected`` (Paddle 2.5+ writes some numeric attributes as scalars)."""
    if t in (AttrType.VAR, AttrType.VARS):
        return (
            f"attribute {name!r} is {t.name}: its value is read from {value!r} when the op runs; blockir runs only "
            f"attributes given as constants ({expected.name})"
        )
    if t in (AttrType.SCALAR, AttrType.SCALARS) and (t is AttrType.SCALARS) == (expected in LIST_TYPES):
        try:
            normalize(value, expected, name)
            return ""
        except BlockirError:
            pass
    return f"attribute {name!r} is {t.name}, expected {expected.name}"


def _block_ref_problems(op: Operator, here: int) -> list[str]:
    """BLOCK / BLOCKS attributes referring to blocks that do not exist or are no children of block ``here``
    (the op's block's position in the program)."""
    problems = []
    blocks = op.block.program.blocks
    for name in [n for n, t in op.attr_types.items() if t in (AttrType.BLOCK, AttrType.BLOCKS)]:
        value = op.attrs[name]
        for idx in value if isinstance(value, tuple) else [value]:
            if not 0 <= idx < len(blocks):
                problems.append(f"attribute {name!r} refers to block {idx}, which does not exist")
            elif blocks[idx].parent_idx != here:
                problems.append(
                    f"attribute {name!r} refers to block {idx}, whose parent is block "
                    f"{blocks[idx].parent_idx}, not this block"
                )
    return problems


def op_problems(op: Operator, schema: OpSchema) -> list[str]:
    """What in ``op`` a run would trip on, against its schema: slots the schema lacks, several variables in
    a slot that is not duplicable, required input slots binding no variable, required output slots absent,
    attributes of the wrong type, required attributes absent, sub-block attributes naming no child block of
    the op's block. Attributes the schema does not know (Paddle's ``op_callstack``, say) are no problem
    here; :func:`verify` reports them."""
    blocks = op.block.program.blocks
    idx = op.block.idx
    if not (0 <= idx < len(blocks) and blocks[idx] is op.block):  # a block out of place (verify reports it)
        idx = next(i for i, b in enumerate(blocks) if b is op.block)
    return _slot_problems(op, schema) + _attr_problems(op, schema, unknown=False) + _block_ref_problems(op, idx)


def column_problems(block: Block) -> list[tuple[int, str]]:
    """(op index, problem) for the ``col`` of the block's ``feed`` and ``fetch`` ops: each takes a column
    of its own (no two feed ops, nor two fetch ops, the same), none negative."""
    problems = []
    taken: dict[tuple[str, int], int] = {}
    for index, op in enumerate(block.ops):
        col = op.attrs.get("col", 0)
        framing = lowering_of(op.type) in (Lowering.FEED, Lowering.FETCH)
        if not framing or not isinstance(col, int):  # a col of another type: see op_problems
            continue
        if col < 0:
            problems.append((index, f"{op.type} column {col} is negative"))
        elif (op.type, col) in taken:
            problems.append((index, f"{op.type} column {col} is taken by op {taken[op.type, col]} too"))
        else:
            taken[op.type, col] = index
    return problems


def verify(program: Program, *, allow_unknown_ops: bool = False) -> None:
    """Check ``program``; raise :class:`VerifyError` listing every problem found.

    The error's ``problems`` attribute holds the problems one by one.
    """
    v = _Verifier(program, allow_unknown_ops)
    v.check_blocks()
    if program.blocks:
        v.check_ops()
    if v.problems:
        count = len(v.problems)
        raise VerifyError(
            f"program is invalid ({count} problem{'s' if count > 1 else ''}):\n  " + "\n  ".join(v.problems), v.problems
        )
