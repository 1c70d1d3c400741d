"""``blockir run``: run a program on fed ``.npy`` arrays and print or save what it fetches."""

from __future__ import annotations

import argparse
import sys
import zipfile
from pathlib import Path
from typing import Any, NamedTuple

import numpy as np

import blockir
from blockir.cli.common import (
    STDIN,
    add_check_nan_inf,
    name_value,
    onnx_model,
    output_file,
    positive,
    program_name,
    read_program,
)
from blockir.errors import BlockirError
from blockir.io.onnx import ONNX_SUFFIX
from blockir.ir.proto_io import atomic_file
from blockir.ir.schema import Lowering, lowering_of
from blockir.passes.copies import original_name
from blockir.runtime.plan import SCHEDULERS


def feeds(args: argparse.Namespace) -> dict[str, Any]:
    """The arrays ``--feed`` names (with ``--lod``'s offsets), by variable name."""
    feeds: dict[str, Any] = {}
    for item in args.feed:
        name, path = name_value(item, "--feed")
        if Path(args.program).suffix == ONNX_SUFFIX:  # an ONNX model's inputs go by the names its file gives them
            name = onnx_model(args.program).feed_name(name)
        if name in feeds:
            raise BlockirError(f"--feed {name} is given twice")
        if path == STDIN:
            raise BlockirError(f"--feed {name}=-: a feed is a .npy file; only the PROGRAM may be '-' (standard input)")
        feeds[name] = blockir.io.load_array(path, f"--feed {name}")
    levels: dict[str, list[list[int]]] = {}
    for item in args.lod:
        name, offsets = name_value(item, "--lod")
        if name not in feeds:
            raise BlockirError(f"--lod {item!r}: {name!r} is not fed (give --feed {name}=FILE.npy)")
        try:
            levels.setdefault(name, []).append([int(o) for o in offsets.split(",")])
        except ValueError:
            raise BlockirError(f"--lod {item!r}: offsets must be integers separated by commas") from None
    for name, lod in levels.items():
        feeds[name] = blockir.LoDTensor(feeds[name], lod)
    return feeds


def _paddle_model(args: argparse.Namespace) -> bool:
    """Whether the program is a Paddle model's (``.pdmodel``, Fluid's ``__model__``, or run with a
    ``.pdiparams``), whose parameters are in Paddle's format."""
    program = Path(args.program)
    given = Path(args.params) if args.params is not None else None
    return (
        program.suffix == blockir.io.paddle.PDMODEL
        or program.name == blockir.io.FLUID_MODEL_FILE
        or (given is not None and given.suffix == blockir.io.paddle.PDIPARAMS)
    )


def _params_dir(args: argparse.Namespace) -> Path | None:
    if args.params is not None:
        return Path(args.params)
    if args.program == STDIN:
        return None
    beside = Path(args.program).parent / blockir.io.PARAMS_DIR
    return beside if beside.is_dir() else None


def _preview(value: np.ndarray) -> str:
    with np.printoptions(threshold=20, edgeitems=3, precision=5, suppress=True, linewidth=100):
        return np.array2string(np.asarray(value))


def load_persistables(args: argparse.Namespace, program: blockir.Program, exe: blockir.Executor) -> blockir.Scope:
    """A new scope holding the persistables of ``program`` loaded from ``--params`` (or beside the program)."""
    scope = blockir.Scope()
    stored = [v for v in program.list_vars() if blockir.io.is_persistable(v)]
    params = _params_dir(args)
    if Path(args.program).suffix == ONNX_SUFFIX:  # its parameters are in the file
        for name, value in onnx_model(args.program).params.items():
            scope.set(name, value)
    elif stored and _paddle_model(args):
        for name, value in blockir.io.read_paddle_params(program, args.program, args.params).items():
            scope.set(name, value)
    elif stored:
        if params is None:
            raise BlockirError(
                f"{program_name(args.program)}: the program reads {len(stored)} persistable variables "
                f"({', '.join(v.name for v in stored[:3])}{', ...' if len(stored) > 3 else ''}) "
                f"and {'standard input has' if args.program == STDIN else 'there is'} no params/ directory beside "
                f"it; give --params DIR"
            )
        directory, filename = (params, None) if params.is_dir() else (params.parent, params.name)
        blockir.io.load_vars(
            exe, directory, program, predicate=blockir.io.is_persistable, filename=filename, scope=scope
        )
    return scope


class _OnnxNames(NamedTuple):
    blockir: dict[str, str]  # every value's name in the ONNX file -> its blockir name
    outputs: dict[str, str]  # the blockir name of each graph output -> its name in the file


def _onnx_names(args: argparse.Namespace) -> _OnnxNames:
    """How the names of an ONNX model's file map to its program's (empty for other programs): ``--fetch`` takes
    the file's names and the outputs are keyed by them, as ``--feed`` takes them."""
    if Path(args.program).suffix != ONNX_SUFFIX:
        return _OnnxNames({}, {})
    model = onnx_model(args.program)
    return _OnnxNames(model.names, dict(zip(model.fetches, model.onnx_fetches)))


def _save_npz(path: str, arrays: dict[str, np.ndarray]) -> None:
    """``np.savez`` of ``arrays`` (atomically), for any key: an ONNX name may be ``file`` or ``allow_pickle``,
    which ``np.savez`` takes as its own arguments."""
    with atomic_file(path) as f, zipfile.ZipFile(f, "w", zipfile.ZIP_STORED, allowZip64=True) as archive:
        for name, value in arrays.items():
            with archive.open(f"{name}.npy", "w", force_zip64=True) as entry:
                np.lib.format.write_array(entry, value, allow_pickle=False)


def add_inputs(p: argparse.ArgumentParser) -> None:
    """The options naming what a run reads: --params, --feed, --lod, --fetch."""
    p.add_argument(
        "--params",
        metavar="DIR",
        default=None,
        help="directory of saved variables (one file each), or a bundle file of them, or Paddle's .pdiparams",
    )
    p.add_argument(
        "--feed",
        metavar="NAME=FILE.npy",
        action="append",
        default=[],
        help="feed variable NAME with the array in FILE.npy (repeat for several)",
    )
    p.add_argument(
        "--lod",
        metavar="NAME=0,2,5",
        action="append",
        default=[],
        help="LoD offsets of a fed sequence variable, one option per level, outermost first",
    )
    p.add_argument("--fetch", metavar="NAME", action="append", default=[], help="variable to fetch (repeatable)")


def command(args: argparse.Namespace) -> int:
    if args.out is not None:
        output_file(args.out, "--out")
    if args.trace is not None:
        output_file(args.trace, "--trace")
    program = read_program(args.program)
    shown = program_name(args.program)
    blockir.io.paddle.check_ops(program, shown)
    exe = blockir.Executor(
        args.place, scheduler=args.scheduler, num_threads=args.threads, check_nan_inf=args.check_nan_inf
    )
    scope = load_persistables(args, program, exe)
    onnx_names = _onnx_names(args)
    fetch = [onnx_names.blockir.get(n, n) for n in args.fetch] or None
    fetch_ops = sorted(
        (op for op in program.global_block().ops if lowering_of(op.type) is Lowering.FETCH),
        key=lambda op: op.attrs.get("col", 0),
    )
    if fetch is None and not fetch_ops:
        raise BlockirError(f"{shown}: the program has no fetch ops; name what to fetch with --fetch NAME")
    with exe:
        values = exe.run(program, feed=feeds(args), fetch_list=fetch, scope=scope, trace=args.trace)
    if args.trace is not None:
        print(f"wrote the trace to {args.trace} (open it in https://ui.perfetto.dev)", file=sys.stderr)
    # a placed program's fetch reads the host's copy (NAME@cpu) of what it fetches: keyed by NAME
    names = args.fetch or [onnx_names.outputs.get(n, n) for n in (original_name(op.input("X")[0]) for op in fetch_ops)]
    arrays = {name: np.asarray(value) for name, value in zip(names, values)}
    if args.out is not None:
        _save_npz(args.out, arrays)
        print(f"wrote {', '.join(arrays)} to {args.out}")
        return 0
    for name, value in arrays.items():
        print(f"{name}: {value.dtype}{list(value.shape)}")
        print(_preview(value))
    return 0


def add(commands: argparse._SubParsersAction) -> None:
    p = commands.add_parser(
        "run",
        help="run a program on fed .npy arrays and print or save what it fetches",
        description="Run a binary ProgramDesc (by default on the host CPU, ops placed on "
        "other devices there). Persistable variables are loaded "
        "from --params (default: the params/ directory beside the program, as "
        "written by save_inference_model; for a Paddle model.pdmodel, the model.pdiparams "
        "beside it; for Fluid's __model__, the files beside it). Without --fetch, the program's fetch "
        "ops name what to fetch.",
    )
    p.add_argument(
        "program",
        metavar="PROGRAM.pb",
        help="the program file (.pb, Paddle's .pdmodel or __model__; '-': read it from standard input)",
    )
    add_inputs(p)
    p.add_argument(
        "--out",
        metavar="FILE.npz",
        default=None,
        help="write the fetched arrays to this .npz file instead of printing them",
    )
    p.add_argument(
        "--place",
        metavar="DEVICE",
        default="cpu",
        help="device for the ops the program places nowhere: cpu, cpu:N, cuda:N (default cpu)",
    )
    p.add_argument(
        "--scheduler",
        choices=SCHEDULERS,
        default="dataflow",
        help="dataflow (default): ops on several streams run concurrently; sequential: in program order",
    )
    p.add_argument(
        "--threads",
        metavar="N",
        type=positive,
        default=None,
        help="at most N worker threads for the dataflow scheduler (default: one per CPU stream)",
    )
    p.add_argument(
        "--trace",
        metavar="FILE.json",
        default=None,
        help="write a Chrome trace-event JSON of the run (open in Perfetto or chrome://tracing)",
    )
    add_check_nan_inf(p)
    p.set_defaults(func=command)
