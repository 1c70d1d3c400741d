"""A fleet script for the fault tests: the bag-of-words classifier trained in async (Downpour) mode while
something goes wrong, then scored by worker 0 on held-out documents.

    python faults.py OUT DOCS HELDOUT_DOCS STEP_S [RAISE_AT]

Every run of a role writes its pid to ``OUT/KIND INDEX.pid.RESTART`` (``worker1.pid.0``) first, so a test can
kill it; a worker writes how many steps it made to ``OUT/workerK.step`` as it goes, and sleeps STEP_S seconds a
step (time for a test to kill something mid-epoch). With RAISE_AT, worker 1's first run raises at that step.
Each worker writes ``OUT/workerK.json`` at the end: its restarts, steps and the servers it found restarted;
worker 0 also ``OUT/accuracy.json``.
"""

import json
import os
import sys
import time
from pathlib import Path

import numpy as np
import ps_models

import blockir as bir
from blockir.distributed import fleet

out, docs, heldout_docs, step_s = Path(sys.argv[1]), int(sys.argv[2]), int(sys.argv[3]), float(sys.argv[4])
raise_at = int(sys.argv[5]) if len(sys.argv) > 5 else -1
bow = ps_models.bow_classifier()


def write(path: Path, text: str) -> None:
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text(text)
    tmp.replace(path)


fleet.init()
kind = "server" if fleet.is_server() else "worker"
me = f"{kind}{fleet.server_index() if fleet.is_server() else fleet.worker_index()}"
write(out / f"{me}.pid.{fleet.restarts()}", str(os.getpid()))
cost, accuracy = ps_models.bow(bow.VOCAB)
strategy = fleet.DistributedStrategy()
strategy.a_sync = True
strategy.a_sync_configs = {"pull_every": 1, "queue_size": 1}
fleet.distributed_optimizer(bir.optimizer.Adagrad(0.05), strategy).minimize(cost)
test_program = fleet.main_program.clone(for_test=True)

if fleet.is_server():
    fleet.init_server()
    fleet.run_server()
else:
    exe = bir.Executor("cpu")
    exe.run(fleet.startup_program)
    fleet.init_worker()
    k, n = fleet.worker_index(), fleet.worker_num()
    words, labels, _ = bow.make_corpus(docs, seed=0)
    steps = 0
    for i, (w, y) in enumerate(bow.batches(words, labels, 32, np.random.default_rng(0))):
        if i % n != k:
            continue
        if k == 1 and steps == raise_at and fleet.restarts() == 0:
            raise RuntimeError(f"worker 1 fails at step {steps}")
        exe.run(fleet.main_program, feed={"words": w, "label": y}, fetch_list=[cost])
        steps += 1
        write(out / f"{me}.step", str(steps))
        time.sleep(step_s)
    fleet.communicator().stop()  # everything pushed
    fleet.barrier_worker()
    report = {"restarts": fleet.restarts(), "steps": steps, "recoveries": fleet.communicator().recoveries}
    write(out / f"{me}.json", json.dumps(report))
    if k == 0:
        for name, value in fleet.communicator().pull_all().items():  # the servers' dense parameters, at the end
            bir.global_scope().set(name, np.array(value))
        test_words, test_labels, _ = bow.make_corpus(heldout_docs, seed=99)
        (acc,) = exe.run(test_program, feed={"words": test_words, "label": test_labels}, fetch_list=[accuracy])
        write(out / "accuracy.json", json.dumps({"accuracy": float(acc[0])}))
    fleet.barrier_worker()
    fleet.stop_worker()
