"""Planning and running cost time linear in the program (:mod:`tests.ir.complexity`): many ops writing one variable
(on one stream and on several), add/activation pairs over one reused temporary (what the fusion passes match),
many optimizer updates (fuse-optimizer), many sibling blocks; and the whole ``blockir run`` in process."""

from __future__ import annotations

import contextlib
import io
from collections.abc import Callable
from pathlib import Path
from typing import Any

import blockir as bir
from blockir.cli import main
from blockir.ir import Program
from blockir.passes import FuseElementwiseAct, FuseOptimizer, run
from blockir.passes.rewrite import rewrite
from tests.ir.complexity import assert_linear
from tests.ir.test_complexity import one_variable, siblings


def pairs_over_one_temporary(n: int) -> Program:
    """``n`` times ``t = x + x; o_i = relu(t)``: ``n`` ops write ``t``, each value read once."""
    program = Program()
    block = program.global_block()
    x = block.create_var("x", shape=[1])
    t = block.create_var("t", shape=[1])
    block.append_op("fill_constant", {}, {"Out": x}, {"shape": [1], "value": 1.0})
    for i in range(n):
        block.append_op("elementwise_add", {"X": x, "Y": x}, {"Out": t})
        block.append_op("relu", {"X": t}, {"Out": block.create_var(f"o{i}", shape=[1])})
    return program


def updates(n: int) -> Program:
    """``n`` sgd updates of ``n`` parameters, their gradients made first: one group for fuse-optimizer."""
    program = Program()
    block = program.global_block()
    lr = block.create_var("lr", shape=[1], persistable=True)
    for i in range(n):
        block.create_var(f"w{i}", shape=[4], persistable=True)
        block.append_op("fill_constant", {}, {"Out": block.create_var(f"g{i}", shape=[4])}, {"shape": [4]})
    for i in range(n):
        block.append_op("sgd", {"Param": f"w{i}", "Grad": f"g{i}", "LearningRate": lr}, {"ParamOut": f"w{i}"})
    return program


def running(build: Callable[[int], Program], **executor: Any) -> Callable[[int], Callable[[], object]]:
    """Each time: a new executor (no plan cached) plans ``build(n)`` for fetching ``x`` and runs it."""

    def make(n: int) -> Callable[[], object]:
        program = build(n)

        def work() -> None:
            with bir.Executor("cpu", **executor) as exe:
                exe.run(program, fetch_list=["x"], scope=bir.Scope())

        return work

    return make


def test_running_ops_writing_one_variable_is_linear() -> None:
    assert_linear(running(one_variable), 100, "running ops writing one variable")


def test_running_ops_writing_one_variable_on_several_streams_is_linear() -> None:
    assert_linear(running(one_variable, compute_streams=3), 100, "running ops writing one variable, 3 streams")


def test_running_add_act_pairs_over_one_temporary_is_linear() -> None:
    assert_linear(running(pairs_over_one_temporary), 100, "running pairs over one temporary")


def test_the_fusion_refuses_each_pair_over_one_temporary_once() -> None:
    """A match binds the ops one value connects: each add with the relu reading its ``t`` (refused: ``t`` is read
    by the other relus too), not with every relu (n * n matches, each refused)."""
    program = pairs_over_one_temporary(50)
    done = rewrite(program, FuseElementwiseAct.patterns, set(), "fuse-elementwise-act")
    assert not done.fired
    assert len(done.refused) == 50
    assert all(r.reason.startswith("'t' is also read by") for r in done.refused)


def test_fusing_many_optimizer_updates_is_linear() -> None:
    def make(n: int) -> Callable[[], object]:
        program = updates(n)
        return lambda: run(program, [FuseOptimizer()], verify=False, snapshots=False)

    assert_linear(make, 1200, "fuse-optimizer over many updates")
    fused, report = run(updates(3), [FuseOptimizer()], verify=False, snapshots=False)
    assert [op.type for op in fused.global_block().ops].count("sgd") == 1
    assert len(report.record("fuse-optimizer").details["fused"]) == 1


def test_planning_sibling_blocks_is_linear() -> None:
    def make(n: int, **executor: Any) -> Callable[[], object]:
        program = siblings(n)

        def work() -> None:
            with bir.Executor("cpu", **executor) as exe:
                exe.plan(program, fetch_list=["x"])

        return work

    assert_linear(make, 125, "planning sibling blocks")
    assert_linear(lambda n: make(n, compute_streams=2), 125, "planning sibling blocks, with the device pipeline")


def test_blockir_run_in_process_is_linear(tmp_path: Path) -> None:
    def make(n: int) -> Callable[[], object]:
        path = tmp_path / f"one_variable_{n}.pb"
        one_variable(n).save(str(path))

        def work() -> None:
            with contextlib.redirect_stdout(io.StringIO()) as out:
                assert main(["run", str(path), "--fetch", "x"]) == 0
            assert out.getvalue().startswith("x: float32[1]")

        return work

    assert_linear(make, 125, "blockir run of ops writing one variable")
