"""``blockir profile`` and ``-p auto-place{...}`` through ``blockir opt``: a calibration run writes a cost file of
this machine that the pass uses; bad devices, cost files and outputs give one error line
(:mod:`tests.cli.adversarial`)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from blockir.cli import main
from blockir.ir import load_program
from blockir.passes.costs import machine
from tests.cli.adversarial import Case, check_bad_input


def test_profile_then_opt_places_with_the_measured_costs(
    model_dir: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    program, costs, placed = model_dir / "model" / "program.pb", tmp_path / "costs.json", tmp_path / "placed.pb"
    argv = ["profile", str(program), "--feed", f"x={model_dir / 'x.npy'}", "--devices", "cpu:0,cpu:1"]
    assert main([*argv, "--runs", "2", "-o", str(costs)]) == 0
    assert f"wrote {costs}: " in capsys.readouterr().out
    data = json.loads(costs.read_text())
    assert data["machine"] == machine() and data["batch"] == 2
    assert any(key.startswith("mul X=Bx3 Y=3x2 @cpu") for key in data["ops"]), data["ops"]
    pipeline = f"auto-place{{devices=cpu:0,cpu:1 costs={costs}}},default-device-pipeline"
    assert main(["opt", str(program), "-p", pipeline, "-o", str(placed)]) == 0
    ops = load_program(str(placed)).global_block().ops
    assert all(op.device for op in ops)
    assert any("op_placement" in op.attrs for op in ops)


def _other_machine(w: Path) -> list[str]:
    (w / "costs.json").write_text(
        json.dumps(
            {"format": 1, "machine": "another box", "speeds": {"cpu": {"flops": 1, "bandwidth": 1, "overhead": 0}}}
        )
    )
    pipeline = f"auto-place{{devices=cpu:0,cpu:1 costs={w / 'costs.json'}}}"
    return ["opt", str(w / "model" / "program.pb"), "-p", pipeline, "-o", str(w / "out.pb")]


def _profile(*extra: str) -> Case:
    return lambda w: ["profile", str(w / "model" / "program.pb"), "--feed", f"x={w / 'x.npy'}", *extra]


CASES: dict[str, tuple[Case, str]] = {
    "profile: a device that is none": (_profile("--devices", "gpu:0"), "'gpu:0' is not a device"),
    "profile: no devices": (_profile("--devices", ","), "--devices: give at least one device"),
    "profile: -o in a missing directory": (
        lambda w: [*_profile("--devices", "cpu")(w), "-o", str(w / "nowhere" / "c.json")],
        "nowhere",
    ),
    "opt: a cost file of another machine": (_other_machine, "was measured on another machine (another box)"),
    "opt: auto-place on a device that is none": (
        lambda w: ["opt", str(w / "model" / "program.pb"), "-p", "auto-place{devices=tpu:0}"],
        "'tpu:0' is not a device",
    ),
}


@pytest.mark.parametrize("case", list(CASES))
def test_bad_input_gives_one_line_and_status_2(
    case: str, model_dir: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    make, message = CASES[case]
    check_bad_input(make, message, model_dir, tmp_path, capsys)
