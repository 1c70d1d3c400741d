"""Unique names for layers, parameters and temporaries, as Fluid makes them.

``generate("fc")`` gives ``fc_0``, then ``fc_1``; a layer named ``fc_0`` names its
weight ``generate("fc_0.w")`` = ``fc_0.w_0`` and its temporaries ``fc_0.tmp_0``,
``fc_0.tmp_1``, ... Counters live in a generator; :func:`guard` installs a fresh
one for the duration of a ``with`` block, so that building the same network twice
under two guards gives the same names.
"""

from __future__ import annotations

import collections
import contextlib
from collections.abc import Iterator

__all__ = ["UniqueNameGenerator", "generate", "guard", "switch"]


class UniqueNameGenerator:
    """Per-key counters; every name starts with ``prefix``."""

    def __init__(self, prefix: str = "") -> None:
        self.prefix = prefix
        self.ids: collections.defaultdict[str, int] = collections.defaultdict(int)

    def __call__(self, key: str) -> str:
        index = self.ids[key]
        self.ids[key] += 1
        return f"{self.prefix}{key}_{index}"


_generator = UniqueNameGenerator()


def generate(key: str) -> str:
    """The next unique name for ``key``: ``key_0``, ``key_1``, ..."""
    return _generator(key)


def switch(new_generator: UniqueNameGenerator | None = None) -> UniqueNameGenerator:
    """Install ``new_generator`` (a fresh one when None); return the one it replaces."""
    global _generator
    old = _generator
    _generator = new_generator if new_generator is not None else UniqueNameGenerator()
    return old


@contextlib.contextmanager
def guard(new_generator: UniqueNameGenerator | str | None = None) -> Iterator[None]:
    """Use a fresh generator (or ``new_generator``; a string is a name prefix) inside the block."""
    if isinstance(new_generator, str):
        new_generator = UniqueNameGenerator(new_generator)
    old = switch(new_generator)
    try:
        yield
    finally:
        switch(old)
