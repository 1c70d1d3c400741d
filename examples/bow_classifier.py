"""A bag-of-words text classifier: sparse embedding, sequence pooling, fc.

    python examples/bow_classifier.py [--epochs 5]

The corpus is generated: documents of 5..40 word ids over a 2,000-word
vocabulary; 50 "positive" and 50 "negative" words carry the signal; a document's
label is whether it holds more positive than negative signal words, then flipped
with probability ``noise``. So the best any classifier can do on fresh data is
about ``1 - noise`` (a little less when ties occur): that is the accuracy the
data allows, and what this model reaches.
"""

from __future__ import annotations

import argparse

import numpy as np

import blockir as bir

VOCAB = 2000


def make_corpus(n: int, noise: float = 0.05, seed: int = 0) -> tuple[bir.LoDTensor, np.ndarray, float]:
    """Documents as one LoDTensor of ids [total_words, 1], labels [n, 1], and the achievable accuracy."""
    rng = np.random.default_rng(seed)
    signal = np.zeros(VOCAB, dtype=np.int64)
    signal[1:51], signal[51:101] = 1, -1  # fixed planted words (same for every split)
    lengths = rng.integers(5, 41, size=n)
    ids = rng.integers(0, VOCAB, size=int(lengths.sum()), dtype=np.int64)
    # plant: about a third of the words are signal words
    planted = rng.random(len(ids)) < 0.3
    ids[planted] = rng.integers(1, 101, size=int(planted.sum()))
    offsets = np.concatenate([[0], np.cumsum(lengths)])
    score = np.add.reduceat(signal[ids], offsets[:-1])
    clean = np.where(score == 0, rng.integers(0, 2, size=n), (score > 0).astype(np.int64))
    flip = rng.random(n) < noise
    labels = np.where(flip, 1 - clean, clean).astype(np.int64).reshape(-1, 1)
    ties = float((score == 0).mean())  # a tie's label is a coin flip: no classifier beats 1/2 there
    achievable = (1 - noise) * (1 - ties) + 0.5 * ties
    return bir.LoDTensor(ids.reshape(-1, 1), [offsets.tolist()]), labels, achievable


def batches(words: bir.LoDTensor, labels: np.ndarray, batch: int, rng: np.random.Generator):
    offsets = np.asarray(words.lod[0])
    order = rng.permutation(len(labels))
    for i in range(0, len(order), batch):
        docs = order[i:i + batch]
        parts = [words.data[offsets[d]:offsets[d + 1]] for d in docs]
        yield bir.LoDTensor.from_lengths(np.concatenate(parts), [len(p) for p in parts]), labels[docs]


def build(emb_dim: int = 32, lr: float = 0.05, seed: int = 1):
    main, startup = bir.Program(), bir.Program()
    main.random_seed = startup.random_seed = seed
    with bir.program_guard(main, startup):
        words = bir.data("words", shape=[-1, 1], dtype="int64", lod_level=1)
        label = bir.data("label", shape=[-1, 1], dtype="int64")
        emb = bir.layers.embedding(words, size=[VOCAB, emb_dim], is_sparse=True)
        bow = bir.layers.sequence_pool(emb, pool_type="sum")
        hidden = bir.layers.fc(bow, size=32, act="tanh")
        pred = bir.layers.fc(hidden, size=2, act="softmax")
        loss = bir.layers.mean(bir.layers.cross_entropy(pred, label))
        test = main.clone()
        bir.optimizer.Adagrad(learning_rate=lr).minimize(loss)
    return main, startup, test, pred, loss


def train(epochs: int = 5, batch: int = 64, verbose: bool = True) -> tuple[float, float]:
    """Train; return (test accuracy, achievable accuracy)."""
    train_words, train_labels, _ = make_corpus(6000, seed=0)
    test_words, test_labels, achievable = make_corpus(2000, seed=1)
    main, startup, test, pred, loss = build()
    exe, scope = bir.Executor("cpu"), bir.Scope()
    exe.run(startup, scope=scope)
    rng = np.random.default_rng(0)
    for epoch in range(epochs):
        losses = [float(exe.run(main, feed={"words": w, "label": y}, fetch_list=[loss], scope=scope)[0][0])
                  for w, y in batches(train_words, train_labels, batch, rng)]
        if verbose:
            print(f"epoch {epoch + 1}  loss {np.mean(losses):.4f}")
    probs, = exe.run(test, feed={"words": test_words, "label": test_labels}, fetch_list=[pred], scope=scope)
    accuracy = float((np.argmax(probs, axis=1) == test_labels[:, 0]).mean())
    if verbose:
        print(f"test accuracy {accuracy:.4f} (the data allows about {achievable:.4f})")
    return accuracy, achievable


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--epochs", type=int, default=5)
    train(parser.parse_args().epochs)
