"""The program verifier: what every well-formed program satisfies.

:func:`verify` collects every problem and raises one :class:`VerifyError`
listing them, each naming the block index, the op index and the op in its text
form. The pass manager runs it after every pass in tests.

The plan compiler (:func:`blockir.runtime.plan.compile_plan`) runs the checks
of one op that a run would trip on (:func:`op_problems`) and
:func:`column_problems`, so that ``verify`` and the executor agree.

Checks:

* blocks are numbered in order, parent indices are valid and acyclic, block 0
  is the root, ``forward_block_idx`` is -1 or an existing block;
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

from typing import Any

from blockir.errors import BlockirError, VerifyError
from blockir.ir.attrs import LIST_TYPES, AttrType, normalize
from blockir.ir.core import Block, Operator, Program, Variable
from blockir.ir.devices import DEVICE_FORMS, is_valid_device
from blockir.ir.schema import COMMON_ATTRS, EMPTY_VAR, GRAD_SUFFIX, REQUIRED, Lowering, OpSchema, find, lowering_of

__all__ = ["column_problems", "op_problems", "verify"]


class _Verifier:
    def __init__(self, program: Program, allow_unknown_ops: bool) -> None:
        self.program = program
        self.allow_unknown_ops = allow_unknown_ops
        self.problems: list[str] = []
        self.position = {id(b): i for i, b in enumerate(program.blocks)}
        self.chains = [self._chain(b) for b in program.blocks]

    # -- reporting ---------------------------------------------------------
    def block_problem(self, block: Block, message: str) -> None:
        self.problems.append(f"block {self.position[id(block)]}: {message}")

    def op_problem(self, block: Block, index: int, op: Operator, message: str) -> None:
        self.problems.append(f"block {self.position[id(block)]}, op {index}: {message}\n    in: {op}")

    # -- blocks ------------------------------------------------------------
    def _chain(self, block: Block) -> list[Block]:
        """The block and its ancestors, stopping at an invalid parent or a cycle."""
        chain = [block]
        seen = {id(block)}
        parent = block.parent_idx
        while 0 <= parent < len(self.program.blocks) and id(self.program.blocks[parent]) not in seen:
            b = self.program.blocks[parent]
            chain.append(b)
            seen.add(id(b))
            parent = b.parent_idx
        return chain

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
            elif i > 0:
                last = self.chains[i][-1]
                if 0 <= last.parent_idx < n:  # the chain stopped on a block already in it
                    self.block_problem(block, f"its parents form a cycle through block {last.parent_idx}")
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
        for b in self.chains[self.position[id(block)]]:
            if name in b.vars:
                return b.vars[name]
        return None

    def check_ops(self) -> None:
        blocks = self.program.blocks
        fed = [{n for op in b.ops if lowering_of(op.type) is Lowering.FEED for n in op.output_names()} for b in blocks]
        entry: dict[int, set[str]] = {}  # sub-block -> what is defined where its owner op runs
        done: dict[int, set[str]] = {}  # block -> what is defined after its last op
        # Parents before children: a parent's chain is one shorter than its child's.
        for i in sorted(range(len(blocks)), key=lambda i: (len(self.chains[i]), i)):
            block = blocks[i]
            defined = set(entry.get(i, done.get(block.parent_idx, set())))
            if 0 <= block.forward_block_idx < len(blocks):
                defined |= {n for op in blocks[block.forward_block_idx].ops for n in op.output_names()}
            defined |= {n for b in self.chains[i] for n in fed[self.position[id(b)]]}
            for index, op in enumerate(block.ops):
                self.check_op(block, index, op, defined)
                for sub in op.sub_block_indices():
                    if 0 <= sub < len(blocks) and blocks[sub].parent_idx == i:
                        entry.setdefault(sub, set(defined))
                defined.update(op.output_names())
            done[i] = defined
            for index, problem in column_problems(block):
                self.op_problem(block, index, block.ops[index], problem)

    def check_op(self, block: Block, index: int, op: Operator, defined: set[str]) -> None:
        for slot, names in op.inputs.items():
            for name in names:
                if name == EMPTY_VAR:
                    continue
                var = self.lookup(block, name)
                if var is None:
                    self.op_problem(
                        block, index, op, f"input {name!r} (slot {slot}) is not declared in the block or its ancestors"
                    )
                elif not (name in defined or var.persistable or var.need_check_feed):
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
    here = next(i for i, b in enumerate(op.block.program.blocks) if b is op.block)
    return _slot_problems(op, schema) + _attr_problems(op, schema, unknown=False) + _block_ref_problems(op, here)


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
