"""Every op of the library, tested from the case tables in ``cases_math`` and ``cases_nn``.

For each case: the forward outputs against the independent numpy values,
shape/dtype inference against the kernel's outputs, and (for cases naming
inputs in ``grad``) the gradient ops against finite differences, also with each
input's gradient requested alone. Coverage: every op type of the library has
cases or a behaviour test, and every gradient op is exercised by some case.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from blockir import ops
from blockir.errors import BlockirError, ShapeError
from blockir.ir.schema import registered
from tests.ops import (
    cases_activation,
    cases_control_flow,
    cases_conv,
    cases_conv3d,
    cases_fused,
    cases_fused_conv,
    cases_index,
    cases_logic,
    cases_math,
    cases_nn,
    cases_norm,
    cases_reduce,
    cases_rnn,
    cases_shape,
    cases_tensor,
    cases_vision,
)
from tests.ops.harness import Case, build_op, check_forward, check_grad, check_infer, grad_specs, run_op

ROOT = Path(__file__).resolve().parents[2]

TABLES = (
    cases_math,
    cases_activation,
    cases_reduce,
    cases_logic,
    cases_tensor,
    cases_index,
    cases_nn,
    cases_conv,
    cases_conv3d,
    cases_norm,
    cases_shape,
    cases_fused,
    cases_fused_conv,
    cases_vision,
    cases_rnn,
    cases_control_flow,
)
assert sum(len(t.CASES) for t in TABLES) == len({op for t in TABLES for op in t.CASES}), "an op has cases in two tables"
CASES: dict[str, list[Case]] = {op: cases for table in TABLES for op, cases in table.CASES.items()}
BEHAVIOUR_TESTED: dict[str, str] = {**cases_nn.BEHAVIOUR_TESTED, **cases_control_flow.BEHAVIOUR_TESTED}
LIBRARY = {schema.type for module in ops.MODULES for schema in module.SCHEMAS}


def _params(select=lambda case: True) -> list:
    return [
        pytest.param(op_type, case, id=f"{op_type}-{case.name or i}")
        for op_type, cases in sorted(CASES.items())
        for i, case in enumerate(cases)
        if select(case)
    ]


@pytest.mark.parametrize(("op_type", "case"), _params(lambda case: bool(case.expected)))
def test_forward(op_type: str, case: Case) -> None:
    check_forward(op_type, case)


@pytest.mark.parametrize(("op_type", "case"), _params())
def test_infer(op_type: str, case: Case) -> None:
    check_infer(op_type, case)


@pytest.mark.parametrize(("op_type", "case"), _params(lambda case: bool(case.grad)))
def test_grad(op_type: str, case: Case) -> None:
    check_grad(op_type, case)


@pytest.mark.parametrize(("op_type", "case"), _params(lambda case: len(case.grad) > 1))
def test_grad_of_each_input_alone(op_type: str, case: Case) -> None:
    for slot in case.grad:
        check_grad(op_type, case, only=(slot,))


def _error_params(table: str) -> list:
    entries = [entry for module in TABLES for entry in getattr(module, table, [])]
    return [
        pytest.param(op_type, case, pattern, id=f"{op_type}-{i}") for i, (op_type, case, pattern) in enumerate(entries)
    ]


@pytest.mark.parametrize(("op_type", "case", "pattern"), _error_params("INFER_ERRORS"))
def test_inference_rejects(op_type: str, case: Case, pattern: str) -> None:
    """Bad input is rejected when the op is built, by an error naming the op, its inputs and shapes."""
    with pytest.raises(ShapeError, match=pattern) as info:
        build_op(op_type, case)
    assert str(info.value).startswith(f"{op_type}: ") and f" = {op_type}(" in str(info.value)


@pytest.mark.parametrize(("op_type", "case", "pattern"), _error_params("KERNEL_ERRORS"))
def test_kernel_rejects(op_type: str, case: Case, pattern: str) -> None:
    """What inference cannot see (values, runtime shapes) is rejected by the kernel, naming the op."""
    with pytest.raises(BlockirError, match=pattern) as info:
        run_op(op_type, case.values(), case.attrs)
    assert f"{op_type} (harness)" in str(info.value)


def test_cases_are_well_formed() -> None:
    for op_type, cases in CASES.items():
        assert op_type in LIBRARY, f"cases for {op_type!r}, which the library does not register"
        assert cases, f"{op_type}: empty case list"
        names = [c.name for c in cases]
        assert len(set(names)) == len(names), f"{op_type}: case names repeat: {names}"
        assert any(c.expected for c in cases), f"{op_type}: no case checks values"


def test_every_op_is_covered() -> None:
    assert LIBRARY <= set(registered()), "library schemas missing from the registry"
    forward = sorted(t for t in LIBRARY if not t.endswith("_grad"))
    missing = [t for t in forward if t not in CASES and t not in BEHAVIOUR_TESTED]
    assert not missing, f"ops without test cases or a behaviour test: {missing}"
    for op_type, path in BEHAVIOUR_TESTED.items():
        assert op_type in LIBRARY, f"BEHAVIOUR_TESTED names {op_type!r}, which the library does not register"
        assert (ROOT / path).is_file(), f"{op_type}: behaviour test file {path} does not exist"
    made = {
        spec.type
        for op_type, cases in CASES.items()
        for case in cases
        if case.grad
        for spec in grad_specs(op_type, case)[0]
    }
    unexercised = sorted(t for t in LIBRARY if t.endswith("_grad") and t not in made and t not in BEHAVIOUR_TESTED)
    assert not unexercised, f"gradient ops no gradient-checked case produces: {unexercised}"
