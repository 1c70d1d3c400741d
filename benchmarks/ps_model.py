"""The parameter server on paper: instances/s and memory of W workers x S servers, from costs measured on 1 x 1.

    unshare -n -p -f --mount-proc bash -c 'ip link set lo up; exec python benchmarks/ps_model.py \
        [--batches 60] [--batch 5000] [--height 10000000] [--dim 16] [--rounds 3] [--chart docs/img/ps_scale.png]'

**Measured** (every role a process of its own: the Ray backend, on a local cluster on loopback, inside a
loopback-only network namespace as docs/distributed.md's recipe has it; async): workers train a CTR-like
program (``ps_model_role.py``: an embedding of ``--dim`` float32 looked up by ``--batch`` ids drawn from a
Zipf(1.1) distribution over ``--height`` ids, Adagrad, a linear layer on it) for ``--batches`` batches each.
Every process's CPU is counted over the timed batches (``proc_cpu.py``, from ``/proc``): per batch, a worker's
process less its communicator's thread, the communicator's thread, the servers' processes, and the rest (this
process and Ray's daemons, which the model counts as cores kept busy); the requests a server answers per
batch, and the bytes exchanged. The model's parameters are fitted on the 1 x 1 run alone.

**Model.** A round is one batch of every worker. Its time is the largest of:

- a worker's: its process's CPU per batch, or its communicator's thread's if larger (the two run side by side);
- a server's: its requests (per worker and batch, as many as on 1 x 1) at the cost per request, plus its share
  of the batch's distinct ids at the cost per id (the server's CPU split into the two by a second 1 x 1 run on
  batches of a quarter of ``--batch`` ids: each run's server CPU per batch is requests x the one + distinct ids
  x the other), times the hot-shard factor ``h(S)``: the busiest server's distinct
  ids over the mean, sampled from the Zipf ids (the rule ``id % S``); a server is one Python process whose
  requests hold the GIL and a table's updates its lock, so its work is one core's;
- a node's CPU: on this machine, one node of 2 cores that runs every role, the workers' batches queue for its
  cores (less those Ray's daemons and other processes keep busy): mean value analysis of the closed network, a
  batch ``D`` CPU seconds (its worker's, its communicator's, its servers' share), ``q`` cores at once (1 x 1's
  ``D`` over its seconds per batch, at least 1) and ``Z`` seconds of waiting beyond (where 1 x 1's batch took
  longer than its CPU); on a cluster, the CPU of the roles a node runs over its cores, and a batch's latency;
- a node's link: the bytes its roles send and receive over ``B`` Gbit/s (none on one node).

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
import json
import os
import statistics
import tempfile
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

import numpy as np

from blockir.distributed.launch import launch

ZIPF = 1.1
ROLE = Path(__file__).resolve().parent / "ps_model_role.py"
SETUPS = ((1, 1), (2, 1), (2, 2))  # workers x servers measured on this machine


@dataclass(frozen=True)
class Costs:
    """Per-batch costs of one worker, and per-request and per-id costs of a server (seconds, bytes)."""

    worker: float  # a worker's process CPU per batch, its communicator's thread left out
    side: float  # its communicator's thread's CPU per batch
    request: float  # a server's CPU per request, whatever it carries
    per_id: float  # a server's CPU per distinct id of a batch (index, gather, optimizer, initializer)
    requests: float  # requests a server answers per batch of a worker
    ids: float  # distinct ids per batch
    bytes: float  # bytes a worker sends per batch (ids, pushed gradients)
    daemons: float  # the cores the rest keeps busy (Ray's daemons, the launcher): its CPU over the run's seconds
    parallel: float  # the cores a worker's batch keeps busy at once, its roles side by side (at least 1)
    waits: float  # a batch's seconds on 1 x 1 beyond its CPU on those cores (the exchanges' latency)


@dataclass(frozen=True)
class Cluster:
    workers: int
    servers: int
    cores: int  # per node
    gbit: float  # each node's link; 0: one node (no network)
    one_node: bool = False  # every role on one node (this machine)
    others: float = 0.0  # cores of the node kept busy by processes outside the run (one node: measured)


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


def measure(args: argparse.Namespace, workers: int, servers: int) -> dict[str, float]:
    """A run of ``workers`` x ``servers``, every role a Ray actor (``ps_model_role.py``): instances/s, and the
    per-batch costs by part."""
    with tempfile.TemporaryDirectory(prefix="ps-model-") as tmp:
        out = Path(tmp)
        role_args = [str(out), *map(str, (args.height, args.dim, args.batch, args.batches, os.getpid()))]
        result = launch(ROLE, servers, workers, role_args, backend="ray", timeout=3600)
        if not result.ok:
            raise SystemExit(f"{workers} x {servers} failed: {result.failures}")
        reports = [json.loads((out / f"worker{k}.json").read_text()) for k in range(workers)]
        served = [json.loads((out / f"server{k}.json").read_text()) for k in range(servers)]
    cpu = {int(pid): seconds for pid, seconds in reports[0]["cpu"].items()}  # worker 0's: every process's
    mine, theirs = {r["pid"] for r in reports}, {r["pid"] for r in served}
    batches, window = workers * args.batches, reports[0]["window"]
    communicator = sum(r["communicator_cpu_s"] for r in reports)
    requests = sum(r["pushes"] + r["pulls"] for r in served)  # over the run: the untimed batch included
    return {
        "ips": batches * args.batch / window,
        "worker": (sum(cpu.get(pid, 0.0) for pid in mine) - communicator) / batches,
        "side": communicator / batches,
        "server": sum(cpu.get(pid, 0.0) for pid in theirs) / batches,
        "requests": requests / (servers * workers * (args.batches + 1)),
        "daemons": sum(seconds for pid, seconds in cpu.items() if pid not in mine | theirs) / window,
        "others": max(0.0, reports[0]["machine_cpu"] - sum(cpu.values())) / window,
        "latency": window / args.batches,  # seconds per round
        "ids": statistics.mean(r["ids"] for r in reports),
        "bytes": statistics.mean(r["bytes"] for r in reports),
    }


def fit(run: dict[str, float], small: dict[str, float]) -> Costs:
    """The model's parameters from 1 x 1 runs: ``run``, and ``small`` on batches of a quarter as many ids, which
    split a server's CPU per batch into a cost per request and one per distinct id (the two runs' CPU, each
    requests x the one + distinct ids x the other: two equations)."""
    shares = [[run["requests"], run["ids"]], [small["requests"], small["ids"]]]
    request, per_id = (max(0.0, float(x)) for x in np.linalg.solve(shares, [run["server"], small["server"]]))
    costs = Costs(
        run["worker"], run["side"], request, per_id, run["requests"], run["ids"], run["bytes"], run["daemons"], 1, 0
    )
    cores, demand = _cores(costs, Cluster(1, 1, os.cpu_count() or 2, 0.0, True, run["others"])), _demand(costs, 1)
    parallel = max(1.0, demand / run["latency"])  # a batch shorter than its CPU: its roles ran side by side
    waits = run["latency"] - _cycle(demand, parallel, cores, 0.0)  # one longer: it waited besides
    return replace(costs, parallel=parallel, waits=max(0.0, waits))


def _demand(costs: Costs, servers: int) -> float:
    """The CPU seconds of a worker's batch, all its roles' (its process, its communicator, the servers')."""
    return costs.worker + costs.side + servers * costs.requests * costs.request + costs.ids * costs.per_id


def _cores(costs: Costs, cluster: Cluster) -> float:
    """The cores of a node the run's roles have: what Ray's daemons and other processes leave."""
    return cluster.cores - costs.daemons - cluster.others


def _cycle(demand: float, parallel: float, cores: float, queue: float) -> float:
    """A batch's seconds on a node's ``cores``, the batch keeping ``parallel`` of them busy at once, its waits left
    out: the cores a multi-server station, by Seidmann's approximation (a queue at ``demand / cores`` behind
    ``queue`` batches, then a delay of what a batch alone takes beyond that, ``demand / min(parallel, cores)``)."""
    alone = demand / min(parallel, cores)
    return demand / cores * (1 + queue) + max(0.0, alone - demand / cores)


def closed_loop(workers: int, demand: float, waits: float, cores: float, parallel: float = 1.0) -> float:
    """Batches per second of ``workers`` workers on one node, each batch ``demand`` CPU seconds on the node's
    ``cores`` (``parallel`` of them at once) and ``waits`` seconds beyond (the exchanges' latency): exact mean
    value analysis of the closed network the workers' batches make, one worker at a time added."""
    queue = rate = 0.0
    for n in range(1, workers + 1):
        rate = n / (_cycle(demand, parallel, cores, queue) + waits)
        queue = rate * demand / cores * (1 + queue)
    return rate


def predict(costs: Costs, cluster: Cluster, height: int, batch: int) -> tuple[float, str]:
    """Instances/s of ``cluster`` and the bound that sets it."""
    w, s = cluster.workers, cluster.servers
    hot = hot_shard(s, height, batch) if s > 1 else 1.0
    per_server = costs.requests * costs.request  # per worker and batch, whatever the ids
    server = w * (per_server + hot * costs.ids * costs.per_id / s)  # the busiest server's, per round
    bounds = {"worker": max(costs.worker, costs.side), "server": server}
    cores = _cores(costs, cluster)
    if cluster.one_node:  # every role a process of one node: the workers' batches queue for its cores
        bounds["CPU and latency"] = w / closed_loop(w, _demand(costs, s), costs.waits, cores, costs.parallel)
    else:
        # a batch's: its worker's CPU, a server's answer (the servers answer side by side), as 1 x 1 overlapped
        # them, and the waits
        bounds["latency"] = (costs.worker + costs.side + server / w) / costs.parallel + costs.waits
        per_node = max(1, int(cores // (1 + costs.side / costs.worker)))  # workers a node holds
        nodes = -(-w // per_node)
        bounds["CPU"] = (w * (costs.worker + costs.side)) / (nodes * cores)
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
    parser.add_argument("--rounds", type=int, default=3, help="runs of each setup (the medians are compared)")
    parser.add_argument("--chart", help="write the predicted curve here (a PNG)")
    args = parser.parse_args()
    here = Cluster(1, 1, os.cpu_count() or 2, 0.0, one_node=True)
    import ray  # the dev extra's

    from blockir.distributed.ray_backend import NAMESPACE, loopback_env

    os.environ.update(loopback_env())
    with tempfile.TemporaryDirectory(prefix="ray-") as tmp:
        ray.init(
            num_cpus=here.cores,
            include_dashboard=False,
            _node_ip_address="127.0.0.1",
            namespace=NAMESPACE,
            _temp_dir=tmp,
            log_to_driver=False,
        )
        try:
            measure(replace_args(args, batches=3), 1, 1)  # untimed: the cluster's first actors warm it up
            runs: dict[tuple[int, int], list[dict[str, float]]] = {}
            small = []  # 1 x 1 on batches of a quarter of the ids: the server's cost per request and per id
            for r in range(args.rounds):  # alternating orders: a drift of the machine's load falls on each alike
                for setup in SETUPS if r % 2 == 0 else SETUPS[::-1]:
                    runs.setdefault(setup, []).append(measure(args, *setup))
                small.append(measure(replace_args(args, batch=args.batch // 4), 1, 1))
        finally:
            ray.shutdown()
    report(args, here, runs, small)


def _median(rounds: list[dict[str, float]]) -> dict[str, float]:
    return {k: statistics.median(r[k] for r in rounds) for k in rounds[0]}


def report(
    args: argparse.Namespace,
    here: Cluster,
    runs: dict[tuple[int, int], list[dict[str, float]]],
    small: list[dict[str, float]],
) -> None:
    """The fit (on the medians of the 1 x 1 runs), the check against the runs, the curve (module docstring)."""
    median = {setup: _median(rounds) for setup, rounds in runs.items()}
    one = median[1, 1]
    costs = fit(one, _median(small))
    print(
        f"fitted on 1 x 1 ({one['ips']:,.0f} instances/s measured): "
        + ", ".join(
            f"{k} {v * 1e3:.3f} ms" if k in ("worker", "side", "request") else f"{k} {v:.3g}"
            for k, v in costs.__dict__.items()
        )
    )
    print(f"this machine ({here.cores} cores, every role a process, Ray): measured against predicted")
    for (w, s), run in median.items():
        machine = replace(here, workers=w, servers=s, others=run["others"])
        guess, limit = predict(costs, machine, args.height, args.batch)
        print(
            f"  {w} x {s}: measured {run['ips']:>9,.0f} ({min(r['ips'] for r in runs[w, s]):,.0f} - "
            f"{max(r['ips'] for r in runs[w, s]):,.0f}), predicted {guess:>9,.0f} ({limit} bound), "
            f"{guess / run['ips'] - 1:+.0%}; per batch: worker {run['worker'] * 1e3:.2f} ms, communicator "
            f"{run['side'] * 1e3:.2f} ms, servers {run['server'] * 1e3:.2f} ms ({run['requests']:.2f} requests "
            f"per server), daemons {run['daemons']:.2f} cores, other processes {run['others']:.2f} cores"
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
