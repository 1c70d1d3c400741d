"""Fused optimizer updates at run time (BuildStrategy.fuse_all_optimizer_ops): they train exactly as the updates
they replace, the scope exposes each parameter and its state by name as a view of its buffer, setting or loading
one copies into its view, the flag turns the fusion off for an executor, a CompiledProgram and data parallelism,
and a fused update failing names itself and the updates it replaces."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import pytest

import blockir as bir
from blockir.errors import BlockirError, ExecutionError
from blockir.ir import Program
from tests.parallel.test_async_executor import PROTOTXT, VOCAB, write_parts
from tests.runtime.test_fusion import FEED, strategy

OPTIMIZERS: dict[str, Callable[[], Any]] = {
    "sgd": lambda: bir.optimizer.SGD(learning_rate=0.2),
    "momentum": lambda: bir.optimizer.Momentum(learning_rate=0.1, momentum=0.9),
    "nesterov": lambda: bir.optimizer.Momentum(learning_rate=0.1, momentum=0.9, use_nesterov=True),
    "adam": lambda: bir.optimizer.Adam(learning_rate=0.05),
}
UPDATE = {"sgd": "sgd", "momentum": "momentum", "nesterov": "momentum", "adam": "adam"}


def net(optimizer: str = "sgd") -> tuple[Program, Program, str]:
    """Two fc layers (relu, softmax), cross-entropy, mean, trained by ``optimizer``; the feed is test_fusion's."""
    main, startup = Program(), Program()
    main.random_seed = startup.random_seed = 3
    with bir.unique_name.guard(), bir.program_guard(main, startup):
        x = bir.data("x", shape=[-1, 6], dtype="float32")
        y = bir.data("y", shape=[-1, 1], dtype="int64")
        hidden = bir.layers.fc(x, size=5, act="relu")
        loss = bir.layers.mean(bir.layers.cross_entropy(bir.layers.fc(hidden, size=3, act="softmax"), y))
        OPTIMIZERS[optimizer]().minimize(loss)
    return main, startup, loss.name


def only_optimizer(fused: bool) -> bir.BuildStrategy:
    """No fusion but (with ``fused``) the optimizer's: the two runs differ by it alone."""
    return strategy(False, False, False, fused)


def persistables(main: Program, scope: bir.Scope) -> dict[str, np.ndarray]:
    return {v.name: np.array(scope.get(v.name)) for v in main.list_vars() if v.persistable}


def buffer(scope: bir.Scope, name: str) -> Any:
    """The array ``name``'s value is a view of (the value itself when it is no view)."""
    value = scope.get(name)
    return value if value.base is None else value.base


@pytest.mark.parametrize("optimizer", list(OPTIMIZERS))
def test_fused_updates_train_exactly_as_the_updates_they_replace(optimizer: str) -> None:
    main, startup, loss = net(optimizer)
    runs = {}
    for fused in (True, False):
        scope = bir.Scope()
        with bir.Executor(build_strategy=only_optimizer(fused)) as exe:
            exe.run(startup, scope=scope)
            fetched = [exe.run(main, feed=FEED, fetch_list=[loss, "fc_0.w_0"], scope=scope) for _ in range(4)]
            types = [op.type for op in exe.compiled_program(main, FEED, [loss, "fc_0.w_0"]).global_block().ops]
        runs[fused] = fetched, persistables(main, scope), types, scope
    (fetched, params, types, scope), (plain_fetched, plain_params, plain_types, _) = runs[True], runs[False]
    update = UPDATE[optimizer]
    assert types.count(update) == 1 and plain_types.count(update) == 4 and "coalesce_tensor" in types
    for step, plain_step in zip(fetched, plain_fetched):  # the loss, and a parameter fetched by name each step
        for got, want in zip(step, plain_step):
            np.testing.assert_array_equal(got, want)
    assert params.keys() == plain_params.keys()
    for name in params:
        np.testing.assert_array_equal(params[name], plain_params[name], err_msg=name)
    names = ["fc_0.w_0", "fc_0.b_0", "fc_1.w_0", "fc_1.b_0"]
    assert all(scope.find_var(n).bound for n in names) and len({id(buffer(scope, n)) for n in names}) == 1


def trained(steps: int = 2) -> tuple[Program, Program, str, bir.Scope, bir.Executor]:
    main, startup, loss = net("momentum")
    exe, scope = bir.Executor(build_strategy=only_optimizer(True)), bir.Scope()
    exe.run(startup, scope=scope)
    for _ in range(steps):
        exe.run(main, feed=FEED, fetch_list=[loss], scope=scope)
    return main, startup, loss, scope, exe


def test_a_parameter_read_by_name_is_its_view_and_sees_every_update() -> None:
    main, _, loss, scope, exe = trained()
    with bir.scope_guard(scope):
        held = bir.global_scope().find_var("fc_0.w_0").get_tensor()
        velocity = bir.global_scope().get("fc_0.w_0_velocity_0")
        before = held.copy()
        (after,) = exe.run(main, feed=FEED, fetch_list=["fc_0.w_0"])
    assert scope.get("fc_0.w_0") is held and not np.array_equal(held, before)
    np.testing.assert_array_equal(held, after)
    assert velocity.base is buffer(scope, "fc_1.w_0_velocity_0")  # the state too: a view of the velocities' buffer


def test_setting_a_fused_parameter_copies_into_its_view() -> None:
    main, startup, loss, scope, exe = trained()
    plain_exe, plain = bir.Executor(build_strategy=only_optimizer(False)), bir.Scope()
    for name, value in persistables(main, scope).items():
        plain.set(name, value)
    view, fused_buffer = scope.get("fc_1.b_0"), buffer(scope, "fc_1.b_0")
    for s in (scope, plain):
        s.set("fc_1.b_0", np.full(3, 0.5, "float32"))
    assert scope.get("fc_1.b_0") is view and buffer(scope, "fc_1.b_0") is fused_buffer
    np.testing.assert_array_equal(view, np.full(3, 0.5, "float32"))
    exe.run(startup, scope=scope)  # the startup program writes through the scope too: into the views
    plain_exe.run(startup, scope=plain)
    assert scope.get("fc_1.b_0") is view and scope.find_var("fc_1.b_0").bound
    for _ in range(2):
        got = exe.run(main, feed=FEED, fetch_list=[loss], scope=scope)
        want = plain_exe.run(main, feed=FEED, fetch_list=[loss], scope=plain)
        np.testing.assert_array_equal(got, want)
    assert buffer(scope, "fc_0.w_0") is fused_buffer  # never coalesced again


@pytest.mark.parametrize(
    ("value", "got"),
    [
        (np.zeros(4, "float32"), r"float32\[4\]"),
        (np.zeros(3), r"float64\[3\]"),
        ([0.0, 0.0, 0.0], r"\[float, float, float\]"),
    ],
    ids=["shape", "dtype", "not-an-array"],
)
def test_a_value_that_does_not_fit_the_view_is_refused(value: Any, got: str) -> None:
    _, _, _, scope, _ = trained(1)
    held = scope.get("fc_1.b_0").copy()
    with pytest.raises(BlockirError, match=rf"variable 'fc_1.b_0' is a view of a fused buffer .* float32\[3\] .*{got}"):
        scope.set("fc_1.b_0", value)
    np.testing.assert_array_equal(scope.get("fc_1.b_0"), held)


def test_a_value_that_replaces_a_view_is_coalesced_again_by_the_next_run() -> None:
    main, _, loss, scope, exe = trained()
    old = buffer(scope, "fc_0.w_0")
    holder = scope.find_var("fc_0.b_0")
    holder.set(np.array(holder.value) + 1)  # the holder's own set: the value replaces the view
    assert not holder.bound
    expected = np.array(scope.get("fc_0.b_0"))
    exe.run(main, feed=FEED, fetch_list=[loss], scope=scope)
    assert holder.bound and buffer(scope, "fc_0.b_0") is not old  # a new buffer, with the value set in it
    assert not np.array_equal(scope.get("fc_0.b_0"), expected)  # and updated there


def test_loading_a_checkpoint_mid_training_copies_into_the_views(tmp_path: Path) -> None:
    main, startup, loss = net("adam")
    losses = {}
    for fused in (True, False):
        scope = bir.Scope()
        with bir.Executor(build_strategy=only_optimizer(fused)) as exe:
            exe.run(startup, scope=scope)
            run = [exe.run(main, feed=FEED, fetch_list=[loss], scope=scope)[0] for _ in range(2)]
            bir.io.save_persistables(exe, tmp_path / str(fused), main, scope=scope)
            run += [exe.run(main, feed=FEED, fetch_list=[loss], scope=scope)[0] for _ in range(2)]
            views = {n: scope.get(n) for n in ("fc_0.w_0", "fc_1.b_0_moment2_0", "fc_0.b_0_beta1_pow_acc_0")}
            loaded = bir.io.load_persistables(exe, tmp_path / str(fused), main, scope=scope)
            assert "fc_0.w_0" in loaded and all(scope.get(n) is v for n, v in views.items()) is fused
            run += [exe.run(main, feed=FEED, fetch_list=[loss], scope=scope)[0] for _ in range(3)]
        losses[fused] = run
    np.testing.assert_array_equal(losses[True], losses[False])
    np.testing.assert_array_equal(losses[True][4], losses[True][2])  # the loaded state gives step 3's loss again


def test_loading_an_inference_model_copies_into_the_views(tmp_path: Path) -> None:
    main, _, loss, scope, exe = trained()
    bir.io.save_inference_model(tmp_path / "model", ["x"], ["fc_1.tmp_2"], exe, main, scope=scope)
    saved = np.array(scope.get("fc_1.w_0"))
    view = scope.get("fc_1.w_0")
    exe.run(main, feed=FEED, fetch_list=[loss], scope=scope)
    assert not np.array_equal(view, saved)
    bir.io.load_inference_model(tmp_path / "model", exe, scope=scope)
    assert scope.get("fc_1.w_0") is view and scope.find_var("fc_1.w_0").bound
    np.testing.assert_array_equal(view, saved)


def test_the_flag_turns_the_fusion_off_for_an_executor_and_a_compiled_program(tmp_path: Path) -> None:
    main, startup, loss = net("momentum")  # (sgd updates of fc layers join their fc_grad instead)
    off = strategy(optimizer=False)
    with bir.Executor(build_strategy=off) as exe:
        assert "coalesce_tensor" not in {op.type for op in exe.compiled_program(main, FEED, [loss]).global_block().ops}
        assert exe.pass_report(main, FEED, [loss]).pipeline == f"fuse{{keep={loss},x,y optimizer=false}}"
    with bir.Executor() as exe:  # every fusion on; the compiled program's strategy wins
        scope = bir.Scope()
        exe.run(startup, scope=scope)
        exe.run(bir.CompiledProgram(main, off), feed=FEED, fetch_list=[loss], scope=scope, trace=tmp_path / "t.json")
        assert not scope.find_var("fc_0.w_0").bound
        exe.run(main, feed=FEED, fetch_list=[loss], scope=scope)
        assert scope.find_var("fc_0.w_0").bound
    ran = json.loads((tmp_path / "t.json").read_text())["otherData"]["blockir"]["pipeline"]
    assert ran == f"fuse{{keep={loss},x,y optimizer=false}}"


def data_parallel(places: list[str], fused: bool) -> tuple[list[Any], dict[str, np.ndarray], list[str]]:
    main, startup, loss = net("momentum")
    scope = bir.Scope()
    compiled = bir.CompiledProgram(main).with_data_parallel(loss, build_strategy=only_optimizer(fused), places=places)
    with bir.Executor() as exe:
        exe.run(startup, scope=scope)
        losses = [exe.run(compiled, feed=FEED, fetch_list=[loss], scope=scope)[0] for _ in range(3)]
        replicated = compiled.replicated([loss])
        notes = exe.pass_report(replicated, FEED, [loss]).record("fuse-optimizer").notes if fused else []
    return losses, persistables(main, scope), notes


def test_data_parallel_over_threads_fuses_the_updates_and_trains_the_same() -> None:
    losses, params, notes = data_parallel(["cpu", "cpu"], fused=True)
    plain_losses, plain_params, _ = data_parallel(["cpu", "cpu"], fused=False)
    assert notes and all(": fused " in note for note in notes)  # the updates of each stream, fused
    np.testing.assert_array_equal(losses, plain_losses)
    for name in params:
        np.testing.assert_array_equal(params[name], plain_params[name], err_msg=name)


def test_data_parallel_over_devices_leaves_the_updates_as_they_are() -> None:
    """Each parameter is also read on the other device (its broadcast to cpu:1's copy): no update fuses."""
    losses, params, notes = data_parallel(["cpu:0", "cpu:1"], fused=True)
    plain_losses, plain_params, _ = data_parallel(["cpu:0", "cpu:1"], fused=False)
    assert notes and not any(": fused " in note for note in notes)
    assert any("broadcast(X=%fc_0.w_0" in note and "on cpu:1, its update runs on cpu" in note for note in notes)
    np.testing.assert_array_equal(losses, plain_losses)


def test_a_fused_update_failing_names_itself_and_the_updates_it_replaces() -> None:
    main, startup, loss = net("adam")
    scope = bir.Scope()
    with bir.Executor(build_strategy=only_optimizer(True)) as exe:
        exe.run(startup, scope=scope)
        scope.set("fc_1.b_0_beta1_pow_acc_0", np.array([0.5], "float32"))  # not the others' power
        with pytest.raises(ExecutionError) as info:
            exe.run(main, feed=FEED, fetch_list=[loss], scope=scope)
    message = str(info.value)
    assert "Beta1Pow holds one power per fused parameter, and they differ ([0.5, 0.8999999761581421])" in message
    assert "= adam(Param=%fc_0.w_0@FUSED, " in message and 'op_pass="fuse-optimizer"' in message
    assert 'op_origin=["adam:fc_0.w_0,fc_0.w_0_moment1_0,fc_0.w_0_moment2_0,' in message
    assert '"adam:fc_1.b_0,fc_1.b_0_moment1_0,fc_1.b_0_moment2_0,fc_1.b_0_beta1_pow_acc_0,' in message


def test_hogwild_workers_update_the_scopes_own_arrays(tmp_path: Path) -> None:
    """AsyncExecutor's workers (threads here; processes get their executors the same way) run without fused
    updates: each updates the parameters' own arrays, which the others update too, where a fused update would
    work on a buffer of its plan's own."""
    desc = bir.DataFeedDesc(PROTOTXT)
    files = write_parts(tmp_path, desc, parts=2, docs=40)
    main, startup = Program(), Program()
    with bir.unique_name.guard(), bir.program_guard(main, startup):
        words = bir.data("words", shape=[-1, 1], dtype="int64", lod_level=1)
        label = bir.data("label", shape=[-1, 1], dtype="int64")
        pooled = bir.layers.sequence_pool(bir.layers.embedding(words, size=[VOCAB, 4]), pool_type="sum")
        loss = bir.layers.mean(bir.layers.cross_entropy(bir.layers.fc(pooled, size=2, act="softmax"), label))
        bir.optimizer.SGD(learning_rate=0.1).minimize(loss)
    scope = bir.Scope()
    bir.Executor().run(startup, scope=scope)
    names = [p.name for p in main.all_parameters()]
    arrays = {n: scope.get(n) for n in names}
    before = {n: a.copy() for n, a in arrays.items()}
    bir.AsyncExecutor().run_from_files(main, desc, files, 2, [loss], mode="thread", scope=scope)
    assert all(scope.get(n) is arrays[n] and not scope.find_var(n).bound for n in names)
    assert all(not np.array_equal(arrays[n], before[n]) for n in names)  # trained in place
