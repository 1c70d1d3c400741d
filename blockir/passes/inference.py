"""``inference``: turn a training program into an inference program; in place.

Drops backward, optimizer and learning-rate-schedule ops (by their ``op_role``
attribute, or a ``*_grad`` type for programs that carry no roles), sets
``is_test`` on every op whose schema has that attribute (both as
:func:`blockir.ir.core.strip_training`, which ``Program.clone(for_test=True)``
uses too), and removes the variables nothing refers to any more (gradients,
optimizer state).
:class:`Inference` is the same as a pass.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

from blockir.ir import Program
from blockir.ir.core import is_training_op, strip_training
from blockir.passes.base import Pass, register_pass
from blockir.passes.prune import remove_unused_vars

__all__ = ["Inference", "inference", "is_training_op"]


def inference(program: Program) -> bool:
    """Make ``program`` an inference program. Returns whether it changed."""
    changed = strip_training(program)
    return remove_unused_vars(program.global_block()) or changed


@register_pass
@dataclass(frozen=True)
class Inference(Pass):
    """:func:`inference` as a pass."""

    name: ClassVar[str] = "inference"
    summary: ClassVar[str] = "drop backward and optimizer ops, set is_test, remove the variables left unused"

    def run(self, program: Program) -> bool:
        return inference(program)
