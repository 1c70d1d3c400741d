"""A parameter server's sparse table at scale: cost per batch as the table grows, lookups, memory (issue 33).

    python benchmarks/bench_ps_scale.py [--rows 10000000] [--batch 5000] [--dim 16] [--runs 3]
    python benchmarks/bench_ps_scale.py --fleet [--fleet-rows 1000000] [--profile FILE]
    python benchmarks/bench_ps_scale.py --candidates [--sizes 100000 1000000 10000000]

One in-process server (async) holding one table of ``--dim`` float32 with Adagrad (its moment: one more
array of the same shape), its rows initialised by a uniform initializer (drawn a batch at a time, each row
from its id's own stream). Per run, in a fresh server:

1. a stream of pushes of ``--batch`` new ids each (in a random order) until the table holds ``--rows``
   rows: the median time of the last 20 batches over that of the first 20 (goal <= 1.3x), the first batch
   untimed (it compiles the optimizer's plan);
2. pulls of ``--batch`` known ids (random) against a numpy gather of as many random rows from a
   preallocated ``[rows, dim]`` array (goal <= 2x);
3. the peak resident memory of the stream (above what the process held before) over the bytes of the
   values and the optimizer state, and over goal 3's bound: 1.3x those + 24 bytes per id + 500 MB;
4. the same stream into a server whose table has ``CountFilterEntry(2)``, each batch pushed twice (its first
   sighting, then the one that admits it): its time over goal 1's (goal <= 1.5x).

Prints each ratio's median and range over ``--runs`` runs. ``--fleet`` streams new ids through ``fleet``
instead (goal 1's second half: >= 200,000 new ids/s; :func:`fleet_stream`). ``--candidates`` measures the id
indexes instead: inserting ``--batch`` new ids into, and looking up ``--batch`` known ids in, an index of each
of ``--sizes`` ids: blockir's :class:`~blockir.distributed.index.IdIndex`, a Python dict (the index before
it), and pandas' ``Index.get_indexer`` where pandas is installed (an index is immutable: an insertion builds a
new one).
"""

from __future__ import annotations

import argparse
import cProfile
import statistics
import time
from collections.abc import Callable
from typing import Any

import numpy as np

import blockir as bir
from blockir.distributed import CountFilterEntry, fleet
from blockir.distributed.index import IdIndex
from blockir.distributed.launch import launch
from blockir.distributed.server import ParameterServer
from blockir.passes.distribute import split

TABLE = "embedding_0.w_0"


def server(height: int, dim: int, entry: object = None) -> ParameterServer:
    main, startup = bir.Program(), bir.Program()
    with bir.program_guard(main, startup), bir.unique_name.guard():
        ids = bir.layers.data("ids", [-1, 1], dtype="int64")
        init = bir.ParamAttr(initializer=bir.initializer.Uniform(-0.1, 0.1))
        emb = bir.layers.embedding(ids, size=[height, dim], is_sparse=True, param_attr=init, entry=entry)  # type: ignore[arg-type]
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


def stream(srv: ParameterServer, order: np.ndarray, batch: int, dim: int, sightings: int = 1) -> list[float]:
    """Push ``order`` to ``srv`` in batches of ``batch`` ids, each batch ``sightings`` times in a row; the seconds
    of each batch's pushes, the first batch's left out (it compiles the optimizer's plan)."""
    grad = np.full((batch, dim), 0.01, np.float32)
    times = []
    for start in range(0, len(order) - batch + 1, batch):
        ids = order[start : start + batch]
        began = time.perf_counter()
        for _ in range(sightings):
            srv.push(0, {}, {TABLE: (ids, grad)})
        times.append(time.perf_counter() - began)
    return times[1:]


def lookups(
    srv: ParameterServer, known: np.ndarray, rng: np.random.Generator, args: argparse.Namespace
) -> tuple[float, float]:
    """The median time of a pull of ``--batch`` of the ``known`` ids, and of a numpy gather of as many random rows
    from a preallocated ``[rows, dim]`` array, timed alternately (so that both see the machine as it is)."""
    table = np.full((args.rows, args.dim), 0.1, np.float32)
    pulls, gathers = [], []
    for _ in range(args.lookups):
        query, rows = rng.choice(known, args.batch), rng.integers(0, args.rows, args.batch)
        pulls.append(median_time(lambda q=query: srv.pull_sparse(TABLE, q), 1))
        gathers.append(median_time(lambda r=rows: table[r], 1))
    return statistics.median(pulls), statistics.median(gathers)


def one_run(args: argparse.Namespace, seed: int) -> dict[str, float]:
    rng = np.random.default_rng(seed)
    order = rng.permutation(args.rows).astype(np.int64)
    rss_peak_reset()
    before = rss_now()
    srv = server(args.rows, args.dim)
    times = stream(srv, order, args.batch, args.dim)
    peak = rss_peak() - before
    data = 2 * args.rows * args.dim * 4  # the rows and Adagrad's moment
    bound = 1.3 * data + 24 * args.rows + 500e6  # goal 3
    lookup, gather = lookups(srv, order[: (len(times) + 1) * args.batch], rng, args)
    del srv  # before the next stream's server
    filtered = stream(server(args.rows, args.dim, CountFilterEntry(2)), order, args.batch, args.dim, sightings=2)
    first, last = statistics.median(times[:20]), statistics.median(times[-20:])
    print(
        f"  run {seed}: {len(times)} batches in {sum(times):.2f} s, first 20 {first * 1e3:.2f} ms, last 20 "
        f"{last * 1e3:.2f} ms ({args.batch / last:,.0f} new ids/s); pull {lookup * 1e3:.3f} ms, gather "
        f"{gather * 1e3:.3f} ms; peak RSS +{peak / 2**20:,.0f} MiB for {data / 2**20:,.0f} MiB of rows and "
        f"state (bound {bound / 2**20:,.0f} MiB); CountFilterEntry(2), each batch twice: {sum(filtered):.2f} s"
    )
    return {
        "growth": last / first,
        "lookup": lookup / gather,
        "memory": peak / data,
        "bound": peak / bound,
        "entry": sum(filtered) / sum(times),
        "rate": args.batch / last,
        "ids/s": len(times) * args.batch / sum(times),
    }


def scale(args: argparse.Namespace) -> None:
    print(
        f"one server, a table of {args.dim} float32 (a uniform initializer) with Adagrad, batches of "
        f"{args.batch:,} new ids up to {args.rows:,} rows, {args.runs} runs"
    )
    runs = [one_run(args, seed) for seed in range(args.runs)]

    def summary(key: str) -> str:
        values = [r[key] for r in runs]
        return f"{statistics.median(values):.2f}x ({min(values):.2f} - {max(values):.2f})"

    print(f"  goal 1: last 20 batches / first 20          {summary('growth')}, goal <= 1.3x")
    print(f"  goal 2: pull of {args.batch:,} known ids / numpy gather {summary('lookup')}, goal <= 2x")
    print(f"  goal 3: peak RSS / bytes of rows and state  {summary('memory')}")
    print(f"          peak RSS / (1.3 x those + 24 B/id + 500 MB) {summary('bound')}, goal <= 1x")
    print(f"  goal 4: CountFilterEntry(2) stream / goal 1's {summary('entry')}, goal <= 1.5x")
    print(
        f"  new ids/s over the stream {statistics.median(r['ids/s'] for r in runs):,.0f}, at its end "
        f"{statistics.median(r['rate'] for r in runs):,.0f}"
    )


def fleet_role(height: int, dim: int, dense: bool = False) -> tuple[bir.Executor, Any] | None:
    """A role of a fleet script (async, every role a thread of this process): the program (a lookup in a table of
    ``height`` x ``dim`` float32, a uniform initializer, Adagrad; ``dense``: a linear layer on it), minimized; a
    server serves until the workers stop (None), a worker runs its own startup program and ``init_worker`` (its
    executor and loss)."""
    fleet.init()
    ids = bir.layers.data("ids", [-1, 1], dtype="int64")
    init = bir.ParamAttr(initializer=bir.initializer.Uniform(-0.1, 0.1))
    emb = bir.layers.embedding(ids, size=[height, dim], is_sparse=True, param_attr=init)
    loss = bir.layers.mean(bir.layers.fc(emb, 1) if dense else emb)
    strategy = fleet.DistributedStrategy()
    strategy.a_sync = True
    fleet.distributed_optimizer(bir.optimizer.Adagrad(0.1), strategy).minimize(loss)
    if fleet.is_server():
        fleet.init_server()
        fleet.run_server()
        return None
    exe = bir.Executor("cpu")
    exe.run(bir.default_startup_program())
    fleet.init_worker()
    return exe, loss


def fleet_stream(args: argparse.Namespace, seed: int, profile: str | None = None) -> float:
    """New ids/s through ``fleet``: one worker and one server in this process (the in-process backend, async),
    the worker running the training program (a lookup of ``--batch`` new ids, Adagrad) on batches of new ids
    until the table holds ``--fleet-rows`` rows; the first batch untimed, the communicator's last pushes timed
    (``stop`` waits for them); also the new ids per second of the process's CPU time (what a loaded machine
    changes least). With ``profile``, the worker's thread runs under cProfile, its statistics
    written there."""
    order = np.random.default_rng(seed).permutation(args.fleet_rows).astype(np.int64).reshape(-1, args.batch, 1)
    took: list[float] = []

    def script() -> None:
        role = fleet_role(args.fleet_rows, args.dim)
        if role is None:
            return
        exe, loss = role
        exe.run(fleet.main_program, feed={"ids": order[0]}, fetch_list=[loss])  # untimed: compiles the plans

        def stream() -> None:
            for batch in order[1:]:
                exe.run(fleet.main_program, feed={"ids": batch}, fetch_list=[loss])
            fleet.communicator().stop()  # every push applied

        began, cpu = time.perf_counter(), time.process_time()
        if profile is None:
            stream()
        else:
            cProfile.runctx("stream()", globals(), {"stream": stream}, profile)
        took.extend([time.perf_counter() - began, time.process_time() - cpu])
        fleet.stop_worker()

    result = launch(script, 1, 1, timeout=3600)
    if not result.ok:
        raise SystemExit(f"the fleet stream failed: {result.failures}")
    rate = (len(order) - 1) * args.batch / took[0]
    print(
        f"  fleet run {seed}: {len(order) - 1} batches in {took[0]:.2f} s, {rate:,.0f} new ids/s; the process's CPU "
        f"time (worker and server threads) {took[1]:.2f} s: {(len(order) - 1) * args.batch / took[1]:,.0f} new ids "
        f"per CPU second"
    )
    return rate


def through_fleet(args: argparse.Namespace) -> None:
    print(
        f"fleet (worker and server in one process, in-process backend, async): a table of {args.dim} float32 "
        f"(a uniform initializer) with Adagrad, batches of {args.batch:,} new ids up to {args.fleet_rows:,} rows"
    )
    rates = [fleet_stream(args, seed, args.profile) for seed in range(args.runs)]
    print(
        f"  new ids/s through fleet  {statistics.median(rates):,.0f} ({min(rates):,.0f} - {max(rates):,.0f}), "
        "goal >= 200,000"
    )


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
    parser.add_argument("--fleet", action="store_true", help="measure the stream through fleet instead")
    parser.add_argument("--fleet-rows", type=int, default=1_000_000, help="the fleet stream's rows")
    parser.add_argument("--profile", help="with --fleet: write the worker's cProfile statistics to this file")
    parser.add_argument("--sizes", type=int, nargs="+", default=[100_000, 1_000_000, 10_000_000])
    args = parser.parse_args()
    if args.rows < 40 * args.batch:
        parser.error("--rows must hold at least 40 batches (the first 20 and the last 20)")
    if args.candidates:
        candidates(args)
    elif args.fleet:
        through_fleet(args)
    else:
        scale(args)


if __name__ == "__main__":
    main()
