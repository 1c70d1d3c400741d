"""Named pipelines, the pass manager's cheap mode, and the passes they brought: feed-fetch, place{fed},
streams{keep}; save_inference_model through inference-pipeline."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

import blockir as bir
from blockir.errors import BlockirError, PassError
from blockir.ir import Program, VarKind, load_program, parse_program
from blockir.passes import (
    DefaultDevicePipeline,
    FeedFetch,
    InferencePipeline,
    Instrument,
    PassReport,
    Streams,
    expand,
    format_pipeline,
    parse_pipeline,
    run,
)
from tests.passes.programs import CHAIN
from tests.passes.test_copies import mlp


class KeepReport(Instrument):
    """Keeps the report of the pipeline it watched."""

    report: PassReport | None = None

    def after_pipeline(self, report: PassReport, program: Program) -> None:
        self.report = report


def test_a_named_pipeline_runs_and_reports_its_passes_one_by_one() -> None:
    text = "default-device-pipeline{default=cpu:1 compute=2}"
    (pipeline,) = parse_pipeline(text)
    assert pipeline == DefaultDevicePipeline(default="cpu:1", compute=2)
    assert format_pipeline([pipeline]) == text
    result, report = run(mlp(None)[0], text)
    assert report.pipeline == text
    assert [r.label for r in report] == ["place{default=cpu:1}", "insert-copies", "streams{compute=2 keep=true}"]
    assert [r.index for r in report] == [1, 2, 3] and report.record("place").changed
    assert {op.device for op in result.ops()} == {"cpu:1"}  # the fed x and label copied there
    expected, _ = run(mlp(None)[0], "place{default=cpu:1},insert-copies,streams{compute=2 keep=true}")
    assert str(result) == str(expected)
    assert expand([FeedFetch(), pipeline]) == [FeedFetch(), *pipeline.passes()]


def test_a_named_pipeline_run_outside_the_manager_does_the_same() -> None:
    program = mlp("cpu:1")[0]
    expected, _ = run(program, [InferencePipeline(feeds=("x",), targets=("fc_2.tmp_2",))])
    assert InferencePipeline(feeds=("x",), targets=("fc_2.tmp_2",)).run(program)
    assert str(program) == str(expected)


def test_pipeline_options_are_checked_when_it_is_made() -> None:
    with pytest.raises(BlockirError, match="the streams option compute must be an int >= 1, got 0"):
        DefaultDevicePipeline(compute=0)
    with pytest.raises(BlockirError, match="'gpu:0' is not a device"):
        parse_pipeline("default-device-pipeline{default=gpu:0}")
    with pytest.raises(BlockirError, match="the place option fed takes NAME@DEVICE items, got 'x'"):
        parse_pipeline("default-device-pipeline{fed=x}")


def test_the_cheap_mode_takes_no_snapshots_and_gives_the_same_program() -> None:
    full, full_report = run(mlp("cpu:1")[0], "place,insert-copies,streams")
    cheap, report = run(mlp("cpu:1")[0], "place,insert-copies,streams", snapshots=False)
    assert str(cheap) == str(full)
    for a, b in zip(report, full_report):
        assert (a.label, a.changed, a.returned, a.ops_before, a.ops_after, a.notes) == (
            b.label,
            b.changed,
            b.returned,
            b.ops_before,
            b.ops_after,
            b.notes,
        )
        assert (a.added, a.removed, a.modified, a.digest) == (None, None, None, None)
        assert b.digest is not None
    assert report.record("insert-copies").ops_after > report.record("insert-copies").ops_before
    assert "  2  insert-copies  yes" in str(report) and str(report).splitlines()[3].split()[-3:] == ["-", "-", "-"]


def test_in_the_cheap_mode_a_failing_pass_raises_its_own_error(tmp_path: Path) -> None:
    program = parse_program(CHAIN)
    with pytest.raises(BlockirError, match="place: fed variable 'nope' is not a variable") as info:
        run(program, "place{fed=nope@cpu:1}", snapshots=False, dump_dir=tmp_path)
    assert not isinstance(info.value, PassError) and not list(tmp_path.glob("*.input.pb"))  # no reproducer
    with pytest.raises(PassError, match="pass 'place{fed=nope@cpu:1}' \\(pass 1 of 1\\) failed"):
        run(program, "place{fed=nope@cpu:1}", dump_dir=tmp_path)


def test_place_fed_puts_a_fed_variable_where_its_value_is() -> None:
    result, report = run(parse_program(CHAIN), "place{fed=x@cuda,h@cpu:1}")
    block = result.global_block()
    assert block.var("x").device == "cuda:0"  # canonical spelling
    assert block.var("h").device == "cpu"  # h is written: where its writer runs
    assert report.record("place").changed
    copied, _ = run(result, "insert-copies")
    assert [op.type for op in copied.global_block().ops].count("memcpy") == 1  # x to the host for relu, sigmoid
    assert all(list(op.input("X")) == ["x@cpu"] for op in copied.global_block().ops if op.type in ("relu", "sigmoid"))


def test_streams_keep_leaves_a_block_streamed_by_hand() -> None:
    program = parse_program(CHAIN)
    for op, stream in zip(program.global_block().ops, ["cpu/compute1", "cpu/compute1", "cpu/compute0"]):
        op.set_attr("op_stream", stream)
    text = str(program)
    assert not Streams(compute=3, keep=True).run(program) and str(program) == text
    program.global_block().append_op("relu", {"X": ["z"]}, {"Out": ["y"]})  # one op without a stream
    assert Streams(compute=3, keep=True).run(program)  # it gets one by the rules: it continues z's stream
    streams = ["cpu/compute1", "cpu/compute1", "cpu/compute0", "cpu/compute0"]
    assert [op.attr("op_stream") for op in program.global_block().ops] == streams
    assert Streams(compute=3).run(program)  # without keep every op is reassigned
    assert [op.attr("op_stream") for op in program.global_block().ops] == ["cpu/compute0"] * 2 + ["cpu/compute1"] * 2
    with pytest.raises(BlockirError, match="the streams option keep must be true or false, got 1"):
        Streams(keep=1)  # type: ignore[arg-type]


TRAINED = """program version=0
block 0 parent=-1 {
  var %x : lod_tensor<float32>[2, 2] need_check_feed
  var %old : fetch_list persistable
  var %h : lod_tensor<float32>[2, 2]
  var %y : lod_tensor<float32>[2, 2]
  %h = relu(X=%x)
  %y = tanh(X=%h)
  %old = fetch(X=%h) {col=0}
}"""


def test_feed_fetch_frames_the_block_and_a_second_run_changes_nothing() -> None:
    result, report = run(parse_program(TRAINED), "feed-fetch{feeds=x targets=y}")
    ops = result.global_block().ops
    assert [(op.type, list(op.input("X")), list(op.output("Out")), op.attr("col")) for op in (ops[0], ops[-1])] == [
        ("feed", ["feed"], ["x"], 0),
        ("fetch", ["y"], ["fetch"], 0),
    ]
    assert [op.type for op in ops] == ["feed", "relu", "tanh", "fetch"]  # the old fetch op is gone
    assert ops[0].attr("op_pass") == "feed-fetch"
    assert result.global_block().var("feed").kind is VarKind.FEED_MINIBATCH
    assert report.record("feed-fetch").changed
    assert not FeedFetch(feeds=("x",), targets=("y",)).run(result)
    assert FeedFetch().run(result) and [op.type for op in result.global_block().ops] == ["relu", "tanh"]


def test_feed_fetch_refuses_a_variable_of_the_list_name_of_another_kind() -> None:
    program = parse_program(CHAIN.replace("var %z ", "var %feed : lod_tensor<float32>[2, 2]\n  var %z "))
    with pytest.raises(BlockirError, match="the program has a variable named 'feed', the name of the feed_minibatch"):
        FeedFetch(feeds=("x",)).run(program)
    with pytest.raises(BlockirError, match="'nope' is not a variable of the program's global block"):
        FeedFetch(targets=("nope",)).run(program)


def test_save_inference_model_goes_through_the_inference_pipeline(tmp_path: Path) -> None:
    main, startup, _ = mlp(None)
    pred = next(op for op in main.global_block().ops if op.type == "softmax").output("Out")[0]
    exe, scope = bir.Executor("cpu"), bir.Scope()
    exe.run(startup, scope=scope)
    keep = KeepReport()
    bir.io.save_inference_model(tmp_path, ["x"], [pred], exe, main_program=main, scope=scope, instruments=[keep])
    assert keep.report is not None
    assert keep.report.pipeline == f"inference-pipeline{{feeds=x targets={pred}}}"
    assert [r.name for r in keep.report] == ["feed-fetch", "inference", "prune", "feed-fetch"]
    assert all(r.digest is None for r in keep.report)  # the cheap mode
    expected, _ = run(main, keep.report.pipeline)
    assert str(load_program(tmp_path / "program.pb")) == str(expected)
    loaded, feeds, fetches = bir.io.load_inference_model(tmp_path, exe, scope=bir.Scope())
    assert feeds == ["x"] and [v.name for v in fetches] == [pred]
    assert np.isfinite(exe.run(loaded, feed={"x": np.ones((2, 784), "float32")}, scope=scope)[0]).all()
