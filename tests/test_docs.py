"""Every code block of the README and of docs/*.md runs as written, unless marked as not a complete example.

A document's ``python`` and ``bash`` blocks run in order, as a new user would type them: the Python
blocks in one namespace, the commands of a bash block (continuation lines joined, comments dropped)
through the ``blockir`` command, all in one fresh working directory with fresh default programs,
unique names and global scope. A block preceded by ``<!-- doc-test: skip REASON -->`` is not run
(a synopsis with ``[options]``, a fragment of a larger program); the reason is required.
"""

from __future__ import annotations

import contextlib
import io
import re
import shlex
from dataclasses import dataclass
from pathlib import Path

import pytest

import blockir as bir
from blockir.cli import main

ROOT = Path(__file__).resolve().parent.parent
DOCUMENTS = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
_BLOCK = re.compile(
    r"^(?:<!-- doc-test: skip(?P<reason>[^\n]*?)-->\n)?```(?P<lang>\w*)\n(?P<code>.*?)^```$", re.MULTILINE | re.DOTALL
)


@dataclass(frozen=True)
class Block:
    document: Path
    line: int
    lang: str
    code: str
    skip: str | None  # the reason, when marked

    @property
    def where(self) -> str:
        return f"{self.document.relative_to(ROOT)}:{self.line}"


def blocks(document: Path) -> list[Block]:
    text = document.read_text()
    found = []
    for m in _BLOCK.finditer(text):
        fence = m.start("lang") - 3
        reason = m.group("reason")
        found.append(
            Block(
                document,
                text.count("\n", 0, fence) + 2,
                m.group("lang"),
                m.group("code"),
                None if reason is None else reason.strip(),
            )
        )
    return found


def commands(code: str) -> list[str]:
    """The command lines of a bash block: continuation lines joined, comments and blank lines dropped."""
    joined = re.sub(r"\\\n\s*", " ", code)
    return [line for line in (shlex.split(raw, comments=True) for raw in joined.splitlines()) if line]


@pytest.mark.parametrize("document", DOCUMENTS, ids=lambda p: str(p.relative_to(ROOT)))
def test_skipped_blocks_say_why(document: Path) -> None:
    for block in blocks(document):
        if block.skip is not None:
            assert block.skip, f"{block.where}: a skipped block needs a reason"


@pytest.mark.parametrize("document", DOCUMENTS, ids=lambda p: str(p.relative_to(ROOT)))
def test_document_runs_as_written(document: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    namespace: dict[str, object] = {"__name__": "__doc__"}
    with bir.unique_name.guard(), bir.program_guard(bir.Program(), bir.Program()), bir.scope_guard(bir.Scope()):
        for block in blocks(document):
            if block.skip is not None or block.lang not in ("python", "bash"):
                continue
            if block.lang == "python":
                with contextlib.redirect_stdout(io.StringIO()):
                    exec(compile(block.code, block.where, "exec"), namespace)  # noqa: S102 - our own docs
                continue
            for argv in commands(block.code):
                assert argv[0] == "blockir", f"{block.where}: {shlex.join(argv)}: only blockir commands run here"
                err = io.StringIO()
                with contextlib.redirect_stdout(io.StringIO()), contextlib.redirect_stderr(err):
                    status = main(argv[1:])
                assert status == 0, f"{block.where}: {shlex.join(argv)} exited {status}: {err.getvalue()}"


def test_the_harness_finds_runnable_blocks() -> None:
    """The harness finds the blocks (a broken pattern would make every document pass vacuously)."""
    ran = [b for d in DOCUMENTS for b in blocks(d) if b.skip is None and b.lang in ("python", "bash")]
    assert {b.document.name for b in ran} >= {"README.md", "scheduler.md"}


def runnable_commands(document: Path) -> list[str]:
    """The command lines that :func:`test_document_runs_as_written` runs from ``document``, as written."""
    return [
        shlex.join(argv)
        for block in blocks(document)
        if block.skip is None and block.lang == "bash"
        for argv in commands(block.code)
    ]


@pytest.mark.parametrize(
    "command",
    [
        "blockir show model_dir/program.pb --verify",
        "blockir run model_dir/program.pb --feed x=batch.npy --out out.npz",
        "blockir run model_dir/program.pb --feed x=batch.npy --scheduler dataflow --threads 2 --trace serve.json",
    ],
)
def test_the_readme_commands_a_user_copies_are_run_not_skipped(command: str) -> None:
    """The README's shell commands that serve the model of its first example are in blocks the test runs (a
    command in prose, or in a skipped block, is never checked: the scheduler command once failed that way)."""
    assert command in runnable_commands(ROOT / "README.md")


def test_ci_runs_the_readme_first_two_commands_as_written() -> None:
    """`.ci/run` does what the README's first block says it does: its commands, in order, with the same
    arguments (less flags that only quiet the output), e.g. `blockir demo` with no `--workdir`."""
    first = next(b for b in blocks(ROOT / "README.md") if b.lang == "bash")
    assert first.skip is not None and ".ci/run" in first.skip
    readme = [part.strip() for line in first.code.splitlines() if not line.startswith("#") for part in line.split("&&")]
    readme = [shlex.join(shlex.split(part)) for part in readme if part]
    assert len(readme) == 4, readme  # pip install ., blockir demo, pip install -e .[dev], pytest
    quiet = {"--quiet", "-q", "-p", "no:cacheprovider"}
    ci = [
        shlex.join(t for t in shlex.split(part) if t not in quiet and not t.startswith("--durations="))
        for line in (ROOT / ".ci" / "run").read_text().splitlines()
        if line and not line.startswith(("#", " "))
        for part in line.split("&&")
    ]
    assert not [command for command in readme if command not in ci], f".ci/run does not run them as written: {ci}"
    positions = [ci.index(command) for command in readme]
    assert positions == sorted(positions), (readme, ci)
