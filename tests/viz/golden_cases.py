"""Golden tests of the visualizer's data model: ``golden/<case>.before.txt`` -> ``<case>.model.json``.

A ``.before.txt`` is a pass golden case (``tests/passes/golden/README.md``: the
first line ``# pipeline: PIPELINE``, comments, a program in the text form); its
``.model.json`` is the model :func:`blockir.viz.page_data` makes of it, pretty-printed,
with what varies from run to run replaced: pass times by null, the reproducer's
temporary path by ``<reproducer>``. The pipeline may name ``explode``, a
test-only pass that raises. ``scripts/regen_golden.py tests/viz/golden`` rewrites
the ``.model.json`` files for review.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any, ClassVar

from blockir.ir import Program, parse_program
from blockir.passes import Pass
from blockir.viz import page_data
from tests.passes.golden_cases import pipeline_of
from tests.registries import passes_registered

GOLDEN = Path(__file__).parent / "golden"


@dataclass(frozen=True)
class Explode(Pass):
    """Raises ValueError: a pass that fails, for the failure step of the page."""

    name: ClassVar[str] = "explode"
    summary: ClassVar[str] = "raise ValueError (a test-only pass)"

    def run(self, program: Program) -> bool:
        raise ValueError("explode always fails")


def model_path(before: Path) -> Path:
    return before.with_name(before.name.removesuffix(".before.txt") + ".model.json")


def normalized(data: dict[str, Any]) -> dict[str, Any]:
    """``data`` without what varies from run to run (module docstring)."""
    for state in data["states"]:
        state["seconds"] = None
    failure = data["failure"]
    if failure is not None:
        failure["message"] = failure["message"].replace(failure["reproducer"], "<reproducer>")
        failure["reproducer"] = "<reproducer>"
    return data


def expected_model(before: Path) -> str:
    """The text ``.model.json`` should hold for the case ``before``."""
    text = before.read_text()
    with passes_registered(Explode):
        data, _ = page_data(parse_program(text, str(before)), pipeline_of(before, text), title=before.name)
    return json.dumps(normalized(data), indent=1, ensure_ascii=False) + "\n"
