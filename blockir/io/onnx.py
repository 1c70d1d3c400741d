"""ONNX models in and out: ``.onnx`` files imported as blockir programs, and programs exported as ONNX.

Import (:func:`read_model`, used by ``load_inference_model("model.onnx", exe)`` and the ``blockir`` command)
maps every node through the table of :mod:`blockir.io.onnx_ops` (one row per ONNX op and opset range) onto
blockir ops, under these rules:

- the default domain at opsets 1 to the newest the installed ``onnx`` knows (each row of the table says from
  which opset it maps its op), and the ops of other domains the table has a row for (``ai.onnx.preview``'s
  FlexAttention, at that domain's version); other domains, and ops, types or
  attributes the table refuses, are listed all at once, each naming the node (its name and op type);
- ONNX names are arbitrary strings: each becomes a valid blockir name (characters outside
  ``[A-Za-z0-9_./:-]`` replaced by ``_``, a suffix where two would meet), and :class:`OnnxModel` keeps the
  mapping both ways, so feeds and fetches can be named as the file names them; an empty input name is an
  absent optional input;
- initializers become persistable variables, graph inputs feeds (dynamic dims -1), graph outputs fetches;
- constant folding: a node whose inputs are all constants (initializers, ``Constant`` nodes, values folded
  before it) is run at import and its outputs become constants, as onnxruntime does when it builds a session;
  only the constants the remaining ops read become parameters;
- a node's result is written by the op that computes it, not copied into the node's output by an ``assign``
  (which would also hide a conv2d's batch_norm from the inference passes that fold it);
- a Mul or an Add of per-channel constants right after an inference BatchNormalization (whose output nothing
  else reads), or after such a Mul or Add already folded, folds into its ``batch_norm``'s Scale and Bias, as
  onnxruntime folds them when it builds a session (``_into_batch_norm`` in :mod:`blockir.io.onnx_ops`);
- every op made records its lineage (``op_pass`` ``onnx-import``, ``op_origin`` ``OpType:node name``), which
  ``blockir viz`` shows;
- each output gets the dtype ONNX's shape inference gives it (a cast is added where a blockir op computes
  another, such as ``shape``'s int32).

Export (:func:`write_model`, ``save_inference_model(..., format="onnx")``) is in :mod:`blockir.io.onnx_export`.
"""

from __future__ import annotations

import contextlib
import os
import re
from collections import Counter
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from blockir.errors import BlockirError
from blockir.ir import Block, Operator, Program, Variable
from blockir.ir.core import block_reads_writes
from blockir.ir.dtypes import DTYPE_TO_PROTO, VarKind
from blockir.ir.proto_io import open_regular, os_errors, read_limited
from blockir.ir.schema import KernelContext, Lowering, lookup
from blockir.passes.feed_fetch import FeedFetch

__all__ = [
    "IMPORT_PASS",
    "MAX_MODEL_BYTES",
    "MIN_OPSET",
    "ONNX_SUFFIX",
    "NeedsConstant",
    "Node",
    "OnnxModel",
    "Refused",
    "import_model",
    "onnx_module",
    "read_model",
]

ONNX_SUFFIX = ".onnx"
IMPORT_PASS = "onnx-import"  # the op_pass of every op the importer makes
MIN_OPSET = 1
MAX_MODEL_BYTES = 2 << 30  # protobuf's own limit on one message
_PLAIN = re.compile(r"[^A-Za-z0-9_./:-]")
_RESERVED = frozenset({"feed", "fetch"})

# ONNX TensorProto.DataType -> numpy name; the types blockir lacks are refused by their ONNX names.
ONNX_DTYPES: dict[int, str] = {
    1: "float32",
    2: "uint8",
    3: "int8",
    4: "uint16",
    5: "int16",
    6: "int32",
    7: "int64",
    9: "bool",
    10: "float16",
    11: "float64",
    12: "uint32",
    13: "uint64",
    14: "complex64",
    15: "complex128",
}
DTYPE_TO_ONNX: dict[str, int] = {v: k for k, v in ONNX_DTYPES.items()}


def onnx_module() -> Any:
    """The ``onnx`` package, or an error saying how to install it (the optional extra ``blockir[onnx]``)."""
    try:
        import onnx
    except ImportError:
        raise BlockirError(
            "reading and writing ONNX models needs the onnx package: pip install 'blockir[onnx]'"
        ) from None
    return onnx


class Refused(BlockirError):
    """A node the table cannot map (an op, attribute or type blockir lacks); the message says why."""


class NeedsConstant(Refused):
    """A node needs the value of an input that is computed at run time (a shape, axes, pads, ...).
    ``names`` are the ONNX names of those inputs."""

    def __init__(self, message: str, names: Sequence[str]) -> None:
        super().__init__(message)
        self.names = tuple(names)


def dtype_name(code: int, what: str) -> str:
    """The numpy name of ONNX element type ``code``, or a :class:`Refused` naming the ONNX type."""
    name = ONNX_DTYPES.get(code)
    if name is None:
        onnx = onnx_module()
        try:
            text = onnx.TensorProto.DataType.Name(code)
        except ValueError:
            text = str(code)
        raise Refused(f"{what} is of ONNX type {text}, which blockir lacks")
    return name


@dataclass
class OnnxModel:
    """An imported ONNX model: the program (framed by feed and fetch ops), the values of its persistable
    variables, and the mapping of ONNX names to blockir names of its inputs and outputs."""

    program: Program
    params: dict[str, np.ndarray]
    feeds: list[str]  # blockir names, in the graph's input order (initializers excluded)
    fetches: list[str]  # blockir names, in the graph's output order
    onnx_feeds: list[str]  # the same, as the file names them
    onnx_fetches: list[str]
    opset: int
    names: dict[str, str] = field(default_factory=dict)  # every ONNX value name -> blockir name
    where: str = "<model>"  # the file, in messages

    def feed_name(self, name: str) -> str:
        """The blockir name of feed ``name`` (given as the file names it, or as blockir does)."""
        if name in self.feeds:
            return name
        if name in self.onnx_feeds:
            return self.feeds[self.onnx_feeds.index(name)]
        raise BlockirError(
            f"{self.where}: {name!r} is not an input of the model (its inputs: {', '.join(self.onnx_feeds)})"
        )


class _Names:
    """ONNX names -> valid, distinct blockir names."""

    def __init__(self) -> None:
        self.of: dict[str, str] = {}
        self.taken: set[str] = set(_RESERVED)

    def fresh(self, base: str) -> str:
        plain = _PLAIN.sub("_", base) or "v"
        name, k = plain, 0
        while name in self.taken:
            k += 1
            name = f"{plain}_{k}"
        self.taken.add(name)
        return name

    def bind(self, onnx_name: str) -> str:
        self.of[onnx_name] = name = self.fresh(onnx_name)
        return name


def _attr_values(node: Any) -> dict[str, Any]:
    onnx = onnx_module()
    values = {}
    for a in node.attribute:
        if a.ref_attr_name:
            raise Refused(f"attribute {a.name!r} refers to a function attribute")
        values[a.name] = onnx.helper.get_attribute_value(a)
    return values


class Node:
    """One ONNX node as the converters of :mod:`blockir.io.onnx_ops` see it: its attributes, its inputs (as
    blockir variables, or as constant values when known), its outputs, and ways to append blockir ops."""

    def __init__(self, graph: _Graph, node: Any) -> None:
        self.graph, self.proto, self.opset = graph, node, graph.opset
        self.op_type: str = node.op_type
        self.attrs = _attr_values(node)
        self.inputs: list[str] = list(node.input)
        self.outputs: list[str] = list(node.output)

    # -- attributes and inputs --------------------------------------------------------------------
    def attr(self, name: str, default: Any = None) -> Any:
        value = self.attrs.get(name, default)
        return value.decode() if isinstance(value, bytes) else value

    def has(self, i: int) -> bool:
        return i < len(self.inputs) and self.inputs[i] != ""

    def const(self, i: int) -> np.ndarray | None:
        return self.graph.consts.get(self.inputs[i]) if self.has(i) else None

    def value(self, i: int, what: str) -> np.ndarray:
        """The constant value of input ``i`` (a shape, axes, ...): a :class:`NeedsConstant` if it is computed."""
        found = self.const(i)
        if found is None:
            raise NeedsConstant(
                f"its {what} (input {i}, {self.inputs[i]!r}) must be a constant (an initializer or computed from "
                "them), blockir's op takes it as an attribute",
                [self.inputs[i]],
            )
        return found

    def x(self, i: int) -> str:
        """The blockir variable holding input ``i`` (a constant becomes a persistable variable)."""
        return self.graph.var_of(self.inputs[i])

    def dtype(self, i: int) -> str:
        found = self.const(i)
        if found is not None:
            return found.dtype.name
        dtype = self.graph.find(self.x(i)).dtype
        return dtype or "float32"

    def shape(self, i: int) -> tuple[int, ...] | None:
        """Input ``i``'s shape as far as known (-1 for a dim known only at run time; None when the rank is)."""
        found = self.const(i)
        if found is not None:
            return tuple(found.shape)
        shape = self.graph.find(self.x(i)).shape
        return None if shape is None else tuple(shape)

    def rank(self, i: int) -> int:
        shape = self.shape(i)
        if shape is None:
            raise Refused(f"the rank of input {i} ({self.inputs[i]!r}) is unknown")
        return len(shape)

    def y(self, i: int = 0) -> str:
        """The blockir variable for output ``i``."""
        return self.graph.out_var(self.outputs[i])

    def wants(self, i: int) -> bool:
        return i < len(self.outputs) and self.outputs[i] != ""

    # -- making ops -------------------------------------------------------------------------------
    def tmp(self, hint: str = "") -> str:
        name = self.graph.names.fresh(f"{self.y_base()}.{hint or 'tmp'}")
        self.graph.block.create_var(name)
        return name

    def y_base(self) -> str:
        return next((o for o in self.outputs if o), self.proto.name or self.op_type)

    def constant(self, value: Any, dtype: str | None = None) -> str:
        """A new persistable variable holding ``value``."""
        array = np.asarray(value, dtype=dtype)
        name = self.graph.names.fresh(f"{self.y_base()}.const")
        self.graph.consts[name] = array
        self.graph.onnx_of_const[name] = name
        return self.graph.var_of(name)

    def emit(
        self,
        type: str,
        inputs: Mapping[str, Any],
        outputs: Mapping[str, Any],
        attrs: Mapping[str, Any] | None = None,
    ) -> Operator:
        """Append a blockir op (slot values: a name or a list of names), with this node as its lineage."""
        block = self.graph.block
        ins = {k: [v] if isinstance(v, str) else list(v) for k, v in inputs.items()}
        outs = {k: [v] if isinstance(v, str) else list(v) for k, v in outputs.items()}
        for names in outs.values():
            for name in names:
                if not self.graph.known(name):
                    block.create_var(name)
        op = block.append_op(type, ins, outs, dict(attrs or {}))
        op.set_attr("op_pass", IMPORT_PASS)
        op.set_attr("op_origin", [self.origin()])
        return op

    def origin(self) -> str:
        """This node as the lineage of the ops made for it (``op_origin``): ``OpType:node name``."""
        return f"{self.op_type}:{self.proto.name or self.y_base()}"

    def unary(self, type: str, x: str, attrs: Mapping[str, Any] | None = None, out: str | None = None) -> str:
        out = out or self.tmp(type)
        self.emit(type, {"X": x}, {"Out": out}, attrs)
        return out

    def binary(self, type: str, x: str, y: str, out: str | None = None, attrs: Mapping[str, Any] | None = None) -> str:
        out = out or self.tmp(type)
        self.emit(type, {"X": x, "Y": y}, {"Out": out}, {"axis": -1, **(attrs or {})})
        return out

    def cast(self, x: str, dtype: str, out: str | None = None) -> str:
        src = self.graph.find(x).dtype
        if src == dtype and out is None:
            return x
        out = out or self.tmp("cast")
        self.emit(
            "cast",
            {"X": x},
            {"Out": out},
            {"in_dtype": DTYPE_TO_PROTO[src or "float32"], "out_dtype": DTYPE_TO_PROTO[dtype]},
        )
        return out

    def refuse(self, reason: str) -> Refused:
        return Refused(reason)

    @contextlib.contextmanager
    def building(self, block: Block) -> Iterator[None]:
        """Ops made inside go to ``block`` (a sub-block the node made)."""
        outer, self.graph.block = self.graph.block, block
        try:
            yield
        finally:
            self.graph.block = outer

    def control(self, type: str, block: Block, inputs: Mapping[str, Any], attrs: Mapping[str, Any]) -> Operator:
        """Append the control-flow op ``type`` (``while``, ``conditional_block``) running ``block``: ``inputs``
        (its condition slot) and, as its inputs and outputs, the outer variables the block reads and writes."""
        reads, writes = block_reads_writes(block)
        scopes = self.graph.names.fresh(f"{self.y_base()}.scopes")
        self.graph.block.create_var(scopes, kind=VarKind.STEP_SCOPES)
        condition = {n for names in inputs.values() for n in ([names] if isinstance(names, str) else names)}
        slot_in, slot_scope = ("X", "StepScopes") if type == "while" else ("Input", "Scope")
        ins = {**inputs, slot_in: sorted((reads | writes if type == "while" else reads) - condition)}
        outs = {"Out": sorted(writes), slot_scope: scopes}
        return self.emit(type, ins, outs, {"sub_block": block.idx, **attrs})

    def sub_block(self) -> Block:
        """A new, empty sub-block of the block being built."""
        program = self.graph.block.program
        block = program.create_block(parent_idx=self.graph.block.idx)
        program.rollback()
        return block

    def subgraph(self, attr: str, bound: Sequence[str], block: Block | None = None) -> tuple[Block, list[str]]:
        """Import the graph attribute ``attr`` into ``block`` (by default a new sub-block of the block being
        built): its inputs are the blockir variables ``bound`` (in order), the values of the graphs around it
        it reads are seen as they are (a sub-block reads its parents' variables). Returns the block and the
        blockir variables of the subgraph's outputs."""
        body = self.attrs.get(attr)
        if body is None:
            raise Refused(f"attribute {attr!r} (a graph) is missing")
        if len(body.input) != len(bound):
            raise Refused(f"its {attr} takes {len(body.input)} inputs, the node gives it {len(bound)}")
        graph, outer = self.graph, self.graph.block
        block = block or self.sub_block()
        graph.block = block
        # the subgraph's own names shadow what the graphs around it, or a sibling subgraph, bound to the same names
        local = [
            *(i.name for i in body.input),
            *(t.name for t in body.initializer),
            *(o for p in body.node for o in p.output),
        ]
        shadowed = {k: graph.names.of.pop(k) for k in local if k in graph.names.of}
        shadowed_consts = {k: graph.consts.pop(k) for k in local if k in graph.consts}
        try:
            for info, name in zip(body.input, bound):
                graph.names.of[info.name] = name
            for t in body.initializer:
                graph.consts[t.name] = _tensor(t, f"initializer {t.name!r} of {attr}")
            problems, needs = _convert_nodes(graph, body.node, set())
            if problems:
                more = f" (and {len(problems) - 1} more)" if len(problems) > 1 else ""
                error = NeedsConstant if needs else Refused
                message = f"in its {attr}: {problems[0]}{more}"
                raise error(message, needs) if error is NeedsConstant else Refused(message)
            outputs = [graph.var_of(info.name) for info in body.output]
        finally:
            graph.block = outer
            graph.names.of.update(shadowed)
            graph.consts.update(shadowed_consts)
        return block, outputs


Converter = Callable[[Node], None]


class _Graph:
    """The state of one import: the program being built, constants, names."""

    def __init__(self, opset: int) -> None:
        self.opset = opset
        self.names = _Names()
        self.program = Program()
        self.block = self.program.global_block()
        self.consts: dict[str, np.ndarray] = {}  # ONNX name (or a made name) -> value
        self.onnx_of_const: dict[str, str] = {}
        self.params: dict[str, np.ndarray] = {}  # blockir name -> value of the constants ops read
        self.values: dict[str, np.ndarray] = {}  # the same, for the constants of folded ops too
        self.expected: dict[str, str] = {}  # ONNX value name -> the dtype ONNX gives it
        self.opsets: dict[str, int] = {}  # the other domains the model imports -> their versions
        # ONNX value name -> how many nodes (of every graph, subgraphs too) and graph outputs read it
        self.readers: Counter[str] = Counter()
        # ONNX value name -> the inference batch_norm writing it, which a per-channel Mul or Add after it folds into
        self.batch_norms: dict[str, Operator] = {}
        self.replaced: set[str] = set()  # constants such folds replaced, removed at the end where no op reads them

    def known(self, name: str) -> bool:
        """Whether blockir variable ``name`` is in the block being built or a block around it."""
        block: Block | None = self.block
        while block is not None:
            if block.has_var(name):
                return True
            block = block.parent_block
        return False

    def find(self, name: str) -> Variable:
        return self.block.find_var_recursive(name)

    def var_of(self, onnx_name: str) -> str:
        name = self.names.of.get(onnx_name)
        if name is not None and self.known(name):
            return name
        value = self.consts.get(onnx_name)
        if value is None:
            raise Refused(f"input {onnx_name!r} is neither a graph input, an initializer nor an earlier node's output")
        name = name or self.names.bind(onnx_name)
        root = self.block.program.global_block()  # constants live in the outermost block (a subgraph's too)
        fields = {"shape": list(value.shape), "dtype": value.dtype.name, "persistable": True}
        root.create_var(name, kind=VarKind.LOD_TENSOR, **fields)
        self.values[name] = value
        if root is self.program.global_block():
            self.params[name] = value
        return name

    def out_var(self, onnx_name: str) -> str:
        name = self.names.of.get(onnx_name) or self.names.bind(onnx_name)
        if not self.known(name):
            self.block.create_var(name)
        return name


def _fold(graph: _Graph, node: Node, convert: Converter) -> bool:
    """Run ``node`` at import when its inputs are all constants; its outputs become constants. False (nothing
    done) for a node with inputs computed at run time, or one that is random."""
    present = [n for n in node.inputs if n]
    if not all(n in graph.consts for n in present) or node.op_type in _NEVER_FOLD:
        return False
    main, scratch = graph.block, Program()
    saved_names = dict(graph.names.of)
    graph.block = scratch.global_block()
    try:
        convert(node)
        values = {v.name: graph.values[v.name] for v in graph.block.vars.values() if v.persistable}
        _evaluate(graph.block, values)
        wanted = [(o, graph.names.of[o]) for o in node.outputs if o and o not in graph.consts]
    finally:
        graph.block = main
        graph.names.of = saved_names
    for onnx_name, name in wanted:
        graph.consts[onnx_name] = np.asarray(values[name])
    return True


def _evaluate(block: Any, values: dict[str, Any]) -> None:
    """Run the ops of ``block`` in order on the host, calling their kernels directly (a folded node's few
    ops: the executor's passes and plan would cost more than the kernels), reading and writing ``values``."""
    for op in block.ops:
        schema = lookup(op.type)
        if schema.kernel is None or schema.lowering is not Lowering.KERNEL:
            raise Refused(f"{op.type} cannot run at import")
        args: list[Any] = []
        for slot in schema.inputs:
            names = op.input(slot.name)
            if slot.duplicable:
                args.append([values[n] for n in names])
            else:
                args.append(values[names[0]] if names else None)
        attrs = {a.name: op.attrs.get(a.name, a.default) for a in schema.attrs}
        wants = tuple(bool(op.output(slot.name)) for slot in schema.outputs)
        ctx = KernelContext(xp=np, attrs=attrs, wants=wants, op_text=str(op))
        try:
            result = schema.kernel(ctx, *args)
        except BlockirError:
            raise
        except Exception as e:  # noqa: BLE001  # a kernel's numpy error on these constants, said in one line
            raise Refused(f"folding {op.type} at import: {type(e).__name__}: {e}") from None
        results = (result,) if len(schema.outputs) == 1 else tuple(result)
        for slot, value in zip(schema.outputs, results):
            names = op.output(slot.name)
            if slot.duplicable:
                values.update(zip(names, value))
            elif names:
                values[names[0]] = value


# random ops, and ops with subgraphs (which read values of the graph around them that are no inputs of theirs)
_RANDOM = ("RandomNormal", "RandomUniform", "RandomNormalLike", "RandomUniformLike", "Bernoulli")
_NEVER_FOLD = frozenset({*_RANDOM, "If", "Loop", "Scan", "FlexAttention"})


def _value_dtypes(model: Any) -> dict[str, str]:
    """The element type ONNX's shape inference gives each value it can (numpy names; others left out)."""
    onnx = onnx_module()
    try:
        inferred = onnx.shape_inference.infer_shapes(model, strict_mode=False)
    except Exception:  # noqa: BLE001  # inference is a hint: a model it cannot type still imports
        inferred = model
    found = {}
    graph = inferred.graph
    for info in (*graph.value_info, *graph.output, *graph.input):
        code = info.type.tensor_type.elem_type
        if info.type.HasField("tensor_type") and code in ONNX_DTYPES:
            found[info.name] = ONNX_DTYPES[code]
    return found


def _shape_of(info: Any) -> list[int] | None:
    t = info.type.tensor_type
    if not t.HasField("shape"):
        return None
    return [d.dim_value if d.HasField("dim_value") else -1 for d in t.shape.dim]


def _opset(model: Any, where: str) -> int:
    onnx = onnx_module()
    newest = onnx.defs.onnx_opset_version()
    found = [o.version for o in model.opset_import if o.domain in ("", "ai.onnx")]
    if not found:
        raise BlockirError(f"{where}: the model imports no opset of the default ONNX domain")
    opset = found[0]
    if not MIN_OPSET <= opset <= newest:
        raise BlockirError(f"{where}: opset {opset}; blockir imports opsets {MIN_OPSET} to {newest}")
    return opset


def _check_order(graph: Any, where: str) -> None:
    """Every node's inputs are defined before it (graph inputs, initializers, earlier outputs)."""
    known = {i.name for i in graph.input} | {t.name for t in graph.initializer} | {""}
    outputs = {o for n in graph.node for o in n.output}
    for k, n in enumerate(graph.node):
        for name in n.input:
            if name not in known:
                later = (
                    "a later node's output (the graph has a cycle or is out of order)"
                    if name in outputs
                    else ("defined nowhere in the graph")
                )
                raise BlockirError(f"{where}: node {_node_name(n, k)}: input {name!r} is {later}")
        known.update(n.output)
    for o in graph.output:
        if o.name not in known:
            raise BlockirError(f"{where}: graph output {o.name!r} is computed by no node")


def _node_name(n: Any, k: int) -> str:
    return f"{n.name or f'#{k}'} ({n.op_type})"


def import_model(
    model: Any,
    where: str = "<model>",
    *,
    constants: Mapping[str, np.ndarray] | None = None,
) -> OnnxModel:
    """Import an ONNX ``ModelProto`` (see the module docstring). ``constants`` fixes the values of graph
    inputs that ops need as constants (the backend passes a run's fed shapes, specializing on them); those
    inputs are then no feeds. All unsupported nodes are listed at once in one :class:`BlockirError`."""
    opset = _opset(model, where)
    g = model.graph
    _check_order(g, where)
    graph = _Graph(opset)
    graph.expected = _value_dtypes(model)
    graph.opsets = {o.domain: o.version for o in model.opset_import if o.domain not in ("", "ai.onnx")}
    graph.readers = _readers(g)
    problems: list[str] = []
    failed: set[str] = set()  # values a reported problem leaves undefined (their readers are not reported)
    for t in g.initializer:
        try:
            graph.consts[t.name] = _tensor(t, f"initializer {t.name!r}")
        except Refused as e:
            problems.append(str(e))
            failed.add(t.name)
    fixed = dict(constants or {})
    initialized = {t.name for t in g.initializer}
    feeds, onnx_feeds = [], []
    for info in g.input:
        if info.name in initialized:
            continue
        if info.name in fixed:
            graph.consts[info.name] = np.asarray(fixed[info.name])
            continue
        if not info.type.HasField("tensor_type"):
            kind = info.type.WhichOneof("value")
            problems.append(f"graph input {info.name!r} is of {kind} type (blockir imports tensors only)")
            failed.add(info.name)
            continue
        try:
            dtype = dtype_name(info.type.tensor_type.elem_type, f"graph input {info.name!r}")
        except Refused as e:
            problems.append(str(e))
            failed.add(info.name)
            continue
        name = graph.names.bind(info.name)
        graph.block.create_var(name, shape=_shape_of(info), dtype=dtype, need_check_feed=True)
        feeds.append(name)
        onnx_feeds.append(info.name)
    found, needs = _convert_nodes(graph, g.node, failed)
    problems.extend(found)
    if problems:
        raise _listed(where, problems, needs)
    fetches, onnx_fetches = [], []
    for info in g.output:
        fetches.append(graph.var_of(info.name))
        onnx_fetches.append(info.name)
    FeedFetch(feeds=tuple(feeds), targets=tuple(fetches)).run(graph.program)
    _drop_replaced(graph)
    names = dict(graph.names.of)
    return OnnxModel(graph.program, graph.params, feeds, fetches, onnx_feeds, onnx_fetches, opset, names, where)


def _readers(g: Any) -> Counter[str]:
    """How many nodes of GraphProto ``g`` and of its nodes' subgraphs (at any depth), and graph outputs, read each
    value (a name a subgraph shadows counts too: more readers, never fewer)."""
    counts = Counter(o.name for o in g.output)
    for node in g.node:
        counts.update(node.input)
        for a in node.attribute:
            for sub in (*([a.g] if a.HasField("g") else []), *a.graphs):
                counts.update(_readers(sub))
    return counts


def _drop_replaced(graph: _Graph) -> None:
    """Remove the constants that folds into a batch_norm replaced (its Scale and Bias before) where no op reads
    them any more: only the constants the ops read are parameters."""
    if not graph.replaced:
        return
    read = {name for op in graph.program.ops() for name in op.input_names()}
    root = graph.program.global_block()
    for name in graph.replaced - read:
        root.remove_var(name)
        graph.params.pop(name, None)
        graph.values.pop(name, None)


def _tensor(t: Any, what: str) -> np.ndarray:
    """The value of TensorProto ``t`` (``what`` names it in errors)."""
    dtype_name(t.data_type, what)
    try:
        return np.asarray(onnx_module().numpy_helper.to_array(t))
    except Exception as e:  # noqa: BLE001  # onnx's reader reports malformed tensors in its own types
        raise Refused(f"{what} is malformed: {e}") from None


def _convert_nodes(graph: _Graph, nodes: Sequence[Any], failed: set[str]) -> tuple[list[str], list[str]]:
    """Convert ``nodes`` into the block being built (folding those of constant inputs); the problems met, each
    naming its node, and the names of the inputs wanted as constants. ``failed``: values already undefined
    (their readers are not reported)."""
    from blockir.io.onnx_ops import rule_for

    problems: list[str] = []
    needs: list[str] = []
    for k, proto in enumerate(nodes):
        label = f"node {_node_name(proto, k)}"
        if failed.intersection(proto.input):
            failed.update(proto.output)
            continue
        failed.update(proto.output)  # until converted
        domain = "" if proto.domain == "ai.onnx" else proto.domain
        rule = rule_for(proto.op_type, graph.opsets.get(domain, 0) if domain else graph.opset, domain)
        if isinstance(rule, str):
            problems.append(f"{label}: {rule}")
            continue
        try:
            node = Node(graph, proto)
            if not _fold(graph, node, rule.convert):
                first = len(graph.block.ops)
                rule.convert(node)
                _drop_copy(graph, node, graph.block.ops[first:])
                _fix_dtypes(graph, node)
            failed.difference_update(proto.output)
        except NeedsConstant as e:
            needs.extend(e.names)
            problems.append(f"{label}: {_first_line(e)}")
        except BlockirError as e:
            problems.append(f"{label}: {_first_line(e)}")
    return problems, needs


def _drop_copy(graph: _Graph, node: Node, ops: Sequence[Operator]) -> None:
    """When ``node``'s ops ``ops`` end in an ``assign`` copying a temporary that one of them writes and none other
    reads to the node's output (Conv, ConvTranspose and the pools write their 2-D op's result through one), the
    writer writes the output itself and the copy goes: no copy per op at run time, and the inference passes see
    the op feed the next node's (fold-conv-bn: a conv2d, its bias, then a batch_norm)."""
    if len(ops) < 2 or ops[-1].type != "assign":
        return
    copy, block = ops[-1], graph.block
    (temporary,), (out,) = copy.input("X"), copy.output("Out")
    writers = [op for op in ops[:-1] if temporary in op.output_names()]
    readers = [op for op in ops[:-1] if temporary in op.input_names() or op.sub_block_indices()]
    outputs = {graph.names.of.get(name) for name in node.outputs}
    if len(writers) != 1 or readers or temporary in outputs or not block.has_var(temporary) or not block.has_var(out):
        return
    block.remove_op(copy)
    writers[0].rename_output(temporary, out)  # the temporary's only use: no walk over the block (per node)
    block.remove_var(temporary)


def _first_line(e: BaseException) -> str:
    return str(e).splitlines()[0] if str(e) else type(e).__name__


class UnsupportedModelError(BlockirError):
    """The model has nodes, types or attributes blockir cannot import; ``problems`` lists each."""

    def __init__(self, message: str, problems: list[str], needs: Sequence[str] = ()) -> None:
        super().__init__(message)
        self.problems = problems
        self.needs = tuple(needs)


def _listed(where: str, problems: list[str], needs: Sequence[str]) -> UnsupportedModelError:
    shown = problems[:20]
    more = f"; and {len(problems) - 20} more" if len(problems) > 20 else ""
    return UnsupportedModelError(
        f"{where}: cannot import {len(problems)} part(s) of the model: {'; '.join(shown)}{more}", problems, needs
    )


def _fix_dtypes(graph: _Graph, node: Node) -> None:
    """Cast an output whose blockir dtype is not the one ONNX gives it (``shape``'s int32, ...)."""
    for onnx_name in node.outputs:
        want = graph.expected.get(onnx_name)
        name = graph.names.of.get(onnx_name)
        if not onnx_name or want is None or name is None or not graph.known(name):
            continue
        have = graph.find(name).dtype
        if have is not None and have != want:
            graph.names.of[onnx_name] = node.cast(name, want, out=graph.names.fresh(f"{name}.{want}"))


def read_model(path: str | os.PathLike[str], *, constants: Mapping[str, np.ndarray] | None = None) -> OnnxModel:
    """Read and import the ONNX model file ``path``: one :class:`BlockirError` naming the file for a file that
    is no ONNX model (truncated, another format), and listing every node blockir cannot import."""
    onnx = onnx_module()
    where = str(path)
    with os_errors(path, "read"), open_regular(path) as f:
        data = read_limited(f, MAX_MODEL_BYTES, where)
    model = onnx.ModelProto()
    try:
        model.ParseFromString(data)
    except Exception:  # noqa: BLE001  # protobuf's DecodeError, or a RuntimeWarning-like error of its C parser
        raise BlockirError(f"{where}: not an ONNX model (the bytes do not parse as a ModelProto)") from None
    if not model.HasField("graph") or (not model.graph.node and not model.graph.output):
        raise BlockirError(f"{where}: not an ONNX model (no graph)")
    if any(t.data_location == onnx.TensorProto.EXTERNAL for t in model.graph.initializer):
        _load_external(model, Path(path).parent, where)
    return import_model(model, where, constants=constants)


def _load_external(model: Any, base: Path, where: str) -> None:
    """Read the initializers stored in external files, each checked to lie inside ``base`` and within its file."""
    onnx = onnx_module()
    for t in model.graph.initializer:
        if t.data_location != onnx.TensorProto.EXTERNAL:
            continue
        info = {e.key: e.value for e in t.external_data}
        location = base / info.get("location", "")
        if base.resolve() not in location.resolve().parents:
            raise BlockirError(
                f"{where}: initializer {t.name!r}: external data {info.get('location')!r} is outside the model's "
                "directory"
            )
        offset, length = int(info.get("offset", 0)), info.get("length")
        with os_errors(location, "read"), open_regular(location) as f:
            size = os.fstat(f.fileno()).st_size
            count = int(length) if length is not None else size - offset
            if offset < 0 or count < 0 or offset + count > size:
                raise BlockirError(
                    f"{where}: initializer {t.name!r}: {location.name} holds {size} bytes, "
                    f"the model reads {count} at offset {offset}"
                )
            f.seek(offset)
            t.raw_data = f.read(count)
        del t.external_data[:]
        t.data_location = onnx.TensorProto.DEFAULT
