"""``blockir passes``: the compiler passes with their options."""

from __future__ import annotations

import argparse

import blockir


def command(args: argparse.Namespace) -> int:
    print(blockir.passes.describe_passes())
    return 0


def add(commands: argparse._SubParsersAction) -> None:
    p = commands.add_parser(
        "passes",
        help="list the compiler passes with their options",
        description="List every registered pass: its name, a one-line summary and its "
        "options with their types and defaults.",
    )
    p.set_defaults(func=command)
