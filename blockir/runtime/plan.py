"""Compiling a block into a plan, and running a plan.

:func:`compile_plan` does everything a run would otherwise do per op, once,
in phases: it refuses what a run would trip on (:func:`check_block`: the
verifier's checks of each op and of the feed/fetch columns) and looks up each
op's schema and kernel; the value flow, forward, finds the values that come
from outside the plan, those that may carry LoD and the device of each; the
liveness, backward, finds which outputs anybody reads and where each value is
used last, so that it is freed right after; then each op becomes a step
(:class:`~blockir.runtime.scheduler.Step`: its kernel, its
:class:`KernelContext` with the attributes' defaults filled in, a prepared
``gather`` / ``scatter`` over value slots, where LoD is dropped before the
kernel and put back after it, and the slots to free after it), and the steps
get their schedule. :meth:`Plan.run` then checks the feeds, fills a list of
values indexed by slot and walks the steps. An input slot an op leaves unbound
reads a value slot that always holds None, so that the gather of a step whose
inputs are plain values is one ``itemgetter``. With ``check_nan_inf`` each
kernel is wrapped to stop at NaN or inf (:mod:`blockir.runtime.nan_inf`);
without it nothing is.

How an op becomes a step is its schema's ``lowering``
(:class:`~blockir.ir.schema.Lowering`), never its type name: a kernel, a
copy, a control op whose kernel :mod:`blockir.runtime.control` makes, or no
step at all for the feed and fetch ops.

Reusing dead buffers: a kernel with a keyword-only parameter ``reuse`` may
write into its inputs that nothing needs after it. The compiler lists, per
step, the inputs that die there and were made earlier in the same run (never
a feed, a scope value or a fetch target); at run time their slots are cleared
before the kernel runs and each is offered (``reuse[k]`` True for the kernel's
``k``-th input slot) only when the argument list holds the only reference to
an array owning its memory, so that an array also bound to a live variable,
viewed by one, or held by a LoDTensor is never overwritten.

Feed and fetch ops (as ``save_inference_model`` writes them) are not steps:
their outputs are the feed targets and their inputs the default fetch targets
of the plan.

A value the scope lacks is an error, unless only optional input slots read
it: they then get None (a ``broadcast``'s ``Current`` before the first copy).

Devices: each op runs on its ``op_device`` (else its block's, its program's,
or the executor's place) and its kernel computes with that device's array
module. Feeds arrive on the host and scope values where the variable lives
(``Variable.device``, else the host); an op's outputs are on its device. The
compiler checks that every op but a copy reads only values on its own
device (a copy runs on the device its ``device_attr`` names; a collective
reads and writes its ``X[i]`` and ``Out[i]`` on device ``i`` of its
``devices``). At run time a
scope value found on another device than the plan expects is moved there
(copied, and re-tagged in the scope); persistables are written back tagged
with the device they are on, and fetched values come back to the host
(copied).
"""

from __future__ import annotations

import functools
import inspect
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from operator import itemgetter
from typing import Any, NamedTuple, cast

import networkx as nx
import numpy as np

from blockir.errors import BlockirError, OpNotFoundError, VerifyError
from blockir.ir.attrs import AttrType, normalize
from blockir.ir.core import Block, Operator, Program, Variable
from blockir.ir.devices import HOST, checked_device, device_kind
from blockir.ir.dtypes import VarKind
from blockir.ir.schema import EMPTY_VAR, KernelContext, Lowering, OpSchema, Scratch, Slot, lookup
from blockir.ir.verify import column_problems, op_problems
from blockir.ops.transfer import map_arrays
from blockir.ops.values import LoDTensor, SelectedRows, TensorArray, describe_value, note_written
from blockir.passes.copies import value_devices
from blockir.passes.deps import dependency_graph
from blockir.passes.streams import op_stream
from blockir.runtime.control import CompileBlock, RunContext, close_channels, control_kernel
from blockir.runtime.device import array_module, get_device, transfer, value_device
from blockir.runtime.nan_inf import checked
from blockir.runtime.place import Place
from blockir.runtime.scheduler import (
    Gather,
    Scatter,
    Schedule,
    Sequential,
    Step,
    WorkerPool,
    compile_schedule,
    compile_steps,
    execute,
)
from blockir.runtime.scope import Scope, ScopeVariable

__all__ = [
    "SCHEDULERS",
    "FeedSpec",
    "Fetch",
    "Plan",
    "ScopeInput",
    "Step",
    "Writeback",
    "check_block",
    "compile_plan",
    "describe_value",
    "shape_matches",
]

RUN_SLOT = "@run"  # the value slot of the run context (not a variable name: names never hold '@' first)
UNBOUND_SLOT = "@unbound"  # a value slot never written, read for the input slots an op leaves unbound: None
_CHANNELS = (VarKind.CHANNEL, VarKind.CHANNEL_LIST)
SCHEDULERS = ("sequential", "dataflow")
# what may be fed: tensors, and what a loop's or a conditional's block is handed (tensor arrays, the states an
# inner loop kept for its gradient)
_FEEDABLE = (VarKind.LOD_TENSOR, VarKind.SELECTED_ROWS, VarKind.LOD_TENSOR_ARRAY, VarKind.STEP_SCOPES)


def shape_matches(declared: tuple[int, ...], shape: tuple[int, ...]) -> bool:
    """Whether ``shape`` fits the declared shape: same rank, equal dims where declared >= 0 (-1: any size)."""
    if len(shape) != len(declared):
        return False
    for d, s in zip(declared, shape):  # a loop, not all(...) over a generator: each run checks each feed
        if d >= 0 and d != s:
            return False
    return True


def _declared(var: Variable) -> str:
    shape = "?" if var.shape is None else list(var.shape)
    return f"{var.dtype}{shape}"


# -- feeds -------------------------------------------------------------------------


@dataclass(frozen=True)
class FeedSpec:
    """A fed variable: where it goes and what it must look like."""

    slot: int
    name: str
    kind: VarKind
    dtype: np.dtype | None
    shape: tuple[int, ...] | None
    lod_level: int
    device: str  # where the fed value must be: the host, or a GPU for a value already there

    @staticmethod
    def of(slot: int, var: Variable, device: str) -> FeedSpec:
        if var.kind not in _FEEDABLE:
            raise BlockirError(f"feed {var.name!r}: a {var.kind.text} variable cannot be fed")
        try:
            dtype = np.dtype(var.dtype) if var.dtype else None
        except TypeError:  # bfloat16: numpy has no such type
            raise BlockirError(
                f"feed {var.name!r}: a {var.dtype} variable cannot be fed (numpy has no {var.dtype})"
            ) from None
        return FeedSpec(slot, var.name, var.kind, dtype, var.shape, var.lod_level, device)

    @functools.cached_property
    def _takes_arrays(self) -> bool:
        """Whether a numpy array of the declared dtype and shape is fed as it is: a dense variable without LoD,
        fed on the host."""
        return (
            self.kind is VarKind.LOD_TENSOR
            and not self.lod_level
            and self.dtype is not None
            and device_kind(self.device) != "cuda"
        )

    def check(self, value: Any) -> Any:
        """The value to put in the slot; an error naming the variable when ``value`` does not fit it."""
        if (
            type(value) is np.ndarray  # the common case first, at the cost of three comparisons
            and self._takes_arrays
            and value.dtype == self.dtype
            and (self.shape is None or shape_matches(self.shape, value.shape))
        ):
            return value
        if self.kind is VarKind.STEP_SCOPES:
            return value
        if self.kind is VarKind.LOD_TENSOR_ARRAY:
            if not isinstance(value, list):
                raise BlockirError(f"feed {self.name!r}: expected a tensor array (a list), got {describe_value(value)}")
            value = value if isinstance(value, TensorArray) else TensorArray(value)
            if not any(v is not None for v in value):  # holds no tensor: on no device
                return value
        if device_kind(self.device) == "cuda" or value_device(value) != HOST:
            if value_device(value) != self.device:
                raise BlockirError(
                    f"feed {self.name!r}: the plan takes it on {self.device}, got a value on {value_device(value)}"
                )
        if self.kind is VarKind.LOD_TENSOR_ARRAY:
            return value
        if self.kind is VarKind.SELECTED_ROWS:
            if not isinstance(value, SelectedRows):
                raise BlockirError(f"feed {self.name!r}: expected SelectedRows, got {describe_value(value)}")
            self._check_array(value.values, (len(value.rows), *(self.shape or ())[1:]), value)
            return value
        if isinstance(value, LoDTensor):
            if len(value.lod) != self.lod_level:
                raise BlockirError(
                    f"feed {self.name!r}: expected lod_level {self.lod_level}, got a LoDTensor "
                    f"with {len(value.lod)} LoD level(s)"
                )
            self._check_array(value.data, self.shape, value)
            return value if self.lod_level else value.data
        if self.lod_level:
            raise BlockirError(
                f"feed {self.name!r}: expected a LoDTensor with {self.lod_level} LoD level(s), "
                f"got {describe_value(value)}"
            )
        if not isinstance(value, np.ndarray) and value_device(value) == HOST:
            if isinstance(value, SelectedRows):
                raise BlockirError(f"feed {self.name!r}: expected a dense tensor, got {describe_value(value)}")
            try:
                value = np.asarray(value, dtype=self.dtype)
            except (TypeError, ValueError) as e:
                raise BlockirError(
                    f"feed {self.name!r}: cannot convert {type(value).__name__} to {self.dtype} ({e})"
                ) from None
        self._check_array(value, self.shape, value)
        return value

    def _check_array(self, array: Any, shape: tuple[int, ...] | None, given: Any) -> None:
        if self.dtype is not None and array.dtype != self.dtype:
            raise self._mismatch("dtype", given)
        if shape is not None and not shape_matches(shape, array.shape):
            raise self._mismatch("shape", given)

    def _mismatch(self, what: str, given: Any) -> BlockirError:
        shape = "?" if self.shape is None else list(self.shape)
        return BlockirError(
            f"feed {self.name!r}: wrong {what}: expected {self.dtype}{shape} "
            f"(-1 = any size), got {describe_value(given)}"
        )


# -- steps -------------------------------------------------------------------------


def _no_args(values: list) -> tuple:
    return ()


def _one_arg(i: int) -> Gather:
    def gather(values: list) -> tuple:
        return (values[i],)

    return gather


def _data(value: Any) -> Any:
    """A LoDTensor's data, or the value itself."""
    return value.data if isinstance(value, LoDTensor) else value


def _getter(slots: list[int | None], slot: Slot, unwrap: set[int]) -> Callable[[list], Any]:
    """Reads the argument of one input slot: a value, or a list (duplicable slot; None for an unbound entry)."""

    def one(i: int | None) -> Callable[[list], Any]:
        if i is None:
            return lambda values: None
        return (lambda values: _data(values[i])) if i in unwrap and not slot.lod else itemgetter(i)

    if slot.duplicable:
        getters = [one(i) for i in slots]
        return lambda values: [g(values) for g in getters]
    return one(slots[0])


def _make_gather(args: list[tuple[Slot, list[int | None]]], unwrap: set[int]) -> Gather:
    """Reads the arguments of the input slots ``args`` (each with its value slots: one for a slot that is not
    duplicable); an itemgetter when each is one value read as it is."""
    simple = [cast(int, s[0]) for slot, s in args if not slot.duplicable and (slot.lod or s[0] not in unwrap)]
    if len(simple) == len(args):
        if not simple:
            return _no_args
        return _one_arg(simple[0]) if len(simple) == 1 else itemgetter(*simple)
    getters = [_getter(s, slot, unwrap) for slot, s in args]
    return lambda values: [g(values) for g in getters]


def _share_lod(out: Any, src: Any) -> Any:
    """``out`` with the LoD of ``src`` when ``src`` is a LoDTensor and ``out`` a plain array."""
    if not isinstance(src, LoDTensor) or not src.lod or isinstance(out, LoDTensor):
        return out
    rows = src.lod[-1][-1]
    if out.shape[0] != rows:
        raise BlockirError(f"cannot share LoD {src.lod} with an output of {out.shape[0]} rows")
    tensor = object.__new__(LoDTensor)  # the LoD is that of a checked tensor: no need to check it again
    tensor.data, tensor.lod = out, src.lod
    return tensor


def _store(slots: list[int | None], duplicable: bool, lod_from: int | None) -> Callable[[list, Any], None]:
    """Stores one output slot's result in its value slots (None entries are unbound)."""
    if not duplicable:
        i = cast(int, slots[0])  # a wanted output slot of one variable is bound
        if lod_from is None:
            return lambda values, r: values.__setitem__(i, r)
        return lambda values, r: values.__setitem__(i, _share_lod(r, values[lod_from]))

    def store(values: list, results: Any) -> None:
        if len(results) != len(slots):
            raise BlockirError(f"kernel returned {len(results)} values for a slot binding {len(slots)} variables")
        for i, r in zip(slots, results):
            if i is not None:
                values[i] = r if lod_from is None else _share_lod(r, values[lod_from])

    return store


def _make_scatter(outs: list[tuple[Slot, list[int | None], bool, int | None]]) -> tuple[Scatter, int]:
    """``outs``: per output slot of the schema, (slot, value slots, wanted, LoD source slot). With the scatter,
    the value slot that takes the kernel's result as it is when that is all the scatter does (one output slot
    binding one variable, wanted, no LoD to share: the run loop stores it itself), else -1."""
    stores = [
        (k, _store(slots, slot.duplicable, lod_from))
        for k, (slot, slots, wanted, lod_from) in enumerate(outs)
        if wanted
    ]
    if not stores:
        return (lambda values, result: None), -1
    if len(outs) == 1:
        slot, slots, _, lod_from = outs[0]
        return stores[0][1], (cast(int, slots[0]) if not slot.duplicable and lod_from is None else -1)
    # (result index, value slot) per wanted output when each stores one value as it is: no store calls
    plain = [
        (k, cast(int, slots[0]))
        for k, (slot, slots, wanted, lod_from) in enumerate(outs)
        if wanted and not slot.duplicable and lod_from is None
    ]
    if len(plain) == len(stores):

        def scatter_plain(values: list, result: Any) -> None:
            for k, i in plain:
                values[i] = result[k]

        return scatter_plain, -1
    if len(stores) == 1:
        k, store = stores[0]
        return (lambda values, result: store(values, result[k])), -1

    def scatter(values: list, result: Any) -> None:
        for k, store in stores:
            store(values, result[k])

    return scatter, -1


# -- compiling: the ops ---------------------------------------------------------------------


@dataclass(slots=True)
class _OpInfo:
    """One op of the block as the compiler sees it."""

    op: Operator
    schema: OpSchema
    text: str  # the op's text form, for errors
    device: str
    stream: str
    lowering: Lowering  # the schema's
    inputs: list[tuple[Slot, Sequence[str]]]  # per input slot of the schema: the variables it binds
    outputs: list[tuple[Slot, Sequence[str]]]  # per output slot of the schema: the variables it binds
    reads: list[str]  # the variables it reads, in slot order (a variable twice when it is bound twice)
    writes: list[str]  # the variables it writes, in slot order


def _bound(names: Sequence[str]) -> list[str]:
    return [n for n in names if n != EMPTY_VAR]


def check_block(block: Block) -> None:
    """An error naming the first op of ``block`` with something a run would trip on: an unknown type, a problem
    of :func:`blockir.ir.verify.op_problems` or of :func:`blockir.ir.verify.column_problems` (what
    :func:`blockir.ir.verify.verify` reports too)."""
    for op in block.ops:
        try:
            problems = op_problems(op, lookup(op.type))
        except OpNotFoundError as e:
            raise OpNotFoundError(f"cannot run op: {e}: {op}") from None
        if problems:
            raise VerifyError(f"cannot run op: {'; '.join(problems)}: {op}", problems)
    columns = column_problems(block)
    if columns:
        index, problem = columns[0]
        raise VerifyError(f"cannot run op: {problem}: {block.ops[index]}", [problem])


def _op_info(op: Operator, block: Block, place: Place) -> _OpInfo:
    text = str(op)
    schema = lookup(op.type)
    device = checked_device(op.device or block.device or block.program.device or str(place), text)
    stream = op_stream(op, device)
    get_device(device, text)  # before anything runs: an error naming the devices this machine has
    get_device(stream.rpartition("/")[0], text)
    if (schema.kernel is None and schema.lowering is not Lowering.CONTROL) or device_kind(device) not in schema.devices:
        raise BlockirError(f"op type {op.type!r} has no kernel for {device_kind(device)}: {text}")
    if schema.device_attr and checked_device(op.attr(schema.device_attr), text) != device:
        raise BlockirError(f"{op.type} must run on its {schema.device_attr}, not on {device}: {text}")
    for name in (*op.input_names(), *op.output_names()):
        if name != EMPTY_VAR and not _has_var(block, name):
            raise BlockirError(f"op uses variable {name!r}, which the block does not declare: {text}")
    inputs: list[tuple[Slot, Sequence[str]]] = [(s, op.inputs.get(s.name, ())) for s in schema.inputs]
    # outputs updated in place are read too: after the inputs, as they are, None before their first write
    inputs += [(Slot(s, duplicable=True, optional=True, lod=True), op.output(s)) for s in schema.updates]
    outputs: list[tuple[Slot, Sequence[str]]] = [(s, op.outputs.get(s.name, ())) for s in schema.outputs]
    return _OpInfo(
        op,
        schema,
        text,
        device,
        stream,
        schema.lowering,
        inputs,
        outputs,
        [n for _, names in inputs for n in names if n != EMPTY_VAR],
        [n for _, names in outputs for n in names if n != EMPTY_VAR],
    )


def _has_var(block: Block, name: str) -> bool:
    try:
        block.find_var_recursive(name)
    except BlockirError:
        return False
    return True


def _lod_sources(info: _OpInfo, output_slot: str) -> list[str]:
    """The input variables whose LoD the schema shares to ``output_slot``."""
    inputs = {s.name: names for s, names in info.inputs}
    return [n for inp, out in info.schema.share_lod if out == output_slot for n in _bound(inputs.get(inp, []))]


def _kernel_attrs(info: _OpInfo) -> dict[str, Any]:
    attrs = {}
    for adef in info.schema.attrs:
        value = info.op.attrs.get(adef.name, adef.default)
        if info.op.attr_types.get(adef.name) in (AttrType.SCALAR, AttrType.SCALARS):
            value = normalize(value, adef.type, adef.name)  # Paddle's scalar form of a number (verified to fit)
        attrs[adef.name] = value
    return attrs


class _Slots(dict):
    """Variable name -> value slot, numbering names on first sight."""

    def __missing__(self, name: str) -> int:
        self[name] = len(self)
        return self[name]


class _Framing(NamedTuple):
    ops: list[Operator]  # the ops that become steps
    feeds: list[str]  # the targets of the feed ops, in column order
    fetches: list[str]  # the targets of the fetch ops, in column order


def _framing(block: Block) -> _Framing:
    """The ops of ``block`` that become steps, and the targets of the ops lowered as feeds and fetches."""
    ops, feeds, fetches = [], {}, {}
    for op in block.ops:
        lowering = lookup(op.type).lowering
        if lowering is Lowering.FEED:
            feeds[op.attrs.get("col", 0)] = op.output("Out")[0]
        elif lowering is Lowering.FETCH:
            fetches[op.attrs.get("col", 0)] = op.input("X")[0]
        else:
            ops.append(op)
    return _Framing(ops, [feeds[c] for c in sorted(feeds)], [fetches[c] for c in sorted(fetches)])


def _program_var(block: Block, name: str, what: str) -> Variable:
    if not isinstance(name, str) or not _has_var(block, name):
        replicas = [n for n in block.vars if n.startswith(f"{name}@R") and n[len(name) + 2 :].isdigit()]
        if replicas:  # the data-parallel pass made it per replica
            raise BlockirError(
                f"{what} {name!r} is not a variable of the program: it exists only per replica, as "
                f"{', '.join(replicas)} (data-parallel{{fetch={name}}} gathers it under its name)"
            )
        raise BlockirError(f"{what} {name!r} is not a variable of the program")
    return block.find_var_recursive(name)


# -- compiling: the phases --------------------------------------------------------------------


def compile_plan(
    program: Program,
    feed_names: frozenset[str],
    fetch_names: tuple[str, ...] | None,
    place: Place,
    scheduler: str = "sequential",
    num_threads: int | None = None,
    block: Block | None = None,
    feed_device: str = HOST,
    check_nan_inf: bool = False,
) -> Plan:
    """Compile the global block of ``program`` for these feeds and fetches (None: the fetch ops' targets),
    to run in program order (``scheduler="sequential"``) or as a dataflow over streams and threads
    (``"dataflow"``, at most ``num_threads`` worker threads; None: one per CPU stream off the host).
    ``block``: another block of the program (a go or case block; its sub-plans run in program order);
    ``feed_device``: where the fed values are. ``check_nan_inf``: every op lowered as a kernel raises
    :class:`~blockir.errors.NanInfError` when it produces NaN or inf (:mod:`blockir.runtime.nan_inf`; the
    ops of control ops' blocks are checked in their own plans), and no kernel overwrites its inputs, so
    that the error tells what they held; without it, the steps hold the kernels themselves.

    The phases: the ops (checked, framed by the feed and fetch ops, seen through their schemas), the value
    flow forward (:func:`_value_flow`), liveness backward (:func:`_liveness`), the steps
    (:func:`_make_steps`), and the schedule over the streams."""
    if scheduler not in SCHEDULERS:
        raise BlockirError(f"scheduler must be one of {', '.join(SCHEDULERS)}, got {scheduler!r}")
    block = program.global_block() if block is None else block
    check_block(block)  # feed and fetch ops with an Out, an X and a col of their own, each op with its slots
    framing = _framing(block)
    missing = [n for n in framing.feeds if n not in feed_names]
    if missing:
        raise BlockirError(
            f"missing feed {', '.join(map(repr, missing))}: the program's feed ops take {', '.join(framing.feeds)}"
        )
    fetch_names = tuple(framing.fetches) if fetch_names is None else fetch_names
    slots = _Slots()
    feeds = tuple(
        FeedSpec.of(slots[n], _program_var(block, n, "feed"), _fed_on(block, n, feed_device))
        for n in sorted(feed_names, key=str)
    )
    fetch_vars = [_program_var(block, n, "fetch") for n in fetch_names]
    infos = [_op_info(op, block, place) for op in framing.ops]
    flow = _value_flow(block, infos, feeds, fetch_vars, framing.feeds)
    liveness = _liveness(block, infos, slots, fetch_names)

    def compile_block(sub: Block, feeds: list[str], device: str, fetches: Sequence[str] = ()) -> Any:
        return compile_plan(
            program,
            frozenset(feeds),
            tuple(fetches),
            place,
            block=sub,
            feed_device=device,
            check_nan_inf=check_nan_inf,
        )

    steps = _make_steps(infos, slots, flow.may_lod, liveness, compile_block, check_nan_inf)
    required, views = _required(infos), _views(infos)
    read = {n: k for k, n in enumerate(flow.external)}  # the scope input of each variable read from the scope
    schedule = None
    if scheduler == "dataflow" and any(s.stream != steps[0].stream for s in steps):
        schedule = _schedule(block, framing.ops, infos, steps, slots, num_threads)
    else:  # in program order: an op on an asynchronous (CUDA) stream is done before the next one starts
        steps = tuple(_synchronous(s) for s in steps)
    return Plan(
        num_slots=len(slots),
        steps=steps,
        feeds=feeds,
        scope_inputs=tuple(
            ScopeInput(slots[n], n, block.find_var_recursive(n).persistable, reader, _home(block, n), n in required)
            for n, reader in flow.external.items()
        ),
        fetches=tuple(Fetch(slots[v.name], v.name, v.persistable, flow.located[v.name]) for v in fetch_vars),
        writebacks=tuple(
            Writeback(slots[n], n, flow.located[n], n in views, read.get(n, -1))
            for n in sorted(liveness.persistable_out)
        ),
        schedule=schedule,
        copies_from=_copies_from(infos, slots),
        run_slot=slots.get(RUN_SLOT),
        channels=tuple(
            i
            for n, i in slots.items()
            if n not in (RUN_SLOT, UNBOUND_SLOT) and block.find_var_recursive(n).kind in _CHANNELS
        ),
    )


def _views(infos: list[_OpInfo]) -> set[str]:
    """The variables whose last writer makes them views of memory it owns (its schema's ``views`` slots): the
    write-back binds them in the scope."""
    views: set[str] = set()
    for info in infos:
        for slot, names in info.outputs:
            for name in _bound(names):
                if slot.name in info.schema.views:
                    views.add(name)
                else:
                    views.discard(name)
    return views


def _required(infos: list[_OpInfo]) -> set[str]:
    """The variables some op reads through a slot that is not optional before any op writes them."""
    required: set[str] = set()
    written: set[str] = set()
    for info in infos:
        required.update(n for slot, names in info.inputs if not slot.optional for n in names if n not in written)
        written.update(info.writes)
    return required


class _Flow(NamedTuple):
    external: dict[str, str]  # the values from outside the plan (the scope): name -> text of its first reader
    may_lod: set[str]  # the variables whose values may be LoDTensors
    located: dict[str, str]  # the device of every value once the plan ran


def _value_flow(
    block: Block, infos: list[_OpInfo], feeds: tuple[FeedSpec, ...], fetch_vars: list[Variable], feed_ops: list[str]
) -> _Flow:
    """Forward over the ops: which values come from outside the plan (an error for one that must be fed,
    ``feed_ops`` being the targets of the block's feed ops), which may hold a LoDTensor, and where each is."""
    defined = {f.name for f in feeds}
    external: dict[str, str] = {}
    may_lod = {f.name for f in feeds if f.lod_level}
    for info in infos:
        for n in info.reads:
            if n not in defined and n not in external:
                external[n] = info.text
                if block.find_var_recursive(n).lod_level:
                    may_lod.add(n)
        for slot, names in info.outputs:
            if slot.lod or any(n in may_lod for n in _lod_sources(info, slot.name)):
                may_lod.update(_bound(names))
            defined.update(_bound(names))
    for var in fetch_vars:
        if var.name not in defined:
            external.setdefault(var.name, f"fetch {var.name!r}")
    for name, reader in external.items():
        var = block.find_var_recursive(name)
        if var.need_check_feed or name in feed_ops:
            raise BlockirError(f"missing feed {name!r} (declared {_declared(var)}), read by: {reader}")
    return _Flow(external, may_lod, _locate(block, infos, feeds, external))


def _fed_on(block: Block, name: str, feed_device: str) -> str:
    """Where a fed value is: on its variable's GPU when the variable lives on one (the executor placed it
    there for a value fed on it), else on ``feed_device``."""
    device = block.find_var_recursive(name).device
    return checked_device(device, f"feed {name!r}") if device and device_kind(device) == "cuda" else feed_device


def _home(block: Block, name: str) -> str:
    """Where a value from outside the plan is: the variable's device, else the host."""
    device = block.find_var_recursive(name).device
    return checked_device(device, f"variable {name!r}") if device else HOST


def _locate(
    block: Block, infos: list[_OpInfo], feeds: tuple[FeedSpec, ...], external: dict[str, str]
) -> dict[str, str]:
    """The device of every value after the plan ran; an error naming the op that reads a value from another device.

    Feeds are where their specs say, values from the scope where their variable lives, an op's outputs on its
    device; only copies read across devices.
    """
    located = {f.name: f.device for f in feeds}
    located.update((n, _home(block, n)) for n in external)
    for info in infos:
        reads, writes = value_devices(info.op, info.device)
        if info.lowering is not Lowering.COPY:
            for n, there in reads.items():
                if located[n] != there:
                    where = "" if there == info.device else f" as its input on {there}"
                    raise BlockirError(
                        f"op runs on {info.device} but reads {n!r}{where}, which is on {located[n]} "
                        f"(insert a memcpy: the insert-copies pass does): {info.text}"
                    )
        located.update(writes)
    return located


class _Liveness(NamedTuple):
    wants: list[tuple[bool, ...]]  # per op, per output slot: whether anything reads what it binds
    frees: list[tuple[int, ...]]  # per op: the value slots dead after it
    persistable_out: set[str]  # the persistable variables the ops write, written back to the scope


def _viewed(block: Block, infos: list[_OpInfo]) -> set[str]:
    """The values that persistables view: the other outputs of an op that makes persistables views of them (its
    schema's ``views`` slots; coalesce_tensor's FusedOutput). They live as long as the persistables: an op
    updating one in place updates them."""
    viewed: set[str] = set()
    for info in infos:
        views = [n for slot, names in info.outputs if slot.name in info.schema.views for n in _bound(names)]
        if any(block.find_var_recursive(n).persistable for n in views):
            viewed.update(
                n for slot, names in info.outputs if slot.name not in info.schema.views for n in _bound(names)
            )
    return viewed


def _liveness(block: Block, infos: list[_OpInfo], slots: _Slots, fetch_names: tuple[str, ...]) -> _Liveness:
    """Backward over the ops from the fetches, the persistables written and the values persistables view: which
    outputs anybody reads, and what dies after each op."""
    persistable_out = {n for info in infos for n in info.writes if block.find_var_recursive(n).persistable}
    viewed = _viewed(block, infos)
    live = {slots[n] for n in (*fetch_names, *persistable_out, *viewed)}  # live after the op at hand
    frees: list[tuple[int, ...]] = []
    wants: list[tuple[bool, ...]] = []
    for info in reversed(infos):
        outs = [[slots[n] for n in _bound(names)] for _, names in info.outputs]
        written = {i for o in outs for i in o}
        read = {slots[n] for n in info.reads}
        wants.append(tuple(any(i in live for i in o) for o in outs))
        frees.append(tuple(sorted((read | written) - live)))
        live -= written  # in place: a copy of what is live, per op, costs the number of live values
        live |= read
    frees.reverse()
    wants.reverse()
    return _Liveness(wants, frees, persistable_out)


def _schedule(
    block: Block,
    ops: list[Operator],
    infos: list[_OpInfo],
    steps: tuple[Step, ...],
    slots: _Slots,
    num_threads: int | None,
) -> Schedule:
    """The dataflow schedule of the steps (``ops``: the block's ops that are steps, in order)."""
    index = {id(op): k for k, op in enumerate(ops)}
    graph: nx.DiGraph[int] = nx.DiGraph()
    graph.add_nodes_from(range(len(ops)))
    for i, j in dependency_graph(block).edges:  # feed and fetch ops are not steps: the run starts and ends there
        a, b = index.get(id(block.ops[i])), index.get(id(block.ops[j]))
        if a is not None and b is not None:
            graph.add_edge(a, b)
    return compile_schedule(
        steps,
        graph,
        _reads(infos, slots),
        _writes(infos, slots),
        num_threads,
        any(info.lowering is Lowering.CONTROL for info in infos),
    )


def _synchronous(step: Step) -> Step:
    """``step`` itself on a CPU stream; on an asynchronous one, launched there and waited for."""
    device, _, name = step.stream.rpartition("/")
    stream = get_device(device).stream(name)
    if not stream.is_async:
        return step
    kernel = step.kernel

    def launch_and_wait(ctx: KernelContext, *args: Any, **kwargs: Any) -> Any:
        result = stream.launch(kernel, ctx, *args, **kwargs)
        stream.synchronize()
        return result

    return step._replace(kernel=launch_and_wait)


def _reads(infos: list[_OpInfo], slots: _Slots) -> list[set[int]]:
    return [{slots[n] for n in info.reads} for info in infos]


def _writes(infos: list[_OpInfo], slots: _Slots) -> list[set[int]]:
    return [{slots[n] for n in info.writes} for info in infos]


def _copies_from(infos: list[_OpInfo], slots: _Slots) -> tuple[int | None, ...]:
    """Per step: for a copy, the step that wrote the value it copies (None: from outside the plan)."""
    last_writer: dict[int, int] = {}
    result: list[int | None] = []
    for j, (read, written) in enumerate(zip(_reads(infos, slots), _writes(infos, slots))):
        copy = infos[j].lowering is Lowering.COPY
        result.append(last_writer.get(min(read, default=-1)) if copy else None)
        last_writer.update(dict.fromkeys(written, j))
    return tuple(result)


# -- compiling: the steps -------------------------------------------------------------------


@functools.cache
def _takes_reuse(kernel: Callable[..., Any]) -> bool:
    try:
        return "reuse" in inspect.signature(kernel).parameters
    except (TypeError, ValueError):  # a callable without a signature (some builtins)
        return False


def _reuse_candidates(
    info: _OpInfo, slots: _Slots, may_lod: set[str], made: set[int], free: tuple[int, ...]
) -> tuple[tuple[int, int], ...]:
    """(argument position, slot) of the inputs this op's kernel may overwrite: values made earlier in the run
    that die here, read once by the op and not written by it, never LoD-carrying; none unless the kernel
    takes ``reuse``."""
    if info.schema.kernel is None or not _takes_reuse(info.schema.kernel):
        return ()
    read = info.reads
    written = {n for _, names in info.outputs for n in names}
    return tuple(
        (k, slots[names[0]])
        for k, (slot, names) in enumerate(info.inputs)
        if not slot.duplicable
        and _bound(names)
        and read.count(names[0]) == 1
        and names[0] not in written
        and names[0] not in may_lod
        and slots[names[0]] in made
        and slots[names[0]] in free
    )


def _make_steps(
    infos: list[_OpInfo],
    slots: _Slots,
    may_lod: set[str],
    liveness: _Liveness,
    compile_block: CompileBlock,
    check_nan_inf: bool,
) -> tuple[Step, ...]:
    """One step per op, in program order; their kernels share one set of scratch buffers."""
    steps = []
    made: set[int] = set()  # slots some earlier step wrote
    scratch = Scratch()
    for info, wants, free in zip(infos, liveness.wants, liveness.frees):
        reuse = () if check_nan_inf else _reuse_candidates(info, slots, may_lod, made, free)
        steps.append(_make_step(info, slots, may_lod, wants, free, reuse, compile_block, check_nan_inf, scratch))
        made.update(slots[n] for n in info.writes)
    return tuple(steps)


def _make_step(
    info: _OpInfo,
    slots: _Slots,
    may_lod: set[str],
    wants: tuple[bool, ...],
    free: tuple[int, ...],
    reuse: tuple[tuple[int, int], ...],
    compile_block: CompileBlock,
    check_nan_inf: bool,
    scratch: Scratch,
) -> Step:
    def numbered(names: Sequence[str]) -> list[int | None]:
        return [None if n == EMPTY_VAR else slots[n] for n in names]

    unwrap = {slots[n] for slot, names in info.inputs if not slot.lod for n in _bound(names) if n in may_lod}
    # An unbound slot reads the None of UNBOUND_SLOT: the gather stays one itemgetter, as for bound slots.
    gather = _make_gather(
        [
            (slot, numbered(names) if slot.duplicable or _bound(names) else [slots[UNBOUND_SLOT]])
            for slot, names in info.inputs
        ],
        unwrap,
    )
    lod_src = {}
    for slot, _ in info.outputs:
        src = [n for n in _lod_sources(info, slot.name) if n in may_lod]
        if src:
            lod_src[slot.name] = slots[src[0]]
    scatter, store = _make_scatter(
        [(slot, numbered(names), want, lod_src.get(slot.name)) for (slot, names), want in zip(info.outputs, wants)]
    )
    if info.lowering is Lowering.CONTROL:
        control = control_kernel(info.op)
        kernel = control.make(info.op, info.device, compile_block)
        if control.takes_run:
            gather = _with_run(slots[RUN_SLOT], gather)
    else:
        kernel = cast("Callable[..., Any]", info.schema.kernel)  # _op_info refused an op without one
    if check_nan_inf and info.lowering is Lowering.KERNEL:  # a copy makes no value its source did not hold
        kernel = checked(
            kernel,
            info.text,
            [(s.name, s.duplicable, list(names)) for s, names in info.inputs],
            [(s.name, s.duplicable, list(names) if want else []) for (s, names), want in zip(info.outputs, wants)],
        )
    return Step(
        kernel=kernel,
        ctx=KernelContext(array_module(info.device), _kernel_attrs(info), wants, info.text, scratch),
        gather=gather,
        scatter=scatter,
        free=free,
        reuse=reuse,
        inputs=tuple((s.name, n, slots[n]) for s, names in info.inputs for n in _bound(names)),
        stream=info.stream,
        op_id=info.op.id,
        store=store,
    )


def _with_run(run_slot: int, gather: Gather) -> Gather:
    """``gather`` with the run context (in slot ``run_slot``) before the op's inputs."""
    return lambda values: (values[run_slot], *gather(values))


# -- running ---------------------------------------------------------------------------


class ScopeInput(NamedTuple):
    """A value the plan reads from the scope."""

    slot: int
    name: str
    persistable: bool
    reader: str  # the text of the first op reading it, for errors
    device: str  # where the plan takes it
    required: bool  # read through a slot that is not optional: a missing value is an error (else None)


class Fetch(NamedTuple):
    """A fetched value."""

    slot: int
    name: str
    persistable: bool
    device: str  # where it is when the run ends


class Writeback(NamedTuple):
    """A persistable variable the plan writes, stored in the scope after the run (bound there as a view, with
    ``bind``: :meth:`blockir.runtime.scope.Scope.bind`)."""

    slot: int
    name: str
    device: str
    bind: bool = False
    read: int = -1  # the index of the variable's scope input when the plan also reads it, else -1


@dataclass(frozen=True)
class Plan:
    """A compiled block: run it with :meth:`run`. Holds no reference to the program."""

    num_slots: int
    steps: tuple[Step, ...]
    feeds: tuple[FeedSpec, ...]
    scope_inputs: tuple[ScopeInput, ...]
    fetches: tuple[Fetch, ...]
    writebacks: tuple[Writeback, ...]
    schedule: Schedule | None = None  # dataflow over several streams; None: program order on the calling thread
    copies_from: tuple[int | None, ...] = ()  # per step: for a copy, the step that wrote what it copies
    run_slot: int | None = None  # the slot of the run context, for plans whose control ops take it
    channels: tuple[int, ...] = ()  # the slots of channel variables, closed when a run fails

    @functools.cached_property
    def _sequential(self) -> Sequential:
        """The steps as straight-line code (made at the first run that needs it)."""
        return compile_steps(self.steps)

    @functools.cached_property
    def _kernels(self) -> tuple[Any, ...]:
        return tuple(step.kernel for step in self.steps)

    def run(
        self,
        feed: Mapping[str, Any],
        scope: Scope,
        return_numpy: bool = True,
        pool: WorkerPool | None = None,
        tracer: Any = None,
        as_is: bool = False,
    ) -> list[Any]:
        """Run once: feeds checked, scope values read, steps run (by the schedule, on ``pool``'s workers,
        when the plan has one and a pool is given), persistables written back. ``tracer``: see
        :class:`blockir.runtime.trace.Tracer`. ``as_is``: the fetched values as the run left them, on their
        devices, not copied (what a control op's sub-block plan hands back to it), and a feed of None is
        no value (read only through optional slots: a gradient block's ``select_output`` given none)."""
        values: list[Any] = [None] * self.num_slots
        for spec in self.feeds:
            value = feed[spec.name]
            values[spec.slot] = None if value is None and as_is else spec.check(value)
        holders: list[ScopeVariable | None] = []  # per scope input
        for slot, name, persistable, reader, device, required in self.scope_inputs:
            holder = scope.find_var(name)
            holders.append(holder)
            if holder is None or holder.value is None:
                if not required:  # only optional slots read it, e.g. a broadcast's Current before the first copy
                    continue
                raise _missing_value(name, persistable, reader)
            if holder.device != device:  # e.g. loaded onto the host, needed on cpu:1: move it
                holder.set(transfer(holder.value, device), device)
            values[slot] = holder.value
        run = None
        if self.run_slot is not None:
            run = values[self.run_slot] = RunContext(scope, lambda: close_channels(values, self.channels))
        try:
            steps = self.steps if tracer is None else tracer.timed(self.steps)
            if self.schedule is None or pool is None:
                self._sequential(values, self._kernels if tracer is None else tuple(s.kernel for s in steps))
            else:
                execute(self.schedule, steps, values, pool)
        except BaseException:
            close_channels(values, self.channels)  # so that the go blocks and other programs stop
            if run is not None:
                run.join()
            raise
        if run is not None:
            error = run.join()
            if error is not None:
                close_channels(values, self.channels)
                raise error
        for slot, name, device, bind, read in self.writebacks:
            # Updated in place (an optimizer's parameter): the scope holds that very value there already
            # (storing it unbound into a bound view would copy the view into itself).
            holder = holders[read] if read >= 0 else None
            if holder is not None and holder.value is values[slot] and holder.device == device:
                note_written(values[slot])  # for kernels that remember what they computed from it (conv_bn_fold)
                if holder.bound or not bind:
                    continue
            if bind:
                scope.bind(name, values[slot], device)
            else:
                scope.set(name, values[slot], device)
        if as_is:
            return [values[fetch.slot] for fetch in self.fetches]
        return [
            _fetched(values[slot], name, persistable, device, return_numpy)
            for slot, name, persistable, device in self.fetches
        ]


def _missing_value(name: str, persistable: bool, reader: str) -> BlockirError:
    if persistable:
        return BlockirError(
            f"persistable variable {name!r} has no value in the scope (run the startup "
            f"program first, or load it); read by: {reader}"
        )
    return BlockirError(f"variable {name!r} is neither fed, computed before use, nor in the scope; read by: {reader}")


def _copy(array: Any) -> Any:
    return array.copy()


def _fetched(value: Any, name: str, persistable: bool, device: str, return_numpy: bool) -> Any:
    if value is None:
        raise BlockirError(f"fetch {name!r}: the run produced no value for it")
    if device != HOST:
        value = transfer(value, HOST)
    elif persistable or (isinstance(value, np.ndarray) and value.base is not None):
        value = map_arrays(value, _copy)  # the scope keeps the variable (or what it views) and updates it in place
    if not return_numpy:
        return value
    if isinstance(value, TensorArray):  # as Paddle fetches a LoDTensorArray: a list of arrays
        return [None if v is None else np.asarray(_data(v)) for v in value]
    if isinstance(value, LoDTensor):
        return np.asarray(value.data)
    if isinstance(value, SelectedRows):
        return value.to_dense()
    return np.asarray(value)
