"""``distribute``: split a training program into the worker program and one program per parameter server.

Fluid's distribute transpiler as a pass. Options: ``servers`` and ``workers``
(how many of each), ``min_block_size`` (a dense parameter of at least that
many elements, and at least as many rows as servers, is cut by rows into one
block per server; smaller ones stay whole).

What the servers hold: every parameter an optimizer op updates (its
``op_role_var``). A parameter some ``lookup_table`` (or ``lookup_table_v2``) reads with
``is_sparse=true`` or ``is_distributed=true`` is a **sparse table** (its
``entry`` attribute the admission policy of new ids): sharded by id over the servers (id
``i`` on server ``i % servers``), its rows made on first use by the servers; the
others are **dense**: cut into blocks (``NAME.block{k}``, rows ``begin:end``),
each block on one server, the largest first onto the server holding the fewest
elements so far.

The worker program (the program itself, changed in place) keeps the forward and
backward and every dense parameter (a worker holds them all; the servers update
them), and:

1. each ``lookup_table`` or ``lookup_table_v2`` of a sparse table becomes a
   ``distributed_lookup_table`` (``Ids``, the communicator ``ps@CLIENT``; the
   table's ``height``, ``dim`` and ``padding_idx``, and ``lookup_table_version``
   the op it replaces, for Out's shape), and the ops making the table's gradient go (the servers
   take the gradient of the lookup's output at its ids instead);
2. the optimizer ops go, and the variables only they used (learning rate,
   moments), and the sparse tables' variables;
3. at the end, one ``send`` of the step's gradients (dense ``X`` by parameter;
   ``Ids`` and ``Rows`` per lookup of a sparse table), weighted by the batch
   (``Batch``: the first variable the program is fed), then one ``recv`` of the
   dense parameters (updated in place), after the send's ``Token``.

Each server's program (:attr:`Split.servers`, recorded by the pass as
``report.record("distribute").details["programs"]["server{k}"]``, which ``blockir
opt`` prints after the worker program and, with ``-o OUT.pb``, writes to
``OUT.server{k}.pb``)
holds the optimizer ops of its blocks and tables: a block's op reads and writes
``NAME.block{k}``, ``NAME@GRAD.block{k}`` and, for each state of the parameter's
shape, ``STATE.block{k}`` (a state of another shape, an Adam ``beta1_pow``, is
``STATE.block{k}`` too when the parameter is cut, so that each block keeps its
own); a table's op reads the table's rows at the pushed ids (``[-1, dim]``).

With ``geo=true`` (GEO-SGD) the worker program keeps every op, the optimizer's
too, and its parameters and tables whole (a worker trains locally); one
``geo_sync`` at the end (``Params``: the dense parameters and tables, ``Ids``:
the ids each lookup of a table read, the communicator) exchanges deltas with the
servers every ``k_steps`` steps. The server programs hold the blocks and table
shards only: a GEO server adds the deltas pushed to it.

Refused: a program without optimizer ops, with sub-blocks, with learning-rate
schedule ops, with a table read densely as well as sparsely, or with feed/fetch
ops. Every op the pass creates records its lineage.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import ClassVar

import numpy as np

from blockir.errors import BlockirError
from blockir.ir import Block, Operator, Program, VarKind
from blockir.ir.schema import GRAD_SUFFIX, Lowering, OpRole, lowering_of
from blockir.ops.distributed import PS_CLIENT
from blockir.passes.base import Pass, first_reads, mark_created, register_pass
from blockir.passes.manager import note, record_detail

__all__ = ["LOOKUPS", "DenseBlock", "Distribute", "Split", "SparseTable", "block_name", "split"]

LOOKUPS = ("lookup_table", "lookup_table_v2")  # the lookups of a table the servers may hold


def block_name(name: str, index: int) -> str:
    """``NAME.block{index}``: block ``index`` of a dense parameter (or of its gradient or state) on a server."""
    return f"{name}.block{index}"


@dataclass(frozen=True)
class DenseBlock:
    """Rows ``begin:end`` of dense parameter ``param``, block ``index`` of ``count``, held by server ``server``."""

    param: str
    index: int
    count: int
    begin: int
    end: int
    server: int

    @property
    def name(self) -> str:
        return block_name(self.param, self.index) if self.count > 1 else self.param


@dataclass(frozen=True)
class SparseTable:
    """A sparse table: rows of ``dim`` values, ids in ``0..height-1``, id ``i`` on server ``i % servers``."""

    name: str
    height: int
    dim: int
    dtype: str
    entry: str  # the admission policy of new ids: "" (every id), "count_filter:N" or "probability:P"


@dataclass
class Split:
    """What :func:`split` makes: the worker program, one program per server, and where everything is."""

    worker: Program
    servers: list[Program]
    blocks: list[DenseBlock]  # every dense block, by parameter, then index
    tables: list[SparseTable]
    workers: int
    optimizer_states: dict[str, list[str]] = field(default_factory=dict)  # parameter -> its optimizer states
    geo: bool = False  # GEO-SGD: the workers train locally, the servers add their deltas


@register_pass
@dataclass(frozen=True)
class Distribute(Pass):
    """Split into a worker program and server programs (module docstring)."""

    name: ClassVar[str] = "distribute"
    summary: ClassVar[str] = "split a training program into the worker program and one program per parameter server"

    servers: int = field(default=1, metadata={"help": "how many parameter servers"})
    workers: int = field(default=1, metadata={"help": "how many workers"})
    min_block_size: int = field(
        default=8192, metadata={"help": "dense parameters of at least this many elements are cut into server blocks"}
    )
    geo: bool = field(
        default=False, metadata={"help": "GEO-SGD: workers train locally and exchange parameter deltas (geo_sync)"}
    )

    def __post_init__(self) -> None:
        for option in ("servers", "workers", "min_block_size"):
            value = getattr(self, option)
            if isinstance(value, bool) or not isinstance(value, int) or value < 1:
                raise BlockirError(f"the distribute option {option} must be an int >= 1, got {value!r}")
        if not isinstance(self.geo, bool):
            raise BlockirError(f"the distribute option geo must be true or false, got {self.geo!r}")

    def run(self, program: Program) -> bool:
        result = _Splitter(self, program).run()
        record_detail("programs", {f"server{k}": server for k, server in enumerate(result.servers)})
        note(f"{len(result.blocks)} dense blocks, {len(result.tables)} sparse tables over {self.servers} servers")
        return True


def split(program: Program, servers: int, workers: int, min_block_size: int = 8192, geo: bool = False) -> Split:
    """The worker program (a changed clone of ``program``) and the server programs (module docstring)."""
    return _Splitter(Distribute(servers, workers, min_block_size, geo), program.clone()).run()


def _role(op: Operator) -> int:
    role = op.attrs.get("op_role", OpRole.FORWARD)
    return role if isinstance(role, int) else OpRole.FORWARD


class _Splitter:
    def __init__(self, options: Distribute, program: Program) -> None:
        self.o = options
        self.program = program
        self.block = program.global_block()
        self._check()
        self.optimizer = [op for op in self.block.ops if _role(op) & OpRole.OPTIMIZE]
        self.param_of_op = {id(op): self._param(op) for op in self.optimizer}
        self.params = list(dict.fromkeys(self.param_of_op.values()))
        self.lookups = [op for op in self.block.ops if op.type in LOOKUPS and op.input("W")[0] in self.params]
        sparse = {op.input("W")[0] for op in self.lookups if _sparse(op)}
        dense_lookups = [op for op in self.lookups if op.input("W")[0] in sparse and not _sparse(op)]
        if dense_lookups:
            raise BlockirError(
                f"distribute: table {dense_lookups[0].input('W')[0]!r} is read densely: {dense_lookups[0]}"
            )
        self.tables = [self._table(name) for name in self.params if name in sparse]
        self.dense = [name for name in self.params if name not in sparse]

    def _check(self) -> None:
        if self.program.num_blocks > 1:
            raise BlockirError("distribute: the program has sub-blocks; control flow is not distributed")
        ops = self.block.ops
        framing = [op for op in ops if lowering_of(op.type) in (Lowering.FEED, Lowering.FETCH)]
        if framing:
            raise BlockirError(f"distribute: the program has feed/fetch ops (an inference model?): {framing[0]}")
        schedules = [op for op in ops if _role(op) & OpRole.LR_SCHED]
        if schedules:
            raise BlockirError(f"distribute: learning-rate schedules are not supported on the servers: {schedules[0]}")
        if not any(_role(op) & OpRole.OPTIMIZE for op in ops):
            raise BlockirError("distribute: the program has no optimizer ops (an optimizer's minimize adds them)")

    @staticmethod
    def _param(op: Operator) -> str:
        pairs = list(op.attrs.get("op_role_var", ()))
        if not pairs:
            raise BlockirError(f"distribute: an optimizer op names no parameter (op_role_var): {op}")
        return str(pairs[0])

    def _table(self, name: str) -> SparseTable:
        var = self.block.var(name)
        entries = {str(op.attrs.get("entry", "")) for op in self.lookups if op.input("W")[0] == name}
        if len(entries) > 1:
            raise BlockirError(f"distribute: the lookups of table {name!r} give different entry policies: {entries}")
        shape = var.shape or ()
        if len(shape) != 2 or min(shape) < 1:
            raise BlockirError(f"distribute: table {name!r} must have a known [height, dim] shape, not {shape}")
        return SparseTable(name, int(shape[0]), int(shape[1]), str(var.dtype), entries.pop())

    # -- the dense blocks -------------------------------------------------------------------------------
    def _blocks(self) -> list[DenseBlock]:
        servers = self.o.servers
        cut: list[tuple[str, int, int, int, int]] = []  # (param, index, count, begin, end)
        for name in self.dense:
            shape = self.block.var(name).shape or (1,)
            rows, size = shape[0], int(np.prod(shape))
            count = servers if size >= self.o.min_block_size and rows >= servers > 1 else 1
            bounds = np.cumsum([0, *[rows // count + (k < rows % count) for k in range(count)]]).tolist()
            cut.extend((name, k, count, bounds[k], bounds[k + 1]) for k in range(count))
        width = {name: int(np.prod((self.block.var(name).shape or (1,))[1:])) for name in self.dense}
        load = [0] * servers
        placed: dict[tuple[str, int], int] = {}
        for param, index, _, begin, end in sorted(cut, key=lambda c: (-(c[4] - c[3]) * width[c[0]], c[0], c[1])):
            server = load.index(min(load))
            placed[(param, index)] = server
            load[server] += (end - begin) * width[param]
        return [DenseBlock(p, i, n, b, e, placed[(p, i)]) for p, i, n, b, e in cut]

    # -- the worker program -----------------------------------------------------------------------------
    def run(self) -> Split:
        blocks = self._blocks()
        states = {self.param_of_op[id(op)]: self._states(op) for op in self.optimizer}
        if self.o.geo:
            servers = [self._geo_server(k, blocks) for k in range(self.o.servers)]
            self._geo_worker()
        else:
            servers = [self._server(k, blocks, states) for k in range(self.o.servers)]
            self._worker()
        return Split(self.program, servers, blocks, self.tables, self.o.workers, states, self.o.geo)

    @staticmethod
    def _states(op: Operator) -> list[str]:
        fixed = {"Param", "Grad", "LearningRate"}
        return [n for slot, names in op.inputs.items() if slot not in fixed for n in names]

    def _worker(self) -> None:
        block = self.block
        tables = {t.name: t for t in self.tables}
        grads = {name + GRAD_SUFFIX for name in tables}
        if not block.has_var(PS_CLIENT):
            block.create_var(PS_CLIENT, kind=VarKind.RAW, persistable=True)
        pushed: list[tuple[str, str, str, int]] = []  # (table, ids, rows gradient, padding_idx)
        for op in list(block.ops):
            if op.type in LOOKUPS and op.input("W")[0] in tables:
                table = tables[op.input("W")[0]]
                new = block.insert_op(
                    block.ops.index(op),
                    "distributed_lookup_table",
                    {"Ids": op.input("Ids"), "Client": [PS_CLIENT]},
                    {"Out": op.output("Out")},
                    {
                        "table": table.name,
                        "height": table.height,
                        "dim": table.dim,
                        "dtype": table.dtype,
                        "padding_idx": op.attrs.get("padding_idx", -1),
                        "lookup_table_version": op.type,
                    },
                )
                mark_created(new, Distribute.name, [op])
                block.remove_op(op)
                out_grad = op.output("Out")[0] + GRAD_SUFFIX
                if block.has_var(out_grad):
                    pushed.append((table.name, op.input("Ids")[0], out_grad, int(op.attrs.get("padding_idx", -1))))
            elif _role(op) & OpRole.OPTIMIZE or (op.output_names() and all(_of(n, grads) for n in op.output_names())):
                block.remove_op(op)  # an optimizer op, or one making a sparse table's gradient
        used = {n for op in block.ops for n in (*op.input_names(), *op.output_names())}
        for name in list(block.vars):
            if name not in used and (name in tables or _of(name, grads) or block.var(name).persistable):
                if name not in self.dense and name != PS_CLIENT:
                    block.remove_var(name)
        self._send_recv(pushed)

    def _send_recv(self, pushed: list[tuple[str, str, str, int]]) -> None:
        block = self.block
        dense_grads = [(p, p + GRAD_SUFFIX) for p in self.dense if block.has_var(p + GRAD_SUFFIX)]
        origin = self.optimizer
        reads = first_reads(block.ops, {n for n, v in block.vars.items() if v.persistable})
        inputs: dict[str, list[str]] = {
            "X": [g for _, g in dense_grads],
            "Ids": [ids for _, ids, _, _ in pushed],
            "Rows": [rows for _, _, rows, _ in pushed],
            "Client": [PS_CLIENT],
        }
        if reads:
            inputs["Batch"] = [reads[0]]
        token = "send@TOKEN"
        if not block.has_var(token):
            block.create_var(token, shape=(1,), dtype="int64", stop_gradient=True)
        send = block.append_op(
            "send",
            {k: v for k, v in inputs.items() if v},
            {"Token": [token]},
            {
                "params": [p for p, _ in dense_grads],
                "tables": [t for t, _, _, _ in pushed],
                "padding_idx": [pad for _, _, _, pad in pushed],
                "op_role": OpRole.OPTIMIZE,
            },
        )
        mark_created(send, Distribute.name, origin)
        params = [p for p, _ in dense_grads]
        if params:
            recv = block.append_op(
                "recv",
                {"Token": [token], "Current": params, "Client": [PS_CLIENT]},
                {"Out": params},
                {"params": params, "op_role": OpRole.OPTIMIZE},
            )
            mark_created(recv, Distribute.name, origin)

    def _geo_worker(self) -> None:
        """GEO: the program trains locally as it is; one ``geo_sync`` at the end exchanges deltas every k steps."""
        block = self.block
        if not block.has_var(PS_CLIENT):
            block.create_var(PS_CLIENT, kind=VarKind.RAW, persistable=True)
        tables = {t.name for t in self.tables}
        lookups = [op for op in self.lookups if op.input("W")[0] in tables]
        held = [*self.dense, *(t.name for t in self.tables)]
        op = block.append_op(
            "geo_sync",
            {"Params": held, "Ids": [o.input("Ids")[0] for o in lookups], "Client": [PS_CLIENT]},
            {"Out": held},
            {"params": held, "id_tables": [o.input("W")[0] for o in lookups], "op_role": OpRole.OPTIMIZE},
        )
        mark_created(op, Distribute.name, self.optimizer)

    def _geo_server(self, k: int, blocks: Sequence[DenseBlock]) -> Program:
        """GEO: a server holds its blocks and table shards and adds the deltas pushed to them (no ops)."""
        program = Program()
        server = program.global_block()
        for b in blocks:
            if b.server == k:
                fields = self.block.var(b.param).fields()
                fields.pop("name")
                shape = fields.get("shape") or (1,)
                fields["shape"] = (b.end - b.begin, *shape[1:])
                server.create_var(b.name, **fields)
        for table in self.tables:
            fields = self.block.var(table.name).fields()
            fields.pop("name")
            fields["shape"] = (-1, table.dim)
            server.create_var(table.name, **fields)
        return program

    # -- the server programs ----------------------------------------------------------------------------
    def _server(self, k: int, blocks: Sequence[DenseBlock], states: dict[str, list[str]]) -> Program:
        program = Program()
        server = program.global_block()
        by_param = {self.param_of_op[id(op)]: op for op in self.optimizer}
        for b in blocks:
            if b.server == k:
                self._server_op(server, by_param[b.param], b, states[b.param])
        for table in self.tables:
            self._server_op(server, by_param[table.name], table, states[table.name])
        return program

    def _server_op(self, server: Block, op: Operator, held: DenseBlock | SparseTable, states: list[str]) -> None:
        param = op.input("Param")[0]
        if isinstance(held, DenseBlock):
            rows: int | None = held.end - held.begin
            rename = {param: held.name, param + GRAD_SUFFIX: _renamed(param + GRAD_SUFFIX, held)}
            rename.update((s, _renamed(s, held)) for s in states)
        else:
            rows = -1
            rename = {}
        shape = self.block.var(param).shape or ()
        for name in dict.fromkeys((*op.input_names(), *op.output_names())):
            var = self.block.var(name)
            new = rename.get(name, name)
            if server.has_var(new):
                continue
            fields = var.fields()
            fields.pop("name")
            if var.shape == shape and rows is not None:
                fields["shape"] = (rows, *shape[1:])
            if name == param + GRAD_SUFFIX:
                fields.update(kind=VarKind.LOD_TENSOR, persistable=False)
            server.create_var(new, **fields)
        inputs = {s: [rename.get(n, n) for n in names] for s, names in op.inputs.items()}
        outputs = {s: [rename.get(n, n) for n in names] for s, names in op.outputs.items()}
        new_op = server.append_op(op.type, inputs, outputs, {}, infer=False)
        for key, value in op.attrs.items():
            new_op.set_attr(key, value, op.attr_types[key])
        mark_created(new_op, Distribute.name, [op])


def _sparse(lookup: Operator) -> bool:
    return bool(lookup.attrs.get("is_sparse") or lookup.attrs.get("is_distributed"))


def _renamed(name: str, held: DenseBlock) -> str:
    return block_name(name, held.index) if held.count > 1 else name


def _of(name: str, grads: set[str]) -> bool:
    """Whether ``name`` is one of ``grads`` or a partial of one (``W@GRAD@RENAME@0``)."""
    return any(name == g or name.startswith(g + "@") for g in grads)
