"""The pass manager: pipeline parsing, the report, instruments, dump directories, failing passes."""

from __future__ import annotations

import hashlib
import io
import shutil
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, ClassVar

import pytest
from hypothesis import given
from hypothesis import strategies as st

from blockir.errors import BlockirError, PassError, PipelineError, VerifyError
from blockir.ir import Program, load_program, parse_program
from blockir.passes import (
    Deps,
    Inference,
    Instrument,
    KeepPrograms,
    Pass,
    PassRecord,
    PassReport,
    Prune,
    describe_passes,
    format_pipeline,
    note,
    parse_pipeline,
    pass_options,
    record_detail,
    registered_passes,
    run,
)
from tests.passes.programs import CHAIN
from tests.registries import passes_registered

# -- test-only passes ---------------------------------------------------------------------------


@dataclass(frozen=True)
class OptionKinds(Pass):
    name: ClassVar[str] = "test-option-kinds"
    summary: ClassVar[str] = "test only: one option of each kind"

    flag: bool = False
    count: int = 1
    ratio: float = 0.5
    label: str = ""
    sizes: tuple[int, ...] = ()

    def run(self, program: Program) -> bool:
        return False


@dataclass(frozen=True)
class NeedsPath(Pass):
    name: ClassVar[str] = "test-needs-path"
    summary: ClassVar[str] = "test only: a required option"

    path: str

    def run(self, program: Program) -> bool:
        return False


@dataclass(frozen=True)
class Fail(Pass):
    """Removes the first op, then raises: the reproducer must hold the program from before."""

    name: ClassVar[str] = "test-fail"
    summary: ClassVar[str] = "test only: raises"

    def run(self, program: Program) -> bool:
        program.global_block().remove_op(0)
        raise RuntimeError("boom")


@dataclass(frozen=True)
class DropFirst(Pass):
    """Removes the first op, leaving its readers reading nothing: the verifier rejects the result."""

    name: ClassVar[str] = "test-drop-first"
    summary: ClassVar[str] = "test only: breaks the program"

    def run(self, program: Program) -> bool:
        program.global_block().remove_op(0)
        return True


@dataclass(frozen=True)
class Rebuild(Pass):
    """Replaces every op by an identical new one (new ids) and says it changed the program."""

    name: ClassVar[str] = "test-rebuild"
    summary: ClassVar[str] = "test only: rebuilds identical ops"

    def run(self, program: Program) -> bool:
        block = program.global_block()
        for op in list(block.ops):
            block.remove_op(op)
            block.append_op(op.type, op.inputs, op.outputs, op.attrs, infer=False)
        note("rebuilt")
        record_detail("count", len(block.ops))
        return True


@dataclass(frozen=True)
class SilentChange(Pass):
    """Changes an attribute but says it changed nothing."""

    name: ClassVar[str] = "test-silent-change"
    summary: ClassVar[str] = "test only: changes and says no"

    def run(self, program: Program) -> bool:
        program.global_block().ops[0].set_attr("op_namescope", "/silent/")
        return False


@pytest.fixture(scope="module", autouse=True)
def _passes() -> Iterator[None]:
    with passes_registered(OptionKinds, NeedsPath, Fail, DropFirst, Rebuild, SilentChange):
        yield


def chain() -> Program:
    return parse_program(CHAIN)


# -- parsing ------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "text, passes",
    [
        ("", []),
        ("   ", []),
        ("deps", [Deps()]),
        (
            "prune{targets=loss,acc feeds=x keep_side_effects=false}",
            [Prune(targets=("loss", "acc"), feeds=("x",), keep_side_effects=False)],
        ),
        (
            " deps , prune { targets=a  keep-side-effects=true } ,inference ",
            [Deps(), Prune(targets=("a",)), Inference()],
        ),
        ("prune{}", [Prune()]),
        (
            "test-option-kinds{flag=true count=-3 ratio=1e-3 label=cuda:0,x sizes=1,2,3}",
            [OptionKinds(flag=True, count=-3, ratio=1e-3, label="cuda:0,x", sizes=(1, 2, 3))],
        ),
        ("test-needs-path{path=a/b.pb},deps,deps", [NeedsPath("a/b.pb"), Deps(), Deps()]),
    ],
)
def test_valid_pipelines(text: str, passes: list[Pass]) -> None:
    assert parse_pipeline(text) == passes


@pytest.mark.parametrize(
    "text, position, message",
    [
        ("dep", 0, "unknown pass 'dep' (did you mean 'deps'?); valid passes: "),
        ("deps,prnue", 5, "unknown pass 'prnue' (did you mean 'prune'?); valid passes: "),
        (
            "deps,prune{target=x}",
            11,
            "pass 'prune': unknown option 'target' (did you mean 'targets'?); "
            "valid options: targets, feeds, keep_side_effects",
        ),
        ("prune{targets=a", 15, "unbalanced braces: the '{' of pass 'prune' at column 6 is never closed"),
        ("deps}", 4, "unbalanced braces: '}' without a '{'"),
        ("deps,,prune", 5, "expected a pass name, found ',' (an empty pass?)"),
        ("deps,", 5, "expected a pass name, found the end (an empty pass?)"),
        ("{targets=a}", 0, "expected a pass name, found '{'"),
        ("deps prune", 5, "expected ',' between passes, found 'p'"),
        ("prune{targets=}", 14, "option 'targets' of pass 'prune' has no value after '=', found '}'"),
        ("prune{targets= a}", 14, "option 'targets' of pass 'prune' has no value after '=', found ' '"),
        ("prune{targets}", 13, "option 'targets' of pass 'prune' needs a value (targets=VALUE), found '}'"),
        ("prune{targets=a targets=b}", 16, "option 'targets' of pass 'prune' is given twice"),
        (
            "prune{keep-side-effects=false keep_side_effects=true}",
            30,
            "option 'keep_side_effects' of pass 'prune' is given twice",
        ),
        (
            "prune{keep_side_effects=yes}",
            24,
            "option 'keep_side_effects' of pass 'prune' expects true or false, got 'yes'",
        ),
        ("prune{targets=a,,b}", 14, "expects a comma-separated list without empty items, got 'a,,b'"),
        ("prune{targets=a,}", 14, "expects a comma-separated list without empty items, got 'a,'"),
        ("prune{targets=a{b}}", 15, "expected a space or '}' after option 'targets' of pass 'prune', found '{'"),
        ("prune{targets=a=b}", 15, "expected a space or '}' after option 'targets' of pass 'prune', found '='"),
        ("prune{=a}", 6, "expected an option name (NAME=VALUE) of pass 'prune', found '='"),
        ("test-option-kinds{count=2.5}", 24, "option 'count' of pass 'test-option-kinds' expects an int, got '2.5'"),
        ("test-option-kinds{ratio=half}", 24, "expects a float, got 'half'"),
        ("test-option-kinds{sizes=1,x}", 24, "expects an int, got '1,x'"),
        ("deps,test-needs-path", 5, "pass 'test-needs-path' needs option path=VALUE"),
    ],
)
def test_invalid_pipelines_name_the_problem_and_its_column(text: str, position: int, message: str) -> None:
    with pytest.raises(PipelineError) as info:
        parse_pipeline(text)
    error = info.value
    assert isinstance(error, BlockirError)
    assert str(error).startswith(f"pipeline {text!r}, column {position + 1}: ")
    assert message in str(error)
    assert "\n" not in str(error)
    assert (error.pipeline, error.position) == (text, position)


def test_unknown_pass_lists_every_pass() -> None:
    with pytest.raises(PipelineError) as info:
        parse_pipeline("nothing-like-it")
    assert str(info.value).endswith("; valid passes: " + ", ".join(sorted(registered_passes())))
    assert {"deps", "inference", "prune", "test-fail"} <= set(registered_passes())


@given(
    st.lists(
        st.builds(
            Prune,
            st.lists(st.from_regex(r"[A-Za-z_][A-Za-z0-9_.@:]{0,8}", fullmatch=True), max_size=3).map(tuple),
            st.lists(st.from_regex(r"[a-z][a-z0-9]{0,5}", fullmatch=True), max_size=2).map(tuple),
            st.booleans(),
        ),
        max_size=4,
    )
)
def test_format_pipeline_reads_back(passes: list[Prune]) -> None:
    assert parse_pipeline(format_pipeline(passes)) == passes


def test_format_shows_only_options_off_their_defaults() -> None:
    assert (
        format_pipeline([Prune(), Prune(targets=("a", "b"), keep_side_effects=False), Deps()])
        == "prune,prune{targets=a,b keep_side_effects=false},deps"
    )
    assert (
        format_pipeline([OptionKinds(flag=True, ratio=0.25, sizes=(4,))])
        == "test-option-kinds{flag=true ratio=0.25 sizes=4}"
    )


# -- running and the report -----------------------------------------------------------------------


def test_run_works_on_a_clone_and_reports_each_pass() -> None:
    program = chain()
    text, mutation = str(program), program.mutation
    result, report = run(program, "prune{targets=y},deps,inference")
    assert (str(program), program.mutation) == (text, mutation)
    assert result is not program
    assert [op.type for op in result.global_block().ops] == ["relu", "tanh"]
    assert isinstance(report, PassReport) and report.pipeline == "prune{targets=y},deps,inference"
    assert [(r.index, r.name, r.changed, r.returned) for r in report] == [
        (1, "prune", True, True),
        (2, "deps", False, False),
        (3, "inference", False, False),
    ]
    prune = report.record("prune")
    assert (prune.ops_before, prune.ops_after, prune.added, prune.removed, prune.modified) == (3, 2, 0, 1, 0)
    assert (
        report.records[-1].digest == hashlib.sha256(result.to_proto().SerializeToString(deterministic=True)).hexdigest()
    )
    assert report.records[0].digest == report.records[1].digest  # deps changed nothing
    assert report.changed and report.seconds == sum(r.seconds for r in report) and report.seconds >= 0
    with pytest.raises(BlockirError, match="no pass 'place' in pipeline 'prune"):
        report.record("place")


def test_rebuilding_identical_ops_is_no_change() -> None:
    result, report = run(chain(), "test-rebuild")
    record = report.record("test-rebuild")
    assert not record.changed and record.returned
    assert (record.added, record.removed, record.modified) == (3, 3, 0)
    assert record.notes == ["rebuilt"] and record.details == {"count": 3}
    assert str(result) == str(chain())


def test_a_change_the_pass_does_not_admit_is_found() -> None:
    _, report = run(chain(), [SilentChange()])
    record = report.record("test-silent-change")
    assert record.changed and not record.returned and record.modified == 1


def test_report_table() -> None:
    _, report = run(chain(), "test-silent-change,prune{targets=y},test-rebuild")
    lines = str(report).splitlines()
    assert lines[0] == "pipeline: test-silent-change,prune{targets=y},test-rebuild"
    assert lines[1].split() == ["#", "pass", "changed", "time", "ms", "ops", "added", "removed", "modified"]
    assert lines[2].split()[:2] == ["1", "test-silent-change"] and "yes (pass said no)" in lines[2]
    assert lines[2].split()[-4:] == ["3", "0", "0", "1"]
    assert lines[3].split()[:3] == ["2", "prune{targets=y}", "yes"] and lines[3].split()[-4:] == ["2", "0", "1", "0"]
    assert "no (pass said yes)" in lines[4] and lines[4].split()[-4:] == ["2", "2", "2", "0"]
    assert lines[5].split()[:2] == ["total", "yes"]
    assert lines[6:] == ["notes:", "  3 test-rebuild: rebuilt"]
    assert lines[1].index("changed") == lines[2].index("yes") == lines[4].index("no")  # columns line up


def test_notes_and_details_outside_a_pipeline_go_nowhere() -> None:
    note("nobody listens")
    record_detail("key", 1)
    assert Rebuild().run(chain()) is True


# -- instruments --------------------------------------------------------------------------------------


def test_print_after_all_and_after_change() -> None:
    out = io.StringIO()
    result, _ = run(chain(), "deps,prune{targets=y}", print_after_all=True, out=out)
    text = out.getvalue()
    assert text == (
        f"# after pass 1 of 2: deps (unchanged)\n{chain()}\n"
        f"# after pass 2 of 2: prune{{targets=y}} (changed)\n{result}\n"
    )
    out = io.StringIO()
    run(chain(), "deps,prune{targets=y},deps", print_after_change=True, out=out)
    assert out.getvalue() == f"# after pass 2 of 3: prune{{targets=y}} (changed)\n{result}\n"


def test_printing_goes_to_stdout_by_default(capsys: pytest.CaptureFixture[str]) -> None:
    run(chain(), "deps", print_after_all=True, timing=True)
    out = capsys.readouterr().out
    assert out.startswith("# after pass 1 of 1: deps (unchanged)\nprogram version=0\n")
    assert "pass timing:" in out


def test_timing_table() -> None:
    out = io.StringIO()
    _, report = run(chain(), "deps,prune{targets=y}", timing=True, out=out)
    lines = out.getvalue().splitlines()
    assert lines[0] == "pass timing:"
    assert lines[1].split() == ["#", "pass", "wall", "ms", "share"]
    assert [line.split()[:2] for line in lines[2:4]] == [["1", "deps"], ["2", "prune{targets=y}"]]
    assert lines[4].split()[0] == "total" and lines[4].endswith("100.0%")
    assert report.timing_table() == out.getvalue().rstrip("\n")


class Recorder(Instrument):
    def __init__(self) -> None:
        self.calls: list[Any] = []

    def before_pipeline(self, passes: Sequence[Pass], program: Program) -> None:
        self.calls.append(("start", [p.name for p in passes], len(program.global_block().ops)))

    def before_pass(self, index: int, p: Pass, program: Program) -> None:
        self.calls.append(("before", index, p.name, len(program.global_block().ops)))

    def after_pass(self, record: PassRecord, program: Program) -> None:
        self.calls.append(("after", record.index, record.name, len(program.global_block().ops)))

    def after_pipeline(self, report: PassReport, program: Program) -> None:
        self.calls.append(("end", len(report), len(program.global_block().ops)))


def test_instruments_see_every_pass_in_order() -> None:
    recorder = Recorder()
    run(chain(), "deps,prune{targets=y}", instruments=[recorder])
    assert recorder.calls == [
        ("start", ["deps", "prune"], 3),
        ("before", 1, "deps", 3),
        ("after", 1, "deps", 3),
        ("before", 2, "prune", 3),
        ("after", 2, "prune", 2),
        ("end", 2, 2),
    ]


def test_dump_dir_writes_each_pass_numbered(tmp_path: Path) -> None:
    result, report = run(chain(), "deps,prune{targets=y},inference", dump_dir=tmp_path / "dump")
    dump = tmp_path / "dump"
    assert sorted(p.name for p in dump.iterdir()) == [
        "00-input.pb",
        "00-input.txt",
        "01-deps.pb",
        "01-deps.txt",
        "02-prune.pb",
        "02-prune.txt",
        "03-inference.pb",
        "03-inference.txt",
        "report.txt",
    ]
    assert (dump / "02-prune.txt").read_text().startswith("# after pass 2 of 3: prune{targets=y} (changed)\n")
    assert str(parse_program((dump / "03-inference.txt").read_text())) == str(result)
    assert str(load_program(dump / "03-inference.pb")) == str(result)
    assert str(load_program(dump / "00-input.pb")) == str(chain())
    assert (dump / "report.txt").read_text() == f"{report}\n"


def test_dump_dir_after_change_only(tmp_path: Path) -> None:
    run(chain(), "deps,prune{targets=y},deps", dump_dir=tmp_path, print_after_change=True)
    assert sorted(p.name for p in tmp_path.iterdir()) == [
        "00-input.pb",
        "00-input.txt",
        "02-prune.pb",
        "02-prune.txt",
        "report.txt",
    ]


def test_dump_numbers_widen_for_long_pipelines(tmp_path: Path) -> None:
    run(chain(), ",".join(["deps"] * 100), dump_dir=tmp_path)
    names = {p.name for p in tmp_path.iterdir()}
    assert {"000-input.txt", "001-deps.txt", "100-deps.pb"} <= names


# -- verification and failures ----------------------------------------------------------------------------


def test_a_failing_pass_names_itself_and_saves_a_reproducer(tmp_path: Path) -> None:
    with pytest.raises(PassError) as info:
        run(chain(), "prune{targets=y},test-fail,deps", dump_dir=tmp_path)
    error = info.value
    reproducer = tmp_path / "02-test-fail.input.pb"
    assert error.reproducer == str(reproducer) and error.pass_name == "test-fail"
    assert error.before == ["prune{targets=y}"]
    message = str(error)
    assert message.startswith("pass 'test-fail' (pass 2 of 3) failed: RuntimeError: boom\n")
    assert "passes before it: prune{targets=y}" in message
    assert f"blockir opt {reproducer} -p test-fail -o out.pb" in message
    assert isinstance(error.__cause__, RuntimeError)
    # What the pass received: the pruned program, before the pass removed its first op.
    received = load_program(reproducer)
    assert [op.type for op in received.global_block().ops] == ["relu", "tanh"]


def test_a_pass_error_carries_the_report_of_the_passes_before_it(tmp_path: Path) -> None:
    with pytest.raises(PassError) as info:
        run(chain(), "prune{targets=y},deps,test-fail,deps", dump_dir=tmp_path)
    report = info.value.report
    assert report.pipeline == "prune{targets=y},deps,test-fail,deps"
    assert [(r.index, r.label) for r in report] == [(1, "prune{targets=y}"), (2, "deps")]
    assert report.records[0].removed == 1 and report.records[0].digest is not None
    with pytest.raises(PassError) as info:  # an invalid result: its own record is not among those before it
        run(chain(), "deps,test-drop-first", dump_dir=tmp_path)
    assert [r.name for r in info.value.report] == ["deps"]


def test_keep_programs_keeps_every_program_with_its_op_ids(tmp_path: Path) -> None:
    keep = KeepPrograms()
    program = chain()
    result, report = run(program, "prune{targets=y},deps", instruments=[keep])
    assert len(keep.programs) == 3
    assert [str(p) for p in keep.programs] == [str(program), str(result), str(result)]
    assert [op.id for op in keep.programs[0].ops()] == [op.id for op in program.ops()]
    assert [op.id for op in keep.programs[1].ops()] == [op.id for op in program.ops()][:2]
    assert [p.digest() for p in keep.programs[1:]] == [r.digest for r in report]
    assert keep.programs[1] is not keep.programs[2]  # clones: a later pass cannot change an earlier one
    with pytest.raises(PassError):
        run(program, "deps,test-fail", instruments=[keep], dump_dir=tmp_path)
    assert [str(p) for p in keep.programs] == [str(program), str(program)]  # up to what the failing pass received


def test_without_a_dump_dir_the_reproducer_goes_to_a_temporary_directory() -> None:
    with pytest.raises(PassError) as info:
        run(chain(), "test-fail")
    path = Path(info.value.reproducer)
    try:
        assert path.name == "01-test-fail.input.pb" and path.parent.name.startswith("blockir-repro-")
        assert str(load_program(path)) == str(chain())
        assert str(path) in str(info.value)
    finally:
        shutil.rmtree(path.parent)


def test_an_invalid_result_is_the_pass_s_fault(tmp_path: Path) -> None:
    with pytest.raises(PassError) as info:
        run(chain(), "deps,test-drop-first", dump_dir=tmp_path)
    message = str(info.value)
    assert message.startswith("pass 'test-drop-first' (pass 2 of 2) produced an invalid program: VerifyError: ")
    assert "'h'" in message and "passes before it: deps" in message
    assert isinstance(info.value.__cause__, VerifyError)
    assert (tmp_path / "02-test-drop-first.input.pb").is_file()
    assert (tmp_path / "02-test-drop-first.txt").is_file()  # the invalid result was dumped before verifying
    result, _ = run(chain(), "test-drop-first", verify=False)
    assert len(result.global_block().ops) == 2


def test_an_invalid_input_is_reported_before_any_pass() -> None:
    program = chain()
    program.global_block().ops[0].set_attr("op_device", "cuda:x")
    with pytest.raises(VerifyError, match="(?s)the input of the pipeline is invalid: .*'cuda:x'"):
        run(program, "test-fail")
    run(program, "deps", verify=False)


def test_pipelines_of_pass_objects_are_checked_too() -> None:
    result, report = run(chain(), [Prune(targets=("z",)), Deps()])
    assert report.pipeline == "prune{targets=z},deps"
    assert [op.type for op in result.global_block().ops] == ["sigmoid"]


@dataclass(frozen=True)
class Unregistered(Pass):
    name: ClassVar[str] = "test-unregistered"
    items: tuple[str, ...] = field(default=("a",))

    def run(self, program: Program) -> bool:
        return False


def test_unregistered_pass_objects_run() -> None:
    _, report = run(chain(), [Unregistered(items=("b", "c"))])
    assert report.pipeline == "test-unregistered{items=b,c}"


@dataclass(frozen=True)
class BadOption(Pass):
    name: ClassVar[str] = "test-bad-option"
    names: list[str] = field(default_factory=list)


def test_option_types_are_checked() -> None:
    with pytest.raises(BlockirError, match="option 'names' of pass 'test-bad-option' has type list\\[str\\]"):
        pass_options(BadOption)
    assert [(o.name, o.type_name, o.default) for o in pass_options(OptionKinds)] == [
        ("flag", "bool", False),
        ("count", "int", 1),
        ("ratio", "float", 0.5),
        ("label", "str", ""),
        ("sizes", "list[int]", ()),
    ]


def test_describe_passes_marks_required_options() -> None:
    lines = describe_passes().splitlines()
    at = lines.index("test-needs-path: test only: a required option")
    assert lines[at + 1].split() == ["path", "str", "(required)"]
