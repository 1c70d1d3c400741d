"""Dataflow scheduler benchmark: the dataflow executor against the sequential one, in one process.

    python benchmarks/bench_scheduler.py [--repeats 15] [--size 512] [--depth 8] [--chain 1000]

1. model parallelism: two independent branches of ``depth`` [size, size] matmuls (``mul`` ops), one on
   ``cpu:0`` (the host) and one on ``cpu:1``, added on the host; the dataflow scheduler runs them on the
   calling thread and a worker at once, the sequential one after each other. BLAS is limited to one
   thread (threadpoolctl) so that the parallelism measured is the scheduler's. Goal: >= 1.7x on 2 cores.
   For scale, the same matmuls in two plain Python threads against one after the other (numpy releases
   the GIL in them): the most this machine's cores give, whatever runs them.
2. no parallelism: a chain of ``chain`` tiny ``scale`` ops on a [1] array on the host, dataflow against
   sequential. Goal: <= 1.05x (the scheduler must not tax graphs it cannot run in parallel).

Both sides run the same program on the same executor settings but the scheduler, in alternating rounds
(``alternate`` of bench_executor.py); ratios are medians over rounds of times taken in the same round.
"""

from __future__ import annotations

import argparse
import os
import threading
from collections.abc import Callable
from typing import Any

import numpy as np
from bench_executor import alternate
from threadpoolctl import threadpool_limits

import blockir as bir
from blockir.ir import Program

GOAL_BRANCHES, GOAL_CHAIN = 1.7, 1.05


def branches(size: int, depth: int) -> tuple[Program, dict[str, np.ndarray]]:
    """x -> depth matmuls on cpu:0 -> a; x -> depth matmuls on cpu:1 -> b; out = a + b on the host."""
    program = Program()
    block = program.global_block()
    block.create_var("x", shape=(size, size), dtype="float32", need_check_feed=True)
    rng = np.random.default_rng(0)
    ends = []
    for device in ("cpu:0", "cpu:1"):
        prev = "x"
        for d in range(depth):
            w, out = f"w_{device}_{d}", f"h_{device}_{d}"
            block.create_var(w, shape=(size, size), dtype="float32", persistable=True, device=device)
            block.create_var(out, shape=(size, size), dtype="float32")
            block.append_op("mul", {"X": prev, "Y": w}, {"Out": out}, {"op_device": device})
            prev = out
        ends.append(prev)
    block.create_var("out", shape=(size, size), dtype="float32")
    block.append_op("elementwise_add", {"X": ends[0], "Y": ends[1]}, {"Out": "out"}, {"op_device": "cpu"})
    return program, {
        v.name: (rng.normal(size=(size, size)) / np.sqrt(size)).astype("float32")
        for v in block.vars.values()
        if v.persistable
    }


def chain(n: int) -> tuple[Program, dict[str, np.ndarray]]:
    program = Program()
    block = program.global_block()
    block.create_var("t0", shape=(1,), dtype="float32", need_check_feed=True)
    for i in range(n):
        block.create_var(f"t{i + 1}", shape=(1,), dtype="float32")
        block.append_op("scale", {"X": f"t{i}"}, {"Out": f"t{i + 1}"}, {"scale": 1.0, "bias": 0.5})
    return program, {}


def ceiling(size: int, depth: int, repeats: int) -> float:
    """How much faster two plain threads do the two branches' matmuls than one thread does both."""
    a = np.random.default_rng(2).normal(size=(size, size)).astype("float32")

    def branch() -> None:
        for _ in range(depth):
            a @ a

    def serial() -> None:
        branch()
        branch()

    def threaded() -> None:
        threads = [threading.Thread(target=branch) for _ in range(2)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()

    return 1 / alternate({"serial": serial, "threads": threaded}, 3, repeats).ratio["threads"]


def runner(
    program: tuple[Program, dict[str, np.ndarray]], feed: dict[str, np.ndarray], fetch: str, scheduler: str
) -> Callable[[], Any]:
    program, weights = program
    exe, scope = bir.Executor("cpu", scheduler=scheduler), bir.Scope()
    for name, value in weights.items():
        scope.set(name, value.copy())
    return lambda: exe.run(program, feed=feed, fetch_list=[fetch], scope=scope)[0]


def compare(
    program: tuple[Program, dict[str, np.ndarray]], feed: dict[str, np.ndarray], fetch: str, n: int, repeats: int
) -> tuple[float, float, float]:
    """(sequential s/run, dataflow s/run, sequential / dataflow), checking both compute the same."""
    seq, flow = runner(program, feed, fetch, "sequential"), runner(program, feed, fetch, "dataflow")
    np.testing.assert_array_equal(seq(), flow())
    t = alternate({"sequential": seq, "dataflow": flow}, n, repeats)
    return t.seconds["sequential"], t.seconds["dataflow"], 1 / t.ratio["dataflow"]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--repeats", type=int, default=15, help="rounds (default 15)")
    parser.add_argument("--size", type=int, default=512, help="matrix size of the branches (default 512)")
    parser.add_argument("--depth", type=int, default=8, help="matmuls per branch (default 8)")
    parser.add_argument("--chain", type=int, default=1000, help="ops of the chain (default 1000)")
    args = parser.parse_args()
    print(f"numpy {np.__version__}, {os.cpu_count()} cores, {args.repeats} rounds")
    with threadpool_limits(limits=1):
        x = np.random.default_rng(1).normal(size=(args.size, args.size)).astype("float32")
        seq, flow, speedup = compare(branches(args.size, args.depth), {"x": x}, "out", 3, args.repeats)
        machine = ceiling(args.size, args.depth, args.repeats)
    print(
        f"two branches of {args.depth} matmuls [{args.size}]^2 on cpu:0 and cpu:1, BLAS 1 thread: "
        f"sequential {seq * 1e3:.1f} ms, dataflow {flow * 1e3:.1f} ms, speed-up {speedup:.2f}x "
        f"(goal >= {GOAL_BRANCHES}x); two plain threads against one on this machine: {machine:.2f}x"
    )
    seq, flow, speedup = compare(chain(args.chain), {"t0": np.zeros(1, "float32")}, f"t{args.chain}", 20, args.repeats)
    print(
        f"chain of {args.chain} scale ops on the host: sequential {seq * 1e3:.2f} ms, dataflow "
        f"{flow * 1e3:.2f} ms, dataflow / sequential {1 / speedup:.3f}x (goal <= {GOAL_CHAIN}x)"
    )


if __name__ == "__main__":
    main()
