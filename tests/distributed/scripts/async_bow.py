"""A fleet script for the tests: the bag-of-words classifier of examples/bow_classifier.py trained in async
(Downpour) mode, or with K_STEPS in GEO-SGD mode; worker 0 scores it on held-out documents after every worker
is done.

    python async_bow.py OUT EPOCHS DOCS HELDOUT_DOCS [K_STEPS [SAVE PHASE]]

Worker ``k`` trains on its share of DOCS documents (batches of 32) for EPOCHS epochs; worker 0 writes
``OUT/accuracy.json``: its held-out accuracy, with the server-side table sizes. With SAVE, PHASE ``save``
trains on the first half of the batches and worker 0 saves the model into SAVE (fleet.save_persistables);
PHASE ``load`` starts from that save and trains on the second half.
"""

import json
import sys
from pathlib import Path

import numpy as np
import ps_models

import blockir as bir
from blockir.distributed import fleet

out, epochs, docs, heldout_docs = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4])
k_steps = int(sys.argv[5]) if len(sys.argv) > 5 else 0  # > 0: GEO-SGD, exchanging every k steps
save, phase = (sys.argv[6], sys.argv[7]) if len(sys.argv) > 7 else (None, "")
bow = ps_models.bow_classifier()

fleet.init()
cost, accuracy = ps_models.bow(bow.VOCAB)
strategy = fleet.DistributedStrategy()
strategy.a_sync = True
strategy.a_sync_configs = {"k_steps": k_steps} if k_steps else {"pull_every": 1, "queue_size": 1}
fleet.distributed_optimizer(bir.optimizer.Adagrad(0.05), strategy).minimize(cost)
test_program = fleet.main_program.clone(for_test=True)  # the forward (async: its lookups through the servers)

if fleet.is_server():
    fleet.init_server(save if phase == "load" else None)
    fleet.run_server()
else:
    exe = bir.Executor("cpu")
    exe.run(fleet.startup_program)
    if phase == "load" and fleet.is_first_worker():
        program = cost.block.program
        bir.io.load_vars(exe, save, main_program=program, vars=fleet.dense_vars(program))
    fleet.init_worker()
    k, n = fleet.worker_index(), fleet.worker_num()
    train_words, train_labels, _ = bow.make_corpus(docs, seed=0)
    half = docs // 32 // 2
    for epoch in range(epochs):
        for i, (w, y) in enumerate(bow.batches(train_words, train_labels, 32, np.random.default_rng(epoch))):
            if i % n == k and (phase == "" or (i < half) == (phase == "save")):
                exe.run(fleet.main_program, feed={"words": w, "label": y}, fetch_list=[cost])
    fleet.communicator().stop()  # everything pushed
    fleet.barrier_worker()
    if phase == "save":
        if k == 0:
            fleet.save_persistables(exe, save)
    elif k == 0:
        for name, value in fleet.communicator().pull_all().items():  # the servers' dense parameters, at the end
            bir.global_scope().set(name, np.array(value))
        if k_steps:  # GEO: the worker's own table too (the test program looks it up locally)
            table = bir.global_scope().get("embedding_0.w_0")
            table[...] = fleet.communicator().pull_sparse("embedding_0.w_0", np.arange(len(table)))
        test_words, test_labels, signal = bow.make_corpus(heldout_docs, seed=99)
        (acc,) = exe.run(test_program, feed={"words": test_words, "label": test_labels}, fetch_list=[accuracy])
        Path(out, "accuracy.json").write_text(
            json.dumps({"accuracy": float(acc[0]), "stats": fleet.communicator().stats})
        )
    fleet.barrier_worker()
    fleet.stop_worker()
