"""The parameter server on paper: instances/s and memory of W workers x S servers, from costs measured on 1 x 1.

    python benchmarks/ps_model.py [--batches 60] [--batch 5000] [--height 10000000] [--dim 16]
        [--chart docs/img/ps_scale.png]

**Measured** (one process, the in-process backend, async): workers train a CTR-like program (an embedding of
``--dim`` float32 looked up by ``--batch`` ids drawn from a Zipf(1.1) distribution over ``--height`` ids,
Adagrad, a linear layer on it) for ``--batches`` batches each. The costs per batch are split by role: a
worker's thread (its program, the communicator's calls it makes), the server's methods (timed on the pool
threads that run them: a fixed cost per request, and costs per id pulled or pushed), the rest of the
process (the communicators' threads), and the bytes exchanged. The model's parameters are fitted on the
1 x 1 run alone.

**Model.** A round is one batch of every worker. Its time is the largest of:

- a worker's: its thread's CPU per batch, or its communicator's thread's if larger (the two run side by side);
- a server's: its requests (2 per worker and batch) at the fixed cost, plus its share of the batch's
  distinct ids at the cost per id, times the hot-shard factor ``h(S)``: the busiest server's distinct ids over
  the mean, sampled from the Zipf ids (the rule ``id % S``); a server is one Python process whose requests
  hold the GIL and a table's updates its lock, so its work is one core's;
- a node's CPU: the CPU of the roles it runs over its cores (on this machine, one process: over the
  parallelism the 1 x 1 run reached, the GIL included);
- a node's link: the bytes its roles send and receive over ``B`` Gbit/s (none within one process).

instances/s = W x batch / round time. Memory: a server holds rows at goal 3's bound (1.3 x the bytes of the
values and the optimizer state + 24 bytes per id + 500 MB).

Prints the fitted parameters, the 2 x 1 and 2 x 2 runs measured against the prediction (goal: within 15%),
the predicted curve up to 64 workers x 8 servers on 16-core nodes at 10 GbE (servers on nodes of their own,
workers packed on the others), the bound that stops scaling, and the table a 128 GB server holds; with
``--chart``, the curve as a PNG (matplotlib).
"""

from __future__ import annotations

import argparse
import functools
import statistics
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, replace
from typing import Any

import numpy as np
from bench_ps_scale import TABLE, fleet_role, server  # this directory's: the same program and server

from blockir.distributed import fleet
from blockir.distributed.launch import launch
from blockir.distributed.server import ParameterServer

ZIPF = 1.1


@dataclass(frozen=True)
class Costs:
    """Per-batch costs of one worker, and per-request and per-id costs of a server (seconds, bytes)."""

    worker: float  # a worker's thread CPU per batch
    side: float  # the rest of the process's CPU per batch (communicator threads)
    request: float  # a server's CPU per request (pull or push), whatever it carries
    per_id: float  # a server's CPU per distinct id of a batch (index, gather, optimizer, initializer)
    ids: float  # distinct ids per batch
    bytes: float  # bytes exchanged per batch (ids, pulled rows, pushed gradients)
    parallelism: float  # the process's CPU over its wall time in the 1 x 1 run (one process: its cores' use)


@dataclass(frozen=True)
class Cluster:
    workers: int
    servers: int
    cores: int  # per node
    gbit: float  # each node's link; 0: one process (no network)
    one_process: bool = False


def zipf_ids(rng: np.random.Generator, height: int, size: int) -> np.ndarray:
    """``size`` ids of ``height`` with Zipf(1.1) frequencies (rank r: r ** -1.1), ranks scattered over the ids."""
    ranks = rng.zipf(ZIPF, size * 2)
    ranks = ranks[ranks <= height][:size]
    while ranks.size < size:
        more = rng.zipf(ZIPF, size)
        ranks = np.concatenate([ranks, more[more <= height]])[:size]
    return ((ranks - 1) * 2654435761 % height).astype(np.int64)  # a fixed scatter of the ranks over the ids


@functools.cache
def hot_shard(servers: int, height: int, batch: int, samples: int = 40) -> float:
    """The busiest server's distinct ids per batch over the mean, ids by the rule ``id % servers``."""
    rng = np.random.default_rng(servers)
    ratios = []
    for _ in range(samples):
        counts = np.bincount(np.unique(zipf_ids(rng, height, batch)) % servers, minlength=servers)
        ratios.append(counts.max() / counts.mean())
    return float(statistics.mean(ratios))


class _Meter:
    """CPU seconds of the server methods, on whichever threads run them."""

    def __init__(self) -> None:
        self.requests = 0
        self.cpu = 0.0
        self.lock = threading.Lock()


def _metered(meter: _Meter, method: Callable[..., Any]) -> Callable[..., Any]:
    @functools.wraps(method)
    def timed(self: ParameterServer, *args: Any, **kwargs: Any) -> Any:
        start = time.thread_time()
        try:
            return method(self, *args, **kwargs)
        finally:
            spent = time.thread_time() - start
            with meter.lock:
                meter.requests += 1
                meter.cpu += spent

    return timed


def measure(args: argparse.Namespace, workers: int, servers: int) -> dict[str, float]:
    """A run of ``workers`` x ``servers`` in this process: instances/s, and the per-batch costs by role."""
    meter = _Meter()
    originals = {name: getattr(ParameterServer, name) for name in ("pull_sparse", "push")}
    rng = np.random.default_rng(workers * 10 + servers)
    feeds = [
        zipf_ids(rng, args.height, args.batch * (args.batches + 1)).reshape(-1, args.batch, 1) for _ in range(workers)
    ]
    took: dict[int, tuple[float, float, float, float]] = {}

    def script() -> None:
        role = fleet_role(args.height, args.dim, dense=True)
        if role is None:
            return
        exe, loss = role
        k = fleet.worker_index()
        exe.run(fleet.main_program, feed={"ids": feeds[k][0]}, fetch_list=[loss])  # untimed: compiles the plans
        fleet.barrier_worker()
        wall, cpu, thread = time.perf_counter(), time.process_time(), time.thread_time()
        sent = fleet.communicator().stats["bytes_sent"]
        for batch in feeds[k][1:]:
            exe.run(fleet.main_program, feed={"ids": batch}, fetch_list=[loss])
        fleet.communicator().stop()  # every push applied
        took[k] = (
            time.perf_counter() - wall,
            time.process_time() - cpu,
            time.thread_time() - thread,
            fleet.communicator().stats["bytes_sent"] - sent,
        )
        fleet.stop_worker()

    try:
        for name, method in originals.items():
            setattr(ParameterServer, name, _metered(meter, method))
        result = launch(script, servers, workers, timeout=3600)
    finally:
        for name, method in originals.items():
            setattr(ParameterServer, name, method)
    if not result.ok:
        raise SystemExit(f"{workers} x {servers} failed: {result.failures}")
    batches = workers * args.batches
    wall = max(t[0] for t in took.values())
    process = max(t[1] for t in took.values())  # the process's CPU over the slowest worker's window
    thread = statistics.mean(t[2] for t in took.values()) / args.batches
    ids = statistics.mean(np.unique(b).size for f in feeds for b in f[1:])
    return {
        "ips": batches * args.batch / wall,
        "worker": thread,
        "server": meter.cpu / batches,
        "requests": meter.requests / batches,
        "side": max(0.0, process / batches - thread - meter.cpu / batches),
        "ids": ids,
        "bytes": statistics.mean(t[3] for t in took.values()) / args.batches,
        "parallelism": process / wall,
    }


def fit(run: dict[str, float], args: argparse.Namespace) -> Costs:
    """The model's parameters from a 1 x 1 run: the server's CPU split into a cost per request and one per id by
    a second measurement of the server alone (a batch of ``--batch`` ids against a batch of one)."""
    srv = server(args.height, args.dim)
    rng = np.random.default_rng(0)
    one = np.zeros((1, args.dim), np.float32)

    def cpu_of(size: int) -> float:
        times = []
        for _ in range(20):
            batch = np.unique(zipf_ids(rng, args.height, size))
            start = time.process_time()
            srv.pull_sparse(TABLE, batch)
            srv.push(0, {}, {TABLE: (batch, np.repeat(one, len(batch), 0))})
            times.append((time.process_time() - start) / 2)
        return statistics.median(times)

    cpu_of(1)  # compiles the optimizer's plan
    small, large = cpu_of(1), cpu_of(args.batch)
    distinct = statistics.mean(np.unique(zipf_ids(rng, args.height, args.batch)).size for _ in range(20))
    per_id = max(0.0, (large - small) / max(distinct - 1, 1))
    request = max(0.0, run["server"] / run["requests"] - per_id * run["ids"] / run["requests"])
    return Costs(run["worker"], run["side"], request, per_id, run["ids"], run["bytes"], run["parallelism"])


def predict(costs: Costs, cluster: Cluster, height: int, batch: int) -> tuple[float, str]:
    """Instances/s of ``cluster`` and the bound that sets it."""
    w, s = cluster.workers, cluster.servers
    hot = hot_shard(s, height, batch) if s > 1 else 1.0
    server = 2 * w * costs.request + hot * w * costs.ids * costs.per_id / s  # the busiest server's, per round
    bounds = {"worker": max(costs.worker, costs.side), "server": server}
    if cluster.one_process:  # every role in one process: its CPU over the parallelism it reaches
        total = w * (costs.worker + costs.side) + 2 * w * s * costs.request + w * costs.ids * costs.per_id
        bounds["CPU"] = total / min(costs.parallelism, cluster.cores)
    else:
        per_node = max(1, int(cluster.cores // (1 + costs.side / costs.worker)))  # workers a node holds
        nodes = -(-w // per_node)
        bounds["CPU"] = (w * (costs.worker + costs.side)) / (nodes * cluster.cores)
        bytes_per_s = cluster.gbit * 1e9 / 8
        bounds["network (worker node)"] = min(w, per_node) * costs.bytes / bytes_per_s
        bounds["network (server)"] = hot * w * costs.bytes / s / bytes_per_s
    limit = max(bounds, key=lambda k: bounds[k])
    return w * batch / bounds[limit], limit


def rows_per_server(memory: float, dim: int, states: int) -> int:
    """Rows a server of ``memory`` bytes holds at goal 3's bound (``states`` per-row optimizer states)."""
    return int((memory - 500e6) / (1.3 * dim * 4 * (1 + states) + 24))


def replace_args(args: argparse.Namespace, **changes: Any) -> argparse.Namespace:
    return argparse.Namespace(**{**vars(args), **changes})


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--batches", type=int, default=60, help="batches per worker in each measured run")
    parser.add_argument("--batch", type=int, default=5000)
    parser.add_argument("--height", type=int, default=10_000_000)
    parser.add_argument("--dim", type=int, default=16)
    parser.add_argument("--chart", help="write the predicted curve here (a PNG)")
    args = parser.parse_args()
    here = Cluster(1, 1, 2, 0.0, one_process=True)
    measure(replace_args(args, batches=3), 1, 1)  # untimed: the first launch of the process warms it up
    one = measure(args, 1, 1)
    costs = fit(one, args)
    print(
        f"fitted on 1 x 1 ({one['ips']:,.0f} instances/s measured): "
        + ", ".join(
            f"{k} {v * 1e3:.3f} ms" if k in ("worker", "side", "request") else f"{k} {v:.3g}"
            for k, v in costs.__dict__.items()
        )
    )
    print("this machine (one process, in-process backend): measured against predicted")
    for w, s in ((1, 1), (2, 1), (2, 2)):
        run = one if (w, s) == (1, 1) else measure(args, w, s)
        guess, limit = predict(costs, replace(here, workers=w, servers=s), args.height, args.batch)
        print(
            f"  {w} x {s}: measured {run['ips']:>9,.0f}, predicted {guess:>9,.0f} ({limit} bound), "
            f"{guess / run['ips'] - 1:+.0%}"
        )
    print("predicted: 16-core nodes at 10 GbE, servers on nodes of their own (instances/s, the bound)")
    curve: dict[int, list[tuple[int, float]]] = {}
    for s in (1, 2, 4, 8):
        for w in (1, 2, 4, 8, 16, 32, 64):
            ips, limit = predict(costs, Cluster(w, s, 16, 10.0), args.height, args.batch)
            curve.setdefault(s, []).append((w, ips))
            print(f"  {w:>2} x {s}: {ips:>12,.0f}  {limit}")
    print(
        f"hot shard (Zipf {ZIPF}): busiest server / mean distinct ids per batch: "
        + ", ".join(f"{s} servers {hot_shard(s, args.height, args.batch):.2f}x" for s in (2, 4, 8))
    )
    rows = rows_per_server(128 * 1e9, args.dim, 1)
    print(f"a 128 GB server holds {rows:,} rows of {args.dim} float32 with Adagrad ({rows * 8:,} over 8 servers)")
    if args.chart:
        import matplotlib  # the dev extra's

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt

        fig, ax = plt.subplots(figsize=(6, 4))
        for s, points in curve.items():
            ax.plot([w for w, _ in points], [ips for _, ips in points], marker="o", label=f"{s} server(s)")
        ax.set(
            xscale="log",
            yscale="log",
            xlabel="workers",
            ylabel="instances/s (predicted)",
            title="blockir parameter server: 16-core nodes, 10 GbE",
        )
        ax.legend()
        fig.tight_layout()
        fig.savefig(args.chart, dpi=100)
        print(f"chart: {args.chart}")


if __name__ == "__main__":
    main()
