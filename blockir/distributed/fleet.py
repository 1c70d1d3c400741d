"""The fleet API of parameter-server training (Paddle's ``paddle.distributed.fleet``, with blockir's names).

A script runs once per role, started by ``blockir launch --servers S --workers
W script.py`` (:mod:`blockir.distributed.launch`), which tells each run its role:

.. code-block:: python

    fleet.init()
    strategy = fleet.DistributedStrategy(); strategy.a_sync = True
    opt = fleet.distributed_optimizer(bir.optimizer.Adagrad(0.05), strategy); opt.minimize(cost)
    if fleet.is_server():
        fleet.init_server(); fleet.run_server()
    elif fleet.is_worker():
        exe = bir.Executor("cpu"); exe.run(fleet.startup_program); fleet.init_worker()
        ...  # train fleet.main_program
        fleet.stop_worker()

``minimize`` runs the optimizer's ``minimize`` and then the ``distribute``
split (:func:`blockir.passes.distribute.split`): ``fleet.main_program`` is the
worker program, ``fleet.startup_program`` the startup program less what only
the servers hold. A role's state is its context's: the in-process launcher runs
every role as a thread with its own context (its own default programs, name
generator and global scope); elsewhere (a process per role) the process's.

The role comes from the launcher: a context it set, else the environment
(``BLOCKIR_ROLE`` = ``server`` or ``worker``, ``BLOCKIR_ROLE_INDEX``,
``BLOCKIR_SERVERS``, ``BLOCKIR_WORKERS``, ``BLOCKIR_PS_RUN``,
``BLOCKIR_PS_BACKEND`` = ``inprocess`` or ``ray``).
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Mapping
from contextvars import ContextVar
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from blockir.distributed.backend import backend_named
from blockir.distributed.communicator import Communicator
from blockir.distributed.server import ParameterServer
from blockir.errors import BlockirError
from blockir.io.persistence import is_persistable, save_sharded, saved_tables
from blockir.ir import Program, Variable
from blockir.ir.defaults import default_startup_program
from blockir.ops.distributed import PS_CLIENT
from blockir.passes.distribute import DenseBlock, Split, block_name, split
from blockir.runtime.scope import global_scope

__all__ = [
    "DistributedOptimizer",
    "DistributedStrategy",
    "Role",
    "barrier_worker",
    "communicator",
    "dense_vars",
    "distributed_optimizer",
    "init",
    "init_server",
    "init_worker",
    "is_first_worker",
    "is_server",
    "is_worker",
    "release",
    "run_server",
    "save_persistables",
    "server",
    "sparse_vars",
    "server_index",
    "server_num",
    "shrink",
    "stop_worker",
    "worker_index",
    "worker_num",
]

ROLES = ("server", "worker")


@dataclass(frozen=True)
class Role:
    """Which role this run of the script plays, in which training run."""

    kind: str  # "server" or "worker"
    index: int
    servers: int
    workers: int
    run: str = "default"
    backend: str = "inprocess"
    timeout: float = 300.0  # how long to wait for servers, other workers, a sync step

    def __post_init__(self) -> None:
        if self.kind not in ROLES:
            raise BlockirError(f"unknown role {self.kind!r} (expected server or worker)")
        if self.servers < 1:
            raise BlockirError(f"parameter-server training needs at least one server, got {self.servers}")
        if self.workers < 1:
            raise BlockirError(f"parameter-server training needs at least one worker, got {self.workers}")
        count = self.servers if self.kind == "server" else self.workers
        if not 0 <= self.index < count:
            raise BlockirError(f"{self.kind} index {self.index} is out of range (there are {count} {self.kind}s)")

    @staticmethod
    def from_env(env: Mapping[str, str]) -> Role:
        """The role the environment names (module docstring); an error naming what is missing or wrong."""
        if "BLOCKIR_ROLE" not in env:
            raise BlockirError(
                "fleet.init: no role (run the script with `blockir launch --servers S --workers W script.py`, "
                "which sets BLOCKIR_ROLE and the rest)"
            )

        def number(key: str, default: str | None = None) -> int:
            text = env.get(key, default)
            if text is None:
                raise BlockirError(f"fleet.init: {key} is not set")
            try:
                return int(text)
            except ValueError:
                raise BlockirError(f"fleet.init: {key}={text!r} is not a number") from None

        return Role(
            env["BLOCKIR_ROLE"],
            number("BLOCKIR_ROLE_INDEX", "0"),
            number("BLOCKIR_SERVERS"),
            number("BLOCKIR_WORKERS"),
            env.get("BLOCKIR_PS_RUN", "default"),
            env.get("BLOCKIR_PS_BACKEND", "inprocess"),
            float(env.get("BLOCKIR_PS_TIMEOUT", "300")),
        )


@dataclass
class DistributedStrategy:
    """``a_sync``: False for sync training (every step averaged over the workers), True (default) for async
    (Downpour). ``a_sync_configs``: ``pull_every`` (async: pull the dense parameters, and refresh the cached
    sparse rows, every n steps; default 1), ``queue_size`` (async: steps queued before a push blocks; default
    4), ``prefetch`` (async: ``AsyncExecutor`` thread workers pull the next batch's missing rows while a batch
    runs; default False) and ``k_steps`` (GEO-SGD: workers train locally and exchange parameter deltas every k
    steps)."""

    a_sync: bool = True
    a_sync_configs: dict[str, Any] = field(default_factory=dict)
    min_block_size: int = 8192  # dense parameters this large are cut into one block per server (distribute pass)

    def mode(self) -> str:
        unknown = set(self.a_sync_configs) - {"pull_every", "queue_size", "k_steps", "prefetch"}
        if unknown:
            raise BlockirError(f"DistributedStrategy.a_sync_configs: unknown keys {sorted(unknown)}")
        if not isinstance(self.a_sync_configs.get("prefetch", False), bool):
            raise BlockirError("DistributedStrategy.a_sync_configs: prefetch must be True or False")
        for key, value in self.a_sync_configs.items():
            if key != "prefetch" and (isinstance(value, bool) or not isinstance(value, int) or value < 1):
                raise BlockirError(f"DistributedStrategy.a_sync_configs: {key} must be an int >= 1, got {value!r}")
        if "k_steps" in self.a_sync_configs:
            if not self.a_sync:
                raise BlockirError("DistributedStrategy: k_steps (GEO) needs a_sync = True")
            return "geo"
        return "async" if self.a_sync else "sync"


_context_role: ContextVar[Role | None] = ContextVar("blockir_fleet_role", default=None)


@dataclass
class _Fleet:
    role: Role
    strategy: DistributedStrategy = field(default_factory=DistributedStrategy)
    split: Split | None = None
    program: Program | None = None  # the program minimize was given (what saves and loads are of)
    startup: Program | None = None  # the startup program as minimize left it: the servers initialize from it
    worker_startup: Program | None = None  # less what only the servers hold
    server: ParameterServer | None = None
    communicator: Communicator | None = None


_context_fleet: ContextVar[_Fleet | None] = ContextVar("blockir_fleet", default=None)
_process_fleet: _Fleet | None = None


def set_context_role(role: Role) -> None:
    """Give the current context its role (the in-process launcher, in each role's thread)."""
    _context_role.set(role)


def init(role: Role | None = None) -> None:
    """Start this role: ``role``, else the launcher's (its context's, else the environment's)."""
    global _process_fleet
    in_context = _context_role.get()
    state = _Fleet(role or in_context or Role.from_env(os.environ))
    if in_context is not None:
        _context_fleet.set(state)
    else:
        _process_fleet = state


def _fleet() -> _Fleet:
    state = _context_fleet.get() or _process_fleet
    if state is None:
        raise BlockirError("fleet.init() has not been called")
    return state


def _split() -> Split:
    state = _fleet()
    if state.split is None:
        raise BlockirError("call fleet.distributed_optimizer(...).minimize(loss) first")
    return state.split


def is_server() -> bool:
    return _fleet().role.kind == "server"


def is_worker() -> bool:
    return _fleet().role.kind == "worker"


def is_first_worker() -> bool:
    return is_worker() and _fleet().role.index == 0


def worker_index() -> int:
    role = _fleet().role
    if role.kind != "worker":
        raise BlockirError(f"worker_index: this role is server {role.index}")
    return role.index


def server_index() -> int:
    role = _fleet().role
    if role.kind != "server":
        raise BlockirError(f"server_index: this role is worker {role.index}")
    return role.index


def worker_num() -> int:
    return _fleet().role.workers


def server_num() -> int:
    return _fleet().role.servers


class DistributedOptimizer:
    """``fleet.distributed_optimizer(optimizer, strategy)``: ``minimize`` as the optimizer's, then the split."""

    def __init__(self, optimizer: Any, strategy: DistributedStrategy | None) -> None:
        self.optimizer = optimizer
        self.strategy = strategy or DistributedStrategy()

    def minimize(self, loss: Any, startup_program: Program | None = None) -> Any:
        state = _fleet()
        state.strategy = self.strategy
        result = self.optimizer.minimize(loss, startup_program=startup_program)
        startup = startup_program or default_startup_program()
        mode = self.strategy.mode()
        state.split = split(
            loss.block.program, state.role.servers, state.role.workers, self.strategy.min_block_size, mode == "geo"
        )
        state.program = loss.block.program
        state.startup = startup.clone()
        state.worker_startup = startup.clone()
        _worker_startup(state.worker_startup, state.split.worker)
        return result


def distributed_optimizer(optimizer: Any, strategy: DistributedStrategy | None = None) -> DistributedOptimizer:
    return DistributedOptimizer(optimizer, strategy)


def _worker_startup(startup: Program, worker: Program) -> None:
    """Drop from ``startup`` the ops making variables the worker program does not have (the servers')."""
    block, have = startup.global_block(), worker.global_block()
    for op in list(block.ops):
        if not any(have.has_var(n) for n in op.output_names()):
            block.remove_op(op)
    used = {n for op in block.ops for n in op.output_names()}
    for name in list(block.vars):
        if name not in used:
            block.remove_var(name)


def __getattr__(name: str) -> Any:
    """``fleet.main_program`` (the worker program) and ``fleet.startup_program``."""
    if name == "main_program":
        return _split().worker
    if name == "startup_program":
        _split()
        return _fleet().worker_startup
    raise AttributeError(f"module 'blockir.distributed.fleet' has no attribute {name!r}")


# -- servers -------------------------------------------------------------------------------------------


def init_server(dirname: str | os.PathLike[str] | None = None, var_names: list[str] | None = None) -> None:
    """Make this role's parameter server and publish it. With ``dirname`` (a save of
    :func:`save_persistables`) it first loads its rows of the saved sparse tables (only ``var_names`` when
    given), whatever the number of servers that saved them; dense parameters are loaded by worker 0
    (``bir.io.load_vars(exe, dirname, vars=fleet.dense_vars(program))``), which ``init_worker`` then gives
    the servers."""
    state = _fleet()
    if state.role.kind != "server":
        raise BlockirError(f"init_server: this role is worker {state.role.index}")
    assert state.startup is not None
    made = ParameterServer(state.role.index, _split(), state.startup, state.strategy.mode(), timeout=state.role.timeout)
    if dirname is not None:
        tables = {t.name for t in _split().tables}
        unknown = [n for n in var_names or () if n not in tables]
        if unknown:
            raise BlockirError(
                f"init_server: var_names entry {unknown[0]!r} is not a sparse table of the program (its tables: "
                f"{sorted(tables)})"
            )
        made.load_tables(str(dirname), saved_tables(dirname), var_names)
    elif var_names is not None:
        raise BlockirError("init_server: var_names without dirname")
    state.server = made
    backend_named(state.role.backend).serve(state.role.run, state.role.index, state.server)


# -- saving ---------------------------------------------------------------------------------------------


def sparse_vars(program: Program) -> list[Variable]:
    """The sparse tables of ``program``: the ``W`` of its ``lookup_table`` ops with ``is_sparse`` or
    ``is_distributed``, and the tables its ``distributed_lookup_table`` ops read."""
    block = program.global_block()
    names: list[str] = []
    for op in block.ops:
        if op.type == "lookup_table" and (op.attrs.get("is_sparse") or op.attrs.get("is_distributed")):
            names.append(op.input("W")[0])
        elif op.type == "distributed_lookup_table":
            names.append(str(op.attrs["table"]))
    return [block.var(n) for n in dict.fromkeys(names) if block.has_var(n)]


def dense_vars(program: Program) -> list[Variable]:
    """Every other persistable variable of ``program``: dense parameters, their optimizer state, learning rates
    (feed, fetch, reader and raw variables excluded, and a sparse table's per-row optimizer state, which is
    saved with the table's rows)."""
    block = program.global_block()
    sparse = {v.name for v in sparse_vars(program)}
    for op in block.ops:  # the optimizer state of a table's shape goes with the table
        param = op.inputs.get("Param", [None])[0] if "Param" in op.inputs else None
        if param in sparse:
            shape = block.var(param).shape
            sparse.update(
                n
                for s, names in op.inputs.items()
                if s not in ("Param", "Grad", "LearningRate")
                for n in names
                if block.var(n).shape == shape
            )
    return [v for v in block.vars.values() if is_persistable(v) and v.name not in sparse]


def save_persistables(
    executor: Any, dirname: str | os.PathLike[str], main_program: Program | None = None, mode: int = 0
) -> None:
    """Save the model (from worker 0, as ``if fleet.is_first_worker(): fleet.save_persistables(exe, dirname)``):
    this worker writes every dense parameter and its optimizer state (the state pulled from the servers,
    where the dense optimizer runs), every server its shard of each sparse table with the rows' optimizer
    state, all under ``dirname`` (``bir.io``'s layout); the manifest naming them is written last, so an
    interrupted save never loads and the previous one still does. ``mode=0``: a full save (a base);
    ``mode=1``: a delta, only the rows changed since the last save, added to the chain a load applies in order
    (each save also records the sightings of ids not yet admitted, so a base-and-deltas load never forgets
    them)."""
    state = _fleet()
    if state.role.kind != "worker":
        raise BlockirError(f"save_persistables: this role is server {state.role.index}; a worker saves")
    if mode not in (0, 1):
        raise BlockirError(f"save_persistables: mode must be 0 (full) or 1 (delta), got {mode!r}")
    split_, mine = _split(), communicator()
    program = main_program or state.program
    assert program is not None
    scope = global_scope()
    held = {b.param for b in split_.blocks}
    values = {}
    for var in dense_vars(program):
        values[var.name] = (
            np.asarray(scope.get(var.name)) if var.name in held else _server_value(split_, mine, program, var.name)
        )
    tables = {t.name: t for t in split_.tables}
    before = saved_tables(dirname) if mode == 1 and tables else {}
    base = Path(dirname).resolve()
    for name in tables:
        if mode == 1 and (name not in before or before[name]["servers"] != len(mine.handles)):
            raise BlockirError(
                f"save_persistables: a delta save (mode=1) of table {name!r} needs a full save of it by "
                f"{len(mine.handles)} servers in {str(dirname)!r} first"
            )

    def shards(directory: Path) -> dict[str, dict[str, Any]]:
        written = [h.submit("save_shards", str(directory), mode == 1).result() for h in mine.handles]
        entries = {}
        for name, table in tables.items():
            saved = [
                {
                    k: Path(w[name]["file"]).relative_to(base).as_posix() if k == "file" else w[name][k]
                    for k in ("file", "arrays", "rows", "crc32")
                }
                for w in written
            ]
            if mode == 1:
                entries[name] = {**before[name], "deltas": [*before[name].get("deltas", []), {"shards": saved}]}
            else:
                entries[name] = {
                    "height": table.height,
                    "dim": table.dim,
                    "dtype": table.dtype,
                    "servers": len(written),
                    "rule": "id % servers",
                    "states": written[0][name]["states"],
                    "shards": saved,
                }
        return entries

    _ = executor  # the values are host arrays: the executor's place does not matter here
    save_sharded(dirname, values, shards)
    for handle in mine.handles:  # complete: the rows written count as saved (a delta starts from here)
        handle.submit("commit_save").result()


def _state_parts(split_: Split, program: Program, name: str) -> tuple[list[DenseBlock], bool]:
    """The blocks of the dense parameter whose optimizer state ``name`` is (none for a variable no block owns:
    a learning rate, a table's scalar state, held whole by every server declaring it), and whether the state
    is cut by rows as the parameter is (it has its shape) rather than held whole by each block."""
    for param, states in split_.optimizer_states.items():
        blocks = sorted((b for b in split_.blocks if b.param == param), key=lambda b: b.index)
        if name in states and blocks:
            block = program.global_block()
            return blocks, block.var(name).shape == block.var(param).shape
    return [], False


def _on_server(b: DenseBlock, name: str) -> str:
    return block_name(name, b.index) if b.count > 1 else name


def _server_value(split_: Split, mine: Communicator, program: Program, name: str) -> np.ndarray:
    """The value of ``name`` the servers hold (joined from the blocks' parts for a cut parameter's state)."""
    blocks, by_rows = _state_parts(split_, program, name)
    if blocks:
        parts = [mine.handles[b.server].submit("values", [_on_server(b, name)]).result() for b in blocks]
        values = [part[_on_server(b, name)] for b, part in zip(blocks, parts)]
        return np.concatenate(values) if by_rows and len(values) > 1 else values[0]
    for handle in mine.handles:
        if handle.submit("declares", [name]).result():
            return handle.submit("values", [name]).result()[name]
    raise BlockirError(f"save_persistables: no server holds {name!r}")


def _give_servers_state(split_: Split, mine: Communicator, program: Program, scope: Any) -> None:
    """Worker 0 after loading a save: give the servers the optimizer state (and learning rates) it loaded,
    cut as they hold it; a variable the scope has no value for stays as the servers made it."""
    held = {b.param for b in split_.blocks} | {t.name for t in split_.tables}
    per_server: dict[int, dict[str, np.ndarray]] = {}
    for var in dense_vars(program):
        holder = scope.find_var(var.name)
        if var.name in held or holder is None or holder.value is None:
            continue
        value = np.asarray(holder.value)
        blocks, by_rows = _state_parts(split_, program, var.name)
        if blocks:
            for b in blocks:
                per_server.setdefault(b.server, {})[_on_server(b, var.name)] = (
                    value[b.begin : b.end] if by_rows else value
                )
        else:
            for k, handle in enumerate(mine.handles):
                if handle.submit("declares", [var.name]).result():
                    per_server.setdefault(k, {})[var.name] = value
    for k, values in per_server.items():
        mine.handles[k].submit("init_values", values).result()


def server() -> ParameterServer:
    """This role's parameter server (after ``init_server``)."""
    made = _fleet().server
    if made is None:
        raise BlockirError("call fleet.init_server() first")
    return made


def run_server() -> None:
    """Serve until every worker called ``stop_worker``."""
    state = _fleet()
    if state.server is None:
        raise BlockirError("run_server: call init_server() first")
    try:
        state.server.wait_finished()
    finally:
        state.server.stop()
        backend_named(state.role.backend).unpublish(state.role.run, state.role.index)


# -- workers -------------------------------------------------------------------------------------------


def init_worker() -> None:
    """Connect to the servers; worker 0 gives them its dense parameters (run the startup program first), the
    others take theirs. The communicator goes into the global scope, where the worker program's ops find it."""
    state = _fleet()
    role = state.role
    if role.kind != "worker":
        raise BlockirError(f"init_worker: this role is server {role.index}")
    split_ = _split()
    handles = backend_named(role.backend).handles(role.run, role.servers, role.timeout)
    configs = state.strategy.a_sync_configs
    communicator = Communicator(
        split_,
        handles,
        role.index,
        state.strategy.mode(),
        pull_every=int(configs.get("pull_every", 1)),
        queue_size=int(configs.get("queue_size", 4)),
        k_steps=int(configs.get("k_steps", 1)),
        prefetch=bool(configs.get("prefetch", False)),
    )
    scope = global_scope()
    dense = list(dict.fromkeys(b.param for b in split_.blocks))
    if split_.geo:
        held = [*dense, *(t.name for t in split_.tables)]
        missing = [n for n in held if scope.find_var(n) is None]
        if missing:
            raise BlockirError(f"init_worker: the scope has no value for {missing}: run fleet.startup_program first")
        start = communicator.init_geo({n: scope.get(n) for n in held}, role.index == 0)
        for name, value in start.items():
            scope.get(name)[...] = value
    elif role.index == 0:
        missing = [n for n in dense if scope.find_var(n) is None]
        if missing:
            raise BlockirError(f"init_worker: the scope has no value for {missing}: run fleet.startup_program first")
        communicator.init_dense({n: scope.get(n) for n in dense})
        assert state.program is not None
        _give_servers_state(split_, communicator, state.program, scope)
    else:
        for name, value in communicator.pull_all().items():
            scope.set(name, np.array(value, copy=True))  # a value out of Ray's object store is read-only
    scope.set(PS_CLIENT, communicator)
    state.communicator = communicator


def communicator() -> Communicator:
    """This worker's communicator (after ``init_worker``)."""
    communicator = _fleet().communicator
    if communicator is None:
        raise BlockirError("call fleet.init_worker() first")
    return communicator


def release() -> None:
    """Release what this role still holds, however its script ended: close its communicator (what it queued
    is pushed if the servers take it; its threads and handles end) and stop its server. The launchers call
    it after each role."""
    state = _context_fleet.get() or _process_fleet
    if state is None:
        return
    if state.communicator is not None:
        with contextlib.suppress(BlockirError):  # pushing what was queued failed too: the role's error is reported
            state.communicator.close()
        state.communicator = None
    if state.server is not None:
        state.server.stop()


def shrink(threshold: int) -> dict[str, int]:
    """Drop, on every server, the table rows no pull or push carried for ``threshold`` save intervals (completed
    saves, counted per row), as a streaming job does to keep its tables from only growing; they are gone from
    the next save. Rows dropped per table, over all servers."""
    dropped: dict[str, int] = {}
    for handle in communicator().handles:
        for table, count in handle.submit("shrink", threshold).result().items():
            dropped[table] = dropped.get(table, 0) + count
    return dropped


def barrier_worker() -> None:
    """Wait until every worker reached this barrier."""
    communicator().handles[0].submit("barrier", _fleet().role.index).result()


def stop_worker() -> None:
    """Push what is queued, stop the communicator, and tell the servers this worker is done."""
    state = _fleet()
    mine = communicator()
    try:
        mine.stop()
    finally:
        try:
            for handle in mine.handles:
                handle.submit("finish", state.role.index).result()
        finally:
            mine.close()
            state.communicator = None
