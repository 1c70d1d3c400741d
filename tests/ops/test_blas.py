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
    assert case in ("empty k", "small") or not blas.gemm(c, a, b, 0.0, 1.0)  # refused (alpha 0: c kept if not)
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


@pytest.mark.parametrize("dtype", ["float32", "float64"])
def test_gemm_reads_column_slices_and_transposes_where_they_lie(dtype: str) -> None:
    """Operands that are column slices of wider matrices (a leading dimension above their width), transposed or
    not, and c a column slice too: gemm computes alpha * a @ b + beta * c into c's slice alone."""
    rng = np.random.default_rng(4)
    wide_a, wide_b = rng.normal(size=(M, K + 9)).astype(dtype), rng.normal(size=(N + 7, K + 5)).astype(dtype)
    a, b = wide_a[:, 3 : 3 + K], wide_b[2 : 2 + N, 1 : 1 + K].T  # b: [K, N], transposed, unit stride along K
    wide_c = rng.normal(size=(M, N + 11)).astype(dtype)
    c, before = wide_c[:, 5 : 5 + N], wide_c.copy()
    assert blas.gemm(c, a, b, 0.5, 2.0)
    want = 0.5 * (a.astype(np.float64) @ b.astype(np.float64)) + 2.0 * before[:, 5 : 5 + N]
    np.testing.assert_allclose(c, want, **_tol(dtype))
    np.testing.assert_array_equal(wide_c[:, :5], before[:, :5])  # nothing outside c's slice is written
    np.testing.assert_array_equal(wide_c[:, 5 + N :], before[:, 5 + N :])


def test_gemm_broadcasts_leading_axes_and_sums_into_a_repeated_c() -> None:
    """A batch of products [2, 3]: c of [2, 1] receives the 3 products of its row in turn (beta = 1 sums them);
    beta = 0 overwrites what c held, NaN included."""
    rng = np.random.default_rng(5)
    a, b = rng.normal(size=(3, 4, 6)), rng.normal(size=(2, 3, 6, 5))
    c = np.zeros((2, 1, 4, 5))
    assert blas.gemm(c, a, b, 1.0, 1.0)
    np.testing.assert_allclose(c[:, 0], np.einsum("tmk,btkn->bmn", a, b), rtol=1e-12)
    last = np.full((2, 3, 4, 5), np.nan)
    assert blas.gemm(last, a, b, 2.0, 0.0)
    np.testing.assert_allclose(last, 2.0 * (a @ b), rtol=1e-12)


def test_gemm_refuses_what_it_cannot_read_and_checks_shapes() -> None:
    c, a, b = _operands("float64", "C", "C")
    kept = c.copy()
    assert not blas.gemm(c.astype(np.float16), a.astype(np.float16), b.astype(np.float16))  # no gemm routine
    assert not blas.gemm(np.asfortranarray(c), a, b)  # c not unit-strided along n
    assert not blas.gemm(c, np.repeat(a, 2, axis=1)[:, ::2], b)  # no unit stride
    readonly = c.copy()
    readonly.flags.writeable = False
    assert not blas.gemm(readonly, a, b)
    assert not blas.gemm(c, c[:, :K], b[:, :N])  # a is part of c
    np.testing.assert_array_equal(c, kept)
    with pytest.raises(ValueError, match="shapes"):
        blas.gemm(c, a, b[:-1])
