"""``blockir train``: train a program on MultiSlot files with Hogwild workers."""

from __future__ import annotations

import argparse
import glob
import os
import sys
import threading
import time
from typing import Any

import numpy as np

import blockir
from blockir.cli.common import add_check_nan_inf, output_dir, positive
from blockir.errors import BlockirError
from blockir.ir import load_program
from blockir.parallel.async_executor import MODES


def _train_files(patterns: list[str]) -> list[str]:
    files = []
    for pattern in patterns:
        matched = sorted(glob.glob(pattern)) if glob.has_magic(pattern) else [pattern]
        if not matched:
            raise BlockirError(f"--files {pattern!r} matches no file")
        files += matched
    return files


class Progress:
    """A stderr line updated as batches run: instances, instances/s and the fetches averaged so far."""

    def __init__(self, epoch: int, fetch: list[str], enabled: bool) -> None:
        self.epoch, self.fetch, self.enabled = epoch, fetch, enabled
        self.instances, self.batches, self.sums = 0, 0, np.zeros(len(fetch))
        self.start, self.shown = time.perf_counter(), 0.0
        self.lock = threading.Lock()

    def __call__(self, instances: int, batches: int, sums: np.ndarray) -> None:
        with self.lock:
            self.instances += instances
            self.batches += batches
            self.sums += sums
            now = time.perf_counter()
            if self.enabled and now - self.shown >= 0.2:
                self.shown = now
                print(f"\r{self.line(now)}", end="", file=sys.stderr, flush=True)

    def line(self, now: float) -> str:
        rate = self.instances / max(now - self.start, 1e-9)
        means = "".join(f"  {n}={s / max(self.batches, 1):.4g}" for n, s in zip(self.fetch, self.sums))
        return f"epoch {self.epoch}: {self.instances} instances, {rate:.0f}/s{means}"


def command(args: argparse.Namespace) -> int:
    if args.program is None:  # `--files A B MAIN.pb`: the list took the program file too
        if not args.files or not args.files[-1].endswith(".pb"):
            raise BlockirError("train: the following arguments are required: MAIN.pb (see 'blockir train --help')")
        args.program = args.files.pop()
    if args.save_dir is not None:
        output_dir(args.save_dir, "--save-dir")
    program = load_program(args.program)
    desc = blockir.DataFeedDesc(args.data_feed)
    if args.batch_size is not None:
        desc.set_batch_size(args.batch_size)
    files = _train_files(args.files)
    scope = blockir.Scope()
    saved = None
    try:
        async_exe = blockir.AsyncExecutor(
            args.place,
            keep_workers=True,  # process mode: one set of workers
            check_nan_inf=args.check_nan_inf,
        )
        with blockir.Executor(args.place) as exe, async_exe:
            if args.startup is not None:
                exe.run(load_program(args.startup), scope=scope)
            for epoch in range(args.epochs):
                _train_epoch(args, async_exe, program, desc, files, scope, epoch)
                if args.save_dir is not None:
                    saved = os.path.join(args.save_dir, f"epoch{epoch}")
                    blockir.io.save_persistables(exe, saved, program, scope=scope)
                    print(f"saved the persistables to {saved}", flush=True)
    except KeyboardInterrupt:
        raise KeyboardInterrupt(
            f"the last saved persistables are in {saved}" if saved else "nothing was saved"
        ) from None
    return 0


def _train_epoch(
    args: argparse.Namespace, async_exe: Any, program: Any, desc: Any, files: list[str], scope: Any, epoch: int
) -> None:
    """One pass of ``blockir train`` over the files, with a progress line on a terminal and a summary line."""
    progress = Progress(epoch, args.fetch, sys.stderr.isatty())
    fetched = async_exe.run_from_files(
        program,
        desc,
        files,
        args.threads,
        args.fetch,
        debug=args.debug,
        mode=args.mode,
        skip_bad_lines=args.skip_bad_lines,
        scope=scope,
        progress=progress,
    )
    if progress.enabled:
        print(file=sys.stderr)
    stats = async_exe.last_stats
    if stats is None:  # train_from_dataset sets it on every return
        raise RuntimeError("the asynchronous executor returned without its statistics")
    means = "".join(f"  {name}={value:.6g}" for name, value in zip(args.fetch, fetched))
    skipped = f", {stats.skipped_lines} bad lines skipped" if stats.skipped_lines else ""
    print(
        f"epoch {epoch}: {stats.instances} instances in {stats.seconds:.2f}s "
        f"({stats.instances_per_second:.0f}/s, {len(stats.workers)} workers{skipped}){means}",
        flush=True,
    )


def add(commands: argparse._SubParsersAction) -> None:
    p = commands.add_parser(
        "train",
        help="train a program on MultiSlot files with Hogwild workers",
        description="Run the startup program, then train the main program on MultiSlot "
        "data files (described by a DataFeedDesc in protobuf text format) with "
        "AsyncExecutor workers updating shared parameters, one pass over the "
        "files per epoch; print the averaged fetches after each epoch and save "
        "the persistables into SAVE_DIR/epochN/.",
    )
    p.add_argument(
        "program",
        metavar="MAIN.pb",
        nargs="?",
        help="the main (training) program file (it may also follow the --files list)",
    )
    p.add_argument(
        "--startup",
        metavar="STARTUP.pb",
        default=None,
        help="the startup program, run once first (initializes the parameters)",
    )
    p.add_argument("--data-feed", required=True, metavar="DATA.prototxt", help="the DataFeedDesc text file")
    p.add_argument(
        "--files",
        required=True,
        nargs="+",
        action="extend",
        metavar="PATTERN",
        help="data files or glob patterns (quote them: 'train_data/part-*')",
    )
    p.add_argument(
        "--threads",
        metavar="N",
        type=positive,
        default=None,
        help="workers (default: the data feed's thread_num, else 1); at most one per file",
    )
    p.add_argument("--epochs", metavar="N", type=positive, default=1, help="passes over the files (default 1)")
    p.add_argument(
        "--batch-size",
        metavar="N",
        type=positive,
        default=None,
        help="instances per batch (default: the data feed's batch_size)",
    )
    p.add_argument(
        "--fetch",
        metavar="NAME",
        nargs="+",
        action="extend",
        default=[],
        help="variables to average and print after each epoch (last dimension 1)",
    )
    p.add_argument(
        "--save-dir", metavar="DIR", default=None, help="save the persistables into DIR/epochN/ after each epoch"
    )
    p.add_argument(
        "--mode",
        choices=MODES,
        default="thread",
        help="thread (default): workers are threads; process: processes over shared-memory parameters",
    )
    p.add_argument("--skip-bad-lines", action="store_true", help="skip and count malformed lines instead of failing")
    p.add_argument("--place", metavar="DEVICE", default="cpu", help="device the program runs on (default cpu)")
    p.add_argument("--debug", action="store_true", help="print each worker's progress after each file")
    add_check_nan_inf(p)
    p.set_defaults(func=command)
