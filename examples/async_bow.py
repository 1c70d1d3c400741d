"""Hogwild training of Paddle's bow_net from MultiSlot files with ``bir.AsyncExecutor``.

    python examples/async_bow.py [--workers 1 2 4] [--mode thread|process] [--epochs 1]
                                 [--parts 12] [--docs 4000] [--workdir DIR]

Fluid's AsyncExecutor example, end to end: the planted-signal corpus of
``bow_classifier.py`` (2,000 words, 100 of them signal words; see its doc) is
written as ``--parts`` MultiSlot files of ``--docs`` documents each, with a
``data.prototxt`` describing them and a held-out file of 10,000 more documents.
For each worker count, bow_net (sparse embedding, sum pooling, tanh, fc 128 tanh,
fc 96 tanh, fc 2 softmax; Adagrad) starts from the same initial weights and is
trained with ``run_from_files``, the workers updating the shared parameters
without locks. After each epoch the inference model is saved to
``WORKDIR/<mode>-<workers>/epoch<N>.model``, loaded back with a plain executor and
scored on the held-out file. Every worker count reaches the accuracy of the single
worker: after one pass over the 48,000 documents, within about half a point of the
Bayes accuracy of the held-out documents (the best any model can do on them).
Further passes gain little and then lose: the model starts to fit the noise words.
"""

from __future__ import annotations

import argparse
import importlib.util
import math
import tempfile
from collections.abc import Callable, Sequence
from pathlib import Path
from types import ModuleType
from typing import Any, NamedTuple

import numpy as np

import blockir as bir
from blockir.datafeed.multislot import MultiSlotReader, write_multislot
from blockir.parallel.async_executor import MODES

PROTOTXT = """\
name: "MultiSlotDataFeed"
batch_size: 32
multi_slot_desc {
  slots { name: "words" type: "uint64" is_dense: false is_used: true }
  slots { name: "label" type: "uint64" is_dense: true is_used: true shape: 1 }
}
"""
HELDOUT_DOCS = 10_000


def _sibling(name: str) -> ModuleType:
    """The example ``name`` next to this file, loaded by path (it runs as a script or is loaded by path)."""
    spec = importlib.util.spec_from_file_location(f"examples_{name}", Path(__file__).with_name(f"{name}.py"))
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


bow_classifier = _sibling("bow_classifier")  # its corpus: make_corpus, bayes_accuracy, VOCAB


class Corpus(NamedTuple):
    """Where :func:`write_corpus` put the data, and the Bayes accuracy of the held-out documents."""

    prototxt: Path
    train_files: list[str]
    heldout: str
    bayes_accuracy: float


class BowNet(NamedTuple):
    """The programs and variables of :func:`bow_net`."""

    main: bir.Program
    startup: bir.Program
    avg_cost: Any
    acc: Any
    prediction: Any


def _write_docs(path: Path, n: int, seed: int) -> np.ndarray:
    """``n`` documents of the planted-signal corpus as a MultiSlot file; returns their signal."""
    words, labels, signal = bow_classifier.make_corpus(n, seed)
    ids, offsets = words.data[:, 0], words.lod[0]
    desc = bir.DataFeedDesc(PROTOTXT)
    write_multislot(
        path, ({"words": ids[offsets[i] : offsets[i + 1]], "label": int(labels[i, 0])} for i in range(n)), desc
    )
    return signal


def write_corpus(
    directory: str | Path, parts: int = 12, docs_per_part: int = 2000, heldout_docs: int = HELDOUT_DOCS, seed: int = 0
) -> Corpus:
    """Write ``data.prototxt``, ``train_data/part-<i>`` (``parts`` files of ``docs_per_part`` documents) and
    ``heldout`` into ``directory``; every file has documents of its own (seeds ``seed + i``)."""
    directory = Path(directory)
    (directory / "train_data").mkdir(parents=True, exist_ok=True)
    prototxt = directory / "data.prototxt"
    prototxt.write_text(PROTOTXT)
    train_files = []
    for i in range(parts):
        path = directory / "train_data" / f"part-{i}"
        _write_docs(path, docs_per_part, seed + i)
        train_files.append(str(path))
    heldout = directory / "heldout"
    signal = _write_docs(heldout, heldout_docs, seed + parts)
    return Corpus(prototxt, train_files, str(heldout), bow_classifier.bayes_accuracy(signal))


def bow_net(
    dict_dim: int,
    emb_dim: int = 128,
    hid_dim: int = 128,
    hid_dim2: int = 96,
    class_dim: int = 2,
    learning_rate: float = 0.01,
    seed: int = 1,
    minimize: Callable[[Any, Any], Any] | None = None,
) -> BowNet:
    """Paddle's bow_net on the data variables ``words`` (ids, one LoD level) and ``label``, minimized by Adagrad
    (``minimize(optimizer, loss)``, default ``optimizer.minimize(loss)``: a fleet script passes its distributed
    optimizer's).

    Names are fresh for each net, so a ``seed`` gives the same initial weights at every call."""
    main, startup = bir.Program(), bir.Program()
    main.random_seed = startup.random_seed = seed
    with bir.unique_name.guard(), bir.program_guard(main, startup):
        data = bir.data("words", shape=[-1, 1], dtype="int64", lod_level=1)
        label = bir.data("label", shape=[-1, 1], dtype="int64")
        emb = bir.layers.embedding(data, size=[dict_dim, emb_dim], is_sparse=True)
        bow_tanh = bir.layers.tanh(bir.layers.sequence_pool(emb, pool_type="sum"))
        fc_1 = bir.layers.fc(bow_tanh, size=hid_dim, act="tanh")
        fc_2 = bir.layers.fc(fc_1, size=hid_dim2, act="tanh")
        prediction = bir.layers.fc(fc_2, size=class_dim, act="softmax")
        avg_cost = bir.layers.mean(bir.layers.cross_entropy(prediction, label))
        acc = bir.layers.accuracy(prediction, label)
        optimizer = bir.optimizer.Adagrad(learning_rate=learning_rate)
        if minimize is None:
            optimizer.minimize(avg_cost)
        else:
            minimize(optimizer, avg_cost)
    return BowNet(main, startup, avg_cost, acc, prediction)


def evaluate(model_dir: str | Path, desc: bir.DataFeedDesc, path: str) -> float:
    """The accuracy on the MultiSlot file ``path`` of the inference model saved in ``model_dir``."""
    exe, scope = bir.Executor("cpu"), bir.Scope()
    program, feeds, fetches = bir.io.load_inference_model(model_dir, exe, scope=scope)
    right = total = 0
    for batch in MultiSlotReader(desc, path):
        (probs,) = exe.run(program, feed={name: batch[name] for name in feeds}, fetch_list=fetches, scope=scope)
        right += int((probs.argmax(axis=1) == batch["label"][:, 0]).sum())
        total += len(probs)
    return right / total


def train(
    corpus: Corpus,
    workers: int,
    mode: str = "thread",
    epochs: int = 1,
    out: str | Path | None = None,
    batch_size: int = 32,
    learning_rate: float = 0.01,
    verbose: bool = True,
) -> dict[str, Any]:
    """Train bow_net on ``corpus`` with ``workers`` Hogwild workers (threads or processes), saving and scoring
    the inference model after each epoch (under ``out``, default: next to the data).

    Returns ``accuracy`` (held out, last epoch), ``epoch_accuracy``, the last epoch's mean training ``cost``
    and ``train_accuracy``, training ``seconds`` (all epochs), ``instances_per_second`` and the last ``model``.
    """
    out = Path(out) if out is not None else corpus.prototxt.parent / f"{mode}-{workers}"
    dataset = bir.DataFeedDesc(corpus.prototxt)
    dataset.set_batch_size(batch_size)
    net = bow_net(bow_classifier.VOCAB, learning_rate=learning_rate)
    exe, scope = bir.Executor("cpu"), bir.Scope()
    exe.run(net.startup, scope=scope)
    epoch_accuracy, seconds, instances = [], 0.0, 0
    with bir.AsyncExecutor("cpu", keep_workers=True) as async_exe:  # process mode: the same workers each epoch
        for epoch in range(epochs):
            cost, train_acc = async_exe.run_from_files(
                net.main,
                dataset,
                corpus.train_files,
                thread_num=workers,
                fetch=[net.avg_cost, net.acc],
                mode=mode,
                scope=scope,
            )
            seconds += async_exe.last_stats.seconds
            instances += async_exe.last_stats.instances
            model = out / f"epoch{epoch}.model"
            bir.io.save_inference_model(model, ["words"], [net.prediction], exe, main_program=net.main, scope=scope)
            epoch_accuracy.append(evaluate(model, dataset, corpus.heldout))
            if verbose:
                print(
                    f"{mode} x{workers} epoch {epoch}: cost {cost:.4f}, train accuracy {train_acc:.4f}, "
                    f"held-out accuracy {epoch_accuracy[-1]:.4f} ({async_exe.last_stats.seconds:.1f}s)",
                    flush=True,
                )
    return {
        "workers": workers,
        "mode": mode,
        "accuracy": epoch_accuracy[-1],
        "epoch_accuracy": epoch_accuracy,
        "cost": cost,
        "train_accuracy": train_acc,
        "seconds": seconds,
        "instances_per_second": instances / seconds,
        "model": str(model),
    }


def standard_error(accuracy: float, n: int) -> float:
    """The standard error of an accuracy measured on ``n`` documents."""
    return math.sqrt(accuracy * (1 - accuracy) / n)


def main(
    workers: Sequence[int] = (1, 2, 4),
    mode: str = "thread",
    epochs: int = 1,
    parts: int = 12,
    docs: int = 4000,
    workdir: str | Path | None = None,
    verbose: bool = True,
) -> dict[str, Any]:
    """Write the corpus (into ``workdir``, default a temporary directory) and train with each worker count.

    Returns ``bayes_accuracy`` and ``heldout_docs`` of the held-out file, and ``runs``: :func:`train`'s
    metrics per worker count (models saved under ``workdir`` survive only when it is given).
    """
    with tempfile.TemporaryDirectory() as tmp:
        corpus = write_corpus(workdir if workdir is not None else tmp, parts, docs)
        runs = {n: train(corpus, n, mode, epochs, verbose=verbose) for n in workers}
    bayes = corpus.bayes_accuracy
    if verbose:
        base = runs[min(runs)]["accuracy"]
        print(f"\n{'workers':>7} {'mode':>7} {'test accuracy':>13} {'vs first':>9} {'instances/s':>12}")
        for n, run in runs.items():
            print(
                f"{n:7d} {mode:>7} {run['accuracy']:13.4f} {run['accuracy'] - base:+9.4f} "
                f"{run['instances_per_second']:12,.0f}"
            )
        print(
            f"held out: {HELDOUT_DOCS:,} documents (standard error {standard_error(base, HELDOUT_DOCS):.4f}); "
            f"the Bayes rule's accuracy on them: {bayes:.4f}"
        )
    return {"bayes_accuracy": bayes, "heldout_docs": HELDOUT_DOCS, "runs": runs}


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--workers", type=int, nargs="+", default=[1, 2, 4])
    parser.add_argument("--mode", choices=MODES, default="thread")
    parser.add_argument("--epochs", type=int, default=1)
    parser.add_argument("--parts", type=int, default=12, help="training files")
    parser.add_argument("--docs", type=int, default=4000, help="documents per training file")
    parser.add_argument("--workdir", help="where data and models go (default: a temporary directory)")
    args = parser.parse_args()
    main(args.workers, args.mode, args.epochs, args.parts, args.docs, args.workdir)
