"""The paddle tier: real PaddlePaddle (3.x, legacy programs) on one side, blockir on the other.

Models built and saved by Paddle (tests/paddle/paddle_side.py: an MLP, a CNN, a text model using the ops
real inference programs use) load in blockir and compute Paddle's outputs; blockir's exports of them, in
Paddle's format, load in Paddle and compute the same. Paddle runs in its own interpreter: the one
BLOCKIR_PADDLE_PYTHON names (a venv with ``pip install paddlepaddle==3.3.1``), else this one if it has
paddle; without either the tier skips.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

import blockir as bir

pytestmark = [pytest.mark.paddle, pytest.mark.timeout(600)]
SIDE = Path(__file__).with_name("paddle_side.py")
MODELS = ["mlp", "cnn", "text"]


def _paddle_python() -> str | None:
    for python in (os.environ.get("BLOCKIR_PADDLE_PYTHON"), sys.executable):
        if python and shutil.which(python) or (python and Path(python).is_file()):
            probe = subprocess.run([python, "-c", "import paddle"], capture_output=True, timeout=120)
            if probe.returncode == 0:
                return python
    return None


@pytest.fixture(scope="module")
def paddle_python() -> str:
    python = _paddle_python()
    if python is None:
        pytest.skip("no interpreter with paddlepaddle (set BLOCKIR_PADDLE_PYTHON to one)")
    return python


def _paddle(python: str, *args: str, timeout: float = 500) -> None:
    done = subprocess.run([python, str(SIDE), *args], capture_output=True, text=True, timeout=timeout)
    assert done.returncode == 0, done.stderr[-4000:]


@pytest.fixture(scope="module")
def paddle_models(paddle_python: str, tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("paddle_models")
    _paddle(paddle_python, "save", str(out))
    return out


def _outputs(path: Path) -> list[np.ndarray]:
    saved = np.load(path)
    return [saved[f"out:{i}"] for i in range(len([k for k in saved.files if k.startswith("out:")]))]


def _close(got: list[np.ndarray], want: list[np.ndarray]) -> None:
    assert len(got) == len(want)
    for g, w in zip(got, want):
        assert g.dtype == w.dtype and g.shape == w.shape
        np.testing.assert_allclose(g, w, rtol=2e-5, atol=2e-6)


@pytest.mark.parametrize("model", MODELS)
def test_a_model_saved_by_paddle_computes_paddles_outputs_in_blockir(paddle_models: Path, model: str) -> None:
    saved = np.load(paddle_models / f"{model}.npz")
    with bir.Executor("cpu") as exe:
        scope = bir.Scope()
        program, feeds, fetches = bir.io.load_inference_model(paddle_models / model, exe, scope=scope)
        got = exe.run(program, feed={f: saved[f"in:{f}"] for f in feeds}, fetch_list=fetches, scope=scope)
    _close([np.asarray(g) for g in got], _outputs(paddle_models / f"{model}.npz"))


@pytest.mark.parametrize("model", MODELS)
def test_blockirs_export_loads_in_paddle_and_computes_the_same(
    paddle_python: str, paddle_models: Path, tmp_path: Path, model: str
) -> None:
    saved = np.load(paddle_models / f"{model}.npz")
    with bir.Executor("cpu") as exe:
        scope = bir.Scope()
        program, feeds, fetches = bir.io.load_inference_model(paddle_models / model, exe, scope=scope)
        inputs = {f: saved[f"in:{f}"] for f in feeds}
        want = [np.asarray(v) for v in exe.run(program, feed=inputs, fetch_list=fetches, scope=scope)]
        bir.io.save_inference_model(
            tmp_path / model, feeds, fetches, exe, main_program=program, scope=scope, format="paddle"
        )
    np.savez(tmp_path / "inputs.npz", **inputs)
    _paddle(paddle_python, "run", str(tmp_path / model), str(tmp_path / "inputs.npz"), str(tmp_path / "out.npz"))
    _close(_outputs(tmp_path / "out.npz"), want)


def test_the_cnn_example_exported_by_blockir_computes_the_same_in_paddle(paddle_python: str, tmp_path: Path) -> None:
    from tests.test_examples import load

    digits = load("cnn_digits")
    digits.main(epochs=1, export=str(tmp_path / "cnn"), verbose=False)
    _, _, x_test, _ = digits.load_digits()
    with bir.Executor("cpu") as exe:
        scope = bir.Scope()
        program, feeds, fetches = bir.io.load_inference_model(tmp_path / "cnn", exe, scope=scope)
        want = [np.asarray(v) for v in exe.run(program, feed={"img": x_test}, fetch_list=fetches, scope=scope)]
    np.savez(tmp_path / "inputs.npz", img=x_test)
    _paddle(paddle_python, "run", str(tmp_path / "cnn"), str(tmp_path / "inputs.npz"), str(tmp_path / "out.npz"))
    _close(_outputs(tmp_path / "out.npz"), want)
