"""Running on several devices: the host and virtual CPU devices, copies, scope tags, the default pipeline."""

from __future__ import annotations

import re
from collections.abc import Iterator
from typing import Any

import numpy as np
import pytest

import blockir as bir
from blockir.errors import BlockirError
from blockir.ir import Program
from blockir.ir.schema import OpSchema, Slot
from blockir.ops.transfer import copy_value
from blockir.passes import Place, place_startup
from blockir.runtime.plan import compile_plan
from tests.passes.test_copies import mlp
from tests.registries import ops_registered

SEEN: dict[str, np.ndarray] = {}  # output name -> the array dev_keep received for it (ops may run concurrently)


def _keep(ctx, x):
    SEEN[ctx.op_text.split(" = ")[0].lstrip("%")] = x
    return x + 1


@pytest.fixture(scope="module", autouse=True)
def _ops() -> Iterator[None]:
    with ops_registered(OpSchema("dev_keep", inputs=(Slot("X"),), outputs=(Slot("Out"),), kernel=_keep)):
        yield


def batch(n: int = 32, seed: int = 0) -> dict[str, np.ndarray]:
    rng = np.random.default_rng(seed)
    return {"x": rng.normal(size=(n, 784)).astype("float32"), "label": rng.integers(0, 10, (n, 1))}


def train(main: Program, startup: Program, loss: bir.ir.Variable, exe: bir.Executor, steps: int = 4):
    scope = bir.Scope()
    exe.run(startup, scope=scope)
    losses = [exe.run(main, feed=batch(seed=i), fetch_list=[loss], scope=scope)[0] for i in range(steps)]
    return losses, scope


def test_mlp_trained_on_two_devices_matches_one_device_exactly(exe):
    """The acceptance case: the hidden layer on cpu:1, trained with SGD, same numbers as on the host."""
    main, startup, loss = mlp("cpu:1")
    text = str(main)
    losses, scope = train(main, startup, loss, exe)
    single_losses, single_scope = train(*mlp(None), exe)
    np.testing.assert_array_equal(losses, single_losses)
    assert losses[-1][0] < losses[0][0]
    assert sorted(scope.names()) == sorted(single_scope.names())
    for name in scope.names():
        np.testing.assert_array_equal(scope.get(name), single_scope.get(name), err_msg=name)
    assert {n: scope.var(n).device for n in scope.names()} == {
        "fc_0.w_0": "cpu",
        "fc_0.b_0": "cpu",
        "fc_1.w_0": "cpu:1",
        "fc_1.b_0": "cpu:1",
        "fc_2.w_0": "cpu",
        "fc_2.b_0": "cpu",
        "learning_rate_0": "cpu",
    }
    assert str(main) == text  # running never changes the user's program
    plan = exe.plan(main, ["x", "label"], [loss])
    assert sum(step.ctx.op_text.split(" = ")[1].startswith("memcpy(") for step in plan.steps) == 5


def test_an_executor_on_a_virtual_device_runs_everything_there(exe):
    main, startup, loss = mlp(None)
    on_cpu2 = bir.Executor("cpu:2")
    assert str(on_cpu2) == "Executor('cpu:2', scheduler='dataflow')"
    losses, scope = train(main, startup, loss, on_cpu2, steps=2)
    np.testing.assert_array_equal(losses, train(main, startup, loss, exe, steps=2)[0])
    assert {scope.var(n).device for n in scope.names()} == {"cpu:2"}


def test_values_on_different_devices_never_share_buffers(exe):
    program = Program()
    block = program.global_block()
    block.create_var("x", shape=(2,), need_check_feed=True)
    for name, device, src in (("a", "cpu", "x"), ("b", "cpu:1", "x"), ("c", "cpu:2", "b"), ("d", "cpu:2", "x")):
        block.create_var(name, shape=(2,))
        block.append_op("dev_keep", {"X": src}, {"Out": name}, {"op_device": device})
    x = np.array([1.0, 2.0], "float32")
    SEEN.clear()
    a, b, c, d = exe.run(program, feed={"x": x}, fetch_list=["a", "b", "c", "d"])
    host, on_cpu1, b_on_cpu2, x_on_cpu2 = (SEEN[n] for n in "abcd")
    assert host is x  # on the host the fed array itself
    seen = list(SEEN.values())
    for i, one in enumerate(seen):
        for other in seen[i + 1 :]:
            assert not np.shares_memory(one, other)
    np.testing.assert_array_equal(on_cpu1, x)
    np.testing.assert_array_equal(b_on_cpu2, x + 1)
    np.testing.assert_array_equal(c, x + 2)
    assert not any(np.shares_memory(v, s) for v in (a, b, c, d) for s in seen)


def test_memcpy_copies_every_kind_of_value():
    xp = np
    lod = bir.LoDTensor(np.arange(6, dtype="float32").reshape(3, 2), [[0, 1, 3]])
    rows = bir.SelectedRows(np.array([2, 0]), np.ones((2, 3), "float32"), 5)
    for value in (np.ones(3, "float32"), lod, rows):
        copy = copy_value(value, xp)
        assert type(copy) is type(value)
        data = getattr(value, "data", getattr(value, "values", value))
        copied = getattr(copy, "data", getattr(copy, "values", copy))
        np.testing.assert_array_equal(copied, data)
        assert not np.shares_memory(copied, data)
    assert copy_value(lod, xp).lod == lod.lod
    assert (copy_value(rows, xp).height, list(copy_value(rows, xp).rows)) == (5, [2, 0])


def test_the_plan_refuses_a_value_read_from_another_device():
    main, _, loss = mlp("cpu:1")
    placed = main.clone()
    Place().run(placed)  # no copies
    with pytest.raises(
        BlockirError,
        match=r"op runs on cpu:1 but reads 'fc_0.tmp_2', which is on cpu \(insert a "
        r"memcpy.*\): %fc_1.tmp_0 = mul\(X=%fc_0.tmp_2, Y=%fc_1.w_0\)",
    ):
        compile_plan(placed, frozenset(["x", "label"]), (loss.name,), bir.CPUPlace())
    copy = placed.global_block().insert_op(
        3, "memcpy", {"X": "fc_0.tmp_2"}, {"Out": "fc_0.tmp_2"}, {"dst_device": "cpu:1", "op_device": "cpu:2"}
    )
    with pytest.raises(BlockirError, match=re.escape(f"memcpy must run on its dst_device, not on cpu:2: {copy}")):
        compile_plan(placed, frozenset(["x", "label"]), (loss.name,), bir.CPUPlace())


def test_scope_values_carry_their_device_and_move_where_a_run_needs_them(exe, tmp_path):
    main, startup, loss = mlp("cpu:1")
    scope = bir.Scope()
    exe.run(startup, scope=scope)
    w = scope.var("fc_1.w_0")
    assert w.device == "cpu:1" and "device='cpu:1'" in repr(w)
    bir.io.save_persistables(exe, tmp_path, main, scope=scope)
    expected = exe.run(main, feed=batch(), fetch_list=[loss, "fc_1.w_0"], scope=scope)
    assert not np.shares_memory(expected[1], w.value)  # fetched: a host copy
    loaded = bir.Scope()
    bir.io.load_persistables(exe, tmp_path, main, scope=loaded)
    held = loaded.var("fc_1.w_0")
    assert held.device == "cpu"
    before = held.value
    got = exe.run(main, feed=batch(), fetch_list=[loss, "fc_1.w_0"], scope=loaded)
    for a, b in zip(got, expected):
        np.testing.assert_array_equal(a, b)
    assert held.device == "cpu:1" and not np.shares_memory(before, held.value)  # moved: copied, re-tagged


def test_place_startup_initializes_parameters_where_main_keeps_them(exe):
    main, startup, loss = mlp(None)
    for op in main.global_block().ops:
        if op.output_names() and op.output_names()[0].startswith("fc_2."):
            op.set_attr("op_device", "cpu:3")
    place_startup(startup, main)
    scope = bir.Scope()
    exe.run(startup, scope=scope)
    assert {n: scope.var(n).device for n in ("fc_2.w_0", "fc_2.b_0", "fc_0.w_0")} == {
        "fc_2.w_0": "cpu:3",
        "fc_2.b_0": "cpu:3",
        "fc_0.w_0": "cpu",
    }
    exe.run(main, feed=batch(), fetch_list=[loss], scope=scope)
    assert scope.var("fc_2.w_0").device == "cpu:3"


def test_plans_follow_the_program_state(exe):
    main, startup, loss = mlp("cpu:1")
    mutation = main.mutation
    plan = exe.plan(main, ["x", "label"], [loss])
    assert exe.plan(main, ["x", "label"], [loss]) is plan
    assert main.mutation == mutation
    scope = bir.Scope()
    exe.run(startup, scope=scope)
    for op in main.global_block().ops:
        if op.device == "cpu:1":
            op.set_attr("op_device", "cpu:2")
    assert exe.plan(main, ["x", "label"], [loss]) is not plan
    exe.run(main, feed=batch(), fetch_list=[loss], scope=scope)
    assert scope.var("fc_1.w_0").device == "cpu:2"  # moved from cpu:1, where the startup program put it


def bag_of_words(device: str | None) -> tuple[Program, Program, bir.ir.Variable]:
    """A sparse embedding table on the host, its lookup and sum pooling on ``device``: rows, LoD tensors and
    sparse gradients are copied between the two."""
    main, startup = Program(), Program()
    main.random_seed = startup.random_seed = 2
    with bir.unique_name.guard(), bir.program_guard(main, startup):
        words = bir.data("words", shape=[-1, 1], dtype="int64", lod_level=1)
        label = bir.data("label", shape=[-1, 1], dtype="int64")
        with bir.device_guard(device):  # the table stays on the host: rows and gradients are copied
            emb = bir.layers.embedding(
                words, size=[20, 4], is_sparse=True, param_attr=bir.ParamAttr(name="emb", device="cpu")
            )
            bow = bir.layers.sequence_pool(emb, pool_type="sum")
        pred = bir.layers.fc(bow, size=2, act="softmax")
        loss = bir.layers.mean(bir.layers.cross_entropy(pred, label))
        bir.optimizer.SGD(learning_rate=0.5).minimize(loss)
    return main, startup, loss


def bag_of_words_feed() -> dict[str, Any]:
    words = bir.LoDTensor(np.array([[1], [3], [3], [7], [2], [9]], "int64"), [[0, 2, 3, 6]])
    return {"words": words, "label": np.array([[0], [1], [1]], "int64")}


def test_sparse_gradients_and_lod_tensors_cross_devices(exe):
    feed = bag_of_words_feed()
    results = []
    for device in ("cpu:1", None):
        main, startup, loss = bag_of_words(device)
        placed, _ = bir.passes.run(main, "place,insert-copies")
        copied = {op.input("X")[0] for op in placed.global_block().ops if op.type == "memcpy"}
        scope = bir.Scope()
        exe.run(startup, scope=scope)
        losses = [exe.run(main, feed=feed, fetch_list=[loss], scope=scope)[0] for _ in range(3)]
        results.append((copied, losses, scope.get("emb")))
    (copied, losses, emb), (none, single_losses, single_emb) = results
    assert {"words", "emb", "emb@GRAD"} <= copied and not none
    np.testing.assert_array_equal(losses, single_losses)
    np.testing.assert_array_equal(emb, single_emb)
