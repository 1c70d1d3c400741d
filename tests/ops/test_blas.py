"""blockir.ops.blas.subtract_product, ``c -= scale * (a @ b)`` in place: numpy's own BLAS gemm with beta = 1 where
it applies, else numpy expressions; both against a float64 numpy computation, for every layout gemm reads."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest

from blockir.ops import blas
from tests.runtime import fake_cupy

M, K, N = 300, 64, 96  # c has 28,800 elements: above MIN_ELEMENTS, so gemm computes it where it can


def _operands(dtype: str, a_order: str, b_order: str) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    rng = np.random.default_rng(3)
    a = np.asarray(rng.normal(size=(M, K)), dtype=dtype, order=a_order)
    b = np.asarray(rng.normal(size=(K, N)), dtype=dtype, order=b_order)
    return np.asarray(rng.normal(size=(M, N)), dtype=dtype), a, b


def _want(c: np.ndarray, a: Any, b: Any, scale: float) -> np.ndarray:
    return c.astype(np.float64) - scale * (np.asarray(a, np.float64) @ np.asarray(b, np.float64))


def _tol(dtype: str) -> dict[str, float]:
    return {"rtol": 1e-12, "atol": 1e-11} if dtype == "float64" else {"rtol": 1e-5, "atol": 1e-4}


def test_numpys_own_blas_is_found_where_numpy_ships_openblas() -> None:
    config: Any = np.show_config(mode="dicts")
    name = config["Build Dependencies"]["blas"]["name"]
    if "openblas" not in name:
        pytest.skip(f"numpy is built with {name}: subtract_product computes with numpy expressions")
    assert set(blas._gemms()) == {np.dtype("float32"), np.dtype("float64")}


@pytest.mark.parametrize("dtype", ["float32", "float64"])
@pytest.mark.parametrize("a_order", ["C", "F"])
@pytest.mark.parametrize("b_order", ["C", "F"])
def test_subtract_product_matches_numpy_for_every_layout(dtype: str, a_order: str, b_order: str) -> None:
    c, a, b = _operands(dtype, a_order, b_order)
    want, given = _want(c, a, b, 0.25), c
    blas.subtract_product(np, c, a, b, np.array([0.25], dtype))
    assert c is given and c.dtype == np.dtype(dtype)  # in place
    np.testing.assert_allclose(c, want, **_tol(dtype))


@pytest.mark.parametrize("dtype", ["float32", "float64"])
def test_transposed_views_are_read_as_they_are(dtype: str) -> None:
    """fc_grad_sgd's case: Input^T, a transposed view of a row-major array, times dPre."""
    c, a, b = _operands(dtype, "C", "C")
    x = np.ascontiguousarray(a.T)  # [K, M], row-major; x.T is a
    want = _want(c, x.T, b, 0.5)
    blas.subtract_product(np, c, x.T, b, 0.5)
    np.testing.assert_allclose(c, want, **_tol(dtype))


@pytest.mark.parametrize(
    "case",
    ["strided a", "overlap", "small", "int", "mixed dtypes", "float16", "empty k", "non-contiguous c"],
)
def test_what_gemm_cannot_take_is_computed_with_numpy(case: str) -> None:
    """The fallback: strided operands, c overlapping an operand, products below MIN_ELEMENTS, dtypes gemm
    has no routine for, k = 0, c not row-major: each still gives c - scale * (a @ b)."""
    c, a, b = _operands("float64", "C", "C")
    if case == "strided a":
        a = np.repeat(a, 2, axis=1)[:, ::2]
    elif case == "overlap":
        a, b = c[:, :K], np.ascontiguousarray(b[:, :N])  # a is part of c: gemm would read what it writes
    elif case == "small":
        c, a, b = c[:8, :8].copy(), a[:8].copy(), b[:, :8].copy()
    elif case == "int":
        c, a, b = (v.astype(np.int64) for v in (c * 10, a * 10, b * 10))
    elif case == "mixed dtypes":
        a = a.astype(np.float32)
    elif case == "float16":
        c, a, b = (v.astype(np.float16) for v in (c, a, b))
    elif case == "empty k":
        a, b = a[:, :0], b[:0]
    elif case == "non-contiguous c":
        c = np.asfortranarray(c)
    scale = 2 if case == "int" else 0.5
    want = _want(c, a, b, scale)
    assert case == "empty k" or blas._blas(c, a, b) is None or blas._operand(a) is None
    blas.subtract_product(np, c, a, b, scale)
    tol = {"rtol": 2e-2, "atol": 2e-1} if case == "float16" else _tol("float32")
    np.testing.assert_allclose(c, want, **tol)


def test_other_array_modules_compute_with_their_own_functions(monkeypatch: pytest.MonkeyPatch) -> None:
    """A CuPy array never reaches numpy's BLAS (the stand-in refuses host arrays in device work)."""
    standin = fake_cupy.install(monkeypatch, gpus=1)
    c, a, b = _operands("float64", "C", "C")
    want = _want(c, a, b, 0.5)
    on = [standin.asarray(v) for v in (c, a, b)]
    blas.subtract_product(standin, *on, standin.asarray(np.array([0.5])))
    assert isinstance(on[0], fake_cupy.FakeArray)
    np.testing.assert_allclose(np.asarray(on[0].view(np.ndarray)), want, rtol=1e-12)
