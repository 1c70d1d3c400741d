"""The ``blockir`` command line."""

from __future__ import annotations

import shlex
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest

import blockir
from blockir.cli import main
from blockir.ir import Program
from blockir.proto import framework_pb2 as pb


def sample_program() -> Program:
    p = Program()
    p.random_seed = 11
    b = p.global_block()
    b.create_var("x", shape=[-1, 4], need_check_feed=True)
    b.create_var("w", shape=[4, 2], persistable=True, is_parameter=True)
    b.create_var("h", shape=[-1, 2])
    b.append_op("mul", {"X": "x", "Y": "w"}, {"Out": "h"}, {"x_num_col_dims": 1, "op_device": "cuda:0"}, infer=False)
    return p


def test_show_prints_the_text_form(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    p = sample_program()
    path = tmp_path / "p.pb"
    p.save(str(path))
    assert main(["show", str(path)]) == 0
    out, err = capsys.readouterr()
    print(p)
    assert out == capsys.readouterr().out
    assert "%h = mul(X=%x, Y=%w) {x_num_col_dims=1} @cuda:0" in out
    assert err == ""


def test_show_verify(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    p = Program()
    p.global_block().append_op("test_cli_unregistered", attrs={"op_device": "gpu:-1"}, infer=False)
    path = tmp_path / "p.pb"
    p.save(str(path))
    assert main(["show", str(path)]) == 0  # without --verify it only prints
    capsys.readouterr()
    assert main(["show", str(path), "--verify"]) == 2
    out, err = capsys.readouterr()
    assert out == ""
    assert err.startswith(f"blockir: error: {path}: program is invalid (2 problems):\n")
    assert "op_device 'gpu:-1' is not well formed" in err
    assert "op type 'test_cli_unregistered' is not registered" in err
    assert "Traceback" not in err


def _other_message() -> bytes:
    v = pb.VarDesc(name="x")
    v.type.type = pb.VarType.LOD_TENSOR
    v.type.lod_tensor.tensor.data_type = pb.VarType.FP32
    return v.SerializeToString()


@pytest.mark.parametrize(
    ("content", "message"),
    [
        (None, "no such file"),
        (b"", "file is empty"),
        (b"\x12\x34\x56\x78\x9a", "not a ProgramDesc (corrupt or truncated protobuf data)"),
        ("truncated", "not a ProgramDesc (corrupt or truncated protobuf data)"),
        (_other_message(), "not a ProgramDesc"),
        (pb.BlockDesc(idx=0, parent_idx=-1).SerializeToString(), "not a ProgramDesc (it has only fields"),
    ],
)
def test_bad_files_give_one_line_and_status_2(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], content: bytes | str | None, message: str
) -> None:
    path = tmp_path / "in.pb"
    if content == "truncated":
        content = sample_program().serialize()[:-1]
    if content is not None:
        path.write_bytes(content)  # type: ignore[arg-type]
    assert main(["show", str(path)]) == 2
    out, err = capsys.readouterr()
    assert out == ""
    assert err.startswith(f"blockir: error: {path}: ")
    assert message in err
    assert err.count("\n") == 1


def test_version(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["--version"]) == 0
    assert capsys.readouterr().out == f"blockir {blockir.__version__}\n"


def test_help(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["--help"]) == 0
    out = capsys.readouterr().out
    assert out.startswith("usage: blockir")
    assert "show" in out and "--version" in out
    assert main(["show", "--help"]) == 0
    assert "--verify" in capsys.readouterr().out


def help_examples(out: str) -> list[list[str]]:
    """The example commands of ``blockir --help``'s epilog, comments dropped."""
    assert "\nexamples:\n" in out
    lines = out.split("\nexamples:\n", 1)[1].split("\n\n", 1)[0].splitlines()
    return [shlex.split(line, comments=True) for line in lines]


def test_help_shows_examples_and_where_the_documentation_is(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["--help"]) == 0
    out = capsys.readouterr().out
    examples = help_examples(out)
    assert len(examples) >= 3 and all(argv[0] == "blockir" for argv in examples)
    assert {argv[1] for argv in examples} >= {"demo", "run"}
    assert "docs/" in out and "README.md" in out and "'blockir COMMAND --help'" in out
    # the epilog keeps its lines (RawDescriptionHelpFormatter), and only the top-level help has it
    assert "\n  blockir run demo/model/program.pb --feed x=demo/batch.npy" in out
    assert main(["run", "--help"]) == 0
    assert "examples:" not in capsys.readouterr().out


def test_every_example_of_help_runs_as_shown(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """Each command of ``blockir --help``'s examples, in order, in an empty directory, as a user would type them."""
    assert main(["--help"]) == 0
    examples = help_examples(capsys.readouterr().out)
    monkeypatch.chdir(tmp_path)
    for argv in examples:
        status = main(argv[1:])
        err = capsys.readouterr().err
        assert status == 0, f"{shlex.join(argv)} exited {status}: {err}"


def test_demo_lists_the_model_and_with_a_workdir_a_command_that_serves_it_again(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.chdir(tmp_path)
    assert main(["demo", "--workdir", "work dir", "--epochs", "10"]) == 0
    out = capsys.readouterr().out
    # the model: its inputs, parameters and ops, none of the gradients and optimizer state training adds
    listing = out.split("\n", 1)[1].split("\nepoch ", 1)[0].splitlines()
    assert out.startswith("the model (2 inputs, 6 parameters, 11 ops; ")
    assert len(listing) == 2 + 6 + 11 and all(line.startswith("  ") for line in listing), listing
    variables = [line for line in listing if line.startswith("  var %")]
    assert [v.split()[1] for v in variables[:2]] == ["%x", "%label"]
    assert all(v.endswith("persistable parameter") for v in variables[2:])
    assert "@GRAD" not in out and "moment" not in out and "learning_rate" not in out
    # the command printed serves the model kept in the working directory, as shown
    (command,) = [line for line in out.splitlines() if line.startswith("$ blockir run ")]
    argv = shlex.split(command[2:])
    assert argv[:2] == ["blockir", "run"] and "work dir/model/program.pb" in argv
    (tmp_path / "work dir" / "out.npz").unlink()
    assert main(argv[1:]) == 0
    assert (tmp_path / "work dir" / "out.npz").exists()


def test_demo_without_a_workdir_prints_no_command_for_the_directory_it_removes(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))  # the demo's temporary directory: here, to be seen gone
    assert main(["demo", "--epochs", "10"]) == 0
    out = capsys.readouterr().out
    assert out.startswith("the model (")
    assert "$ blockir run" not in out and "blockir-demo-" not in out
    assert "served predictions match the Python session" in out and "--workdir DIR keeps it" in out
    assert list(tmp_path.iterdir()) == []


@pytest.mark.parametrize(
    ("argv", "help_of"),
    [
        ([], "blockir"),
        (["frobnicate"], "blockir"),
        (["show"], "blockir show"),
        (["show", "a.pb", "--bogus"], "blockir"),
    ],
)
def test_usage_errors(argv: list[str], help_of: str, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert err.startswith("blockir: error: ") and err.count("\n") == 1
    assert err.endswith(f"(see '{help_of} --help')\n")


def test_real_process(tmp_path: Path) -> None:
    version = subprocess.run(
        [sys.executable, "-m", "blockir.cli", "--version"], capture_output=True, text=True, timeout=60
    )
    assert (version.returncode, version.stdout) == (0, f"blockir {blockir.__version__}\n")
    missing = subprocess.run(
        [sys.executable, "-m", "blockir.cli", "show", str(tmp_path / "nope.pb")],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert missing.returncode == 2
    assert missing.stderr == f"blockir: error: {tmp_path / 'nope.pb'}: no such file\n"


def test_installed_script_runs_outside_the_source_tree(tmp_path: Path) -> None:
    script = Path(sys.executable).parent / "blockir"
    assert script.exists(), "install the package (pip install -e .) to get the `blockir` script"
    result = subprocess.run([str(script), "--version"], capture_output=True, text=True, timeout=60, cwd=tmp_path)
    assert (result.returncode, result.stdout, result.stderr) == (0, f"blockir {blockir.__version__}\n", "")
