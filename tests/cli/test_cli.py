"""The ``blockir`` command line."""

from __future__ import annotations

import subprocess
import sys
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
