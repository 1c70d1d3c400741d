"""``blockir run`` and ``blockir demo``: serving a saved model from the command line."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

import blockir as bir
from blockir.cli import main


@pytest.fixture(scope="module")
def model(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, np.ndarray, np.ndarray, str]:
    """A trained-for-a-few-steps classifier saved with save_inference_model, a batch and its predictions."""
    work = tmp_path_factory.mktemp("model")
    main_p, startup = bir.Program(), bir.Program()
    main_p.random_seed = startup.random_seed = 3
    with bir.unique_name.guard(), bir.program_guard(main_p, startup):
        x = bir.data("x", shape=[-1, 5], dtype="float32")
        label = bir.data("label", shape=[-1, 1], dtype="int64")
        h = bir.layers.fc(x, size=8, act="tanh")
        pred = bir.layers.fc(h, size=3, act="softmax")
        loss = bir.layers.mean(bir.layers.cross_entropy(pred, label))
        test = main_p.clone()
        bir.optimizer.SGD(learning_rate=0.5).minimize(loss)
    exe, scope = bir.Executor("cpu"), bir.Scope()
    exe.run(startup, scope=scope)
    rng = np.random.default_rng(0)
    xb = rng.normal(size=(16, 5)).astype("float32")
    yb = rng.integers(0, 3, size=(16, 1)).astype("int64")
    for _ in range(5):
        exe.run(main_p, feed={"x": xb, "label": yb}, fetch_list=[loss], scope=scope)
    bir.io.save_inference_model(work / "model", ["x"], [pred], exe, main_program=main_p, scope=scope)
    (probs,) = exe.run(test, feed={"x": xb, "label": yb}, fetch_list=[pred], scope=scope)
    np.save(work / "batch.npy", xb)
    return work, xb, probs, pred.name


def test_run_writes_the_same_predictions(model, capsys: pytest.CaptureFixture[str]) -> None:
    work, _, probs, name = model
    out = work / "out.npz"
    assert (
        main(["run", str(work / "model" / "program.pb"), "--feed", f"x={work / 'batch.npy'}", "--out", str(out)]) == 0
    )
    assert capsys.readouterr().out == f"wrote {name} to {out}\n"
    with np.load(out, allow_pickle=False) as saved:
        assert list(saved) == [name]
        np.testing.assert_allclose(saved[name], probs, rtol=1e-6, atol=1e-7)


def test_run_prints_shape_dtype_and_preview(model, capsys: pytest.CaptureFixture[str]) -> None:
    work, _, probs, name = model
    hidden = "fc_0.tmp_2"
    assert (
        main(
            [
                "run",
                str(work / "model" / "program.pb"),
                "--feed",
                f"x={work / 'batch.npy'}",
                "--fetch",
                hidden,
                "--fetch",
                name,
            ]
        )
        == 0
    )
    out = capsys.readouterr().out
    assert out.startswith(f"{hidden}: float32[16, 8]\n[[")
    assert f"\n{name}: float32[16, 3]\n" in out
    assert "..." in out  # 16 rows are elided in the preview
    assert f"{probs[0, 0]:.5f}"[:6] in out


def test_run_with_explicit_params_and_bundle(model, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    work, xb, probs, name = model
    program = tmp_path / "elsewhere.pb"
    program.write_bytes((work / "model" / "program.pb").read_bytes())
    assert main(["run", str(program), "--feed", f"x={work / 'batch.npy'}"]) == 2
    assert "no params/ directory beside it; give --params DIR" in capsys.readouterr().err
    assert (
        main(
            [
                "run",
                str(program),
                "--params",
                str(work / "model" / "params"),
                "--feed",
                f"x={work / 'batch.npy'}",
                "--out",
                str(tmp_path / "o.npz"),
            ]
        )
        == 0
    )
    with np.load(tmp_path / "o.npz") as saved:
        np.testing.assert_allclose(saved[name], probs, rtol=1e-6, atol=1e-7)
    # the same model with its parameters in one bundle file
    exe, scope = bir.Executor("cpu"), bir.Scope()
    loaded, _, _ = bir.io.load_inference_model(work / "model", exe, scope=scope)
    bir.io.save_vars(exe, tmp_path, loaded, predicate=bir.io.is_persistable, filename="all.params", scope=scope)
    assert (
        main(
            [
                "run",
                str(program),
                "--params",
                str(tmp_path / "all.params"),
                "--feed",
                f"x={work / 'batch.npy'}",
                "--out",
                str(tmp_path / "b.npz"),
            ]
        )
        == 0
    )
    with np.load(tmp_path / "b.npz") as saved:
        np.testing.assert_allclose(saved[name], probs, rtol=1e-6, atol=1e-7)


def test_run_lod_feed(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    p = bir.Program()
    with bir.program_guard(p, bir.Program()):
        words = bir.data("words", shape=[-1, 2], dtype="float32", lod_level=1)
        pooled = bir.layers.sequence_pool(words, pool_type="sum")
    p.save(tmp_path / "p.pb")
    data = np.arange(10, dtype="float32").reshape(5, 2)
    np.save(tmp_path / "w.npy", data)
    assert (
        main(
            [
                "run",
                str(tmp_path / "p.pb"),
                "--feed",
                f"words={tmp_path / 'w.npy'}",
                "--lod",
                "words=0,2,5",
                "--fetch",
                pooled.name,
                "--out",
                str(tmp_path / "o.npz"),
            ]
        )
        == 0
    )
    with np.load(tmp_path / "o.npz") as saved:
        np.testing.assert_array_equal(saved[pooled.name], [data[:2].sum(0), data[2:].sum(0)])
    capsys.readouterr()
    assert (
        main(
            [
                "run",
                str(tmp_path / "p.pb"),
                "--feed",
                f"words={tmp_path / 'w.npy'}",
                "--lod",
                "words=0,2,4",
                "--fetch",
                pooled.name,
            ]
        )
        == 2
    )
    assert "LoD level 0 ends at 4, expected 5" in capsys.readouterr().err
    assert (
        main(
            [
                "run",
                str(tmp_path / "p.pb"),
                "--feed",
                f"words={tmp_path / 'w.npy'}",
                "--lod",
                "words=0,a",
                "--fetch",
                pooled.name,
            ]
        )
        == 2
    )
    assert "offsets must be integers" in capsys.readouterr().err
    assert main(["run", str(tmp_path / "p.pb"), "--feed", f"words={tmp_path / 'w.npy'}", "--fetch", pooled.name]) == 2
    assert "words" in capsys.readouterr().err  # a sequence variable fed without its LoD


def _unknown_op_program(path: Path) -> None:
    p = bir.Program()
    b = p.global_block()
    b.create_var("x", shape=[-1, 2], need_check_feed=True)
    b.create_var("y", shape=[-1, 2])
    b.append_op("no_such_op_anywhere", {"X": "x"}, {"Out": "y"}, infer=False)
    p.save(path)


@pytest.mark.parametrize(
    ("case", "message"),
    [
        ("missing", "--feed x: {d}/nope.npy: no such file"),
        ("text", "--feed x: {d}/text.npy: not a .npy array file"),
        ("npz", "--feed x: {d}/arrays.npz: not a .npy array file"),
        ("truncated", "--feed x: {d}/cut.npy: truncated .npy file"),
        ("object", "--feed x: {d}/obj.npy: holds Python objects"),
        ("no-feed", "missing feed 'x'"),
        ("wrong-shape", "feed 'x': wrong shape: expected float32[-1, 5] (-1 = any size), got float32[2, 3]"),
        ("bad-syntax", "--feed 'x': expected NAME=VALUE"),
        ("unknown-fetch", "fetch 'nosuch' is not a variable of the program"),
        ("unknown-op", "no_such_op_anywhere"),
    ],
)
def test_run_bad_input_one_line_exit_2(
    model, tmp_path: Path, capsys: pytest.CaptureFixture[str], case: str, message: str
) -> None:
    work, xb, _, _ = model
    program = str(work / "model" / "program.pb")
    d = tmp_path
    (d / "text.npy").write_text("hello")
    np.savez(d / "arrays.npz", x=xb)
    np.save(d / "full.npy", xb)
    (d / "cut.npy").write_bytes((d / "full.npy").read_bytes()[:-7])
    np.save(d / "obj.npy", np.array([{"a": 1}], dtype=object), allow_pickle=True)
    np.save(d / "small.npy", np.zeros((2, 3), "float32"))
    argv = {
        "missing": [program, "--feed", f"x={d}/nope.npy"],
        "text": [program, "--feed", f"x={d}/text.npy"],
        "npz": [program, "--feed", f"x={d}/arrays.npz"],
        "truncated": [program, "--feed", f"x={d}/cut.npy"],
        "object": [program, "--feed", f"x={d}/obj.npy"],
        "no-feed": [program],
        "wrong-shape": [program, "--feed", f"x={d}/small.npy"],
        "bad-syntax": [program, "--feed", "x"],
        "unknown-fetch": [program, "--feed", f"x={d}/full.npy", "--fetch", "nosuch"],
        "unknown-op": [str(d / "unknown.pb"), "--feed", f"x={d}/full.npy", "--fetch", "y"],
    }[case]
    if case == "unknown-op":
        _unknown_op_program(d / "unknown.pb")
    assert main(["run", *argv]) == 2
    out, err = capsys.readouterr()
    assert out == ""
    assert err.startswith("blockir: error: ")
    assert message.format(d=d) in err
    assert err.count("\n") == 1 and "Traceback" not in err


def test_run_in_a_real_process(model, tmp_path: Path) -> None:
    work, _, probs, name = model
    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "blockir.cli",
            "run",
            str(work / "model" / "program.pb"),
            "--feed",
            f"x={work / 'batch.npy'}",
            "--out",
            str(tmp_path / "o.npz"),
        ],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, done.stderr
    with np.load(tmp_path / "o.npz") as saved:
        np.testing.assert_allclose(saved[name], probs, rtol=1e-6, atol=1e-7)


def test_demo_trains_saves_and_serves(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["demo", "--workdir", str(tmp_path), "--epochs", "10"]) == 0
    out = capsys.readouterr().out
    assert "test accuracy" in out and "served predictions match the Python session" in out
    accuracy = float(out.split("test accuracy ")[1].split()[0])
    assert accuracy > 0.9
    assert (tmp_path / "model" / "program.pb").exists() and (tmp_path / "out.npz").exists()


@pytest.fixture(scope="module")
def two_device_model(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    """The issue's two-branch model (fc on cpu:0 and on cpu:1, concatenated) saved for serving, and a batch."""
    from tests.runtime.test_scheduler import two_branches

    work = tmp_path_factory.mktemp("two")
    with bir.unique_name.guard():
        main_p, startup, out = two_branches(size=16)
    exe, scope = bir.Executor("cpu"), bir.Scope()
    exe.run(startup, scope=scope)
    bir.io.save_inference_model(work / "model", ["x"], [out], exe, main_program=main_p, scope=scope)
    np.save(work / "x.npy", np.random.default_rng(1).normal(size=(4, 16)).astype("float32"))
    return work / "model" / "program.pb", work / "x.npy"


def test_run_schedulers_places_and_trace_give_the_same_predictions(
    two_device_model, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    program, batch = two_device_model
    results = []
    for extra in (
        [],
        ["--scheduler", "sequential"],
        ["--threads", "1", "--trace", str(tmp_path / "run.json")],
        ["--place", "cpu:2"],
    ):
        out = tmp_path / "out.npz"
        assert main(["run", str(program), "--feed", f"x={batch}", "--out", str(out), *extra]) == 0
        with np.load(out) as saved:
            results.append(saved[list(saved)[0]])
    for r in results[1:]:
        np.testing.assert_array_equal(r, results[0])
    assert "wrote the trace to" in capsys.readouterr().err
    events = json.loads((tmp_path / "run.json").read_text())["traceEvents"]
    assert {e["args"]["name"] for e in events if e["name"] == "process_name"} == {"cpu", "cpu:1"}


def test_run_of_a_placed_program_keys_what_it_fetches_by_the_fetched_name(model, tmp_path: Path) -> None:
    """``blockir opt -p place{default=cpu:1},insert-copies`` makes the fetch read the host's copy (``NAME@cpu``):
    ``--out`` still keys the output ``NAME``."""
    work, _, probs, name = model
    placed, out = tmp_path / "placed.pb", tmp_path / "out.npz"
    program = str(work / "model" / "program.pb")
    assert main(["opt", program, "-p", "place{default=cpu:1},insert-copies", "-o", str(placed)]) == 0
    assert f"{name}@cpu" in (
        fetched := [op.input("X")[0] for op in bir.load_program(placed).global_block().ops if op.type == "fetch"]
    )
    params = ["--params", str(work / "model" / "params")]
    assert main(["run", str(placed), *params, "--feed", f"x={work / 'batch.npy'}", "--out", str(out)]) == 0, fetched
    with np.load(out, allow_pickle=False) as saved:
        assert list(saved) == [name]
        np.testing.assert_allclose(saved[name], probs, rtol=1e-6, atol=1e-7)


@pytest.mark.parametrize(
    "extra, message",
    [
        (["--threads", "0"], "argument --threads: expected a positive integer, got '0'"),
        (["--scheduler", "eager"], "argument --scheduler: invalid choice: 'eager'"),
        (["--place", "cuda:99"], "device cuda:99 is not available on this machine (devices available: cpu, "),
    ],
)
def test_run_bad_scheduler_options_exit_2(two_device_model, extra, message, capsys) -> None:
    program, batch = two_device_model
    try:
        status = main(["run", str(program), "--feed", f"x={batch}", *extra])
    except SystemExit as e:  # argparse's own errors
        status = e.code
    assert status == 2
    err = capsys.readouterr().err
    assert message in err and "Traceback" not in err
