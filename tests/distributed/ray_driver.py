"""Run the parameter-server scenarios against the Ray backend; run by test_ray.py inside a loopback-only network
namespace:

    unshare -n -p -f --mount-proc bash -c 'ip link set lo up; exec python -m tests.distributed.ray_driver OUT'

One Ray cluster for every scenario, started with the loopback recipe (node address 127.0.0.1, no dashboard,
usage statistics off, proxies pointing nowhere; ``OUT/cluster-up`` says it is up), running :data:`PARALLEL`
scenarios at once; before and after them, the listening sockets (``ss -ltnp``) are recorded. Writes
``OUT/ray.json``: the failures of each scenario's launches, the listeners and the seconds each phase took (the
cluster's start, each scenario, its shutdown); ``scripts/data_plane.py`` writes how its worker reached the
server (``OUT/data_plane.json``).

    ... exec python -m tests.distributed.ray_driver --launches OUT

runs ``blockir launch --backend ray`` itself (:data:`LAUNCHES`, all at once), each starting its own cluster in
a temporary directory of its own, and writes ``OUT/launches.json``: each launch's exit status, output, what it
left in its temporary directory, the listeners its worker 0 saw while the cluster ran, and its seconds.

    ... exec python -m tests.distributed.ray_driver --nodes OUT

starts a cluster of two Ray nodes on this machine (``ray.cluster_utils.Cluster``: two raylets, each a node with
a resource of its own) and launches ``scripts/nodes.py`` on it, the server and worker 0 on the first node,
worker 1 on the second; the workers write how they reach the server (``OUT/nodes-worker-K.json``), the driver
the launch's failures, the listeners and the seconds of each phase (``OUT/nodes.json``).
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import ray

from blockir.distributed.launch import launch
from blockir.distributed.ray_backend import NAMESPACE, loopback_env
from tests.distributed import scenarios

PARALLEL = 3  # scenarios at once on the one cluster: a launch waits much of its time (a role's process starting)
START_LOCK = "BLOCKIR_RAY_START_LOCK"  # a file test_ray.py's drivers lock while one of them starts a cluster


@contextlib.contextmanager
def one_start_at_a_time() -> Iterator[None]:
    """Hold the lock on the file ``$BLOCKIR_RAY_START_LOCK`` (if set): Ray gives a node 30 s to register with its
    GCS, which clusters starting together on a loaded 2-core machine overrun."""
    path = os.environ.get(START_LOCK)
    if path is None:
        yield
        return
    with open(path, "a") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(lock, fcntl.LOCK_UN)


def main(out: Path) -> None:
    os.environ.update(loopback_env())
    seconds: dict[str, float] = {}
    start = time.monotonic()
    temp = tempfile.mkdtemp(prefix="bl-", dir="/tmp")  # short: Ray's socket paths live under it (107 bytes at most)
    with one_start_at_a_time():
        ray.init(
            num_cpus=2,
            include_dashboard=False,
            _node_ip_address="127.0.0.1",
            _temp_dir=temp,
            namespace=NAMESPACE,
        )
    seconds["ray.init"] = round(time.monotonic() - start, 1)
    (out / "cluster-up").touch()  # test_ray.py starts its other drivers now
    try:
        listeners = subprocess.run(["ss", "-ltnpH"], capture_output=True, text=True, check=True).stdout.splitlines()
        runs = scenarios.all_scenarios(out, "ray")
        runs["data-plane"] = lambda: (
            launch(scenarios.SCRIPTS / "data_plane.py", 1, 1, [str(out)], backend="ray", timeout=120).failures
        )
        failures = scenarios.run_all(runs, PARALLEL, seconds)
        listeners += subprocess.run(["ss", "-ltnpH"], capture_output=True, text=True, check=True).stdout.splitlines()
    finally:
        start = time.monotonic()
        ray.shutdown()
        seconds["ray.shutdown"] = round(time.monotonic() - start, 1)
        shutil.rmtree(temp, ignore_errors=True)
    (out / "ray.json").write_text(json.dumps({"failures": failures, "listeners": listeners, "seconds": seconds}))


# A short script: each role prints a line to stdout, one to stderr and an unfinished one; worker 0 also the
# listeners (ss -ltnH) while its cluster runs. With ``fail``, the server raises a blockir error and worker 0 calls
# os._exit(7); with ``wait``, every role waits (for the launcher to be terminated); with ``token DIR``, worker 0
# first writes its cluster's address and Ray token (from its environment) into DIR/cluster.json, then every role
# waits.
SCRIPT = """\
import json, subprocess, sys, os, time
import ray
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
if sys.argv[1:2] == ["token"] and me == "worker 0":
    cluster = {"address": ray.get_runtime_context().gcs_address, "token": os.environ.get("RAY_AUTH_TOKEN")}
    where = os.path.join(sys.argv[2], "cluster.json")
    with open(os.open(where + ".part", os.O_WRONLY | os.O_CREAT, 0o600), "w") as f:
        json.dump(cluster, f)
    os.rename(where + ".part", where)
if sys.argv[1:2] in (["wait"], ["token"]):
    print(flush=True)
    time.sleep(600)  # until the launcher is sent SIGTERM
"""

# A Ray client joining the cluster at argv[1] (with the Ray authentication of its environment).
CLIENT = "import ray, sys; ray.init(address=sys.argv[1]); print(ray.cluster_resources()); ray.shutdown()"

# name -> the launcher's options, the script's arguments
LAUNCHES = {
    "ends-well": (["--servers", "1", "--workers", "2"], []),
    "fails-keeping-logs": (["--servers", "1", "--workers", "1", "--keep-logs"], ["fail"]),
    "terminated": (["--servers", "1", "--workers", "1"], ["wait"]),  # sent SIGTERM once a role printed
    "token": (["--servers", "1", "--workers", "1"], ["token"]),  # Ray clients try it, then SIGTERM
}


def _clients(cluster: dict[str, str]) -> dict[str, Any]:
    """Ray clients joining the launcher's cluster: with no token, with a wrong one, with its token (at once)."""
    bare = {k: v for k, v in os.environ.items() if not k.startswith("RAY_AUTH_")}
    envs = {
        "no token": bare,
        "a wrong token": dict(bare, RAY_AUTH_MODE="token", RAY_AUTH_TOKEN="0" * 64),
        "its token": dict(bare, RAY_AUTH_MODE="token", RAY_AUTH_TOKEN=cluster["token"]),
    }
    clients = {
        name: subprocess.Popen(
            [sys.executable, "-c", CLIENT, cluster["address"]],
            env=env,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        for name, env in envs.items()
    }
    found = {}
    for name, client in clients.items():
        try:
            stdout, stderr = client.communicate(timeout=120)
        except subprocess.TimeoutExpired:
            client.kill()
            stdout, stderr = client.communicate()
        found[name] = {"status": client.returncode, "stdout": stdout[-2000:], "stderr": stderr[-4000:]}
    return found


def _launch(out: Path, script: Path, options: list[str], args: list[str]) -> dict[str, Any]:
    """Run ``blockir launch --backend ray OPTIONS SCRIPT ARGS`` (one of :data:`LAUNCHES`); its report."""
    if args == ["token"]:
        args = ["token", str(out)]
    tmp = Path(tempfile.mkdtemp(prefix="bl-", dir="/tmp"))  # short: Ray's socket paths live under it
    try:
        env = dict(os.environ, TMPDIR=str(tmp))
        command = [sys.executable, "-m", "blockir.cli", "launch", "--backend", "ray", *options, str(script), *args]
        start = time.monotonic()
        launcher = subprocess.Popen(command, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        clients = None
        if args[0:1] == ["wait"]:
            assert launcher.stdout is not None
            launcher.stdout.readline()  # a role runs: the cluster is up
            launcher.send_signal(signal.SIGTERM)
        elif args[0:1] == ["token"]:
            written = out / "cluster.json"
            deadline = time.monotonic() + 180
            while not written.exists() and launcher.poll() is None and time.monotonic() < deadline:
                time.sleep(0.2)
            if written.exists():
                clients = _clients(json.loads(written.read_text()))
            launcher.send_signal(signal.SIGTERM)
        stdout, stderr = launcher.communicate(timeout=240)
        return {
            "clients": clients,
            "status": launcher.returncode,
            "stdout": stdout,
            "stderr": stderr,
            "tmpdir": str(tmp),
            "left": sorted(str(p.relative_to(tmp)) for p in tmp.glob("*")),
            "left_sessions": sorted(str(p.relative_to(tmp)) for p in tmp.glob("blockir-ray-*/session_*")),
            "seconds": round(time.monotonic() - start, 1),
        }
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


def launches(out: Path) -> None:
    """Every launch of :data:`LAUNCHES`, one after another (each starts a cluster of its own, holding the lock of
    :func:`one_start_at_a_time` while it runs); ``OUT/launches.json``."""
    script = out / "roles.py"
    script.write_text(SCRIPT)
    report = {}
    for name, (options, args) in LAUNCHES.items():
        with one_start_at_a_time():
            report[name] = _launch(out, script, options, args)
    (out / "launches.json").write_text(json.dumps(report))


NODES = {"server 0": {"node-0": 1.0}, "worker 0": {"node-0": 1.0}, "worker 1": {"node-1": 1.0}}  # role -> resources


def nodes(out: Path) -> None:
    from ray.cluster_utils import Cluster

    os.environ.update(loopback_env())
    tmp = tempfile.mkdtemp(prefix="bl-", dir="/tmp")  # short: Ray's socket paths live under it
    os.environ["RAY_TMPDIR"] = tmp  # the nodes' session files, and the cluster's address file, go there
    common = {"num_cpus": 1, "include_dashboard": False, "node_ip_address": "127.0.0.1"}
    seconds: dict[str, float] = {}
    start = time.monotonic()
    try:
        with one_start_at_a_time():
            cluster = Cluster(initialize_head=True, head_node_args={**common, "resources": {"node-0": 4}})
        try:
            with one_start_at_a_time():
                cluster.add_node(**common, resources={"node-1": 4})
            ray.init(address=cluster.address, namespace=NAMESPACE)
            seconds["cluster start"], start = round(time.monotonic() - start, 1), time.monotonic()
            failures = launch(
                scenarios.SCRIPTS / "nodes.py", 1, 2, [str(out)], backend="ray", timeout=120, resources=NODES
            ).failures
            listeners = subprocess.run(["ss", "-ltnpH"], capture_output=True, text=True, check=True).stdout
            seconds["launch"], start = round(time.monotonic() - start, 1), time.monotonic()
        finally:
            ray.shutdown()
            cluster.shutdown()
            seconds["shutdown"] = round(time.monotonic() - start, 1)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    report = {"failures": failures, "listeners": listeners.splitlines(), "seconds": seconds}
    (out / "nodes.json").write_text(json.dumps(report))


if __name__ == "__main__":
    if sys.argv[1] == "--launches":
        launches(Path(sys.argv[2]))
    elif sys.argv[1] == "--nodes":
        nodes(Path(sys.argv[2]))
    else:
        main(Path(sys.argv[1]))
