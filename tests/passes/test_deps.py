"""dependency_graph and the deps pass: RAW/WAR/WAW edges, in-place updates, sub-blocks, reordering."""

from __future__ import annotations

import random
import re

import networkx as nx
import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

import blockir as bir
from blockir.ir import AttrType, Program, parse_program
from blockir.passes import Deps, dependency_graph, run
from tests.passes.programs import RandomProgram, assert_same_results, runnable_programs

HAZARDS = """
program version=0
block 0 parent=-1 {
  var %x : lod_tensor<float32>[2, 2] need_check_feed
  var %t : lod_tensor<float32>[2, 2]
  var %y : lod_tensor<float32>[2, 2]
  %t = relu(X=%x)
  %y = scale(X=%t) {scale=2.0}
  %t = tanh(X=%x)
  %y = elementwise_add(X=%t, Y=%y)
}
"""


def edges(graph: nx.DiGraph) -> dict[tuple[int, int], list[tuple[str, str]]]:
    return {(a, b): sorted(deps) for a, b, deps in graph.edges(data="deps")}


def test_raw_war_waw_edges_name_their_variables() -> None:
    graph = dependency_graph(parse_program(HAZARDS).global_block())
    assert edges(graph) == {
        (0, 1): [("RAW", "t")],
        (1, 2): [("WAR", "t")],
        (0, 2): [("WAW", "t")],
        (2, 3): [("RAW", "t")],
        (1, 3): [("RAW", "y"), ("WAW", "y")],
    }
    assert graph.edges[1, 3]["kind"] == "RAW" and graph.edges[1, 3]["vars"] == ["y"]
    assert graph.edges[1, 2]["kind"] == "WAR"
    assert [graph.nodes[i]["op"].type for i in graph] == ["relu", "scale", "tanh", "elementwise_add"]


def test_an_order_breaking_a_war_edge_computes_something_else() -> None:
    program = parse_program(HAZARDS)
    rp = RandomProgram(program, {"x": np.array([[1, -2], [3, -4]], "float32")}, {}, ["y"])
    reordered = program.clone()
    ops = reordered.global_block().ops
    reordered.global_block().reorder_ops([ops[0], ops[2], ops[1], ops[3]])  # scale after t was overwritten
    assert (1, 2) in dependency_graph(program.global_block()).edges
    (good,), _ = rp.run()
    (bad,), _ = rp.run(reordered)
    assert not np.array_equal(good, bad)


def test_in_place_updates_are_writes() -> None:
    program = parse_program("""
program version=0
block 0 parent=-1 {
  var %x : lod_tensor<float32>[2, 2] need_check_feed
  var %w : lod_tensor<float32>[2, 2] persistable parameter
  var %g : lod_tensor<float32>[2, 2]
  var %lr : lod_tensor<float32>[1] persistable
  var %h : lod_tensor<float32>[2, 2]
  var %h2 : lod_tensor<float32>[2, 2]
  %h = mul(X=%x, Y=%w)
  %g = scale(X=%h) {scale=0.5}
  (ParamOut=%w) = sgd(Param=%w, Grad=%g, LearningRate=%lr)
  %h2 = mul(X=%x, Y=%w)
}
""")
    assert edges(dependency_graph(program.global_block())) == {
        (0, 1): [("RAW", "h")],
        (0, 2): [("WAR", "w")],  # the first mul reads w before sgd updates it
        (1, 2): [("RAW", "g")],
        (2, 3): [("RAW", "w")],  # the second mul reads the updated w
    }


def test_sub_block_accesses_belong_to_the_owning_op() -> None:
    program = Program()
    outer = program.global_block()
    for name in ("a", "b", "c"):
        outer.create_var(name, shape=(2,), dtype="float32")
    outer.append_op("fill_constant", outputs={"Out": "a"}, attrs={"shape": [2], "dtype": 5, "value": 1.0})
    body = program.create_block()
    body.create_var("local", shape=(2,), dtype="float32")
    body.append_op("relu", {"X": "a"}, {"Out": "local"}, infer=False)
    body.append_op("relu", {"X": "local"}, {"Out": "b"}, infer=False)
    program.rollback()
    owner = outer.append_op("test_loop", attrs={"sub_block": body.idx}, infer=False)
    owner.set_attr("sub_block", body.idx, AttrType.BLOCK)
    outer.append_op("relu", {"X": "b"}, {"Out": "c"}, infer=False)
    assert edges(dependency_graph(outer)) == {(0, 1): [("RAW", "a")], (1, 2): [("RAW", "b")]}
    assert edges(dependency_graph(body)) == {(0, 1): [("RAW", "local")]}


def test_placeholder_outputs_make_no_edges() -> None:
    program = parse_program("""
program version=0
block 0 parent=-1 {
  var %x : lod_tensor<float32>[2] need_check_feed
  var %o : lod_tensor<float32>[2]
  var %o2 : lod_tensor<float32>[2]
  (Out=%o, Extra=%@EMPTY@) = test_op(X=%x)
  (Out=%o2, Extra=%@EMPTY@) = test_op(X=%x)
}
""")
    assert dependency_graph(program.global_block()).number_of_edges() == 0


def test_deps_pass_changes_nothing_and_reports_the_graphs() -> None:
    main, startup = bir.Program(), bir.Program()
    with bir.unique_name.guard(), bir.program_guard(main, startup):
        x = bir.data("x", shape=[-1, 3], dtype="float32")
        loss = bir.layers.mean(bir.layers.fc(x, size=2, act="relu"))
        bir.optimizer.SGD(learning_rate=0.1).minimize(loss)
    result, report = run(main, "deps")
    assert str(result) == str(main)
    record = report.record("deps")
    assert not record.changed and not record.returned
    graph = record.details["graphs"][0]
    assert graph.number_of_nodes() == len(main.global_block().ops)
    assert nx.is_directed_acyclic_graph(graph)
    kinds = {kind for _, _, kind in graph.edges(data="kind")}
    assert kinds == {"RAW", "WAR"}  # sgd updates parameters the forward and backward ops read
    (note,) = record.notes
    assert note.startswith(f"block 0: {graph.number_of_nodes()} ops, {graph.number_of_edges()} edges (RAW ")
    assert re.search(r", WAR [1-9][0-9]*, WAW 0\), critical path [0-9]+ ops$", note)
    assert Deps().run(main.clone()) is False  # outside a pipeline notes and details go nowhere


def random_topological_order(graph: nx.DiGraph, rng: random.Random) -> list[int]:
    indegree = dict(graph.in_degree())
    ready = [n for n in graph if indegree[n] == 0]
    order = []
    while ready:
        node = ready.pop(rng.randrange(len(ready)))
        order.append(node)
        for succ in graph.successors(node):
            indegree[succ] -= 1
            if indegree[succ] == 0:
                ready.append(succ)
    return order


@settings(max_examples=80)
@given(runnable_programs(max_ops=10), st.randoms(use_true_random=False))
def test_every_topological_order_computes_the_same(rp: RandomProgram, rng: random.Random) -> None:
    graph = dependency_graph(rp.program.global_block())
    expected = rp.run()
    for _ in range(4):
        order = random_topological_order(graph, rng)
        assert sorted(order) == list(range(len(rp.program.global_block().ops)))
        reordered = rp.program.clone()
        ops = reordered.global_block().ops
        reordered.global_block().reorder_ops([ops[i] for i in order])
        assert_same_results(rp.run(reordered), expected)
