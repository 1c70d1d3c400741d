"""An LSTM text classifier on a task it makes itself (no download): which of two marker words comes first.

    python examples/text_lstm.py [--epochs 3] [--export lstm_model/model]

A sentence holds 6..20 word ids over a 30-word vocabulary, padded to 20 with the id 0. Two marker words, 1 and
2, each occur once at random places; the label is 1 when word 1 comes before word 2. Every sentence holds both
markers once, so a bag of words sees nothing of the label: the model must remember what it read, and where a
sentence ends (``sequence_length``: the LSTM's state stops changing there, and its outputs are zero).

embedding (batch-major ids ``[B, 20, 1]``), transposed to time-major, a 2-layer ``bir.layers.lstm`` with
dropout between its layers, its last layer's final state, fc + softmax. Evaluates with
``main.clone(for_test=True)`` (dropout off), then writes ``PREFIX.pdmodel`` + ``PREFIX.pdiparams`` (Paddle's
``rnn`` op: ``paddle.static.load_inference_model`` reads them and computes the same), which
``blockir run PREFIX.pdmodel --feed ids=ids.npy --feed lengths=lengths.npy`` serves too.
"""

from __future__ import annotations

import argparse
import time
from typing import Any

import numpy as np

import blockir as bir

VOCAB, MAX_LEN, MIN_LEN = 30, 20, 6


def make_sentences(n: int, seed: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """``n`` sentences: ids int64 ``[n, MAX_LEN, 1]`` (0 past each end), lengths int64 ``[n]``, labels int64
    ``[n, 1]`` (1 when marker 1 comes before marker 2)."""
    rng = np.random.default_rng(seed)
    lengths = rng.integers(MIN_LEN, MAX_LEN + 1, size=n)
    ids = rng.integers(3, VOCAB, size=(n, MAX_LEN))
    ids[np.arange(MAX_LEN)[None, :] >= lengths[:, None]] = 0
    first = (rng.random(n) * lengths).astype(np.int64)
    second = (first + 1 + (rng.random(n) * (lengths - 1)).astype(np.int64)) % lengths  # another place
    labels = rng.integers(0, 2, size=n)
    rows = np.arange(n)
    ids[rows, np.where(labels == 1, np.minimum(first, second), np.maximum(first, second))] = 1
    ids[rows, np.where(labels == 1, np.maximum(first, second), np.minimum(first, second))] = 2
    return ids[:, :, None].astype(np.int64), lengths.astype(np.int64), labels.reshape(-1, 1).astype(np.int64)


def build(emb_dim: int = 16, hidden: int = 32, layers: int = 2, lr: float = 0.01, seed: int = 1) -> dict[str, Any]:
    main, startup = bir.Program(), bir.Program()
    main.random_seed = startup.random_seed = seed
    with bir.program_guard(main, startup):
        ids = bir.data("ids", shape=[-1, MAX_LEN, 1], dtype="int64")
        lengths = bir.data("lengths", shape=[-1], dtype="int64")
        label = bir.data("label", shape=[-1, 1], dtype="int64")
        emb = bir.layers.transpose(bir.layers.embedding(ids, size=[VOCAB, emb_dim]), [1, 0, 2])  # [T, B, E]
        _, last_h, _ = bir.layers.lstm(
            emb, None, None, MAX_LEN, hidden, num_layers=layers, dropout_prob=0.1, sequence_length=lengths
        )
        top = bir.layers.reshape(bir.layers.slice(last_h, axes=[0], starts=[layers - 1], ends=[layers]), [-1, hidden])
        pred = bir.layers.fc(top, size=2, act="softmax")
        loss = bir.layers.mean(bir.layers.cross_entropy(pred, label))
        acc = bir.layers.accuracy(pred, label)
        test = main.clone(for_test=True)
        bir.optimizer.Adam(learning_rate=lr).minimize(loss)
    return {"main": main, "startup": startup, "test": test, "pred": pred, "loss": loss, "acc": acc}


def main(
    epochs: int = 3,
    train_sentences: int = 3000,
    test_sentences: int = 1000,
    batch: int = 64,
    export: str | None = None,
    verbose: bool = True,
) -> dict[str, float]:
    """Train; return the test ``accuracy`` and the training ``seconds``. Export the inference model in Paddle's
    format to the path prefix ``export`` if given."""
    train_ids, train_lengths, train_labels = make_sentences(train_sentences, seed=0)
    test_ids, test_lengths, test_labels = make_sentences(test_sentences, seed=1)
    model = build()
    exe, scope = bir.Executor("cpu"), bir.Scope()
    exe.run(model["startup"], scope=scope)
    rng = np.random.default_rng(0)
    t0 = time.perf_counter()
    for epoch in range(epochs):
        order = rng.permutation(train_sentences)
        losses = []
        for i in range(0, train_sentences, batch):
            rows = order[i : i + batch]
            feed = {"ids": train_ids[rows], "lengths": train_lengths[rows], "label": train_labels[rows]}
            losses.append(exe.run(model["main"], feed=feed, fetch_list=[model["loss"]], scope=scope)[0][0])
        if verbose:
            print(f"epoch {epoch + 1}  loss {np.mean(losses):.4f}  ({time.perf_counter() - t0:.1f}s)")
    seconds = time.perf_counter() - t0
    feed = {"ids": test_ids, "lengths": test_lengths, "label": test_labels}
    (acc,) = exe.run(model["test"], feed=feed, fetch_list=[model["acc"]], scope=scope)
    metrics = {"accuracy": float(np.asarray(acc).reshape(-1)[0]), "seconds": seconds}
    if verbose:
        print(f"test accuracy {metrics['accuracy']:.4f} (a bag of words: 0.5)")
    if export:
        bir.io.save_inference_model(
            export, ["ids", "lengths"], [model["pred"]], exe, main_program=model["test"], scope=scope, format="paddle"
        )
        if verbose:
            print(f"exported {export}.pdmodel and {export}.pdiparams")
    return metrics


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--epochs", type=int, default=3)
    parser.add_argument("--export", default=None, help="path prefix of the Paddle model to write")
    args = parser.parse_args()
    main(args.epochs, export=args.export)
