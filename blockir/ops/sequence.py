"""Sequence ops over LoD tensors: ``sequence_pool`` (Fluid 1.x semantics).

A LoDTensor packs variable-length sequences along axis 0; the last LoD level's
offsets delimit them. Pooling reduces each sequence to one row, vectorised with
``add.reduceat``, a segmented scan (for MAX) and index arithmetic rather than a loop over sequences.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

from blockir.ir.attrs import AttrType
from blockir.ir.dtypes import FLOAT_DTYPES
from blockir.ir.schema import AttrDef, InferContext, KernelContext, OpSchema, Slot
from blockir.ops.common import fmt, grad_op, infer_like, kernel_error
from blockir.ops.values import LoDTensor

POOL_TYPES = ("SUM", "AVERAGE", "SQRT", "MAX", "LAST", "FIRST")

_ATTRS = (
    AttrDef("pooltype", AttrType.STRING, "AVERAGE"),
    AttrDef("is_test", AttrType.BOOLEAN, False),
    AttrDef("pad_value", AttrType.FLOAT, 0.0),
)


@dataclass(frozen=True)
class _Segments:
    """The sequences of the last LoD level, as host int64 arrays."""

    starts: np.ndarray
    ends: np.ndarray
    lengths: np.ndarray
    nonempty: np.ndarray  # bool per sequence
    row_seq: np.ndarray  # the sequence of every row

    @staticmethod
    def of(ctx: KernelContext, x: Any) -> _Segments:
        if not isinstance(x, LoDTensor) or not x.lod:
            shape = list(getattr(x, "shape", ()))
            raise kernel_error(
                ctx,
                f"sequence_pool: X must be a LoDTensor with at least one LoD level, got a "
                f"plain {type(x).__name__} of shape {shape}",
            )
        offsets = np.asarray(x.lod[-1], dtype=np.int64)
        lengths = np.diff(offsets)
        return _Segments(offsets[:-1], offsets[1:], lengths, lengths > 0, np.repeat(np.arange(len(lengths)), lengths))

    @property
    def all_nonempty(self) -> bool:
        return bool(self.nonempty.all())


def _expand(xp: Any, seg: _Segments, pooled: Any, fill: Any) -> Any:
    """Rows for the non-empty sequences -> one row per sequence, ``fill`` for the empty ones."""
    if seg.all_nonempty:
        return pooled
    out = xp.full((len(seg.lengths), *pooled.shape[1:]), fill, dtype=pooled.dtype)
    out[xp.asarray(seg.nonempty)] = pooled
    return out


def _reduce_segments(xp: Any, ufunc: Any, flat: Any, seg: _Segments) -> Any:
    """``ufunc`` (``maximum``, ``minimum``) over the rows of each non-empty sequence, what ``ufunc.reduceat``
    at their starts gives, by a segmented scan that doubles its reach each round (CuPy has no
    ``maximum.reduceat``): after the round of reach ``r`` a row holds the reduction of the ``2r`` rows of its
    sequence ending there, so a sequence's last row ends up holding the whole sequence's."""
    row_start = seg.starts[seg.row_seq]
    rows = np.arange(len(row_start))
    out, reach = flat, 1
    while reach < seg.lengths.max(initial=0):
        src = rows - reach
        within = src >= row_start
        at = xp.asarray(rows[within])
        if out is flat:
            out = flat.copy()  # the input is never written
        out[at] = ufunc(out[at], out[xp.asarray(src[within])])
        reach *= 2
    return out[xp.asarray(seg.ends[seg.nonempty] - 1)]


def _infer_sequence_pool(ctx: InferContext) -> None:
    x = ctx.tensor("X")
    pooltype = ctx.attr("pooltype")
    if pooltype not in POOL_TYPES:
        ctx.fail(f"pooltype {pooltype!r} is not one of {', '.join(POOL_TYPES)}")
    if x.dtype not in FLOAT_DTYPES:
        ctx.fail(f"X {fmt(x)} must be a floating-point tensor")
    if not x.shape:
        ctx.fail(f"X {fmt(x)} must have at least one dimension")
    shape = (-1, *x.shape[1:])
    level = max(x.lod_level - 1, 0)
    ctx.set_output("Out", shape, x.dtype, lod_level=level)
    ctx.set_output("MaxIndex", shape, "int32", lod_level=level)


def _sequence_pool(ctx: KernelContext, x: Any) -> tuple[Any, Any]:
    """Pool each sequence of the last LoD level to one row: (Out, MaxIndex).

    Out is ``[num_seqs, *X.shape[1:]]``, a plain array for one LoD level, a
    LoDTensor with the higher levels otherwise. Empty sequences give
    ``pad_value``. MaxIndex (MAX pooling only, None otherwise and with
    ``is_test``) holds, per output element, the row of X holding the maximum
    (the first one on ties; -1 for empty sequences).
    """
    xp = ctx.xp
    seg = _Segments.of(ctx, x)
    data = x.data
    flat = data.reshape(data.shape[0], -1)
    pooltype, pad = ctx.attrs["pooltype"], ctx.attrs["pad_value"]
    index = None
    if pooltype in ("SUM", "AVERAGE", "SQRT"):
        starts = xp.asarray(seg.starts[seg.nonempty])
        pooled = xp.add.reduceat(flat, starts, axis=0) if len(starts) else flat[:0]
        if pooltype != "SUM":
            lengths = xp.asarray(seg.lengths[seg.nonempty], dtype=flat.dtype)[:, None]
            pooled /= lengths if pooltype == "AVERAGE" else xp.sqrt(lengths)
    elif pooltype == "MAX":
        pooled = _reduce_segments(xp, xp.maximum, flat, seg)
        if not ctx.attrs["is_test"] and ctx.wants[1]:
            rows = xp.arange(flat.shape[0], dtype="int32")[:, None]
            at_max = flat == pooled[xp.asarray(np.cumsum(seg.nonempty)[seg.row_seq] - 1)]
            candidates = xp.where(at_max, rows, flat.shape[0])
            first = _reduce_segments(xp, xp.minimum, candidates, seg)
            index = _expand(xp, seg, first.astype("int32", copy=False), -1).reshape(-1, *data.shape[1:])
    elif pooltype in ("LAST", "FIRST"):
        picks = seg.ends - 1 if pooltype == "LAST" else seg.starts
        pooled = flat[xp.asarray(picks[seg.nonempty])]
    else:
        raise kernel_error(
            ctx, f"sequence_pool: unknown pooltype {pooltype!r}; expected one of {', '.join(POOL_TYPES)}"
        )
    out = _expand(xp, seg, pooled, pad).reshape(-1, *data.shape[1:])
    return (LoDTensor(out, x.lod[:-1]) if len(x.lod) > 1 else out), index


def _sequence_pool_grad_kernel(ctx: KernelContext, x: Any, max_index: Any, dout: Any) -> Any:
    """dX: dOut spread over each sequence (SUM/AVERAGE/SQRT), or routed to the max / last / first row.

    Rows of empty sequences do not exist, so they get nothing.
    """
    xp = ctx.xp
    seg = _Segments.of(ctx, x)
    data = x.data
    dflat = dout.reshape(len(seg.lengths), -1)
    pooltype = ctx.attrs["pooltype"]
    if pooltype in ("SUM", "AVERAGE", "SQRT"):
        if pooltype != "SUM":
            lengths = xp.asarray(np.maximum(seg.lengths, 1), dtype=dflat.dtype)[:, None]
            dflat = dflat / (lengths if pooltype == "AVERAGE" else xp.sqrt(lengths))
        return dflat[xp.asarray(seg.row_seq)].reshape(data.shape)
    grad = xp.zeros((data.shape[0], dflat.shape[1]), dtype=dflat.dtype)
    nonempty = xp.asarray(seg.nonempty)
    if pooltype == "MAX":
        if max_index is None:
            raise kernel_error(ctx, "sequence_pool_grad: MAX pooling needs the MaxIndex input")
        rows = max_index.reshape(dflat.shape)[nonempty]
        grad[rows, xp.arange(dflat.shape[1])] = dflat[nonempty]
    else:
        picks = seg.ends - 1 if pooltype == "LAST" else seg.starts
        grad[xp.asarray(picks[seg.nonempty])] = dflat[nonempty]
    return grad.reshape(data.shape)


SEQUENCE_POOL_GRAD = OpSchema(
    "sequence_pool_grad",
    inputs=(Slot("X", lod=True), Slot("MaxIndex", optional=True, no_grad=True), Slot("Out@GRAD")),
    outputs=(Slot("X@GRAD"),),
    attrs=_ATTRS,
    infer=lambda ctx: infer_like(ctx, "X", "X@GRAD"),
    kernel=_sequence_pool_grad_kernel,
    share_lod=(("X", "X@GRAD"),),
    doc="Gradient of sequence_pool with respect to X.",
)

SEQUENCE_POOL = OpSchema(
    "sequence_pool",
    inputs=(Slot("X", lod=True),),
    outputs=(Slot("Out"), Slot("MaxIndex", optional=True, no_grad=True)),
    attrs=_ATTRS,
    infer=_infer_sequence_pool,
    grad=lambda g: grad_op(g, SEQUENCE_POOL_GRAD, ("X", "MaxIndex", "Out@GRAD"), ("X",)),
    kernel=_sequence_pool,
    doc="One row per sequence of X's last LoD level: SUM, AVERAGE, SQRT, MAX, LAST or FIRST.",
)

SCHEMAS: tuple[OpSchema, ...] = (SEQUENCE_POOL, SEQUENCE_POOL_GRAD)
