"""The ``auto-place`` pass and its cost model: HEFT against exhaustive search, properties over random programs
(kernels, pins, same results, never worse than one device), simulate, cost files and their errors."""

from __future__ import annotations

import itertools
import json
import random
from pathlib import Path

import numpy as np
import pytest
from hypothesis import given, settings

import blockir as bir
from blockir.errors import BlockirError
from blockir.ir import Program, parse_program
from blockir.ir.devices import device_kind
from blockir.ir.schema import find
from blockir.passes import AutoPlace, CostModel, run, simulate
from blockir.passes.auto_place import TaskGraph, heft, list_schedule, random_task_graph, refine
from blockir.passes.costs import SYNTHETIC, DeviceSpeed, Link, machine, op_key
from tests.passes.programs import RandomProgram, assert_same_results, runnable_programs
from tests.test_benchmarks import load_benchmark

GOLDEN = Path(__file__).parent / "golden" / "auto-place"
COSTS = GOLDEN / "costs.json"
PIPELINE = f"auto-place{{devices=cpu:0,cpu:1 costs={COSTS}}}"


def towers(n: int = 3, size: int = 128) -> Program:
    """Two independent towers of ``n`` matmuls from ``x``, joined by an add (the golden case two_towers)."""
    main = Program()
    b = main.global_block()
    b.create_var("x", shape=(-1, size), dtype="float32", need_check_feed=True)
    outs = []
    for t in "ab":
        cur = "x"
        for i in range(n):
            b.create_var(f"w{t}{i}", shape=(size, size), dtype="float32", persistable=True, is_parameter=True)
            b.create_var(f"h{t}{i}", shape=(-1, size), dtype="float32")
            b.append_op("mul", {"X": cur, "Y": f"w{t}{i}"}, {"Out": f"h{t}{i}"})
            cur = f"h{t}{i}"
        outs.append(cur)
    b.create_var("y", shape=(-1, size), dtype="float32")
    b.append_op("elementwise_add", {"X": outs[0], "Y": outs[1]}, {"Out": "y"})
    return main


def synthetic() -> CostModel:
    return CostModel.load(COSTS)


# -- HEFT on task graphs -------------------------------------------------------------------------------------


def test_heft_with_refinement_is_within_ten_percent_of_the_exhaustive_optimum_on_most_tiny_graphs() -> None:
    """As the pass chooses: the best of HEFT and each single device, then refined; scored in upward-rank order."""
    devices = ["d0", "d1", "d2"]
    close = total = 0
    for seed, (ccr, h) in enumerate(itertools.product((0.1, 1.0, 10.0), (0.1, 0.5, 1.0))):
        for k in range(3):
            graph = random_task_graph(random.Random(seed * 1000 + k), 7, devices, ccr, h)
            schedule = heft(graph, devices, margin=0.0)
            order = schedule.order

            def score(assignment: list[str]) -> float:
                return list_schedule(graph, assignment, order)  # noqa: B023 - used in this iteration only

            start = min([schedule.device, *([d] * len(graph) for d in devices)], key=score)
            ours = refine(start, [devices] * len(graph), score)[1]
            best = min(score(list(a)) for a in itertools.product(devices, repeat=len(graph)))
            assert ours >= best - 1e-12
            close += ours <= 1.1 * best
            total += 1
    assert close >= 0.9 * total, f"{close} of {total}"


def test_the_benchmarks_vectorized_exhaustive_search_scores_every_placement_as_list_schedule() -> None:
    bench = load_benchmark("bench_place")
    devices = ["d0", "d1", "d2"]
    graph = random_task_graph(random.Random(3), 6, devices, 1.0, 0.5)
    order = heft(graph, devices).order
    want = min(list_schedule(graph, list(a), order) for a in itertools.product(devices, repeat=len(graph)))
    assert bench.exhaustive(graph, devices, order) == pytest.approx(want)


def test_the_benchmarks_chart_draws_the_simulated_results(tmp_path: Path) -> None:
    """``bench_place.py --chart`` (docs/img/place_simulated.png): the comparison with the optimum per ratio and
    heterogeneity, and the large DAGs' one, as a PNG."""
    bench = load_benchmark("bench_place")
    optimum = bench.against_optimum(9, 4)
    assert set(optimum) == set(itertools.product(bench.CCRS, bench.HETEROGENEITIES))
    assert all(len(ratios) == 1 and ratios[0] >= 1 - 1e-12 for ratios in optimum.values())
    others = {n: (0.1, {"all on the fastest": 1.4, "round-robin": 1.6, "random": 1.5}) for n in bench.SIZES}
    bench.chart(tmp_path / "chart.png", optimum, others, 4)
    assert (tmp_path / "chart.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_heft_uses_idle_slots_and_the_margin_keeps_a_task_with_its_inputs() -> None:
    comm = lambda nbytes, a, b: 0.0 if a == b else nbytes  # noqa: E731
    # 0 -> 1 (long) and 0 -> 2 (short), 2 -> 3: 2 fits before 1 ends on the other device
    graph = TaskGraph(
        [{"a": 1.0, "b": 1.0}, {"a": 5.0, "b": 5.0}, {"a": 1.0, "b": 1.0}, {"a": 1.0, "b": 1.0}],
        [{1: 0.1, 2: 0.1}, {}, {3: 0.1}, {}],
        comm,
    )
    schedule = heft(graph, ["a", "b"])
    assert schedule.device[1] != schedule.device[2]
    assert schedule.makespan == pytest.approx(6.0)
    # a move saving 4% of the task's time stays home; one saving 10% moves
    near = TaskGraph([{"a": 1.0}, {"a": 1.0, "b": 0.96 - 0.01}], [{1: 0.01}, {}], comm)
    assert heft(near, ["a", "b"]).device[1] == "a"
    far = TaskGraph([{"a": 1.0}, {"a": 1.0, "b": 0.8}], [{1: 0.01}, {}], comm)
    assert heft(far, ["a", "b"]).device[1] == "b"


def test_heft_finds_the_earliest_idle_slot_of_a_device_by_its_gap_index() -> None:
    """A device's busy intervals and idle gaps (HEFT's index of them) give the earliest start at or after the
    ready time where a task overlaps no busy interval (a zero-length one: is not inside one), with touching
    intervals (integer times) among them; the gaps between intervals are really used."""
    from blockir.passes.auto_place import _Timeline

    rng = random.Random(0)
    inserted = 0
    for _ in range(40):
        timeline = _Timeline()
        for _ in range(60):
            ready = rng.choice([0.0, float(rng.randint(0, 30)), rng.uniform(0, 30)])
            w = rng.choice([0.0, 1.0, 2.0, rng.uniform(0, 3)])
            start = timeline.slot(ready, w)
            busy = list(zip(timeline.starts, timeline.ends))
            fits = [t for t in [ready, *timeline.ends] if t >= ready and all(t + w <= a or b <= t for a, b in busy)]
            assert start == min(fits), (ready, w, busy)
            inserted += start + w < timeline.end
            timeline.add(start, start + w)
        gaps = [(a, b) for a, b in zip(timeline.ends, timeline.starts[1:]) if b > a]
        assert list(zip(timeline.gap_starts[1:], timeline.gap_ends[1:])) == gaps
    assert inserted > 100


def test_a_task_graph_must_be_topologically_ordered() -> None:
    with pytest.raises(BlockirError, match="goes backwards"):
        TaskGraph([{"a": 1.0}, {"a": 1.0}], [{}, {0: 1.0}], lambda n, a, b: 0.0)


# -- the pass ----------------------------------------------------------------------------------------------------


def test_two_towers_split_over_two_devices_and_halve_the_predicted_time() -> None:
    result, report = run(towers(), PIPELINE)
    devices = {op.output_names()[0][:2]: op.device for op in result.global_block().ops}
    assert devices["ha"] != devices["hb"]
    record = report.record("auto-place")
    candidates = record.details["candidates"]
    assert candidates["chosen"] <= candidates["heft"] < 0.6 * min(candidates["cpu"], candidates["cpu:1"])
    assert record.details["schedule"].makespan == pytest.approx(candidates["chosen"])
    assert any(n.startswith("kept the HEFT placement") for n in record.notes)
    # the manual placement (tower a on cpu:0, b on cpu:1, the join on cpu:0) predicts no better
    manual = towers()
    for op in manual.global_block().ops:
        op.set_attr("op_device", "cpu:1" if op.output_names()[0].startswith("hb") else "cpu")
    assert simulate(result, synthetic()).makespan == pytest.approx(candidates["chosen"])  # the pass's prediction
    assert simulate(result, synthetic()).makespan <= simulate(manual, synthetic()).makespan + 1e-12


def test_a_chain_stays_on_one_device_without_copies() -> None:
    chain = parse_program(GOLDEN.joinpath("chain.before.txt").read_text())
    result, report = run(chain, PIPELINE + ",default-device-pipeline")
    assert {op.device for op in result.global_block().ops} == {"cpu"}
    assert not any(op.type == "memcpy" for op in result.global_block().ops)
    assert any(n.startswith("kept one device, cpu") for n in report.record("auto-place").notes)


def test_running_it_again_decides_its_own_ops_again_and_changes_nothing() -> None:
    once, _ = run(towers(), PIPELINE)
    twice, _ = run(once, PIPELINE)
    assert str(twice) == str(once)


def test_pins_are_kept_and_training_ops_follow_their_forward_op() -> None:
    program = parse_program(GOLDEN.joinpath("training_pinned.before.txt").read_text())
    pinned = {op.id: op.device for op in program.global_block().ops if op.device}
    result, _ = run(program, PIPELINE + ",place")
    ops = {op.id: op for op in result.global_block().ops}
    assert all(ops[i].device == d for i, d in pinned.items())
    assert all("op_placement" not in ops[i].attrs for i in pinned)
    for op in result.global_block().ops:
        if op.type == "mul_grad":
            forward = next(o for o in result.global_block().ops if o.type == "mul" and o.input("Y") == op.input("Y"))
            assert op.device == forward.device, str(op)


@settings(max_examples=25, deadline=None)
@given(runnable_programs(devices=("", "", "cpu:1"), max_ops=8))
def test_properties_over_random_programs(case: RandomProgram) -> None:
    """Every op on a device with a kernel, pins kept, same values as unplaced, never slower than one device."""
    placed, report = run(case.program, PIPELINE + ",default-device-pipeline")
    record = report.record("auto-place")
    for before, after in zip(
        case.program.global_block().ops, (o for o in placed.global_block().ops if o.type != "memcpy")
    ):
        schema = find(after.type)
        assert schema is None or device_kind(after.device) in schema.devices
        if before.device:
            assert after.device == before.device
    candidates = record.details.get("candidates")
    if candidates:
        assert candidates["chosen"] == pytest.approx(record.details["schedule"].makespan)
        assert candidates["chosen"] <= min(candidates["cpu"], candidates["cpu:1"], candidates["heft"]) + 1e-12
    assert_same_results(case.run(), case.run(placed))


def test_the_executor_places_by_a_cost_file_and_computes_the_same(tmp_path) -> None:
    program = towers(2, 32)
    scope = bir.Scope()
    rng = np.random.default_rng(0)
    for name in ("wa0", "wa1", "wb0", "wb1"):
        scope.set(name, rng.standard_normal((32, 32)).astype("float32"))
    x = rng.standard_normal((8, 32)).astype("float32")
    bs = bir.BuildStrategy()
    bs.auto_place, bs.place_devices, bs.cost_file = True, ["cpu:0", "cpu:1"], str(COSTS)
    with bir.Executor(build_strategy=bs) as exe:
        got = exe.run(program, feed={"x": x}, fetch_list=["y"], scope=scope)
        report = exe.pass_report(program, {"x": x}, ["y"])
        compiled = exe.compiled_program(program, {"x": x}, ["y"])
    assert ",auto-place{devices=cpu,cpu:1 costs=" in report.pipeline
    assert {op.device for op in compiled.global_block().ops if op.type == "mul"} == {"cpu", "cpu:1"}
    with bir.Executor() as exe:
        want = exe.run(program, feed={"x": x}, fetch_list=["y"], scope=scope)
    np.testing.assert_array_equal(got[0], want[0])


def test_without_a_cost_file_the_executor_calibrates_in_a_scratch_scope_and_caches_it(tmp_path, monkeypatch) -> None:
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))
    main, startup = Program(), Program()
    with bir.unique_name.guard(), bir.program_guard(main, startup):
        x = bir.data("x", shape=[-1, 8], dtype="float32")
        loss = bir.layers.mean(bir.layers.fc(x, size=4))
        bir.optimizer.SGD(learning_rate=0.5).minimize(loss)
    scope = bir.Scope()
    bir.Executor().run(startup, scope=scope)
    before = {n: np.array(scope.get(n)) for n in scope.names()}
    state = np.random.get_state()[1].copy()
    bs = bir.BuildStrategy()
    bs.auto_place, bs.place_devices = True, ["cpu:0", "cpu:1"]
    feed = {"x": np.ones((4, 8), "float32")}
    with bir.Executor(build_strategy=bs) as exe:
        exe.pass_report(main, feed, [loss])  # calibrates: no run yet
        after_calibration = {n: np.array(scope.get(n)) for n in scope.names()}
        cache = list((tmp_path / "blockir").glob("costs-*.json"))
        assert len(cache) == 1 and json.loads(cache[0].read_text())["machine"] == machine()
        stamp = cache[0].stat().st_mtime_ns
        exe.run(main, feed=feed, fetch_list=[loss], scope=scope)
        plans = len(exe._plans)
        exe.plan(main, feed, [loss])  # no values to calibrate with: the run's calibration, so the run's plan
        assert len(exe._plans) == plans
    for name, value in before.items():
        np.testing.assert_array_equal(after_calibration[name], value)
    assert (np.random.get_state()[1] == state).all()
    with bir.Executor(build_strategy=bs) as exe:  # a new executor: the cache already covers the program
        exe.run(main, feed=feed, fetch_list=[loss], scope=scope)
    assert cache[0].stat().st_mtime_ns == stamp


def test_calibration_does_not_borrow_a_value_of_another_shape() -> None:
    """A scope holding a variable of the program's name in another shape (another program's ``fc_0.w_0``, say, in
    the global scope) lends zeros of the declared shape instead: the calibration runs."""
    from blockir.runtime.calibration import calibrate

    main, startup = Program(), Program()
    with bir.unique_name.guard(), bir.program_guard(main, startup):
        x = bir.data("x", shape=[-1, 8], dtype="float32")
        loss = bir.layers.mean(bir.layers.fc(x, size=4))
    scope = bir.Scope()
    weight = next(p.name for p in main.all_parameters() if len(p.shape) == 2)
    scope.set(weight, np.ones((4, 8), "float32"))  # the declared shape is [8, 4]
    costs = calibrate(main, {"x": np.ones((2, 8), "float32")}, ["cpu:0"], fetch_list=[loss], scope=scope, runs=1)
    assert any(key.startswith("fc ") or key.startswith("mul ") for key in costs.ops)
    assert costs.programs == [f"{main.digest()}@2"]  # what it measured: cached_costs skips it next time
    assert np.array_equal(scope.get(weight), np.ones((4, 8), "float32"))  # untouched


# -- cost files and errors ---------------------------------------------------------------------------------------------


def test_a_cost_file_round_trips_and_fills_what_it_lacks(tmp_path) -> None:
    model = CostModel(machine(), 16, {"cpu": DeviceSpeed(1e9, 1e9, 1e-6)}, {"cpu->cpu": Link(1e-6, 1e9)})
    program = towers(1, 32)
    mul = program.global_block().ops[0]
    key = op_key("mul", model.shapes(mul), "cpu")
    assert key == "mul X=Bx32 Y=32x32 @cpu"
    model.ops[key] = {"seconds": 0.5, "work": model.work_seconds(mul, "cpu")}
    model.save(tmp_path / "c.json")
    loaded = CostModel.load(tmp_path / "c.json")
    assert loaded.op_seconds(mul, "cpu") == pytest.approx(0.5)
    assert loaded.op_seconds(mul, "cpu", batch=64) == pytest.approx(0.5 * 4, rel=0.3)  # scaled by the work
    add = program.global_block().ops[-1]
    loaded.op_seconds(add, "cpu")
    assert loaded.filled == {op_key("elementwise_add", loaded.shapes(add), "cpu")}
    assert "1 ops filled by the fallback" in loaded.describe()


@pytest.mark.parametrize(
    ("pipeline", "message"),
    [
        ("auto-place{devices=gpu:0}", "'gpu:0' is not a device"),
        ("auto-place", "needs option devices=VALUE"),
        ("auto-place{devices=cpu:0 costs=/nonexistent/costs.json}", "cost file /nonexistent/costs.json"),
    ],
)
def test_bad_options_name_what_is_wrong(pipeline: str, message: str) -> None:
    with pytest.raises(BlockirError, match=message.replace("(", r"\(")):
        run(towers(), pipeline)


def test_a_cost_file_of_another_machine_is_refused(tmp_path) -> None:
    data = json.loads(COSTS.read_text())
    data["machine"] = "riscv64 Linux, Some CPU, 64 cores"
    (tmp_path / "other.json").write_text(json.dumps(data))
    with pytest.raises(BlockirError, match=r"other.json was measured on another machine \(riscv64"):
        AutoPlace(devices=("cpu",), costs=str(tmp_path / "other.json")).model()
    (tmp_path / "bad.json").write_text('{"format": 1}')
    with pytest.raises(BlockirError, match="bad.json: not a blockir cost file"):
        CostModel.load(tmp_path / "bad.json")
    assert CostModel.load(COSTS).machine == SYNTHETIC


def test_a_pinned_op_on_a_device_without_its_kernel_is_an_error() -> None:
    program = towers()
    op = program.global_block().ops[0]
    op.set_attr("op_device", "cuda:0")
    schema = find("mul")
    assert schema is not None
    devices = schema.devices
    object.__setattr__(schema, "devices", frozenset({"cpu"}))  # as an op type with no CUDA kernel
    try:
        with pytest.raises(BlockirError, match="op type 'mul' has no kernel for cuda:0, where it is pinned"):
            run(program, PIPELINE)
    finally:
        object.__setattr__(schema, "devices", devices)


def test_auto_placement_with_data_parallelism_is_refused() -> None:
    bs = bir.BuildStrategy()
    bs.auto_place, bs.place_devices = True, ["cpu:0", "cpu:1"]
    with pytest.raises(BlockirError, match="auto_place cannot be combined with data parallelism"):
        bir.CompiledProgram(towers(), bs).with_data_parallel(loss_name="y", places=["cpu", "cpu"])
    bs.place_devices = []
    with pytest.raises(BlockirError, match="needs place_devices"):
        bs.placing()


def test_cuda_devices_use_an_assumed_gpu_without_a_calibration_on_one() -> None:
    result, report = run(towers(), f"auto-place{{devices=cpu:0,cuda:0 costs={COSTS}}},default-device-pipeline")
    ops = result.global_block().ops
    assert {op.device for op in ops if op.type == "mul"} == {"cuda:0"}  # far faster than this host, as assumed
    assert [op.attr("dst_device") for op in ops if op.type == "memcpy"] == ["cuda:0"]  # x in (nothing fetched)
    assert CostModel.load(COSTS).speed("cuda:0").flops > CostModel.load(COSTS).speed("cpu").flops


def test_a_calibration_on_a_gpu_times_each_op_to_its_end_there(monkeypatch: pytest.MonkeyPatch) -> None:
    """With the CuPy stand-in: the cuda ops are measured (the device synchronized after each), keyed @cuda."""
    from tests.runtime.fake_cupy import install

    fake = install(monkeypatch, gpus=1)
    program = towers(1, 16)
    scope = bir.Scope()
    for name in ("wa0", "wb0"):
        scope.set(name, np.eye(16, dtype="float32"))
    model = bir.runtime.calibrate(program, {"x": np.ones((4, 16), "float32")}, ["cpu:0", "cuda:0"], scope=scope, runs=2)
    assert {key.rsplit("@", 1)[1] for key in model.ops} == {"cpu", "cuda"}
    assert "mul X=Bx16 Y=16x16 @cuda" in model.ops and model.ops["mul X=Bx16 Y=16x16 @cuda"]["runs"] == 4
    assert any(call[0] in ("sync", "event_sync") for call in fake.calls)
    assert "cpu:0->cuda:0" in model.links  # the feed's copy onto the GPU, measured
    np.testing.assert_array_equal(scope.get("wa0"), np.eye(16, dtype="float32"))  # the scope is untouched


def test_host_ops_stay_on_the_host_when_the_devices_do_not_include_it() -> None:
    program, _ = run(towers(), "feed-fetch{feeds=x targets=y}")
    result, _ = run(program, f"auto-place{{devices=cpu:1,cpu:2 costs={COSTS}}},default-device-pipeline")
    ops = result.global_block().ops
    assert {op.device for op in ops if op.type in ("feed", "fetch")} == {"cpu"}
    assert {op.device for op in ops if op.type == "mul"} == {"cpu:1", "cpu:2"}
