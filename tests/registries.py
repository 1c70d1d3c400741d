"""Test-only ops and passes, registered for the tests that use them and removed afterwards.

A module's fixture wraps its tests, e.g.::

    @pytest.fixture(scope="module", autouse=True)
    def _ops() -> Iterator[None]:
        with ops_registered(*SCHEMAS):
            yield
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator
from contextlib import contextmanager
from typing import TypeVar

from blockir.ir.schema import OpSchema, register, unregister
from blockir.passes import Pass, register_pass, unregister_pass

T = TypeVar("T")


@contextmanager
def ops_registered(*schemas: OpSchema) -> Iterator[None]:
    """``schemas`` in the op registry inside the block, gone after it."""
    with _registered(schemas, register, lambda schema: unregister(schema.type)):
        yield


@contextmanager
def passes_registered(*classes: type[Pass]) -> Iterator[None]:
    """``classes`` in the pass registry inside the block, gone after it."""
    with _registered(classes, register_pass, lambda cls: unregister_pass(cls.name)):
        yield


@contextmanager
def _registered(items: Iterable[T], add: Callable[[T], object], remove: Callable[[T], object]) -> Iterator[None]:
    done: list[T] = []
    try:
        for item in items:
            add(item)
            done.append(item)
        yield
    finally:
        for item in done:
            remove(item)
