"""What one async exchange costs Ray alone: a window's push and pull through an actor method that does nothing.

    unshare -n -p -f --mount-proc bash -c 'ip link set lo up; exec python benchmarks/bench_ray_floor.py'
        [--rows 1900] [--dim 128] [--dense 29000] [--calls 200] [--rounds 3]

The arguments of ``ParameterServer.exchange`` as a window of bow_net sends them (a dense gradient of
``--dense`` floats, ``--rows`` sparse rows of ``--dim`` floats with their ids, the ids to refresh) go to an
actor on a local Ray cluster on loopback, whose method returns arrays of the answer's sizes (the dense
values, the refreshed rows) without touching them. Printed per round: wall time, the actor process's CPU and
the caller's CPU per call, median (range) over rounds: the floor under the CPU a parameter server on Ray
spends per window (bench_ps.py).
"""

from __future__ import annotations

import argparse
import os
import resource
import statistics
import tempfile
import time
from typing import Any, cast

import numpy as np
import ray

from blockir.distributed.ray_backend import loopback_env


def cpu_seconds() -> float:
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return usage.ru_utime + usage.ru_stime


class _Idle:
    def __init__(self, rows: int, dim: int, dense: int) -> None:
        self.answer = (1, {"dense": np.ones(dense, np.float32)}, {"table": np.ones((rows, dim), np.float32)})

    def exchange(self, *args: Any) -> Any:
        return self.answer

    def cpu(self) -> float:
        return cpu_seconds()


Idle: Any = cast(Any, ray.remote)(_Idle)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", type=int, default=1900)
    parser.add_argument("--dim", type=int, default=128)
    parser.add_argument("--dense", type=int, default=29000)
    parser.add_argument("--calls", type=int, default=200)
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args()
    os.environ.update(loopback_env())
    with tempfile.TemporaryDirectory() as tmp:
        ray.init(num_cpus=2, include_dashboard=False, _node_ip_address="127.0.0.1", _temp_dir=tmp, log_to_driver=False)
        try:
            actor = Idle.remote(args.rows, args.dim, args.dense)
            ids = np.arange(args.rows, dtype=np.int64)
            push = (
                0,
                {"dense": np.ones(args.dense, np.float32)},
                {"table": (ids, np.ones((args.rows, args.dim), np.float32))},
            )
            ray.get(actor.exchange.remote(*push, 16, ["dense"], {"table": ids}))
            wall, theirs, mine = [], [], []
            for _ in range(args.rounds):
                their0, mine0, start = ray.get(actor.cpu.remote()), cpu_seconds(), time.perf_counter()
                for _ in range(args.calls):
                    ray.get(actor.exchange.remote(*push, 16, ["dense"], {"table": ids}))
                wall.append((time.perf_counter() - start) / args.calls)
                theirs.append((ray.get(actor.cpu.remote()) - their0) / args.calls)
                mine.append((cpu_seconds() - mine0) / args.calls)
        finally:
            ray.shutdown()
    size = (args.dense + args.rows * args.dim) * 4 / 2**20
    print(f"an exchange of {size:.2f} MiB each way ({args.rows} rows x {args.dim}, {args.dense} dense), per call:")
    for label, values in (("wall", wall), ("actor CPU", theirs), ("caller CPU", mine)):
        print(
            f"  {label:10} {1e3 * statistics.median(values):.2f} ms ({1e3 * min(values):.2f} - {1e3 * max(values):.2f})"
        )


if __name__ == "__main__":
    main()
