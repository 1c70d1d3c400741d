"""Loops, conditionals and tensor arrays built with the DSL (``layers.While``, ``cond``, ``Switch``, ``array_*``):
values against numpy, gradients against the unrolled program (the same ops written out once per iteration) and
against central finite differences in float64, on the host, a virtual CPU device and the CuPy stand-in."""

from __future__ import annotations

import _thread
import signal
import threading
from collections.abc import Callable

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import blockir as bir
from blockir.errors import BlockirError, ShapeError
from blockir.ir import parse
from blockir.ir.proto_io import program_from_bytes
from blockir.viz import collect
from blockir.viz.model import build
from tests.dsl.test_backward_numeric import numeric
from tests.runtime import fake_cupy

L = bir.layers
RNG = np.random.default_rng(36)
PARAMS = {
    "w0": RNG.normal(scale=0.5, size=(4, 4)),
    "w1": RNG.normal(scale=0.5, size=(4, 4)),
    "b1": RNG.normal(scale=0.5, size=(4,)),
}
X = RNG.normal(size=(2, 4))


@pytest.fixture(params=["cpu", "cpu:1", "stand-in"])
def place(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> str:
    if request.param == "stand-in":
        fake_cupy.install(monkeypatch, gpus=1)
        return "cuda:0"
    return request.param


def _cell(h: bir.dsl.Variable, x: bir.dsl.Variable) -> bir.dsl.Variable:
    """One step of the recurrence: tanh(h @ w1 + b1 + x)."""
    return L.tanh(L.fc(h, 4, param_attr=bir.ParamAttr(name="w1"), bias_attr=bir.ParamAttr(name="b1")) + x)


def _rnn(steps: int, unrolled: bool, dtype: str = "float64") -> Callable[[], tuple[bir.dsl.Variable, dict]]:
    """A model whose loss reads the last state and every state (through a tensor array or a concat)."""

    def body() -> tuple[bir.dsl.Variable, dict]:
        x = bir.data("x", [2, 4], dtype)
        h = L.fc(x, 4, bias_attr=False, param_attr=bir.ParamAttr(name="w0"))
        if unrolled:
            outs = []
            for _ in range(steps):
                h = _cell(h, x)
                outs.append(h)
            states = L.concat(outs, axis=0)
        else:
            i = L.fill_constant([1], "int64", 0)
            n = L.fill_constant([1], "int64", steps)
            array = L.create_array(dtype)
            cond = L.less_than(i, n)
            h = L.assign(h)
            loop = L.While(cond)
            with loop.block():
                t = _cell(h, x)
                L.array_write(t, i, array=array)
                L.increment(i)
                L.assign(t, output=h)
                L.less_than(i, n, cond=cond)
            states, _ = L.tensor_array_to_tensor(array, axis=0)
        loss = L.mean(h) + L.mean(states * states)
        return loss, {"h": h, "states": states}

    return body


class Model:
    def __init__(self, body: Callable[[], tuple[bir.dsl.Variable, dict]], backward: bool = True) -> None:
        self.main, self.startup = bir.Program(), bir.Program()
        with bir.unique_name.guard(), bir.program_guard(self.main, self.startup):
            self.loss, self.outputs = body()
            self.forward = self.main.clone()
            self.grads = bir.append_backward(self.loss) if backward else []

    def scope(self, place: str = "cpu") -> bir.Scope:
        scope = bir.Scope()
        bir.Executor(place).run(self.startup, scope=scope)
        for name, value in PARAMS.items():
            if self.main.global_block().has_var(name):
                dtype = self.main.global_block().var(name).dtype
                scope.set(name, value.astype(dtype))
        return scope

    def run(self, fetch: list, place: str = "cpu", program: bir.Program | None = None, feed: dict | None = None):
        dtype = self.main.global_block().var("x").dtype
        feed = {"x": X.astype(dtype)} if feed is None else feed
        return bir.Executor(place).run(program or self.main, feed=feed, fetch_list=fetch, scope=self.scope(place))

    def gradients(self, place: str = "cpu") -> dict[str, np.ndarray]:
        values = self.run([g for _, g in self.grads], place)
        return {p.name: v for (p, _), v in zip(self.grads, values)}


def _numeric(model: Model, name: str) -> np.ndarray:
    """d loss / d ``name`` by central differences over the forward program."""
    return numeric(model, {"x": X}, model.scope(), name)  # type: ignore[arg-type]


# -- while and tensor arrays ------------------------------------------------------------------------------------


def _numpy_rnn(steps: int) -> tuple[np.ndarray, list[np.ndarray]]:
    h, outs = X @ PARAMS["w0"], []
    for _ in range(steps):
        h = np.tanh(h @ PARAMS["w1"] + PARAMS["b1"] + X)
        outs.append(h)
    return h, outs


@pytest.mark.parametrize("steps", [0, 1, 3])
def test_a_while_loop_computes_what_numpy_does(steps: int, place: str) -> None:
    model = Model(_rnn(max(steps, 1), unrolled=False, dtype="float32"), backward=False)
    if steps == 0:  # the loop never runs: its state keeps its first value
        model = Model(_rnn_never_runs, backward=False)
        h, length = model.run([model.outputs["h"], model.outputs["length"]], place)
        np.testing.assert_allclose(h, (X @ PARAMS["w0"]).astype("float32"), rtol=1e-5)
        assert length.tolist() == [0]
        return
    h, states = model.run([model.outputs["h"], model.outputs["states"]], place)
    want_h, want_states = _numpy_rnn(steps)
    np.testing.assert_allclose(h, want_h, rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(states, np.concatenate(want_states), rtol=1e-5, atol=1e-6)


def _rnn_never_runs() -> tuple[bir.dsl.Variable, dict]:
    x = bir.data("x", [2, 4], "float32")
    h = L.assign(L.fc(x, 4, bias_attr=False, param_attr=bir.ParamAttr(name="w0")))
    i = L.fill_constant([1], "int64", 5)
    n = L.fill_constant([1], "int64", 3)
    array = L.create_array("float32")
    cond = L.less_than(i, n)
    with L.While(cond).block():
        t = _cell(h, x)
        L.array_write(t, i, array=array)
        L.increment(i)
        L.assign(t, output=h)
        L.less_than(i, n, cond=cond)
    return L.mean(h), {"h": h, "length": L.array_length(array)}


def test_arrays_are_read_written_counted_and_stacked() -> None:
    main, startup = bir.Program(), bir.Program()
    with bir.unique_name.guard(), bir.program_guard(main, startup):
        x = bir.data("x", [2, 3], "float32")
        zero, one = L.fill_constant([1], "int64", 0), L.fill_constant([1], "int64", 1)
        array = L.array_write(x, zero)
        L.array_write(x * 2.0, one, array=array)
        L.array_write(x * 3.0, L.fill_constant([1], "int64", 3), array=array)  # position 2 stays unwritten
        second = L.array_read(array, one)
        length = L.array_length(array)
        kept = L.create_array("float32")
        L.array_write(x, zero, array=kept)
        L.array_write(x + 1.0, one, array=kept)
        stacked, sizes = L.tensor_array_to_tensor(kept, axis=1, use_stack=True)
        joined, lengths = L.tensor_array_to_tensor(kept, axis=1)
    xv = RNG.normal(size=(2, 3)).astype("float32")
    got = bir.Executor("cpu").run(main, feed={"x": xv}, fetch_list=[second, length, stacked, sizes, joined, lengths])
    np.testing.assert_allclose(got[0], 2 * xv)
    assert got[1].tolist() == [4] and got[1].dtype == np.int64
    np.testing.assert_allclose(got[2], np.stack([xv, xv + 1], axis=1))
    assert got[3].tolist() == [1, 1] and got[3].dtype == np.int32
    np.testing.assert_allclose(got[4], np.concatenate([xv, xv + 1], axis=1))
    assert got[5].tolist() == [3, 3]


def test_reading_a_position_never_written_names_the_op() -> None:
    main, startup = bir.Program(), bir.Program()
    with bir.unique_name.guard(), bir.program_guard(main, startup):
        x = bir.data("x", [1], "float32")
        array = L.array_write(x, L.fill_constant([1], "int64", 0))
        out = L.array_read(array, L.fill_constant([1], "int64", 2))
    with pytest.raises(BlockirError, match=r"position 2 .* never written[\s\S]*read_from_array"):
        bir.Executor("cpu").run(main, feed={"x": np.ones(1, "float32")}, fetch_list=[out])


def test_while_gradients_equal_the_unrolled_programs(place: str) -> None:
    loop, unrolled = Model(_rnn(3, unrolled=False)), Model(_rnn(3, unrolled=True))
    got, want = loop.gradients(place), unrolled.gradients("cpu")
    assert sorted(got) == sorted(want) == ["b1", "w0", "w1"]
    for name in want:
        np.testing.assert_allclose(got[name], want[name], rtol=1e-10, atol=1e-12, err_msg=name)


def test_while_gradients_match_finite_differences() -> None:
    model = Model(_rnn(3, unrolled=False))
    for name, grad in model.gradients().items():
        np.testing.assert_allclose(grad, _numeric(model, name), rtol=1e-6, atol=1e-8, err_msg=name)


def test_a_gradient_op_keeps_the_loops_layout() -> None:
    """while_grad as Paddle writes it: the loop's X, Out, Out@GRAD and StepScopes in, X@GRAD out, its block a
    child of the loop's block whose forward block is the loop's."""
    model = Model(_rnn(2, unrolled=False))
    (loop,) = [op for op in model.main.global_block().ops if op.type == "while"]
    (grad,) = [op for op in model.main.global_block().ops if op.type == "while_grad"]
    assert grad.input("X") == loop.input("X") and grad.input("Out") == loop.output("Out")
    assert grad.input("StepScopes") == loop.output("StepScopes")
    assert list(grad.attr("original_output_grad")) == list(grad.input("Out@GRAD"))
    block = grad.sub_blocks()[0]
    assert block.parent_idx == 0 and block.forward_block_idx == loop.sub_blocks()[0].idx
    assert [op.type for op in block.ops][-1] == "mul_grad"


def test_a_loop_built_for_test_keeps_nothing_and_cannot_be_differentiated() -> None:
    main, startup = bir.Program(), bir.Program()
    with bir.unique_name.guard(), bir.program_guard(main, startup):
        x = bir.data("x", [2, 4], "float64")
        h = L.assign(L.fc(x, 4, bias_attr=False))
        i, n = L.fill_constant([1], "int64", 0), L.fill_constant([1], "int64", 2)
        cond = L.less_than(i, n)
        with L.While(cond, is_test=True).block():
            L.assign(L.tanh(h), output=h)
            L.increment(i)
            L.less_than(i, n, cond=cond)
        with pytest.raises(BlockirError, match="keeps nothing for its gradient"):
            bir.append_backward(L.mean(h))


def test_a_loop_that_never_updates_its_condition_is_refused() -> None:
    with bir.unique_name.guard(), bir.program_guard(bir.Program(), bir.Program()):
        i, n = L.fill_constant([1], "int64", 0), L.fill_constant([1], "int64", 2)
        cond = L.less_than(i, n)
        with pytest.raises(ShapeError, match="never updates its condition"):
            with L.While(cond).block():
                L.increment(i)
        with pytest.raises(ShapeError, match="bool tensor of one element"):
            L.While(i)


def test_a_loop_that_never_ends_can_be_interrupted_and_leaves_no_thread() -> None:
    main, startup = bir.Program(), bir.Program()
    with bir.unique_name.guard(), bir.program_guard(main, startup):
        i, n = L.fill_constant([1], "int64", 0), L.fill_constant([1], "int64", 1)
        cond = L.less_than(i, n)
        with L.While(cond).block():
            L.increment(i, value=0.0)
            L.less_than(i, n, cond=cond)
    before = set(threading.enumerate())
    # Ctrl-C's own handler: a handler another test left in this process (a Ray driver's) may only note the signal
    previous = signal.signal(signal.SIGINT, signal.default_int_handler)
    timer = threading.Timer(0.3, _thread.interrupt_main)
    timer.start()
    try:
        with pytest.raises(KeyboardInterrupt):
            bir.Executor("cpu").run(main, fetch_list=[i])
    finally:
        timer.join()
        signal.signal(signal.SIGINT, previous)
    assert set(threading.enumerate()) <= before


# -- cond and Switch ------------------------------------------------------------------------------------------


def _branches(threshold: float) -> Callable[[], tuple[bir.dsl.Variable, dict]]:
    def body() -> tuple[bir.dsl.Variable, dict]:
        x = bir.data("x", [2, 4], "float64")
        h = L.fc(x, 4, param_attr=bir.ParamAttr(name="w0"), bias_attr=False)
        pred = L.greater_than(L.mean(h), L.fill_constant([1], "float64", threshold))
        y = L.cond(pred, lambda: L.tanh(h) * 2.0, lambda: _cell(h, x))
        return L.mean(y * y), {"y": y, "pred": pred, "h": h}

    return body


@pytest.mark.parametrize("threshold", [-100.0, 100.0], ids=["true", "false"])
def test_cond_runs_the_branch_its_predicate_picks(threshold: float, place: str) -> None:
    model = Model(_branches(threshold), backward=False)
    y, pred, h = model.run([model.outputs[k] for k in ("y", "pred", "h")], place)
    assert pred.tolist() == [threshold < 0]
    want = np.tanh(h) * 2.0 if threshold < 0 else np.tanh(h @ PARAMS["w1"] + PARAMS["b1"] + X)
    np.testing.assert_allclose(y, want, rtol=1e-12)


@pytest.mark.parametrize("threshold", [-100.0, 100.0], ids=["true", "false"])
def test_cond_gradients_match_finite_differences(threshold: float) -> None:
    model = Model(_branches(threshold))
    grads = model.gradients()
    assert "w0" in grads and (threshold < 0) == ("w1" not in grads or not grads["w1"].any())
    for name, grad in grads.items():
        np.testing.assert_allclose(grad, _numeric(model, name), rtol=1e-6, atol=1e-8, err_msg=name)


def test_cond_merges_nested_results_and_refuses_unequal_ones() -> None:
    main, startup = bir.Program(), bir.Program()
    with bir.unique_name.guard(), bir.program_guard(main, startup):
        x = bir.data("x", [3], "float32")
        pred = L.less_than(L.fill_constant([1], "int64", 1), L.fill_constant([1], "int64", 2))
        a, b = L.cond(pred, lambda: (x + 1.0, {"k": x * 2.0}), lambda: (x - 1.0, {"k": x * 3.0}))
        assert L.cond(pred, lambda: None, lambda: None) is None
        with pytest.raises(BlockirError, match="different structures"):
            L.cond(pred, lambda: (x, x), lambda: x)
        with pytest.raises(ShapeError, match="false_fn returns None"):
            L.cond(pred, lambda: x, lambda: None)
    xv = np.arange(3, dtype="float32")
    got = bir.Executor("cpu").run(main, feed={"x": xv}, fetch_list=[a, b["k"]])
    np.testing.assert_allclose(got[0], xv + 1)
    np.testing.assert_allclose(got[1], xv * 2)


@pytest.mark.parametrize(("step", "want"), [(0, 1.0), (1, 2.0), (5, 3.0)])
def test_switch_runs_the_first_case_that_holds(step: int, want: float, place: str) -> None:
    main, startup = bir.Program(), bir.Program()
    with bir.unique_name.guard(), bir.program_guard(main, startup):
        s = bir.data("s", [1], "int64")
        lr = L.fill_constant([1], "float32", 0.0)
        with L.Switch() as switch:
            with switch.case(L.less_than(s, L.fill_constant([1], "int64", 1))):
                L.assign(L.fill_constant([1], "float32", 1.0), output=lr)
            with switch.case(L.less_than(s, L.fill_constant([1], "int64", 3))):
                L.assign(L.fill_constant([1], "float32", 2.0), output=lr)
            with switch.default():
                L.assign(L.fill_constant([1], "float32", 3.0), output=lr)
        with pytest.raises(ShapeError, match="inside 'with Switch"):
            with L.Switch().case(L.less_than(s, s)):
                pass
    (got,) = bir.Executor(place).run(main, feed={"s": np.array([step], "int64")}, fetch_list=[lr])
    assert got.tolist() == [want]


# -- random loop bodies -----------------------------------------------------------------------------------------

_STEPS = {
    "tanh": lambda h, x: L.tanh(h),
    "scale": lambda h, x: h * 0.7 + 0.1,
    "add_x": lambda h, x: h + x,
    "mul_x": lambda h, x: h * x,
    "fc": lambda h, x: L.fc(h, 4, param_attr=bir.ParamAttr(name="w1"), bias_attr=bir.ParamAttr(name="b1")),
    "sigmoid": lambda h, x: L.sigmoid(h),
}


def _random_body(ops: list[str], steps: int, unrolled: bool) -> Callable[[], tuple[bir.dsl.Variable, dict]]:
    def cell(h: bir.dsl.Variable, x: bir.dsl.Variable) -> bir.dsl.Variable:
        for name in ops:
            h = _STEPS[name](h, x)
        return h

    def body() -> tuple[bir.dsl.Variable, dict]:
        x = bir.data("x", [2, 4], "float64")
        h = L.fc(x, 4, bias_attr=False, param_attr=bir.ParamAttr(name="w0"))
        if unrolled:
            for _ in range(steps):
                h = cell(h, x)
        else:
            i, n = L.fill_constant([1], "int64", 0), L.fill_constant([1], "int64", steps)
            cond = L.less_than(i, n)
            h = L.assign(h)
            with L.While(cond).block():
                L.assign(cell(h, x), output=h)
                L.increment(i)
                L.less_than(i, n, cond=cond)
        return L.mean(h * h), {"h": h}

    return body


@settings(max_examples=12, deadline=None)
@given(ops=st.lists(st.sampled_from(sorted(_STEPS)), min_size=1, max_size=4), steps=st.integers(1, 4))
def test_random_loop_bodies_compute_and_differentiate_as_unrolled(ops: list[str], steps: int) -> None:
    loop, unrolled = Model(_random_body(ops, steps, False)), Model(_random_body(ops, steps, True))
    (got,), (want,) = loop.run([loop.outputs["h"]]), unrolled.run([unrolled.outputs["h"]])
    np.testing.assert_allclose(got, want, rtol=1e-12)
    got_grads, want_grads = loop.gradients(), unrolled.gradients()
    assert sorted(got_grads) == sorted(want_grads)
    for name, want_grad in want_grads.items():
        np.testing.assert_allclose(got_grads[name], want_grad, rtol=1e-9, atol=1e-12, err_msg=name)


# -- the IR ----------------------------------------------------------------------------------------------------


def test_programs_with_loops_print_parse_and_serialize_unchanged() -> None:
    model = Model(_rnn(2, unrolled=False))
    text = str(model.main)
    assert str(parse(text)) == text
    again = program_from_bytes(model.main.serialize())
    assert str(again) == text
    np.testing.assert_allclose(
        Model.run(model, [model.grads[0][1].name], program=again)[0], model.gradients()[model.grads[0][0].name]
    )


def test_the_visualizer_boxes_a_loops_block_and_its_gradients_beside_their_ops() -> None:
    model = Model(_rnn(2, unrolled=False))
    data = build(collect(model.main, "place,insert-copies"), "loop")
    types = {op["id"]: op["type"] for op in data["ops"]}
    owners = [(b["idx"], b["parent"], types.get(b["owner"])) for b in data["blocks"]]
    assert owners == [(0, -1, None), (1, 0, "while"), (2, 0, "while_grad")]
    assert all(b["box"] is not None for b in data["blocks"])


def _nested(unrolled: bool, outer: int = 2, inner: int = 3) -> Callable[[], tuple[bir.dsl.Variable, dict]]:
    """A loop in a loop, and a conditional in the outer loop's block (which branch runs changes per iteration)."""

    def body() -> tuple[bir.dsl.Variable, dict]:
        x = bir.data("x", [2, 4], "float64")
        h = L.fc(x, 4, bias_attr=False, param_attr=bir.ParamAttr(name="w0"))
        if unrolled:
            for k in range(outer):
                for _ in range(inner):
                    h = _cell(h, x)
                h = h * 0.5 if k % 2 == 0 else L.tanh(h)
            return L.mean(h * h), {"h": h}
        h = L.assign(h)
        i, n = L.fill_constant([1], "int64", 0), L.fill_constant([1], "int64", outer)
        cond = L.less_than(i, n)
        with L.While(cond).block():
            j, m = L.fill_constant([1], "int64", 0), L.fill_constant([1], "int64", inner)
            inner_cond = L.less_than(j, m)
            with L.While(inner_cond).block():
                L.assign(_cell(h, x), output=h)
                L.increment(j)
                L.less_than(j, m, cond=inner_cond)
            even = L.equal(L.elementwise_mod(i, L.fill_constant([1], "int64", 2)), L.fill_constant([1], "int64", 0))
            L.assign(L.cond(even, lambda: h * 0.5, lambda: L.tanh(h)), output=h)
            L.increment(i)
            L.less_than(i, n, cond=cond)
        return L.mean(h * h), {"h": h}

    return body


def test_nested_loops_and_a_conditional_in_a_loop_compute_and_differentiate_as_unrolled(place: str) -> None:
    loop, unrolled = Model(_nested(False)), Model(_nested(True))
    (got,), (want,) = loop.run([loop.outputs["h"]], place), unrolled.run([unrolled.outputs["h"]])
    np.testing.assert_allclose(got, want, rtol=1e-12)
    got_grads, want_grads = loop.gradients(place), unrolled.gradients()
    assert sorted(got_grads) == sorted(want_grads) == ["b1", "w0", "w1"]
    for name, want_grad in want_grads.items():
        np.testing.assert_allclose(got_grads[name], want_grad, rtol=1e-10, atol=1e-12, err_msg=name)
    # blocks 1-4: the outer loop's, the inner loop's and the two branches'; 5: the outer loop's gradient
    # block, holding those of the branches (6, 7) and of the inner loop (8), each seeing its forward block
    layout = [(b.parent_idx, b.forward_block_idx) for b in loop.main.blocks[1:]]
    assert layout == [(0, -1), (1, -1), (1, -1), (1, -1), (0, 1), (5, 4), (5, 3), (5, 2)]
