"""``inference``: turn a training program into an inference program; in place.

Drops backward, optimizer and learning-rate-schedule ops (by their ``op_role``
attribute, or a ``*_grad`` type for programs that carry no roles), sets
``is_test`` on every op whose schema has that attribute, and removes the
variables nothing refers to any more (gradients, optimizer state).
:class:`Inference` is the same as a pass.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

from blockir.ir import Operator, Program
from blockir.ir.schema import OpRole, find
from blockir.passes.base import Pass, register_pass
from blockir.passes.prune import remove_unused_vars

_TRAINING_ROLES = OpRole.BACKWARD | OpRole.OPTIMIZE | OpRole.LR_SCHED


def is_training_op(op: Operator) -> bool:
    role = op.attrs.get("op_role", OpRole.FORWARD)
    return bool(role & _TRAINING_ROLES) or op.type.endswith("_grad")


def inference(program: Program) -> bool:
    """Make ``program`` an inference program. Returns whether it changed."""
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
    return remove_unused_vars(program.global_block()) or changed


@register_pass
@dataclass(frozen=True)
class Inference(Pass):
    """:func:`inference` as a pass."""

    name: ClassVar[str] = "inference"
    summary: ClassVar[str] = "drop backward and optimizer ops, set is_test, remove the variables left unused"

    def run(self, program: Program) -> bool:
        return inference(program)
