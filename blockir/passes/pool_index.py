"""``max-pool-with-index``: a training program's max pooling keeps the position of each maximum for its gradient.

``pool2d_grad`` of max pooling finds each window's maximum again (the first position equal to ``Out``);
``max_pool2d_with_index`` writes it, as ``Mask``, when it pools, and its gradient is one scatter of
``Out@GRAD`` to those positions. The pass turns a ``pool2d`` into ``max_pool2d_with_index`` (``Out`` and a
new ``Mask`` variable, ``OUT@MASK``, int32, where the ``pool2d`` was) and each ``pool2d_grad`` of it into
``max_pool2d_with_index_grad`` reading the ``Mask`` (where it was), when the two ops compute the same values
and the same gradient, ties included (both keep the first maximum of a window in row-major order; a window
whose values never beat ``-FLT_MAX``, all padding for one, gives ``-FLT_MAX`` and no gradient in both):

- ``pooling_type="max"``, not ``adaptive`` (``pool2d``'s adaptive max pooling keeps regular windows of
  ``ksize``; ``max_pool2d_with_index`` takes adaptive bins), channel first (``NCHW`` or ``AnyLayout``:
  ``max_pool2d_with_index`` has no ``data_format``), X a 4-D tensor without LoD (``pool2d`` hands X's LoD
  to Out, ``max_pool2d_with_index`` does not), Out not X itself;
- the same padding on both sides of each axis (``max_pool2d_with_index`` has one per axis): explicit
  ``paddings`` of 2 values, or 4 equal in pairs, or ``padding_algorithm="VALID"``; ``"SAME"`` pads by what the
  input's size gives, an odd total unevenly, so it is left alone; with ``global_pooling`` padding plays no
  part. ``ksize``, ``strides``, ``ceil_mode`` and ``global_pooling`` carry over (``exclusive`` and the kernel
  choices play no part in max pooling);
- a ``pool2d_grad`` is rewritten when it is in the same block after the ``pool2d``, reads its X and Out, has its
  attributes, and no op between the two writes X or Out (so that the Mask is of the values it reads).

A ``pool2d`` with no such gradient op stays (an inference program's pooling gains nothing from a Mask), and a
gradient op that does not qualify stays ``pool2d_grad`` beside one that does (``Out`` is what it was). One
difference remains: a NaN in a window is ``pool2d``'s maximum (numpy's
``maximum``) and never ``max_pool2d_with_index``'s (Paddle's comparison), so with the pass a NaN that reaches a
max pooling stops there rather than reaching the loss through it. Each new op records its lineage
(:func:`~blockir.passes.rewrite.insert_created`); what was rewritten and why a max pooling with a gradient
was not are the pass's notes and details (``fused``, ``refused``). The executor applies it to its compiled
copy as ``BuildStrategy.max_pool_with_index`` says (the ``fuse`` pipeline's ``max_pool_index``): the program a
user holds, and what it exports, keep ``pool2d``.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, ClassVar

from blockir.ir import Block, Operator, Program
from blockir.ir.core import op_reads_writes
from blockir.passes.base import Pass, origin_key, register_pass
from blockir.passes.manager import note, record_detail
from blockir.passes.rewrite import Fired, Refused, fresh_name, insert_created

__all__ = ["MaxPoolWithIndex"]

# pool2d's attributes that decide what it computes; a gradient op rewritten must have its forward op's
_POOL_ATTRS = (
    "pooling_type",
    "ksize",
    "global_pooling",
    "strides",
    "paddings",
    "adaptive",
    "ceil_mode",
    "data_format",
    "padding_algorithm",
)
_CHANNEL_FIRST = ("NCHW", "AnyLayout")


def _symmetric_paddings(pool: Operator) -> list[int] | None:
    """The one padding per axis (height, width) of ``pool``, None when a side differs from the other."""
    if pool.attr("global_pooling") or pool.attr("padding_algorithm") == "VALID":
        return [0, 0]
    if pool.attr("padding_algorithm") != "EXPLICIT":
        return None
    p = list(pool.attr("paddings"))
    if len(p) == 4 and p[0] == p[1] and p[2] == p[3]:
        p = [p[0], p[2]]
    return p if len(p) == 2 and min(p) >= 0 else None


def _why_not(pool: Operator) -> str | None:
    """Why ``pool`` (a max pool2d) computes something ``max_pool2d_with_index`` does not, or None."""
    if pool.attr("adaptive"):
        return "adaptive (pool2d's max pooling keeps regular windows, max_pool2d_with_index takes bins)"
    if pool.attr("data_format") not in _CHANNEL_FIRST:
        return f"data_format={pool.attr('data_format')} (max_pool2d_with_index is NCHW only)"
    if _symmetric_paddings(pool) is None:
        return (
            f"paddings={list(pool.attr('paddings'))} padding_algorithm={pool.attr('padding_algorithm')} "
            "(max_pool2d_with_index pads both sides of an axis alike)"
        )
    x = pool.block.find_var_recursive(pool.input("X")[0])
    if x.shape is None or len(x.shape) != 4 or x.lod_level:
        return f"X {x.name!r} is not a 4-D tensor without LoD"
    if pool.input("X") == pool.output("Out"):
        return "it writes its Out over its X (its gradient finds the maxima in Out)"
    return None


def _attr(op: Operator, name: str) -> Any:
    """``op``'s attribute ``name``, a list as a tuple (set attributes are tuples, schema defaults lists)."""
    value = op.attr(name)
    return tuple(value) if isinstance(value, list) else value


def _gradients(block: Block, at: int, pool: Operator) -> list[Operator]:
    """The pool2d_grad ops after ``block.ops[at]`` (``pool``) that read its X and Out, with its attributes,
    before any op writes X or Out again."""
    watched = {pool.input("X")[0], pool.output("Out")[0]}
    found = []
    for op in block.ops[at + 1 :]:
        if (
            op.type == "pool2d_grad"
            and op.input("X") == pool.input("X")
            and op.input("Out") == pool.output("Out")
            and all(_attr(op, a) == _attr(pool, a) for a in _POOL_ATTRS)
        ):
            found.append(op)
        if watched & op_reads_writes(op)[1]:
            break
    return found


def _attrs(pool: Operator) -> dict[str, Any]:
    """max_pool2d_with_index's attributes for ``pool``."""
    return {  # global pooling's windows are the whole plane, whatever ksize says (pool2d's may be -1)
        "ksize": [max(k, 0) if pool.attr("global_pooling") else k for k in pool.attr("ksize")],
        "strides": list(pool.attr("strides")),
        "paddings": _symmetric_paddings(pool),
        "global_pooling": pool.attr("global_pooling"),
        "adaptive": False,
        "ceil_mode": pool.attr("ceil_mode"),
    }


def _rewrite(block: Block, pool: Operator, grads: Sequence[Operator], pass_name: str) -> Fired:
    """``pool`` into max_pool2d_with_index writing a new Mask, ``grads`` into its gradient reading it, each new op
    where the op it replaces was."""
    out = pool.output("Out")[0]
    mask = fresh_name(block.program, f"{out}@MASK")
    block.create_var(mask, shape=block.find_var_recursive(out).shape, dtype="int32")
    attrs = _attrs(pool)
    replaced = (pool, *grads)
    created = []
    for old in replaced:
        inputs: dict[str, Sequence[str]] = {"X": old.input("X")}
        if old is pool:
            outputs: dict[str, Sequence[str]] = {"Out": [out], "Mask": [mask]}
            type = "max_pool2d_with_index"
        else:
            inputs.update({"Mask": [mask], "Out@GRAD": old.input("Out@GRAD")})
            outputs, type = dict(old.outputs), "max_pool2d_with_index_grad"
        new = insert_created(block, block.ops.index(old) + 1, type, inputs, outputs, attrs, [old], pass_name)
        new.is_target = old.is_target
        block.remove_op(old)
        created.append(new)
    return Fired(pool.type, block.idx, tuple(map(origin_key, replaced)), tuple(map(origin_key, created)))


@register_pass
@dataclass(frozen=True)
class MaxPoolWithIndex(Pass):
    """Max pool2d with gradient ops into max_pool2d_with_index and its gradient (module docstring)."""

    name: ClassVar[str] = "max-pool-with-index"
    summary: ClassVar[str] = (
        "max pool2d and its pool2d_grad into max_pool2d_with_index (Out, a new Mask) and "
        "max_pool2d_with_index_grad reading the Mask, where both compute the same"
    )

    def run(self, program: Program) -> bool:
        fired: list[Fired] = []
        refused: list[Refused] = []
        for block in program.blocks:
            for pool in [op for op in block.ops if op.type == "pool2d" and op.attr("pooling_type") == "max"]:
                grads = _gradients(block, block.ops.index(pool), pool)
                if not grads:
                    continue
                reason = _why_not(pool)
                if reason is not None:
                    refused.append(Refused(pool.type, block.idx, origin_key(pool), reason))
                    continue
                fired.append(_rewrite(block, pool, grads, self.name))
        for f in fired:
            note(f"block {f.block}: rewrote {', '.join(f.replaced)} into {', '.join(f.created)}")
        for r in refused:
            note(f"block {r.block}: kept {r.anchor}: {r.reason}")
        record_detail("fused", fired)
        record_detail("refused", refused)
        return bool(fired)
