"""The DSL's building state: default programs, guards, and how every DSL op is appended.

Like Fluid 1.x, layers write into the *default main program* and parameters'
initializers into the *default startup program*; :func:`program_guard` swaps
both for the duration of a ``with`` block. :func:`device_guard` and
:func:`name_scope` nest (the innermost wins) and tag every op built inside with
the ``op_device`` and ``op_namescope`` attributes.

Every op the DSL creates goes through :func:`append_op`, which adds the common
attributes (``op_role``, ``op_role_var``, ``op_namescope``, ``op_device`` last, as
the text form expects), derives the ``seed`` of random ops from the program's
``random_seed``, runs the schema's shape/dtype inference and names the layer
when inference rejects the op.
"""

from __future__ import annotations

import contextlib
import hashlib
from collections.abc import Iterator
from typing import Any

from blockir.errors import BlockirError, ShapeError
from blockir.ir.core import Block, Operator, Program
from blockir.ir.schema import OpRole, find
from blockir.ir.verify import is_valid_device

__all__ = [
    "default_main_program",
    "default_startup_program",
    "device_guard",
    "name_scope",
    "program_guard",
    "switch_main_program",
    "switch_startup_program",
]

_main_program = Program()
_startup_program = Program()
_current_device: str | None = None


def default_main_program() -> Program:
    """The program layers append their ops to (outside any :func:`program_guard`, a global one)."""
    return _main_program


def default_startup_program() -> Program:
    """The program parameters' initializers go to (outside any :func:`program_guard`, a global one)."""
    return _startup_program


def switch_main_program(program: Program) -> Program:
    """Make ``program`` the default main program; return the previous one."""
    global _main_program
    _check_program(program, "main_program")
    previous, _main_program = _main_program, program
    return previous


def switch_startup_program(program: Program) -> Program:
    """Make ``program`` the default startup program; return the previous one."""
    global _startup_program
    _check_program(program, "startup_program")
    previous, _startup_program = _startup_program, program
    return previous


def _check_program(program: object, what: str) -> None:
    if not isinstance(program, Program):
        raise BlockirError(f"{what} must be a blockir Program, got {type(program).__name__}")


@contextlib.contextmanager
def program_guard(main_program: Program, startup_program: Program | None = None) -> Iterator[None]:
    """Build into ``main_program`` (and put initializers into ``startup_program``) inside the block."""
    _check_program(main_program, "main_program")
    if startup_program is not None:
        _check_program(startup_program, "startup_program")
    old_main = switch_main_program(main_program)
    old_startup = switch_startup_program(startup_program) if startup_program is not None else None
    try:
        yield
    finally:
        switch_main_program(old_main)
        if old_startup is not None:
            switch_startup_program(old_startup)


def check_device(device: str, what: str = "device") -> str:
    """``device`` when it is ``cpu``, ``cpu:N``, ``cuda`` or ``cuda:N``; a clear error otherwise."""
    if not isinstance(device, str) or not is_valid_device(device):
        raise BlockirError(f"{what} {device!r} is not a valid device (expected cpu, cpu:N, cuda or cuda:N)")
    return device


@contextlib.contextmanager
def device_guard(device: str | None = None) -> Iterator[None]:
    """Place every op built inside on ``device`` (its ``op_device`` attribute).

    Guards nest and the innermost wins; ``device_guard(None)`` builds ops
    without a device inside an outer guard (the placement pass decides).
    """
    global _current_device
    if device is not None:
        check_device(device)
    previous, _current_device = _current_device, device
    try:
        yield
    finally:
        _current_device = previous


def current_device() -> str | None:
    """The device of the innermost :func:`device_guard`, None outside any."""
    return _current_device


class NameScope:
    """A node of the name-scope tree; a repeated prefix under one parent gets ``_1``, ``_2``, ..."""

    def __init__(self, name: str = "", parent: NameScope | None = None) -> None:
        self.name = name
        self.parent = parent
        self._children: dict[str, int] = {}

    def child(self, prefix: str) -> NameScope:
        count = self._children.get(prefix, 0)
        self._children[prefix] = count + 1
        return NameScope(prefix if count == 0 else f"{prefix}_{count}", self)

    def full_name(self) -> str:
        """``/outer/inner/``, or ``/`` for the root."""
        parts: list[str] = []
        scope: NameScope | None = self
        while scope is not None and scope.parent is not None:
            parts.append(scope.name)
            scope = scope.parent
        return "/" + "".join(p + "/" for p in reversed(parts))


_name_scope = NameScope()


@contextlib.contextmanager
def name_scope(prefix: str) -> Iterator[None]:
    """Tag every op built inside with ``op_namescope`` = ``/outer/prefix/`` (for viewers)."""
    global _name_scope
    if not isinstance(prefix, str) or not prefix or "/" in prefix:
        raise BlockirError(f"name_scope prefix must be a non-empty string without '/', got {prefix!r}")
    previous = _name_scope
    _name_scope = previous.child(prefix)
    try:
        yield
    finally:
        _name_scope = previous


def current_name_scope() -> str:
    """The full name of the innermost :func:`name_scope` (``/`` outside any)."""
    return _name_scope.full_name()


def derive_seed(program_seed: int, op_type: str, output: str) -> int:
    """A seed in [1, 2**31 - 1] for a random op, from the program seed and the op's output name.

    A stable hash (never Python's salted ``hash``): the same program built twice
    gets the same seeds, whatever order its ops later run in.
    """
    digest = hashlib.sha256(f"{program_seed}\0{op_type}\0{output}".encode()).digest()
    return int.from_bytes(digest[:4], "little") % (2**31 - 1) + 1


def append_op(
    block: Block,
    type: str,
    inputs: dict[str, Any] | None = None,
    outputs: dict[str, Any] | None = None,
    attrs: dict[str, Any] | None = None,
    *,
    layer: str | None = None,
    role: int = OpRole.FORWARD,
    role_var: list[str] | None = None,
    device: str | None = None,
    namescope: str | None = None,
    infer: bool = True,
) -> Operator:
    """Append a DSL op to ``block`` with the common attributes and inferred output shapes.

    ``device`` / ``namescope`` default (None) to the current guards; a string
    overrides them (``""``: none). A :class:`ShapeError` from inference is
    re-raised naming ``layer`` (the layer function the user called).
    """
    attrs = dict(attrs or {})
    schema = find(type)
    if schema is not None and schema.random and not attrs.get("seed"):
        attrs["seed"] = derive_seed(block.program.random_seed, type, _first_name(outputs))
    attrs["op_role"] = int(role)
    if role_var:
        attrs["op_role_var"] = list(role_var)
    scope = current_name_scope() if namescope is None else namescope
    if scope and scope != "/":
        attrs["op_namescope"] = scope
    place = current_device() if device is None else device
    if place:
        attrs["op_device"] = check_device(place, "op_device")
    try:
        return block.append_op(type, inputs, outputs, attrs, infer=infer)
    except ShapeError as err:
        if layer is None:
            raise
        raise ShapeError(f"layers.{layer}: {err}") from None


def _first_name(slots: dict[str, Any] | None) -> str:
    """The name of the first variable in ``slots`` (values: variables, names or lists of them)."""
    for value in (slots or {}).values():
        for item in value if isinstance(value, (list, tuple)) else [value]:
            return item if isinstance(item, str) else item.name
    return ""
