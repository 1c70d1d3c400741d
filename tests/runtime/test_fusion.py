"""The executor's fusion passes: on by default, controlled by BuildStrategy's flags (Executor(build_strategy=...),
CompiledProgram(main, build_strategy=...)), keeping what a run fetches and feeds, cached per flags."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import numpy as np
import pytest

import blockir as bir
from blockir.errors import BlockirError
from blockir.ir import Program
from blockir.ir.schema import KernelContext, lookup
from tests.ops.harness import kernel_attrs

FUSED = {"fc", "fc_grad_sgd", "softmax_with_cross_entropy_mean", "softmax_with_cross_entropy_mean_grad"}


def mlp() -> tuple[Program, Program, bir.ir.Variable]:
    """The benchmark's MLP, small: two relu layers, a softmax layer, cross-entropy, mean, SGD."""
    main, startup = Program(), Program()
    main.random_seed = startup.random_seed = 7
    with bir.program_guard(main, startup):
        x = bir.data("x", shape=[-1, 6], dtype="float32")
        y = bir.data("y", shape=[-1, 1], dtype="int64")
        h = bir.layers.fc(bir.layers.fc(x, size=5, act="relu"), size=5, act="relu")
        loss = bir.layers.mean(bir.layers.cross_entropy(bir.layers.fc(h, size=3, act="softmax"), y))
        bir.optimizer.SGD(learning_rate=0.5).minimize(loss)
    return main, startup, loss


FEED = {
    "x": np.random.default_rng(0).normal(size=(8, 6)).astype("float32"),
    "y": np.random.default_rng(1).integers(0, 3, size=(8, 1)),
}


def strategy(
    fc: bool = True, elementwise_act: bool = True, softmax_ce: bool = True, optimizer: bool = True, conv: bool = True
) -> bir.BuildStrategy:
    """A BuildStrategy with these fusions, ``conv`` the four passes of convolutional networks (the three fusions and
    max_pool_with_index; the tests of other modules use it too)."""
    s = bir.BuildStrategy()
    s.fuse_gemm_epilogue, s.fuse_elewise_add_act_ops = fc, elementwise_act
    s.fuse_softmax_with_cross_entropy, s.fuse_all_optimizer_ops = softmax_ce, optimizer
    s.fuse_conv_bn = s.fuse_conv_add_act = s.fuse_bn_act_ops = s.max_pool_with_index = conv
    return s


def unfused() -> bir.BuildStrategy:
    """A BuildStrategy fusing nothing: the executor runs programs as they are (or as the device pipeline makes them)."""
    return strategy(False, False, False, False, conv=False)


def train(program: Any, startup: Program, loss: Any, exe: bir.Executor, steps: int = 3) -> tuple[list, dict]:
    scope = bir.Scope()
    exe.run(startup, scope=scope)
    losses = [exe.run(program, feed=FEED, fetch_list=[loss], scope=scope)[0] for _ in range(steps)]
    params = startup.global_block().vars
    return losses, {name: np.asarray(scope.get(name)) for name in params}


def types(program: Program) -> set[str]:
    return {op.type for op in program.global_block().ops}


def test_the_executor_fuses_by_default_and_trains_as_the_unfused_program_does() -> None:
    main, startup, loss = mlp()
    with bir.Executor() as exe, bir.Executor(build_strategy=unfused()) as plain:
        compiled = exe.compiled_program(main, FEED, [loss])
        assert FUSED <= types(compiled) and not {"mul", "relu", "softmax", "cross_entropy"} & types(compiled)
        # 29 ops become 9: 3 fc, softmax_with_cross_entropy_mean (with the mean) and its gradient, the
        # loss's gradient (fill_constant), and 3 fc_grad_sgd, each with its layer's two sgd updates
        assert len(compiled.global_block().ops) == 9 and len(main.global_block().ops) == 29
        assert plain.compiled_program(main, FEED, [loss]).digest() == main.digest()
        (fused_losses, fused_params), (losses, params) = (
            train(main, startup, loss, exe),
            train(main, startup, loss, plain),
        )
    np.testing.assert_allclose(fused_losses, losses, rtol=1e-6)
    for name in params:
        np.testing.assert_allclose(fused_params[name], params[name], rtol=1e-5, atol=1e-7, err_msg=name)


@pytest.mark.parametrize(
    ("flags", "present", "absent"),
    [
        (
            (False, True, True, True),
            {"fused_elemwise_activation", "mul", "softmax_with_cross_entropy_mean", "coalesce_tensor"},
            {"fc"},
        ),
        ((True, False, True, True), {"fc", "softmax_with_cross_entropy_mean"}, {"fused_elemwise_activation"}),
        ((True, True, False, True), {"fc", "softmax", "cross_entropy"}, {"softmax_with_cross_entropy_mean"}),
        ((True, True, True, False), {"fc_grad", "sgd"}, {"fc_grad_sgd", "coalesce_tensor"}),
    ],
    ids=["fuse_gemm_epilogue", "fuse_elewise_add_act_ops", "fuse_softmax_with_cross_entropy", "fuse_all_optimizer_ops"],
)
def test_each_flag_turns_its_fusion_off(flags: tuple[bool, ...], present: set, absent: set) -> None:
    main, _, loss = mlp()
    with bir.Executor(build_strategy=strategy(*flags)) as exe:
        compiled = exe.compiled_program(main, FEED, [loss])
        option = ["fc=false", "elementwise_act=false", "softmax_ce=false", "optimizer=false"][flags.index(False)]
        assert exe.pass_report(main, FEED, [loss]).pipeline == f"fuse{{keep={loss.name},x,y {option}}}"
    assert present <= types(compiled) and not absent & types(compiled)


def test_flags_changed_between_runs_compile_the_program_again() -> None:
    main, startup, loss = mlp()
    with bir.Executor() as exe:
        scope = bir.Scope()
        exe.run(startup, scope=scope)
        exe.run(main, feed=FEED, fetch_list=[loss], scope=scope)
        fused = exe.plan(main, FEED, [loss])
        exe.build_strategy.fuse_gemm_epilogue = False
        exe.run(main, feed=FEED, fetch_list=[loss], scope=scope)
        unfused = exe.plan(main, FEED, [loss])
        assert unfused is not fused and exe.plan(main, FEED, [loss]) is unfused  # cached per flags
        assert {s.ctx.op_text.split(" = ", 1)[1].split("(")[0] for s in unfused.steps} >= {"mul"}


def test_a_compiled_program_runs_with_its_own_build_strategy(tmp_path: Path) -> None:
    main, startup, loss = mlp()
    compiled = bir.CompiledProgram(main, build_strategy=strategy(fc=False))
    with bir.Executor() as exe:  # its own strategy fuses everything; the compiled program's wins
        scope = bir.Scope()
        exe.run(startup, scope=scope)
        exe.run(compiled, feed=FEED, fetch_list=[loss], scope=scope, trace=str(tmp_path / "run.json"))
    ran = json.loads((tmp_path / "run.json").read_text())["otherData"]["blockir"]["pipeline"]
    assert ran == f"fuse{{keep={loss.name},x,y fc=false}}"
    parallel = bir.CompiledProgram(main, build_strategy=strategy(fc=False)).with_data_parallel(loss, places=["cpu"] * 2)
    assert not parallel.build_strategy.fuse_gemm_epilogue  # with_data_parallel keeps it unless given another


def test_a_fetched_intermediate_is_computed_not_fused_away() -> None:
    main, startup, loss = mlp()
    with bir.Executor() as exe:
        scope = bir.Scope()
        exe.run(startup, scope=scope)
        w, b = np.asarray(scope.get("fc_0.w_0")).copy(), np.asarray(scope.get("fc_0.b_0")).copy()
        product, total, _ = exe.run(main, feed=FEED, fetch_list=["fc_0.tmp_0", "fc_0.tmp_1", loss], scope=scope)
        compiled = exe.compiled_program(main, FEED, ["fc_0.tmp_0", "fc_0.tmp_1", loss])
    np.testing.assert_allclose(product, FEED["x"] @ w, rtol=1e-6)
    np.testing.assert_allclose(total, FEED["x"] @ w + b, rtol=1e-6)
    writers = {name for op in compiled.global_block().ops for name in op.output_names()}
    assert {"fc_0.tmp_0", "fc_0.tmp_1"} <= writers and "fc" in types(compiled)  # the other layers fused


def test_a_build_strategy_must_be_one() -> None:
    with pytest.raises(BlockirError, match="build_strategy must be a BuildStrategy, got dict"):
        bir.Executor(build_strategy={"fuse_gemm_epilogue": False})  # type: ignore[arg-type]
    with pytest.raises(BlockirError, match="build_strategy must be a BuildStrategy, got str"):
        bir.CompiledProgram(Program(), build_strategy="fuse")  # type: ignore[arg-type]


def test_the_fused_kernels_write_into_the_buffers_the_executor_offers() -> None:
    """fused_elemwise_activation sums into X, its gradient and fc_grad mask dOut in place (relu)."""
    rng = np.random.default_rng(2)
    x, y, dout = rng.normal(size=(4, 3)), rng.normal(size=3), rng.normal(size=(4, 3))
    out = np.maximum(x + y, 0)

    def ctx(op_type: str, attrs: dict[str, Any]) -> KernelContext:
        schema = lookup(op_type)
        return KernelContext(np, kernel_attrs(schema, attrs), (True,) * len(schema.outputs), op_type)

    fused = {"functor_list": ["relu", "elementwise_add"], "axis": -1}
    given = x.copy()
    assert (
        lookup("fused_elemwise_activation").kernel(
            ctx("fused_elemwise_activation", fused), given, y, reuse=[True, False]
        )
        is given
    )
    np.testing.assert_array_equal(given, out)
    given = dout.copy()
    dx, _ = lookup("fused_elemwise_activation_grad").kernel(
        ctx("fused_elemwise_activation_grad", fused), x, y, out, given, reuse=[False, False, False, True]
    )
    assert dx is given
    np.testing.assert_array_equal(dx, dout * (out > 0))
    w = rng.normal(size=(3, 3))
    given = dout.copy()
    lookup("fc_grad").kernel(
        ctx("fc_grad", {"activation_type": "relu"}), x, w, y, out, given, reuse=[False, False, False, False, True]
    )
    np.testing.assert_array_equal(given, dout * (out > 0))  # relu's gradient, in dOut's buffer
