"""``blockir viz``: write the pass-debugging page of a pipeline run over a program."""

from __future__ import annotations

import argparse
import sys
import webbrowser
from pathlib import Path

from blockir.cli.common import STDIN, output_file, program_name, read_program
from blockir.errors import VerifyError
from blockir.ir.proto_io import atomic_write
from blockir.viz.page import DEFAULT_PIPELINE, page_data, render


def command(args: argparse.Namespace) -> int:
    stem = "stdin" if args.program == STDIN else Path(args.program).stem
    out = args.output if args.output is not None else f"{stem}.html"
    output_file(out, "-o")
    program = read_program(args.program)
    title = args.title or Path(program_name(args.program)).name
    try:
        data, collected = page_data(program, args.pipeline, trace=args.trace, title=title)
    except VerifyError as e:  # the input is invalid (a pass's invalid output is a failing step of the page)
        raise VerifyError(f"{program_name(args.program)}: {e}", e.problems) from None
    atomic_write(out, render(data).encode(), make_parents=False)
    if collected.error is not None:
        print(f"blockir: error: {collected.error}", file=sys.stderr)
        print(f"wrote {out}: the passes before it and the failing pass", file=sys.stderr)
    else:
        traced = f", linked to the run in {args.trace}" if args.trace else ""
        print(f"wrote {out}: {len(collected.records)} passes{traced}")
    if args.open:
        webbrowser.open(Path(out).resolve().as_uri())
    return 1 if collected.error is not None else 0


def add(commands: argparse._SubParsersAction) -> None:
    p = commands.add_parser(
        "viz",
        help="write an HTML page showing what every pass of a pipeline did",
        description="Run a pipeline of passes over a program, keeping the program after every pass, and write one "
        "self-contained HTML page (works offline) that shows each pass's diff, where every op runs (devices, "
        "streams), the lineage of the ops passes created, and, with --trace, where a run's time went. A pass that "
        "raises ends the pipeline: the page shows it as the last step, and the command exits with status 1.",
    )
    p.add_argument("program", metavar="PROGRAM.pb", help="the program file ('-': read it from standard input)")
    p.add_argument(
        "-p",
        "--pipeline",
        default=DEFAULT_PIPELINE,
        metavar="PIPELINE",
        help=f"the passes to run, as for 'blockir opt' (default: {DEFAULT_PIPELINE}, what the executor applies)",
    )
    p.add_argument(
        "-o",
        "--output",
        metavar="OUT.html",
        default=None,
        help="the page (default: PROGRAM.html here; stdin.html for '-')",
    )
    p.add_argument(
        "--trace",
        metavar="RUN.json",
        default=None,
        help="a Chrome trace of a run of this program ('blockir run --trace', Executor.run(trace=...))",
    )
    p.add_argument("--title", default=None, help="the page's title (default: the program file's name)")
    p.add_argument("--open", action="store_true", help="open the page in the default web browser")
    p.set_defaults(func=command)
