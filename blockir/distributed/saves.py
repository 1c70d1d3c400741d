"""What a parameter server's save holds, and the same save for another number of servers.

A save (``fleet.save_persistables``) is a ``bir.io`` save whose manifest also names
the sparse tables' shards (:func:`blockir.io.persistence.save_sharded`).
:func:`inspect` describes one for people operating a training job (``blockir ps
inspect DIR``); :func:`reshard` writes a copy whose tables are cut for another
number of servers (``blockir ps reshard SRC DST --servers S``). Loading reshards
by itself (a server keeps the rows its index holds by the rule), so resharding a
save is for moving it, not for loading it.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import numpy as np

from blockir.errors import BlockirError
from blockir.io.persistence import (
    incomplete_saves,
    read_shard,
    save_sharded,
    saved_info,
    saved_tables,
    saved_values,
    write_shard,
)
from blockir.ops.values import describe_value

__all__ = ["inspect", "reshard"]


def inspect(dirname: str | os.PathLike[str]) -> dict[str, Any]:
    """The tables of a save (rows per shard of the base save and of each delta after it, bytes, servers, rule,
    the optimizer state saved with the rows), its dense variables (each described) and what its writer
    recorded (``info``: worker 0's step and each server's version, for a fleet save); the saves that did not
    finish (``incomplete``: their generation directories)."""
    base = Path(dirname)
    tables = {}
    for name, entry in saved_tables(base).items():
        chain = [entry["shards"], *(delta["shards"] for delta in entry.get("deltas", ()))]
        files = [base / shard["file"] for shards in chain for shard in shards]
        tables[name] = {
            "shape": [entry["height"], entry["dim"]],
            "dtype": entry["dtype"],
            "servers": entry["servers"],
            "rule": entry["rule"],
            "states": entry["states"],
            "rows": [shard["rows"] for shard in entry["shards"]],
            "deltas": [[shard["rows"] for shard in delta["shards"]] for delta in entry.get("deltas", ())],
            "bytes": sum(f.stat().st_size for f in files),
        }
    dense = {name: describe_value(value) for name, value in saved_values(base).items()}
    return {"tables": tables, "dense": dense, "info": saved_info(base), "incomplete": incomplete_saves(base)}


def format_inspection(report: dict[str, Any]) -> str:
    """``blockir ps inspect``'s text."""
    lines = []
    for name, table in report["tables"].items():
        rows = table["rows"]
        lines.append(
            f"table {name}: {table['dtype']}{table['shape']}, {sum(rows)} rows on {table['servers']} servers "
            f"({', '.join(map(str, rows))}; rule {table['rule']}), "
            + "".join(f"delta {k + 1}: {sum(d)} rows, " for k, d in enumerate(table["deltas"]))
            + f"{table['bytes']:,} bytes, row state: {', '.join(table['states']) or 'none'}"
        )
    for name, described in report["dense"].items():
        lines.append(f"dense {name}: {described}")
    info = report["info"]
    if "step" in info:
        versions = ", ".join(map(str, info.get("versions", [])))
        lines.append(f"taken at worker 0's step {info['step']}; updates each server had applied: {versions}")
    for name in report["incomplete"]:
        lines.append(f"incomplete save {name}: it did not finish (never loaded; the next save removes it)")
    return "\n".join(lines) or "an empty save"


def _flatten(
    src: str | os.PathLike[str], name: str, entry: dict[str, Any]
) -> tuple[np.ndarray, dict[str, np.ndarray], np.ndarray, np.ndarray]:
    """A table's rows as its chain of saves leaves them (the base, each delta's rows replacing earlier ones and
    its removed rows gone), and the sightings of the ids not admitted as of the last save."""
    names = [name, *entry["states"]]
    rows: dict[int, dict[str, np.ndarray]] = {}
    pending, counts = np.zeros(0, np.int64), np.zeros(0, np.int64)
    for shards in [entry["shards"], *(d["shards"] for d in entry.get("deltas", ()))]:
        extra = ("pending_ids", "pending_counts", "removed_ids")
        parts = [read_shard(src, shard, names, extra) for shard in shards]
        for part in parts:
            for k, i in enumerate(part["ids"].tolist()):
                rows[i] = {key: part[key][k] for key in names}
            for i in part["removed_ids"].tolist():  # dropped by shrink before this save
                rows.pop(i, None)
        pending = np.concatenate([p["pending_ids"] for p in parts])
        counts = np.concatenate([p["pending_counts"] for p in parts])
    ids = np.array(sorted(rows), np.int64)
    width = (0, entry["dim"])
    arrays = {key: np.array([rows[i][key] for i in ids.tolist()]).reshape(-1, width[1]) for key in names}
    keep = ~np.isin(pending, ids)
    return ids, arrays, pending[keep], counts[keep]


def reshard(src: str | os.PathLike[str], dst: str | os.PathLike[str], servers: int) -> None:
    """Write ``src``'s save to ``dst`` as one full save (its chain of deltas applied) with its tables cut for
    ``servers`` servers (rule ``id % servers``)."""
    if isinstance(servers, bool) or not isinstance(servers, int) or servers < 1:
        raise BlockirError(f"reshard: --servers must be an int >= 1, got {servers!r}")
    if Path(src).resolve() == Path(dst).resolve():
        raise BlockirError("reshard: SRC and DST must differ (the save is read while the copy is written)")
    tables = saved_tables(src)
    values = saved_values(src)
    base = Path(dst).resolve()

    def shards(directory: Path) -> dict[str, dict[str, Any]]:
        entries = {}
        for name, entry in tables.items():
            ids, rows, pending, counts = _flatten(src, name, entry)
            cut = []
            for k in range(servers):
                path = directory / "tables" / name / f"base-{k:03d}-of-{servers:03d}.npys"
                mine, waiting = ids % servers == k, pending % servers == k
                arrays = {
                    "ids": ids[mine],
                    **{key: array[mine] for key, array in rows.items()},
                    "pending_ids": pending[waiting],
                    "pending_counts": counts[waiting],
                    "removed_ids": np.zeros(0, np.int64),
                }
                cut.append({"file": path.relative_to(base).as_posix(), **write_shard(path, arrays)})
            entries[name] = {key: v for key, v in entry.items() if key != "deltas"} | {
                "servers": servers,
                "shards": cut,
            }
        return entries

    save_sharded(dst, values, shards)
