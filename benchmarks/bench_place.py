"""Automatic placement benchmark (issue 37): auto-place against one device and hand placements, its predictions,
and HEFT on simulated machines.

    python benchmarks/bench_place.py [--part measured,prediction,simulated] [--repeats 3] [--graphs 200]
                                     [--chart docs/img/place_simulated.png]

1. **measured** (``cpu:0``, ``cpu:1``; BLAS one thread, as one per device): per program, the executor with
   ``BuildStrategy.auto_place`` (costs from a calibration at the batch run) against all on one device and a
   hand placement: two towers of 8 [512]^2 matmuls joined by an add (by hand: tower a on cpu:0, b on cpu:1,
   the join on cpu:0; goal >= 1.6x over one device), an inception-like block of four branches of 1 to 4
   matmuls (by hand: balanced by FLOPs, branches 4+1 against 3+2), a two-tower recommendation model's
   training step (a sparse embedding tower and a dense tower; by hand: embeddings on cpu:0, dense on cpu:1),
   and an MLP chain (goal: no copies, within 3% of one device). Medians and ranges of ``repeats`` rounds.
2. **prediction**: calibrated at one batch size, the makespan ``simulate`` predicts for the auto-placed
   program at 4x the batch, against the time measured (goal: within 20%).
3. **simulated**: random layered DAGs of 10 tasks on 3 devices, HEFT (with the pass's choice: the best of HEFT
   and each single device, then refined) against the optimum by exhaustive search over 3^10 placements, each
   scored in upward-rank order, per communication-to-computation ratio and heterogeneity (goal: within 10% on
   90% of the graphs); DAGs of 200 to 5,000 tasks on 8 devices against all on the fastest, round-robin and
   random; and the pass's running time on a 5,000-op program (goal: at most 2 s). ``--chart``: the simulated
   results as a PNG (matplotlib), the chart of docs/placement.md.
"""

from __future__ import annotations

import argparse
import itertools
import random
import statistics
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
from bench_executor import alternate
from threadpoolctl import threadpool_limits

import blockir as bir
from blockir.ir import Program
from blockir.passes import CostModel, simulate
from blockir.passes.auto_place import TaskGraph, heft, list_schedule, random_task_graph, refine
from blockir.passes.costs import SYNTHETIC, DeviceSpeed, Link

DEVICES = ["cpu:0", "cpu:1"]


# -- programs ----------------------------------------------------------------------------------------------------------


def _matmul_chain(block: Any, x: str, prefix: str, depth: int, size: int) -> str:
    for i in range(depth):
        w, out = f"{prefix}w{i}", f"{prefix}h{i}"
        block.create_var(w, shape=(size, size), dtype="float32", persistable=True, is_parameter=True)
        block.create_var(out, shape=(-1, size), dtype="float32")
        block.append_op("mul", {"X": x, "Y": w}, {"Out": out})
        x = out
    return x


def branches(depths: list[int], size: int) -> Program:
    """``x`` through one chain of matmuls per depth, the chains' results summed in order."""
    program = Program()
    block = program.global_block()
    block.create_var("x", shape=(-1, size), dtype="float32", need_check_feed=True)
    outs = [_matmul_chain(block, "x", chr(ord("a") + k), depth, size) for k, depth in enumerate(depths)]
    total = outs[0]
    for k, out in enumerate(outs[1:]):
        block.create_var(f"sum{k}", shape=(-1, size), dtype="float32")
        block.append_op("elementwise_add", {"X": total, "Y": out}, {"Out": f"sum{k}"})
        total = f"sum{k}"
    return program


def by_branch(program: Program, where: dict[str, str], default: str = "cpu") -> Program:
    """``program`` with each op placed by the first letter of its output (its branch), else on ``default``."""
    placed = program.clone()
    for op in placed.global_block().ops:
        op.set_attr("op_device", where.get(op.output_names()[0][0], default))
    return placed


def recommender(embedding_device: str | None = None, dense_device: str | None = None) -> tuple[Program, Program, str]:
    """A two-tower model's training program (an embedding tower, a dense MLP), its startup and its loss."""
    main, startup = Program(), Program()
    main.random_seed = startup.random_seed = 1
    with bir.unique_name.guard(), bir.program_guard(main, startup):
        ids = bir.data("ids", shape=[-1, 1], dtype="int64")
        dense = bir.data("dense", shape=[-1, 256], dtype="float32")
        label = bir.data("label", shape=[-1, 1], dtype="float32")
        with bir.device_guard(embedding_device):
            e = bir.layers.fc(bir.layers.embedding(ids, size=[20000, 64]), size=256, act="relu")
        with bir.device_guard(dense_device):
            d = dense
            for _ in range(3):
                d = bir.layers.fc(d, size=512, act="relu")
        pred = bir.layers.fc(bir.layers.concat([e, d], axis=1), size=1)
        loss = bir.layers.mean(bir.layers.square_error_cost(pred, label))
        bir.optimizer.SGD(learning_rate=0.01).minimize(loss)
    return main, startup, loss.name


def mlp(size: int = 512, depth: int = 4) -> Program:
    program = Program()
    block = program.global_block()
    block.create_var("x", shape=(-1, size), dtype="float32", need_check_feed=True)
    _matmul_chain(block, "x", "m", depth, size)
    return program


# -- measured ----------------------------------------------------------------------------------------------------


class Case:
    """A program to run: its (unplaced) program, startup values, feed at a batch size, and what to fetch."""

    def __init__(self, name: str, program: Program, feed: Callable[[int], dict[str, np.ndarray]], fetch: str) -> None:
        self.name, self.program, self.feed, self.fetch = name, program, feed, fetch
        self.scope = bir.Scope()
        rng = np.random.default_rng(0)
        for var in program.list_vars():
            if var.persistable and var.shape is not None:
                self.scope.set(var.name, (rng.standard_normal(var.shape) * 0.05).astype(var.dtype))

    def runner(self, program: Program, batch: int, strategy: bir.BuildStrategy | None = None) -> Callable[[], Any]:
        exe = bir.Executor(build_strategy=strategy)
        feed = self.feed(batch)
        return lambda: exe.run(program, feed=feed, fetch_list=[self.fetch], scope=self.scope)


def _dense_feed(size: int) -> Callable[[int], dict[str, np.ndarray]]:
    rng = np.random.default_rng(1)
    return lambda batch: {"x": rng.standard_normal((batch, size)).astype("float32")}


def _recommender_feed(batch: int) -> dict[str, np.ndarray]:
    rng = np.random.default_rng(2)
    return {
        "ids": rng.integers(0, 20000, (batch, 1)),
        "dense": rng.standard_normal((batch, 256)).astype("float32"),
        "label": rng.standard_normal((batch, 1)).astype("float32"),
    }


def cases() -> list[tuple[Case, Program | None]]:
    """Each benchmark program with its hand placement (None for the MLP)."""
    towers = branches([8, 8], 512)
    inception = branches([1, 2, 3, 4], 512)
    rec, rec_startup, rec_loss = recommender()
    rec_hand = recommender("cpu:0", "cpu:1")[0]
    rec_case = Case("two-tower model", rec, _recommender_feed, rec_loss)
    bir.Executor().run(rec_startup, scope=rec_case.scope)
    return [
        (Case("two towers", towers, _dense_feed(512), "sum0"), by_branch(towers, {"a": "cpu", "b": "cpu:1"})),
        (
            Case("inception", inception, _dense_feed(512), "sum2"),
            by_branch(inception, {"a": "cpu", "d": "cpu", "b": "cpu:1", "c": "cpu:1"}),
        ),
        (rec_case, rec_hand),
        (Case("MLP chain", mlp(), _dense_feed(512), "mh3"), None),
    ]


def auto_strategy(case: Case, batch: int, costs: Path) -> bir.BuildStrategy:
    strategy = bir.BuildStrategy()
    model = bir.runtime.calibrate(case.program, case.feed(batch), DEVICES, fetch_list=[case.fetch], scope=case.scope)
    model.save(costs)
    strategy.auto_place, strategy.place_devices, strategy.cost_file = True, DEVICES, str(costs)
    return strategy


def measured(repeats: int, batch: int, n: int) -> None:
    print(f"1. measured: batch {batch}, {repeats} rounds of {n} runs, BLAS one thread")
    with tempfile.TemporaryDirectory() as tmp:
        for case, hand in cases():
            strategy = auto_strategy(case, batch, Path(tmp) / "costs.json")
            contenders = {
                "one device": case.runner(case.program, batch),
                "auto-place": case.runner(case.program, batch, strategy),
            }
            if hand is not None:
                contenders["by hand"] = case.runner(hand, batch)
            t = alternate(contenders, n, repeats)
            compiled = bir.Executor(build_strategy=strategy).compiled_program(
                case.program, case.feed(batch), [case.fetch]
            )
            copies = sum(op.type == "memcpy" for op in compiled.global_block().ops)
            parts = [f"one device {t.seconds['one device'] * 1e3:.2f} ms"]
            for name in contenders:
                if name != "one device":
                    lo, hi = t.spread[name]
                    parts.append(f"{name} {1 / t.ratio[name]:.2f}x ({1 / hi:.2f}-{1 / lo:.2f})")
            print(f"   {case.name:16s} " + ", ".join(parts) + f"; auto-place inserts {copies} copies")


def prediction(batch: int, n: int) -> None:
    print(f"2. prediction: calibrated at batch {batch}, predicting batch {4 * batch}")
    with tempfile.TemporaryDirectory() as tmp:
        for case, _ in cases():
            strategy = auto_strategy(case, batch, Path(tmp) / "costs.json")
            big = 4 * batch
            exe = bir.Executor(build_strategy=strategy)
            compiled = exe.compiled_program(case.program, case.feed(big), [case.fetch])
            model = CostModel.load(Path(tmp) / "costs.json")
            model.batch = big
            predicted = simulate(compiled, model).makespan
            run = case.runner(case.program, big, strategy)
            run()
            times = []
            for _ in range(n):
                start = time.perf_counter()
                run()
                times.append(time.perf_counter() - start)
            actual = statistics.median(times)
            print(
                f"   {case.name:16s} predicted {predicted * 1e3:.2f} ms, measured {actual * 1e3:.2f} ms "
                f"({(predicted - actual) / actual:+.0%})"
            )


# -- simulated ---------------------------------------------------------------------------------------------------


def chosen(graph: TaskGraph, devices: list[str]) -> tuple[list[str], list[int], float]:
    """As the pass chooses: the best of HEFT and each single device, refined; scored in upward-rank order."""
    schedule = heft(graph, devices, margin=0.0)
    order = schedule.order

    def score(assignment: list[str]) -> float:
        return list_schedule(graph, assignment, order)

    start = min([schedule.device, *([d] * len(graph) for d in devices)], key=score)
    assignment, value = refine(start, [devices] * len(graph), score)
    return assignment, order, value


def exhaustive(graph: TaskGraph, devices: list[str], order: list[int]) -> float:
    """The best makespan over every placement, each run in ``order`` without insertion (vectorized)."""
    n, k = len(graph), len(devices)
    assign = np.array(list(itertools.product(range(k), repeat=n)), dtype=np.int64)  # (k^n, n)
    rows = np.arange(len(assign))
    cost = np.array([[graph.costs[i][d] for d in devices] for i in range(n)])
    finish = np.zeros((len(assign), n))
    free = np.zeros((len(assign), k))
    for i in order:
        dev = assign[:, i]
        ready = np.zeros(len(assign))
        for p, nbytes in graph.pred[i].items():
            ready = np.maximum(ready, finish[:, p] + np.where(assign[:, p] == dev, 0.0, nbytes))
        start = np.maximum(ready, free[rows, dev])
        finish[:, i] = start + cost[i, dev]
        free[rows, dev] = finish[:, i]
    return float(finish.max(axis=1).min())


CCRS = (0.1, 1.0, 10.0)  # communication-to-computation ratios
HETEROGENEITIES = (0.1, 0.5, 1.0)
SIZES = (200, 1000, 5000)  # tasks of the large DAGs


def _per_cell(graphs: int) -> int:
    """Graphs per (ccr, heterogeneity) cell: at least ``graphs`` over the 9 cells."""
    return max(1, -(-graphs // 9))


def against_optimum(graphs: int, tasks: int) -> dict[tuple[float, float], list[float]]:
    """Per (ccr, heterogeneity): on each of :func:`_per_cell` random DAGs of ``tasks`` tasks on 3 devices, the
    pass's choice's makespan over the optimum's."""
    devices = ["d0", "d1", "d2"]
    per = _per_cell(graphs)
    ratios: dict[tuple[float, float], list[float]] = {}
    for seed, (ccr, h) in enumerate(itertools.product(CCRS, HETEROGENEITIES)):
        ratios[ccr, h] = []
        for k in range(per):
            graph = random_task_graph(random.Random(seed * 100_000 + k), tasks, devices, ccr, h)
            _, order, ours = chosen(graph, devices)
            ratios[ccr, h].append(ours / exhaustive(graph, devices, order))
    return ratios


def against_others() -> dict[int, tuple[float, dict[str, float]]]:
    """Per size of :data:`SIZES`: HEFT's running time on a random DAG on 8 devices, and the makespans of all on
    the fastest device, round-robin and random over HEFT's."""
    eight = [f"d{i}" for i in range(8)]
    found = {}
    for n in SIZES:
        graph = random_task_graph(random.Random(n), n, eight, 1.0, 1.0)
        start = time.perf_counter()
        schedule = heft(graph, eight)
        seconds = time.perf_counter() - start
        order = schedule.order
        fastest = min(eight, key=lambda d: sum(c[d] for c in graph.costs))  # noqa: B023 - used at once
        rng = random.Random(0)
        ours = list_schedule(graph, schedule.device, order)
        others = {
            "all on the fastest": list_schedule(graph, [fastest] * n, order),
            "round-robin": list_schedule(graph, [eight[i % 8] for i in range(n)], order),
            "random": list_schedule(graph, [rng.choice(eight) for _ in range(n)], order),
        }
        found[n] = seconds, {name: m / ours for name, m in others.items()}
    return found


def pass_seconds() -> tuple[int, float]:
    """The ``auto-place`` pass's own running time (``passes.run`` without snapshots or verification) on a program
    of eight chains of 625 small matmuls over 8 devices of different speeds: its ops and seconds."""
    big = branches([625] * 8, 16)  # 5,007 ops
    with tempfile.TemporaryDirectory() as tmp:
        costs = Path(tmp) / "costs.json"
        speeds = {f"cpu:{i}": DeviceSpeed(1e9 * (1 + i / 4), 1e9, 1e-5) for i in range(8)}  # cpu:0 is the host
        CostModel(SYNTHETIC, 64, speeds, {"cpu->cpu": Link(2e-5, 1e9)}).save(costs)
        devices = ",".join(f"cpu:{i}" for i in range(8))
        start = time.perf_counter()
        bir.passes.run(big, f"auto-place{{devices={devices} costs={costs}}}", snapshots=False, verify=False)
        return len(big.global_block().ops), time.perf_counter() - start


def simulated(graphs: int, tasks: int, chart_path: str = "") -> None:
    per = _per_cell(graphs)
    print(f"3. simulated: {per * 9} random DAGs of {tasks} tasks on 3 devices against exhaustive search")
    optimum = against_optimum(graphs, tasks)
    for (ccr, h), ratios in optimum.items():
        close = sum(r <= 1.1 for r in ratios)
        print(f"   ccr {ccr:>4}, heterogeneity {h}: within 10% on {close}/{len(ratios)}, worst {max(ratios):.3f}x")
    within = sum(r <= 1.1 for ratios in optimum.values() for r in ratios)
    total = sum(len(ratios) for ratios in optimum.values())
    print(f"   all: within 10% of the optimum on {within}/{total} ({within / total:.0%}; goal 90%)")
    others = against_others()
    for n, (seconds, ratios) in others.items():
        vs = ", ".join(f"{name} {r:.2f}x" for name, r in ratios.items())
        print(f"   {n} tasks on 8 devices: HEFT {seconds:.2f} s; the others' makespans over HEFT's: {vs}")
    ops, seconds = pass_seconds()
    print(f"   the pass on {ops} ops over 8 devices: {seconds:.2f} s (goal: at most 2 s)")
    if chart_path:
        chart(Path(chart_path), optimum, others, tasks)


def chart(
    path: Path,
    optimum: dict[tuple[float, float], list[float]],
    others: dict[int, tuple[float, dict[str, float]]],
    tasks: int,
) -> None:
    """The simulated results as a PNG: HEFT against the optimum per ratio and heterogeneity; against the others."""
    import matplotlib  # the dev extra's

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, (left, right) = plt.subplots(1, 2, figsize=(11, 4.2))
    width = 0.8 / len(HETEROGENEITIES)
    for k, h in enumerate(HETEROGENEITIES):
        for g, ccr in enumerate(CCRS):
            excess = [100 * (r - 1) for r in optimum[ccr, h]]
            med, x = statistics.median(excess), g + (k - (len(HETEROGENEITIES) - 1) / 2) * width
            left.bar(x, med, width, color=f"C{k}", label=f"heterogeneity {h}" if g == 0 else None)
            left.errorbar(x, med, yerr=[[0], [max(excess) - med]], color="black", capsize=3)
            _label(left, f"{sum(e <= 10 for e in excess)}/{len(excess)}", x, max(excess))
    left.axhline(10, color="black", linestyle="--", linewidth=1, label="10% over the optimum")
    left.set_xticks(range(len(CCRS)), [f"ccr {c:g}" for c in CCRS])
    left.set(
        ylabel="makespan over the optimum's (%)",
        ylim=(0, 1.3 * max(100 * (r - 1) for ratios in optimum.values() for r in ratios)),
        title=f"HEFT vs exhaustive search, {tasks} tasks on 3 devices\n"
        "(median, bar to the worst; above: graphs within 10%)",
    )
    left.legend(fontsize=8, loc="upper right")
    sizes = list(others)
    names = list(others[sizes[0]][1])
    width = 0.8 / len(names)
    for k, name in enumerate(names):
        x = [g + (k - (len(names) - 1) / 2) * width for g in range(len(sizes))]
        ratio = [others[n][1][name] for n in sizes]
        right.bar(x, ratio, width, color=f"C{k + 3}", label=name)
        for xi, r in zip(x, ratio):
            _label(right, f"{r:.2f}", xi, r)
    right.axhline(1.0, color="black", linestyle="--", linewidth=1, label="HEFT = 1")
    right.set_xticks(range(len(sizes)), [f"{n:,} tasks" for n in sizes])
    right.set(
        ylabel="makespan over HEFT's",
        ylim=(0, 1.35 * max(r for _, ratios in others.values() for r in ratios.values())),
        title="HEFT vs simple placements, random DAGs on 8 devices\n(ccr 1, heterogeneity 1)",
    )
    right.legend(fontsize=8, loc="upper center", ncols=4)
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=100)
    plt.close(fig)
    print(f"chart: {path}")


def _label(ax: Any, text: str, x: float, y: float) -> None:
    """``text`` just above the point (``x``, ``y``) of ``ax``."""
    ax.annotate(text, (x, y), xytext=(0, 3), textcoords="offset points", ha="center", fontsize=7)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--part", default="measured,prediction,simulated")
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--runs", type=int, default=5, help="runs per round")
    parser.add_argument("--batch", type=int, default=512)
    parser.add_argument("--graphs", type=int, default=200)
    parser.add_argument("--tasks", type=int, default=10)
    parser.add_argument("--chart", default="", help="write the simulated results here (a PNG; matplotlib)")
    args = parser.parse_args(argv)
    parts = set(args.part.split(","))
    with threadpool_limits(1):
        if "measured" in parts:
            measured(args.repeats, args.batch, args.runs)
        if "prediction" in parts:
            prediction(args.batch // 4, args.runs)
        if "simulated" in parts:
            simulated(args.graphs, args.tasks, args.chart)
    return 0


if __name__ == "__main__":
    sys.exit(main())
