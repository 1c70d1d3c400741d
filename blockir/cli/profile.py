"""``blockir profile``: a calibration run that measures a program's ops on this machine's devices into a cost file."""

from __future__ import annotations

import argparse

import blockir
from blockir.cli.common import output_file, positive, read_program
from blockir.cli.run import add_inputs, feeds, load_persistables
from blockir.errors import BlockirError
from blockir.ir.devices import checked_device
from blockir.runtime.calibration import calibrate


def command(args: argparse.Namespace) -> int:
    output_file(args.output, "-o")
    devices = [checked_device(d, "--devices") for d in args.devices.split(",") if d]
    if not devices:
        raise BlockirError("--devices: give at least one device, e.g. --devices cpu:0,cpu:1")
    program = read_program(args.program)
    strategy = blockir.BuildStrategy()
    if not args.fuse:
        for flag in vars(strategy):
            if flag.startswith("fuse_"):
                setattr(strategy, flag, False)
    with blockir.Executor("cpu") as exe:
        scope = load_persistables(args, program, exe)
    model = calibrate(
        program,
        feeds(args),
        devices,
        fetch_list=args.fetch or None,
        scope=scope,
        build_strategy=strategy,
        runs=args.runs,
    )
    model.save(args.output)
    print(
        f"wrote {args.output}: {len(model.ops)} op entries measured over {args.runs} runs at batch {model.batch} "
        f"(machine: {model.machine})"
    )
    return 0


def add(commands: argparse._SubParsersAction) -> None:
    p = commands.add_parser(
        "profile",
        help="measure a program's ops on this machine's devices into a cost file for auto-place",
        description="Run a program a few times on one device of each kind named (CPU devices share the host's "
        "cores: one stands for all), in a scratch scope with the parameters loaded as 'blockir run' loads them, and "
        "write the median time of each op (by type, input shapes and device kind), the devices' speeds and the "
        "links' bandwidth as a cost file of this machine, for "
        "'blockir opt -p \"auto-place{devices=... costs=FILE}\"' and BuildStrategy.cost_file. Each -1 dimension "
        "is the batch size of the feed; other batch sizes are predicted from it.",
    )
    p.add_argument("program", metavar="PROGRAM.pb", help="the program file ('-': read it from standard input)")
    add_inputs(p)
    p.add_argument("--devices", required=True, metavar="D,D", help="the devices to place over, e.g. cpu:0,cpu:1")
    p.add_argument("-o", "--output", metavar="COSTS.json", default="costs.json", help="the cost file (costs.json)")
    p.add_argument("--runs", metavar="N", type=positive, default=3, help="timed runs after a warm-up (3)")
    p.add_argument(
        "--fuse",
        action="store_true",
        help="measure the program fused as the executor runs it (default: unfused, as 'blockir opt' places it)",
    )
    p.set_defaults(func=command)
