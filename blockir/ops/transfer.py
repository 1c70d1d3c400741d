"""Data movement ops: ``feed``, ``fetch`` and ``memcpy``.

``feed`` takes column ``col`` of the feed list (a Python list held in a
FEED_MINIBATCH variable) onto the kernel's device; ``fetch`` brings a value back
to the host for position ``col`` of the fetch list; ``memcpy`` copies a value
(dense, LoDTensor or SelectedRows) towards ``dst_device``. All three keep a
value's kind: a LoDTensor stays a LoDTensor with its LoD.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np

from blockir.ir.attrs import AttrType
from blockir.ir.devices import DEVICE_FORMS, is_valid_device
from blockir.ir.dtypes import VarKind
from blockir.ir.schema import AttrDef, InferContext, KernelContext, Lowering, OpSchema, Slot
from blockir.ops.common import host_copy, kernel_error, to_host
from blockir.ops.values import LoDTensor, SelectedRows, TensorArray


def map_arrays(value: Any, fn: Callable[[Any], Any]) -> Any:
    """Apply ``fn`` to the array(s) of a dense, LoDTensor, SelectedRows or TensorArray value; keep LoD, rows and
    height."""
    if isinstance(value, TensorArray):
        return TensorArray(None if v is None else map_arrays(v, fn) for v in value)
    if isinstance(value, LoDTensor):
        return LoDTensor(fn(value.data), value.lod)
    if isinstance(value, SelectedRows):
        return SelectedRows(np.array(to_host(value.rows), dtype=np.int64), fn(value.values), value.height)
    return fn(value)


def _col(ctx: InferContext) -> None:
    if ctx.attr("col") < 0:
        ctx.fail(f"col {ctx.attr('col')} must not be negative")


def _infer_feed(ctx: InferContext) -> None:
    _col(ctx)
    x = ctx.input("X")
    if x.kind is not VarKind.FEED_MINIBATCH:
        ctx.fail(f"X {x.name!r} must be a feed_minibatch variable, not {x.kind.text}")


def _feed(ctx: KernelContext, feed_list: Any) -> Any:
    """Column ``col`` of the feed list, on the kernel's device (numpy arrays are not copied)."""
    col = ctx.attrs["col"]
    if not 0 <= col < len(feed_list):
        raise kernel_error(
            ctx, f"feed: column {col} is missing from the feed list, which holds {len(feed_list)} value(s)"
        )
    return map_arrays(feed_list[col], ctx.xp.asarray)


def _infer_fetch(ctx: InferContext) -> None:
    _col(ctx)
    for out in ctx.outputs("Out"):
        if out.kind is not VarKind.FETCH_LIST:
            ctx.fail(f"Out {out.name!r} must be a fetch_list variable, not {out.kind.text}")


def _fetch(ctx: KernelContext, x: Any) -> Any:
    """A host copy of X (never aliasing a buffer the program may update in place later)."""
    return map_arrays(x, host_copy)


def _infer_memcpy(ctx: InferContext) -> None:
    device = ctx.attr("dst_device")
    if not is_valid_device(device):
        ctx.fail(f"dst_device {device!r} is not a device (expected {DEVICE_FORMS})")
    x = ctx.input("X")
    for out in ctx.outputs("Out"):
        out.kind = x.kind
    if x.shape is not None and x.dtype is not None:  # a tensor
        ctx.set_output("Out", x.shape, x.dtype, lod_level=x.lod_level)


def copy_value(value: Any, xp: Any) -> Any:
    """A copy of a dense, LoDTensor or SelectedRows value in new buffers of array module ``xp`` (LoD, rows
    kept). With numpy the copy is on the host, wherever the value is (a cupy array comes back with ``.get()``);
    with cupy it is on the current CUDA device."""
    return map_arrays(value, host_copy if xp is np else lambda a: xp.array(a, copy=True))


def _memcpy(ctx: KernelContext, x: Any) -> Any:
    """A real copy of X, never sharing its buffers. The op runs on ``dst_device``, so ``ctx.xp``
    allocates there: between the host and virtual CPU devices it is a numpy copy, from a CUDA device to
    the host a ``.get()``. A memcpy launched on a CUDA stream never gets here: the stream does the copy
    asynchronously itself (:meth:`blockir.runtime.cuda.CUDAStream.copy`)."""
    return copy_value(x, ctx.xp)


_X = (Slot("X", lod=True, no_grad=True),)  # values arrive as they are: lists, LoDTensors, SelectedRows
_OUT = (Slot("Out"),)
_COL = (AttrDef("col", AttrType.INT, 0),)

FEED = OpSchema(
    "feed",
    inputs=_X,
    outputs=_OUT,
    attrs=_COL,
    host=True,
    lowering=Lowering.FEED,
    infer=_infer_feed,
    kernel=_feed,
    doc="Out = X[col], X being the feed list.",
)

FETCH = OpSchema(
    "fetch",
    inputs=_X,
    outputs=_OUT,
    attrs=_COL,
    host=True,
    lowering=Lowering.FETCH,
    infer=_infer_fetch,
    kernel=_fetch,
    side_effects=True,
    doc="A host copy of X, stored by the executor at position col of the fetch list Out.",
)

MEMCPY = OpSchema(
    "memcpy",
    inputs=_X,
    outputs=_OUT,
    attrs=(AttrDef("dst_device", AttrType.STRING),),
    infer=_infer_memcpy,
    kernel=_memcpy,
    share_lod=(("X", "Out"),),
    lowering=Lowering.COPY,
    device_attr="dst_device",
    doc="A copy of X on dst_device (dense, LoDTensor or SelectedRows).",
)

SCHEMAS: tuple[OpSchema, ...] = (FEED, FETCH, MEMCPY)
