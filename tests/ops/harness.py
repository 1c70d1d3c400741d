"""Table-driven op tests in the style of ONNX's reference evaluator, independent of the executor.

A :class:`Case` is data: input values by slot, attributes, expected outputs
computed independently in plain numpy, and the input slots to gradient-check.
The harness calls the registered kernels directly (:func:`run_op`) with the
calling convention of :mod:`blockir.ir.schema`, and checks

- the forward outputs against ``expected`` (dtype exactly, values to rtol/atol),
- shape/dtype inference against what the kernel produced (:func:`check_infer`),
- the gradient ops made by the schema's gradient maker against central finite
  differences in float64 (:func:`check_grad`).

The same cases serve every array module: pass ``xp`` (cupy for the GPU tier).
"""

from __future__ import annotations

import zlib
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from blockir.ir import attrs as ir_attrs
from blockir.ir.core import Block, Operator, Program
from blockir.ir.dtypes import VarKind
from blockir.ir.schema import (
    COMMON_ATTRS,
    EMPTY_VAR,
    REQUIRED,
    GradContext,
    KernelContext,
    OpSchema,
    OpSpec,
    grad_name,
    lookup,
)
from blockir.ops.values import LoDTensor, SelectedRows


@dataclass
class Case:
    """One test case of an op: a value per input slot (a list for a duplicable slot), attributes,
    the expected value of some output slots, the input slots to gradient-check (their values must be
    float64), tolerances, LoD offsets per input slot, and a name for the test id."""

    inputs: dict[str, Any]
    attrs: dict[str, Any] = field(default_factory=dict)
    expected: dict[str, Any] = field(default_factory=dict)
    grad: tuple[str, ...] = ()
    rtol: float = 1e-5
    atol: float = 1e-6
    lod: dict[str, list[list[int]]] = field(default_factory=dict)
    name: str = ""

    def values(self) -> dict[str, Any]:
        """The inputs, with LoDTensors for the slots ``lod`` names (every entry of a duplicable slot)."""

        def wrap(slot: str, value: Any) -> Any:
            if slot not in self.lod:
                return value
            if isinstance(value, list):
                return [LoDTensor(v, self.lod[slot]) for v in value]
            return LoDTensor(value, self.lod[slot])

        return {slot: wrap(slot, v) for slot, v in self.inputs.items()}


# -- running kernels -------------------------------------------------------------------------------


def kernel_attrs(schema: OpSchema, attrs: Mapping[str, Any]) -> dict[str, Any]:
    """Every schema attribute, normalised to its type as a program would store it, defaults filled in."""
    unknown = set(attrs) - {a.name for a in schema.attrs} - set(COMMON_ATTRS)
    if unknown:
        raise AssertionError(f"{schema.type}: attributes {sorted(unknown)} are not in the schema")
    out = {}
    for adef in schema.attrs:
        value = attrs.get(adef.name, adef.default)
        if value is REQUIRED:
            raise AssertionError(f"{schema.type}: the case must give attribute {adef.name!r}")
        out[adef.name] = ir_attrs.normalize(value, adef.type, adef.name)
    return out


def _map(value: Any, fn: Callable[[Any], Any]) -> Any:
    """``fn`` applied to the arrays of a dense, LoDTensor or SelectedRows value."""
    if isinstance(value, LoDTensor):
        return LoDTensor(fn(value.data), value.lod)
    if isinstance(value, SelectedRows):
        return SelectedRows(value.rows, fn(value.values), value.height)
    return fn(value)


def to_host(value: Any) -> Any:
    return _map(value, lambda a: a.get() if hasattr(a, "get") else np.asarray(a))


def run_op(
    op_type: str,
    inputs: Mapping[str, Any],
    attrs: Mapping[str, Any] | None = None,
    wants: Sequence[bool] | None = None,
    xp: Any = np,
) -> dict[str, Any]:
    """Run the registered kernel of ``op_type`` once; return its result per output slot (host values).

    As the executor does: inputs of slots not declared ``lod=True`` lose their
    LoD, outputs named in ``share_lod`` get the LoD of their source input back,
    and ``wants`` (default: every output) tells the kernel which outputs are read.
    """
    schema = lookup(op_type)
    if schema.kernel is None:
        raise AssertionError(f"{op_type} has no kernel")
    args = []
    for slot in schema.inputs:
        value = inputs.get(slot.name)
        if slot.duplicable:
            value = [_arg(v, slot.lod, xp) for v in (value or [])]
        elif value is not None:
            value = _arg(value, slot.lod, xp)
        args.append(value)
    wants = tuple(wants) if wants is not None else (True,) * len(schema.outputs)
    ctx = KernelContext(xp=xp, attrs=kernel_attrs(schema, attrs or {}), wants=wants, op_text=f"{op_type} (harness)")
    result = schema.kernel(ctx, *args)
    results = (result,) if len(schema.outputs) == 1 else tuple(result)
    assert len(results) == len(schema.outputs), f"{op_type}: kernel returned {len(results)} values"
    out = {}
    for slot, value in zip(schema.outputs, results):
        source = next((inputs.get(src) for src, dst in schema.share_lod if dst == slot.name), None)
        if isinstance(source, list):
            source = source[0] if source else None
        if isinstance(value, list):
            out[slot.name] = [_shared(to_host(v), source) for v in value]
        else:
            out[slot.name] = None if value is None else _shared(to_host(value), source)
    return out


def _arg(value: Any, keep_lod: bool, xp: Any) -> Any:
    if isinstance(value, LoDTensor) and not keep_lod:
        value = value.data
    return _map(value, xp.asarray)


def _shared(value: Any, source: Any) -> Any:
    if isinstance(source, LoDTensor) and not isinstance(value, (LoDTensor, SelectedRows)) and value is not None:
        return LoDTensor(value, source.lod)
    return value


# -- comparing values --------------------------------------------------------------------------------


def assert_value_close(actual: Any, expected: Any, rtol: float, atol: float, what: str) -> None:
    """Same kind (dense / LoDTensor / SelectedRows), same dtype and shape, values within tolerance."""
    if isinstance(expected, list):
        assert isinstance(actual, list) and len(actual) == len(expected), f"{what}: {len(expected)} values expected"
        for i, (a, e) in enumerate(zip(actual, expected)):
            assert_value_close(a, e, rtol, atol, f"{what}[{i}]")
        return
    if isinstance(expected, SelectedRows):
        assert isinstance(actual, SelectedRows), f"{what}: expected SelectedRows, got {type(actual).__name__}"
        assert actual.height == expected.height, f"{what}: height {actual.height} != {expected.height}"
        np.testing.assert_array_equal(np.asarray(actual.rows), np.asarray(expected.rows), err_msg=f"{what}: rows")
        actual, expected = actual.values, expected.values
    elif isinstance(expected, LoDTensor):
        assert isinstance(actual, LoDTensor), f"{what}: expected a LoDTensor, got {type(actual).__name__}"
        assert actual.lod == expected.lod, f"{what}: LoD {actual.lod} != {expected.lod}"
        actual, expected = actual.data, expected.data
    elif isinstance(actual, LoDTensor):
        actual = actual.data
    expected = np.asarray(expected)
    assert isinstance(actual, np.ndarray), f"{what}: expected an array, got {type(actual).__name__}"
    assert actual.dtype == expected.dtype, f"{what}: dtype {actual.dtype}, expected {expected.dtype}"
    assert actual.shape == expected.shape, f"{what}: shape {actual.shape}, expected {expected.shape}"
    np.testing.assert_allclose(actual, expected, rtol=rtol, atol=atol, err_msg=what)


def check_forward(op_type: str, case: Case, xp: Any = np) -> dict[str, Any]:
    """Run the case and compare every ``expected`` output; return all outputs."""
    assert case.expected, f"{op_type} case {case.name!r} expects nothing"
    out = run_op(op_type, case.values(), case.attrs, xp=xp)
    for slot, expected in case.expected.items():
        assert slot in out, f"{op_type}: no output slot {slot!r}"
        assert_value_close(out[slot], expected, case.rtol, case.atol, f"{op_type} {case.name} {slot}")
    return out


# -- shape inference -----------------------------------------------------------------------------------


def _var_names(prefix: str, slot: str, value: Any) -> list[str]:
    if isinstance(value, list):
        return [f"{prefix}.{slot}_{i}" for i in range(len(value))]
    return [f"{prefix}.{slot}"]


def _declare(block: Block, name: str, value: Any, unknown_batch: bool = False) -> None:
    """A variable of ``value``'s kind, dtype, shape and LoD level (dim 0 unknown with ``unknown_batch``
    for values of rank 2 or more, as for the batch of data a DSL program reads)."""
    if not hasattr(value, "shape") or not hasattr(value, "dtype"):
        raise AssertionError(f"{name}: cannot declare a variable for a {type(value).__name__}")
    shape = list(value.shape)
    if unknown_batch and len(shape) >= 2:
        shape[0] = -1
    kind = VarKind.SELECTED_ROWS if isinstance(value, SelectedRows) else VarKind.LOD_TENSOR
    lod_level = len(value.lod) if isinstance(value, LoDTensor) else 0
    block.create_var(name, kind=kind, dtype=np.dtype(value.dtype).name, shape=shape, lod_level=lod_level)


def _declare_outputs(block: Block, names: Sequence[str]) -> None:
    for name in names:
        if name != EMPTY_VAR and not block.has_var(name):
            block.create_var(name, dtype=None, shape=None)  # inference must set them


def build_op(
    op_type: str,
    case: Case,
    outputs: Mapping[str, Any] | None = None,
    unknown_batch: bool = False,
) -> tuple[Operator, dict[str, Any]]:
    """A one-op program for ``case`` (inference runs as the op is appended); the op and the values by name.

    ``outputs`` (values by output slot) says how many variables each output slot
    binds; without it every output slot binds one variable.
    """
    if outputs is None:
        outputs = {slot.name: None for slot in lookup(op_type).outputs}
    block = Program().global_block()
    values = case.values()
    env: dict[str, Any] = {}
    in_names = {}
    for slot, value in values.items():
        in_names[slot] = _var_names("in", slot, value)
        for name, v in zip(in_names[slot], value if isinstance(value, list) else [value]):
            _declare(block, name, v, unknown_batch)
            env[name] = v
    out_names = {}
    for slot, value in outputs.items():
        out_names[slot] = _var_names("out", slot, value)
        _declare_outputs(block, out_names[slot])
        env.update(zip(out_names[slot], value if isinstance(value, list) else [value]))
    return block.append_op(op_type, in_names, out_names, case.attrs), env


def assert_inferred(op: Operator, env: Mapping[str, Any], what: str) -> None:
    """Each output variable of ``op`` agrees with the value computed for it (-1 dims match anything)."""
    for slot, names in op.outputs.items():
        for name in names:
            value = env.get(name)
            if name == EMPTY_VAR or value is None:
                continue
            var = op.block.var(name)
            where = f"{what}: {slot} {name!r}"
            assert var.shape is not None and var.dtype is not None, f"{where}: inference set no shape/dtype"
            assert var.dtype == np.dtype(value.dtype).name, f"{where}: inferred {var.dtype}, kernel gave {value.dtype}"
            shape = tuple(value.shape)
            assert len(var.shape) == len(shape) and all(d < 0 or d == a for d, a in zip(var.shape, shape)), (
                f"{where}: inferred shape {list(var.shape)}, kernel gave {list(shape)}"
            )
            if isinstance(value, SelectedRows):
                assert var.kind is VarKind.SELECTED_ROWS, f"{where}: the kernel gave SelectedRows, inferred {var.kind}"
            if isinstance(value, LoDTensor):
                assert var.lod_level == len(value.lod), f"{where}: lod_level {var.lod_level}, value {value.lod}"


def check_infer(op_type: str, case: Case) -> None:
    """Inference on variables of the inputs' shapes agrees with the kernel's outputs, both with known
    shapes and with the batch dim (dim 0 of inputs of rank >= 2) unknown."""
    outputs = {k: v for k, v in run_op(op_type, case.values(), case.attrs).items() if v is not None}
    for unknown_batch in (False, True):
        op, env = build_op(op_type, case, outputs, unknown_batch)
        assert_inferred(op, env, f"{op_type} {case.name} (unknown batch: {unknown_batch})")


# -- gradients ------------------------------------------------------------------------------------------


def _is_float(value: Any) -> bool:
    data = value.data if isinstance(value, LoDTensor) else value
    return isinstance(data, np.ndarray) and data.dtype.kind == "f"


def grad_specs(
    op_type: str,
    case: Case,
    only: Sequence[str] | None = None,
) -> tuple[list[OpSpec], Operator, dict[str, Any]]:
    """The gradient ops the schema's maker builds for ``case`` when the inputs of ``only`` (default:
    ``case.grad``) and every float output need a gradient; also the forward op and values by name."""
    schema = lookup(op_type)
    outputs = {k: v for k, v in run_op(op_type, case.values(), case.attrs).items() if v is not None}
    op, env = build_op(op_type, case, outputs)
    wanted = {n for slot in (case.grad if only is None else only) for n in op.inputs[slot]}
    for slot in schema.outputs:
        if not slot.no_grad and slot.name in outputs:
            wanted |= {n for n, v in zip(op.outputs[slot.name], _listed(outputs[slot.name])) if _is_float(v)}
    assert schema.grad is not None, f"{op_type} has no gradient maker"
    specs = schema.grad(GradContext(op, lambda name: grad_name(name) if name in wanted else EMPTY_VAR))
    return specs, op, env


def _listed(value: Any) -> list[Any]:
    return value if isinstance(value, list) else [value]


def _dense(value: Any) -> np.ndarray:
    if isinstance(value, SelectedRows):
        return value.to_dense()
    return np.asarray(value.data if isinstance(value, LoDTensor) else value)


def run_grad_ops(specs: Sequence[OpSpec], block: Block, env: dict[str, Any], what: str, xp: Any = np) -> None:
    """Append and run ``specs`` in order (kernels computing with ``xp``) on the values in ``env``, adding
    what they write (a gradient written twice is summed); check each gradient op's inference against its
    results, and that it computed nothing ``ctx.wants`` said nobody reads (its kernel returns None there)."""
    for spec in specs:
        _declare_outputs(block, [n for names in spec.outputs.values() for n in names])
        gop = block.append_op(spec.type, spec.inputs, spec.outputs, spec.attrs)
        gschema = lookup(spec.type)
        inputs = {}
        for slot in gschema.inputs:
            names = spec.inputs.get(slot.name, [])
            missing = [n for n in names if n not in env]
            assert not missing, f"{what}: {spec.type} reads {missing}, which nothing computed"
            if names:
                inputs[slot.name] = [env[n] for n in names] if slot.duplicable else env[names[0]]
        wants = [any(n != EMPTY_VAR for n in spec.outputs.get(s.name, [])) for s in gschema.outputs]
        result = run_op(spec.type, inputs, spec.attrs, wants, xp)
        written = {}
        for slot, want in zip(gschema.outputs, wants):
            assert want or result[slot.name] is None, (
                f"{what}: {spec.type} computed {slot.name}, which nothing reads (ctx.wants)"
            )
            if want:
                for name, value in zip(spec.outputs[slot.name], _listed(result[slot.name])):
                    if name != EMPTY_VAR:
                        written[name] = value
        assert_inferred(gop, written, f"{what}: {spec.type}")
        for name, value in written.items():
            env[name] = _dense(env[name]) + _dense(value) if name in env else value


def check_grad(op_type: str, case: Case, only: Sequence[str] | None = None, eps: float = 1e-6, xp: Any = np) -> None:
    """The gradient ops' input gradients (their kernels computing with ``xp``) equal central finite
    differences of ``sum(out * upstream)`` (computed with numpy).

    ``upstream`` is a random float64 array per differentiable output whose gradient
    the gradient ops read (an output whose gradient they ignore, such as
    ``softmax_with_cross_entropy``'s Softmax, is left out of the objective).
    ``only`` restricts the checked inputs to a subset of ``case.grad``: the other
    gradients are then ``@EMPTY@`` and must not be needed.
    """
    slots = tuple(case.grad if only is None else only)
    for slot in slots:
        for v in _listed(case.inputs[slot]):
            assert np.asarray(v).dtype == np.float64, f"{op_type} {case.name}: gradient input {slot} must be float64"
    specs, op, env = grad_specs(op_type, case, slots)
    assert specs, f"{op_type} {case.name}: the gradient maker made no op"
    read = {n for spec in specs for names in spec.inputs.values() for n in names}
    rng = np.random.default_rng(zlib.crc32(f"{op_type}/{case.name}".encode()))
    upstream: dict[str, dict[int, np.ndarray]] = {}
    for slot, names in op.outputs.items():
        for i, name in enumerate(names):
            if grad_name(name) in read:
                value = _dense(env[name])
                env[grad_name(name)] = rng.standard_normal(value.shape)
                _declare(op.block, grad_name(name), env[grad_name(name)])
                upstream.setdefault(slot, {})[i] = env[grad_name(name)]
    assert upstream, f"{op_type} {case.name}: the gradient ops read no output gradient"
    run_grad_ops(specs, op.block, env, f"{op_type} {case.name}", xp)

    def objective(inputs: dict[str, Any]) -> float:
        out = run_op(op_type, Case(inputs, lod=case.lod).values(), case.attrs)
        return sum(
            float(np.sum(_dense(_listed(out[slot])[i]) * u)) for slot, us in upstream.items() for i, u in us.items()
        )

    for slot in slots:
        for i, name in enumerate(op.inputs[slot]):
            assert grad_name(name) in env, f"{op_type} {case.name}: no gradient computed for {slot} {name!r}"
            analytic = _dense(env[grad_name(name)])
            index = i if isinstance(case.inputs[slot], list) else None
            numeric = _numeric_grad(objective, case.inputs, slot, index, eps)
            np.testing.assert_allclose(
                analytic, numeric, rtol=case.rtol, atol=case.atol, err_msg=f"{op_type} {case.name}: d/d{slot} ({name})"
            )


def _numeric_grad(
    objective: Callable[[dict[str, Any]], float], inputs: dict[str, Any], slot: str, index: int | None, eps: float
) -> np.ndarray:
    """Central differences of ``objective`` over every element of input ``slot`` (entry ``index``)."""
    base = inputs[slot] if index is None else inputs[slot][index]
    grad = np.zeros(base.shape)
    for pos in np.ndindex(*base.shape):
        total = 0.0
        for sign in (1.0, -1.0):
            moved = base.copy()
            moved[pos] += sign * eps
            trial = dict(inputs)
            if index is None:
                trial[slot] = moved
            else:
                trial[slot] = [moved if i == index else v for i, v in enumerate(inputs[slot])]
            total += sign * objective(trial)
        grad[pos] = total / (2 * eps)
    return grad
