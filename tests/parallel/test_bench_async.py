"""benchmarks/bench_async.py runs end to end at tiny sizes (a smoke test: its figures are not checked)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

BENCHMARKS = Path(__file__).resolve().parents[2] / "benchmarks"


def test_bench_async_quick_prints_all_four_parts_and_the_goals(tmp_path: Path) -> None:
    done = subprocess.run(
        [sys.executable, str(BENCHMARKS / "bench_async.py"), "--quick"],
        capture_output=True,
        text=True,
        timeout=120,
        cwd=tmp_path,
    )
    assert done.returncode == 0, done.stderr
    out = done.stdout
    for heading in ("1. reading", "2. training throughput", "3. held-out accuracy", "4. peak RSS"):
        assert heading in out, out
    for contender in ("reader", "thread x2", "process x2", "memory x1", "first process run", "10x"):
        assert contender in out, out
    assert out.rstrip().splitlines()[-1].startswith("goals: process x2 speed-up"), out
