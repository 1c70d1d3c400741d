"""The DSL's building state: default programs, guards, and how every DSL op is appended.

Like Fluid 1.x, layers write into the *default main program* and parameters'
initializers into the *default startup program*; :func:`program_guard` swaps
both for the duration of a ``with`` block (these live in the IR,
:mod:`blockir.ir.defaults`, and are re-exported here). :func:`device_guard` and
:func:`name_scope` nest (the innermost wins) and tag every op built inside with
the ``op_device`` and ``op_namescope`` attributes.

All of this state is held in context variables, as the unique-name generator
is (:mod:`blockir.dsl.unique_name`): a guard entered in one thread is seen only
there, so two threads can build programs at once.

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
from contextvars import ContextVar
from typing import Any

from blockir.dsl import unique_name
from blockir.dsl.unique_name import NameScope
from blockir.errors import BlockirError, ShapeError
from blockir.ir.core import Block, Operator
from blockir.ir.defaults import (
    default_main_program,
    default_startup_program,
    program_guard,
    switch_main_program,
    switch_startup_program,
)
from blockir.ir.devices import require_device
from blockir.ir.schema import OpRole, find

__all__ = [
    "default_main_program",
    "default_startup_program",
    "device_guard",
    "name_scope",
    "program_guard",
    "switch_main_program",
    "switch_startup_program",
]

_device: ContextVar[str | None] = ContextVar("blockir_device", default=None)
_name_scope: ContextVar[NameScope | None] = ContextVar("blockir_name_scope", default=None)


@contextlib.contextmanager
def device_guard(device: str | None = None) -> Iterator[None]:
    """Place every op built inside on ``device`` (its ``op_device`` attribute).

    Guards nest and the innermost wins; ``device_guard(None)`` builds ops
    without a device inside an outer guard (the placement pass decides).
    """
    if device is not None:
        require_device(device, "device_guard")
    token = _device.set(device)
    try:
        yield
    finally:
        _device.reset(token)


def current_device() -> str | None:
    """The device of the innermost :func:`device_guard`, None outside any."""
    return _device.get()


def _current_scope() -> NameScope:
    scope = _name_scope.get()
    return scope if scope is not None else unique_name.current().scopes


@contextlib.contextmanager
def name_scope(prefix: str) -> Iterator[None]:
    """Tag every op built inside with ``op_namescope`` = ``/outer/prefix/`` (for viewers).

    A prefix repeated under one parent scope gets ``_1``, ``_2``, ...; the counts
    belong to the unique-name generator, so :func:`blockir.dsl.unique_name.guard`
    starts them afresh.
    """
    token = _name_scope.set(_current_scope().child(_checked_prefix(prefix)))
    try:
        yield
    finally:
        _name_scope.reset(token)


def _checked_prefix(prefix: object) -> str:
    if isinstance(prefix, str) and prefix and "/" not in prefix:
        return prefix
    raise BlockirError(f"name_scope prefix must be a non-empty string without '/', got {prefix!r}")


def current_name_scope() -> str:
    """The full name of the innermost :func:`name_scope` (``/`` outside any)."""
    return _current_scope().full_name()


@contextlib.contextmanager
def sub_block() -> Iterator[Block]:
    """A new sub-block of the default main program's current block, current inside the ``with`` (the ops of a
    loop, a branch, a go block)."""
    program = default_main_program()
    block = program.create_block()
    try:
        yield block
    finally:
        program.rollback()


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
        attrs["op_device"] = require_device(place, "op_device")
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
