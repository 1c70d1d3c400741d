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

import builtins
import contextvars
import dataclasses
import io
import os
import sys
import threading
import traceback
import uuid
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from types import CodeType, TracebackType
from typing import Any, NoReturn, TextIO

from blockir.distributed import fleet
from blockir.distributed.backend import InProcessBackend
from blockir.distributed.fleet import Role, set_context_role
from blockir.dsl import unique_name
from blockir.errors import BlockirError
from blockir.ir import Program
from blockir.ir.defaults import switch_main_program, switch_startup_program
from blockir.runtime.scope import Scope, set_context_scope

__all__ = ["LaunchResult", "check_script", "error_line", "launch", "roles"]


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
    verbose: bool = False,
    keep_logs: bool = False,
) -> LaunchResult:
    """Run ``script`` (a file, or a callable for tests) once per role (module docstring). ``verbose``: a role's
    every error with its whole traceback; ``keep_logs`` (Ray backend, a cluster it starts): keep the cluster's
    session files, and say where."""
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
    if backend == "inprocess":
        return _launch_inprocess(script, all_roles, list(args), max_restarts, verbose)
    try:
        from blockir.distributed.ray_backend import launch_ray
    except ModuleNotFoundError as e:
        if e.name != "ray":
            raise
        raise BlockirError("launch: --backend ray needs Ray, not installed here (pip install 'blockir[ray]')") from None
    return launch_ray(script, all_roles, list(args), address, max_restarts, verbose, keep_logs)


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


def error_line(e: BaseException) -> str:
    """A role's error in one line: a :class:`BlockirError`'s message, or another exception's type and the first
    line of its message."""
    if isinstance(e, BlockirError):
        return str(e)
    first = str(e).strip().splitlines()
    return f"{type(e).__name__}: {first[0]}" if first else type(e).__name__


def exit_text(code: object) -> str | None:
    """How a role that exited with ``code`` (``sys.exit``'s or ``os._exit``'s) failed; None for a good end."""
    if code is None or code == 0:
        return None
    if isinstance(code, int):
        return f"exited with status {int(code)}"  # sys.exit(True): 1
    return f"exited with status 1: {code}"  # sys.exit("message")


_LAUNCHER_FILES = {__file__, str(Path(__file__).with_name("ray_backend.py"))}


def role_traceback(e: BaseException, verbose: bool) -> str:
    """``e``'s traceback; without ``verbose``, from the script's first frame on (not the launcher's own)."""
    tb: TracebackType | None = e.__traceback__
    if not verbose:
        while tb is not None and tb.tb_frame.f_code.co_filename in _LAUNCHER_FILES:
            tb = tb.tb_next
        tb = tb or e.__traceback__
    return "".join(traceback.format_exception(type(e), e, tb))


def run_once(script: str | Path | Callable[[], Any], role: Role, args: list[str], verbose: bool) -> str | None:
    """Run ``script`` as ``role`` once (in the current context); None when it ended well, else its failure's line
    (:func:`error_line`; the traceback printed first on standard error where the module docstring says)."""
    try:
        with _exits_caught():
            run_role(script, role, args)
    except _RoleExit as e:
        return exit_text(e.status)
    except SystemExit as e:
        return exit_text(e.code)
    except BaseException as e:
        if verbose or not isinstance(e, BlockirError):
            print(role_traceback(e, verbose), file=sys.stderr, end="", flush=True)
        return error_line(e)
    return None


def run_role(script: str | Path | Callable[[], Any], role: Role, args: list[str]) -> None:
    """Run ``script`` as ``role`` in the current context, which gets its own defaults (programs, names, scope)."""
    set_context_role(role)
    token = _in_role.set(True)
    try:
        _run_script(script, args)
    finally:
        _in_role.reset(token)
        fleet.release()


class _RoleExit(BaseException):
    """``os._exit(status)`` called by a role while roles run in this process: it ends the role, not the process."""

    def __init__(self, status: int) -> None:
        super().__init__(status)
        self.status = status


_in_role: contextvars.ContextVar[bool] = contextvars.ContextVar("blockir_launch_in_role", default=False)
_exits_lock = threading.Lock()
_exits_users = 0
_real_exit = os._exit
_exits_pid = 0


def _role_exit(status: int) -> NoReturn:
    """``os._exit`` while roles run in this process: a role's call ends the role (:class:`_RoleExit`); any other
    (another thread's, or a child's after a fork) exits as ``os._exit`` does."""
    if _in_role.get() and os.getpid() == _exits_pid:
        raise _RoleExit(status)
    _real_exit(status)


@contextmanager
def _exits_caught() -> Iterator[None]:
    """While a role runs here: its ``os._exit`` is :func:`_role_exit` (installed while any role runs)."""
    global _exits_users, _exits_pid
    with _exits_lock:
        if _exits_users == 0:
            _exits_pid = os.getpid()
            os._exit = _role_exit
        _exits_users += 1
    try:
        yield
    finally:
        with _exits_lock:
            _exits_users -= 1
            if _exits_users == 0:
                os._exit = _real_exit


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
    code = compile(path.read_bytes(), str(path), "exec", dont_inherit=True)  # its encoding as Python reads it
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
    script: str | Path | Callable[[], Any], all_roles: list[Role], args: list[str], max_restarts: int, verbose: bool
) -> LaunchResult:
    result = LaunchResult()
    lock = threading.Lock()
    out, err = _Prefixed(sys.stdout), _Prefixed(sys.stderr)

    def body(role: Role) -> None:
        _current_role.set(role_name(role))
        while (error := run_once(script, role, args, verbose)) is not None:
            if not restartable(role, max_restarts):
                fail(role, error)
                return
            with lock:
                role = restarting(result, role, error, max_restarts)

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
