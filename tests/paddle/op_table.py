"""The table of Paddle's op types in ``docs/paddle.md``: which of them blockir has, forward and gradient.

``paddle_ops.txt`` (beside this file) lists Paddle 3.3.1's op types, from its op protos, each with
whether Paddle registers a gradient op maker for it (``python tests/paddle/paddle_side.py ops
tests/paddle/paddle_ops.txt`` with a Paddle interpreter writes it). :func:`table` makes the section
of ``docs/paddle.md`` between the ``op-table`` markers from it and blockir's op registry;
``tests/paddle/test_op_table.py`` checks that the document holds it, and
``python scripts/paddle_op_table.py`` rewrites it.
"""

from __future__ import annotations

from pathlib import Path

import blockir  # noqa: F401  (registers every op)
from blockir.ir.schema import registered

OPS = Path(__file__).with_name("paddle_ops.txt")
DOC = Path(__file__).resolve().parents[2] / "docs" / "paddle.md"
BEGIN, END = "<!-- op-table: begin (python scripts/paddle_op_table.py) -->", "<!-- op-table: end -->"


def paddle_ops() -> dict[str, bool]:
    """Paddle's op types -> whether Paddle has a gradient op for it."""
    ops = {}
    for line in OPS.read_text(encoding="utf-8").splitlines():
        if line and not line.startswith("#"):
            op_type, grad = line.split()
            ops[op_type] = grad == "grad"
    return ops


def _differentiable(op_type: str, ours: dict) -> bool:
    """Whether blockir differentiates ``op_type``: its schema has a gradient maker, or (``while``,
    ``conditional_block``: ``append_backward`` builds their gradient blocks) a ``T_grad`` op is registered."""
    return op_type in ours and (ours[op_type].grad is not None or f"{op_type}_grad" in ours)


def table() -> str:
    """The section between BEGIN and END (the markers included)."""
    ops, ours = paddle_ops(), registered()
    has = [t for t in ops if t in ours]
    with_grad = [t for t in ops if ops[t]]
    grads = [t for t in with_grad if _differentiable(t, ours)]
    own = sorted(t for t in ours if t not in ops and not t.endswith("_grad"))
    lines = [
        BEGIN,
        f"blockir has **{len(has)}** of Paddle 3.3.1's {len(ops)} op types, and the gradient of **{len(grads)}** "
        f"of the {len(with_grad)} that have one in Paddle.",
        "",
        "| Paddle op | in blockir | gradient in Paddle | gradient in blockir |",
        "| --- | --- | --- | --- |",
    ]
    for op_type, grad in ops.items():
        schema = ours.get(op_type)
        ours_grad = "" if not grad else "yes" if _differentiable(op_type, ours) else "no"
        lines.append(f"| `{op_type}` | {'yes' if schema else 'no'} | {'yes' if grad else ''} | {ours_grad} |")
    lines += ["", f"blockir's own ops, not among Paddle's ({len(own)}): " + ", ".join(f"`{t}`" for t in own) + ".", END]
    return "\n".join(lines)


def written() -> str:
    """The section as ``docs/paddle.md`` holds it now ('' if it has none)."""
    text = DOC.read_text(encoding="utf-8")
    if BEGIN not in text or END not in text:
        return ""
    return text[text.index(BEGIN) : text.index(END) + len(END)]


def rewrite() -> bool:
    """Write the table into ``docs/paddle.md``; whether it changed."""
    text, now, new = DOC.read_text(encoding="utf-8"), written(), table()
    if now == new:
        return False
    DOC.write_text(text.replace(now, new) if now else text.rstrip("\n") + "\n\n" + new + "\n", encoding="utf-8")
    return True
