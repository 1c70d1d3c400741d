"""Train an MLP on scikit-learn's bundled digits (8x8 images, no download) with blockir.

    pip install ".[examples]"  # scikit-learn, whose bundled digits this trains on (the dev extras have it too)
    python examples/mlp_digits.py [--epochs 30] [--model-dir digits_model]

Builds the network with the DSL, trains it with Adam on the CPU executor, reports
test accuracy, and saves an inference model that `blockir run` can serve.
"""

from __future__ import annotations

import argparse
import time

import numpy as np

import blockir as bir


def load_digits(seed: int = 0) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    try:
        from sklearn.datasets import load_digits as sk_digits
    except ModuleNotFoundError as e:  # scikit-learn comes with the examples extra, not with blockir
        raise SystemExit(f'{e}: this example needs scikit-learn: pip install ".[examples]"') from None

    data = sk_digits()
    x = (data.data / 16.0).astype("float32")
    y = data.target.astype("int64").reshape(-1, 1)
    order = np.random.default_rng(seed).permutation(len(x))
    x, y = x[order], y[order]
    split = int(0.8 * len(x))
    return x[:split], y[:split], x[split:], y[split:]


def build(hidden: int = 128, lr: float = 3e-3, seed: int = 1):
    main, startup = bir.Program(), bir.Program()
    main.random_seed = startup.random_seed = seed
    with bir.program_guard(main, startup):
        x = bir.data("x", shape=[-1, 64], dtype="float32")
        label = bir.data("label", shape=[-1, 1], dtype="int64")
        h = bir.layers.fc(x, size=hidden, act="relu")
        h = bir.layers.fc(h, size=hidden, act="relu")
        pred = bir.layers.fc(h, size=10, act="softmax")
        loss = bir.layers.mean(bir.layers.cross_entropy(pred, label))
        test = main.clone()  # before minimize: forward only
        bir.optimizer.Adam(learning_rate=lr).minimize(loss)
    return main, startup, test, pred, loss


def main(epochs: int = 30, batch: int = 32, model_dir: str | None = None, verbose: bool = True) -> dict[str, float]:
    """Train; return the test ``accuracy`` and the training ``seconds``. Save an inference model to
    ``model_dir`` if given."""
    x_train, y_train, x_test, y_test = load_digits()
    main_prog, startup, test, pred, loss = build()
    exe = bir.Executor("cpu")
    scope = bir.Scope()
    exe.run(startup, scope=scope)
    rng = np.random.default_rng(0)
    t0 = time.perf_counter()
    for epoch in range(epochs):
        order = rng.permutation(len(x_train))
        losses = []
        for i in range(0, len(order), batch):
            idx = order[i : i + batch]
            (loss_v,) = exe.run(
                main_prog, feed={"x": x_train[idx], "label": y_train[idx]}, fetch_list=[loss], scope=scope
            )
            losses.append(float(loss_v[0]))
        if verbose and (epoch % 5 == 4 or epoch == epochs - 1):
            print(f"epoch {epoch + 1:3d}  loss {np.mean(losses):.4f}  ({time.perf_counter() - t0:.1f}s)")
    seconds = time.perf_counter() - t0
    (probs,) = exe.run(test, feed={"x": x_test, "label": y_test}, fetch_list=[pred], scope=scope)
    accuracy = float((np.argmax(probs, axis=1) == y_test[:, 0]).mean())
    if verbose:
        print(f"test accuracy {accuracy:.4f}")
    if model_dir:
        with bir.scope_guard(scope):
            bir.io.save_inference_model(model_dir, ["x"], [pred], exe, main_program=main_prog)
        if verbose:
            print(f"saved inference model to {model_dir}/")
    return {"accuracy": accuracy, "seconds": seconds}


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--epochs", type=int, default=30)
    parser.add_argument("--model-dir", default=None)
    args = parser.parse_args()
    main(args.epochs, model_dir=args.model_dir)
