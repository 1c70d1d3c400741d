"""The executor transforms programs through the pass manager: the fusion passes, default-device-pipeline, its
report, and `blockir opt` rerunning it to the very program the executor compiled."""

from __future__ import annotations

from pathlib import Path

import pytest

import blockir as bir
from blockir.cli import main
from blockir.passes import DefaultDevicePipeline, parse_pipeline
from tests.passes.test_copies import mlp
from tests.runtime import fake_cupy
from tests.runtime.test_devices import batch
from tests.runtime.test_fusion import unfused


def test_the_executor_reports_the_default_pipeline_it_ran() -> None:
    program = mlp("cpu:2")[0]
    with bir.Executor("cpu:1", compute_streams=2) as exe:
        report = exe.pass_report(program)
        assert report.pipeline == "fuse,default-device-pipeline{default=cpu:1 compute=2}"
        fusions = [
            "fold-conv-bn",
            "fuse-conv-add-act",
            "fuse-bn-act",
            "max-pool-with-index",
            "fuse-fc",
            "fuse-elementwise-act",
            "fuse-softmax-ce",
            "fuse-fc-sgd",
            "fuse-optimizer",
        ]
        assert [r.name for r in report] == [*fusions, "place", "insert-copies", "streams"]
        assert report.record("insert-copies").changed and report.record("streams").notes
        assert all(r.digest is None for r in report)  # the cheap mode: no snapshots
        assert exe.pass_report(program) is report  # cached with the plans
        compiled = exe.compiled_program(program)
        assert compiled is not exe.compiled_program(program)  # a copy each time
        assert str(compiled) == str(exe.compiled_program(program))
        program.global_block().var("x").stop_gradient = True  # a change through the IR API: transformed again
        assert exe.pass_report(program) is not report


def test_blockir_opt_reproduces_what_the_executor_compiled(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    program = mlp("cpu:2")[0]
    path = tmp_path / "mlp.pb"
    program.save(str(path))
    with bir.Executor("cpu:1", compute_streams=2) as exe:
        report, compiled = exe.pass_report(program), exe.compiled_program(program)
    assert main(["opt", str(path), "-p", report.pipeline]) == 0
    assert capsys.readouterr().out == f"{compiled}\n"


def test_a_program_all_on_the_host_runs_as_it_is_without_fusion() -> None:
    program, _, loss = mlp(None)
    with bir.Executor("cpu", build_strategy=unfused()) as exe:
        report = exe.pass_report(program)
        assert report.pipeline == "" and len(report) == 0
        assert str(exe.compiled_program(program)) == str(program)
    with bir.Executor("cpu", compute_streams=2, build_strategy=unfused()) as exe:  # more compute streams
        assert exe.pass_report(program).pipeline == "default-device-pipeline{default=cpu compute=2}"
    with bir.Executor("cpu") as exe:  # fusion is on by default; what a run fetches and feeds is kept
        assert exe.pass_report(program, {"x": None}, [loss]).pipeline == f"fuse{{keep={loss.name},x}}"


def test_values_fed_on_a_gpu_are_an_option_of_the_pipeline(monkeypatch: pytest.MonkeyPatch) -> None:
    fake = fake_cupy.install(monkeypatch, gpus=1)
    main_p, startup, loss = mlp(None)
    feed = batch(4)
    feed["x"] = fake.asarray(feed["x"])
    with bir.Executor("cuda:0") as exe:
        scope = bir.Scope()
        exe.run(startup, scope=scope)
        exe.run(main_p, feed=feed, fetch_list=[loss], scope=scope)
        report = exe.pass_report(main_p, feed)
        assert report.pipeline == "fuse{keep=label,x},default-device-pipeline{default=cuda:0 fed=x@cuda:0}"
        assert exe.pass_report(main_p).pipeline == "fuse,default-device-pipeline{default=cuda:0}"
        (_, pipeline) = parse_pipeline(report.pipeline)
        assert pipeline == DefaultDevicePipeline(default="cuda:0", fed=("x@cuda:0",))
        compiled = exe.compiled_program(main_p, feed)
    assert compiled.global_block().var("x").device == "cuda:0"
    copied = [op.input("X")[0] for op in compiled.global_block().ops if op.type == "memcpy"]
    assert "label" in copied and "x" not in copied  # x is on cuda:0 already
