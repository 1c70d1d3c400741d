"""The benchmarks' reference step is the project's, byte for byte, and the one they use by default.

``benchmarks/reference/mlp_numpy.py`` is a copy of ``../shared/bench/mlp_numpy.py`` (the hand-written numpy step
the executor is measured against), kept in the repository so that the benchmarks run from it alone. It is not
the benchmark's to tune: wherever the shared file exists (beside the repository, as on the developers' machines
and in CI) the copy must have its SHA-256; everywhere, the copy must have the SHA-256 recorded here when it was
taken, and be what ``bench_executor.py`` and ``bench_peers.py`` load by default.
"""

from __future__ import annotations

import hashlib
import importlib.util
import os
import sys
from pathlib import Path
from types import ModuleType

import numpy as np
import pytest

REPO = Path(__file__).resolve().parents[1]
BENCHMARKS = REPO / "benchmarks"
COPY = BENCHMARKS / "reference" / "mlp_numpy.py"
SHARED = REPO / ".." / "shared" / "bench" / "mlp_numpy.py"
# The SHA-256 of ../shared/bench/mlp_numpy.py when it was copied. Should the shared file change, copy it again
# (cp ../shared/bench/mlp_numpy.py benchmarks/reference/) and record its new SHA-256 here.
RECORDED_SHA256 = "4573eef4cd3fd5a70b0d74b283587da776ab682426339d2524b00fb8a703a018"


def sha256(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def load_benchmark(name: str) -> ModuleType:
    """A benchmark module, imported as the benchmarks import each other (benchmarks/ on sys.path)."""
    sys.path.insert(0, str(BENCHMARKS))
    try:
        spec = importlib.util.spec_from_file_location(f"benchmarks_{name}", BENCHMARKS / f"{name}.py")
        assert spec is not None and spec.loader is not None
        module = importlib.util.module_from_spec(spec)
        sys.modules[spec.name] = module  # while it runs (a dataclass looks its module up)
        spec.loader.exec_module(module)
        return module
    finally:
        sys.modules.pop(f"benchmarks_{name}", None)
        sys.path.remove(str(BENCHMARKS))
        sys.modules.pop("bench_executor", None)  # bench_peers imports it by that name
        sys.modules.pop("bench_peers", None)  # bench_cnn imports it by that name


def test_the_copy_is_the_shared_reference_byte_for_byte() -> None:
    if SHARED.is_file():
        assert sha256(COPY) == sha256(SHARED), (
            f"{COPY.relative_to(REPO)} differs from {SHARED.resolve()}: the reference is not the benchmark's to "
            "change; copy the shared file again (and record its SHA-256 in this test)"
        )
    assert sha256(COPY) == RECORDED_SHA256, f"{COPY.relative_to(REPO)} is not the reference step as it was copied"


def test_the_benchmarks_load_the_copy_by_default() -> None:
    executor = load_benchmark("bench_executor")
    assert executor.DEFAULT_REF.resolve() == COPY.resolve()
    peers = load_benchmark("bench_peers")  # imports bench_executor's DEFAULT_REF
    assert peers.DEFAULT_REF.resolve() == COPY.resolve()


def test_the_blockir_step_starts_where_the_reference_step_does() -> None:
    """What bench_executor checks before timing, on the default reference: the first losses agree."""
    executor = load_benchmark("bench_executor")
    ref = executor.load_reference(executor.DEFAULT_REF)
    bir_step, ref_step = executor.blockir_step(ref, batch=8)
    first_bir, first_ref = float(np.asarray(bir_step()).reshape(-1)[0]), float(ref_step())
    assert np.isclose(first_bir, first_ref, rtol=1e-4), (first_bir, first_ref)


def test_the_cnn_step_is_the_same_in_both_layouts() -> None:
    """bench_cnn's blockir step (issue 34's CNN) in NCHW and in NHWC from the same data and weights: the same
    first two losses (before and after one Momentum update)."""
    cnn = load_benchmark("bench_cnn")
    d = cnn.cnn_data(batch=2)
    nchw, nhwc = cnn.blockir_cnn(d, "NCHW"), cnn.blockir_cnn(d, "NHWC")
    np.testing.assert_allclose([nchw(), nchw()], [nhwc(), nhwc()], rtol=1e-4)


def test_the_blockir_step_on_a_cuda_place_starts_where_the_reference_step_does(monkeypatch: pytest.MonkeyPatch) -> None:
    """``bench_executor --place cuda:0`` (scripts/gpu_check.sh runs it), here on the CuPy stand-in: the step runs on
    the GPU's values and its loss comes back to the host."""
    from tests.runtime import fake_cupy

    fake = fake_cupy.install(monkeypatch, gpus=1)
    executor = load_benchmark("bench_executor")
    ref = executor.load_reference(executor.DEFAULT_REF)
    bir_step, ref_step = executor.blockir_step(ref, batch=8, place="cuda:0")
    first_bir, first_ref = float(np.asarray(bir_step()).reshape(-1)[0]), float(ref_step())
    assert np.isclose(first_bir, first_ref, rtol=1e-4), (first_bir, first_ref)
    assert any(call[0] == "launch" for call in fake.calls)  # the kernels ran on the stand-in's streams


def test_the_cnn_step_on_a_cuda_place_is_the_hosts(monkeypatch: pytest.MonkeyPatch) -> None:
    """``bench_cnn --place cuda:0`` (scripts/gpu_check.sh runs it), here on the CuPy stand-in: the first two losses
    are those of the step on the host."""
    from tests.runtime import fake_cupy

    cnn = load_benchmark("bench_cnn")
    d = cnn.cnn_data(batch=2)
    host = cnn.blockir_cnn(d, "NCHW")
    expected = [host(), host()]
    fake = fake_cupy.install(monkeypatch, gpus=1)
    device = cnn.blockir_cnn(d, "NCHW", "cuda:0")
    np.testing.assert_allclose([device(), device()], expected, rtol=1e-4)
    assert any(call[0] == "launch" for call in fake.calls)


def test_a_contender_timed_elsewhere_is_asked_for_its_own_time() -> None:
    """``alternate`` with a ``Timed`` contender (bench_cnn's Paddle Inference, in another process) takes the seconds
    it reports, and ``ratio_to`` compares any two contenders round by round."""
    executor = load_benchmark("bench_executor")
    asked: list[int] = []

    def remote(n: int) -> float:
        asked.append(n)
        return 0.5

    t = executor.alternate({"remote": executor.Timed(remote), "local": lambda: None}, 4, 3)
    assert asked == [1, 4, 4, 4]  # the warm-up, then a turn per round
    assert t.seconds["remote"] == 0.5 and t.rounds["remote"] == [0.5, 0.5, 0.5]
    median, low, high = t.ratio_to("local", "remote")
    assert median < 0.01 and low <= median <= high


def test_the_transformer_step_starts_where_torchs_does() -> None:
    """bench_transformer's check before timing (issue 34's goal 4), at batch 2: blockir's and PyTorch's first two
    losses (before and after one Adam update) from the same data and weights agree. PyTorch is the benchmark's
    peer, not a dependency: without it the benchmark refuses to run, and this test has nothing to compare."""
    torch = pytest.importorskip("torch")
    bench = load_benchmark("bench_transformer")
    data = bench.transformer_data(batch=2)
    ours, theirs = bench.blockir_transformer(*data), bench.torch_transformer(torch, *data)
    np.testing.assert_allclose([ours(), ours()], [theirs(), theirs()], rtol=2e-4, atol=1e-5)


def test_proc_cpu_counts_the_cpu_of_the_processes_under_this_one() -> None:
    """What bench_ray_floor and bench_ps count as daemons: the CPU a process under this one spent between two
    snapshots (a child busy for 0.3 s), and nothing of it once that process is left out."""
    import subprocess

    proc_cpu = load_benchmark("proc_cpu")
    busy = "import time\nend = time.process_time() + 0.3\nwhile time.process_time() < end: pass\ninput()"
    others = proc_cpu.Snapshot.of(proc_cpu.descendants(os.getpid()))  # children of earlier tests, still running
    child = subprocess.Popen([sys.executable, "-c", busy], stdin=subprocess.PIPE)
    try:
        before = others  # the child counts from zero
        while proc_cpu.cpu_seconds(child.pid) < 0.3:
            assert child.poll() is None
        under = proc_cpu.descendants(os.getpid())
        assert child.pid in under and under[child.pid].startswith("python")
        after = proc_cpu.Snapshot.of(under)
        assert after.since(before) >= 0.3
        assert after.since(before, leave_out=[child.pid]) < 0.3
    finally:
        child.communicate(b"\n", timeout=30)


def test_bench_ps_bounds_a_setup_by_its_cores_and_by_each_parts_thread() -> None:
    """bench_ps's bound: B x min(C / (w + c + s + r), W / w, W / c, S / s), a part with no CPU (sync mode's
    communicator) no limit."""
    bench = load_benchmark("bench_ps")
    run = {"w": 0.004, "c": 0.001, "s": 0.002, "r": 0.001, "batch": 32}
    assert np.isclose(bench.bound(run, 1, 2, 2), 32 * 2 / 0.008)  # the cores
    assert np.isclose(bench.bound(run, 1, 1, 2), 32 * 1 / 0.004)  # one trainer
    assert np.isclose(bench.bound(dict(run, s=0.006, c=0.0), 1, 2, 4), 32 / 0.006)  # one server


def test_bench_onnx_times_a_light_model_against_onnxruntime_and_an_import(capsys: pytest.CaptureFixture[str]) -> None:
    """bench_onnx (issue 38's goals 2 and 3) in tiny rounds: a light model run in blockir and onnxruntime, timed
    with its ratio and its outputs' difference; the large model's import timed, of the nodes asked for."""
    pytest.importorskip("onnxruntime")
    bench = load_benchmark("bench_onnx")
    bench.main(["--models", "light", "--light", "shufflenet", "--rounds", "1", "--turn", "0.01"])
    out = capsys.readouterr().out
    (row,) = [line.split() for line in out.splitlines() if line.startswith("light shufflenet")]
    assert float(row[2]) > 0 and float(row[3]) > 0 and row[4].endswith("x")  # ms, ms, ratio
    assert float(row[-1]) <= 1e-2  # blockir computes onnxruntime's outputs
    assert "summary: blockir up to" in out
    bench.main(["--import-nodes", "50", "--rounds", "1"])
    assert "import of a 50-node model, 1 loads:" in capsys.readouterr().out


def test_bench_onnx_layers_splits_a_model_into_its_sgemm_floor_and_its_depthwise_layers(
    capsys: pytest.CaptureFixture[str],
) -> None:
    """bench_onnx --layers (issue 38's goal 2: where the time goes) in tiny rounds: light shufflenet's sgemm floor
    and its depthwise layers timed alone on both sides; its layers' shapes from ONNX's shape inference."""
    pytest.importorskip("onnxruntime")
    bench = load_benchmark("bench_onnx")
    layers = bench.conv_layers(bench.light_models()["shufflenet"], 1)
    assert len(layers) > 40 and layers[0].x == (1, 3, 224, 224) and layers[0].y[:2] == (1, layers[0].w[0])
    depthwise = [layer for layer in layers if layer.depthwise]
    assert depthwise and all(layer.w[1] == 1 and layer.group == layer.x[1] for layer in depthwise)
    bench.main(["--models", "light", "--light", "shufflenet", "--layers", "--rounds", "1", "--turn", "0.001"])
    (row,) = [line.split() for line in capsys.readouterr().out.splitlines() if line.startswith("light shufflenet")]
    model_ms, floor_ms, share, count, ours, theirs, ratio = row[2:]
    assert float(model_ms) > 0 and float(floor_ms) > 0 and share.endswith("x")
    assert int(count) == len(depthwise) and float(ours) > 0 and float(theirs) > 0 and ratio.endswith("x")


def test_bench_depthwise_times_the_direct_kernel_against_the_gemms(capsys: pytest.CaptureFixture[str]) -> None:
    """bench_depthwise (the measurement behind depthwise.direct's rule) in tiny rounds: both passes of a layer,
    their results compared before they are timed, and the gemms' switch left on."""
    from blockir.ops import depthwise

    bench = load_benchmark("bench_depthwise")
    bench.main(["--shapes", "1:4:9:2:2", "--rounds", "1", "--turn", "0.001"])
    rows = [line.split() for line in capsys.readouterr().out.splitlines() if line.startswith("1x4x9x9")]
    assert [r[3] for r in rows] == ["forward", "backward"]
    assert all(float(r[4]) > 0 and float(r[5]) > 0 and r[6].endswith("x") for r in rows)  # ms, ms, ratio
    assert depthwise.ENABLED


def test_cnn_profile_puts_every_conv_layer_of_both_sides_in_its_rows() -> None:
    """cnn_profile (issue 34's per-op breakdown against torch's profiler), at batch 2 for one step: both sides
    report time in the convolution categories, and each of the five conv layers is found, forward and backward,
    in blockir's trace and among torch's ops (by its filter's shape)."""
    torch = pytest.importorskip("torch")
    profile = load_benchmark("cnn_profile")
    for by_category, layers, wall in (
        profile.blockir_profile(2, 1, "NCHW"),
        profile.torch_profile(torch, 2, 1),
    ):
        assert by_category["conv forward"] > 0 and by_category["conv backward"] > 0
        assert sorted(layers) == [f"conv{i}" for i in range(1, 6)]
        assert all(forward > 0 for forward, _ in layers.values())
        assert all(backward > 0 for name, (_, backward) in layers.items() if name != "conv1")
        assert wall >= sum(by_category.values()) * 0.5


def test_the_ps_models_closed_loop_gives_one_workers_cycle_and_at_most_the_cores() -> None:
    """benchmarks/ps_model.py's queue of the workers' batches for a node's cores (mean value analysis): one worker
    runs at one batch per its CPU (over the cores it keeps busy at once) and waits; more workers run faster, never
    beyond the cores over a batch's CPU."""
    model = load_benchmark("ps_model")
    demand, waits, cores = 0.010, 0.002, 2.0
    assert model.closed_loop(1, demand, waits, cores) == pytest.approx(1 / (demand + waits))
    rates = [model.closed_loop(w, demand, waits, cores) for w in range(1, 65)]
    assert rates[0] < rates[1] < rates[2] and all(b >= a * (1 - 1e-9) for a, b in zip(rates, rates[1:], strict=False))
    assert rates[-1] <= cores / demand and rates[-1] == pytest.approx(cores / demand, rel=0.02)
    assert model.closed_loop(1, demand, 0.0, 0.5) == pytest.approx(0.5 / demand)  # half a core: twice as long
    assert model.closed_loop(1, demand, 0.0, cores, parallel=2.0) == pytest.approx(cores / demand)  # side by side
