"""Regenerate the golden files of the pass and visualizer tests, for review with ``git diff``.

    python scripts/regen_golden.py                 # every case under tests/passes/golden and tests/viz/golden
    python scripts/regen_golden.py tests/passes/golden/prune [CASE.before.txt ...]
    python scripts/regen_golden.py --check         # only report the cases whose expected file differs

Each case's ``.before.txt`` names its pipeline on its first line
(``# pipeline: ...``); under tests/passes/golden the ``.after.txt`` is the program
that pipeline makes of it, under tests/viz/golden the ``.model.json`` is the
visualizer's data model of the pipeline's run.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from tests.passes.golden_cases import GOLDEN, after_path, cases, expected_after  # noqa: E402
from tests.viz import golden_cases as viz_golden  # noqa: E402


def expected(before: Path) -> tuple[Path, str]:
    """The expected file of the case ``before`` and the text it should hold."""
    if viz_golden.GOLDEN in before.resolve().parents:
        return viz_golden.model_path(before), viz_golden.expected_model(before)
    return after_path(before), expected_after(before)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description="Regenerate the golden files of the pass and visualizer tests.")
    parser.add_argument(
        "paths",
        nargs="*",
        type=Path,
        default=[GOLDEN, viz_golden.GOLDEN],
        help="case directories or .before.txt files (default: all of tests/passes/golden and tests/viz/golden)",
    )
    parser.add_argument("--check", action="store_true", help="write nothing; exit 1 if any expected file differs")
    args = parser.parse_args(argv)
    selected = [c for p in args.paths for c in ([p] if p.is_file() else cases(p))]
    stale = 0
    for before in selected:
        after, text = expected(before)
        if after.exists() and after.read_text() == text:
            continue
        stale += 1
        if args.check:
            print(f"differs: {after}")
        else:
            after.write_text(text)
            print(f"wrote {after}")
    print(f"{len(selected)} cases, {stale} {'differ' if args.check else 'rewritten'}")
    return 1 if args.check and stale else 0


if __name__ == "__main__":
    sys.exit(main())
