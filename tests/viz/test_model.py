"""The visualizer's data model: golden cases, and properties that tie it to the pass manager's record."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given, settings

import blockir as bir
from blockir.errors import PassError, PipelineError, VerifyError
from blockir.ir import parse_program
from blockir.ir.text import format_op
from blockir.viz import collect, page_data
from blockir.viz.layout import COLUMN_GAP, GAP_Y, WRAP_HEIGHT
from blockir.viz.model import build
from tests.passes.programs import CHAIN, RandomProgram, runnable_programs
from tests.registries import passes_registered
from tests.viz.golden_cases import GOLDEN, Explode, expected_model, model_path

CASES = sorted(GOLDEN.glob("*.before.txt"))
DEVICES = ("", "cpu", "cpu:1", "cpu:2")


@pytest.mark.parametrize("before", CASES, ids=[c.name.removesuffix(".before.txt") for c in CASES])
def test_golden_model(before: Path) -> None:
    assert expected_model(before) == model_path(before).read_text(), "python scripts/regen_golden.py tests/viz/golden"


def test_golden_cases_cover_failure_sub_blocks_removal_and_copies() -> None:
    models = {c.name.removesuffix(".before.txt"): json.loads(model_path(c).read_text()) for c in CASES}
    assert models["failing_pass"]["failure"]["label"] == "explode"
    assert models["go_block"]["blocks"][1]["owner"] is not None
    assert "0" in models["prune"]["ops"][2]["present"]  # sigmoid: present in the input, gone after prune
    assert models["two_devices"]["states"][2]["stats"]["copies"] == 2


def _ops_of_state(data: dict, k: int) -> dict[int, dict]:
    return {op["id"]: op for op in data["ops"] if op["present"][k] == "1"}


@settings(max_examples=40)
@given(runnable_programs(devices=DEVICES))
def test_each_state_is_its_kept_program_and_the_diffs_match_the_pass_records(rp: RandomProgram) -> None:
    collected = collect(rp.program, "place,insert-copies,deps,streams")
    data = build(collected, "random")
    assert len(data["states"]) == len(collected.programs) == 5
    for k, program in enumerate(collected.programs):
        ops = _ops_of_state(data, k)
        assert {op.id: format_op(op) for op in program.ops()} == {i: op["text"] for i, op in ops.items()}
        assert data["states"][k]["ops"] == len(ops)
        assert sum(data["states"][k]["stats"]["devices"].values()) == len(ops)
    for k in range(1, len(collected.programs)):
        before, after = _ops_of_state(data, k - 1), _ops_of_state(data, k)
        kept = before.keys() & after.keys()
        record = collected.records[k - 1]
        assert len(after.keys() - kept) == record.added == data["states"][k]["added"]
        assert len(before.keys() - kept) == record.removed == data["states"][k]["removed"]
        assert sum(before[i]["v"] != after[i]["v"] for i in kept) == record.modified
        structural = sum(before[i]["sv"] != after[i]["sv"] for i in kept)
        assert (data["states"][k]["structural"], data["states"][k]["annotated"]) == (
            structural,
            record.modified - structural,
        )
        if k == 4:  # streams: op_stream is an annotation
            assert structural == 0


@settings(max_examples=40)
@given(runnable_programs(devices=DEVICES))
def test_each_state_has_its_program_as_text(rp: RandomProgram) -> None:
    collected = collect(rp.program, "place,insert-copies,streams")
    data = build(collected, "random")
    for k, program in enumerate(collected.programs):
        lines = [data["lines"][-1 - v] if v < 0 else "  " + data["ops"][v]["text"] for v in data["states"][k]["text"]]
        assert "\n".join(lines) == str(program)


@settings(max_examples=40)
@given(runnable_programs(devices=DEVICES))
def test_every_op_has_one_place_and_edges_point_down(rp: RandomProgram) -> None:
    data, _ = page_data(rp.program, "place,insert-copies,streams")
    nodes = {int(i): n for i, n in data["nodes"].items()}
    assert nodes.keys() == {op["id"] for op in data["ops"]}
    _assert_layered(nodes, data["edges"])


def _assert_layered(nodes: dict[int, list[float]], edges: list[list[Any]]) -> None:
    """A writer sits above its reader in the same column, or in a column left of it; no two ops overlap."""
    for src, dst, _, _ in edges:
        above = nodes[src][1] + nodes[src][3] + GAP_Y <= nodes[dst][1] + 1e-6
        left = nodes[src][0] + nodes[src][2] + COLUMN_GAP <= nodes[dst][0] + 1e-6
        assert above or left, (nodes[src], nodes[dst])
    boxes = sorted(nodes.values())
    for i, a in enumerate(boxes):
        for b in boxes[i + 1 :]:
            if b[0] >= a[0] + a[2]:
                break
            assert b[1] >= a[1] + a[3] or a[1] >= b[1] + b[3], (a, b)


def test_a_tall_block_wraps_into_columns_and_a_short_one_does_not() -> None:
    main, startup = bir.Program(), bir.Program()
    with bir.program_guard(main, startup), bir.unique_name.guard():
        h = bir.layers.data("x", [-1, 4])
        for _ in range(40):
            h = bir.layers.relu(h)
    data, _ = page_data(main, "place")
    nodes = {int(i): n for i, n in data["nodes"].items()}
    _assert_layered(nodes, data["edges"])
    width, height = max(n[0] + n[2] for n in nodes.values()), max(n[1] + n[3] for n in nodes.values())
    columns = sorted({n[0] for n in nodes.values()})
    assert len(columns) >= 3 and 0.8 <= width / height <= 3.2, (columns, width, height)  # one column: 0.05
    order = sorted(nodes, key=lambda i: (nodes[i][0], nodes[i][1]))  # down each column, then the next
    assert order == sorted(nodes)
    assert height >= WRAP_HEIGHT
    short, _ = page_data(parse_program((GOLDEN / "two_devices.before.txt").read_text()), "place")
    at = short["nodes"]
    for src, dst, _, _ in short["edges"]:  # one column: every writer above its readers
        assert at[str(src)][1] + at[str(src)][3] + GAP_Y <= at[str(dst)][1]


def test_edges_follow_the_value_from_its_latest_writer() -> None:
    program = parse_program(
        """program version=0
block 0 parent=-1 {
  var %x : lod_tensor<float32>[2, 2] need_check_feed
  var %h : lod_tensor<float32>[2, 2]
  %h = relu(X=%x)
  %h = tanh(X=%h)
  %h = sigmoid(X=%h)
}"""
    )
    data, _ = page_data(program, "")
    assert data["edges"] == [[0, 1, "h", "1"], [1, 2, "h", "1"]]


def test_lineage_names_the_edge_and_devices_of_a_copy_and_links_its_origins() -> None:
    data = json.loads(model_path(GOLDEN / "two_devices.before.txt").read_text())
    copies = [op for op in data["ops"] if op["kind"] == "copy" and op["present"][2] == "1"]
    assert [c["lineage"] for c in copies] == [
        "memcpy inserted by insert-copies for mul -> relu, cpu -> cpu:1",
        "memcpy inserted by insert-copies for relu -> tanh, cpu:1 -> cpu",
    ]
    types = {op["id"]: op["type"] for op in data["ops"]}
    assert [[types[i] for i in c["origin_ids"]] for c in copies] == [["mul", "relu"], ["relu", "tanh"]]
    assert copies[0]["bytes"] == [8, 1]  # [-1, 2] float32: 8 bytes per row, times the -1 dim


def test_copy_bytes_show_unknown_dims_as_such() -> None:
    from blockir.viz.model import bytes_text

    assert bytes_text({}) == "0 B"
    assert bytes_text({0: 1024, 1: 6272}) == "6,272 B × (-1) + 1,024 B"
    assert bytes_text({2: 4}) == "4 B × (-1) × (-1)"


def test_a_failing_pass_ends_the_run_with_the_report_and_programs_before_it() -> None:
    program = parse_program(CHAIN)
    with passes_registered(Explode):
        collected = collect(program, "place,insert-copies,explode,streams")
    assert isinstance(collected.error, PassError)
    assert [r.name for r in collected.records] == ["place", "insert-copies"]
    assert len(collected.programs) == 3  # the input, after place, after insert-copies (what explode received)
    assert collected.failed == "explode"
    data = build(collected, "t")
    assert data["failure"]["received"] == 2 and "explode always fails" in data["failure"]["message"]


def test_bad_pipeline_and_invalid_input_raise_before_any_page() -> None:
    with pytest.raises(PipelineError, match="unknown pass 'plac'"):
        collect(parse_program(CHAIN), "plac")
    bad = parse_program(CHAIN)
    bad.global_block().ops[1].set_input("X", ["nowhere"])
    with pytest.raises(VerifyError, match="nowhere"):
        collect(bad, "place")


def test_the_dsl_program_of_the_readme_gets_a_model_with_persistable_inputs_marked() -> None:
    main, startup = bir.Program(), bir.Program()
    with bir.program_guard(main, startup), bir.unique_name.guard():
        x = bir.layers.data("x", [-1, 4])
        loss = bir.layers.mean(bir.layers.fc(x, 2))
        bir.optimizer.SGD(0.1).minimize(loss)
    data, _ = page_data(main, "place")
    labels = [op["label"] for op in data["ops"] if op["type"] == "sgd"]
    assert labels
    assert all(label[2].startswith("param fc_0.") and "state learning_rate_0" in label[2] for label in labels)
