"""Channels, go blocks and select inside programs: the ops, their kernels and the runs they are part of."""

from __future__ import annotations

import threading

import numpy as np
import pytest

import blockir as bir
from blockir.errors import BlockirError, DeadlockError, ExecutionError
from blockir.ir import Program

FEED = {"image": np.arange(12, dtype="float32").reshape(3, 4), "label": np.array([[1], [2], [0]], "int64")}


def producer_consumer(capacity: int = 4) -> tuple[Program, Program, list, list]:
    """The issue's pattern: a program sending (image, label) on a channel list, one receiving from it."""
    concurrent_program, main_program = Program(), Program()
    with bir.program_guard(concurrent_program):
        image = bir.data("image", shape=[-1, 4], dtype="float32")
        label = bir.data("label", shape=[-1, 1], dtype="int64")
        chans = bir.channel_list.make("chan_list", places=["cpu:0", "cpu:1"], capacity=capacity)
        for i in range(len(chans.places)):
            bir.channel.send(chans[i], [image, label])
    with bir.program_guard(main_program):
        chans = bir.channel_list.make("chan_list", places=["cpu:0", "cpu:1"], capacity=capacity)
        with bir.device_guard("cpu:0"):
            image0, label0 = bir.channel.recv(chans[0])
            total0 = bir.layers.reduce_sum(image0)
        with bir.device_guard("cpu:1"):
            image1, label1, ok = bir.channel.recv(chans[1], status=True)
    return concurrent_program, main_program, [total0, label0], [image1, label1, ok]


def test_two_programs_share_named_channels_through_the_scope():
    producer, consumer, fetch0, fetch1 = producer_consumer()
    fetch = [*fetch0, *fetch1]
    scope = bir.Scope()
    with bir.Executor("cpu") as exe:
        for k in range(3):  # fill the buffered channels (one place left: a producer run never blocks)
            exe.run(producer, feed={"image": FEED["image"] + k, "label": FEED["label"]}, scope=scope)
        assert len(scope.get("chan_list.0")) == len(scope.get("chan_list.1")) == 3
        assert scope.var("chan_list.1").device == "cpu:1"
        for k in range(10):  # alternate: each consumer run takes the oldest message of each channel
            exe.run(producer, feed={"image": FEED["image"] + 3 + k, "label": FEED["label"]}, scope=scope)
            total, label, image1, label1, ok = exe.run(consumer, fetch_list=fetch, scope=scope)
            assert total == pytest.approx(float((FEED["image"] + k).sum()))
            np.testing.assert_array_equal(image1, FEED["image"] + k)
            np.testing.assert_array_equal(label, FEED["label"])
            assert ok[0]
        scope.get("chan_list.0").close()
        scope.get("chan_list.1").close()
        for k in range(3):  # drain what is buffered
            _, _, image1, _, ok = exe.run(consumer, fetch_list=fetch, scope=scope)
            assert ok[0] and np.array_equal(image1, FEED["image"] + 10 + k)
        total, label, image1, label1, ok = exe.run(consumer, fetch_list=fetch, scope=scope)
        assert not ok[0] and total == 0 and image1.shape == (0, 4) and label1.shape == (0, 1)


def test_sends_are_placed_on_the_channel_device_with_a_copy():
    producer, _, _, _ = producer_consumer()
    placed, _ = bir.passes.run(producer, "place,insert-copies")
    sends = [op for op in placed.global_block().ops if op.type == "channel_send"]
    assert [op.device for op in sends] == ["cpu", "cpu:1"]
    assert sends[1].input("X") == ("image@cpu:1", "label@cpu:1")


def test_a_go_block_runs_concurrently_and_the_run_waits_for_it():
    main = Program()
    with bir.program_guard(main):
        x = bir.data("x", shape=[-1, 2], dtype="float32")
        ch = bir.make_channel(capacity=0)
        done = bir.make_channel(capacity=1)
        with bir.go():
            y = bir.layers.scale(x, scale=2.0)
            bir.channel.send(ch, [y])
            bir.channel.send(done, [x])
        (got,) = bir.channel.recv(ch)
    xv = np.ones((3, 2), "float32")
    scope = bir.Scope()
    with bir.Executor("cpu") as exe:
        (out,) = exe.run(main, feed={"x": xv}, fetch_list=[got], scope=scope)
    np.testing.assert_array_equal(out, 2 * xv)
    assert len(scope.get(done.name)) == 1  # the go block's last send happened before the run returned
    assert not any(t.name.startswith("blockir-go-") for t in threading.enumerate())


@pytest.mark.timeout(60)  # a deadlock reported, not a hang (that would end here)
def test_a_recv_nobody_sends_to_is_a_deadlock_not_a_hang():
    main = Program()
    with bir.program_guard(main):
        x = bir.data("x", shape=[2], dtype="float32")
        ch = bir.make_channel(capacity=0)
        bir.channel.recv(ch, like=[x])
    with bir.Executor("cpu") as exe, pytest.raises((DeadlockError, ExecutionError), match="recv"):
        exe.run(main, feed={"x": np.zeros(2, "float32")}, scope=bir.Scope())


@pytest.mark.timeout(60)  # a deadlock reported, not a hang (that would end here)
def test_two_go_blocks_waiting_on_each_other_deadlock():
    main = Program()
    with bir.program_guard(main):
        x = bir.data("x", shape=[2], dtype="float32")
        a, b = bir.make_channel(), bir.make_channel()
        with bir.go():
            (got,) = bir.channel.recv(a, like=[x])
            bir.channel.send(b, [got])
        with bir.go():
            (got,) = bir.channel.recv(b, like=[x])
            bir.channel.send(a, [got])
    with bir.Executor("cpu") as exe, pytest.raises((DeadlockError, ExecutionError), match="[Dd]eadlock"):
        exe.run(main, feed={"x": np.zeros(2, "float32")}, scope=bir.Scope())


def test_a_failing_go_block_fails_the_run_and_closes_its_channels():
    main = Program()
    with bir.program_guard(main):
        x = bir.data("x", shape=[-1], dtype="float32")
        y = bir.data("y", shape=[-1], dtype="float32")
        ch = bir.make_channel(capacity=0)
        with bir.go():
            bad = bir.layers.elementwise_add(x, y)  # [2] + [3] fails when it runs
            bir.channel.send(ch, [bad])
        got, ok = bir.channel.recv(ch, like=[x], status=True)
    scope = bir.Scope()
    with bir.Executor("cpu") as exe, pytest.raises(BlockirError, match="elementwise_add"):
        exe.run(main, feed={"x": np.ones(2, "float32"), "y": np.ones(3, "float32")}, fetch_list=[ok], scope=scope)
    assert scope.get(ch.name).closed


def test_select_takes_a_ready_case_or_the_default():
    main = Program()
    with bir.program_guard(main):
        x = bir.data("x", shape=[2], dtype="float32")
        full, empty, out = bir.make_channel(capacity=1), bir.make_channel(capacity=1), bir.make_channel(capacity=4)
        with bir.select() as select:
            with select.recv(full, like=[x]) as (got, ok):
                bir.channel.send(out, [bir.layers.scale(got, scale=10.0)])
            with select.recv(empty, like=[x]):
                bir.channel.send(out, [x])
            with select.default():
                bir.channel.send(out, [bir.layers.scale(x, scale=-1.0)])
    scope = bir.Scope()
    xv = np.array([1.0, 2.0], "float32")
    with bir.Executor("cpu") as exe:
        exe.run(main, feed={"x": xv}, scope=scope)  # both empty: the default
        scope.get(full.name).send([np.array([3.0, 4.0], "float32")])
        exe.run(main, feed={"x": xv}, scope=scope)
    results = [scope.get(out.name).recv(timeout=1)[0][0] for _ in range(2)]
    np.testing.assert_array_equal(results[0], -xv)
    np.testing.assert_array_equal(results[1], [30.0, 40.0])


def test_channel_ops_check_what_they_are_given():
    with bir.program_guard(Program()):
        x = bir.data("x", shape=[2], dtype="float32")
        with pytest.raises(BlockirError, match="expected a channel variable"):
            bir.channel.send(x, [x])
        ch = bir.make_channel(name="nobody_sends_here")
        with pytest.raises(BlockirError, match="layout of its messages is unknown"):
            bir.channel.recv(ch)
        with pytest.raises(BlockirError, match="capacity must be an int >= 0"):
            bir.make_channel(capacity=-1)


@pytest.mark.timeout(60)  # a deadlock reported, not a hang (that would end here)
def test_a_worker_lane_blocked_on_a_channel_is_a_deadlock_the_calling_thread_sees():
    main = Program()
    with bir.program_guard(main):
        x = bir.data("x", shape=[2], dtype="float32")
        ch = bir.make_channel(place="cpu:1")
        with bir.device_guard("cpu:1"):
            (got,) = bir.channel.recv(ch, like=[x])
        bir.layers.scale(got, scale=2.0)  # on the host, waits for the worker lane
    with bir.Executor("cpu") as exe, pytest.raises((DeadlockError, ExecutionError), match="[Dd]eadlock"):
        exe.run(main, feed={"x": np.zeros(2, "float32")}, scope=bir.Scope())
