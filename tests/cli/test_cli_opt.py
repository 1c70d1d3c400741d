"""``blockir opt`` and ``blockir passes``: pass pipelines from the command line."""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import ClassVar

import pytest

import blockir as bir
from blockir.cli import main
from blockir.ir import Program, load_program, parse_program
from blockir.passes import Pass, pass_options, registered_passes, run
from tests.registries import passes_registered


@dataclass(frozen=True)
class CliFail(Pass):
    name: ClassVar[str] = "test-cli-fail"
    summary: ClassVar[str] = "test only: raises"

    def run(self, program: Program) -> bool:
        raise ValueError("broken on purpose")


@pytest.fixture(scope="module", autouse=True)
def _passes() -> Iterator[None]:
    with passes_registered(CliFail):
        yield


@pytest.fixture
def model(tmp_path: Path) -> Path:
    """A small training program saved as model.pb."""
    main_p, startup = bir.Program(), bir.Program()
    with bir.unique_name.guard(), bir.program_guard(main_p, startup):
        x = bir.data("x", shape=[-1, 4], dtype="float32")
        pred = bir.layers.fc(bir.layers.fc(x, size=3, act="relu"), size=2)
        bir.optimizer.SGD(learning_rate=0.1).minimize(bir.layers.mean(pred))
    path = tmp_path / "model.pb"
    main_p.save(str(path))
    return path


def test_opt_writes_what_the_python_api_makes(model: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    out = tmp_path / "out.pb"
    assert main(["opt", str(model), "-p", "inference,prune{targets=fc_1.tmp_1}", "-o", str(out)]) == 0
    assert capsys.readouterr() == (f"wrote {out}\n", "")
    expected, _ = run(load_program(model), "inference,prune{targets=fc_1.tmp_1}")
    assert str(load_program(out)) == str(expected)


def test_opt_without_output_prints_the_result(model: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["opt", str(model), "-p", "inference"]) == 0
    expected, _ = run(load_program(model), "inference")
    assert capsys.readouterr().out == f"{expected}\n"


def test_print_after_change_and_timing(model: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert (
        main(
            [
                "opt",
                str(model),
                "-p",
                "deps,inference,deps",
                "-o",
                str(tmp_path / "o.pb"),
                "--print-after-change",
                "--timing",
            ]
        )
        == 0
    )
    out = capsys.readouterr().out
    assert out.count("# after pass") == 1 and "# after pass 2 of 3: inference (changed)\nprogram version=0" in out
    assert "pass timing:" in out and out.rstrip().endswith(f"wrote {tmp_path / 'o.pb'}")
    assert "_grad(" not in out.split("# after pass 2 of 3")[1]  # no gradient ops printed


def test_print_after_all(model: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["opt", str(model), "-p", "deps,inference", "--print-after-all"]) == 0
    out = capsys.readouterr().out
    assert "# after pass 1 of 2: deps (unchanged)\n" in out and "# after pass 2 of 2: inference (changed)\n" in out


def test_print_flags_exclude_each_other(model: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["opt", str(model), "-p", "deps", "--print-after-all", "--print-after-change"]) == 2
    assert "not allowed with argument" in capsys.readouterr().err


def test_dump_dir(model: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    dump = tmp_path / "passes"
    assert main(["opt", str(model), "-p", "inference,deps", "-o", str(tmp_path / "o.pb"), "--dump-dir", str(dump)]) == 0
    assert "# after" not in capsys.readouterr().out  # dumped, not printed
    assert sorted(p.name for p in dump.iterdir()) == [
        "00-input.pb",
        "00-input.txt",
        "01-inference.pb",
        "01-inference.txt",
        "02-deps.pb",
        "02-deps.txt",
        "report.txt",
    ]
    report = (dump / "report.txt").read_text()
    assert report.startswith("pipeline: inference,deps\n") and "2 deps: block 0:" in report


@pytest.mark.parametrize(
    "pipeline, message",
    [
        ("inference,dep", "pipeline 'inference,dep', column 11: unknown pass 'dep' (did you mean 'deps'?)"),
        (
            "prune{target=x}",
            "column 7: pass 'prune': unknown option 'target' (did you mean 'targets'?); "
            "valid options: targets, feeds, keep_side_effects",
        ),
        ("prune{targets=a", "unbalanced braces"),
        ("deps,,inference", "column 6: expected a pass name, found ','"),
    ],
)
def test_bad_pipelines_fail_with_one_line(
    model: Path, pipeline: str, message: str, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["opt", str(model), "-p", pipeline]) == 2
    out, err = capsys.readouterr()
    assert out == "" and err.startswith("blockir: error: ") and message in err and err.count("\n") == 1


def test_a_failing_pass_leaves_a_reproducer_that_opt_reruns(
    model: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    dump = tmp_path / "dump"
    assert main(["opt", str(model), "-p", "inference,test-cli-fail", "--dump-dir", str(dump)]) == 2
    err = capsys.readouterr().err
    reproducer = dump / "02-test-cli-fail.input.pb"
    assert err.startswith("blockir: error: pass 'test-cli-fail' (pass 2 of 2) failed: ValueError: broken on purpose")
    assert "passes before it: inference" in err and f"blockir opt {reproducer} -p test-cli-fail -o out.pb" in err
    assert str(load_program(reproducer)) == (dump / "01-inference.txt").read_text().split("\n", 1)[1].rstrip("\n")
    assert main(["opt", str(reproducer), "-p", "test-cli-fail", "-o", str(tmp_path / "o.pb")]) == 2
    assert "failed: ValueError: broken on purpose" in capsys.readouterr().err


def test_invalid_device_in_the_input(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    program = parse_program("""program version=0
block 0 parent=-1 {
  var %x : lod_tensor<float32>[2] need_check_feed
  var %y : lod_tensor<float32>[2]
  %y = relu(X=%x) @gpu:-1
}""")
    path = tmp_path / "bad.pb"
    program.save(str(path))
    assert main(["opt", str(path), "-p", "deps"]) == 2
    err = capsys.readouterr().err
    assert err.startswith(f"blockir: error: {path}: the input of the pipeline is invalid") and "'gpu:-1'" in err
    assert main(["opt", str(path), "-p", "deps", "--no-verify", "-o", str(tmp_path / "o.pb")]) == 0


def test_missing_program_file(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["opt", str(tmp_path / "nope.pb"), "-p", "deps"]) == 2
    assert capsys.readouterr().err == f"blockir: error: {tmp_path / 'nope.pb'}: no such file\n"


def test_passes_lists_every_pass_with_its_options(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["passes"]) == 0
    out = capsys.readouterr().out
    for name, cls in registered_passes().items():
        assert f"{name}: {cls.summary}\n" in out
    lines = out.splitlines()
    prune = lines.index(f"prune: {registered_passes()['prune'].summary}")
    assert [line.split()[:3] for line in lines[prune + 1 : prune + 4]] == [
        ["targets", "list[str]", "(empty)"],
        ["feeds", "list[str]", "(empty)"],
        ["keep_side_effects", "bool", "true"],
    ]
    assert lines[prune + 1].endswith("variables to keep computing")
    assert [o.name for o in pass_options(registered_passes()["prune"])] == ["targets", "feeds", "keep_side_effects"]


def test_exit_status_from_a_real_process(model: Path) -> None:
    done = subprocess.run(
        [sys.executable, "-m", "blockir.cli", "opt", str(model), "-p", "nope"],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 2 and done.stdout == ""
    assert done.stderr.startswith("blockir: error: pipeline 'nope', column 1: unknown pass 'nope'")


def test_opt_distribute_prints_and_writes_the_server_programs_too(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    main_p, startup = bir.Program(), bir.Program()
    with bir.program_guard(main_p, startup), bir.unique_name.guard():
        x = bir.layers.data("x", [-1, 4])
        y = bir.layers.data("y", [-1, 1])
        bir.optimizer.SGD(0.1).minimize(bir.layers.mean(bir.layers.square_error_cost(bir.layers.fc(x, 1), y)))
    main_p.save(str(tmp_path / "train.pb"))
    assert main(["opt", str(tmp_path / "train.pb"), "-p", "distribute{servers=2 workers=2}"]) == 0
    worker, server0, server1 = capsys.readouterr().out.split("\n\n# ")
    assert "send(X=[%fc_0.w_0@GRAD, %fc_0.b_0@GRAD]" in parse_program(worker).global_block().ops[-2].__str__()
    assert server0.startswith("server0\n") and "sgd(Param=%fc_0.w_0" in server0
    assert server1.startswith("server1\n") and "sgd(Param=%fc_0.b_0" in server1
    assert main(["opt", str(tmp_path / "train.pb"), "-p", "distribute{servers=2}", "-o", str(tmp_path / "d.pb")]) == 0
    assert str(load_program(tmp_path / "d.server1.pb")) == server1.split("\n", 1)[1].rstrip("\n")
