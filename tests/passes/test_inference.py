"""The inference pass: training programs of random shape lose their training ops, not their results."""

from __future__ import annotations

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

import blockir as bir
from blockir.ir.schema import OpRole
from blockir.passes import Inference, parse_pipeline, run
from blockir.passes.inference import is_training_op

ACTS = st.sampled_from([None, "relu", "tanh", "sigmoid"])
OPTIMIZERS = {
    "sgd": lambda: bir.optimizer.SGD(0.1),
    "adam": lambda: bir.optimizer.Adam(0.01),
    "momentum": lambda: bir.optimizer.Momentum(0.1, momentum=0.9),
}


@st.composite
def training_programs(draw: st.DrawFn) -> tuple[bir.Program, bir.Program, list[str]]:
    """A random MLP (with optional residual sums) and a loss minimized by a random optimizer."""
    main, startup = bir.Program(), bir.Program()
    main.random_seed = startup.random_seed = draw(st.integers(1, 1000))
    width = draw(st.integers(2, 4))
    with bir.unique_name.guard(), bir.program_guard(main, startup):
        x = bir.data("x", shape=[-1, 3], dtype="float32")
        y = bir.data("y", shape=[-1, 1], dtype="float32")
        h = bir.layers.fc(x, size=width, act=draw(ACTS))
        forward = [h.name]
        for _ in range(draw(st.integers(0, 3))):
            nxt = bir.layers.fc(h, size=width, act=draw(ACTS))
            h = bir.layers.elementwise_add(h, nxt) if draw(st.booleans()) else nxt
            forward.append(h.name)
        pred = bir.layers.fc(h, size=1)
        loss = bir.layers.mean(bir.layers.square_error_cost(pred, y))
        OPTIMIZERS[draw(st.sampled_from(sorted(OPTIMIZERS)))]().minimize(loss)
    targets = draw(st.lists(st.sampled_from([*forward, pred.name, loss.name]), min_size=1, max_size=3, unique=True))
    return main, startup, targets


def test_is_a_registered_pass() -> None:
    assert parse_pipeline("inference") == [Inference()]


@settings(max_examples=40)
@given(training_programs(), st.integers(0, 2**32 - 1))
def test_inference_keeps_forward_results(case: tuple[bir.Program, bir.Program, list[str]], seed: int) -> None:
    main, startup, targets = case
    before = str(main)
    result, report = run(main, "inference")
    assert str(main) == before  # the input is untouched
    assert report.record("inference").changed
    assert not any(is_training_op(op) for op in result.ops())
    assert all(op.attr("op_role", OpRole.FORWARD) & (OpRole.BACKWARD | OpRole.OPTIMIZE) == 0 for op in result.ops())
    assert not any(name.endswith("@GRAD") for name in result.global_block().vars)
    rng = np.random.default_rng(seed)
    feed = {"x": rng.normal(size=(4, 3)).astype("float32"), "y": rng.normal(size=(4, 1)).astype("float32")}
    exe, trained, inferred = bir.Executor("cpu"), bir.Scope(), bir.Scope()
    exe.run(startup, scope=trained)
    for name in trained.names():
        inferred.set(name, np.array(trained.get(name)))
    want = exe.run(main, feed=feed, fetch_list=targets, scope=trained)  # computed before the update
    got = exe.run(result, feed=feed, fetch_list=targets, scope=inferred)
    for name, a, b in zip(targets, want, got):
        np.testing.assert_array_equal(a, b, err_msg=name)
