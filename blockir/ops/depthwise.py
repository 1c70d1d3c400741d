"""Depthwise convolution (groups = Input's channels, a channel multiplier of 1 or more) computed directly, as a sum
over the filter's taps of shifted views of Input times per-channel weights: no im2col copy of ``kh * kw`` times
Input, and no gemm per channel (a depthwise convolution's gemms are ``1 x (kh * kw)`` by ``(kh * kw) x pixels``
per channel, far too small for BLAS). :mod:`blockir.ops.conv` dispatches ``conv2d`` and ``conv2d_grad`` here
where :func:`direct` says so.

The layout the taps run over ("phase planes"): Input padded with zeros and split by the strides into ``sh * sw``
phases, phase ``(a, b)`` holding the padded rows ``a, a + sh, ...`` and columns ``b, b + sw, ...``, each phase a
plane of ``Hq x Wq`` flattened, one row of planes per (image, channel). Tap ``(i, j)`` of output pixel ``(oh, ow)``
reads padded pixel ``(oh * sh + i * dh, ow * sw + j * dw)``: phase ``(i * dh % sh, j * dw % sw)`` at plane pixel
``(oh + i * dh // sh, ow + j * dw // sw)``, so that over every output pixel, laid out ``OH x Wq`` (``Wq >= OW``;
the columns past OW are not the output's), one tap reads one contiguous slice of its phase's plane. Strides,
dilations and paddings only move the slices; each tap is a multiply and an add over long contiguous rows, done in
chunks of planes that stay in the cache. Input@GRAD is the transposed taps, each adding the weighted Output@GRAD
into its slice of zeroed planes (then un-phased); Filter@GRAD per tap the sum over batch and pixels of
Output@GRAD times the tap's slice (the columns past OW zero in Output@GRAD, so they add nothing).

Small convolutions forward (a multiplier of 1, and the planes of one phase times the taps, ``taps * N * C * Hq *
Wq``, at most :data:`SPREAD_ELEMENTS`) run the taps over the planes flattened: a tap's slices of every (image,
channel) are then one contiguous range of its phase (the rows' spans and the plane pixels between them, computed
and dropped), multiplied by the tap's weights spread over the same range (each row's weight repeated over its
plane: :func:`_spread_weights`, remembered per Filter), so that a tap is one multiply and one add of plain 1-D
arrays. numpy's broadcasting of a weight per row costs some 70 ns a row, most of a tap's time on the small planes
of late layers (96 channels of 7x7: 96 rows of 63 pixels).

Channel-first throughout: an NHWC Input is read into the planes (the padding copy transposes it) and the result
transposed back.
"""

from __future__ import annotations

import functools
import weakref
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import numpy as np

if TYPE_CHECKING:
    from blockir.ops.conv import ConvGeometry

__all__ = ["conv", "conv_grad", "direct"]

# Elements per chunk of planes (rows x slice length) a tap's multiply and add run over, so that the output's,
# the product's and the input slice's chunks stay in the caches; measured: 128 Ki float32 runs 10-20% faster than
# 32 Ki (the Python loop's calls) and than no chunks at batch 8 (the caches).
CHUNK = 1 << 17
# The forward runs flattened (the module docstring) where its spread weights, taps x the planes of one phase
# (taps * N * C * Hq * Wq), hold at most this many elements (2 MiB of float32; 3x3 filters: planes of up to 58 Ki
# elements). Measured (thread CPU time, 1 thread, alternating): alone, each layer in warm caches, 0.67-0.75x the
# rows' time at shufflenet_v2's depthwise layers (24 to 232 channels of 7x7 to 28x28 outputs, strides 1 and 2,
# batch 1), no gain from 139 Ki elements (512 channels of 14x14: the arrays leave the caches); within
# shufflenet_v2_x0_5's runs (caches cold between layers, the spread weights read from memory), its 19 depthwise
# convolutions take 0.88x the rows' time.
SPREAD_ELEMENTS = 1 << 19


def direct(xp: Any, w_shape: Sequence[int], groups: int, geo: ConvGeometry, grad: bool = False) -> bool:
    """Whether a convolution by Filter ``w_shape`` with ``groups`` (geometry ``geo``, checked against Input) runs
    here (``grad``: its gradient): 2-D and depthwise (Filter dim 1 is 1: each group one input channel), on the
    CPU (numpy; under CuPy the gemms stay, as a kernel launch per tap and chunk is not measured there), and,
    forward, a channel multiplier of 1. The rule is measured (``benchmarks/bench_depthwise.py``): with a
    multiplier of 2 or 3 the gemms of [multiplier x taps] by [taps x pixels] per channel beat the taps' passes
    forward, and lose backward."""
    depthwise = ENABLED and xp is np and len(geo.ksize) == 2 and w_shape[1] == 1
    return depthwise and (grad or w_shape[0] == groups)


# Off: every depthwise convolution takes conv.py's gemms (benchmarks/bench_depthwise.py times both to measure the rule)
ENABLED = True
# Off: the forward runs by rows at every size (to measure SPREAD_ELEMENTS)
FLAT = True


@dataclass(frozen=True)
class _Planes:
    """The phase planes of a depthwise convolution (the module docstring): ``phases`` (sh, sw) of ``rows`` x
    ``cols`` (Hq x Wq) each, the output ``OH x Wq`` flattened (``span`` = OH * Wq) of which OW columns count, and
    per tap (row-major over the filter) its phase (flat index) and its slice's offset in the plane."""

    phases: tuple[int, int]
    rows: int
    cols: int
    out: tuple[int, int]
    pads: tuple[int, int]
    taps: tuple[tuple[int, int], ...]

    @property
    def span(self) -> int:
        return self.out[0] * self.cols

    @property
    def size(self) -> int:
        """The elements of one plane."""
        return self.rows * self.cols

    @staticmethod
    @functools.lru_cache(maxsize=256)
    def of(geo: ConvGeometry) -> _Planes:
        """The planes of ``geo`` (remembered: a plan's kernels ask for the same few geometries at every run)."""
        (sh, sw), (dh, dw), (kh, kw), (oh, ow) = geo.strides, geo.dilations, geo.ksize, geo.out
        reach_h, reach_w = (kh - 1) * dh // sh, (kw - 1) * dw // sw
        cols = ow + reach_w
        rows = oh + reach_h + (1 if reach_w else 0)  # the last tap's slice runs reach_w past the last row
        taps = tuple(
            ((i * dh % sh) * sw + j * dw % sw, (i * dh // sh) * cols + j * dw // sw)
            for i in range(kh)
            for j in range(kw)
        )
        return _Planes((sh, sw), rows, cols, (oh, ow), (geo.pads[0][0], geo.pads[1][0]), taps)

    def phase_lines(self, axis: int, phase: int, size: int) -> tuple[slice, slice]:
        """The plane lines (rows for ``axis`` 0, columns for 1) of ``phase`` along ``axis`` that hold Input's
        lines, and those Input lines (of ``size``): phase line ``u`` is padded line ``u * stride + phase``, Input
        line ``u * stride + phase - pad``. Lines past the plane (no tap reads them) are left out."""
        stride, pad, plane = self.phases[axis], self.pads[axis], (self.rows, self.cols)[axis]
        first = -(-(pad - phase) // stride) if pad > phase else 0
        start = first * stride + phase - pad
        count = max(0, min(plane - first, -(-(size - start) // stride)))
        return slice(first, first + count), slice(start, start + stride * (count - 1) + 1, stride)


def _channel_first(x: Any, channel_last: bool) -> Any:
    return x.transpose(0, 3, 1, 2) if channel_last else x


def _read_planes(xp: Any, x: Any, planes: _Planes, phase_major: bool = False) -> Any:
    """NCHW ``x`` as phase planes ``[N * C, sh * sw, Hq * Wq]`` (``phase_major``: ``[sh * sw, N * C * Hq * Wq]``,
    each phase's planes one after the other), zeros where no Input pixel is."""
    n, c, h, w = x.shape
    sh, sw = planes.phases
    if phase_major:
        out = xp.zeros((sh, sw, n, c, planes.rows, planes.cols), dtype=x.dtype)
    else:
        out = xp.zeros((n, c, sh, sw, planes.rows, planes.cols), dtype=x.dtype)
    for a in range(sh):
        rows, src_rows = planes.phase_lines(0, a, h)
        for b in range(sw):
            cols, src_cols = planes.phase_lines(1, b, w)
            phase = out[a, b] if phase_major else out[:, :, a, b]
            phase[:, :, rows, cols] = x[:, :, src_rows, src_cols]
    if phase_major:
        return out.reshape(sh * sw, n * c * planes.size)
    return out.reshape(n * c, sh * sw, planes.size)


def _write_planes(xp: Any, grads: Any, planes: _Planes, shape: Sequence[int]) -> Any:
    """The adjoint of :func:`_read_planes`: NCHW Input@GRAD of ``shape`` from the planes' gradient."""
    n, c, h, w = shape
    sh, sw = planes.phases
    grads = grads.reshape(n, c, sh, sw, planes.rows, planes.cols)
    dx = xp.zeros((n, c, h, w), dtype=grads.dtype)
    for a in range(sh):
        rows, dst_rows = planes.phase_lines(0, a, h)
        for b in range(sw):
            cols, dst_cols = planes.phase_lines(1, b, w)
            dx[:, :, dst_rows, dst_cols] = grads[:, :, a, b, rows, cols]
    return dx


def _chunks(rows: int, per_row: int) -> list[slice]:
    """Consecutive slices of ``rows`` rows of ``per_row`` elements, about :data:`CHUNK` elements each (the first
    the longest)."""
    step = max(1, CHUNK // per_row)
    return [slice(start, min(start + step, rows)) for start in range(0, rows, step)]


def _rows_weights(xp: Any, w: Any, n: int, c: int) -> Any:
    """Filter ``[C * multiplier, 1, kh, kw]`` as ``[taps, N * C, multiplier]``: per tap, each row's weight for each
    of its outputs (the same for every image; one image: a view of Filter)."""
    taps = w.shape[2] * w.shape[3]
    per_tap = w.reshape(c, -1, taps).transpose(2, 0, 1)  # [taps, C, multiplier]
    if n == 1:
        return per_tap
    rows = xp.broadcast_to(per_tap[:, None], (taps, n, *per_tap.shape[1:]))
    return xp.ascontiguousarray(rows).reshape(taps, n * c, -1)


# (id of a Filter, images, plane size) -> (Filter's bytes, its spread weights): _spread_weights' results, each valid
# while the Filter holding those bytes is that array; an entry goes when its Filter is collected.
_SPREAD: dict[tuple[int, int, int], tuple[bytes, Any]] = {}


def _spread_weights(xp: Any, w: Any, n: int, size: int) -> Any:
    """Filter ``[C, 1, kh, kw]`` as ``[taps, N * C * size]``: per tap, each (image, channel) row's weight repeated
    over its plane of ``size`` elements. Remembered for the Filter array and computed again when its values
    change (compared by its bytes, a few KiB: a parameter updated in place is seen)."""
    key, data = (id(w), n, size), w.tobytes()
    entry = _SPREAD.get(key)
    if entry is not None and entry[0] == data:
        return entry[1]
    c, taps = w.shape[0], w.shape[2] * w.shape[3]
    per_tap = w.reshape(c, taps).T[:, None, :, None]  # [taps, 1, C, 1]
    spread = xp.ascontiguousarray(xp.broadcast_to(per_tap, (taps, n, c, size))).reshape(taps, -1)
    if entry is None:
        weakref.finalize(w, _SPREAD.pop, key, None)
    _SPREAD[key] = (data, spread)
    return spread


def _flat_taps(xp: Any, x: Any, w: Any, planes: _Planes) -> Any:
    """The rows ``[N * C, span]`` of the depthwise convolution of NCHW ``x`` by Filter ``[C, 1, kh, kw]``, its taps
    run over the planes flattened (the module docstring): a view into rows of a plane's size."""
    n, c = x.shape[:2]
    size, span = planes.size, planes.span
    source = _read_planes(xp, x, planes, phase_major=True)
    spread = _spread_weights(xp, w, n, size)
    length = n * c * size - (size - span)  # through the last row's span
    out = xp.empty((n * c, size), dtype=x.dtype)
    flat, product = out.reshape(-1)[:length], xp.empty(length, dtype=x.dtype)
    for t, (phase, offset) in enumerate(planes.taps):
        tap, weight = source[phase, offset : offset + length], spread[t, :length]
        xp.multiply(tap, weight, out=flat if t == 0 else product)
        if t:
            xp.add(flat, product, out=flat)
    return out[:, :span]


def _row_taps(xp: Any, x: Any, w: Any, planes: _Planes) -> Any:
    """The rows ``[N * C, multiplier, span]`` of the depthwise convolution of NCHW ``x`` by Filter ``w``: per tap,
    its slice of the planes times the tap's weight per row, summed in chunks of rows."""
    n, c = x.shape[:2]
    source = _read_planes(xp, x, planes)
    weights = _rows_weights(xp, w, n, c)
    multiplier, span = weights.shape[2], planes.span
    out = xp.empty((n * c, multiplier, span), dtype=x.dtype)
    chunks = _chunks(n * c, multiplier * span)
    product = xp.empty((chunks[0].stop, multiplier, span), dtype=x.dtype)
    for chunk in chunks:
        o, p = out[chunk], product[: chunk.stop - chunk.start]
        for t, (phase, offset) in enumerate(planes.taps):
            tap, weight = source[chunk, None, phase, offset : offset + span], weights[t, chunk, :, None]
            xp.multiply(tap, weight, out=o if t == 0 else p)
            if t:
                xp.add(o, p, out=o)
    return out


def _layout(xp: Any, y: Any, planes: _Planes, channel_last: bool) -> Any:
    """Output rows ``[N, M, OH * Wq]`` as Output in the op's layout (the columns past OW dropped)."""
    n, m = y.shape[:2]
    (oh, ow), cols = planes.out, planes.cols
    y = y.reshape(n, m, oh, cols)[:, :, :, :ow]
    return xp.ascontiguousarray(y.transpose(0, 2, 3, 1) if channel_last else y)


def _summed_in(xp: Any, *arrays: Any) -> list[Any]:
    """``arrays`` in the dtype the taps are summed in: float16 as float32 (a sum over the taps in float16 loses
    digits that a gemm's float32 accumulation keeps), the others as they are."""
    return [a.astype(xp.float32) if a.dtype == xp.float16 else a for a in arrays]


def conv(xp: Any, x: Any, w: Any, geo: ConvGeometry, channel_last: bool) -> Any:
    """Output of the depthwise convolution of ``x`` (NCHW, or NHWC with ``channel_last``) by Filter ``w``
    ``[C * multiplier, 1, kh, kw]``: per tap, its slice of the planes times the tap's weight, summed (flattened
    for a multiplier of 1 and at most :data:`SPREAD_ELEMENTS` spread weights, else by rows)."""
    dtype = x.dtype
    x, w = _summed_in(xp, x, w)
    x = _channel_first(x, channel_last)
    n, c = x.shape[:2]
    planes = _Planes.of(geo)
    flat = FLAT and w.shape[0] == c and len(planes.taps) * n * c * planes.size <= SPREAD_ELEMENTS
    out = _flat_taps(xp, x, w, planes) if flat else _row_taps(xp, x, w, planes)
    return _layout(xp, out.reshape(n, w.shape[0], planes.span), planes, channel_last).astype(dtype, copy=False)


def conv_grad(
    xp: Any, x: Any, w: Any, dout: Any, geo: ConvGeometry, channel_last: bool, wants: Sequence[bool]
) -> tuple[Any, Any]:
    """(Input@GRAD, Filter@GRAD) of :func:`conv` for Output@GRAD ``dout`` (the op's layout); None for an output
    ``wants`` (Input, Filter) does not ask for."""
    dtypes = x.dtype, w.dtype
    x, w, dout = _summed_in(xp, x, w, dout)
    x = _channel_first(x, channel_last)
    n, c = x.shape[:2]
    planes = _Planes.of(geo)
    (oh, ow), span = planes.out, planes.span
    weights = _rows_weights(xp, w, n, c)
    multiplier = weights.shape[2]
    # Output@GRAD as rows [N * C, multiplier, OH * Wq], zero past OW
    g = xp.zeros((n, c * multiplier, oh, planes.cols), dtype=dout.dtype)
    g[:, :, :, :ow] = _channel_first(dout, channel_last)
    g = g.reshape(n * c, multiplier, span)
    dx = dw = None
    if wants[1]:
        source = _read_planes(xp, x, planes)
        rows_dw = xp.empty((n * c, multiplier, len(planes.taps)), dtype=x.dtype)
        for t, (phase, offset) in enumerate(planes.taps):
            rows_dw[:, :, t] = xp.einsum("rql,rl->rq", g, source[:, phase, offset : offset + span])
        dw = rows_dw.reshape(n, c * multiplier, *geo.ksize).sum(axis=0)[:, None].astype(dtypes[1], copy=False)
    if wants[0]:
        grads = xp.zeros((n * c, planes.phases[0] * planes.phases[1], planes.rows * planes.cols), dtype=dout.dtype)
        chunks = _chunks(n * c, span)
        product = xp.empty((chunks[0].stop, span), dtype=dout.dtype)
        for chunk in chunks:
            p = product[: chunk.stop - chunk.start]
            for t, (phase, offset) in enumerate(planes.taps):
                into = grads[chunk, phase, offset : offset + span]
                xp.einsum("rql,rq->rl", g[chunk], weights[t, chunk], out=p)
                xp.add(into, p, out=into)
        dx = _write_planes(xp, grads, planes, x.shape)
        dx = (xp.ascontiguousarray(dx.transpose(0, 2, 3, 1)) if channel_last else dx).astype(dtypes[0], copy=False)
    return dx, dw
