"""``blockir opt``: run a pipeline of compiler passes over a program."""

from __future__ import annotations

import argparse
from pathlib import Path

import blockir
from blockir.cli.common import output_dir, output_file, program_name, read_program
from blockir.errors import VerifyError


def command(args: argparse.Namespace) -> int:
    if args.output is not None:
        output_file(args.output, "-o")
    if args.dump_dir is not None:
        output_dir(args.dump_dir, "--dump-dir")
    program = read_program(args.program)
    try:
        result, report = blockir.passes.run(
            program,
            args.pipeline,
            print_after_all=args.print_after_all,
            print_after_change=args.print_after_change,
            dump_dir=args.dump_dir,
            timing=args.timing,
            verify=args.verify,
        )
    except VerifyError as e:  # the input is invalid (a pass's invalid output is a PassError)
        raise VerifyError(f"{program_name(args.program)}: {e}", e.problems) from None
    side = {name: program for record in report.records for name, program in record.details.get("programs", {}).items()}
    if args.output is None:
        print(result)
        for name, program in side.items():  # what a pass made besides the result (distribute: the servers')
            print(f"\n# {name}\n{program}")
        return 0
    result.save(args.output)
    print(f"wrote {args.output}")
    for name, program in side.items():
        path = Path(args.output).with_suffix(f".{name}.pb")
        program.save(str(path))
        print(f"wrote {path}")
    return 0


def add(commands: argparse._SubParsersAction) -> None:
    p = commands.add_parser(
        "opt",
        help="run a pipeline of compiler passes over a program",
        description="Apply a pass pipeline to a binary ProgramDesc and write the result. "
        "Pipelines use MLIR's syntax: passes separated by commas, options in "
        "braces separated by spaces, list values by commas, e.g. "
        "'prune{targets=loss,acc keep_side_effects=false},deps'. "
        "Named pipelines run as their passes: 'default-device-pipeline{default=cuda:0 compute=2}' "
        "reruns what Executor.run applies (Executor.pass_report(program).pipeline gives its options), "
        "'inference-pipeline{feeds=x targets=y}' what save_inference_model applies. "
        "`blockir passes` lists the passes and their options.",
    )
    p.add_argument("program", metavar="PROGRAM.pb", help="the program file ('-': read it from standard input)")
    p.add_argument("-p", "--pipeline", required=True, metavar="PIPELINE", help="the passes to run")
    p.add_argument(
        "-o",
        "--output",
        metavar="OUT.pb",
        default=None,
        help="where to write the result (default: print its text form)",
    )
    printing = p.add_mutually_exclusive_group()
    printing.add_argument("--print-after-all", action="store_true", help="print the program after every pass")
    printing.add_argument(
        "--print-after-change", action="store_true", help="print the program after every pass that changed it"
    )
    p.add_argument(
        "--dump-dir",
        metavar="DIR",
        default=None,
        help="write the input and the program after each pass (after each changing pass with "
        "--print-after-change) to DIR/NN-PASS.txt and .pb, and the pass report to DIR/report.txt, "
        "instead of printing them",
    )
    p.add_argument("--timing", action="store_true", help="print how long each pass took")
    p.add_argument(
        "--no-verify",
        dest="verify",
        action="store_false",
        help="do not verify the input and the program after each pass",
    )
    p.set_defaults(func=command)
