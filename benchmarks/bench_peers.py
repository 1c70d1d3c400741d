"""Peers benchmark: a training step in blockir, hand-written numpy, PyTorch eager and PaddlePaddle, in one process.

    python benchmarks/bench_peers.py [--rounds 5] [--batches 64,256] [--steps 20] [--threads 1]
                                     [--only blockir,torch,paddle] [--chart docs/img/peers.png] [--ref PATH]

Two models, each at every batch size of ``--batches``, from the same data and initial weights in every framework:

- ``MLP``: bench_executor.py's step (784-256-256-10, relu, relu, softmax, cross-entropy, mean loss, plain SGD
  at lr 0.01); numpy is the hand-written step of ``benchmarks/reference/mlp_numpy.py`` (``--ref``; a copy of
  ``../shared/bench/mlp_numpy.py``), blockir and PyTorch are bench_executor.py's ``blockir_step`` and ``torch_step``.
- ``BOW``: a bag-of-words classifier: a sparse embedding 30,000 x 64, sum pooling over each document (5 to 40
  words, Zipf-like word ids), fc to 2 classes, softmax cross-entropy, mean loss, Adagrad (lr 0.05, epsilon 1e-6).
  numpy: ``numpy_bow`` below (the rows of repeated words merged before the sparse Adagrad update); blockir: the
  DSL with ``embedding(is_sparse=True)`` on a LoD input and ``sequence_pool("sum")``; PyTorch:
  ``embedding_bag(mode="sum", sparse=True)`` with offsets and ``torch.optim.Adagrad``.

PaddlePaddle runs its legacy static graph (``FLAGS_enable_pir_api=0``, ``paddle.enable_static()``): a Program of
the same model (fc layers, ``softmax_with_cross_entropy``; for BOW ``static.nn.embedding(is_sparse=True)`` fed a
LoD tensor and ``sequence_pool("sum")``, no padding), run by ``Executor.run`` with a feed and the loss fetched.
PyTorch and PaddlePaddle are measured where they import; they are not dependencies of blockir.

Before timing, every framework's first two losses (before and after one update) must match numpy's. Then
``--rounds`` rounds: in each every framework runs ``--steps`` steps in turn, the order reversed every other
round, each turn after a pause of 0.3 s (for the previous framework's idle threads to stop spinning); a ratio
is taken within a round (a framework's time over numpy's), then the median and range over rounds. BLAS and
OpenMP pools are limited to ``--threads`` (threadpoolctl, ``torch.set_num_threads``,
``FLAGS_paddle_num_threads``). The chart (``--chart``) shows the ratios to numpy, one group per model and batch.
"""

from __future__ import annotations

import argparse
import os
import platform
import statistics
import time
import warnings
from collections.abc import Callable
from pathlib import Path
from types import ModuleType
from typing import Any, NamedTuple

import numpy as np
from bench_executor import DEFAULT_REF, TORCH_SETTLE, blockir_step, load_reference, per_call, torch_step
from threadpoolctl import threadpool_info, threadpool_limits

import blockir as bir

REPO = Path(__file__).resolve().parent.parent
FRAMEWORKS = ("numpy", "blockir", "torch", "paddle")  # numpy: the baseline, always run
MLP_LR = 0.01  # bench_executor.py's
VOCAB, EMB_DIM, CLASSES, BOW_LR, EPS = 30_000, 64, 2, 0.05, 1e-6
WARM_UP = 0.25  # seconds

MODELS = {"MLP": "MLP 784-256-256-10, SGD", "BOW": f"BOW {VOCAB:,} x {EMB_DIM}, Adagrad"}  # the chart's labels
Step = Callable[[], float]  # one training step; returns the loss


# --- the bag-of-words model: data, numpy reference, blockir, PyTorch -------------------------------------------


class BowData(NamedTuple):
    ids: np.ndarray  # int64 [words]: the documents' word ids, one after another
    offsets: np.ndarray  # int64 [batch + 1]: document i is ids[offsets[i]:offsets[i + 1]]
    labels: np.ndarray  # int64 [batch]
    params: tuple[np.ndarray, np.ndarray, np.ndarray]  # embedding [VOCAB, EMB_DIM], fc weight, fc bias


def bow_data(batch: int, seed: int = 0) -> BowData:
    rng = np.random.default_rng(seed)
    lengths = rng.integers(5, 41, size=batch)
    ids = (VOCAB ** rng.random(int(lengths.sum()))).astype(np.int64) - 1  # log-uniform: frequent words repeat
    offsets = np.concatenate([[0], np.cumsum(lengths)]).astype(np.int64)
    emb = rng.uniform(-0.1, 0.1, size=(VOCAB, EMB_DIM)).astype(np.float32)
    w = rng.normal(scale=(1 / EMB_DIM) ** 0.5, size=(EMB_DIM, CLASSES)).astype(np.float32)
    return BowData(ids, offsets, rng.integers(0, CLASSES, size=batch), (emb, w, np.zeros(CLASSES, np.float32)))


def numpy_bow(d: BowData, lr: float = BOW_LR) -> Step:
    emb, w, b = (p.copy() for p in d.params)
    moments = [np.zeros_like(p) for p in (emb, w, b)]
    batch = len(d.labels)
    rows, starts = np.arange(batch), d.offsets[:-1]
    doc = np.repeat(rows, np.diff(d.offsets))  # the document of each word
    columns = np.arange(EMB_DIM)

    def adagrad(param: np.ndarray, moment: np.ndarray, grad: np.ndarray) -> None:
        moment += grad * grad
        param -= lr * grad / (np.sqrt(moment) + EPS)

    def step() -> float:
        pooled = np.add.reduceat(emb[d.ids], starts, axis=0)
        logits = pooled @ w + b
        e = np.exp(logits - logits.max(axis=1, keepdims=True))
        p = e / e.sum(axis=1, keepdims=True)
        loss = -np.log(p[rows, d.labels]).mean()
        g = p
        g[rows, d.labels] -= 1
        g /= batch
        g_w, g_b, g_pooled = pooled.T @ g, g.sum(0), g @ w.T
        # The embedding's sparse gradient: one row per distinct word, the rows of its occurrences summed (add.at
        # on the flat array: several times faster than on rows, or than sorting and add.reduceat).
        words, inverse = np.unique(d.ids, return_inverse=True)
        g_rows = np.zeros((len(words), EMB_DIM), np.float32)
        np.add.at(g_rows.reshape(-1), (inverse[:, None] * EMB_DIM + columns).reshape(-1), g_pooled[doc].reshape(-1))
        adagrad(w, moments[1], g_w)
        adagrad(b, moments[2], g_b)
        moment = moments[0][words] + g_rows * g_rows
        moments[0][words] = moment
        emb[words] -= lr * g_rows / (np.sqrt(moment) + EPS)
        return float(loss)

    return step


def blockir_bow(d: BowData, lr: float = BOW_LR) -> Step:
    main, startup = bir.Program(), bir.Program()
    with bir.unique_name.guard(), bir.program_guard(main, startup):
        words = bir.data("words", shape=[-1, 1], dtype="int64", lod_level=1)
        label = bir.data("label", shape=[-1, 1], dtype="int64")
        emb = bir.layers.embedding(words, size=[VOCAB, EMB_DIM], is_sparse=True)
        pred = bir.layers.fc(bir.layers.sequence_pool(emb, pool_type="sum"), size=CLASSES, act="softmax")
        loss = bir.layers.mean(bir.layers.cross_entropy(pred, label))
        bir.optimizer.Adagrad(learning_rate=lr, epsilon=EPS).minimize(loss)
    exe, scope = bir.Executor("cpu"), bir.Scope()
    exe.run(startup, scope=scope)
    params = main.all_parameters()  # embedding, fc weight, fc bias
    assert [tuple(p.shape) for p in params] == [p.shape for p in d.params], params
    for p, value in zip(params, d.params):
        scope.set(p.name, value.copy())
    feed = {"words": bir.LoDTensor(d.ids.reshape(-1, 1), [d.offsets.tolist()]), "label": d.labels.reshape(-1, 1)}
    return lambda: float(exe.run(main, feed=feed, fetch_list=[loss], scope=scope)[0].reshape(-1)[0])


def torch_bow(torch: ModuleType, d: BowData, lr: float = BOW_LR) -> Step:
    emb, w, b = (torch.tensor(p, requires_grad=True) for p in d.params)
    ids, starts, labels = (torch.from_numpy(a) for a in (d.ids, d.offsets[:-1], d.labels))
    optimizer = torch.optim.Adagrad([emb, w, b], lr=lr, eps=EPS)
    functional = torch.nn.functional

    def step() -> float:
        pooled = functional.embedding_bag(ids, emb, starts, mode="sum", sparse=True)
        loss = functional.cross_entropy(pooled @ w + b, labels)
        optimizer.zero_grad(set_to_none=True)
        loss.backward()
        optimizer.step()
        return loss.item()

    return step


# --- PaddlePaddle's legacy static graph ------------------------------------------------------------------------


def paddle_program(paddle: ModuleType, build: Callable[[], Any], params: list[np.ndarray]) -> Callable[[dict], float]:
    """Build a Program (``build`` returns its loss) with SGD or Adagrad inside; start it with ``params``."""
    main, startup, scope = paddle.static.Program(), paddle.static.Program(), paddle.static.Scope()
    with paddle.utils.unique_name.guard(), paddle.static.program_guard(main, startup), warnings.catch_warnings():
        warnings.simplefilter("ignore")  # sequence_pool: "deprecated since 3.0.0 ... just for old static mode"
        loss = build()
    place = paddle.CPUPlace()
    exe = paddle.static.Executor(place)
    exe.run(startup, scope=scope)
    names = [p.name for p in main.all_parameters()]
    for name, value in zip(names, params, strict=True):
        tensor = scope.find_var(name).get_tensor()
        assert tuple(tensor.shape()) == value.shape, (name, tensor.shape(), value.shape)
        tensor.set(value.copy(), place)
    return lambda feed: float(exe.run(main, feed=feed, fetch_list=[loss], scope=scope)[0])


def paddle_mlp(paddle: ModuleType, ref: Any, batch: int, lr: float = MLP_LR) -> Step:
    _, data = ref.make_step(batch=batch, lr=lr)

    def build() -> Any:
        h = paddle.static.data("x", shape=[-1, ref.SIZES[0]], dtype="float32")
        y = paddle.static.data("y", shape=[-1, 1], dtype="int64")
        for size in ref.SIZES[1:-1]:
            h = paddle.static.nn.fc(h, size=size, activation="relu")
        loss = paddle.nn.functional.cross_entropy(paddle.static.nn.fc(h, size=ref.SIZES[-1]), y)
        paddle.optimizer.SGD(learning_rate=lr).minimize(loss)
        return loss

    run, feed = paddle_program(paddle, build, data["params"]), {"x": data["x"], "y": data["y"]}
    return lambda: run(feed)


def paddle_bow(paddle: ModuleType, d: BowData, lr: float = BOW_LR) -> Step:
    def build() -> Any:
        words = paddle.static.data("words", shape=[-1, 1], dtype="int64", lod_level=1)
        label = paddle.static.data("label", shape=[-1, 1], dtype="int64")
        emb = paddle.static.nn.embedding(words, size=[VOCAB, EMB_DIM], is_sparse=True)
        pooled = paddle.static.nn.sequence_lod.sequence_pool(emb, pool_type="sum")
        loss = paddle.nn.functional.cross_entropy(paddle.static.nn.fc(pooled, size=CLASSES), label)
        paddle.optimizer.Adagrad(learning_rate=lr, epsilon=EPS).minimize(loss)
        return loss

    run = paddle_program(paddle, build, list(d.params))
    words = paddle.base.core.LoDTensor()
    words.set(d.ids.reshape(-1, 1), paddle.CPUPlace())
    words.set_lod([d.offsets.tolist()])
    feed = {"words": words, "label": d.labels.reshape(-1, 1)}
    return lambda: run(feed)


# --- the peers, timing, the table and the chart ----------------------------------------------------------------


def import_peers(only: set[str], threads: int) -> tuple[dict[str, ModuleType], dict[str, str]]:
    """The peers of ``only`` that import, and every framework's version (or "not installed")."""
    modules: dict[str, ModuleType] = {}
    versions = {"numpy": np.__version__, "blockir": bir.__version__}
    if "paddle" in only:
        os.environ["FLAGS_enable_pir_api"] = "0"  # the legacy ProgramDesc graph, not PIR
        os.environ["FLAGS_paddle_num_threads"] = str(threads)
        os.environ.setdefault("GLOG_minloglevel", "2")  # no "New Executor is Running" lines
        try:
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")  # "No ccache found"
                import paddle
        except ImportError:
            versions["paddle"] = "not installed"
        else:
            paddle.enable_static()
            modules["paddle"], versions["paddle"] = paddle, paddle.__version__
    if "torch" in only:
        try:
            import torch
        except ImportError:
            versions["torch"] = "not installed"
        else:
            torch.set_num_threads(threads)
            warnings.filterwarnings("ignore", message="Sparse invariant checks")  # Adagrad's sparse rows: valid
            modules["torch"], versions["torch"] = torch, torch.__version__
    return modules, versions


def contenders(model: str, batch: int, ref: Any, only: set[str], peers: dict[str, ModuleType]) -> dict[str, Step]:
    steps: dict[str, Step] = {}
    if model == "MLP":
        bir_fn, ref_fn = blockir_step(ref, batch, MLP_LR)
        steps["numpy"] = lambda: float(ref_fn())
        steps["blockir"] = lambda: float(np.asarray(bir_fn()).reshape(-1)[0])
        if "torch" in peers and (torch_fn := torch_step(ref, batch, MLP_LR)) is not None:
            steps["torch"] = torch_fn
        if "paddle" in peers:
            steps["paddle"] = paddle_mlp(peers["paddle"], ref, batch)
    else:
        d = bow_data(batch)
        steps["numpy"], steps["blockir"] = numpy_bow(d), blockir_bow(d)
        if "torch" in peers:
            steps["torch"] = torch_bow(peers["torch"], d)
        if "paddle" in peers:
            steps["paddle"] = paddle_bow(peers["paddle"], d)
    return {name: fn for name, fn in steps.items() if name in only}


def check(label: str, steps: dict[str, Step]) -> None:
    """The first two losses (before and after one update) of every framework match numpy's."""
    losses = {name: (fn(), fn()) for name, fn in steps.items()}
    for name, pair in losses.items():
        if not np.allclose(pair, losses["numpy"], rtol=1e-4, atol=1e-6):
            raise SystemExit(
                f"bench_peers: {label}: {name}'s first losses {pair} differ from numpy's {losses['numpy']}"
            )


class Timing(NamedTuple):
    ms: list[float]  # ms per step in each round
    ratio: list[float]  # over numpy's time in the same round


def time_rounds(steps: dict[str, Step], n: int, rounds: int, settle: float) -> dict[str, Timing]:
    """``rounds`` rounds of ``n`` steps per framework, in turns, the order reversed every other round."""
    seconds: dict[str, list[float]] = {name: [] for name in steps}
    for fn in steps.values():
        # Warm-up: a quarter of a round, and at least WARM_UP seconds (on 2 threads torch's first steps take
        # tens of ms each).
        end = time.perf_counter() + WARM_UP
        per_call(fn, max(2, n // 4))
        while time.perf_counter() < end:
            fn()
    for r in range(rounds):
        order = list(steps.items())
        for name, fn in order if r % 2 == 0 else reversed(order):
            time.sleep(settle)  # for the previous framework's idle pool threads to stop spinning
            seconds[name].append(per_call(fn, n))
    base = seconds["numpy"]
    return {name: Timing([v * 1e3 for v in s], [a / b for a, b in zip(s, base)]) for name, s in seconds.items()}


def median_range(values: list[float], fmt: str) -> tuple[str, str]:
    return format(statistics.median(values), fmt), f"{format(min(values), fmt)} - {format(max(values), fmt)}"


def machine() -> str:
    cpu = platform.processor() or "unknown CPU"
    for line in Path("/proc/cpuinfo").read_text().splitlines() if Path("/proc/cpuinfo").exists() else []:
        if line.startswith("model name"):
            cpu = line.split(":", 1)[1].strip()
            break
    return f"{cpu}, {os.cpu_count()} cores"


def blas() -> str:
    pools = [f"{i['internal_api']} {i['version']}" for i in threadpool_info() if i["user_api"] == "blas"]
    return ", ".join(pools) or "unknown BLAS"


def chart(path: Path, results: dict[tuple[str, int], dict[str, Timing]], caption: str, title: str) -> None:
    try:
        import matplotlib
    except ImportError:
        print(f"\nno chart ({path}): matplotlib is not installed")
        return
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    groups = list(results)
    names = [n for n in FRAMEWORKS[1:] if any(n in r for r in results.values())]
    fig, ax = plt.subplots(figsize=(10, 5.5))
    width = 0.8 / max(1, len(names))
    top = max(max(t.ratio) for r in results.values() for t in r.values())
    for i, name in enumerate(names):
        label: str | None = name  # in the legend once
        for g, group in enumerate(groups):
            if name not in results[group]:
                continue
            ratio, x = results[group][name].ratio, g + (i - (len(names) - 1) / 2) * width
            med = statistics.median(ratio)
            ax.bar(x, med, width, color=f"C{FRAMEWORKS.index(name) - 1}", label=label)
            label = None
            ax.errorbar(x, med, yerr=[[med - min(ratio)], [max(ratio) - med]], color="black", capsize=3)
            ax.annotate(
                f"{med:.2f}",
                (x, max(ratio)),
                xytext=(0, 4),
                textcoords="offset points",
                ha="center",
                fontsize=8,
                bbox={"boxstyle": "square,pad=0.1", "facecolor": "white", "edgecolor": "none"},
            )
    ax.axhline(1.0, color="black", linestyle="--", linewidth=1, label="numpy = 1")
    ax.set_xticks(range(len(groups)), [f"{MODELS[model]}\nbatch {batch}" for model, batch in groups], fontsize=9)
    ax.set_ylabel("step time / hand-written numpy's (lower is faster)")
    ax.set_ylim(0, top * 1.25)
    ax.set_title(title, fontsize=11)
    ax.legend(loc="upper left", ncols=len(names) + 1)
    fig.text(0.5, 0.01, caption, ha="center", va="bottom", fontsize=8, wrap=True)
    fig.tight_layout(rect=(0, 0.08, 1, 1))
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=120)
    plt.close(fig)
    print(f"\nchart: {path}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=5, help="timed rounds (medians and ranges over them)")
    parser.add_argument("--batches", default="64,256", help="batch sizes, comma-separated")
    parser.add_argument("--steps", type=int, default=20, help="training steps per framework per round")
    parser.add_argument("--threads", type=int, default=1, help="BLAS and OpenMP threads")
    parser.add_argument("--chart", default=str(REPO / "docs" / "img" / "peers.png"), help="the chart's file ('': none)")
    parser.add_argument("--only", default=",".join(FRAMEWORKS[1:]), help="frameworks besides numpy, comma-separated")
    parser.add_argument(
        "--ref",
        type=Path,
        default=DEFAULT_REF,
        help="the reference mlp_numpy.py (default: benchmarks/reference/mlp_numpy.py)",
    )
    args = parser.parse_args()
    only = {"numpy", *(s.strip() for s in args.only.split(",") if s.strip())}
    if unknown := only - set(FRAMEWORKS):
        parser.error(f"--only: unknown {sorted(unknown)}; choose from {', '.join(FRAMEWORKS)}")
    batches = [int(b) for b in args.batches.split(",")]
    ref = load_reference(args.ref)
    peers, versions = import_peers(only, args.threads)
    # A pause before every turn, also with one thread: a framework's idle pool threads (Paddle's, torch's
    # inter-op pool) spin for a while after its last step, and would slow whichever framework runs next (with
    # one thread asked and no pause, blockir after torch and Paddle measured 1.04x numpy's MLP step at batch
    # 64, where alone with numpy it measured 1.00x).
    settle = TORCH_SETTLE

    with threadpool_limits(limits=args.threads):
        setting = f"BLAS and OpenMP threads {args.threads} (numpy: {blas()})"
        print(f"{machine()}; Python {platform.python_version()}; {setting}")
        print("; ".join(f"{name} {versions[name]}" for name in FRAMEWORKS if name in versions))
        print(f"{args.rounds} rounds of {args.steps} steps per framework, alternating\n")
        results: dict[tuple[str, int], dict[str, Timing]] = {}
        for model in ("MLP", "BOW"):
            for batch in batches:
                steps = contenders(model, batch, ref, only, peers)
                check(f"{model} batch {batch}", steps)
                results[model, batch] = time_rounds(steps, args.steps, args.rounds, settle)

    rows = [("model", "batch", "framework", "ms/step", "range", "/ numpy", "range")]
    for (model, batch), timings in results.items():
        for name, t in timings.items():
            rows.append((model, str(batch), name, *median_range(t.ms, ".3f"), *median_range(t.ratio, ".2f")))
    widths = [max(len(r[i]) for r in rows) for i in range(len(rows[0]))]
    for row in rows:
        print("  ".join(cell.ljust(w) if i < 3 else cell.rjust(w) for i, (cell, w) in enumerate(zip(row, widths))))
    for name in FRAMEWORKS:
        if versions.get(name) == "not installed":
            print(f"{name}: not installed")

    if args.chart:
        caption = (
            f"Median of {args.rounds} rounds of {args.steps} steps, the frameworks taking turns; error bars: range "
            f"over rounds. {machine()}; {setting}; Python {platform.python_version()}, "
            + ", ".join(f"{n} {versions[n]}" for n in FRAMEWORKS if versions.get(n, "not installed") != "not installed")
            + "."
        )
        chart(Path(args.chart), results, caption, "Training step time relative to hand-written numpy, one process")


if __name__ == "__main__":
    main()
