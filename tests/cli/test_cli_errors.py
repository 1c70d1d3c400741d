"""Every subcommand on every bad path: exit status 2, one ``blockir: error:`` line, no traceback, nothing left behind.

Each case builds its bad input (or names a bad output location) in a fresh directory that also holds a
good model; the directory must hold exactly the same files afterwards.
"""

from __future__ import annotations

import io
import json
import os
import signal
import subprocess
import sys
import time
import zipfile
from pathlib import Path

import numpy as np
import pytest

import blockir as bir
from blockir.cli import main
from blockir.ir import Program
from blockir.ir.proto_io import save_program
from tests.cli.adversarial import Case, check_bad_input


def _huge_npy(path: Path) -> Path:
    """A valid .npy header declaring 2**40 float32 elements, followed by no data (a 128-byte file)."""
    header = io.BytesIO()
    np.lib.format.write_array_header_1_0(header, {"descr": "<f4", "fortran_order": False, "shape": (1 << 40,)})
    path.write_bytes(header.getvalue())
    return path


def _pickled_npy(path: Path) -> Path:
    with open(path, "wb") as f:
        np.save(f, np.array([{"a": 1}], dtype=object), allow_pickle=True)
    return path


def _flipped(path: Path) -> Path:
    """``path`` with bytes in its middle inverted (its zip directory intact, a member's data corrupt)."""
    data = bytearray(path.read_bytes())
    for i in range(len(data) // 3, len(data) // 3 + 16):
        data[i] ^= 0xFF
    path.write_bytes(bytes(data))
    return path


def _huge_params(work: Path) -> Path:
    """A directory of one file per variable, as saved before manifests, whose weight declares 2**40 elements."""
    params = work / "huge_params"
    params.mkdir()
    np.save(params / "fc_0.b_0.npy", np.zeros(2, "float32"))
    _huge_npy(params / "fc_0.w_0.npy")
    return params


def _write(path: Path, data: bytes) -> Path:
    path.write_bytes(data)
    return path


def _feed_without_out(path: Path) -> Path:
    p = Program()
    b = p.global_block()
    b.create_var("feed", kind=bir.ir.VarKind.FEED_MINIBATCH, persistable=True)
    b.create_var("x", shape=[-1, 3])
    b.append_op("feed", {"X": ["feed"]}, {}, {"col": 0}, infer=False)
    p.save(str(path))
    return path


def _bundle_copy(w: Path) -> Path:
    target = w / "bad_params.npz"
    target.write_bytes((w / "bundle_dir" / "params.npz").read_bytes())
    return _flipped(target)


def _other_trace(work: Path) -> Path:
    """A trace of a run of another program than main.pb (made outside ``work``, so nothing is left there)."""
    other = Program()
    block = other.global_block()
    block.create_var("x", shape=(2,), need_check_feed=True)
    block.create_var("y", shape=(2,))
    block.append_op("relu", inputs={"X": ["x"]}, outputs={"Out": ["y"]})
    path = work.parent / "other.json"
    bir.Executor().run(other, feed={"x": np.ones(2, "float32")}, fetch_list=["y"], trace=str(path))
    return path


def _anonymous_trace(work: Path) -> Path:
    """A Chrome trace without blockir's digests naming an op id main.pb does not have."""
    event = {"ph": "X", "name": "conv2d", "pid": 1, "tid": 1, "ts": 0, "dur": 5, "args": {"id": 99}}
    return _write(work.parent / "anon.json", json.dumps({"traceEvents": [event]}).encode())


def _bad_zip(path: Path) -> Path:
    with zipfile.ZipFile(path, "w") as zf:
        zf.writestr("index.json", "{not json")
    return path


RUN = ["run"]
CASES: dict[str, tuple[Case, str]] = {
    # show
    "show: missing file": (lambda w: ["show", str(w / "nope.pb")], "no such file"),
    "show: /dev/zero": (lambda w: ["show", "/dev/zero"], "/dev/zero"),
    "show: not a program": (lambda w: ["show", str(_write(w / "p.pb", b"\x12\x34\x56"))], "not a ProgramDesc"),
    "show --verify: feed without Out": (lambda w: ["show", str(_feed_without_out(w / "f.pb")), "--verify"], "Out"),
    # run: inputs
    "run: feed file missing": (lambda w: [*RUN, str(w / "model/program.pb"), "--feed", f"x={w / 'no.npy'}"], "no.npy"),
    "run: feed not .npy": (
        lambda w: [*RUN, str(w / "model/program.pb"), "--feed", f"x={_write(w / 't.npy', b'hello')}"],
        "t.npy",
    ),
    "run: feed header of 2^40 elements": (
        lambda w: [*RUN, str(w / "model/program.pb"), "--feed", f"x={_huge_npy(w / 'h.npy')}"],
        "h.npy",
    ),
    "run: pickled feed": (
        lambda w: [*RUN, str(w / "model/program.pb"), "--feed", f"x={_pickled_npy(w / 'o.npy')}"],
        "o.npy",
    ),
    "run: params header of 2^40 elements": (
        lambda w: [*RUN, str(w / "model/program.pb"), "--feed", f"x={w / 'x.npy'}", "--params", str(_huge_params(w))],
        "fc_0.w_0",
    ),
    "run: bundle with flipped bytes": (
        lambda w: [
            *RUN,
            str(w / "main.pb"),
            "--feed",
            f"x={w / 'x.npy'}",
            "--fetch",
            "fc_0.tmp_2",
            "--params",
            str(_bundle_copy(w)),
        ],
        "bad_params.npz",
    ),
    "run: bundle with a bad index": (
        lambda w: [
            *RUN,
            str(w / "main.pb"),
            "--feed",
            f"x={w / 'x.npy'}",
            "--fetch",
            "fc_0.tmp_2",
            "--params",
            str(_bad_zip(w / "z.npz")),
        ],
        "z.npz",
    ),
    "run: feed op without Out": (lambda w: [*RUN, str(_feed_without_out(w / "f.pb")), "--fetch", "x"], "Out"),
    "run: bad --lod": (
        lambda w: [*RUN, str(w / "model/program.pb"), "--feed", f"x={w / 'x.npy'}", "--lod", "x=a,b"],
        "--lod",
    ),
    # run: outputs
    "run --out a directory": (
        lambda w: [*RUN, str(w / "model/program.pb"), "--feed", f"x={w / 'x.npy'}", "--out", str(w)],
        "is a directory",
    ),
    "run --out /proc/x": (
        lambda w: [*RUN, str(w / "model/program.pb"), "--feed", f"x={w / 'x.npy'}", "--out", "/proc/x"],
        "/proc/x",
    ),
    "run --trace in a missing directory": (
        lambda w: [*RUN, str(w / "model/program.pb"), "--feed", f"x={w / 'x.npy'}", "--trace", "/nonexistent/t.json"],
        "/nonexistent",
    ),
    # opt
    "opt: bad pipeline": (lambda w: ["opt", str(w / "main.pb"), "-p", "nosuchpass"], "nosuchpass"),
    "opt -o a directory": (lambda w: ["opt", str(w / "main.pb"), "-p", "deps", "-o", str(w)], "is a directory"),
    "opt --dump-dir a file": (
        lambda w: ["opt", str(w / "main.pb"), "-p", "deps", "--dump-dir", str(w / "x.npy")],
        "not a directory",
    ),
    # demo
    "demo --workdir a file": (lambda w: ["demo", "--workdir", str(w / "x.npy")], "not a directory"),
    "demo --epochs 0": (lambda w: ["demo", "--epochs", "0", "--workdir", str(w / "d")], "--epochs"),
    # train
    "ps inspect: not a save": (lambda w: ["ps", "inspect", str(w / "model")], "is not a save"),
    "ps reshard --servers 0": (
        lambda w: ["ps", "reshard", str(w / "model"), str(w / "out"), "--servers", "0"],
        "--servers must be an int >= 1",
    ),
    # launch: tests/cli/test_cli_errors_launch.py
    "train: no data feed file": (
        lambda w: ["train", str(w / "main.pb"), "--data-feed", str(w / "no.prototxt"), "--files", str(w / "part-0")],
        "no.prototxt",
    ),
    "train: files match nothing": (
        lambda w: ["train", str(w / "main.pb"), "--data-feed", str(w / "data.prototxt"), "--files", str(w / "none-*")],
        "none-*",
    ),
    "train --save-dir /proc/sd": (
        lambda w: [
            "train",
            str(w / "main.pb"),
            "--data-feed",
            str(w / "data.prototxt"),
            "--files",
            str(w / "part-0"),
            "--save-dir",
            "/proc/sd",
        ],
        "/proc/sd",
    ),
    "train --save-dir a file": (
        lambda w: [
            "train",
            str(w / "main.pb"),
            "--data-feed",
            str(w / "data.prototxt"),
            "--files",
            str(w / "part-0"),
            "--save-dir",
            str(w / "x.npy"),
        ],
        "not a directory",
    ),
    "train: no program": (
        lambda w: ["train", "--data-feed", str(w / "data.prototxt"), "--files", str(w / "part-0")],
        "MAIN.pb",
    ),
    # viz
    "viz: missing program": (lambda w: ["viz", str(w / "nope.pb"), "-o", str(w / "p.html")], "nope.pb"),
    "viz: not a program": (
        lambda w: ["viz", str(_write(w / "p.pb", b"\x12\x34\x56")), "-o", str(w / "p.html")],
        "not a ProgramDesc",
    ),
    "viz: pipeline does not parse": (
        lambda w: ["viz", str(w / "main.pb"), "-p", "place{default=cpu:1", "-o", str(w / "p.html")],
        "unbalanced braces",
    ),
    "viz: trace not JSON": (
        lambda w: ["viz", str(w / "main.pb"), "--trace", str(_write(w / "t.json", b"{oops")), "-o", str(w / "p.html")],
        "t.json: not JSON",
    ),
    "viz: trace not a Chrome trace": (
        lambda w: [
            "viz",
            str(w / "main.pb"),
            "--trace",
            str(_write(w / "t.json", b'{"a": 1}')),
            "-o",
            str(w / "p.html"),
        ],
        "not a Chrome trace",
    ),
    "viz: trace of another program": (
        lambda w: ["viz", str(w / "main.pb"), "--trace", str(_other_trace(w)), "-o", str(w / "p.html")],
        "is of another program",
    ),
    "viz: trace naming ops the program lacks": (
        lambda w: ["viz", str(w / "main.pb"), "--trace", str(_anonymous_trace(w)), "-o", str(w / "p.html")],
        "id 99 (conv2d)",
    ),
    "viz: -o in a missing directory": (
        lambda w: ["viz", str(w / "main.pb"), "-o", str(w / "no" / "p.html")],
        "does not exist",
    ),
    # usage
    "no command": (lambda w: [], "COMMAND"),
    "unknown command": (lambda w: ["frobnicate"], "frobnicate"),
    "unknown option": (lambda w: ["show", "a.pb", "--bogus"], "--bogus"),
}


@pytest.mark.parametrize("case", list(CASES))
def test_bad_path_gives_one_line_and_status_2(
    case: str, model_dir: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    make, message = CASES[case]
    check_bad_input(make, message, model_dir, tmp_path, capsys)


def _cpu_seconds(pid: int) -> float:
    """The CPU time process ``pid`` has used (user and system, from ``/proc/PID/stat``)."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def _interrupt(argv: list[str], cwd: Path, after: str, cpu: float = 0.0) -> subprocess.CompletedProcess[str]:
    """Run ``blockir ARGV`` in a process, send it SIGINT (Ctrl-C) once its stdout shows ``after`` (a line that
    starts with it), or, ``after`` empty, once it has used ``cpu`` seconds of CPU (a command that prints nothing
    while it runs: past its start-up, it is in the run)."""

    def sigint_default() -> None:  # a shell's background job starts with SIGINT ignored; a terminal's does not
        signal.signal(signal.SIGINT, signal.SIG_DFL)

    proc = subprocess.Popen(
        [sys.executable, "-m", "blockir.cli", *argv],
        cwd=cwd,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        preexec_fn=sigint_default,
    )
    try:
        out = []
        assert proc.stdout is not None
        if not after:
            deadline = time.monotonic() + 120
            while _cpu_seconds(proc.pid) < cpu and proc.poll() is None and time.monotonic() < deadline:
                time.sleep(0.05)
            proc.send_signal(signal.SIGINT)
        for line in proc.stdout if after else ():
            out.append(line)
            if after in line:
                proc.send_signal(signal.SIGINT)
                break
        rest, err = proc.communicate(timeout=60)
    finally:
        proc.kill()
    return subprocess.CompletedProcess(proc.args, proc.returncode, "".join(out) + rest, err)


def test_ctrl_c_in_demo_is_one_line_and_status_130(tmp_path: Path) -> None:
    done = _interrupt(["demo", "--epochs", "100000", "--workdir", str(tmp_path / "demo")], tmp_path, "the model")
    assert (done.returncode, done.stderr) == (130, "blockir: interrupted\n")


def test_ctrl_c_in_a_loop_that_never_ends_is_one_line_and_status_130(tmp_path: Path) -> None:
    """``blockir run`` of a program whose ``while`` never ends (issue 36): Ctrl-C stops it, one line, 130."""
    main, startup = bir.Program(), bir.Program()
    with bir.program_guard(main, startup):
        i = bir.layers.fill_constant([1], "int64", 0)
        n = bir.layers.fill_constant([1], "int64", 2**62)
        cond = bir.layers.less_than(i, n)
        with bir.layers.While(cond).block():
            bir.layers.increment(i)
            bir.layers.less_than(i, n, cond=cond)
    save_program(main, tmp_path / "forever.pb")
    done = _interrupt(["run", str(tmp_path / "forever.pb"), "--fetch", i.name], tmp_path, "", cpu=3.0)
    assert (done.returncode, done.stderr) == (130, "blockir: interrupted\n")


def test_ctrl_c_in_train_says_what_was_saved(model_dir: Path, tmp_path: Path) -> None:
    (tmp_path / "part-0").write_text((model_dir / "part-0").read_text() * 200)
    done = _interrupt(
        [
            "train",
            str(model_dir / "main.pb"),
            "--startup",
            str(model_dir / "startup.pb"),
            "--data-feed",
            str(model_dir / "data.prototxt"),
            "--files",
            str(tmp_path / "part-0"),
            "--epochs",
            "100000",
            "--save-dir",
            str(tmp_path / "out"),
        ],
        tmp_path,
        "saved the persistables",
    )
    assert done.returncode == 130, done.stderr
    last = [line for line in done.stdout.splitlines() if line.startswith("saved the persistables to ")][-1]
    assert done.stderr == f"blockir: interrupted (the last saved persistables are in {last.split()[-1]})\n"
    assert Path(last.split()[-1]).parent == tmp_path / "out"


def test_train_takes_the_program_after_the_files(
    model_dir: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert (
        main(
            [
                "train",
                "--data-feed",
                str(model_dir / "data.prototxt"),
                "--startup",
                str(model_dir / "startup.pb"),
                "--files",
                str(model_dir / "part-0"),
                str(model_dir / "main.pb"),
            ]
        )
        == 0
    )
    assert capsys.readouterr().out.startswith("epoch 0: 2 instances in ")
