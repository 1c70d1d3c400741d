"""The models and batches of the fleet test scripts, also built by the tests for their references."""

from __future__ import annotations

from typing import Any

import numpy as np

import blockir as bir
from blockir.dsl.entry import CountFilterEntry
from blockir.ops.values import LoDTensor

HEIGHT = 40  # the sparse model's table
MIN_BLOCK = 60  # the scripts' min_block_size: the larger dense parameters are cut into blocks per server
TABLE = "embedding_0.w_0"
LENGTHS = [3, 1, 4, 2, 2, 5, 1, 3, 2]  # the sparse model's sequences
OPTIMIZERS = {
    "sgd": lambda: bir.optimizer.SGD(0.1),
    "adam": lambda: bir.optimizer.Adam(0.02),
    "adagrad": lambda: bir.optimizer.Adagrad(0.1),
}
ENTRIES = {"": None, "count2": CountFilterEntry(2)}


def build(model: str, entry: str = "") -> Any:
    """The model's loss, in the default programs (seeded): ``dense`` an MLP, ``sparse`` an embedding bag."""
    main, startup = bir.default_main_program(), bir.default_startup_program()
    main.random_seed = startup.random_seed = 5
    if model == "dense":
        x = bir.layers.data("x", [-1, 5], dtype="float64")
        y = bir.layers.data("y", [-1, 1], dtype="float64")
        h = bir.layers.fc(x, 64, act="tanh")  # fc_0.w_0 [5, 64], fc_1.w_0 [64, 1]: cut into blocks (MIN_BLOCK)
        return bir.layers.mean(bir.layers.square_error_cost(bir.layers.fc(h, 1), y))
    words = bir.layers.data("words", [-1, 1], dtype="int64", lod_level=1)
    label = bir.layers.data("label", [-1, 1], dtype="int64")
    emb = bir.layers.embedding(words, size=[HEIGHT, 8], is_sparse=True, dtype="float64", entry=ENTRIES[entry])
    h = bir.layers.fc(bir.layers.sequence_pool(emb, "sum"), 16, act="tanh")
    return bir.layers.mean(bir.layers.cross_entropy(bir.layers.fc(h, 3, act="softmax"), label))


def bow_classifier() -> Any:
    """examples/bow_classifier.py, loaded by path (its corpus: make_corpus, batches, VOCAB)."""
    import importlib.util
    from pathlib import Path

    path = Path(__file__).resolve().parents[3] / "examples" / "bow_classifier.py"
    spec = importlib.util.spec_from_file_location("bow_classifier", path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def bow(vocab: int) -> tuple[Any, Any]:
    """The async tests' bag-of-words classifier in the default programs (seeded): its cost and accuracy."""
    main, startup = bir.default_main_program(), bir.default_startup_program()
    main.random_seed = startup.random_seed = 1
    words = bir.layers.data("words", [-1, 1], dtype="int64", lod_level=1)
    label = bir.layers.data("label", [-1, 1], dtype="int64")
    emb = bir.layers.embedding(words, size=[vocab, 32], is_sparse=True)
    hidden = bir.layers.fc(bir.layers.tanh(bir.layers.sequence_pool(emb, "sum")), 32, act="tanh")
    prediction = bir.layers.fc(hidden, 2, act="softmax")
    return bir.layers.mean(bir.layers.cross_entropy(prediction, label)), bir.layers.accuracy(prediction, label)


def batch(model: str, k: int = 0, n: int = 1) -> dict[str, Any]:
    """Worker ``k``'s share of the fixed batch (of ``n`` workers): rows, or whole sequences."""
    rng = np.random.default_rng(4)
    if model == "dense":
        x, y = rng.normal(size=(9, 5)), rng.normal(size=(9, 1))
        return {"x": np.array_split(x, n)[k], "y": np.array_split(y, n)[k]}
    ids = rng.integers(0, HEIGHT, size=(sum(LENGTHS), 1)).astype("int64")
    labels = rng.integers(0, 3, size=(len(LENGTHS), 1)).astype("int64")
    mine = np.array_split(np.arange(len(LENGTHS)), n)[k]
    offsets = np.cumsum([0, *LENGTHS])
    part = ids[offsets[mine[0]] : offsets[mine[-1] + 1]]
    return {"words": LoDTensor.from_lengths(part, [LENGTHS[i] for i in mine]), "label": labels[mine]}
