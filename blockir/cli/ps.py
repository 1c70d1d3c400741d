"""``blockir ps``: parameter-server saves: ``inspect`` one, ``reshard`` one for another number of servers."""

from __future__ import annotations

import argparse
import json

from blockir.cli.common import output_dir
from blockir.distributed.saves import format_inspection, inspect, reshard


def command(args: argparse.Namespace) -> int:
    if args.action == "inspect":
        report = inspect(args.dir, verify=args.verify)  # checked whole before anything is printed
        print(json.dumps(report, indent=1) if args.json else format_inspection(report))
        return 0
    output_dir(args.dst, "DST")
    reshard(args.src, args.dst, args.servers)
    print(f"wrote {args.dst}: its tables cut for {args.servers} servers")
    return 0


def add(commands: argparse._SubParsersAction) -> None:
    p = commands.add_parser(
        "ps",
        help="parameter-server saves: inspect one, reshard one",
        description="Saves of fleet.save_persistables (docs/distributed.md). `inspect DIR` says what a save holds: "
        "each sparse table's rows per shard, bytes, sharding rule and the optimizer state saved with its rows, and "
        "the dense variables, once every claim of its manifest is checked against its files (--verify: the "
        "checksums too). `reshard SRC DST --servers S` writes SRC's save, checked likewise, to the new directory DST "
        "with its tables cut for S servers (loading reshards by itself; this moves a save). A save that belies its "
        "manifest is refused (exit status 2, one line naming the file and the claim) and nothing is written.",
    )
    actions = p.add_subparsers(dest="action", metavar="ACTION", required=True)
    inspect_p = actions.add_parser("inspect", help="what a save holds")
    inspect_p.add_argument("dir", metavar="DIR", help="the save")
    inspect_p.add_argument("--json", action="store_true", help="print it as JSON")
    inspect_p.add_argument(
        "--verify", action="store_true", help="also read every shard, checking its checksum and its ids"
    )
    reshard_p = actions.add_parser("reshard", help="a copy of a save for another number of servers")
    reshard_p.add_argument("src", metavar="SRC", help="the save")
    reshard_p.add_argument("dst", metavar="DST", help="where the copy goes: a new (or empty) directory")
    reshard_p.add_argument("--servers", type=int, required=True, metavar="S", help="how many servers")
    p.set_defaults(func=command)
