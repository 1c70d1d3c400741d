"""The CUDA backend (blockir.runtime.cuda): streams, events and copies, checked against a numpy-backed
stand-in of CuPy (tests/runtime/fake_cupy.py) on any machine, and end to end on a real GPU (``gpu``).

With the stand-in: which stream each op runs on, which events the run records and waits for, which
copies it issues (host to device staged in pinned memory on the copy stream, device to host into pinned
memory on the copy stream, peer copies between GPUs), results equal to the host's for an MLP on
``cuda:0`` and on ``cuda:0`` + ``cuda:1``, the errors for devices this machine does not have, and that
``import blockir`` never imports CuPy.
"""

from __future__ import annotations

import subprocess
import sys
import textwrap
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest

import blockir as bir
from blockir.errors import BlockirError, ExecutionError
from blockir.ir import Program
from blockir.ir.schema import OpSchema, Slot
from blockir.runtime import cuda
from blockir.runtime import device as device_module
from blockir.runtime.device import get_device, transfer
from tests.gpu import real_cupy
from tests.passes.test_copies import mlp
from tests.registries import ops_registered
from tests.runtime import fake_cupy
from tests.runtime.fake_cupy import FakeArray, FakeCupy
from tests.runtime.test_devices import bag_of_words, bag_of_words_feed, batch, train

ROOT = Path(__file__).resolve().parents[2]
WHERE: dict[str, Any] = {}  # output name -> the stream current when cuda_where's kernel ran ("host" on the host)


def _where(ctx, x):
    WHERE[ctx.op_text.split(" = ")[0].lstrip("%")] = ctx.xp.cuda.get_current_stream() if ctx.xp is not np else "host"
    return x * 2


@pytest.fixture(scope="module", autouse=True)
def _ops() -> Iterator[None]:
    with ops_registered(OpSchema("cuda_where", inputs=(Slot("X"),), outputs=(Slot("Out"),), kernel=_where)):
        yield


@pytest.fixture
def fake(monkeypatch: pytest.MonkeyPatch) -> FakeCupy:
    return fake_cupy.install(monkeypatch, gpus=2)


def names(fake: FakeCupy) -> list[tuple]:
    """The stand-in's calls with streams as blockir names them (``cuda:0/copy``; ``cuda:0/null``: CuPy's
    default stream) and events as ``STREAM#k``, the k-th event recorded on that stream."""
    streams = {s.cuda_stream: str(s) for g in range(fake.gpus) for s in get_device(f"cuda:{g}").streams()}
    streams.update((s, f"cuda:{g}/null") for g, s in fake.null_streams.items())
    events: dict[Any, str] = {}
    out = []
    for call in fake.calls:
        if call[0] == "record":
            events[call[2]] = f"{streams[call[1]]}#{sum(e.startswith(streams[call[1]]) for e in events.values())}"
        out.append(
            tuple(
                streams.get(v, v)
                if isinstance(v, fake_cupy.FakeStream)
                else events.get(v, v)
                if isinstance(v, fake_cupy.FakeEvent)
                else v
                for v in call
            )
        )
    return out


def chain() -> Program:
    """x (fed) -> cuda_where on cuda:0 -> a -> cuda_where on the host -> b."""
    program = Program()
    block = program.global_block()
    block.create_var("x", shape=(4, 3), dtype="float32", need_check_feed=True)
    block.create_var("a", shape=(4, 3), dtype="float32")
    block.create_var("b", shape=(4, 3), dtype="float32")
    block.append_op("cuda_where", {"X": "x"}, {"Out": "a"}, {"op_device": "cuda:0"})
    block.append_op("cuda_where", {"X": "a"}, {"Out": "b"}, {"op_device": "cpu"})
    return program


# -- streams, events and copies of a run ----------------------------------------------------------------


def test_a_run_launches_ops_on_their_streams_and_copies_through_pinned_memory_on_the_copy_stream(fake):
    x = np.arange(12, dtype="float32").reshape(4, 3)
    WHERE.clear()
    (b,) = bir.Executor("cpu").run(chain(), feed={"x": x}, fetch_list=["b"])
    np.testing.assert_array_equal(b, x * 4)
    assert str(get_device("cuda:0").stream("compute0")) == "cuda:0/compute0"
    assert WHERE["a"] is get_device("cuda:0").stream("compute0").cuda_stream and WHERE["b"] == "host"
    log = names(fake)
    copies = [c for c in log if c[0] in ("h2d", "d2h", "d2d", "implicit")]
    assert copies == [("h2d", "cuda:0/copy", True), ("d2h", "cuda:0/copy", True, False)]
    h2d, d2h = log.index(copies[0]), log.index(copies[1])
    assert log[h2d - 1] == ("pinned", 48)  # the host array staged in pinned memory, then copied on the stream
    assert log[d2h - 1] == ("pinned", 48)  # the device array copied into pinned memory
    # The op on compute0 waits (on the device) for an event the copy stream recorded after the upload ...
    wait = log.index(("wait", "cuda:0/compute0", "cuda:0/copy#1"))
    assert h2d < log.index(("record", "cuda:0/copy", "cuda:0/copy#1")) < wait < log.index(("launch", "cuda:0/compute0"))
    # ... the download waits for compute0's event, and the host op blocks on the copy stream's event after it.
    assert (
        log.index(("record", "cuda:0/compute0", "cuda:0/compute0#0"))
        < log.index(("wait", "cuda:0/copy", "cuda:0/compute0#0"))
        < d2h
    )
    assert d2h < log.index(("record", "cuda:0/copy", "cuda:0/copy#3")) < log.index(("event_sync", "cuda:0/copy#3"))
    assert {c for c in log[-2:]} == {("sync", "cuda:0/copy"), ("sync", "cuda:0/compute0")}  # the run ends synchronized


def test_the_sequential_scheduler_waits_for_each_op_on_a_cuda_stream(fake):
    x = np.ones((4, 3), "float32")
    (b,) = bir.Executor("cpu", scheduler="sequential").run(chain(), feed={"x": x}, fetch_list=["b"])
    np.testing.assert_array_equal(b, x * 4)
    log = names(fake)
    assert not any(c[0] in ("wait", "event_sync") for c in log)  # nothing to wait for: each op is done at once
    launches = [c for c in log if c[0] in ("launch", "sync")]
    assert launches[:6] == [
        ("launch", "cuda:0/copy"),
        ("sync", "cuda:0/copy"),
        ("launch", "cuda:0/compute0"),
        ("sync", "cuda:0/compute0"),
        ("launch", "cuda:0/copy"),
        ("sync", "cuda:0/copy"),
    ]


def test_copies_between_gpus_are_peer_copies_on_the_destination_copy_stream(fake):
    main, startup, loss = mlp("cuda:1")
    exe = bir.Executor("cuda:0")
    train(main, startup, loss, exe, steps=1)
    log = names(fake)
    peer = {c for c in log if c[0] == "d2d"}
    assert peer == {("d2d", "cuda:1/copy", 0, 1), ("d2d", "cuda:0/copy", 1, 0)}
    assert not [c for c in log if c[0] == "h2d" and not c[2]]  # every upload from pinned memory


def fake_array(host: np.ndarray, gpu: int = 0) -> FakeArray:
    return transfer(host, f"cuda:{gpu}")


def test_a_pinned_host_array_is_uploaded_as_it_is_and_staging_buffers_live_until_the_copy_is_done(fake):
    stream = get_device("cuda:0").stream("copy")
    host = stream.copy(fake_array(np.arange(6.0)), to_host=True)  # into pinned memory
    assert cuda._pinned(host, fake) and not cuda._pinned(np.arange(3.0), fake)
    fake.calls.clear()
    stream.copy(host)
    assert [c[0] for c in fake.calls if c[0] in ("pinned", "h2d")] == ["h2d"]  # no staging
    uploaded = stream.copy(np.arange(4.0))
    staged = fake.pinned[-1]
    assert staged() is not None  # nothing but the stream holds it: the copy may still be reading it
    stream.synchronize()
    assert staged() is None
    np.testing.assert_array_equal(transfer(uploaded, "cpu"), np.arange(4.0))


def test_a_strided_array_is_made_contiguous_on_its_own_gpu_before_the_peer_copy(fake):
    a = fake_array(np.arange(12.0).reshape(3, 4), gpu=0).T
    fake.calls.clear()
    out = get_device("cuda:1").stream("copy").copy(a)
    assert out.gpu == 1 and out.flags.c_contiguous
    np.testing.assert_array_equal(transfer(out, "cpu"), np.arange(12.0).reshape(3, 4).T)
    log = [c for c in names(fake) if c[0] in ("record", "wait", "launch", "d2d")]
    assert log[:7] == [
        ("launch", "cuda:1/copy"),
        ("record", "cuda:1/copy", "cuda:1/copy#0"),
        ("wait", "cuda:0/copy", "cuda:1/copy#0"),
        ("launch", "cuda:0/copy"),  # ascontiguousarray, after what cuda:1/copy waited for
        ("record", "cuda:0/copy", "cuda:0/copy#0"),
        ("wait", "cuda:1/copy", "cuda:0/copy#0"),
        ("d2d", "cuda:1/copy", 0, 1),
    ]


@pytest.mark.parametrize("nccl", [True, False], ids=["nccl", "host"])
@pytest.mark.parametrize("dtype", ["float32", "float64", "bool"])
def test_an_allreduce_over_gpus_sums_on_every_gpu_after_what_the_launching_stream_waited_for(monkeypatch, nccl, dtype):
    fake = fake_cupy.install(monkeypatch, gpus=3, nccl=nccl)
    rng = np.random.default_rng(0)
    hosts = [
        (rng.normal(size=(2, 6)) > 0).astype(dtype) if dtype == "bool" else rng.normal(size=(2, 6)).astype(dtype)
        for _ in range(3)
    ]
    xs = [fake_array(h[:, :3].copy(), g) for g, h in enumerate(hosts)]
    xs[1] = fake_array(hosts[1], 1)[:, ::2]  # a strided array: made contiguous before NCCL reads it
    total = hosts[0][:, :3] + hosts[1][:, ::2] + hosts[2][:, :3]
    stream = get_device("cuda:0").stream("copy")
    fake.calls.clear()
    outs = stream.allreduce(xs)
    assert [o.gpu for o in outs] == [0, 1, 2]
    for out in outs:
        np.testing.assert_array_equal(out.view(np.ndarray), total)
    log = names(fake)
    through_nccl = nccl and dtype != "bool"  # NCCL has no bool type: those go through the host
    assert [c for c in log if c[0] == "nccl"] == (
        [("nccl", f"cuda:{g}/copy", g) for g in range(3)] if through_nccl else []
    )
    start = ("record", "cuda:0/copy", "cuda:0/copy#0")
    assert log[0] == start  # what the launching stream waited for, then every GPU's stream waits for it ...
    for g in (1, 2):
        assert ("wait", f"cuda:{g}/copy", "cuda:0/copy#0") in log
        done = [c for c in log if c[0] == "record" and c[1] == f"cuda:{g}/copy"][-1]
        work = [i for i, c in enumerate(log) if c[0] in ("nccl", "d2h", "h2d") and c[1] == f"cuda:{g}/copy"]
        assert work and log.index(("wait", f"cuda:{g}/copy", "cuda:0/copy#0")) < work[0] < log.index(done)
        assert ("wait", "cuda:0/copy", done[2]) in log[log.index(done) :]  # ... and the launching stream for each
    if through_nccl:
        assert fake.entries("nccl_init") == [("nccl_init", (0, 1, 2))]
        stream.allreduce(xs)
        assert len(fake.entries("nccl_init")) == 1  # communicators made once per set of GPUs
    else:
        assert {c[1] for c in log if c[0] == "d2h"} == {f"cuda:{g}/copy" for g in range(3)}


def test_nccl_calls_for_several_gpus_from_one_thread_must_be_grouped(monkeypatch):
    """The stand-in refuses what would hang NCCL, so the tests above show the backend groups its calls."""
    fake = fake_cupy.install(monkeypatch, gpus=2, nccl=True)
    nccl = fake.cuda.nccl
    comms = nccl.NcclCommunicator.initAll([0, 1])
    x = fake_array(np.ones(3), 0)
    stream = get_device("cuda:0").stream("copy").cuda_stream
    with pytest.raises(RuntimeError, match="would hang"):
        comms[0].allReduce(x.data.ptr, x.data.ptr, 3, nccl.NCCL_FLOAT64, nccl.NCCL_SUM, stream.ptr)
    nccl.groupStart()
    comms[0].allReduce(x.data.ptr, x.data.ptr, 3, nccl.NCCL_FLOAT64, nccl.NCCL_SUM, stream.ptr)
    with pytest.raises(RuntimeError, match=r"called \[1, 0\] collectives"):
        nccl.groupEnd()


def test_put_copies_every_kind_of_value_and_waits_for_the_copy(fake):
    lod = bir.LoDTensor(np.arange(6, dtype="float32").reshape(3, 2), [[0, 1, 3]])
    rows = bir.SelectedRows(np.array([2, 0]), np.ones((2, 3), "float32"), 5)
    for value in (lod, rows):
        fake.calls.clear()
        on_gpu = transfer(value, "cuda:1")
        assert type(on_gpu) is type(value) and names(fake)[-1] == ("sync", "cuda:1/copy")
        array = getattr(on_gpu, "data", getattr(on_gpu, "values", None))
        assert isinstance(array, FakeArray) and array.gpu == 1
    assert transfer(lod, "cuda:1").lod == lod.lod
    assert list(transfer(rows, "cuda:0").rows) == [2, 0] and isinstance(transfer(rows, "cuda:0").rows, np.ndarray)


# -- results ------------------------------------------------------------------------------------------

SCHEDULERS = [
    pytest.param({"scheduler": "dataflow"}, id="dataflow"),
    pytest.param({"scheduler": "dataflow", "compute_streams": 2}, id="dataflow-2-streams"),
    pytest.param({"scheduler": "sequential"}, id="sequential"),
]


@pytest.mark.parametrize("options", SCHEDULERS)
@pytest.mark.parametrize(
    "hidden, place",
    [(None, "cuda:0"), ("cuda:1", "cuda:0"), ("cuda:0", "cpu")],
    ids=["cuda0", "cuda0+cuda1", "cpu+cuda0"],
)
def test_an_mlp_trained_on_gpus_matches_the_host(fake, hidden, place, options):
    losses, scope = train(*mlp(hidden), bir.Executor(place, **options))
    host_losses, host_scope = train(*mlp(None), bir.Executor("cpu"))
    np.testing.assert_array_equal(losses, host_losses)
    for name in host_scope.names():
        np.testing.assert_array_equal(transfer(scope.var(name).value, "cpu"), host_scope.get(name), err_msg=name)
    devices = {n: scope.var(n).device for n in scope.names()}
    assert devices["fc_1.w_0"] == (hidden or place) and devices["fc_0.w_0"] == place
    assert isinstance(scope.var("fc_1.w_0").value, FakeArray)


@pytest.fixture(params=["stand-in", pytest.param("real", marks=pytest.mark.gpu)])
def gpu(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> bool:
    """cuda:0 (and cuda:1) through the stand-in, or a real cuda:0; whether results must equal the host's exactly."""
    if request.param == "real":
        real_cupy()
        return False
    fake_cupy.install(monkeypatch, gpus=2)
    return True


def assert_matches(got: Any, want: Any, exact: bool) -> None:
    if exact:
        np.testing.assert_array_equal(got, want)
    else:
        np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-5)


def branches(a_device: str | None, b_device: str | None) -> tuple[Program, Program, Any]:
    """Two fc branches on two devices joined by concat (on ``a_device``, with the rest), trained with SGD:
    concat's gradient hands each branch a strided slice of one array."""
    main, startup = Program(), Program()
    main.random_seed = startup.random_seed = 3
    with bir.unique_name.guard(), bir.program_guard(main, startup):
        x = bir.data("x", shape=[-1, 784], dtype="float32")
        label = bir.data("label", shape=[-1, 1], dtype="int64")
        with bir.device_guard(b_device):
            b = bir.layers.fc(x, size=32, act="relu")
        with bir.device_guard(a_device):
            a = bir.layers.fc(x, size=32, act="relu")
            pred = bir.layers.fc(bir.layers.concat([a, b], axis=1), size=10, act="softmax")
            loss = bir.layers.mean(bir.layers.cross_entropy(pred, label))
            bir.optimizer.SGD(learning_rate=0.1).minimize(loss)
    return main, startup, loss


def test_branches_on_two_devices_joined_by_concat_match_the_host(gpu):
    devices = ("cuda:0", "cuda:1") if gpu else ("cuda:0", "cpu")
    losses, scope = train(*branches(*devices), bir.Executor("cpu"))
    host_losses, host_scope = train(*branches(None, None), bir.Executor("cpu"))
    assert_matches(losses, host_losses, gpu)
    for name in host_scope.names():
        assert_matches(transfer(scope.var(name).value, "cpu"), host_scope.get(name), gpu)


def test_sparse_gradients_and_lod_tensors_on_a_gpu_match_the_host(gpu):
    results = []
    for device in ("cuda:0", None):
        main, startup, loss = bag_of_words(device)
        scope, exe = bir.Scope(), bir.Executor("cpu")
        exe.run(startup, scope=scope)
        results.append(
            (
                [exe.run(main, feed=bag_of_words_feed(), fetch_list=[loss], scope=scope)[0] for _ in range(3)],
                scope.get("emb"),
            )
        )
    (losses, emb), (host_losses, host_emb) = results
    assert_matches(losses, host_losses, gpu)
    assert_matches(emb, host_emb, gpu)


def test_a_failing_kernel_on_a_gpu_names_the_op(fake):
    main, startup, loss = mlp(None)
    exe, scope = bir.Executor("cuda:0"), bir.Scope()
    exe.run(startup, scope=scope)
    feed = batch()
    feed["label"][3] = 12
    with pytest.raises(
        ExecutionError, match=r"label 12 is out of range \[0, 10\)(.|\n)*softmax_with_cross_entropy_mean\(.*@cuda:0"
    ):
        exe.run(main, feed=feed, fetch_list=[loss], scope=scope)
    exe.run(main, feed=batch(), fetch_list=[loss], scope=scope)  # and runs again afterwards


# -- devices this machine does not have ----------------------------------------------------------------


def _on(device: str) -> Program:
    program = Program()
    block = program.global_block()
    block.create_var("x", shape=(2,), dtype="float32", need_check_feed=True)
    block.create_var("y", shape=(2,), dtype="float32")
    block.append_op("cuda_where", {"X": "x"}, {"Out": "y"}, {"op_device": device})
    return program


def test_a_gpu_this_machine_lacks_is_refused_before_anything_runs_naming_the_op_and_the_devices(fake):
    WHERE.clear()
    with pytest.raises(
        BlockirError,
        match=r"device cuda:3 is not available on this machine \(devices available: "
        r"cpu, cpu:N \(virtual, any N\), cuda:0, cuda:1\): "
        r"%x@cuda:3 = memcpy\(X=%x\).*@cuda:3$",
    ):
        bir.Executor("cpu").run(_on("cuda:3"), feed={"x": np.ones(2, "float32")}, fetch_list=["y"])
    assert not fake.calls and not WHERE


def test_without_cupy_no_gpu_is_available(monkeypatch):
    monkeypatch.setattr(cuda, "_cupy", lambda: None)
    monkeypatch.setattr(device_module, "_devices", {})
    with pytest.raises(
        BlockirError,
        match=r"device cuda:0 is not available on this machine \(devices available: "
        r"cpu, cpu:N \(virtual, any N\)\): %x@cuda:0 = memcpy\(X=%x\)",
    ):
        bir.Executor("cpu").run(_on("cuda:0"), feed={"x": np.ones(2, "float32")}, fetch_list=["y"])
    with pytest.raises(BlockirError, match=r"device cuda:0 is not available .*: the executor's place"):
        bir.Executor("cuda:0")
    assert cuda.device_names() == [] and cuda.make_device(0) is None


def test_cupy_counts_only_when_it_imports_and_sees_a_gpu(monkeypatch):
    monkeypatch.setitem(sys.modules, "cupy", None)  # not installed: the import fails
    assert cuda._cupy() is None
    monkeypatch.setitem(sys.modules, "cupy", FakeCupy(gpus=0))
    assert cuda._cupy() is None
    broken = FakeCupy(gpus=1)
    broken.cuda.is_available = lambda: 1 / 0  # a broken driver
    monkeypatch.setitem(sys.modules, "cupy", broken)
    assert cuda._cupy() is None
    present = FakeCupy(gpus=1)
    monkeypatch.setitem(sys.modules, "cupy", present)
    assert cuda._cupy() is present


def test_importing_blockir_never_imports_cupy(tmp_path):
    poisoned = tmp_path / "cupy"
    poisoned.mkdir()
    (poisoned / "__init__.py").write_text("raise RuntimeError('blockir imported cupy')\n")
    script = textwrap.dedent("""
        import sys
        import numpy as np
        import blockir as bir
        import blockir.cli, blockir.runtime.cuda
        program = bir.Program()
        block = program.global_block()
        block.create_var("x", shape=(2,), dtype="float32", need_check_feed=True)
        block.create_var("y", shape=(2,), dtype="float32")
        block.append_op("relu", {"X": "x"}, {"Out": "y"}, {"op_device": "cpu:1"})
        print(bir.Executor("cpu").run(program, feed={"x": np.array([-1, 2], "float32")}, fetch_list=["y"])[0])
        print("cupy" in sys.modules)
    """)
    done = subprocess.run(
        [sys.executable, "-c", script],
        capture_output=True,
        text=True,
        timeout=60,
        env={"PYTHONPATH": f"{tmp_path}:{ROOT}", "PATH": ""},
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.split() == ["[0.", "2.]", "False"]


# -- on a real GPU -------------------------------------------------------------------------------------


@pytest.mark.gpu
@pytest.mark.parametrize("options", SCHEDULERS)
@pytest.mark.parametrize("hidden, place", [(None, "cuda:0"), ("cuda:0", "cpu")], ids=["cuda0", "cpu+cuda0"])
def test_an_mlp_trained_on_a_real_gpu_matches_the_host(hidden, place, options):
    real_cupy()
    losses, scope = train(*mlp(hidden), bir.Executor(place, **options), steps=8)
    host_losses, host_scope = train(*mlp(None), bir.Executor("cpu"), steps=8)
    np.testing.assert_allclose(losses, host_losses, rtol=1e-4, atol=1e-5)
    assert losses[-1][0] < losses[0][0]
    for name in host_scope.names():
        np.testing.assert_allclose(
            transfer(scope.var(name).value, "cpu"), host_scope.get(name), rtol=1e-3, atol=1e-5, err_msg=name
        )
    assert scope.var("fc_1.w_0").device == "cuda:0"


@pytest.mark.gpu
def test_copies_on_a_real_gpu_go_through_pinned_memory():
    cupy = real_cupy()
    stream = get_device("cuda:0").stream("copy")
    host = np.arange(6.0).reshape(2, 3)
    on_gpu = stream.copy(host)
    back = stream.copy(on_gpu.T, to_host=True)  # strided on the device
    again = stream.copy(back)  # from pinned memory, after the download on the same stream
    stream.synchronize()
    assert isinstance(on_gpu, cupy.ndarray) and on_gpu.device.id == 0
    assert cuda._pinned(back, cupy) and not cuda._pinned(host, cupy)
    np.testing.assert_array_equal(back, host.T)
    np.testing.assert_array_equal(again.get(), host.T)


def test_batches_staged_on_a_gpu_feed_the_executor_without_another_copy(gpu):
    """bir.reader.staged(place="cuda:0") batches go straight into a run on cuda:0: the plan takes the fed
    values where they are (no host-to-device memcpy for them) and trains as from host feeds."""
    batches = [batch(seed=i) for i in range(4)]
    main, startup, loss = mlp(None)
    exe, scope = bir.Executor("cuda:0"), bir.Scope()
    exe.run(startup, scope=scope)
    losses = [
        exe.run(main, feed=feed, fetch_list=[loss], scope=scope)[0]
        for feed in bir.reader.staged(iter(batches), place="cuda:0")
    ]
    host_main, host_startup, host_loss = mlp(None)
    host_exe, host_scope = bir.Executor("cpu"), bir.Scope()
    host_exe.run(host_startup, scope=host_scope)
    host_losses = [host_exe.run(host_main, feed=feed, fetch_list=[host_loss], scope=host_scope)[0] for feed in batches]
    assert_matches(losses, host_losses, gpu)
    plan = exe.plan(main, ["x", "label"], [loss])  # host feeds: copies of x and label to cuda:0
    staged_feed = {name: get_device("cuda:0").put(value) for name, value in batches[0].items()}
    gpu_plan = exe._plan(
        main, frozenset(staged_feed), (loss.name,), frozenset((name, "cuda:0") for name in staged_feed)
    )
    copied = [
        s.ctx.op_text for s in plan.steps if "= memcpy(X=%x)" in s.ctx.op_text or "= memcpy(X=%label)" in s.ctx.op_text
    ]
    assert len(copied) == 2
    assert not any("memcpy(X=%x)" in s.ctx.op_text or "memcpy(X=%label)" in s.ctx.op_text for s in gpu_plan.steps)
    with pytest.raises(BlockirError, match="feed 'x': the plan takes it on cuda:0, got a value on cpu"):
        gpu_plan.run({"x": batches[0]["x"], "label": staged_feed["label"]}, scope)
