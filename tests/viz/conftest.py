"""The pages the browser tests open, and the headless Chromium they open them in (``tests/viz/browser.py``)."""

from __future__ import annotations

import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest

import blockir as bir
from blockir.errors import PassError
from blockir.ir import parse_program
from tests.registries import passes_registered
from tests.runtime.test_fusion import unfused
from tests.viz.browser import chromium
from tests.viz.golden_cases import GOLDEN, Explode

PIPELINE = "place,insert-copies,deps,streams"


@pytest.fixture(scope="module")
def driver() -> Iterator[Any]:
    d = chromium()
    yield d
    d.quit()


@pytest.fixture(scope="module")
def laptop() -> Iterator[Any]:
    """A browser in a 1366x768 window (a laptop's screen)."""
    d = chromium(1366, 768)
    yield d
    d.quit()


def readme_mlp() -> tuple[bir.Program, bir.Program, Any, Any]:
    """The README's first example: an MLP 784-256-10 with accuracy, trained with Adam (main, startup, loss, acc)."""
    main, startup = bir.Program(), bir.Program()
    with bir.program_guard(main, startup), bir.unique_name.guard():
        x = bir.data("x", shape=[-1, 784], dtype="float32")
        label = bir.data("label", shape=[-1, 1], dtype="int64")
        h = bir.layers.fc(x, size=256, act="relu")
        pred = bir.layers.fc(h, size=10, act="softmax")
        loss = bir.layers.mean(bir.layers.cross_entropy(pred, label))
        acc = bir.layers.accuracy(pred, label)
        bir.optimizer.Adam(learning_rate=1e-3).minimize(loss)
    return main, startup, loss, acc


def three_devices() -> bir.Program:
    """An MLP over cpu, cpu:1 and cpu:2 with backward and SGD: 53 ops, 60 after insert-copies."""
    main, startup = bir.Program(), bir.Program()
    with bir.program_guard(main, startup), bir.unique_name.guard():
        x = bir.layers.data("x", [-1, 16])
        y = bir.layers.data("y", [-1, 1], dtype="int64")
        with bir.device_guard("cpu:1"):
            h = bir.layers.fc(bir.layers.fc(x, 32, act="relu"), 32, act="relu")
        with bir.device_guard("cpu:2"):
            h = bir.layers.fc(bir.layers.fc(h, 32, act="relu"), 32, act="relu")
        pred = bir.layers.fc(bir.layers.fc(h, 16, act="tanh"), 4, act="softmax")
        bir.optimizer.SGD(0.1).minimize(bir.layers.mean(bir.layers.cross_entropy(pred, y)))
    return main


@pytest.fixture(scope="module")
def pages(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    """Pages of an MLP with a layer on cpu:1 (with a run's trace), of a failing pass, of a go block, of a
    pruning pass, of the README's MLP (with a run's trace) and of an MLP over three devices."""
    work = tmp_path_factory.mktemp("pages")
    main, startup = bir.Program(), bir.Program()
    with bir.program_guard(main, startup), bir.unique_name.guard():
        x = bir.layers.data("x", [-1, 4])
        with bir.device_guard("cpu:1"):
            h = bir.layers.fc(x, 8, act="relu")
        bir.optimizer.SGD(0.1).minimize(bir.layers.mean(bir.layers.fc(h, 1)))
    scope = bir.Scope()
    with bir.Executor(build_strategy=unfused()) as exe:  # the run compiles what PIPELINE makes: no fusion
        exe.run(startup, scope=scope)
        exe.run(main, feed={"x": np.ones((3, 4), "float32")}, scope=scope, trace=str(work / "run.json"))
    bir.viz.write(work / "mlp.html", main, PIPELINE, trace=work / "run.json", title="mlp")
    with passes_registered(Explode), pytest.raises(PassError), pytest.MonkeyPatch.context() as patch:
        patch.setattr(tempfile, "tempdir", str(work))  # the reproducer goes with the pages
        bir.viz.write(work / "fail.html", main, "place,insert-copies,explode,streams", title="fail")
    go = parse_program((GOLDEN / "go_block.before.txt").read_text())
    bir.viz.write(work / "go.html", go, "place,insert-copies", title="go")
    prune = parse_program((GOLDEN / "prune.before.txt").read_text())
    bir.viz.write(work / "prune.html", prune, "prune{targets=y}", title="prune")
    main, startup, loss, acc = readme_mlp()
    scope = bir.Scope()
    with bir.Executor(build_strategy=unfused()) as exe:
        exe.run(startup, scope=scope)
        feed = {"x": np.ones((8, 784), "float32"), "label": np.zeros((8, 1), "int64")}
        exe.run(main, feed=feed, fetch_list=[loss, acc], scope=scope, trace=str(work / "readme.json"))
    bir.viz.write(work / "readme.html", main, PIPELINE, trace=work / "readme.json", title="readme")
    bir.viz.write(work / "three.html", three_devices(), PIPELINE, title="three devices")
    return {name: work / f"{name}.html" for name in ("mlp", "fail", "go", "prune", "readme", "three")}
