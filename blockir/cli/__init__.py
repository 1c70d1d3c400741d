"""The ``blockir`` command.

Each command is a module of this package with ``add(commands)``, which adds its
subparser, and ``command(args)``, which runs it and returns the exit status. Every :class:`BlockirError` becomes one
``blockir: error: ...`` message on stderr and exit status 2, without a traceback.
"""

from __future__ import annotations

import argparse
import os
import sys
from collections.abc import Callable, Sequence

import blockir
from blockir.cli import demo, launch, opt, passes, profile, ps, run, show, train, viz
from blockir.cli.common import Parser
from blockir.errors import BlockirError

Command = Callable[[argparse.Namespace], int]

# ``blockir --help``'s examples: each runs as shown, in order, in an empty directory (tests/cli/test_cli.py runs them)
EPILOG = """\
examples:
  blockir demo --workdir demo                                # train a model, save it in demo/, serve it
  blockir show demo/model/program.pb --verify                # the saved program in the text form, checked
  blockir run demo/model/program.pb --feed x=demo/batch.npy  # serve it: the predictions for a batch
  blockir passes                                             # the passes and their options

'blockir COMMAND --help' gives a command's options. Documentation: README.md and docs/ in blockir's
source tree (docs/architecture.md is the map; docs/passes.md, docs/scheduler.md, docs/distributed.md, ...).
"""


def build_parser() -> argparse.ArgumentParser:
    """The argument parser of the ``blockir`` command, one subparser per command."""
    parser = Parser(
        prog="blockir",
        description="blockir: a dataflow-graph IR, compiler and executor for ML programs.",
        epilog=EPILOG,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("--version", action="version", version=f"blockir {blockir.__version__}")
    commands = parser.add_subparsers(dest="command", metavar="COMMAND", required=True)
    show.add(commands)
    run.add(commands)
    train.add(commands)
    demo.add(commands)
    opt.add(commands)
    passes.add(commands)
    profile.add(commands)
    viz.add(commands)
    launch.add(commands)
    ps.add(commands)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    """Run the ``blockir`` command with ``argv`` (default: ``sys.argv[1:]``); return the exit status."""
    parser = build_parser()
    try:
        args = parser.parse_args(argv)
        func: Command = args.func
        return func(args)
    except SystemExit as e:  # --help and --version (argparse already printed)
        return e.code if isinstance(e.code, int) else 2 if e.code else 0
    except BlockirError as e:
        print(f"blockir: error: {e}", file=sys.stderr)
        return 2
    except BrokenPipeError:  # the reader went away (`blockir show p.pb | head`): stop quietly
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return 1
    except OSError as e:  # a file the checks could not foresee (a disk that filled up, a file that vanished)
        print(f"blockir: error: {e.filename or 'I/O'}: {e.strerror or e}", file=sys.stderr)
        return 2
    except KeyboardInterrupt as e:
        print(f"blockir: interrupted{f' ({e})' if str(e) else ''}", file=sys.stderr)
        return 130
