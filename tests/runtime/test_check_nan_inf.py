"""Executor(check_nan_inf=True): the first op producing NaN or inf stops the run with an error naming it, its
outputs' counts and its inputs' statistics; off (the default), plans hold the kernels themselves."""

from __future__ import annotations

import re

import numpy as np
import pytest

import blockir as bir
from blockir.errors import ExecutionError, NanInfError
from blockir.ir import Program
from blockir.ir.schema import lookup
from blockir.ops.values import LoDTensor, SelectedRows
from blockir.runtime.device import transfer
from blockir.runtime.nan_inf import value_stats
from tests.runtime.test_cuda import gpu  # noqa: F401  (the fixture: the CUDA stand-in, or a real GPU)

X = np.array([[1, 0, 3], [4, 5, 6]], "float32")
Y = np.array([[1, 0, 0], [2, 2, 2]], "float32")  # X / Y: 0/0 is NaN, 3/0 is inf


def division(device: str | None = None) -> tuple[Program, bir.ir.Variable, bir.ir.Variable]:
    """q = x / y (on ``device``), then scale and mean, which carry the NaN and inf on: only the division
    produces them."""
    main = Program()
    with bir.unique_name.guard(), bir.program_guard(main):
        x = bir.data("x", shape=[-1, 3], dtype="float32")
        y = bir.data("y", shape=[-1, 3], dtype="float32")
        with bir.device_guard(device):
            q = bir.layers.elementwise_div(x, y)
        out = bir.layers.mean(bir.layers.scale(q, scale=2.0))
    return main, q, out


SETTINGS = {"sequential": {"scheduler": "sequential"}, "dataflow": {"scheduler": "dataflow"}}


@pytest.mark.filterwarnings("ignore:invalid value encountered:RuntimeWarning")
@pytest.mark.filterwarnings("ignore:divide by zero encountered:RuntimeWarning")
@pytest.mark.parametrize("device", [None, "cpu:1"], ids=["host", "cpu1"])
@pytest.mark.parametrize("scheduler", ["sequential", "dataflow"])
def test_the_first_op_producing_nan_or_inf_is_named_with_its_inputs(scheduler: str, device: str | None) -> None:
    main, q, out = division(device)
    with bir.Executor("cpu", scheduler=scheduler, check_nan_inf=True) as exe:
        if device is not None and scheduler == "dataflow":
            assert exe.plan(main, ["x", "y"], [out]).schedule.workers >= 1  # cpu:1's streams on worker threads
        with pytest.raises(NanInfError) as info:
            exe.run(main, feed={"x": X, "y": Y}, fetch_list=[out], scope=bir.Scope())
    error = info.value
    assert isinstance(error, ExecutionError)
    assert re.fullmatch(r"%elementwise_div_0\.tmp_0 = elementwise_div\(X=%x(@cpu:1)?, Y=%y(@cpu:1)?\) .*", error.op)
    assert error.counts == {q.name: (1, 1)}
    where = "@cpu:1" if device else ""
    assert str(error) == (
        "op produced NaN or inf (check_nan_inf)\n"
        f"  in op: {error.op}\n"
        "  outputs:\n"
        "    Out=elementwise_div_0.tmp_0: 1 NaN, 1 inf among the 6 values of float32[2, 3]\n"
        "  inputs:\n"
        f"    X=x{where}: float32[2, 3] min 0 max 6 mean 3.16667, 0 NaN, 0 inf\n"
        f"    Y=y{where}: float32[2, 3] min 0 max 2 mean 1.16667, 0 NaN, 0 inf"
    )


@pytest.mark.filterwarnings("ignore::RuntimeWarning")
@pytest.mark.parametrize("scheduler", ["sequential", "dataflow"])
def test_off_by_default_the_run_returns_the_nan_values(scheduler: str) -> None:
    main, q, out = division("cpu:1")
    with bir.Executor("cpu", scheduler=scheduler) as exe:
        got_q, got_out = exe.run(main, feed={"x": X, "y": Y}, fetch_list=[q, out], scope=bir.Scope())
    np.testing.assert_array_equal(got_q, X / Y)
    assert np.isnan(got_out).all()


def test_off_the_plan_holds_the_kernels_themselves_and_the_setting_is_part_of_the_cache_key() -> None:
    main, _, out = division()
    exe = bir.Executor("cpu")
    assert exe.check_nan_inf is False
    plain = exe.plan(main, ["x", "y"], [out])
    kernels = [lookup(t).kernel for t in ("elementwise_div", "scale", "mean")]
    assert [s.kernel for s in plain.steps] == kernels
    exe.check_nan_inf = True
    checked = exe.plan(main, ["x", "y"], [out])
    assert checked is not plain and not any(s.kernel is k for s, k in zip(checked.steps, kernels))
    exe.check_nan_inf = False
    assert exe.plan(main, ["x", "y"], [out]) is plain
    exe.check_nan_inf = True
    assert exe.plan(main, ["x", "y"], [out]) is checked


@pytest.mark.filterwarnings("ignore:overflow encountered:RuntimeWarning")
def test_the_inputs_are_reported_as_the_op_got_them_even_where_a_kernel_may_write_into_them() -> None:
    """a = relu(x) dies at a * y; elementwise_mul may write its result into a's buffer, but not while checking."""
    main = Program()
    with bir.unique_name.guard(), bir.program_guard(main):
        x = bir.data("x", shape=[-1, 2], dtype="float32")
        y = bir.data("y", shape=[-1, 2], dtype="float32")
        out = bir.layers.mean(bir.layers.elementwise_mul(bir.layers.relu(x), y))
    feed = {"x": np.array([[1e30, 1]], "float32"), "y": np.array([[1e30, 2]], "float32")}
    with bir.Executor("cpu") as exe:
        assert any(step.reuse for step in exe.plan(main, ["x", "y"], [out]).steps)  # off: a's buffer is offered
        exe.check_nan_inf = True
        assert not any(step.reuse for step in exe.plan(main, ["x", "y"], [out]).steps)
        with pytest.raises(
            NanInfError,
            match=r"elementwise_mul(.|\n)*X=relu_0\.tmp_0: float32\[1, 2\] min 1 max "
            r"1e\+30 mean 5e\+29, 0 NaN, 0 inf",
        ):
            exe.run(main, feed=feed, fetch_list=[out], scope=bir.Scope())


@pytest.mark.filterwarnings("ignore:overflow encountered:RuntimeWarning")
def test_ops_of_a_go_block_are_checked() -> None:
    main = Program()
    with bir.unique_name.guard(), bir.program_guard(main):
        x = bir.data("x", shape=[-1, 2], dtype="float32")
        ch = bir.make_channel(capacity=1)
        with bir.go():
            bir.channel.send(ch, [bir.layers.scale(x, scale=1e38)])
        (got,) = bir.channel.recv(ch)
    feed = {"x": np.array([[1, 10]], "float32")}
    with (
        bir.Executor("cpu", check_nan_inf=True) as exe,
        pytest.raises(
            NanInfError,
            match=r"in op: %scale_0\.tmp_0 = scale\(X=%x\)(.|\n)*Out=scale_0\.tmp_0: "
            r"0 NaN, 1 inf among the 2 values",
        ),
    ):
        exe.run(main, feed=feed, fetch_list=[got], scope=bir.Scope())
    with bir.Executor("cpu") as exe:
        np.testing.assert_array_equal(
            exe.run(main, feed=feed, fetch_list=[got], scope=bir.Scope())[0], np.array([[1e38, np.inf]], "float32")
        )


def test_a_nan_from_the_scope_is_caught_at_the_first_op_reading_it_and_shown_among_its_inputs() -> None:
    main, startup = Program(), Program()
    with bir.unique_name.guard(), bir.program_guard(main, startup):
        x = bir.data("x", shape=[-1, 3], dtype="float32")
        out = bir.layers.mean(bir.layers.fc(x, 2, act="relu"))
    scope = bir.Scope()
    with bir.Executor("cpu", check_nan_inf=True) as exe:
        exe.run(startup, scope=scope)
        scope.get("fc_0.w_0")[1, 0] = np.nan
        with pytest.raises(
            NanInfError,
            match=r"in op: %fc_0\.tmp_2 = fc\((.|\n)*W=fc_0\.w_0: float32\[3, 2\] min "  # mul, add, relu fused
            r"\S+ max \S+ mean \S+, 1 NaN, 0 inf",
        ):
            exe.run(main, feed={"x": np.ones((4, 3), "float32")}, fetch_list=[out], scope=scope)


def test_sparse_gradients_and_lod_tensors_are_checked_and_described() -> None:
    """lookup_table_grad (is_sparse) makes SelectedRows; its LoD-carrying Out@GRAD shows its kind."""
    program = Program()
    block = program.global_block()
    block.create_var("w", shape=(5, 2), dtype="float32", persistable=True)
    block.create_var("ids", shape=(-1, 1), dtype="int64", need_check_feed=True)
    block.create_var("dout", shape=(-1, 2), dtype="float32", lod_level=1, need_check_feed=True)
    block.create_var("dw", shape=(5, 2), dtype="float32", persistable=True)
    block.append_op(
        "lookup_table_grad", {"W": "w", "Ids": "ids", "Out@GRAD": "dout"}, {"W@GRAD": "dw"}, {"is_sparse": True}
    )
    scope = bir.Scope()
    scope.set("w", np.zeros((5, 2), "float32"))
    feed = {
        "ids": np.array([[4], [1], [4]], "int64"),
        "dout": LoDTensor(np.array([[1, np.inf], [2, 3], [np.nan, np.nan]], "float32"), [[0, 1, 3]]),
    }
    with bir.Executor("cpu", check_nan_inf=True) as exe, pytest.raises(NanInfError) as info:
        exe.run(program, feed=feed, scope=scope)
    assert info.value.counts == {"dw": (2, 1)}
    assert "W@GRAD=dw: 2 NaN, 1 inf among the 6 values of selected_rows<float32>[5, 2] rows=3" in str(info.value)
    assert "Ids=ids: int64[3, 1] min 1 max 4 mean 3, 0 NaN, 0 inf" in str(info.value)
    assert "Out@GRAD=dout: float32[3, 2] min 1 max 3 mean 2, 2 NaN, 1 inf" in str(info.value)


@pytest.mark.parametrize(
    ("value", "stats"),
    [
        (np.array([[1.5, -2], [np.nan, np.inf]], "float32"), "float32[2, 2] min -2 max 1.5 mean -0.25, 1 NaN, 1 inf"),
        (np.array([3, 1, 2], "int32"), "int32[3] min 1 max 3 mean 2, 0 NaN, 0 inf"),
        (np.array([True, False, True]), "bool[3] min False max True mean 0.666667, 0 NaN, 0 inf"),
        (np.zeros((0, 4), "float32"), "float32[0, 4] empty"),
        (np.full(3, np.nan, "float64"), "float64[3] no finite element, 3 NaN, 0 inf"),
        (np.array([1 + 2j, np.inf], "complex64"), "complex64[2] min (1+2j) max (1+2j) mean (1+2j), 0 NaN, 1 inf"),
        (
            LoDTensor(np.array([[1.0], [3.0]], "float32"), [[0, 2]]),
            "lod_tensor<float32>[2, 1] lod_levels=1 min 1 max 3 mean 2, 0 NaN, 0 inf",
        ),
        (
            SelectedRows(np.array([0, 7]), np.array([[1.0, -np.inf], [2.0, 5.0]], "float32"), 9),
            "selected_rows<float32>[9, 2] rows=2 min 1 max 5 mean 2.66667, 0 NaN, 1 inf",
        ),
        (None, "None"),
        ([np.array([1.0]), None], "[float64[1] min 1 max 1 mean 1, 0 NaN, 0 inf; None]"),
        ("not an array", "str"),
    ],
)
def test_value_statistics(value: object, stats: str) -> None:
    assert value_stats(value) == stats


@pytest.mark.filterwarnings("ignore::RuntimeWarning")
def test_values_on_a_gpu_are_checked_with_its_array_module(gpu) -> None:  # noqa: F811
    main, q, out = division("cuda:0")
    with bir.Executor("cpu", check_nan_inf=True) as exe, pytest.raises(NanInfError) as info:
        exe.run(main, feed={"x": X, "y": Y}, fetch_list=[out], scope=bir.Scope())
    assert info.value.counts == {q.name: (1, 1)} and "@cuda:0" in info.value.op
    assert "X=x@cuda:0: float32[2, 3] min 0 max 6 mean 3.16667, 0 NaN, 0 inf" in str(info.value)
    with bir.Executor("cpu") as exe:
        (got,) = exe.run(main, feed={"x": X, "y": Y}, fetch_list=[q], scope=bir.Scope())
    np.testing.assert_array_equal(transfer(got, "cpu"), X / Y)
