"""The ``streams`` pass and ``stream_waits``: naming and rules (copies, host ops, round-robin branches), options,
idempotence, the report, soundness and minimality of the waits, and unchanged results on random programs."""

from __future__ import annotations

import networkx as nx
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from blockir import Executor
from blockir.cli import main
from blockir.errors import BlockirError
from blockir.ir import Program, parse_program
from blockir.passes import Streams, dependency_graph, op_stream, registered_passes, run, stream_waits
from blockir.passes.streams import copy_stream
from tests.passes.golden_cases import GOLDEN
from tests.passes.programs import CHAIN, RandomProgram, assert_same_results, runnable_programs
from tests.passes.test_copies import mlp, on_one_device

# feed x, mul, elementwise_add, fetch y
FEEDS_AND_FETCHES = (GOLDEN / "insert-copies" / "feeds_and_fetches.before.txt").read_text()

# a1 -> a2 and b1 -> b2, interleaved, joined by c; e reads x alone.
BRANCHES = """program version=0
block 0 parent=-1 {
  var %x : lod_tensor<float32>[2, 2] need_check_feed
  var %a1 : lod_tensor<float32>[2, 2]
  var %b1 : lod_tensor<float32>[2, 2]
  var %a2 : lod_tensor<float32>[2, 2]
  var %b2 : lod_tensor<float32>[2, 2]
  var %c : lod_tensor<float32>[2, 2]
  var %e : lod_tensor<float32>[2, 2]
  %a1 = relu(X=%x)
  %b1 = sigmoid(X=%x)
  %a2 = tanh(X=%a1)
  %b2 = square(X=%b1)
  %c = elementwise_add(X=%a2, Y=%b2)
  %e = relu(X=%x)
}"""


def streams_of(program: Program, block: int = 0) -> list[str]:
    return [op.attr("op_stream") for op in program.block(block).ops]


def test_mlp_with_the_hidden_layer_on_cpu1_copies_on_copy_streams_and_computes_on_compute0() -> None:
    result, report = run(mlp()[0], "place,insert-copies,streams")
    by_copy = {op.output("Out")[0]: op.attr("op_stream") for op in result.global_block().ops if op.type == "memcpy"}
    assert by_copy == {
        "fc_0.tmp_2@cpu:1": "cpu:1/copy",
        "fc_1.tmp_2@cpu": "cpu/copy",
        "fc_1.tmp_2@GRAD@cpu:1": "cpu:1/copy",
        "fc_0.tmp_2@GRAD@cpu": "cpu/copy",
        "learning_rate_0@cpu:1": "cpu:1/copy",
    }
    for op in result.global_block().ops:
        if op.type != "memcpy":
            assert op.attr("op_stream") == f"{op.device}/compute0", str(op)
            assert op.device in ("cpu", "cpu:1")
        assert op_stream(op, op.device) == op.attr("op_stream")
        assert list(op.attrs)[-1] == "op_device"  # still the last attribute, as the text form prints it
    record = report.record("streams")
    assert record.notes == [
        "block 0: 34 ops on 4 streams (cpu/compute0, cpu/copy, cpu:1/compute0, cpu:1/copy), 9 waits"
    ]
    waits = record.details["waits"]
    assert list(waits) == [0] and waits[0] == stream_waits(result.global_block(), streams_of(result))
    ops = result.global_block().ops
    # the first copy waits for the relu it copies; the hidden layer's mul waits for the copy
    assert ops[3].type == "memcpy" and waits[0][3] == (2,) and waits[0][4] == (3,)


def test_a_cuda_program_compiled_without_a_gpu_copies_both_ways_on_the_cuda_copy_stream() -> None:
    result, report = run(parse_program(FEEDS_AND_FETCHES), "place{default=cuda:0},insert-copies,streams")
    assert [(op.type, op.attr("op_stream")) for op in result.global_block().ops] == [
        ("feed", "cpu/compute0"),
        ("memcpy", "cuda:0/copy"),  # host to device
        ("mul", "cuda:0/compute0"),
        ("elementwise_add", "cuda:0/compute0"),
        ("memcpy", "cuda:0/copy"),  # device to host
        ("fetch", "cpu/compute0"),
    ]
    assert report.record("streams").details["waits"] == {0: {1: (0,), 2: (1,), 4: (3,), 5: (4,)}}


@pytest.mark.parametrize(
    "src, dst, stream",
    [
        ("cpu", "cuda:1", "cuda:1/copy"),
        ("cuda:0", "cpu:2", "cuda:0/copy"),
        ("cuda:1", "cuda:0", "cuda:0/copy"),
        ("cpu:1", "cpu", "cpu/copy"),
        ("cpu", "cpu:3", "cpu:3/copy"),
    ],
)
def test_a_copy_runs_on_the_copy_stream_of_its_cuda_end_else_of_its_destination(
    src: str, dst: str, stream: str
) -> None:
    assert copy_stream(src, dst) == stream


def test_without_copy_streams_copies_run_on_compute_streams_and_host_ops_stay_on_the_host_stream() -> None:
    pipeline = "place{default=cpu:1},insert-copies,streams{compute=3 copy=false}"
    result, _ = run(parse_program(FEEDS_AND_FETCHES), pipeline)
    assert [(op.type, op.attr("op_stream")) for op in result.global_block().ops] == [
        ("feed", "cpu/compute0"),
        ("memcpy", "cpu:1/compute0"),
        ("mul", "cpu:1/compute0"),
        ("elementwise_add", "cpu:1/compute0"),
        ("memcpy", "cpu/compute0"),
        ("fetch", "cpu/compute0"),
    ]
    program = parse_program(FEEDS_AND_FETCHES)
    program.global_block().ops[0].set_attr("op_device", "cpu:2")  # place keeps feed on the host anyway
    Streams(compute=4).run(program)
    assert streams_of(program)[0] == "cpu/compute0"


def test_two_compute_streams_take_independent_branches_and_keep_chains_together() -> None:
    program = parse_program(BRANCHES)
    result, report = run(program, "streams{compute=2}")
    assert streams_of(result) == [
        "cpu/compute0",
        "cpu/compute1",
        "cpu/compute0",
        "cpu/compute1",
        "cpu/compute1",  # the join continues its latest predecessor's stream
        "cpu/compute0",
    ]  # a new branch: the next stream round-robin
    assert report.record("streams").details["waits"] == {0: {4: (2,)}}  # c waits for a2 on the other stream
    assert streams_of(run(program, "streams{compute=3}")[0]) == [
        "cpu/compute0",
        "cpu/compute1",
        "cpu/compute0",
        "cpu/compute1",
        "cpu/compute1",
        "cpu/compute2",
    ]
    assert set(streams_of(run(program, "streams")[0])) == {"cpu/compute0"}


def test_an_op_whose_predecessor_is_no_longer_last_on_its_stream_starts_a_new_one() -> None:
    program = parse_program(CHAIN)  # h = relu(x); y = tanh(h); z = sigmoid(x)
    ops = program.global_block().ops
    program.global_block().reorder_ops([ops[0], ops[2], ops[1]])  # h, z, y: z breaks the chain h -> y on compute0
    Streams(compute=2).run(program)
    assert streams_of(program) == ["cpu/compute0", "cpu/compute1", "cpu/compute0"]
    in_order = parse_program(CHAIN)
    Streams(compute=2).run(in_order)
    assert streams_of(in_order) == ["cpu/compute0", "cpu/compute0", "cpu/compute1"]


def test_unplaced_ops_go_where_place_would_put_them() -> None:
    program = parse_program(CHAIN)
    program.device = "cuda:1"
    ops = program.global_block().ops
    ops[2].set_attr("op_device", "cpu:2")
    assert Streams().run(program)
    assert streams_of(program) == ["cuda:1/compute0", "cuda:1/compute0", "cpu:2/compute0"]
    assert [op.device for op in ops] == ["", "", "cpu:2"]  # the pass only sets streams
    ops[0].remove_attr("op_stream")
    assert op_stream(ops[0], "cuda:1") == "cuda:1/compute0"


def test_sub_block_ops_get_streams_and_waits_per_block() -> None:
    program = parse_program((GOLDEN / "streams" / "sub_blocks.before.txt").read_text())  # block 1 on cpu:3
    result, report = run(program, "place,insert-copies,streams")
    assert streams_of(result, 1) == ["cpu:3/copy", "cpu:3/compute0", "cpu:3/compute0", "cpu/copy"]
    record = report.record("streams")
    assert record.details["waits"] == {0: {}, 1: {1: (0,), 3: (2,)}}
    assert record.notes == [
        "block 0: 1 ops on 1 streams (cpu/compute0), 0 waits",
        "block 1: 4 ops on 3 streams (cpu/copy, cpu:3/compute0, cpu:3/copy), 2 waits",
    ]


def test_running_twice_changes_nothing_and_other_options_reassign() -> None:
    once, _ = run(mlp()[0], "place,insert-copies,streams{compute=2}")
    text = str(once)
    twice, report = run(once, "streams{compute=2}")
    assert str(twice) == text
    record = report.record("streams")
    assert not record.changed and not record.returned
    single, report = run(once, "streams")
    assert report.record("streams").returned and report.record("streams").changed
    assert str(run(single, "streams{compute=2}")[0]) == text


@pytest.mark.parametrize(
    "options, message",
    [
        ({"compute": 0}, "the streams option compute must be an int >= 1, got 0"),
        ({"compute": -2}, "the streams option compute must be an int >= 1, got -2"),
        ({"compute": True}, "the streams option compute must be an int >= 1, got True"),
        ({"copy": 1}, "the streams option copy must be true or false, got 1"),
    ],
)
def test_bad_option_values_are_errors_naming_them(options: dict[str, object], message: str) -> None:
    with pytest.raises(BlockirError, match=message):
        Streams(**options)  # type: ignore[arg-type]


@pytest.mark.parametrize(
    "pipeline, message",
    [
        ("streams{compute=0}", "the streams option compute must be an int >= 1, got 0"),
        ("streams{compute=two}", "option 'compute' of pass 'streams' expects an int, got 'two'"),
        ("streams{copy=yes}", "option 'copy' of pass 'streams' expects true or false, got 'yes'"),
    ],
)
def test_bad_option_values_in_pipelines_are_errors_naming_them(pipeline: str, message: str) -> None:
    with pytest.raises(BlockirError, match=message):
        run(parse_program(CHAIN), pipeline)


def test_blockir_passes_lists_streams_with_its_options(capsys: pytest.CaptureFixture[str]) -> None:
    assert registered_passes()["streams"] is Streams
    assert main(["passes"]) == 0
    lines = capsys.readouterr().out.splitlines()
    at = lines.index(f"streams: {Streams.summary}")
    assert [line.split()[:3] for line in lines[at + 1 : at + 3]] == [["compute", "int", "1"], ["copy", "bool", "true"]]


# -- stream_waits ----------------------------------------------------------------------------------


def test_stream_waits_drops_waits_implied_by_stream_order_and_other_waits() -> None:
    graph = nx.DiGraph([(0, 2), (1, 2), (0, 3), (1, 4), (2, 4)])
    # streams: 0, 1 on A; 2, 3 on B; 4 on C.  3 needs 0, but 2 (before it on B) already waited for 1 after 0.
    # 4 needs 1 and 2: waiting for 2 implies 1.
    assert stream_waits(None, ["A", "A", "B", "B", "C"], graph) == {2: (1,), 4: (2,)}
    assert stream_waits(None, ["A", "B", "C", "D", "E"], graph) == {2: (0, 1), 3: (0,), 4: (2,)}
    assert stream_waits(None, ["A"] * 5, graph) == {}


def test_stream_waits_defaults_to_the_dependency_graph_of_the_block() -> None:
    block = parse_program(BRANCHES).global_block()
    streams = ["s0", "s1", "s0", "s1", "s1", "s0"]
    assert stream_waits(block, streams) == stream_waits(None, streams, dependency_graph(block)) == {4: (2,)}


def test_stream_waits_errors() -> None:
    block = parse_program(CHAIN).global_block()
    with pytest.raises(BlockirError, match="stream_waits: 2 streams for the 3 ops of block 0"):
        stream_waits(block, ["A", "B"])
    with pytest.raises(BlockirError, match="stream_waits: 1 streams for the 2 ops of the graph"):
        stream_waits(None, ["A"], nx.DiGraph([(0, 1)]))
    with pytest.raises(BlockirError, match="the dependency 2 -> 1 of the graph goes against program order"):
        stream_waits(None, ["A", "B", "C"], nx.DiGraph([(0, 2), (2, 1)]))


def _unimplied(graph: nx.DiGraph, streams: list[str], waits: dict[int, tuple[int, ...]]) -> list[tuple[int, int]]:
    """The edges between two streams that the streams' program order and the waits do not imply."""
    order = nx.DiGraph()
    order.add_nodes_from(range(len(streams)))
    last: dict[str, int] = {}
    for j, stream in enumerate(streams):
        if stream in last:
            order.add_edge(last[stream], j)
        last[stream] = j
    order.add_edges_from((i, j) for j, waited in waits.items() for i in waited)
    return [(i, j) for i, j in graph.edges if streams[i] != streams[j] and not nx.has_path(order, i, j)]


@st.composite
def dags_on_streams(draw: st.DrawFn) -> tuple[nx.DiGraph, list[str]]:
    n = draw(st.integers(1, 12))
    graph = nx.DiGraph()
    graph.add_nodes_from(range(n))
    pairs = [(i, j) for j in range(n) for i in range(j)]
    if pairs:
        graph.add_edges_from(draw(st.lists(st.sampled_from(pairs), max_size=3 * n, unique=True)))
    streams = draw(
        st.lists(
            st.sampled_from(["cpu/compute0", "cpu/compute1", "cpu/copy", "cpu:1/compute0", "cuda:0/copy"]),
            min_size=n,
            max_size=n,
        )
    )
    return graph, streams


@settings(max_examples=300)
@given(dags_on_streams())
def test_stream_waits_are_sound_and_minimal(case: tuple[nx.DiGraph, list[str]]) -> None:
    graph, streams = case
    waits = stream_waits(None, streams, graph)
    assert _unimplied(graph, streams, waits) == []  # sound: every edge between streams is kept
    for j, waited in waits.items():
        assert list(waited) == sorted(set(waited)) and all(streams[i] != streams[j] for i in waited)
        for i in waited:  # minimal: without any one wait, its own edge is lost
            assert (i, j) in graph.edges
            fewer = {**waits, j: tuple(k for k in waited if k != i)}
            assert (i, j) in _unimplied(graph, streams, fewer)


# -- results ---------------------------------------------------------------------------------------


@settings(max_examples=150)
@given(runnable_programs(devices=("", "cpu", "cpu:1", "cpu:2")), st.integers(1, 3), st.booleans())
def test_streams_change_no_result_and_record_sound_waits(rp: RandomProgram, compute: int, copy: bool) -> None:
    placed, _ = run(rp.program, "place,insert-copies")
    result, report = run(placed, [Streams(compute=compute, copy=copy)])
    block = result.global_block()
    streams = streams_of(result)
    assert all(stream.split("/")[0] in ("cpu", "cpu:1", "cpu:2") for stream in streams)
    waits = report.record("streams").details["waits"][0]
    assert _unimplied(dependency_graph(block), streams, waits) == []
    assert not Streams(compute=compute, copy=copy).run(result)
    with Executor("cpu", scheduler="sequential") as sequential:  # runs in program order, whatever the streams
        assert_same_results(rp.run(result, sequential), rp.run(on_one_device(rp.program), sequential))
