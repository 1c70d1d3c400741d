"""The examples reach what they promise: each ``main()`` is called in process (timed here), and each
file also runs as a script."""

from __future__ import annotations

import importlib.util
import subprocess
import threading
import sys
import time
from pathlib import Path
from types import ModuleType

import numpy as np
import pytest

import blockir as bir

EXAMPLES = Path(__file__).resolve().parent.parent / "examples"


def load(name: str) -> ModuleType:
    spec = importlib.util.spec_from_file_location(f"examples_{name}", EXAMPLES / f"{name}.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_mlp_digits_reaches_95_percent_in_under_a_minute_and_saves_a_servable_model(tmp_path):
    digits = load("mlp_digits")
    start = time.perf_counter()
    metrics = digits.main(model_dir=str(tmp_path), verbose=False)
    elapsed = time.perf_counter() - start
    assert metrics["accuracy"] >= 0.95
    assert elapsed < 60, f"took {elapsed:.1f}s"
    # the saved inference model predicts what the session measured
    _, _, x_test, y_test = digits.load_digits()
    exe, served = bir.Executor("cpu"), bir.Scope()
    program, feeds, fetches = bir.io.load_inference_model(str(tmp_path), exe, scope=served)
    assert feeds == ["x"]
    probs, = exe.run(program, feed={"x": x_test}, fetch_list=fetches, scope=served)
    assert float((probs.argmax(axis=1) == y_test[:, 0]).mean()) == metrics["accuracy"]


def test_staged_training_learns_the_digits_through_channels_and_leaves_them_empty():
    staged = load("staged_training")
    result = staged.main(epochs=4, capacity=3, verbose=False)
    assert result["accuracy"] > 0.95
    assert not any(t.name.startswith("blockir-") and t.is_alive() for t in threading.enumerate())


def test_bow_classifier_reaches_the_bayes_accuracy_of_its_data():
    bow = load("bow_classifier")
    start = time.perf_counter()
    metrics = bow.main(verbose=False)
    elapsed = time.perf_counter() - start
    assert elapsed < 30, f"took {elapsed:.1f}s"
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


@pytest.mark.parametrize("script, args", [
    ("mlp_digits.py", ["--epochs", "2"]),
    ("bow_classifier.py", ["--epochs", "1", "--train-docs", "2000"]),
    ("staged_training.py", ["--epochs", "1", "--place", "cpu:1"]),
])
def test_examples_run_as_scripts(script, args, tmp_path):
    done = subprocess.run([sys.executable, str(EXAMPLES / script), *args], capture_output=True, text=True,
                          timeout=120, cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    assert "test accuracy" in done.stdout
