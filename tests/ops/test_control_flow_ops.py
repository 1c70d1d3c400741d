"""Behaviour tests of the tensor-array ops, ``select_input`` / ``select_output`` and the kernels of ``while`` and
``conditional_block`` (blockir.ops.control_flow, blockir.runtime.control): the kernels called as the plan calls
them, inference errors naming the op, and gradients of programs of arrays against equivalent programs without
arrays and finite differences (loops and conditionals through the DSL: tests/dsl/test_control_flow.py)."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest

import blockir as bir
from blockir.errors import BlockirError, ShapeError
from blockir.ir.dtypes import VarKind
from blockir.ir.schema import KernelContext, lookup
from blockir.ops.control_flow import add_gradients
from blockir.ops.values import LoDTensor, TensorArray, describe_value
from blockir.runtime.device import transfer, value_device

L = bir.layers
RNG = np.random.default_rng(3636)


def _kernel(op_type: str, *args: Any, **attrs: Any) -> Any:
    schema = lookup(op_type)
    values = {a.name: attrs.get(a.name, a.default) for a in schema.attrs}
    ctx = KernelContext(np, values, (True,) * len(schema.outputs), op_text=f"{op_type} (test)")
    return schema.kernel(ctx, *args)


def test_write_to_array_grows_the_array_it_updates_in_place() -> None:
    a, b = np.ones(2), np.zeros((3, 1))
    array = _kernel("write_to_array", a, np.array([1]), [None])
    assert isinstance(array, TensorArray) and array[0] is None and array[1] is a
    again = _kernel("write_to_array", b, np.array([0], "int32"), [array])
    assert again is array and again[0] is b
    lod = LoDTensor(np.ones((3, 2)), [[0, 1, 3]])
    assert _kernel("write_to_array", lod, np.array([3]), [array])[3] is lod  # LoD kept
    assert describe_value(array).startswith("tensor_array[float64[3, 1], float64[2], None,")


def test_read_from_array_reads_a_position_or_zeros_shaped_like_x_w() -> None:
    array = TensorArray([np.arange(3.0), None])
    np.testing.assert_array_equal(_kernel("read_from_array", array, np.array([0]), None), np.arange(3.0))
    like = np.ones((2, 2), "float32")
    zeros = _kernel("read_from_array", array, np.array([5]), like)
    assert zeros.shape == (2, 2) and zeros.dtype == np.float32 and not zeros.any()
    with pytest.raises(BlockirError, match=r"position 1 of a tensor array of 2 was never written"):
        _kernel("read_from_array", array, np.array([1]), None)
    with pytest.raises(BlockirError, match=r"I must hold one non-negative integer, got \[-1\]"):
        _kernel("read_from_array", array, np.array([-1]), None)


def test_lod_array_length_counts_positions() -> None:
    got = _kernel("lod_array_length", TensorArray([None, np.ones(1), None]))
    assert got.tolist() == [3] and got.dtype == np.int64
    assert _kernel("lod_array_length", None).tolist() == [0]


@pytest.mark.parametrize(("axis", "stack"), [(0, False), (1, False), (-1, True), (0, True)])
def test_tensor_array_to_tensor_and_its_gradient_split_back(axis: int, stack: bool) -> None:
    parts = [RNG.normal(size=(2, 3)) for _ in range(3)]
    out, index = _kernel("tensor_array_to_tensor", TensorArray(parts), axis=axis, use_stack=stack)
    want = np.stack(parts, axis=axis) if stack else np.concatenate(parts, axis=axis)
    np.testing.assert_array_equal(out, want)
    assert index.dtype == np.int32 and index.tolist() == [1 if stack else p.shape[axis] for p in parts]
    dout = RNG.normal(size=out.shape)
    grads = _kernel("tensor_array_to_tensor_grad", TensorArray(parts), out, dout, axis=axis, use_stack=stack)
    assert isinstance(grads, TensorArray) and [g.shape for g in grads] == [p.shape for p in parts]
    back = np.stack(grads, axis=axis) if stack else np.concatenate(grads, axis=axis)
    np.testing.assert_array_equal(back, dout)
    with pytest.raises(BlockirError, match="empty or has positions never written"):
        _kernel("tensor_array_to_tensor", TensorArray([parts[0], None]), axis=0, use_stack=False)


def test_select_input_and_select_output_route_by_mask() -> None:
    a, b = np.ones(2), np.zeros(2)
    assert _kernel("select_input", [a, b], np.array([1], "int32")) is b
    assert _kernel("select_output", a, np.array([0], "int32"), [None, b]) == [a, b]
    with pytest.raises(BlockirError, match="Mask 2 out of range for 2 branch"):
        _kernel("select_input", [a, b], np.array([2], "int32"))
    with pytest.raises(BlockirError, match="selected branch's value was never computed"):
        _kernel("select_input", [a, None], np.array([1], "int32"))


def test_gradients_add_position_by_position() -> None:
    a = TensorArray([np.ones(2), None])
    b = TensorArray([np.ones(2), np.full(3, 2.0), np.zeros(1)])
    got = add_gradients(np, a, b)
    assert [g.tolist() for g in got] == [[2.0, 2.0], [2.0, 2.0, 2.0], [0.0]]
    assert add_gradients(np, None, a) is a
    lod = add_gradients(np, LoDTensor(np.ones((2, 1)), [[0, 2]]), np.ones((2, 1)))
    assert lod.lod == [[0, 2]] and lod.data.tolist() == [[2.0], [2.0]]


def test_tensor_arrays_move_between_devices_with_their_tensors() -> None:
    array = TensorArray([np.ones(2, "float32"), None])
    moved = transfer(array, "cpu:1")
    assert isinstance(moved, TensorArray) and moved[1] is None and moved[0] is not array[0]
    assert value_device(moved) == "cpu" and value_device(TensorArray()) == "cpu"


def _program(build: Any) -> tuple[bir.Program, Any]:
    main, startup = bir.Program(), bir.Program()
    with bir.unique_name.guard(), bir.program_guard(main, startup):
        out = build()
    return main, out


def test_inference_names_the_op_of_a_bad_array_or_condition() -> None:
    def write_to_tensor() -> None:
        x = bir.data("x", [2], "float32")
        L.array_write(x, L.fill_constant([1], "int64", 0), array=x)

    with pytest.raises(ShapeError, match="must be a tensor array"):
        _program(write_to_tensor)

    def bad_index() -> None:
        x = bir.data("x", [2], "float32")
        L.array_write(x, L.fill_constant([2], "int64", 0))

    with pytest.raises(ShapeError, match=r"I .* must hold one element"):
        _program(bad_index)

    def bad_condition() -> None:
        block = bir.default_main_program().global_block()
        cond = block.create_var("c", shape=(2,), dtype="bool")
        bir.default_main_program().create_block()
        bir.default_main_program().rollback()
        block.append_op("while", {"Condition": [cond]}, {}, {"sub_block": 1})

    with pytest.raises(ShapeError, match=r"while: Condition 'c' must be a bool tensor of one element"):
        _program(bad_condition)


def _arrays_model(with_arrays: bool) -> tuple[bir.Program, bir.Program, Any, list]:
    """loss = mean(concat(a, b)^2) + sum(b) * 3 with a, b = fc(x) rows, through a tensor array (b read twice
    at one position: its gradients add) or without."""
    main, startup = bir.Program(), bir.Program()
    main.random_seed = startup.random_seed = 5
    with bir.unique_name.guard(), bir.program_guard(main, startup):
        x = bir.data("x", [2, 3], "float64")
        a = L.fc(x, 3, param_attr=bir.ParamAttr(name="wa"), bias_attr=False)
        b = L.tanh(L.fc(x, 3, param_attr=bir.ParamAttr(name="wb"), bias_attr=False))
        if with_arrays:
            zero, one = L.fill_constant([1], "int64", 0), L.fill_constant([1], "int64", 1)
            array = L.array_write(a, zero)
            L.array_write(b, one, array=array)
            joined, _ = L.tensor_array_to_tensor(array, axis=0)
            first, second = L.array_read(array, one), L.array_read(array, one)
            extra = L.reduce_sum(first) + L.reduce_sum(second) * 2.0
        else:
            joined = L.concat([a, b], axis=0)
            extra = L.reduce_sum(b) * 3.0
        loss = L.mean(joined * joined) + extra
        forward = main.clone()
        grads = bir.append_backward(loss)
    return main, startup, (forward, loss), grads


def test_gradients_through_tensor_arrays_equal_the_programs_without_and_finite_differences() -> None:
    xv = RNG.normal(size=(2, 3))
    results = []
    for with_arrays in (True, False):
        main, startup, (forward, loss), grads = _arrays_model(with_arrays)
        scope = bir.Scope()
        exe = bir.Executor("cpu")
        exe.run(startup, scope=scope)
        values = exe.run(main, feed={"x": xv}, fetch_list=[g for _, g in grads], scope=scope)
        results.append({p.name: v for (p, _), v in zip(grads, values)})
    assert sorted(results[0]) == ["wa", "wb"]
    for name in results[1]:
        np.testing.assert_allclose(results[0][name], results[1][name], rtol=1e-12, err_msg=name)
    main, startup, (forward, loss), grads = _arrays_model(True)
    assert any(op.type == "sum" and lookup("sum") for op in main.global_block().ops)
    assert main.global_block().var("array_0@GRAD").kind is VarKind.LOD_TENSOR_ARRAY
    scope = bir.Scope()
    exe = bir.Executor("cpu")
    exe.run(startup, scope=scope)
    base, eps = scope.get("wb").copy(), 1e-6
    for pos in [(0, 0), (2, 1)]:
        losses = []
        for step in (eps, -eps):
            moved = base.copy()
            moved[pos] += step
            scope.set("wb", moved)
            losses.append(float(exe.run(forward, feed={"x": xv}, fetch_list=[loss.name], scope=scope)[0][0]))
        np.testing.assert_allclose(results[0]["wb"][pos], (losses[0] - losses[1]) / (2 * eps), rtol=1e-6)


def test_a_tensor_array_is_fed_as_a_list_and_fetched_as_one() -> None:
    main, startup = bir.Program(), bir.Program()
    with bir.unique_name.guard(), bir.program_guard(main, startup):
        array = L.create_array("float32", name="inputs")
        second = L.array_read(array, L.fill_constant([1], "int64", 1))
        L.array_write(second * 2.0, L.fill_constant([1], "int64", 2), array=array)
    parts = [np.zeros(2, "float32"), np.arange(3, dtype="float32")]
    exe = bir.Executor("cpu")
    got, fetched = exe.run(main, feed={"inputs": parts}, fetch_list=[second, array])
    np.testing.assert_array_equal(got, parts[1])
    assert isinstance(fetched, list) and len(fetched) == 3
    np.testing.assert_array_equal(fetched[2], 2 * parts[1])
    (raw,) = exe.run(main, feed={"inputs": parts}, fetch_list=[array], return_numpy=False)
    assert isinstance(raw, TensorArray)
    with pytest.raises(BlockirError, match="feed 'inputs': expected a tensor array"):
        exe.run(main, feed={"inputs": np.zeros(2, "float32")}, fetch_list=[second])
