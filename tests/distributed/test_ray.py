"""The parameter-server scenarios of scenarios.py against the Ray backend, judged by the same checks as the
in-process backend's (test_fleet.py). Ray runs inside a loopback-only network namespace with the loopback
recipe (ray_driver.py), and every socket it listens on must be on loopback."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
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


@pytest.fixture(scope="module")
def ray_results(tmp_path_factory: pytest.TempPathFactory) -> Path:
    pytest.importorskip("ray")
    if not _namespace_works():
        pytest.skip("no loopback-only network namespace here (unshare -n needs root)")
    out = tmp_path_factory.mktemp("ray")
    command = f"ip link set lo up; exec {sys.executable} -m tests.distributed.ray_driver {out}"
    env = dict(os.environ, PYTHONPATH=str(ROOT))
    done = subprocess.run(
        ["unshare", "-n", "-p", "-f", "--mount-proc", "bash", "-c", command],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=800,
    )
    assert done.returncode == 0, done.stdout[-4000:] + done.stderr[-4000:]
    return out


def _report(out: Path) -> dict:
    return json.loads((out / "ray.json").read_text())


def test_ray_listens_on_loopback_only(ray_results: Path) -> None:
    listeners = _report(ray_results)["listeners"]
    assert listeners, "no listener recorded while the cluster ran"
    for line in listeners:
        local = line.split()[3]
        assert local.startswith(("127.0.0.1:", "[::1]:", "[::ffff:127.0.0.1]:")), line


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
