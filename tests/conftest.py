import os
from collections.abc import Iterator

import pytest
from hypothesis import HealthCheck, settings

import blockir as bir

# CI: bounded examples, no deadline (2 shared cores make timings noisy).
settings.register_profile(
    "ci", max_examples=300, deadline=None, derandomize=True, suppress_health_check=[HealthCheck.too_slow]
)
settings.register_profile("dev", max_examples=100, deadline=None)
settings.load_profile("ci" if os.environ.get("CI") else os.environ.get("HYPOTHESIS_PROFILE", "dev"))


@pytest.fixture(autouse=True)
def _fresh_names() -> Iterator[None]:
    """Each test builds with fresh unique names and name-scope counters (the generator holds both),
    whatever ran before it."""
    with bir.unique_name.guard():
        yield


@pytest.fixture
def exe() -> bir.Executor:
    return bir.Executor("cpu")


@pytest.fixture
def scope() -> bir.Scope:
    return bir.Scope()
