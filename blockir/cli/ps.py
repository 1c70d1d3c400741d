"""``blockir ps``: parameter-server saves: ``inspect`` one, ``reshard`` one for another number of servers."""

from __future__ import annotations

import argparse
import json

from blockir.distributed.saves import format_inspection, inspect, reshard


def command(args: argparse.Namespace) -> int:
    if args.action == "inspect":
        report = inspect(args.dir)
        print(json.dumps(report, indent=1) if args.json else format_inspection(report))
        return 0
    reshard(args.src, args.dst, args.servers)
    print(f"wrote {args.dst}: its tables cut for {args.servers} servers")
    return 0


def add(commands: argparse._SubParsersAction) -> None:
    p = commands.add_parser(
        "ps",
        help="parameter-server saves: inspect one, reshard one",
        description="Saves of fleet.save_persistables (docs/distributed.md). `inspect DIR` says what a save holds: "
        "each sparse table's rows per shard, bytes, sharding rule and the optimizer state saved with its rows, and "
        "the dense variables. `reshard SRC DST --servers S` writes SRC's save to DST with its tables cut for S "
        "servers (loading reshards by itself; this moves a save).",
    )
    actions = p.add_subparsers(dest="action", metavar="ACTION", required=True)
    inspect_p = actions.add_parser("inspect", help="what a save holds")
    inspect_p.add_argument("dir", metavar="DIR", help="the save")
    inspect_p.add_argument("--json", action="store_true", help="print it as JSON")
    reshard_p = actions.add_parser("reshard", help="a copy of a save for another number of servers")
    reshard_p.add_argument("src", metavar="SRC", help="the save")
    reshard_p.add_argument("dst", metavar="DST", help="where the copy goes")
    reshard_p.add_argument("--servers", type=int, required=True, metavar="S", help="how many servers")
    p.set_defaults(func=command)
