"""One role of bench_ps.py's parameter-server runs: bow_net (examples/async_bow.py, Adagrad at LR) in MODE
(``async`` or ``sync``), from MultiSlot files, EPOCHS epochs, each worker an AsyncExecutor with one thread over
its share of the files; in async mode pulling every PULL_EVERY steps, queueing QUEUE_SIZE steps (0: the default,
one window) and prefetching the rows of PREFETCH batches ahead (0: none).

    blockir launch --servers S --workers W benchmarks/ps_bow_role.py OUT MODE PULL_EVERY QUEUE_SIZE PREFETCH \
        LR EPOCHS PROTOTXT HELDOUT FILE...

Every role writes ``OUT/<role>.json``: its process id and CPU seconds (a Ray role's process's, Ray's threads
included; an in-process role's thread's, which the bench does not report: the work runs on other threads),
and for a worker its instances, seconds, the CPU seconds of its communicator's thread (async mode; on Ray,
part of the process's), the communicator's counters and, from worker 0, the held-out accuracy, twice:
through the worker's program (its lookups read the servers' rows) and as the one-process reference scores
(``accuracy_exported``: the inference model fleet.save_inference_model exports, scored by
``examples/async_bow.py``'s ``evaluate``).
"""

import importlib.util
import json
import os
import resource
import sys
import threading
import time
from pathlib import Path

import blockir as bir
from blockir.distributed import fleet

out, mode, (pull_every, queue_size, cache_windows, prefetch) = Path(sys.argv[1]), sys.argv[2], map(int, sys.argv[3:7])
learning_rate, epochs = float(sys.argv[7]), int(sys.argv[8])
prototxt, heldout, files = sys.argv[9], sys.argv[10], sys.argv[11:]


def load(name: str, path: Path):  # noqa: ANN201 (a module)
    spec = importlib.util.spec_from_file_location(name, path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


example = load("async_bow", Path(__file__).resolve().parents[1] / "examples/async_bow.py")
proc_cpu = load("proc_cpu", Path(__file__).resolve().parent / "proc_cpu.py")


def cpu_seconds() -> float:
    if os.environ.get("BLOCKIR_PS_BACKEND") == "ray":  # a process per role (Ray's actors set the role's environment)
        usage = resource.getrusage(resource.RUSAGE_SELF)
        return usage.ru_utime + usage.ru_stime
    return time.thread_time()


def communicator_cpu_seconds() -> float:
    """The CPU seconds of the communicator's thread (``blockir-communicator-K``) so far; 0 without one."""
    for thread in threading.enumerate():
        if thread.name.startswith("blockir-communicator-") and thread.native_id is not None:
            return proc_cpu.cpu_seconds(os.getpid(), thread.native_id)
    return 0.0


fleet.init()
strategy = fleet.DistributedStrategy()
strategy.a_sync = mode == "async"
if strategy.a_sync:  # the settings given (0: the default)
    given = {"pull_every": pull_every, "queue_size": queue_size, "cache_windows": cache_windows, "prefetch": prefetch}
    strategy.a_sync_configs = {key: value for key, value in given.items() if value}
net = example.bow_net(
    example.bow_classifier.VOCAB,
    learning_rate=learning_rate,
    minimize=lambda opt, loss: fleet.distributed_optimizer(opt, strategy).minimize(loss),
)
start_cpu = cpu_seconds()
if fleet.is_server():
    fleet.init_server()
    fleet.run_server()
    report = {"pid": os.getpid(), "cpu_s": cpu_seconds() - start_cpu, **fleet.server().stats}
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
    start_cpu, start_communicator, start = cpu_seconds(), communicator_cpu_seconds(), time.perf_counter()
    instances = 0
    with bir.AsyncExecutor("cpu") as async_exe:
        for _ in range(epochs):
            async_exe.run_from_files(fleet.main_program, desc, files[k::n], thread_num=1, fetch=[net.avg_cost])
            instances += async_exe.last_stats.instances
    communicator_cpu = communicator_cpu_seconds() - start_communicator  # before stop() ends the thread
    communicator.stop()
    seconds, cpu = time.perf_counter() - start, cpu_seconds() - start_cpu
    counters = {key: value - before[key] for key, value in communicator.stats.items()}
    report = {"pid": os.getpid(), "instances": instances, "seconds": seconds, "cpu_s": cpu}
    report |= {"communicator_cpu_s": communicator_cpu, "steps": communicator.steps, **counters}
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
        exported = out / "model"
        fleet.save_inference_model(exe, exported, ["words"], [net.prediction], main_program=net.main)
        report["accuracy_exported"] = example.evaluate(exported, desc, heldout)
    (out / f"worker{k}.json").write_text(json.dumps(report))
    fleet.barrier_worker()
    fleet.stop_worker()
