"""Kernels of the concurrency ops (:mod:`blockir.ops.channel`): channels, ``go`` and ``select``.

Their schemas lower as :attr:`~blockir.ir.schema.Lowering.CONTROL`: the plan
compiler makes each op's kernel when it compiles the op (:func:`control_kernel`
says how, from a table by op type), because they need what an ordinary kernel
does not: the variables an op declares (a closed channel's ``recv`` yields
zero-row values of the declared shapes), other blocks compiled into plans
(``go`` and ``select`` run sub-blocks), and the run itself (:class:`RunContext`:
its scope, and the go blocks it started). A plan with ops whose kernels take the
run context (``ControlKernel.takes_run``: ``channel_create``, ``go``,
``select``) holds it in a value slot of its own, which their steps read before
their inputs.

Structured concurrency: each ``go`` runs its block's plan on a new thread in a
child scope of the run's scope (temporaries it reads are fed to it; persistable
variables and channels it finds in the scope); the run returns only after every
go block it started has finished (waiting counts as blocked for the channels'
deadlock detection), and fails with the first error a go block raised.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import Any, NamedTuple

from blockir.errors import BlockirError, ChannelClosedError, DeadlockError
from blockir.ir.core import Block, Operator, Variable, outer_temporaries
from blockir.ir.schema import EMPTY_VAR, KernelContext
from blockir.ops.channel import CHANNEL_CLOSE, CHANNEL_CREATE, CHANNEL_RECV, CHANNEL_SEND, GO, SELECT
from blockir.ops.values import LoDTensor
from blockir.runtime.channel import Channel, blocked_on, register_thread, select
from blockir.runtime.scope import Scope

__all__ = ["CompileBlock", "ControlKernel", "RunContext", "close_channels", "control_kernel"]

_create_lock = threading.Lock()  # two runs making the same named channel at once make one


class RunContext:
    """One run of a plan: its scope, and the go blocks it started (joined by :meth:`join`)."""

    def __init__(self, scope: Scope, on_error: Callable[[], None]) -> None:
        self.scope = scope
        self.on_error = on_error  # called when a go block fails (the plan closes its channels)
        self._threads: list[threading.Thread] = []
        self._errors: list[BaseException] = []
        self._lock = threading.Lock()

    def go(self, run: Callable[[Scope], Any], name: str) -> None:
        """Start ``run(child scope)`` on a new thread."""
        child = Scope(self.scope)  # held by the thread until it ends, and so at least until join()

        def body() -> None:
            try:
                run(child)
            except BaseException as e:  # reported by join()
                with self._lock:
                    self._errors.append(e)
                self.on_error()

        thread = threading.Thread(target=body, name=f"blockir-go-{name}", daemon=True)
        with self._lock:
            self._threads.append(thread)
        register_thread(thread)  # a channel user from the start: no false deadlock while it computes
        thread.start()

    def join(self) -> BaseException | None:
        """Wait for every go block started so far; the first error one of them raised, if any (an error
        that only follows from the channels being closed after another failure counts last)."""
        with self._lock:
            threads = list(self._threads)
        if threads:
            try:
                with blocked_on(
                    f"a run waiting for {len(threads)} go block(s)", over=lambda: not any(t.is_alive() for t in threads)
                ):
                    for thread in threads:
                        thread.join()
            except DeadlockError:
                pass  # every go block was blocked too: each got the error and failed with it (below)
        with self._lock:
            errors = list(self._errors)
        causes = [e for e in errors if not isinstance(e.__cause__ or e, ChannelClosedError)]
        return (causes or errors)[0] if errors else None


def _zero(var: Variable, xp: Any) -> Any:
    """The value a closed channel's recv gives ``var``: zero rows of its declared shape and dtype."""
    shape = tuple(0 if d < 0 else d for d in (var.shape or (0,)))
    value = xp.zeros(shape, dtype=var.dtype or "float32")
    return LoDTensor(value, [[0]] * var.lod_level) if var.lod_level else value


def _received(message: Any, ok: bool, outs: list[Variable], xp: Any, text: str) -> list[Any]:
    if not ok:
        return [_zero(v, xp) for v in outs]
    if len(message) != len(outs):
        raise BlockirError(f"received a message of {len(message)} value(s) into {len(outs)} variable(s): {text}")
    return list(message)


CompileBlock = Callable[[Block, list[str], str], Any]
"""``compile_block(block, feeds, device)``: a sub-block compiled into a plan fed ``feeds``, which live on ``device``."""


def _channel_create(op: Operator, device: str, compile_block: CompileBlock) -> Callable[..., Any]:
    out = op.output("Out")[0]
    capacity, limit = op.attrs.get("capacity", 0), op.attrs.get("bytes_limit", -1)

    def create(ctx: KernelContext, run: RunContext) -> Channel:
        with _create_lock:
            holder = run.scope.find_var(out)
            if holder is not None and isinstance(holder.value, Channel):
                return holder.value
            channel = Channel(capacity, None if limit < 0 else limit, place=device, name=out)
            run.scope.set(out, channel, device)
            return channel

    return create


def _channel_send(op: Operator, device: str, compile_block: CompileBlock) -> Callable[..., Any]:
    def send(ctx: KernelContext, channel: Channel, values: list[Any]) -> None:
        channel.send(list(values))

    return send


def _channel_recv(op: Operator, device: str, compile_block: CompileBlock) -> Callable[..., Any]:
    outs, text = [op.block.find_var_recursive(n) for n in op.output("Out")], str(op)

    def recv(ctx: KernelContext, channel: Channel) -> tuple[list[Any], Any]:
        message, ok = channel.recv()
        return _received(message, ok, outs, ctx.xp, text), ctx.xp.asarray([ok])

    return recv


def _channel_close(op: Operator, device: str, compile_block: CompileBlock) -> Callable[..., Any]:
    def close(ctx: KernelContext, channel: Channel) -> None:
        channel.close()

    return close


def _go(op: Operator, device: str, compile_block: CompileBlock) -> Callable[..., Any]:
    sub = op.sub_blocks()[0]
    feeds = [n for n in op.input("X") if n != EMPTY_VAR]
    plan = compile_block(sub, feeds, device)

    def go(ctx: KernelContext, run: RunContext, values: list[Any]) -> None:
        feed = dict(zip(feeds, values))
        run.go(lambda scope: plan.run(feed, scope), f"block{sub.idx}")

    return go


def _select_kernel(op: Operator, device: str, compile_block: CompileBlock) -> Callable[..., Any]:
    block, text = op.block, str(op)
    kinds, channel_of, counts = op.attr("case_kinds"), op.attr("case_channel"), op.attr("case_count")
    reads = op.input("Reads")
    outs = [block.find_var_recursive(n) for n in op.output("Out")]
    out_names = op.output("Out")
    plans, sends, received = [], [], []  # per case: its plan; which X values it sends; which Out it fills
    x_at = out_at = 0
    for kind, count, sub in zip(kinds, counts, op.sub_blocks()):
        sends.append(range(x_at, x_at + count) if kind == "send" else range(0))
        received.append(range(out_at, out_at + count) if kind == "recv" else range(0))
        x_at += count if kind == "send" else 0
        out_at += count if kind == "recv" else 0
        feeds = outer_temporaries(sub)
        unknown = [n for n in feeds if n not in reads and n not in out_names]
        if unknown:
            raise BlockirError(
                f"select: case block {sub.idx} reads {', '.join(unknown)}, which the op does not list in Reads: {text}"
            )
        plans.append((compile_block(sub, feeds, device), feeds))
    recv_cases = [k for k, kind in enumerate(kinds) if kind == "recv"]
    waiting = [k for k, kind in enumerate(kinds) if kind != "default"]
    default = "default" in kinds

    def run_select(
        ctx: KernelContext, run: RunContext, channels: list[Channel], xs: list[Any], read_values: list[Any]
    ) -> tuple[list[Any], list[Any]]:
        cases = [
            ("send", channels[channel_of[k]], [xs[i] for i in sends[k]])
            if kinds[k] == "send"
            else ("recv", channels[channel_of[k]])
            for k in waiting
        ]
        index, message, ok = select(cases, default=default)
        chosen = kinds.index("default") if index < 0 else waiting[index]
        values = [_zero(v, ctx.xp) for v in outs]
        if kinds[chosen] == "recv":
            got = _received(message, ok, [outs[i] for i in received[chosen]], ctx.xp, text)
            for i, value in zip(received[chosen], got):
                values[i] = value
        status = [ctx.xp.asarray([k == chosen and ok]) for k in recv_cases]
        plan, feeds = plans[chosen]
        known = dict(zip(reads, read_values))
        known.update(zip(out_names, values))
        plan.run({n: known[n] for n in feeds}, Scope(run.scope))
        return values, status

    return run_select


class ControlKernel(NamedTuple):
    """How the runtime makes the kernels of one concurrency op type."""

    make: Callable[[Operator, str, CompileBlock], Callable[..., Any]]  # (op, its device, compile_block) -> kernel
    takes_run: bool  # the kernel takes the run context before the op's inputs


_KERNELS: dict[str, ControlKernel] = {
    CHANNEL_CREATE.type: ControlKernel(_channel_create, takes_run=True),
    CHANNEL_SEND.type: ControlKernel(_channel_send, takes_run=False),
    CHANNEL_RECV.type: ControlKernel(_channel_recv, takes_run=False),
    CHANNEL_CLOSE.type: ControlKernel(_channel_close, takes_run=False),
    GO.type: ControlKernel(_go, takes_run=True),
    SELECT.type: ControlKernel(_select_kernel, takes_run=True),
}


def control_kernel(op: Operator) -> ControlKernel:
    """How to make the kernel of ``op``, an op whose schema lowers as :attr:`~blockir.ir.schema.Lowering.CONTROL`;
    an error naming the op when the runtime has no kernel for its type."""
    kernel = _KERNELS.get(op.type)
    if kernel is None:
        raise BlockirError(f"op type {op.type!r} is a control op the runtime has no kernel for: {op}")
    return kernel


def close_channels(values: list[Any], slots: tuple[int, ...]) -> None:
    """Close the channels held in ``slots`` of a failed run, so that producers and consumers stop."""
    for i in slots:
        if isinstance(values[i], Channel):
            values[i].close()
