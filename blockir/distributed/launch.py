"""``blockir launch``: run a fleet script once per role, servers and workers, and report how each ended.

:func:`launch` runs ``script`` (with ``args`` as its ``sys.argv[1:]``) as
``servers`` servers and ``workers`` workers of one training run:

- backend ``inprocess``: every role is a thread of this process, in a
  ``contextvars.Context`` of its own (its role, default programs, name
  generator and global scope); the servers are objects of this process.
- backend ``ray``: every role is a Ray actor (:mod:`blockir.distributed.ray_backend`).

Each role's output goes to this process's standard output and error, every
line prefixed with the role (``[worker 0] ...``). A role that fails is run
again, up to ``max_restarts`` times (each role its own count): a worker always
(the Ray backend restarts its actor's process when it died, killed say; the
restarted script rejoins with ``fleet.init_worker``), a server with the Ray
backend when there is a ``checkpoint_dir`` to restore it from (worker 0
checkpoints there once it joined and every ``checkpoint_every`` steps; see
:mod:`blockir.distributed.fleet`). In-process, servers are objects of this
process that workers hold: a server's failure ends the run. When a role fails
for good, the others are stopped (the servers refuse pushes and wake every
waiter, so no worker waits for ever) and :func:`launch` returns a
:class:`LaunchResult` naming the roles that failed and why; ``blockir launch``
then exits 1.

The script is compiled before any role starts: one that does not exist, is a
directory, is binary or does not compile is a :class:`BlockirError`. A role's
failure is one line (:func:`error_line`): a :class:`BlockirError` prints
nothing more, another exception its traceback from the script's first frame
on (``verbose``: every traceback, whole). A role that calls ``sys.exit(N)`` or
``os._exit(N)``, N not 0, failed with ``exited with status N``: while roles run
in a process, ``os._exit`` called by one of them ends that role, not the
process.
"""

from __future__ import annotations

import contextvars
import io
import os
import secrets
import sys
import threading
import uuid
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from types import CodeType
from typing import Any, TextIO

from blockir.distributed.backend import InProcessBackend
from blockir.distributed.role import LaunchResult, Role, restartable, role_name
from blockir.distributed.runner import error_line, restarting, run_once
from blockir.errors import BlockirError

__all__ = ["LaunchResult", "check_script", "cluster_env", "error_line", "launch", "roles"]


def roles(
    servers: int,
    workers: int,
    run: str,
    backend: str,
    timeout: float = 300.0,
    checkpoint_dir: str | None = None,
    checkpoint_every: int = 0,
) -> list[Role]:
    """The roles of a run: servers first."""
    counts = {"server": servers, "worker": workers}
    return [
        Role(kind, k, servers, workers, run, backend, timeout, 0, checkpoint_dir, checkpoint_every)
        for kind in ("server", "worker")
        for k in range(counts[kind])
    ]


def launch(
    script: str | Path | Callable[[], Any],
    servers: int,
    workers: int,
    args: Sequence[str] = (),
    backend: str = "inprocess",
    timeout: float = 300.0,
    address: str | None = None,
    max_restarts: int = 0,
    checkpoint_dir: str | Path | None = None,
    checkpoint_every: int = 0,
    verbose: bool = False,
    keep_logs: bool = False,
    resources: Mapping[str, Mapping[str, float]] | None = None,
) -> LaunchResult:
    """Run ``script`` (a file, or a callable for tests) once per role (module docstring). ``verbose``: a role's
    every error with its whole traceback; ``keep_logs`` (Ray backend, a cluster it starts): keep the cluster's
    session files, and say where; ``resources`` (Ray backend): the Ray resources each role needs, by role name
    (``{"server 0": {"big-memory": 1}}``), which places it on the nodes of a cluster that have them."""
    if not isinstance(servers, int) or servers < 1:
        raise BlockirError(f"launch: --servers must be at least 1, got {servers}")
    if not isinstance(workers, int) or workers < 1:
        raise BlockirError(f"launch: --workers must be at least 1, got {workers}")
    if not isinstance(max_restarts, int) or max_restarts < 0:
        raise BlockirError(f"launch: --max-restarts must be at least 0, got {max_restarts}")
    if not isinstance(checkpoint_every, int) or checkpoint_every < 0:
        raise BlockirError(f"launch: --checkpoint-every must be at least 0 steps, got {checkpoint_every}")
    if checkpoint_every and checkpoint_dir is None:
        raise BlockirError("launch: --checkpoint-every needs --checkpoint-dir (where the checkpoints go)")
    if backend not in ("inprocess", "ray"):
        raise BlockirError(f"launch: unknown backend {backend!r} (expected inprocess or ray)")
    if keep_logs and (backend != "ray" or address is not None):
        raise BlockirError(
            "launch: --keep-logs keeps the files of the Ray cluster a launch starts: it needs --backend ray "
            "and no --address"
        )
    if not callable(script):
        check_script(script)
    run = uuid.uuid4().hex[:12]
    where = None if checkpoint_dir is None else str(Path(checkpoint_dir).resolve())
    all_roles = roles(servers, workers, run, backend, timeout, where, checkpoint_every)
    unknown = sorted(set(resources or {}) - {role_name(r) for r in all_roles})
    if unknown:
        raise BlockirError(f"launch: resources for {unknown}, which are not roles of this launch")
    if resources and backend != "ray":
        raise BlockirError("launch: resources place roles on the nodes of a Ray cluster: they need --backend ray")
    if backend == "inprocess":
        return _launch_inprocess(script, all_roles, list(args), max_restarts, verbose)
    if address is None:  # a cluster this launch may start: its settings before Ray is imported, which reads them
        os.environ.update(cluster_env(os.environ, ray_imported="ray" in sys.modules))
    try:
        from blockir.distributed.ray_backend import launch_ray
    except ModuleNotFoundError as e:
        if e.name != "ray":
            raise
        raise BlockirError("launch: --backend ray needs Ray, not installed here (pip install 'blockir[ray]')") from None
    return launch_ray(script, all_roles, list(args), address, max_restarts, verbose, keep_logs, resources)


def cluster_env(environ: Mapping[str, str], ray_imported: bool = False) -> dict[str, str]:
    """What a launch without ``--address`` adds to ``environ`` (its process's environment) for the local Ray
    cluster it starts, whose daemons and role actors inherit it: usage statistics off, and Ray's token
    authentication on (``RAY_AUTH_MODE=token``) with a new random token for this launch (``RAY_AUTH_TOKEN``), so
    that nobody who reaches the cluster's ports runs code on it without the token. The environment's own choices
    stand: a ``RAY_AUTH_MODE`` (the tests' loopback-only network namespace sets ``disabled``), a token
    (``RAY_AUTH_TOKEN`` or ``RAY_AUTH_TOKEN_PATH``). Ray 2.60 reads its authentication mode when it is imported:
    where it was imported already (``ray_imported``), the mode is left to Ray, whose default for a new local
    cluster is token authentication with the token of ``~/.ray/auth_token`` (made if missing)."""
    env = {"RAY_USAGE_STATS_ENABLED": "0"}
    if "RAY_AUTH_MODE" in environ or ray_imported:
        return env
    env["RAY_AUTH_MODE"] = "token"
    if "RAY_AUTH_TOKEN" not in environ and "RAY_AUTH_TOKEN_PATH" not in environ:
        env["RAY_AUTH_TOKEN"] = secrets.token_hex(32)  # as Ray makes one: 256 random bits
    return env


def check_script(script: str | Path) -> CodeType:
    """The script compiled, or the one-line reason it cannot run: it does not exist, is not a file, is binary or
    does not compile."""
    path = Path(script)
    name = repr(str(path))
    if path.is_dir():
        raise BlockirError(f"launch: the script {name} is a directory, not a file")
    if not path.exists():
        raise BlockirError(f"launch: the script {name} does not exist")
    if not path.is_file():
        raise BlockirError(f"launch: the script {name} is not a regular file")
    try:
        source = path.read_bytes()
    except OSError as e:
        raise BlockirError(f"launch: cannot read the script {name}: {e.strerror or e}") from None
    if b"\0" in source:
        raise BlockirError(f"launch: the script {name} is a binary file, not a Python script")
    try:
        return compile(source, str(path), "exec", dont_inherit=True)
    except SyntaxError as e:
        if (e.msg or "").startswith("(unicode error)"):
            raise BlockirError(f"launch: the script {name} is not Python source: {e.msg}") from None
        where = f", line {e.lineno}" if e.lineno else ""
        raise BlockirError(f"launch: the script {name} does not compile: {e.msg} ({path.name}{where})") from None
    except ValueError as e:  # null bytes, on Pythons that say so this way
        raise BlockirError(f"launch: the script {name} is not Python source: {e}") from None


def _launch_inprocess(
    script: str | Path | Callable[[], Any], all_roles: list[Role], args: list[str], max_restarts: int, verbose: bool
) -> LaunchResult:
    result = LaunchResult()
    lock = threading.Lock()
    out, err = _Prefixed(sys.stdout), _Prefixed(sys.stderr)
    registry = InProcessBackend()  # this launch's servers, for its roles only

    def body(role: Role) -> None:
        _current_role.set(role_name(role))
        while (error := run_once(script, role, registry, args, verbose)) is not None:
            if not restartable(role, max_restarts):
                fail(role, error)
                return
            with lock:
                role = restarting(result, role, error, max_restarts)

    def fail(role: Role, message: str) -> None:
        with lock:
            result.failures[role_name(role)] = message
        registry.stop_run(role.run)

    saved, argv = (sys.stdout, sys.stderr), sys.argv
    sys.stdout, sys.stderr = out, err
    try:
        threads = [
            threading.Thread(
                target=contextvars.Context().run, args=(body, role), name=f"blockir-{role_name(role)}", daemon=True
            )
            for role in all_roles
        ]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
    finally:
        out.flush()
        err.flush()
        sys.stdout, sys.stderr = saved
        sys.argv = argv
        registry.stop_run(all_roles[0].run)
        registry.end_run(all_roles[0].run)
    return result


_current_role: contextvars.ContextVar[str | None] = contextvars.ContextVar("blockir_launch_role", default=None)


class _Prefixed(io.TextIOBase):
    """A stream writing each whole line of a role's thread to ``target`` prefixed with the role's name."""

    def __init__(self, target: TextIO) -> None:
        self.target = target
        self._partial: dict[str | None, str] = {}
        self._lock = threading.Lock()

    def write(self, text: str) -> int:
        role = _current_role.get()
        with self._lock:
            pending = self._partial.get(role, "") + text
            *lines, rest = pending.split("\n")
            self._partial[role] = rest
            for line in lines:
                self.target.write(f"[{role}] {line}\n" if role else f"{line}\n")
        return len(text)

    def flush(self) -> None:
        with self._lock:
            for role, rest in self._partial.items():
                if rest:
                    self.target.write(f"[{role}] {rest}\n" if role else rest)
            self._partial.clear()
            self.target.flush()
