"""One role of bench_ps.py's parameter-server runs: bow_net (examples/async_bow.py) in async mode, from
MultiSlot files, each worker an AsyncExecutor with one thread over its share of the files, pulling every
PULL_EVERY steps, queueing QUEUE_SIZE steps (0: the default, two windows) and prefetching the rows of PREFETCH
batches ahead (0: none).

    blockir launch --servers S --workers W benchmarks/ps_bow_role.py OUT PULL_EVERY QUEUE_SIZE PREFETCH PROTOTXT \
        HELDOUT FILE...

Every role writes ``OUT/<role>.json``: its CPU seconds (a Ray role's process's, Ray's threads included; an
in-process role's thread's, which the bench does not report: the work runs on other threads), and for a
worker its instances, seconds, the communicator's counters and, from worker 0, the held-out accuracy.
"""

import importlib.util
import json
import os
import resource
import sys
import time
from pathlib import Path

import blockir as bir
from blockir.distributed import fleet

out, (pull_every, queue_size, prefetch) = Path(sys.argv[1]), map(int, sys.argv[2:5])
prototxt, heldout, files = sys.argv[5], sys.argv[6], sys.argv[7:]
spec = importlib.util.spec_from_file_location(
    "async_bow", Path(__file__).resolve().parents[1] / "examples/async_bow.py"
)
example = importlib.util.module_from_spec(spec)
spec.loader.exec_module(example)


def cpu_seconds() -> float:
    if os.environ.get("BLOCKIR_PS_BACKEND") == "ray":  # a process per role (Ray's actors set the role's environment)
        usage = resource.getrusage(resource.RUSAGE_SELF)
        return usage.ru_utime + usage.ru_stime
    return time.thread_time()


fleet.init()
strategy = fleet.DistributedStrategy()
strategy.a_sync = True
strategy.a_sync_configs = {"pull_every": pull_every, "prefetch": prefetch}
if queue_size:
    strategy.a_sync_configs["queue_size"] = queue_size
net = example.bow_net(
    example.bow_classifier.VOCAB, minimize=lambda opt, loss: fleet.distributed_optimizer(opt, strategy).minimize(loss)
)
start_cpu = cpu_seconds()
if fleet.is_server():
    fleet.init_server()
    fleet.run_server()
    report = {"cpu_s": cpu_seconds() - start_cpu, **fleet.server().stats}
    (out / f"server{fleet.server_index()}.json").write_text(json.dumps(report))
else:
    test_program = fleet.main_program.clone(for_test=True)
    exe = bir.Executor("cpu")
    exe.run(fleet.startup_program)
    fleet.init_worker()
    k, n = fleet.worker_index(), fleet.worker_num()
    desc = bir.DataFeedDesc(prototxt)
    desc.set_batch_size(32)
    communicator = fleet.communicator()
    before = dict(communicator.stats)  # the counters of the training alone
    start_cpu, start = cpu_seconds(), time.perf_counter()
    with bir.AsyncExecutor("cpu") as async_exe:
        async_exe.run_from_files(fleet.main_program, desc, files[k::n], thread_num=1, fetch=[net.avg_cost])
        instances = async_exe.last_stats.instances
    communicator.stop()
    seconds, cpu = time.perf_counter() - start, cpu_seconds() - start_cpu
    counters = {key: value - before[key] for key, value in communicator.stats.items()}
    report = {"instances": instances, "seconds": seconds, "cpu_s": cpu, "steps": communicator.steps, **counters}
    fleet.barrier_worker()
    if k == 0:
        scope = bir.global_scope()
        for name, value in communicator.pull_all().items():
            scope.set(name, value.copy())
        right = total = 0
        for batch in example.MultiSlotReader(desc, heldout):
            (probs,) = exe.run(
                test_program, feed={"words": batch["words"], "label": batch["label"]}, fetch_list=[net.prediction]
            )
            right += int((probs.argmax(axis=1) == batch["label"][:, 0]).sum())
            total += len(probs)
        report["accuracy"] = right / total
    (out / f"worker{k}.json").write_text(json.dumps(report))
    fleet.barrier_worker()
    fleet.stop_worker()
