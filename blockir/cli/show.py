"""``blockir show``: a binary ProgramDesc in the text form."""

from __future__ import annotations

import argparse

from blockir.cli.common import program_name, read_program
from blockir.errors import VerifyError
from blockir.ir import verify


def command(args: argparse.Namespace) -> int:
    program = read_program(args.program)
    if args.verify:
        try:
            verify(program)
        except VerifyError as e:
            raise VerifyError(f"{program_name(args.program)}: {e}", e.problems) from None
    print(program)
    return 0


def add(commands: argparse._SubParsersAction) -> None:
    p = commands.add_parser(
        "show",
        help="print a binary ProgramDesc in the text form",
        description="Print a binary ProgramDesc (.pb) in blockir's text form, the same text as print(program).",
    )
    p.add_argument("program", metavar="PROGRAM.pb", help="the program file ('-': read it from standard input)")
    p.add_argument(
        "--verify", action="store_true", help="verify the program first; print its problems and fail if it is invalid"
    )
    p.set_defaults(func=command)
