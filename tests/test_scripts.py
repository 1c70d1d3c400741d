"""scripts/gpu_check.sh where there is no GPU: it parses, and it says it skips and exits 0, quickly.

The script itself runs the GPU checks on a machine with one; here each way of having no GPU is made so (no
nvidia-smi on the PATH, an nvidia-smi that lists none, a CuPy that sees no device), whatever this machine has.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parent.parent
SCRIPT = REPO / "scripts" / "gpu_check.sh"

pytestmark = pytest.mark.skipif(shutil.which("bash") is None or shutil.which("timeout") is None, reason="needs bash")


def _path_without_nvidia_smi(extra: Path | None = None) -> str:
    dirs = [d for d in os.environ.get("PATH", "").split(os.pathsep) if d and not (Path(d) / "nvidia-smi").exists()]
    return os.pathsep.join([str(extra)] * (extra is not None) + dirs)


def _fake_nvidia_smi(bin_dir: Path, gpus: int) -> Path:
    bin_dir.mkdir()
    listing = "".join(f'echo "GPU {i}: Fake GPU (UUID: GPU-{i})"\n' for i in range(gpus))
    (bin_dir / "nvidia-smi").write_text(
        '#!/bin/sh\ncase "$1" in\n'
        f"  -L) {listing or 'true'};;\n"
        '  --query-gpu=*) echo "Fake GPU, 580.0";;\n'
        '  *) echo "| NVIDIA-SMI 580.0  Driver Version: 580.0  CUDA Version: 12.8 |";;\nesac\n'
    )
    (bin_dir / "nvidia-smi").chmod(0o755)
    return bin_dir


def _gpu_check(env: dict[str, str], cwd: Path) -> tuple[subprocess.CompletedProcess[str], float]:
    start = time.monotonic()
    done = subprocess.run(
        ["bash", str(SCRIPT)], cwd=cwd, env=env, capture_output=True, text=True, timeout=120, check=False
    )
    return done, time.monotonic() - start


def test_the_script_parses() -> None:
    done = subprocess.run(["bash", "-n", str(SCRIPT)], capture_output=True, text=True, check=False)
    assert done.returncode == 0, done.stderr


def test_without_nvidia_smi_it_says_it_skips_and_exits_0(tmp_path: Path) -> None:
    env = {**os.environ, "PATH": _path_without_nvidia_smi()}
    env.pop("VIRTUAL_ENV", None)
    done, seconds = _gpu_check(env, tmp_path)  # from another directory: it finds the repository itself
    assert done.returncode == 0, done.stderr
    assert done.stdout == "gpu_check: skipped: no GPU here (nvidia-smi is not on the PATH)\n"
    assert done.stderr == ""
    assert seconds < 10
    assert list(tmp_path.iterdir()) == []


def test_an_nvidia_smi_that_lists_no_gpu_is_no_gpu(tmp_path: Path) -> None:
    env = {**os.environ, "PATH": _path_without_nvidia_smi(_fake_nvidia_smi(tmp_path / "bin", 0))}
    done, _ = _gpu_check(env, tmp_path)
    assert done.returncode == 0, done.stderr
    assert done.stdout == "gpu_check: skipped: no GPU here (nvidia-smi lists none)\n"


def test_a_cupy_that_sees_no_device_is_no_gpu(tmp_path: Path) -> None:
    fake = tmp_path / "site" / "cupy"
    fake.mkdir(parents=True)
    (fake / "__init__.py").write_text(
        "class cuda:\n"
        "    is_available = staticmethod(lambda: False)\n\n"
        "    class runtime:\n"
        "        getDeviceCount = staticmethod(lambda: 0)\n"
    )
    env = {
        **os.environ,
        "PATH": _path_without_nvidia_smi(_fake_nvidia_smi(tmp_path / "bin", 1)),
        "PYTHONPATH": str(fake.parent),
        "GPU_CHECK_PYTHON": sys.executable,
        "GPU_CHECK_INSTALL": "0",
        "GPU_CHECK_LOGS": str(tmp_path / "logs"),
    }
    done, seconds = _gpu_check(env, tmp_path)
    assert done.returncode == 0, done.stdout + done.stderr
    lines = done.stdout.splitlines()
    assert lines[0] == f"gpu_check: 1 GPU(s): Fake GPU, 580.0, CUDA 12; Python: {sys.executable} (GPU_CHECK_PYTHON)"
    assert lines[-1] == "gpu_check: skipped: CuPy sees no CUDA device (no device: cupy.cuda.is_available() is false)"
    assert seconds < 60
