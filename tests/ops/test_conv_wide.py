"""Convolution by im2col's columns laid out on the padded image's width (blockir.ops.conv._wide_product): NCHW,
strides 1, one group, each column row one contiguous stretch of the padded image, the output's columns past OW
dropped after the gemm.

Every conv2d case of cases_conv runs through it with the rule opened to any batch, image size and channel count
(the grid's rule closed), forward against the naive loops; the measured rule picks it for one small image with
few output channels and not for the others; its output leaves the scratch buffers.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import numpy as np
import pytest

from blockir.ir.schema import KernelContext, lookup
from blockir.ops import conv
from blockir.ops.conv import ConvGeometry
from tests.ops.cases_conv import CONV2D, rand, ref_conv
from tests.ops.harness import Case, check_forward, kernel_attrs


@pytest.fixture
def taken(monkeypatch: pytest.MonkeyPatch) -> Iterator[list[str]]:
    """ "_wide_product" once per call that computed a result (not None)."""
    names: list[str] = []
    wide = conv._wide_product

    def call(*args: Any) -> Any:
        result = wide(*args)
        if result is not None:
            names.append("_wide_product")
        return result

    monkeypatch.setattr(conv, "_wide_product", call)
    yield names


@pytest.fixture
def opened(monkeypatch: pytest.MonkeyPatch) -> None:
    """The rule taking the wide columns for any batch, image size and channel count; the grid's closed."""
    monkeypatch.setattr(conv, "_WIDE_MAX_IMAGES", 1 << 30)
    monkeypatch.setattr(conv, "_WIDE_MAX_PIXELS", 1 << 30)
    monkeypatch.setattr(conv, "_WIDE_MAX_FILTERS", 1 << 30)
    monkeypatch.setattr(conv, "_GRID_MIN_CHANNELS", 1 << 30)


def _takes_wide(case: Case) -> bool:
    """Whether the opened rule takes the wide columns: NCHW, strides 1, one group, not pointwise (nor depthwise)."""
    attrs, w = case.attrs, case.inputs["Filter"]
    nchw = attrs.get("data_format", "NCHW") != "NHWC"
    strides_1 = all(s == 1 for s in attrs.get("strides", [1, 1]))
    pointwise = w.shape[2:] == (1, 1) and not any(attrs.get("paddings", [0]))
    return nchw and strides_1 and attrs.get("groups", 1) == 1 and not pointwise


@pytest.mark.parametrize("case", CONV2D, ids=[c.name for c in CONV2D])
def test_every_conv2d_case_through_the_wide_columns(case: Case, opened: None, taken: list[str]) -> None:
    check_forward("conv2d", case)
    assert ("_wide_product" in taken) == _takes_wide(case)


def _wide(c: int, m: int, size: int, n: int = 1, groups: int = 1, strides: int = 1, k: int = 3) -> bool:
    """The rule for a k x k convolution with paddings k // 2 of ``n`` images of ``c`` channels of ``size`` x
    ``size``."""
    p = k // 2
    geo = ConvGeometry(((p, p), (p, p)), (1, 1), (strides, strides), (k, k), ((size - 1) // strides + 1,) * 2)
    return conv._wide(np, n, geo, (m, c // groups, k, k), groups, False)


def test_the_rule_follows_the_measurements() -> None:
    # densenet121's 3x3 layers at batch 1 (128 -> 32 at 14x14 and 7x7), inception's small 5x5
    assert _wide(128, 32, 14) and _wide(128, 32, 7) and _wide(512, 32, 7) and _wide(16, 48, 14, k=5)
    assert _wide(128, 64, 14) and not _wide(128, 128, 14)  # more output channels: the gemm's extra columns
    assert not _wide(64, 32, 28) and not _wide(32, 64, 56)  # larger images: their rows are long already
    assert not _wide(128, 32, 14, n=8) and not _wide(64, 64, 8, n=64)  # a batch: im2col's one gemm over it
    assert not _wide(128, 32, 14, strides=2) and not _wide(128, 32, 14, groups=2) and not _wide(128, 32, 14, k=1)
    geo = ConvGeometry(((1, 1), (1, 1)), (1, 1), (1, 1), (3, 3), (14, 14))
    assert not conv._wide(object(), 1, geo, (32, 128, 3, 3), 1, False)  # another array module
    assert not conv._wide(np, 1, geo, (32, 128, 3, 3), 1, True)  # NHWC


def test_a_shape_of_the_default_rule_takes_the_wide_columns(taken: list[str]) -> None:
    x, w = rand(1, 24, 9, 11), rand(16, 24, 3, 2)
    attrs = {"paddings": [2, 1, 1, 0], "dilations": [2, 1]}
    ctx = KernelContext(np, kernel_attrs(lookup("conv2d"), attrs), (True,), "conv2d")
    out = conv._conv(ctx, x, w)
    assert taken == ["_wide_product"]
    np.testing.assert_allclose(out, ref_conv(x, w, **attrs), rtol=1e-12, atol=1e-12)


def test_outputs_leave_the_scratch_buffers(taken: list[str]) -> None:
    ctx = KernelContext(np, kernel_attrs(lookup("conv2d"), {"paddings": [1, 1]}), (True,), "conv2d")
    x1, x2, w = rand(1, 3, 6, 5), rand(1, 3, 6, 5), rand(4, 3, 3, 3)
    first = conv._conv(ctx, x1, w)
    kept = first.copy()
    second = conv._conv(ctx, x2, w)
    assert taken == ["_wide_product", "_wide_product"] and first.flags.c_contiguous
    np.testing.assert_array_equal(first, kept)
    np.testing.assert_allclose(second, ref_conv(x2, w, paddings=[1, 1]), rtol=1e-12, atol=1e-12)
