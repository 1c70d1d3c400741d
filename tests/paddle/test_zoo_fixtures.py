"""The zoo's one-layer programs (``tests/paddle/zoo/``: saved by Paddle 3.3.1 with its outputs, by
``python tests/paddle/paddle_side.py zoo tests/paddle/zoo NAME ...``) in the default tier: each computes
Paddle's outputs in blockir, or is refused naming the ops ``REFUSED`` records for it."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.paddle.zoo_check import REFUSED, run_saved

FIXTURES = Path(__file__).with_name("zoo")
NAMES = sorted(p.stem for p in FIXTURES.glob("*.pdmodel"))


def test_the_fixtures_are_small() -> None:
    assert len(NAMES) >= 60
    assert sum(p.stat().st_size for p in FIXTURES.iterdir()) <= 5 * 2**20


@pytest.mark.parametrize("name", NAMES)
def test_a_zoo_program_computes_paddles_outputs_or_is_refused_as_recorded(name: str) -> None:
    outcome = run_saved(FIXTURES, name)
    assert outcome.refused == REFUSED.get(name, set())
    if not outcome.refused:
        assert outcome.matches, outcome.differences
