"""The prune pass: options, feeds, and fetch results preserved on random programs."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from blockir.errors import PassError
from blockir.ir import parse_program
from blockir.passes import Prune, parse_pipeline, run
from tests.passes.programs import CHAIN, RandomProgram, assert_same_results, runnable_programs


def test_options_come_from_the_pipeline() -> None:
    assert parse_pipeline("prune{targets=loss,acc feeds=x keep_side_effects=false}") == [
        Prune(targets=("loss", "acc"), feeds=("x",), keep_side_effects=False)
    ]
    assert parse_pipeline("prune") == [Prune()]


def test_fed_variables_lose_their_producers_and_become_feeds() -> None:
    result, report = run(parse_program(CHAIN), "prune{targets=y feeds=h}")
    assert [op.type for op in result.global_block().ops] == ["tanh"]
    assert result.global_block().var("h").need_check_feed
    assert sorted(result.global_block().vars) == ["h", "y"]
    record = report.record("prune")
    assert (record.changed, record.returned, record.removed, record.added) == (True, True, 2, 0)
    h = np.ones((2, 2), "float32")
    rp = RandomProgram(result, {"h": h}, {}, ["y"])
    np.testing.assert_allclose(rp.run()[0][0], np.tanh(h))


def test_nothing_to_remove_is_unchanged() -> None:
    program = parse_program(CHAIN)
    _, report = run(program, "prune{targets=y,z}")
    record = report.record("prune")
    assert not record.changed and not record.returned


def test_an_unknown_target_fails_naming_it(tmp_path: Path) -> None:
    with pytest.raises(PassError, match="variable 'nope' not found"):
        run(parse_program(CHAIN), "prune{targets=nope}", dump_dir=tmp_path)


@settings(max_examples=200)
@given(runnable_programs(max_ops=10), st.booleans())
def test_pruning_keeps_what_the_targets_fetch(rp: RandomProgram, keep_side_effects: bool) -> None:
    pruned, _ = run(rp.program, [Prune(tuple(rp.targets), tuple(rp.feeds), keep_side_effects)])
    assert len(pruned.global_block().ops) <= len(rp.program.global_block().ops)
    # With side effects kept the parameters end the same too; without, only the targets must agree.
    assert_same_results(rp.run(pruned), rp.run(), params=keep_side_effects)
