"""The CUDA stand-in tier of the op tests: every case of ``test_op_cases`` with the kernels computing on
``tests/runtime/fake_cupy.py``'s arrays (``xp`` = the stand-in), against the same independent numpy values.

Runs everywhere (no GPU): the stand-in refuses what CuPy refuses, so a kernel that mixes host numpy arrays into
device arithmetic, or makes a host array where it should make a device one, fails here before it fails on a GPU.
``test_op_cases_cuda`` runs the same cases on a real GPU.
"""

from __future__ import annotations

import pytest

from tests.ops.harness import Case, check_forward, check_grad
from tests.ops.test_op_cases import _params
from tests.runtime import fake_cupy


@pytest.fixture
def standin(monkeypatch: pytest.MonkeyPatch) -> fake_cupy.FakeCupy:
    return fake_cupy.install(monkeypatch, gpus=1)


@pytest.mark.parametrize(("op_type", "case"), _params(lambda case: bool(case.expected)))
def test_forward_on_the_standin(op_type: str, case: Case, standin: fake_cupy.FakeCupy) -> None:
    check_forward(op_type, case, xp=standin)


@pytest.mark.parametrize(("op_type", "case"), _params(lambda case: bool(case.grad)))
def test_grad_on_the_standin(op_type: str, case: Case, standin: fake_cupy.FakeCupy) -> None:
    check_grad(op_type, case, xp=standin)
