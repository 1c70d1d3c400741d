"""The sparse tables of a parameter server's save as its manifest names them: :class:`TableEntry`, :class:`ShardEntry`.

A save's ``manifest.json`` (:mod:`blockir.io.persistence`) holds, per sparse table, an entry: the table's
shape and dtype, its sharding rule, the optimizer state saved with its rows, and its shards save by save (the
base, then each delta), each a file of ``.npy`` arrays with its rows and the CRC-32 of each of its parts. In
the code an entry is a :class:`TableEntry` (frozen); it crosses the disk (and the wire) as JSON:
:meth:`TableEntry.to_json` and :meth:`TableEntry.from_json`, which checks every claim that can be checked
without the shards (types, ranges, the shards' arrays and counts) and names the first one that fails, with the
file it came from.
"""

from __future__ import annotations

import dataclasses
import re
from dataclasses import dataclass
from typing import Any

import numpy as np

from blockir.errors import BlockirError

__all__ = ["ELEMENT_KINDS", "RULE", "SHARD_EXTRAS", "ShardEntry", "TableEntry", "table_dtype"]

RULE = "id % servers"
"""The sharding rule of every table: id ``i`` is on server ``i % servers``."""
SHARD_EXTRAS = ("pending_ids", "pending_counts", "removed_ids")
"""What a table's shard holds besides its ``ids`` and rows (the table's and each state's): the ids seen and not
admitted, their sightings, and the ids a delta removes; one-dimensional integer arrays."""
_CRC32 = re.compile(r"[0-9a-f]{8}")
ELEMENT_KINDS = "biufc"
"""The kinds of numpy dtypes a tensor holds: bool, integers, floats, complex."""
_TABLE_KEYS = {"height": int, "dim": int, "dtype": str, "servers": int, "rule": str, "states": list, "shards": list}


def _is_count(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool) and value >= 0


def table_dtype(dtype: str) -> np.dtype | None:
    """The numpy dtype a table's ``dtype`` names (its numpy name), None when it names no tensor element type."""
    try:
        found = np.dtype(dtype)
    except (TypeError, ValueError, SyntaxError, OverflowError):  # numpy parses some strings as type expressions
        return None
    return found if found.name == dtype and found.kind in ELEMENT_KINDS else None


@dataclass(frozen=True)
class ShardEntry:
    """One server's shard of a table in one save: its file (relative to the save's directory, ``/``
    separators), the arrays it holds in order, its rows and the CRC-32 of its bytes part by part: ``crc32``
    holds one checksum (8 hexadecimal digits) per ``part_bytes`` bytes of the file, the last part shorter, so
    that a load reads and checks the parts on several threads at once. ``part_bytes`` 0: one checksum of the
    whole file, as saves made before parts were checksummed apart have (they load, on one thread)."""

    file: str
    arrays: tuple[str, ...]
    rows: int
    crc32: tuple[str, ...]
    part_bytes: int = 0

    @classmethod
    def written(cls, file: str, facts: dict[str, Any]) -> ShardEntry:
        """The entry of a shard written to ``file`` (relative to the save's directory), ``facts`` what
        :func:`~blockir.io.persistence.write_shard` said of it (its ``arrays``, ``rows``, ``crc32`` and
        ``part_bytes``)."""
        part = int(facts["part_bytes"])
        crc = tuple(facts["crc32"]) if part else (str(facts["crc32"]),)
        return cls(file, tuple(facts["arrays"]), int(facts["rows"]), crc, part)

    def parts(self, size: int) -> int:
        """How many parts a file of ``size`` bytes has (each checksummed apart)."""
        return -(-size // self.part_bytes) if self.part_bytes else 1

    def to_json(self) -> dict[str, Any]:
        doc = {"file": self.file, "arrays": list(self.arrays), "rows": self.rows}
        if not self.part_bytes:
            return doc | {"crc32": self.crc32[0]}
        return doc | {"crc32": list(self.crc32), "part_bytes": self.part_bytes}

    @classmethod
    def from_json(cls, doc: Any, where: str, table: str, required: tuple[str, ...]) -> ShardEntry:
        """The shard entry ``doc`` of ``table`` (in ``where``), holding at least the arrays ``required``."""
        if not isinstance(doc, dict) or not isinstance(doc.get("file"), str):
            raise BlockirError(f"{where}: bad shard entry of table {table!r}: {doc!r}")
        what = f"{where}: table {table!r}: shard {doc['file']!r}"
        crc, rows, arrays, part = doc.get("crc32"), doc.get("rows"), doc.get("arrays"), doc.get("part_bytes", 0)
        if not _is_count(part):
            raise BlockirError(f"{what}: part_bytes {part!r} is not a count of bytes (0 or more)")
        checksums = crc if part else [crc]  # a checksum per part, or one of the whole file
        if not isinstance(checksums, list) or not checksums:
            raise BlockirError(f"{what}: crc32 {crc!r} is not a list of checksums of 8 hexadecimal digits")
        if not all(isinstance(c, str) and _CRC32.fullmatch(c) for c in checksums):
            which = "a list of checksums of 8" if part else "8"
            raise BlockirError(f"{what}: crc32 {crc!r} is not {which} hexadecimal digits")
        if not _is_count(rows):
            raise BlockirError(f"{what}: rows {rows!r} is not a count (0 or more)")
        if not isinstance(arrays, list) or not all(isinstance(a, str) for a in arrays):
            raise BlockirError(f"{what}: arrays {arrays!r} is not a list of names")
        missing = [a for a in required if a not in arrays]
        if missing or len(set(arrays)) != len(arrays):
            problem = f"lacks {missing[0]!r}" if missing else "names an array twice"
            raise BlockirError(f"{what}: arrays {arrays!r} {problem}")
        return cls(doc["file"], tuple(arrays), doc["rows"], tuple(checksums), part)


@dataclass(frozen=True)
class TableEntry:
    """A sparse table in a save: ``[height, dim]`` of ``dtype`` cut over ``servers`` servers by :data:`RULE`,
    the optimizer state saved with each row (``states``), its base save's shards (one per server) and each
    delta's after it."""

    height: int
    dim: int
    dtype: str
    servers: int
    states: tuple[str, ...]
    shards: tuple[ShardEntry, ...]
    deltas: tuple[tuple[ShardEntry, ...], ...] = ()
    rule: str = RULE

    def chain(self) -> tuple[tuple[ShardEntry, ...], ...]:
        """The shards save by save: the base, then each delta."""
        return (self.shards, *self.deltas)

    def files(self) -> set[str]:
        """Every shard file of the chain."""
        return {shard.file for shards in self.chain() for shard in shards}

    def with_delta(self, shards: tuple[ShardEntry, ...]) -> TableEntry:
        """This entry with one more delta, ``shards``, at the end of its chain."""
        return dataclasses.replace(self, deltas=(*self.deltas, shards))

    def to_json(self) -> dict[str, Any]:
        doc = {
            "height": self.height,
            "dim": self.dim,
            "dtype": self.dtype,
            "servers": self.servers,
            "rule": self.rule,
            "states": list(self.states),
            "shards": [shard.to_json() for shard in self.shards],
        }
        if self.deltas:
            doc["deltas"] = [{"shards": [shard.to_json() for shard in delta]} for delta in self.deltas]
        return doc

    @classmethod
    def from_json(cls, doc: Any, where: str, name: str) -> TableEntry:
        """The entry ``doc`` of the table ``name`` (read from ``where``: a manifest's path, or what gave it),
        every claim checked that can be without its shards (types, ranges, the shards' arrays and counts, no
        more rows in a save than the height); the first that fails is a :class:`BlockirError` naming ``where``,
        the table and the field."""
        if isinstance(doc, TableEntry):
            doc = doc.to_json()  # checked as read (an entry made in code is checked as one read from a file)
        if not isinstance(doc, dict):
            raise BlockirError(f"{where}: bad entry for table {name!r}")
        for key, kind in _TABLE_KEYS.items():
            value = doc.get(key)
            if not isinstance(value, kind) or isinstance(value, bool):
                what = {int: "an integer", str: "a string", list: "a list"}[kind]
                raise BlockirError(f"{where}: table {name!r}: {key} {value!r} is not {what}")
        for key in ("height", "dim", "servers"):
            if doc[key] < 1:
                raise BlockirError(f"{where}: table {name!r}: {key} {doc[key]} is not 1 or more")
        dtype = table_dtype(doc["dtype"])
        if dtype is None:
            raise BlockirError(f"{where}: table {name!r}: dtype {doc['dtype']!r} is not a numpy tensor element type")
        if doc["height"] * doc["dim"] * dtype.itemsize > np.iinfo(np.intp).max:
            raise BlockirError(
                f"{where}: table {name!r}: height {doc['height']} and dim {doc['dim']} of {dtype} make a table "
                f"larger than any array (more than {np.iinfo(np.intp).max} bytes)"
            )
        if doc["rule"] != RULE:
            raise BlockirError(f"{where}: table {name!r}: rule {doc['rule']!r} is not {RULE!r}")
        states = doc["states"]
        if not all(isinstance(s, str) for s in states) or len(set(states)) != len(states):
            raise BlockirError(f"{where}: table {name!r}: states {states!r} are not distinct variable names")
        taken = [s for s in states if s in ("ids", name, *SHARD_EXTRAS)]
        if taken:
            raise BlockirError(f"{where}: table {name!r}: a state named {taken[0]!r}, the name of another array")
        deltas = doc.get("deltas", [])
        if not isinstance(deltas, list) or not all(
            isinstance(d, dict) and isinstance(d.get("shards"), list) for d in deltas
        ):
            raise BlockirError(f"{where}: bad deltas of table {name!r}")
        required = ("ids", name, *states, *SHARD_EXTRAS)
        chain = []
        for k, shards in enumerate([doc["shards"], *(d["shards"] for d in deltas)]):
            save = "base save" if k == 0 else f"delta {k}"
            if len(shards) != doc["servers"]:
                raise BlockirError(
                    f"{where}: table {name!r}: {len(shards)} shards of {doc['servers']} servers ({save})"
                )
            chain.append(tuple(ShardEntry.from_json(shard, where, name, required) for shard in shards))
            total = sum(shard.rows for shard in chain[-1])
            if total > doc["height"]:
                raise BlockirError(
                    f"{where}: table {name!r}: {total} rows in the shards of its {save}, more than its height "
                    f"{doc['height']}"
                )
        return cls(doc["height"], doc["dim"], doc["dtype"], doc["servers"], tuple(states), chain[0], tuple(chain[1:]))
