"""What the commands share: one-line usage errors, the PROGRAM argument, checks of output locations, option types."""

from __future__ import annotations

import argparse
import functools
import os
import sys
from pathlib import Path
from typing import NoReturn

from blockir.errors import BlockirError, ProgramFormatError
from blockir.io.onnx import ONNX_SUFFIX, OnnxModel, read_model
from blockir.ir import Program, load_program
from blockir.ir.proto_io import (
    MAX_PROGRAM_BYTES,
    check_output_file,
    check_writable_dir,
    os_errors,
    program_from_bytes,
    read_limited,
)

STDIN = "-"
"""The PROGRAM argument of ``show``, ``run``, ``opt`` and ``viz`` that reads the program from standard input (the
one stream blockir reads: every file it reads must be a regular file)."""
STDIN_NAME = "<stdin>"


class Parser(argparse.ArgumentParser):
    """An argument parser whose usage errors are one ``blockir: error:`` line like every other error."""

    def error(self, message: str) -> NoReturn:
        command = self.prog.removeprefix("blockir").strip()
        where = f"{command}: " if command else ""
        raise BlockirError(f"{where}{message} (see '{self.prog} --help')")


def read_program(path: str) -> Program:
    """The PROGRAM argument's program: standard input's bytes for ``-`` (at most ``MAX_PROGRAM_BYTES``), else the
    regular file ``path``'s (``load_program``; an ``.onnx`` model imported)."""
    if path != STDIN:
        if Path(path).suffix == ONNX_SUFFIX:
            return onnx_model(path).program
        return load_program(path)
    data = read_limited(sys.stdin.buffer, MAX_PROGRAM_BYTES, STDIN_NAME, ProgramFormatError)
    return program_from_bytes(data, STDIN_NAME)


def onnx_model(path: str) -> OnnxModel:
    """The ONNX model file ``path`` imported (its program, parameters and names), once per file version: the
    commands read its program, then its parameters and input names."""
    with os_errors(path, "read"):
        st = os.stat(path)
    return _imported(path, st.st_mtime_ns, st.st_size)


@functools.lru_cache(maxsize=1)
def _imported(path: str, mtime_ns: int, size: int) -> OnnxModel:
    return read_model(path)


def program_name(path: str) -> str:
    """How messages name the PROGRAM argument ``path``."""
    return STDIN_NAME if path == STDIN else path


def output_file(path: str, option: str) -> None:
    """Check, before any work, that a file can be written at ``path`` (its directory exists and takes files)."""
    check_output_file(path, option)


def output_dir(path: str, option: str) -> None:
    """Check, before any work, that ``path`` is a directory, or can be made one, that takes files."""
    target = Path(path)
    if target.exists() and not target.is_dir():
        raise BlockirError(f"{option} {path}: exists and is not a directory")
    existing = next(p for p in (target, *target.parents) if p.exists())
    if not existing.is_dir():
        raise BlockirError(f"{option} {path}: {str(existing)!r} is not a directory")
    check_writable_dir(existing, f"{option} {path}")


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
