import numpy as np
import pytest

import blockir as bir
from blockir.errors import BlockirError, ExecutionError, OpNotFoundError
from blockir.ops.values import LoDTensor
from tests.runtime import schemas
from tests.runtime.conftest import chain_program, init_linear, linear_program

X = np.arange(6, dtype="float32").reshape(2, 3)


def test_forward_matches_numpy(exe, scope):
    values = init_linear(scope)
    (out,) = exe.run(linear_program(optimize=False), feed={"x": X}, fetch_list=["out"], scope=scope)
    np.testing.assert_allclose(out, X @ values["w"] + values["b"], rtol=1e-6)


def test_in_place_update_is_visible_in_scope_and_fetches_are_copies(exe, scope):
    values = init_linear(scope)
    gw = np.ones((3, 2), dtype="float32")
    (w_before,) = exe.run(linear_program(optimize=False), feed={"x": X}, fetch_list=["w"], scope=scope)
    out, w_fetched = exe.run(linear_program(), feed={"x": X, "gw": gw}, fetch_list=["out", "w"], scope=scope)
    expected_w = values["w"] - 0.5 * gw
    np.testing.assert_allclose(scope.get("w"), expected_w)
    np.testing.assert_allclose(w_fetched, expected_w)
    np.testing.assert_allclose(w_before, values["w"])  # a fetched persistable does not change afterwards
    np.testing.assert_allclose(out, X @ values["w"] + values["b"], rtol=1e-6)  # forward used the old w
    exe.run(linear_program(), feed={"x": X, "gw": gw}, scope=scope)
    np.testing.assert_allclose(w_fetched, expected_w)
    np.testing.assert_allclose(scope.get("w"), values["w"] - 1.0 * gw)


def test_temporaries_never_reach_the_scope(exe, scope):
    init_linear(scope)
    exe.run(linear_program(), feed={"x": X, "gw": np.zeros((3, 2), "float32")}, fetch_list=["out"], scope=scope)
    assert sorted(scope.names()) == ["b", "lr", "w"]


def test_persistables_written_by_a_program_go_to_the_scope(exe, scope):
    program = bir.Program()
    block = program.global_block()
    block.create_var("p", shape=(2, 3), dtype="float32", persistable=True)
    block.append_op("rt_fill", outputs={"Out": "p"}, attrs={"shape": [2, 3], "value": 1.5})
    assert exe.run(program, scope=scope) == []
    np.testing.assert_array_equal(scope.get("p"), np.full((2, 3), 1.5, "float32"))


def test_global_scope_is_the_default(exe):
    scope = bir.Scope()
    with bir.scope_guard(scope):
        init_linear(scope)
        (out,) = exe.run(linear_program(optimize=False), feed={"x": X}, fetch_list=["out"])
    assert out.shape == (2, 2)


def test_temporaries_are_freed_after_their_last_use(exe, scope):
    schemas.PRODUCED.clear()
    schemas.ALIVE.clear()
    (y,) = exe.run(chain_program(4, probe=True), feed={"x": np.ones(3, "float32")}, fetch_list=["y"], scope=scope)
    # When rt_probe ran, only its own input (the last rt_scale output) was still held.
    assert schemas.ALIVE == [[False, False, False, True]]
    np.testing.assert_array_equal(y, np.full(3, 31.0))  # ((((1*2+1)*2+1)*2+1)*2+1)


def test_fetched_temporaries_stay_alive(exe, scope):
    schemas.PRODUCED.clear()
    schemas.ALIVE.clear()
    t0, y = exe.run(
        chain_program(3, probe=True), feed={"x": np.ones(2, "float32")}, fetch_list=["t0", "y"], scope=scope
    )
    assert schemas.ALIVE == [[True, False, True]]
    np.testing.assert_array_equal(t0, [3.0, 3.0])


def test_plan_is_cached_and_recompiled_after_a_change(exe, scope):
    program = chain_program(2)
    plan = exe.plan(program, ["x"], ["t1"])
    assert exe.plan(program, ["x"], ["t1"]) is plan
    exe.run(program, feed={"x": np.ones(1, "float32")}, fetch_list=["t1"], scope=scope)
    assert exe.plan(program, ["x"], ["t1"]) is plan
    assert exe.plan(program, ["x"], ["t0"]) is not plan  # other fetches, other plan
    program.global_block().ops[1].set_attr("scale", 10.0)
    assert exe.plan(program, ["x"], ["t1"]) is not plan
    (t1,) = exe.run(program, feed={"x": np.ones(1, "float32")}, fetch_list=["t1"], scope=scope)
    np.testing.assert_array_equal(t1, [31.0])  # (1*2+1)*10+1


def test_plan_cache_is_bounded(scope):
    exe = bir.Executor("cpu", max_plans=3)
    programs = [chain_program(1) for _ in range(5)]
    for p in programs:
        exe.run(p, feed={"x": np.ones(1, "float32")}, fetch_list=["t0"], scope=scope)
    assert len(exe._plans) == 3


def test_running_never_modifies_the_program(exe, scope):
    program = linear_program()
    init_linear(scope)
    text, mutation = str(program), program.mutation
    exe.run(program, feed={"x": X, "gw": np.ones((3, 2), "float32")}, fetch_list=["out"], scope=scope)
    assert str(program) == text and program.mutation == mutation


def test_fetch_list_takes_variables_and_attrs_defaults_are_filled(exe, scope):
    program = bir.Program()
    block = program.global_block()
    x = block.create_var("x", shape=(2,), dtype="float32")
    y = block.create_var("y", shape=(2,), dtype="float32")
    block.append_op("rt_scale", {"X": x}, {"Out": y}, {"scale": 3.0})  # bias defaults to 0
    (out,) = exe.run(program, feed={"x": np.array([1, 2], "float32")}, fetch_list=[y], scope=scope)
    np.testing.assert_array_equal(out, [3.0, 6.0])
    assert exe.plan(program, ["x"], [y]).steps[0].ctx.attrs == {"scale": 3.0, "bias": 0.0}


def test_duplicable_and_optional_inputs(exe, scope):
    program = bir.Program()
    block = program.global_block()
    for n in ("a", "b", "c", "s", "o1", "o2"):
        block.create_var(n, shape=(2,), dtype="float32")
    block.append_op("rt_sum", {"X": ["a", "b", "c"]}, {"Out": "s"})
    block.append_op("rt_opt_add", {"X": "s"}, {"Out": "o1"})
    block.append_op("rt_opt_add", {"X": "s", "Y": "a"}, {"Out": "o2"})
    feed = {n: np.full(2, i + 1, "float32") for i, n in enumerate("abc")}
    s, o1, o2 = exe.run(program, feed=feed, fetch_list=["s", "o1", "o2"], scope=scope)
    np.testing.assert_array_equal(s, [6, 6])
    np.testing.assert_array_equal(o1, [6, 6])
    np.testing.assert_array_equal(o2, [7, 7])


def test_wants_says_which_outputs_are_read(exe, scope):
    program = bir.Program()
    block = program.global_block()
    for n in ("x", "a", "b", "c"):
        block.create_var(n, shape=(2,), dtype="float32")
    block.append_op("rt_split", {"X": "x"}, {"A": "a", "B": "b"})
    block.append_op("rt_scale", {"X": "b"}, {"Out": "c"})
    schemas.WANTS.clear()
    (c,) = exe.run(program, feed={"x": np.ones(2, "float32")}, fetch_list=["c"], scope=scope)
    a, c = exe.run(program, feed={"x": np.ones(2, "float32")}, fetch_list=["a", "c"], scope=scope)
    assert schemas.WANTS == [(False, True), (True, True)]
    np.testing.assert_array_equal(c, [3, 3])
    np.testing.assert_array_equal(a, [2, 2])


def test_lod_is_dropped_for_plain_slots_and_shared_back(exe, scope):
    program = bir.Program()
    block = program.global_block()
    block.create_var("seq", shape=(-1, 2), dtype="float32", lod_level=1, need_check_feed=True)
    block.create_var("r", shape=(-1, 2), dtype="float32", lod_level=1)
    block.create_var("n", shape=(-1,), dtype="int64")
    block.append_op("rt_plain_relu", {"X": "seq"}, {"Out": "r"})
    block.append_op("rt_seq_len", {"X": "r"}, {"Out": "n"})
    data = np.array([[1, -1], [-2, 2], [3, 3]], "float32")
    r, n = exe.run(
        program, feed={"seq": LoDTensor(data, [[0, 1, 3]])}, fetch_list=["r", "n"], scope=scope, return_numpy=False
    )
    assert isinstance(r, LoDTensor) and r.lod == [[0, 1, 3]]
    np.testing.assert_array_equal(r.data, np.maximum(data, 0))
    np.testing.assert_array_equal(n, [1, 2])
    (r,) = exe.run(program, feed={"seq": LoDTensor(data, [[0, 1, 3]])}, fetch_list=["r"], scope=scope)
    assert isinstance(r, np.ndarray)


# -- feed and fetch errors --------------------------------------------------------------


def test_missing_feed_names_it(exe, scope):
    init_linear(scope)
    with pytest.raises(BlockirError, match=r"missing feed 'x' \(declared float32\[-1, 3\]\)"):
        exe.run(linear_program(optimize=False), fetch_list=["out"], scope=scope)


def test_extra_feed_names_it(exe, scope):
    init_linear(scope)
    with pytest.raises(BlockirError, match="feed 'nope' is not a variable of the program"):
        exe.run(linear_program(optimize=False), feed={"x": X, "nope": X}, scope=scope)


def test_wrong_dtype_and_shape_name_expected_and_given(exe, scope):
    init_linear(scope)
    program = linear_program(optimize=False)
    with pytest.raises(BlockirError, match=r"feed 'x': wrong dtype: expected float32\[-1, 3\].*got float64\[2, 3\]"):
        exe.run(program, feed={"x": X.astype("float64")}, scope=scope)
    with pytest.raises(BlockirError, match=r"feed 'x': wrong shape: expected float32\[-1, 3\].*got float32\[2, 4\]"):
        exe.run(program, feed={"x": np.zeros((2, 4), "float32")}, scope=scope)
    with pytest.raises(BlockirError, match=r"wrong shape.*got float32\[6\]"):
        exe.run(program, feed={"x": np.zeros(6, "float32")}, scope=scope)


def test_lists_are_converted_to_the_declared_dtype(exe, scope):
    init_linear(scope)
    (out,) = exe.run(linear_program(optimize=False), feed={"x": [[1, 2, 3]]}, fetch_list=["out"], scope=scope)
    assert out.shape == (1, 2) and out.dtype == np.float32


def test_wrong_lod_level(exe, scope):
    program = bir.Program()
    block = program.global_block()
    block.create_var("seq", shape=(-1, 2), dtype="float32", lod_level=1)
    block.create_var("n", shape=(-1,), dtype="int64")
    block.append_op("rt_seq_len", {"X": "seq"}, {"Out": "n"})
    data = np.zeros((3, 2), "float32")
    with pytest.raises(BlockirError, match="feed 'seq': expected a LoDTensor with 1 LoD level"):
        exe.run(program, feed={"seq": data}, scope=scope)
    with pytest.raises(BlockirError, match="feed 'seq': expected lod_level 1, got a LoDTensor with 2"):
        exe.run(program, feed={"seq": LoDTensor(data, [[0, 1, 2], [0, 1, 3]])}, scope=scope)


def test_fetching_an_unknown_variable_names_it(exe, scope):
    init_linear(scope)
    with pytest.raises(BlockirError, match="fetch 'ghost' is not a variable of the program"):
        exe.run(linear_program(optimize=False), feed={"x": X}, fetch_list=["ghost"], scope=scope)


def test_uninitialised_parameter_says_run_startup(exe, scope):
    with pytest.raises(BlockirError, match="persistable variable 'w' has no value in the scope .*startup"):
        exe.run(linear_program(optimize=False), feed={"x": X}, scope=scope)


# -- kernel and compile errors ---------------------------------------------------------------


def test_kernel_error_names_the_op_and_its_inputs(exe, scope):
    program = bir.Program()
    block = program.global_block()
    block.create_var("x", shape=(2, 3), dtype="float32")
    block.create_var("y", shape=(2, 3), dtype="float32")
    op = block.append_op("rt_fail", {"X": "x"}, {"Out": "y"})
    with pytest.raises(ExecutionError) as info:
        exe.run(program, feed={"x": np.zeros((2, 3), "float32")}, fetch_list=["y"], scope=scope)
    message = str(info.value)
    assert "ValueError: boom" in message and str(op) in message and "X=x: float32[2, 3]" in message
    assert isinstance(info.value.__cause__, ValueError)


def test_numpy_error_inside_a_kernel_is_wrapped(exe, scope):
    init_linear(scope)
    scope.set("w", np.zeros((4, 2), "float32"))  # wrong shape behind the executor's back
    with pytest.raises(ExecutionError, match=r"rt_matmul.*\n.*X=x: float32\[2, 3\], Y=w: float32\[4, 2\]"):
        exe.run(linear_program(optimize=False), feed={"x": X}, fetch_list=["out"], scope=scope)


def test_unknown_op_type_fails_at_compile_time(exe):
    program = bir.Program()
    block = program.global_block()
    block.create_var("x", shape=(1,), dtype="float32")
    block.append_op("rt_no_such_op", {"X": "x"}, {"Out": "x"})
    with pytest.raises(OpNotFoundError, match="unknown op type 'rt_no_such_op'.*rt_no_such_op\\(X=%x\\)"):
        exe.plan(program, ["x"])


@pytest.mark.parametrize(
    "op_type, attrs, message",
    [
        ("rt_no_kernel", {}, "op type 'rt_no_kernel' has no kernel for cpu"),
        ("rt_need_attr", {}, "cannot run op: required attribute 'factor' is missing: .*rt_need_attr"),
        (
            "rt_scale",
            {"op_device": "cuda:99"},
            r"device cuda:99 is not available on this machine \(devices available: "
            r"cpu, cpu:N \(virtual, any N\).*\): .*rt_scale",
        ),
    ],
)
def test_compile_errors_name_the_op(exe, op_type, attrs, message):
    program = bir.Program()
    block = program.global_block()
    block.create_var("x", shape=(1,), dtype="float32")
    block.create_var("y", shape=(1,), dtype="float32")
    block.append_op(op_type, {"X": "x"}, {"Out": "y"}, attrs)
    with pytest.raises(BlockirError, match=message):
        exe.plan(program, ["x"])


def test_undeclared_variables_and_unknown_slots_are_refused(exe):
    program = bir.Program()
    block = program.global_block()
    block.create_var("x", shape=(1,), dtype="float32")
    block.append_op("rt_scale", {"X": "x"}, {"Out": "undeclared"}, infer=False)
    with pytest.raises(BlockirError, match="variable 'undeclared', which the block does not declare"):
        exe.plan(program, ["x"])
    block.create_var("undeclared", shape=(1,), dtype="float32")
    block.ops[0].set_input("Bogus", ["x"])
    with pytest.raises(
        BlockirError, match=r"cannot run op: rt_scale has no input slot 'Bogus' \(its input slots: X\): .*rt_scale\("
    ):
        exe.plan(program, ["x"])


# -- programs with feed and fetch ops --------------------------------------------------------


def _framed(program: bir.Program) -> bir.Program:
    block = program.global_block()
    block.create_var("feed", kind=bir.ir.VarKind.FEED_MINIBATCH, persistable=True)
    block.create_var("fetch", kind=bir.ir.VarKind.FETCH_LIST, persistable=True)
    block.prepend_op("feed", {"X": "feed"}, {"Out": "x"}, {"col": 0}, infer=False)
    block.append_op("fetch", {"X": "out"}, {"Out": "fetch"}, {"col": 0}, infer=False)
    block.append_op("fetch", {"X": "h"}, {"Out": "fetch"}, {"col": 1}, infer=False)
    return program


def test_feed_and_fetch_ops_declare_the_targets(exe, scope):
    values = init_linear(scope)
    program = _framed(linear_program(optimize=False))
    out, h = exe.run(program, feed={"x": X}, scope=scope)
    np.testing.assert_allclose(h, X @ values["w"], rtol=1e-6)
    np.testing.assert_allclose(out, h + values["b"], rtol=1e-6)
    (h2,) = exe.run(program, feed={"x": X}, fetch_list=["h"], scope=scope)
    np.testing.assert_array_equal(h2, h)
    with pytest.raises(BlockirError, match="missing feed 'x': the program's feed ops take x"):
        exe.run(program, scope=scope)


def test_long_chain(exe, scope):
    (t,) = exe.run(chain_program(10), feed={"x": np.zeros(1, "float32")}, fetch_list=["t9"], scope=scope)
    np.testing.assert_array_equal(t, [2.0**10 - 1])
