"""``blockir launch`` in-process: how a role's failure is told (one line for a blockir error, the traceback from the
script on for another exception, every traceback whole with --verbose), a role that exits (``sys.exit``,
``os._exit``) ends the launch with status 1 naming it, and everything after SCRIPT is the script's. test_ray.py
checks the same of the Ray backend, with its output and its cluster's directory."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

from blockir.cli import main
from tests.distributed import scenarios


def _launch(argv: list[str], capsys: pytest.CaptureFixture[str]) -> tuple[int, str, str]:
    status = main(["launch", *argv])
    out, err = capsys.readouterr()
    return status, out, err


def _bad_save_argv(tmp_path: Path) -> list[str]:
    """sync_train.py on 1 server and 1 worker, the server's init_server told to load a directory that is no save."""
    (tmp_path / "empty").mkdir()
    (tmp_path / "out").mkdir()
    script = str(scenarios.SCRIPTS / "sync_train.py")
    return ["--timeout", "30", script, str(tmp_path / "out"), "sparse", "sgd", "2", "sync", "", str(tmp_path / "empty")]


def test_a_roles_blockir_error_is_one_line(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """The server's init_server refuses the save, worker 0's load_vars finds nothing there: a line each."""
    status, out, err = _launch([*_bad_save_argv(tmp_path), "load"], capsys)
    assert status == 1
    assert "Traceback" not in err and "launch.py" not in err
    lines = dict(line.split(" failed: ", 1) for line in err.splitlines())
    assert len(err.splitlines()) == 2 and sorted(lines) == ["blockir launch: server 0", "blockir launch: worker 0"]
    assert "is not a save" in lines["blockir launch: server 0"]


def test_verbose_prints_a_roles_whole_traceback(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    status, out, err = _launch(["--verbose", *_bad_save_argv(tmp_path), "load"], capsys)
    assert status == 1
    server = [line for line in err.splitlines() if line.startswith("[server 0] ")]
    assert server[0] == "[server 0] Traceback (most recent call last):"
    assert any("blockir/distributed/runner.py" in line for line in server)  # the launcher's frames too
    assert any("blockir/distributed/fleet.py" in line and "init_server" in line for line in server)
    last = [line for line in err.splitlines() if line.startswith("blockir launch: server 0 failed: ")]
    assert len(last) == 1 and "is not a save" in last[0]


def test_another_exceptions_traceback_starts_in_the_script(capsys: pytest.CaptureFixture[str]) -> None:
    status, out, err = _launch(["--workers", "2", str(scenarios.SCRIPTS / "failing.py")], capsys)
    assert status == 1
    worker = [line.removeprefix("[worker 1] ") for line in err.splitlines() if line.startswith("[worker 1] ")]
    assert worker[:2] == [
        "Traceback (most recent call last):",
        f'  File "{scenarios.SCRIPTS / "failing.py"}", line 23, in <module>',
    ]
    assert worker[-1] == "RuntimeError: worker 1 gives up"
    assert "blockir/distributed/launch.py" not in err
    assert "blockir launch: worker 1 failed: RuntimeError: worker 1 gives up" in err.splitlines()


@pytest.mark.parametrize(
    ("exit_call", "line"),
    [
        ("os._exit(7)", "blockir launch: worker 0 exited with status 7"),
        ("sys.exit(3)", "blockir launch: worker 0 exited with status 3"),
        ("sys.exit('giving up')", "blockir launch: worker 0 exited with status 1: giving up"),
    ],
)
def test_a_role_that_exits_ends_the_launch_with_status_1_naming_it(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], exit_call: str, line: str
) -> None:
    """``os._exit`` in a role ends that role, not the launcher's process (the other roles end as usual)."""
    script = tmp_path / "exits.py"
    script.write_text(
        "import os, sys\n"
        "from blockir.distributed import fleet\n"
        "fleet.init()\n"
        "print('before')\n"
        f"if not fleet.is_server():\n    {exit_call}\n"
        "print('after')\n"
    )
    status, out, err = _launch([str(script)], capsys)
    assert status == 1
    assert err.splitlines() == [line]
    assert sorted(out.splitlines()) == ["[server 0] after", "[server 0] before", "[worker 0] before"]


def test_os_exit_in_a_child_a_role_forked_still_ends_the_child(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Only a role's own call is caught: a process it forks ends with os._exit as ever (multiprocessing's does)."""
    script = tmp_path / "forks.py"
    script.write_text(
        "import multiprocessing, os\n"
        "child = multiprocessing.get_context('fork').Process(target=os._exit, args=(5,))\n"
        "child.start()\n"
        "child.join()\n"
        "print('child', child.exitcode)\n"
    )
    status, out, err = _launch(["--servers", "1", "--workers", "1", str(script)], capsys)
    assert (status, err) == (0, "")
    assert sorted(out.splitlines()) == ["[server 0] child 5", "[worker 0] child 5"]


def test_options_after_the_script_are_the_scripts(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    script = tmp_path / "argv.py"
    script.write_text("import sys\nprint(sys.argv[1:])\n")
    argv = ["--verbose", "--keep-logs", "--workers", "3", "--help"]
    status, out, err = _launch(["--workers", "1", str(script), *argv], capsys)
    assert (status, err) == (0, "")  # --keep-logs would be refused in-process, --help would print the help
    assert sorted(out.splitlines()) == [f"[{role}] {argv}" for role in ("server 0", "worker 0")]
    assert sys.argv[0] != str(script)  # the launcher's sys.argv is restored


def test_a_script_is_read_as_python_reads_it(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """A coding declaration holds (the check compiles the script's bytes, and so does every role)."""
    script = tmp_path / "latin1.py"
    script.write_bytes(b"# -*- coding: latin-1 -*-\nprint('caf\xe9')\n")
    status, out, err = _launch([str(script)], capsys)
    assert (status, err) == (0, "")
    assert sorted(out.splitlines()) == ["[server 0] caf\u00e9", "[worker 0] caf\u00e9"]


def test_a_cluster_the_launcher_starts_has_token_authentication_unless_the_environment_says_otherwise() -> None:
    from blockir.distributed.launch import cluster_env

    first, second = cluster_env({}), cluster_env({})
    assert first["RAY_AUTH_MODE"] == "token" and first["RAY_USAGE_STATS_ENABLED"] == "0"
    assert len(first["RAY_AUTH_TOKEN"]) == 64 and first["RAY_AUTH_TOKEN"] != second["RAY_AUTH_TOKEN"]  # per launch
    assert "RAY_AUTH_TOKEN" not in cluster_env({"RAY_AUTH_TOKEN_PATH": "/secret"})  # the user's token stands
    assert cluster_env({"RAY_AUTH_TOKEN": "mine"})["RAY_AUTH_MODE"] == "token"
    for settled in (cluster_env({"RAY_AUTH_MODE": "disabled"}), cluster_env({}, ray_imported=True)):
        assert "RAY_AUTH_MODE" not in settled and "RAY_AUTH_TOKEN" not in settled


# Runs `launch(SCRIPT, backend="ray")` where importing ray records the environment at that moment and fails.
_RAY_IMPORT_SEES = """\
import json, os, sys
seen = {}
class Watch:
    def find_spec(self, name, path=None, target=None):
        if name == "ray":
            seen.update({k: os.environ.get(k) for k in ("RAY_AUTH_MODE", "RAY_AUTH_TOKEN", "RAY_USAGE_STATS_ENABLED")})
            raise ModuleNotFoundError("No module named 'ray'", name="ray")
sys.meta_path.insert(0, Watch())
from blockir.distributed.launch import launch
from blockir.errors import BlockirError
try:
    launch(sys.argv[1], 1, 1, backend="ray", address=sys.argv[2] or None)
except BlockirError as e:
    print(json.dumps({"seen": seen, "error": str(e)}))
"""


@pytest.mark.parametrize("address", ["", "10.0.0.9:6379"])
def test_the_launcher_sets_rays_authentication_before_ray_is_imported(tmp_path: Path, address: str) -> None:
    """Ray 2.60 reads RAY_AUTH_MODE when it is imported: a launch starting its own cluster has token
    authentication and its token in the environment by then; one joining a cluster (--address) sets nothing."""
    import json
    import os
    import subprocess

    script = tmp_path / "roles.py"
    script.write_text("print('never run')\n")
    env = {k: v for k, v in os.environ.items() if not k.startswith("RAY_")}
    env["PYTHONPATH"] = str(Path(__file__).resolve().parents[2])
    done = subprocess.run(
        [sys.executable, "-c", _RAY_IMPORT_SEES, str(script), address],
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, done.stderr
    report = json.loads(done.stdout)
    assert "needs Ray" in report["error"]
    seen = report["seen"]
    if address:
        assert seen == {"RAY_AUTH_MODE": None, "RAY_AUTH_TOKEN": None, "RAY_USAGE_STATS_ENABLED": None}
    else:
        assert seen["RAY_AUTH_MODE"] == "token" and len(seen["RAY_AUTH_TOKEN"]) == 64
        assert seen["RAY_USAGE_STATS_ENABLED"] == "0"
