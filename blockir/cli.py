"""The ``blockir`` command.

Each command is a subparser with a small function taking the parsed arguments
and returning the exit status. Every :class:`BlockirError` becomes one
``blockir: error: ...`` message on stderr and exit status 2, without a traceback.
"""

from __future__ import annotations

import argparse
import os
import sys
from typing import Callable, Sequence

import blockir
from blockir.errors import BlockirError, VerifyError
from blockir.ir import load_program, verify

Command = Callable[[argparse.Namespace], int]


def _show(args: argparse.Namespace) -> int:
    program = load_program(args.program)
    if args.verify:
        try:
            verify(program)
        except VerifyError as e:
            raise VerifyError(f"{args.program}: {e}", e.problems) from None
    print(program)
    return 0


def _add_show(commands: argparse._SubParsersAction) -> None:
    p = commands.add_parser("show", help="print a binary ProgramDesc in the text form",
                            description="Print a binary ProgramDesc (.pb) in blockir's text form, "
                                        "the same text as print(program).")
    p.add_argument("program", metavar="PROGRAM.pb", help="the program file")
    p.add_argument("--verify", action="store_true",
                   help="verify the program first; print its problems and fail if it is invalid")
    p.set_defaults(func=_show)


def build_parser() -> argparse.ArgumentParser:
    """The argument parser of the ``blockir`` command, one subparser per command."""
    parser = argparse.ArgumentParser(
        prog="blockir", description="blockir: a dataflow-graph IR, compiler and executor for ML programs.")
    parser.add_argument("--version", action="version", version=f"blockir {blockir.__version__}")
    commands = parser.add_subparsers(dest="command", metavar="COMMAND", required=True)
    _add_show(commands)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    """Run the ``blockir`` command with ``argv`` (default: ``sys.argv[1:]``); return the exit status."""
    parser = build_parser()
    try:
        args = parser.parse_args(argv)
    except SystemExit as e:  # --help, --version and usage errors (argparse already printed)
        return e.code if isinstance(e.code, int) else 2 if e.code else 0
    func: Command = args.func
    try:
        return func(args)
    except BlockirError as e:
        print(f"blockir: error: {e}", file=sys.stderr)
        return 2
    except BrokenPipeError:  # the reader went away (`blockir show p.pb | head`): stop quietly
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return 1


if __name__ == "__main__":
    sys.exit(main())
