"""What a parameter server's save holds, and the same save for another number of servers.

A save (``fleet.save_persistables``) is a ``bir.io`` save whose manifest also names
the sparse tables' shards (:func:`blockir.io.persistence.save_sharded`).
:func:`inspect` describes one for people operating a training job (``blockir ps
inspect DIR``); :func:`reshard` writes a copy whose tables are cut for another
number of servers (``blockir ps reshard SRC DST --servers S``). Loading reshards
by itself (a server keeps the rows its index holds by the rule), so resharding a
save is for moving it, not for loading it. Both a server's load and
:func:`reshard` read a table through :func:`replay`: its base, then each delta.

Both check a save as a server loading it does, with the same functions: the
manifest's claims as it is read (types, ranges, the shards it names), each shard
against them (:func:`~blockir.io.persistence.check_shard`: its arrays' headers
and size), and, reading a shard, its checksum and ids
(:func:`~blockir.io.persistence.read_shard`). :func:`inspect` reads no shard's
data unless asked to verify the checksums; :func:`reshard` reads them all, and
writes nothing where it is refused.
"""

from __future__ import annotations

import dataclasses
import os
import secrets
import shutil
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from blockir.distributed.index import IdIndex, grown
from blockir.errors import BlockirError
from blockir.io.manifest import ShardEntry, TableEntry
from blockir.io.persistence import (
    MANIFEST_FILE,
    SHARD_EXTRAS,
    check_distinct,
    check_shard,
    incomplete_saves,
    read_shard,
    save_sharded,
    saved_info,
    saved_tables,
    saved_values,
    write_shard,
)
from blockir.ir.proto_io import make_dirs, os_errors, sync_dir
from blockir.ops.values import describe_value

__all__ = ["Replayed", "checkpoint_info", "inspect", "replay", "reshard"]


def _is_count(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool) and value >= 0


def checkpoint_info(dirname: str | os.PathLike[str]) -> dict[str, Any]:
    """What the writer of a save recorded (:func:`~blockir.io.persistence.saved_info`), the claims of a fleet
    save's checked: ``step`` (worker 0's when it saved) a count, ``versions`` (the updates each server had
    applied) a list of counts. Restoring a server from a checkpoint and inspecting a save read it here."""
    info = saved_info(dirname)
    where = Path(dirname) / MANIFEST_FILE
    if "step" in info and not _is_count(info["step"]):
        raise BlockirError(f"{where}: info: step {info['step']!r} is not a count of steps (0 or more)")
    versions = info.get("versions", [])
    if not isinstance(versions, list) or not all(_is_count(v) for v in versions):
        raise BlockirError(f"{where}: info: versions {versions!r} is not a list of counts of updates (0 or more)")
    return info


def _checked_tables(base: Path) -> dict[str, tuple[TableEntry, int]]:
    """A save's tables (their manifest entries) and the bytes of each one's shards, every claim checked that can
    be without reading the shards' data (the manifest's as it is read, each shard's by its headers and size),
    and what the writer recorded."""
    checkpoint_info(base)
    return {
        name: (entry, sum(check_shard(base, name, entry, shard) for shards in entry.chain() for shard in shards))
        for name, entry in saved_tables(base).items()
    }


def inspect(dirname: str | os.PathLike[str], verify: bool = False) -> dict[str, Any]:
    """The tables of a save (rows per shard of the base save and of each delta after it, bytes, servers, rule,
    the optimizer state saved with the rows), its dense variables (each described) and what its writer
    recorded (``info``: worker 0's step and each server's version, for a fleet save); the saves that did not
    finish (``incomplete``: their generation directories).

    Every claim of the manifest is checked first, each shard's without reading its data (its arrays' headers
    and its size against the rows, dim and dtype claimed); ``verify`` also reads every shard, checking its
    checksum and ids. The first claim the save belies is a :class:`BlockirError` naming it."""
    base = Path(dirname)
    checked = _checked_tables(base)
    tables = {}
    for name, (entry, size) in checked.items():
        tables[name] = {
            "shape": [entry.height, entry.dim],
            "dtype": entry.dtype,
            "servers": entry.servers,
            "rule": entry.rule,
            "states": list(entry.states),
            "rows": [shard.rows for shard in entry.shards],
            "deltas": [[shard.rows for shard in delta] for delta in entry.deltas],
            "bytes": size,
        }
    for name, (entry, _) in checked.items() if verify else ():
        for shards in entry.chain():
            for shard in shards:
                read_shard(base, name, entry, shard)
    dense = {name: describe_value(value) for name, value in saved_values(base).items()}
    return {"tables": tables, "dense": dense, "info": saved_info(base), "incomplete": incomplete_saves(base)}


def _shown(name: str) -> str:
    """A name as printed: as it is when every character prints, else quoted with escapes (a newline in a name
    never makes a line of its own)."""
    return name if name.isprintable() else repr(name)


def format_inspection(report: dict[str, Any]) -> str:
    """``blockir ps inspect``'s text."""
    lines = []
    for name, table in report["tables"].items():
        rows = table["rows"]
        states = ", ".join(map(_shown, table["states"])) or "none"
        lines.append(
            f"table {_shown(name)}: {table['dtype']}{table['shape']}, {sum(rows)} rows on {table['servers']} servers "
            f"({', '.join(map(str, rows))}; rule {table['rule']}), "
            + "".join(f"delta {k + 1}: {sum(d)} rows, " for k, d in enumerate(table["deltas"]))
            + f"{table['bytes']:,} bytes, row state: {states}"
        )
    for name, described in report["dense"].items():
        lines.append(f"dense {_shown(name)}: {described}")
    info = report["info"]
    if "step" in info:
        versions = ", ".join(map(str, info.get("versions", [])))
        lines.append(f"taken at worker 0's step {info['step']}; updates each server had applied: {versions}")
    for name in report["incomplete"]:
        lines.append(f"incomplete save {name}: it did not finish (never loaded; the next save removes it)")
    return "\n".join(lines) or "an empty save"


@dataclass
class Replayed:
    """A table's rows as a chain of saves leaves them (:func:`replay`)."""

    index: IdIndex  # id -> row of `arrays` (rows below `index.end`; a removed id's row is free)
    arrays: dict[str, np.ndarray]  # the table's rows and each state's, by name, aligned with the index's rows
    pending: np.ndarray  # the ids not admitted as of the last save (those admitted since left out)
    counts: np.ndarray  # their sightings


def replay(
    dirname: str | os.PathLike[str],
    name: str,
    entry: TableEntry,
    names: Sequence[str],
    part: tuple[int, int] | None = None,
) -> Replayed:
    """The rows of the table ``name`` (its manifest entry ``entry``) as its chain of saves leaves them: the base,
    then each delta's rows replacing earlier ones (new ids added) and its removed ids gone; the arrays ``names``
    of each row. With ``part`` ``(k, servers)``, only the ids ``id % servers == k`` (server ``k``'s of
    ``servers``): of a save by as many servers only shard ``k`` is read. Each shard is read as
    :func:`~blockir.io.persistence.read_shard` reads it (checked against the manifest, checksummed), and must hold
    only its server's ids by the rule ``id % servers``: so no id is in two shards of one save. The base's rows
    are its arrays as read (no copy where one shard holds them all), under the id index saved with them when
    that shard holds one (a full save's: ``index_slots``, checked whole before it is used) and no id is left
    out, else an index built over them; each delta costs what its rows do."""
    saved, where = entry.servers, Path(dirname) / MANIFEST_FILE
    index = IdIndex()
    arrays = {key: np.zeros((0, entry.dim), entry.dtype) for key in names}
    pending, counts = np.zeros(0, np.int64), np.zeros(0, np.int64)
    for shards in entry.chain():
        chosen = [part[0]] if part is not None and part[1] == saved else range(saved)
        parts = []
        for k in chosen:
            held = read_shard(dirname, name, entry, shards[k], distinct=False)  # checked below
            for key in ("ids", "pending_ids", "removed_ids") if saved > 1 else ():  # (one server holds every id)
                stray = held[key][held[key] % saved != k]
                if stray.size:
                    raise BlockirError(
                        f"{where}: table {name!r}: shard {shards[k].file} of server {k} of {saved} holds id "
                        f"{stray[0]} ({key!r}), which the rule id % servers puts on server {stray[0] % saved}"
                    )
            parts.append(held)
        joined = {key: _joined([p[key] for p in parts]) for key in ("ids", *names, *SHARD_EXTRAS)}
        if part is not None and part[1] != saved:  # the ids of server k of another number of servers
            mine = {by: joined[by] % part[1] == part[0] for by in ("ids", "pending_ids", "removed_ids")}
            follows = {"pending_counts": "pending_ids", **dict.fromkeys(names, "ids")}  # array -> its ids
            joined = {key: array[mine[follows.get(key, key)]] for key, array in joined.items()}
        ids = joined["ids"].astype(np.int64, copy=False)
        if index.end == 0:  # the first rows: the arrays as read, under the index saved with them if it fits
            whole = len(parts) == 1 and "index_slots" in parts[0] and (part is None or part[1] == saved)
            restored = IdIndex.restored(ids, parts[0]["index_slots"]) if whole else None  # no id twice if taken
            if restored is None:
                _check_distinct(dirname, shards, chosen, parts)
                index.add(ids)
            else:
                index = restored
            arrays = {key: joined[key] for key in names}
        else:
            _check_distinct(dirname, shards, chosen, parts)
            at = index.find(ids)
            new = at < 0
            at[new] = index.add(ids[new])
            for key in names:
                arrays[key] = grown(arrays[key], index.end)
                arrays[key][at] = joined[key]
        index.remove(joined["removed_ids"].astype(np.int64, copy=False))
        pending = joined["pending_ids"].astype(np.int64, copy=False)
        counts = joined["pending_counts"].astype(np.int64, copy=False)
    waiting = index.find(pending) < 0
    return Replayed(index, arrays, pending[waiting], counts[waiting])


def _check_distinct(
    dirname: str | os.PathLike[str], shards: Sequence[ShardEntry], chosen: Sequence[int], parts: list[dict[str, Any]]
) -> None:
    """No shard of ``parts`` (read from ``shards[k]`` for ``k`` in ``chosen``) holds an id twice."""
    for k, held in zip(chosen, parts, strict=True):
        check_distinct(dirname, shards[k], held["ids"])


def _joined(arrays: list[np.ndarray]) -> np.ndarray:
    """The arrays of one save's shards, one after the other (the first itself when it is the only one)."""
    return arrays[0] if len(arrays) == 1 else np.concatenate(arrays)


def reshard(src: str | os.PathLike[str], dst: str | os.PathLike[str], servers: int) -> None:
    """Write ``src``'s save to ``dst`` as one full save (its chain of deltas applied) with its tables cut for
    ``servers`` servers (rule ``id % servers``).

    ``src`` is checked as :func:`inspect` checks it, and every shard read (checksums, ids) before ``dst``
    appears. ``dst`` must not exist, or be an empty directory: the copy is written into a temporary
    directory beside it, renamed to ``dst`` once complete; a failure leaves nothing (directories made for
    ``dst`` included)."""
    if isinstance(servers, bool) or not isinstance(servers, int) or servers < 1:
        raise BlockirError(f"reshard: --servers must be an int >= 1, got {servers!r}")
    if Path(src).resolve() == Path(dst).resolve():
        raise BlockirError("reshard: SRC and DST must differ (the save is read while the copy is written)")
    target = Path(dst).absolute()
    if target.is_symlink() or target.exists() and not (target.is_dir() and not any(target.iterdir())):
        raise BlockirError(f"reshard: DST {dst} exists; the copy goes to a new (or empty) directory")
    tables = {name: entry for name, (entry, _) in _checked_tables(Path(src)).items()}  # before anything is written
    values = saved_values(src)
    made = next((p for p in reversed(target.parents) if not p.exists()), None)  # the first directory made for dst
    tmp = target.parent / f".{target.name}.{secrets.token_hex(6)}.tmp"

    def shards(directory: Path) -> dict[str, TableEntry]:
        entries = {}
        for name, entry in tables.items():
            done = replay(src, name, entry, [name, *entry.states])
            at = done.index.live_rows()
            at = at[np.argsort(done.index.row_ids()[at])]  # by id
            ids, rows = done.index.row_ids()[at], {key: array[at] for key, array in done.arrays.items()}
            pending, counts = done.pending, done.counts
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
                cut.append(ShardEntry.written(path.relative_to(tmp.resolve()).as_posix(), write_shard(path, arrays)))
            entries[name] = dataclasses.replace(entry, servers=servers, shards=tuple(cut), deltas=())
        return entries

    try:
        with os_errors(target.parent, "write"):
            make_dirs(target.parent)
        save_sharded(tmp, values, shards)
        with os_errors(target, "write"):
            os.replace(tmp, target)  # replaces an empty directory; refused (ENOTEMPTY) if dst got files meanwhile
            sync_dir(target.parent)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        if made is not None:
            shutil.rmtree(made, ignore_errors=True)
        raise
