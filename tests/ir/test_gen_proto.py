"""The committed generated protobuf modules are what scripts/gen_proto.py produces."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def test_committed_module_matches_regeneration(tmp_path: Path) -> None:
    result = subprocess.run(
        [sys.executable, str(ROOT / "scripts" / "gen_proto.py"), str(tmp_path)],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert result.returncode == 0, result.stderr
    generated = sorted(p.name for p in tmp_path.iterdir())
    assert generated == ["data_feed_pb2.py", "data_feed_pb2.pyi", "framework_pb2.py", "framework_pb2.pyi"]
    for name in generated:
        committed = (ROOT / "blockir" / "proto" / name).read_bytes()
        assert (tmp_path / name).read_bytes() == committed, (
            f"blockir/proto/{name} is stale: run `python scripts/gen_proto.py`"
        )
