"""Run the parameter-server scenarios against the Ray backend; run by test_ray.py inside a loopback-only network
namespace:

    unshare -n -p -f --mount-proc bash -c 'ip link set lo up; exec python -m tests.distributed.ray_driver OUT'

One Ray cluster for every scenario, started with the loopback recipe (node address 127.0.0.1, no dashboard,
usage statistics off, proxies pointing nowhere); while it runs, the listening sockets (``ss -ltnp``) are
recorded. Writes ``OUT/ray.json``: the failures of each scenario's launch and the listeners; then
``scripts/data_plane.py`` writes how its worker reached the server (``OUT/data_plane.json``).

    ... exec python -m tests.distributed.ray_driver --launches OUT

runs ``blockir launch --backend ray`` itself (:data:`LAUNCHES`), each starting its own cluster in a temporary
directory of its own, and writes ``OUT/launches.json``: each launch's exit status, output, what it left in its
temporary directory, and the listeners its worker 0 saw while the cluster ran.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

import ray

from blockir.distributed.launch import launch
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
        failures["data-plane"] = launch(
            scenarios.SCRIPTS / "data_plane.py", 1, 1, [str(out)], backend="ray", timeout=120
        ).failures
        listeners += subprocess.run(["ss", "-ltnpH"], capture_output=True, text=True, check=True).stdout.splitlines()
    finally:
        ray.shutdown()
    (out / "ray.json").write_text(json.dumps({"failures": failures, "listeners": listeners}))


# A short script: each role prints a line to stdout, one to stderr and an unfinished one; worker 0 also the
# listeners (ss -ltnH) while its cluster runs. With ``fail``, the server raises a blockir error and worker 0 calls
# os._exit(7); with ``wait``, every role waits (for the launcher to be terminated).
SCRIPT = """\
import subprocess, sys, os, time
from blockir.distributed import fleet
from blockir.errors import BlockirError
fleet.init()
me = f"server {fleet.server_index()}" if fleet.is_server() else f"worker {fleet.worker_index()}"
print("out of", me)
print("err of", me, file=sys.stderr)
if me == "worker 0":
    for line in subprocess.run(["ss", "-ltnH"], capture_output=True, text=True, check=True).stdout.splitlines():
        print("listener", line)
sys.stdout.write("unfinished of " + me)
if sys.argv[1:] == ["fail"] and me == "server 0":
    raise BlockirError("server 0 found no save")
if sys.argv[1:] == ["fail"] and me == "worker 0":
    sys.stdout.flush()
    os._exit(7)
if sys.argv[1:] == ["wait"]:
    print(flush=True)
    time.sleep(600)  # until the launcher is sent SIGTERM
"""

# name -> the launcher's options, the script's arguments
LAUNCHES = {
    "ends-well": (["--servers", "1", "--workers", "2"], []),
    "fails-keeping-logs": (["--servers", "1", "--workers", "1", "--keep-logs"], ["fail"]),
    "terminated": (["--servers", "1", "--workers", "1"], ["wait"]),  # sent SIGTERM once a role printed
}


def launches(out: Path) -> None:
    script = out / "roles.py"
    script.write_text(SCRIPT)
    report: dict[str, Any] = {}
    for name, (options, args) in LAUNCHES.items():
        tmp = Path(tempfile.mkdtemp(prefix="bl-", dir="/tmp"))  # short: Ray's socket paths live under it
        try:
            env = dict(os.environ, TMPDIR=str(tmp))
            command = [sys.executable, "-m", "blockir.cli", "launch", "--backend", "ray", *options, str(script), *args]
            launcher = subprocess.Popen(command, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
            if args == ["wait"]:
                assert launcher.stdout is not None
                launcher.stdout.readline()  # a role runs: the cluster is up
                launcher.send_signal(signal.SIGTERM)
            stdout, stderr = launcher.communicate(timeout=240)
            report[name] = {
                "status": launcher.returncode,
                "stdout": stdout,
                "stderr": stderr,
                "tmpdir": str(tmp),
                "left": sorted(str(p.relative_to(tmp)) for p in tmp.glob("*")),
                "left_sessions": sorted(str(p.relative_to(tmp)) for p in tmp.glob("blockir-ray-*/session_*")),
            }
        finally:
            shutil.rmtree(tmp, ignore_errors=True)
    (out / "launches.json").write_text(json.dumps(report))


if __name__ == "__main__":
    if sys.argv[1] == "--launches":
        launches(Path(sys.argv[2]))
    else:
        main(Path(sys.argv[1]))
