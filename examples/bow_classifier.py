"""A bag-of-words text classifier: sparse embedding, sequence pooling, fc.

    python examples/bow_classifier.py [--epochs 3] [--train-docs 50000]

The corpus is generated. Documents hold 5..40 word ids over a 2,000-word
vocabulary; about 30% of the words are drawn from 100 planted signal words, 50
"positive" and 50 "negative". A document's label is 1 when it holds more positive
than negative signal words, 0 when fewer, a coin flip on a tie, and is then
flipped with probability ``noise``.

No classifier beats the Bayes rule, which knows the planted words: predict the
sign of the signal. It is right with probability ``1 - noise`` on documents
whose signal is not tied and 1/2 on ties (:func:`bayes_accuracy`). A bag of words
can express that rule exactly, as it is linear in the word counts, but the model
has to learn a weight for every word from examples. With 6,000 training
documents each noise word is seen only about 50 times: the model fits them and
stays 6 or more points below the Bayes accuracy. With 50,000 it comes within a
point of it.
"""

from __future__ import annotations

import argparse
import time
from collections.abc import Iterator

import numpy as np

import blockir as bir

VOCAB = 2000
NOISE = 0.05


def make_corpus(n: int, seed: int) -> tuple[bir.LoDTensor, np.ndarray, np.ndarray]:
    """``n`` documents as one LoDTensor of ids [total_words, 1], their labels [n, 1], and their signal
    (positive minus negative signal words)."""
    rng = np.random.default_rng(seed)
    polarity = np.zeros(VOCAB, dtype=np.int64)
    polarity[1:51], polarity[51:101] = 1, -1  # the planted words (the same for every split)
    lengths = rng.integers(5, 41, size=n)
    ids = rng.integers(0, VOCAB, size=int(lengths.sum()), dtype=np.int64)
    planted = rng.random(len(ids)) < 0.3
    ids[planted] = rng.integers(1, 101, size=int(planted.sum()))
    offsets = np.concatenate([[0], np.cumsum(lengths)])
    signal = np.add.reduceat(polarity[ids], offsets[:-1])
    clean = np.where(signal == 0, rng.integers(0, 2, size=n), signal > 0)
    flip = rng.random(n) < NOISE
    labels = np.where(flip, 1 - clean, clean).astype(np.int64).reshape(-1, 1)
    return bir.LoDTensor(ids.reshape(-1, 1), [offsets.tolist()]), labels, signal


def bayes_accuracy(signal: np.ndarray) -> float:
    """The expected accuracy of the Bayes rule on documents with this signal: the best any model can do."""
    ties = float((signal == 0).mean())
    return (1 - NOISE) * (1 - ties) + 0.5 * ties


def batches(
    words: bir.LoDTensor, labels: np.ndarray, batch: int, rng: np.random.Generator
) -> Iterator[tuple[bir.LoDTensor, np.ndarray]]:
    """Shuffled mini-batches of whole documents."""
    offsets = np.asarray(words.lod[0])
    order = rng.permutation(len(labels))
    for i in range(0, len(order), batch):
        docs = order[i : i + batch]
        parts = [words.data[offsets[d] : offsets[d + 1]] for d in docs]
        yield bir.LoDTensor.from_lengths(np.concatenate(parts), [len(p) for p in parts]), labels[docs]


def build(emb_dim: int = 32, hidden: int = 32, lr: float = 0.02, seed: int = 1):
    main, startup = bir.Program(), bir.Program()
    main.random_seed = startup.random_seed = seed
    with bir.program_guard(main, startup):
        words = bir.data("words", shape=[-1, 1], dtype="int64", lod_level=1)
        label = bir.data("label", shape=[-1, 1], dtype="int64")
        emb = bir.layers.embedding(words, size=[VOCAB, emb_dim], is_sparse=True)  # gradient: SelectedRows
        bow = bir.layers.sequence_pool(emb, pool_type="sum")
        h = bir.layers.fc(bow, size=hidden, act="tanh")
        pred = bir.layers.fc(h, size=2, act="softmax")
        loss = bir.layers.mean(bir.layers.cross_entropy(pred, label))
        test = main.clone()  # before minimize: forward only
        bir.optimizer.Adagrad(learning_rate=lr).minimize(loss)
    return main, startup, test, pred, loss


def main(
    epochs: int = 3, train_docs: int = 50_000, test_docs: int = 10_000, batch: int = 64, verbose: bool = True
) -> dict[str, float]:
    """Train and evaluate; return the test ``accuracy``, the test set's ``bayes_accuracy``, ``agreement``
    (how often the model predicts the sign of the signal where it is not tied) and training ``seconds``."""
    train_words, train_labels, _ = make_corpus(train_docs, seed=0)
    test_words, test_labels, test_signal = make_corpus(test_docs, seed=1)
    main_prog, startup, test, pred, loss = build()
    exe, scope = bir.Executor("cpu"), bir.Scope()
    exe.run(startup, scope=scope)
    rng = np.random.default_rng(0)
    t0 = time.perf_counter()
    for epoch in range(epochs):
        losses = [
            exe.run(main_prog, feed={"words": w, "label": y}, fetch_list=[loss], scope=scope)[0][0]
            for w, y in batches(train_words, train_labels, batch, rng)
        ]
        if verbose:
            print(f"epoch {epoch + 1}  loss {np.mean(losses):.4f}  ({time.perf_counter() - t0:.1f}s)")
    seconds = time.perf_counter() - t0
    (probs,) = exe.run(test, feed={"words": test_words, "label": test_labels}, fetch_list=[pred], scope=scope)
    predicted = np.argmax(probs, axis=1)
    decided = test_signal != 0
    metrics = {
        "accuracy": float((predicted == test_labels[:, 0]).mean()),
        "bayes_accuracy": bayes_accuracy(test_signal),
        "agreement": float((predicted[decided] == (test_signal[decided] > 0)).mean()),
        "seconds": seconds,
    }
    if verbose:
        print(
            f"test accuracy {metrics['accuracy']:.4f}; the Bayes rule's {metrics['bayes_accuracy']:.4f}; "
            f"the model agrees with it on {metrics['agreement']:.2%} of the documents without a tie"
        )
    return metrics


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--epochs", type=int, default=3)
    parser.add_argument("--train-docs", type=int, default=50_000)
    args = parser.parse_args()
    main(args.epochs, args.train_docs)
