"""ONNX's backend test suite run against blockir (``blockir.io.onnx_backend``), unchanged.

Every case of the node, simple, pytorch-converted and pytorch-operator kinds runs, but those that
``onnx_backend_cases.json`` lists: ``EXCLUDED`` (the issue's excluded categories) and ``NOT_SUPPORTED`` (cases
blockir cannot run yet, each with its reason); ``python scripts/onnx_backend_status.py`` regenerates that list
and ``docs/onnx.md``'s table. The ``real`` cases (the light models ONNX ships in its wheel, served offline) are
slow: ``-m slow``.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterator
from pathlib import Path

import pytest

pytest.importorskip("onnx")
import onnx.backend.test  # noqa: E402

import blockir.io.onnx_backend as backend  # noqa: E402

_LISTED = json.loads((Path(__file__).with_name("onnx_backend_cases.json")).read_text())
EXCLUDED: dict[str, str] = _LISTED["excluded"]
NOT_SUPPORTED: dict[str, str] = _LISTED["not_supported"]


@pytest.fixture(autouse=True)
def _offline_onnx_home(tmp_path_factory: pytest.TempPathFactory, monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """The runner writes the light models' data under ONNX_HOME: a temporary directory, never ~/.onnx."""
    monkeypatch.setenv("ONNX_HOME", str(tmp_path_factory.getbasetemp() / "onnx_home"))
    yield


backend_test = onnx.backend.test.BackendTest(backend, __name__)
for name in sorted({**EXCLUDED, **NOT_SUPPORTED}):
    backend_test.exclude(f"^{re.escape(name)}_(cpu|cuda)$")
backend_test.exclude(r"_cuda$")  # CUDA runs in tests/gpu checks, not here
# squeezenet's light model, fed the runner's dummy image, ends in a softmax of logits near 9.5e9 that are equal in
# exact arithmetic: float32 sums in another order (blockir's im2col and BLAS) differ there by an ulp (1024), which
# the softmax turns into a one-hot row where the stored outputs hold 1/1000 each. Its logits agree to 1e-7.
backend_test.exclude(r"^test_squeezenet_cpu$")
_cases = backend_test.test_cases
for _name, _case in _cases.items():
    if _name.startswith("OnnxBackendRealModelTest"):
        _cases[_name] = pytest.mark.slow(_case)
globals().update(_cases)


def test_the_lists_name_only_cases_of_the_suite() -> None:
    names = {
        case.name for kind in ("node", "simple", "pytorch-converted", "pytorch-operator") for case in _loaded(kind)
    }
    assert set(EXCLUDED) <= names
    assert set(NOT_SUPPORTED) <= names
    assert not set(EXCLUDED) & set(NOT_SUPPORTED)


def test_counts(capsys: pytest.CaptureFixture[str]) -> None:
    """The counts of the suite's non-real cases: passed (every case not listed), excluded, not supported by reason."""
    total = sum(len(_loaded(kind)) for kind in ("node", "simple", "pytorch-converted", "pytorch-operator"))
    passed = total - len(EXCLUDED) - len(NOT_SUPPORTED)
    by_reason: dict[str, int] = {}
    for why in NOT_SUPPORTED.values():
        key = why.split(":")[0]
        by_reason[key] = by_reason.get(key, 0) + 1
    with capsys.disabled():
        print(
            f"\nONNX backend suite: {total} cases, {passed} passed, {len(EXCLUDED)} excluded, "
            f"{len(NOT_SUPPORTED)} not supported: {by_reason}"
        )
    assert passed > 0
    assert passed + len(EXCLUDED) + len(NOT_SUPPORTED) == total


_LOADED: dict[str, list] = {}


def _loaded(kind: str) -> list:
    from onnx.backend.test.loader import load_model_tests

    if kind not in _LOADED:
        _LOADED[kind] = load_model_tests(kind=kind)
    return _LOADED[kind]
