"""Loops, conditionals and tensor arrays in programs (Fluid 1.x's ``layers.control_flow``; the ops are
:mod:`blockir.ops.control_flow`'s).

```python
i = layers.fill_constant([1], "int64", 0)
n = layers.fill_constant([1], "int64", 10)
cond = layers.less_than(i, n)
loop = layers.While(cond)
with loop.block():                          # the loop's block: runs while cond holds
    h = layers.tanh(layers.fc(h0, 8))
    layers.array_write(h, i, array=outs)
    layers.increment(i, in_place=True)
    layers.less_than(i, n, cond=cond)       # the block updates the condition
y = layers.cond(pred, lambda: a * 2.0, lambda: a - 1.0)   # conditional_block x2 + select_input
with layers.Switch() as switch:             # the first case that holds runs
    with switch.case(step < warmup):
        layers.assign(lr0, output=lr)
    with switch.default():
        layers.assign(lr1, output=lr)
```

A loop's or a branch's block reads and writes the variables of the blocks around
it: what it reads becomes the op's ``X`` / ``Input``, what it writes of them its
``Out`` (the loop's state, carried from one iteration to the next), as Fluid's
``While`` and ``ConditionalBlock`` compute them.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator
from typing import Any

from blockir.dsl import framework, math_layers, unique_name
from blockir.dsl.layer_helper import LayerHelper
from blockir.dsl.variable import Variable, tensor_dtype, tensor_shape
from blockir.errors import BlockirError
from blockir.ir import core
from blockir.ir.core import Block, op_reads_writes
from blockir.ir.dtypes import DTYPE_TO_PROTO, FLOAT_DTYPES, VarKind, to_dtype

__all__ = [
    "ConditionalBlock",
    "Switch",
    "While",
    "array_length",
    "array_read",
    "array_write",
    "cond",
    "create_array",
    "increment",
    "select_input",
    "tensor_array_to_tensor",
]


def _program() -> core.Program:
    return framework.default_main_program()


def _outer_accesses(sub: Block) -> tuple[list[str], list[str]]:
    """What ``sub``'s ops read before writing it and what they write, in order of first use, restricted to the
    variables of the blocks around it."""
    reads: dict[str, None] = {}
    writes: dict[str, None] = {}
    for op in sub.ops:
        r, w = op_reads_writes(op)
        reads.update((n, None) for n in sorted(r) if n not in writes)
        writes.update((n, None) for n in sorted(w))

    parent = sub.program.block(sub.parent_idx)

    def outer(name: str) -> bool:
        if name in sub.vars:
            return False
        try:
            parent.find_var_recursive(name)
        except BlockirError:
            return False
        return True

    return [n for n in reads if outer(n)], [n for n in writes if outer(n)]


def _step_scopes(block: Block) -> Variable:
    return block.add_var(Variable(unique_name.generate("_generated_var"), kind=VarKind.STEP_SCOPES))


@contextlib.contextmanager
def _op_block(append: Callable[[Block, Block, list[str], list[str]], None]) -> Iterator[Block]:
    """A new sub-block of the block being built, current inside; when it ends, ``append(parent, sub, reads,
    writes)`` appends the op that runs it to the block around it (``reads``, ``writes``: its
    :func:`_outer_accesses`)."""
    parent = _program().current_block()
    with framework.sub_block() as sub:
        yield sub
    append(parent, sub, *_outer_accesses(sub))


def _check_condition(helper: LayerHelper, var: Any, arg: str) -> core.Variable:
    helper.check_variable(var, arg)
    if var.dtype != "bool" or any(d > 1 for d in tensor_shape(var)):
        raise helper.error(f"{arg} {var.name!r} must be a bool tensor of one element, got {var.dtype}{list(var.shape)}")
    return var


class While:
    """A ``while`` loop (Fluid's ``layers.While``): the ops built in :meth:`block` run while ``cond`` holds; the
    block must update ``cond`` (``layers.less_than(i, n, cond=cond)``). ``is_test``: keep nothing for a gradient."""

    def __init__(self, cond: core.Variable, is_test: bool = False, name: str | None = None) -> None:
        self.helper = LayerHelper("while", name)
        self.cond_var = _check_condition(self.helper, cond, "cond")
        self.is_test = bool(is_test)

    def block(self) -> contextlib.AbstractContextManager[Block]:
        """Build the loop's block inside; the ``while`` op is appended when it ends."""
        return _op_block(self._append)

    def _append(self, parent: Block, sub: Block, reads: list[str], writes: list[str]) -> None:
        if self.cond_var.name not in writes:
            raise self.helper.error(
                f"the loop's block never updates its condition {self.cond_var.name!r}, so it would never end "
                "(e.g. layers.less_than(i, n, cond=cond) at its end)"
            )
        xs = [n for n in dict.fromkeys([*reads, *writes]) if n != self.cond_var.name]
        for name in set(reads) & set(writes):  # carried: the loop computes it, whatever gave its first value
            var = parent.find_var_recursive(name)
            if var.kind is VarKind.LOD_TENSOR and var.dtype in FLOAT_DTYPES and not var.persistable:
                var.stop_gradient = False
        framework.append_op(
            parent,
            "while",
            {"X": xs, "Condition": [self.cond_var]},
            {"Out": writes, "StepScopes": [_step_scopes(parent)]},
            {"sub_block": sub.idx, "is_test": self.is_test},
            layer="While",
        )


class ConditionalBlock:
    """A ``conditional_block`` (Fluid's ``ConditionalBlock``): the ops built in :meth:`block` run when ``inputs``
    hold: with ``is_scalar_condition``, when the one bool ``inputs[0]`` is true; else when every input has
    elements."""

    def __init__(self, inputs: list[core.Variable], is_scalar_condition: bool = False, name: str | None = None) -> None:
        self.helper = LayerHelper("conditional_block", name)
        if not inputs:
            raise self.helper.error("inputs must name at least one condition variable")
        for k, var in enumerate(inputs):
            if is_scalar_condition:
                _check_condition(self.helper, var, f"inputs[{k}]")
            else:
                self.helper.check_variable(var, f"inputs[{k}]")
        self.inputs = list(inputs)
        self.is_scalar_condition = bool(is_scalar_condition)

    def block(self) -> contextlib.AbstractContextManager[Block]:
        """Build the block inside; the ``conditional_block`` op is appended when it ends."""
        return _op_block(self._append)

    def _append(self, parent: Block, sub: Block, reads: list[str], writes: list[str]) -> None:
        framework.append_op(
            parent,
            "conditional_block",
            {"Cond": self.inputs, "Input": reads},
            {"Out": [n for n in writes if parent.has_var(n)], "Scope": [_step_scopes(parent)]},
            {"sub_block": sub.idx, "is_scalar_condition": self.is_scalar_condition},
            layer="ConditionalBlock",
        )


def _new_like(block: Block, helper: LayerHelper, var: core.Variable) -> Variable:
    """A new variable of ``block`` (named after ``helper``'s layer) of ``var``'s kind, dtype, shape and LoD level."""
    like = Variable(
        unique_name.generate(f"{helper.name}.out"),
        kind=var.kind,
        dtype=var.dtype,
        shape=var.shape,
        lod_level=var.lod_level,
    )
    return block.add_var(like)


def _copy_to_parent(var: Any, parent: Block, helper: LayerHelper) -> Any:
    """A branch's result copied into a new variable of the block around the branch."""
    if not isinstance(var, core.Variable):
        raise helper.error(f"a branch must return variables (or lists, tuples, dicts of them), got {var!r}")
    out = _new_like(parent, helper, var)
    framework.append_op(_program().current_block(), "assign", {"X": [var]}, {"Out": [out]}, layer="cond")
    return out


def _map(fn: Callable[..., Any], *trees: Any) -> Any:
    """``fn`` over the leaves of equally nested lists, tuples and dicts."""
    first = trees[0]
    if not any(isinstance(t, (list, tuple, dict)) for t in trees):
        return fn(*trees)
    kinds = {dict if isinstance(t, dict) else list if isinstance(t, (list, tuple)) else None for t in trees}
    if (
        len(kinds) > 1
        or len({len(t) for t in trees}) > 1
        or (kinds == {dict} and len({frozenset(t) for t in trees}) > 1)
    ):
        raise BlockirError(f"layers.cond: the branches return different structures: {trees}")
    if isinstance(first, dict):
        return {k: _map(fn, *(t[k] for t in trees)) for k in first}
    return type(first)(_map(fn, *items) for items in zip(*trees))


def _branch(pred: core.Variable, fn: Callable[[], Any], helper: LayerHelper) -> Any:
    parent = _program().current_block()
    block = ConditionalBlock([pred], is_scalar_condition=True)
    result = None
    with block.block():
        got = fn()
        if got is not None:
            result = _map(lambda v: _copy_to_parent(v, parent, helper), got)
    return result


def select_input(inputs: list[core.Variable], mask: core.Variable) -> Variable:
    """``inputs[mask]`` (``mask``: an int32 of one element): the result of the branch that ran."""
    helper = LayerHelper("select_input")
    for k, var in enumerate(inputs):
        helper.check_variable(var, f"inputs[{k}]")
    helper.check_variable(mask, "mask")
    out = _new_like(helper.block, helper, inputs[0])
    helper.append_op("select_input", {"X": list(inputs), "Mask": [mask]}, {"Out": [out]})
    return out


def cond(
    pred: core.Variable,
    true_fn: Callable[[], Any] | None = None,
    false_fn: Callable[[], Any] | None = None,
    name: str | None = None,
) -> Any:
    """``true_fn()`` when ``pred`` (a bool of one element) holds, else ``false_fn()`` (Fluid 1.8's ``layers.cond``):
    each branch a ``conditional_block``, their results (variables, or equally nested lists, tuples, dicts of
    them) merged with ``select_input``. None when neither branch returns anything."""
    helper = LayerHelper("cond", name)
    _check_condition(helper, pred, "pred")
    for fn, what in ((true_fn, "true_fn"), (false_fn, "false_fn")):
        if fn is not None and not callable(fn):
            raise helper.error(f"{what} must be callable, got {fn!r}")
    true_out = _branch(pred, true_fn, helper) if true_fn is not None else None
    false_out = None
    if false_fn is not None:
        false_out = _branch(math_layers.logical_not(pred), false_fn, helper)
    if true_out is None and false_out is None:
        return None
    if true_out is None or false_out is None:
        missing = "true_fn" if true_out is None else "false_fn"
        raise helper.error(f"{missing} returns None (or is missing) while the other branch returns values")
    mask = helper.create_tmp("int32", stop_gradient=True)
    helper.append_op(
        "cast",
        {"X": [pred]},
        {"Out": [mask]},
        {"in_dtype": DTYPE_TO_PROTO["bool"], "out_dtype": DTYPE_TO_PROTO["int32"]},
    )
    return _map(lambda f, t: select_input([f, t], mask), false_out, true_out)


class Switch:
    """Fluid's ``layers.Switch``: the block of the first :meth:`case` whose condition holds runs, else the
    :meth:`default` one. Use as ``with Switch() as switch:``."""

    def __init__(self, name: str | None = None) -> None:
        self.helper = LayerHelper("switch", name)
        self.pre_not_conditions: list[core.Variable] = []
        self.inside = False

    def __enter__(self) -> Switch:
        self.inside = True
        return self

    def __exit__(self, *exc: object) -> None:
        self.inside = False

    @contextlib.contextmanager
    def case(self, condition: core.Variable) -> Iterator[Block]:
        """A case: its block runs when ``condition`` holds and no earlier case's did."""
        if not self.inside:
            raise self.helper.error("case() must be called inside 'with Switch() as switch:'")
        _check_condition(self.helper, condition, "condition")
        if not self.pre_not_conditions:
            holds = condition
            self.pre_not_conditions.append(math_layers.logical_not(condition))
        else:
            previous = self.pre_not_conditions[-1]
            self.pre_not_conditions.append(math_layers.logical_and(previous, math_layers.logical_not(condition)))
            holds = math_layers.logical_and(previous, condition)
        with ConditionalBlock([holds], is_scalar_condition=True).block() as block:
            yield block

    @contextlib.contextmanager
    def default(self) -> Iterator[Block]:
        """The block that runs when no case's condition holds."""
        if not self.pre_not_conditions:
            raise self.helper.error("default() needs a case() before it")
        with ConditionalBlock([self.pre_not_conditions[-1]], is_scalar_condition=True).block() as block:
            yield block


# -- tensor arrays and counters ---------------------------------------------------------------------------------


def create_array(dtype: Any, name: str | None = None) -> Variable:
    """An empty tensor array (``lod_tensor_array`` variable) of ``dtype`` in the block being built."""
    name = name or unique_name.generate("array")
    array = Variable(name, kind=VarKind.LOD_TENSOR_ARRAY, dtype=to_dtype(dtype), shape=None)
    return _program().current_block().add_var(array)


def _check_array(helper: LayerHelper, array: Any, arg: str) -> core.Variable:
    helper.check_variable(array, arg)
    if array.kind is not VarKind.LOD_TENSOR_ARRAY:
        raise helper.error(f"{arg} {array.name!r} must be a tensor array (create_array), not {array.kind.text}")
    return array


def array_write(x: core.Variable, i: core.Variable, array: core.Variable | None = None) -> Variable:
    """``array[i] = x`` (``write_to_array``; a new array of ``x``'s dtype when ``array`` is None); returns the
    array."""
    helper = LayerHelper("array_write")
    helper.check_variable(x, "x")
    helper.check_variable(i, "i")
    if array is None:
        array = create_array(tensor_dtype(x))
    _check_array(helper, array, "array")
    helper.append_op("write_to_array", {"X": [x], "I": [i]}, {"Out": [array]})
    return array  # type: ignore[return-value]


def array_read(array: core.Variable, i: core.Variable) -> Variable:
    """``array[i]`` (``read_from_array``)."""
    helper = LayerHelper("array_read")
    _check_array(helper, array, "array")
    helper.check_variable(i, "i")
    out = helper.create_tmp(array.dtype)
    helper.append_op("read_from_array", {"X": [array], "I": [i]}, {"Out": [out]})
    return out


def array_length(array: core.Variable) -> Variable:
    """The number of tensors in ``array``, an int64 of shape [1] (``lod_array_length``)."""
    helper = LayerHelper("array_length")
    _check_array(helper, array, "array")
    out = helper.create_tmp("int64", stop_gradient=True)
    helper.append_op("lod_array_length", {"X": [array]}, {"Out": [out]})
    return out


def tensor_array_to_tensor(
    input: core.Variable, axis: int = 1, name: str | None = None, use_stack: bool = False
) -> tuple[Variable, Variable]:
    """The tensors of ``input`` concatenated along ``axis`` (stacked along a new ``axis`` with ``use_stack``),
    and their sizes along it (int32)."""
    helper = LayerHelper("tensor_array_to_tensor", name)
    _check_array(helper, input, "input")
    out = helper.create_tmp(input.dtype)
    index = helper.create_tmp("int32", stop_gradient=True)
    helper.append_op(
        "tensor_array_to_tensor",
        {"X": [input]},
        {"Out": [out], "OutIndex": [index]},
        {"axis": int(axis), "use_stack": bool(use_stack)},
    )
    return out, index


def increment(x: core.Variable, value: float = 1.0, in_place: bool = True) -> Variable:
    """``x + value`` (``x`` of one element, a loop counter say), into ``x`` itself with ``in_place``."""
    helper = LayerHelper("increment")
    helper.check_variable(x, "x")
    out = x if in_place else helper.create_tmp(tensor_dtype(x), stop_gradient=True)
    helper.append_op("increment", {"X": [x]}, {"Out": [out]}, {"step": float(value)})
    return out  # type: ignore[return-value]
