"""Depthwise convolutions: blockir's direct kernel (``blockir/ops/depthwise.py``) against the gemms of
``blockir/ops/conv.py`` (im2col, one gemm per channel), forward and backward, on one thread: the measurement
behind ``depthwise.direct``'s rule.

    python benchmarks/bench_depthwise.py [--rounds 7] [--turn 0.05] [--shapes N:C:HW:STRIDE:MULTIPLIER,...]

The default shapes are the 3x3 depthwise layers of mobilenet_v1 and shufflenet at 224x224 (batch 1), some at batch
8, and channel multipliers of 2 and 3. Per shape and direction, the direct kernel (``depthwise.conv``,
``depthwise.conv_grad``) and the ``conv2d`` or ``conv2d_grad`` kernel alone (``bench_cnn.kernel``) with the direct
kernel off (``depthwise.ENABLED``), in turns
(``bench_executor.alternate``): the medians of the ms per call and of the ratio direct / gemms within each round,
with its range. The rule takes the direct kernel where it is not slower.
"""

from __future__ import annotations

import argparse
from collections.abc import Callable
from typing import Any

import numpy as np
from bench_cnn import kernel, print_rows
from bench_executor import alternate, per_call, ratio_text
from threadpoolctl import threadpool_limits

from blockir.ops import depthwise
from blockir.ops.conv import ConvGeometry

SHAPES = (
    "1:32:112:1:1,1:64:112:2:1,1:128:56:1:1,1:128:56:2:1,1:256:28:1:1,1:256:28:2:1,1:512:14:1:1,1:512:14:2:1,"
    "1:1024:7:1:1,1:136:28:1:1,1:112:56:2:1,1:544:7:1:1,1:48:16:1:1,8:32:112:1:1,8:512:14:1:1,1:64:28:1:2,8:16:32:1:3"
)


def without_direct(fn: Callable[[], Any]) -> Callable[[], Any]:
    """``fn`` run with the direct kernel off: conv.py's gemms."""

    def run() -> Any:
        depthwise.ENABLED = False
        try:
            return fn()
        finally:
            depthwise.ENABLED = True

    return run


def arrays(result: Any) -> tuple[Any, ...]:
    """A kernel's result as a tuple of its outputs."""
    return result if isinstance(result, tuple) else (result,)


def rows(shape: str, rounds: int, turn: float) -> list[tuple[str, ...]]:
    n, c, size, stride, multiplier = (int(v) for v in shape.split(":"))
    rng = np.random.default_rng(0)
    x = rng.standard_normal((n, c, size, size)).astype(np.float32)
    w = rng.standard_normal((c * multiplier, 1, 3, 3)).astype(np.float32)
    attrs = {"groups": c, "strides": [stride, stride], "paddings": [1, 1]}
    out = (size - 1) // stride + 1
    dy = rng.standard_normal((n, c * multiplier, out, out)).astype(np.float32)
    far = max(1, (out - 1) * stride + 2 - size)  # conv.py's geometry: the far padding grown to cover every tap
    geo = ConvGeometry(((1, far), (1, far)), (1, 1), (stride, stride), (3, 3), (out, out))
    forward, backward = kernel("conv2d", attrs, (True,)), kernel("conv2d_grad", attrs, (True, True))
    label = f"{n}x{c}x{size}x{size} s{stride} x{multiplier}"
    result = []
    calls = (
        ("forward", lambda: forward(x, w, None, None), lambda: depthwise.conv(np, x, w, geo, False)),
        ("backward", lambda: backward(x, w, dy), lambda: depthwise.conv_grad(np, x, w, dy, geo, False, (True, True))),
    )
    for name, gemms, direct in calls:
        runs = {"gemms": without_direct(gemms), "direct": direct}
        for a, b in zip(arrays(runs["direct"]()), arrays(runs["gemms"]())):
            np.testing.assert_allclose(a, b, rtol=1e-3, atol=1e-3 * float(np.abs(b).max()))
        t = alternate(runs, max(2, int(turn / per_call(runs["gemms"], 1))), rounds)
        ms = [f"{t.seconds[k] * 1e3:.3f}" for k in ("direct", "gemms")]
        result.append((label, name, *ms, ratio_text(t, "direct")))
    return result


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=7, help="timed rounds (medians and ranges over them)")
    parser.add_argument("--turn", type=float, default=0.05, help="seconds of calls per contender per round")
    parser.add_argument("--shapes", default=SHAPES, help="N:C:HW:STRIDE:MULTIPLIER of 3x3 layers, comma-separated")
    args = parser.parse_args(argv)
    header = ("layer (NCHW, stride, multiplier)", "pass", "direct ms", "gemms ms", "direct / gemms (range)")
    with threadpool_limits(limits=1):
        table = [row for shape in args.shapes.split(",") for row in rows(shape, args.rounds, args.turn)]
    print_rows([header, *table])


if __name__ == "__main__":
    main()
