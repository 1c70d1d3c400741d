"""How an op becomes a plan step is its schema's ``lowering``: a new op type lowered as a copy or a fetch
works in the passes and the plan compiler as memcpy and fetch do, with no name of it anywhere."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import numpy as np
import pytest

import blockir as bir
from blockir.errors import BlockirError
from blockir.ir import Program, VarKind
from blockir.ir.attrs import AttrType
from blockir.ir.schema import AttrDef, KernelContext, Lowering, OpSchema, Slot
from tests.registries import ops_registered


def _move(ctx: KernelContext, x: Any) -> Any:
    return ctx.xp.array(x, copy=True)


MOVE = OpSchema(
    "test_move",
    inputs=(Slot("X"),),
    outputs=(Slot("Out"),),
    attrs=(AttrDef("to", AttrType.STRING),),
    kernel=_move,
    lowering=Lowering.COPY,
    device_attr="to",
)
TAKE = OpSchema(
    "test_take",
    inputs=(Slot("X", lod=True),),
    outputs=(Slot("Out"),),
    attrs=(AttrDef("col", AttrType.INT, 0),),
    kernel=_move,
    host=True,
    lowering=Lowering.FETCH,
)
CONTROL = OpSchema("test_control", inputs=(Slot("X"),), lowering=Lowering.CONTROL, side_effects=True)


@pytest.fixture(scope="module", autouse=True)
def _ops() -> Iterator[None]:
    with ops_registered(MOVE, TAKE, CONTROL):
        yield


def moved() -> Program:
    """x (fed on the host) -> test_move onto cpu:1 -> relu there -> test_take."""
    program = Program()
    block = program.global_block()
    for name in ("x", "x1", "y"):
        block.create_var(name, shape=(-1, 2), dtype="float32")
    block.create_var("out", kind=VarKind.FETCH_LIST, persistable=True)
    block.append_op("test_move", {"X": ["x"]}, {"Out": ["x1"]}, {"to": "cpu:1", "op_device": "cpu:1"})
    block.append_op("relu", {"X": ["x1"]}, {"Out": ["y"]}, {"op_device": "cpu:1"})
    block.append_op("test_take", {"X": ["y"]}, {"Out": ["out"]}, {"col": 0})
    return program


def test_a_new_copy_op_and_fetch_op_lower_by_their_schemas() -> None:
    program, x = moved(), np.array([[-1.0, 2.0]], "float32")
    with bir.Executor("cpu") as exe:
        (out,) = exe.run(program, feed={"x": x}, scope=bir.Scope())  # the default fetch: test_take's X
        compiled = exe.compiled_program(program)
        plan = exe.plan(program, ["x"])
    np.testing.assert_array_equal(out, np.maximum(x, 0))
    ops = compiled.global_block().ops
    assert [op.type for op in ops] == ["test_move", "relu", "memcpy", "test_take"]  # y copied back for the fetch
    assert ops[0].input("X")[0] == "x" and ops[0].attr("op_stream") == "cpu:1/copy"  # a copy: read across devices
    assert [s.op_id for s in plan.steps] == [op.id for op in ops[:3]]  # test_take is no step
    assert plan.copies_from == (None, None, 1)  # the copies: x from outside the plan, y from relu
    assert [f.name for f in plan.fetches] == ["y@cpu"]


def test_a_copy_runs_on_the_device_its_device_attr_names() -> None:
    program = moved()
    program.global_block().ops[0].set_attr("to", "cpu:2")
    with bir.Executor("cpu") as exe, pytest.raises(BlockirError, match="test_move must run on its to, not on cpu:1"):
        exe.plan(program, ["x"])


def test_a_control_op_the_runtime_has_no_kernel_for_is_an_error_naming_it() -> None:
    program = Program()
    program.global_block().create_var("x", shape=(2,), dtype="float32")
    program.global_block().append_op("test_control", {"X": ["x"]}, {})
    with pytest.raises(BlockirError, match=r"op type 'test_control' is a control op the runtime has no kernel for: "):
        bir.Executor("cpu").plan(program, ["x"])
