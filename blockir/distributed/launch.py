"""``blockir launch``: run a fleet script once per role, servers and workers, and report how each ended.

:func:`launch` runs ``script`` (with ``args`` as its ``sys.argv[1:]``) as
``servers`` servers and ``workers`` workers of one training run:

- backend ``inprocess``: every role is a thread of this process, in a
  ``contextvars.Context`` of its own (its role, default programs, name
  generator and global scope); the servers are objects of this process.
- backend ``ray``: every role is a Ray actor (:mod:`blockir.distributed.ray_backend`).

Each role's output goes to this process's standard output and error, every
line prefixed with the role (``[worker 0] ...``). When a role fails, the
others are stopped (the servers refuse pushes and wake every waiter, so no
worker waits for ever) and :func:`launch` returns a :class:`LaunchResult`
naming the roles that failed and why; ``blockir launch`` then exits 1.
"""

from __future__ import annotations

import builtins
import contextvars
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
    """How the roles ended: ``failures`` maps a role's name (``worker 1``) to its error's text."""

    failures: dict[str, str] = field(default_factory=dict)

    @property
    def ok(self) -> bool:
        return not self.failures


def roles(servers: int, workers: int, run: str, backend: str, timeout: float = 300.0) -> list[Role]:
    """The roles of a run: servers first."""
    return [Role("server", k, servers, workers, run, backend, timeout) for k in range(servers)] + [
        Role("worker", k, servers, workers, run, backend, timeout) for k in range(workers)
    ]


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
) -> LaunchResult:
    """Run ``script`` (a file, or a callable for tests) once per role (module docstring)."""
    if not isinstance(servers, int) or servers < 1:
        raise BlockirError(f"launch: --servers must be at least 1, got {servers}")
    if not isinstance(workers, int) or workers < 1:
        raise BlockirError(f"launch: --workers must be at least 1, got {workers}")
    if not callable(script):
        path = Path(script)
        if not path.is_file():
            raise BlockirError(f"launch: the script {str(path)!r} does not exist")
    run = uuid.uuid4().hex[:12]
    if backend == "inprocess":
        return _launch_inprocess(script, roles(servers, workers, run, backend, timeout), list(args))
    if backend == "ray":
        from blockir.distributed.ray_backend import launch_ray

        return launch_ray(script, roles(servers, workers, run, backend, timeout), list(args), address)
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
    saved = sys.argv
    sys.argv = [str(script), *args]  # the roles share sys.argv: the same for all, set before any starts
    here = str(Path(script).resolve().parent)
    if here not in sys.path:
        sys.path.insert(0, here)  # as `python script.py` has it: the script imports its neighbours
    try:
        # As runpy.run_path would, but leaving sys.modules["__main__"] alone: the roles run at once in threads,
        # and a module swapped in there by one of them would outlive it (multiprocessing re-imports it).
        path = Path(script)
        code = compile(path.read_text(encoding="utf-8"), str(path), "exec")
        exec(code, {"__name__": "__main__", "__file__": str(path), "__builtins__": builtins})
    finally:
        sys.argv = saved


def _launch_inprocess(script: str | Path | Callable[[], Any], all_roles: list[Role], args: list[str]) -> LaunchResult:
    result = LaunchResult()
    lock = threading.Lock()
    out, err = _Prefixed(sys.stdout), _Prefixed(sys.stderr)

    def body(role: Role) -> None:
        _current_role.set(role_name(role))
        try:
            run_role(script, role, args)
        except SystemExit as e:
            if e.code not in (None, 0):
                fail(role, f"exited with {e.code}")
        except BaseException as e:
            fail(role, "".join(traceback.format_exception_only(type(e), e)).strip())
            print(traceback.format_exc(), file=sys.stderr, end="")

    def fail(role: Role, message: str) -> None:
        with lock:
            result.failures[role_name(role)] = message
        InProcessBackend().stop_run(role.run)

    saved = sys.stdout, sys.stderr
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
