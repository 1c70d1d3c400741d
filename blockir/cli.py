"""The ``blockir`` command.

Each command is a subparser with a small function taking the parsed arguments
and returning the exit status. Every :class:`BlockirError` becomes one
``blockir: error: ...`` message on stderr and exit status 2, without a traceback.
"""

from __future__ import annotations

import argparse
import glob
import os
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any, Callable, NoReturn, Sequence

import numpy as np

import blockir
from blockir.errors import BlockirError, VerifyError
from blockir.ir import load_program, verify
from blockir.runtime.async_executor import MODES
from blockir.runtime.plan import SCHEDULERS

Command = Callable[[argparse.Namespace], int]


class _Parser(argparse.ArgumentParser):
    """An argument parser whose usage errors are one ``blockir: error:`` line like every other error."""

    def error(self, message: str) -> NoReturn:
        command = self.prog.removeprefix("blockir").strip()
        where = f"{command}: " if command else ""
        raise BlockirError(f"{where}{message} (see '{self.prog} --help')")


def _output_file(path: str, option: str) -> None:
    """Check, before any work, that a file can be written at ``path`` (its directory exists and takes files)."""
    target = Path(path)
    if target.is_dir():
        raise BlockirError(f"{option} {path}: is a directory, not a file")
    if not target.parent.is_dir():
        raise BlockirError(f"{option} {path}: the directory {str(target.parent)!r} does not exist")
    _probe(target.parent, option, path)


def _output_dir(path: str, option: str) -> None:
    """Check, before any work, that ``path`` is a directory, or can be made one, that takes files."""
    target = Path(path)
    if target.exists() and not target.is_dir():
        raise BlockirError(f"{option} {path}: exists and is not a directory")
    existing = next(p for p in (target, *target.parents) if p.exists())
    if not existing.is_dir():
        raise BlockirError(f"{option} {path}: {str(existing)!r} is not a directory")
    _probe(existing, option, path)


def _probe(directory: Path, option: str, path: str) -> None:
    """Create and remove an unnamed file in ``directory``: the one sure test that it can be written."""
    try:
        tempfile.TemporaryFile(dir=directory).close()
    except OSError as e:
        raise BlockirError(f"{option} {path}: cannot write in {str(directory)!r} ({e.strerror or e})") from None


def _show(args: argparse.Namespace) -> int:
    program = load_program(args.program)
    if args.verify:
        try:
            verify(program)
        except VerifyError as e:
            raise VerifyError(f"{args.program}: {e}", e.problems) from None
    print(program)
    return 0


def _add_show(commands: argparse._SubParsersAction) -> None:
    p = commands.add_parser("show", help="print a binary ProgramDesc in the text form",
                            description="Print a binary ProgramDesc (.pb) in blockir's text form, "
                                        "the same text as print(program).")
    p.add_argument("program", metavar="PROGRAM.pb", help="the program file")
    p.add_argument("--verify", action="store_true",
                   help="verify the program first; print its problems and fail if it is invalid")
    p.set_defaults(func=_show)


def _name_value(item: str, option: str) -> tuple[str, str]:
    name, sep, value = item.partition("=")
    if not sep or not name or not value:
        raise BlockirError(f"{option} {item!r}: expected NAME=VALUE")
    return name, value


def _feeds(args: argparse.Namespace) -> dict[str, Any]:
    feeds: dict[str, Any] = {}
    for item in args.feed:
        name, path = _name_value(item, "--feed")
        if name in feeds:
            raise BlockirError(f"--feed {name} is given twice")
        feeds[name] = blockir.io.load_array(path, f"--feed {name}")
    levels: dict[str, list[list[int]]] = {}
    for item in args.lod:
        name, offsets = _name_value(item, "--lod")
        if name not in feeds:
            raise BlockirError(f"--lod {item!r}: {name!r} is not fed (give --feed {name}=FILE.npy)")
        try:
            levels.setdefault(name, []).append([int(o) for o in offsets.split(",")])
        except ValueError:
            raise BlockirError(f"--lod {item!r}: offsets must be integers separated by commas") from None
    for name, lod in levels.items():
        feeds[name] = blockir.LoDTensor(feeds[name], lod)
    return feeds


def _params_dir(args: argparse.Namespace) -> Path | None:
    if args.params is not None:
        return Path(args.params)
    beside = Path(args.program).parent / blockir.io.PARAMS_DIR
    return beside if beside.is_dir() else None


def _preview(value: np.ndarray) -> str:
    with np.printoptions(threshold=20, edgeitems=3, precision=5, suppress=True, linewidth=100):
        return np.array2string(np.asarray(value))


def _run(args: argparse.Namespace) -> int:
    if args.out is not None:
        _output_file(args.out, "--out")
    if args.trace is not None:
        _output_file(args.trace, "--trace")
    program = load_program(args.program)
    exe = blockir.Executor(args.place, scheduler=args.scheduler, num_threads=args.threads,
                           check_nan_inf=args.check_nan_inf)
    scope = blockir.Scope()
    stored = [v for v in program.list_vars() if blockir.io.is_persistable(v)]
    params = _params_dir(args)
    if stored and params is None:
        raise BlockirError(f"{args.program}: the program reads {len(stored)} persistable variables "
                           f"({', '.join(v.name for v in stored[:3])}{', ...' if len(stored) > 3 else ''}) "
                           f"and there is no params/ directory beside it; give --params DIR")
    if stored:
        directory, filename = (params.parent, params.name) if params.is_file() else (params, None)
        blockir.io.load_vars(exe, directory, program, predicate=blockir.io.is_persistable, filename=filename,
                             scope=scope)
    fetch = args.fetch or None
    if fetch is None and not any(op.type == "fetch" for op in program.global_block().ops):
        raise BlockirError(f"{args.program}: the program has no fetch ops; name what to fetch with --fetch NAME")
    with exe:
        values = exe.run(program, feed=_feeds(args), fetch_list=fetch, scope=scope, trace=args.trace)
    if args.trace is not None:
        print(f"wrote the trace to {args.trace} (open it in https://ui.perfetto.dev)", file=sys.stderr)
    names = fetch or [op.input("X")[0] for op in sorted(
        (op for op in program.global_block().ops if op.type == "fetch"), key=lambda op: op.attrs.get("col", 0))]
    arrays = {name: np.asarray(value) for name, value in zip(names, values)}
    if args.out is not None:
        from blockir.ir.proto_io import atomic_file

        with atomic_file(args.out) as f:
            np.savez(f, **arrays)
        print(f"wrote {', '.join(arrays)} to {args.out}")
        return 0
    for name, value in arrays.items():
        print(f"{name}: {value.dtype}{list(value.shape)}")
        print(_preview(value))
    return 0


def _add_run(commands: argparse._SubParsersAction) -> None:
    p = commands.add_parser("run", help="run a program on fed .npy arrays and print or save what it fetches",
                            description="Run a binary ProgramDesc (by default on the host CPU, ops placed on "
                                        "other devices there). Persistable variables are loaded "
                                        "from --params (default: the params/ directory beside the program, as "
                                        "written by save_inference_model). Without --fetch, the program's fetch "
                                        "ops name what to fetch.")
    p.add_argument("program", metavar="PROGRAM.pb", help="the program file")
    p.add_argument("--params", metavar="DIR", default=None,
                   help="directory of saved variables (one file each), or a bundle file of them")
    p.add_argument("--feed", metavar="NAME=FILE.npy", action="append", default=[],
                   help="feed variable NAME with the array in FILE.npy (repeat for several)")
    p.add_argument("--lod", metavar="NAME=0,2,5", action="append", default=[],
                   help="LoD offsets of a fed sequence variable, one option per level, outermost first")
    p.add_argument("--fetch", metavar="NAME", action="append", default=[], help="variable to fetch (repeatable)")
    p.add_argument("--out", metavar="FILE.npz", default=None,
                   help="write the fetched arrays to this .npz file instead of printing them")
    p.add_argument("--place", metavar="DEVICE", default="cpu",
                   help="device for the ops the program places nowhere: cpu, cpu:N, cuda:N (default cpu)")
    p.add_argument("--scheduler", choices=SCHEDULERS, default="dataflow",
                   help="dataflow (default): ops on several streams run concurrently; sequential: in program order")
    p.add_argument("--threads", metavar="N", type=_positive, default=None,
                   help="at most N worker threads for the dataflow scheduler (default: one per CPU stream)")
    p.add_argument("--trace", metavar="FILE.json", default=None,
                   help="write a Chrome trace-event JSON of the run (open in Perfetto or chrome://tracing)")
    _add_check_nan_inf(p)
    p.set_defaults(func=_run)


def _train_files(patterns: list[str]) -> list[str]:
    files = []
    for pattern in patterns:
        matched = sorted(glob.glob(pattern)) if glob.has_magic(pattern) else [pattern]
        if not matched:
            raise BlockirError(f"--files {pattern!r} matches no file")
        files += matched
    return files


class _Progress:
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


def _train(args: argparse.Namespace) -> int:
    if args.program is None:  # `--files A B MAIN.pb`: the list took the program file too
        if not args.files or not args.files[-1].endswith(".pb"):
            raise BlockirError("train: the following arguments are required: MAIN.pb (see 'blockir train --help')")
        args.program = args.files.pop()
    if args.save_dir is not None:
        _output_dir(args.save_dir, "--save-dir")
    program = load_program(args.program)
    desc = blockir.DataFeedDesc(args.data_feed)
    if args.batch_size is not None:
        desc.set_batch_size(args.batch_size)
    files = _train_files(args.files)
    scope = blockir.Scope()
    saved = None
    try:
        async_exe = blockir.AsyncExecutor(args.place, keep_workers=True,  # process mode: one set of workers
                                          check_nan_inf=args.check_nan_inf)
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
        raise KeyboardInterrupt(f"the last saved persistables are in {saved}" if saved else "nothing was saved") \
            from None
    return 0


def _train_epoch(args: argparse.Namespace, async_exe: Any, program: Any, desc: Any, files: list[str],
                 scope: Any, epoch: int) -> None:
    """One pass of ``blockir train`` over the files, with a progress line on a terminal and a summary line."""
    progress = _Progress(epoch, args.fetch, sys.stderr.isatty())
    fetched = async_exe.run_from_files(program, desc, files, args.threads, args.fetch, debug=args.debug,
                                       mode=args.mode, skip_bad_lines=args.skip_bad_lines, scope=scope,
                                       progress=progress)
    if progress.enabled:
        print(file=sys.stderr)
    stats = async_exe.last_stats
    assert stats is not None
    means = "".join(f"  {name}={value:.6g}" for name, value in zip(args.fetch, fetched))
    skipped = f", {stats.skipped_lines} bad lines skipped" if stats.skipped_lines else ""
    print(f"epoch {epoch}: {stats.instances} instances in {stats.seconds:.2f}s "
          f"({stats.instances_per_second:.0f}/s, {len(stats.workers)} workers{skipped}){means}", flush=True)


def _add_train(commands: argparse._SubParsersAction) -> None:
    p = commands.add_parser("train", help="train a program on MultiSlot files with Hogwild workers",
                            description="Run the startup program, then train the main program on MultiSlot "
                                        "data files (described by a DataFeedDesc in protobuf text format) with "
                                        "AsyncExecutor workers updating shared parameters, one pass over the "
                                        "files per epoch; print the averaged fetches after each epoch and save "
                                        "the persistables into SAVE_DIR/epochN/.")
    p.add_argument("program", metavar="MAIN.pb", nargs="?",
                   help="the main (training) program file (it may also follow the --files list)")
    p.add_argument("--startup", metavar="STARTUP.pb", default=None,
                   help="the startup program, run once first (initializes the parameters)")
    p.add_argument("--data-feed", required=True, metavar="DATA.prototxt", help="the DataFeedDesc text file")
    p.add_argument("--files", required=True, nargs="+", action="extend", metavar="PATTERN",
                   help="data files or glob patterns (quote them: 'train_data/part-*')")
    p.add_argument("--threads", metavar="N", type=_positive, default=None,
                   help="workers (default: the data feed's thread_num, else 1); at most one per file")
    p.add_argument("--epochs", metavar="N", type=_positive, default=1, help="passes over the files (default 1)")
    p.add_argument("--batch-size", metavar="N", type=_positive, default=None,
                   help="instances per batch (default: the data feed's batch_size)")
    p.add_argument("--fetch", metavar="NAME", nargs="+", action="extend", default=[],
                   help="variables to average and print after each epoch (last dimension 1)")
    p.add_argument("--save-dir", metavar="DIR", default=None,
                   help="save the persistables into DIR/epochN/ after each epoch")
    p.add_argument("--mode", choices=MODES, default="thread",
                   help="thread (default): workers are threads; process: processes over shared-memory parameters")
    p.add_argument("--skip-bad-lines", action="store_true", help="skip and count malformed lines instead of failing")
    p.add_argument("--place", metavar="DEVICE", default="cpu", help="device the program runs on (default cpu)")
    p.add_argument("--debug", action="store_true", help="print each worker's progress after each file")
    _add_check_nan_inf(p)
    p.set_defaults(func=_train)


def _add_check_nan_inf(p: argparse.ArgumentParser) -> None:
    p.add_argument("--check-nan-inf", action="store_true",
                   help="stop at the first op that produces NaN or inf, naming it and its inputs' statistics")


def _positive(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        value = 0
    if value < 1:
        raise argparse.ArgumentTypeError(f"expected a positive integer, got {text!r}")
    return value


def _demo(args: argparse.Namespace) -> int:
    from blockir import demo  # imported on use: the other commands do not need it

    if args.workdir is not None:
        _output_dir(args.workdir, "--workdir")
        return demo.run(args.workdir, epochs=args.epochs)
    import tempfile

    with tempfile.TemporaryDirectory(prefix="blockir-demo-") as workdir:
        return demo.run(workdir, epochs=args.epochs)


def _add_demo(commands: argparse._SubParsersAction) -> None:
    p = commands.add_parser("demo", help="train a model, save it and serve it with `blockir run` (CPU)",
                            description="Build an MLP with the DSL, train it on generated data, save it with "
                                        "save_inference_model and serve it with `blockir run`; exit 0 when the "
                                        "served predictions match the Python session's.")
    p.add_argument("--workdir", metavar="DIR", default=None,
                   help="where the model and arrays go (default: a temporary directory, removed afterwards)")
    p.add_argument("--epochs", metavar="N", type=_positive, default=40, help="training epochs (default 40)")
    p.set_defaults(func=_demo)


def _opt(args: argparse.Namespace) -> int:
    if args.output is not None:
        _output_file(args.output, "-o")
    if args.dump_dir is not None:
        _output_dir(args.dump_dir, "--dump-dir")
    program = load_program(args.program)
    try:
        result, _ = blockir.passes.run(program, args.pipeline, print_after_all=args.print_after_all,
                                       print_after_change=args.print_after_change, dump_dir=args.dump_dir,
                                       timing=args.timing, verify=args.verify)
    except VerifyError as e:  # the input is invalid (a pass's invalid output is a PassError)
        raise VerifyError(f"{args.program}: {e}", e.problems) from None
    if args.output is None:
        print(result)
        return 0
    result.save(args.output)
    print(f"wrote {args.output}")
    return 0


def _add_opt(commands: argparse._SubParsersAction) -> None:
    p = commands.add_parser("opt", help="run a pipeline of compiler passes over a program",
                            description="Apply a pass pipeline to a binary ProgramDesc and write the result. "
                                        "Pipelines use MLIR's syntax: passes separated by commas, options in "
                                        "braces separated by spaces, list values by commas, e.g. "
                                        "'prune{targets=loss,acc keep_side_effects=false},deps'. "
                                        "`blockir passes` lists the passes and their options.")
    p.add_argument("program", metavar="PROGRAM.pb", help="the program file")
    p.add_argument("-p", "--pipeline", required=True, metavar="PIPELINE", help="the passes to run")
    p.add_argument("-o", "--output", metavar="OUT.pb", default=None,
                   help="where to write the result (default: print its text form)")
    printing = p.add_mutually_exclusive_group()
    printing.add_argument("--print-after-all", action="store_true", help="print the program after every pass")
    printing.add_argument("--print-after-change", action="store_true",
                          help="print the program after every pass that changed it")
    p.add_argument("--dump-dir", metavar="DIR", default=None,
                   help="write the input and the program after each pass (after each changing pass with "
                        "--print-after-change) to DIR/NN-PASS.txt and .pb, and the pass report to DIR/report.txt, "
                        "instead of printing them")
    p.add_argument("--timing", action="store_true", help="print how long each pass took")
    p.add_argument("--no-verify", dest="verify", action="store_false",
                   help="do not verify the input and the program after each pass")
    p.set_defaults(func=_opt)


def _passes(args: argparse.Namespace) -> int:
    print(blockir.passes.describe_passes())
    return 0


def _add_passes(commands: argparse._SubParsersAction) -> None:
    p = commands.add_parser("passes", help="list the compiler passes with their options",
                            description="List every registered pass: its name, a one-line summary and its "
                                        "options with their types and defaults.")
    p.set_defaults(func=_passes)


def build_parser() -> argparse.ArgumentParser:
    """The argument parser of the ``blockir`` command, one subparser per command."""
    parser = _Parser(
        prog="blockir", description="blockir: a dataflow-graph IR, compiler and executor for ML programs.")
    parser.add_argument("--version", action="version", version=f"blockir {blockir.__version__}")
    commands = parser.add_subparsers(dest="command", metavar="COMMAND", required=True)
    _add_show(commands)
    _add_run(commands)
    _add_train(commands)
    _add_demo(commands)
    _add_opt(commands)
    _add_passes(commands)
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


if __name__ == "__main__":
    sys.exit(main())
