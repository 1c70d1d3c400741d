"""The executor refuses what verify() reports a run would trip on, with the same words and the op as the program
has it, before any pass or kernel runs; on random programs compiling a plan raises nothing but BlockirError."""

from __future__ import annotations

from collections.abc import Callable
from contextlib import suppress

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings

import blockir as bir
from blockir.errors import BlockirError, VerifyError
from blockir.ir import AttrType, Block, Operator, Program, VarKind, verify
from blockir.runtime.plan import check_block
from tests.ir.loaded import with_attr
from tests.ir.strategies import programs


def framed() -> Program:
    """feed x (col 0) -> relu -> y -> fetch (col 0)."""
    p = Program()
    b = p.global_block()
    b.create_var("feed", kind=VarKind.FEED_MINIBATCH, persistable=True)
    b.create_var("fetch", kind=VarKind.FETCH_LIST, persistable=True)
    b.create_var("x", shape=(-1, 2), dtype="float32", need_check_feed=True)
    b.create_var("y", shape=(-1, 2), dtype="float32")
    b.append_op("feed", {"X": "feed"}, {"Out": "x"}, {"col": 0}, infer=False)
    b.append_op("relu", {"X": "x"}, {"Out": "y"}, infer=False)
    b.append_op("fetch", {"X": "y"}, {"Out": "fetch"}, {"col": 0}, infer=False)
    return p


def _second_fetch(b: Block, col: int) -> Operator:
    return b.append_op("fetch", {"X": "x"}, {"Out": "fetch"}, {"col": col}, infer=False)


def _col_a_string(b: Block) -> Program:
    """A second fetch, and the first one's col a string: a loaded copy, as a file may hold it (set_attr refuses)."""
    _second_fetch(b, 1)
    return with_attr(b.ops[2], "col", "a", AttrType.STRING)[0]


BREAKAGES: dict[str, tuple[Callable[[Block], object], int, str]] = {  # how, the op it breaks, the problem
    "feed-without-out": (lambda b: b.ops[0].set_output("Out", []), 0, "required output slot Out is missing"),
    "fetch-without-x": (lambda b: b.ops[2].set_input("X", []), 2, "required input slot X is missing"),
    "relu-reading-empty": (lambda b: b.ops[1].set_input("X", ["@EMPTY@"]), 1, "required input slot X is missing"),
    "col-a-string": (_col_a_string, 2, "attribute 'col' is STRING, expected INT"),
    "col-taken-twice": (lambda b: _second_fetch(b, 0), 3, "fetch column 0 is taken by op 2 too"),
    "col-negative": (lambda b: b.ops[2].set_attr("col", -1), 2, "fetch column -1 is negative"),
    "two-outs": (
        lambda b: b.ops[1].set_output("Out", ["y", "x"]),
        1,
        "output slot Out holds 2 variables but is not duplicable",
    ),
}


@pytest.mark.parametrize("place", ["cpu", "cpu:1"])  # cpu:1: through the placement pipeline
@pytest.mark.parametrize("breakage", list(BREAKAGES))
def test_the_executor_refuses_what_verify_reports(breakage: str, place: str) -> None:
    program = framed()
    breaking, index, problem = BREAKAGES[breakage]
    broken = breaking(program.global_block())
    program = broken if isinstance(broken, Program) else program
    op_text = str(program.global_block().ops[index])
    with pytest.raises(VerifyError) as verified:
        verify(program)
    assert f"block 0, op {index}: {problem}\n    in: {op_text}" in verified.value.problems
    with bir.Executor(place) as exe, pytest.raises(VerifyError) as refused:
        exe.run(program, feed={"x": np.ones((1, 2), "float32")}, scope=bir.Scope())
    assert str(refused.value) == f"cannot run op: {problem}: {op_text}"


def with_go() -> tuple[Program, Operator]:
    """x -> a go block sending 2x on a channel -> recv: the program and its go op."""
    main = Program()
    with bir.program_guard(main):
        x = bir.data("x", shape=[-1, 2], dtype="float32")
        ch = bir.make_channel(capacity=1)
        with bir.go():
            bir.channel.send(ch, [bir.layers.scale(x, scale=2.0)])
        bir.channel.recv(ch)
    return main, next(op for op in main.ops() if op.type == "go")


def test_ops_of_a_go_block_are_checked_when_it_is_compiled() -> None:
    main, go = with_go()
    scale = next(op for op in go.sub_blocks()[0].ops if op.type == "scale")
    scale.set_input("X", [])
    with bir.Executor("cpu") as exe, pytest.raises(VerifyError, match="required input slot X is missing: .*scale"):
        exe.plan(main, ["x"])


def test_a_sub_block_attribute_naming_no_block_is_refused_with_the_op() -> None:
    main, go = with_go()
    go.set_attr("sub_block", 99)
    with (
        bir.Executor("cpu") as exe,
        pytest.raises(VerifyError, match=r"attribute 'sub_block' refers to block 99, which does not exist: go\("),
    ):
        exe.plan(main, ["x"])


def test_a_variable_numpy_cannot_hold_cannot_be_fed(monkeypatch: pytest.MonkeyPatch) -> None:
    # numpy itself has no bfloat16; ml_dtypes (which onnx imports) registers one under that name: not here
    monkeypatch.delitem(np.sctypeDict, "bfloat16", raising=False)
    program = framed()
    program.global_block().var("x").dtype = "bfloat16"
    with bir.Executor("cpu") as exe, pytest.raises(BlockirError, match="feed 'x': a bfloat16 variable cannot be fed"):
        exe.plan(program, ["x"])


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(programs())
def test_random_programs_compile_or_raise_blockir_errors_and_verify_reports_what_is_refused(p: Program) -> None:
    feeds = [v.name for v in p.global_block().vars.values() if v.need_check_feed]
    feeds += [n for op in p.global_block().ops if op.type == "feed" for n in op.output("Out")]
    with suppress(BlockirError), bir.Executor("cpu") as exe:  # compiles, or refuses with a BlockirError
        exe.plan(p, feeds)
    try:
        for block in p.blocks:
            check_block(block)
    except BlockirError:
        with pytest.raises(VerifyError):
            verify(p)
