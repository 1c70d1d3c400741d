"""Saves of a parameter server's sparse tables through bir.io's manifest: written last, checked on load."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from blockir.errors import BlockirError
from blockir.io.persistence import MANIFEST_FILE, read_shard, save_sharded, saved_tables, write_shard
from tests.distributed.test_server import TABLE, _servers


def _table_entry(directory: Path, base: Path, rows: int) -> dict:
    path = directory / "tables" / "t" / "shard-000-of-001.npz"
    written = write_shard(path, {"ids": np.arange(rows, dtype=np.int64), "t": np.ones((rows, 2), np.float32)})
    shard = {"file": path.relative_to(base).as_posix(), **written}
    return {
        "t": {
            "height": 10,
            "dim": 2,
            "dtype": "float32",
            "servers": 1,
            "rule": "id % servers",
            "states": [],
            "shards": [shard],
        }
    }


def test_a_save_that_dies_before_its_manifest_leaves_the_previous_one(tmp_path: Path) -> None:
    save_sharded(tmp_path, {"w": np.zeros(3)}, lambda d: _table_entry(d, tmp_path.resolve(), 4))
    before = (tmp_path / MANIFEST_FILE).read_bytes()

    def dies(directory: Path) -> dict:
        _table_entry(directory, tmp_path.resolve(), 7)
        raise KeyboardInterrupt  # killed after the shards were written, before the manifest

    with pytest.raises(KeyboardInterrupt):
        save_sharded(tmp_path, {"w": np.ones(3)}, dies)
    assert (tmp_path / MANIFEST_FILE).read_bytes() == before
    (shard,) = saved_tables(tmp_path)["t"]["shards"]
    assert read_shard(tmp_path, shard, ["t"])["ids"].tolist() == [0, 1, 2, 3]
    assert len([p for p in tmp_path.iterdir() if p.name.startswith("gen-")]) == 1  # the dead save's files went


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
