"""The page file: one self-contained HTML document with the model inside, written atomically."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

import blockir as bir
from blockir.errors import PassError
from blockir.ir import parse_program
from blockir.ir.proto_io import atomic_write
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


def _nan_trace(path: Path) -> Path:
    event = {"ph": "X", "name": "relu", "pid": 1, "tid": 1, "ts": float("nan"), "dur": 1, "args": {"id": 1}}
    path.write_text(json.dumps([event]))  # json writes the NaN literal, as a broken tracer might
    return path


def _listing(root: Path) -> list[str]:
    return sorted(str(p.relative_to(root)) for p in root.rglob("*"))


@pytest.mark.parametrize(
    ("where", "trace", "message"),
    [
        ("no/such/dir/p.html", None, "no/such/dir/p.html: the directory '.*no/such/dir' does not exist"),
        ("file/p.html", None, "file/p.html: the directory '.*file' is not a directory"),
        ("dir", None, "dir: is a directory, not a file"),
        ("p.html", "nan.json", "nan.json: event 0 \\('relu'\\) has 'ts' NaN: a time must be a finite number"),
    ],
)
def test_write_refuses_a_missing_directory_or_a_bad_trace_and_writes_nothing(
    tmp_path: Path, where: str, trace: str | None, message: str
) -> None:
    (tmp_path / "file").write_text("a file in the way")
    (tmp_path / "dir").mkdir()
    if trace is not None:
        _nan_trace(tmp_path / trace)
    before = _listing(tmp_path)
    with passes_registered(Explode), pytest.raises(bir.BlockirError, match=message) as caught:
        # explode: the refusal comes before any pass runs (else its PassError would be raised, after a page)
        write(
            tmp_path / where,
            parse_program(TWO_DEVICES),
            "place,explode",
            trace=None if trace is None else tmp_path / trace,
        )
    assert not isinstance(caught.value, PassError)
    assert _listing(tmp_path) == before  # no page, no directory, no temporary file


def test_the_page_write_creates_no_directory_and_leaves_no_temporary(tmp_path: Path) -> None:
    """How write and ``blockir viz`` write the page: ``atomic_write(..., make_parents=False)``."""
    with pytest.raises(bir.BlockirError, match="gone/p.html: cannot write"):
        atomic_write(tmp_path / "gone" / "p.html", b"<html></html>", make_parents=False)  # removed after the check
    assert _listing(tmp_path) == []
    atomic_write(tmp_path / "p.html", b"<html>1</html>", make_parents=False)
    atomic_write(tmp_path / "p.html", b"<html>2</html>", make_parents=False)
    assert _listing(tmp_path) == ["p.html"] and (tmp_path / "p.html").read_text() == "<html>2</html>"
