"""``blockir launch``: run a fleet script as parameter servers and workers (``docs/distributed.md``)."""

from __future__ import annotations

import argparse
import sys

from blockir.distributed.launch import launch


def command(args: argparse.Namespace) -> int:
    result = launch(
        args.script,
        args.servers,
        args.workers,
        args.args,
        backend=args.backend,
        timeout=args.timeout,
        address=args.address,
        max_restarts=args.max_restarts,
        checkpoint_dir=args.checkpoint_dir,
        checkpoint_every=args.checkpoint_every,
        verbose=args.verbose,
        keep_logs=args.keep_logs,
    )
    for role, errors in result.restarts.items():
        print(f"blockir launch: {role} was restarted {len(errors)} time(s)", file=sys.stderr)
    if result.ok:
        return 0
    for role, message in result.failures.items():  # the first to fail first: the others were stopped after it
        how = message if message.startswith("exited with status ") else f"failed: {message}"
        print(f"blockir launch: {role} {how}", file=sys.stderr)
    return 1


def add(commands: argparse._SubParsersAction) -> None:
    p = commands.add_parser(
        "launch",
        help="run a fleet script as parameter servers and workers",
        description="Run SCRIPT once per role of a parameter-server training run: --servers servers and "
        "--workers workers, each told its role (fleet.init() reads it). --backend inprocess (the default) runs "
        "every role as a thread of this process; --backend ray as a Ray actor, on a local Ray cluster it starts "
        "(node address 127.0.0.1, Ray's token authentication on, with a token of its own), or on the cluster at "
        "--address (see docs/distributed.md for a cluster of several machines). Each role's output is printed "
        "prefixed with its role. A role "
        "that fails is run again, up to --max-restarts times: a worker, and with --backend ray also a server, "
        "which restores the last checkpoint worker 0 wrote into --checkpoint-dir (every --checkpoint-every "
        "steps). When a role fails for good, the others are stopped and the command exits 1, naming it. "
        "The launcher's options go before SCRIPT: everything after SCRIPT is the script's own arguments.",
    )
    p.add_argument("script", metavar="SCRIPT.py", help="the training script")
    p.add_argument(
        "args",
        nargs=argparse.REMAINDER,
        metavar="ARGS",
        help="the script's arguments: everything after SCRIPT, options like --verbose included",
    )
    p.add_argument("--servers", type=int, default=1, metavar="S", help="how many parameter servers (default 1)")
    p.add_argument("--workers", type=int, default=1, metavar="W", help="how many workers (default 1)")
    p.add_argument("--backend", choices=("inprocess", "ray"), default="inprocess", help="where the roles run")
    p.add_argument("--address", default=None, help="the Ray cluster to join (ray backend; default: start one)")
    p.add_argument(
        "--timeout",
        type=float,
        default=300.0,
        metavar="SECONDS",
        help="how long a role waits for the servers, the other workers or a sync step (default 300)",
    )
    p.add_argument(
        "--max-restarts",
        type=int,
        default=0,
        metavar="N",
        help="run a failed role again, at most N times each (default 0: a failure ends the run)",
    )
    p.add_argument(
        "--checkpoint-dir",
        default=None,
        metavar="DIR",
        help="worker 0 saves the model here when it joined and every --checkpoint-every steps; a restarted "
        "server restores its part of the last one",
    )
    p.add_argument(
        "--checkpoint-every",
        type=int,
        default=0,
        metavar="STEPS",
        help="steps of worker 0 between checkpoints (default 0: only the first)",
    )
    p.add_argument(
        "--verbose",
        action="store_true",
        help="print the whole traceback of every role's error (by default a blockir error is one line, another "
        "exception's traceback starts in the script)",
    )
    p.add_argument(
        "--keep-logs",
        action="store_true",
        help="with --backend ray and no --address: keep the Ray cluster's session files (its logs), and say where "
        "(by default they are removed when the launch ends)",
    )
    p.set_defaults(func=command)
