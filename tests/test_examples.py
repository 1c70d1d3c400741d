"""The examples reach what they promise: each ``main()`` is called in process, and each
file also runs as a script."""

from __future__ import annotations

import ast
import importlib.util
import subprocess
import sys
import threading
import tomllib
from pathlib import Path
from types import ModuleType

import numpy as np
import pytest
from threadpoolctl import threadpool_limits

import blockir as bir

ROOT = Path(__file__).resolve().parent.parent
EXAMPLES = ROOT / "examples"
INSTALL = 'pip install ".[examples]"'


def load(name: str) -> ModuleType:
    spec = importlib.util.spec_from_file_location(f"examples_{name}", EXAMPLES / f"{name}.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_mlp_digits_reaches_95_percent_and_saves_a_servable_model(tmp_path):
    digits = load("mlp_digits")
    metrics = digits.main(model_dir=str(tmp_path), verbose=False)
    assert metrics["accuracy"] >= 0.95
    # the saved inference model predicts what the session measured
    _, _, x_test, y_test = digits.load_digits()
    exe, served = bir.Executor("cpu"), bir.Scope()
    program, feeds, fetches = bir.io.load_inference_model(str(tmp_path), exe, scope=served)
    assert feeds == ["x"]
    (probs,) = exe.run(program, feed={"x": x_test}, fetch_list=fetches, scope=served)
    assert float((probs.argmax(axis=1) == y_test[:, 0]).mean()) == metrics["accuracy"]


def test_cnn_digits_learns_the_digits_and_its_paddle_export_serves_the_same_predictions(tmp_path):
    digits = load("cnn_digits")
    metrics = digits.main(export=str(tmp_path / "model"), verbose=False)
    assert metrics["accuracy"] >= 0.95
    _, _, x_test, y_test = digits.load_digits()
    np.save(tmp_path / "img.npy", x_test)
    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "blockir.cli",
            "run",
            str(tmp_path / "model.pdmodel"),
            "--feed",
            f"img={tmp_path}/img.npy",
            "--out",
            str(tmp_path / "out.npz"),
        ],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, done.stderr
    (probs,) = np.load(tmp_path / "out.npz").values()
    assert float((probs.argmax(axis=1) == y_test[:, 0]).mean()) == metrics["accuracy"]


def test_text_lstm_learns_which_marker_comes_first_and_its_export_serves_the_same_predictions(tmp_path):
    text = load("text_lstm")
    metrics = text.main(epochs=2, train_sentences=2000, export=str(tmp_path / "model"), verbose=False)
    assert metrics["accuracy"] >= 0.95  # a bag of words scores 0.5: every sentence holds both markers
    ids, lengths, labels = text.make_sentences(1000, seed=1)  # the test sentences
    exe, served = bir.Executor("cpu"), bir.Scope()
    program, feeds, fetches = bir.io.load_inference_model(str(tmp_path / "model"), exe, scope=served)
    assert feeds == ["ids", "lengths"] and "rnn" in [op.type for op in program.global_block().ops]
    (probs,) = exe.run(program, feed={"ids": ids, "lengths": lengths}, fetch_list=fetches, scope=served)
    assert float((probs.argmax(axis=1) == labels[:, 0]).mean()) == metrics["accuracy"]


def test_staged_training_learns_the_digits_through_channels_and_leaves_them_empty():
    staged = load("staged_training")
    result = staged.main(epochs=4, capacity=3, verbose=False)
    assert result["accuracy"] > 0.95
    assert not any(t.name.startswith("blockir-") and t.is_alive() for t in threading.enumerate())


def test_bow_classifier_reaches_the_bayes_accuracy_of_its_data():
    bow = load("bow_classifier")
    metrics = bow.main(verbose=False)
    bayes = metrics["bayes_accuracy"]
    # 10,000 test documents: one standard error of an accuracy near 0.88 is 0.0033
    assert bayes - 0.02 <= metrics["accuracy"] <= bayes + 0.015, metrics
    assert metrics["agreement"] >= 0.98, metrics


def test_bayes_accuracy_is_what_the_bayes_rule_scores_on_many_documents():
    bow = load("bow_classifier")
    _, labels, signal = bow.make_corpus(200_000, seed=3)
    assert 0.1 < (signal == 0).mean() < 0.25  # ties are common enough to matter
    rule = float(((signal > 0) == labels[:, 0]).mean())  # ties guessed as 0: right half the time
    assert abs(rule - bow.bayes_accuracy(signal)) < 0.003  # 4 standard errors


def test_async_bow_reaches_the_single_worker_accuracy_with_2_and_4_workers(tmp_path):
    bow = load("async_bow")
    with threadpool_limits(limits=1):  # BLAS threads beside the workers' oversubscribe the 2 cores
        metrics = bow.main(workdir=tmp_path, verbose=False)
    runs, bayes = metrics["runs"], metrics["bayes_accuracy"]
    assert sorted(runs) == [1, 2, 4] and metrics["heldout_docs"] == 10_000
    # 10,000 held-out documents: an accuracy near 0.88 has a standard error of 0.0033, the difference of two
    # of them at most 0.0046 (less, as both models score the same documents); 0.015 is over 3 of those.
    single = runs[1]["accuracy"]
    assert bayes - 0.015 <= single <= bayes + 0.01, metrics
    for workers in (2, 4):
        assert runs[workers]["accuracy"] >= single - 0.015, metrics
    assert all(run["train_accuracy"] > 0.8 and run["instances_per_second"] > 0 for run in runs.values())
    # the inference model saved after the epoch loads and tells positive from negative signal words
    exe, served = bir.Executor("cpu"), bir.Scope()
    program, feeds, fetches = bir.io.load_inference_model(runs[4]["model"], exe, scope=served)
    assert feeds == ["words"]
    docs = bir.LoDTensor.from_lengths(np.array([[1], [7], [30], [52], [60], [99]]), [3, 3])
    (probs,) = exe.run(program, feed={"words": docs}, fetch_list=fetches, scope=served)
    assert probs.argmax(axis=1).tolist() == [1, 0]


def test_async_bow_worker_processes_reach_the_accuracy_of_one_thread(tmp_path):
    bow = load("async_bow")
    corpus = bow.write_corpus(tmp_path, parts=4, docs_per_part=3000)
    single = bow.train(corpus, 1, "thread", epochs=2, verbose=False)
    run = bow.train(corpus, 2, "process", epochs=2, verbose=False)
    assert run["accuracy"] >= single["accuracy"] - 0.015 and run["accuracy"] > 0.8, (single, run)
    assert sorted(p.name for p in (tmp_path / "process-2").iterdir()) == ["epoch0.model", "epoch1.model"]
    assert run["model"] == str(tmp_path / "process-2" / "epoch1.model")


@pytest.mark.parametrize(
    "script, args",
    [
        ("mlp_digits.py", ["--epochs", "2"]),
        ("cnn_digits.py", ["--epochs", "1", "--export", "cnn/model"]),
        ("bow_classifier.py", ["--epochs", "1", "--train-docs", "2000"]),
        ("text_lstm.py", ["--epochs", "1", "--export", "lstm/model"]),
        ("staged_training.py", ["--epochs", "1", "--place", "cpu:1"]),
        ("async_bow.py", ["--workers", "1", "2", "--mode", "process", "--parts", "2", "--docs", "500"]),
    ],
)
def test_examples_run_as_scripts(script, args, tmp_path):
    done = subprocess.run(
        [sys.executable, str(EXAMPLES / script), *args], capture_output=True, text=True, timeout=120, cwd=tmp_path
    )
    assert done.returncode == 0, done.stderr
    assert "test accuracy" in done.stdout


def needs_scikit_learn(script: Path) -> bool:
    return "sklearn" in script.read_text()


def test_the_examples_extra_installs_what_the_examples_import() -> None:
    """After ``pip install .`` the digits examples lack scikit-learn: the ``examples`` extra brings it, with the
    dev extras' pin, and every example that needs it, and the README, say how to install it."""
    extras = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["optional-dependencies"]
    assert extras["examples"] == ["scikit-learn>=1.4,<2"]
    assert [r for r in extras["dev"] if r.startswith("scikit-learn")] == extras["examples"]
    needing = sorted(s.stem for s in EXAMPLES.glob("*.py") if needs_scikit_learn(s))
    assert needing == ["cnn_digits", "mlp_digits", "staged_training"]
    for name in needing:
        docstring = ast.get_docstring(ast.parse((EXAMPLES / f"{name}.py").read_text())) or ""
        assert INSTALL in docstring.split("\n\n")[1], f"{name}: say {INSTALL} at the top"
    assert INSTALL in (ROOT / "README.md").read_text()


@pytest.mark.parametrize("script", ["mlp_digits.py", "cnn_digits.py", "staged_training.py"])
def test_an_example_without_scikit_learn_says_what_to_install(script: str, tmp_path: Path) -> None:
    hide = (  # the script run as __main__ where `import sklearn` fails, as after a plain `pip install .`
        "import runpy, sys; sys.modules['sklearn'] = None; sys.argv = sys.argv[1:]; "
        "runpy.run_path(sys.argv[0], run_name='__main__')"
    )
    done = subprocess.run(
        [sys.executable, "-c", hide, str(EXAMPLES / script), "--epochs", "1"],
        capture_output=True,
        text=True,
        timeout=120,
        cwd=tmp_path,
    )
    assert done.returncode == 1, done.stderr
    assert done.stderr.strip().endswith(f"this example needs scikit-learn: {INSTALL}"), done.stderr
    assert "Traceback" not in done.stderr
