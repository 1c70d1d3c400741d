"""Kernels of the concurrency ops (:mod:`blockir.ops.channel`): channels, ``go`` and ``select``; and of the loops
and conditionals (:mod:`blockir.ops.control_flow`): ``while``, ``conditional_block`` and their gradients.

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

Loops and conditionals run their block's plan on the calling thread, in a child scope of the run's: fed the
outer temporaries the block reads (the op's ``X`` / ``Input``, or its ``Out`` for a state it only writes; a
name ``NAME@DEVICE`` there is the copy ``insert-copies`` made of ``NAME`` for the block), fetching what it
writes of them (:meth:`Plan.run <blockir.runtime.plan.Plan.run>` with ``as_is``: on their devices, not
copied). A ``while`` reads its condition back to the host after each iteration and, when a gradient op reads
its ``StepScopes``, keeps per iteration the values its state had when the iteration began and those of the
block's own variables when it ended (:class:`StepStates`); ``while_grad`` runs its gradient block on them,
last to first, each gradient of a state flowing into the iteration before, each of a variable only read
summed.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Sequence
from typing import Any, NamedTuple, Protocol

from blockir.errors import BlockirError, ChannelClosedError, DeadlockError
from blockir.ir.core import Block, Operator, Variable, op_reads_writes, outer_temporaries
from blockir.ir.dtypes import VarKind
from blockir.ir.schema import EMPTY_VAR, GRAD_SUFFIX, KernelContext, find, grad_name
from blockir.ops.channel import CHANNEL_CLOSE, CHANNEL_CREATE, CHANNEL_RECV, CHANNEL_SEND, GO, SELECT
from blockir.ops.common import to_host
from blockir.ops.control_flow import (
    CONDITIONAL_BLOCK,
    CONDITIONAL_BLOCK_GRAD,
    WHILE,
    WHILE_GRAD,
    add_gradients,
    zeros_like_value,
)
from blockir.ops.values import LoDTensor, TensorArray
from blockir.passes.copies import original_name
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


class CompileBlock(Protocol):
    """``compile_block(block, feeds, device, fetches=())``: a sub-block compiled into a plan fed ``feeds``, which
    live on ``device``, fetching ``fetches`` (run with ``as_is``: the values as the run left them)."""

    def __call__(self, block: Block, feeds: list[str], device: str, fetches: Sequence[str] = (), /) -> Any: ...


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


def _in_block(names: Sequence[str]) -> list[str]:
    """The names a control op's block uses for the op's variables: ``NAME`` where the op names ``NAME@DEVICE``,
    the copy of it the ``insert-copies`` pass made on the op's device for the block."""
    return [original_name(n) for n in names]


def _go(op: Operator, device: str, compile_block: CompileBlock) -> Callable[..., Any]:
    sub = op.sub_blocks()[0]
    names = [n for n in op.input("X") if n != EMPTY_VAR]
    feeds = _in_block(names)
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


# -- while and conditional_block ------------------------------------------------------------------------------


class StepStates(list):
    """The value of a ``while``'s ``StepScopes`` (a ``conditional_block``'s ``Scope``): per iteration run, the values
    its gradient needs (name -> value), in the order the iterations ran."""


def _truth(ctx: KernelContext, value: Any) -> bool:
    """Whether a condition of one element holds (on a GPU, read back to the host: the loop waits for it)."""
    flat = to_host(value.data if isinstance(value, LoDTensor) else value).reshape(-1)
    if flat.size != 1:
        raise BlockirError(f"the condition must hold one element, got {flat.size}: {ctx.op_text}")
    return bool(flat[0])


def _bound(names: Sequence[str]) -> list[str]:
    return [n for n in names if n != EMPTY_VAR]


class _SubBlock(NamedTuple):
    """A control op's block compiled into a plan, with the names it is fed (those it cannot do without among
    them: ``required``) and those it hands back."""

    plan: Any
    feeds: list[str]
    fetches: list[str]
    required: frozenset[str]

    def run(self, known: dict[str, Any], scope: Scope, text: str) -> dict[str, Any]:
        missing = [n for n in self.feeds if known.get(n) is None and n in self.required]
        if missing:
            raise BlockirError(f"{', '.join(map(repr, missing))} read by the block of an op hold no value: {text}")
        values = self.plan.run({n: known[n] for n in self.feeds}, scope, as_is=True)
        return dict(zip(self.fetches, values))


def _written(block: Block) -> set[str]:
    return {n for op in block.ops for n in op_reads_writes(op)[1]}


def _kept(block: Block) -> list[str]:
    """The block's own variables its ops write that a gradient may read: its tensors, tensor arrays and the
    states kept by the loops and conditionals in it."""
    written = _written(block)
    return sorted(
        n
        for n, var in block.vars.items()
        if n in written
        and not var.persistable
        and var.kind in (VarKind.LOD_TENSOR, VarKind.LOD_TENSOR_ARRAY, VarKind.STEP_SCOPES)
    )


def _block_reads(op: Operator, sub: Block, given: Sequence[str], what: str) -> list[str]:
    """The outer temporaries ``sub`` reads (each must be among ``given``), sorted."""
    reads = outer_temporaries(sub)
    unknown = [n for n in reads if n not in given]
    if unknown:
        raise BlockirError(
            f"{op.type}: block {sub.idx} reads {', '.join(unknown)}, which the op does not list in {what}: {op}"
        )
    return reads


def _empty_arrays(block: Block, state: dict[str, Any], names: Sequence[str]) -> None:
    """Tensor arrays never written yet start empty."""
    for n in names:
        if state.get(n) is None and block.find_var_recursive(n).kind is VarKind.LOD_TENSOR_ARRAY:
            state[n] = TensorArray()


def _while(op: Operator, device: str, compile_block: CompileBlock) -> Callable[..., Any]:
    sub, text = op.sub_blocks()[0], str(op)
    xs, outs, cond = _in_block(op.input("X")), _in_block(op.output("Out")), _in_block(op.input("Condition"))[0]
    if cond not in _written(sub):
        raise BlockirError(f"while: its block never writes the condition {cond!r}, so the loop would never end: {op}")
    keep = not op.attr("is_test") and bool(_bound(op.output("StepScopes")))
    given = sorted(set(_bound(xs)) | set(_bound(outs)))
    feeds = _block_reads(op, sub, given, "X or Out")
    kept = _kept(sub) if keep else []
    fetches = list(dict.fromkeys([*_bound(outs), cond, *kept]))
    body = _SubBlock(compile_block(sub, feeds, device, fetches), feeds, fetches, frozenset(feeds))

    def run_while(
        ctx: KernelContext, run: RunContext, x_values: list[Any], conds: list[Any], current: list[Any]
    ) -> tuple[list[Any], StepStates]:
        state = dict(zip(outs, current))
        state.update(zip(xs, x_values))
        _empty_arrays(sub, state, given)
        steps = StepStates()
        scope = Scope(run.scope)
        keeping = keep and ctx.wants[1]  # only when a gradient op of the plan reads them
        go_on = _truth(ctx, conds[0])
        while go_on:
            start = {n: state[n] for n in _bound(xs)}
            got = body.run(state, scope, text)
            state.update((n, got[n]) for n in _bound(outs))
            if keeping:
                steps.append({**{n: got[n] for n in fetches}, **start})
            go_on = _truth(ctx, got[cond])
        return [state.get(n) for n in outs], steps

    return run_while


def _grad_feed(
    ctx: KernelContext, names: Sequence[str], state: dict[str, Any], grads: dict[str, Any]
) -> dict[str, Any]:
    """What a gradient block is fed: the gradients flowing in (zeros where none does) and the forward values it
    reads, those of the iteration at hand."""
    known = {}
    for n in names:
        if n in state and not n.endswith(GRAD_SUFFIX):
            known[n] = state[n]
            continue
        value = grads.get(n)
        forward = state.get(n[: -len(GRAD_SUFFIX)] if n.endswith(GRAD_SUFFIX) else n)
        if value is None and forward is not None:  # no gradient flows in: zeros
            value = zeros_like_value(ctx.xp, forward)
        known[n] = value  # None: of a value the forward run never computed (a branch that did not run)
    return known


def _exposed_reads(block: Block) -> tuple[list[str], frozenset[str]]:
    """The temporaries ``block`` reads before writing them (its own or outer ones), sorted; and those of them
    some op reads through an input slot that is not optional (the others, read through optional slots, as
    outputs an op updates, or by a loop or conditional inside, may have no value)."""
    reads: set[str] = set()
    required: set[str] = set()
    written: set[str] = set()
    for op in block.ops:
        r, w = op_reads_writes(op)
        schema = find(op.type)
        needs = {n for s in schema.inputs if not s.optional for n in op.input(s.name)} if schema else r
        reads |= r - written
        required |= needs - written
        written |= w
    feeds = sorted(n for n in reads if not block.find_var_recursive(n).persistable)
    return feeds, frozenset(required)


def _grad_block(op: Operator, device: str, compile_block: CompileBlock, forward: Sequence[str]) -> _SubBlock:
    """A gradient op's block compiled: fed what it reads before writing it, fetching the gradients of the
    variables ``forward`` (``X@GRAD`` inside the block, whatever the op's output slot calls them) it writes."""
    sub = op.sub_blocks()[0]
    feeds, required = _exposed_reads(sub)
    written = _written(sub)
    fetches = [g for g in dict.fromkeys(grad_name(n) for n in _bound(forward)) if g in written]
    return _SubBlock(compile_block(sub, feeds, device, fetches), feeds, fetches, required)


def _while_grad(op: Operator, device: str, compile_block: CompileBlock) -> Callable[..., Any]:
    text = str(op)
    xs, x_grads, outs = _in_block(op.input("X")), op.output("X@GRAD"), _in_block(op.input("Out"))
    out_grads = _in_block(op.input("Out@GRAD"))
    wanted = [x for x, g in zip(xs, x_grads) if g != EMPTY_VAR]
    block = _grad_block(op, device, compile_block, wanted)
    carried = set(_bound(outs))
    flowing = [grad_name(x) for x in wanted if x in carried]
    arrays = {grad_name(x) for x in wanted if op.block.find_var_recursive(x).kind is VarKind.LOD_TENSOR_ARRAY}

    def run_while_grad(
        ctx: KernelContext,
        run: RunContext,
        x_values: list[Any],
        out_values: list[Any],
        dout: list[Any],
        steps: Any,
    ) -> list[Any]:
        grads = dict(zip(out_grads, dout))
        sums: dict[str, Any] = {}
        scope = Scope(run.scope)
        for state in reversed(steps or ()):
            got = block.run(_grad_feed(ctx, block.feeds, state, grads), scope, text)
            # into the iteration before: what the block computed; a tensor array's passes through where the block
            # wrote none (it wrote one position of the array), a tensor's is zero (the block overwrote it)
            grads = {g: got[g] if g in got else grads.get(g) if g in arrays else None for g in flowing}
            for x in wanted:
                if x not in carried:
                    sums[grad_name(x)] = add_gradients(ctx.xp, sums.get(grad_name(x)), got.get(grad_name(x)))
        results = []
        for x, g, value in zip(xs, x_grads, x_values):
            grad = (grads if x in carried else sums).get(grad_name(x))
            results.append(None if g == EMPTY_VAR else grad if grad is not None else zeros_like_value(ctx.xp, value))
        return results

    return run_while_grad


def _holds(ctx: KernelContext, scalar: bool, conds: list[Any]) -> bool:
    if scalar:
        return _truth(ctx, conds[0])
    return all(int((c.data if isinstance(c, LoDTensor) else c).size) != 0 for c in conds)


def _conditional_block(op: Operator, device: str, compile_block: CompileBlock) -> Callable[..., Any]:
    sub, text = op.sub_blocks()[0], str(op)
    ins, outs, scalar = _in_block(op.input("Input")), _in_block(op.output("Out")), op.attr("is_scalar_condition")
    keep = bool(_bound(op.output("Scope")))
    given = sorted(set(_bound(ins)) | set(_bound(outs)))
    feeds = _block_reads(op, sub, given, "Input or Out")
    written = _written(sub)
    kept = _kept(sub) if keep else []
    fetches = list(dict.fromkeys([*(n for n in _bound(outs) if n in written), *kept]))
    body = _SubBlock(compile_block(sub, feeds, device, fetches), feeds, fetches, frozenset(feeds))

    def run_conditional(
        ctx: KernelContext, run: RunContext, conds: list[Any], in_values: list[Any], current: list[Any]
    ) -> tuple[list[Any], StepStates]:
        if not _holds(ctx, scalar, conds):
            return list(current), StepStates()
        state = dict(zip(outs, current))
        state.update(zip(ins, in_values))
        _empty_arrays(sub, state, given)
        got = body.run(state, Scope(run.scope), text)
        state.update(got)
        return [state.get(n) for n in outs], StepStates([state] if keep and ctx.wants[1] else [])

    return run_conditional


def _conditional_block_grad(op: Operator, device: str, compile_block: CompileBlock) -> Callable[..., Any]:
    text = str(op)
    ins, in_grads, out_grads = _in_block(op.input("Input")), op.output("Input@GRAD"), _in_block(op.input("Out@GRAD"))
    block = _grad_block(op, device, compile_block, [x for x, g in zip(ins, in_grads) if g != EMPTY_VAR])

    def run_conditional_grad(
        ctx: KernelContext,
        run: RunContext,
        conds: list[Any],
        in_values: list[Any],
        out_values: list[Any],
        dout: list[Any],
        scope: Any,
    ) -> list[Any]:
        got: dict[str, Any] = {}
        if scope:  # the forward block ran
            known = _grad_feed(ctx, block.feeds, scope[0], dict(zip(out_grads, dout)))
            got = block.run(known, Scope(run.scope), text)
        results = []
        for x, g, value in zip(ins, in_grads, in_values):
            inner = got.get(grad_name(x))
            results.append(None if g == EMPTY_VAR else inner if inner is not None else zeros_like_value(ctx.xp, value))
        return results

    return run_conditional_grad


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
    WHILE.type: ControlKernel(_while, takes_run=True),
    WHILE_GRAD.type: ControlKernel(_while_grad, takes_run=True),
    CONDITIONAL_BLOCK.type: ControlKernel(_conditional_block, takes_run=True),
    CONDITIONAL_BLOCK_GRAD.type: ControlKernel(_conditional_block_grad, takes_run=True),
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
