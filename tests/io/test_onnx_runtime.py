"""blockir against onnxruntime (a dev-only dependency, never imported by ``blockir/``), issue 38:

- export: the README's MLP, ``examples/cnn_digits.py``, a transformer encoder built with the DSL, and every light
  model of ONNX's backend suite round-tripped (ONNX -> blockir -> ONNX) are written with ``format="onnx"``, pass
  ``onnx.checker`` (full check) and run in onnxruntime with blockir's outputs (relative 1e-5);
- import (goal 1): the 9 light models, fed random inputs, compute onnxruntime's outputs (relative 1e-2).

The light models ship in the onnx wheel (``onnx/backend/test/data/light``); they are read from there, offline.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pytest

import blockir as bir
from tests.paddle.zoo_check import relative
from tests.test_examples import load

onnx = pytest.importorskip("onnx")
pytest.importorskip("onnxruntime")
from tests.io.onnx_peer import session  # noqa: E402

LIGHT = Path(onnx.__file__).parent / "backend" / "test" / "data" / "light"
LIGHT_MODELS = sorted(p.stem for p in LIGHT.glob("light_*.onnx"))
EXPORT_TOLERANCE = 1e-5
IMPORT_TOLERANCE = 1e-2  # float32 accumulation over a hundred layers
# squeezenet's weights (ConstantOfShape fills) make its 1,000 logits equal in exact arithmetic, near 7e9: an ulp
# (512 or 1,024) apart in another summation order, which the final softmax turns into zeros where onnxruntime has
# 1/1000 each. Its outputs are compared at the softmax's input instead, where the two agree to float32's precision.
WELL_CONDITIONED = {"light_squeezenet": "r65"}


def light_model(name: str) -> Any:
    """The light model ``name``; for those :data:`WELL_CONDITIONED` names, with that value as its one output."""
    model = onnx.load(str(LIGHT / f"{name}.onnx"))
    if name in WELL_CONDITIONED:
        del model.graph.output[:]
        model.graph.output.append(onnx.helper.make_empty_tensor_value_info(WELL_CONDITIONED[name]))
    return model


def random_feed(model: Any, seed: int = 0) -> dict[str, np.ndarray]:
    """Standard normal float32 inputs for the graph inputs of ``model`` (its dynamic dims 1), by ONNX name."""
    rng = np.random.default_rng(seed)
    inits = {i.name for i in model.graph.initializer}
    feed = {}
    for value in model.graph.input:
        if value.name in inits:
            continue
        dims = [d.dim_value or 1 for d in value.type.tensor_type.shape.dim]
        feed[value.name] = rng.standard_normal(dims).astype(np.float32)
    return feed


def import_and_run(path: Path, feed: dict[str, np.ndarray]) -> tuple[list[np.ndarray], bir.Executor, Any]:
    """blockir's outputs of the ONNX model at ``path`` fed ``feed`` (by ONNX names), with what ran it."""
    exe, scope = bir.Executor("cpu"), bir.Scope()
    program, feeds, fetches = bir.io.load_inference_model(path, exe, scope=scope)
    assert len(feeds) == len(feed)
    got = exe.run(program, feed=dict(zip(feeds, feed.values())), fetch_list=fetches, scope=scope)
    return [np.asarray(g) for g in got], exe, (program, feeds, fetches, scope)


def check_export(prefix: Path, feed: dict[str, np.ndarray], want: list[np.ndarray]) -> None:
    """``PREFIX.onnx`` passes the full check and computes ``want`` from ``feed`` in onnxruntime."""
    model = onnx.load(str(prefix) + ".onnx")
    onnx.checker.check_model(model, full_check=True)
    theirs = session(model).run(None, feed)
    assert len(theirs) == len(want)
    errors = [relative(np.asarray(t), w) for t, w in zip(theirs, want)]
    assert max(errors) <= EXPORT_TOLERANCE, errors


def export_program(
    tmp_path: Path, model: dict[str, Any], feed: dict[str, np.ndarray], labels: dict[str, np.ndarray] | None = None
) -> None:
    """Initialise ``model["main"]`` (one training step on ``labels`` where it has a ``loss``), export its
    inference program of ``model["pred"]`` fed ``feed`` and check it in onnxruntime."""
    main, pred = model["main"], model["pred"]
    exe, scope = bir.Executor("cpu"), bir.Scope()
    exe.run(model["startup"], scope=scope)
    if "loss" in model:
        exe.run(main, feed={**feed, **(labels or {})}, fetch_list=[model["loss"]], scope=scope)
    test = main.clone(for_test=True)
    want = exe.run(test, feed={**feed, **(labels or {})}, fetch_list=[pred.name], scope=scope)
    prefix = tmp_path / "model"
    bir.io.save_inference_model(prefix, list(feed), [pred], exe, main_program=test, scope=scope, format="onnx")
    check_export(prefix, feed, [np.asarray(w) for w in want])


def test_the_readme_mlp_exports_and_runs_in_onnxruntime(tmp_path: Path) -> None:
    main, startup = bir.Program(), bir.Program()
    with bir.unique_name.guard(), bir.program_guard(main, startup):
        x = bir.data("x", shape=[-1, 784], dtype="float32")
        label = bir.data("label", shape=[-1, 1], dtype="int64")
        h = bir.layers.fc(x, size=256, act="relu")
        pred = bir.layers.fc(h, size=10, act="softmax")
        loss = bir.layers.mean(bir.layers.cross_entropy(pred, label))
        bir.optimizer.Adam(learning_rate=1e-3).minimize(loss)
    rng = np.random.default_rng(0)
    model = {"main": main, "startup": startup, "pred": pred, "loss": loss}
    labels = {"label": rng.integers(0, 10, (64, 1))}
    export_program(tmp_path, model, {"x": rng.random((64, 784), dtype="float32")}, labels)


def test_the_cnn_digits_example_exports_and_runs_in_onnxruntime(tmp_path: Path) -> None:
    model = load("cnn_digits").build()
    rng = np.random.default_rng(1)
    images, labels = rng.random((16, 1, 8, 8), dtype="float32"), {"label": rng.integers(0, 10, (16, 1))}
    export_program(tmp_path, model, {"img": images}, labels)


def test_a_transformer_encoder_exports_and_runs_in_onnxruntime(tmp_path: Path) -> None:
    seq, width, heads = 6, 16, 2
    head_dim = width // heads
    main, startup = bir.Program(), bir.Program()

    def split_heads(h: bir.Variable) -> bir.Variable:  # [B, S, D] -> [B, H, S, D / H]
        return bir.layers.transpose(bir.layers.reshape(h, [0, seq, heads, head_dim]), [0, 2, 1, 3])

    with bir.unique_name.guard(), bir.program_guard(main, startup):
        x = bir.data("x", shape=[-1, seq, width], dtype="float32")
        h = x
        for _ in range(2):
            q, k, v = (split_heads(bir.layers.fc(h, width, num_flatten_dims=2)) for _ in range(3))
            scores = bir.layers.matmul(q, k, transpose_y=True, alpha=head_dim**-0.5)
            context = bir.layers.matmul(bir.layers.softmax(scores), v)
            context = bir.layers.reshape(bir.layers.transpose(context, [0, 2, 1, 3]), [0, seq, width])
            h = bir.layers.layer_norm(h + bir.layers.fc(context, width, num_flatten_dims=2), begin_norm_axis=2)
            ff = bir.layers.fc(bir.layers.fc(h, 4 * width, num_flatten_dims=2, act="gelu"), width, num_flatten_dims=2)
            h = bir.layers.layer_norm(h + bir.layers.dropout(ff, dropout_prob=0.1), begin_norm_axis=2)
        pred = bir.layers.fc(bir.layers.reduce_mean(h, dim=1), 5, act="softmax")
    feed = {"x": np.random.default_rng(2).standard_normal((3, seq, width)).astype(np.float32)}
    export_program(tmp_path, {"main": main, "startup": startup, "pred": pred}, feed)


@pytest.mark.slow
@pytest.mark.parametrize("name", LIGHT_MODELS)
def test_a_light_model_computes_onnxruntimes_outputs(name: str, tmp_path: Path) -> None:
    model = light_model(name)
    feed = random_feed(model)
    path = tmp_path / f"{name}.onnx"
    onnx.save(model, str(path))
    ours, _, _ = import_and_run(path, feed)
    theirs = session(model).run(None, feed)
    errors = [relative(o, np.asarray(t)) for o, t in zip(ours, theirs)]
    assert len(ours) == len(theirs) and max(errors) <= IMPORT_TOLERANCE, errors


@pytest.mark.slow
@pytest.mark.parametrize("name", LIGHT_MODELS)
def test_a_light_model_round_tripped_runs_in_onnxruntime(name: str, tmp_path: Path) -> None:
    model = light_model(name)
    feed = random_feed(model, seed=1)
    path = tmp_path / f"{name}.onnx"
    onnx.save(model, str(path))
    want, exe, (program, feeds, fetches, scope) = import_and_run(path, feed)
    prefix = tmp_path / "exported"
    bir.io.save_inference_model(prefix, feeds, fetches, exe, main_program=program, scope=scope, format="onnx")
    check_export(prefix, dict(zip(feeds, feed.values())), want)
