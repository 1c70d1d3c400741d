"""The page file: one self-contained HTML document with the model inside, written atomically."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

import blockir as bir
from blockir.errors import PassError
from blockir.ir import parse_program
from blockir.viz import page_data, write
from blockir.viz.page import render
from tests.registries import passes_registered
from tests.viz.golden_cases import GOLDEN, Explode

TWO_DEVICES = (GOLDEN / "two_devices.before.txt").read_text()
_DATA = re.compile(r'<script type="application/json" id="viz-data">(.*?)</script>', re.S)


def embedded(page: str) -> dict:
    """The model inside a page."""
    found = _DATA.findall(page)
    assert len(found) == 1
    return json.loads(found[0])


def test_the_page_embeds_exactly_the_model(tmp_path: Path) -> None:
    program = parse_program(TWO_DEVICES)
    report = write(tmp_path / "p.html", program, "place,insert-copies,streams", title="two")
    page = (tmp_path / "p.html").read_text()
    data, _ = page_data(program, "place,insert-copies,streams", title="two")
    for state in (*data["states"], *embedded(page)["states"]):
        state["seconds"] = None
    got = embedded(page)
    for state in got["states"]:
        state["seconds"] = None
    assert got == data
    assert [r.name for r in report] == ["place", "insert-copies", "streams"]
    assert "<title>two: place,insert-copies,streams</title>" in page
    assert sorted(p.name for p in tmp_path.iterdir()) == ["p.html"]  # no temporary file left


def test_the_page_fetches_nothing() -> None:
    page = render(page_data(parse_program(TWO_DEVICES), "place")[0])
    code = _DATA.sub("", page)
    for pattern in (r"\bsrc\s*=", r"<link\b", r"@import", r"url\(", r"\bfetch\(", "XMLHttpRequest", r"\bimport\("):
        assert not re.search(pattern, code), pattern
    assert not re.search(r"https?://(?!www\.w3\.org/)", code)  # only XML namespace names, never fetched


def test_no_text_in_the_model_can_end_its_script_element(tmp_path: Path) -> None:
    program = parse_program(TWO_DEVICES)
    program.global_block().rename_var("y", "y</script><script>alert(1)//")
    write(tmp_path / "p.html", program, "place")
    page = (tmp_path / "p.html").read_text()
    data = embedded(page)
    assert any("y</script><script>alert(1)//" in op["text"] for op in data["ops"])
    assert page.count("<script") == 2


def test_a_failing_pass_still_writes_the_page_then_raises(tmp_path: Path) -> None:
    with passes_registered(Explode), pytest.raises(PassError, match="explode always fails") as caught:
        write(tmp_path / "p.html", parse_program(TWO_DEVICES), "place,explode")
    assert [r.name for r in caught.value.report] == ["place"]
    data = embedded((tmp_path / "p.html").read_text())
    assert data["failure"]["label"] == "explode" and len(data["states"]) == 2


def test_the_readme_example_writes_a_page(tmp_path: Path) -> None:
    main, startup = bir.Program(), bir.Program()
    with bir.program_guard(main, startup), bir.unique_name.guard():
        x = bir.layers.data("x", [-1, 4])
        with bir.device_guard("cpu:1"):
            h = bir.layers.fc(x, 8, act="relu")
        bir.optimizer.SGD(0.1).minimize(bir.layers.mean(bir.layers.fc(h, 1)))
    bir.viz.write(tmp_path / "passes.html", main, "place,insert-copies,streams")
    data = embedded((tmp_path / "passes.html").read_text())
    assert data["states"][2]["stats"]["copies"] > 0
