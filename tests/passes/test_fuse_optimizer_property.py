"""Property: fusing the optimizer updates of random MLPs changes nothing they compute, step after step, and the
verifier accepts the program after every fused group.

The networks (hypothesis) have 1 to 3 fc layers of random widths and activations, a squared-error or softmax
cross-entropy loss, and are trained by SGD, Momentum (Nesterov or not) or Adam; a layer may have its own learning
rate (its own LearningRate variable: its own group), be frozen (no update) or pinned to cpu:1 (its updates run
there, its forward on the host: never fused). Both programs run four steps from the same start, fetching the loss
and a parameter each step. The updates are elementwise, so fused and unfused agree exactly, not just to float32
rounding.
"""

from __future__ import annotations

from typing import Any
from unittest import mock

import numpy as np
from hypothesis import event, given, settings
from hypothesis import strategies as st

import blockir as bir
import blockir.passes.fuse_optimizer as fuse_optimizer_module
from blockir.ir import Program, verify
from blockir.passes import FuseOptimizer, run
from tests.passes.programs import Network
from tests.runtime.test_fusion import strategy

BATCH = 4


def _optimizer(draw: st.DrawFn) -> Any:
    kind = draw(st.sampled_from(("sgd", "momentum", "adam")))
    lr = draw(st.sampled_from((0.01, 0.1, 0.5)))
    if kind == "sgd":
        return bir.optimizer.SGD(learning_rate=lr)
    if kind == "momentum":
        return bir.optimizer.Momentum(
            learning_rate=lr, momentum=draw(st.sampled_from((0.5, 0.9))), use_nesterov=draw(st.booleans())
        )
    return bir.optimizer.Adam(learning_rate=lr, beta1=draw(st.sampled_from((0.8, 0.9))))


@st.composite
def nets(draw: st.DrawFn) -> Network:
    rng = np.random.default_rng(draw(st.integers(0, 2**32 - 1)))
    width = draw(st.integers(2, 5))
    main, startup = Program(), Program()
    main.random_seed = startup.random_seed = draw(st.integers(1, 10_000))
    with bir.unique_name.guard(), bir.program_guard(main, startup):
        x = bir.data("x", shape=[-1, width], dtype="float32")
        h = x
        for _ in range(draw(st.integers(1, 3))):
            attr = draw(
                st.sampled_from(
                    (
                        None,
                        None,
                        bir.ParamAttr(learning_rate=0.5),
                        bir.ParamAttr(trainable=False),
                        bir.ParamAttr(device="cpu:1"),
                    )
                )
            )
            act = draw(st.sampled_from((None, "relu", "tanh", "sigmoid")))
            h = bir.layers.fc(h, size=draw(st.integers(2, 5)), act=act, param_attr=attr)
        if draw(st.booleans()):
            label = bir.data("label", shape=[-1, 1], dtype="int64")
            classes = draw(st.integers(2, 4))
            loss = bir.layers.mean(bir.layers.cross_entropy(bir.layers.fc(h, size=classes, act="softmax"), label))
            extra = {"label": rng.integers(0, classes, size=(BATCH, 1)).astype("int64")}
        else:
            y = bir.data("y", shape=[-1, 1], dtype="float32")
            loss = bir.layers.mean(bir.layers.square_error_cost(bir.layers.fc(h, size=1), y))
            extra = {"y": rng.normal(size=(BATCH, 1)).astype("float32")}
        _optimizer(draw).minimize(loss)
    params = [p.name for p in main.all_parameters()]
    feed = {"x": rng.normal(size=(BATCH, width)).astype("float32"), **extra}
    return Network(main, startup, feed, [loss.name, draw(st.sampled_from(params))])


def _train(net: Network, fused: bool) -> tuple[list[list[np.ndarray]], dict[str, np.ndarray]]:
    scope = bir.Scope()
    with bir.Executor(build_strategy=strategy(False, False, False, fused)) as exe:
        exe.run(net.startup, scope=scope)
        fetched = [exe.run(net.main, feed=net.feed, fetch_list=net.fetch, scope=scope) for _ in range(4)]
    return fetched, {v.name: np.array(scope.get(v.name)) for v in net.main.list_vars() if v.persistable}


@settings(max_examples=60, deadline=None)
@given(nets())
def test_fused_updates_compute_what_they_replace_and_verify_after_every_group(net: Network) -> None:
    groups = []
    fuse_group = fuse_optimizer_module._fuse_group

    def fuse_and_verify(*args: Any) -> Any:
        created = fuse_group(*args)
        verify(created[0].block.program)  # raises VerifyError naming the ops
        groups.append(created[-1].type)
        return created

    with mock.patch.object(fuse_optimizer_module, "_fuse_group", fuse_and_verify):
        _, report = run(net.main, [FuseOptimizer()])
    assert len(groups) == len(report.record("fuse-optimizer").details["fused"])
    event(f"fused groups: {len(groups)}")

    (fetched, params), (plain_fetched, plain_params) = _train(net, True), _train(net, False)
    for step, plain_step in zip(fetched, plain_fetched):
        for name, got, want in zip(net.fetch, step, plain_step):
            np.testing.assert_array_equal(got, want, err_msg=name)
    assert params.keys() == plain_params.keys()
    for name in params:
        np.testing.assert_array_equal(params[name], plain_params[name], err_msg=name)
