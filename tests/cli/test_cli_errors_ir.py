"""Programs the IR refuses, read by ``blockir show``, ``show --verify`` and ``blockir run``: exit status 2, one
``blockir: error:`` line naming the file, the block and the limit, no traceback, nothing left behind
(:mod:`tests.cli.adversarial`).

Blocks nest at most ``MAX_BLOCK_DEPTH`` (64) levels below the global block; a ``ProgramDesc`` whose blocks'
``parent_idx`` chain goes deeper is refused as it is read, as a ``.pb`` and as a Paddle ``.pdmodel`` alike.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from blockir.ir.core import TOO_DEEP
from blockir.proto import framework_pb2 as pb
from tests.cli.adversarial import Case, check_bad_input


def _program(work: Path, name: str, parents: list[int]) -> Path:
    """A ProgramDesc in ``work/name`` whose blocks have the ``parent_idx`` ``parents``, the global block declaring
    ``x`` (what ``run`` fetches)."""
    d = pb.ProgramDesc()
    for i, parent in enumerate(parents):
        block = d.blocks.add(idx=i, parent_idx=parent)
        if i == 0:
            var = block.vars.add(name="x")
            var.type.type = pb.VarType.LOD_TENSOR
            var.type.lod_tensor.tensor.data_type = pb.VarType.FP32
    path = work / name
    path.write_bytes(d.SerializeToString())
    return path


CHAIN = [-1, *range(100)]  # block k the child of block k - 1: block 65 is the first past the limit
BACKWARDS = [-1, *range(2, 71), 0]  # block k the child of block k + 1, block 70 of the global block: block 1


def _command(command: list[str], name: str, parents: list[int]) -> Case:
    def make(work: Path) -> list[str]:
        path = _program(work, name, parents)
        args = [command[0], str(path), *command[1:]]
        return args + (["--fetch", "x"] if command[0] == "run" else [])

    return make


COMMANDS = {"show": ["show"], "show --verify": ["show", "--verify"], "run": ["run"]}

CASES: dict[str, tuple[Case, str]] = {
    **{
        f"{label}: a {name} nested 100 blocks deep": (
            _command(command, f"deep{name}", CHAIN),
            f"deep{name}: block 65: {TOO_DEEP}",
        )
        for label, command in COMMANDS.items()
        for name in (".pb", ".pdmodel")
    },
    **{
        f"{label}: a {name} whose parents point forward, 70 deep": (
            _command(command, f"forward{name}", BACKWARDS),
            f"forward{name}: block 1: {TOO_DEEP}",
        )
        for label, command in COMMANDS.items()
        for name in (".pb", ".pdmodel")
    },
}


@pytest.mark.parametrize("case", list(CASES))
def test_a_program_the_ir_refuses_gives_one_line_and_status_2(
    case: str, model_dir: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    make, message = CASES[case]
    check_bad_input(make, message, model_dir, tmp_path, capsys)


def test_the_message_names_the_limit() -> None:
    assert TOO_DEEP == "nested more than 64 blocks deep, the limit of block nesting"
