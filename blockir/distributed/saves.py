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
from blockir.io.persistence import read_shard, save_sharded, saved_tables, saved_values, write_shard
from blockir.ops.values import describe_value

__all__ = ["inspect", "reshard"]


def inspect(dirname: str | os.PathLike[str]) -> dict[str, Any]:
    """The tables of a save (rows per shard, bytes, servers, rule, the optimizer state saved with the rows) and
    its dense variables (each described, bytes)."""
    base = Path(dirname)
    tables = {}
    for name, entry in saved_tables(base).items():
        files = [base / shard["file"] for shard in entry["shards"]]
        tables[name] = {
            "shape": [entry["height"], entry["dim"]],
            "dtype": entry["dtype"],
            "servers": entry["servers"],
            "rule": entry["rule"],
            "states": entry["states"],
            "rows": [shard["rows"] for shard in entry["shards"]],
            "bytes": sum(f.stat().st_size for f in files),
        }
    dense = {name: describe_value(value) for name, value in saved_values(base).items()}
    return {"tables": tables, "dense": dense}


def format_inspection(report: dict[str, Any]) -> str:
    """``blockir ps inspect``'s text."""
    lines = []
    for name, table in report["tables"].items():
        rows = table["rows"]
        lines.append(
            f"table {name}: {table['dtype']}{table['shape']}, {sum(rows)} rows on {table['servers']} servers "
            f"({', '.join(map(str, rows))}; rule {table['rule']}), {table['bytes']:,} bytes, row state: "
            f"{', '.join(table['states']) or 'none'}"
        )
    for name, described in report["dense"].items():
        lines.append(f"dense {name}: {described}")
    return "\n".join(lines) or "an empty save"


def reshard(src: str | os.PathLike[str], dst: str | os.PathLike[str], servers: int) -> None:
    """Write ``src``'s save to ``dst`` with its tables cut for ``servers`` servers (rule ``id % servers``)."""
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
            arrays_of = [name, *entry["states"]]
            parts = [read_shard(src, shard, arrays_of) for shard in entry["shards"]]
            joined = {key: np.concatenate([p[key] for p in parts]) for key in ("ids", *arrays_of)}
            owner = joined["ids"] % servers
            cut = []
            for k in range(servers):
                path = directory / "tables" / name / f"shard-{k:03d}-of-{servers:03d}.npz"
                mine = {key: array[owner == k] for key, array in joined.items()}
                cut.append({"file": path.relative_to(base).as_posix(), **write_shard(path, mine)})
            entries[name] = {**entry, "servers": servers, "shards": cut}
        return entries

    save_sharded(dst, values, shards)
