"""Unique names for layers, parameters and temporaries, as Fluid makes them.

``generate("fc")`` gives ``fc_0``, then ``fc_1``; a layer named ``fc_0`` names its
weight ``generate("fc_0.w")`` = ``fc_0.w_0`` and its temporaries ``fc_0.tmp_0``,
``fc_0.tmp_1``, ... Counters live in a generator, with the counts of
:func:`blockir.dsl.name_scope` prefixes (``/block/``, ``/block_1/``); :func:`guard`
installs a fresh one for the duration of a ``with`` block, so that building the
same network twice under two guards gives the same names and name scopes.

The current generator is a context variable: a guard entered in one thread is
seen only there. Outside any guard every thread shares one global generator,
as in Fluid.
"""

from __future__ import annotations

import collections
import contextlib
from collections.abc import Iterator
from contextvars import ContextVar

__all__ = ["NameScope", "UniqueNameGenerator", "current", "generate", "guard", "switch"]


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


class UniqueNameGenerator:
    """Per-key counters, every name starting with ``prefix``; and the root of a name-scope tree."""

    def __init__(self, prefix: str = "") -> None:
        self.prefix = prefix
        self.ids: collections.defaultdict[str, int] = collections.defaultdict(int)
        self.scopes = NameScope()

    def __call__(self, key: str) -> str:
        index = self.ids[key]
        self.ids[key] += 1
        return f"{self.prefix}{key}_{index}"


_global_generator = UniqueNameGenerator()
_generator: ContextVar[UniqueNameGenerator | None] = ContextVar("blockir_unique_name", default=None)  # None: global


def current() -> UniqueNameGenerator:
    """The generator names come from here (in this thread or task)."""
    generator = _generator.get()
    return _global_generator if generator is None else generator


def generate(key: str) -> str:
    """The next unique name for ``key``: ``key_0``, ``key_1``, ..."""
    return current()(key)


def switch(new_generator: UniqueNameGenerator | None = None) -> UniqueNameGenerator:
    """Install ``new_generator`` (a fresh one when None) in the current context; return the one it replaces."""
    old = current()
    _generator.set(new_generator if new_generator is not None else UniqueNameGenerator())
    return old


@contextlib.contextmanager
def guard(new_generator: UniqueNameGenerator | str | None = None) -> Iterator[None]:
    """Use a fresh generator (or ``new_generator``; a string is a name prefix) inside the block."""
    if isinstance(new_generator, str):
        new_generator = UniqueNameGenerator(new_generator)
    token = _generator.set(new_generator if new_generator is not None else UniqueNameGenerator())
    try:
        yield
    finally:
        _generator.reset(token)
