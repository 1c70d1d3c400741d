"""Op schemas and the registry that holds them.

A schema is declarative: input/output slots, typed attributes with defaults, a
shape/dtype inference function, a gradient maker, a kernel and the device kinds
the kernel supports. The IR consults the registry to type attributes, infer
shapes and verify programs; ``blockir.ops`` fills it.

Kernel calling convention (fixed once per op when a plan is compiled)::

    kernel(ctx: KernelContext, *inputs) -> output | tuple[output, ...]

``inputs`` follow the schema's input slots in order: one value per slot, a list
for a duplicable slot, ``None`` for an absent optional slot. A kernel returns
one value when the schema has one output slot, else a tuple in output-slot
order (a list for a duplicable slot; any value for a slot ``ctx.wants`` says
nobody reads). Inputs of slots declared with ``lod=True`` arrive as given
(``LoDTensor`` included); all others arrive as plain arrays (the LoD dropped),
and outputs named in ``share_lod`` get the LoD of the named input back.

How an op becomes a step of a compiled plan is the schema's ``lowering``
(:class:`Lowering`), so the plan compiler never asks for an op type by name.

Gradient maker convention::

    grad(g: GradContext) -> list[OpSpec]

where ``g`` names the forward op's inputs/outputs and their gradient variables
(``X@GRAD``); a gradient name is ``EMPTY_VAR`` when no gradient is needed for it.
"""

from __future__ import annotations

import difflib
import enum
import math
import threading
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, NoReturn, Protocol, cast

import numpy as np

from blockir.errors import OpNotFoundError, ShapeError
from blockir.ir.attrs import AttrType
from blockir.ir.devices import checked_device
from blockir.ir.dtypes import VarKind

if TYPE_CHECKING:
    from blockir.ir.core import Block, Operator, Variable

REQUIRED: Any = object()
GRAD_SUFFIX = "@GRAD"
EMPTY_VAR = "@EMPTY@"


def grad_name(name: str) -> str:
    return name + GRAD_SUFFIX


@dataclass(frozen=True)
class Slot:
    name: str
    duplicable: bool = False
    optional: bool = False
    lod: bool = False  # the kernel receives LoDTensor values of this slot as they are
    no_grad: bool = False  # never differentiated through (ids, labels, indices)


@dataclass(frozen=True)
class AttrDef:
    name: str
    type: AttrType
    default: Any = REQUIRED


@dataclass(frozen=True)
class OpSpec:
    """An op to create: what gradient makers return."""

    type: str
    inputs: dict[str, list[str]]
    outputs: dict[str, list[str]]
    attrs: dict[str, Any] = field(default_factory=dict)


class Scratch:
    """Host buffers that kernels reuse from one call to the next for temporaries that never leave a call (im2col's
    columns): per thread and index one buffer, grown to the largest size asked for, so that a temporary of tens of
    megabytes is allocated, and its pages faulted in, once rather than on every step. The plan compiler gives the
    kernels of one plan one ``Scratch`` (they run one at a time on a thread). A kernel must not return a scratch
    buffer or a view of one, nor use one index twice at once. Device arrays are made fresh: a CUDA kernel may still
    be reading its buffer when the call returns, and CuPy's memory pool already reuses device memory."""

    def __init__(self) -> None:
        self._local = threading.local()

    def empty(self, xp: Any, index: int, shape: tuple[int, ...], dtype: Any) -> Any:
        """An uninitialised array of ``shape`` and ``dtype``: buffer ``index`` of this thread on the host."""
        if xp is not np:
            return xp.empty(shape, dtype)
        dtype = np.dtype(dtype)
        nbytes = math.prod(shape) * dtype.itemsize  # numpy's prod takes 5 us a call, a tenth of a small gemm
        buffers: dict[int, np.ndarray] = self._local.__dict__.setdefault("buffers", {})
        buffer = buffers.get(index)
        if buffer is None or buffer.nbytes < nbytes:
            buffer = buffers[index] = np.empty(nbytes, np.uint8)
        return buffer[:nbytes].view(dtype).reshape(shape)


@dataclass
class KernelContext:
    """What a kernel gets besides its inputs; built once per op when a plan is compiled."""

    xp: Any  # the array module: numpy or cupy
    attrs: dict[str, Any]  # every schema attribute, defaults filled in
    wants: tuple[bool, ...]  # per output slot: does the op bind it?
    op_text: str = ""
    scratch: Scratch = field(default_factory=Scratch, repr=False, compare=False)  # shared by a plan's kernels


class Lowering(enum.Enum):
    """How the plan compiler lowers an op of a schema (``OpSchema.lowering``)."""

    KERNEL = "kernel"
    """A step calling the schema's kernel on the op's device."""
    FEED = "feed"
    """No step: the op's ``Out`` is a feed target of the plan, column ``col`` of the feed list."""
    FETCH = "fetch"
    """No step: the op's ``X`` is a default fetch target of the plan, column ``col`` of the fetch list."""
    COPY = "copy"
    """A step calling the kernel to copy ``X`` to ``Out`` on the device its ``device_attr`` names: the only
    op reading a value on another device; the NaN/inf check skips it (it makes no new value) and traces
    draw it as a flow from the step that wrote ``X``."""
    CONTROL = "control"
    """A step whose kernel the runtime makes for each op when compiling (:mod:`blockir.runtime.control`):
    channels, and ``go`` and ``select``, which run sub-blocks; the NaN/inf check skips it."""
    COLLECTIVE = "collective"
    """A step over several devices: ``X[i]`` and ``Out[i]`` are on device ``i`` of the op's ``devices``
    attribute (:func:`collective_devices`); the op runs on the first. Like a copy it reads across devices;
    a CUDA stream launches its kernel as one collective over the devices' streams
    (:mod:`blockir.runtime.cuda`); the NaN/inf check skips it."""


@dataclass
class OpSchema:
    type: str
    inputs: tuple[Slot, ...] = ()
    outputs: tuple[Slot, ...] = ()
    attrs: tuple[AttrDef, ...] = ()
    infer: Callable[[InferContext], None] | None = None
    grad: Callable[[GradContext], list[OpSpec]] | None = None
    kernel: Callable[..., Any] | None = None
    devices: frozenset[str] = frozenset({"cpu", "cuda"})
    host: bool = False  # always runs on the host (feed/fetch, data reading, save/load), wherever it is put
    share_lod: tuple[tuple[str, str], ...] = ()  # (input slot, output slot)
    side_effects: bool = False  # kept by pruning even when nothing reads its outputs
    random: bool = False  # carries a ``seed`` attribute derived from the program seed
    lowering: Lowering = Lowering.KERNEL  # how the plan compiler turns the op into a step
    device_attr: str = ""  # the attribute naming the device the op runs on (a copy's destination), if any
    # Output slots whose values are views of memory the op's other outputs own (coalesce_tensor's Output, of
    # FusedOutput): a persistable such an op writes last is bound in the scope as a view (Scope.bind), so that
    # setting or loading it copies into that memory.
    views: tuple[str, ...] = ()
    # Output slots whose variables the op updates in place (write_to_array's Out, a tensor array): the op reads
    # their current values too (:func:`blockir.ir.core.op_reads_writes`), and the kernel gets them after its
    # inputs, one argument per slot, None where the variable holds no value yet.
    updates: tuple[str, ...] = ()
    doc: str = ""

    def attr_def(self, name: str) -> AttrDef | None:
        for a in self.attrs:
            if a.name == name:
                return a
        return None

    def input_slot(self, name: str) -> Slot | None:
        return next((s for s in self.inputs if s.name == name), None)

    def output_slot(self, name: str) -> Slot | None:
        return next((s for s in self.outputs if s.name == name), None)


_REGISTRY: dict[str, OpSchema] = {}


def register(schema: OpSchema) -> OpSchema:
    if schema.type in _REGISTRY and _REGISTRY[schema.type] is not schema:
        raise ValueError(f"op {schema.type!r} registered twice")
    _REGISTRY[schema.type] = schema
    return schema


def unregister(op_type: str) -> OpSchema:
    """Remove ``op_type``'s schema from the registry and return it (a test's fixture cleaning up); an error
    suggesting near names when there is none."""
    schema = lookup(op_type)
    del _REGISTRY[op_type]
    return schema


def lookup(op_type: str) -> OpSchema:
    """The schema of ``op_type``; an error suggesting near names when there is none."""
    try:
        return _REGISTRY[op_type]
    except KeyError:
        close = difflib.get_close_matches(op_type, _REGISTRY, n=3)
        hint = f" (did you mean {', '.join(close)}?)" if close else ""
        raise OpNotFoundError(f"unknown op type {op_type!r}{hint}") from None


def find(op_type: str) -> OpSchema | None:
    return _REGISTRY.get(op_type)


def lowering_of(op_type: str) -> Lowering | None:
    """How an op of ``op_type`` lowers into a plan (None when the type is not registered)."""
    schema = _REGISTRY.get(op_type)
    return None if schema is None else schema.lowering


def collective_devices(op: Operator) -> list[str] | None:
    """The device of each ``X[i]`` / ``Out[i]`` of an op lowering as :attr:`Lowering.COLLECTIVE` (its ``devices``
    attribute, spelled canonically); None for any other op."""
    if lowering_of(op.type) is not Lowering.COLLECTIVE:
        return None
    return [checked_device(d, op) for d in op.attrs.get("devices", ())]


def registered() -> dict[str, OpSchema]:
    return dict(_REGISTRY)


class Tensor(Protocol):
    """An input tensor as shape inference reads it (:meth:`InferContext.tensor`): its shape and dtype known."""

    @property
    def name(self) -> str: ...
    @property
    def shape(self) -> tuple[int, ...]: ...
    @property
    def dtype(self) -> str: ...
    @property
    def lod_level(self) -> int: ...
    @property
    def kind(self) -> VarKind: ...


class InferContext:
    """Shape/dtype inference view of one op: read input variables, set output variables."""

    def __init__(self, op: Operator, block: Block) -> None:
        self.op = op
        self.block = block

    def inputs(self, slot: str) -> list[Variable]:
        return [self.block.find_var_recursive(n) for n in self.op.inputs.get(slot, [])]

    def input(self, slot: str) -> Variable:
        """The (first) variable of input ``slot``; the op's ShapeError when the slot is empty."""
        names = self.op.inputs.get(slot, ())
        if not names:
            self.fail(f"input {slot} is missing")
        return self.block.find_var_recursive(names[0])

    def tensor(self, slot: str) -> Tensor:
        """The (first) variable of input ``slot``, a tensor whose shape and dtype are known; the op's ShapeError
        when it is not one."""
        return self._tensor(slot, self.input(slot))

    def tensors(self, slot: str) -> list[Tensor]:
        """Every variable of input ``slot``, each a tensor whose shape and dtype are known (:meth:`tensor`)."""
        return [self._tensor(slot, var) for var in self.inputs(slot)]

    def _tensor(self, slot: str, var: Variable) -> Tensor:
        if var.shape is None or var.dtype is None:
            self.fail(f"input {slot} {var.name!r} must be a tensor, not {var.kind.text}")
        return cast("Tensor", var)

    def has_input(self, slot: str) -> bool:
        return bool(self.op.inputs.get(slot))

    def outputs(self, slot: str) -> list[Variable]:
        return [self.block.find_var_recursive(n) for n in self.op.outputs.get(slot, [])]

    def has_output(self, slot: str) -> bool:
        return bool(self.op.outputs.get(slot))

    def attr(self, name: str) -> Any:
        return self.op.attr(name)

    def set_output(
        self, slot: str, shape: tuple[int, ...] | list[int], dtype: str, lod_level: int | None = None, index: int = 0
    ) -> None:
        names = self.op.outputs.get(slot, ())
        if index >= len(names):
            return
        var = self.block.find_var_recursive(names[index])
        var.shape = tuple(int(d) for d in shape)
        var.dtype = dtype
        if lod_level is not None:
            var.lod_level = lod_level

    def fail(self, message: str) -> NoReturn:
        raise ShapeError(f"{self.op.type}: {message}\n  in: {self.op}")


class GradContext:
    """What a gradient maker sees of the forward op."""

    def __init__(self, op: Operator, grad_of: Callable[[str], str]) -> None:
        self.op = op
        self._grad_of = grad_of  # forward var name -> its grad var name (or EMPTY_VAR)

    @property
    def attrs(self) -> dict[str, Any]:
        return dict(self.op.attrs)

    def input(self, slot: str) -> list[str]:
        return list(self.op.inputs.get(slot, []))

    def output(self, slot: str) -> list[str]:
        return list(self.op.outputs.get(slot, []))

    def input_grad(self, slot: str) -> list[str]:
        return [self._grad_of(n) for n in self.op.inputs.get(slot, [])]

    def output_grad(self, slot: str) -> list[str]:
        return [self._grad_of(n) for n in self.op.outputs.get(slot, [])]


class OpRole:
    """Values of the ``op_role`` attribute (Paddle's numbering); a bit set."""

    FORWARD = 0x0000
    BACKWARD = 0x0001
    OPTIMIZE = 0x0002
    LR_SCHED = 0x0010
    LOSS = 0x0100


# Attributes any op may carry, whatever its schema (name -> type).
COMMON_ATTRS: dict[str, AttrType] = {
    "op_device": AttrType.STRING,  # placement: "cpu", "cpu:1", "cuda:0"
    "op_role": AttrType.INT,  # OpRole bits
    "op_role_var": AttrType.STRINGS,  # (param, grad) pairs an optimizer/backward op concerns
    "op_namescope": AttrType.STRING,  # the DSL name_scope the op was built in
    "op_pass": AttrType.STRING,  # lineage: the pass that created the op
    "op_origin": AttrType.STRINGS,  # lineage: the ops it was made from, as origin_key() strings
    "op_stream": AttrType.STRING,  # the stream the op runs on: DEVICE/compute<k> or DEVICE/copy
    "op_placement": AttrType.STRING,  # lineage: why the auto-place pass put the op on its device
}
