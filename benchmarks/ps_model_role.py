"""One role of ps_model.py's measured runs (every role a Ray actor: a process of its own): the CTR-like program
of ``bench_ps_scale.fleet_role`` (an embedding of DIM float32 looked up by BATCH ids drawn from a Zipf(1.1)
distribution over HEIGHT ids, Adagrad, a linear layer on it), async, BATCHES timed batches per worker.

    blockir launch --backend ray --servers S --workers W benchmarks/ps_model_role.py OUT HEIGHT DIM BATCH BATCHES \
        DRIVER

A server writes ``OUT/server<k>.pid`` before it serves and ``OUT/server<k>.json`` (its requests) once the
workers stopped. A worker runs one untimed batch (the plans compiled), waits for the others, runs its batches
and waits for its communicator's last pushes, then for the other workers; it writes ``OUT/worker<k>.json``:
its process id, seconds, the CPU seconds of its communicator's thread, bytes sent and distinct ids per batch.
Worker 0 also takes the CPU seconds of every process of the run (``proc_cpu.py``: the process DRIVER, the
launcher, and every process under it, Ray's daemons and the roles' actors) when the timed batches begin and
once every worker finished them, and writes what each process spent meanwhile (``cpu`` by pid) and what the
whole machine did (``machine_cpu``: other processes than the run's included).
"""

import json
import os
import sys
import threading
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
from bench_ps_scale import fleet_role  # noqa: E402 (this directory's)
from proc_cpu import Snapshot, cpu_seconds, descendants  # noqa: E402
from ps_model import zipf_ids  # noqa: E402

from blockir.distributed import fleet  # noqa: E402

out = Path(sys.argv[1])
height, dim, batch, batches, driver = map(int, sys.argv[2:7])


def communicator_cpu_seconds() -> float:
    """The CPU seconds of this worker's communicator thread so far."""
    for thread in threading.enumerate():
        if thread.name.startswith("blockir-communicator-") and thread.native_id is not None:
            return cpu_seconds(os.getpid(), thread.native_id)
    return 0.0


def processes() -> Snapshot:
    return Snapshot.of({driver: "driver", **descendants(driver)})


def machine_busy() -> float:
    """The CPU seconds every process of the machine has spent (``/proc/stat``: all but idle and iowait)."""
    ticks = [int(field) for field in Path("/proc/stat").read_text().split("\n", 1)[0].split()[1:]]
    return (sum(ticks[:8]) - ticks[3] - ticks[4]) / os.sysconf("SC_CLK_TCK")  # (guest time is in user's)


fleet.init()
if fleet.is_server():
    (out / f"server{fleet.server_index()}.pid").write_text(str(os.getpid()))
role = fleet_role(height, dim, dense=True)
if role is None:
    stats = fleet.server().stats
    (out / f"server{fleet.server_index()}.json").write_text(json.dumps({"pid": os.getpid(), **stats}))
else:
    exe, loss = role
    k = fleet.worker_index()
    feed = zipf_ids(np.random.default_rng(100 + k), height, batch * (batches + 1)).reshape(-1, batch, 1)
    exe.run(fleet.main_program, feed={"ids": feed[0]}, fetch_list=[loss])  # untimed: compiles the plans
    fleet.barrier_worker()
    before, busy = (processes(), machine_busy()) if k == 0 else (None, 0.0)
    start, sent, communicator = (
        time.perf_counter(),
        fleet.communicator().stats["bytes_sent"],
        communicator_cpu_seconds(),
    )
    for ids in feed[1:]:
        exe.run(fleet.main_program, feed={"ids": ids}, fetch_list=[loss])
    communicator = communicator_cpu_seconds() - communicator  # before stop() ends the thread
    fleet.communicator().stop()  # every push applied
    report = {
        "pid": os.getpid(),
        "seconds": time.perf_counter() - start,
        "communicator_cpu_s": communicator,
        "bytes": (fleet.communicator().stats["bytes_sent"] - sent) / batches,
        "ids": float(np.mean([np.unique(ids).size for ids in feed[1:]])),
    }
    fleet.barrier_worker()  # every worker's batches done
    if before is not None:
        after = processes()
        report["window"] = time.perf_counter() - start
        report["cpu"] = {pid: cpu - before.seconds.get(pid, 0.0) for pid, cpu in after.seconds.items()}
        report["names"] = after.names
        report["machine_cpu"] = machine_busy() - busy
    (out / f"worker{k}.json").write_text(json.dumps(report))
    fleet.stop_worker()
