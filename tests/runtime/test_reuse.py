"""The executor offers kernels dead buffers (``reuse``) only where nothing else can see them.

``rt_inc`` adds 1 in place when offered its input and records the offers it got, so a test both sees the
plan's decision and would see the damage of a wrong one.
"""

from __future__ import annotations

from collections.abc import Iterator

import numpy as np
import pytest

import blockir as bir
from blockir.errors import ExecutionError
from blockir.ir.schema import OpSchema, Slot
from tests.registries import ops_registered
from tests.runtime.conftest import chain_program
from tests.runtime.test_fusion import strategy

OFFERS: list[bool] = []  # per rt_inc call: was X offered?


def _inc(ctx, x, *, reuse=()):
    OFFERS.append(bool(reuse and reuse[0]))
    out = x if OFFERS[-1] else x.copy()
    out += 1
    return out


def _inc_fail(ctx, x, *, reuse=()):
    raise ValueError("boom")


SCHEMAS = (
    OpSchema("rt_inc", (Slot("X"),), (Slot("Out"),), kernel=_inc),
    OpSchema("rt_inc_fail", (Slot("X"),), (Slot("Out"),), kernel=_inc_fail),
    OpSchema("rt_same", (Slot("X"),), (Slot("Out"),), kernel=lambda ctx, x: x),
    OpSchema("rt_view", (Slot("X"),), (Slot("Out"),), kernel=lambda ctx, x: x[:]),
    OpSchema("rt_pair", (Slot("X"), Slot("Y")), (Slot("Out"),), kernel=lambda ctx, x, y: x + y),
)


@pytest.fixture(scope="module", autouse=True)
def _ops() -> Iterator[None]:
    with ops_registered(*SCHEMAS):
        yield


@pytest.fixture(autouse=True)
def _clear() -> None:
    OFFERS.clear()


def program(*ops: tuple[str, str, str]) -> bir.Program:
    """x (fed) and one op per (type, input, output); every variable float32 [-1]."""
    prog = chain_program(0)
    block = prog.global_block()
    for op_type, x, out in ops:
        if not block.has_var(out):
            block.create_var(out, shape=(-1,), dtype="float32")
        if op_type == "rt_pair":
            a, b = x.split(",")
            block.append_op(op_type, {"X": a, "Y": b}, {"Out": out})
        else:
            attrs = {"scale": 2.0, "bias": 1.0} if op_type == "rt_scale" else {}
            block.append_op(op_type, {"X": x}, {"Out": out}, attrs)
    return prog


def run(prog: bir.Program, fetch: list[str], x: np.ndarray | None = None) -> list[np.ndarray]:
    x = np.arange(3, dtype=np.float32) if x is None else x
    return bir.Executor("cpu").run(prog, feed={"x": x}, fetch_list=fetch, scope=bir.Scope())


SCALE = ("rt_scale", "x", "t")  # t = 2 x + 1, made in the run


def test_a_temporary_dying_at_the_op_is_offered_and_reused() -> None:
    (y,) = run(program(SCALE, ("rt_inc", "t", "u"), ("rt_inc", "u", "y")), ["y"])
    assert OFFERS == [True, True]
    np.testing.assert_array_equal(y, [3, 5, 7])


def test_a_feed_is_never_offered() -> None:
    x = np.arange(3, dtype=np.float32)
    (y,) = run(program(("rt_inc", "x", "y")), ["y"], x)
    assert OFFERS == [False]
    np.testing.assert_array_equal(x, [0, 1, 2])
    np.testing.assert_array_equal(y, [1, 2, 3])


def test_a_feed_passed_on_unchanged_is_not_reused() -> None:
    """rt_same hands the fed array on as a temporary: the user's feed still references it."""
    x = np.arange(3, dtype=np.float32)
    (y,) = run(program(("rt_same", "x", "t"), ("rt_inc", "t", "y")), ["y"], x)
    assert OFFERS == [False]
    np.testing.assert_array_equal(x, [0, 1, 2])


def test_fetched_and_later_read_values_are_not_offered() -> None:
    t, y = run(program(SCALE, ("rt_inc", "t", "y")), ["t", "y"])
    np.testing.assert_array_equal(t, [1, 3, 5])
    (z,) = run(program(SCALE, ("rt_inc", "t", "y"), ("rt_pair", "t,y", "z")), ["z"])
    np.testing.assert_array_equal(z, [1 + 2, 3 + 4, 5 + 6])
    assert OFFERS == [False, False]


def test_a_value_also_bound_to_a_live_variable_is_not_reused() -> None:
    """t dies at rt_inc, but a (the same array) and v (a view of it) are read after it."""
    for alias in ("rt_same", "rt_view"):
        OFFERS.clear()
        (z,) = run(program(SCALE, (alias, "t", "a"), ("rt_inc", "t", "y"), ("rt_pair", "a,y", "z")), ["z"])
        assert OFFERS == [False], alias
        np.testing.assert_array_equal(z, [1 + 2, 3 + 4, 5 + 6], err_msg=alias)


def test_a_view_is_not_reused_even_when_it_is_the_only_holder() -> None:
    (y,) = run(program(SCALE, ("rt_view", "t", "v"), ("rt_inc", "v", "y")), ["y"])
    assert OFFERS == [False]
    np.testing.assert_array_equal(y, [2, 4, 6])


def test_an_op_reading_a_variable_twice_is_not_offered_it() -> None:
    prog = program(SCALE, ("rt_inc", "t", "y"))
    block = prog.global_block()
    block.create_var("z", shape=(-1,), dtype="float32")
    block.append_op("elementwise_add", {"X": "y", "Y": "y"}, {"Out": "z"})
    plan = bir.Executor("cpu").plan(prog, ["x"], ["z"])
    assert [s.reuse for s in plan.steps] == [(), ((0, plan.steps[1].inputs[0][2]),), ()]
    np.testing.assert_array_equal(run(prog, ["z"])[0], [4, 8, 12])


def test_a_failing_kernel_still_names_the_inputs_it_was_given() -> None:
    with pytest.raises(ExecutionError, match=r"ValueError: boom\n.*rt_inc_fail.*\n  inputs: X=t: float32\[3\]"):
        run(program(SCALE, ("rt_inc_fail", "t", "y")), ["y"])


@pytest.mark.parametrize("fused", [False, True], ids=["unfused", "fused"])
def test_training_an_mlp_reuses_buffers_and_matches_numpy(fused: bool) -> None:
    """fc + relu + softmax + cross_entropy + SGD: relu, softmax, their gradients and sgd are offered dead
    buffers (fused: fc_grad_sgd, with relu's gradient and the updates); five steps give the losses and weights
    of the same training written in numpy."""
    rng = np.random.default_rng(3)
    xb, yb = rng.normal(size=(8, 5)).astype("float32"), rng.integers(0, 3, size=(8, 1))
    main, startup = bir.Program(), bir.Program()
    with bir.unique_name.guard(), bir.program_guard(main, startup):
        x = bir.data("x", shape=[-1, 5], dtype="float32")
        y = bir.data("y", shape=[-1, 1], dtype="int64")
        pred = bir.layers.fc(bir.layers.fc(x, size=4, act="relu"), size=3, act="softmax")
        loss = bir.layers.mean(bir.layers.cross_entropy(pred, y))
        bir.optimizer.SGD(learning_rate=0.5).minimize(loss)
    exe, scope = bir.Executor("cpu", build_strategy=strategy(fused, fused, fused)), bir.Scope()
    exe.run(startup, scope=scope)
    w = [scope.get(p.name).copy() for p in main.all_parameters()]
    plan = exe.plan(main, ["x", "y"], [loss])
    offered = {s.ctx.op_text.split(" = ")[1].split("(")[0] for s in plan.steps if s.reuse}
    assert offered == ({"fc_grad_sgd"} if fused else {"relu", "softmax", "softmax_grad", "relu_grad", "sgd"})

    for _ in range(5):
        (got,) = exe.run(main, feed={"x": xb, "y": yb}, fetch_list=[loss], scope=scope)
        a1 = xb @ w[0] + w[1]
        r1 = np.maximum(a1, 0)
        a2 = r1 @ w[2] + w[3]
        p = np.exp(a2 - a2.max(axis=1, keepdims=True))
        p /= p.sum(axis=1, keepdims=True)
        rows = np.arange(len(yb))
        np.testing.assert_allclose(got, [-np.log(p[rows, yb[:, 0]]).mean()], rtol=1e-5)
        g2 = p.copy()
        g2[rows, yb[:, 0]] -= 1
        g2 /= len(yb)
        g1 = (g2 @ w[2].T) * (a1 > 0)
        for param, grad in zip(w, (xb.T @ g1, g1.sum(0), r1.T @ g2, g2.sum(0))):
            param -= 0.5 * grad
    for p, expected in zip(main.all_parameters(), w):
        np.testing.assert_allclose(scope.get(p.name), expected, rtol=1e-4, atol=1e-6)
