"""Data parallelism: N replicas at batch B compute what one device computes at batch N*B.

Float64 programs, several optimizer steps, compared parameter by parameter with a tight tolerance: for an
MLP and a sparse bag-of-words model, threads over one copy (``cpu,cpu``), full copies on virtual CPU
devices (``cpu:0,cpu:1``), full copies on two GPUs (``cuda:0,cuda:1``, the CuPy stand-in), both reduce
strategies, even and uneven splits.
"""

from __future__ import annotations

import json
import threading
import tracemalloc
from collections.abc import Callable
from typing import Any

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import blockir as bir
from blockir.errors import BlockirError, ExecutionError
from blockir.ops.common import to_host
from blockir.ops.values import LoDTensor
from blockir.passes import run
from tests.gpu import real_cupy
from tests.runtime import fake_cupy

RNG = np.random.default_rng(3)
PLACES = {
    "threads": ["cpu", "cpu"],
    "devices": ["cpu:0", "cpu:1"],
    "three": ["cpu", "cpu", "cpu:1"],
    "three-collective": ["cpu", "cpu", "cpu:1"],  # device_allreduce over the devices
}


def mlp(optimizer: Callable[[], Any]) -> tuple[bir.Program, bir.Program, str, dict[str, np.ndarray]]:
    main, startup = bir.Program(), bir.Program()
    main.random_seed = startup.random_seed = 11
    with bir.program_guard(main, startup), bir.unique_name.guard():
        x = bir.layers.data("x", [-1, 6], dtype="float64")
        y = bir.layers.data("y", [-1, 1], dtype="float64")
        h = bir.layers.fc(x, 16, act="tanh")
        h = bir.layers.fc(h, 8, act="relu")
        loss = bir.layers.mean(bir.layers.square_error_cost(bir.layers.fc(h, 1), y))
        optimizer().minimize(loss)
    rng = np.random.default_rng(3)  # the same batch for every run compared
    return main, startup, loss.name, {"x": rng.normal(size=(9, 6)), "y": rng.normal(size=(9, 1))}


def bow(optimizer: Callable[[], Any]) -> tuple[bir.Program, bir.Program, str, dict[str, Any]]:
    """Bag of words: a sparse embedding (SelectedRows gradient), summed per sequence, a softmax classifier."""
    main, startup = bir.Program(), bir.Program()
    main.random_seed = startup.random_seed = 5
    with bir.program_guard(main, startup), bir.unique_name.guard():
        words = bir.layers.data("words", [-1, 1], dtype="int64", lod_level=1)
        label = bir.layers.data("label", [-1, 1], dtype="int64")
        emb = bir.layers.embedding(words, size=[30, 8], is_sparse=True, dtype="float64")
        pooled = bir.layers.sequence_pool(emb, "sum")
        pred = bir.layers.fc(pooled, 3, act="softmax")
        loss = bir.layers.mean(bir.layers.cross_entropy(pred, label))
        optimizer().minimize(loss)
    rng = np.random.default_rng(4)
    lengths = [3, 1, 4, 2, 2, 5, 1]
    ids = rng.integers(0, 30, size=(sum(lengths), 1)).astype("int64")
    feed = {"words": LoDTensor.from_lengths(ids, lengths), "label": rng.integers(0, 3, size=(7, 1)).astype("int64")}
    return main, startup, loss.name, feed


MODELS = {"mlp": mlp, "bow": bow}
OPTIMIZERS = {"sgd": lambda: bir.optimizer.SGD(0.1), "adam": lambda: bir.optimizer.Adam(0.02)}


def train(
    model: str,
    optimizer: str,
    places: list[str] | None,
    strategy: str = "AllReduce",
    steps: int = 3,
    collective: bool | None = None,
) -> tuple[list[np.ndarray], dict[str, np.ndarray], bir.Scope]:
    main, startup, loss, feed = MODELS[model](OPTIMIZERS[optimizer])
    scope = bir.Scope()
    with bir.Executor("cpu") as exe:
        exe.run(startup, scope=scope)
        program: Any = main
        if places is not None:
            build = bir.BuildStrategy()
            build.reduce_strategy = bir.BuildStrategy.ReduceStrategy[strategy]
            build.collective = collective
            program = bir.CompiledProgram(main).with_data_parallel(loss, build_strategy=build, places=places)
        losses = [exe.run(program, feed=feed, fetch_list=[loss], scope=scope)[0] for _ in range(steps)]
    params = {p.name: to_host(scope.find_var(p.name).value) for p in main.all_parameters()}
    return losses, params, scope


def assert_same_params(got: dict[str, np.ndarray], want: dict[str, np.ndarray]) -> None:
    assert got.keys() == want.keys()
    for name in want:
        np.testing.assert_allclose(got[name], want[name], rtol=1e-10, atol=1e-12, err_msg=name)


@pytest.mark.parametrize("strategy", ["AllReduce", "Reduce"])
@pytest.mark.parametrize("places", list(PLACES))
@pytest.mark.parametrize("optimizer", list(OPTIMIZERS))
@pytest.mark.parametrize("model", list(MODELS))
def test_replicas_compute_what_one_device_computes_on_the_whole_batch(
    model: str, optimizer: str, places: str, strategy: str
) -> None:
    ref_losses, ref_params, _ = train(model, optimizer, None)
    losses, params, _ = train(model, optimizer, PLACES[places], strategy, collective=places.endswith("collective"))
    assert_same_params(params, ref_params)
    n = len(PLACES[places])
    for got, want in zip(losses, ref_losses):
        assert got.shape == (n,)  # one loss per replica, as Fluid's ParallelExecutor fetches it
        rows = 7 if model == "bow" else 9  # uneven: 9 rows or 7 sequences over 2 or 3 replicas
        shares = np.array([len(part) for part in np.array_split(np.arange(rows), n)]) / rows
        np.testing.assert_allclose(shares @ got, want[0], rtol=1e-10)  # the batch's mean loss


@pytest.mark.parametrize("nccl", [True, False], ids=["nccl", "no-nccl"])
@pytest.mark.parametrize("places", [["cuda:0", "cuda:1"], ["cuda:0", "cuda:0", "cuda:1"]], ids=["2", "2+1"])
@pytest.mark.parametrize("strategy", ["AllReduce", "Reduce"])
@pytest.mark.parametrize("model", list(MODELS))
def test_replicas_on_gpus_compute_the_same(
    monkeypatch: pytest.MonkeyPatch, model: str, strategy: str, places: list[str], nccl: bool
) -> None:
    _, ref_params, _ = train(model, "adam", None)
    fake = fake_cupy.install(monkeypatch, gpus=2, nccl=nccl)
    _, params, scope = train(model, "adam", places, strategy)
    assert_same_params(params, ref_params)
    copies = [n for n in scope.names() if n.endswith("@D1")]
    assert copies and all(scope.find_var(n).device == "cuda:1" for n in copies)
    # All-reduce of the dense gradients: one collective each, NCCL when CuPy has it, else through the host;
    # the sparse embedding gradient (bow) and the Reduce strategy copy the gradients between the GPUs.
    dense = 6 if model == "mlp" else 2  # weights and biases per optimizer step
    collectives = 3 * dense if strategy == "AllReduce" else 0
    assert len(fake.entries("nccl")) == (2 * collectives if nccl else 0)  # a call per GPU
    assert len(fake.entries("nccl_init")) == (1 if nccl and collectives else 0)
    crossed = {c[2:] for c in fake.entries("d2d")}
    assert (0, 1) in crossed  # the initial broadcast of the parameters
    if strategy == "Reduce" or model == "bow":
        assert (1, 0) in crossed  # gradients copied to their reducing device
    if collectives and not nccl:
        assert any(c[1].gpu == 1 for c in fake.entries("d2h"))  # cuda:1's sums went down to the host


def test_a_list_of_feeds_gives_each_replica_its_own_dict() -> None:
    main, startup, loss, feed = mlp(OPTIMIZERS["sgd"])
    parts = [{k: v[:3] for k, v in feed.items()}, {k: v[3:] for k, v in feed.items()}]  # 3 and 6 rows
    with bir.Executor() as exe:

        def first_loss(program: Any, batch: Any) -> np.ndarray:
            scope = bir.Scope()
            exe.run(startup, scope=scope)
            return exe.run(program, feed=batch, fetch_list=[loss], scope=scope)[0]

        compiled = bir.CompiledProgram(main).with_data_parallel(loss, places=["cpu", "cpu"])
        got = first_loss(compiled, parts)
        alone = [first_loss(main, part)[0] for part in parts]
        whole = first_loss(main, feed)[0]
        np.testing.assert_allclose(got, alone, rtol=1e-12)  # replica i computed on dict i
        np.testing.assert_allclose(np.array([3, 6]) / 9 @ got, whole, rtol=1e-12)
        scope = bir.Scope()
        exe.run(startup, scope=scope)
        with pytest.raises(BlockirError, match="one dict per place"):
            exe.run(compiled, feed=parts[:1], fetch_list=[loss], scope=scope)
        with pytest.raises(ExecutionError, match=r"Sections \[0, 9\] must be 2 sizes of at least 1"):
            exe.run(compiled, feed=[{k: v[:0] for k, v in feed.items()}, feed], fetch_list=[loss], scope=scope)


def test_threads_over_one_copy_hold_one_copy_of_each_parameter() -> None:
    _, params, scope = train("mlp", "adam", ["cpu", "cpu"])
    names = set(scope.names())
    assert all(f"{p}@D1" not in names for p in params)
    assert not any("@R" in n or "@D" in n for n in names)  # replicas' values are temporaries, never kept
    main, startup, loss, feed = mlp(OPTIMIZERS["sgd"])
    compiled = bir.CompiledProgram(main).with_data_parallel(loss, places=["cpu", "cpu"])
    replicated = compiled.replicated([loss])
    persistables = sorted(v.name for v in replicated.list_vars() if v.persistable)
    assert persistables == sorted(v.name for v in main.list_vars() if v.persistable)


def test_threads_over_one_copy_do_not_double_the_parameters_memory() -> None:
    def kept(places: list[str] | None) -> tuple[int, int]:
        """Bytes of the distinct buffers the scope keeps after training, and the peak traced by one step."""
        main, startup, loss, feed = mlp(OPTIMIZERS["sgd"])
        scope = bir.Scope()
        with bir.Executor() as exe:
            exe.run(startup, scope=scope)
            program: Any = main if places is None else bir.CompiledProgram(main).with_data_parallel(loss, places=places)
            tracemalloc.start()
            exe.run(program, feed=feed, fetch_list=[loss], scope=scope)
            _, top = tracemalloc.get_traced_memory()
            tracemalloc.stop()
        owners = [np.asarray(scope.get(n)) for n in scope.names()]  # the memory of each value (fused: its buffer)
        buffers = {id(owner): owner.nbytes for a in owners for owner in [a if a.base is None else a.base]}
        return sum(buffers.values()), top

    params = sum(np.prod(s) * 8 for s in [(6, 16), (16,), (16, 8), (8,), (8, 1), (1,)]) + 8  # and the learning rate
    one, _ = kept(None)
    threads, _ = kept(["cpu", "cpu"])
    devices, peak_devices = kept(["cpu:0", "cpu:1"])
    assert one == threads == params  # one copy of each parameter, shared by the replicas
    assert devices == 2 * params and peak_devices > params  # a full copy per device, made by the first run


def test_a_failing_op_in_one_replica_stops_the_run_and_names_it() -> None:
    main, startup, loss, feed = bow(OPTIMIZERS["sgd"])
    ids = np.asarray(feed["words"].data).copy()
    ids[-1] = 99  # an id past the table, in the last sequence: replica 1's part
    bad = dict(feed, words=LoDTensor(ids, feed["words"].lod))
    scope = bir.Scope()
    before = threading.active_count()
    with bir.Executor() as exe:
        exe.run(startup, scope=scope)
        compiled = bir.CompiledProgram(main).with_data_parallel(loss, places=["cpu", "cpu"])
        with pytest.raises(ExecutionError, match=r"(?s)99.*in op: %embedding_0.tmp_0@R1 = lookup_table\(") as info:
            exe.run(compiled, feed=bad, fetch_list=[loss], scope=scope)
        assert "@R0 = lookup_table" not in str(info.value)
        (ok,) = exe.run(compiled, feed=feed, fetch_list=[loss], scope=scope)  # the executor still runs
        assert ok.shape == (2,)
    assert threading.active_count() <= before


def test_the_pass_prints_replicas_reductions_and_broadcasts() -> None:
    main, _, loss, _ = mlp(OPTIMIZERS["sgd"])
    result, report = run(main, f"data-parallel{{places=cpu:0,cpu:1 loss={loss}}}")
    run(result, "place,insert-copies,streams")  # and the devices' pipeline takes it (verified after each pass)
    text = str(result)
    assert "split_batch(X=%x)" in text
    assert "allreduce(X=[%fc_0.w_0@GRAD@R0, %fc_0.w_0@GRAD@R1]" in text
    assert '%fc_0.w_0@D1 = broadcast(X=%fc_0.w_0, Current=%fc_0.w_0@D1) {dst_device="cpu:1", init_only=true' in text
    assert report.record("data-parallel").added > 0
    ops = result.global_block().ops
    assert all(op.attrs.get("op_pass") for op in ops if op.type != "memcpy")  # lineage on every created op


@pytest.mark.parametrize(
    ("options", "message"),
    [
        ("places=cpu,gpu:1 loss=LOSS", "'gpu:1' is not a device"),
        ("places=cpu loss=mean_0.tmp_7", r"the loss 'mean_0.tmp_7' is not a variable of the program \(did you mean"),
        ("places=cpu loss=LOSS strategy=ring", "strategy must be all-reduce or reduce"),
        ("places=cpu loss=LOSS fetch=nowhere", "the fetch 'nowhere' is not a variable"),
    ],
)
def test_bad_options_name_what_is_wrong(options: str, message: str) -> None:
    main, _, loss, _ = mlp(OPTIMIZERS["sgd"])
    with pytest.raises(BlockirError, match=message):
        run(main, f"data-parallel{{{options.replace('LOSS', loss)}}}")


def test_a_program_without_backward_is_refused() -> None:
    main, startup = bir.Program(), bir.Program()
    with bir.program_guard(main, startup), bir.unique_name.guard():
        loss = bir.layers.mean(bir.layers.fc(bir.layers.data("x", [-1, 2]), 1))
    with pytest.raises(BlockirError, match="has no backward from 'mean_0.tmp_0'"):
        bir.CompiledProgram(main).with_data_parallel(loss.name, places=["cpu", "cpu"])


def test_a_batch_smaller_than_the_replicas_names_the_feed() -> None:
    main, startup, loss, feed = mlp(OPTIMIZERS["sgd"])
    with bir.Executor() as exe:
        scope = bir.Scope()
        exe.run(startup, scope=scope)
        compiled = bir.CompiledProgram(main).with_data_parallel(loss, places=["cpu"] * 3)
        with pytest.raises(ExecutionError, match=r"(?s)a batch of 2 rows cannot be split over 3 replicas.*X=x"):
            exe.run(compiled, feed={"x": feed["x"][:2], "y": feed["y"][:2]}, fetch_list=[loss], scope=scope)


def test_a_fetch_that_exists_only_per_replica_names_the_replicas() -> None:
    main, startup, loss, feed = mlp(OPTIMIZERS["sgd"])
    result, _ = run(main, f"data-parallel{{places=cpu,cpu loss={loss}}}")
    with bir.Executor() as exe:
        scope = bir.Scope()
        exe.run(startup, scope=scope)
        with pytest.raises(BlockirError, match=r"exists only per replica, as fc_2.tmp_1@R0, fc_2.tmp_1@R1"):
            exe.run(result, feed=feed, fetch_list=["fc_2.tmp_1"], scope=scope)
        compiled = bir.CompiledProgram(main).with_data_parallel(loss, places=["cpu", "cpu"])
        (pred,) = exe.run(compiled, feed=feed, fetch_list=["fc_2.tmp_1"], scope=scope)  # gathered
    assert pred.shape == (9, 1)


@settings(max_examples=15, deadline=None)
@given(
    widths=st.lists(st.integers(1, 6), min_size=1, max_size=3),
    act=st.sampled_from(["relu", "tanh", "sigmoid", None]),
    rows=st.integers(3, 11),
    places=st.sampled_from([["cpu", "cpu"], ["cpu:0", "cpu:1"], ["cpu", "cpu:1", "cpu:2"], ["cpu:1"] * 3]),
    strategy=st.sampled_from(["AllReduce", "Reduce"]),
    optimizer=st.sampled_from(list(OPTIMIZERS)),
    collective=st.booleans(),
)
def test_the_pass_preserves_results_on_random_mlps(
    widths: list[int], act: str | None, rows: int, places: list[str], strategy: str, optimizer: str, collective: bool
) -> None:
    def build() -> tuple[bir.Program, bir.Program, str]:
        main, startup = bir.Program(), bir.Program()
        main.random_seed = startup.random_seed = 2
        with bir.program_guard(main, startup), bir.unique_name.guard():
            h = bir.layers.data("x", [-1, 3], dtype="float64")
            for w in widths:
                h = bir.layers.fc(h, w, act=act)
            y = bir.layers.data("y", [-1, widths[-1]], dtype="float64")
            loss = bir.layers.mean(bir.layers.square_error_cost(h, y))
            OPTIMIZERS[optimizer]().minimize(loss)
        return main, startup, loss.name

    rng = np.random.default_rng(rows)
    feed = {"x": rng.normal(size=(rows, 3)), "y": rng.normal(size=(rows, widths[-1]))}
    results = []
    for with_places in (None, places):
        main, startup, loss = build()
        scope = bir.Scope()
        with bir.Executor() as exe:
            exe.run(startup, scope=scope)
            program: Any = main
            if with_places is not None:
                build_strategy = bir.BuildStrategy()
                build_strategy.reduce_strategy = bir.BuildStrategy.ReduceStrategy[strategy]
                build_strategy.collective = collective
                program = bir.CompiledProgram(main).with_data_parallel(loss, build_strategy, places=with_places)
            for _ in range(2):
                exe.run(program, feed=feed, fetch_list=[loss], scope=scope)
        results.append({p.name: np.asarray(scope.get(p.name)) for p in main.all_parameters()})
    assert_same_params(results[1], results[0])


def test_updates_are_spread_over_the_replica_streams_balanced_by_size() -> None:
    main, _, loss, _ = mlp(OPTIMIZERS["sgd"])
    result, _ = run(main, f"data-parallel{{places=cpu,cpu loss={loss}}}")
    ops = result.global_block().ops
    updates = {op.attr("op_role_var")[0]: op.attr("op_stream") for op in ops if op.type == "sgd"}
    # largest first, each to the lighter stream: fc_1.w_0 (128 elements) on compute0, fc_0.w_0 (96) on compute1,
    # then fc_0.b_0 (16), fc_2.w_0 (8), fc_1.b_0 (8) on compute1 (up to 128) and fc_2.b_0 (1) on compute0.
    assert updates == {
        "fc_1.w_0": "cpu/compute0",
        "fc_0.w_0": "cpu/compute1",
        "fc_0.b_0": "cpu/compute1",
        "fc_2.w_0": "cpu/compute1",
        "fc_1.b_0": "cpu/compute1",
        "fc_2.b_0": "cpu/compute0",
    }
    reduced = [op for op in ops if op.type == "allreduce"]
    reductions = {op.output("Out")[0].removesuffix("@GRAD"): op.attr("op_stream") for op in reduced}
    assert reductions == updates  # each parameter reduced where it is updated
    replicas = {op.attr("op_stream") for op in ops if op.output_names() and op.output_names()[0].endswith("@R1")}
    assert replicas == {"cpu/compute1"}


def test_reductions_overlap_the_rest_of_the_backward(tmp_path: Any) -> None:
    """On the host stream, the reduction of fc_1.w_0's gradient runs before replica 0 computes fc_0.w_0's."""
    main, startup, loss, feed = mlp(OPTIMIZERS["sgd"])
    scope = bir.Scope()
    with bir.Executor() as exe:
        exe.run(startup, scope=scope)
        compiled = bir.CompiledProgram(main).with_data_parallel(loss, places=["cpu", "cpu"])
        exe.run(compiled, feed=feed, fetch_list=[loss], scope=scope, trace=str(tmp_path / "run.json"))
    events = json.loads((tmp_path / "run.json").read_text())["traceEvents"]
    spans = {e["args"]["op"]: (e["ts"], e["ts"] + e["dur"], e["tid"]) for e in events if e["ph"] == "X"}
    reduce_fc1 = next(v for k, v in spans.items() if k.startswith("%fc_1.w_0@GRAD = allreduce"))
    grad_fc0 = next(v for k, v in spans.items() if "(Y@GRAD=%fc_0.w_0@GRAD@R0) = mul_grad" in k)
    assert reduce_fc1[2] == grad_fc0[2] and reduce_fc1[1] <= grad_fc0[0]


@pytest.mark.gpu
@pytest.mark.parametrize("model", list(MODELS))
def test_two_replicas_on_one_real_gpu_compute_the_same(model: str) -> None:
    """Two replicas on the streams of one GPU (this project's GPU machines have one; two GPUs run on the
    stand-in above)."""
    real_cupy()
    _, ref_params, _ = train(model, "adam", None)
    _, params, _ = train(model, "adam", ["cuda:0", "cuda:0"])
    assert_same_params(params, ref_params)


def test_with_data_parallel_keeps_freed_memory_unless_told_not_to(monkeypatch: pytest.MonkeyPatch) -> None:
    import blockir.runtime.compiled as compiled

    calls: list[str] = []
    monkeypatch.setattr(compiled, "keep_freed_memory", lambda: calls.append("keep"))
    main, _, loss, _ = mlp(OPTIMIZERS["sgd"])
    bir.CompiledProgram(main).with_data_parallel(loss, places=["cpu", "cpu"])
    assert calls == ["keep"]
    off = bir.ExecutionStrategy(keep_freed_memory=False)
    bir.CompiledProgram(main).with_data_parallel(loss, exec_strategy=off, places=["cpu", "cpu"])
    assert calls == ["keep"]
