"""Data parallelism on this machine: one replica against two, in one process, alternating.

    python benchmarks/bench_data_parallel.py [--rounds 5] [--steps 6] [--batch 512]

Contenders, each training the same program for ``--steps`` steps per round at a global batch of
``--batch``, BLAS limited to one thread per replica (threadpoolctl):

- ``one``: one replica, ``Executor.run(main)``;
- ``threads``: two host threads over one copy, ``CompiledProgram(main).with_data_parallel(places=["cpu", "cpu"])``;
- ``devices``: two full copies, ``places=["cpu:0", "cpu:1"]``;
- ``plain x1`` / ``plain x2``: the step's matmuls (forward and backward, numpy) for the whole batch in one
  Python thread, and for half the batch in each of two: the most two threads give here, whatever runs
  them (the machine's ceiling).

Models: the MLP 784-512-512-10 with softmax cross-entropy and Adam, and the bag-of-words model of
``examples/async_bow.py`` (sparse embedding 5000x64, sum pooling, fc 2, SGD) at the same batch. It prints,
per contender, instances/s (median and range over the rounds) and the speed-up over ``one`` taken within
each round, and the goals: the better of the two modes >= 1.6x ``one``, and >= 0.95x the plain threads'
speed-up.
``with_data_parallel`` has glibc keep freed memory (``ExecutionStrategy.keep_freed_memory``, process-wide,
so ``one`` runs with it too); ``--default-malloc`` turns that off, for a run to compare.
"""

from __future__ import annotations

import argparse
import os
import statistics
import threading
import time
from collections.abc import Callable
from typing import Any

import numpy as np
from threadpoolctl import threadpool_limits

import blockir as bir
from blockir.ops.values import LoDTensor

GOAL_SPEEDUP, GOAL_OF_CEILING = 1.6, 0.95


def mlp(batch: int) -> tuple[bir.Program, bir.Program, str, dict[str, Any], list[tuple[int, int]]]:
    main, startup = bir.Program(), bir.Program()
    with bir.program_guard(main, startup), bir.unique_name.guard():
        x = bir.layers.data("x", [-1, 784])
        label = bir.layers.data("label", [-1, 1], dtype="int64")
        h = bir.layers.fc(x, 512, act="relu")
        h = bir.layers.fc(h, 512, act="relu")
        pred = bir.layers.fc(h, 10, act="softmax")
        loss = bir.layers.mean(bir.layers.cross_entropy(pred, label))
        bir.optimizer.Adam(1e-3).minimize(loss)
    rng = np.random.default_rng(0)
    feed = {"x": rng.random((batch, 784), dtype=np.float32), "label": rng.integers(0, 10, (batch, 1))}
    return main, startup, loss.name, feed, [(784, 512), (512, 512), (512, 10)]


def bow(batch: int) -> tuple[bir.Program, bir.Program, str, dict[str, Any], list[tuple[int, int]]]:
    main, startup = bir.Program(), bir.Program()
    with bir.program_guard(main, startup), bir.unique_name.guard():
        words = bir.layers.data("words", [-1, 1], dtype="int64", lod_level=1)
        label = bir.layers.data("label", [-1, 1], dtype="int64")
        emb = bir.layers.embedding(words, size=[5000, 64], is_sparse=True)
        pred = bir.layers.fc(bir.layers.sequence_pool(emb, "sum"), 2, act="softmax")
        loss = bir.layers.mean(bir.layers.cross_entropy(pred, label))
        bir.optimizer.SGD(0.05).minimize(loss)
    rng = np.random.default_rng(1)
    lengths = rng.integers(5, 60, batch).tolist()
    ids = rng.integers(0, 5000, (sum(lengths), 1))
    feed = {"words": LoDTensor.from_lengths(ids, lengths), "label": rng.integers(0, 2, (batch, 1))}
    return main, startup, loss.name, feed, [(64, 2)]


def trainer(
    model: Callable[..., Any], batch: int, places: list[str] | None, steps: int, keep: bool
) -> Callable[[], None]:
    main, startup, loss, feed, _ = model(batch)
    scope = bir.Scope()
    exe = bir.Executor("cpu")
    exe.run(startup, scope=scope)
    program: Any = main
    if places is not None:
        strategy = bir.ExecutionStrategy(keep_freed_memory=keep)
        program = bir.CompiledProgram(main).with_data_parallel(loss, exec_strategy=strategy, places=places)

    def run() -> None:
        for _ in range(steps):
            exe.run(program, feed=feed, fetch_list=[loss], scope=scope)

    return run


def plain(shapes: list[tuple[int, int]], batch: int, threads: int, steps: int) -> Callable[[], None]:
    """Forward and backward matmuls of the dense layers, the batch split over ``threads`` Python threads."""
    rng = np.random.default_rng(2)
    ws = [rng.random(s, dtype=np.float32) for s in shapes]
    part = batch // threads

    def one_thread() -> None:
        h = rng.random((part, shapes[0][0]), dtype=np.float32)
        for _ in range(steps):
            acts = [h]
            for w in ws:
                acts.append(acts[-1] @ w)
            g = acts[-1]
            for w, a in zip(reversed(ws), reversed(acts[:-1])):
                a.T @ g
                g = g @ w.T

    def run() -> None:
        if threads == 1:
            one_thread()
            return
        workers = [threading.Thread(target=one_thread) for _ in range(threads)]
        for t in workers:
            t.start()
        for t in workers:
            t.join()

    return run


def measure(contenders: dict[str, Callable[[], None]], rounds: int) -> dict[str, list[float]]:
    """Seconds per call of each contender, one call per round each, the order reversed every other round."""
    for fn in contenders.values():
        fn()  # warm-up: plans compiled, copies broadcast
    times: dict[str, list[float]] = {name: [] for name in contenders}
    for r in range(rounds):
        order = list(contenders.items())
        for name, fn in order if r % 2 == 0 else reversed(order):
            start = time.perf_counter()
            fn()
            times[name].append(time.perf_counter() - start)
    return times


def report(title: str, times: dict[str, list[float]], items: int) -> dict[str, float]:
    print(title)
    speedups: dict[str, float] = {}
    pairs = {"threads": "one", "devices": "one", "plain x2": "plain x1"}
    for name, ts in times.items():
        rates = [items / t for t in ts]
        line = f"  {name:9s} {statistics.median(rates):9.0f} instances/s (range {min(rates):.0f}-{max(rates):.0f})"
        if name in pairs:
            ratios = [b / t for t, b in zip(ts, times[pairs[name]])]
            speedups[name] = statistics.median(ratios)
            line += f"  {speedups[name]:.2f}x {pairs[name]} (range {min(ratios):.2f}-{max(ratios):.2f})"
        print(line)
    best, ceiling = max(speedups["threads"], speedups["devices"]), speedups["plain x2"]
    print(
        f"  best mode {best:.2f}x one (goal >= {GOAL_SPEEDUP}x); "
        f"{best / ceiling:.2f} of the plain threads' {ceiling:.2f}x (goal >= {GOAL_OF_CEILING})"
    )
    return speedups


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--steps", type=int, default=6)
    parser.add_argument("--batch", type=int, default=512)
    parser.add_argument(
        "--default-malloc",
        action="store_true",
        help="ExecutionStrategy(keep_freed_memory=False): leave glibc's malloc as it is (it hands freed memory back)",
    )
    args = parser.parse_args()
    memory = "glibc's default (--default-malloc)" if args.default_malloc else "kept (with_data_parallel's default)"
    print(f"{os.cpu_count()} cores, BLAS 1 thread per replica, batch {args.batch}, {args.steps} steps")
    print(f"freed memory: {memory}")
    keep = not args.default_malloc
    with threadpool_limits(1):
        for name, model in (("MLP 784-512-512-10, Adam", mlp), ("bag of words, sparse embedding, SGD", bow)):
            shapes = model(2)[4]
            contenders = {
                "one": trainer(model, args.batch, None, args.steps, keep),
                "threads": trainer(model, args.batch, ["cpu", "cpu"], args.steps, keep),
                "devices": trainer(model, args.batch, ["cpu:0", "cpu:1"], args.steps, keep),
                "plain x1": plain(shapes, args.batch, 1, args.steps),
                "plain x2": plain(shapes, args.batch, 2, args.steps),
            }
            report(name, measure(contenders, args.rounds), args.batch * args.steps)


if __name__ == "__main__":
    main()
