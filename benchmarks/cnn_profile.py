"""Where the CNN training step's time goes, per op and per layer, in blockir and in PyTorch eager side by side.

    python benchmarks/cnn_profile.py [--batch 64] [--steps 5] [--threads 1] [--layout NCHW]

The step is ``bench_cnn.py``'s (issue 34's CIFAR-like CNN, the same data and initial weights in both). blockir's
times are its executor's trace (one event per op: the kernel's wall time); torch's are ``torch.profiler``'s self
CPU time per ``aten::`` op, its input shapes recorded to tell the layers apart. Both run ``--steps`` steps after
two warm-up steps, BLAS and torch limited to ``--threads`` threads. Ops are put in the same categories on both
sides (convolution forward and backward, batch norm with its relu, pooling, the rest), per step, in ms; then the
convolutions per layer, forward and backward, and each side's total of the step against the sum of its ops (the
remainder is the framework's own time: blockir's scheduler and Python, torch's dispatcher and autograd engine).
"""

from __future__ import annotations

import argparse
import json
import re
import tempfile
from collections import defaultdict
from pathlib import Path
from time import perf_counter
from types import ModuleType

from bench_cnn import CHANNELS, POOL_AFTER, blockir_cnn, cnn_data, torch_cnn
from threadpoolctl import threadpool_limits

# (category, blockir op types, torch op-name pattern): the first that matches names an op's category
CATEGORIES = (
    ("conv forward", r"^(conv2d|fused_conv2d_add_act|depthwise_conv2d)$", r"convolution$|conv2d$"),
    ("conv backward", r"^(conv2d|depthwise_conv2d)_grad$", r"convolution_backward"),
    ("batch_norm + relu forward", r"^(batch_norm|batch_norm_act|relu)$", r"batch_norm$|relu_?$|clamp_min"),
    ("batch_norm + relu backward", r"^(batch_norm|batch_norm_act|relu)_grad$", r"batch_norm_backward|threshold_back"),
    ("pooling forward", r"^(pool2d|max_pool2d_with_index)$", r"pool2d_with_indices$|mean$"),
    ("pooling backward", r"^(pool2d|max_pool2d_with_index)_grad$", r"pool2d.*backward|mean_backward"),
    ("optimizer", r"^momentum", r"_foreach|add_|mul_|sgd"),
)
OTHER = "the rest (fc, loss, fill, casts)"


def category(name: str, side: int) -> str:
    for label, *patterns in CATEGORIES:
        if re.search(patterns[side], name):
            return label
    return OTHER


def blockir_profile(batch: int, steps: int, layout: str) -> tuple[dict[str, float], dict[str, list[float]], float]:
    """Per category ms per step, per conv layer [forward, backward] ms per step, and the step's wall ms."""
    step = blockir_cnn(cnn_data(batch), layout)
    step(), step()
    by_cat: dict[str, float] = defaultdict(float)
    layers: dict[str, list[float]] = defaultdict(lambda: [0.0, 0.0])
    wall = 0.0
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "trace.json"
        for _ in range(steps):
            start = perf_counter()
            step(trace=path)
            wall += perf_counter() - start
            convs = {"conv2d": 0, "conv2d_grad": 0}
            for event in json.loads(path.read_text())["traceEvents"]:
                if event.get("ph") != "X":
                    continue
                ms = event["dur"] / 1e3 / steps
                by_cat[category(event["name"], 0)] += ms
                if event["name"] in convs:  # forward ops in program order, gradients in reverse
                    k = convs[event["name"]]
                    convs[event["name"]] += 1
                    index = k if event["name"] == "conv2d" else len(CHANNELS) - 1 - k
                    layers[f"conv{index + 1}"][event["name"] == "conv2d_grad"] += ms
    return dict(by_cat), dict(layers), wall * 1e3 / steps


def torch_profile(torch: ModuleType, batch: int, steps: int) -> tuple[dict[str, float], dict[str, list[float]], float]:
    """The same from torch.profiler (self CPU time, input shapes to tell the layers apart)."""
    step = torch_cnn(torch, cnn_data(batch))
    step(), step()
    shapes = {name: (y[1], x[1], 3, 3) for name, (x, y) in layer_shapes(batch).items()}
    by_cat: dict[str, float] = defaultdict(float)
    layers: dict[str, list[float]] = defaultdict(lambda: [0.0, 0.0])
    start = perf_counter()
    with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CPU], record_shapes=True) as prof:
        for _ in range(steps):
            step()
    wall = (perf_counter() - start) * 1e3 / steps
    for row in prof.key_averages(group_by_input_shape=True):
        if not row.key.startswith("aten::"):
            continue
        ms = row.self_cpu_time_total / 1e3 / steps
        by_cat[category(row.key, 1)] += ms
        if row.key in ("aten::mkldnn_convolution", "aten::convolution_backward", "aten::thnn_conv2d"):
            for name, filter_shape in shapes.items():
                if filter_shape in map(tuple, row.input_shapes):  # the layer's filter is one of the op's inputs
                    layers[name][row.key == "aten::convolution_backward"] += ms
                    break
    return dict(by_cat), dict(layers), wall


def layer_shapes(batch: int) -> dict[str, tuple[tuple[int, ...], tuple[int, ...]]]:
    """Each conv layer's input and output shape (NCHW) in the model."""
    shapes, c, size = {}, 3, 32
    for i, m in enumerate(CHANNELS):
        shapes[f"conv{i + 1}"] = ((batch, c, size, size), (batch, m, size, size))
        size //= 2 if i in POOL_AFTER else 1
        c = m
    return shapes


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--batch", type=int, default=64)
    parser.add_argument("--steps", type=int, default=5)
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--layout", default="NCHW", choices=("NCHW", "NHWC"))
    args = parser.parse_args()
    import torch

    torch.set_num_threads(args.threads)
    with threadpool_limits(args.threads):
        ours = blockir_profile(args.batch, args.steps, args.layout)
        theirs = torch_profile(torch, args.batch, args.steps)
    print(f"batch {args.batch}, {args.steps} steps, {args.threads} thread(s), blockir {args.layout}; ms per step")
    print(f"{'category':<34}{'blockir':>10}{'torch':>10}{'ratio':>8}")
    for label in [c[0] for c in CATEGORIES] + [OTHER]:
        a, b = ours[0].get(label, 0.0), theirs[0].get(label, 0.0)
        print(f"{label:<34}{a:>10.1f}{b:>10.1f}{(a / b if b else float('nan')):>7.2f}x")
    sums = sum(ours[0].values()), sum(theirs[0].values())
    print(f"{'sum of ops':<34}{sums[0]:>10.1f}{sums[1]:>10.1f}{sums[0] / sums[1]:>7.2f}x")
    print(f"{'step (wall)':<34}{ours[2]:>10.1f}{theirs[2]:>10.1f}{ours[2] / theirs[2]:>7.2f}x")
    print("\nper conv layer, ms per step: forward / backward")
    for name, (x_shape, y_shape) in layer_shapes(args.batch).items():
        (af, ab), (bf, bb) = ours[1].get(name, [0.0, 0.0]), theirs[1].get(name, [0.0, 0.0])
        label = f"{name} {x_shape[1]}->{y_shape[1]} {x_shape[2]}x{x_shape[3]}"
        print(f"{label:<24} blockir {af:6.1f} / {ab:6.1f}   torch {bf:6.1f} / {bb:6.1f}   ", end="")
        print(f"{af / bf if bf else float('nan'):.2f}x / {ab / bb if bb else float('nan'):.2f}x")


if __name__ == "__main__":
    main()
