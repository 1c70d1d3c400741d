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
"""

from __future__ import annotations

import builtins
import contextvars
import dataclasses
import io
import sys
import threading
import traceback
import uuid
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TextIO

from blockir.distributed import fleet
from blockir.distributed.backend import InProcessBackend
from blockir.distributed.fleet import Role, set_context_role
from blockir.dsl import unique_name
from blockir.errors import BlockirError
from blockir.ir import Program
from blockir.ir.defaults import switch_main_program, switch_startup_program
from blockir.runtime.scope import Scope, set_context_scope

__all__ = ["LaunchResult", "launch", "roles"]


@dataclass
class LaunchResult:
    """How the roles ended: ``failures`` maps a role's name (``worker 1``) to its error's text, ``restarts`` to
    the errors after which it was restarted."""

    failures: dict[str, str] = field(default_factory=dict)
    restarts: dict[str, list[str]] = field(default_factory=dict)

    @property
    def ok(self) -> bool:
        return not self.failures


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


def restartable(role: Role, max_restarts: int) -> bool:
    """Whether the launcher runs ``role`` again when it fails (module docstring)."""
    if role.restart >= max_restarts:
        return False
    return role.kind == "worker" or (role.backend == "ray" and role.checkpoint_dir is not None)


def role_name(role: Role) -> str:
    return f"{role.kind} {role.index}"


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
) -> LaunchResult:
    """Run ``script`` (a file, or a callable for tests) once per role (module docstring)."""
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
    if not callable(script):
        path = Path(script)
        if not path.is_file():
            raise BlockirError(f"launch: the script {str(path)!r} does not exist")
    run = uuid.uuid4().hex[:12]
    where = None if checkpoint_dir is None else str(Path(checkpoint_dir).resolve())
    all_roles = roles(servers, workers, run, backend, timeout, where, checkpoint_every)
    if backend == "inprocess":
        return _launch_inprocess(script, all_roles, list(args), max_restarts)
    if backend == "ray":
        from blockir.distributed.ray_backend import launch_ray

        return launch_ray(script, all_roles, list(args), address, max_restarts)
    raise BlockirError(f"launch: unknown backend {backend!r} (expected inprocess or ray)")


def run_role(script: str | Path | Callable[[], Any], role: Role, args: list[str]) -> None:
    """Run ``script`` as ``role`` in the current context, which gets its own defaults (programs, names, scope)."""
    set_context_role(role)
    try:
        _run_script(script, args)
    finally:
        fleet.release()


def _run_script(script: str | Path | Callable[[], Any], args: list[str]) -> None:
    switch_main_program(Program())
    switch_startup_program(Program())
    unique_name.switch()
    set_context_scope(Scope())
    if callable(script):
        script()
        return
    # The roles of an in-process launch share sys.argv: each sets the same, and none restores it (a role that
    # ended would take it from one still starting); the launcher restores it once every role ended.
    sys.argv = [str(script), *args]
    here = str(Path(script).resolve().parent)
    if here not in sys.path:
        sys.path.insert(0, here)  # as `python script.py` has it: the script imports its neighbours
    # As runpy.run_path would, but leaving sys.modules["__main__"] alone: the roles run at once in threads,
    # and a module swapped in there by one of them would outlive it (multiprocessing re-imports it).
    path = Path(script)
    code = compile(path.read_text(encoding="utf-8"), str(path), "exec")
    exec(code, {"__name__": "__main__", "__file__": str(path), "__builtins__": builtins})


def restarting(result: LaunchResult, role: Role, error: str, max_restarts: int) -> Role:
    """Record that ``role`` failed with ``error`` and is run again; the role its next run plays."""
    name = role_name(role)
    result.restarts.setdefault(name, []).append(error)
    print(
        f"blockir launch: {name} failed ({error}); restarting it (restart {role.restart + 1} of {max_restarts})",
        file=sys.stderr,
        flush=True,
    )
    return dataclasses.replace(role, restart=role.restart + 1)


def _launch_inprocess(
    script: str | Path | Callable[[], Any], all_roles: list[Role], args: list[str], max_restarts: int
) -> LaunchResult:
    result = LaunchResult()
    lock = threading.Lock()
    out, err = _Prefixed(sys.stdout), _Prefixed(sys.stderr)

    def body(role: Role) -> None:
        _current_role.set(role_name(role))
        while (error := run_once(role)) is not None:
            if not restartable(role, max_restarts):
                fail(role, error)
                return
            with lock:
                role = restarting(result, role, error, max_restarts)

    def run_once(role: Role) -> str | None:
        """Run the role's script once; its error's text, or None when it ended well."""
        try:
            run_role(script, role, args)
        except SystemExit as e:
            if e.code not in (None, 0):
                return f"exited with {e.code}"
        except BaseException as e:
            print(traceback.format_exc(), file=sys.stderr, end="")
            return "".join(traceback.format_exception_only(type(e), e)).strip()
        return None

    def fail(role: Role, message: str) -> None:
        with lock:
            result.failures[role_name(role)] = message
        InProcessBackend().stop_run(role.run)

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
        InProcessBackend().stop_run(all_roles[0].run)
        InProcessBackend().end_run(all_roles[0].run)
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
