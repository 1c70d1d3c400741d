"""Linking a run's Chrome trace to the ops of the page, and refusing traces that are not of the program."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

import blockir as bir
from blockir.ir import Program, parse_program
from blockir.viz import TraceError, load_trace, page_data

TWO_DEVICES = (Path(__file__).parent / "golden" / "two_devices.before.txt").read_text()


def _program() -> Program:
    return parse_program(TWO_DEVICES)


def _run(program: Program, path: Path, **executor: object) -> Path:
    scope = bir.Scope()
    scope.set("w", np.eye(2, dtype="float32"))
    bir.Executor(**executor).run(
        program, feed={"x": np.ones((3, 2), "float32")}, fetch_list=["y"], scope=scope, trace=str(path)
    )
    return path


def test_a_trace_names_the_program_it_ran_and_the_one_it_was_given(tmp_path: Path) -> None:
    program = _program()
    trace = json.loads(_run(program, tmp_path / "run.json").read_text())
    ran = trace["otherData"]["blockir"]
    assert ran["program"] == program.digest()
    compiled = bir.Executor().compiled_program(program, {"x": np.ones((3, 2), "float32")}, ["y"])
    assert ran["compiled"] == compiled.digest() != ran["program"]
    assert ran["pipeline"] == "fuse{keep=x,y},default-device-pipeline{default=cpu}"


def test_spans_link_to_the_state_whose_program_ran(tmp_path: Path) -> None:
    program = _program()
    path = _run(program, tmp_path / "run.json")
    data, _ = page_data(program, "place,insert-copies,deps,streams{keep=true}", trace=path)
    trace = data["trace"]
    assert trace["match"] == "compiled" and trace["state"] == 4 and trace["unlinked"] == 0
    ops = {op["id"]: op["type"] for op in data["ops"]}
    assert sorted(ops[s[3]] for s in trace["spans"]) == ["memcpy", "memcpy", "mul", "relu", "tanh"]
    assert set(trace["lanes"]) >= {"cpu/compute0", "cpu:1/compute0"}
    assert trace["op_time"].keys() == {str(s[3]) for s in trace["spans"]}
    assert all(s[1] >= 0 and s[2] >= 0 for s in trace["spans"])


def test_a_run_through_another_pipeline_links_by_op_id_and_type(tmp_path: Path) -> None:
    program = _program()
    path = _run(program, tmp_path / "run.json")
    data, _ = page_data(program, "place", trace=path)  # no copies on the page: their spans stay unlinked
    trace = data["trace"]
    assert trace["match"] == "program" and trace["state"] == 1
    assert trace["unlinked"] == 2
    assert sorted(s[4] for s in trace["spans"] if s[3] < 0) == ["memcpy", "memcpy"]


def test_a_trace_of_another_program_is_refused(tmp_path: Path) -> None:
    other = _program()
    other.global_block().ops[2].set_attr("op_device", "cpu:1")
    path = _run(other, tmp_path / "run.json")
    with pytest.raises(TraceError, match="run.json is of another program: it ran sha256"):
        page_data(_program(), "place,insert-copies", trace=path)


def _write(path: Path, doc: object) -> Path:
    path.write_text(json.dumps(doc))
    return path


def test_a_trace_without_digests_is_matched_by_the_ops_it_names(tmp_path: Path) -> None:
    events = [
        {"ph": "M", "name": "thread_name", "pid": 1, "tid": 7, "args": {"name": "worker"}},
        {"ph": "X", "name": "relu", "pid": 1, "tid": 7, "ts": 100, "dur": 4, "args": {"id": 1}},
        {"ph": "X", "name": "memcpy", "pid": 1, "tid": 8, "ts": 90, "dur": 2, "args": {"id": 3}},
        {"ph": "i", "name": "marker", "pid": 1, "tid": 7, "ts": 95},
    ]
    data, _ = page_data(_program(), "place,insert-copies,streams", trace=_write(tmp_path / "t.json", events))
    trace = data["trace"]
    assert trace["match"] == "ops" and trace["state"] == 3
    assert trace["lanes"] == ["worker", "pid 1 / tid 8"]
    assert trace["spans"] == [[0, 10.0, 4.0, 1, "relu"], [1, 0.0, 2.0, 3, "memcpy"]]
    with pytest.raises(TraceError, match=r"names ops that are not in the program: id 1 \(conv2d\)"):
        events[1]["name"] = "conv2d"
        page_data(_program(), "place", trace=_write(tmp_path / "t.json", events))


@pytest.mark.parametrize(
    ("content", "message"),
    [
        (b"{oops", "not JSON"),
        (b"\xff\xfe", "not JSON"),
        (b'{"traceEvents": 3}', "not a Chrome trace \\(a JSON object"),
        (b"[1, 2]", "event 0 is not a trace event"),
        (b'[{"ph": "X", "name": "relu", "args": {"id": 1}}]', "event 0 \\('relu'\\) has no 'ts' \\(its start"),
        (b"[1" + b"0" * 5000 + b"]", "not JSON \\(Exceeds the limit"),
        (b"[" * 100_000, "not a Chrome trace \\(its JSON is nested too deeply"),
        (b'[{"ph": "M", "name": "thread_name"}]', "has no op events"),
        (b'{"traceEvents": [], "otherData": {"blockir": {"program": 3}}}', "otherData.blockir is not an object"),
    ],
)
def test_files_that_are_not_chrome_traces_of_ops_are_refused(tmp_path: Path, content: bytes, message: str) -> None:
    path = tmp_path / "bad.json"
    path.write_bytes(content)
    with pytest.raises(TraceError, match=f"trace {path}: {message}"):
        load_trace(path)


def _event(**times: object) -> bytes:
    return json.dumps([{"ph": "X", "name": "relu", "pid": 1, "tid": 1, "args": {"id": 1}, **times}]).encode()


TIMES = "a time must be a finite number of microseconds from 0 to 2\\*\\*53 \\(about 285 years\\)"


@pytest.mark.parametrize(
    ("content", "message"),
    [
        (_event(ts=float("nan"), dur=1), f"event 0 \\('relu'\\) has 'ts' NaN: {TIMES}"),
        (b'[{"ph": "X", "name": "relu", "ts": NaN, "args": {"id": 1}}]', f"has 'ts' NaN: {TIMES}"),
        (_event(ts=0, dur=float("inf")), f"has 'dur' Infinity: {TIMES}"),
        (_event(ts=float("-inf")), f"has 'ts' -Infinity: {TIMES}"),
        (_event(ts=5, dur=-1), f"has 'dur' -1: {TIMES}"),
        (_event(ts=-0.5, dur=1), f"has 'ts' -0.5: {TIMES}"),
        (_event(ts=1e300, dur=1), f"has 'ts' 1e\\+300: {TIMES}"),
        (_event(ts=(1 << 53) + 1, dur=1), f"has 'ts' 9007199254740993: {TIMES}"),
        (_event(ts=10**400, dur=1), f"has 'ts' 1000000000000000000000000000000000000...: {TIMES}"),
        (_event(ts="12", dur=1), "has 'ts' \"12\": not a number"),
        (_event(ts=1, dur=True), "has 'dur' true: not a number"),
        (_event(ts=[1], dur=1), "has 'ts' \\[1\\]: not a number"),
        (_event(ts=None, dur=1), "has 'ts' null: not a number"),
    ],
)
def test_times_that_are_not_finite_microseconds_are_refused(tmp_path: Path, content: bytes, message: str) -> None:
    path = tmp_path / "bad.json"
    path.write_bytes(content)
    with pytest.raises(TraceError, match=f"trace {path}: .*{message}"):
        load_trace(path)


def test_the_bounds_of_a_time_are_accepted(tmp_path: Path) -> None:
    events = [
        {"ph": "X", "name": "relu", "pid": 1, "tid": 1, "ts": 0, "dur": 0, "args": {"id": 1}},
        {"ph": "X", "name": "relu", "pid": 1, "tid": 1, "ts": 1 << 53, "dur": 1 << 53, "args": {"id": 1}},
        {"ph": "X", "name": "relu", "pid": [1], "tid": {"a": 1}, "ts": 3, "args": {"id": 1}},  # no dur: 0
        {"ph": "M", "name": "thread_name", "pid": 2, "tid": 2, "args": [1]},  # a name that is no object: none
    ]
    trace = load_trace(_write(tmp_path / "t.json", events))
    assert [s[1:3] for s in trace.spans] == [(0.0, 0.0), (float(1 << 53), float(1 << 53)), (3.0, 0.0)]
    assert trace.lanes == ["pid 2 / tid 2", "pid 1 / tid 1", 'pid [1] / tid {"a": 1}']


def test_a_missing_trace_is_refused_before_any_pass_runs(tmp_path: Path) -> None:
    with pytest.raises(TraceError, match="cannot read it"):
        page_data(_program(), "place", trace=tmp_path / "nope.json")
