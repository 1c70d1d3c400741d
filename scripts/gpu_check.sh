#!/usr/bin/env bash
# scripts/gpu_check.sh: the GPU checks of blockir on one GPU, in one go (under 8 minutes), then a summary table.
#
#     bash scripts/gpu_check.sh            # from anywhere; it works in the repository root
#
# Steps, each bounded by `timeout` (and all by one 470 s deadline):
#   install     the project's dev extras and CuPy into a Python environment (below);
#   gpu tier    pytest -m gpu tests (the tests marked gpu: real CuPy on cuda:0);
#   cli smoke   `blockir run --place cuda:0` of a saved model against `--place cpu` (largest difference);
#   profile     `blockir profile --devices cpu:0,cuda:0` of that model (op times measured on the GPU), then
#               `blockir opt -p auto-place{...}` with the cost file it wrote;
#   benchmarks  bench_executor.py --place cuda:0, bench_scheduler.py --place cuda:0 (streams), bench_cnn.py
#               --place cuda:0 (the CNN training step against torch on the same GPU), bench_data_parallel.py
#               --places cuda:0: each only when the file and the flag exist (`--help`), else a row saying why it
#               did not run (the scheduler and data-parallel benchmarks have no CUDA flag yet: their rows say n/a).
# Without a GPU (no nvidia-smi, nvidia-smi lists none, or CuPy sees no device) it prints one line saying it
# skips and exits 0. Otherwise it exits 1 when a step failed or ran out of time, else 0.
#
# The Python environment: $GPU_CHECK_PYTHON; else the active virtual environment; else ./.venv when its python
# runs; else python3 when it is itself a virtual environment's (a GPU image's, with CuPy in it); else a new
# ./.venv (or, when a broken ./.venv is in the way, one under $TMPDIR) that sees the system's packages. Into it
# goes `pip install -e ".[dev,cuda]"`: `.[dev]` alone when CuPy imports already (a second CuPy package would
# clash with it), cuda13 in place of cuda for a CUDA 13 driver. A machine without PyPI can set PIP_NO_INDEX=1 and
# PIP_FIND_LINKS=DIR (a folder of wheels); GPU_CHECK_INSTALL=0 skips the install. A failed install is a line
# saying so; the checks then go on with what is installed (blockir itself from this tree, by PYTHONPATH) and
# stop with a line naming what is missing. Logs: $GPU_CHECK_LOGS (default a new directory under $TMPDIR).
set -u
cd "$(dirname "${BASH_SOURCE[0]}")/.." || exit 1
root="$(pwd)"

say() { printf 'gpu_check: %s\n' "$*"; }

# 1. Is there a GPU? (cheap: decided before any Python runs)
if ! command -v nvidia-smi >/dev/null 2>&1; then
    say "skipped: no GPU here (nvidia-smi is not on the PATH)"
    exit 0
fi
gpus="$(timeout 30 nvidia-smi -L 2>/dev/null | grep -c '^GPU ' || true)"
if [ "${gpus:-0}" -eq 0 ]; then
    say "skipped: no GPU here (nvidia-smi lists none)"
    exit 0
fi
gpu_name="$(timeout 30 nvidia-smi --query-gpu=name,driver_version --format=csv,noheader 2>/dev/null | head -n 1)"
cuda_major="$(timeout 30 nvidia-smi 2>/dev/null | sed -n 's/.*CUDA Version: *\([0-9][0-9]*\).*/\1/p' | head -n 1)"

start="${EPOCHREALTIME/,/.}"
deadline_s=470
logs="${GPU_CHECK_LOGS:-$(mktemp -d "${TMPDIR:-/tmp}/gpu_check.XXXXXX")}"
mkdir -p "$logs"
rows=()
failed=0

elapsed() { awk -v a="$1" -v b="${EPOCHREALTIME/,/.}" 'BEGIN { printf "%.1f", b - a }'; }
left() { awk -v a="$start" -v b="${EPOCHREALTIME/,/.}" -v d="$deadline_s" 'BEGIN { printf "%d", d - (b - a) }'; }
row() { rows+=("$1|$2|$3|$4"); }  # step, status, seconds, key figure

# run STEP CAP LOG CMD...: CMD under `timeout`, its output in LOG; sets $rc and $took.
run() {
    local step="$1" cap="$2" log="$3" t0 budget
    shift 3
    budget="$(left)"
    [ "$budget" -lt "$cap" ] && cap="$budget"
    if [ "$cap" -lt 15 ]; then  # the deadline is (nearly) reached
        rc=none took=0
        return
    fi
    say "$step (at most ${cap}s, log $log)"
    t0="${EPOCHREALTIME/,/.}"
    timeout -k 10 "$cap" "$@" >"$log" 2>&1
    rc=$?
    took="$(elapsed "$t0")"
}

# $st: the table's status of $rc; a step that failed or ran out of time fails the check
status() {
    case "$rc" in
        0) st=ok ;;
        124 | 137) st="timed out" failed=1 ;;
        none) st="no time" ;;
        *) st="FAILED ($rc)" failed=1 ;;
    esac
}

last_line() { grep -v '^[[:space:]]*$' "$1" | tail -n 1 | cut -c1-72; }

# 2. The Python environment
if [ -n "${GPU_CHECK_PYTHON:-}" ]; then
    py="$GPU_CHECK_PYTHON" where="$py (GPU_CHECK_PYTHON)"
elif [ -n "${VIRTUAL_ENV:-}" ] && [ -x "$VIRTUAL_ENV/bin/python" ]; then
    py="$VIRTUAL_ENV/bin/python" where="the active environment $VIRTUAL_ENV"
elif [ -x .venv/bin/python ] && .venv/bin/python -c '' 2>/dev/null; then
    py="$root/.venv/bin/python" where="$root/.venv"
elif command -v python3 >/dev/null && python3 -c 'import sys; sys.exit(sys.prefix == sys.base_prefix)' 2>/dev/null; then
    py="$(command -v python3)" where="python3's environment ($py)"
else
    venv="$root/.venv"
    [ -e "$venv" ] && venv="${TMPDIR:-/tmp}/blockir-gpu-check-venv"
    if ! timeout 120 python3 -m venv --system-site-packages "$venv" >"$logs/venv.log" 2>&1; then
        say "FAILED: cannot create a virtual environment at $venv with python3 (see $logs/venv.log)"
        exit 1
    fi
    py="$venv/bin/python" where="a new environment $venv"
fi
export PYTHONPATH="$root${PYTHONPATH:+:$PYTHONPATH}"  # blockir from this tree, installed or not
say "${gpus} GPU(s): ${gpu_name:-?}, CUDA ${cuda_major:-?}; Python: $where"

if "$py" -c 'import cupy' 2>/dev/null; then
    extras="dev"  # CuPy is there: keep it
elif [ "${cuda_major:-12}" -ge 13 ]; then
    extras="dev,cuda13"
else
    extras="dev,cuda"
fi
if [ "${GPU_CHECK_INSTALL:-1}" = 0 ]; then
    row install "not run" 0 "GPU_CHECK_INSTALL=0"
else
    run install 200 "$logs/install.log" "$py" -m pip install --disable-pip-version-check --retries 0 --timeout 15 \
        -e ".[$extras]"
    if [ "$rc" -eq 0 ]; then
        row install ok "$took" ".[$extras]"
    else
        say "install of .[$extras] failed (no network? see $logs/install.log): going on with what is installed"
        row install "failed" "$took" ".[$extras]: going on with what is installed"
    fi
fi

missing="$("$py" - <<'EOF' 2>&1
import importlib
gone = []
for name in ("numpy", "google.protobuf", "networkx", "threadpoolctl", "pytest", "pytest_timeout", "hypothesis", "blockir"):
    try:
        importlib.import_module(name)
    except Exception as e:  # noqa: BLE001  (any failure to import is what this reports)
        gone.append((name, f"{type(e).__name__}: {e}".splitlines()[0]))
if gone:
    print(f"{', '.join(name for name, _ in gone)} (the first: {gone[0][1]})")
EOF
)"
if [ -n "$missing" ]; then
    say "FAILED: cannot run the checks: cannot import $missing"
    exit 1
fi
device="$("$py" - <<'EOF' 2>&1
try:
    import cupy
    n = cupy.cuda.runtime.getDeviceCount()
    print(f"ok {n}" if n > 0 and cupy.cuda.is_available() else "no device: cupy.cuda.is_available() is false")
except Exception as e:  # noqa: BLE001
    print(f"{type(e).__name__}: {e}".splitlines()[0])
EOF
)"
if [ "${device%% *}" != ok ]; then
    say "skipped: CuPy sees no CUDA device ($device)"
    rmdir "$logs" 2>/dev/null  # when no install wrote a log there
    exit 0
fi

# 3. The gpu test tier
run "gpu tier" 270 "$logs/gpu_tier.log" "$py" -m pytest -o addopts="" -m gpu -q -p no:cacheprovider --timeout=120 \
    --continue-on-collection-errors tests
summary="$(grep -E '[0-9]+ (passed|failed|skipped|error)' "$logs/gpu_tier.log" | tail -n 1 | sed 's/=//g; s/ in [0-9.]*s.*//; s/, [0-9]* deselected//; s/^ *//')"
status
row "gpu tier" "$st" "$took" "${summary:-$(last_line "$logs/gpu_tier.log")}"

# 4. blockir run --place cuda:0 against --place cpu
smoke="$(mktemp -d "${TMPDIR:-/tmp}/gpu_check_smoke.XXXXXX")"
run "cli smoke" 60 "$logs/cli_smoke.log" "$py" - "$smoke" <<'EOF'
import subprocess
import sys
from pathlib import Path

import numpy as np

import blockir as bir

d = Path(sys.argv[1])
main, startup = bir.Program(), bir.Program()
with bir.unique_name.guard(), bir.program_guard(main, startup):
    x = bir.data("x", shape=[-1, 256], dtype="float32")
    pred = bir.layers.fc(bir.layers.fc(x, size=512, act="relu"), size=10, act="softmax")
exe, scope = bir.Executor("cpu"), bir.Scope()
exe.run(startup, scope=scope)
bir.io.save_inference_model(d / "model", ["x"], [pred], exe, main_program=main, scope=scope)
np.save(d / "x.npy", np.random.default_rng(0).normal(size=(64, 256)).astype("float32"))
got = {}
for place in ("cpu", "cuda:0"):
    out = d / f"{place.replace(':', '')}.npz"
    cli = [sys.executable, "-m", "blockir.cli", "run", str(d / "model" / "program.pb"), "--feed", f"x={d / 'x.npy'}"]
    subprocess.run([*cli, "--place", place, "--out", str(out)], check=True)
    got[place] = np.load(out)
diff = max(float(np.abs(got["cpu"][k] - got["cuda:0"][k]).max()) for k in got["cpu"].files)
print(f"max |cuda:0 - cpu| {diff:.1e} over {len(got['cpu'].files)} fetched")
sys.exit(1 if diff > 1e-4 else 0)
EOF
status
row "cli smoke" "$st" "$took" "$(last_line "$logs/cli_smoke.log")"

# 4b. blockir profile over cpu:0 and cuda:0 (auto-place's calibration: each kernel timed to its end on the GPU)
run "profile" 90 "$logs/profile.log" "$py" - "$smoke" <<'EOF'
import json
import subprocess
import sys
from pathlib import Path

d = Path(sys.argv[1])
cli = [sys.executable, "-m", "blockir.cli"]
program, costs = str(d / "model" / "program.pb"), d / "costs.json"
feed = ["--feed", f"x={d / 'x.npy'}", "--devices", "cpu:0,cuda:0"]
subprocess.run([*cli, "profile", program, *feed, "-o", str(costs)], check=True)
ops = json.loads(costs.read_text())["ops"]
cuda = [key for key in ops if key.endswith("@cuda")]
pipeline = f"auto-place{{devices=cpu:0,cuda:0 costs={costs}}},default-device-pipeline"
subprocess.run([*cli, "opt", program, "-p", pipeline, "-o", str(d / "placed.pb")], check=True)
print(f"{len(cuda)} of {len(ops)} op entries measured on cuda:0; auto-place ran on them")
sys.exit(0 if cuda else 1)
EOF
status
row "profile" "$st" "$took" "$(last_line "$logs/profile.log")"
rm -rf "$smoke"

# 5. The CUDA benchmarks: STEP FILE FLAG ARGS... (ARGS after the flag's value cuda:0)
bench() {
    local step="$1" file="$2" flag="$3" cap="$4" pattern
    shift 4
    if [ ! -f "$file" ]; then
        row "$step" "n/a" 0 "no ${file} in benchmarks/"
        return
    fi
    pattern="(^|[^-[:alnum:]])${flag}([^-[:alnum:]]|$)"  # --place, not --places
    if ! timeout 60 "$py" "$file" --help 2>/dev/null | grep -Eq -- "$pattern"; then
        row "$step" "n/a" 0 "$(basename "$file") has no ${flag} flag (a CPU benchmark)"
        return
    fi
    run "$step" "$cap" "$logs/$(basename "$file" .py).log" "$py" "$file" "$flag" cuda:0 "$@"
    status
    row "$step" "$st" "$took" "$(last_line "$logs/$(basename "$file" .py).log")"
}
bench bench_executor benchmarks/bench_executor.py --place 90 --repeats 5
bench "scheduler streams" benchmarks/bench_scheduler.py --place 60 --repeats 5
bench "cnn" benchmarks/bench_cnn.py --place 90 --rounds 3 --steps 5 --batches 64 --layers-batch 0
bench "data parallel" benchmarks/bench_data_parallel.py --places 60 --rounds 3

# 6. The table
echo
printf '%-18s  %-11s  %7s  %s\n' step status seconds "key figure"
printf '%-18s  %-11s  %7s  %s\n' ------------------ ----------- ------- ----------
for r in "${rows[@]}"; do
    IFS='|' read -r step st secs key <<<"$r"
    printf '%-18s  %-11s  %7s  %s\n' "$step" "$st" "$secs" "$key"
done
echo "gpu_check: ${gpus} GPU(s) (${gpu_name:-?}), $(elapsed "$start")s in all, logs in $logs"
exit "$failed"
