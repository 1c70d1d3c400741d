"""Golden pass tests on disk: ``tests/passes/golden/<pass>/<case>.before.txt`` and ``.after.txt``.

A ``.before.txt`` file starts with the line ``# pipeline: PIPELINE`` (more ``#``
comment lines may follow, describing the case), then a program in the text
form. Its ``.after.txt`` holds exactly ``str(program)`` plus a newline for the
program the pipeline makes of it (verified after each pass). The test compares
the two; ``scripts/regen_golden.py`` rewrites the ``.after.txt`` files for review.
See golden/README.md.
"""

from __future__ import annotations

from pathlib import Path

from blockir.errors import BlockirError
from blockir.ir import parse_program
from blockir.passes import run

GOLDEN = Path(__file__).parent / "golden"
_HEADER = "# pipeline: "


def cases(root: Path = GOLDEN) -> list[Path]:
    """Every ``.before.txt`` file below ``root``, sorted."""
    return sorted(root.rglob("*.before.txt"))


def after_path(before: Path) -> Path:
    return before.with_name(before.name.removesuffix(".before.txt") + ".after.txt")


def pipeline_of(before: Path, text: str) -> str:
    first = text.split("\n", 1)[0]
    if not first.startswith(_HEADER):
        raise BlockirError(f"{before}: the first line must be '{_HEADER}PIPELINE', got {first!r}")
    return first.removeprefix(_HEADER).strip()


def expected_after(before: Path) -> str:
    """The text ``.after.txt`` should hold: the program after running the case's pipeline."""
    text = before.read_text()
    result, _ = run(parse_program(text, str(before)), pipeline_of(before, text))
    return f"{result}\n"
