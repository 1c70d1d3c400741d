"""The IR objects: mutation counter, clone, attribute types and their normalisation."""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any

import numpy as np
import pytest

from blockir.errors import BlockirError
from blockir.ir import AttrType, Program, VarKind
from blockir.ir.attrs import INT32_MAX, INT32_MIN, INT64_MAX, INT64_MIN, infer_type, normalize


def program_with_op() -> Program:
    p = Program()
    b = p.global_block()
    b.create_var("x", shape=[2, 3])
    b.create_var("y", shape=[2, 3])
    b.append_op("t", {"X": "x"}, {"Out": "y"}, {"k": 1}, infer=False)
    b.append_op("t", {"X": "y"}, {"Out": "x"}, infer=False)
    return p


CHANGES: list[tuple[str, Callable[[Program], Any]]] = [
    ("version", lambda p: setattr(p, "version", 2)),
    ("random_seed", lambda p: setattr(p, "random_seed", 5)),
    ("program device", lambda p: setattr(p, "device", "cuda:0")),
    ("create_block", lambda p: p.create_block(0)),
    ("create_var", lambda p: p.global_block().create_var("z")),
    ("remove_var", lambda p: p.global_block().remove_var("y")),
    ("rename_var", lambda p: p.global_block().rename_var("x", "x2")),
    ("variable field", lambda p: setattr(p.global_block().var("x"), "shape", (4,))),
    ("variable flag", lambda p: setattr(p.global_block().var("x"), "persistable", True)),
    ("append_op", lambda p: p.global_block().append_op("t", infer=False)),
    ("insert_op", lambda p: p.global_block().insert_op(0, "t", infer=False)),
    ("prepend_op", lambda p: p.global_block().prepend_op("t", infer=False)),
    ("remove_op", lambda p: p.global_block().remove_op(0)),
    ("set_attr", lambda p: p.global_block().ops[0].set_attr("k", 2)),
    ("remove_attr", lambda p: p.global_block().ops[0].remove_attr("k")),
    ("set_input", lambda p: p.global_block().ops[0].set_input("X", ["y"])),
    ("set_output", lambda p: p.global_block().ops[0].set_output("Out", ["x"])),
    ("rename_input", lambda p: p.global_block().ops[0].rename_input("x", "q")),
    ("rename_output", lambda p: p.global_block().ops[0].rename_output("y", "q")),
    ("remove_input", lambda p: p.global_block().ops[0].remove_input("X")),
    ("remove_output", lambda p: p.global_block().ops[0].remove_output("Out")),
    ("is_target", lambda p: setattr(p.global_block().ops[0], "is_target", True)),
    ("reorder_ops", lambda p: p.global_block().reorder_ops(reversed(p.global_block().ops))),
    ("block device", lambda p: setattr(p.global_block(), "device", "cpu:1")),
    ("forward_block_idx", lambda p: setattr(p.create_block(0), "forward_block_idx", 0)),
]


@pytest.mark.parametrize(("what", "change"), CHANGES, ids=[c[0] for c in CHANGES])
def test_every_change_increases_the_mutation_counter(what: str, change: Callable[[Program], Any]) -> None:
    p = program_with_op()
    other = program_with_op()
    before = p.mutation
    change(p)
    assert p.mutation > before
    assert p.mutation != other.mutation  # counters of different programs never collide


def test_reading_does_not_change_the_counter() -> None:
    p = program_with_op()
    before = p.mutation
    str(p)
    p.serialize()
    p.global_block().var("x")
    p.global_block().ops[0].attr("k")
    list(p.list_vars())
    assert p.mutation == before


def test_clone_is_deep_and_keeps_op_ids() -> None:
    p = program_with_op()
    sub = p.create_block(0)
    sub.append_op("t", infer=False)
    p.rollback()
    p.global_block().append_op("go", attrs={"sub_block": sub}, infer=False)
    p.random_seed, p.device = 9, "cpu"
    q = p.clone()
    assert str(q) == str(p)
    assert q.serialize() == p.serialize()
    assert [op.id for op in q.ops()] == [op.id for op in p.ops()]
    assert q.global_block().append_op("t", infer=False).id == max(op.id for op in p.ops()) + 1
    # Changing the clone leaves the original alone.
    text = str(p)
    q.global_block().ops[0].set_attr("k", 7)
    q.global_block().ops[0].set_input("X", ["x", "y"])
    q.global_block().var("x").shape = (9,)
    q.block(1).ops[0].set_attr("n", 1)
    assert str(p) == text
    assert all(v.block is not None and v.block.program is q for v in q.list_vars())
    assert all(op.block.program is q for op in q.ops())


ALL_TYPES: list[tuple[AttrType, Any]] = [
    (AttrType.INT, INT32_MIN),
    (AttrType.FLOAT, 0.1),
    (AttrType.STRING, "ünï"),
    (AttrType.INTS, [INT32_MAX, -1]),
    (AttrType.FLOATS, [1.5, -math.inf]),
    (AttrType.STRINGS, ["a", ""]),
    (AttrType.BOOLEAN, True),
    (AttrType.BOOLEANS, [True, False]),
    (AttrType.BLOCK, 1),
    (AttrType.LONG, INT64_MAX),
    (AttrType.BLOCKS, [1, 2]),
    (AttrType.LONGS, [INT64_MIN]),
    (AttrType.FLOAT64S, [0.1, 1e300]),
    (AttrType.FLOAT64, 0.1),
    (AttrType.VAR, "shape_tensor"),
    (AttrType.VARS, ["a", "b c"]),
    (AttrType.SCALAR, 2.5),
    (AttrType.SCALARS, [True, -(2**63), 1e300, complex(1.5, -2.0)]),
]


def test_all_attr_types_are_covered() -> None:
    assert {t for t, _ in ALL_TYPES} == set(AttrType)


@pytest.mark.parametrize(("t", "value"), ALL_TYPES, ids=[t.name for t, _ in ALL_TYPES])
def test_every_attr_type_round_trips(t: AttrType, value: Any) -> None:
    p = Program()
    p.create_block(0)
    p.create_block(0)
    p.rollback()
    p.global_block().append_op("t", infer=False).set_attr("a", value, t)
    back = Program.parse(p.serialize()).global_block().ops[0]
    assert back.attr_types["a"] is t
    expected = normalize(value, t)
    assert back.attrs["a"] == expected
    assert type(back.attrs["a"]) is type(expected)
    if t in (AttrType.FLOAT, AttrType.FLOATS):  # stored rounded to float32, so the wire keeps it exactly
        assert np.all(np.float32(back.attrs["a"]) == np.float32(value))


@pytest.mark.parametrize(
    ("value", "t"),
    [
        (1, AttrType.INT),
        (2**31, AttrType.LONG),
        (np.int64(3), AttrType.INT),
        (True, AttrType.BOOLEAN),
        (0.5, AttrType.FLOAT),
        (np.float32(0.5), AttrType.FLOAT),
        (np.float64(0.5), AttrType.FLOAT64),
        ("s", AttrType.STRING),
        ([1, 2], AttrType.INTS),
        ([1, 2**40], AttrType.LONGS),
        ((0.5,), AttrType.FLOATS),
        ([np.float64(1)], AttrType.FLOAT64S),
        (["a"], AttrType.STRINGS),
        ([False], AttrType.BOOLEANS),
    ],
)
def test_inferred_types(value: Any, t: AttrType) -> None:
    assert infer_type(value) is t


@pytest.mark.parametrize(
    ("value", "t", "message"),
    [
        (2**31, AttrType.INT, "does not fit INT"),
        (1e39, AttrType.FLOAT, "does not fit FLOAT"),
        (10**400, AttrType.FLOAT64, "does not fit FLOAT64"),
        (-(2**63) - 1, AttrType.LONG, "does not fit LONG"),
        (True, AttrType.INT, "is not a valid INT"),
        (1.5, AttrType.INT, "is not a valid INT"),
        ("1", AttrType.FLOAT, "is not a valid FLOAT"),
        (1, AttrType.STRING, "is not a valid STRING"),
        (1, AttrType.BOOLEAN, "is not a valid BOOLEAN"),
        (-1, AttrType.BLOCK, "block index -1 is negative"),
        ("abc", AttrType.STRINGS, "is not a list for STRINGS"),
        (3, AttrType.INTS, "is not a list for INTS"),
        ([1, "a"], AttrType.INTS, "is not a valid INT"),
    ],
)
def test_normalisation_errors_name_the_attribute(value: Any, t: AttrType, message: str) -> None:
    with pytest.raises(BlockirError, match=message) as info:
        normalize(value, t, "my_attr")
    assert "'my_attr'" in str(info.value)


@pytest.mark.parametrize(
    ("value", "message"),
    [
        ([], "the type of an empty list must be given"),
        ([1, "a"], "mixed list"),
        (object(), "cannot store a value of type object"),
        (None, "cannot store a value of type NoneType"),
    ],
)
def test_inference_errors(value: Any, message: str) -> None:
    p = Program()
    with pytest.raises(BlockirError, match=message):
        p.global_block().append_op("t", attrs={"a": value}, infer=False)


def test_attr_keeps_its_type_on_update() -> None:
    p = Program()
    op = p.global_block().append_op("t", infer=False)
    op.set_attr("n", 3, AttrType.LONG)
    op.set_attr("n", 4)
    assert op.attr_types["n"] is AttrType.LONG
    with pytest.raises(BlockirError, match="not a valid LONG"):
        op.set_attr("n", "four")
    op.set_attr("i", 3)  # INT, whose value is 0: kept too
    with pytest.raises(BlockirError, match="does not fit INT"):
        op.set_attr("i", 2**40)


def test_variable_fields_by_kind() -> None:
    p = Program()
    b = p.global_block()
    feed = b.create_var("feed", kind=VarKind.FEED_MINIBATCH)
    ch = b.create_var("ch", kind=VarKind.CHANNEL, dtype="int64", capacity=2)
    t = b.create_var("t", dtype="float", shape=[-1, 2], lod_level=2)
    assert (feed.dtype, feed.shape) == (None, None)
    assert (ch.dtype, ch.shape, ch.capacity) == ("int64", None, 2)
    assert (t.dtype, t.shape, t.lod_level) == ("float32", (-1, 2), 2)
    with pytest.raises(BlockirError, match="unknown dtype 'float128x'"):
        b.create_var("bad", dtype="float128x")
    with pytest.raises(BlockirError, match="already exists"):
        b.create_var("t")
