"""CNN benchmark: the training step of a CIFAR-like CNN in blockir against PyTorch eager, and its layers' kernels
against the gemms they need, in one process.

    python benchmarks/bench_cnn.py [--rounds 5] [--batches 16,64,128] [--steps 5] [--threads 1]
                                   [--layout NCHW] [--place cpu] [--only blockir,torch] [--layers-batch 64]
                                   [--infer --paddle-python PATH [--infer-models ...] [--infer-sizes 64,224]
                                    [--infer-batches 1,8]]

The model (issue 34): 3x32x32 images; five times conv 3x3 (padding 1, no bias) + batch_norm + relu at 32, 32, 64,
64 and 128 channels; 2x2 max pooling after the 2nd and the 4th; global average pooling; fc to 10 classes;
softmax cross-entropy, mean loss; Momentum (lr 0.01, momentum 0.9). blockir runs the program the DSL builds
(``--layout NHWC``: the same program in NHWC, the images transposed once); PyTorch (imported only if
installed, not a dependency of blockir) runs ``torch.nn.functional`` in NCHW with ``torch.optim.SGD``, from the
same data and initial weights. The first two losses (before and after one update) must agree.

Timing: ``--rounds`` rounds, in each every framework runs ``--steps`` steps in turn, the order reversed every
other round, after a pause of 0.3 s; a ratio is taken within a round (blockir's time over torch's), then the
medians over rounds of the ms per step and of the ratio (with its range). Then, per conv layer of the model at
batch ``--layers-batch``, the kernels alone (goal 3 of issue 34): ``conv2d`` against one numpy gemm of the same
m (output channels), n (output pixels of the batch) and k (input channels x 9), ``conv2d_grad`` against its two
gemms (dW: m x k over n, dX: k x n over m), and the ``batch_norm``, ``pool2d`` kernels and their gradients beside,
each pair alternating as above. BLAS is limited to ``--threads`` threads (threadpoolctl), and so is torch
(``torch.set_num_threads``).

``--place cuda:0``: the training step on that GPU in blockir (CuPy, cuBLAS gemms) and in torch (cuDNN), the
kernels-alone rows skipped (they are the host's); ``scripts/gpu_check.sh`` runs it.

``--infer`` (goal 2): ``paddle_infer_side.py``, run by ``--paddle-python`` (an environment with PaddlePaddle;
default ``$BLOCKIR_PADDLE_PYTHON``; Paddle is not a dependency of blockir), exports ``paddle.vision.models``
(``--infer-models``, 1,000 classes, eval mode) as legacy ``.pdmodel`` files; blockir loads each with
``load_inference_model`` (its inference passes on, as for ``blockir run``) and Paddle Inference runs it with
oneDNN and without, ``--threads`` math-library threads; the outputs must agree (relative 1e-4) before the three
are timed in alternating rounds (Paddle's time measured in its own process, the messages to it not counted).
"""

from __future__ import annotations

import argparse
import functools
import json
import os
import platform
import statistics
import subprocess
import tempfile
from collections.abc import Callable
from pathlib import Path
from types import ModuleType
from typing import Any, NamedTuple

import numpy as np
from bench_executor import TORCH_SETTLE, Timed, Timings, alternate, per_call
from bench_peers import blas, machine
from threadpoolctl import threadpool_limits

import blockir as bir
from blockir.ir.schema import KernelContext, lookup

HERE = Path(__file__).resolve().parent
CHANNELS = (32, 32, 64, 64, 128)
POOL_AFTER = (1, 3)  # 2x2 max pooling after these conv layers
IMAGE, CLASSES, LR, MOMENTUM = 32, 10, 0.01, 0.9
Step = Callable[[], float]


class CnnData(NamedTuple):
    x: np.ndarray  # float32 [batch, 3, 32, 32]
    labels: np.ndarray  # int64 [batch, 1]
    convs: list[np.ndarray]  # the conv filters [M, C, 3, 3]
    fc: tuple[np.ndarray, np.ndarray]  # [128, 10], [10]


def cnn_data(batch: int, seed: int = 0) -> CnnData:
    rng = np.random.default_rng(seed)
    convs, c = [], 3
    for m in CHANNELS:
        convs.append(rng.normal(scale=(2 / (9 * c)) ** 0.5, size=(m, c, 3, 3)).astype(np.float32))
        c = m
    fc_w = rng.normal(scale=(1 / c) ** 0.5, size=(c, CLASSES)).astype(np.float32)
    x = rng.standard_normal((batch, 3, IMAGE, IMAGE)).astype(np.float32)
    labels = rng.integers(0, CLASSES, size=(batch, 1))
    return CnnData(x, labels, convs, (fc_w, np.zeros(CLASSES, np.float32)))


def blockir_cnn(d: CnnData, layout: str = "NCHW", place: str = "cpu") -> Step:
    """The blockir training step of the model on data ``d`` in ``layout``, on ``place``."""
    main, startup = bir.Program(), bir.Program()
    image = [3, IMAGE, IMAGE] if layout == "NCHW" else [IMAGE, IMAGE, 3]
    with bir.unique_name.guard(), bir.program_guard(main, startup):
        x = bir.data("x", shape=[-1, *image], dtype="float32")
        y = bir.data("y", shape=[-1, 1], dtype="int64")
        h = x
        for i, m in enumerate(CHANNELS):
            h = bir.layers.conv2d(h, m, 3, padding=1, bias_attr=False, data_format=layout)
            h = bir.layers.batch_norm(h, act="relu", data_layout=layout)
            if i in POOL_AFTER:
                h = bir.layers.pool2d(h, 2, "max", 2, data_format=layout)
        h = bir.layers.pool2d(h, pool_type="avg", global_pooling=True, data_format=layout)
        logits = bir.layers.fc(h, CLASSES)
        loss = bir.layers.mean(bir.layers.softmax_with_cross_entropy(logits, y))
        bir.optimizer.MomentumOptimizer(LR, MOMENTUM).minimize(loss)
    exe, scope = bir.Executor(place), bir.Scope()
    exe.run(startup, scope=scope)
    filters = [p for p in main.all_parameters() if len(p.shape) == 4]
    fc_w, fc_b = (p for p in main.all_parameters() if p.name.startswith("fc"))
    for p, w in zip(filters, d.convs):
        scope.set(p.name, w.copy())
    scope.set(fc_w.name, d.fc[0].copy())
    scope.set(fc_b.name, d.fc[1].copy())
    feed = {"x": d.x if layout == "NCHW" else np.ascontiguousarray(d.x.transpose(0, 2, 3, 1)), "y": d.labels}

    def step(trace: Path | None = None) -> float:
        fetched = exe.run(main, feed=feed, fetch_list=[loss], scope=scope, trace=trace)
        return float(np.asarray(fetched[0]).reshape(-1)[0])

    return step


def torch_cnn(torch: ModuleType, d: CnnData, device: str = "cpu") -> Step:
    """The same step in PyTorch eager (NCHW, torch.nn.functional, torch.optim.SGD with momentum) on ``device``
    (``cuda:0``: cuDNN's convolutions; the loss read back each step, as blockir's fetch does)."""
    f = torch.nn.functional
    convs = [torch.tensor(w, device=device, requires_grad=True) for w in d.convs]
    scales = [torch.ones(m, device=device, requires_grad=True) for m in CHANNELS]
    shifts = [torch.zeros(m, device=device, requires_grad=True) for m in CHANNELS]
    running = [(torch.zeros(m, device=device), torch.ones(m, device=device)) for m in CHANNELS]
    fc_w, fc_b = (torch.tensor(a, device=device, requires_grad=True) for a in d.fc)
    optimizer = torch.optim.SGD([*convs, *scales, *shifts, fc_w, fc_b], lr=LR, momentum=MOMENTUM)
    x, y = torch.from_numpy(d.x).to(device), torch.from_numpy(d.labels[:, 0]).to(device)

    def step() -> float:
        h = x
        for i, (w, s, b, (mean, var)) in enumerate(zip(convs, scales, shifts, running)):
            h = f.relu(f.batch_norm(f.conv2d(h, w, padding=1), mean, var, s, b, training=True, momentum=0.1))
            if i in POOL_AFTER:
                h = f.max_pool2d(h, 2)
        loss = f.cross_entropy(h.mean(dim=(2, 3)) @ fc_w + fc_b, y)
        optimizer.zero_grad(set_to_none=True)
        loss.backward()
        optimizer.step()
        return float(loss.item())

    return step


def check(batch: int, steps: dict[str, Step]) -> None:
    """The first two losses (before and after one update) of every framework agree."""
    losses = {name: (fn(), fn()) for name, fn in steps.items()}
    first = next(iter(losses.values()))
    for name, pair in losses.items():
        if not np.allclose(pair, first, rtol=2e-4, atol=1e-5):
            raise SystemExit(f"bench_cnn: batch {batch}: {name}'s first losses {pair} differ from {first}")


# --- the layers' kernels alone ----------------------------------------------------------------------------------


def kernel(op_type: str, attrs: dict[str, Any], wants: tuple[bool, ...]) -> Callable[..., Any]:
    """``op_type``'s kernel bound to a context of its schema's defaults updated by ``attrs``."""
    schema = lookup(op_type)
    if schema.kernel is None:
        raise SystemExit(f"bench_cnn: {op_type} has no kernel")
    ctx = KernelContext(np, {a.name: attrs.get(a.name, a.default) for a in schema.attrs}, wants, op_type)
    fn = schema.kernel
    return lambda *args: fn(ctx, *args)


def ratio_row(label: str, name: str, t: Timings, kernel_key: str, gemm_key: str) -> tuple[str, ...]:
    low, high = t.spread[kernel_key]
    ms = f"{t.seconds[kernel_key] * 1e3:.2f}", f"{t.seconds[gemm_key] * 1e3:.2f}"
    return (label, name, *ms, f"{t.ratio[kernel_key]:.2f}x ({low:.2f}-{high:.2f})")


def conv_rows(label: str, x: np.ndarray, w: np.ndarray, dy: np.ndarray, layout: str, rounds: int) -> list:
    """conv2d against one gemm of its m, n, k, and conv2d_grad against its two gemms (dW and dX's columns)."""
    rng = np.random.default_rng(2)
    attrs = {"paddings": [1, 1], "data_format": layout}
    conv, conv_grad = kernel("conv2d", attrs, (True,)), kernel("conv2d_grad", attrs, (True, True))
    m, k, n = w.shape[0], w[0].size, dy.size // w.shape[0]
    a, b, d = (rng.standard_normal(s).astype(np.float32) for s in ((m, k), (k, n), (m, n)))
    steps = max(3, int(2e8 / (2 * m * n * k)))

    def two_gemms() -> None:
        d @ b.T  # dW [m, k]
        a.T @ d  # dX's columns [k, n]

    forward = alternate({"gemm": lambda: a @ b, "conv2d": lambda: conv(x, w, None, None)}, steps, rounds)
    backward = alternate({"gemms": two_gemms, "grad": lambda: conv_grad(x, w, dy)}, steps, rounds)
    return [
        ratio_row(label, "conv2d", forward, "conv2d", "gemm"),
        ratio_row(label, "conv2d_grad", backward, "grad", "gemms"),
    ]


def other_rows(label: str, y: np.ndarray, layout: str, pool: bool, rounds: int) -> list:
    """batch_norm and its gradient on the conv's output ``y`` (and max pooling after it with ``pool``: pool2d, and in
    NCHW max_pool2d_with_index, which the training step runs in its place), ms."""
    m = y.shape[-1 if layout == "NHWC" else 1]
    ones, zeros = np.ones(m, np.float32), np.zeros(m, np.float32)
    bn, bn_grad = (
        kernel("batch_norm", {"data_layout": layout}, (True,) * 6),
        kernel("batch_norm_grad", {"data_layout": layout}, (True,) * 3),
    )
    out, _, _, saved_mean, saved_inv, reserve = bn(y, ones, zeros, zeros.copy(), ones.copy(), None)
    calls = {
        "batch_norm": lambda: bn(y, ones, zeros, zeros.copy(), ones.copy(), None),
        "batch_norm_grad": lambda: bn_grad(y, ones, zeros, None, None, saved_mean, saved_inv, reserve, out),
    }
    if pool:
        attrs = {"pooling_type": "max", "ksize": [2, 2], "strides": [2, 2], "data_format": layout}
        pool2d, pool2d_grad = kernel("pool2d", attrs, (True,)), kernel("pool2d_grad", attrs, (True,))
        pooled = pool2d(y)
        calls["pool2d max"] = lambda: pool2d(y)
        calls["pool2d_grad max"] = lambda: pool2d_grad(y, pooled, pooled)
        if layout == "NCHW":  # what the training step runs (BuildStrategy.max_pool_with_index)
            index_attrs = {"ksize": [2, 2], "strides": [2, 2]}
            with_index = kernel("max_pool2d_with_index", index_attrs, (True, True))
            with_index_grad = kernel("max_pool2d_with_index_grad", index_attrs, (True,))
            mask = with_index(y)[1]
            calls["max_pool2d_with_index"] = lambda: with_index(y)
            calls["max_pool2d_with_index_grad"] = lambda: with_index_grad(y, mask, pooled)
    steps = max(3, int(2e7 / y.size))
    return [
        (label, name, f"{statistics.median(per_call(fn, steps) for _ in range(rounds)) * 1e3:.2f}", "", "")
        for name, fn in calls.items()
    ]


def layer_rows(batch: int, layout: str, rounds: int) -> list[tuple[str, ...]]:
    """Per conv layer of the model at ``batch``: its kernels' ms, the convolution's against their gemms."""
    rng = np.random.default_rng(1)
    rows, c, size = [], 3, IMAGE
    for i, m in enumerate(CHANNELS):
        x, dy = (rng.standard_normal((batch, ch, size, size)).astype(np.float32) for ch in (c, m))
        if layout == "NHWC":
            x, dy = np.ascontiguousarray(x.transpose(0, 2, 3, 1)), np.ascontiguousarray(dy.transpose(0, 2, 3, 1))
        w = rng.standard_normal((m, c, 3, 3)).astype(np.float32)
        label = f"conv{i + 1} {c}->{m} {size}x{size}"
        rows += conv_rows(label, x, w, dy, layout, rounds) + other_rows(label, dy, layout, i in POOL_AFTER, rounds)
        size //= 2 if i in POOL_AFTER else 1
        c = m
    return rows


# --- inference of Paddle's models against Paddle Inference (goal 2) ---------------------------------------------


INFER_MODELS = "resnet18,mobilenet_v1,squeezenet1_0,shufflenet_v2_x0_5"


class PaddleSide:
    """``paddle_infer_side.py`` run by the Python of an environment with PaddlePaddle, asked over its stdin."""

    def __init__(self, python: str) -> None:
        self.process = subprocess.Popen(
            [python, str(HERE / "paddle_infer_side.py")], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True
        )

    def ask(self, **request: Any) -> dict[str, Any]:
        assert self.process.stdin is not None and self.process.stdout is not None
        self.process.stdin.write(json.dumps(request) + "\n")
        self.process.stdin.flush()
        for line in self.process.stdout:
            if line.startswith("@@ "):
                answer: dict[str, Any] = json.loads(line[3:])
                if "error" in answer:
                    raise SystemExit(f"bench_cnn: the Paddle side, asked to {request['cmd']}: {answer['error']}")
                return answer
        raise SystemExit("bench_cnn: the Paddle side stopped (its errors are above)")

    def timed(self, key: str, x_path: str) -> Timed:
        return Timed(lambda n: float(self.ask(cmd="time", key=key, input=x_path, n=n)["seconds"]))

    def close(self) -> None:
        assert self.process.stdin is not None
        self.process.stdin.close()
        self.process.wait(timeout=60)


def blockir_inference(prefix: str) -> Callable[[np.ndarray], np.ndarray]:
    """blockir's inference of the model saved at ``prefix`` (one input, the first output)."""
    exe, scope = bir.Executor("cpu"), bir.Scope()
    program, feeds, fetches = bir.io.load_inference_model(prefix, exe, scope=scope)
    return lambda x: np.asarray(exe.run(program, feed={feeds[0]: x}, fetch_list=fetches, scope=scope)[0])


def infer_rows(side: PaddleSide | None, args: argparse.Namespace) -> list[tuple[str, ...]]:
    """Per model, input size and batch: blockir's inference of the exported ``.pdmodel`` (its inference passes
    on, as ``blockir run`` does) against Paddle Inference with oneDNN and without, alternating; outputs checked.
    Without Paddle (``side`` None) there are no rows: the models are Paddle's exports."""
    rows: list[tuple[str, ...]] = []
    if side is None:
        return rows
    rng = np.random.default_rng(3)
    models, sizes = args.infer_models.split(","), [int(v) for v in args.infer_sizes.split(",")]
    with tempfile.TemporaryDirectory() as tmp:
        side.ask(cmd="export", dir=tmp, models=models, sizes=sizes)
        x_path, y_path = os.path.join(tmp, "x.npy"), os.path.join(tmp, "y.npy")
        for name in models:
            for size in sizes:
                prefix = os.path.join(tmp, f"{name}_{size}")
                run = blockir_inference(prefix)
                for onednn in (True, False):
                    side.ask(cmd="load", key=f"{prefix}:{onednn}", prefix=prefix, mkldnn=onednn, threads=args.threads)
                for batch in (int(b) for b in args.infer_batches.split(",")):
                    x = rng.standard_normal((batch, 3, size, size)).astype(np.float32)
                    np.save(x_path, x)
                    infer = functools.partial(run, x)

                    side.ask(cmd="run", key=f"{prefix}:True", input=x_path, output=y_path)
                    theirs = np.load(y_path)
                    diff = float(np.abs(infer() - theirs).max() / max(float(np.abs(theirs).max()), 1e-30))
                    if diff > 1e-4:
                        raise SystemExit(f"bench_cnn: {name} {size}x{size}: blockir and Paddle differ by {diff:.1e}")
                    n = max(3, int(0.3 / per_call(infer, 2)))
                    contenders = {
                        "onednn": side.timed(f"{prefix}:True", x_path),
                        "paddle": side.timed(f"{prefix}:False", x_path),
                        "blockir": infer,
                    }
                    t = alternate(contenders, n, args.rounds, settle=TORCH_SETTLE)
                    ratios = [t.ratio_to("blockir", base) for base in ("onednn", "paddle")]
                    rows.append(
                        (
                            f"{name} {size}x{size}",
                            f"batch {batch}",
                            *(f"{t.seconds[c] * 1e3:.2f}" for c in ("blockir", "onednn", "paddle")),
                            *(f"{r[0]:.2f}x ({r[1]:.2f}-{r[2]:.2f})" for r in ratios),
                            f"{diff:.0e}",
                        )
                    )
    return rows


def print_rows(rows: list[tuple[str, ...]]) -> None:
    widths = [max(len(r[i]) for r in rows) for i in range(len(rows[0]))]
    for row in rows:
        print("  ".join(cell.ljust(w) if i < 2 else cell.rjust(w) for i, (cell, w) in enumerate(zip(row, widths))))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=5, help="timed rounds (medians and ranges over them)")
    parser.add_argument("--batches", default="16,64,128", help="batch sizes of the training step, comma-separated")
    parser.add_argument("--steps", type=int, default=5, help="training steps per framework per round")
    parser.add_argument("--threads", type=int, default=1, help="BLAS threads and torch's and Paddle's threads")
    parser.add_argument("--layout", default="NCHW", choices=("NCHW", "NHWC"), help="blockir's data layout")
    parser.add_argument("--place", default="cpu", help="the training step's device, blockir's and torch's (cuda:0)")
    parser.add_argument("--only", default="blockir,torch", help="contenders, comma-separated")
    parser.add_argument("--layers-batch", type=int, default=64, help="batch of the per-layer rows (0: none)")
    parser.add_argument("--infer", action="store_true", help="also Paddle's models against Paddle Inference")
    parser.add_argument(
        "--paddle-python",
        default=os.environ.get("BLOCKIR_PADDLE_PYTHON", ""),
        help="the Python of an environment with PaddlePaddle (default $BLOCKIR_PADDLE_PYTHON)",
    )
    parser.add_argument("--infer-models", default=INFER_MODELS, help="paddle.vision.models constructors")
    parser.add_argument("--infer-sizes", default="64,224", help="input sizes of the inference rows")
    parser.add_argument("--infer-batches", default="1,8", help="batch sizes of the inference rows")
    args = parser.parse_args()
    only = set(args.only.split(","))
    host = args.place == "cpu"
    versions = {"numpy": np.__version__, "blockir": bir.__version__}
    torch = None
    if "torch" in only:
        try:
            import torch
        except ImportError:
            versions["torch"] = "not installed"
        else:
            torch.set_num_threads(args.threads)
            versions["torch"] = torch.__version__
            if not host and not torch.cuda.is_available():
                versions["torch"] += f" (without {args.place}: not run)"
                torch = None

    with threadpool_limits(limits=args.threads):
        setting = f"BLAS threads {args.threads} (numpy: {blas()}), torch threads {args.threads}"
        print(f"{machine()}; Python {platform.python_version()}; {setting}")
        print("; ".join(f"{name} {v}" for name, v in versions.items()))
        print(f"{args.rounds} rounds of {args.steps} steps per framework, alternating; blockir in {args.layout}")
        print(f"training step on {args.place}\n")
        rows = [("step", "framework", "ms/step", "/ torch" if torch else "/ first", "range")]
        summary = []
        for batch in (int(b) for b in args.batches.split(",") if b):
            d = cnn_data(batch)
            steps: dict[str, Step] = {}  # the first is the base of the ratios
            if torch is not None:
                steps["torch"] = torch_cnn(torch, d, args.place)
            if "blockir" in only:
                steps["blockir"] = blockir_cnn(d, args.layout, args.place)
            check(batch, steps)
            t = alternate(steps, args.steps, args.rounds, settle=TORCH_SETTLE)
            for name in steps:
                low, high = t.spread[name]
                rows.append(
                    (
                        f"batch {batch}",
                        name,
                        f"{t.seconds[name] * 1e3:.1f}",
                        f"{t.ratio[name]:.2f}",
                        f"{low:.2f} - {high:.2f}",
                    )
                )
            if torch is not None and "blockir" in steps:
                summary.append(f"{t.ratio['blockir']:.2f}x torch at batch {batch}")
        print_rows(rows)
        if args.layers_batch and host:
            print(f"\nkernels alone at batch {args.layers_batch} ({args.layout}), ms per call, median of rounds")
            header = ("layer", "kernel", "ms", "gemm(s) ms", "/ gemm(s) (range)")
            print_rows([header, *layer_rows(args.layers_batch, args.layout, args.rounds)])
        if args.infer:
            side = PaddleSide(args.paddle_python) if args.paddle_python else None
            print(f"\ninference (batch 1 and 8 of {args.infer_sizes} images) against Paddle Inference", end=" ")
            print(f"({args.paddle_python or 'not run: give --paddle-python'}), ms per call, median of rounds")
            header = ("model", "batch", "blockir", "oneDNN", "no oneDNN", "/ oneDNN", "/ no oneDNN", "max diff")
            found = infer_rows(side, args)
            if found:
                print_rows([header, *found])
                worst = max(found, key=lambda r: float(r[5].split("x")[0]))
                summary.append(f"inference up to {worst[5].split(' ')[0]} Paddle Inference oneDNN ({worst[0]})")
            if side is not None:
                side.close()
        print(f"\nsummary: blockir on {args.place}: " + ("; ".join(summary) or "no ratio (one contender)"))


if __name__ == "__main__":
    main()
