"""The pass manager: pipeline strings, running passes with instruments, and the pass report.

A pipeline is a string in MLIR's grammar::

    pipeline := [ pass ( "," pass )* ]
    pass     := NAME [ "{" [ option ( " " option )* ] "}" ]
    option   := KEY "=" VALUE

``NAME`` is a registered pass; ``KEY`` one of its dataclass fields (``-`` may
stand for ``_``); ``VALUE`` a run of characters other than white space, braces
and ``=``, converted by the field's type: ``true``/``false`` for ``bool``, a
number for ``int``/``float``, the text for ``str``, and comma-separated items
for ``tuple[X, ...]``. Example: ``place{default=cpu:1 strict=true},prune{targets=loss,acc}``.

:func:`run` applies a pipeline to a clone of a program and returns the result
with a :class:`PassReport`. A named pipeline (a :class:`~blockir.passes.base.Pipeline`,
e.g. ``default-device-pipeline``) runs as its passes, each with a record of
its own. Around each pass it calls the instruments (printing the IR, dumping
it to a directory, verifying, timing, or any :class:`Instrument` given).
Whether a pass changed the program is decided by comparing the serialized
program before and after it (a structural hash: rebuilding identical ops is no
change); what the pass returned is recorded too. A pass that raises, or whose
result the verifier rejects, becomes a :class:`~blockir.errors.PassError`
naming it and the passes before it (its ``report`` has their records), with
the program it received saved as a reproducer ``.pb`` for ``blockir opt``.
The :class:`KeepPrograms` instrument keeps the program after every pass (the
report keeps only their digests); the visualizer uses both.

``run(..., snapshots=False)`` is the cheap mode the executor and
``save_inference_model`` use: no program is serialized before or after a pass,
so a record's ``changed`` is what the pass returned, its op counts are counted
and its ``added``, ``removed``, ``modified`` and ``digest`` are None, and a
failing pass's error propagates as it is (there is no reproducer to save).

While a pass runs, :func:`note` adds a line to its report entry and
:func:`record_detail` stores an object there (e.g. the ``deps`` pass's graphs);
outside :func:`run` both do nothing.
"""

from __future__ import annotations

import dataclasses
import difflib
import hashlib
import re
import shlex
import sys
import tempfile
import time
import typing
from collections.abc import Sequence
from contextvars import ContextVar
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TextIO

from blockir.errors import BlockirError, PassError, PipelineError, VerifyError
from blockir.ir import Program, verify
from blockir.ir.proto_io import atomic_write
from blockir.passes.base import Pass, Pipeline, registered_passes

__all__ = [
    "Instrument",
    "KeepPrograms",
    "OptionInfo",
    "PassRecord",
    "PassReport",
    "describe_passes",
    "expand",
    "format_pass",
    "format_pipeline",
    "note",
    "pass_options",
    "parse_pipeline",
    "record_detail",
    "run",
]

_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_-]*")
_VALUE = re.compile(r"[^\s{}=]+")
_SPACE = re.compile(r"\s*")
_SCALARS: dict[type, str] = {bool: "bool", int: "int", float: "float", str: "str"}


# -- options -----------------------------------------------------------------------------------


@dataclass(frozen=True)
class OptionInfo:
    """One option of a pass: its field name, type, default (``dataclasses.MISSING`` when required), help."""

    name: str
    type: Any
    default: Any
    help: str

    @property
    def type_name(self) -> str:
        if typing.get_origin(self.type) is tuple:
            return f"list[{_SCALARS[typing.get_args(self.type)[0]]}]"
        return _SCALARS[self.type]


def pass_options(cls: type[Pass]) -> list[OptionInfo]:
    """The options of a pass class, in declaration order (a field's ``metadata["help"]`` is its help)."""
    options = _OPTIONS.get(cls)  # the executor formats its pipeline whenever it compiles a program
    if options is None:
        options = _OPTIONS[cls] = _options(cls)
    return list(options)


_OPTIONS: dict[type[Pass], tuple[OptionInfo, ...]] = {}


def _options(cls: type[Pass]) -> tuple[OptionInfo, ...]:
    hints = typing.get_type_hints(cls)
    options = []
    for f in dataclasses.fields(cls):
        tp = hints[f.name]
        item = typing.get_args(tp) if typing.get_origin(tp) is tuple else (tp, ...)
        if item[0] not in _SCALARS or item[1:] != (...,):
            raise BlockirError(
                f"option {f.name!r} of pass {cls.name!r} has type {tp}; options are bool, int, "
                f"float, str or tuple[X, ...] of those"
            )
        default = f.default_factory() if f.default_factory is not dataclasses.MISSING else f.default
        options.append(OptionInfo(f.name, tp, default, f.metadata.get("help", "")))
    return tuple(options)


def _format_value(value: Any) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, tuple):
        return ",".join(map(_format_value, value))
    return str(value)


def _convert_scalar(text: str, tp: type) -> Any:
    if tp is bool:
        if text not in ("true", "false"):
            raise ValueError("true or false")
        return text == "true"
    if tp is int or tp is float:
        try:
            return tp(text)
        except ValueError:
            raise ValueError(f"an {tp.__name__}" if tp is int else "a float") from None
    return text


def _convert(text: str, tp: Any) -> Any:
    """The value of option text ``text`` for a field of type ``tp``; ValueError naming what was expected."""
    if typing.get_origin(tp) is tuple:
        items = text.split(",")
        if "" in items:
            raise ValueError("a comma-separated list without empty items")
        return tuple(_convert_scalar(item, typing.get_args(tp)[0]) for item in items)
    return _convert_scalar(text, tp)


def format_pass(p: Pass) -> str:
    """``p`` in pipeline syntax: its name and the options that differ from their defaults."""
    options = [
        f"{o.name}={_format_value(getattr(p, o.name))}"
        for o in pass_options(type(p))
        if getattr(p, o.name) != o.default
    ]
    return p.name + (f"{{{' '.join(options)}}}" if options else "")


def format_pipeline(passes: Sequence[Pass]) -> str:
    """The pipeline string of ``passes``; :func:`parse_pipeline` reads it back."""
    return ",".join(format_pass(p) for p in passes)


def _table(header: Sequence[str], rows: Sequence[Sequence[str]], left: int) -> list[str]:
    """Lines of a table; the first ``left`` columns are left-aligned, the others right-aligned."""
    widths = [max(len(r[i]) for r in [header, *rows]) for i in range(len(header))]
    return [
        "  ".join(c.ljust(w) if i < left else c.rjust(w) for i, (c, w) in enumerate(zip(r, widths))).rstrip()
        for r in [header, *rows]
    ]


def describe_passes() -> str:
    """Every registered pass with its summary and options (type, default, help), for ``blockir passes``."""
    lines = []
    for name, cls in sorted(registered_passes().items()):
        lines.append(f"{name}: {cls.summary}")
        rows = [
            [
                o.name,
                o.type_name,
                "(required)" if o.default is dataclasses.MISSING else _format_value(o.default) or "(empty)",
                o.help,
            ]
            for o in pass_options(cls)
        ]
        if rows:
            lines.extend("    " + line for line in _table(["option", "type", "default", "help"], rows, 4)[1:])
    return "\n".join(lines)


# -- parsing -----------------------------------------------------------------------------------


class _Scanner:
    def __init__(self, text: str) -> None:
        self.text = text
        self.pos = 0

    def error(self, message: str, pos: int | None = None) -> PipelineError:
        pos = self.pos if pos is None else pos
        return PipelineError(f"pipeline {self.text!r}, column {pos + 1}: {message}", self.text, pos)

    def peek(self) -> str:
        return self.text[self.pos : self.pos + 1]

    def skip_space(self) -> None:
        self.pos = _SPACE.match(self.text, self.pos).end()  # type: ignore[union-attr]

    def match(self, pattern: re.Pattern[str]) -> str | None:
        m = pattern.match(self.text, self.pos)
        if m is None:
            return None
        self.pos = m.end()
        return m.group()

    def found(self) -> str:
        return f"found {self.peek()!r}" if self.peek() else "found the end"


def _unknown(singular: str, plural: str, name: str, valid: Sequence[str]) -> str:
    """``unknown pass 'dep' (did you mean 'deps'?); valid passes: ...``."""
    close = difflib.get_close_matches(name, valid, n=1)
    hint = f" (did you mean {close[0]!r}?)" if close else ""
    return f"unknown {singular} {name!r}{hint}; valid {plural}: {', '.join(valid) or '(none)'}"


def _parse_options(s: _Scanner, cls: type[Pass]) -> dict[str, Any]:
    options = {o.name: o for o in pass_options(cls)}
    values: dict[str, Any] = {}
    opened = s.pos
    s.pos += 1  # the "{"
    while True:
        s.skip_space()
        if s.peek() == "}":
            s.pos += 1
            return values
        if not s.peek():
            raise s.error(f"unbalanced braces: the '{{' of pass {cls.name!r} at column {opened + 1} is never closed")
        start = s.pos
        key = s.match(_NAME)
        if key is None:
            raise s.error(f"expected an option name (NAME=VALUE) of pass {cls.name!r}, {s.found()}")
        name = key.replace("-", "_")
        if name not in options:
            raise s.error(f"pass {cls.name!r}: " + _unknown("option", "options", key, list(options)), start)
        if name in values:
            raise s.error(f"option {key!r} of pass {cls.name!r} is given twice", start)
        if s.peek() != "=":
            raise s.error(f"option {key!r} of pass {cls.name!r} needs a value ({key}=VALUE), {s.found()}")
        s.pos += 1
        at = s.pos
        text = s.match(_VALUE)
        if text is None:
            raise s.error(f"option {key!r} of pass {cls.name!r} has no value after '=', {s.found()}")
        try:
            values[name] = _convert(text, options[name].type)
        except ValueError as e:
            raise s.error(f"option {key!r} of pass {cls.name!r} expects {e}, got {text!r}", at) from None
        if s.peek() and not s.peek().isspace() and s.peek() != "}":
            raise s.error(f"expected a space or '}}' after option {key!r} of pass {cls.name!r}, {s.found()}")


def _parse_pass(s: _Scanner) -> Pass:
    start = s.pos
    name = s.match(_NAME)
    if name is None:
        raise s.error(f"expected a pass name, {s.found()} (an empty pass?)")
    passes = registered_passes()
    if name not in passes:
        raise s.error(_unknown("pass", "passes", name, sorted(passes)), start)
    cls = passes[name]
    s.skip_space()
    values = _parse_options(s, cls) if s.peek() == "{" else {}
    missing = [o.name for o in pass_options(cls) if o.default is dataclasses.MISSING and o.name not in values]
    if missing:
        raise s.error(
            f"pass {name!r} needs option{'s' if len(missing) > 1 else ''} {', '.join(f'{m}=VALUE' for m in missing)}",
            start,
        )
    return cls(**values)


def parse_pipeline(text: str) -> list[Pass]:
    """The passes of a pipeline string (see the module docstring); a :class:`PipelineError` if malformed."""
    s = _Scanner(text)
    s.skip_space()
    passes: list[Pass] = []
    if not s.peek():
        return passes
    while True:
        passes.append(_parse_pass(s))
        s.skip_space()
        if not s.peek():
            return passes
        if s.peek() == "}":
            raise s.error("unbalanced braces: '}' without a '{'")
        if s.peek() != ",":
            raise s.error(f"expected ',' between passes, {s.found()}")
        s.pos += 1
        s.skip_space()


# -- notes and details from the running pass -------------------------------------------------------


@dataclass
class _PassLog:
    notes: list[str] = field(default_factory=list)
    details: dict[str, Any] = field(default_factory=dict)


_RUNNING: ContextVar[_PassLog | None] = ContextVar("blockir_running_pass", default=None)


def note(message: str) -> None:
    """Add ``message`` to the report entry of the pass now running (nothing outside :func:`run`)."""
    log = _RUNNING.get()
    if log is not None:
        log.notes.append(message)


def record_detail(key: str, value: Any) -> None:
    """Store ``value`` under ``key`` in the running pass's report entry (nothing outside :func:`run`)."""
    log = _RUNNING.get()
    if log is not None:
        log.details[key] = value


# -- the report ------------------------------------------------------------------------------------


@dataclass
class PassRecord:
    """What one pass of a pipeline did."""

    index: int  # 1-based position in the pipeline, named pipelines expanded into their passes
    pass_: Pass
    changed: bool  # the serialized program differs after the pass (without snapshots: what the pass returned)
    returned: bool  # what the pass's run() said
    seconds: float
    ops_before: int
    ops_after: int
    added: int | None  # ops (by id) that are new; this and the next three: None without snapshots
    removed: int | None  # ops (by id) that are gone
    modified: int | None  # ops kept but different
    digest: str | None  # sha256 of the serialized program after the pass
    notes: list[str] = field(default_factory=list)
    details: dict[str, Any] = field(default_factory=dict)

    @property
    def name(self) -> str:
        return self.pass_.name

    @property
    def label(self) -> str:
        """The pass in pipeline syntax, with its options."""
        return format_pass(self.pass_)


@dataclass
class PassReport:
    """The records of every pass of a pipeline run; ``str(report)`` is a table of them and their notes."""

    pipeline: str
    records: list[PassRecord] = field(default_factory=list)

    @property
    def seconds(self) -> float:
        return sum(r.seconds for r in self.records)

    @property
    def changed(self) -> bool:
        return any(r.changed for r in self.records)

    def record(self, name: str) -> PassRecord:
        """The record of the last pass called ``name``."""
        for r in reversed(self.records):
            if r.name == name:
                return r
        raise BlockirError(f"no pass {name!r} in pipeline {self.pipeline!r}")

    def __iter__(self) -> typing.Iterator[PassRecord]:
        return iter(self.records)

    def __len__(self) -> int:
        return len(self.records)

    def timing_table(self) -> str:
        total = self.seconds
        rows = [
            [str(r.index), r.label, f"{r.seconds * 1e3:.3f}", f"{100 * r.seconds / total if total else 0:.1f}%"]
            for r in self.records
        ]
        rows.append(["", "total", f"{total * 1e3:.3f}", "100.0%"])
        lines = _table(["#", "pass", "wall ms", "share"], rows, 2)
        return "\n".join(["pass timing:", *("  " + line for line in lines)])

    def __str__(self) -> str:
        rows = []
        for r in self.records:
            changed = "yes" if r.changed else "no"
            if r.changed != r.returned:
                changed += f" (pass said {'yes' if r.returned else 'no'})"
            rows.append(
                [
                    str(r.index),
                    r.label,
                    changed,
                    f"{r.seconds * 1e3:.3f}",
                    str(r.ops_after),
                    *("-" if n is None else str(n) for n in (r.added, r.removed, r.modified)),
                ]
            )
        rows.append(["", "total", "yes" if self.changed else "no", f"{self.seconds * 1e3:.3f}", "", "", "", ""])
        header = ["#", "pass", "changed", "time ms", "ops", "added", "removed", "modified"]
        lines = [f"pipeline: {self.pipeline or '(empty)'}", *("  " + line for line in _table(header, rows, 3))]
        notes = [f"  {r.index} {r.name}: {n}" for r in self.records for n in r.notes]
        return "\n".join(lines + (["notes:", *notes] if notes else []))


# -- instruments -------------------------------------------------------------------------------------


class Instrument:
    """Hooks :func:`run` calls around a pipeline and each pass; override the ones you need.

    ``program`` is the pipeline's working program: look, do not change it.
    """

    def before_pipeline(self, passes: Sequence[Pass], program: Program) -> None:
        """Before the first pass, with every pass of the pipeline."""

    def before_pass(self, index: int, p: Pass, program: Program) -> None:
        """Before pass number ``index`` (1-based) runs."""

    def after_pass(self, record: PassRecord, program: Program) -> None:
        """After a pass ran and its record was made."""

    def after_pipeline(self, report: PassReport, program: Program) -> None:
        """After the last pass."""


def _header(record: PassRecord, count: int) -> str:
    return f"# after pass {record.index} of {count}: {record.label} ({'changed' if record.changed else 'unchanged'})"


class PrintIR(Instrument):
    """Print the program to ``out`` after every pass, or only after those that changed it."""

    def __init__(self, out: TextIO, only_changed: bool) -> None:
        self.out, self.only_changed, self.count = out, only_changed, 0

    def before_pipeline(self, passes: Sequence[Pass], program: Program) -> None:
        self.count = len(passes)

    def after_pass(self, record: PassRecord, program: Program) -> None:
        if record.changed or not self.only_changed:
            print(f"{_header(record, self.count)}\n{program}", file=self.out)


def _numbered(directory: Path, index: int, count: int, name: str, suffix: str) -> Path:
    """``DIR/03-name.suffix``: numbered in pipeline order, at least two digits."""
    return directory / f"{index:0{max(2, len(str(count)))}d}-{name}{suffix}"


class DumpIR(Instrument):
    """Write the program after every pass (or each changing one) to ``DIR/NN-pass.txt`` and ``.pb``.

    Also ``00-input.txt``/``.pb`` (the program the pipeline received) and ``report.txt``.
    """

    def __init__(self, directory: Path, only_changed: bool) -> None:
        self.directory, self.only_changed, self.count = directory, only_changed, 0

    def _write(self, index: int, name: str, program: Program, header: str) -> None:
        atomic_write(_numbered(self.directory, index, self.count, name, ".txt"), f"{header}\n{program}\n".encode())
        atomic_write(_numbered(self.directory, index, self.count, name, ".pb"), program.serialize())

    def before_pipeline(self, passes: Sequence[Pass], program: Program) -> None:
        self.count = len(passes)
        self._write(0, "input", program, f"# input of pipeline {format_pipeline(passes)}")

    def after_pass(self, record: PassRecord, program: Program) -> None:
        if record.changed or not self.only_changed:
            self._write(record.index, record.name, program, _header(record, self.count))

    def after_pipeline(self, report: PassReport, program: Program) -> None:
        atomic_write(self.directory / "report.txt", f"{report}\n".encode())


class VerifyEach(Instrument):
    """Verify the input program and the program after each pass (a :class:`VerifyError` if invalid)."""

    def before_pipeline(self, passes: Sequence[Pass], program: Program) -> None:
        try:
            verify(program)
        except VerifyError as e:
            raise VerifyError(f"the input of the pipeline is invalid: {e}", e.problems) from None

    def after_pass(self, record: PassRecord, program: Program) -> None:
        verify(program)


class KeepPrograms(Instrument):
    """Keep a clone of the program the pipeline received and of the program after each pass.

    ``programs[0]`` is the input, ``programs[k]`` the program after pass ``k``;
    clones keep their ops' ids, so an op is the same op from one to the next.
    When pass ``k`` fails, ``programs[k - 1]`` is the program it received. The
    visualizer uses it; it costs one clone per pass, so it is off unless given
    (``run(..., instruments=[KeepPrograms()])``).
    """

    def __init__(self) -> None:
        self.programs: list[Program] = []

    def before_pipeline(self, passes: Sequence[Pass], program: Program) -> None:
        self.programs = [program.clone()]

    def after_pass(self, record: PassRecord, program: Program) -> None:
        self.programs.append(program.clone())


class Timing(Instrument):
    """Print the timing table of the pipeline to ``out`` at the end."""

    def __init__(self, out: TextIO) -> None:
        self.out = out

    def after_pipeline(self, report: PassReport, program: Program) -> None:
        print(report.timing_table(), file=self.out)


# -- running -------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class _Snapshot:
    count: int  # how many ops the program has
    data: bytes = b""  # the serialized program (empty when no snapshot is taken)
    ops: dict[int, bytes] = field(default_factory=dict)  # op id -> serialized op

    @staticmethod
    def of(program: Program, full: bool) -> _Snapshot:
        """The program serialized (``full``), or only its op count."""
        if not full:
            return _Snapshot(sum(len(block.ops) for block in program.blocks))
        desc = program.to_proto()
        ops = {
            op.id: d.SerializeToString(deterministic=True)
            for block, bd in zip(program.blocks, desc.blocks)
            for op, d in zip(block.ops, bd.ops)
        }
        return _Snapshot(len(ops), desc.SerializeToString(deterministic=True), ops)


def _record(
    index: int, p: Pass, returned: bool, seconds: float, before: _Snapshot, after: _Snapshot, log: _PassLog
) -> PassRecord:
    record = PassRecord(
        index=index,
        pass_=p,
        changed=bool(returned),
        returned=bool(returned),
        seconds=seconds,
        ops_before=before.count,
        ops_after=after.count,
        added=None,
        removed=None,
        modified=None,
        digest=None,
        notes=log.notes,
        details=log.details,
    )
    if after.data:
        kept = before.ops.keys() & after.ops.keys()
        record.changed = before.data != after.data
        record.added = len(after.ops.keys() - kept)
        record.removed = len(before.ops.keys() - kept)
        record.modified = sum(before.ops[i] != after.ops[i] for i in kept)
        record.digest = hashlib.sha256(after.data).hexdigest()
    return record


def _failure(
    what: str,
    cause: BaseException,
    passes: Sequence[Pass],
    index: int,
    received: bytes,
    dump_dir: Path | None,
    report: PassReport,
) -> PassError:
    """A PassError for pass ``index`` (with the report of the passes before it), after saving the program it
    received as a reproducer."""
    p = passes[index - 1]
    directory = dump_dir if dump_dir is not None else Path(tempfile.mkdtemp(prefix="blockir-repro-"))
    path = _numbered(directory, index, len(passes), p.name, ".input.pb")
    atomic_write(path, received)
    before = [format_pass(q) for q in passes[: index - 1]]
    label = format_pass(p)
    message = (
        f"pass {label!r} (pass {index} of {len(passes)}) {what}: {type(cause).__name__}: {cause}\n"
        f"  passes before it: {', '.join(before) or '(none)'}\n"
        f"  the program it received is saved as {path}; rerun it with:\n"
        f"  blockir opt {shlex.quote(str(path))} -p {shlex.quote(label)} -o out.pb"
    )
    done = PassReport(report.pipeline, [r for r in report.records if r.index < index])
    return PassError(message, p.name, before, str(path), done)


def expand(passes: Sequence[Pass]) -> list[Pass]:
    """``passes`` with each named pipeline replaced by its passes (at any depth)."""
    return [q for p in passes for q in (expand(p.passes()) if isinstance(p, Pipeline) else [p])]


def run(
    program: Program,
    pipeline: str | Sequence[Pass],
    *,
    print_after_all: bool = False,
    print_after_change: bool = False,
    dump_dir: str | Path | None = None,
    timing: bool = False,
    verify: bool = True,
    out: TextIO | None = None,
    instruments: Sequence[Instrument] = (),
    snapshots: bool = True,
) -> tuple[Program, PassReport]:
    """Run ``pipeline`` (a string or passes) on a clone of ``program``; return the result and the report.

    ``program`` itself is never changed. Named pipelines run as their passes
    (:func:`expand`); the report's ``pipeline`` names them as given.
    ``print_after_all`` / ``print_after_change`` print the program after every
    pass / every changing pass to ``out`` (default stdout), or with
    ``dump_dir`` write it there instead, one numbered ``.txt`` and ``.pb`` per
    pass (every pass when neither flag is given), plus ``00-input`` and
    ``report.txt``. ``timing`` prints the timing table to ``out`` at the end.
    ``verify`` verifies the input and the program after each pass.
    ``instruments`` run after the built-in ones. A failing pass raises
    :class:`~blockir.errors.PassError` with a reproducer saved in ``dump_dir``
    (or a new temporary directory). ``snapshots=False`` is the cheap mode (see
    the module docstring): nothing is serialized, a failing pass's error
    propagates as it is.
    """
    given = parse_pipeline(pipeline) if isinstance(pipeline, str) else list(pipeline)
    passes = expand(given)
    stream = sys.stdout if out is None else out
    directory = Path(dump_dir) if dump_dir is not None else None
    active: list[Instrument] = []
    if directory is not None:
        active.append(DumpIR(directory, only_changed=print_after_change and not print_after_all))
    elif print_after_all or print_after_change:
        active.append(PrintIR(stream, only_changed=not print_after_all))
    if verify:
        active.append(VerifyEach())
    if timing:
        active.append(Timing(stream))
    active.extend(instruments)

    work = program.clone()
    report = PassReport(format_pipeline(given))
    for instrument in active:
        instrument.before_pipeline(passes, work)
    before = _Snapshot.of(work, snapshots)
    for index, p in enumerate(passes, 1):
        for instrument in active:
            instrument.before_pass(index, p, work)
        log = _PassLog()
        token = _RUNNING.set(log)
        start = time.perf_counter()
        try:
            returned = p.run(work)
        except Exception as e:
            if not snapshots:
                raise
            raise _failure("failed", e, passes, index, before.data, directory, report) from e
        finally:
            _RUNNING.reset(token)
        seconds = time.perf_counter() - start
        after = _Snapshot.of(work, snapshots)
        record = _record(index, p, returned, seconds, before, after, log)
        report.records.append(record)
        try:
            for instrument in active:
                instrument.after_pass(record, work)
        except VerifyError as e:
            if not snapshots:
                raise
            raise _failure("produced an invalid program", e, passes, index, before.data, directory, report) from e
        before = after
    for instrument in active:
        instrument.after_pipeline(report, work)
    return work, report
