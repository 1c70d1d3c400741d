"""Train the digits MLP from a producer program that feeds the trainer through named channels.

    pip install ".[examples]"  # scikit-learn, whose bundled digits this trains on (the dev extras have it too)
    python examples/staged_training.py [--epochs 20] [--capacity 4] [--place cpu:0]

The two-program pattern of Block/Executor designs: ``concurrent_program`` sends
each (image, label) batch on a channel list (one channel per place, sends
copied onto the channel's device), ``main_program`` receives from it and takes
one training step. The caller runs the producer ``capacity - 1`` times to fill
the buffered channel, then alternates producer and trainer runs, then drains
what is left. Batches are stored compressed (zlib) and decoded in a background
thread by ``bir.reader.staged``, so decoding overlaps training.
"""

from __future__ import annotations

import argparse
import time
import zlib
from collections.abc import Iterator

import numpy as np

import blockir as bir
from blockir.ir import Program


def load_digits(seed: int = 0) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    try:
        from sklearn.datasets import load_digits as sk_digits
    except ModuleNotFoundError as e:  # scikit-learn comes with the examples extra, not with blockir
        raise SystemExit(f'{e}: this example needs scikit-learn: pip install ".[examples]"') from None

    data = sk_digits()
    x = (data.data / 16.0).astype("float32")
    y = data.target.astype("int64").reshape(-1, 1)
    order = np.random.default_rng(seed).permutation(len(x))
    split = int(0.8 * len(x))
    return x[order[:split]], y[order[:split]], x[order[split:]], y[order[split:]]


def compress(x: np.ndarray, y: np.ndarray, batch: int, seed: int) -> list[tuple[bytes, bytes]]:
    """The training set as shuffled, zlib-compressed batches: what a data file would hold."""
    order = np.random.default_rng(seed).permutation(len(x))
    return [
        (zlib.compress(x[idx].tobytes()), zlib.compress(y[idx].tobytes()))
        for idx in (order[i : i + batch] for i in range(0, len(order), batch))
    ]


def decode(shards: list[tuple[bytes, bytes]]) -> Iterator[dict[str, np.ndarray]]:
    for image, label in shards:
        yield {
            "image": np.frombuffer(zlib.decompress(image), "float32").reshape(-1, 64),
            "label": np.frombuffer(zlib.decompress(label), "int64").reshape(-1, 1),
        }


def net(image: bir.ir.Variable, label: bir.ir.Variable, hidden: int = 128) -> tuple:
    h = bir.layers.fc(image, size=hidden, act="relu")
    h = bir.layers.fc(h, size=hidden, act="relu")
    pred = bir.layers.fc(h, size=10, act="softmax")
    return pred, bir.layers.mean(bir.layers.cross_entropy(pred, label))


def build(places: list[str], capacity: int, lr: float = 3e-3, seed: int = 1):
    """(concurrent_program, main_program, startup, test_program, the trainer's loss, the test prediction)."""
    concurrent_program, main_program, startup, test_program = Program(), Program(), Program(), Program()
    main_program.random_seed = startup.random_seed = seed
    with bir.program_guard(concurrent_program):
        image = bir.data("image", shape=[-1, 64], dtype="float32")
        label = bir.data("label", shape=[-1, 1], dtype="int64")
        chans = bir.channel_list.make("chan_list", places=places, capacity=capacity)
        for i in range(len(chans.places)):
            bir.channel.send(chans[i], [image, label])
    with bir.unique_name.guard(), bir.program_guard(main_program, startup):
        chans = bir.channel_list.make("chan_list", places=places, capacity=capacity)  # the same channels
        with bir.device_guard(places[0]):
            image, label = bir.channel.recv(chans[0])
            _, loss = net(image, label)
            bir.optimizer.Adam(learning_rate=lr).minimize(loss)
    with bir.unique_name.guard(), bir.program_guard(test_program, Program()):  # same parameter names
        pred, _ = net(
            bir.data("image", shape=[-1, 64], dtype="float32"), bir.data("label", shape=[-1, 1], dtype="int64")
        )
    return concurrent_program, main_program, startup, test_program, loss, pred


def main(
    epochs: int = 20, batch: int = 32, capacity: int = 4, place: str = "cpu:0", verbose: bool = True
) -> dict[str, float]:
    """Train; return the test ``accuracy`` and the training ``seconds``."""
    if capacity < 1:
        raise SystemExit(f"staged_training: --capacity must be >= 1 (the caller fills the channel), got {capacity}")
    x_train, y_train, x_test, y_test = load_digits()
    places = [place]
    producer, trainer, startup, test, loss, pred = build(places, capacity)
    scope = bir.Scope()
    t0 = time.perf_counter()
    with bir.Executor("cpu") as exe:
        exe.run(startup, scope=scope)
        for epoch in range(epochs):
            batches = bir.reader.staged(decode(compress(x_train, y_train, batch, seed=epoch)), place="cpu")
            sent, losses = 0, []
            for feed in batches:
                exe.run(producer, feed=feed, scope=scope)  # never blocks: one place is always free
                sent += 1
                if sent >= capacity - 1:  # filled: from now on alternate
                    losses.append(float(exe.run(trainer, fetch_list=[loss], scope=scope)[0][0]))
                    sent -= 1
            for _ in range(sent):  # drain
                losses.append(float(exe.run(trainer, fetch_list=[loss], scope=scope)[0][0]))
            if verbose and (epoch % 5 == 4 or epoch == epochs - 1):
                print(f"epoch {epoch + 1:3d}  loss {np.mean(losses):.4f}  ({time.perf_counter() - t0:.1f}s)")
        seconds = time.perf_counter() - t0
        assert len(scope.get("chan_list.0")) == 0
        (probs,) = exe.run(test, feed={"image": x_test, "label": y_test}, fetch_list=[pred], scope=scope)
    accuracy = float((np.argmax(probs, axis=1) == y_test[:, 0]).mean())
    if verbose:
        print(f"test accuracy {accuracy:.4f}")
    return {"accuracy": accuracy, "seconds": seconds}


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--epochs", type=int, default=20)
    parser.add_argument("--capacity", type=int, default=4)
    parser.add_argument("--place", default="cpu:0", help="the device the trainer receives and trains on")
    args = parser.parse_args()
    main(args.epochs, capacity=args.capacity, place=args.place)
