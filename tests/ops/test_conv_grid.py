"""Convolution by the padded grid's taps (blockir.ops.conv._grid_product, _grid_filter_grad): strides 1, NCHW,
numpy's BLAS summing each filter tap's gemm on the padded image read in place, no im2col.

Every conv2d case of cases_conv runs through it with the rule opened to every channel count and span (forward
against the naive loops, both gradients against finite differences); the measured rule picks it for the shapes it
was measured faster on and not for the others; a shape of the default rule takes it for the forward, Filter@GRAD
and Input@GRAD alike; a dtype numpy's BLAS has no gemm for falls back to im2col.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any

import numpy as np
import pytest

from blockir.ir.schema import KernelContext, lookup
from blockir.ops import conv
from blockir.ops.conv import ConvGeometry
from tests.ops.cases_conv import CONV2D, conv_case, rand, ref_conv
from tests.ops.harness import Case, check_forward, check_grad, kernel_attrs, run_op


@pytest.fixture
def taken(monkeypatch: pytest.MonkeyPatch) -> Iterator[list[str]]:
    """The names of the grid functions that computed a result (not None), in call order."""
    names: list[str] = []

    def spy(name: str, fn: Callable[..., Any]) -> Callable[..., Any]:
        def call(*args: Any) -> Any:
            result = fn(*args)
            if result is not None:
                names.append(name)
            return result

        return call

    for name in ("_grid_product", "_grid_filter_grad"):
        monkeypatch.setattr(conv, name, spy(name, getattr(conv, name)))
    yield names


@pytest.fixture
def opened(monkeypatch: pytest.MonkeyPatch) -> None:
    """The rule taking the grid for any channel count and span (numpy, NCHW, 2-D, strides 1, not pointwise)."""
    monkeypatch.setattr(conv, "_GRID_MIN_CHANNELS", 1)
    monkeypatch.setattr(conv, "_GRID_MAX_FILTERS", 1 << 30)
    monkeypatch.setattr(conv, "_GRID_FILTERS_PER_CHANNEL", float("inf"))
    monkeypatch.setattr(conv, "_GRID_MAX_SPAN", float("inf"))
    monkeypatch.setattr(conv, "_GRID_MIN_COLUMNS", 0)


def _takes_grid(case: Case, grad: bool) -> bool:
    """Whether the opened rule takes the grid: NCHW, strides 1, not pointwise, not depthwise.py's."""
    attrs, w = case.attrs, case.inputs["Filter"]
    nchw = attrs.get("data_format", "NCHW") != "NHWC"
    strides_1 = all(s == 1 for s in attrs.get("strides", [1, 1]))
    pointwise = w.shape[2:] == (1, 1) and not any(attrs.get("paddings", [0]))
    depthwise = w.shape[1] == 1 and (grad or w.shape[0] == attrs.get("groups", 1))
    return nchw and strides_1 and not pointwise and not depthwise


@pytest.mark.parametrize("case", CONV2D, ids=[c.name for c in CONV2D])
def test_every_conv2d_case_through_the_grid(case: Case, opened: None, taken: list[str]) -> None:
    check_forward("conv2d", case)
    assert ("_grid_product" in taken) == _takes_grid(case, grad=False)
    if case.grad:
        taken.clear()
        check_grad("conv2d", case)
        assert ("_grid_filter_grad" in taken) == _takes_grid(case, grad=True)


def _grid(
    c: int, m: int, size: int, n: int = 64, groups: int = 1, strides: int = 1, channel_last: bool = False
) -> bool:
    """The rule for a 3x3 convolution with paddings 1 of ``n`` images of ``c`` channels of ``size`` x ``size``."""
    geo = ConvGeometry(((1, 1), (1, 1)), (1, 1), (strides, strides), (3, 3), ((size - 1) // strides + 1,) * 2)
    return conv._grid(np, n, geo, (m, c // groups, 3, 3), groups, channel_last)


def test_the_rule_follows_the_measurements() -> None:
    # benchmarks/bench_cnn.py's layers at batch 64, resnet18's at batch 8 and 1: the grid where it measured faster
    assert _grid(32, 32, 32) and _grid(64, 64, 16) and _grid(64, 64, 56, n=1)
    assert not _grid(3, 32, 32) and not _grid(32, 64, 16)  # more output channels than input channels
    assert _grid(64, 32, 16)  # 32 -> 64's Input@GRAD: the convolution of its Output@GRAD, 64 -> 32 channels
    assert not _grid(64, 128, 8)  # the grid 22% wider than the output
    assert not _grid(128, 128, 28, n=8) and not _grid(512, 512, 7, n=8)  # im2col's copy cheap beside M >= 128
    assert not _grid(32, 32, 32, n=1) and not _grid(64, 64, 16, n=1)  # im2col's columns in the cache
    assert _grid(128, 32, 28, n=1) and _grid(96, 32, 28, n=1)  # densenet's at batch 1: columns of 0.65-0.86 Mi
    assert not _grid(128, 32, 14, n=1) and not _grid(64, 32, 28, n=1)  # 0.22 and 0.43 Mi
    assert _grid(64, 32, 32, groups=2) and not _grid(32, 32, 32, groups=4)  # per group: 16 and 8 output channels
    assert not _grid(32, 32, 32, strides=2) and not _grid(32, 32, 32, channel_last=True)
    geo = ConvGeometry(((1, 1), (1, 1)), (1, 1), (1, 1), (3, 3), (32, 32))
    assert not conv._grid(object(), 64, geo, (32, 32, 3, 3), 1, False)  # another array module: its own gemms


def test_a_shape_of_the_default_rule_takes_the_grid_for_all_three_products(taken: list[str]) -> None:
    x, w = rand(8, 24, 32, 32), rand(24, 24, 3, 3)
    attrs = {"paddings": [2, 1, 1, 0], "dilations": [2, 1]}
    check_forward("conv2d", conv_case("default_rule", x, w, **attrs))
    dout = np.random.default_rng(5).standard_normal(ref_conv(x, w, **attrs).shape)
    grads = run_op("conv2d_grad", {"Input": x, "Filter": w, "Output@GRAD": dout}, attrs)
    assert taken == ["_grid_product", "_grid_filter_grad", "_grid_product"]  # forward, Filter@GRAD, Input@GRAD

    # a directional finite difference of <conv2d(x, w), dout>
    rng = np.random.default_rng(6)
    vx, vw, eps = rng.standard_normal(x.shape), rng.standard_normal(w.shape), 1e-6

    def objective(sign: float) -> float:
        return float(np.sum(ref_conv(x + sign * eps * vx, w + sign * eps * vw, **attrs) * dout))

    numeric = (objective(1.0) - objective(-1.0)) / (2 * eps)
    analytic = np.sum(grads["Input@GRAD"] * vx) + np.sum(grads["Filter@GRAD"] * vw)
    np.testing.assert_allclose(analytic, numeric, rtol=1e-7)


def test_a_dtype_without_a_blas_gemm_takes_im2col(taken: list[str]) -> None:
    case = conv_case("float16", rand(8, 32, 32, 32), rand(32, 32, 3, 3), "float16", grad=False, paddings=[1, 1])
    out = run_op("conv2d", case.values(), case.attrs)["Output"]
    assert _grid(32, 32, 32, n=8) and taken == [] and out.dtype == np.float16
    np.testing.assert_allclose(out, ref_conv(*case.inputs.values(), paddings=[1, 1]), rtol=2e-2, atol=0.5)


def test_outputs_leave_the_scratch_buffers(opened: None, taken: list[str]) -> None:
    """A kh x 1 filter with no padding across: the grid is as wide as the output, whose pixels are then one
    contiguous block of the scratch buffer; the output must still be an array of its own, not overwritten by the
    next call."""
    schema_ctx = KernelContext(np, kernel_attrs(lookup("conv2d"), {"paddings": [1, 0]}), (True,), "conv2d")
    x1, x2, w = rand(2, 3, 6, 5), rand(2, 3, 6, 5), rand(4, 3, 3, 1)
    first = conv._conv(schema_ctx, x1, w)
    kept = first.copy()
    second = conv._conv(schema_ctx, x2, w)
    assert taken == ["_grid_product", "_grid_product"]
    np.testing.assert_array_equal(first, kept)
    np.testing.assert_allclose(first, ref_conv(x1, w, paddings=[1, 0]), rtol=1e-12, atol=1e-12)
    np.testing.assert_allclose(second, ref_conv(x2, w, paddings=[1, 0]), rtol=1e-12, atol=1e-12)
