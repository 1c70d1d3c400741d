"""Go-style channels for Python threads: :class:`Channel`, :func:`select` and deadlock detection.

A channel passes values between threads; its operations block as Go's do (the
rules are in :class:`Channel`'s docstring and in docs/channels.md). Every
blocked operation is a :class:`_Waiter` parked in the queues of the channels it
waits on; the operation that completes it hands the value over directly, and a
claim under one small lock decides who completes a waiter that several channels
(a :func:`select`) or a timeout or the deadlock detector compete for.

Locks, always taken in this order: the registry lock, then channel locks (a
select takes the locks of its channels in ``id`` order), then the claim lock.

Deadlock detection follows Go's rule. Threads that create a channel, use one,
call :func:`register_thread` or enter :class:`blocked_on` are registered; when
every registered live thread is blocked in a channel operation without a
timeout or inside ``blocked_on``, none can make progress, and each of them
wakes with a :class:`~blockir.errors.DeadlockError` naming every blocked
operation. A thread that never touched a channel is not counted: if it would
have sent later, the others are reported deadlocked anyway.
"""

from __future__ import annotations

import contextlib
import functools
import itertools
import random
import threading
from collections import deque
from collections.abc import Callable, Iterator, Sequence
from types import TracebackType
from typing import Any, TypeVar

from blockir.errors import BlockirError, ChannelClosedError, ChannelTimeout, DeadlockError
from blockir.ir.devices import checked_device
from blockir.ops.values import LoDTensor, SelectedRows

__all__ = ["Channel", "blocked_on", "message_nbytes", "register_thread", "select", "unregister_thread"]

# How often a thread blocked without a timeout re-checks for a deadlock (a registered
# thread that ends while the others are blocked leaves one nobody else would notice).
RECHECK_S = 0.1

_registry_lock = threading.Lock()
_claim_lock = threading.Lock()
_channel_ids = itertools.count(1)
_rng = random.Random()

_F = TypeVar("_F", bound=Callable[..., Any])


def message_nbytes(value: Any) -> int:
    """Bytes of a message: arrays (``nbytes``), LoDTensor, SelectedRows and lists/tuples of them.

    Anything else counts as 0 bytes.
    """
    if isinstance(value, (list, tuple)):
        return sum(message_nbytes(v) for v in value)
    if isinstance(value, LoDTensor):
        return message_nbytes(value.data)
    if isinstance(value, SelectedRows):
        return message_nbytes(value.values) + message_nbytes(value.rows)
    return int(getattr(value, "nbytes", 0))


def _check_timeout(timeout: float | None) -> None:
    if timeout is not None and not timeout >= 0:
        raise BlockirError(f"timeout must be None or >= 0 seconds, got {timeout!r}")


class _Waiter:
    """One blocked operation (a send, a recv or a select) of one thread, and its outcome.

    ``cases`` are its entries in channel queues. The first :meth:`complete` claims it;
    later ones return False. The outcome is ``(index, value, ok)`` or ``error``.
    """

    __slots__ = ("cases", "done", "error", "event", "index", "ok", "value")

    def __init__(self) -> None:
        self.cases: list[_Case] = []
        self.event = threading.Event()
        self.done = False
        self.index, self.value, self.ok = -1, None, False
        self.error: BaseException | None = None

    def complete(self, index: int, value: Any, ok: bool, error: BaseException | None = None) -> bool:
        """Claim the waiter with this outcome and wake its thread; False when already claimed."""
        with _claim_lock:
            if not self._finish(index, value, ok, error):
                return False
        self.event.set()
        return True

    def _finish(self, index: int, value: Any, ok: bool, error: BaseException | None) -> bool:
        """:meth:`complete` without the lock and the wake-up: the claim lock is held."""
        if self.done:
            return False
        self.done, self.index, self.value, self.ok, self.error = True, index, value, ok, error
        return True


class _Case:
    """A waiter's entry in one channel's queue of senders (with the value) or receivers."""

    __slots__ = ("channel", "index", "is_send", "nbytes", "value", "waiter")

    def __init__(
        self, waiter: _Waiter, index: int, channel: Channel, is_send: bool, value: Any = None, nbytes: int = 0
    ) -> None:
        self.waiter, self.index, self.channel, self.is_send = waiter, index, channel, is_send
        self.value, self.nbytes = value, nbytes
        waiter.cases.append(self)

    def describe(self) -> str:
        return f"{'send on' if self.is_send else 'recv on'} {self.channel.label}"


class _ThreadState:
    """What the deadlock detector knows of one registered thread (guarded by the registry lock).

    ``waiter``/``waiting``: the channel operation it is blocked in without a timeout;
    ``outer``: the descriptions of the :class:`blocked_on` blocks it is in; ``active``:
    channel operations it runs from inside those; ``error``: the DeadlockError found
    while it was inside ``blocked_on``, for :meth:`blocked_on.check` and exit.
    """

    __slots__ = ("active", "error", "outer", "thread", "waiter", "waiting")

    def __init__(self, thread: threading.Thread) -> None:
        self.thread = thread
        self.waiter: _Waiter | None = None
        self.waiting = ""
        self.outer: list[tuple[str, Callable[[], bool] | None]] = []  # (description, over)
        self.active = 0
        self.error: DeadlockError | None = None

    def blocked(self) -> str | None:
        """What the thread waits for, None while it can make progress.

        Exact under the claim lock; without it, a thread just woken may still look blocked.
        """
        if self.waiter is not None:
            return None if self.waiter.done else self.waiting
        if not self.outer or self.active:
            return None
        description, over = self.outer[-1]
        return None if over is not None and over() else description


_threads: dict[threading.Thread, _ThreadState] = {}


def _prune() -> None:
    """Drop the registered threads that have ended (registry lock held).

    ``threading.enumerate()`` lists started threads from ``start()`` on (``is_alive``
    is still false while one boots); a thread not started yet has no ident.
    """
    live = set(threading.enumerate())
    for thread in [t for t in _threads if t.ident is not None and t not in live]:
        del _threads[thread]


def _state_of(thread: threading.Thread | None = None) -> _ThreadState:
    """The registry entry of ``thread`` (the current one by default), registering it on first use."""
    thread = thread or threading.current_thread()
    state = _threads.get(thread)
    if state is None:
        with _registry_lock:
            _prune()
            state = _threads.setdefault(thread, _ThreadState(thread))
    return state


def register_thread(thread: threading.Thread | None = None) -> None:
    """Count ``thread`` (default: the current one) as a channel user for deadlock detection.

    A thread is registered anyway when it creates or uses a channel. Register a
    thread that will use channels before starting it, so that the threads it will
    feed are not reported deadlocked while it is still getting there. A registered
    thread that is never started counts as running forever.
    """
    _state_of(thread)


def unregister_thread(thread: threading.Thread | None = None) -> None:
    """Stop counting ``thread`` (default: the current one) as a channel user: for pooled threads that
    go idle between jobs (an idle worker neither runs channel work nor blocks a run). It counts again
    once registered again or once it uses a channel."""
    with _registry_lock:
        _threads.pop(thread or threading.current_thread(), None)
        _detect()


def _detect() -> None:
    """Declare a deadlock when every registered live thread is blocked (registry lock held).

    Each blocked thread gets its own DeadlockError: through its waiter, or in its
    state when it is inside ``blocked_on``.
    """
    if any(state.thread.is_alive() and state.blocked() is None for state in _threads.values()):
        return  # the common case, decided without the claim lock or listing threads
    _prune()
    wake: list[_Waiter] = []
    with _claim_lock:
        waits = [(state, state.blocked()) for state in _threads.values()]
        if not waits or any(what is None for _, what in waits):
            return
        blocked = [f"thread {state.thread.name!r}: {what}" for state, what in waits]
        message = "deadlock: every live thread that uses channels is blocked:\n  " + "\n  ".join(blocked)
        for state, _ in waits:
            error = DeadlockError(message, blocked)
            if state.waiter is None:
                state.error = state.error or error  # the first report stands until it is raised
            elif state.waiter._finish(-1, None, False, error):
                wake.append(state.waiter)
    for waiter in wake:
        waiter.event.set()


def _operation(method: _F) -> _F:
    """A channel operation: registers its thread, which counts as running while inside it."""

    @functools.wraps(method)
    def run(*args: Any, **kwargs: Any) -> Any:
        state = _state_of()
        if not state.outer:
            return method(*args, **kwargs)
        with _registry_lock:
            state.active += 1
        try:
            return method(*args, **kwargs)
        finally:
            with _registry_lock:
                state.active -= 1

    return run  # type: ignore[return-value]


def _wait(waiter: _Waiter, timeout: float | None, description: str) -> tuple[int, Any, bool]:
    """Block until ``waiter`` completes or ``timeout`` passes; its outcome, or raise its error.

    Without a timeout the thread counts as blocked for deadlock detection and
    re-checks every :data:`RECHECK_S`; with one it counts as running, as a Go
    goroutine with a pending timer does. A timed-out operation did not happen.
    """
    if timeout is None:
        state = _state_of()
        with _registry_lock:
            state.waiter, state.waiting = waiter, description
            _detect()
        try:
            while not waiter.event.wait(RECHECK_S):
                with _registry_lock:
                    _detect()
        finally:
            with _registry_lock:
                state.waiter, state.waiting = None, ""
    elif not waiter.event.wait(timeout):
        waiter.complete(-1, None, False, ChannelTimeout(f"{description}: timed out after {timeout:g} s"))
    for case in waiter.cases:
        case.channel._discard(case)
    if waiter.error is not None:
        raise waiter.error
    return waiter.index, waiter.value, waiter.ok


class Channel:
    """A Go channel between threads: a FIFO queue of messages with blocking send and recv.

    ==========================================  ==============================================
    operation                                   behaviour
    ==========================================  ==============================================
    ``send`` on an unbuffered channel           blocks until a receiver has taken the value
    (``capacity=0``)                            (rendezvous)
    ``send`` on a buffered channel              completes at once while fewer than ``capacity``
                                                values are buffered and (with ``bytes_limit``)
                                                they hold at most ``bytes_limit`` bytes; else
                                                blocks until a receiver makes room
    ``recv`` with values buffered or a sender   returns ``(value, True)``, the oldest first
    waiting
    ``recv`` on an empty open channel           blocks until a value is sent or the channel
                                                closes
    ``recv`` on a closed channel                returns the buffered values, then
                                                ``(None, False)`` at once, forever
    ``send`` on a closed channel                raises ChannelClosedError (also when the
                                                channel closes while the send is blocked;
                                                the value is then not sent)
    ``close``                                   wakes every blocked sender (error) and
                                                receiver (``(None, False)``); closing a closed
                                                channel does nothing (Go panics)
    ``timeout`` elapses (``send``/``recv``)     raises ChannelTimeout; the operation did not
                                                happen (the value was not sent / taken)
    ``len(ch)``, ``ch.cap``, ``ch.closed``      buffered values, capacity, whether closed
    ==========================================  ==============================================

    Blocked senders complete in the order they blocked, and so do blocked receivers.
    ``bytes_limit`` counts ``nbytes`` of numpy/cupy arrays, LoDTensors, SelectedRows
    and lists/tuples of them (a message may be several values sent together): a
    message larger than the limit still goes into an empty buffer. ``place`` is the
    device messages belong on; the channel stores the objects it is given and copies
    nothing (the IR ops copy onto ``place``). Iterating receives until closed and
    drained. All methods are thread-safe; :func:`select` waits on several channels.
    Creating or using a channel registers the thread for deadlock detection (module
    docstring). ``name`` (optional) and ``label`` (``channel 'name'``, or
    ``channel #N`` without a name) are what errors call the channel.
    """

    def __init__(
        self, capacity: int = 0, bytes_limit: int | None = None, place: str = "cpu", name: str | None = None
    ) -> None:
        self.label = f"channel {name!r}" if name is not None else f"channel #{next(_channel_ids)}"
        if isinstance(capacity, bool) or not isinstance(capacity, int) or capacity < 0:
            raise BlockirError(f"{self.label}: capacity must be an int >= 0, got {capacity!r}")
        if bytes_limit is not None:
            if isinstance(bytes_limit, bool) or not isinstance(bytes_limit, int) or bytes_limit < 0:
                raise BlockirError(f"{self.label}: bytes_limit must be None or an int >= 0, got {bytes_limit!r}")
            if capacity == 0:
                raise BlockirError(
                    f"{self.label}: bytes_limit limits the buffer, and an unbuffered channel (capacity 0) has none"
                )
        self.name = name
        self.place = checked_device(place, self.label)
        self._capacity = capacity
        self._bytes_limit = bytes_limit
        self._lock = threading.Lock()
        self._buffer: deque[tuple[Any, int]] = deque()
        self._bytes = 0
        self._senders: deque[_Case] = deque()
        self._receivers: deque[_Case] = deque()
        self._closed = False
        register_thread()

    @property
    def cap(self) -> int:
        """The capacity: how many values the buffer holds (0: unbuffered)."""
        return self._capacity

    @property
    def bytes_limit(self) -> int | None:
        return self._bytes_limit

    @property
    def closed(self) -> bool:
        return self._closed

    def __len__(self) -> int:
        return len(self._buffer)

    def __bool__(self) -> bool:
        return True  # a channel is a handle: an empty one is not false

    def __repr__(self) -> str:
        state = "closed" if self._closed else "open"
        return (
            f"<{self.label} cap={self._capacity} len={len(self._buffer)} place={self.place} "
            f"{state} senders={len(self._senders)} receivers={len(self._receivers)}>"
        )

    def __iter__(self) -> Iterator[Any]:
        """Receive until the channel is closed and drained (Go's ``for v := range ch``)."""
        while True:
            value, ok = self.recv()
            if not ok:
                return
            yield value

    @_operation
    def send(self, value: Any, timeout: float | None = None) -> None:
        """Send ``value`` (one message; a list/tuple of values travels together); table above."""
        _check_timeout(timeout)
        nbytes = message_nbytes(value) if self._bytes_limit is not None else 0
        with self._lock:
            if self._try_send(value, nbytes):
                return
            waiter = _Waiter()
            self._senders.append(_Case(waiter, 0, self, True, value, nbytes))
        _wait(waiter, timeout, f"send on {self.label}")

    @_operation
    def recv(self, timeout: float | None = None) -> tuple[Any, bool]:
        """``(value, True)``, or ``(None, False)`` once closed and drained; table above."""
        _check_timeout(timeout)
        with self._lock:
            ready, value, ok = self._try_recv()
            if ready:
                return value, ok
            waiter = _Waiter()
            self._receivers.append(_Case(waiter, 0, self, False))
        _, value, ok = _wait(waiter, timeout, f"recv on {self.label}")
        return value, ok

    @_operation
    def close(self) -> None:
        """Close: blocked receivers get ``(None, False)``, blocked senders ChannelClosedError."""
        with self._lock:
            if self._closed:
                return
            self._closed = True
            receivers, senders = list(self._receivers), list(self._senders)
            self._receivers.clear()
            self._senders.clear()
            for case in receivers:
                case.waiter.complete(case.index, None, False)
            for case in senders:
                case.waiter.complete(case.index, None, False, self._closed_error())

    # The rest runs with self._lock held.

    def _closed_error(self) -> ChannelClosedError:
        return ChannelClosedError(f"send on closed {self.label}")

    def _has_room(self) -> bool:
        return len(self._buffer) < self._capacity and (self._bytes_limit is None or self._bytes <= self._bytes_limit)

    def _try_send(self, value: Any, nbytes: int) -> bool:
        """Hand ``value`` to a waiting receiver or buffer it; False when the send must wait."""
        if self._closed:
            raise self._closed_error()
        while self._receivers:
            case = self._receivers.popleft()
            if case.waiter.complete(case.index, value, True):
                return True
        if not self._has_room():
            return False
        self._buffer.append((value, nbytes))
        self._bytes += nbytes
        return True

    def _try_recv(self) -> tuple[bool, Any, bool]:
        """``(True, value, ok)`` when a recv completes now, ``(False, None, False)`` when it must wait."""
        if self._buffer:
            value, nbytes = self._buffer.popleft()
            self._bytes -= nbytes
            self._refill()
            return True, value, True
        while self._senders:
            case = self._senders.popleft()
            if case.waiter.complete(case.index, None, True):
                return True, case.value, True
        return (True, None, False) if self._closed else (False, None, False)

    def _refill(self) -> None:
        """Move the values of blocked senders, oldest first, into the room a recv made."""
        while self._senders and self._has_room():
            case = self._senders.popleft()
            if case.waiter.complete(case.index, None, True):
                self._buffer.append((case.value, case.nbytes))
                self._bytes += case.nbytes

    def _discard(self, case: _Case) -> None:
        """Remove ``case`` from its queue when still there (its waiter completed elsewhere)."""
        queue = self._senders if case.is_send else self._receivers
        with self._lock:
            try:
                queue.remove(case)
            except ValueError:
                pass


@_operation
def select(
    cases: Sequence[tuple[Any, ...]], default: bool = False, timeout: float | None = None
) -> tuple[int, Any, bool]:
    """Go's ``select``: run one of ``cases`` that can proceed, blocking until one can.

    ``cases`` are ``("send", channel, value)`` and ``("recv", channel)``. Returns
    ``(index, value, ok)``: the index of the case that ran, with ``(value, ok)`` as
    :meth:`Channel.recv` returns them for a recv case and ``(None, True)`` for a
    send case. When several cases are ready, one is chosen uniformly at random.
    A recv case on a closed, drained channel is ready and gives ``(None, False)``;
    a send case on a closed channel raises ChannelClosedError when chosen, or when
    its channel closes while the select waits. ``default=True`` returns
    ``(-1, None, False)`` at once when no case is ready; ``timeout`` raises
    ChannelTimeout when none became ready in time (then no case ran). A select
    with no cases blocks forever (a deadlock, when nothing else runs).
    """
    if default and timeout is not None:
        raise BlockirError("select: default=True never waits, so it takes no timeout")
    _check_timeout(timeout)
    parsed = [_parse_case(i, case) for i, case in enumerate(cases)]
    order = list(range(len(parsed)))
    _rng.shuffle(order)
    channels = sorted({id(ch): ch for _, ch, _ in parsed}.values(), key=id)
    with contextlib.ExitStack() as locks:
        for ch in channels:
            locks.enter_context(ch._lock)
        for i in order:
            is_send, ch, value = parsed[i]
            if is_send:
                nbytes = message_nbytes(value) if ch._bytes_limit is not None else 0
                if ch._try_send(value, nbytes):
                    return i, None, True
            else:
                ready, value, ok = ch._try_recv()
                if ready:
                    return i, value, ok
        if default:
            return -1, None, False
        waiter = _Waiter()
        for i, (is_send, ch, value) in enumerate(parsed):
            nbytes = message_nbytes(value) if is_send and ch._bytes_limit is not None else 0
            case = _Case(waiter, i, ch, is_send, value, nbytes)
            (ch._senders if is_send else ch._receivers).append(case)
    description = (
        f"select on ({', '.join(c.describe() for c in waiter.cases)})" if waiter.cases else "select with no cases"
    )
    return _wait(waiter, timeout, description)


def _parse_case(index: int, case: Any) -> tuple[bool, Channel, Any]:
    """``(is_send, channel, value)`` of a select case; an error naming the case when malformed."""
    shape_ok = isinstance(case, (tuple, list)) and (
        (len(case) == 3 and case[0] == "send") or (len(case) == 2 and case[0] == "recv")
    )
    if not shape_ok or not isinstance(case[1], Channel):
        raise BlockirError(f"select case {index} must be ('send', channel, value) or ('recv', channel), got {case!r}")
    return case[0] == "send", case[1], case[2] if case[0] == "send" else None


class blocked_on:  # noqa: N801  (a context manager used like a function, as contextlib.suppress)
    """Count the current thread as blocked, waiting for ``description``, while inside.

    For waits on other channel users that are not channel operations: an executor
    waiting for the go blocks of a run wraps the wait in ``blocked_on("...")``.
    ``over``, when given, says whether what the thread waits for has happened
    (e.g. ``event.is_set``): from then on the thread counts as running, though
    it has not woken yet. Entering registers the thread. When a deadlock is found while the thread is
    inside, :meth:`check` raises its DeadlockError, and so does leaving the block
    normally; poll :meth:`check` in the wait to be woken when nothing else would
    end it. Channel operations inside the block count as running while they run.
    """

    def __init__(self, description: str, over: Callable[[], bool] | None = None) -> None:
        self.description = description
        self.over = over
        self._state: _ThreadState | None = None

    def __enter__(self) -> blocked_on:
        state = self._state = _state_of()
        with _registry_lock:
            state.outer.append((self.description, self.over))
            state.error = None
            _detect()
        return self

    def _entered(self, what: str) -> _ThreadState:
        if self._state is None:
            raise RuntimeError(f"blocked_on.{what} outside its with block")
        return self._state

    def check(self) -> None:
        """Look for a deadlock now; raise the DeadlockError that involves this thread, if any."""
        state = self._entered("check()")
        with _registry_lock:
            _detect()
            error, state.error = state.error, None
        if error is not None:
            raise error

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        state = self._entered("__exit__")
        with _registry_lock:
            state.outer.pop()
            error, state.error = state.error, None
        if error is not None and exc_type is None:
            raise error
