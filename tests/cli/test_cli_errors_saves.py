"""Saves that lie and files that are not regular files: exit status 2, one ``blockir: error:`` line naming the file
and the claim, no traceback, nothing left behind (:mod:`tests.cli.adversarial`), and no path made either: a
refused ``ps reshard`` leaves no ``DST``.

``ps inspect`` checks every claim of a save's manifest it can without reading the shards' data (types, ranges,
each shard's arrays and size against the rows, dim and dtype claimed); ``--verify`` also reads the shards
(checksums, ids), as ``ps reshard`` does. Only regular files are read: a FIFO (made here with no writer, so a
read would wait forever: the cases run under a timeout) or a device is refused before anything is read, as a
program, a feed, parameters, a manifest, a shard, a data feed description, a data file or a trace. ``-`` reads
standard input, for the PROGRAM of ``show``, ``run``, ``opt`` and ``viz`` only.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from blockir.cli import main
from blockir.io.persistence import MANIFEST_FILE, save_sharded, write_shard
from tests.cli.adversarial import Case, check_bad_input

TABLE, STATE = "emb", "emb_moment1_0"
IDS = np.array([1, 4, 7, 10, 13, 22, 39], np.int64)  # of a table of height 40: shard 0 holds 3 ids, shard 1 four


def ps_save(directory: Path, name: str = TABLE, servers: int = 2, dense_name: str = "fc_0.w_0") -> Path:
    """A parameter-server save as ``fleet.save_persistables`` writes one: a table of float32 rows of 4 values with
    one optimizer state, cut for ``servers`` servers, the ids not admitted yet, two dense variables and what
    worker 0 recorded (its step, the servers' versions)."""
    base = directory.resolve()
    rng = np.random.default_rng(0)

    def shards(generation: Path) -> dict[str, Any]:
        cut = []
        for k in range(servers):
            mine = IDS[IDS % servers == k]
            arrays = {
                "ids": mine,
                name: rng.random((len(mine), 4), dtype=np.float32),
                STATE: np.zeros((len(mine), 4), np.float32),
                "pending_ids": np.array([2 + k], np.int64),
                "pending_counts": np.array([1], np.int64),
                "removed_ids": np.zeros(0, np.int64),
            }
            path = generation / "tables" / name / f"base-{k:03d}-of-{servers:03d}.npys"
            cut.append({"file": path.relative_to(base).as_posix(), **write_shard(path, arrays)})
        entry = {"height": 40, "dim": 4, "dtype": "float32", "servers": servers, "rule": "id % servers"}
        return {name: {**entry, "states": [STATE], "shards": cut}}

    dense = {dense_name: np.ones((4, 2), np.float32), "learning_rate_0": np.array([0.1], np.float32)}
    save_sharded(base, dense, shards, {"step": 2, "versions": [2, 2]})
    return directory


def _shard(save: Path, k: int = 0) -> Path:
    return save / "gen-000001" / "tables" / TABLE / f"base-{k:03d}-of-002.npys"


def _manifest(change: Callable[[dict[str, Any]], None]) -> Callable[[Path], None]:
    def lie(save: Path) -> None:
        doc = json.loads((save / MANIFEST_FILE).read_text())
        change(doc)
        (save / MANIFEST_FILE).write_text(json.dumps(doc))

    return lie


def _table(key: str, value: Any) -> Callable[[Path], None]:
    return _manifest(lambda doc: doc["tables"][TABLE].__setitem__(key, value))


def _rows(value: Any) -> Callable[[Path], None]:
    return _manifest(lambda doc: doc["tables"][TABLE]["shards"][0].__setitem__("rows", value))


def _flip(save: Path) -> None:
    """A byte of shard 0's rows inverted: its headers and size intact, its checksum not."""
    data = bytearray(_shard(save).read_bytes())
    data[300] ^= 0xFF  # in the table's rows: after the ids (128 + 24 bytes) and the rows' header (128)
    _shard(save).write_bytes(bytes(data))


def _fifo(path: Path) -> Path:
    """``path`` replaced by a FIFO that nobody writes: opening it to read waits for a writer, reading it forever."""
    path.unlink(missing_ok=True)
    os.mkfifo(path)
    return path


def _fifo_lie(where: Callable[[Path], Path]) -> Callable[[Path], None]:
    """A lie that replaces the file ``where(save)`` of a save by a FIFO."""
    return lambda save: _fifo(where(save)) and None


LIES: dict[str, tuple[Callable[[Path], None], str]] = {
    "a shard cut short": (
        lambda s: _shard(s).write_bytes(_shard(s).read_bytes()[:300]),
        "base-000-of-002.npys: emb: truncated .npy file (its header declares float32[3, 4], 48 bytes of data",
    ),
    "-5 rows": (_rows(-5), "manifest.json: table 'emb': shard 'gen-000001/tables/emb/base-000-of-002.npys': rows -5"),
    "10**15 rows": (_rows(10**15), "table 'emb': 1000000000000004 rows in the shards of its base save, more than"),
    "5 rows where 3 are": (_rows(5), "shard gen-000001/tables/emb/base-000-of-002.npys has 5 rows, but its shard"),
    "rows true": (_rows(True), "rows True is not a count"),
    "dtype object": (_table("dtype", "object"), "table 'emb': dtype 'object' is not a numpy tensor element type"),
    "another dtype": (_table("dtype", "float64"), "table 'emb' has dtype float64, but its shard gen-000001/tables"),
    "height 10**18": (
        _table("height", 10**18),
        "table 'emb': height 1000000000000000000 and dim 4 of float32 make a table larger than any array",
    ),
    "height -1": (_table("height", -1), "table 'emb': height -1 is not 1 or more"),
    "another dim": (
        _table("dim", 8),
        "manifest.json: table 'emb' has dim 8, but its shard gen-000001/tables/emb/base-000-of-002.npys holds "
        "'emb' as float32[3, 4]",
    ),
    "dim 'four'": (_table("dim", "four"), "table 'emb': dim 'four' is not an integer"),
    "step 'lots'": (_manifest(lambda d: d["info"].__setitem__("step", "lots")), "info: step 'lots' is not a count"),
    "versions of strings": (
        _manifest(lambda d: d["info"].__setitem__("versions", ["2", 2])),
        "info: versions ['2', 2] is not a list of counts",
    ),
    "a crc32 that is no checksum": (
        _manifest(lambda d: d["tables"][TABLE]["shards"][1].__setitem__("crc32", "lots")),
        "crc32 'lots' is not a list of checksums of 8 hexadecimal digits",
    ),
    "a checksum too few": (
        _manifest(lambda d: d["tables"][TABLE]["shards"][1].__setitem__("part_bytes", 64)),
        "base-001-of-002.npys: its 944 bytes make 15 parts of 64 bytes, and its manifest checksums 1 parts",
    ),
    "part_bytes -1": (
        _manifest(lambda d: d["tables"][TABLE]["shards"][1].__setitem__("part_bytes", -1)),
        "part_bytes -1 is not a count of bytes",
    ),
    "a shard of another table": (
        _manifest(lambda d: d["tables"][TABLE]["shards"][0].__setitem__("arrays", ["ids", "other"])),
        "arrays ['ids', 'other'] lacks 'emb'",
    ),
    "a FIFO as a shard": (_fifo_lie(lambda s: _shard(s, 1)), "base-001-of-002.npys: a FIFO, not a regular file"),
    "a FIFO as the manifest": (_fifo_lie(lambda s: s / MANIFEST_FILE), "manifest.json: a FIFO, not a regular file"),
    "a FIFO as a dense file": (
        _fifo_lie(lambda s: s / "gen-000001" / "fc_0.w_0.npy"),
        "fc_0.w_0.npy: a FIFO, not a regular file",
    ),
}
"""Saves whose manifest its files belie, and what ``ps inspect`` (``--verify`` and ``reshard`` too) says."""

READ_LIES: dict[str, tuple[Callable[[Path], None], str]] = {
    "a checksum that does not match": (_flip, "base-000-of-002.npys: checksum mismatch"),
    "a height below an id": (  # id 39 of shard 1: only reading the ids shows it
        _table("height", 39),
        "manifest.json: table 'emb' has height 39, but its shard gen-000001/tables/emb/base-001-of-002.npys holds "
        "id 39 ('ids')",
    ),
}
"""Saves whose lie shows only in the shards' data: ``ps inspect --verify`` and ``ps reshard`` refuse them."""


def _inspect(lie: Callable[[Path], None], *options: str) -> Case:
    def make(work: Path) -> list[str]:
        lie(ps_save(work / "save"))
        return ["ps", "inspect", str(work / "save"), *options]

    return make


def _reshard(lie: Callable[[Path], None], dst: str = "moved") -> Case:
    def make(work: Path) -> list[str]:
        lie(ps_save(work / "save"))
        return ["ps", "reshard", str(work / "save"), str(work / dst), "--servers", "3"]

    return make


def _files(root: Path) -> list[str]:
    """Every path under ``root``, directories and FIFOs included."""
    return sorted(str(p.relative_to(root)) for p in root.rglob("*"))


def check_refused(
    make: Case, message: str, model_dir: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """:func:`check_bad_input`, and no path made: a directory (reshard's ``DST``, its parents) counts too."""
    before: list[str] = []

    def making(work: Path) -> list[str]:
        argv = make(work)
        before.extend(_files(work))
        return argv

    check_bad_input(making, message, model_dir, tmp_path, capsys)
    assert _files(tmp_path / "work") == before, "a failed command left a path behind"


CASES: dict[str, tuple[Case, str]] = {
    **{f"ps inspect: {case}": (_inspect(lie), message) for case, (lie, message) in LIES.items()},
    **{f"ps inspect --verify: {case}": (_inspect(lie, "--verify"), m) for case, (lie, m) in LIES.items()},
    **{f"ps inspect --verify: {case}": (_inspect(lie, "--verify"), m) for case, (lie, m) in READ_LIES.items()},
    **{f"ps reshard: {case}": (_reshard(lie), message) for case, (lie, message) in {**LIES, **READ_LIES}.items()},
    "ps reshard into missing directories: a checksum that does not match": (
        _reshard(_flip, "new/deeper/moved"),  # the directories made for DST go too
        "checksum mismatch",
    ),
    "ps reshard into a save": (_reshard(lambda s: ps_save(s.parent / "moved") and None), "moved exists; the copy"),
    "ps reshard into a file": (_reshard(lambda s: (s.parent / "moved").write_text("x") and None), "moved: exists"),
}


@pytest.mark.timeout(60)
@pytest.mark.parametrize("case", list(CASES))
def test_a_save_that_lies_is_refused_naming_the_claim(
    case: str, model_dir: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    make, message = CASES[case]
    check_refused(make, message, model_dir, tmp_path, capsys)


Arg = str | Callable[[Path], str]


def _argv(*items: Arg) -> Case:
    """A command line of ``items``: words, and functions of the case's directory giving one (making files)."""
    return lambda w: [item if isinstance(item, str) else item(w) for item in items]


def _in(relative: str) -> Callable[[Path], str]:
    return lambda w: str(w / relative)


def _fifo_in(relative: str) -> Callable[[Path], str]:
    """A FIFO at ``relative`` in the case's directory (replacing what the model has there): its path."""
    return lambda w: str(_fifo(w / relative))


def _x(path: Callable[[Path], str]) -> Callable[[Path], str]:
    return lambda w: f"x={path(w)}"


def _params_file(work: Path) -> str:
    """``model/params``, its weight's file replaced by a FIFO."""
    (weight,) = (work / "model" / "params").rglob("fc_0.w_0.npy")
    _fifo(weight)
    return str(work / "model" / "params")


def _params_manifest(work: Path) -> str:
    _fifo(work / "model" / "params" / MANIFEST_FILE)
    return str(work / "model" / "params")


FIFO = "a FIFO, not a regular file"
PROGRAM, FEED = "model/program.pb", "x.npy"
RUN = ("run", _in(PROGRAM), "--feed", _x(_in(FEED)))


def _train(main_pb: Arg = "main.pb", data_feed: Arg = "data.prototxt", files: Arg = "part-0", *more: Arg) -> Case:
    """``blockir train``: its files in the case's directory (a name), or made there (a function)."""
    named = [_in(a) if isinstance(a, str) else a for a in (main_pb, data_feed, files)]
    return _argv("train", named[0], "--data-feed", named[1], "--files", named[2], *more)


FIFOS: dict[str, tuple[Case, str]] = {
    "show: the program": (_argv("show", _fifo_in("p.pb")), f"p.pb: {FIFO}"),
    "show: /dev/zero": (_argv("show", "/dev/zero"), "/dev/zero: a character device, not a regular file"),
    "run: the program": (_argv("run", _fifo_in(PROGRAM), "--feed", _x(_in(FEED))), f"program.pb: {FIFO}"),
    "opt: the program": (_argv("opt", _fifo_in("main.pb"), "-p", "deps"), f"main.pb: {FIFO}"),
    "viz: the program": (_argv("viz", _fifo_in("main.pb"), "-o", _in("p.html")), f"main.pb: {FIFO}"),
    "run: a feed": (_argv("run", _in(PROGRAM), "--feed", _x(_fifo_in(FEED))), f"x.npy: {FIFO}"),
    "run: /dev/zero as a feed": (
        _argv("run", _in(PROGRAM), "--feed", "x=/dev/zero"),
        "--feed x: /dev/zero: a character device, not a regular file",
    ),
    "run: - as a feed": (
        _argv("run", _in(PROGRAM), "--feed", "x=-"),
        "--feed x=-: a feed is a .npy file; only the PROGRAM may be '-' (standard input)",
    ),
    "run --params: a bundle": (_argv(*RUN, "--params", _fifo_in("p.npz")), f"p.npz: {FIFO}"),
    "run --params: a directory's file": (_argv(*RUN, "--params", _params_file), f"fc_0.w_0.npy: {FIFO}"),
    "run --params: a directory's manifest": (_argv(*RUN, "--params", _params_manifest), f"manifest.json: {FIFO}"),
    "train: the program": (_train(_fifo_in("main.pb")), f"main.pb: {FIFO}"),
    "train --startup": (_train("main.pb", "data.prototxt", "part-0", "--startup", _fifo_in("s.pb")), f"s.pb: {FIFO}"),
    "train --data-feed": (_train(data_feed=_fifo_in("data.prototxt")), f"data.prototxt: {FIFO}"),
    "train --files: a data file": (_train(files=_fifo_in("part-0")), f"part-0: {FIFO}"),
    "viz --trace": (
        _argv("viz", _in("main.pb"), "--trace", _fifo_in("t.json"), "-o", _in("p.html")),
        f"t.json: cannot read it ({FIFO})",
    ),
    "ps inspect: a shard": (_inspect(_fifo_lie(_shard)), f"base-000-of-002.npys: {FIFO}"),
    "ps inspect: the manifest": (_inspect(_fifo_lie(lambda s: s / MANIFEST_FILE)), f"manifest.json: {FIFO}"),
    "ps reshard: a shard": (_reshard(_fifo_lie(_shard)), f"base-000-of-002.npys: {FIFO}"),
}
"""Files that are not regular files, where a command reads a file."""


@pytest.mark.timeout(30)
@pytest.mark.parametrize("case", list(FIFOS))
def test_a_fifo_or_a_device_is_refused_before_anything_is_read(
    case: str, model_dir: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    make, message = FIFOS[case]
    check_refused(make, message, model_dir, tmp_path, capsys)


@pytest.mark.parametrize("case", ["another dim", "step 'lots'", "a FIFO as a shard"])
@pytest.mark.timeout(30)
def test_inspect_json_of_a_save_that_lies_prints_no_json(
    case: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    lie, message = LIES[case]
    lie(ps_save(tmp_path / "save"))
    assert main(["ps", "inspect", str(tmp_path / "save"), "--json"]) == 2
    out, err = capsys.readouterr()
    assert out == "" and err.count("\n") == 1 and err.startswith("blockir: error: ") and message in err, (out, err)


def test_inspect_checks_a_good_save_and_prints_names_escaped(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    ps_save(tmp_path / "save", name="e\nmb", dense_name="fc\n0.w_0")
    for options in ([], ["--verify"]):
        assert main(["ps", "inspect", str(tmp_path / "save"), *options]) == 0
        out = capsys.readouterr().out
        assert out.splitlines() == [
            "table 'e\\nmb': float32[40, 4], 7 rows on 2 servers (3, 4; rule id % servers), 1,848 bytes, "
            f"row state: {STATE}",
            "dense 'fc\\n0.w_0': float32[4, 2]",
            "dense learning_rate_0: float32[1]",
            "taken at worker 0's step 2; updates each server had applied: 2, 2",
        ]
    assert main(["ps", "inspect", str(tmp_path / "save"), "--json"]) == 0
    report = json.loads(capsys.readouterr().out)
    assert list(report["tables"]) == ["e\nmb"] and list(report["dense"]) == ["fc\n0.w_0", "learning_rate_0"]


@pytest.mark.parametrize("case", list(READ_LIES))
def test_inspect_without_verify_reads_no_shard_data(
    case: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """What only the shards' data shows (a checksum, an id) passes ``ps inspect``; ``--verify`` refuses it."""
    lie, message = READ_LIES[case]
    lie(ps_save(tmp_path / "save"))
    assert main(["ps", "inspect", str(tmp_path / "save")]) == 0
    capsys.readouterr()
    assert main(["ps", "inspect", str(tmp_path / "save"), "--verify"]) == 2
    assert message in capsys.readouterr().err


def _blockir(argv: list[str], cwd: Path, stdin: bytes = b"") -> subprocess.CompletedProcess[bytes]:
    return subprocess.run(
        [sys.executable, "-m", "blockir.cli", *argv], input=stdin, capture_output=True, cwd=cwd, timeout=120
    )


@pytest.mark.timeout(300)
def test_dash_reads_the_program_from_standard_input(model_dir: Path, tmp_path: Path) -> None:
    """``show``, ``run``, ``opt`` and ``viz`` read ``-`` from standard input as they read the file; a feed ``-``
    is refused."""
    program = model_dir / PROGRAM
    for argv in (
        ["show", "{}", "--verify"],
        ["run", "{}", "--feed", f"x={model_dir / FEED}", "--params", str(model_dir / "model" / "params")],
        ["opt", "{}", "-p", "deps"],
    ):
        from_file = _blockir([a.format(program) for a in argv], tmp_path)
        from_stdin = _blockir([a.format("-") for a in argv], tmp_path, program.read_bytes())
        assert (from_stdin.returncode, from_stdin.stderr) == (0, b""), from_stdin.stderr
        assert from_stdin.stdout == from_file.stdout, argv
    viz = _blockir(["viz", "-", "-p", "deps"], tmp_path, program.read_bytes())
    assert (viz.returncode, viz.stdout) == (0, b"wrote stdin.html: 1 passes\n"), viz.stderr
    assert b"<title>&lt;stdin&gt;: deps</title>" in (tmp_path / "stdin.html").read_bytes()
    empty = _blockir(["show", "-"], tmp_path)
    assert (empty.returncode, empty.stderr) == (2, b"blockir: error: <stdin>: file is empty\n")
    no_params = _blockir(["run", "-", "--feed", f"x={model_dir / FEED}"], tmp_path, program.read_bytes())
    assert no_params.returncode == 2 and b"standard input has no params/ directory beside it" in no_params.stderr
    feed = _blockir(["run", str(program), "--feed", "x=-"], tmp_path, (model_dir / FEED).read_bytes())
    assert feed.returncode == 2
    assert (
        feed.stderr
        == b"blockir: error: --feed x=-: a feed is a .npy file; only the PROGRAM may be '-' (standard input)\n"
    )
