"""One file per variable: the manifest, generations, saves from before the manifest, write errors, kill -9."""

from __future__ import annotations

import json
import os
import stat
import subprocess
import sys
import textwrap
from pathlib import Path

import numpy as np
import pytest

import blockir as bir
from blockir.errors import BlockirError
from blockir.ops.values import LoDTensor
from tests.runtime.conftest import init_linear, linear_program

pytestmark = pytest.mark.usefixtures("rt_ops")  # linear_program is made of rt_* ops


def _files(directory: Path) -> list[str]:
    return sorted(str(p.relative_to(directory)) for p in directory.rglob("*") if p.is_file())


def _manifest(directory: Path) -> dict:
    return json.loads((directory / "manifest.json").read_text())


def _saved(exe, directory: Path, program: bir.Program) -> dict:
    scope = bir.Scope()
    bir.io.load_persistables(exe, directory, program, scope=scope)
    return {name: scope.get(name) for name in scope.names()}


def test_each_save_is_a_new_generation_and_removes_the_previous(tmp_path, exe):
    scope, program = bir.Scope(), linear_program()
    values = init_linear(scope)
    bir.io.save_persistables(exe, tmp_path, program, scope=scope)
    scope.set("w", values["w"] + 1)
    bir.io.save_persistables(exe, tmp_path, program, scope=scope)
    assert _files(tmp_path) == ["gen-000002/b.npy", "gen-000002/lr.npy", "gen-000002/w.npy", "manifest.json"]
    assert _manifest(tmp_path)["generation"] == 2
    np.testing.assert_array_equal(_saved(exe, tmp_path, program)["w"], values["w"] + 1)


def test_a_save_of_some_variables_keeps_the_others(tmp_path, exe):
    scope, program = bir.Scope(), linear_program()
    values = init_linear(scope)
    bir.io.save_persistables(exe, tmp_path, program, scope=scope)
    scope.set("w", values["w"] * 2)
    assert bir.io.save_vars(exe, tmp_path, program, vars=["w"], scope=scope) == ["w"]
    assert {name: entry["file"] for name, entry in _manifest(tmp_path)["vars"].items()} == {
        "w": "gen-000002/w.npy",
        "b": "gen-000001/b.npy",
        "lr": "gen-000001/lr.npy",
    }
    assert _files(tmp_path) == ["gen-000001/b.npy", "gen-000001/lr.npy", "gen-000002/w.npy", "manifest.json"]
    loaded = _saved(exe, tmp_path, program)
    np.testing.assert_array_equal(loaded["w"], values["w"] * 2)
    np.testing.assert_array_equal(loaded["b"], values["b"])


def test_a_failed_save_leaves_the_previous_one_and_no_trace(tmp_path, exe, monkeypatch):
    scope, program = bir.Scope(), linear_program()
    values = init_linear(scope)
    bir.io.save_persistables(exe, tmp_path, program, scope=scope)
    before = {name: (tmp_path / name).read_bytes() for name in _files(tmp_path)}
    real = np.lib.format.write_array
    calls = []

    def fails_on_the_second(*args, **kwargs):
        calls.append(1)
        if len(calls) == 2:
            raise KeyboardInterrupt  # not even an exception
        real(*args, **kwargs)

    monkeypatch.setattr(np.lib.format, "write_array", fails_on_the_second)
    scope.set("w", values["w"] + 1)
    with pytest.raises(KeyboardInterrupt):
        bir.io.save_persistables(exe, tmp_path, program, scope=scope)
    assert {name: (tmp_path / name).read_bytes() for name in _files(tmp_path)} == before
    assert sorted(p.name for p in tmp_path.iterdir()) == ["gen-000001", "manifest.json"]


def test_what_an_interrupted_save_left_goes_with_the_next_save(tmp_path, exe):
    scope, program = bir.Scope(), linear_program()
    init_linear(scope)
    bir.io.save_persistables(exe, tmp_path, program, scope=scope)
    (tmp_path / "gen-000007" / "sub").mkdir(parents=True)  # as a save killed while writing leaves them
    (tmp_path / "gen-000007" / "sub" / "w.npy").write_bytes(b"half")
    (tmp_path / ".manifest.json.0123456789ab.tmp").write_bytes(b"{")
    (tmp_path / "notes.txt").write_text("mine")
    assert _manifest(tmp_path)["generation"] == 1  # the manifest never named them
    assert sorted(_saved(exe, tmp_path, program)) == ["b", "lr", "w"]
    bir.io.save_persistables(exe, tmp_path, program, scope=scope)
    assert _files(tmp_path) == [
        "gen-000008/b.npy",
        "gen-000008/lr.npy",
        "gen-000008/w.npy",
        "manifest.json",
        "notes.txt",
    ]


def _legacy_save(directory: Path) -> dict:
    """A directory as blockir wrote it before the manifest: NAME.npy, NAME.npz bundles, '/' making directories."""
    values = {
        "w": np.arange(6, dtype="float32").reshape(3, 2),
        "scope/b": np.ones(2, "float32"),
        "seq": LoDTensor(np.arange(10, dtype="float64").reshape(5, 2), [[0, 2, 5]]),
    }
    (directory / "scope").mkdir(parents=True)
    np.save(directory / "w.npy", values["w"])
    np.save(directory / "scope" / "b.npy", values["scope/b"])
    program = bir.Program()
    program.global_block().create_var("seq", shape=(-1, 2), dtype="float64", lod_level=1, persistable=True)
    scope = bir.Scope()
    scope.set("seq", values["seq"])
    bir.io.save_persistables(bir.Executor("cpu"), directory / "tmp", program, filename="seq.npz", scope=scope)
    (directory / "tmp" / "seq.npz").rename(directory / "seq.npz")
    (directory / "tmp").rmdir()
    return values


def _legacy_program() -> bir.Program:
    program = bir.Program()
    block = program.global_block()
    block.create_var("w", shape=(3, 2), dtype="float32", persistable=True, is_parameter=True)
    block.create_var("scope/b", shape=(2,), dtype="float32", persistable=True, is_parameter=True)
    block.create_var("seq", shape=(-1, 2), dtype="float64", lod_level=1, persistable=True)
    return program


def test_saves_from_before_the_manifest_load(tmp_path, exe):
    values = _legacy_save(tmp_path)
    loaded = _saved(exe, tmp_path, _legacy_program())
    np.testing.assert_array_equal(loaded["w"], values["w"])
    np.testing.assert_array_equal(loaded["scope/b"], values["scope/b"])
    assert loaded["seq"].lod == [[0, 2, 5]]
    np.testing.assert_array_equal(loaded["seq"].data, values["seq"].data)


def test_a_save_over_an_old_directory_replaces_the_old_files_it_supersedes(tmp_path, exe):
    values = _legacy_save(tmp_path)
    program = _legacy_program()
    scope = bir.Scope()
    scope.set("w", values["w"] + 10)
    scope.set("scope/b", values["scope/b"] + 10)
    bir.io.save_params(exe, tmp_path, program, scope=scope)  # w and scope/b, not seq
    assert _files(tmp_path) == ["gen-000001/scope/b.npy", "gen-000001/w.npy", "manifest.json", "seq.npz"]
    assert not (tmp_path / "scope").exists()  # emptied, so removed
    loaded = _saved(exe, tmp_path, program)  # seq from its old file, the others from the manifest
    np.testing.assert_array_equal(loaded["w"], values["w"] + 10)
    np.testing.assert_array_equal(loaded["seq"].data, values["seq"].data)


@pytest.mark.parametrize(
    ("entry", "message"),
    [
        ({"kind": "dense", "file": "../outside.npy"}, "would lead outside the directory"),
        ({"kind": "dense", "file": "/etc/passwd"}, "would lead outside the directory"),
        ({"kind": "dense", "file": "gen-000001/../../outside.npy"}, "would lead outside the directory"),
        ({"kind": "dense", "file": "link/outside.npy"}, "would lead outside the directory"),
        ({"kind": "pickle", "file": "gen-000001/w.npy"}, "bad entry for variable 'w'"),
        ({"kind": "dense"}, "bad entry for variable 'w'"),
        ({"kind": "dense", "file": 3}, "bad entry for variable 'w'"),
        ("gen-000001/w.npy", "bad entry for variable 'w'"),
    ],
)
def test_a_crafted_manifest_reads_and_removes_nothing_outside(tmp_path, exe, entry, message):
    directory, outside = tmp_path / "model", tmp_path / "outside.npy"
    np.save(outside, np.zeros((3, 2), "float32"))
    scope, program = bir.Scope(), linear_program()
    init_linear(scope)
    bir.io.save_persistables(exe, directory, program, scope=scope)
    (directory / "link").symlink_to(tmp_path)
    doc = _manifest(directory)
    doc["vars"]["w"] = entry
    (directory / "manifest.json").write_text(json.dumps(doc))
    with pytest.raises(BlockirError, match=message):
        bir.io.load_persistables(exe, directory, program, scope=bir.Scope())
    with pytest.raises(BlockirError, match=message):  # a save needs the old manifest to know what to remove
        bir.io.save_persistables(exe, directory, program, scope=scope)
    assert outside.is_file()


@pytest.mark.parametrize(
    ("content", "message"),
    [
        (b"{", "not a blockir manifest (not JSON)"),
        (b"[" * 100000, "not a blockir manifest (not JSON)"),
        (b"\xff\xfe", "not a blockir manifest (not JSON)"),
        (b"[]", "not a blockir manifest (no format 'blockir.save')"),
        (json.dumps({"format": "blockir.save", "version": 2}).encode(), "manifest version 2, this blockir reads 1"),
        (
            json.dumps({"format": "blockir.save", "version": 1, "generation": -1, "vars": {}}).encode(),
            "bad generation or vars",
        ),
        (
            json.dumps({"format": "blockir.save", "version": 1, "generation": 1, "vars": []}).encode(),
            "bad generation or vars",
        ),
    ],
)
def test_a_bad_manifest_is_one_error_naming_it(tmp_path, exe, content, message):
    (tmp_path / "manifest.json").write_bytes(content)
    with pytest.raises(BlockirError) as info:
        bir.io.load_persistables(exe, tmp_path, linear_program(), scope=bir.Scope())
    assert str(info.value).startswith(f"{tmp_path / 'manifest.json'}: ") and message in str(info.value)


def test_a_manifest_names_files_beyond_the_generations_which_a_save_leaves(tmp_path, exe):
    """A manifest may name any file inside the directory (a later writer's layout); saves remove only their own."""
    scope, program = bir.Scope(), linear_program()
    values = init_linear(scope)
    np.save(tmp_path / "kept_w.npy", values["w"] - 1)
    bir.io.save_persistables(exe, tmp_path, program, scope=scope)
    doc = _manifest(tmp_path)
    doc["vars"]["w"]["file"] = "kept_w.npy"
    (tmp_path / "manifest.json").write_text(json.dumps(doc))
    np.testing.assert_array_equal(_saved(exe, tmp_path, program)["w"], values["w"] - 1)
    bir.io.save_persistables(exe, tmp_path, program, scope=scope)
    assert (tmp_path / "kept_w.npy").is_file()
    np.testing.assert_array_equal(_saved(exe, tmp_path, program)["w"], values["w"])


# -- file modes and write errors ----------------------------------------------------------------


@pytest.fixture
def umask_027():
    old = os.umask(0o027)
    yield
    os.umask(old)


def _mode(path: Path) -> int:
    return stat.S_IMODE(path.stat().st_mode)


@pytest.mark.usefixtures("umask_027")
def test_saved_files_honour_the_umask(tmp_path, exe):
    scope, program = bir.Scope(), linear_program()
    init_linear(scope)
    bir.io.save_persistables(exe, tmp_path / "vars", program, scope=scope)
    bir.io.save_persistables(exe, tmp_path, program, filename="bundle", scope=scope)
    bir.io.save_inference_model(tmp_path / "model", ["x"], ["out"], exe, main_program=program, scope=scope)
    files = [p for p in tmp_path.rglob("*") if p.is_file()]
    directories = [p for p in tmp_path.rglob("*") if p.is_dir()]
    assert len(files) == 9 and len(directories) == 5
    assert {str(p.relative_to(tmp_path)): oct(_mode(p)) for p in files} == {
        str(p.relative_to(tmp_path)): oct(0o640) for p in files
    }  # what open() and np.save give
    assert {oct(_mode(p)) for p in directories} == {oct(0o750)}


def _write_errors_cases(tmp_path: Path) -> list[tuple[Path, str | None, str]]:
    (tmp_path / "a_file").write_bytes(b"")
    (tmp_path / "manifest_is_a_dir" / "manifest.json").mkdir(parents=True)
    (tmp_path / "bundle_is_a_dir").mkdir()
    return [
        (tmp_path / "a_file", None, f"{tmp_path / 'a_file'}: not a directory"),
        (tmp_path / "a_file", "all", f"{tmp_path / 'a_file' / 'all'}: not a directory"),
        (tmp_path / "a_file" / "sub", None, f"{tmp_path / 'a_file' / 'sub'}: not a directory"),
        (tmp_path / "manifest_is_a_dir", None, f"{tmp_path / 'manifest_is_a_dir' / 'manifest.json'}: is a directory"),
        (tmp_path, "bundle_is_a_dir", f"{tmp_path / 'bundle_is_a_dir'}: is a directory"),
        (Path("/proc/self/blockir-test"), None, "/blockir-test: cannot write (No such file or directory)"),
        (Path("/proc/self"), "bundle", "/bundle: cannot write ("),
    ]


def test_write_errors_are_one_error_naming_the_path_and_the_reason(tmp_path, exe):
    """Tests run as root, where chmod does not keep anything from being written: files in the way and /proc do."""
    scope, program = bir.Scope(), linear_program()
    init_linear(scope)
    for dirname, filename, message in _write_errors_cases(tmp_path):
        with pytest.raises(BlockirError) as info:
            bir.io.save_persistables(exe, dirname, program, filename=filename, scope=scope)
        assert message in str(info.value), (dirname, filename)
    assert not list(tmp_path.rglob("*.tmp")) and not list(tmp_path.rglob("gen-*"))


def test_read_errors_are_one_error_naming_the_path(tmp_path, exe):
    (tmp_path / "a_file").write_bytes(b"")
    with pytest.raises(BlockirError, match="a_file/manifest.json: not a directory"):
        bir.io.load_persistables(exe, tmp_path / "a_file", linear_program(), scope=bir.Scope())
    with pytest.raises(BlockirError, match="no saved value for variable 'w' in .*nowhere"):
        bir.io.load_persistables(exe, tmp_path / "nowhere", linear_program(), scope=bir.Scope())


# -- kill -9 at random moments ------------------------------------------------------------------

_KILLER = textwrap.dedent('''
    """Save generation after generation in a forked child, kill it at a random moment, load; repeat."""
    import json, os, random, signal, sys, time
    import numpy as np
    import blockir as bir
    from blockir.ir import VarKind
    from blockir.ops.values import LoDTensor, SelectedRows

    directory, iterations, seed = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
    program = bir.Program()
    block = program.global_block()
    block.create_var("fc.w_0", shape=(64, 32), dtype="float32", persistable=True)
    block.create_var("layer/emb", shape=(100, 8), dtype="float64", persistable=True)
    block.create_var("seq", shape=(-1, 4), dtype="float32", lod_level=1, persistable=True)
    block.create_var("rows", kind=VarKind.SELECTED_ROWS, shape=(50, 3), dtype="float32", persistable=True)
    block.create_var("step", shape=(1,), dtype="int64", persistable=True)

    def scope_of(g):
        scope = bir.Scope()
        scope.set("fc.w_0", np.full((64, 32), g, "float32"))
        scope.set("layer/emb", np.full((100, 8), g, "float64"))
        scope.set("seq", LoDTensor(np.full((g % 5 + 1, 4), g, "float32"), [[0, g % 5 + 1]]))
        scope.set("rows", SelectedRows(np.array([g % 50], "int64"), np.full((1, 3), g, "float32"), 50))
        scope.set("step", np.array([g], "int64"))
        return scope

    def generation_loaded():
        scope = bir.Scope()
        bir.io.load_persistables(exe, directory, program, scope=scope)
        seq, rows, g = scope.get("seq"), scope.get("rows"), int(scope.get("step")[0])
        whole = (np.all(scope.get("fc.w_0") == g) and np.all(scope.get("layer/emb") == g) and np.all(seq.data == g)
                 and seq.lod == [[0, g % 5 + 1]] and rows.rows.tolist() == [g % 50] and np.all(rows.values == g))
        return g if whole else None

    exe = bir.Executor("cpu")
    rng = random.Random(seed)
    start = time.perf_counter()
    bir.io.save_persistables(exe, directory, program, scope=scope_of(0))
    save_time = time.perf_counter() - start
    generation = 0
    for _ in range(iterations):
        read_end, write_end = os.pipe()
        pid = os.fork()
        if pid == 0:
            os.close(read_end)
            g = generation
            while True:
                g += 1
                bir.io.save_persistables(exe, directory, program, scope=scope_of(g))
                os.write(write_end, b"%d\\n" % g)
        os.close(write_end)
        time.sleep(rng.uniform(0, 4 * save_time))
        os.kill(pid, signal.SIGKILL)
        os.waitpid(pid, 0)
        with os.fdopen(read_end, "rb") as f:
            done = [int(line) for line in f.read().split()]
        completed = done[-1] if done else generation
        loaded = generation_loaded()
        print(json.dumps({"completed": completed, "loaded": loaded}), flush=True)
        generation = max(completed, loaded or 0)
    bir.io.save_persistables(exe, directory, program, scope=scope_of(generation + 1))
    print(json.dumps({"final": generation_loaded() == generation + 1, "entries": sorted(os.listdir(directory))}))
''')


def _kill_during_saves(tmp_path: Path, iterations: int, seed: int, timeout: float) -> None:
    directory = tmp_path / "model"
    result = subprocess.run(
        [sys.executable, "-c", _KILLER, str(directory), str(iterations), str(seed)],
        capture_output=True,
        text=True,
        timeout=timeout,
        cwd=Path(__file__).parents[2],
        check=False,
    )
    assert result.returncode == 0, result.stderr
    *runs, final = [json.loads(line) for line in result.stdout.splitlines()]
    assert len(runs) == iterations
    for run in runs:  # exactly one whole generation: the last one completed or the one after it
        assert run["loaded"] in (run["completed"], run["completed"] + 1), run
    assert final["final"] and len(final["entries"]) == 2 and "manifest.json" in final["entries"], final


def test_a_save_killed_at_any_moment_leaves_the_old_or_the_new_one(tmp_path):
    _kill_during_saves(tmp_path, iterations=12, seed=13, timeout=120)


@pytest.mark.slow
def test_a_save_killed_at_any_moment_leaves_the_old_or_the_new_one_stress(tmp_path):
    _kill_during_saves(tmp_path, iterations=500, seed=1313, timeout=600)
