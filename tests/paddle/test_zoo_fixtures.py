"""The zoo's one-layer programs (``tests/paddle/zoo/``: saved by Paddle 3.3.1 with its outputs, by
``python tests/paddle/paddle_side.py zoo tests/paddle/zoo NAME ...``) in the default tier: each computes
Paddle's outputs in blockir, or is refused naming the ops ``REFUSED`` records for it."""

from __future__ import annotations

from pathlib import Path

import pytest

import blockir as bir
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


def test_the_lstm_cell_rnn_is_paddles_own_while_loop() -> None:
    """``nn.RNN(nn.LSTMCell)`` as Paddle builds it (``zoo.py``): a ``while`` whose block runs the cell and moves
    the states through tensor arrays, not an ``rnn`` op."""
    with bir.Executor("cpu") as exe:
        program, _, _ = bir.io.load_inference_model(FIXTURES / "rnn_lstm_cell", exe, scope=bir.Scope())
    outer, loop = ({op.type for op in block.ops} for block in program.blocks)
    assert {"while", "write_to_array", "tensor_array_to_tensor", "shape", "less_than"} <= outer
    assert {"read_from_array", "write_to_array", "increment", "less_than", "matmul_v2", "sigmoid", "tanh"} <= loop
    assert "rnn" not in outer | loop
