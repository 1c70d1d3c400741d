"""The adversarial table's harness: a bad input gives exit status 2, one ``blockir: error:`` line naming what is
wrong, no traceback, and leaves the working directory exactly as it was.

Each table (``CASES`` in the ``tests/cli/test_cli_errors*.py`` modules) maps a case's name to a function that builds
its bad input in a fresh directory holding a copy of :func:`model` (or names a bad output location) and returns the
command line, and to a text the error must contain.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import numpy as np
import pytest

import blockir as bir
from blockir.cli import main

Case = Callable[[Path], list[str]]


def model(work: Path) -> None:
    """A small saved inference model (``model/``), a batch for it and a data feed, in ``work``."""
    main_p, startup = bir.Program(), bir.Program()
    with bir.unique_name.guard(), bir.program_guard(main_p, startup):
        x = bir.data("x", shape=[-1, 3], dtype="float32")
        pred = bir.layers.fc(x, size=2, act="softmax")
    exe, scope = bir.Executor("cpu"), bir.Scope()
    exe.run(startup, scope=scope)
    bir.io.save_inference_model(work / "model", ["x"], [pred], exe, main_program=main_p, scope=scope)
    bir.io.save_persistables(exe, work / "bundle_dir", main_p, filename="params.npz", scope=scope)
    main_p.save(str(work / "main.pb"))
    startup.save(str(work / "startup.pb"))
    np.save(work / "x.npy", np.ones((2, 3), "float32"))
    (work / "data.prototxt").write_text(
        'name: "MultiSlotDataFeed"\nbatch_size: 2\nmulti_slot_desc {\n'
        '  slots { name: "x" type: "float" is_dense: true is_used: true shape: 3 }\n}\n'
    )
    (work / "part-0").write_text("3 1 2 3\n3 4 5 6\n")


def listing(root: Path) -> dict[str, bytes]:
    """Every file under ``root`` with its bytes."""
    return {str(p.relative_to(root)): p.read_bytes() for p in sorted(root.rglob("*")) if p.is_file()}


def check_bad_input(
    make: Case, message: str, model_dir: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Run the case ``make`` builds in a copy of ``model_dir`` and check everything the module docstring says."""
    work = tmp_path / "work"
    work.mkdir()
    for name, data in listing(model_dir).items():
        (work / name).parent.mkdir(parents=True, exist_ok=True)
        (work / name).write_bytes(data)
    argv = make(work)
    before = listing(work)
    status = main(argv)
    out, err = capsys.readouterr()
    assert status == 2, (argv, out, err)
    first, *details = err.splitlines()
    assert first.startswith("blockir: error: ") and err.endswith("\n"), err
    assert all(line.startswith("  ") for line in details), err  # only a verifier's list of problems follows
    assert "Traceback" not in err
    assert message in err, err
    assert listing(work) == before, "a failed command left files behind or changed them"
