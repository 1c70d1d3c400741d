"""The IR's invariants: read-only views, changes only through methods that bump the mutation counter and
check attribute types at the call, renames that reach sub-blocks; and any sequence of changes runs as a
freshly loaded copy of the changed program does."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest
from hypothesis import event, given, settings
from hypothesis import strategies as st

import blockir as bir
from blockir.errors import BlockirError, VerifyError
from blockir.ir import AttrType, Block, Program, parse_program, verify
from blockir.ir.schema import OpRole

X = np.arange(-3, 3, dtype="float32").reshape(2, 3)


def scaled() -> Program:
    """y = scale(x) {scale=2.0}, x fed."""
    p = Program()
    b = p.global_block()
    b.create_var("x", shape=[2, 3], need_check_feed=True)
    b.create_var("z", shape=[2, 3], need_check_feed=True)
    b.create_var("y")
    b.append_op("scale", {"X": "x"}, {"Out": "y"}, {"scale": 2.0})
    return p


def test_views_are_read_only() -> None:
    p = scaled()
    b = p.global_block()
    op = b.ops[0]
    before = p.mutation
    with pytest.raises(AttributeError):
        op.inputs["X"].append("z")  # type: ignore[attr-defined]  # the stale-plan repro: a tuple now
    with pytest.raises(TypeError):
        op.inputs["X"] = ("z",)  # type: ignore[index]
    with pytest.raises(TypeError):
        op.outputs["Extra"] = ("z",)  # type: ignore[index]
    with pytest.raises(TypeError):
        op.attrs["foo"] = 1  # type: ignore[index]  # the KeyError repro: no way around set_attr
    with pytest.raises(TypeError):
        del op.attrs["scale"]  # type: ignore[attr-defined]
    with pytest.raises(TypeError):
        op.attr_types["scale"] = AttrType.INT  # type: ignore[index]
    with pytest.raises(AttributeError):
        op.inputs = {}  # type: ignore[misc]
    with pytest.raises(AttributeError):
        b.ops.append(op)  # type: ignore[attr-defined]
    with pytest.raises(TypeError):
        b.ops[0] = op  # type: ignore[index]
    with pytest.raises(TypeError):
        b.vars["w"] = b.var("x")  # type: ignore[index]
    with pytest.raises(AttributeError):
        p.blocks.append(b)  # type: ignore[attr-defined]
    with pytest.raises(BlockirError, match="rename it with Block.rename_var"):
        b.var("x").name = "w"
    assert p.mutation == before and str(p) == str(scaled())
    # Read access stays what it was, and list attributes are tuples: nothing to change in place.
    assert op.input("X") == op.inputs["X"] == ("x",) and op.input("Nothing") == ()
    assert b.ops[0] is op and b.ops == [op] and list(b.ops) == [op] and b.ops.index(op) == 0 and op in b.ops
    op.set_attr("op_role_var", ["x", "x@GRAD"])
    assert op.attrs["op_role_var"] == ("x", "x@GRAD")


def test_a_change_through_the_methods_after_a_run_recompiles() -> None:
    """The stale-plan repro: a change after a run is what the next run runs."""
    p = scaled()
    feed = {"x": X, "z": X + 10}
    op = p.global_block().ops[0]
    with bir.Executor("cpu") as exe:
        (y,) = exe.run(p, feed=feed, fetch_list=["y"], scope=bir.Scope())
        np.testing.assert_array_equal(y, 2 * X)
        op.set_input("X", ["z"])
        (y,) = exe.run(p, feed=feed, fetch_list=["y"], scope=bir.Scope())
        np.testing.assert_array_equal(y, 2 * (X + 10))
        op.set_attr("scale", 3.0)
        op.set_attr("bias", 1.0)
        (y,) = exe.run(p, feed=feed, fetch_list=["y"], scope=bir.Scope())
        np.testing.assert_array_equal(y, 3 * (X + 10) + 1)
        op.remove_attr("bias")
        p.global_block().rename_var("z", "zz")
        (y,) = exe.run(p, feed={"x": X, "zz": X + 10}, fetch_list=["y"], scope=bir.Scope())
        np.testing.assert_array_equal(y, 3 * (X + 10))


def test_a_wrongly_typed_attribute_fails_at_the_call_naming_the_op_and_the_attribute() -> None:
    """The KeyError repro: no longer a bare KeyError from to_proto later, a BlockirError now."""
    p = scaled()
    op = p.global_block().ops[0]
    before = p.mutation
    with pytest.raises(BlockirError) as e:
        op.set_attr("scale", "twice")
    assert str(e.value) == "attribute 'scale': 'twice' is not a valid FLOAT\n  in: %y = scale(X=%x) {scale=2.0}"
    with pytest.raises(BlockirError, match=r"attribute 'scale' is FLOAT for scale, not INT\n  in: %y = scale\(X=%x\)"):
        op.set_attr("scale", 2, AttrType.INT)
    with pytest.raises(BlockirError, match=r"attribute 'op_device': 0 is not a valid STRING\n  in: %y = scale"):
        op.set_attr("op_device", 0)  # a common attribute: typed by COMMON_ATTRS
    with pytest.raises(BlockirError, match=r"attribute 'foo': the type of an empty list must be given\n  in: %y ="):
        op.set_attr("foo", [])
    with pytest.raises(BlockirError, match=r"attribute name must be a non-empty string, got 3\n  in: %y ="):
        op.set_attr(3, 1)  # type: ignore[arg-type]
    with pytest.raises(BlockirError, match=r"attribute 'foo': 99 is not an AttrType\n  in: %y = scale"):
        op.set_attr("foo", 1, 99)  # type: ignore[arg-type]
    with pytest.raises(BlockirError) as e:
        p.global_block().append_op("scale", {"X": "x"}, {"Out": "y"}, {"bias": "1"})
    assert str(e.value) == "attribute 'bias': '1' is not a valid FLOAT\n  in: %y = scale(X=%x)"  # as made so far
    assert p.mutation == before and str(p) == str(scaled())
    # An attribute no schema declares is allowed (Paddle's ops carry extras), typed by its value; it goes
    # to the wire and back, and the verifier reports it on a registered op.
    op.set_attr("foo", 1)
    back = Program.parse(p.serialize()).global_block().ops[0]
    assert (back.attrs["foo"], back.attr_types["foo"]) == (1, AttrType.INT)
    with pytest.raises(VerifyError, match="unknown attribute 'foo' for scale"):
        verify(p)


def test_slots_take_names_or_variables_and_refuse_anything_else() -> None:
    p = scaled()
    b = p.global_block()
    op = b.ops[0]
    op.set_input("X", b.var("z"))
    assert op.inputs == {"X": ("z",)}
    op.set_output("Out", [b.var("y")])
    with pytest.raises(BlockirError, match=r"slot X: 3 is not a variable or variable name\n  in: %y = scale"):
        op.set_input("X", [3])
    with pytest.raises(BlockirError, match="input slot must be a non-empty string"):
        op.set_input("", ["x"])
    with pytest.raises(BlockirError, match="rename_input: '' is not a variable or variable name"):
        op.rename_input("z", "")
    before = p.mutation
    op.remove_input("Nothing")
    op.remove_attr("nothing")
    op.rename_input("absent", "q")
    b.reorder_ops(list(b.ops))
    assert p.mutation == before  # changing nothing is no change
    with pytest.raises(BlockirError, match="reorder_ops: not an order of the 1 ops of block 0"):
        b.reorder_ops([])


def nested() -> Program:
    """x in block 0; block 1 (child of 0) and its child block 2 use it; block 3 (child of 0) declares its own x."""
    p = Program()
    b0 = p.global_block()
    b0.create_var("x")
    b0.create_var("w", is_parameter=True, persistable=True)
    b0.create_var("other")
    b0.append_op("t", {"X": "x"}, {"Out": "x"}, {"op_role_var": ["x", "x@GRAD"]}, infer=False)
    b1 = p.create_block(0)
    b1.create_var("y")
    b1.append_op("t", {"X": ["x", "w"]}, {"Out": "y"}, infer=False)
    b2 = p.create_block(1)
    b2.append_op("t", {"X": "y"}, {"Out": "x"}, infer=False)
    b3 = p.create_block(0)
    b3.create_var("x")
    b3.append_op("t", {"X": "x"}, {"Out": "x"}, infer=False)
    p.current_block_idx = 0
    b0.append_op("go", {"X": "x"}, {}, {"sub_block": b1}, infer=False)
    return p


def test_rename_var_renames_uses_in_the_sub_blocks_that_see_the_variable() -> None:
    p = nested()
    before = p.mutation
    p.global_block().rename_var("x", "x2")
    assert p.mutation > before
    assert list(p.global_block().vars) == ["x2", "w", "other"]  # the declaration order stays
    b0, b1, b2, b3 = p.blocks
    assert (b0.ops[0].inputs, b0.ops[0].outputs) == ({"X": ("x2",)}, {"Out": ("x2",)})
    assert b0.ops[0].attr("op_role_var") == ("x2", "x@GRAD")
    assert b0.ops[1].inputs == {"X": ("x2",)}
    assert b1.ops[0].inputs == {"X": ("x2", "w")}  # a sub-block
    assert b2.ops[0].outputs == {"Out": ("x2",)}  # a sub-block of a sub-block
    assert (b3.ops[0].inputs, b3.ops[0].outputs) == ({"X": ("x",)}, {"Out": ("x",)})  # its own x
    assert b0.var("x2").name == "x2" and not b0.has_var("x")
    assert Program.parse(p.serialize()).serialize() == p.serialize()


def test_rename_var_refuses_what_would_break_the_block() -> None:
    p = nested()
    before = p.mutation
    with pytest.raises(BlockirError, match="cannot rename 'x' to 'w': block 0 has a variable 'w'"):
        p.global_block().rename_var("x", "w")
    with pytest.raises(BlockirError, match="variable 'nope' not found in block 0"):
        p.global_block().rename_var("nope", "q")
    with pytest.raises(BlockirError, match="variable name must be a non-empty string"):
        p.global_block().rename_var("x", "")
    assert p.mutation == before and str(p) == str(nested())


# -- any sequence of changes runs as a freshly loaded copy ---------------------------------------------

_UNARY = ("scale", "relu", "tanh")


def chain() -> Program:
    """x fed; t0 = scale(x); t1 = relu(t0); t2 = elementwise_add(t1, x); t3 = scale(t2) {bias=1}."""
    p = Program()
    b = p.global_block()
    b.create_var("x", shape=[2, 3], need_check_feed=True)
    specs: list[tuple[str, dict[str, str], dict[str, Any]]] = [
        ("scale", {"X": "x"}, {"scale": 2.0}),
        ("relu", {"X": "t0"}, {}),
        ("elementwise_add", {"X": "t1", "Y": "x"}, {}),
        ("scale", {"X": "t2"}, {"bias": 1.0}),
    ]
    for i, (op_type, inputs, attrs) in enumerate(specs):
        b.create_var(f"t{i}")
        b.append_op(op_type, inputs, {"Out": f"t{i}"}, attrs)
    return p


def _available(block: Block, index: int) -> list[str]:
    """What an op at ``index`` may read: the fed x and what the ops before it write."""
    return ["x", *(n for op in block.ops[:index] for n in op.output_names())]


def _read_after(block: Block, index: int) -> set[str]:
    return {n for op in block.ops[index + 1 :] for n in op.input_names()}


def mutate(p: Program, data: st.DataObject, fresh: list[int]) -> str:
    """One public change that keeps the chain runnable; returns what it did."""
    b = p.global_block()

    def new_var() -> str:
        fresh[0] += 1
        return b.create_var(f"n{fresh[0]}").name

    ops = b.ops
    kind = data.draw(st.sampled_from(["set_attr", "remove_attr", "set_input", "rename", "insert", "remove", "output"]))
    i = data.draw(st.integers(0, len(ops) - 1))
    op = ops[i]
    if kind == "set_attr" and op.type == "scale":
        name = data.draw(st.sampled_from(["scale", "bias", "bias_after_scale"]))
        value = data.draw(st.booleans() if name == "bias_after_scale" else st.floats(-2, 2, width=32))
        op.set_attr(name, value)
    elif kind == "remove_attr" and op.type == "scale":
        op.remove_attr(data.draw(st.sampled_from(["scale", "bias"])))
    elif kind == "set_input":
        slot = data.draw(st.sampled_from(sorted(op.inputs)))
        op.set_input(slot, [data.draw(st.sampled_from(_available(b, i)))])
    elif kind == "rename":
        fresh[0] += 1
        b.rename_var(op.output("Out")[0], f"r{fresh[0]}")
    elif kind == "insert":
        at = data.draw(st.integers(0, len(ops)))
        op_type = data.draw(st.sampled_from([*_UNARY, "elementwise_add"]))
        read = st.sampled_from(_available(b, at))
        inputs = {"X": data.draw(read)} | ({"Y": data.draw(read)} if op_type == "elementwise_add" else {})
        b.insert_op(at, op_type, inputs, {"Out": new_var()})
    elif kind == "remove" and len(ops) > 1 and not set(op.output_names()) & _read_after(b, i):
        b.remove_op(op)
    elif kind == "output" and not set(op.output_names()) & _read_after(b, i):
        op.set_output("Out", [new_var()])
    else:
        return "nothing"
    return kind


def results(p: Program, exe: bir.Executor) -> dict[str, Any]:
    targets = sorted({n for op in p.global_block().ops for n in op.output_names()})
    values = exe.run(p, feed={"x": X}, fetch_list=targets, scope=bir.Scope())
    return dict(zip(targets, values))


def assert_same(a: dict[str, Any], b: dict[str, Any]) -> None:
    assert a.keys() == b.keys()
    for name in a:
        np.testing.assert_array_equal(a[name], b[name], err_msg=name)


@settings(max_examples=25)
@given(st.data())
def test_any_sequence_of_changes_runs_as_a_freshly_loaded_copy(data: st.DataObject) -> None:
    p = chain()
    fresh = [0]
    with bir.Executor("cpu") as exe:
        results(p, exe)  # a plan cached before the changes
        for _ in range(data.draw(st.integers(1, 8))):
            event(mutate(p, data, fresh))
        verify(p)
        got = results(p, exe)
        for copy in (Program.parse(p.serialize()), parse_program(str(p))):
            with bir.Executor("cpu") as fresh_exe:
                assert_same(got, results(copy, fresh_exe))


def test_clone_for_test_and_roles_survive_the_methods() -> None:
    p = chain()
    op = p.global_block().ops[0]
    op.set_attr("op_role", OpRole.BACKWARD)
    assert [o.type for o in p.clone(for_test=True).global_block().ops] == ["relu", "elementwise_add", "scale"]
