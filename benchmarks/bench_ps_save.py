"""Saving and loading a parameter server's sparse table: full and delta saves against numpy's own write.

    python benchmarks/bench_ps_save.py [--rows 1000000] [--dim 64] [--optimizer sgd] [--rounds 3] [--dir DIR]
                                       [--zlib]

One server holding a table of ``--rows`` rows x ``--dim`` float32 (``--optimizer`` ``sgd``: no per-row
optimizer state; ``adagrad``: a moment per row, saved with it), in one process: per round, a full save
(``save_sharded`` with the server's ``save_shards``: the shard file written, synced and checksummed, the
manifest written last), the same bytes written by ``np.save`` and ``fsync`` (the raw write: a save that is not
on disk is not a save), a load of the save into a fresh server, the raw file read back by ``np.load`` (the raw
read; the load and the raw read take turns going first, round by round, and each runs on memory just touched
and freed, :func:`prime`: on this VM the first to fill memory the host took back pays for it several times
over), and, after pushes touching 1% of the rows, a delta save. Prints the times (median and range), the
ratios full save / raw write (goal <= 1.5x) and load / raw read (goal <= 2x), in wall and in process CPU time,
and the delta's bytes against the full save's (goal: proportional to the rows touched). Issue 33's figures:
``--rows 10000000 --dim 16 --optimizer adagrad``.
``--dir`` is where the files go (default: a temporary directory; give one on the disk to measure).
``--zlib``: the checksums by zlib's CRC-32 even where ISA-L's (the ``fast`` extra, ``isal``) is installed: what
a plain ``pip install blockir`` gets.
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import tempfile
import time
import zlib
from pathlib import Path

import numpy as np

import blockir as bir
from blockir.distributed.server import ParameterServer
from blockir.io import persistence
from blockir.io.manifest import ShardEntry, TableEntry
from blockir.io.persistence import save_sharded, saved_tables
from blockir.passes.distribute import split

TABLE = "embedding_0.w_0"


def server(rows: int, dim: int, optimizer: str) -> tuple[ParameterServer, object]:
    main, startup = bir.Program(), bir.Program()
    with bir.program_guard(main, startup), bir.unique_name.guard():
        ids = bir.layers.data("ids", [-1, 1], dtype="int64")
        init = bir.ParamAttr(initializer=bir.initializer.Constant(0.1))
        emb = bir.layers.embedding(ids, size=[rows, dim], is_sparse=True, param_attr=init)
        (bir.optimizer.SGD(0.1) if optimizer == "sgd" else bir.optimizer.Adagrad(0.1)).minimize(bir.layers.mean(emb))
    made = split(main, 1, 1)
    return ParameterServer(0, made, startup, "async"), (made, startup)


CPU: dict[str, list[float]] = {}  # the process CPU seconds of each timed step, beside its wall time


def timed(fn, key: str) -> float:  # type: ignore[no-untyped-def]
    """The wall time of ``fn()``; its process CPU time goes to ``CPU[key]`` (what a loaded machine changes least)."""
    start, cpu = time.perf_counter(), time.process_time()
    fn()
    CPU.setdefault(key, []).append(time.process_time() - cpu)
    return time.perf_counter() - start


def entries(srv: ParameterServer, base: Path, directory: Path, delta: bool, before: TableEntry | None) -> dict:
    written = srv.save_shards(str(directory), delta)[TABLE]
    shard = ShardEntry.written(Path(written["file"]).relative_to(base).as_posix(), written)
    if delta and before is not None:
        return {TABLE: before.with_delta((shard,))}
    table = srv.shards[TABLE].table
    return {TABLE: TableEntry(table.height, table.dim, table.dtype, 1, tuple(written["states"]), (shard,))}


def raw_write(path: Path, arrays: list[np.ndarray]) -> None:
    with open(path, "wb") as f:
        for array in arrays:
            np.save(f, array, allow_pickle=False)
        f.flush()
        os.fsync(f.fileno())


def raw_read(path: Path, count: int) -> list[np.ndarray]:
    with open(path, "rb") as f:
        return [np.load(f, allow_pickle=False) for _ in range(count)]


def prime(nbytes: int) -> None:
    """Touch ``nbytes`` of memory and free it (untimed), so that the step after it fills memory this process just
    had: on this VM, memory first touched after the host took it back costs about 1.5 s of CPU per GB (faults
    the hypervisor serves), several times the read itself, and it falls on whichever step comes first."""
    np.ones(nbytes, np.uint8)


def one_round(
    srv: ParameterServer,
    made: object,
    startup: object,
    where: Path,
    raw_path: Path,
    rng: np.random.Generator,
    args: argparse.Namespace,
    times: dict[str, list[float]],
    sizes: dict[str, int],
) -> None:
    """One round: the raw write, a full save, a load of it, pushes touching 1% of the rows, a delta save."""
    where = where.resolve()
    shard = srv.shards[TABLE]
    arrays = [shard.ids, *shard.arrays.values()]
    times["raw"].append(timed(lambda: raw_write(raw_path, arrays), "raw"))
    times["full"].append(timed(lambda: save_sharded(where, {}, lambda d: entries(srv, where, d, False, None)), "full"))
    srv.commit_save()
    sizes["full"] = sum(p.stat().st_size for p in where.rglob("*.npys"))
    sizes["raw"] = raw_path.stat().st_size

    def read() -> None:
        raw_read(raw_path, len(arrays))

    def load() -> float:  # the fresh server gone once timed: the raw read has the memory it had
        fresh = ParameterServer(0, made, startup, "async")  # type: ignore[arg-type]
        return timed(lambda: fresh.load_tables(str(where), saved_tables(where), None), "load")

    steps = [lambda: times["load"].append(load()), lambda: times["read"].append(timed(read, "read"))]
    for step in steps if len(times["load"]) % 2 == 0 else steps[::-1]:  # the first to fill fresh memory alternates
        prime(sizes["full"])
        step()
    touched = rng.choice(args.rows, size=args.rows // 100, replace=False).astype(np.int64)
    srv.push(0, {}, {TABLE: (touched, np.ones((len(touched), args.dim), np.float32))})
    before = saved_tables(where)[TABLE]
    files_before = set(where.rglob("*.npys"))
    times["delta"].append(
        timed(lambda: save_sharded(where, {}, lambda d: entries(srv, where, d, True, before)), "delta")
    )
    srv.commit_save()
    sizes["delta"] = sum(p.stat().st_size for p in set(where.rglob("*.npys")) - files_before)
    shutil.rmtree(where)
    raw_path.unlink()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", type=int, default=1_000_000)
    parser.add_argument("--dim", type=int, default=64)
    parser.add_argument("--optimizer", choices=["sgd", "adagrad"], default="sgd")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--dir", default=None)
    parser.add_argument("--zlib", action="store_true", help="zlib's CRC-32, as without the fast extra")
    args = parser.parse_args()
    if args.zlib:
        persistence._crc32_of = zlib.crc32
    srv, (made, startup) = server(args.rows, args.dim, args.optimizer)
    srv.pull_sparse(TABLE, np.arange(args.rows, dtype=np.int64))  # every row made
    rng = np.random.default_rng(0)
    times: dict[str, list[float]] = {"full": [], "raw": [], "load": [], "read": [], "delta": []}
    sizes: dict[str, int] = {}
    root = Path(args.dir) if args.dir else Path(tempfile.mkdtemp(prefix="bench-ps-save-"))
    try:
        for r in range(args.rounds):
            one_round(srv, made, startup, root / f"save-{r}", root / f"raw-{r}.npy", rng, args, times, sizes)
    finally:
        if args.dir is None:
            shutil.rmtree(root, ignore_errors=True)

    def summary(values: list[float]) -> str:
        return f"{statistics.median(values):.2f} s ({min(values):.2f} - {max(values):.2f})"

    ratios = [f / r for f, r in zip(times["full"], times["raw"])]
    loads = [f / r for f, r in zip(times["load"], times["read"])]
    print(f"table {args.rows:,} x {args.dim} float32, {args.optimizer}, one server, {args.rounds} rounds, {root}")
    print(f"  CRC-32 by {persistence._crc32_of.__module__}")
    print(f"  raw write (np.save + fsync)  {summary(times['raw'])}, {sizes['raw']:,} bytes")
    print(f"  full save                    {summary(times['full'])}, {sizes['full']:,} bytes")
    print(
        f"  full save / raw write        {statistics.median(ratios):.2f}x ({min(ratios):.2f} - {max(ratios):.2f}), "
        "goal <= 1.5x"
    )
    print(f"  load into a fresh server     {summary(times['load'])}")
    print(f"  raw read (np.load)           {summary(times['read'])}")
    print(
        f"  load / raw read              {statistics.median(loads):.2f}x ({min(loads):.2f} - {max(loads):.2f}), "
        "goal <= 2x"
    )
    print(
        f"  delta save (1% rows touched) {summary(times['delta'])}, {sizes['delta']:,} bytes = "
        f"{sizes['delta'] / sizes['full']:.4f} of the full save"
    )
    for what, (ours, raw) in {"full save / raw write": ("full", "raw"), "load / raw read": ("load", "read")}.items():
        cpu = [o / r for o, r in zip(CPU[ours], CPU[raw])]
        print(f"  process CPU time: {what:<22} {statistics.median(cpu):.2f}x ({min(cpu):.2f} - {max(cpu):.2f})")


if __name__ == "__main__":
    main()
