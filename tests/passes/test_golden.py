"""Golden tests: each case's pipeline turns its .before.txt into exactly its .after.txt (see golden/README.md)."""

from __future__ import annotations

from pathlib import Path

import pytest

from blockir.errors import BlockirError
from blockir.ir import parse_program
from tests.passes.golden_cases import GOLDEN, after_path, cases, expected_after, pipeline_of

CASES = cases()


def test_every_pass_directory_has_cases() -> None:
    assert {"prune", "inference", "deps", "streams"} <= {case.parent.name for case in CASES}
    assert all(after_path(case).is_file() for case in CASES), "run scripts/regen_golden.py and review the diff"


@pytest.mark.parametrize("before", CASES, ids=[str(c.relative_to(GOLDEN)).removesuffix(".before.txt") for c in CASES])
def test_golden(before: Path) -> None:
    after = after_path(before).read_text()
    assert expected_after(before) == after
    assert f"{parse_program(after)}\n" == after  # the expected text is itself a printed program


def test_a_case_without_its_pipeline_header_is_an_error(tmp_path: Path) -> None:
    case = tmp_path / "x.before.txt"
    case.write_text("program version=0\n")
    with pytest.raises(BlockirError, match="first line must be '# pipeline: PIPELINE'"):
        pipeline_of(case, case.read_text())
