"""``examples/text_lstm.py``'s export in real Paddle (marker ``paddle``): the LSTM classifier blockir trained,
saved with ``format="paddle"`` (Paddle's ``rnn`` op with its WeightList, SequenceLength, the zero states made
by ``fill_constant`` from the batch size), loads in Paddle 3.3.1 and computes blockir's probabilities."""

from __future__ import annotations

import importlib.util
from pathlib import Path

import numpy as np
import pytest

import blockir as bir
from tests.paddle.test_paddle import _paddle, paddle_python  # noqa: F401  (the fixture)
from tests.paddle.zoo_check import TOLERANCE, relative

pytestmark = pytest.mark.paddle
EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "text_lstm.py"


def test_the_lstm_examples_export_computes_the_same_in_paddle(paddle_python: str, tmp_path: Path) -> None:  # noqa: F811
    spec = importlib.util.spec_from_file_location("examples_text_lstm", EXAMPLE)
    assert spec is not None and spec.loader is not None
    text = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(text)
    text.main(epochs=1, train_sentences=500, export=str(tmp_path / "model"), verbose=False)
    ids, lengths, _ = text.make_sentences(200, seed=3)
    with bir.Executor("cpu") as exe:
        scope = bir.Scope()
        program, feeds, fetches = bir.io.load_inference_model(tmp_path / "model", exe, scope=scope)
        (ours,) = exe.run(program, feed={"ids": ids, "lengths": lengths}, fetch_list=fetches, scope=scope)
    np.savez(tmp_path / "in.npz", ids=ids, lengths=lengths)
    _paddle(paddle_python, "run", str(tmp_path / "model"), str(tmp_path / "in.npz"), str(tmp_path / "out.npz"))
    theirs = np.load(tmp_path / "out.npz")["out:0"]
    assert relative(ours, theirs) <= TOLERANCE
    assert (theirs.argmax(axis=1) == ours.argmax(axis=1)).all()
