"""Program.clone(for_test=True): Fluid's evaluation idiom. The test program drops the training ops, sets
is_test, keeps every variable, and runs in the training program's scope on its parameters."""

from __future__ import annotations

import numpy as np

import blockir as bir
from blockir.ir import Program
from blockir.ir.core import is_training_op
from blockir.ir.schema import OpRole
from blockir.ops.values import LoDTensor

LOD = [[0, 2, 5, 6]]  # three sequences of 2, 3 and 1 rows


def mlp() -> tuple[Program, Program, bir.ir.Variable, bir.ir.Variable]:
    """max-pooled sequences -> fc relu -> fc -> softmax with cross entropy, minimized by SGD."""
    main, startup = Program(), Program()
    main.random_seed = startup.random_seed = 3
    with bir.unique_name.guard(), bir.program_guard(main, startup):
        x = bir.data("x", shape=[-1, 4], dtype="float32", lod_level=1)
        label = bir.data("label", shape=[-1, 1], dtype="int64")
        pooled = bir.layers.sequence_pool(x, "max")
        hidden = bir.layers.fc(pooled, 8, act="relu")
        logits = bir.layers.fc(hidden, 3)
        loss = bir.layers.mean(bir.layers.softmax_with_cross_entropy(logits, label))
        bir.optimizer.SGD(0.5).minimize(loss)
    return main, startup, logits, loss


def feed(seed: int) -> dict[str, object]:
    rng = np.random.default_rng(seed)
    return {
        "x": LoDTensor(rng.normal(size=(6, 4)).astype("float32"), LOD),
        "label": rng.integers(0, 3, size=(3, 1)).astype("int64"),
    }


def numpy_logits(x: np.ndarray, params: dict[str, np.ndarray]) -> np.ndarray:
    pooled = np.stack([x[a:b].max(axis=0) for a, b in zip(LOD[0], LOD[0][1:])])
    hidden = np.maximum(pooled @ params["fc_0.w_0"] + params["fc_0.b_0"], 0)
    return hidden @ params["fc_1.w_0"] + params["fc_1.b_0"]


def test_a_test_clone_of_a_trained_program_evaluates_on_its_parameters() -> None:
    main, startup, logits, loss = mlp()
    before = str(main)
    test = main.clone(for_test=True)
    assert str(main) == before  # the training program is unchanged
    assert [op.type for op in test.global_block().ops] == [
        "sequence_pool",
        "mul",
        "elementwise_add",
        "relu",
        "mul",
        "elementwise_add",
        "softmax_with_cross_entropy",
        "mean",
    ]
    assert any(is_training_op(op) for op in main.ops()) and not any(is_training_op(op) for op in test.ops())
    assert test.global_block().ops[0].attr("is_test") is True
    assert main.global_block().ops[0].attr("is_test") is False
    for block, cloned in zip(main.blocks, test.blocks):  # every variable, under its name, as it was
        assert {n: v.fields() for n, v in block.vars.items()} == {n: v.fields() for n, v in cloned.vars.items()}
    scope = bir.Scope()
    with bir.Executor("cpu") as exe:
        exe.run(startup, scope=scope)
        for step in range(5):
            exe.run(main, feed=feed(step), fetch_list=[loss], scope=scope)
        params = {p.name: np.array(scope.get(p.name)) for p in main.all_parameters()}
        batch = feed(99)
        got, test_loss = exe.run(test, feed=batch, fetch_list=[logits, loss], scope=scope)
        for name, value in params.items():  # evaluating updates nothing
            np.testing.assert_array_equal(scope.get(name), value, err_msg=name)
        (trained_loss,) = exe.run(main, feed=batch, fetch_list=[loss], scope=scope)
    np.testing.assert_allclose(got, numpy_logits(batch["x"].data, params), rtol=1e-5, atol=1e-6)
    np.testing.assert_array_equal(test_loss, trained_loss)  # the same forward pass, before main's update
    assert not np.array_equal(scope.get("fc_1.w_0"), params["fc_1.w_0"])  # training does update


def test_cloned_before_minimize_the_test_program_is_the_same() -> None:
    """The clone taken before minimize (as Fluid scripts often do) and the one taken after run the same ops."""
    main, startup = Program(), Program()
    with bir.unique_name.guard(), bir.program_guard(main, startup):
        x = bir.data("x", shape=[-1, 4], dtype="float32")
        loss = bir.layers.mean(bir.layers.fc(x, 2, act="tanh"))
        early = main.clone(for_test=True)
        bir.optimizer.Adam(0.01).minimize(loss)
    late = main.clone(for_test=True)
    assert [(op.type, op.inputs, op.outputs) for op in late.ops()] == [
        (op.type, op.inputs, op.outputs) for op in early.ops()
    ]
    assert set(late.global_block().vars) > set(early.global_block().vars)  # gradients and moments kept
    assert str(main.clone(for_test=False)) == str(main) == str(main.clone())


def test_sub_blocks_lose_their_training_ops_and_keep_their_indices() -> None:
    program = Program()
    block = program.global_block()
    block.create_var("x", shape=(-1, 4), dtype="float32", lod_level=1, need_check_feed=True)
    block.create_var("p", shape=(-1, 4), dtype="float32")
    block.create_var("p@GRAD", shape=(-1, 4), dtype="float32")
    sub = program.create_block(0)
    sub.append_op("sequence_pool", {"X": "x"}, {"Out": "p"}, {"pooltype": "MAX"}, infer=False)
    sub.append_op("scale", {"X": "p"}, {"Out": "p@GRAD"}, {"op_role": OpRole.BACKWARD}, infer=False)
    inner = program.create_block(sub.idx)
    inner.append_op("scale", {"X": "p"}, {"Out": "p"}, {"op_role": OpRole.OPTIMIZE | OpRole.LR_SCHED}, infer=False)
    program.rollback()
    program.rollback()
    test = program.clone(for_test=True)
    assert [(b.idx, b.parent_idx) for b in test.blocks] == [(0, -1), (1, 0), (2, 1)]
    assert [op.type for op in test.block(1).ops] == ["sequence_pool"] and not test.block(2).ops
    assert test.block(1).ops[0].attr("is_test") is True
    assert [len(b.ops) for b in program.blocks] == [0, 2, 1]


def test_a_program_without_roles_drops_its_grad_ops() -> None:
    program = Program()
    block = program.global_block()
    for name in ("x", "y", "y@GRAD", "x@GRAD"):
        block.create_var(name, shape=(2,), dtype="float32")
    block.append_op("relu", {"X": "x"}, {"Out": "y"}, infer=False)
    block.append_op("relu_grad", {"Out": "y", "Out@GRAD": "y@GRAD"}, {"X@GRAD": "x@GRAD"}, infer=False)
    assert [op.type for op in program.clone(for_test=True).ops()] == ["relu"]
