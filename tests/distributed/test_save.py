"""Saves of a parameter server's sparse tables through bir.io's manifest: written last, checked on load."""

from __future__ import annotations

import json
import zlib
from pathlib import Path

import numpy as np
import pytest

from blockir.distributed.saves import format_inspection, inspect, reshard
from blockir.errors import BlockirError
from blockir.io import persistence
from blockir.io.manifest import ShardEntry, TableEntry
from blockir.io.persistence import (
    MANIFEST_FILE,
    incomplete_saves,
    read_shard,
    save_sharded,
    saved_tables,
    write_shard,
)
from tests.distributed.test_server import TABLE, _servers


def _shard_arrays(rows: int) -> dict[str, np.ndarray]:
    """A shard of table ``t`` (float32, dim 2) with ids 0..rows-1, as a server writes one."""
    none = np.zeros(0, np.int64)
    return {
        "ids": np.arange(rows, dtype=np.int64),
        "t": np.ones((rows, 2), np.float32),
        "pending_ids": none,
        "pending_counts": none,
        "removed_ids": none,
    }


T = {"height": 10, "dim": 2, "dtype": "float32", "servers": 1, "rule": "id % servers", "states": []}


def _table_entry(directory: Path, base: Path, rows: int) -> dict:
    path = directory / "tables" / "t" / "shard-000-of-001.npys"
    shard = {"file": path.relative_to(base).as_posix(), **write_shard(path, _shard_arrays(rows))}
    return {"t": {**T, "shards": [shard]}}


def test_a_save_that_dies_before_its_manifest_leaves_the_previous_one(tmp_path: Path) -> None:
    save_sharded(tmp_path, {"w": np.zeros(3)}, lambda d: _table_entry(d, tmp_path.resolve(), 4))
    before = (tmp_path / MANIFEST_FILE).read_bytes()

    def dies(directory: Path) -> dict:
        _table_entry(directory, tmp_path.resolve(), 7)
        raise KeyboardInterrupt  # killed after the shards were written, before the manifest

    with pytest.raises(KeyboardInterrupt):
        save_sharded(tmp_path, {"w": np.ones(3)}, dies)
    assert (tmp_path / MANIFEST_FILE).read_bytes() == before
    table = saved_tables(tmp_path)["t"]
    assert read_shard(tmp_path, "t", table, table.shards[0])["ids"].tolist() == [0, 1, 2, 3]
    assert len([p for p in tmp_path.iterdir() if p.name.startswith("gen-")]) == 1  # the dead save's files went


def test_a_table_entry_crosses_the_disk_as_json_and_a_bad_one_from_a_writer_is_refused(tmp_path: Path) -> None:
    """The manifest's table entries are dataclasses in the code and JSON on disk: an entry read back is the entry
    written; an entry a writer hands the save that belies a claim is refused naming the field, and the previous
    save stays the one that loads."""
    save_sharded(tmp_path, {"w": np.zeros(3)}, lambda d: _table_entry(d, tmp_path.resolve(), 4))
    table = saved_tables(tmp_path)["t"]
    assert isinstance(table, TableEntry) and isinstance(table.shards[0], ShardEntry)
    assert TableEntry.from_json(table.to_json(), "here", "t") == table
    grown = table.with_delta(table.shards)
    assert grown.chain() == (table.shards, table.shards) and TableEntry.from_json(grown.to_json(), "", "t") == grown
    before = (tmp_path / MANIFEST_FILE).read_bytes()

    def bad(directory: Path) -> dict:
        entry = _table_entry(directory, tmp_path.resolve(), 2)
        entry["t"]["shards"][0]["rows"] = -1
        return entry

    with pytest.raises(BlockirError, match=r"\(being written\): table 't': shard .* rows -1 is not a count"):
        save_sharded(tmp_path, {"w": np.ones(3)}, bad)
    assert (tmp_path / MANIFEST_FILE).read_bytes() == before
    with pytest.raises(BlockirError, match=r"the-save: table 't': dim 0 is not 1 or more"):
        TableEntry.from_json({**table.to_json(), "dim": 0}, "the-save", "t")


def test_a_shard_is_checksummed_part_by_part_and_a_changed_part_is_named(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A shard's file has a CRC-32 per ``part_bytes`` bytes (the last part shorter), read and checked on threads
    side by side; a byte changed is a checksum mismatch naming the file and the part's bytes."""
    monkeypatch.setattr(persistence, "SHARD_PART_BYTES", 100)
    save_sharded(tmp_path, {}, lambda d: _table_entry(d, tmp_path.resolve(), 8))
    table = saved_tables(tmp_path)["t"]
    shard = table.shards[0]
    size = (tmp_path / shard.file).stat().st_size
    assert shard.part_bytes == 100 and len(shard.crc32) == -(-size // 100) > 5
    assert TableEntry.from_json(table.to_json(), "here", "t") == table
    assert read_shard(tmp_path, "t", table, shard)["t"].shape == (8, 2)
    data = bytearray((tmp_path / shard.file).read_bytes())
    data[350] ^= 0x01  # in the rows
    (tmp_path / shard.file).write_bytes(bytes(data))
    with pytest.raises(BlockirError, match=r"shard-000-of-001.npys: checksum mismatch in bytes 300..399 \(part 4 of "):
        read_shard(tmp_path, "t", table, shard)


def test_a_parts_checksum_is_zlibs_crc32_whichever_library_computes_it() -> None:
    """ISA-L's CRC-32 (the fast extra, where installed) is zlib's: a save is the same bytes with or without it."""
    data = np.random.default_rng(0).integers(0, 256, 100_000, dtype=np.uint8)
    assert persistence._crc32([data[:5000].data, memoryview(b""), data[5000:].data]) == f"{zlib.crc32(data):08x}"


def test_a_shard_saved_with_one_checksum_of_the_whole_file_still_loads(tmp_path: Path) -> None:
    """A save made before parts were checksummed apart (one ``crc32`` of the whole file, no ``part_bytes``)
    loads; its checksum is still checked."""
    save_sharded(tmp_path, {}, lambda d: _table_entry(d, tmp_path.resolve(), 4))
    doc = json.loads((tmp_path / MANIFEST_FILE).read_text())
    entry = doc["tables"]["t"]["shards"][0]
    path = tmp_path / entry.pop("file")
    entry.pop("part_bytes")
    old = {"file": path.relative_to(tmp_path).as_posix(), **entry, "crc32": f"{zlib.crc32(path.read_bytes()):08x}"}
    doc["tables"]["t"]["shards"][0] = old
    (tmp_path / MANIFEST_FILE).write_text(json.dumps(doc))
    table = saved_tables(tmp_path)["t"]
    assert table.shards[0].part_bytes == 0 and table.to_json()["shards"][0] == old
    assert read_shard(tmp_path, "t", table, table.shards[0])["ids"].tolist() == [0, 1, 2, 3]
    data = bytearray(path.read_bytes())
    data[300] ^= 0x01  # in the rows
    path.write_bytes(bytes(data))
    with pytest.raises(BlockirError, match=rf"checksum mismatch in bytes 0..{len(data) - 1} \(part 1 of 1:"):
        read_shard(tmp_path, "t", table, table.shards[0])


def _chain_save(save: Path) -> None:
    """A save of table ``t`` (float32, dim 2, one state ``m``) by 2 servers: a base of ids 0..5 and a delta that
    changes id 2's row, adds id 7, removes id 4 and leaves id 9 seen once (not admitted)."""
    base = save.resolve()
    none = np.zeros(0, np.int64)

    def shard(generation: Path, kind: str, k: int, ids: list[int], removed: list[int], pending: list[int]) -> dict:
        ids_ = np.array(ids, np.int64)
        arrays = {
            "ids": ids_,
            "t": np.stack([ids_ * 10.0 + (kind == "delta"), ids_ * 10.0 + 1]).T.astype(np.float32).reshape(-1, 2),
            "m": np.full((len(ids), 2), 0.5 if kind == "delta" else 0.25, np.float32),
            "pending_ids": np.array(pending, np.int64),
            "pending_counts": np.ones(len(pending), np.int64),
            "removed_ids": np.array(removed, np.int64) if removed else none,
        }
        path = generation / "tables" / "t" / f"{kind}-{k:03d}-of-002.npys"
        return {"file": path.relative_to(base).as_posix(), **write_shard(path, arrays)}

    entry = {**T, "servers": 2, "states": ["m"]}
    save_sharded(
        save,
        {},
        lambda g: {
            "t": {
                **entry,
                "shards": [shard(g, "base", 0, [0, 2, 4], [], [])] + [shard(g, "base", 1, [1, 3, 5], [], [])],
            }
        },
    )
    before = saved_tables(save)["t"]
    save_sharded(
        save,
        {},
        lambda g: {
            "t": {
                **before.to_json(),
                "deltas": [{"shards": [shard(g, "delta", 0, [2], [4], []), shard(g, "delta", 1, [7], [], [9])]}],
            }
        },
    )


def _rows(save: Path) -> dict[int, tuple[list[float], ...]]:
    """Every row of table ``t`` of a full save (no deltas): id -> (its row, each state's)."""
    table = saved_tables(save)["t"]
    assert not table.deltas
    names = ["t", *table.states]
    rows = {}
    for shard in table.shards:
        part = read_shard(save, "t", table, shard)
        assert all(part[n].dtype == np.float32 and part[n].shape[1:] == (2,) for n in names)
        for k, i in enumerate(part["ids"].tolist()):
            rows[i] = tuple(part[n][k].tolist() for n in names)
    return rows


@pytest.mark.parametrize("servers", [1, 3])
def test_reshard_applies_the_chain_and_keeps_every_row_its_state_and_the_ids_not_admitted(
    tmp_path: Path, servers: int
) -> None:
    _chain_save(tmp_path / "save")
    reshard(tmp_path / "save", tmp_path / "moved", servers)
    rows = _rows(tmp_path / "moved")
    assert sorted(rows) == [0, 1, 2, 3, 5, 7]  # 4 removed by the delta, 7 added
    assert rows[2] == ([21.0, 21.0], [0.5, 0.5]) and rows[3] == ([30.0, 31.0], [0.25, 0.25])  # 2: the delta's
    table = saved_tables(tmp_path / "moved")["t"]
    assert table.servers == servers and table.states == ("m",)
    pending = [read_shard(tmp_path / "moved", "t", table, s)["pending_ids"].tolist() for s in table.shards]
    assert sum(pending, []) == [9] and pending[9 % servers] == [9]
    assert inspect(tmp_path / "moved", verify=True)["tables"]["t"]["rows"] == [
        sum(i % servers == k for i in rows) for k in range(servers)
    ]
    assert sorted(p.name for p in tmp_path.iterdir()) == ["moved", "save"]  # no temporary directory left


def test_reshard_of_a_table_without_rows_keeps_its_dtype(tmp_path: Path) -> None:
    save_sharded(tmp_path / "save", {}, lambda d: _table_entry(d, (tmp_path / "save").resolve(), 0))
    reshard(tmp_path / "save", tmp_path / "moved", 2)
    assert _rows(tmp_path / "moved") == {}  # read back: float32 rows of 2, as the manifest says


def test_reshard_writes_only_into_a_new_or_empty_directory(tmp_path: Path) -> None:
    save_sharded(tmp_path / "save", {}, lambda d: _table_entry(d, (tmp_path / "save").resolve(), 3))
    (tmp_path / "empty").mkdir()
    reshard(tmp_path / "save", tmp_path / "empty", 2)  # an empty directory becomes the save
    assert sorted(_rows(tmp_path / "empty")) == [0, 1, 2]
    with pytest.raises(BlockirError, match="reshard: DST .*empty exists; the copy goes to a new"):
        reshard(tmp_path / "save", tmp_path / "empty", 3)
    assert saved_tables(tmp_path / "empty")["t"].servers == 2  # untouched
    with pytest.raises(BlockirError, match="SRC and DST must differ"):
        reshard(tmp_path / "save", tmp_path / "save", 3)


def test_a_directory_that_is_not_a_save_is_named(tmp_path: Path) -> None:
    with pytest.raises(BlockirError, match="is not a save: it has no manifest.json"):
        saved_tables(tmp_path)


def test_a_table_saved_with_another_shape_or_missing_is_refused_before_anything_loads(tmp_path: Path) -> None:
    server = _servers(1, mode="async")[0]
    server.pull_sparse(TABLE, np.array([1, 2], dtype=np.int64))
    (tmp_path / "gen").mkdir()
    entries = server.save_shards(str(tmp_path / "gen"))
    shard = {k: v for k, v in entries[TABLE].items() if k != "states"}
    shard["file"] = Path(shard["file"]).relative_to(tmp_path).as_posix()
    table = {
        "height": 100,
        "dim": 4,
        "dtype": "float32",
        "servers": 1,
        "rule": "id % servers",
        "states": [],
        "shards": [shard],
    }
    fresh = _servers(1, mode="async")[0]
    fresh.load_tables(str(tmp_path), {TABLE: table}, None)
    assert sorted(fresh.table_ids(TABLE).tolist()) == [1, 2]
    with pytest.raises(BlockirError, match=r"table 'embedding_0.w_0' is saved as float32\[-1, 8\], the program"):
        _servers(1, mode="async")[0].load_tables(str(tmp_path), {TABLE: {**table, "dim": 8}}, None)
    with pytest.raises(BlockirError, match=r"the save has no table 'embedding_0.w_0'"):
        _servers(1, mode="async")[0].load_tables(str(tmp_path), {}, [TABLE])


def _entry(server, directory: Path, base: Path, delta: bool) -> dict:
    written = server.save_shards(str(directory), delta)[TABLE]
    shard = {
        k: (Path(v).relative_to(base).as_posix() if k == "file" else v) for k, v in written.items() if k != "states"
    }
    return shard


def test_a_base_and_delta_load_keeps_the_sightings_of_ids_not_yet_admitted(tmp_path: Path) -> None:
    from blockir.distributed import CountFilterEntry

    server = _servers(1, mode="async", entry=CountFilterEntry(2))[0]
    grad = np.ones((1, 4), np.float32)
    server.push(0, {}, {TABLE: (np.array([5], dtype=np.int64), grad)})  # id 5 seen once: not admitted
    server.push(0, {}, {TABLE: (np.array([7, 7], dtype=np.int64), np.ones((2, 4), np.float32))})  # 7: admitted
    (tmp_path / "g1").mkdir()
    base_shard = _entry(server, tmp_path / "g1", tmp_path, delta=False)
    server.commit_save()
    server.push(0, {}, {TABLE: (np.array([9], dtype=np.int64), grad)})  # after the base: 9 seen once
    server.push(0, {}, {TABLE: (np.array([7], dtype=np.int64), grad)})  # 7's row changes
    (tmp_path / "g2").mkdir()
    delta_shard = _entry(server, tmp_path / "g2", tmp_path, delta=True)
    assert base_shard["rows"] == 1 and delta_shard["rows"] == 1  # the delta holds only the row that changed
    table = {
        "height": 100,
        "dim": 4,
        "dtype": "float32",
        "servers": 1,
        "rule": "id % servers",
        "states": [],
        "shards": [base_shard],
        "deltas": [{"shards": [delta_shard]}],
    }
    fresh = _servers(1, mode="async", entry=CountFilterEntry(2))[0]
    fresh.load_tables(str(tmp_path), {TABLE: table}, None)
    np.testing.assert_array_equal(fresh.pull_sparse(TABLE, np.array([7])), server.pull_sparse(TABLE, np.array([7])))
    for i in (5, 9):  # each seen once before the save: the next sighting admits it
        fresh.push(0, {}, {TABLE: (np.array([i], dtype=np.int64), grad)})
    assert sorted(fresh.table_ids(TABLE).tolist()) == [5, 7, 9]


def test_shrink_drops_rows_unseen_for_threshold_saves_and_a_delta_records_them(tmp_path: Path) -> None:
    server = _servers(1, mode="async")[0]
    server.pull_sparse(TABLE, np.array([1, 2, 3], dtype=np.int64))
    (tmp_path / "g1").mkdir()
    base_shard = _entry(server, tmp_path / "g1", tmp_path, delta=False)
    server.commit_save()  # a save interval: every row unseen once
    server.pull_sparse(TABLE, np.array([1], dtype=np.int64))  # 1 seen again
    server.push(0, {}, {TABLE: (np.array([3], dtype=np.int64), np.ones((1, 4), np.float32))})  # 3 too
    server.commit_save()  # 2 is now unseen for two intervals
    assert server.shrink(2) == {TABLE: 1}
    assert sorted(server.table_ids(TABLE).tolist()) == [1, 3]
    (tmp_path / "g2").mkdir()
    delta_shard = _entry(server, tmp_path / "g2", tmp_path, delta=True)
    table = {
        "height": 100,
        "dim": 4,
        "dtype": "float32",
        "servers": 1,
        "rule": "id % servers",
        "states": [],
        "shards": [base_shard],
        "deltas": [{"shards": [delta_shard]}],
    }
    fresh = _servers(1, mode="async")[0]
    fresh.load_tables(str(tmp_path), {TABLE: table}, None)
    assert sorted(fresh.table_ids(TABLE).tolist()) == [1, 3]  # the delta removed 2
    np.testing.assert_array_equal(fresh.pull_sparse(TABLE, np.array([3])), server.pull_sparse(TABLE, np.array([3])))
    with pytest.raises(BlockirError, match="threshold must be an int >= 1"):
        server.shrink(0)


def test_a_save_killed_by_sigkill_leaves_the_previous_one_and_the_next_save_clears_it(tmp_path: Path) -> None:
    """A real process, killed (kill -9, by its pid) while its save is half written: the directory still loads
    the previous save; a directory holding only a killed save is refused as one; the next save tidies up."""
    import os
    import signal
    import subprocess
    import sys
    import time

    save = tmp_path / "save"
    save_sharded(save, {"w": np.zeros(3)}, lambda d: _table_entry(d, save.resolve(), 4))
    before = (save / MANIFEST_FILE).read_bytes()
    script = f"""
import time
from pathlib import Path
import numpy as np
from blockir.io.persistence import save_sharded, write_shard

def shards(directory):
    write_shard(directory / "tables" / "t" / "shard-000-of-001.npys", {{"ids": np.arange(9), "t": np.ones((9, 2))}})
    (Path({str(tmp_path)!r}) / "written").write_text("yes")
    time.sleep(60)  # killed here, half way through the save

save_sharded({str(save)!r}, {{"w": np.ones(3)}}, shards)
"""
    root = Path(__file__).resolve().parents[2]
    child = subprocess.Popen([sys.executable, "-c", script], cwd=root, env={**os.environ, "PYTHONPATH": str(root)})
    try:
        deadline = time.monotonic() + 60
        while not (tmp_path / "written").exists():
            assert child.poll() is None, "the saving process ended before it was killed"
            assert time.monotonic() < deadline, "the saving process never got half way"
            time.sleep(0.05)
        os.kill(child.pid, signal.SIGKILL)
        child.wait(10)
    finally:
        if child.poll() is None:
            child.kill()
            child.wait(10)
    assert child.returncode == -signal.SIGKILL
    assert (save / MANIFEST_FILE).read_bytes() == before  # the killed save never became the save
    table = saved_tables(save)["t"]
    assert read_shard(save, "t", table, table.shards[0])["ids"].tolist() == [0, 1, 2, 3]
    assert len([p for p in save.iterdir() if p.name.startswith("gen-")]) == 2  # the killed save's files remain ...
    assert incomplete_saves(save) == ["gen-000002"]  # ... reported as a save that did not finish ...
    assert "incomplete save gen-000002: it did not finish" in format_inspection(inspect(save))
    save_sharded(save, {"w": np.ones(3)}, lambda d: _table_entry(d, save.resolve(), 5))
    assert len([p for p in save.iterdir() if p.name.startswith("gen-")]) == 1  # ... until the next save
    assert incomplete_saves(save) == []
    only_killed = tmp_path / "fresh"
    only_killed.mkdir()
    (only_killed / "gen-000001").mkdir()
    with pytest.raises(BlockirError, match="is not a save: it has no manifest.json .* incomplete save gen-000001"):
        saved_tables(only_killed)
