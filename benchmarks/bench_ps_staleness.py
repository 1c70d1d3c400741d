"""Where async parameter-server training loses accuracy with one worker: the staleness of what it trains with,
and windows of merged steps meeting Adagrad, measured apart.

    python benchmarks/bench_ps_staleness.py [--delays 0 30] [--queues 2 16] [--pull-every 1] [--epochs 3]

bow_net (examples/async_bow.py: embedding 2,000 x 128, sum pool, fc 128 tanh, fc 96 tanh, fc 2; Adagrad 0.05),
batches of 32 of 16,000 planted-signal documents (examples/bow_classifier.py's corpus, fixed seeds), held-out
accuracy on 4,000 others. First one process (``Executor``, the same batches in the same order); then one server
and one worker in this process (the in-process backend): in sync mode (no staleness: the control, which differs
from one process only by the table's first rows, which the server draws from seeded streams of its own), and
async for each ``--delays`` (ms added to every exchange, as
a slower transport adds: the worker runs ahead of its pushes by up to the queue, so the dense values and rows
it trains with lack more of its own steps), ``--queues`` (``queue_size``) and ``--pull-every`` (windows of n
steps merged into one push: Adagrad then sees one summed gradient where one process sees n). Printed per run:
accuracy, the mean staleness (the worker's steps its dense values lacked, per step: the communicator's
``stale_steps``), and the accuracy through the worker's program (lookups from the servers) beside that of the
exported model (``fleet.save_inference_model``), which tells whether evaluating through the servers costs
anything."""

from __future__ import annotations

import argparse
import contextvars
import tempfile
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
from bench_ps import load_example  # benchmarks/, the script's directory

import blockir as bir
from blockir.distributed import fleet
from blockir.distributed.api import ParameterServerAPI, Reply, ServerHandle
from blockir.distributed.backend import InProcessBackend
from blockir.distributed.role import Role
from blockir.distributed.runner import run_once

DOCS, HELDOUT, BATCH, LR = 16_000, 4_000, 32, 0.05


example = load_example()
corpus = example.bow_classifier


class _Delayed(ServerHandle):
    """An in-process handle whose exchanges answer ``delay`` s late (a slower transport)."""

    def __init__(self, inner: ServerHandle, delay: float) -> None:
        self.inner = inner
        self.delay = delay

    def submit(self, method: Callable[..., Any], *args: Any, **kwargs: Any) -> Reply[Any]:
        if method is ParameterServerAPI.exchange and self.delay:
            time.sleep(self.delay)
        return self.inner.submit(method, *args, **kwargs)

    def close(self) -> None:
        self.inner.close()


class _DelayedBackend(InProcessBackend):
    def __init__(self, delay: float) -> None:
        super().__init__()
        self.delay = delay

    def handles(self, run: str, servers: int, timeout: float) -> list[ServerHandle]:
        return [_Delayed(h, self.delay) for h in super().handles(run, servers, timeout)]


def _batches(epochs: int) -> list[tuple[bir.LoDTensor, np.ndarray]]:
    words, labels, _ = corpus.make_corpus(DOCS, seed=0)
    return [b for epoch in range(epochs) for b in corpus.batches(words, labels, BATCH, np.random.default_rng(epoch))]


def _heldout_accuracy(exe: bir.Executor, program: bir.Program, prediction: Any, scope: Any = None) -> float:
    words, labels, _ = corpus.make_corpus(HELDOUT, seed=99)
    feed = {"words": words, "label": labels}
    feed = {name: feed[name] for name in feed if program.global_block().has_var(name)}  # the exported: words
    (probs,) = exe.run(program, feed=feed, fetch_list=[prediction], scope=scope)
    return float((np.asarray(probs).argmax(axis=1) == labels[:, 0]).mean())


def one_process(batches: list[tuple[bir.LoDTensor, np.ndarray]]) -> float:
    net = example.bow_net(corpus.VOCAB, learning_rate=LR)
    test = net.main.clone(for_test=True)
    scope = bir.Scope()
    with bir.Executor("cpu") as exe:
        exe.run(net.startup, scope=scope)
        for w, y in batches:
            exe.run(net.main, feed={"words": w, "label": y}, scope=scope)
        return _heldout_accuracy(exe, test, net.prediction, scope)


def parameter_server(
    batches: list[tuple[bir.LoDTensor, np.ndarray]], delay_ms: float, queue: int, pull_every: int, where: Path
) -> dict[str, float]:
    """One server and one worker in this process, async (``queue`` 0: sync, the control without staleness)."""
    report: dict[str, float] = {}

    def role_script() -> None:
        fleet.init()
        strategy = fleet.DistributedStrategy()
        strategy.a_sync = queue > 0
        strategy.a_sync_configs = {"pull_every": pull_every, "queue_size": queue} if queue else {}
        net = example.bow_net(
            corpus.VOCAB,
            learning_rate=LR,
            minimize=lambda opt, loss: fleet.distributed_optimizer(opt, strategy).minimize(loss),
        )
        if fleet.is_server():
            fleet.init_server()
            fleet.run_server()
            return
        test = fleet.main_program.clone(for_test=True)
        exe = bir.Executor("cpu")
        exe.run(fleet.startup_program)
        fleet.init_worker()
        mine = fleet.communicator()
        for w, y in batches:
            exe.run(fleet.main_program, feed={"words": w, "label": y})
        mine.stop()
        report["stale"] = mine.stats.get("stale_steps", 0) / mine.steps
        for name, value in mine.pull_all().items():
            bir.global_scope().set(name, np.array(value))
        report["accuracy"] = _heldout_accuracy(exe, test, net.prediction)
        model = where / f"model-{delay_ms}-{queue}-{pull_every}"
        fleet.save_inference_model(exe, model, ["words"], [net.prediction], main_program=net.main)
        loaded = bir.Scope()
        program, _, fetches = bir.io.load_inference_model(str(model), exe, scope=loaded)
        report["exported"] = _heldout_accuracy(exe, program, fetches[0], loaded)
        fleet.stop_worker()

    backend = _DelayedBackend(delay_ms / 1e3)
    roles = [Role("server", 0, 1, 1, "staleness"), Role("worker", 0, 1, 1, "staleness")]
    failures: dict[str, str | None] = {}

    def run(role: Role) -> None:
        failures[role.kind] = run_once(role_script, role, backend, [], verbose=True)

    threads = [threading.Thread(target=contextvars.Context().run, args=(run, role)) for role in roles]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    backend.stop_run("staleness")
    if any(failures.values()):
        raise SystemExit(f"the run failed: {failures}")
    return report


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--delays", nargs="+", type=float, default=[0.0, 30.0], help="ms added to each exchange")
    parser.add_argument("--queues", nargs="+", type=int, default=[2, 16], help="queue_size values")
    parser.add_argument("--pull-every", nargs="+", type=int, default=[1])
    parser.add_argument("--epochs", type=int, default=3)
    args = parser.parse_args()
    batches = _batches(args.epochs)
    print(f"one process: accuracy {one_process(batches):.4f} ({len(batches)} batches)", flush=True)
    with tempfile.TemporaryDirectory() as tmp:
        control = parameter_server(batches, 0.0, 0, 1, Path(tmp))
        print(
            f"sync, one worker (no staleness; the server makes the table's rows from its own seeded streams): "
            f"accuracy {control['accuracy']:.4f} (exported {control['exported']:.4f})",
            flush=True,
        )
        for pull_every in args.pull_every:
            for queue in args.queues:
                for delay in args.delays:
                    got = parameter_server(batches, delay, queue, pull_every, Path(tmp))
                    print(
                        f"pull_every {pull_every}, queue {queue}, exchange +{delay:g} ms: "
                        f"accuracy {got['accuracy']:.4f} (exported {got['exported']:.4f}), "
                        f"stale {got['stale']:.2f} steps",
                        flush=True,
                    )


if __name__ == "__main__":
    main()
