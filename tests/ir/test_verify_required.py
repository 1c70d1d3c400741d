"""The verifier reports what a run would trip on: required slots left out, feed/fetch columns that clash,
and op_problems() (what the plan compiler checks) is a part of verify()."""

from __future__ import annotations

from typing import Any

import pytest

import blockir.ops  # noqa: F401  (registers feed, fetch, relu, mul_grad)
from blockir.errors import VerifyError
from blockir.ir import AttrType, Program, VarKind, verify
from blockir.ir.schema import EMPTY_VAR, find
from blockir.ir.verify import column_problems, op_problems
from tests.ir.loaded import with_attr


def framed() -> Program:
    """feed x (col 0) -> relu -> y -> fetch (col 0): what save_inference_model writes."""
    p = Program()
    b = p.global_block()
    b.create_var("feed", kind=VarKind.FEED_MINIBATCH, persistable=True)
    b.create_var("fetch", kind=VarKind.FETCH_LIST, persistable=True)
    b.create_var("x", shape=[-1, 2])
    b.create_var("y", shape=[-1, 2])
    b.append_op("feed", {"X": "feed"}, {"Out": "x"}, {"col": 0}, infer=False)
    b.append_op("relu", {"X": "x"}, {"Out": "y"}, infer=False)
    b.append_op("fetch", {"X": "y"}, {"Out": "fetch"}, {"col": 0}, infer=False)
    return p


def problems(p: Program) -> list[str]:
    with pytest.raises(VerifyError) as info:
        verify(p)
    return info.value.problems


def test_the_framed_program_verifies() -> None:
    verify(framed())


def test_a_feed_op_without_out_is_reported_with_its_text() -> None:
    p = framed()
    feed = p.global_block().ops[0]
    feed.remove_output("Out")
    p.global_block().var("x").need_check_feed = True  # fed by the executor instead
    assert problems(p) == [f"block 0, op 0: required output slot Out is missing\n    in: {feed}"]
    assert "feed(X=%feed) {col=0}" in str(feed)


@pytest.mark.parametrize("binding", [[], [EMPTY_VAR]], ids=["empty", "only-empty-var"])
def test_a_required_input_binding_no_variable_is_missing(binding: list[str]) -> None:
    p = framed()
    p.global_block().ops[1].set_input("X", binding)
    assert [f.split("\n")[0] for f in problems(p)] == ["block 0, op 1: required input slot X is missing"]


def test_a_required_output_may_be_the_empty_placeholder_but_not_absent() -> None:
    p = framed()
    relu = p.global_block().ops[1]
    relu.set_output("Out", [EMPTY_VAR])
    p.global_block().ops[2].set_input("X", ["x"])
    verify(p)
    relu.set_output("Out", [])
    assert [f.split("\n")[0] for f in problems(p)] == ["block 0, op 1: required output slot Out is missing"]


def test_gradient_ops_leave_out_the_gradients_nobody_needs() -> None:
    """mul_grad without X@GRAD (x needs no gradient), as append_backward writes it."""
    p = Program()
    b = p.global_block()
    for name in ("x", "w", "out@GRAD", "w@GRAD"):
        b.create_var(name, shape=[2, 2], persistable=True)
    op = b.append_op("mul_grad", {"X": "x", "Y": "w", "Out@GRAD": "out@GRAD"}, {"Y@GRAD": "w@GRAD"}, infer=False)
    assert not find("mul_grad").output_slot("X@GRAD").optional
    verify(p)
    assert op_problems(op, find("mul_grad")) == []


@pytest.mark.parametrize(
    ("op_type", "cols", "found"),
    [
        ("feed", [0, 0], ["block 0, op 3: feed column 0 is taken by op 0 too"]),
        ("fetch", [1, 1], ["block 0, op 3: fetch column 1 is taken by op 2 too"]),
        ("fetch", [0, -1], ["block 0, op 3: fetch column -1 is negative"]),
        ("fetch", [0, 1], []),
    ],
)
def test_feed_and_fetch_ops_take_columns_of_their_own(op_type: str, cols: list[int], found: list[str]) -> None:
    p = framed()
    b = p.global_block()
    b.create_var("z", shape=[-1, 2])
    first = b.ops[0 if op_type == "feed" else 2]
    first.set_attr("col", cols[0])
    inputs, outputs = ({"X": "feed"}, {"Out": "z"}) if op_type == "feed" else ({"X": "x"}, {"Out": "fetch"})
    b.append_op(op_type, inputs, outputs, {"col": cols[1]}, infer=False)
    if found:
        assert [f.split("\n")[0] for f in problems(p)] == found
        assert [(3, found[0].split(": ", 1)[1])] == column_problems(b)
    else:
        verify(p)
        assert column_problems(b) == []


def test_feed_and_fetch_ops_of_a_sub_block_have_their_own_columns() -> None:
    p = framed()
    sub = p.create_block(0)
    sub.append_op("fetch", {"X": "y"}, {"Out": "fetch"}, {"col": 0}, infer=False)
    verify(p)


def test_a_column_of_another_type_is_an_attribute_problem_only() -> None:
    p = framed()
    p, _ = with_attr(p.global_block().ops[2], "col", "first", AttrType.STRING)  # set_attr refuses it
    assert [f.split("\n")[0] for f in problems(p)] == ["block 0, op 2: attribute 'col' is STRING, expected INT"]
    assert column_problems(p.global_block()) == []


def test_op_problems_leave_unknown_attributes_to_verify() -> None:
    """Attributes the schema does not know (Paddle's op_callstack, say) do not stop a run."""
    p = framed()
    relu: Any = p.global_block().ops[1]
    relu.set_attr("op_callstack", ["a.py:1"])
    assert op_problems(relu, find("relu")) == []
    assert [f.split("\n")[0] for f in problems(p)] == ["block 0, op 1: unknown attribute 'op_callstack' for relu"]
    relu.set_attr("sub_block", 5, AttrType.BLOCK)
    assert op_problems(relu, find("relu")) == ["attribute 'sub_block' refers to block 5, which does not exist"]
