"""The default programs (Fluid's ``default_main_program()`` and ``default_startup_program()``).

The DSL builds layers into the *default main program* and parameters' initializers
into the *default startup program*; the executor and persistence run or save the
default main program when given no program. :func:`program_guard` swaps both for
the duration of a ``with`` block.

They are context variables: a guard entered in one thread (or asyncio task) is
seen only there, so two threads can build two programs at once. Outside any guard
every thread sees the same two global programs, as in Fluid.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from contextvars import ContextVar

from blockir.errors import BlockirError
from blockir.ir.core import Program

__all__ = [
    "default_main_program",
    "default_startup_program",
    "program_guard",
    "switch_main_program",
    "switch_startup_program",
]

_global_main = Program()
_global_startup = Program()
# None: the global program.
_main: ContextVar[Program | None] = ContextVar("blockir_main_program", default=None)
_startup: ContextVar[Program | None] = ContextVar("blockir_startup_program", default=None)


def default_main_program() -> Program:
    """The program layers append their ops to (outside any :func:`program_guard`, a global one)."""
    program = _main.get()
    return _global_main if program is None else program


def default_startup_program() -> Program:
    """The program parameters' initializers go to (outside any :func:`program_guard`, a global one)."""
    program = _startup.get()
    return _global_startup if program is None else program


def _check(program: object, what: str) -> Program:
    if not isinstance(program, Program):
        raise BlockirError(f"{what} must be a blockir Program, got {type(program).__name__}")
    return program


def switch_main_program(program: Program) -> Program:
    """Make ``program`` the default main program (in the current context); return the previous one."""
    previous = default_main_program()
    _main.set(_check(program, "main_program"))
    return previous


def switch_startup_program(program: Program) -> Program:
    """Make ``program`` the default startup program (in the current context); return the previous one."""
    previous = default_startup_program()
    _startup.set(_check(program, "startup_program"))
    return previous


@contextlib.contextmanager
def program_guard(main_program: Program, startup_program: Program | None = None) -> Iterator[None]:
    """Build into ``main_program`` (and put initializers into ``startup_program``) inside the block."""
    _check(main_program, "main_program")
    if startup_program is not None:
        _check(startup_program, "startup_program")
    main = _main.set(main_program)
    startup = _startup.set(startup_program) if startup_program is not None else None
    try:
        yield
    finally:
        if startup is not None:
            _startup.reset(startup)
        _main.reset(main)
