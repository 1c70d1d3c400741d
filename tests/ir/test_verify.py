"""The verifier: each check, the error's content, and robustness on random programs."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
from hypothesis import given, settings

from blockir.errors import VerifyError
from blockir.ir import AttrType, Program, VarKind, verify
from blockir.ir.devices import is_valid_device
from blockir.ir.schema import EMPTY_VAR, REQUIRED, AttrDef, OpSchema, Slot, registered
from tests.ir.loaded import with_attr
from tests.ir.strategies import programs
from tests.registries import ops_registered

TEST_OP = "test_verify_op"
TEST_BLOCK_OP = "test_verify_block_op"
SAMPLE_VALUES = {
    AttrType.INT: 1,
    AttrType.LONG: 1,
    AttrType.FLOAT: 0.5,
    AttrType.FLOAT64: 0.5,
    AttrType.STRING: "s",
    AttrType.BOOLEAN: True,
}  # list types: []


@pytest.fixture(scope="module", autouse=True)
def test_schemas() -> Iterator[None]:
    op = OpSchema(
        TEST_OP,
        inputs=(Slot("X"), Slot("Y", optional=True), Slot("Xs", duplicable=True, optional=True)),
        outputs=(Slot("Out"), Slot("Extra", optional=True)),
        attrs=(
            AttrDef("k", AttrType.INT, 1),
            AttrDef("alpha", AttrType.FLOAT, REQUIRED),
            AttrDef("names", AttrType.STRINGS, []),
        ),
    )
    block_op = OpSchema(
        TEST_BLOCK_OP,
        inputs=(Slot("X", duplicable=True, optional=True),),
        outputs=(Slot("Out", duplicable=True, optional=True),),
        attrs=(AttrDef("sub_block", AttrType.BLOCK, REQUIRED), AttrDef("more", AttrType.BLOCKS, [])),
    )
    with ops_registered(op, block_op):
        yield


def new_program() -> Program:
    p = Program()
    b = p.global_block()
    b.create_var("x", shape=[-1, 4], need_check_feed=True)
    b.create_var("w", shape=[4, 4], persistable=True)
    for name in ("h", "h2", "later", "y"):
        b.create_var(name, shape=[-1, 4])
    return p


def add(block: Any, inputs: dict[str, Any], outputs: dict[str, Any], **attrs: Any) -> Any:
    return block.append_op(TEST_OP, inputs, outputs, {"alpha": 0.5, **attrs}, infer=False)


def problems(p: Program, **kwargs: Any) -> list[str]:
    with pytest.raises(VerifyError) as info:
        verify(p, **kwargs)
    assert str(info.value).startswith(f"program is invalid ({len(info.value.problems)} problem")
    return info.value.problems


def test_valid_program_passes() -> None:
    p = new_program()
    b = p.global_block()
    add(b, {"X": "x", "Y": "w"}, {"Out": "h"}, k=2, names=["a"])
    add(b, {"X": "h", "Xs": ["x", "w", "h"]}, {"Out": "h2", "Extra": []})
    b.ops[-1].set_attr("op_device", "cuda:0")
    b.ops[-1].set_attr("op_role", 1)
    verify(p)


def test_each_problem_names_block_op_index_and_op_text() -> None:
    p = new_program()
    b = p.global_block()
    add(b, {"X": "x"}, {"Out": "h"})
    op = add(b, {"X": "nowhere"}, {"Out": "h2"})
    [problem] = problems(p)
    assert (
        problem
        == f"block 0, op 1: input 'nowhere' (slot X) is not declared in the block or its ancestors\n    in: {op}"
    )
    assert "%h2 = test_verify_op(X=%nowhere) {alpha=0.5}" in problem


def test_every_problem_is_listed() -> None:
    p = new_program()
    b = p.global_block()
    add(b, {"X": "later"}, {"Out": "undeclared"})
    p, _ = with_attr(add(b, {"X": "x"}, {"Out": "later"}), "k", 2**40, AttrType.LONG)
    found = problems(p)
    assert len(found) == 3
    assert found[0].startswith("block 0, op 0: input 'later' (slot X) is used before any op defines it")
    assert found[1].startswith("block 0, op 0: output 'undeclared' (slot Out) is not declared")
    assert found[2].startswith("block 0, op 1: attribute 'k' is LONG, expected INT")


def test_defined_by_persistable_fed_or_feed_op() -> None:
    p = new_program()
    b = p.global_block()
    b.create_var("feed", kind=VarKind.FEED_MINIBATCH, persistable=True)
    b.create_var("fed", shape=[2])
    add(b, {"X": "fed", "Y": "w", "Xs": ["x"]}, {"Out": "h"})
    b.append_op("feed", {"X": "feed"}, {"Out": "fed"}, {"col": 0}, infer=False)  # as an executor prepends it
    verify(p, allow_unknown_ops=True)  # feed's schema is checked where blockir.ops registers it


def test_empty_var_placeholder_is_not_a_variable() -> None:
    p = new_program()
    add(p.global_block(), {"X": "x", "Xs": [EMPTY_VAR]}, {"Out": "h", "Extra": [EMPTY_VAR]})
    verify(p)


def test_sub_block_sees_parent_definitions_before_its_owner_op() -> None:
    p = new_program()
    b = p.global_block()
    add(b, {"X": "x"}, {"Out": "h"})
    sub = p.create_block(0)
    sub.create_var("local", shape=[2])
    add(sub, {"X": "h"}, {"Out": "local"})  # h: defined before the owner op
    add(sub, {"X": "local", "Y": "later"}, {"Out": "y"})  # later: defined after it
    p.rollback()
    b.append_op(TEST_BLOCK_OP, {"X": ["h"]}, {"Out": ["y"]}, {"sub_block": sub}, infer=False)
    add(b, {"X": "x"}, {"Out": "later"})
    [problem] = problems(p)
    assert problem.startswith("block 1, op 1: input 'later' (slot Y) is used before any op defines it")


def test_unowned_sub_block_sees_all_of_its_parent() -> None:
    p = new_program()
    add(p.global_block(), {"X": "x"}, {"Out": "later"})
    sub = p.create_block(0)
    add(sub, {"X": "later"}, {"Out": "y"})
    verify(p)


def test_grad_block_sees_its_forward_block() -> None:
    p = new_program()
    fwd = p.create_block(0)
    add(fwd, {"X": "x"}, {"Out": "h"})
    p.rollback()
    grad = p.create_block(0)
    add(grad, {"X": "h"}, {"Out": "y"})
    with pytest.raises(VerifyError):
        verify(p)
    grad.forward_block_idx = fwd.idx
    verify(p)


def test_schema_slot_checks() -> None:
    p = new_program()
    b = p.global_block()
    add(b, {"Y": "x", "Bogus": ["x"]}, {"Out": ["h", "h2"], "Nope": []})
    add(b, {"X": []}, {"Out": "y"})
    found = problems(p)
    assert [f.split("\n")[0] for f in found] == [
        "block 0, op 0: test_verify_op has no input slot 'Bogus' (its input slots: X, Y, Xs)",
        "block 0, op 0: output slot Out holds 2 variables but is not duplicable",
        "block 0, op 0: test_verify_op has no output slot 'Nope' (its output slots: Out, Extra)",
        "block 0, op 0: required input slot X is missing",
        "block 0, op 1: required input slot X is missing",
    ]


def test_attribute_checks() -> None:
    p = new_program()
    b = p.global_block()
    op = b.append_op(TEST_OP, {"X": "x"}, {"Out": "h"}, infer=False)
    p, op = with_attr(op, "k", 3, AttrType.LONG)  # set_attr refuses these two: as a file may hold them
    p, op = with_attr(op, "op_role", "forward", AttrType.STRING)
    op.set_attr("surprise", 1)  # allowed, as Paddle allows extra attributes; the verifier reports it
    found = [f.split("\n")[0] for f in problems(p)]
    assert found == [
        "block 0, op 0: attribute 'k' is LONG, expected INT",
        "block 0, op 0: attribute 'op_role' is STRING, expected INT",
        "block 0, op 0: unknown attribute 'surprise' for test_verify_op",
        "block 0, op 0: required attribute 'alpha' is missing",
    ]


def test_unknown_op_types() -> None:
    p = new_program()
    b = p.global_block()
    b.append_op("test_verify_unregistered", {"Whatever": ["x"]}, {"Out": ["h"]}, {"anything": 1}, infer=False).set_attr(
        "op_device", "cuda:x"
    )
    found = [f.split("\n")[0] for f in problems(p)]
    assert found == [
        "block 0, op 0: op type 'test_verify_unregistered' is not registered",
        "block 0, op 0: op_device 'cuda:x' is not well formed (expected cpu, cpu:N, cuda or cuda:N)",
    ]
    # Allowed: the schema checks are skipped, the others stay.
    assert [f.split("\n")[0] for f in problems(p, allow_unknown_ops=True)] == found[1:]
    b.ops[0].set_attr("op_device", "cuda:1")
    verify(p, allow_unknown_ops=True)


def test_block_attribute_checks() -> None:
    p = new_program()
    b = p.global_block()
    child = p.create_block(0)
    grandchild = p.create_block(child.idx)
    p.rollback()
    p.rollback()
    b.append_op(TEST_BLOCK_OP, attrs={"sub_block": child, "more": [child.idx, grandchild.idx, 7]}, infer=False)
    b.append_op(TEST_BLOCK_OP, attrs={"sub_block": 9}, infer=False)
    found = [f.split("\n")[0] for f in problems(p)]
    assert found == [
        "block 0, op 0: attribute 'more' refers to block 2, whose parent is block 1, not this block",
        "block 0, op 0: attribute 'more' refers to block 7, which does not exist",
        "block 0, op 1: attribute 'sub_block' refers to block 9, which does not exist",
    ]


def test_block_structure_checks() -> None:
    p = new_program()
    for _ in range(4):
        p.create_block(0)
    p.block(1).parent_idx = 2
    p.block(2).parent_idx = 1  # a cycle
    p.block(3).parent_idx = 11
    p.block(4).forward_block_idx = 5
    p.block(4).device = "gpu:-1"
    p.block(4).create_var("v", device="cuda:x")
    p.device = "cuda:01"
    found = problems(p)
    assert found == [
        "program: device 'cuda:01' is not well formed (expected cpu, cpu:N, cuda or cuda:N)",
        "block 1: its parents form a cycle through block 1",
        "block 2: its parents form a cycle through block 2",
        "block 3: parent index 11 is not a block of the program",
        "block 4: forward_block_idx 5 is not a block of the program",
        "block 4: device 'gpu:-1' is not well formed (expected cpu, cpu:N, cuda or cuda:N)",
        "block 4: variable 'v' has device 'cuda:x', which is not well formed (expected cpu, cpu:N, cuda or cuda:N)",
    ]


def test_global_block_is_the_root() -> None:
    p = new_program()
    p.create_block(0)
    p.global_block().parent_idx = 1
    p.block(1).idx = 5
    assert problems(p)[:2] == [
        "block 0: the global block must have parent -1, not 1",
        "block 1: has idx 5 but is at position 1 of the program",
    ]


@pytest.mark.parametrize(
    ("device", "valid"),
    [
        ("cpu", True),
        ("cpu:0", True),
        ("cpu:3", True),
        ("cuda", True),
        ("cuda:0", True),
        ("cuda:15", True),
        ("cuda:x", False),
        ("gpu:-1", False),
        ("gpu", False),
        ("cuda:-1", False),
        ("cuda:01", False),
        ("cpu:", False),
        ("CPU", False),
        (" cpu", False),
        ("cuda:0 ", False),
        ("cuda:1:2", False),
    ],
)
def test_device_strings(device: str, valid: bool) -> None:
    assert is_valid_device(device) is valid
    p = new_program()
    add(p.global_block(), {"X": "x"}, {"Out": "h"}).set_attr("op_device", device)
    if valid:
        verify(p)
    else:
        [problem] = problems(p)
        assert f"op_device {device!r} is not well formed" in problem


def test_registered_schemas_accept_their_own_well_formed_ops() -> None:
    """Any registered op with every slot bound and every attribute at its default verifies."""
    for op_type, schema in sorted(registered().items()):
        p = Program()
        b = p.global_block()
        sub = p.create_block(0)
        p.rollback()
        inputs = {s.name: [f"in_{s.name}"] for s in schema.inputs}
        outputs = {s.name: [f"out_{s.name}"] for s in schema.outputs}
        for name in [n for names in (*inputs.values(), *outputs.values()) for n in names]:
            b.create_var(name, shape=[2], persistable=True)
        op = b.append_op(op_type, inputs, outputs, infer=False)
        for adef in schema.attrs:
            value = adef.default if adef.default is not REQUIRED else SAMPLE_VALUES.get(adef.type, [])
            op.set_attr(adef.name, sub.idx if adef.type is AttrType.BLOCK else value, adef.type)
        verify(p)


@settings(max_examples=100)
@given(programs())
def test_random_programs_verify_or_raise_verify_error(p: Program) -> None:
    try:
        verify(p, allow_unknown_ops=True)
    except VerifyError as e:
        assert e.problems


def test_paddle_scalar_attributes_run_where_they_fit_and_var_attributes_are_refused() -> None:
    import numpy as np

    import blockir as bir
    from blockir.ir import AttrType

    main = bir.Program()
    with bir.program_guard(main, bir.Program()):
        x = bir.layers.data("x", [-1, 2])
        out = bir.layers.scale(x, 2.0, bias=1.0)
    op = main.global_block().ops[-1]
    loaded, _ = with_attr(op, "scale", 3, AttrType.SCALAR)  # Paddle 2.5+ writes numbers as scalars of their kind
    with bir.Executor("cpu") as exe:
        (got,) = exe.run(loaded, feed={"x": np.ones((1, 2), np.float32)}, fetch_list=[out.name])
    np.testing.assert_array_equal(got, [[4.0, 4.0]])
    loaded, _ = with_attr(op, "scale", True, AttrType.SCALAR)
    with pytest.raises(VerifyError, match="attribute 'scale' is SCALAR, expected FLOAT"):
        verify(loaded)
    loaded, _ = with_attr(op, "scale", "scale_tensor", AttrType.VAR)
    with pytest.raises(VerifyError, match=r"attribute 'scale' is VAR: its value is read from 'scale_tensor' when"):
        verify(loaded)
