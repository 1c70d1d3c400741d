"""Reverse-mode automatic differentiation of a block: :func:`append_backward` (Fluid's algorithm).

1. Which variables need a gradient: walking the block forward, a float tensor
   that is not ``stop_gradient`` (nor in ``no_grad_set``) needs one when it is a
   leaf (a trainable parameter, say) or is written by an op reading a variable
   that needs one; walking backward from the loss, only ops on a path from such
   a variable to the loss are kept.
2. ``loss@GRAD`` is filled with ones (``fill_constant``, role Backward|Loss).
3. Each kept op, last to first, asks its schema's gradient maker for its
   gradient ops; the maker sees ``X@GRAD`` for every variable needing a
   gradient and ``@EMPTY@`` for the others (and for ``no_grad`` slots). Gradient
   ops writing only ``@EMPTY@`` are dropped.
4. A gradient written by several gradient ops is renamed ``X@GRAD@RENAME@k``
   at each writer and summed into ``X@GRAD`` (``sum``) before its first reader.
5. Gradient variables take their forward variable's dtype, shape and LoD level
   (the gradient op's inference may refine them, e.g. a SelectedRows gradient of
   a sparse ``lookup_table``); gradient ops take their forward op's device and
   name scope, role Backward, and the op writing a parameter's final gradient
   records ``op_role_var = [param, grad]``.
"""

from __future__ import annotations

import collections
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import NamedTuple

from blockir.dsl import framework
from blockir.dsl.variable import Variable, tensor_dtype, tensor_shape
from blockir.errors import BlockirError
from blockir.ir import core
from blockir.ir.core import Block, Operator
from blockir.ir.dtypes import DTYPE_TO_PROTO, FLOAT_DTYPES, VarKind
from blockir.ir.schema import EMPTY_VAR, GradContext, OpRole, OpSchema, OpSpec, Slot, find, grad_name

__all__ = ["append_backward"]

RENAME = "@RENAME@"
_DIFFERENTIABLE = (VarKind.LOD_TENSOR, VarKind.LOD_TENSOR_ARRAY)


def append_backward(
    loss: core.Variable,
    parameter_list: Sequence[str | core.Variable] | None = None,
    no_grad_set: Iterable[str | core.Variable] | None = None,
) -> list[tuple[core.Variable, core.Variable]]:
    """Append the gradient ops of ``loss`` to its block; return ``[(param, param@GRAD), ...]``.

    ``parameter_list``: the parameters (names or variables) to differentiate
    (default: every trainable parameter of the program); the others get no
    gradient. ``no_grad_set``: variables no gradient flows through.
    Parameters the loss does not depend on are left out of the result.
    """
    block = _loss_block(loss)
    params = _parameters(block, parameter_list)
    no_grad = {_name(v) for v in no_grad_set or ()}
    no_grad |= {p.name for p in block.program.all_parameters() if p.name not in {q.name for q in params}}
    analysis = _Analysis(block, loss.name, no_grad)
    if loss.name not in analysis.needed:
        return []
    _mark_loss_op(analysis)
    pending = [_loss_gradient(block, loss, analysis)]
    for op in reversed(analysis.path):
        pending.extend(_gradient_ops(op, analysis))
    pending = _accumulate(pending, analysis)
    grads = {p.name: grad_name(p.name) for p in params if p.name in analysis.needed}
    _record_role_vars(pending, grads)
    _materialize(block, pending, analysis)
    return [(p, block.var(grads[p.name])) for p in params if p.name in grads]


def _name(v: str | core.Variable) -> str:
    return v if isinstance(v, str) else v.name


def _loss_block(loss: core.Variable) -> Block:
    if not isinstance(loss, core.Variable) or loss.block is None:
        raise BlockirError(f"append_backward: loss must be a variable of a program, got {loss!r}")
    block = loss.block
    if block.idx != 0:
        raise BlockirError(
            f"append_backward: loss {loss.name!r} is in block {block.idx}; only losses of the "
            "global block are supported"
        )
    if loss.dtype not in FLOAT_DTYPES or loss.shape is None or any(d < 0 for d in loss.shape):
        raise BlockirError(
            f"append_backward: loss {loss.name!r} must be a float tensor of known shape, got "
            f"{loss.dtype} {list(loss.shape or ())} (reduce it, e.g. with layers.mean)"
        )
    if block.has_var(grad_name(loss.name)):
        raise BlockirError(
            f"append_backward: {grad_name(loss.name)!r} exists already; the program has been "
            "differentiated for this loss"
        )
    return block


def _parameters(block: Block, parameter_list: Sequence[str | core.Variable] | None) -> list[core.Variable]:
    if parameter_list is None:
        return [p for p in block.program.all_parameters() if getattr(p, "trainable", True)]
    params = []
    for item in parameter_list:
        var = block.find_var_recursive(_name(item))
        if not var.is_parameter:
            raise BlockirError(f"append_backward: {var.name!r} in parameter_list is not a parameter")
        params.append(var)
    return params


@dataclass
class _Analysis:
    """Which variables need a gradient and which ops lie on a path from them to the loss.

    For the block of a loop or a conditional (:func:`_block_gradient`): ``targets`` are the outer variables whose
    gradients flow in (``loss`` is then empty), ``sources`` the outer variables it reads that need a gradient,
    ``carried`` the variables a loop carries from one iteration to the next (read, then written): what one
    iteration needs a gradient of, the one before must produce, so both walks repeat until nothing changes."""

    block: Block
    loss: str
    no_grad: set[str]
    targets: set[str] = field(default_factory=set)
    sources: set[str] = field(default_factory=set)
    carried: set[str] = field(default_factory=set)
    into: int = -1  # the block the gradient ops go into (a loop's gradient block), when not ``block``
    needed: set[str] = field(default_factory=set)  # variables whose gradient is computed
    path: list[Operator] = field(default_factory=list)  # forward ops to differentiate, in order
    producer: dict[str, Operator] = field(default_factory=dict)  # variable -> forward op writing it

    def __post_init__(self) -> None:
        ops = self.block.ops
        for op in ops:
            for name in op.output_names():
                self.producer[name] = op
        requires = {n for op in ops for n in _diff_inputs(op) if n not in self.producer and self.eligible(n)}
        requires |= {n for n in self.sources if self.eligible(n)}
        while True:
            active = []
            before = len(requires)
            for op in ops:
                is_active = any(n in requires for n in _diff_inputs(op))
                active.append(is_active)
                if is_active:
                    requires |= {n for n in _diff_outputs(op) if self.eligible(n)}
            if len(requires) == before:
                break
        targets = {n for n in (self.loss, *self.targets) if n in requires}
        while True:
            self.needed, self.path = set(targets), []
            for op, is_active in zip(reversed(ops), reversed(active)):
                if is_active and any(n in self.needed for n in _diff_outputs(op)):
                    self.path.append(op)
                    self.needed |= {n for n in _diff_inputs(op) if n in requires}
            if self.needed & self.carried <= targets:
                break
            targets |= self.needed & self.carried
        self.path.reverse()

    def eligible(self, name: str) -> bool:
        """Whether ``name`` can carry a gradient at all (float dense tensor, not stopped)."""
        if name == EMPTY_VAR or name in self.no_grad:
            return False
        var = self.block.find_var_recursive(name)
        return var.kind in _DIFFERENTIABLE and var.dtype in FLOAT_DTYPES and not var.stop_gradient

    def grad_of(self, name: str) -> str:
        return grad_name(name) if name in self.needed else EMPTY_VAR


def _slot_names(slots: Mapping[str, Sequence[str]], declared: tuple[Slot, ...] | None) -> list[str]:
    """Names in the slots not marked ``no_grad`` (every slot when the op has no schema)."""
    stopped = {s.name for s in declared or () if s.no_grad}
    return [n for slot, names in slots.items() if slot not in stopped for n in names]


def _diff_inputs(op: Operator) -> list[str]:
    schema = find(op.type)
    return _slot_names(op.inputs, schema.inputs if schema else None)


def _diff_outputs(op: Operator) -> list[str]:
    schema = find(op.type)
    return _slot_names(op.outputs, schema.outputs if schema else None)


class _GradContext(GradContext):
    """GradContext whose ``no_grad`` input slots never ask for a gradient."""

    def __init__(self, op: Operator, schema: OpSchema, analysis: _Analysis) -> None:
        super().__init__(op, analysis.grad_of)
        self.schema = schema

    def input_grad(self, slot: str) -> list[str]:
        declared = self.schema.input_slot(slot)
        if declared is not None and declared.no_grad:
            return [EMPTY_VAR] * len(self.input(slot))
        return super().input_grad(slot)


@dataclass
class _Pending:
    """A gradient op to append, with the common attributes it will get."""

    spec: OpSpec
    device: str
    namescope: str
    role: int = OpRole.BACKWARD
    role_var: list[str] = field(default_factory=list)

    def output_positions(self) -> Iterable[tuple[list[str], int]]:
        for names in self.spec.outputs.values():
            for i in range(len(names)):
                yield names, i


def _loss_gradient(block: Block, loss: core.Variable, analysis: _Analysis) -> _Pending:
    op = analysis.producer.get(loss.name)
    spec = OpSpec(
        "fill_constant",
        {},
        {"Out": [grad_name(loss.name)]},
        {"shape": list(tensor_shape(loss)), "dtype": DTYPE_TO_PROTO[tensor_dtype(loss)], "value": 1.0},
    )
    return _Pending(
        spec,
        op.device if op else "",
        op.attrs.get("op_namescope", "") if op else "",
        role=OpRole.BACKWARD | OpRole.LOSS,
    )


def _mark_loss_op(analysis: _Analysis) -> None:
    """The op computing the loss gets role Forward|Loss (``op_device`` stays the last attribute)."""
    op = analysis.producer.get(analysis.loss)
    if op is None:  # the loss is a leaf (a parameter, say)
        return
    device = op.attrs.get("op_device")
    if device is not None and "op_role" not in op.attrs:
        op.remove_attr("op_device")
    op.set_attr("op_role", OpRole.FORWARD | OpRole.LOSS)
    if device is not None:
        op.set_attr("op_device", device)


def _gradient_ops(op: Operator, analysis: _Analysis) -> list[_Pending]:
    schema = find(op.type)
    device, namescope = op.device, op.attrs.get("op_namescope", "")
    if op.type in _BLOCK_GRADIENTS:
        spec = _block_gradient(op, analysis, *_BLOCK_GRADIENTS[op.type])
        return [] if spec is None else [_Pending(spec, device, namescope)]
    if schema is None or schema.grad is None:
        raise BlockirError(
            f"append_backward: op {op.type!r} has no gradient but lies between a variable that "
            f"needs one and the loss; mark its inputs stop_gradient or list them in no_grad_set\n"
            f"  op: {op}"
        )
    if op.sub_blocks():
        raise BlockirError(f"append_backward: ops with sub-blocks are not differentiable\n  op: {op}")
    pending = []
    for spec in schema.grad(_GradContext(op, schema, analysis)):
        spec = OpSpec(
            spec.type,
            {k: list(v) for k, v in spec.inputs.items()},
            {k: list(v) for k, v in spec.outputs.items()},
            dict(spec.attrs),
        )
        if any(n != EMPTY_VAR for names in spec.outputs.values() for n in names):
            pending.append(_Pending(spec, device, namescope))
    return pending


def _accumulate(pending: list[_Pending], analysis: _Analysis) -> list[_Pending]:
    """Rename gradients with several writers to ``X@GRAD@RENAME@k`` and sum them before their first reader."""
    writers: dict[str, list[tuple[list[str], int]]] = collections.defaultdict(list)
    renames: collections.Counter[str] = collections.Counter()
    out: list[_Pending] = []

    def flush(name: str) -> None:
        parts = []
        for names, i in writers[name]:
            names[i] = f"{name}{RENAME}{renames[name]}"
            renames[name] += 1
            parts.append(names[i])
        forward = name[: -len(grad_name(""))]
        device = _device_of(analysis, forward)
        producer = analysis.producer.get(forward)
        namescope = producer.attrs.get("op_namescope", "") if producer else ""
        total = _Pending(OpSpec("sum", {"X": parts}, {"Out": [name]}), device, namescope)
        writers[name] = [(total.spec.outputs["Out"], 0)]
        out.append(total)

    for item in pending:
        reads = {n for names in item.spec.inputs.values() for n in names}
        for name in sorted(reads):
            if len(writers.get(name, ())) > 1:
                flush(name)
        out.append(item)
        for names, i in item.output_positions():
            if names[i] != EMPTY_VAR and names[i] not in reads:  # an in-place gradient op is no new writer
                writers[names[i]].append((names, i))
    for name in [n for n, w in writers.items() if len(w) > 1]:
        flush(name)
    return out


def _device_of(analysis: _Analysis, forward: str) -> str:
    """Where a forward variable's gradient is summed: its producer's device, or its parameter's pinned device."""
    producer = analysis.producer.get(forward)
    if producer is not None:
        return producer.device
    return analysis.block.find_var_recursive(forward).device or ""


def _record_role_vars(pending: list[_Pending], grads: dict[str, str]) -> None:
    """The last op writing each parameter's gradient records ``[param, grad]`` in ``op_role_var``."""
    last: dict[str, _Pending] = {}
    for item in pending:
        for names, i in item.output_positions():
            last[names[i]] = item
    for param, grad in grads.items():
        last[grad].role_var.extend([param, grad])


def _materialize(block: Block, pending: list[_Pending], analysis: _Analysis) -> None:
    """Create the gradient variables and append the gradient ops."""
    forward_of = {grad_name(n): n for n in analysis.needed}
    # also the gradient of a variable needing none that a gradient op reads: zeros a gradient op fills in
    # (fill_zeros_like, as Paddle's backward does; for an output of split nothing differentiates)
    suffix = grad_name("")
    read = {n for item in pending for names in item.spec.inputs.values() for n in names}
    forward_of.update({n: n[: -len(suffix)] for n in read if n.endswith(suffix) and n not in forward_of})
    for item in pending:
        for names, i in item.output_positions():
            name = names[i]
            if name == EMPTY_VAR or block.has_var(name):
                continue
            base = name.split(RENAME)[0]
            if base not in forward_of:
                raise BlockirError(
                    f"append_backward: gradient op {item.spec.type} writes {name!r}, which is not "
                    "the gradient of a variable needing one"
                )
            fwd = block.find_var_recursive(forward_of[base])
            block.add_var(Variable(name, kind=fwd.kind, dtype=fwd.dtype, shape=fwd.shape, lod_level=fwd.lod_level))
        framework.append_op(
            block,
            item.spec.type,
            item.spec.inputs,
            item.spec.outputs,
            item.spec.attrs,
            role=item.role,
            role_var=item.role_var,
            device=item.device,
            namescope=item.namescope,
        )


# -- loops and conditionals -------------------------------------------------------------------------------------


class _BlockSlots(NamedTuple):
    """Where a loop or conditional names its variables and its gradient's: the slots of the forward op and of the
    gradient op (Paddle's ``while_grad`` and ``conditional_block_grad``)."""

    grad_type: str
    inputs: str  # the forward op's slot of the outer variables its block reads
    kept: str  # its output slot of what it kept for the gradient
    loop: bool  # whether the block runs repeatedly, carrying its outputs into the next run


_BLOCK_GRADIENTS = {
    "while": _BlockSlots("while_grad", "X", "StepScopes", loop=True),
    "conditional_block": _BlockSlots("conditional_block_grad", "Input", "Scope", loop=False),
}


def _block_gradient(
    op: Operator, analysis: _Analysis, grad_type: str, inputs: str, kept: str, loop: bool
) -> OpSpec | None:
    """The gradient op of a loop or a conditional: its block's gradient ops (this module's algorithm run on the
    block, the gradients of the op's outputs flowing in) in a new block, a child of the forward block so that it
    sees the variables the forward run kept; None when none of its inputs needs a gradient."""
    xs, outs = list(op.input(inputs)), list(op.output("Out"))
    x_grads = [analysis.grad_of(n) for n in xs]
    if all(g == EMPTY_VAR for g in x_grads):
        return None
    if not any(n != EMPTY_VAR for n in op.output(kept)) or (loop and op.attr("is_test")):
        raise BlockirError(
            f"append_backward: {op.type} keeps nothing for its gradient (its {kept} is not bound, or is_test is "
            f"set)\n  op: {op}"
        )
    sub = op.sub_blocks()[0]
    carried = set(xs) & set(outs) if loop else set()
    inner = _Analysis(
        sub,
        "",
        analysis.no_grad,
        targets={n for n in outs if n in analysis.needed},
        sources={n for n in xs if n in analysis.needed},
        carried=carried,
    )
    program = sub.program
    current = program.current_block_idx
    grad_block = program.create_block(parent_idx=analysis.block.idx if analysis.into < 0 else analysis.into)
    program.current_block_idx = current
    grad_block.forward_block_idx = sub.idx
    inner.into = grad_block.idx
    for name in sorted(inner.needed & set(outs)):  # the gradients flowing in
        fwd = sub.find_var_recursive(name)
        grad_block.add_var(
            Variable(grad_name(name), kind=fwd.kind, dtype=fwd.dtype, shape=fwd.shape, lod_level=fwd.lod_level)
        )
    pending = []
    for inner_op in reversed(inner.path):
        pending.extend(_gradient_ops(inner_op, inner))
    _materialize(grad_block, _accumulate(pending, inner), inner)
    out_grads = [grad_name(n) for n in outs if n in analysis.needed]
    attrs: dict[str, object] = {"sub_block": grad_block.idx}
    if loop:
        attrs.update(original_output_grad=out_grads, is_test=False)
    else:
        attrs["is_scalar_condition"] = op.attr("is_scalar_condition")
    forward = {inputs: xs, "Out": outs, "Out@GRAD": out_grads, kept: list(op.output(kept))}
    if not loop:
        forward["Cond"] = list(op.input("Cond"))
    return OpSpec(grad_type, forward, {f"{inputs}@GRAD": x_grads}, attrs)
