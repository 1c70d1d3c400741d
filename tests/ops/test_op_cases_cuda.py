"""The GPU tier of the op tests: every case of ``test_op_cases``, the optimizer updates and the random ops,
with the kernels computing on CUDA through CuPy (``xp=cupy``), against the same independent numpy values.

Marked ``gpu``: run with ``-m gpu`` on a machine with CuPy and a GPU; they skip cleanly elsewhere.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest

from blockir.errors import BlockirError
from blockir.ir.schema import lookup
from tests.gpu import real_cupy
from tests.ops.harness import Case, check_forward, check_grad, run_op
from tests.ops.test_op_cases import _error_params, _params
from tests.ops.test_optimizer_ops import CONFIGS, V, _sparse_grad, _state

pytestmark = pytest.mark.gpu


@pytest.fixture(scope="module")
def cupy() -> Any:
    return real_cupy()


@pytest.mark.parametrize(("op_type", "case"), _params(lambda case: bool(case.expected)))
def test_forward_on_cuda(op_type: str, case: Case, cupy: Any) -> None:
    check_forward(op_type, case, xp=cupy)


@pytest.mark.parametrize(("op_type", "case"), _params(lambda case: bool(case.grad)))
def test_grad_on_cuda(op_type: str, case: Case, cupy: Any) -> None:
    check_grad(op_type, case, xp=cupy)


@pytest.mark.parametrize(("op_type", "case", "pattern"), _error_params("KERNEL_ERRORS"))
def test_kernel_rejects_on_cuda(op_type: str, case: Case, pattern: str, cupy: Any) -> None:
    with pytest.raises(BlockirError, match=pattern):
        run_op(op_type, case.values(), case.attrs, xp=cupy)


@pytest.mark.parametrize("sparse", [False, True], ids=["dense", "sparse"])
@pytest.mark.parametrize("op_type, attrs", CONFIGS)
def test_optimizer_update_on_cuda_equals_the_host(op_type: str, attrs: dict, sparse: bool, cupy: Any) -> None:
    rng = np.random.default_rng(4)
    state = _state(op_type, rng, "float64")
    grad = _sparse_grad(rng)[0] if sparse else rng.normal(size=(V, 3))
    on_host = run_op(op_type, {**{k: v.copy() for k, v in state.items()}, "Grad": grad}, attrs)
    on_gpu = run_op(op_type, {**state, "Grad": grad}, attrs, xp=cupy)
    for slot in lookup(op_type).outputs:
        np.testing.assert_allclose(on_gpu[slot.name], on_host[slot.name], rtol=1e-12, atol=1e-12, err_msg=slot.name)


@pytest.mark.parametrize(
    "op_type, attrs", [("uniform_random", {"min": -2.0, "max": 3.0}), ("gaussian_random", {"mean": 1.0, "std": 2.0})]
)
def test_random_ops_on_cuda_give_the_hosts_values_for_a_seed(op_type: str, attrs: dict, cupy: Any) -> None:
    attrs = {"shape": [50, 7], "dtype": 5, "seed": 11, **attrs}
    on_gpu = run_op(op_type, {}, attrs, xp=cupy)["Out"]
    assert on_gpu.dtype == np.float32
    np.testing.assert_array_equal(on_gpu, run_op(op_type, {}, attrs)["Out"])
