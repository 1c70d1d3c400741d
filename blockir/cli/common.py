"""What the commands share: one-line usage errors, checks of output locations, option types."""

from __future__ import annotations

import argparse
import tempfile
from pathlib import Path
from typing import NoReturn

from blockir.errors import BlockirError


class Parser(argparse.ArgumentParser):
    """An argument parser whose usage errors are one ``blockir: error:`` line like every other error."""

    def error(self, message: str) -> NoReturn:
        command = self.prog.removeprefix("blockir").strip()
        where = f"{command}: " if command else ""
        raise BlockirError(f"{where}{message} (see '{self.prog} --help')")


def output_file(path: str, option: str) -> None:
    """Check, before any work, that a file can be written at ``path`` (its directory exists and takes files)."""
    target = Path(path)
    if target.is_dir():
        raise BlockirError(f"{option} {path}: is a directory, not a file")
    if not target.parent.is_dir():
        raise BlockirError(f"{option} {path}: the directory {str(target.parent)!r} does not exist")
    _probe(target.parent, option, path)


def output_dir(path: str, option: str) -> None:
    """Check, before any work, that ``path`` is a directory, or can be made one, that takes files."""
    target = Path(path)
    if target.exists() and not target.is_dir():
        raise BlockirError(f"{option} {path}: exists and is not a directory")
    existing = next(p for p in (target, *target.parents) if p.exists())
    if not existing.is_dir():
        raise BlockirError(f"{option} {path}: {str(existing)!r} is not a directory")
    _probe(existing, option, path)


def _probe(directory: Path, option: str, path: str) -> None:
    """Create and remove an unnamed file in ``directory``: the one sure test that it can be written."""
    try:
        tempfile.TemporaryFile(dir=directory).close()
    except OSError as e:
        raise BlockirError(f"{option} {path}: cannot write in {str(directory)!r} ({e.strerror or e})") from None


def positive(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        value = 0
    if value < 1:
        raise argparse.ArgumentTypeError(f"expected a positive integer, got {text!r}")
    return value


def name_value(item: str, option: str) -> tuple[str, str]:
    name, sep, value = item.partition("=")
    if not sep or not name or not value:
        raise BlockirError(f"{option} {item!r}: expected NAME=VALUE")
    return name, value


def add_check_nan_inf(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "--check-nan-inf",
        action="store_true",
        help="stop at the first op that produces NaN or inf, naming it and its inputs' statistics",
    )
