"""A fleet script for the tests: bow_net (examples/async_bow.py) trained in async mode from MultiSlot files,
each worker an AsyncExecutor with two thread workers sharing its communicator (which prefetches the rows of
each coming batch).

    python files_bow.py OUT DATA_DIR

Worker 0 writes the corpus into DATA_DIR (the others wait at a barrier) and, after training, ``OUT/files.json``:
its held-out accuracy, the single-process AsyncExecutor's on the same files, and its communicator's counters.
"""

import importlib.util
import json
import sys
from pathlib import Path

import numpy as np
import ps_models

import blockir as bir
from blockir.distributed import fleet

out, data = Path(sys.argv[1]), Path(sys.argv[2])
root = Path(ps_models.__file__).resolve().parents[3]
spec = importlib.util.spec_from_file_location("async_bow", root / "examples" / "async_bow.py")
example = importlib.util.module_from_spec(spec)
spec.loader.exec_module(example)

fleet.init()
strategy = fleet.DistributedStrategy()
strategy.a_sync = True
strategy.a_sync_configs = {"queue_size": 1, "prefetch": True, "cache_windows": 8}  # pull_every: the default
net = example.bow_net(
    example.bow_classifier.VOCAB,
    minimize=lambda opt, loss: fleet.distributed_optimizer(opt, strategy).minimize(loss),
)
if fleet.is_server():
    fleet.init_server()
    fleet.run_server()
else:
    test_program = fleet.main_program.clone(for_test=True)
    exe = bir.Executor("cpu")
    exe.run(fleet.startup_program)
    fleet.init_worker()
    k, n = fleet.worker_index(), fleet.worker_num()
    if k == 0:
        corpus = example.write_corpus(data, parts=8, docs_per_part=2000, heldout_docs=4000)
    fleet.barrier_worker()
    files = sorted(str(p) for p in (data / "train_data").iterdir())
    desc = bir.DataFeedDesc(data / "data.prototxt")
    desc.set_batch_size(32)
    with bir.AsyncExecutor("cpu") as async_exe:
        async_exe.run_from_files(fleet.main_program, desc, files[k::n], thread_num=2, fetch=[net.avg_cost])
    communicator = fleet.communicator()
    communicator.stop()
    fleet.barrier_worker()
    if k == 0:
        for name, value in communicator.pull_all().items():
            bir.global_scope().set(name, np.array(value))
        right = total = 0
        for batch in example.MultiSlotReader(desc, corpus.heldout):
            (probs,) = exe.run(
                test_program, feed={"words": batch["words"], "label": batch["label"]}, fetch_list=[net.prediction]
            )
            right += int((probs.argmax(axis=1) == batch["label"][:, 0]).sum())
            total += len(probs)
        reference = example.train(corpus, 1, "thread", 1, out=data / "reference", verbose=False)
        report = {"accuracy": right / total, "reference": reference["accuracy"], "stats": communicator.stats}
        report["settings"] = [communicator.pull_every, communicator.cache_windows]
        (out / "files.json").write_text(json.dumps(report))
    fleet.barrier_worker()
    fleet.stop_worker()
