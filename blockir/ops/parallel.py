"""Ops of data parallelism: splitting a batch over replicas, reducing their gradients, broadcasting parameters.

The ``data-parallel`` pass (:mod:`blockir.passes.data_parallel`) inserts them:

- ``split_batch``: the fed batch ``X`` cut along axis 0 into one part per
  replica (``numpy.array_split``'s sizes: the first ``rows % N`` parts one row
  longer, or the sizes fed in ``Sections`` when it has a value), a LoD tensor by
  whole sequences of its outer level; ``Share`` is each part's fraction of the
  batch (rows, or sequences), what its gradient weighs;
- ``allreduce``: ``Out = Σ Share[i] * X[i]``, the gradient of the whole batch
  from the replicas' gradients of their parts' mean losses; sparse gradients
  (``SelectedRows``) are reduced by concatenating the weighted rows and summing
  duplicate ids, never densified; without ``Share`` a plain sum;
- ``device_allreduce``: one all-reduce over devices, ``Out[i] = Σ X`` on the
  device of ``X[i]`` (``devices[i]``); it lowers as a collective
  (:attr:`~blockir.ir.schema.Lowering.COLLECTIVE`): on CUDA devices one NCCL
  all-reduce through ``cupy.cuda.nccl`` when CuPy has it, else through host
  copies (:mod:`blockir.runtime.cuda`); the kernel here is the host's (``cpu:N``
  devices): one sum, a copy of it per device;
- ``broadcast``: a copy of ``X`` on the device of ``Out`` (a copy op); with
  ``init_only`` the copy is made only when ``Current`` (the variable ``Out``
  itself, read from the scope) has no value yet: the initial broadcast of a
  parameter to a replica's device, done by the first run.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from blockir.ir.attrs import AttrType
from blockir.ir.devices import DEVICE_FORMS, device_kind, is_valid_device
from blockir.ir.dtypes import VarKind
from blockir.ir.schema import AttrDef, InferContext, KernelContext, Lowering, OpSchema, Slot
from blockir.ops.common import to_host
from blockir.ops.transfer import copy_value
from blockir.ops.values import LoDTensor, SelectedRows

__all__ = ["ALLREDUCE", "BROADCAST", "DEVICE_ALLREDUCE", "SCHEMAS", "SPLIT_BATCH", "split_sizes"]


def split_sizes(total: int, parts: int) -> list[int]:
    """The sizes ``numpy.array_split`` cuts ``total`` items into, ``parts`` of them."""
    return [total // parts + (1 if k < total % parts else 0) for k in range(parts)]


def _infer_split(ctx: InferContext) -> None:
    x = ctx.input("X")
    n = ctx.attr("replicas")
    if n < 1 or len(ctx.outputs("Out")) != n or len(ctx.outputs("Share")) != n:
        ctx.fail(f"replicas={n} needs that many Out and Share variables")
    for out in ctx.outputs("Out"):
        out.kind = x.kind
    if x.shape is not None and x.dtype is not None:
        shape = [-1, *x.shape[1:]] if x.shape else []
        ctx.set_output("Out", shape, x.dtype, lod_level=x.lod_level)
    ctx.set_output("Share", [1], "float64")


def _split_batch(ctx: KernelContext, x: Any, sections: Any = None) -> tuple[list[Any], list[Any]]:
    n = ctx.attrs["replicas"]
    count = len(x.lod[0]) - 1 if isinstance(x, LoDTensor) else int(np.shape(x)[0]) if np.ndim(x) else 0
    unit = "sequences" if isinstance(x, LoDTensor) else "rows"
    if sections is None:
        if count < n:
            raise ValueError(f"a batch of {count} {unit} cannot be split over {n} replicas (each needs at least one)")
        sizes = split_sizes(count, n)
    else:
        sizes = [int(v) for v in np.asarray(sections.get() if hasattr(sections, "get") else sections).reshape(-1)]
        if len(sizes) != n or min(sizes) < 1 or sum(sizes) != count:
            raise ValueError(
                f"Sections {sizes} must be {n} sizes of at least 1 that add up to the batch's {count} {unit}"
            )
    bounds = np.cumsum([0, *sizes]).tolist()
    shares = [ctx.xp.asarray([s / count], dtype=np.float64) for s in sizes]
    if not isinstance(x, LoDTensor):
        return [x[a:b] for a, b in zip(bounds, bounds[1:])], shares
    parts = []
    for a, b in zip(bounds, bounds[1:]):
        lod = _sub_lod(x.lod, a, b)
        start, stop = lod[-1][0], lod[-1][-1]
        parts.append(LoDTensor(x.data[start:stop], [[o - level[0] for o in level] for level in lod]))
    return parts, shares


def _sub_lod(lod: list[list[int]], a: int, b: int) -> list[list[int]]:
    """The LoD levels of sequences ``a:b`` of the outer level, not yet rebased to 0."""
    levels = [list(lod[0][a : b + 1])]
    for level in lod[1:]:
        levels.append(list(level[levels[-1][0] : levels[-1][-1] + 1]))
    return levels


SPLIT_BATCH = OpSchema(
    "split_batch",
    inputs=(Slot("X", lod=True, no_grad=True), Slot("Sections", optional=True, no_grad=True)),
    outputs=(Slot("Out", duplicable=True, lod=True), Slot("Share", duplicable=True)),
    attrs=(AttrDef("replicas", AttrType.INT),),
    infer=_infer_split,
    kernel=_split_batch,
    doc="X cut along axis 0 (a LoD tensor by sequences) into `replicas` parts, evenly or by the sizes in "
    "Sections; Share[i] = part i's fraction.",
)


def _infer_allreduce(ctx: InferContext) -> None:
    xs, shares = ctx.inputs("X"), ctx.inputs("Share") if ctx.has_input("Share") else None
    if shares is not None and len(xs) != len(shares):
        ctx.fail(f"{len(xs)} X inputs but {len(shares)} Share inputs (one share per replica)")
    first = xs[0]
    for x in xs[1:]:
        if x.kind != first.kind or x.dtype != first.dtype:
            ctx.fail(
                f"X {x.name!r} is {x.kind.text}<{x.dtype}> but X {first.name!r} is {first.kind.text}<{first.dtype}>"
            )
    for out in ctx.outputs("Out"):
        out.kind = first.kind
    if first.shape is not None and first.dtype is not None:
        ctx.set_output("Out", first.shape, first.dtype)


def _allreduce(ctx: KernelContext, xs: list[Any], shares: list[Any] | None = None) -> Any:
    weights = [float(s.reshape(-1)[0]) for s in shares] if shares else [1.0] * len(xs)
    if all(isinstance(x, SelectedRows) for x in xs):
        rows = np.concatenate([to_host(x.rows) for x in xs])  # rows stay on the host, as every kernel keeps them
        values = ctx.xp.concatenate([x.values * x.values.dtype.type(w) for x, w in zip(xs, weights)])
        return SelectedRows(rows, values, xs[0].height).merged(ctx.xp)
    if any(isinstance(x, SelectedRows) for x in xs):
        raise ValueError("X mixes SelectedRows and dense gradients")
    if len(set(weights)) == 1:  # an even split (or no shares): sum, then scale once
        out = ctx.xp.add(xs[0], xs[1]) if len(xs) > 1 else xs[0].copy()
        for x in xs[2:]:
            out += x
        if weights[0] != 1.0:
            out *= out.dtype.type(weights[0])
        return out
    out = xs[0] * xs[0].dtype.type(weights[0])
    for x, w in zip(xs[1:], weights[1:]):
        out += x * x.dtype.type(w)
    return out


ALLREDUCE = OpSchema(
    "allreduce",
    inputs=(Slot("X", duplicable=True, no_grad=True), Slot("Share", duplicable=True, optional=True, no_grad=True)),
    outputs=(Slot("Out"),),
    infer=_infer_allreduce,
    kernel=_allreduce,
    doc="Out = sum of Share[i] * X[i], or of X[i] without Share (SelectedRows: rows joined, duplicates summed).",
)


def _infer_device_allreduce(ctx: InferContext) -> None:
    devices = ctx.attr("devices")
    xs, outs = ctx.inputs("X"), ctx.outputs("Out")
    if len(devices) < 2 or len(xs) != len(devices) or len(outs) != len(devices):
        ctx.fail(f"{len(devices)} devices need as many X and Out variables (at least 2), got {len(xs)} and {len(outs)}")
    for device in devices:
        if not is_valid_device(device):
            ctx.fail(f"devices has {device!r}, which is not a device (expected {DEVICE_FORMS})")
    if len(set(devices)) != len(devices):
        ctx.fail(f"devices {devices} names a device twice")
    if len({device_kind(d) for d in devices}) > 1:
        ctx.fail(f"devices {devices} mixes kinds of device (a collective is over GPUs, or over cpu:N)")
    first = xs[0]
    for x in xs:
        if x.kind is not VarKind.LOD_TENSOR:
            ctx.fail(f"X {x.name!r} is {x.kind.text}: device_allreduce reduces dense tensors only")
        if x.dtype != first.dtype:
            ctx.fail(f"X {x.name!r} is {x.dtype} but X {first.name!r} is {first.dtype}")
    if first.shape is not None and first.dtype is not None:
        ctx.set_output("Out", first.shape, first.dtype)


def _device_allreduce(ctx: KernelContext, xs: list[Any]) -> list[Any]:
    total = xs[0] + xs[1]
    for x in xs[2:]:
        total += x
    return [total, *(total.copy() for _ in xs[1:])]


DEVICE_ALLREDUCE = OpSchema(
    "device_allreduce",
    inputs=(Slot("X", duplicable=True, no_grad=True),),
    outputs=(Slot("Out", duplicable=True),),
    attrs=(AttrDef("devices", AttrType.STRINGS),),
    infer=_infer_device_allreduce,
    kernel=_device_allreduce,
    lowering=Lowering.COLLECTIVE,
    doc="Out[i] = the sum of every X, on devices[i], the device of X[i]; one collective (NCCL on CUDA).",
)


def _infer_broadcast(ctx: InferContext) -> None:
    device = ctx.attr("dst_device")
    if not is_valid_device(device):
        ctx.fail(f"dst_device {device!r} is not a device (expected {DEVICE_FORMS})")
    x = ctx.input("X")
    for out in ctx.outputs("Out"):
        out.kind = x.kind
    if x.shape is not None and x.dtype is not None:
        ctx.set_output("Out", x.shape, x.dtype)


def _broadcast(ctx: KernelContext, x: Any, current: Any = None) -> Any:
    if ctx.attrs["init_only"] and current is not None:
        return current
    return copy_value(x, ctx.xp)


BROADCAST = OpSchema(
    "broadcast",
    inputs=(Slot("X", no_grad=True), Slot("Current", optional=True, no_grad=True)),
    outputs=(Slot("Out"),),
    attrs=(AttrDef("dst_device", AttrType.STRING), AttrDef("init_only", AttrType.BOOLEAN, False)),
    infer=_infer_broadcast,
    kernel=_broadcast,
    lowering=Lowering.COPY,
    device_attr="dst_device",
    doc="Out = a copy of X on dst_device; with init_only, Current (Out's value in the scope) when it has one.",
)

SCHEMAS: tuple[OpSchema, ...] = (SPLIT_BATCH, ALLREDUCE, DEVICE_ALLREDUCE, BROADCAST)
