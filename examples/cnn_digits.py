"""Train a small CNN on scikit-learn's bundled digits (8x8 images, no download), export it in Paddle's format.

    pip install ".[examples]"  # scikit-learn, whose bundled digits this trains on (the dev extras have it too)
    python examples/cnn_digits.py [--epochs 8] [--export cnn_model/model]

conv2d + batch_norm + relu, max pooling, conv2d + batch_norm + relu, average pooling, dropout, fc:
Fluid 1.x's layers. Evaluates with ``main.clone(for_test=True)`` (batch norm on its moving statistics,
dropout off), then writes ``PREFIX.pdmodel`` + ``PREFIX.pdiparams``, which Paddle, Netron and
``blockir run PREFIX.pdmodel --feed img=batch.npy`` read.
"""

from __future__ import annotations

import argparse
import time
from typing import Any

import numpy as np

import blockir as bir


def load_digits(seed: int = 0) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """Train and test images as float32 [N, 1, 8, 8] in [0, 1], labels int64 [N, 1]."""
    try:
        from sklearn.datasets import load_digits as sk_digits
    except ModuleNotFoundError as e:  # scikit-learn comes with the examples extra, not with blockir
        raise SystemExit(f'{e}: this example needs scikit-learn: pip install ".[examples]"') from None

    data = sk_digits()
    x = (data.images / 16.0).astype("float32")[:, None, :, :]
    y = data.target.astype("int64").reshape(-1, 1)
    order = np.random.default_rng(seed).permutation(len(x))
    x, y = x[order], y[order]
    split = int(0.8 * len(x))
    return x[:split], y[:split], x[split:], y[split:]


def build(lr: float = 0.01, seed: int = 1) -> dict[str, Any]:
    main, startup = bir.Program(), bir.Program()
    main.random_seed = startup.random_seed = seed
    with bir.program_guard(main, startup):
        img = bir.data("img", shape=[-1, 1, 8, 8], dtype="float32")
        label = bir.data("label", shape=[-1, 1], dtype="int64")
        h = bir.layers.conv2d(img, num_filters=16, filter_size=3, padding=1, bias_attr=False)
        h = bir.layers.batch_norm(h, act="relu")
        h = bir.layers.pool2d(h, pool_size=2, pool_type="max", pool_stride=2)  # 4x4
        h = bir.layers.conv2d(h, num_filters=32, filter_size=3, padding="SAME", bias_attr=False)
        h = bir.layers.batch_norm(h, act="relu")
        h = bir.layers.pool2d(h, pool_size=2, pool_type="avg", pool_stride=2)  # 2x2
        h = bir.layers.dropout(h, dropout_prob=0.2, dropout_implementation="upscale_in_train")
        pred = bir.layers.fc(h, size=10, act="softmax")
        loss = bir.layers.mean(bir.layers.cross_entropy(pred, label))
        test = main.clone(for_test=True)
        bir.optimizer.Adam(learning_rate=lr).minimize(loss)
    return {"main": main, "startup": startup, "test": test, "pred": pred, "loss": loss}


def main(epochs: int = 8, batch: int = 32, export: str | None = None, verbose: bool = True) -> dict[str, float]:
    """Train; return the test ``accuracy`` and the training ``seconds``. Export the inference model in Paddle's
    format to the path prefix ``export`` if given."""
    x_train, y_train, x_test, y_test = load_digits()
    model = build()
    exe, scope = bir.Executor("cpu"), bir.Scope()
    exe.run(model["startup"], scope=scope)
    rng = np.random.default_rng(0)
    t0 = time.perf_counter()
    for epoch in range(epochs):
        order = rng.permutation(len(x_train))
        losses = []
        for i in range(0, len(order), batch):
            idx = order[i : i + batch]
            feed = {"img": x_train[idx], "label": y_train[idx]}
            (loss_v,) = exe.run(model["main"], feed=feed, fetch_list=[model["loss"]], scope=scope)
            losses.append(float(loss_v[0]))
        if verbose:
            print(f"epoch {epoch + 1:3d}  loss {np.mean(losses):.4f}  ({time.perf_counter() - t0:.1f}s)")
    seconds = time.perf_counter() - t0
    feed = {"img": x_test, "label": y_test}
    (probs,) = exe.run(model["test"], feed=feed, fetch_list=[model["pred"].name], scope=scope)
    accuracy = float((np.argmax(probs, axis=1) == y_test[:, 0]).mean())
    if verbose:
        print(f"test accuracy {accuracy:.4f}")
    if export:
        bir.io.save_inference_model(
            export, ["img"], [model["pred"]], exe, main_program=model["test"], scope=scope, format="paddle"
        )
        if verbose:
            print(f"exported {export}.pdmodel and {export}.pdiparams")
    return {"accuracy": accuracy, "seconds": seconds}


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--epochs", type=int, default=8)
    parser.add_argument("--export", default=None, help="path prefix of the Paddle model to write")
    args = parser.parse_args()
    main(args.epochs, export=args.export)
