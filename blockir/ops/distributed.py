"""Ops of parameter-server training: a worker's lookups in, and pushes and pulls to, the servers.

The ``distribute`` pass (:mod:`blockir.passes.distribute`) puts them in the
worker program. Each reads ``Client``, a ``raw`` variable the worker's scope
holds (``PS_CLIENT``): the worker's communicator
(:mod:`blockir.distributed.communicator`), which :class:`Client` describes. Ids,
rows and gradients cross as host numpy arrays.

- ``distributed_lookup_table``: ``Out = rows of table[Ids]`` pulled from the
  servers holding the table's shards (ids checked against the table's declared
  ``height``; rows of ``padding_idx`` are zero);
- ``send``: one push per step of the dense gradients ``X`` (of the parameters
  ``params``) and of the sparse gradients, ``Rows`` at ``Ids`` of the tables
  ``tables`` (rows of ``padding_idx`` left out), weighted by the step's batch
  (``Batch``: its rows, or sequences for a LoD tensor); ``Token`` says it was
  made, for ``recv`` to follow it;
- ``recv``: the parameters ``params`` (``Current``, updated in place, so that
  every reader of the arrays sees them) as the servers hold them, after ``Token``;
- ``geo_sync`` (GEO-SGD, the worker training locally): every ``k_steps`` steps
  the change of each parameter and table (at the ids the lookups read) since
  the last exchange goes to the servers, which add it, and the servers' values
  come back, in place.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, Protocol

import numpy as np

from blockir.ir.attrs import AttrType
from blockir.ir.dtypes import VarKind
from blockir.ir.schema import AttrDef, InferContext, KernelContext, OpSchema, Slot
from blockir.ops.common import compatible, fmt
from blockir.ops.nn import flat_ids
from blockir.ops.values import LoDTensor

__all__ = ["DISTRIBUTED_LOOKUP_TABLE", "GEO_SYNC", "PS_CLIENT", "RECV", "SCHEMAS", "SEND", "Client", "batch_weight"]

PS_CLIENT = "ps@CLIENT"  # the variable holding the worker's communicator


class Client(Protocol):
    """What the ops ask of a worker's communicator."""

    def pull_sparse(self, table: str, ids: np.ndarray) -> np.ndarray:
        """The rows of ``table`` at ``ids`` (int64, one dimension), ``[len(ids), dim]``."""
        ...

    def push(self, dense: dict[str, np.ndarray], sparse: list[tuple[str, np.ndarray, np.ndarray]], weight: int) -> None:
        """One step's gradients: dense by parameter, sparse as (table, ids, rows); ``weight``: the batch size."""
        ...

    def pull_dense(self, names: Sequence[str]) -> dict[str, np.ndarray] | None:
        """The parameters ``names`` as the servers hold them; None when there is nothing newer to take."""
        ...

    def geo_step(self, params: dict[str, Any], touched: dict[str, np.ndarray]) -> None:
        """GEO: one local step done (``params`` by name, ``touched``: the ids each table's lookups read); every
        k steps the deltas go to the servers and their values come back into ``params``, in place."""
        ...


def batch_weight(batch: Any) -> int:
    """A batch's size: its sequences for a LoD tensor, else its rows."""
    if isinstance(batch, LoDTensor) and batch.lod:
        return len(batch.lod[0]) - 1
    return int(np.shape(batch)[0]) if np.ndim(batch) else 1


def _host(value: Any) -> np.ndarray:
    if type(value) is np.ndarray:  # (a step's usual value: its checks skipped)
        return value
    value = value.data if isinstance(value, LoDTensor) else value
    return value.get() if hasattr(value, "get") and not isinstance(value, np.ndarray) else np.asarray(value)


_VERSIONS = ("lookup_table", "lookup_table_v2")


def _infer_client(ctx: InferContext) -> None:
    client = ctx.inputs("Client")[0]
    if client.kind is not VarKind.RAW:
        ctx.fail(f"Client {client.name!r} must be a raw variable (the worker's communicator), not {client.kind.text}")


def _infer_lookup(ctx: InferContext) -> None:
    _infer_client(ctx)
    ids = ctx.tensor("Ids")
    if ids.dtype not in ("int64", "int32"):
        ctx.fail(f"Ids {fmt(ids)} must be int64 or int32")
    if ctx.attr("height") < 1 or ctx.attr("dim") < 1:
        ctx.fail(f"height {ctx.attr('height')} and dim {ctx.attr('dim')} must be positive")
    version = ctx.attr("lookup_table_version")
    if version not in _VERSIONS:
        ctx.fail(f"lookup_table_version {version!r} must be one of {list(_VERSIONS)}")
    if version == "lookup_table" and (not ids.shape or not compatible(ids.shape[-1], 1)):
        ctx.fail(f"Ids {fmt(ids)} of a lookup_table must have a last dimension of 1 (lookup_table_v2: any shape)")
    leading = ids.shape[:-1] if version == "lookup_table" else ids.shape
    ctx.set_output("Out", (*leading, ctx.attr("dim")), ctx.attr("dtype"), lod_level=ids.lod_level)


def _lookup(ctx: KernelContext, ids: Any, client: Client) -> Any:
    flat = np.asarray(_host(flat_ids(ctx, ids, ctx.attrs["height"])), dtype=np.int64)
    rows = client.pull_sparse(ctx.attrs["table"], flat)
    padding = ctx.attrs["padding_idx"]
    if padding != -1:
        rows[flat == padding] = 0
    leading = np.shape(ids)[:-1] if ctx.attrs["lookup_table_version"] == "lookup_table" else np.shape(ids)
    return ctx.xp.asarray(rows.reshape(*leading, ctx.attrs["dim"]))


DISTRIBUTED_LOOKUP_TABLE = OpSchema(
    "distributed_lookup_table",
    inputs=(Slot("Ids", no_grad=True), Slot("Client", no_grad=True)),
    outputs=(Slot("Out"),),
    attrs=(
        AttrDef("table", AttrType.STRING),
        AttrDef("height", AttrType.LONG),
        AttrDef("dim", AttrType.LONG),
        AttrDef("dtype", AttrType.STRING, "float32"),
        AttrDef("padding_idx", AttrType.LONG, -1),
        AttrDef("lookup_table_version", AttrType.STRING, "lookup_table"),  # the op it replaces: Out's shape
    ),
    infer=_infer_lookup,
    kernel=_lookup,
    share_lod=(("Ids", "Out"),),
    side_effects=True,
    doc="Out = rows of the servers' sparse table `table` at Ids (height: the ids' range; dim: the row size); "
    "Out is [*Ids.shape[:-1], dim] as lookup_table's, or [*Ids.shape, dim] with "
    "lookup_table_version=lookup_table_v2.",
)


def _infer_send(ctx: InferContext) -> None:
    _infer_client(ctx)
    xs = ctx.inputs("X") if ctx.has_input("X") else []
    if len(xs) != len(ctx.attr("params")):
        ctx.fail(f"{len(xs)} X gradients for {len(ctx.attr('params'))} params")
    ids = ctx.inputs("Ids") if ctx.has_input("Ids") else []
    rows = ctx.inputs("Rows") if ctx.has_input("Rows") else []
    tables, padding = ctx.attr("tables"), ctx.attr("padding_idx")
    if not len(ids) == len(rows) == len(tables) == len(padding):
        ctx.fail(f"{len(ids)} Ids, {len(rows)} Rows, {len(tables)} tables and {len(padding)} padding_idx must match")
    ctx.set_output("Token", (1,), "int64")


def _send(
    ctx: KernelContext,
    xs: list[Any] | None,
    ids: list[Any] | None,
    rows: list[Any] | None,
    batch: Any,
    client: Client,
) -> Any:
    dense = {name: _host(x) for name, x in zip(ctx.attrs["params"], xs or ())}
    sparse = []
    for table, padding, i, r in zip(ctx.attrs["tables"], ctx.attrs["padding_idx"], ids or (), rows or ()):
        flat = _host(i).reshape(-1).astype(np.int64, copy=False)
        values = _host(r).reshape(flat.shape[0], -1)
        if padding != -1:
            keep = flat != padding
            flat, values = flat[keep], values[keep]
        sparse.append((table, flat, values))
    client.push(dense, sparse, batch_weight(batch) if batch is not None else 1)
    return ctx.xp.zeros(1, dtype=np.int64)


SEND = OpSchema(
    "send",
    inputs=(
        Slot("X", duplicable=True, optional=True, no_grad=True),
        Slot("Ids", duplicable=True, optional=True, no_grad=True),
        Slot("Rows", duplicable=True, optional=True, no_grad=True),
        Slot("Batch", optional=True, lod=True, no_grad=True),
        Slot("Client", no_grad=True),
    ),
    outputs=(Slot("Token"),),
    attrs=(
        AttrDef("params", AttrType.STRINGS, []),
        AttrDef("tables", AttrType.STRINGS, []),
        AttrDef("padding_idx", AttrType.LONGS, []),
    ),
    infer=_infer_send,
    kernel=_send,
    side_effects=True,
    doc="Push one step's gradients to the servers: X of `params` (dense), Rows at Ids of `tables` (sparse), "
    "weighted by Batch's size.",
)


def _infer_recv(ctx: InferContext) -> None:
    _infer_client(ctx)
    current, out = ctx.inputs("Current"), ctx.outputs("Out")
    if [v.name for v in current] != [v.name for v in out] or len(out) != len(ctx.attr("params")):
        ctx.fail("Out must name the Current variables, one per params entry (parameters are updated in place)")


def _recv(ctx: KernelContext, tokens: list[Any], current: list[Any], client: Client) -> list[Any]:
    fresh = client.pull_dense(ctx.attrs["params"])
    if fresh is not None:
        for name, value in zip(ctx.attrs["params"], current):
            value[...] = ctx.xp.asarray(fresh[name]).reshape(value.shape)
    return current


RECV = OpSchema(
    "recv",
    inputs=(
        Slot("Token", duplicable=True, no_grad=True),
        Slot("Current", duplicable=True, no_grad=True),
        Slot("Client", no_grad=True),
    ),
    outputs=(Slot("Out", duplicable=True),),
    attrs=(AttrDef("params", AttrType.STRINGS, []),),
    infer=_infer_recv,
    kernel=_recv,
    side_effects=True,
    doc="Out (= Current, in place) = the parameters `params` as the servers hold them, after Token's push.",
)


def _infer_geo_sync(ctx: InferContext) -> None:
    _infer_client(ctx)
    params, out = ctx.inputs("Params"), ctx.outputs("Out")
    if [v.name for v in params] != [v.name for v in out] or len(out) != len(ctx.attr("params")):
        ctx.fail("Out must name the Params variables, one per params entry (they are updated in place)")
    ids = ctx.inputs("Ids") if ctx.has_input("Ids") else []
    if len(ids) != len(ctx.attr("id_tables")):
        ctx.fail(f"{len(ids)} Ids for {len(ctx.attr('id_tables'))} id_tables")


def _geo_sync(ctx: KernelContext, params: list[Any], ids: list[Any] | None, client: Client) -> list[Any]:
    touched: dict[str, list[np.ndarray]] = {}
    for table, i in zip(ctx.attrs["id_tables"], ids or ()):
        touched.setdefault(table, []).append(_host(i).reshape(-1).astype(np.int64, copy=False))
    client.geo_step(dict(zip(ctx.attrs["params"], params)), {t: np.concatenate(v) for t, v in touched.items()})
    return params


GEO_SYNC = OpSchema(
    "geo_sync",
    inputs=(
        Slot("Params", duplicable=True, no_grad=True),
        Slot("Ids", duplicable=True, optional=True, no_grad=True),
        Slot("Client", no_grad=True),
    ),
    outputs=(Slot("Out", duplicable=True),),
    attrs=(AttrDef("params", AttrType.STRINGS, []), AttrDef("id_tables", AttrType.STRINGS, [])),
    infer=_infer_geo_sync,
    kernel=_geo_sync,
    side_effects=True,
    doc="GEO-SGD: count a step; every k steps push the deltas of Params (of tables, at the ids Ids touched) "
    "and take the servers' values, in place.",
)

SCHEMAS: tuple[OpSchema, ...] = (DISTRIBUTED_LOOKUP_TABLE, SEND, RECV, GEO_SYNC)
