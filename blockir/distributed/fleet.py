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
the servers hold (on a worker, the startup program ``minimize`` was given,
rewritten in place as Paddle rewrites it: a script running its own
``default_startup_program()`` allocates no distributed table). A role's
state is its context's: the in-process launcher runs every role as a thread
with its own context (its own default programs, name generator and global
scope); elsewhere (a process per role) the process's.

The role comes from the launcher: a context it set, else the environment
(``BLOCKIR_ROLE`` = ``server`` or ``worker``, ``BLOCKIR_ROLE_INDEX``,
``BLOCKIR_SERVERS``, ``BLOCKIR_WORKERS``, ``BLOCKIR_PS_RUN``,
``BLOCKIR_PS_BACKEND`` = ``inprocess`` or ``ray``, ``BLOCKIR_PS_TIMEOUT``,
``BLOCKIR_RESTART``, ``BLOCKIR_CHECKPOINT_DIR``, ``BLOCKIR_CHECKPOINT_EVERY``).

**Restarts and checkpoints** (``blockir launch --max-restarts N
--checkpoint-dir DIR --checkpoint-every STEPS``): worker 0 saves the model
into ``DIR`` (a full :func:`save_persistables`, its manifest recording the step
and each server's version) once it joined and every ``STEPS`` steps. A
restarted role (:func:`restarts` > 0) runs its script again: a restarted
worker's ``init_worker`` takes the dense parameters from the servers (worker 0
too: the servers' are newer than its startup values); a restarted server's
``init_server`` restores its part of the last checkpoint in ``DIR`` (newer
than a ``dirname`` the script names) and says so; the workers report what it
lost (:class:`~blockir.distributed.communicator.Communicator`).
"""

from __future__ import annotations

import contextlib
import functools
import os
import sys
from collections.abc import Sequence
from contextvars import ContextVar
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from blockir.distributed.api import ParameterServerAPI, ServerControl, ServerLost
from blockir.distributed.backend import Backend, backend_named
from blockir.distributed.communicator import CACHE_WINDOWS, PULL_EVERY, Communicator, GeoCommunicator, new_communicator
from blockir.distributed.role import Role
from blockir.distributed.server import ParameterServer
from blockir.errors import BlockirError
from blockir.io.manifest import ShardEntry, TableEntry
from blockir.io.persistence import MANIFEST_FILE, is_persistable, save_sharded, saved_tables
from blockir.io.persistence import save_inference_model as save_model
from blockir.ir import Program, Variable
from blockir.ir.defaults import default_startup_program
from blockir.ops.distributed import PS_CLIENT
from blockir.passes.distribute import LOOKUPS, DenseBlock, Split, block_name, split
from blockir.runtime.scope import Scope, global_scope

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
    "restarts",
    "run_server",
    "save_inference_model",
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


@dataclass
class DistributedStrategy:
    """``a_sync``: False for sync training (every step averaged over the workers), True (default) for async
    (Downpour). ``a_sync_configs``: ``pull_every`` (async: a window of n steps, whose gradients are summed and
    pushed once at its end, when the dense parameters are pulled and the cached sparse rows refreshed; default 4),
    ``cache_windows`` (async: a cached sparse row is refreshed at the end of each window that used its id, and kept
    as it is until its id went unused for n windows; default 16), ``queue_size`` (async: steps queued before a push
    blocks; default one window, ``pull_every``; each queued step is one more step the values a worker trains with
    may lack), ``prefetch`` (async: ``AsyncExecutor`` thread workers read that many batches ahead, and the rows of
    each ``prefetch // 2`` batches read that the worker's cache lacks are pulled in one request while earlier
    batches run; True is 1; default 0, off) and ``k_steps`` (GEO-SGD: workers train locally and exchange parameter
    deltas every k steps)."""

    a_sync: bool = True
    a_sync_configs: dict[str, Any] = field(default_factory=dict)
    min_block_size: int = 8192  # dense parameters this large are cut into one block per server (distribute pass)

    def mode(self) -> str:
        unknown = set(self.a_sync_configs) - {"pull_every", "queue_size", "cache_windows", "k_steps", "prefetch"}
        if unknown:
            raise BlockirError(f"DistributedStrategy.a_sync_configs: unknown keys {sorted(unknown)}")
        prefetch = self.a_sync_configs.get("prefetch", 0)
        if not isinstance(prefetch, int) or prefetch < 0:
            raise BlockirError(
                f"DistributedStrategy.a_sync_configs: prefetch must be a number of batches >= 0 (or True, 1), "
                f"got {prefetch!r}"
            )
        for key, value in self.a_sync_configs.items():
            if key != "prefetch" and (isinstance(value, bool) or not isinstance(value, int) or value < 1):
                raise BlockirError(f"DistributedStrategy.a_sync_configs: {key} must be an int >= 1, got {value!r}")
        if "k_steps" in self.a_sync_configs:
            if not self.a_sync:
                raise BlockirError("DistributedStrategy: k_steps (GEO) needs a_sync = True")
            return "geo"
        return "async" if self.a_sync else "sync"


_context_role: ContextVar[Role | None] = ContextVar("blockir_fleet_role", default=None)
_context_backend: ContextVar[Backend | None] = ContextVar("blockir_fleet_backend", default=None)


@dataclass
class _Fleet:
    role: Role
    backend: Backend  # where its server is published, and its workers find the servers
    strategy: DistributedStrategy = field(default_factory=DistributedStrategy)
    split: Split | None = None
    program: Program | None = None  # the program minimize was given (what saves and loads are of)
    startup: Program | None = None  # the startup program as minimize left it: the servers initialize from it
    worker_startup: Program | None = None  # less what only the servers hold
    server: ParameterServer | None = None
    communicator: Communicator | None = None


_context_fleet: ContextVar[_Fleet | None] = ContextVar("blockir_fleet", default=None)
_process_fleet: _Fleet | None = None


def set_context_role(role: Role, backend: Backend) -> None:
    """Give the current context its role and the launcher's backend (the launchers, in each role's thread)."""
    _context_role.set(role)
    _context_backend.set(backend)


def init(role: Role | None = None) -> None:
    """Start this role: ``role``, else the launcher's (its context's, else the environment's)."""
    global _process_fleet
    in_context = _context_role.get()
    role = role or in_context or Role.from_env(os.environ)
    state = _Fleet(role, _context_backend.get() or backend_named(role.backend))
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
    return _split_of(_fleet())


def _split_of(state: _Fleet, caller: str = "") -> Split:
    if state.split is None:
        raise BlockirError(
            f"{caller + ': ' if caller else ''}call fleet.distributed_optimizer(...).minimize(loss) first"
        )
    return state.split


def _minimized(state: _Fleet, caller: str) -> tuple[Program, Program]:
    """The programs ``minimize`` was given (the training program) and left (the startup program), or an error
    saying that ``caller`` needs ``minimize`` first."""
    _split_of(state, caller)
    if state.program is None or state.startup is None:  # minimize sets all three together
        raise BlockirError(f"{caller}: call fleet.distributed_optimizer(...).minimize(loss) first")
    return state.program, state.startup


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


def restarts() -> int:
    """How many times the launcher restarted this role (``blockir launch --max-restarts``); 0 the first time."""
    return _fleet().role.restart


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
        # a worker's own startup program rewritten in place, as Paddle's is: running it makes no server variable
        state.worker_startup = startup if state.role.kind == "worker" else startup.clone()
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
    role = state.role
    if role.kind != "server":
        raise BlockirError(f"init_server: this role is worker {role.index}")
    _, startup = _minimized(state, "init_server")
    made = ParameterServer(
        role.index, _split(), startup, state.strategy.mode(), timeout=role.timeout, restart=role.restart
    )
    if var_names is not None and dirname is None:
        raise BlockirError("init_server: var_names without dirname")
    tables = {t.name for t in _split().tables}
    unknown = [n for n in var_names or () if n not in tables]
    if unknown:
        raise BlockirError(
            f"init_server: var_names entry {unknown[0]!r} is not a sparse table of the program (its tables: "
            f"{sorted(tables)})"
        )
    checkpoint = role.checkpoint_dir if role.restart and role.checkpoint_dir else None
    if checkpoint is not None and (Path(checkpoint) / MANIFEST_FILE).is_file():
        life = made.restore(checkpoint)
        print(
            f"parameter server {role.index} restarted (restart {role.restart}): restored from the checkpoint of step "
            f"{life['step']} in {checkpoint}; the updates it applied after that checkpoint are lost",
            file=sys.stderr,
            flush=True,
        )
    elif checkpoint is not None:
        print(
            f"parameter server {role.index} restarted (restart {role.restart}) with no checkpoint in {checkpoint} "
            f"yet: everything it held is lost",
            file=sys.stderr,
            flush=True,
        )
    elif dirname is not None:
        made.load_tables(str(dirname), saved_tables(dirname), var_names)
    state.server = made
    state.backend.serve(role.run, role.index, state.server)


# -- saving ---------------------------------------------------------------------------------------------


def sparse_vars(program: Program) -> list[Variable]:
    """The sparse tables of ``program``: the ``W`` of its ``lookup_table`` (and ``_v2``) ops with ``is_sparse`` or
    ``is_distributed``, and the tables its ``distributed_lookup_table`` ops read."""
    block = program.global_block()
    names: list[str] = []
    for op in block.ops:
        if op.type in LOOKUPS and (op.attrs.get("is_sparse") or op.attrs.get("is_distributed")):
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
    _ = executor  # the values are host arrays: the executor's place does not matter here
    program = main_program or _minimized(state, "save_persistables")[0]
    _save(state, global_scope(), dirname, program, mode)


def _save(state: _Fleet, scope: Any, dirname: str | os.PathLike[str], program: Program, mode: int) -> None:
    """:func:`save_persistables` of ``state``'s worker, the values it does not pull from the servers read from
    ``scope``; the manifest records worker's step and the servers' versions (what a restart from it lost)."""
    split_, mine = _split_of(state), _communicator_of(state)
    versions = [int(v) for v in mine.transport.call_all(ParameterServerAPI.version)]
    held = mine.pull_all()  # the dense parameters as the servers hold them
    values = {}
    for var in dense_vars(program):
        value = held.get(var.name)
        if value is None:
            value = _server_value(split_, mine, program, var.name)
        values[var.name] = np.asarray(scope.get(var.name)) if value is None else value
    tables = {t.name: t for t in split_.tables}
    before = saved_tables(dirname) if mode == 1 and tables else {}
    base = Path(dirname).resolve()
    for name in tables:
        if mode == 1 and (name not in before or before[name].servers != len(mine.handles)):
            raise BlockirError(
                f"save_persistables: a delta save (mode=1) of table {name!r} needs a full save of it by "
                f"{len(mine.handles)} servers in {str(dirname)!r} first"
            )

    def shards(directory: Path) -> dict[str, TableEntry]:
        written = mine.transport.call_all_once(ServerControl.save_shards, str(directory), mode == 1)
        entries = {}
        for name, table in tables.items():
            files = [Path(w[name]["file"]).relative_to(base).as_posix() for w in written]
            saved = tuple(ShardEntry.written(file, w[name]) for file, w in zip(files, written, strict=True))
            if mode == 1:
                entries[name] = before[name].with_delta(saved)
            else:
                states = tuple(written[0][name]["states"])
                entries[name] = TableEntry(table.height, table.dim, table.dtype, len(written), states, saved)
        return entries

    save_sharded(dirname, values, shards, {"step": mine.steps, "versions": versions})
    mine.transport.call_all(
        ParameterServerAPI.commit_save
    )  # complete: the rows written count as saved (a delta starts from here)


def _checkpoint(state: _Fleet, scope: Any, directory: str, program: Program, step: int) -> None:
    """Worker 0's checkpoint of ``program`` at ``step`` (a full save into the launcher's ``--checkpoint-dir``,
    ``directory``); one a lost server keeps from completing is skipped, and said so."""
    try:
        _save(state, scope, directory, program, 0)
    except ServerLost as e:
        print(f"worker 0: the checkpoint of step {step} was not written: {e}", file=sys.stderr, flush=True)


def save_inference_model(
    executor: Any,
    dirname: str | os.PathLike[str],
    feeded_var_names: str | Sequence[str],
    target_vars: Any,
    main_program: Program | None = None,
    model_filename: str | None = None,
    params_filename: str | None = None,
) -> list[str]:
    """Save, from a worker, a model that runs without the servers: ``bir.io.save_inference_model`` of the
    training program (``main_program``: the one ``minimize`` was given; its lookups read a whole local table,
    it has no ``send``/``recv``) with the servers' values: the dense parameters pulled from them, each sparse
    table made whole from the rows they hold (ids they never made read as zeros, as ids not admitted do), the
    other persistables from this worker's scope. Returns the target names."""
    state = _fleet()
    if state.role.kind != "worker":
        raise BlockirError(f"save_inference_model: this role is server {state.role.index}; a worker saves")
    program = main_program or _minimized(state, "save_inference_model")[0]
    split_, mine, local = _split(), communicator(), global_scope()
    scope = Scope()
    for var in program.global_block().vars.values():
        holder = local.find_var(var.name)
        if is_persistable(var) and holder is not None and holder.value is not None:
            scope.set(var.name, holder.value)
    for name, value in mine.pull_all().items():
        scope.set(name, np.array(value))
    for table in split_.tables:
        whole = np.zeros((table.height, table.dim), table.dtype)
        for ids, rows in mine.transport.call_all(ParameterServerAPI.table_rows, table.name):
            whole[ids] = rows
        scope.set(table.name, whole)
    return save_model(
        dirname,
        feeded_var_names,
        target_vars,
        executor,
        main_program=program,
        model_filename=model_filename,
        params_filename=params_filename,
        scope=scope,
    )


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


def _server_value(split_: Split, mine: Communicator, program: Program, name: str) -> np.ndarray | None:
    """The value of ``name`` the servers hold (joined from the blocks' parts for a cut parameter's state); None
    when no server holds it."""
    blocks, by_rows = _state_parts(split_, program, name)
    if blocks:
        parts = [mine.transport.call(b.server, ParameterServerAPI.values, [_on_server(b, name)]) for b in blocks]
        values = [part[_on_server(b, name)] for b, part in zip(blocks, parts)]
        return np.concatenate(values) if by_rows and len(values) > 1 else values[0]
    for k, program_k in enumerate(split_.servers):
        if program_k.global_block().has_var(name):  # the split says which servers declare it: not asked
            return mine.transport.call(k, ParameterServerAPI.values, [name])[name]
    return None


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
            for k, program_k in enumerate(split_.servers):
                if program_k.global_block().has_var(var.name):
                    per_server.setdefault(k, {})[var.name] = value
    calls = [mine.transport.submit(k, ParameterServerAPI.init_values, values) for k, values in per_server.items()]
    for call in calls:  # to every server at once
        mine.transport.result(call, waited=True)


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
        state.backend.unpublish(state.role.run, state.role.index)


# -- workers -------------------------------------------------------------------------------------------


def init_worker() -> None:
    """Connect to the servers; worker 0 gives them its dense parameters (run the startup program first), the
    others take theirs, as does a restarted worker 0. The communicator goes into the global scope, where the
    worker program's ops find it. With the launcher's ``--checkpoint-dir``, worker 0 then writes the first
    checkpoint, and one every ``--checkpoint-every`` steps."""
    state = _fleet()
    role = state.role
    if role.kind != "worker":
        raise BlockirError(f"init_worker: this role is server {role.index}")
    split_ = _split()
    handles = state.backend.handles(role.run, role.servers, role.timeout)
    configs = state.strategy.a_sync_configs
    communicator = new_communicator(
        split_,
        handles,
        role.index,
        state.strategy.mode(),
        pull_every=int(configs.get("pull_every", PULL_EVERY)),
        queue_size=configs.get("queue_size"),
        cache_windows=int(configs.get("cache_windows", CACHE_WINDOWS)),
        k_steps=int(configs.get("k_steps", 1)),
        prefetch=int(configs.get("prefetch", 0)),
        timeout=role.timeout,
    )
    communicator.know_servers()
    first = role.index == 0 and role.restart == 0  # the one whose values the servers start from
    scope = global_scope()
    dense = list(dict.fromkeys(b.param for b in split_.blocks))
    if isinstance(communicator, GeoCommunicator):
        held = [*dense, *(t.name for t in split_.tables)]
        missing = [n for n in held if scope.find_var(n) is None]
        if missing:
            raise BlockirError(f"init_worker: the scope has no value for {missing}: run fleet.startup_program first")
        start = communicator.init_geo({n: scope.get(n) for n in held}, first)
        for name, value in start.items():
            scope.get(name)[...] = value
    elif first:
        missing = [n for n in dense if scope.find_var(n) is None]
        if missing:
            raise BlockirError(f"init_worker: the scope has no value for {missing}: run fleet.startup_program first")
        communicator.init_dense({n: scope.get(n) for n in dense})
        _give_servers_state(split_, communicator, _minimized(state, "init_worker")[0], scope)
    else:
        for name, value in communicator.pull_all().items():
            scope.set(name, np.array(value, copy=True))  # a value out of Ray's object store is read-only
    scope.set(PS_CLIENT, communicator)
    state.communicator = communicator
    if role.index == 0 and role.checkpoint_dir:
        program = _minimized(state, "init_worker")[0]
        communicator.checkpoint = functools.partial(_checkpoint, state, scope, role.checkpoint_dir, program)
        communicator.checkpoint_every = role.checkpoint_every
        if role.restart == 0:  # a server restarted from now on has a checkpoint to come back from
            _checkpoint(state, scope, role.checkpoint_dir, program, 0)


def communicator() -> Communicator:
    """This worker's communicator (after ``init_worker``)."""
    return _communicator_of(_fleet())


def _communicator_of(state: _Fleet) -> Communicator:
    if state.communicator is None:
        raise BlockirError("call fleet.init_worker() first")
    return state.communicator


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
        state.backend.unpublish(state.role.run, state.role.index)
        state.server = None


def shrink(threshold: int) -> dict[str, int]:
    """Drop, on every server, the table rows no pull or push carried for ``threshold`` save intervals (completed
    saves, counted per row), as a streaming job does to keep its tables from only growing; they are gone from
    the next save. Rows dropped per table, over all servers."""
    dropped: dict[str, int] = {}
    for counts in communicator().transport.call_all(ParameterServerAPI.shrink, threshold):
        for table, count in counts.items():
            dropped[table] = dropped.get(table, 0) + count
    return dropped


def barrier_worker() -> None:
    """Wait until every worker reached this barrier."""
    communicator().transport.call(0, ParameterServerAPI.barrier, _fleet().role.index)


def stop_worker() -> None:
    """Push what is queued, stop the communicator, and tell the servers this worker is done."""
    state = _fleet()
    mine = communicator()
    try:
        mine.stop()
    finally:
        try:
            mine.transport.call_all(ParameterServerAPI.finish, state.role.index)
        finally:
            mine.close()
            state.communicator = None
