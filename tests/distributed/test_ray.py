"""The parameter-server scenarios of scenarios.py against the Ray backend, judged by the same checks as the
in-process backend's (test_fleet.py), and ``blockir launch --backend ray`` itself (its roles' output, their
failures, its cluster's directory). Ray runs inside loopback-only network namespaces with the loopback
recipe (ray_driver.py: its three drivers at once, each in a namespace of its own), and every socket it listens
on must be on loopback."""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.distributed import scenarios

pytestmark = [pytest.mark.ray, pytest.mark.timeout(900)]
ROOT = Path(__file__).resolve().parents[2]


def _namespace_works() -> bool:
    if shutil.which("unshare") is None or shutil.which("ip") is None or shutil.which("ss") is None:
        return False
    probe = subprocess.run(
        ["unshare", "-n", "-p", "-f", "--mount-proc", "bash", "-c", "ip link set lo up"], capture_output=True
    )
    return probe.returncode == 0


# driver -> ray_driver's option, how long it may take: each runs in a loopback-only network namespace of its own
DRIVERS = {"ray": ("", 800), "launches": ("--launches", 600), "nodes": ("--nodes", 400)}


@pytest.fixture(scope="module")
def drivers(tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, tuple[Path, subprocess.Popen]]]:
    """Every driver of :data:`DRIVERS` running together (``python -m tests.distributed.ray_driver OPTION OUT``):
    each waits much of its time on its roles' processes starting, which the others fill. They start their
    clusters one at a time (ray_driver.one_start_at_a_time), the longest first: the others start once its
    cluster is up (``OUT/cluster-up``). By name: its OUT (with its output in ``driver.out`` and
    ``driver.err``) and its process."""
    pytest.importorskip("ray")
    if not _namespace_works():
        pytest.skip("no loopback-only network namespace here (unshare -n needs root)")
    lock = tmp_path_factory.mktemp("lock") / "ray-start"
    env = dict(os.environ, PYTHONPATH=str(ROOT), BLOCKIR_RAY_START_LOCK=str(lock))
    started: dict[str, tuple[Path, subprocess.Popen]] = {}
    try:
        for name, (option, timeout) in DRIVERS.items():
            if started:  # after the first's cluster started (or the first ended)
                first_out, first = next(iter(started.values()))
                deadline = time.monotonic() + timeout
                while not (first_out / "cluster-up").exists() and first.poll() is None and time.monotonic() < deadline:
                    time.sleep(0.1)
            out = tmp_path_factory.mktemp(name)
            command = f"ip link set lo up; exec {sys.executable} -m tests.distributed.ray_driver {option} {out}"
            with open(out / "driver.out", "w") as stdout, open(out / "driver.err", "w") as stderr:
                started[name] = (
                    out,
                    subprocess.Popen(
                        ["unshare", "-n", "-p", "-f", "--kill-child", "--mount-proc", "bash", "-c", command],
                        cwd=ROOT,
                        env=env,
                        stdout=stdout,
                        stderr=stderr,
                    ),
                )
        yield started
    finally:
        for _, process in started.values():
            if process.poll() is None:
                process.kill()  # unshare then kills its child, the namespace's first process: all of them end
            process.wait()


def _finished(drivers: dict[str, tuple[Path, subprocess.Popen]], name: str) -> Path:
    """The OUT of driver ``name`` once it ended well (within its time of :data:`DRIVERS`)."""
    out, process = drivers[name]
    try:
        status = process.wait(DRIVERS[name][1])
    except subprocess.TimeoutExpired:
        process.kill()
        status = process.wait()
    output = (out / "driver.out").read_text()[-4000:] + (out / "driver.err").read_text()[-4000:]
    assert status == 0, output
    return out


@pytest.fixture(scope="module")
def ray_results(drivers: dict[str, tuple[Path, subprocess.Popen]]) -> Path:
    """What ray_driver.main wrote: every scenario of scenarios.py on one cluster, and the data plane's."""
    return _finished(drivers, "ray")


@pytest.fixture(scope="module")
def ray_launches(drivers: dict[str, tuple[Path, subprocess.Popen]]) -> dict:
    """The reports of ray_driver.LAUNCHES: ``blockir launch --backend ray`` run with a short script."""
    return json.loads((_finished(drivers, "launches") / "launches.json").read_text())


@pytest.fixture(scope="module")
def ray_nodes(drivers: dict[str, tuple[Path, subprocess.Popen]]) -> Path:
    """What ray_driver.nodes wrote: a launch on a cluster of two Ray nodes (two raylets on this machine)."""
    return _finished(drivers, "nodes")


def _report(out: Path) -> dict:
    return json.loads((out / "ray.json").read_text())


def _check_on_loopback(listeners: list[str]) -> None:
    assert listeners, "no listener recorded while the cluster ran"
    for line in listeners:
        local = line.split()[3]
        assert local.startswith(("127.0.0.1:", "[::1]:", "[::ffff:127.0.0.1]:")), line


def test_ray_listens_on_loopback_only(ray_results: Path) -> None:
    _check_on_loopback(_report(ray_results)["listeners"])


LOOPBACK_HEX = {"0100007F", "0000000000000000FFFF00000100007F", "00000000000000000000000001000000"}  # /proc/net/tcp*


def test_workers_reach_a_server_over_a_unix_socket_on_its_node_and_tcp_from_another(ray_results: Path) -> None:
    """The data plane on Ray: worker 0's connection to its server on the same node is a Unix socket; asked from
    another node, the server's actor opens TCP on the node's address (loopback here), which answers the launch's
    token and refuses another; every TCP listener, the data plane's included, is on loopback (/proc/net/tcp)."""
    assert _report(ray_results)["failures"]["data-plane"] == {}
    report = json.loads((ray_results / "data_plane.json").read_text())
    assert (report["same_node"], report["other_node"], report["other_node_host"]) == ("unix", "tcp", "127.0.0.1")
    assert report["version_over_tcp"] == report["server_version"] == 1  # its one sync step
    assert report["wrong_token_refused"]
    listeners = [entry.split(":") for entry in report["tcp_listeners"]]
    assert ["0100007F", f"{report['other_node_port']:04X}"] in listeners
    assert {host for host, _ in listeners} <= LOOPBACK_HEX, listeners


def test_on_two_ray_nodes_a_worker_on_the_servers_node_talks_a_unix_socket_and_one_on_another_tcp(
    ray_nodes: Path,
) -> None:
    """Roles placed by the launcher's resources on a cluster of two Ray nodes: each of a worker's connections is
    a Unix socket when the server is on its node, TCP (on loopback here) when not, as both ends read it from the
    socket: the server's listeners serve each of the worker's connections, of the same kind, from the same
    peer. The cluster listens on loopback only."""
    report = json.loads((ray_nodes / "nodes.json").read_text())
    assert report["failures"] == {}
    _check_on_loopback(report["listeners"])
    placed = set()
    for k in range(2):
        worker = json.loads((ray_nodes / f"nodes-worker-{k}.json").read_text())
        server = worker["server"]
        same_node = worker["node"] == server["node"]
        placed.add(same_node)
        mine = {tuple(c) for c in worker["connections"]}
        assert mine, f"worker {k} has no data-plane connection"
        assert {kind for kind, _ in mine} == {"unix" if same_node else "tcp"}, (k, worker)
        assert mine <= {tuple(c) for c in server["connections"]}, (k, worker)  # connection by connection
        if not same_node:
            assert all(end.startswith("127.0.0.1:") for _, end in mine), mine
    assert placed == {True, False}  # worker 0 on the server's node, worker 1 on the other


RAY_PREFIX = re.compile(r"\((server|worker) \d+ pid=\d+\)")  # what Ray puts before a line it forwards


def test_ray_launch_prints_every_line_of_every_role_once_with_the_role_in_front(ray_launches: dict) -> None:
    """A short script's every line reaches the launcher before it exits (Ray's log forwarding lost them), with
    ``[worker 0]`` in front and not Ray's prefix too; the cluster it started listened on loopback only."""
    run = ray_launches["ends-well"]
    assert run["status"] == 0, run["stderr"]
    out, err = run["stdout"].splitlines(), run["stderr"].splitlines()
    for role in ("server 0", "worker 0", "worker 1"):
        assert out.count(f"[{role}] out of {role}") == 1, run["stdout"]
        assert out.count(f"[{role}] unfinished of {role}") == 1, run["stdout"]  # the line the script left open
        assert err.count(f"[{role}] err of {role}") == 1, run["stderr"]
    assert not [line for line in out + err if RAY_PREFIX.search(line)]
    assert not [line for line in out if not line.startswith(("[server 0] ", "[worker 0] ", "[worker 1] "))]
    _check_on_loopback([line.removeprefix("[worker 0] listener ") for line in out if " listener " in line])


def test_ray_launch_removes_its_clusters_directory_however_it_ends(ray_launches: dict) -> None:
    """Its ``blockir-ray-*`` directory (Ray's session files in it) goes when the launch ends, also when it is
    terminated (SIGTERM: it then ends killed by that signal, as it would have)."""
    assert ray_launches["ends-well"]["left"] == []
    terminated = ray_launches["terminated"]
    assert terminated["status"] == -15, terminated["stderr"]
    assert terminated["left"] == []


def test_ray_launch_tells_each_failure_in_one_line_and_keep_logs_keeps_the_session(ray_launches: dict) -> None:
    """A role's blockir error is one line, a role's os._exit(7) ends the launch with status 1 naming it; with
    --keep-logs the cluster's session files stay, where the launcher says."""
    run = ray_launches["fails-keeping-logs"]
    assert run["status"] == 1, run["stderr"]
    err = run["stderr"].splitlines()
    assert "blockir launch: server 0 failed: server 0 found no save" in err
    assert "blockir launch: worker 0 exited with status 7" in err
    assert "Traceback" not in run["stderr"]
    assert "[worker 0] out of worker 0" in run["stdout"].splitlines()  # printed before its os._exit
    kept = [
        line for line in err if line.startswith("blockir launch: the Ray cluster's session files (its logs) are in")
    ]
    assert len(kept) == 1 and kept[0].split(" are in ")[1].startswith(run["tmpdir"] + "/blockir-ray-")
    assert run["left_sessions"], run["left"]


def test_the_cluster_a_launch_starts_refuses_a_ray_client_without_its_token(ray_launches: dict) -> None:
    """``blockir launch --backend ray`` without ``--address`` starts its cluster with Ray's token authentication
    and a token of its own: a Ray client with no token or a wrong one is refused, one with the launch's joins."""
    run = ray_launches["token"]
    assert run["status"] == -15, run["stderr"]
    clients = run["clients"]
    assert clients is not None, run["stderr"]
    assert clients["its token"]["status"] == 0, clients["its token"]
    for name in ("no token", "a wrong token"):
        refused = clients[name]
        assert refused["status"] != 0, (name, refused)
        assert re.search(r"(?i)authenticat|token", refused["stderr"]), (name, refused["stderr"])


@pytest.mark.parametrize(("model", "optimizer"), scenarios.SYNC_CASES)
def test_sync_on_ray_equals_one_worker_on_the_whole_batch(ray_results: Path, model: str, optimizer: str) -> None:
    failures = _report(ray_results)["failures"]
    for size in ("1x1", "2x2"):
        assert failures[f"sync-{model}-{optimizer}-{size}"] == {}
    base = ray_results / f"sync-{model}-{optimizer}"
    scenarios.check_sync_equal(Path(f"{base}-1x1"), Path(f"{base}-2x2"), 2)
    if model == "dense":
        scenarios.check_matches_plain_training(Path(f"{base}-1x1"), optimizer)
    else:
        scenarios.check_rows_on_their_servers(Path(f"{base}-2x2"), 2)


def test_async_on_ray_reaches_the_single_process_accuracy(ray_results: Path) -> None:
    assert _report(ray_results)["failures"]["async-bow"] == {}
    scenarios.check_async_accuracy(ray_results / "async-bow", scenarios.single_process_bow_accuracy())


@pytest.mark.parametrize("model", ["dense", "sparse"])
def test_geo_on_ray_with_one_worker_equals_local_training(ray_results: Path, model: str) -> None:
    assert _report(ray_results)["failures"][f"geo-{model}"] == {}
    scenarios.check_matches_plain_training(ray_results / f"geo-{model}", "adagrad", model)


def test_geo_on_ray_reaches_the_single_process_accuracy(ray_results: Path) -> None:
    assert _report(ray_results)["failures"]["geo-bow"] == {}
    scenarios.check_async_accuracy(ray_results / "geo-bow", scenarios.single_process_bow_accuracy())


@pytest.mark.parametrize("model", ["sparse", "dense"])
def test_a_save_on_ray_restarts_training_exactly_on_other_servers(ray_results: Path, model: str) -> None:
    assert _report(ray_results)["failures"][f"restart-{model}"] == {}


def test_a_failing_worker_on_ray_ends_the_launch_naming_it(ray_results: Path) -> None:
    scenarios.check_failing(_report(ray_results)["failures"]["failing"])


def test_a_worker_killed_mid_epoch_on_ray_is_restarted_and_rejoins(ray_results: Path) -> None:
    run = _report(ray_results)["failures"]["fault-worker"]
    reference = scenarios.single_process_bow_accuracy(scenarios.FAULT_DOCS)
    scenarios.check_worker_killed(ray_results / "fault-worker", run, reference)


def test_a_server_killed_on_ray_comes_back_from_the_last_checkpoint_and_the_loss_is_reported(
    ray_results: Path,
) -> None:
    run = _report(ray_results)["failures"]["fault-server"]
    reference = scenarios.single_process_bow_accuracy(scenarios.FAULT_DOCS)
    scenarios.check_server_killed(ray_results / "fault-server", run, reference)


def test_a_server_killed_on_ray_without_restarts_fails_the_launch_naming_it_soon(ray_results: Path) -> None:
    scenarios.check_server_killed_for_good(_report(ray_results)["failures"]["fault-server-final"])
