"""Running a fleet script as one role, as both launchers do (:mod:`blockir.distributed.launch` in threads of its
process, :mod:`blockir.distributed.ray_backend` in Ray actors): the script in a context of its own
(:func:`run_role`), its failure as one line (:func:`run_once`, :func:`error_line`: a :class:`BlockirError`'s
message, another exception's type and first line, its traceback from the script's first frame on printed first),
``sys.exit(N)`` and ``os._exit(N)`` as ``exited with status N`` (``os._exit`` called by a role ends that role,
not the process), and a failed role's next run (:func:`restarting`).
"""

from __future__ import annotations

import builtins
import contextvars
import dataclasses
import os
import sys
import threading
import traceback
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from types import TracebackType
from typing import Any, NoReturn

from blockir.distributed import fleet
from blockir.distributed.backend import Backend
from blockir.distributed.fleet import set_context_role
from blockir.distributed.role import LaunchResult, Role, role_name
from blockir.dsl import unique_name
from blockir.errors import BlockirError
from blockir.ir import Program
from blockir.ir.defaults import switch_main_program, switch_startup_program
from blockir.runtime.scope import Scope, set_context_scope

__all__ = ["error_line", "exit_text", "restarting", "role_traceback", "run_once", "run_role"]


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


_LAUNCHER_FILES = {__file__, *(str(Path(__file__).with_name(f)) for f in ("launch.py", "ray_backend.py"))}


def role_traceback(e: BaseException, verbose: bool) -> str:
    """``e``'s traceback; without ``verbose``, from the script's first frame on (not the launcher's own)."""
    tb: TracebackType | None = e.__traceback__
    if not verbose:
        while tb is not None and tb.tb_frame.f_code.co_filename in _LAUNCHER_FILES:
            tb = tb.tb_next
        tb = tb or e.__traceback__
    return "".join(traceback.format_exception(type(e), e, tb))


def run_once(
    script: str | Path | Callable[[], Any], role: Role, backend: Backend, args: list[str], verbose: bool
) -> str | None:
    """Run ``script`` as ``role`` of ``backend`` once (in the current context); None when it ended well, else its
    failure's line
    (:func:`error_line`; the traceback printed first on standard error where the module docstring says)."""
    try:
        with _exits_caught():
            run_role(script, role, backend, args)
    except _RoleExit as e:
        return exit_text(e.status)
    except SystemExit as e:
        return exit_text(e.code)
    except BaseException as e:
        if verbose or not isinstance(e, BlockirError):
            print(role_traceback(e, verbose), file=sys.stderr, end="", flush=True)
        return error_line(e)
    return None


def run_role(script: str | Path | Callable[[], Any], role: Role, backend: Backend, args: list[str]) -> None:
    """Run ``script`` as ``role`` of ``backend`` in the current context, which gets its own defaults (programs,
    names, scope)."""
    set_context_role(role, backend)
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
