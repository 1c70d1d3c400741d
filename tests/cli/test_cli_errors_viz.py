"""``blockir viz`` on bad traces and outputs: exit status 2, one ``blockir: error:`` line naming the event (or the
directory), no traceback, nothing left behind (:mod:`tests.cli.adversarial`).

A trace's times (``ts``, ``dur``) must be numbers of microseconds from 0 to 2**53; Python's ``json`` reads the
``NaN``, ``Infinity`` and ``-Infinity`` literals, so they reach the check and are refused there.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.cli.adversarial import Case, check_bad_input

BOUND = "a time must be a finite number of microseconds from 0 to 2**53 (about 285 years)"


def _trace(work: Path, text: str) -> Path:
    """A trace of one good event of main.pb's first op and, second, the event ``text`` (JSON, written verbatim)."""
    good = json.dumps({"ph": "X", "name": "mul", "pid": 1, "tid": 1, "ts": 0, "dur": 2, "args": {"id": 0}})
    path = work / "t.json"
    path.write_text(f'{{"traceEvents": [{good}, {text}]}}')
    return path


def _viz_event(text: str) -> Case:
    """``blockir viz main.pb`` with the trace :func:`_trace` makes of the event ``text``."""
    return lambda w: ["viz", str(w / "main.pb"), "--trace", str(_trace(w, text)), "-o", str(w / "p.html")]


def _event(ts: str, dur: str = "1") -> str:
    return f'{{"ph": "X", "name": "relu", "pid": 1, "tid": 1, "ts": {ts}, "dur": {dur}, "args": {{"id": 1}}}}'


def _viz_file(name: str, data: bytes) -> Case:
    def make(w: Path) -> list[str]:
        (w / name).write_bytes(data)
        return ["viz", str(w / "main.pb"), "--trace", str(w / name), "-o", str(w / "p.html")]

    return make


CASES: dict[str, tuple[Case, str]] = {
    "viz: NaN ts": (_viz_event(_event("NaN")), f"t.json: event 1 ('relu') has 'ts' NaN: {BOUND}"),
    "viz: Infinity ts": (_viz_event(_event("Infinity")), f"event 1 ('relu') has 'ts' Infinity: {BOUND}"),
    "viz: -Infinity dur": (_viz_event(_event("3", "-Infinity")), f"event 1 ('relu') has 'dur' -Infinity: {BOUND}"),
    "viz: NaN dur": (_viz_event(_event("3", "NaN")), f"event 1 ('relu') has 'dur' NaN: {BOUND}"),
    "viz: negative dur": (_viz_event(_event("3", "-2")), f"event 1 ('relu') has 'dur' -2: {BOUND}"),
    "viz: negative ts": (_viz_event(_event("-0.5")), f"event 1 ('relu') has 'ts' -0.5: {BOUND}"),
    "viz: string ts": (_viz_event(_event('"12"')), "event 1 ('relu') has 'ts' \"12\": not a number"),
    "viz: bool dur": (_viz_event(_event("1", "true")), "event 1 ('relu') has 'dur' true: not a number"),
    "viz: null ts": (_viz_event(_event("null")), "event 1 ('relu') has 'ts' null: not a number"),
    "viz: missing ts": (
        _viz_event('{"ph": "X", "name": "relu", "dur": 1, "args": {"id": 1}}'),
        "event 1 ('relu') has no 'ts'",
    ),
    "viz: huge ts": (_viz_event(_event("1e300")), f"event 1 ('relu') has 'ts' 1e+300: {BOUND}"),
    "viz: ts past 2**53": (_viz_event(_event(str((1 << 53) + 1))), f"'ts' 9007199254740993: {BOUND}"),
    "viz: ts of 400 digits": (_viz_event(_event("1" * 400)), f"'ts' {'1' * 37}...: {BOUND}"),
    "viz: ts of 5000 digits": (_viz_event(_event("1" * 5000)), "t.json: not JSON (Exceeds the limit"),
    "viz: trace nested too deeply": (_viz_file("deep.json", b"[" * 100_000), "deep.json: not a Chrome trace"),
    "viz: -o where a file is the directory": (
        lambda w: ["viz", str(w / "main.pb"), "-o", str(w / "main.pb" / "p.html")],
        "main.pb/p.html",
    ),
}


@pytest.mark.parametrize("case", list(CASES))
def test_bad_trace_gives_one_line_and_status_2(
    case: str, model_dir: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    make, message = CASES[case]
    check_bad_input(make, message, model_dir, tmp_path, capsys)
