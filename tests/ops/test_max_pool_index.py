"""max_pool2d_with_index and max_pool3d_with_index on random windows against the loop reference of
``cases_conv.ref_max_pool_with_index``, with ties, -inf, -FLT_MAX and windows all in the padding (a NaN, which
never wins, below); their gradients against ``np.add.at`` at the Mask's positions (the one-assignment scatter where
windows do not overlap, ``bincount`` where they do)."""

from __future__ import annotations

from unittest import mock

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from blockir.ops import conv
from tests.ops.cases_conv import ref_max_pool_with_index
from tests.ops.harness import run_op
from tests.ops.pool_strategies import pool_windows

FLT_MAX = float(np.finfo(np.float32).max)
# few distinct values, so that windows tie; values that never beat -FLT_MAX
VALUES = np.array([-2.0, -1.0, 0.0, 1.0, 2.0, -np.inf, -FLT_MAX])


@st.composite
def pools(draw: st.DrawFn) -> tuple[np.ndarray, dict]:
    sizes, attrs = draw(pool_windows(7, adaptive=True))
    rng = np.random.default_rng(draw(st.integers(0, 2**31 - 1)))
    dtype = draw(st.sampled_from(("float32", "float64")))
    x = rng.choice(VALUES, size=(2, 3, *sizes)).astype(dtype)
    return x, attrs


@settings(max_examples=150, deadline=None)
@given(pools(), st.sampled_from((conv._ARGMAX_CHUNK, 1, 300)))
def test_the_first_maximum_of_each_window_and_its_gradient(case: tuple[np.ndarray, dict], chunk: int) -> None:
    """``chunk``: the bytes of X per chunk of planes (1: one plane at a time; 300: a few, the last chunk short)."""
    x, attrs = case
    op = f"max_pool{x.ndim - 2}d_with_index"
    with mock.patch.object(conv, "_ARGMAX_CHUNK", chunk):
        got = run_op(op, {"X": x}, attrs)
    out, mask = ref_max_pool_with_index(x, **attrs)
    np.testing.assert_array_equal(got["Out"], out)
    np.testing.assert_array_equal(got["Mask"], mask)
    dout = np.random.default_rng(0).integers(-3, 4, size=out.shape).astype(x.dtype)  # sums exact in any order
    dx = run_op(f"{op}_grad", {"X": x, "Mask": mask, "Out@GRAD": dout}, attrs)["X@GRAD"]
    want = np.zeros(x.size, x.dtype)
    flat = (np.arange(x.shape[0] * x.shape[1]).reshape(*x.shape[:2], *[1] * (x.ndim - 2)) * x[0, 0].size + mask)[
        mask >= 0
    ]
    np.add.at(want, flat, dout[mask >= 0])
    np.testing.assert_array_equal(dx, want.reshape(x.shape))


@pytest.mark.parametrize("shape", [(2, 3, 8, 8), (2, 3, 7, 9)])
def test_overlapping_windows_add_their_gradients(shape: tuple[int, ...]) -> None:
    """3x3 windows by 1: most positions are the maximum of several windows; each gets their sum."""
    x = np.zeros(shape, np.float32)
    x[:, :, 2, 2] = 1.0  # the maximum of every window holding it
    attrs = {"ksize": [3, 3], "strides": [1, 1], "paddings": [1, 1]}
    result = run_op("max_pool2d_with_index", {"X": x}, attrs)
    dout = np.ones_like(result["Out"])
    dx = run_op("max_pool2d_with_index_grad", {"X": x, "Mask": result["Mask"], "Out@GRAD": dout}, attrs)["X@GRAD"]
    assert dx[0, 0, 2, 2] == 9.0 and dx.sum() == dout.sum()


def test_a_nan_never_wins() -> None:
    """Paddle's comparison: a NaN is never greater than the best so far (pool2d's maximum, numpy's, is NaN)."""
    x = np.full((1, 1, 4, 4), np.nan, np.float32)
    x[0, 0, :2, :2] = [[np.nan, 1.0], [2.0, np.nan]]
    x[0, 0, 2, 3] = -np.inf
    result = run_op("max_pool2d_with_index", {"X": x}, {"ksize": [2, 2], "strides": [2, 2]})
    np.testing.assert_array_equal(result["Out"], [[[[2.0, -FLT_MAX], [-FLT_MAX, -FLT_MAX]]]])
    np.testing.assert_array_equal(result["Mask"], [[[[4, -1], [-1, -1]]]])
