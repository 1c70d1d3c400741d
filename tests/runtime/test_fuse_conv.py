"""The passes of convolutional networks as the executor applies them (BuildStrategy.fuse_conv_bn,
fuse_conv_add_act, fuse_bn_act_ops): to its own copy of inference programs, the folded weights the plan's, the
scope's parameters untouched and a replaced parameter seen; exports unfused; the fused ops' own checks."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pytest

import blockir as bir
from blockir.errors import BlockirError, ShapeError
from blockir.ir import Program
from blockir.ops.values import note_written, writes
from blockir.passes import run
from blockir.passes.rewrite import Create, Fresh, OpPattern, Pattern
from tests.runtime.test_fusion import strategy, unfused

FEED = {"x": np.random.default_rng(0).standard_normal((2, 3, 6, 6)).astype(np.float32)}


def cnn() -> tuple[Program, Program, Any]:
    """conv + bn + relu, then conv with a bias + bn + the first block's output + relu; the is_test clone."""
    main, startup = Program(), Program()
    main.random_seed = startup.random_seed = 3
    with bir.unique_name.guard(), bir.program_guard(main, startup):
        x = bir.data("x", shape=[-1, 3, 6, 6])
        h = bir.layers.batch_norm(bir.layers.conv2d(x, 4, 3, padding=1, bias_attr=False), act="relu")
        g = bir.layers.batch_norm(bir.layers.conv2d(h, 4, 3, padding=1))
        out = bir.layers.relu(bir.layers.elementwise_add(g, h))
    return main.clone(for_test=True), startup, out


def scope_for(startup: Program, test: Program) -> bir.Scope:
    scope, rng = bir.Scope(), np.random.default_rng(1)
    with bir.Executor(build_strategy=unfused()) as exe:
        exe.run(startup, scope=scope)
    for var in test.list_vars():
        if var.persistable and var.name.startswith("batch_norm"):
            scope.set(var.name, (rng.random(var.shape) + 0.5).astype(np.float32))
    return scope


def types(program: Program) -> list[str]:
    return [op.type for op in program.global_block().ops]


def test_an_inference_program_runs_folded_and_fused_its_parameters_untouched() -> None:
    test, startup, out = cnn()
    text = str(test)
    scope = scope_for(startup, test)
    params = {name: scope.get(name) for name in scope.names()}
    copies = {name: np.array(value, copy=True) for name, value in params.items()}
    with bir.Executor(build_strategy=unfused()) as exe:
        want = exe.run(test, feed=FEED, fetch_list=[out], scope=scope)[0]
    with bir.Executor() as exe:
        got = exe.run(test, feed=FEED, fetch_list=[out], scope=scope)[0]
        compiled = exe.compiled_program(test, FEED, [out])
        report = exe.pass_report(test, FEED, [out])
    assert types(compiled) == ["conv_bn_fold", "fused_conv2d_add_act", "conv_bn_fold", "fused_conv2d_add_act"]
    assert report.record("fold-conv-bn").changed and report.record("fuse-conv-add-act").changed
    assert np.abs(got - want).max() <= 1e-5 * np.abs(want).max()
    assert str(test) == text  # the program the user holds stays as it is
    for name, value in params.items():  # the same arrays, the same values: the folded weights are the plan's
        assert scope.get(name) is value and np.array_equal(value, copies[name]), name
    assert not any(name.endswith("@BN_FOLDED") for name in scope.names())


def test_a_parameter_replaced_in_the_scope_is_folded_again_at_the_next_run() -> None:
    test, startup, out = cnn()
    scope = scope_for(startup, test)
    with bir.Executor() as exe:
        first = exe.run(test, feed=FEED, fetch_list=[out], scope=scope)[0]
        assert np.array_equal(exe.run(test, feed=FEED, fetch_list=[out], scope=scope)[0], first)
        scope.set("batch_norm_0.w_0", scope.get("batch_norm_0.w_0") * 2)  # a new array: the scale doubled
        scope.set("conv2d_1.w_0", -scope.get("conv2d_1.w_0"))
        got = exe.run(test, feed=FEED, fetch_list=[out], scope=scope)[0]
    with bir.Executor(build_strategy=unfused()) as exe:
        want = exe.run(test, feed=FEED, fetch_list=[out], scope=scope)[0]
    assert not np.allclose(got, first)
    assert np.abs(got - want).max() <= 1e-5 * np.abs(want).max()


@pytest.mark.parametrize("fuse_optimizer", [False, True])
def test_training_steps_on_the_same_scope_are_folded_into_the_next_inference_run(fuse_optimizer: bool) -> None:
    # The optimizer updates the parameters' arrays in place (with fuse_all_optimizer_ops, a buffer they view):
    # the same arrays, new values, which the test clone must fold again.
    main, startup = Program(), Program()
    main.random_seed = startup.random_seed = 3
    with bir.unique_name.guard(), bir.program_guard(main, startup):
        x = bir.data("x", shape=[-1, 3, 6, 6])
        conv = bir.layers.conv2d(x, 4, 3, padding=1, bias_attr=False)
        h = bir.layers.batch_norm(conv, act="relu", use_global_stats=True)
        loss = bir.layers.mean(h)
        test = main.clone(for_test=True)
        bir.optimizer.Momentum(0.5, 0.9).minimize(loss)
    training = strategy(conv=False, optimizer=fuse_optimizer)
    scope = bir.Scope()
    with bir.Executor(build_strategy=training) as trainer, bir.Executor() as exe:
        trainer.run(startup, scope=scope)
        trainer.run(main, feed=FEED, fetch_list=[loss], scope=scope)  # fused: the scope holds views from now on
        filters = scope.get("conv2d_0.w_0")
        before = exe.run(test, feed=FEED, fetch_list=[h], scope=scope)[0]
        for _ in range(3):
            trainer.run(main, feed=FEED, fetch_list=[loss], scope=scope)
        after = exe.run(test, feed=FEED, fetch_list=[h], scope=scope)[0]
        assert "conv_bn_fold" in types(exe.compiled_program(test, FEED, [h]))
        assert ("coalesce_tensor" in types(trainer.compiled_program(main, FEED, [loss]))) == fuse_optimizer
    with bir.Executor(build_strategy=unfused()) as exe:
        want = exe.run(test, feed=FEED, fetch_list=[h], scope=scope)[0]
    assert scope.get("conv2d_0.w_0") is filters  # updated in place
    assert not np.allclose(after, before)
    assert np.abs(after - want).max() <= 1e-5 * np.abs(want).max()


def test_writes_in_place_count_for_the_memory_every_view_shares() -> None:
    buffer = np.zeros(12, np.float32)
    a, b = buffer[:6].reshape(2, 3), buffer[6:]
    other = np.zeros(3)
    counts = [writes(x) for x in (a, b, buffer, other)]
    note_written(buffer)
    note_written(a)
    assert [writes(x) - n for x, n in zip((a, b, buffer, other), counts)] == [2, 2, 2, 0]


@pytest.mark.parametrize(
    ("flag", "present", "absent"),
    [
        ("fuse_conv_bn", {"batch_norm", "fused_conv2d_add_act"}, {"conv_bn_fold"}),
        ("fuse_conv_add_act", {"conv_bn_fold", "fused_conv2d_add_act", "relu"}, {"batch_norm"}),
    ],
)
def test_each_flag_turns_its_pass_off(flag: str, present: set[str], absent: set[str]) -> None:
    test, _, out = cnn()
    build = strategy()
    setattr(build, flag, False)
    with bir.Executor(build_strategy=build) as exe:
        compiled = set(types(exe.compiled_program(test, FEED, [out])))
        option = {"fuse_conv_bn": "conv_bn=false", "fuse_conv_add_act": "conv_add_act=false"}[flag]
        assert option in exe.pass_report(test, FEED, [out]).pipeline
    assert present <= compiled and not absent & compiled


def test_a_fetched_intermediate_is_not_fused_away() -> None:
    test, _, out = cnn()
    conv = test.global_block().ops[0].output("Output")[0]
    with bir.Executor() as exe:
        compiled = exe.compiled_program(test, FEED, [out, conv])
    assert types(compiled)[0] == "conv2d"


def test_exports_stay_unfused_and_refuse_blockir_fused_ops(tmp_path: Path) -> None:
    test, startup, out = cnn()
    scope = scope_for(startup, test)
    with bir.Executor() as exe:
        exe.run(test, feed=FEED, fetch_list=[out], scope=scope)
        bir.io.save_inference_model(str(tmp_path / "m"), ["x"], [out], exe, test, scope=scope, format="paddle")
        loaded, feeds, fetches = bir.io.load_inference_model(str(tmp_path / "m"), exe, scope=bir.Scope())
        assert "batch_norm" in types(loaded) and "conv_bn_fold" not in types(loaded)
        assert "fused_conv2d_add_act" in types(exe.compiled_program(loaded, FEED, fetches))
        fused, _ = run(test, "fuse-bn-act")
        assert "batch_norm_act" in types(fused)
        with pytest.raises(BlockirError, match="batch_norm_act are blockir's own fused ops"):
            bir.io.save_inference_model(str(tmp_path / "f"), ["x"], [out.name], exe, fused, scope=scope, format="fluid")


def test_fused_conv2d_add_act_refuses_what_it_cannot_compute() -> None:
    program = Program()
    block = program.global_block()
    x = block.create_var("x", shape=(-1, 3, 6, 6), dtype="float32")
    w = block.create_var("w", shape=(4, 3, 3, 3), dtype="float32", persistable=True)
    b = block.create_var("b", shape=(4,), dtype="float32", persistable=True)
    bad = block.create_var("bad", shape=(3,), dtype="float32", persistable=True)
    y = block.create_var("y", dtype="float32")
    slots = {"Input": [x], "Filter": [w], "Bias": [b]}
    block.append_op("fused_conv2d_add_act", slots, {"Output": [y]}, {"activation": "relu"})
    assert y.shape == (-1, 4, 4, 4)
    with pytest.raises(ShapeError, match="split_channels"):
        block.append_op("fused_conv2d_add_act", slots, {"Output": [y]}, {"split_channels": [2, 2]})
    with pytest.raises(ShapeError, match="activation 'swish' is not supported"):
        block.append_op("fused_conv2d_add_act", slots, {"Output": [y]}, {"activation": "swish"})
    with pytest.raises(ShapeError, match=r"Bias .* must have shape \[4\]"):
        block.append_op("fused_conv2d_add_act", {**slots, "Bias": [bad]}, {"Output": [y]})


def test_patterns_with_fresh_values_and_pass_through_outputs_are_checked_when_made() -> None:
    with pytest.raises(BlockirError, match="passes an input through"):
        OpPattern("bn", ("batch_norm",), {"X": "c"}, {"Y": "y", "MeanOut": "m"}, passes=("MeanOut",))
    ops = (
        OpPattern("conv", ("conv2d",), {"Input": "x", "Filter": "w"}, {"Output": "c"}),
        OpPattern("act", ("relu",), {"X": "c"}, {"Out": "y"}),
    )
    fused = Create("fused_conv2d_add_act", ("conv", "act"), {"Input": "x", "Filter": "w2"}, {"Output": "y"})
    spec = Fresh("w", "F", lambda m: ((1,), "float32"))
    with pytest.raises(BlockirError, match="helpers .* must write exactly the fresh symbols"):
        Pattern("p", ops, (fused,), fresh={"w2": spec})
    helper = Create("scale", (), {"X": "w"}, {"Out": "w2"})
    with pytest.raises(BlockirError, match="fresh symbols .* must be bound by no op"):
        Pattern("p", ops, (helper, fused), fresh={"c": spec, "w2": spec})
    assert Pattern("p", ops, (helper, fused), fresh={"w2": spec}).intermediates == frozenset({"c"})
