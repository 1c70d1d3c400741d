"""Parameter-server training of bow_net from MultiSlot files: one worker against two, async (Downpour) mode.

    python benchmarks/bench_ps.py [--model bow_net] [--rounds 3] [--parts 8] [--docs 8000]
        [--backends ray inprocess] [--workers 1 2] [--pull-every 1] [--queue-size 0] [--prefetch 0]

``--model`` (:data:`MODELS`; fixed seeds: the corpus's 0, the net's 1): ``bow_net``, Adagrad 0.01, one epoch of
8 files of 8,000 documents; ``bow_net-lr0.05``, Adagrad 0.05, three epochs of 2 files of 8,000 documents (the
second model of issue 32). On the async executor's corpus (examples/async_bow.py: planted-signal documents as
MultiSlot files, a held-out file), in one run, alternating, ``--rounds`` times:

- ``async executor``: one process, ``AsyncExecutor.run_from_files`` with one thread (the reference);
- for each backend (``ray``: every role a Ray actor on a local cluster on loopback; ``inprocess``: every role a
  thread of one process): 1 server + 1 worker and 1 server + 2 workers (``blockir launch``, the script
  ``benchmarks/ps_bow_role.py``; each worker one AsyncExecutor thread over its share of the files, with
  ``a_sync_configs`` ``pull_every`` of ``--pull-every``, ``queue_size`` of ``--queue-size`` (0: the default)
  and ``prefetch`` of ``--prefetch``).

Printed per setup: instances/s (median and range; a run's instances over its slowest worker's seconds), the
held-out accuracy (and, where it differs, that of the model fleet.save_inference_model exports, scored as the
one process's is), the mean staleness (the worker's steps its dense values lacked, per step), each worker's
share of time spent waiting on the servers, bytes sent per step against the
payload (gradient rows x dim x 4 + ids x 8 + dense gradients), and, on Ray, the CPU seconds per batch of a
worker's process (w, its communicator and Ray's threads included), of the server's (s) and of Ray's own
processes (raylet and GCS, over the whole launch), the bound 2w/(w+s) on two workers' speed-up on two cores,
and the cores the setup keeps busy (all of that CPU over the run's seconds): one worker's setup keeping c
cores busy, two workers can be at most 2/c times as fast. In-process roles share one process, whose CPU time
does not split by role. Goals: two workers >= 1.5x one, waiting <= 20%, bytes <= 1.1x payload. Ray's cluster
is started once per run (not timed)."""

from __future__ import annotations

import argparse
import importlib.util
import json
import os
import statistics
import tempfile
from pathlib import Path
from typing import Any

import blockir as bir
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


def ps_run(
    corpus: Any, backend: str, workers: int, out: Path, pull_every: int, queue_size: int, prefetch: int, model: str
) -> dict[str, Any]:
    out.mkdir(parents=True)
    daemons = ray_daemons_cpu() if backend == "ray" else 0.0
    lr, epochs, _, _ = MODELS[model]
    args = [str(out), str(pull_every), str(queue_size), str(prefetch), str(lr), str(epochs)]
    args += [str(corpus.prototxt), corpus.heldout]
    args += corpus.train_files
    result = launch(ROLE, 1, workers, args, backend=backend, timeout=600)
    if not result.ok:
        raise SystemExit(f"{backend} x{workers} failed: {result.failures}")
    daemons = ray_daemons_cpu() - daemons if backend == "ray" else 0.0
    reports = [json.loads((out / f"worker{k}.json").read_text()) for k in range(workers)]
    server = json.loads((out / "server0.json").read_text())
    instances = sum(r["instances"] for r in reports)
    steps = sum(r["steps"] for r in reports)
    return {
        "ips": instances / max(r["seconds"] for r in reports),
        "accuracy": reports[0]["accuracy"],
        "accuracy_exported": reports[0]["accuracy_exported"],
        "stale": statistics.mean(r["stale_steps"] / r["steps"] for r in reports),
        "wait": max(r["wait_s"] / r["seconds"] for r in reports),
        "bytes_ratio": sum(r["bytes_sent"] for r in reports) / sum(r["payload_bytes"] for r in reports),
        "bytes_per_step": sum(r["bytes_sent"] for r in reports) / steps,
        "w": statistics.mean(r["cpu_s"] / r["steps"] for r in reports),
        "s": server["cpu_s"] / steps,
        "r": daemons / steps,
        "cores": (sum(r["cpu_s"] for r in reports) + server["cpu_s"] + daemons) / max(r["seconds"] for r in reports),
    }


def ray_daemons_cpu() -> float:
    """CPU seconds so far of Ray's own processes (raylet, GCS server) on this machine, from /proc."""
    total = 0.0
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            name, fields = stat.read_text().rsplit(")", 1)
        except OSError:  # ended meanwhile
            continue
        if name.split("(", 1)[1] in ("raylet", "gcs_server"):
            utime, stime = fields.split()[11:13]
            total += (int(utime) + int(stime)) / os.sysconf("SC_CLK_TCK")
    return total


def summary(values: list[float], fmt: str = ",.0f") -> str:
    return f"{statistics.median(values):{fmt}} ({min(values):{fmt}} - {max(values):{fmt}})"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--model", default="bow_net", choices=sorted(MODELS))
    parser.add_argument("--parts", type=int, default=0, help="training files (0: the model's)")
    parser.add_argument("--docs", type=int, default=0, help="documents per training file (0: the model's)")
    parser.add_argument("--backends", nargs="+", default=["ray", "inprocess"], choices=["ray", "inprocess"])
    parser.add_argument("--workers", nargs="+", type=int, default=[1, 2], choices=[1, 2])
    parser.add_argument("--pull-every", type=int, default=1, help="async: pull every n steps (a_sync_configs)")
    parser.add_argument(
        "--queue-size", type=int, default=0, help="async: steps queued before a push blocks (0: the default)"
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
                setups = [("async executor", None, 1)]
                setups += [(f"{b} 1s+{w}w", b, w) for b in args.backends for w in args.workers]
                if r % 2:
                    setups.reverse()
                for name, backend, workers in setups:
                    out = Path(tmp) / f"{name.replace(' ', '_')}-{r}"
                    run = (
                        reference(example, corpus, out, args.model)
                        if backend is None
                        else ps_run(
                            corpus, backend, workers, out, args.pull_every, args.queue_size, args.prefetch, args.model
                        )
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
    print(
        f"\n{args.model}, {args.parts} x {args.docs} documents, batch 32, {epochs} epochs, "
        f"pull_every {args.pull_every}, "
        f"queue_size {args.queue_size or 'default'}, prefetch {args.prefetch}, "
        f"{os.cpu_count()} cores, "
        f"BLAS threads: {os.environ.get('OPENBLAS_NUM_THREADS', 'default')}"
    )
    base = results["async executor"]
    print(
        f"  async executor (1 thread)   {summary([r['ips'] for r in base])} instances/s, "
        f"accuracy {statistics.median(r['accuracy'] for r in base):.4f}"
    )
    for backend in args.backends:
        for label, runs in ((f"1s+{w}w", results[f"{backend} 1s+{w}w"]) for w in args.workers):
            w, s = statistics.median(r["w"] for r in runs), statistics.median(r["s"] for r in runs)
            cpu = (
                f"w {1e3 * w:.2f} ms, s {1e3 * s:.2f} ms, Ray's daemons "
                f"{1e3 * statistics.median(r['r'] for r in runs):.2f} ms per batch, bound 2w/(w+s) "
                f"{2 * w / (w + s):.2f}x, cores busy {statistics.median(r['cores'] for r in runs):.2f}"
                if backend == "ray"
                else "CPU per role: not separable (one process)"
            )
            print(
                f"  {backend:9} {label}  {summary([r['ips'] for r in runs])} instances/s, accuracy "
                f"{statistics.median(r['accuracy'] for r in runs):.4f} "
                f"(exported {statistics.median(r['accuracy_exported'] for r in runs):.4f}), "
                f"stale {statistics.median(r['stale'] for r in runs):.2f} steps, "
                f"{statistics.median(r['ips'] for r in runs) / statistics.median(r['ips'] for r in base):.2f}x one "
                f"process, waiting {summary([100 * r['wait'] for r in runs], '.0f')}%, "
                f"bytes {summary([r['bytes_ratio'] for r in runs], '.3f')}x payload "
                f"({statistics.median(r['bytes_per_step'] for r in runs) / 1024:.0f} KiB/step), "
                f"{cpu}"
            )
        if args.workers != [1, 2]:
            continue
        one, two = results[f"{backend} 1s+1w"], results[f"{backend} 1s+2w"]
        speedups = [b["ips"] / a["ips"] for a, b in zip(one, two)]
        print(f"  {backend:9} two workers / one: {summary(speedups, '.2f')}x (goal >= 1.5x)")
        if backend == "ray":
            busy = statistics.median(r["cores"] for r in one)
            print(
                f"  {backend:9} one worker's setup keeps {busy:.2f} of {os.cpu_count()} cores busy: two workers "
                f"can be at most {(os.cpu_count() or 2) / busy:.2f}x as fast"
            )
    _ = bir  # the runs above import the rest


if __name__ == "__main__":
    main()
