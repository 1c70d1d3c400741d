"""``blockir viz``: the page of a pipeline, with a run's trace, and a failing pass."""

from __future__ import annotations

import tempfile
import webbrowser
from pathlib import Path

import numpy as np
import pytest

import blockir as bir
from blockir.cli import main
from tests.registries import passes_registered
from tests.viz.golden_cases import Explode
from tests.viz.test_page import embedded


@pytest.fixture
def work(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """train.pb (an MLP with a layer on cpu:1), its startup.pb and a batch x.npy, in the working directory."""
    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))  # where a failing pass's reproducer goes
    main_p, startup = bir.Program(), bir.Program()
    with bir.program_guard(main_p, startup), bir.unique_name.guard():
        x = bir.layers.data("x", [-1, 4])
        with bir.device_guard("cpu:1"):
            h = bir.layers.fc(x, 8, act="relu")
        bir.optimizer.SGD(0.1).minimize(bir.layers.mean(bir.layers.fc(h, 1)))
    main_p.save(str(tmp_path / "train.pb"))
    scope = bir.Scope()
    exe = bir.Executor()
    exe.run(startup, scope=scope)
    bir.io.save_persistables(exe, tmp_path / "params", main_p, scope=scope)
    np.save(tmp_path / "x.npy", np.ones((2, 4), "float32"))
    return tmp_path


def test_viz_writes_the_page_of_the_pipeline(work: Path, capsys: pytest.CaptureFixture[str]) -> None:
    pipeline = "place{default=cpu:1},insert-copies,deps,streams"
    assert main(["viz", "train.pb", "-p", pipeline, "-o", "passes.html"]) == 0
    assert capsys.readouterr().out == "wrote passes.html: 4 passes\n"
    data = embedded((work / "passes.html").read_text())
    assert data["pipeline"] == pipeline and data["title"] == "train.pb"
    assert [s["label"] for s in data["states"]] == ["input", "place{default=cpu:1}", "insert-copies", "deps", "streams"]


def test_viz_defaults_to_the_executors_pipeline_and_a_page_named_after_the_program(work: Path) -> None:
    assert main(["viz", "train.pb", "--title", "mine"]) == 0
    data = embedded((work / "train.html").read_text())
    assert data["pipeline"] == "fuse,default-device-pipeline" and data["title"] == "mine"
    conv = ["fold-conv-bn", "fuse-conv-add-act", "fuse-bn-act", "max-pool-with-index"]
    fusions = [*conv, "fuse-fc", "fuse-elementwise-act", "fuse-softmax-ce", "fuse-fc-sgd", "fuse-optimizer"]
    assert [s["label"] for s in data["states"][1:]] == [*fusions, "place", "insert-copies", "streams{keep=true}"]


def test_viz_links_the_trace_of_blockir_run(work: Path, capsys: pytest.CaptureFixture[str]) -> None:
    run = ["run", "train.pb", "--params", "params", "--feed", "x=x.npy", "--fetch", "mean_0.tmp_0"]
    assert main([*run, "--trace", "run.json"]) == 0
    assert main(["viz", "train.pb", "--trace", "run.json", "-o", "p.html"]) == 0
    assert capsys.readouterr().out.endswith("wrote p.html: 12 passes, linked to the run in run.json\n")
    trace = embedded((work / "p.html").read_text())["trace"]
    assert trace["match"] == "compiled" and trace["state"] == 12 and trace["unlinked"] == 0


def test_a_failing_pass_still_gives_the_page_and_exits_1(work: Path, capsys: pytest.CaptureFixture[str]) -> None:
    with passes_registered(Explode):
        status = main(["viz", "train.pb", "-p", "place,explode", "-o", "p.html"])
    err = capsys.readouterr().err
    assert status == 1
    assert err.startswith("blockir: error: pass 'explode' (pass 2 of 2) failed: ValueError: explode always fails")
    assert err.endswith("wrote p.html: the passes before it and the failing pass\n")
    assert embedded((work / "p.html").read_text())["failure"]["label"] == "explode"


def test_open_shows_the_page_in_the_browser(work: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    opened: list[str] = []
    monkeypatch.setattr(webbrowser, "open", lambda url: opened.append(url) or True)
    assert main(["viz", "train.pb", "-o", "p.html", "--open"]) == 0
    assert opened == [(work / "p.html").resolve().as_uri()]
