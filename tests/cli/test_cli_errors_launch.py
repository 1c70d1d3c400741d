"""``blockir launch`` on every bad input: exit status 2, one ``blockir: error:`` line, no traceback, nothing left
behind (tests/cli/adversarial.py), and no role started: the script is checked, and compiled, first."""

from __future__ import annotations

from pathlib import Path

import pytest

from blockir.cli import main
from tests.cli.adversarial import Case, check_bad_input


def _script(name: str, data: bytes) -> Case:
    """A script ``name`` holding ``data``, which no role may run (its first line would leave a file behind)."""

    def make(work: Path) -> list[str]:
        (work / name).write_bytes(data)
        return ["launch", str(work / name)]

    return make


_RAN = b"open(__file__ + '.ran', 'w').close()\n"  # a role that started leaves a file: the case fails

CASES: dict[str, tuple[Case, str]] = {
    "script missing": (lambda w: ["launch", str(w / "nope.py")], "the script '{w}/nope.py' does not exist"),
    "script a directory": (lambda w: ["launch", str(w / "model")], "the script '{w}/model' is a directory, not a file"),
    "script with a syntax error": (
        _script("syntax.py", _RAN + b"def f(:\n"),
        "the script '{w}/syntax.py' does not compile: invalid syntax (syntax.py, line 2)",
    ),
    "script a binary file": (
        _script("binary.py", b"\x7fELF\x02\x01\x01\x00\x00\x00" + bytes(range(256))),
        "the script '{w}/binary.py' is a binary file, not a Python script",
    ),
    "script not UTF-8 text": (
        _script("latin1.py", _RAN + b"print('caf\xe9')\n"),
        "the script '{w}/latin1.py' is not Python source: (unicode error) 'utf-8' codec can't decode byte 0xe9",
    ),
    "script a device": (lambda w: ["launch", "/dev/null"], "the script '/dev/null' is not a regular file"),
    "--servers 0": (lambda w: ["launch", "--servers", "0", str(w / "x.npy")], "--servers must be at least 1"),
    "--workers 0": (lambda w: ["launch", "--workers", "0", str(w / "x.npy")], "--workers must be at least 1"),
    "--max-restarts -1": (
        lambda w: ["launch", "--max-restarts", "-1", str(w / "x.npy")],
        "--max-restarts must be at least 0, got -1",
    ),
    "--checkpoint-every without a dir": (
        lambda w: ["launch", "--checkpoint-every", "5", str(w / "x.npy")],
        "--checkpoint-every needs --checkpoint-dir",
    ),
    "--keep-logs in-process": (
        lambda w: ["launch", "--keep-logs", str(w / "x.npy")],
        "--keep-logs keeps the files of the Ray cluster a launch starts: it needs --backend ray and no --address",
    ),
    "--keep-logs with --address": (
        lambda w: ["launch", "--backend", "ray", "--address", "127.0.0.1:1", "--keep-logs", str(w / "x.npy")],
        "it needs --backend ray and no --address",
    ),
}


@pytest.mark.parametrize("case", list(CASES))
def test_bad_launch_input_gives_one_line_and_status_2(
    case: str, model_dir: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    make, message = CASES[case]
    check_bad_input(make, message.format(w=tmp_path / "work"), model_dir, tmp_path, capsys)


def test_launch_help_says_its_options_go_before_the_script(capsys: pytest.CaptureFixture[str]) -> None:
    """Everything after SCRIPT is the script's (tests/distributed/test_launch.py runs it): --help says so, and
    the sentence about --max-restarts reads."""
    assert main(["launch", "--help"]) == 0
    text = " ".join(capsys.readouterr().out.split())
    assert "The launcher's options go before SCRIPT: everything after SCRIPT is the script's own arguments." in text
    assert "A role that fails is run again, up to --max-restarts times: a worker, and with --backend ray also" in text
    for option in ("--verbose", "--keep-logs"):
        assert option in text
