"""Test-only ops and passes, registered for the tests that use them and removed afterwards.

A module's fixture wraps its tests, e.g.::

    @pytest.fixture(scope="module", autouse=True)
    def _ops() -> Iterator[None]:
        with ops_registered(*SCHEMAS):
            yield
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager

from blockir.ir.schema import OpSchema, register, unregister
from blockir.passes import Pass, register_pass, unregister_pass


@contextmanager
def ops_registered(*schemas: OpSchema) -> Iterator[None]:
    """``schemas`` in the op registry inside the block, gone after it."""
    done: list[OpSchema] = []
    try:
        for schema in schemas:
            done.append(register(schema))
        yield
    finally:
        for schema in done:
            unregister(schema.type)


@contextmanager
def passes_registered(*classes: type[Pass]) -> Iterator[None]:
    """``classes`` in the pass registry inside the block, gone after it."""
    done: list[type[Pass]] = []
    try:
        for cls in classes:
            done.append(register_pass(cls))
        yield
    finally:
        for cls in done:
            unregister_pass(cls.name)
