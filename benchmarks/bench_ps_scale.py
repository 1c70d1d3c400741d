"""A parameter server's sparse table at scale: cost per batch as the table grows, lookups, memory.

    python benchmarks/bench_ps_scale.py [--rows 10000000] [--batch 5000] [--dim 16] [--runs 3]
    python benchmarks/bench_ps_scale.py --candidates [--sizes 100000 1000000 10000000]

One in-process server (async) holding one table of ``--dim`` float32 with Adagrad (its moment: one more
array of the same shape), its rows initialised by a constant (a random initializer draws each new row with
its own generator, a cost per id apart from the table's storage). Per run, in a fresh server:

1. a stream of pushes of ``--batch`` new ids each (in a random order) until the table holds ``--rows``
   rows: the median time of the last 20 batches over that of the first 20 (goal <= 1.3x), the first batch
   untimed (it compiles the optimizer's plan);
2. pulls of ``--batch`` known ids (random) against a numpy gather of as many random rows from a
   preallocated ``[rows, dim]`` array (goal <= 2x);
3. the peak resident memory of the stream (above what the process held before) over the bytes of the
   values and the optimizer state.

Prints each ratio's median and range over ``--runs`` runs. ``--candidates`` measures the id indexes instead:
inserting ``--batch`` new ids into, and looking up ``--batch`` known ids in, an index of each of ``--sizes``
ids: blockir's :class:`~blockir.distributed.index.IdIndex`, a Python dict (the index before it), and pandas'
``Index.get_indexer`` where pandas is installed (an index is immutable: an insertion builds a new one).
"""

from __future__ import annotations

import argparse
import statistics
import time
from collections.abc import Callable
from typing import Any

import numpy as np

import blockir as bir
from blockir.distributed.index import IdIndex
from blockir.distributed.server import ParameterServer
from blockir.passes.distribute import split

TABLE = "embedding_0.w_0"


def server(height: int, dim: int) -> ParameterServer:
    main, startup = bir.Program(), bir.Program()
    with bir.program_guard(main, startup), bir.unique_name.guard():
        ids = bir.layers.data("ids", [-1, 1], dtype="int64")
        init = bir.ParamAttr(initializer=bir.initializer.Constant(0.1))
        emb = bir.layers.embedding(ids, size=[height, dim], is_sparse=True, param_attr=init)
        bir.optimizer.Adagrad(0.1).minimize(bir.layers.mean(emb))
    return ParameterServer(0, split(main, 1, 1), startup, "async")


def rss_now() -> int:
    """This process's resident bytes now."""
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * 4096


def rss_peak_reset() -> None:
    """Start counting the peak resident memory from now (Linux: ``clear_refs`` 5 resets VmHWM)."""
    with open("/proc/self/clear_refs", "w") as f:
        f.write("5")


def rss_peak() -> int:
    with open("/proc/self/status") as f:
        line = next(x for x in f if x.startswith("VmHWM:"))
    return int(line.split()[1]) * 1024


def median_time(work: Callable[[], object], repeat: int, before: Callable[[], object] = lambda: None) -> float:
    """The median wall time of ``repeat`` calls of ``work``, each after an untimed call of ``before``."""
    times = []
    for _ in range(repeat):
        before()
        start = time.perf_counter()
        work()
        times.append(time.perf_counter() - start)
    return statistics.median(times)


def one_run(args: argparse.Namespace, seed: int) -> dict[str, float]:
    rng = np.random.default_rng(seed)
    order = rng.permutation(args.rows).astype(np.int64)
    grad = np.full((args.batch, args.dim), 0.01, np.float32)
    rss_peak_reset()
    before = rss_now()
    srv = server(args.rows, args.dim)
    srv.push(0, {}, {TABLE: (order[: args.batch], grad)})  # untimed: compiles the optimizer's plan
    times = []
    for start in range(args.batch, args.rows - args.batch + 1, args.batch):
        ids = order[start : start + args.batch]
        began = time.perf_counter()
        srv.push(0, {}, {TABLE: (ids, grad)})
        times.append(time.perf_counter() - began)
    peak = rss_peak() - before
    data = 2 * args.rows * args.dim * 4  # the rows and Adagrad's moment
    known = order[: (len(times) + 1) * args.batch]
    table = np.full((args.rows, args.dim), 0.1, np.float32)
    pulls, gathers = [], []
    for _ in range(args.lookups):  # alternating, so that both see the machine as it is
        query, rows = rng.choice(known, args.batch), rng.integers(0, args.rows, args.batch)
        pulls.append(median_time(lambda q=query: srv.pull_sparse(TABLE, q), 1))
        gathers.append(median_time(lambda r=rows: table[r], 1))
    lookup, gather = statistics.median(pulls), statistics.median(gathers)
    first, last = statistics.median(times[:20]), statistics.median(times[-20:])
    print(
        f"  run {seed}: {len(times)} batches, first 20 {first * 1e3:.2f} ms, last 20 {last * 1e3:.2f} ms "
        f"({args.batch / last:,.0f} new ids/s); pull {lookup * 1e3:.3f} ms, gather {gather * 1e3:.3f} ms; "
        f"peak RSS +{peak / 2**20:,.0f} MiB for {data / 2**20:,.0f} MiB of rows and state"
    )
    return {"growth": last / first, "lookup": lookup / gather, "memory": peak / data, "rate": args.batch / last}


def scale(args: argparse.Namespace) -> None:
    print(
        f"one server, a table of {args.dim} float32 with Adagrad, batches of {args.batch:,} new ids up to "
        f"{args.rows:,} rows, {args.runs} runs"
    )
    runs = [one_run(args, seed) for seed in range(args.runs)]

    def summary(key: str) -> str:
        values = [r[key] for r in runs]
        return f"{statistics.median(values):.2f}x ({min(values):.2f} - {max(values):.2f})"

    print(f"  last 20 batches / first 20          {summary('growth')}, goal <= 1.3x")
    print(f"  pull of {args.batch:,} known ids / numpy gather {summary('lookup')}, goal <= 2x")
    print(f"  peak RSS / bytes of rows and state  {summary('memory')}")
    print(f"  new ids/s at the end                {statistics.median(r['rate'] for r in runs):,.0f}")


def candidates(args: argparse.Namespace) -> None:
    """Insert ``--batch`` new ids into, and look up ``--batch`` known ids in, indexes of each size."""
    try:
        import pandas as pd  # not a dependency: measured where it is installed
    except ImportError:
        pd = None
    rng = np.random.default_rng(0)
    print(f"insert {args.batch:,} new ids / look up {args.batch:,} known ids, median of {args.runs} runs (ms)")
    for size in args.sizes:
        ids = rng.permutation(2 * size)[:size].astype(np.int64)
        new = np.arange(2 * size, 2 * size + args.batch, dtype=np.int64)
        known = ids[rng.integers(0, size, args.batch)]
        for name, (insert, find, per_id) in measure(ids, new, known, args.runs, pd).items():
            extra = f", {per_id:.1f} bytes per id" if per_id == per_id else ""
            print(f"  {size:>12,} {name:<16} insert {insert * 1e3:8.2f}  look up {find * 1e3:8.3f}{extra}")


def measure(ids: np.ndarray, new: np.ndarray, known: np.ndarray, runs: int, pd: Any) -> dict[str, tuple[float, ...]]:
    """Per index: the time to insert ``new`` into one holding ``ids``, to look up ``known``, its bytes per id."""
    index = IdIndex()
    index.add(ids)
    out: dict[str, tuple[float, ...]] = {
        "IdIndex (numpy)": (
            median_time(lambda: index.add(new), runs, lambda: index.remove(new)),
            median_time(lambda: index.find(known), runs),
            index.nbytes / len(index),
        )
    }
    table: dict[int, int] = dict(zip(ids.tolist(), range(len(ids)), strict=True))

    def dict_remove() -> None:
        for i in new.tolist():
            table.pop(i, None)

    out["dict"] = (
        median_time(lambda: table.update(zip(new.tolist(), range(len(ids), len(ids) + len(new)))), runs, dict_remove),
        median_time(lambda: np.fromiter(map(table.get, known.tolist()), np.int64, len(known)), runs),
        float("nan"),
    )
    if pd is not None:
        pindex = pd.Index(ids)
        pindex.get_indexer(known)  # builds its hash table
        out["pandas Index"] = (
            median_time(lambda: pindex.append(pd.Index(new)).get_indexer(new), runs),
            median_time(lambda: pindex.get_indexer(known), runs),
            float("nan"),
        )
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", type=int, default=10_000_000)
    parser.add_argument("--batch", type=int, default=5000)
    parser.add_argument("--dim", type=int, default=16)
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--lookups", type=int, default=50, help="pulls (and gathers) timed per run")
    parser.add_argument("--candidates", action="store_true", help="measure the id indexes instead")
    parser.add_argument("--sizes", type=int, nargs="+", default=[100_000, 1_000_000, 10_000_000])
    args = parser.parse_args()
    if args.rows < 40 * args.batch:
        parser.error("--rows must hold at least 40 batches (the first 20 and the last 20)")
    candidates(args) if args.candidates else scale(args)


if __name__ == "__main__":
    main()
