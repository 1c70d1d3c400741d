"""Executor benchmark: blockir against hand-written numpy (and PyTorch eager when installed).

    python benchmarks/bench_executor.py [--ref PATH] [--repeats 15] [--steps 20] [--place cuda:0]

Measures, in one process, alternating the contenders (the order reversed every other round) and taking
medians; a ratio is the median over rounds of the two times taken back to back in that round, printed with
its range over the rounds:

1. one training step of the MLP 784-256-256-10 (relu, relu, softmax, cross-entropy, mean loss, plain
   SGD) at batch 64 and 256: the blockir executor running the program the DSL builds, against the
   reference numpy step (``make_step`` of ``benchmarks/reference/mlp_numpy.py``, a byte-identical copy of the
   project's ``../shared/bench/mlp_numpy.py``, used as it is), starting from the same weights (the first
   losses are checked to agree);
2. dispatch overhead per op: a chain of 1,000 ``scale`` ops on a [1] array, run by the executor,
   minus the same 1,000 kernel calls made directly;
3. the same MLP step in PyTorch eager on the CPU, if ``torch`` is importable, timed against numpy in
   rounds of its own;
4. the peak memory (tracemalloc) of one training step at batch 64 and 256, blockir against the reference.

Goals (issue 20): <= 1.00x numpy at batch 64 (stretch: 0.90x) and <= 0.98x at batch 256, <= 3 us of dispatch
per op, <= 1.2x numpy's peak memory; the last line sums the figures up and says whether the goals are met.
With ``--place cuda:0`` (CuPy and a GPU) the executor runs the MLP step on that device (feeds copied in, the
loss fetched back each step) against the same numpy step on the host; the dispatch, torch and memory rows are
host measurements and are left out.
On machines that set OPENBLAS_CORETYPE / OPENBLAS_L2_SIZE, unset both for the benchmark command. PyTorch
is not a dependency of blockir; install it into the environment to have it measured
(``pip install torch==2.13.0``, the CPU build).
"""

from __future__ import annotations

import argparse
import importlib.util
import statistics
import sys
import time
import tracemalloc
from collections.abc import Callable
from pathlib import Path
from typing import Any, NamedTuple

import numpy as np

import blockir as bir
from blockir.ir.devices import checked_device, device_kind
from blockir.ir.schema import lookup

REPO = Path(__file__).resolve().parent.parent
# The reference step: a byte-identical copy of the project's ../shared/bench/mlp_numpy.py, kept here so that the
# benchmark runs from the repository alone. It is not the benchmark's to tune: tests/test_benchmarks.py checks
# its SHA-256 against the shared file wherever that exists.
DEFAULT_REF = REPO / "benchmarks" / "reference" / "mlp_numpy.py"
GOAL_STEP = {64: 1.00, 256: 0.98}  # blockir / numpy, per batch size
STRETCH_STEP_64, GOAL_DISPATCH_US, GOAL_MEMORY = 0.90, 3.0, 1.2
TORCH_SETTLE = 0.3  # seconds


def load_reference(path: Path) -> Any:
    spec = importlib.util.spec_from_file_location("mlp_numpy", path)
    if spec is None or spec.loader is None or not path.is_file():
        sys.exit(f"bench_executor: no reference step at {path} (give --ref)")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def blockir_step(
    ref: Any, batch: int, lr: float = 0.01, place: str = "cpu"
) -> tuple[Callable[[], Any], Callable[[], Any]]:
    """(the blockir step on ``place``, the reference step), same data and initial weights."""
    ref_step, data = ref.make_step(batch=batch, lr=lr)
    main, startup = bir.Program(), bir.Program()
    with bir.unique_name.guard(), bir.program_guard(main, startup):
        x = bir.data("x", shape=[-1, ref.SIZES[0]], dtype="float32")
        y = bir.data("y", shape=[-1, 1], dtype="int64")
        h = x
        for size in ref.SIZES[1:-1]:
            h = bir.layers.fc(h, size=size, act="relu")
        pred = bir.layers.fc(h, size=ref.SIZES[-1], act="softmax")
        loss = bir.layers.mean(bir.layers.cross_entropy(pred, y))
        bir.optimizer.SGD(learning_rate=lr).minimize(loss)
    exe, scope = bir.Executor(place), bir.Scope()
    exe.run(startup, scope=scope)
    params = main.all_parameters()  # w0, b0, w1, b1, w2, b2: the reference's order
    if [tuple(p.shape) for p in params] != [w.shape for w in data["params"]]:
        sys.exit(f"bench_executor: parameters {[p.shape for p in params]} do not match the reference's")
    for p, w in zip(params, data["params"]):
        scope.set(p.name, w.copy())
    feed = {"x": data["x"], "y": data["y"]}

    def step() -> Any:
        return exe.run(main, feed=feed, fetch_list=[loss], scope=scope)[0]

    return step, ref_step


def torch_step(ref: Any, batch: int, lr: float = 0.01) -> Callable[[], Any] | None:
    try:
        import torch
    except ImportError:
        return None
    _, data = ref.make_step(batch=batch, lr=lr)
    x, y = torch.from_numpy(data["x"]), torch.from_numpy(data["y"][:, 0])
    params = [torch.tensor(w, requires_grad=True) for w in data["params"]]

    def step() -> Any:
        h = x
        for i in range(0, len(params) - 2, 2):
            h = torch.relu(h @ params[i] + params[i + 1])
        logits = h @ params[-2] + params[-1]
        loss = torch.nn.functional.cross_entropy(logits, y)
        for p in params:
            p.grad = None
        loss.backward()
        with torch.no_grad():
            for p in params:
                p -= lr * p.grad
        return loss.item()

    return step


class Timed(NamedTuple):
    """A contender that times itself (one in another process): ``per_call(n)`` makes ``n`` calls there and
    returns the seconds per call it measured, so the messages to it are not counted."""

    per_call: Callable[[int], float]


def per_call(fn: Callable[[], Any] | Timed, n: int) -> float:
    if isinstance(fn, Timed):
        return fn.per_call(n)
    t0 = time.perf_counter()
    for _ in range(n):
        fn()
    return (time.perf_counter() - t0) / n


class Timings(NamedTuple):
    seconds: dict[str, float]  # median seconds per call of each contender
    ratio: dict[str, float]  # median over rounds of (contender / first contender), timed back to back
    spread: dict[str, tuple[float, float]]  # the least and the greatest of those ratios
    rounds: dict[str, list[float]]  # seconds per call of each contender in each round

    def ratio_to(self, name: str, base: str) -> tuple[float, float, float]:
        """The median, least and greatest over rounds of ``name``'s time over ``base``'s in the same round."""
        ratios = [a / b for a, b in zip(self.rounds[name], self.rounds[base])]
        return statistics.median(ratios), min(ratios), max(ratios)


def ratio_text(t: Timings, name: str) -> str:
    """``name``'s ratio with its range over the rounds, e.g. ``1.02x (0.99-1.05)``."""
    low, high = t.spread[name]
    return f"{t.ratio[name]:5.2f}x ({low:.2f}-{high:.2f})"


def alternate(contenders: dict[str, Callable[[], Any] | Timed], n: int, repeats: int, settle: float = 0.0) -> Timings:
    """Time the contenders in turns: ``repeats`` rounds of ``n`` calls each, the order reversed every other
    round; each round's ratios to the first contender are taken within the round, so that a slow spell of
    the machine (a shared host) weighs on both sides of a ratio. ``settle``: seconds of sleep before each
    turn, for the worker threads of the previous contender's thread pool to stop spinning."""
    times: dict[str, list[float]] = {name: [] for name in contenders}
    for fn in contenders.values():
        per_call(fn, max(1, n // 4))  # warm-up
    for r in range(repeats):
        order = list(contenders.items())
        for name, fn in order if r % 2 == 0 else reversed(order):
            time.sleep(settle)
            times[name].append(per_call(fn, n))
    base = next(iter(times.values()))
    ratios = {name: [a / b for a, b in zip(t, base)] for name, t in times.items()}
    return Timings(
        {name: statistics.median(t) for name, t in times.items()},
        {name: statistics.median(r) for name, r in ratios.items()},
        {name: (min(r), max(r)) for name, r in ratios.items()},
        times,
    )


def peak_memory(fn: Callable[[], Any]) -> int:
    """Peak bytes traced during one call, above what was allocated before it."""
    fn()
    tracemalloc.start()
    try:
        tracemalloc.reset_peak()
        base = tracemalloc.get_traced_memory()[0]
        fn()
        return tracemalloc.get_traced_memory()[1] - base
    finally:
        tracemalloc.stop()


def dispatch_overhead(n_ops: int, repeats: int) -> tuple[float, float]:
    """(executor us/op, direct kernel us/op) for a chain of ``n_ops`` scale ops on a [1] array."""
    program = bir.Program()
    block = program.global_block()
    block.create_var("t0", shape=(1,), dtype="float32")
    for i in range(n_ops):
        block.create_var(f"t{i + 1}", shape=(1,), dtype="float32")
        block.append_op("scale", {"X": f"t{i}"}, {"Out": f"t{i + 1}"}, {"scale": 1.0, "bias": 0.5})
    exe, scope, x = bir.Executor("cpu"), bir.Scope(), np.zeros(1, dtype="float32")
    plan = exe.plan(program, ["t0"], [f"t{n_ops}"])
    kernel, contexts = lookup("scale").kernel, [step.ctx for step in plan.steps]
    # The plan calls a kernel with one argument per input slot of its op type: X, then what it passes for the
    # optional slots these ops leave unbound (ScaleTensor, BiasTensor), read here from the first step's gather.
    fed: list[Any] = [None] * plan.num_slots
    fed[plan.feeds[0].slot] = x
    _, *unbound = plan.steps[0].gather(fed)

    def direct() -> Any:
        v = x
        for ctx in contexts:
            v = kernel(ctx, v, *unbound)
        return v

    def run() -> Any:
        return exe.run(program, feed={"t0": x}, fetch_list=[f"t{n_ops}"], scope=scope)[0]

    np.testing.assert_allclose(run(), direct())
    t = alternate({"executor": run, "direct": direct}, 20, repeats).seconds
    return t["executor"] / n_ops * 1e6, t["direct"] / n_ops * 1e6


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--ref",
        type=Path,
        default=DEFAULT_REF,
        help="the reference mlp_numpy.py (default: benchmarks/reference/mlp_numpy.py)",
    )
    parser.add_argument("--repeats", type=int, default=15, help="timed rounds per contender (medians)")
    parser.add_argument("--steps", type=int, default=20, help="training steps per timed round")
    parser.add_argument("--place", default="cpu", help="the executor's device for the MLP step (e.g. cuda:0)")
    args = parser.parse_args()
    ref = load_reference(args.ref)
    rows: list[tuple[str, str, str]] = []
    host = device_kind(checked_device(args.place, "--place")) == "cpu"

    print(
        f"numpy {np.__version__}, reference {args.ref}, {args.repeats} rounds of {args.steps} steps, "
        f"blockir on {args.place}"
    )
    step_ratio: dict[int, float] = {}
    torch_ratio: dict[int, float] = {}
    for batch in (64, 256):
        bir_fn, ref_fn = blockir_step(ref, batch, place=args.place)
        first_bir, first_ref = float(np.asarray(bir_fn()).reshape(-1)[0]), float(ref_fn())
        if not np.isclose(first_bir, first_ref, rtol=1e-4):
            sys.exit(f"bench_executor: first losses differ: blockir {first_bir}, numpy {first_ref}")
        t = alternate({"numpy": ref_fn, "blockir": bir_fn}, args.steps, args.repeats)
        step_ratio[batch] = t.ratio["blockir"]
        stretch = f", stretch {STRETCH_STEP_64:.2f}x" if batch == 64 else ""
        rows.append((f"MLP step, batch {batch}: numpy", f"{t.seconds['numpy'] * 1e3:8.3f} ms", ""))
        rows.append(
            (
                f"MLP step, batch {batch}: blockir",
                f"{t.seconds['blockir'] * 1e3:8.3f} ms",
                f"{ratio_text(t, 'blockir')} numpy  goal <= {GOAL_STEP[batch]:.2f}x{stretch}",
            )
        )
        # Timed against numpy in rounds of its own, with a pause before each turn: the idle worker threads
        # of torch's (OpenMP) and numpy's (OpenBLAS) thread pools spin for a while after their last task,
        # taking the cores from the other library's threads.
        torch_fn = torch_step(ref, batch) if host else None
        if not host:
            continue
        if torch_fn is None:
            rows.append((f"MLP step, batch {batch}: torch", "not installed", ""))
            continue
        t = alternate({"numpy": ref_fn, "torch": torch_fn}, args.steps, args.repeats, settle=TORCH_SETTLE)
        torch_ratio[batch] = t.ratio["torch"]
        rows.append(
            (
                f"MLP step, batch {batch}: torch",
                f"{t.seconds['torch'] * 1e3:8.3f} ms",
                f"{ratio_text(t, 'torch')} numpy (numpy {t.seconds['numpy'] * 1e3:.3f} ms in these rounds)",
            )
        )

    if not host:
        _print_rows(rows)
        print(
            f"summary: blockir on {args.place} / numpy step {step_ratio[64]:.2f}x at batch 64, "
            f"{step_ratio[256]:.2f}x at batch 256 (the goals are the host's)"
        )
        return
    exe_us, direct_us = dispatch_overhead(1000, args.repeats)
    dispatch_us = exe_us - direct_us
    rows.append(
        (
            "dispatch overhead per op (1,000 scale ops)",
            f"{dispatch_us:8.3f} us",
            f"goal <= {GOAL_DISPATCH_US:.1f} us (run {exe_us:.2f} us/op, kernel alone {direct_us:.2f})",
        )
    )

    memory_ratio: dict[int, float] = {}
    for batch in (64, 256):
        bir_fn, ref_fn = blockir_step(ref, batch)
        bir_peak, ref_peak = peak_memory(bir_fn), peak_memory(ref_fn)
        memory_ratio[batch] = bir_peak / ref_peak
        rows.append((f"peak traced memory, step at batch {batch}: numpy", f"{ref_peak / 1024:8.1f} KiB", ""))
        rows.append(
            (
                f"peak traced memory, step at batch {batch}: blockir",
                f"{bir_peak / 1024:8.1f} KiB",
                f"{bir_peak / ref_peak:5.2f}x numpy  goal <= {GOAL_MEMORY:.1f}x",
            )
        )

    _print_rows(rows)
    met = (
        all(step_ratio[batch] <= goal for batch, goal in GOAL_STEP.items())
        and dispatch_us <= GOAL_DISPATCH_US
        and max(memory_ratio.values()) <= GOAL_MEMORY
    )
    torch = (
        f"; torch/numpy step {torch_ratio[64]:.2f}x at batch 64, {torch_ratio[256]:.2f}x at batch 256"
        if torch_ratio
        else ""
    )
    print(
        f"summary: blockir/numpy step {step_ratio[64]:.2f}x at batch 64, {step_ratio[256]:.2f}x at batch 256; "
        f"dispatch {dispatch_us:.2f} us/op; peak memory {memory_ratio[64]:.2f}x at batch 64, "
        f"{memory_ratio[256]:.2f}x at batch 256{torch}; goals {'met' if met else 'NOT met'}"
    )


def _print_rows(rows: list[tuple[str, str, str]]) -> None:
    width = max(len(r[0]) for r in rows)
    for label, value, note in rows:
        print(f"{label:<{width}}  {value:>14}  {note}")


if __name__ == "__main__":
    main()
