"""Channels and select against Go's rules; deadlock detection by Go's rule.

Every blocking operation here has a timeout or runs in a worker joined with one,
so that a bug fails a test instead of hanging it.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from typing import Any

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import blockir as bir
from blockir.errors import BlockirError, ChannelClosedError, ChannelTimeout, DeadlockError
from blockir.runtime import channel as channel_module
from blockir.runtime.channel import Channel, blocked_on, message_nbytes, register_thread, select, unregister_thread

T = 5.0  # the bound on every wait that should end: a failing test ends within it


class Worker:
    """A daemon thread running ``fn``, registered as a channel user before it starts."""

    def __init__(self, fn: Callable[[], Any], name: str = "worker", register: bool = True) -> None:
        self.result: Any = None
        self.error: BaseException | None = None
        self.ended_at = 0.0
        self.thread = threading.Thread(target=self._run, args=(fn,), name=name, daemon=True)
        if register:
            register_thread(self.thread)
        self.thread.start()

    def _run(self, fn: Callable[[], Any]) -> None:
        try:
            self.result = fn()
        except BaseException as e:  # noqa: BLE001  (reported by the test)
            self.error = e
        self.ended_at = time.monotonic()

    def join(self) -> None:
        self.thread.join(T)
        assert not self.thread.is_alive(), f"{self.thread.name} still blocked after {T} s"

    def value(self) -> Any:
        self.join()
        if self.error is not None:
            raise self.error
        return self.result


def join_all(*workers: Worker) -> None:
    """Join the workers as a thread blocked on them (it counts for deadlock detection)."""
    with blocked_on("the test waiting for its workers"):
        for worker in workers:
            worker.join()


def wait_until(condition: Callable[[], bool]) -> None:
    deadline = time.monotonic() + T
    while not condition():
        assert time.monotonic() < deadline, "condition not reached in time"
        time.sleep(0.001)


def probe(ch: Channel, op: str) -> Any:
    """Run ``op`` without waiting: its result, or the name of the error it raised ("blocks": it would wait)."""
    try:
        return ch.send("v", timeout=0) if op == "send" else ch.recv(timeout=0)
    except ChannelTimeout:
        return "blocks"
    except ChannelClosedError:
        return "ChannelClosedError"


# Go's rules: (capacity, buffered values, closed, op) -> (outcome, len afterwards).
RULES = [
    (0, [], False, "send", "blocks", 0),
    (0, [], False, "recv", "blocks", 0),
    (2, [], False, "send", None, 1),
    (2, [], False, "recv", "blocks", 0),
    (2, [1], False, "send", None, 2),
    (2, [1], False, "recv", (1, True), 0),
    (2, [1, 2], False, "send", "blocks", 2),
    (2, [1, 2], False, "recv", (1, True), 1),
    (0, [], True, "send", "ChannelClosedError", 0),
    (0, [], True, "recv", (None, False), 0),
    (2, [], True, "recv", (None, False), 0),
    (2, [1, 2], True, "recv", (1, True), 1),
    (2, [1, 2], True, "send", "ChannelClosedError", 2),
]


@pytest.mark.parametrize("capacity, buffered, closed, op, outcome, length", RULES)
def test_go_rules(capacity: int, buffered: list[int], closed: bool, op: str, outcome: Any, length: int) -> None:
    ch = Channel(capacity)
    for v in buffered:
        ch.send(v, timeout=0)
    if closed:
        ch.close()
    assert probe(ch, op) == outcome
    assert (len(ch), ch.cap, ch.closed) == (length, capacity, closed)


def test_close_twice_is_a_no_op_and_recv_drains_after_close() -> None:
    ch = Channel(3, name="c")
    for v in "abc":
        ch.send(v)
    ch.close()
    ch.close()
    assert ch.closed and len(ch) == 3
    assert [ch.recv(timeout=0) for _ in range(5)] == [
        ("a", True),
        ("b", True),
        ("c", True),
        (None, False),
        (None, False),
    ]
    with pytest.raises(ChannelClosedError, match="send on closed channel 'c'"):
        ch.send("d")


def test_iterating_receives_until_closed_and_drained() -> None:
    ch = Channel(3)
    for v in range(3):
        ch.send(v)
    ch.close()
    assert list(ch) == [0, 1, 2]


def test_properties_and_validation() -> None:
    ch = Channel(2, bytes_limit=64, place="cpu:0", name="q")
    assert (ch.cap, ch.bytes_limit, ch.place, ch.name, bool(ch)) == (2, 64, "cpu", "q", True)
    assert repr(ch) == "<channel 'q' cap=2 len=0 place=cpu open senders=0 receivers=0>"
    assert Channel(place="cuda").place == "cuda:0"  # places are not checked against this machine
    for kwargs, match in [
        ({"capacity": -1}, "capacity must be"),
        ({"capacity": 1.5}, "capacity must be"),
        ({"capacity": 0, "bytes_limit": 10}, "unbuffered"),
        ({"capacity": 1, "bytes_limit": -1}, "bytes_limit must be"),
        ({"place": "gpu0"}, "not a device"),
    ]:
        with pytest.raises(BlockirError, match=match):
            Channel(**kwargs)
    with pytest.raises(BlockirError, match="timeout must be"):
        ch.recv(timeout=-1)


def test_unbuffered_send_completes_only_when_received() -> None:
    ch = Channel(name="rendezvous")
    sent = threading.Event()

    def sender() -> None:
        ch.send("x", timeout=T)
        sent.set()

    worker = Worker(sender)
    assert not sent.wait(0.2), "an unbuffered send completed before anyone received"
    assert ch.recv(timeout=T) == ("x", True)
    worker.value()
    assert sent.is_set()


def test_close_wakes_blocked_senders_and_receivers() -> None:
    full, empty = Channel(1), Channel(1)
    full.send("kept")
    sender = Worker(lambda: full.send("lost", timeout=T))
    receiver = Worker(lambda: empty.recv(timeout=T))
    wait_until(lambda: len(full._senders) == 1 and len(empty._receivers) == 1)
    full.close()
    empty.close()
    with pytest.raises(ChannelClosedError, match="send on closed channel"):
        sender.value()
    assert receiver.value() == (None, False)
    assert [full.recv(timeout=0), full.recv(timeout=0)] == [("kept", True), (None, False)]


@pytest.mark.parametrize("capacity", [0, 1])
def test_blocked_senders_and_receivers_complete_in_fifo_order(capacity: int) -> None:
    ch = Channel(capacity)
    if capacity:
        ch.send(-1)
    senders = []
    for i in range(3):
        senders.append(Worker(lambda i=i: ch.send(i, timeout=T)))
        wait_until(lambda i=i: len(ch._senders) == i + 1)
    got = [ch.recv(timeout=T)[0] for _ in range(capacity + 3)]
    assert got == list(range(-capacity, 3))
    join_all(*senders)

    receivers = []
    for i in range(3):
        receivers.append(Worker(lambda: ch.recv(timeout=T)))
        wait_until(lambda i=i: len(ch._receivers) == i + 1)
    for v in "abc":
        ch.send(v, timeout=T)
    assert [r.value() for r in receivers] == [("a", True), ("b", True), ("c", True)]


def test_bytes_limit_blocks_while_the_buffer_holds_more() -> None:
    ch = Channel(10, bytes_limit=100)
    block = np.zeros(10, dtype=np.float64)  # 80 bytes
    ch.send(block)
    ch.send([block[:1], block[:1]], timeout=0)  # a message of two values (16 bytes); 80 <= 100 were held
    ch.send(block[:1], timeout=0)  # 96 <= 100 were held; 104 now
    assert probe(ch, "send") == "blocks"
    assert len(ch) == 3
    ch.recv()  # 24 bytes left
    assert probe(ch, "send") is None
    big = Channel(2, bytes_limit=10)
    big.send(block)  # larger than the limit, into an empty buffer
    assert probe(big, "send") == "blocks"


def test_message_nbytes_counts_arrays_lod_tensors_and_selected_rows() -> None:
    data = np.zeros((4, 3), dtype=np.float32)
    lod = bir.LoDTensor(data, [[0, 1, 4]])
    rows = bir.SelectedRows(np.array([0, 2], dtype=np.int64), np.zeros((2, 3), dtype=np.float32), 5)
    assert message_nbytes(data) == 48
    assert message_nbytes([data, (lod, rows)]) == 48 + 48 + 16 + 24
    assert message_nbytes("text") == 0


def test_a_timed_out_send_leaves_no_value_behind() -> None:
    unbuffered, full = Channel(), Channel(1)
    full.send("first")
    for ch in (unbuffered, full):
        with pytest.raises(ChannelTimeout, match="timed out after 0.05 s"):
            ch.send("late", timeout=0.05)
        assert not ch._senders
    assert probe(unbuffered, "recv") == "blocks"
    assert full.recv(timeout=0) == ("first", True)
    assert probe(full, "recv") == "blocks"


def test_racing_timeouts_deliver_every_value_exactly_once() -> None:
    ch, stop, sent, got = Channel(), threading.Event(), [], []

    def sender() -> None:
        for i in range(300):
            try:
                ch.send(i, timeout=0.0005)
                sent.append(i)
            except ChannelTimeout:
                pass

    def receiver() -> None:
        while not stop.is_set():
            try:
                got.append(ch.recv(timeout=0.0005)[0])
            except ChannelTimeout:
                pass

    receiving, sending = Worker(receiver), Worker(sender)
    sending.value()
    stop.set()
    receiving.value()
    assert got == sent and sent


@st.composite
def workloads(draw: st.DrawFn) -> dict[str, Any]:
    capacity = draw(st.integers(0, 3))
    return {
        "capacity": capacity,
        "bytes_limit": draw(st.sampled_from([None, 0, 16, 40])) if capacity else None,
        "producers": draw(st.lists(st.tuples(st.integers(0, 15), st.booleans()), min_size=1, max_size=4)),
        "consumers": draw(st.lists(st.booleans(), min_size=1, max_size=4)),
    }


@settings(max_examples=30)
@given(workloads())
def test_producers_and_consumers_lose_and_duplicate_nothing(workload: dict[str, Any]) -> None:
    """Every value is received once; each consumer sees each producer's values in order.

    Producers and consumers use plain operations or a select with a second, idle
    channel (the boolean); the last producer to finish closes the channel.
    """
    ch = Channel(workload["capacity"], bytes_limit=workload["bytes_limit"])
    idle = Channel()
    producers_left = [len(workload["producers"])]
    lock = threading.Lock()

    def produce(p: int, count: int, use_select: bool) -> None:
        for seq in range(count):
            message = np.array([p, seq], dtype=np.int64)
            if use_select:
                assert select([("recv", idle), ("send", ch, message)], timeout=T)[0] == 1
            else:
                ch.send(message, timeout=T)
        with lock:
            producers_left[0] -= 1
            if not producers_left[0]:
                ch.close()

    def consume(use_select: bool) -> list[tuple[int, int]]:
        got = []
        while True:
            if use_select:
                index, value, ok = select([("recv", ch), ("recv", idle)], timeout=T)
                assert index == 0
            else:
                value, ok = ch.recv(timeout=T)
            if not ok:
                return got
            got.append(tuple(value.tolist()))

    consumers = [Worker(lambda s=s: consume(s), name=f"consumer{i}") for i, s in enumerate(workload["consumers"])]
    producers = [
        Worker(lambda p=p, n=n, s=s: produce(p, n, s), name=f"producer{p}")
        for p, (n, s) in enumerate(workload["producers"])
    ]
    for producer in producers:
        producer.value()
    received = [consumer.value() for consumer in consumers]
    everything = sorted(v for got in received for v in got)
    assert everything == sorted((p, seq) for p, (n, _) in enumerate(workload["producers"]) for seq in range(n))
    for got in received:
        for p in range(len(producers)):
            seqs = [seq for q, seq in got if q == p]
            assert seqs == sorted(seqs)


def test_select_default_and_timeout() -> None:
    ch = Channel(1, name="s")
    assert select([("recv", ch)], default=True) == (-1, None, False)
    with pytest.raises(ChannelTimeout, match=r"select on \(recv on channel 's'\)"):
        select([("recv", ch)], timeout=0.05)
    ch.send("full")
    assert select([("send", ch, "no room")], default=True) == (-1, None, False)
    with pytest.raises(ChannelTimeout):
        select([("send", ch, "no room")], timeout=0.02)
    assert select([("recv", ch)], default=True) == (0, "full", True)
    assert probe(ch, "recv") == "blocks"  # the timed-out send case sent nothing
    assert not ch._senders and not ch._receivers


def test_select_send_and_recv_cases_pair_with_plain_operations() -> None:
    a, b = Channel(name="a"), Channel(name="b")
    receiver = Worker(lambda: a.recv(timeout=T))
    wait_until(lambda: len(a._receivers) == 1)
    assert select([("recv", b), ("send", a, "to a")], timeout=T) == (1, None, True)
    assert receiver.value() == ("to a", True)

    sender = Worker(lambda: b.send("to b", timeout=T))
    wait_until(lambda: len(b._senders) == 1)
    assert select([("send", a, "unsent"), ("recv", b)], timeout=T) == (1, "to b", True)
    sender.value()

    selecting = Worker(lambda: select([("recv", a), ("recv", b)], timeout=T))
    wait_until(lambda: len(a._receivers) == 1 and len(b._receivers) == 1)
    b.send("late", timeout=T)
    assert selecting.value() == (1, "late", True)
    assert not a._receivers and not b._receivers  # the waiting case on a was withdrawn


def test_select_pairs_with_select_but_never_with_itself() -> None:
    ch = Channel(name="self")
    with pytest.raises(ChannelTimeout):
        select([("send", ch, 1), ("recv", ch)], timeout=0.05)
    sender = Worker(lambda: select([("send", ch, "x")], timeout=T))
    assert select([("recv", ch)], timeout=T) == (0, "x", True)
    assert sender.value() == (0, None, True)


def test_select_on_closed_channels() -> None:
    closed = Channel(name="shut")
    closed.close()
    assert select([("recv", closed)], timeout=T) == (0, None, False)
    with pytest.raises(ChannelClosedError, match="send on closed channel 'shut'"):
        select([("send", closed, 1)], timeout=T)

    a, b = Channel(name="a"), Channel(name="b")
    receiving = Worker(lambda: select([("recv", a), ("send", b, 1)], timeout=T))
    sending = Worker(lambda: select([("send", b, 1), ("recv", Channel())], timeout=T))
    wait_until(lambda: len(a._receivers) == 1 and len(b._senders) == 2)
    a.close()
    assert receiving.value() == (0, None, False)
    b.close()
    with pytest.raises(ChannelClosedError, match="channel 'b'"):
        sending.value()


def test_select_chooses_uniformly_among_ready_cases() -> None:
    n = 2000
    a, b = Channel(n), Channel(n)
    for i in range(n):
        a.send(i)
        b.send(i)
    counts = [0, 0]
    for _ in range(n):
        counts[select([("recv", a), ("recv", b)])[0]] += 1
    # Binomial(2000, 1/2): |count - 1000| > 110 has probability below 1e-6 (4.9 standard deviations).
    assert 890 <= counts[0] <= 1110, counts


def test_select_validates_cases() -> None:
    ch = Channel()
    for cases in ([("send", ch)], [("recv", "not a channel")], [("peek", ch)], ["recv"]):
        with pytest.raises(BlockirError, match="select case 0 must be"):
            select(cases, default=True)
    with pytest.raises(BlockirError, match="default=True never waits"):
        select([("recv", ch)], default=True, timeout=1)


# Deadlock detection.


def test_a_lone_recv_ends_with_a_deadlock_error() -> None:
    ch = Channel(name="lonely")
    worker = Worker(lambda: ch.recv())
    with pytest.raises(DeadlockError) as raised:
        join_all(worker)  # reported, not waited out: the join is bounded by T
    assert isinstance(worker.error, DeadlockError)
    for error in (raised.value, worker.error):
        assert "thread 'worker': recv on channel 'lonely'" in str(error)
        assert "thread 'MainThread': the test waiting for its workers" in str(error)
    assert sorted(worker.error.blocked) == sorted(raised.value.blocked)


def test_two_threads_waiting_on_each_other_are_both_told() -> None:
    a, b = Channel(name="a"), Channel(name="b")

    def first() -> None:
        a.recv()
        b.send(1)

    def second() -> None:
        b.recv()
        a.send(1)

    workers = [Worker(first, name="first"), Worker(second, name="second")]
    with pytest.raises(DeadlockError):
        join_all(*workers)
    for worker in workers:
        assert isinstance(worker.error, DeadlockError)
        assert "thread 'first': recv on channel 'a'" in str(worker.error)
        assert "thread 'second': recv on channel 'b'" in str(worker.error)


def test_a_thread_in_blocked_on_and_a_blocked_recv_deadlock() -> None:
    ch = Channel(name="c")

    def waiting() -> None:
        with blocked_on("waiting for godot") as wait:
            while True:
                wait.check()
                time.sleep(0.01)

    select_worker = Worker(lambda: select([("recv", ch), ("send", Channel(name="d"), 1)]), name="selecting")
    godot = Worker(waiting, name="godot")
    with pytest.raises(DeadlockError):
        join_all(select_worker, godot)
    for worker in (select_worker, godot):
        assert isinstance(worker.error, DeadlockError)
        assert "thread 'godot': waiting for godot" in str(worker.error)
        assert "thread 'selecting': select on (recv on channel 'c', send on channel 'd')" in str(worker.error)


def test_a_select_with_no_cases_blocks_forever() -> None:
    worker = Worker(lambda: select([]))
    with pytest.raises(DeadlockError, match="select with no cases"):
        join_all(worker)


def test_no_deadlock_while_a_registered_thread_will_still_send() -> None:
    ch, ready = Channel(name="later"), Channel(1)

    def late_sender() -> None:
        time.sleep(5 * channel_module.RECHECK_S)
        ch.send("late", timeout=T)

    def self_registering_sender() -> None:
        ready.send("registered by using a channel")
        time.sleep(5 * channel_module.RECHECK_S)
        ch.send("later", timeout=T)

    receiver = Worker(lambda: [ch.recv(), ch.recv()])
    late = Worker(late_sender)
    wait_until(lambda: len(ch._receivers) == 1)  # the receiver blocks before the next sender exists
    self_registered = Worker(self_registering_sender, register=False)
    assert ready.recv(timeout=T)[1]
    join_all(receiver, late, self_registered)
    assert sorted(receiver.value()) == [("late", True), ("later", True)]


def test_a_thread_blocked_with_a_timeout_counts_as_running() -> None:
    worker = Worker(lambda: Channel(name="patient").recv(timeout=0.3))
    join_all(worker)  # no DeadlockError here either: the worker was running until it timed out
    assert isinstance(worker.error, ChannelTimeout)


def test_a_thread_ending_without_sending_leaves_a_deadlock() -> None:
    ch = Channel(name="abandoned")
    quitter = Worker(lambda: time.sleep(0.2), name="quitter")
    receiver = Worker(lambda: ch.recv(), name="receiver")
    with pytest.raises(DeadlockError, match="thread 'receiver': recv on channel 'abandoned'") as raised:
        join_all(receiver, quitter)
    assert receiver.ended_at >= quitter.ended_at  # the deadlock began when the quitter ended
    assert "quitter" not in str(raised.value)


def test_channel_operations_inside_blocked_on_count_as_running(monkeypatch: pytest.MonkeyPatch) -> None:
    seen = []
    try_send = Channel._try_send

    def spying(self: Channel, value: Any, nbytes: int) -> bool:
        seen.append(channel_module._state_of().blocked())
        return try_send(self, value, nbytes)

    monkeypatch.setattr(Channel, "_try_send", spying)
    ch, done = Channel(1), threading.Event()
    running = Worker(lambda: done.wait(T))  # registered and running: the blocked_on below is no deadlock
    with blocked_on("outer wait"):
        ch.send(1)
        assert channel_module._state_of().blocked() == "outer wait"
    done.set()
    running.value()
    assert seen == [None]


def test_a_wait_that_is_over_counts_as_running_and_an_unregistered_thread_not_at_all():
    with blocked_on("something that already happened", over=lambda: True):
        ch = Channel(capacity=1)  # registers this thread, blocked_on a finished wait: running, no deadlock
    gate = threading.Event()

    def idle() -> None:
        unregister_thread()  # a pool thread going idle: no longer a channel user
        gate.wait(5)

    other = threading.Thread(target=idle)
    register_thread(other)
    other.start()
    time.sleep(0.05)
    with pytest.raises(DeadlockError, match="recv on"):
        ch.recv()  # nobody left who could send
    assert other.is_alive()  # reported while the idle thread lives, not once it ends
    gate.set()
    other.join()
