"""Parameter-server training of bow_net from MultiSlot files against one process: one worker and two in
async (Downpour) mode, two workers on two servers in sync mode (issue 32's goals 2 and 3).

    python benchmarks/bench_ps.py [--model bow_net] [--rounds 3] [--parts 8] [--docs 8000]
        [--backends ray inprocess] [--workers 1 2] [--sync | --no-sync] [--pull-every 0] [--queue-size 0]
        [--cache-windows 0] [--prefetch 0]

``--model`` (:data:`MODELS`; fixed seeds: the corpus's 0, the net's 1): ``bow_net``, Adagrad 0.01, one epoch of
8 files of 8,000 documents; ``bow_net-lr0.05``, Adagrad 0.05, three epochs of 2 files of 8,000 documents (the
second model of issue 32). On the async executor's corpus (examples/async_bow.py: planted-signal documents as
MultiSlot files, a held-out file), in one run, alternating, ``--rounds`` times:

- ``async executor``: one process, ``AsyncExecutor.run_from_files`` with one thread (the reference);
- for each backend (``ray``: every role a Ray actor on a local cluster on loopback; ``inprocess``: every role a
  thread of one process): async, 1 server + 1 worker and 1 server + 2 workers (``--workers``), and, with
  ``--sync`` (the default), sync, 2 servers + 2 workers (``blockir launch``, the script
  ``benchmarks/ps_bow_role.py``; each worker one AsyncExecutor thread over its share of the files; async with
  ``a_sync_configs`` ``pull_every`` of ``--pull-every``, ``queue_size`` of ``--queue-size``, ``cache_windows`` of
  ``--cache-windows`` and ``prefetch`` of ``--prefetch``; 0: the default).

Printed per setup: instances/s (median and range; a run's instances over its slowest worker's seconds) and
its ratio to one process's (goals: one worker >= 0.80, two workers >= 0.90, async and sync), the held-out
accuracy and its difference to one process's in points (goal: within 1; and, where it differs, the accuracy
of the model fleet.save_inference_model exports, scored as the one process's is), the mean staleness (the
worker's steps its dense values lacked, per step), each worker's share of time spent waiting on the servers,
bytes sent per step against the payload (gradient rows x dim x 4 + ids x 8 + dense gradients; goal <= 1.1x).
On Ray, the CPU seconds per batch (all of a run's CPU over all its workers' batches, from ``/proc``) of each
part: the workers' trainers (w: a worker's process less its communicator's thread, Ray's threads
included), their communicators' threads (c), the servers' processes (s) and Ray's daemons (r: every other
process of the cluster, GCS, raylet, idle workers, over the whole launch, the roles' start included, which a
short run makes count; ``proc_cpu.py``), the cores the setup keeps busy (all of that CPU over the run's
seconds), and the bound on the setup's instances/s on this machine's C cores with W
workers and S servers::

    bound = B x min(C / (w + c + s + r), W / w, W / c, S / s)

(B instances per batch; each trainer, communicator and server is one thread of work, and all of them share
the C cores), its inputs, and the setup's instances/s over it (goal for two workers: >= 0.90). In-process
roles share one process, whose CPU time does not split by role. Ray's cluster is started once per run (not
timed)."""

from __future__ import annotations

import argparse
import importlib.util
import json
import os
import statistics
import tempfile
from pathlib import Path
from typing import Any

from proc_cpu import Snapshot, descendants

import blockir as bir
from blockir.distributed.communicator import CACHE_WINDOWS, PULL_EVERY
from blockir.distributed.launch import launch

ROOT = Path(__file__).resolve().parents[1]
ROLE = ROOT / "benchmarks" / "ps_bow_role.py"
MODELS = {  # name -> Adagrad's learning rate, epochs, training files, documents per file
    "bow_net": (0.01, 1, 8, 8000),
    "bow_net-lr0.05": (0.05, 3, 2, 8000),
}


def load_example() -> Any:
    """examples/async_bow.py as a module (its corpus, bow_net, train and evaluate)."""
    spec = importlib.util.spec_from_file_location("async_bow", ROOT / "examples" / "async_bow.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def reference(example: Any, corpus: Any, out: Path, model: str) -> dict[str, float]:
    lr, epochs, _, _ = MODELS[model]
    run = example.train(corpus, 1, "thread", epochs, out=out, learning_rate=lr, verbose=False)
    return {"ips": run["instances_per_second"], "accuracy": run["accuracy"]}


def ps_run(corpus: Any, setup: Setup, out: Path, args: argparse.Namespace) -> dict[str, Any]:
    """One launch of ``setup`` (ps_bow_role.py) on ``corpus``: its figures (module docstring)."""
    _, backend, servers, workers, mode = setup
    out.mkdir(parents=True)
    me = os.getpid()
    before = Snapshot.of(descendants(me))
    lr, epochs, _, _ = MODELS[args.model]
    settings = (args.pull_every, args.queue_size, args.cache_windows, args.prefetch)
    role_args = [str(out), mode, *map(str, settings), str(lr), str(epochs)]
    role_args += [str(corpus.prototxt), corpus.heldout]
    role_args += corpus.train_files
    result = launch(ROLE, servers, workers, role_args, backend=backend, timeout=600)
    if not result.ok:
        raise SystemExit(f"{setup[0]} failed: {result.failures}")
    reports = [json.loads((out / f"worker{k}.json").read_text()) for k in range(workers)]
    server = [json.loads((out / f"server{k}.json").read_text()) for k in range(servers)]
    roles = {r["pid"] for r in reports + server}
    daemons = Snapshot.of(descendants(me)).since(before, leave_out=roles) if backend == "ray" else 0.0
    instances = sum(r["instances"] for r in reports)
    steps = sum(r["steps"] for r in reports)
    seconds = max(r["seconds"] for r in reports)
    communicator = sum(r["communicator_cpu_s"] for r in reports)
    cpu = {
        "w": (sum(r["cpu_s"] for r in reports) - communicator) / steps,
        "c": communicator / steps,
        "s": sum(r["cpu_s"] for r in server) / steps,
        "r": daemons / steps,
    }
    return {
        "ips": instances / seconds,
        "accuracy": reports[0]["accuracy"],
        "accuracy_exported": reports[0]["accuracy_exported"],
        "stale": statistics.mean(r.get("stale_steps", 0) / r["steps"] for r in reports),
        "wait": max(r["wait_s"] / r["seconds"] for r in reports),
        "bytes_ratio": sum(r["bytes_sent"] for r in reports) / sum(r["payload_bytes"] for r in reports),
        "bytes_per_step": sum(r["bytes_sent"] for r in reports) / steps,
        "batch": instances / steps,
        **cpu,
        "cores": sum(cpu.values()) * steps / seconds,
    }


def bound(run: dict[str, Any], servers: int, workers: int, cores: int) -> float:
    """The instances/s a run's CPU per batch of each part allows on ``cores`` cores (module docstring)."""
    w, c, s, r = run["w"], run["c"], run["s"], run["r"]
    limits = [cores / (w + c + s + r)] + [n / x for n, x in ((workers, w), (workers, c), (servers, s)) if x > 0]
    return run["batch"] * min(limits)


def summary(values: list[float], fmt: str = ",.0f") -> str:
    return f"{statistics.median(values):{fmt}} ({min(values):{fmt}} - {max(values):{fmt}})"


Setup = tuple[str, str | None, int, int, str]  # name, backend (None: one process), servers, workers, mode


def setups(args: argparse.Namespace) -> list[Setup]:
    """What a round runs: one process, then each backend's async and sync launches."""
    found: list[Setup] = [("async executor", None, 0, 1, "")]
    for b in args.backends:
        found += [(f"{b} async 1s+{w}w", b, 1, w, "async") for w in args.workers]
        if args.sync:
            found.append((f"{b} sync 2s+2w", b, 2, 2, "sync"))
    return found


GOALS = {1: 0.80, 2: 0.90}  # workers -> instances/s over one process's, at least (issue 32)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--model", default="bow_net", choices=sorted(MODELS))
    parser.add_argument("--parts", type=int, default=0, help="training files (0: the model's)")
    parser.add_argument("--docs", type=int, default=0, help="documents per training file (0: the model's)")
    parser.add_argument("--backends", nargs="+", default=["ray", "inprocess"], choices=["ray", "inprocess"])
    parser.add_argument("--workers", nargs="+", type=int, default=[1, 2], choices=[1, 2])
    parser.add_argument(
        "--sync", action=argparse.BooleanOptionalAction, default=True, help="sync mode, 2 servers + 2 workers"
    )
    parser.add_argument("--pull-every", type=int, default=0, help="async: pull every n steps (0: the default)")
    parser.add_argument(
        "--queue-size", type=int, default=0, help="async: steps queued before a push blocks (0: the default)"
    )
    parser.add_argument(
        "--cache-windows", type=int, default=0, help="async: windows a cached row outlives its last use (0: default)"
    )
    parser.add_argument("--prefetch", type=int, default=0, help="async: prefetch the rows of n batches ahead")
    args = parser.parse_args()
    _, epochs, parts, docs = MODELS[args.model]
    args.parts, args.docs = args.parts or parts, args.docs or docs
    example = load_example()
    results: dict[str, list[dict[str, Any]]] = {}
    with tempfile.TemporaryDirectory() as tmp:
        corpus = example.write_corpus(Path(tmp) / "data", args.parts, args.docs, heldout_docs=4000)
        if "ray" in args.backends:
            import ray

            from blockir.distributed.ray_backend import NAMESPACE, loopback_env

            os.environ.update(loopback_env())
            ray.init(
                num_cpus=2,
                include_dashboard=False,
                _node_ip_address="127.0.0.1",
                namespace=NAMESPACE,
                _temp_dir=tempfile.mkdtemp(prefix="ray-", dir=tmp),
                log_to_driver=False,
            )
        try:
            for r in range(args.rounds):
                order = setups(args)
                if r % 2:
                    order.reverse()
                for setup in order:
                    name, backend = setup[:2]
                    out = Path(tmp) / f"{name.replace(' ', '_')}-{r}"
                    run = (
                        reference(example, corpus, out, args.model)
                        if backend is None
                        else ps_run(corpus, setup, out, args)
                    )
                    results.setdefault(name, []).append(run)
                    extra = f", exported {run['accuracy_exported']:.4f}, stale {run['stale']:.2f}" if backend else ""
                    print(
                        f"round {r}: {name}: {run['ips']:,.0f} instances/s, accuracy {run['accuracy']:.4f}{extra}",
                        flush=True,
                    )
        finally:
            if "ray" in args.backends:
                ray.shutdown()
    report(args, results, epochs)


def report(args: argparse.Namespace, results: dict[str, list[dict[str, Any]]], epochs: int) -> None:
    """The figures of every setup over the rounds (module docstring)."""
    cores = os.cpu_count() or 2
    print(
        f"\n{args.model}, {args.parts} x {args.docs} documents, batch 32, {epochs} epochs, "
        f"pull_every {args.pull_every or PULL_EVERY}, queue_size {args.queue_size or 'default'}, "
        f"cache_windows {args.cache_windows or CACHE_WINDOWS}, prefetch {args.prefetch}, "
        f"{cores} cores, BLAS threads: {os.environ.get('OPENBLAS_NUM_THREADS', 'default')}"
    )
    base = results["async executor"]
    base_ips = statistics.median(r["ips"] for r in base)
    base_accuracy = statistics.median(r["accuracy"] for r in base)
    print(f"  async executor (1 thread)  {summary([r['ips'] for r in base])} instances/s, accuracy {base_accuracy:.4f}")
    for name, _, servers, workers, _ in setups(args)[1:]:
        runs = results[name]
        ratios = [r["ips"] / base_ips for r in runs]
        accuracy = statistics.median(r["accuracy"] for r in runs)
        print(
            f"  {name}: {summary([r['ips'] for r in runs])} instances/s, {summary(ratios, '.2f')}x one process "
            f"(goal >= {GOALS[workers]:.2f}), accuracy {accuracy:.4f}, {100 * (accuracy - base_accuracy):+.2f} "
            f"points (goal within 1; exported {statistics.median(r['accuracy_exported'] for r in runs):.4f}), "
            f"stale {statistics.median(r['stale'] for r in runs):.2f} steps, "
            f"waiting {summary([100 * r['wait'] for r in runs], '.0f')}%, "
            f"bytes {summary([r['bytes_ratio'] for r in runs], '.3f')}x payload (goal <= 1.1; "
            f"{statistics.median(r['bytes_per_step'] for r in runs) / 1024:.0f} KiB/step)"
        )
        if not name.startswith("ray"):
            print("    CPU per role: not separable (one process)")
            continue
        parts = {k: statistics.median(r[k] for r in runs) for k in ("w", "c", "s", "r", "batch", "cores")}
        bounds = [bound(r, servers, workers, cores) for r in runs]
        print(
            f"    CPU per batch: w {1e3 * parts['w']:.2f} ms, c {1e3 * parts['c']:.2f} ms, "
            f"s {1e3 * parts['s']:.2f} ms, r {1e3 * parts['r']:.2f} ms; cores busy {parts['cores']:.2f}"
        )
        print(
            f"    bound = B x min(C / (w + c + s + r), W / w, W / c, S / s) with B {parts['batch']:.0f}, C {cores}, "
            f"W {workers}, S {servers}: {summary(bounds)} instances/s; measured / bound "
            f"{summary([r['ips'] / b for r, b in zip(runs, bounds)], '.2f')}"
            + (" (goal >= 0.90)" if workers == 2 else "")
        )
    for backend in args.backends:
        if args.workers == [1, 2]:
            one, two = results[f"{backend} async 1s+1w"], results[f"{backend} async 1s+2w"]
            speedups = [b["ips"] / a["ips"] for a, b in zip(one, two)]
            print(f"  {backend:9} async, two workers / one: {summary(speedups, '.2f')}x")
    _ = bir  # the runs above import the rest


if __name__ == "__main__":
    main()
