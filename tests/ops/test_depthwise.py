"""The direct depthwise kernel (blockir.ops.depthwise) against the naive loop of cases_conv and finite differences.

The op cases (cases_conv.DEPTHWISE_CONV2D) reach the kernel through conv2d's dispatch, which takes it forward
for a channel multiplier of 1 only (``depthwise.direct``); here it is called directly for every multiplier, with
chunks of one plane row (the chunk loop's bounds), in both layouts, and its rule is checked. Small planes run the
forward flattened, with the weights spread over them and remembered per Filter: the fixture takes that path and the
rows' (in chunks and row by row) in turn, and the remembered weights follow a Filter changed in place.
"""

from __future__ import annotations

import numpy as np
import pytest

from blockir.ops import depthwise
from blockir.ops.conv import ConvGeometry
from tests.ops.cases_conv import ref_conv
from tests.ops.harness import run_op

# (N, C, H, W), multiplier, (kh, kw), strides, dilations, ((top, bottom), (left, right))
GEOMETRIES = [
    ((2, 3, 7, 6), 1, (3, 3), (1, 1), (1, 1), ((1, 1), (1, 1))),
    ((1, 2, 9, 8), 2, (3, 2), (2, 3), (2, 1), ((1, 0), (2, 1))),
    ((2, 2, 5, 5), 3, (2, 2), (2, 2), (1, 1), ((0, 0), (0, 0))),
    ((1, 3, 6, 7), 1, (3, 3), (3, 2), (1, 2), ((2, 2), (0, 3))),
    ((1, 2, 3, 3), 2, (2, 2), (1, 1), (1, 1), ((3, 3), (2, 2))),
    ((1, 4, 4, 4), 1, (1, 1), (1, 1), (1, 1), ((0, 0), (0, 0))),
]


def geometry(shape, ksize, strides, dilations, pads) -> ConvGeometry:
    """conv.py's geometry: C's truncation, and the far paddings grown to cover every tap."""
    outs, grown = [], []
    for size, k, s, d, (p0, p1) in zip(shape[2:], ksize, strides, dilations, pads):
        out = (size + p0 + p1 - d * (k - 1) - 1) // s + 1
        outs.append(out)
        grown.append((p0, max(p1, (out - 1) * s + d * (k - 1) + 1 - size - p0)))
    return ConvGeometry((grown[0], grown[1]), dilations, strides, ksize, (outs[0], outs[1]))


def reference(x, w, strides, dilations, pads) -> np.ndarray:
    paddings = [pads[0][0], pads[0][1], pads[1][0], pads[1][1]]
    return ref_conv(x, w, strides=strides, paddings=paddings, dilations=dilations, groups=x.shape[1])


def numeric_grads(f, x, w, dout, eps=1e-6) -> tuple[np.ndarray, np.ndarray]:
    """Central differences of sum(f(x, w) * dout) in x and w."""
    grads = []
    for k, a in enumerate((x, w)):
        g = np.zeros_like(a)
        for i in np.ndindex(a.shape):
            plus, minus = a.copy(), a.copy()
            plus[i] += eps
            minus[i] -= eps
            args_plus = (plus, w) if k == 0 else (x, plus)
            args_minus = (minus, w) if k == 0 else (x, minus)
            g[i] = (np.sum(f(*args_plus) * dout) - np.sum(f(*args_minus) * dout)) / (2 * eps)
        grads.append(g)
    return grads[0], grads[1]


@pytest.fixture(
    params=[(True, depthwise.CHUNK), (False, depthwise.CHUNK), (False, 1)], ids=["flat", "chunks", "row_by_row"]
)
def chunk(request, monkeypatch):
    """The forward's paths: flattened planes (a multiplier of 1; the others by rows), by rows in chunks, row by row."""
    flat, chunk = request.param
    monkeypatch.setattr(depthwise, "FLAT", flat)
    monkeypatch.setattr(depthwise, "CHUNK", chunk)
    return chunk


@pytest.mark.parametrize(("shape", "multiplier", "ksize", "strides", "dilations", "pads"), GEOMETRIES)
@pytest.mark.parametrize("channel_last", [False, True], ids=["NCHW", "NHWC"])
def test_the_direct_kernel_matches_the_loop_and_finite_differences(
    shape, multiplier, ksize, strides, dilations, pads, channel_last, chunk
) -> None:
    rng = np.random.default_rng(3)
    geo = geometry(shape, ksize, strides, dilations, pads)
    x = rng.standard_normal(shape)
    w = rng.standard_normal((shape[1] * multiplier, 1, *ksize))
    expected = reference(x, w, strides, dilations, pads)
    dout = rng.standard_normal(expected.shape)

    def layout(a: np.ndarray) -> np.ndarray:
        return np.ascontiguousarray(a.transpose(0, 2, 3, 1)) if channel_last else a

    def conv(x_nchw: np.ndarray, w_: np.ndarray) -> np.ndarray:
        y = depthwise.conv(np, layout(x_nchw), w_, geo, channel_last)
        return y.transpose(0, 3, 1, 2) if channel_last else y

    np.testing.assert_allclose(conv(x, w), expected, rtol=1e-12, atol=1e-12)
    dx, dw = depthwise.conv_grad(np, layout(x), w, layout(dout), geo, channel_last, (True, True))
    dx = dx.transpose(0, 3, 1, 2) if channel_last else dx
    num_dx, num_dw = numeric_grads(conv, x, w, dout)
    np.testing.assert_allclose(dx, num_dx, rtol=1e-6, atol=1e-7)
    np.testing.assert_allclose(dw, num_dw, rtol=1e-6, atol=1e-7)
    only_dx = depthwise.conv_grad(np, layout(x), w, layout(dout), geo, channel_last, (True, False))
    only_dw = depthwise.conv_grad(np, layout(x), w, layout(dout), geo, channel_last, (False, True))
    assert only_dx[1] is None and only_dw[0] is None


@pytest.mark.parametrize("multiplier", [1, 2])
def test_the_op_computes_the_same_through_the_gemms_and_the_direct_kernel(multiplier, monkeypatch) -> None:
    rng = np.random.default_rng(5)
    x = rng.standard_normal((2, 6, 11, 10)).astype(np.float32)
    w = rng.standard_normal((6 * multiplier, 1, 3, 3)).astype(np.float32)
    dout = rng.standard_normal((2, 6 * multiplier, 6, 8)).astype(np.float32)
    attrs = {"groups": 6, "strides": [2, 1], "paddings": [1, 1], "dilations": [1, 2]}
    inputs = {"Input": x, "Filter": w, "Output@GRAD": dout}
    direct = run_op("depthwise_conv2d", inputs, attrs)["Output"], run_op("depthwise_conv2d_grad", inputs, attrs)
    monkeypatch.setattr(depthwise, "ENABLED", False)
    gemms = run_op("depthwise_conv2d", inputs, attrs)["Output"], run_op("depthwise_conv2d_grad", inputs, attrs)
    np.testing.assert_allclose(direct[0], gemms[0], rtol=1e-5, atol=1e-5)
    for slot in ("Input@GRAD", "Filter@GRAD"):
        assert direct[1][slot].dtype == np.float32
        np.testing.assert_allclose(direct[1][slot], gemms[1][slot], rtol=1e-4, atol=1e-4)


def test_the_rule() -> None:
    geo = geometry((1, 4, 5, 5), (3, 3), (1, 1), (1, 1), ((1, 1), (1, 1)))
    assert depthwise.direct(np, (4, 1, 3, 3), 4, geo)
    assert depthwise.direct(np, (8, 1, 3, 3), 4, geo, grad=True)
    assert not depthwise.direct(np, (8, 1, 3, 3), 4, geo)  # multiplier 2 forward: the gemms (measured)
    assert not depthwise.direct(np, (4, 2, 3, 3), 2, geo)  # grouped, not depthwise
    assert not depthwise.direct(object(), (4, 1, 3, 3), 4, geo)  # another array module: the gemms
    volume = ConvGeometry(((1, 1),) * 3, (1, 1, 1), (1, 1, 1), (3, 3, 3), (5, 5, 5))
    assert not depthwise.direct(np, (4, 1, 3, 3, 3), 4, volume)  # 3-D: conv.py's kernels


def test_the_flat_path_follows_a_filter_changed_in_place_and_forgets_a_collected_one() -> None:
    rng = np.random.default_rng(7)
    strides, dilations, pads = (2, 1), (1, 1), ((1, 1), (1, 1))
    geo = geometry((2, 3, 8, 7), (3, 3), strides, dilations, pads)
    x = rng.standard_normal((2, 3, 8, 7))
    w = rng.standard_normal((3, 1, 3, 3))
    assert 9 * 2 * 3 * depthwise._Planes.of(geo).size <= depthwise.SPREAD_ELEMENTS  # the flat path
    np.testing.assert_allclose(depthwise.conv(np, x, w, geo, False), reference(x, w, strides, dilations, pads))
    w *= -2.0  # in place: the same array, other values
    np.testing.assert_allclose(depthwise.conv(np, x, w, geo, False), reference(x, w, strides, dilations, pads))
    before = len(depthwise._SPREAD)
    del w
    assert len(depthwise._SPREAD) == before - 1
