"""The Paddle zoo's programs (``tests/paddle/zoo/``) exported as ONNX: each passes ``onnx.checker`` (full check)
and computes blockir's outputs in ONNX's reference evaluator and in onnxruntime (oracles independent of blockir;
onnxruntime is a dev dependency, its check skipped without it) and, imported back, in blockir; or it is refused
naming the ops ONNX export lacks, as ``NOT_EXPORTED`` records."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

import blockir as bir
from blockir.errors import BlockirError
from tests.io.onnx_peer import onnxruntime, session
from tests.paddle.zoo_check import REFUSED, relative

onnx = pytest.importorskip("onnx")
from onnx.reference import ReferenceEvaluator  # noqa: E402

ZOO = Path(__file__).resolve().parent.parent / "paddle" / "zoo"
NAMES = sorted(p.stem for p in ZOO.glob("*.pdmodel") if p.stem not in REFUSED)
TOLERANCE = 1e-5

_CONTROL = "control flow (conditional_block, while): ONNX If and Loop once the export maps sub-blocks"
_RNN = "rnn (ONNX LSTM, GRU, RNN once mapped) and fill_constant of a computed shape"
# The zoo's programs whose export is refused, and why (the error names these ops).
NOT_EXPORTED: dict[str, tuple[set[str], str]] = {
    "cond_false": ({"conditional_block", "select_input"}, _CONTROL),
    "cond_true": ({"conditional_block", "select_input"}, _CONTROL),
    "while_loop": ({"while", "lod_array_length", "tensor_array_to_tensor"}, _CONTROL),
    "rnn_lstm_cell": ({"while", "write_to_array", "tensor_array_to_tensor"}, _CONTROL),
    "flip_roll": ({"roll"}, "no ONNX op; a Slice and Concat per axis would express it"),
    "group_norm": ({"group_norm"}, "ONNX's GroupNormalization scales per group before opset 21"),
    "linspace": ({"linspace"}, "no ONNX op"),
    "maxout": ({"maxout"}, "no ONNX op"),
    "pixel_unshuffle": ({"pixel_unshuffle"}, "SpaceToDepth's CRD mode is opset 28"),
    "gru_bidirectional": ({"rnn", "fill_constant"}, _RNN),
    "lstm": ({"rnn", "fill_constant"}, _RNN),
    "lstm_inference_optimized": ({"rnn", "fill_constant"}, _RNN),
    "lstm_lengths": ({"rnn", "fill_constant"}, _RNN),
    "simple_rnn_relu": ({"rnn", "fill_constant"}, _RNN),
}
# ONNX's reference evaluator fails on these (its ConvTranspose reshapes grouped weights wrongly); onnxruntime and the
# round trip through blockir's importer still check them.
REFERENCE_FAILS = {"conv2d_transpose_groups"}


@pytest.mark.parametrize("name", NAMES)
def test_a_zoo_program_exports_to_onnx_computing_the_same(name: str, tmp_path: Path) -> None:
    saved = np.load(ZOO / f"{name}.npz")
    inputs = {k[3:]: saved[k] for k in saved.files if k.startswith("in:")}
    exe, scope = bir.Executor("cpu"), bir.Scope()
    program, feeds, fetches = bir.io.load_inference_model(ZOO / name, exe, scope=scope)
    feed = {f: inputs[f] for f in feeds}
    want = [np.asarray(v) for v in exe.run(program, feed=feed, fetch_list=fetches, scope=scope)]
    prefix = tmp_path / name
    if name in NOT_EXPORTED:
        ops, _ = NOT_EXPORTED[name]
        with pytest.raises(BlockirError, match="ops ONNX export cannot write") as e:
            bir.io.save_inference_model(prefix, feeds, fetches, exe, main_program=program, scope=scope, format="onnx")
        assert all(f"{op} (" in str(e.value) for op in ops), str(e.value)
        return
    bir.io.save_inference_model(prefix, feeds, fetches, exe, main_program=program, scope=scope, format="onnx")
    model = onnx.load(str(prefix) + ".onnx")
    onnx.checker.check_model(model, full_check=True)
    if name not in REFERENCE_FAILS:
        reference = ReferenceEvaluator(model).run(None, feed)
        assert max(relative(np.asarray(g), w) for g, w in zip(reference, want)) <= TOLERANCE
    if onnxruntime is not None:
        theirs = session(model).run(None, feed)
        assert max(relative(np.asarray(g), w) for g, w in zip(theirs, want)) <= TOLERANCE
    again_scope = bir.Scope()
    again, again_feeds, again_fetches = bir.io.load_inference_model(str(prefix) + ".onnx", exe, scope=again_scope)
    got = exe.run(again, feed={f: inputs[f] for f in again_feeds}, fetch_list=again_fetches, scope=again_scope)
    assert max(relative(np.asarray(g), w) for g, w in zip(got, want)) <= TOLERANCE
