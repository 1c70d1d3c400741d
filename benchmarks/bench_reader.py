"""MultiSlot reader benchmark: parsing files into batches vs just reading their bytes, in one process.

    python benchmarks/bench_reader.py [--mb 16] [--repeats 5] [--batch 128]

Two generated data sets of about ``--mb`` MB each, written with ``write_multislot``:

- ``text``: text classification (Paddle's IMDB example): ``words``, 1..40 uint64 ids from a 100k
  vocabulary, sparse; ``label``, one uint64, dense [1].
- ``ctr``: click-through rate: 8 sparse uint64 slots of 1..3 ids, ``dense``, 13 floats (dense [13],
  printed with 6 significant digits), ``click``, one uint64, dense [1].

Contenders, each a full pass over the file, timed in alternating rounds (medians):

- ``read``: ``open(path, "rb").read(chunk)`` until the end, the same chunk size as the reader: the
  floor, what reading the bytes costs.
- ``reader``: ``MultiSlotReader(desc, path)``, every batch built (LoDTensors and dense arrays).
- ``python``: a plain per-line, per-token Python parse (``line.split()``, ``int``/``float`` per token)
  into lists, no batches: what a straightforward reader costs.

Printed: MB/s and instances/s of each, and each one's time over ``read``'s.
"""

from __future__ import annotations

import argparse
import os
import tempfile
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import Any

import numpy as np
from bench_executor import Timings, alternate

import blockir as bir
from blockir.datafeed.multislot import CHUNK_SIZE, MultiSlotReader, write_multislot

TEXT = """multi_slot_desc {
  slots { name: "words" type: "uint64" is_used: true }
  slots { name: "label" type: "uint64" is_dense: true is_used: true shape: 1 }
}"""
CTR = (
    "multi_slot_desc {\n"
    + "".join(f'  slots {{ name: "c{i}" type: "uint64" is_used: true }}\n' for i in range(8))
    + '  slots { name: "dense" type: "float" is_dense: true is_used: true shape: 13 }\n'
    + '  slots { name: "click" type: "uint64" is_dense: true is_used: true shape: 1 }\n}'
)


def text_instances(rng: np.random.Generator) -> Iterator[dict[str, Any]]:
    while True:
        yield {"words": rng.integers(0, 100_000, rng.integers(1, 41)), "label": int(rng.integers(0, 2))}


def ctr_instances(rng: np.random.Generator) -> Iterator[dict[str, Any]]:
    while True:
        sparse = {f"c{i}": rng.integers(0, 2**40, rng.integers(1, 4)) for i in range(8)}
        yield {**sparse, "dense": [float(f"{x:.6g}") for x in rng.normal(size=13)], "click": int(rng.integers(0, 2))}


def generate(path: Path, desc: bir.DataFeedDesc, instances: Iterator[dict[str, Any]], mb: float) -> int:
    """Write about ``mb`` MB of instances; returns how many."""
    total = 0
    with tempfile.TemporaryDirectory() as tmp:
        with open(path, "wb") as out:
            while out.tell() < mb * 1e6:
                part = Path(tmp) / "part"
                total += write_multislot(part, (next(instances) for _ in range(10_000)), desc)
                out.write(part.read_bytes())
    return total


def read_bytes(paths: Sequence[Path]) -> Callable[[], None]:
    def run() -> None:
        for path in paths:
            with open(path, "rb") as f:
                while f.read(CHUNK_SIZE):
                    pass

    return run


def read_batches(desc: bir.DataFeedDesc, paths: Sequence[Path]) -> Callable[[], None]:
    def run() -> None:
        for _ in MultiSlotReader(desc, paths):
            pass

    return run


def read_python(desc: bir.DataFeedDesc, paths: Sequence[Path]) -> Callable[[], None]:
    slots = [float if s.type == "float" else int for s in desc.slots]

    def run() -> None:
        for path in paths:
            with open(path, "rb") as f:
                for line in f:
                    tokens, pos, instance = line.split(), 0, []
                    for convert in slots:
                        n = int(tokens[pos])
                        instance.append([convert(t) for t in tokens[pos + 1 : pos + 1 + n]])
                        pos += 1 + n

    return run


def time_reading(desc: bir.DataFeedDesc, paths: Sequence[Path], repeats: int) -> Timings:
    """Full passes over ``paths`` by ``read``, ``reader`` and ``python`` (see the module's doc), in alternating
    rounds: median seconds of each, and ratios to ``read``."""
    return alternate(
        {"read": read_bytes(paths), "reader": read_batches(desc, paths), "python": read_python(desc, paths)},
        n=1,
        repeats=repeats,
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--mb", type=float, default=16, help="size of each data set in MB")
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--batch", type=int, default=128)
    args = parser.parse_args()
    rng = np.random.default_rng(0)
    print(f"MultiSlot reader: chunk {CHUNK_SIZE >> 10} KiB, batch {args.batch}, medians of {args.repeats} rounds\n")
    print(f"{'data':5} {'contender':9} {'MB/s':>8} {'instances/s':>13} {'x read':>8}")
    with tempfile.TemporaryDirectory() as tmp:
        for name, text, instances in (("text", TEXT, text_instances(rng)), ("ctr", CTR, ctr_instances(rng))):
            desc = bir.DataFeedDesc(text)
            desc.set_batch_size(args.batch)
            path = Path(tmp) / name
            count = generate(path, desc, instances, args.mb)
            size = os.path.getsize(path)
            timings = time_reading(desc, [path], args.repeats)
            for contender, seconds in timings.seconds.items():
                print(
                    f"{name:5} {contender:9} {size / seconds / 1e6:8.1f} {count / seconds:13,.0f} "
                    f"{timings.ratio[contender]:8.1f}"
                )
            speedup = timings.ratio["python"] / timings.ratio["reader"]
            print(
                f"{name:5} ({size / 1e6:.1f} MB, {count:,} instances; the reader {speedup:.1f}x faster than python)\n"
            )


if __name__ == "__main__":
    main()
