"""Parameter-server training through the fleet API and `launch`, in-process backend (test_ray.py runs the same
scenarios against Ray): sync equals one worker on the whole batch, dense and sparse; rows land on their servers
lazily; async reaches the single process's accuracy; a failing worker ends the launch naming it."""

from __future__ import annotations

from pathlib import Path

import pytest

from blockir.distributed.backend import InProcessBackend
from blockir.distributed.launch import launch
from tests.distributed import scenarios

pytestmark = pytest.mark.timeout(120)


@pytest.fixture(autouse=True)
def _no_server_left() -> None:
    yield
    assert not InProcessBackend._servers, "a launch left servers published"


@pytest.mark.parametrize(("model", "optimizer"), scenarios.SYNC_CASES)
def test_sync_training_on_two_servers_equals_one_worker_on_the_whole_batch(
    tmp_path: Path, model: str, optimizer: str
) -> None:
    for servers, workers in ((1, 1), (2, 2)):
        run = scenarios.sync_run(tmp_path / f"{servers}x{workers}", "inprocess", servers, workers, model, optimizer)
        assert run["failures"] == {}
    scenarios.check_sync_equal(tmp_path / "1x1", tmp_path / "2x2", 2)
    if model == "dense":
        scenarios.check_dense_matches_plain_training(tmp_path / "1x1", optimizer)
    else:
        scenarios.check_rows_on_their_servers(tmp_path / "2x2", 2)


def test_async_training_reaches_the_single_process_accuracy(tmp_path: Path) -> None:
    assert scenarios.async_run(tmp_path, "inprocess") == {}
    report = scenarios.check_async_accuracy(tmp_path, scenarios.single_process_bow_accuracy())
    assert report["stats"]["requests"] > 0 and report["stats"]["bytes_sent"] > 0


def test_a_failing_worker_ends_the_launch_naming_it() -> None:
    failures = launch(scenarios.SCRIPTS / "failing.py", 2, 2, [], timeout=60).failures
    scenarios.check_failing(failures)


def test_a_script_that_does_not_exist_or_fails_on_import_is_named(tmp_path: Path) -> None:
    from blockir.errors import BlockirError

    with pytest.raises(BlockirError, match=r"the script '.*nope.py' does not exist"):
        launch(tmp_path / "nope.py", 1, 1)
    bad = tmp_path / "bad.py"
    bad.write_text("import no_such_module_here\n")
    failures = launch(bad, 1, 2).failures
    assert set(failures) == {"server 0", "worker 0", "worker 1"}
    assert all("no_such_module_here" in text for text in failures.values())
