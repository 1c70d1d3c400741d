"""Run the parameter-server scenarios against the Ray backend; run by test_ray.py inside a loopback-only network
namespace:

    unshare -n -p -f --mount-proc bash -c 'ip link set lo up; exec python -m tests.distributed.ray_driver OUT'

One Ray cluster for every scenario, started with the loopback recipe (node address 127.0.0.1, no dashboard,
usage statistics off, proxies pointing nowhere); while it runs, the listening sockets (``ss -ltnp``) are
recorded. Writes ``OUT/ray.json``: the failures of each scenario's launch and the listeners.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path

import ray

from blockir.distributed.ray_backend import NAMESPACE, loopback_env
from tests.distributed import scenarios


def main(out: Path) -> None:
    os.environ.update(loopback_env())
    ray.init(
        num_cpus=2,
        include_dashboard=False,
        _node_ip_address="127.0.0.1",
        _temp_dir=tempfile.mkdtemp(prefix="ray-", dir=out),
        namespace=NAMESPACE,
    )
    try:
        listeners = subprocess.run(["ss", "-ltnpH"], capture_output=True, text=True, check=True).stdout.splitlines()
        failures = scenarios.run_all(out, "ray")
        listeners += subprocess.run(["ss", "-ltnpH"], capture_output=True, text=True, check=True).stdout.splitlines()
    finally:
        ray.shutdown()
    (out / "ray.json").write_text(json.dumps({"failures": failures, "listeners": listeners}))


if __name__ == "__main__":
    main(Path(sys.argv[1]))
