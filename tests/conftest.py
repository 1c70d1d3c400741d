import os
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest
from hypothesis import HealthCheck, settings

import blockir as bir
import blockir.io
import blockir.parallel  # noqa: F401  (with blockir.io: every op and pass the library registers)
from blockir.ir.schema import registered
from blockir.passes import registered_passes
from tests.registries import ops_registered
from tests.runtime import schemas as runtime_schemas

# What the library registers; test-only ops and passes come and go with the fixtures that use them.
LIBRARY_OPS, LIBRARY_PASSES = set(registered()), set(registered_passes())

# CI: bounded examples, no deadline (2 shared cores make timings noisy); dev: more examples, for the tests that take
# their number from the profile (the costly round trips and fuzzers of tests/ir among them).
settings.register_profile(
    "ci", max_examples=100, deadline=None, derandomize=True, suppress_health_check=[HealthCheck.too_slow]
)
settings.register_profile("dev", max_examples=300, deadline=None)
settings.load_profile("ci" if os.environ.get("CI") else os.environ.get("HYPOTHESIS_PROFILE", "dev"))


@pytest.fixture(autouse=True)
def _fresh_names() -> Iterator[None]:
    """Each test builds with fresh unique names and name-scope counters (the generator holds both),
    whatever ran before it."""
    with bir.unique_name.guard():
        yield


@pytest.fixture(autouse=True)
def _temporary_files_in_tmp_path(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """What the code under test puts in the temporary directory (a failing pass's reproducer) goes to the
    test's own directory, removed with it, not to the system's."""
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))


@pytest.fixture(scope="session", autouse=True)
def _registries_left_as_found() -> Iterator[None]:
    """Fails the session when a test-only op or pass outlives the fixture that registered it."""
    yield
    assert set(registered()) == LIBRARY_OPS, f"ops left registered: {sorted(set(registered()) - LIBRARY_OPS)}"
    leaked = sorted(set(registered_passes()) - LIBRARY_PASSES)
    assert set(registered_passes()) == LIBRARY_PASSES, f"passes left registered: {leaked}"


@pytest.fixture(scope="module")
def rt_ops() -> Iterator[None]:
    """The runtime tests' ``rt_*`` op schemas (tests/runtime/schemas.py), registered for one module."""
    with ops_registered(*runtime_schemas.SCHEMAS):
        yield


@pytest.fixture
def exe() -> bir.Executor:
    return bir.Executor("cpu")


@pytest.fixture
def scope() -> bir.Scope:
    return bir.Scope()
