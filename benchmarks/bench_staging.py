"""Staging benchmark: a training loop whose loader costs about as much as its compute, with and without
``bir.reader.staged``, in one process.

    python benchmarks/bench_staging.py [--repeats 7] [--steps 40] [--batch 256] [--hidden 512]

The model is an MLP 784-HIDDEN-HIDDEN-10 (relu, relu, softmax, cross-entropy, Adam) built with the DSL
and trained with ``bir.Executor("cpu")``, BLAS limited to one thread (threadpoolctl), on scikit-learn's
digits scaled up to 28x28. Two loaders feed it, each calibrated at start so that loading a batch takes
about as long as a training step on this machine:

- ``decode``: each batch is stored as a zlib-compressed record of uint8 images at a resolution R >= 28
  (and the labels); loading decompresses it (zlib releases the GIL), reads it with ``np.frombuffer``,
  resizes the images to 28x28 (nearest neighbour) and scales them to float32. R is calibrated. This is
  CPU work: it overlaps compute only as far as the machine has a free core for it.
- ``read``: the same record decoded at R = 28 (cheap) after waiting as long as a step takes, as a read
  from storage or the network would (the GIL released while waiting).

For each loader, ``repeats`` rounds alternate (order reversed every other round) five contenders, each
running ``steps`` batches per turn: ``load`` (the loader alone), ``compute`` (training steps alone, on
batches loaded before), ``unstaged`` (load then train, in turn), ``staged`` (train on
``bir.reader.staged(loader, "cpu", capacity=2)``, a fresh reader each turn, so its first batch is not
overlapped) and ``threads``, this machine's ceiling: the loader in a plain thread while the calling
thread trains on batches loaded before, which is as much overlap as the machine's free cores allow
(none where two busy threads share one core). Figures are medians over rounds of seconds per step;
``staged / max`` is the staged time over the larger of the load and compute times. Goal: <= 1.10x.
"""

from __future__ import annotations

import argparse
import os
import threading
import time
import zlib
from collections.abc import Callable, Iterator
from typing import Any

import numpy as np
from bench_executor import alternate
from threadpoolctl import threadpool_limits

import blockir as bir

GOAL = 1.10
SIDE, RECORDS = 28, 6  # images are SIDE x SIDE after decoding; distinct records cycled through


def digits(count: int, seed: int = 0) -> tuple[np.ndarray, np.ndarray]:
    """``count`` 8x8 digit images (0..16) and their labels, drawn from scikit-learn's bundled digits."""
    from sklearn.datasets import load_digits

    data = load_digits()
    pick = np.random.default_rng(seed).integers(0, len(data.target), count)
    return data.images[pick], data.target[pick].astype("int64")


def encode(images: np.ndarray, labels: np.ndarray, side: int, rng: np.random.Generator) -> bytes:
    """One batch record: the images scaled up to ``side`` x ``side`` uint8 with sensor noise, then the labels,
    zlib-compressed."""
    index = np.arange(side) * 8 // side
    pixels = images[:, index][:, :, index] * 15 + rng.integers(0, 16, (len(images), side, side))
    return zlib.compress(pixels.astype("uint8").tobytes() + labels.tobytes(), 1)


def decode(record: bytes, batch: int, side: int) -> dict[str, np.ndarray]:
    raw = zlib.decompress(record)
    pixels = np.frombuffer(raw, "uint8", batch * side * side).reshape(batch, side, side)
    labels = np.frombuffer(raw, "int64", batch, offset=batch * side * side).reshape(batch, 1)
    index = np.arange(SIDE) * side // SIDE
    x = pixels[:, index][:, :, index].reshape(batch, SIDE * SIDE).astype("float32")
    x *= 1 / 255
    return {"x": x, "label": labels}


def timed(fn: Callable[[], Any]) -> float:
    start = time.perf_counter()
    fn()
    return time.perf_counter() - start


class Loader:
    """Batches decoded from ``RECORDS`` records at resolution ``side``, after ``wait`` seconds each."""

    def __init__(self, batch: int, side: int, wait: float = 0.0) -> None:
        images, labels = digits(batch * RECORDS)
        rng = np.random.default_rng(1)
        self.batch, self.side, self.wait = batch, side, wait
        self.records = [encode(images[i::RECORDS], labels[i::RECORDS], side, rng) for i in range(RECORDS)]

    def __call__(self, steps: int) -> Iterator[dict[str, np.ndarray]]:
        for i in range(steps):
            if self.wait:
                time.sleep(self.wait)
            yield decode(self.records[i % RECORDS], self.batch, self.side)

    def seconds(self) -> float:
        """The least time a batch took to load, of ``RECORDS`` (the least is the least disturbed by noise)."""
        return min(timed(lambda: next(self(1))) for _ in range(RECORDS))


def trainer(hidden: int) -> Callable[[dict[str, np.ndarray]], Any]:
    """One training step of the MLP on a batch."""
    main, startup = bir.Program(), bir.Program()
    main.random_seed = startup.random_seed = 1
    with bir.program_guard(main, startup):
        x = bir.data("x", shape=[-1, SIDE * SIDE], dtype="float32")
        label = bir.data("label", shape=[-1, 1], dtype="int64")
        h = bir.layers.fc(x, size=hidden, act="relu")
        h = bir.layers.fc(h, size=hidden, act="relu")
        pred = bir.layers.fc(h, size=10, act="softmax")
        loss = bir.layers.mean(bir.layers.cross_entropy(pred, label))
        bir.optimizer.Adam(learning_rate=1e-3).minimize(loss)
    exe, scope = bir.Executor("cpu"), bir.Scope()
    exe.run(startup, scope=scope)
    return lambda batch: exe.run(main, feed=batch, fetch_list=[loss], scope=scope)[0]


def calibrated(batch: int, target: float) -> Loader:
    """A ``decode`` loader whose batches take about ``target`` seconds: decoding costs about R^2."""
    side = 4 * SIDE
    for _ in range(3):
        loader = Loader(batch, side)
        side = max(SIDE, round(side * (target / loader.seconds()) ** 0.5))
    return Loader(batch, side)


def compare(name: str, loader: Loader, step: Callable[[dict[str, np.ndarray]], Any], steps: int, repeats: int) -> None:
    """Time the five contenders and print a line."""
    loaded = list(loader(RECORDS))

    def load() -> None:
        for _ in loader(steps):
            pass

    def compute() -> None:
        for i in range(steps):
            step(loaded[i % RECORDS])

    def unstaged() -> None:
        for b in loader(steps):
            step(b)

    def staged() -> None:
        for b in bir.reader.staged(loader(steps), "cpu", capacity=2):
            step(b)

    def threads() -> None:
        worker = threading.Thread(target=load)
        worker.start()
        compute()
        worker.join()

    seconds = alternate(
        {"load": load, "compute": compute, "unstaged": unstaged, "staged": staged, "threads": threads}, 1, repeats
    ).seconds
    per_step = {k: t / steps for k, t in seconds.items()}
    ratio = per_step["staged"] / max(per_step["load"], per_step["compute"])
    print(
        f"{name:6s} load {per_step['load'] * 1e3:6.1f} ms  compute {per_step['compute'] * 1e3:6.1f} ms  "
        f"per step: unstaged {per_step['unstaged'] * 1e3:6.1f} ms, staged {per_step['staged'] * 1e3:6.1f} ms  "
        f"staged / max(load, compute) {ratio:.2f}x (goal <= {GOAL}x), unstaged / staged "
        f"{per_step['unstaged'] / per_step['staged']:.2f}x; this machine's ceiling, load and compute in two "
        f"plain threads: {per_step['threads'] * 1e3:.1f} ms, "
        f"{per_step['threads'] / max(per_step['load'], per_step['compute']):.2f}x"
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--repeats", type=int, default=7, help="rounds (default 7)")
    parser.add_argument("--steps", type=int, default=40, help="batches per turn (default 40)")
    parser.add_argument("--batch", type=int, default=256, help="batch size (default 256)")
    parser.add_argument("--hidden", type=int, default=512, help="hidden layer width (default 512)")
    args = parser.parse_args()
    with threadpool_limits(limits=1):
        step = trainer(args.hidden)
        cheap = Loader(args.batch, SIDE)
        batch = next(cheap(1))
        for _ in range(10):  # warm-up
            step(batch)
        target = min(timed(lambda: step(batch)) for _ in range(RECORDS))  # as Loader.seconds
        decoding = calibrated(args.batch, target)
        print(
            f"numpy {np.__version__}, {os.cpu_count()} cores, BLAS 1 thread, {args.repeats} rounds of "
            f"{args.steps} steps; MLP 784-{args.hidden}-{args.hidden}-10, batch {args.batch}, step "
            f"{target * 1e3:.1f} ms; decode: records of {decoding.side}x{decoding.side} images, "
            f"read: {target * 1e3:.1f} ms waited"
        )
        compare("decode", decoding, step, args.steps, args.repeats)
        compare("read", Loader(args.batch, SIDE, wait=target), step, args.steps, args.repeats)


if __name__ == "__main__":
    main()
