"""The dataflow scheduler: same results as the sequential one, order within the dependencies, errors,
threads, traces."""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Iterator

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import blockir as bir
from blockir.errors import BlockirError, ExecutionError
from blockir.ir import Program
from blockir.ir.attrs import AttrType
from blockir.ir.schema import AttrDef, OpSchema, Slot
from blockir.passes import dependency_graph
from tests.passes.programs import RandomProgram, assert_same_results, runnable_programs
from tests.registries import ops_registered
from tests.runtime.test_fusion import unfused

DEVICES = ("", "cpu", "cpu:1", "cpu:2", "cpu:3")


NAPPED: list[str] = []  # the outputs of the sched_nap ops run, in the order they started (tests clear it)
FAILED = threading.Event()  # set by a failing sched_nap just before it raises (tests clear it)


def _nap(ctx, x):
    """Out = X + 1 after sleeping ``ms``; first waits for FAILED when ``gated``; raises when ``fail`` is set."""
    NAPPED.append(ctx.op_text.split(" = ")[0].lstrip("%"))
    if ctx.attrs["gated"]:
        FAILED.wait(10)  # bounded: a run that never fails ends anyway
    time.sleep(ctx.attrs["ms"] / 1000)
    if ctx.attrs["fail"]:
        FAILED.set()
        raise ValueError("injected failure")
    return x + 1


@pytest.fixture(scope="module", autouse=True)
def _ops() -> Iterator[None]:
    attrs = (AttrDef("ms", AttrType.FLOAT, 0.0), AttrDef("fail", AttrType.BOOLEAN, False))
    gated = AttrDef("gated", AttrType.BOOLEAN, False)
    with ops_registered(OpSchema("sched_nap", (Slot("X"),), (Slot("Out"),), (*attrs, gated), kernel=_nap)):
        yield


def two_branches(size: int = 64) -> tuple[Program, Program, bir.ir.Variable]:
    """The issue's example: two fc branches on cpu:0 and cpu:1, concatenated."""
    main, startup = Program(), Program()
    main.random_seed = startup.random_seed = 7
    with bir.program_guard(main, startup):
        x = bir.data("x", shape=[-1, size], dtype="float32")
        with bir.device_guard("cpu:0"):
            a = bir.layers.fc(x, 2 * size, act="relu")
        with bir.device_guard("cpu:1"):
            b = bir.layers.fc(x, 2 * size, act="relu")
        out = bir.layers.concat([a, b], axis=1)
    return main, startup, out


def wide(branches: int, depth: int, ms: float, fail_at: tuple[int, int] | None = None) -> Program:
    """``branches`` chains of ``depth`` sched_nap ops on x, one chain per device cpu:1..cpu:3 round-robin.
    With ``fail_at``, the ops past the first of each chain on the other devices wait for the failure."""
    program = Program()
    block = program.global_block()
    block.create_var("x", shape=(2,), dtype="float32", need_check_feed=True)
    for b in range(branches):
        prev = "x"
        for d in range(depth):
            out = f"b{b}_{d}"
            block.create_var(out, shape=(2,), dtype="float32")
            block.append_op(
                "sched_nap",
                {"X": prev},
                {"Out": out},
                {
                    "ms": ms,
                    "fail": fail_at == (b, d),
                    "gated": fail_at is not None and d > 0 and b % 3 != fail_at[0] % 3,
                    "op_device": f"cpu:{1 + b % 3}",
                },
            )
            prev = out
    return program


def test_two_branches_on_two_devices_equal_the_sequential_run_and_use_a_worker(tmp_path):
    main, startup, out = two_branches()
    xb = np.random.default_rng(0).normal(size=(8, 64)).astype("float32")
    results = {}
    for scheduler in ("sequential", "dataflow"):
        with bir.Executor("cpu", scheduler=scheduler, num_threads=2) as exe:
            scope = bir.Scope()
            exe.run(startup, scope=scope)
            (results[scheduler],) = exe.run(
                main, feed={"x": xb}, fetch_list=[out], scope=scope, trace=tmp_path / f"{scheduler}.json"
            )
    np.testing.assert_array_equal(results["dataflow"], results["sequential"])
    trace = json.loads((tmp_path / "dataflow.json").read_text())["traceEvents"]
    ops = [e for e in trace if e["ph"] == "X"]
    threads = {e["args"]["thread"] for e in ops}
    assert threading.current_thread().name in threads and any(t.startswith("blockir-worker-") for t in threads)
    names = {e["pid"]: e["args"]["name"] for e in trace if e["name"] == "process_name"}
    streams = {e["tid"]: e["args"]["name"] for e in trace if e["name"] == "thread_name"}
    assert set(names.values()) == {"cpu", "cpu:1"}
    assert {streams[e["tid"]] for e in ops} == {"cpu/compute0", "cpu/copy", "cpu:1/compute0", "cpu:1/copy"}
    for e in ops:  # every op on its device's process, its stream's thread; id and text in args
        assert streams[e["tid"]].startswith(names[e["pid"]] + "/")
        assert isinstance(e["args"]["id"], int) and e["name"] in e["args"]["op"]
    flows = [e for e in trace if e["ph"] in ("s", "f")]
    copies = [e for e in ops if e["name"] == "memcpy"]
    assert len(flows) == 2 * sum(1 for e in copies if "memcpy(X=%fc_1" in e["args"]["op"])  # x is fed: no producer
    assert all(e["ph"] == "X" or e["ph"] in ("M", "s", "f") for e in trace)


@settings(max_examples=60)
@given(rp=runnable_programs(devices=DEVICES, max_ops=12), threads=st.sampled_from([None, 1, 2]))
def test_random_placed_programs_equal_the_sequential_run_and_respect_dependencies(
    rp: RandomProgram, threads, tmp_path_factory
):
    placed, _ = bir.passes.run(rp.program, "place,insert-copies,streams")
    expected = rp.run(placed, bir.Executor("cpu", scheduler="sequential", build_strategy=unfused()))
    trace = tmp_path_factory.mktemp("trace") / "run.json"
    # unfused: one step per op of the placed program
    with bir.Executor("cpu", scheduler="dataflow", num_threads=threads, build_strategy=unfused()) as exe:
        for _ in range(3):
            assert_same_results(rp.run(placed, exe), expected)
        rp.run(placed, exe, trace=trace)
    spans = {
        e["args"]["step"]: (e["ts"], e["ts"] + e["dur"])
        for e in json.loads(trace.read_text())["traceEvents"]
        if e["ph"] == "X"
    }
    assert sorted(spans) == list(range(len(placed.global_block().ops)))
    for i, j in dependency_graph(placed.global_block()).edges:
        assert spans[i][1] <= spans[j][0] + 1e-3, (i, j)  # microseconds, rounded


def test_a_failing_kernel_stops_every_lane_at_its_next_step_every_time_and_the_executor_runs_again():
    program = wide(branches=6, depth=6, ms=5, fail_at=(4, 2))
    good = wide(branches=6, depth=6, ms=0)
    feed = {"x": np.zeros(2, "float32")}
    fetch = [f"b{b}_5" for b in range(6)]
    with bir.Executor("cpu", num_threads=3) as exe:
        for _ in range(5):
            NAPPED.clear()
            FAILED.clear()
            with pytest.raises(ExecutionError, match=r"ValueError: injected failure\n  in op: .*sched_nap"):
                exe.run(program, feed=feed, fetch_list=fetch)
            # the chains on cpu:1 and cpu:3 wait for the failure in their second op: a lane finishes the op it
            # is in and stops, the rest of their 24 ops never start
            others = {name for name in NAPPED if int(name[1]) % 3 != 1}
            assert others <= {"b0_0", "b0_1", "b2_0", "b2_1"}, NAPPED
            assert sum(t.name.startswith("blockir-worker-") and t.is_alive() for t in threading.enumerate()) == 3
            fetched = exe.run(good, feed=feed, fetch_list=fetch)
            np.testing.assert_array_equal(fetched, np.full((6, 2), 6, "float32"))


def test_a_failure_on_the_calling_thread_drains_the_workers():
    program = wide(branches=3, depth=4, ms=2, fail_at=(0, 1))
    program.global_block().ops[1].set_attr("op_device", "cpu")  # branch 0's second op runs on the host
    with bir.Executor("cpu") as exe:
        for _ in range(3):
            with pytest.raises(ExecutionError, match="injected failure"):
                exe.run(program, feed={"x": np.zeros(2, "float32")}, fetch_list=["b1_3", "b2_3"])
            workers = exe.plan(program, ["x"], ["b1_3", "b2_3"]).schedule.workers
            assert sum(t.name.startswith("blockir-worker-") for t in threading.enumerate()) == workers
        (b0_3,) = exe.run(wide(branches=3, depth=4, ms=0), feed={"x": np.zeros(2, "float32")}, fetch_list=["b0_3"])
        np.testing.assert_array_equal(b0_3, [4, 4])


def test_num_threads_caps_the_workers_and_a_lane_keeps_its_streams_in_order():
    program = wide(branches=6, depth=3, ms=0)
    with bir.Executor("cpu", num_threads=2) as exe:
        plan = exe.plan(program, ["x"], [f"b{b}_2" for b in range(6)])
        assert plan.schedule.workers == 2
        for lane in plan.schedule.lanes:
            assert list(lane) == sorted(lane)
        np.testing.assert_array_equal(
            exe.run(program, feed={"x": np.ones(2, "float32")}, fetch_list=["b5_2"])[0], [4, 4]
        )
    with bir.Executor("cpu") as exe:
        assert exe.plan(program, ["x"], ["b0_2"]).schedule.workers == 6  # one per stream: cpu:1..3 compute, copy


def test_one_stream_runs_in_program_order_without_a_schedule():
    program = wide(branches=2, depth=2, ms=0)
    for op in program.global_block().ops:
        op.set_attr("op_device", "cpu")
    with bir.Executor("cpu") as exe:
        assert exe.plan(program, ["x"], ["b0_1"]).schedule is None


def test_the_sequential_scheduler_runs_the_steps_as_code_and_an_error_names_its_op(tmp_path):
    """Without a schedule the steps run as straight-line code made for the plan (compile_steps): the same
    values, the kernels wrapped by the tracer when the run is traced, a kernel's error naming the op that
    raised it, not an op before or after it."""
    block = (program := Program()).global_block()
    for name in ("x", "a", "b", "c"):
        block.create_var(name, shape=(2,), dtype="float32")
    block.append_op("scale", {"X": "x"}, {"Out": "a"}, {"scale": 2.0})
    failing = block.append_op("rt_fail", {"X": "a"}, {"Out": "b"})
    block.append_op("scale", {"X": "b"}, {"Out": "c"}, {"scale": 3.0})
    feed = {"x": np.ones(2, "float32")}
    with bir.Executor("cpu") as exe:
        assert exe.plan(program, ["x"], ["c"]).schedule is None
        with pytest.raises(ExecutionError, match=r"ValueError: boom\n  in op: .*\n  inputs: X=a: float32\[2\]") as info:
            exe.run(program, feed=feed, fetch_list=["c"])
        assert str(info.value).splitlines()[1] == f"  in op: {failing}"
        block.remove_op(failing)
        block.insert_op(1, "scale", {"X": "a"}, {"Out": "b"}, {"scale": 1.0})
        (c,) = exe.run(program, feed=feed, fetch_list=["c"], trace=tmp_path / "t.json")
        np.testing.assert_array_equal(c, [6, 6])
        np.testing.assert_array_equal(exe.run(program, feed=feed, fetch_list=["c"])[0], [6, 6])
    events = json.loads((tmp_path / "t.json").read_text())["traceEvents"]
    assert [e["name"] for e in events if e.get("ph") == "X"] == ["scale", "scale", "scale"]


def test_thousands_of_small_runs_leak_no_threads():
    main, startup, out = two_branches(size=4)
    xb = np.ones((2, 4), "float32")
    before = threading.active_count()
    for _ in range(3):
        with bir.Executor("cpu") as exe:
            scope = bir.Scope()
            exe.run(startup, scope=scope)
            (first,) = exe.run(main, feed={"x": xb}, fetch_list=[out], scope=scope)
            for _ in range(700):
                (again,) = exe.run(main, feed={"x": xb}, fetch_list=[out], scope=scope)
            np.testing.assert_array_equal(again, first)
            assert threading.active_count() == before + exe.plan(main, ["x"], [out]).schedule.workers
    assert threading.active_count() == before


def test_closed_executors_refuse_to_run_and_bad_options_are_errors():
    exe = bir.Executor("cpu")
    exe.close()
    exe.close()
    with pytest.raises(BlockirError, match="closed"):
        exe.run(wide(1, 1, 0), feed={"x": np.ones(2, "float32")})
    with pytest.raises(BlockirError, match="scheduler must be one of sequential, dataflow, got 'eager'"):
        bir.Executor("cpu", scheduler="eager")
    with pytest.raises(BlockirError, match="num_threads must be a positive int or None, got 0"):
        bir.Executor("cpu", num_threads=0)


def test_an_unavailable_device_is_refused_before_anything_runs():
    program = wide(branches=2, depth=1, ms=0)
    program.global_block().ops[1].set_attr("op_device", "cuda:7")
    with (
        bir.Executor("cpu") as exe,
        pytest.raises(
            BlockirError,
            match=r"device cuda:7 is not available on this machine \(devices available: cpu, "
            r"cpu:N \(virtual, any N\).*\): .*sched_nap",
        ),
    ):
        exe.run(program, feed={"x": np.ones(2, "float32")}, fetch_list=["b0_0"])


def test_compute_streams_run_independent_host_branches_on_workers_and_streamed_programs_keep_theirs():
    program = wide(branches=2, depth=3, ms=0)
    for op in program.global_block().ops:
        op.set_attr("op_device", "cpu")
    feed, fetch = {"x": np.ones(2, "float32")}, ["b0_2", "b1_2"]
    with bir.Executor("cpu", compute_streams=2) as exe:
        plan = exe.plan(program, ["x"], fetch)
        assert {str(s) for s in plan.schedule.streams} == {"cpu/compute0", "cpu/compute1"}
        assert plan.schedule.workers == 1
        np.testing.assert_array_equal(exe.run(program, feed=feed, fetch_list=fetch), np.full((2, 2), 4))
    streamed, _ = bir.passes.run(program, "place,insert-copies,streams{compute=2}")
    with bir.Executor("cpu") as exe:  # compute_streams=1, but the program has its streams already
        assert exe.plan(streamed, ["x"], fetch).schedule.workers == 1
    with pytest.raises(BlockirError, match="compute must be an int >= 1, got 0"):
        bir.Executor("cpu", compute_streams=0)
