"""pool2d and pool3d forward on random windows against the loop reference of ``cases_conv.ref_pool``: the kernel's
passes per window tap over the windows that read it inside the image (the first a copy of a tap every window reads,
where one does), its per-window loop (windows longer than there are windows), its one reduction over the axes a
global window covers, and max pooling's floor at -FLT_MAX (values of -inf and below -FLT_MAX, windows all in the
padding); windows of stride 1 by passes over the flattened image (``_Windows.shifted``), against the loop over
windows; the reduction over axes a window covers whole (global pooling: a matrix-vector product where it sums),
against numpy's."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from blockir.ops.conv import _reduce_whole, _Windows
from tests.ops.cases_conv import ref_pool
from tests.ops.harness import run_op
from tests.ops.pool_strategies import pool_windows

FLT_MAX = float(np.finfo(np.float32).max)


@st.composite
def pools(draw: st.DrawFn) -> tuple[np.ndarray, dict]:
    sizes, attrs = draw(pool_windows(8))
    attrs.update(pooling_type=draw(st.sampled_from(("max", "avg"))), exclusive=draw(st.booleans()))
    rng = np.random.default_rng(draw(st.integers(0, 2**31 - 1)))
    dtype = draw(st.sampled_from(("float32", "float64")))
    x = rng.uniform(-2.0, 2.0, size=(2, 3, *sizes)).astype(dtype)
    if attrs["pooling_type"] == "max":  # some values that never beat -FLT_MAX (float64: some finite ones)
        x[rng.random(x.shape) < 0.3] = draw(st.sampled_from((-np.inf, -1e300 if dtype == "float64" else -FLT_MAX)))
    return x, attrs


@settings(max_examples=200, deadline=None)
@given(pools())
def test_each_window_reduces_as_the_loop_does(case: tuple[np.ndarray, dict]) -> None:
    x, attrs = case
    got = run_op(f"pool{x.ndim - 2}d", {"X": x}, attrs)["Out"]
    expected = ref_pool(x, **attrs)
    if attrs["pooling_type"] == "max":
        np.testing.assert_array_equal(got, expected)
        assert got.min() >= -FLT_MAX
    else:
        np.testing.assert_allclose(got, expected, rtol=1e-5 if x.dtype == np.float32 else 1e-12, atol=1e-6)


@settings(max_examples=100, deadline=None)
@given(
    st.integers(1, 9),
    st.integers(1, 4),
    st.data(),
    st.sampled_from(("sum", "max")),
    st.integers(1, 2),
)
def test_windows_by_shifted_passes(size: int, k: int, data: st.DataObject, op: str, axis: int) -> None:
    """Windows of stride 1 (padding before under k) by shifted passes over all of the array, the positions near
    either end taken again from their taps: the same values as the loop over windows, along any axis after the
    first; None under strides, a padding before of k or more, an array not C-contiguous, or an axis with nothing
    before it (its slices are contiguous)."""
    before = data.draw(st.integers(0, k - 1))
    after = data.draw(st.integers(0, k - 1 - before))
    out = size + before + after - k + 1
    if out < k:  # the per-window loop, not the taps
        return
    windows = _Windows.regular(size, out, k, 1, before)
    shape = [2, 3, 4]
    shape[axis] = size
    a = np.random.default_rng(size * 31 + k).uniform(-2, 2, shape)
    a[a < -1.5] = -np.inf if op == "max" else 0.0
    got = windows.shifted(np, a, axis, op)
    reference = np.stack(
        [
            (np.sum if op == "sum" else np.max)(
                a[(slice(None),) * axis + (slice(max(0, o - before), min(size, o - before + k)),)], axis=axis
            )
            for o in range(out)
        ],
        axis=axis,
    )
    assert got is not None and got.flags.c_contiguous
    np.testing.assert_allclose(got, reference, rtol=1e-12, atol=1e-12)
    assert _Windows.regular(size, (out - 1) // 2 + 1, k, 2, before).shifted(np, a, axis, op) is None
    assert windows.shifted(np, np.asfortranarray(a), axis, op) is None
    assert _Windows.regular(size, out, k, 1, k).shifted(np, a, axis, op) is None
    assert windows.shifted(np, a[(0,) * axis][None], 1, op) is None  # one row: its slices are contiguous


@pytest.mark.parametrize("dtype", ["float32", "float64", "float16"])
@pytest.mark.parametrize("op", ["sum", "max"])
@pytest.mark.parametrize(
    ("shape", "axes", "contiguous"),
    [
        ((2, 5, 7, 7), (2, 3), True),  # global pooling: a matrix-vector product by ones where it sums
        ((1, 3, 4, 6, 5), (2, 3, 4), True),
        ((2, 5, 7, 7), (3,), True),
        ((2, 5, 7, 7), (2,), True),  # not trailing: numpy's reduction
        ((2, 5, 7, 7), (2, 3), False),  # not C-contiguous: numpy's reduction
    ],
)
def test_whole_axes_reduce_as_numpy(
    shape: tuple[int, ...], axes: tuple[int, ...], contiguous: bool, op: str, dtype: str
) -> None:
    """The reduction over the axes a window covers whole (``_reduce_whole``): numpy's sum or max, keeping the axes;
    a sum over trailing axes of a contiguous float32 or float64 array by BLAS, within a dot product's rounding."""
    x = np.random.default_rng(len(shape) * 7 + len(axes)).uniform(-2.0, 2.0, shape).astype(dtype)
    if not contiguous:
        x = np.swapaxes(np.swapaxes(x, 2, 3).copy(), 2, 3)
    got = _reduce_whole(np, x, axes, op)
    expected = (np.sum if op == "sum" else np.max)(x.astype(np.float64), axis=axes, keepdims=True)
    assert got.shape == expected.shape and got.dtype == x.dtype
    tolerance = {"float16": 1e-2, "float32": 1e-5, "float64": 1e-12}[dtype]
    np.testing.assert_allclose(got, expected, rtol=tolerance, atol=tolerance)
