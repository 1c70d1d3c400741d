"""The fuse-optimizer pass (blockir.passes.fuse_optimizer): which updates it groups and which it refuses, and why.

Golden cases (tests/passes/golden/fuse-optimizer/) show what it makes of SGD, Momentum and Adam programs; these
tests show the grouping (attributes, learning rate, device), every refusal with its reason, that it never fuses
across devices, and that a second run changes nothing. What the fused programs compute is
tests/runtime/test_fuse_optimizer.py's and tests/passes/test_fuse_optimizer_property.py's.
"""

from __future__ import annotations

from pathlib import Path

import pytest

import blockir as bir
from blockir.cli import main
from blockir.ir import Program, parse_program
from blockir.passes import run
from blockir.passes.rewrite import Fired, Refused

HEADER = """program version=0
block 0 parent=-1 {
  var %lr : lod_tensor<float32>[1] persistable
  var %lr2 : lod_tensor<float32>[1] persistable
  var %t : lod_tensor<float32>[3] need_check_feed"""


def program(*lines: str, params: str = "abcd") -> Program:
    """Parameters ``params`` ([3] each, with a velocity NAME_v and a gradient NAME@GRAD that a scale of the fed t
    makes first), then ``lines``."""
    decls, grads = [], []
    for p in params:
        decls += [
            f"  var %{p} : lod_tensor<float32>[3] persistable parameter",
            f"  var %{p}@GRAD : lod_tensor<float32>[3]",
            f"  var %{p}_v : lod_tensor<float32>[3] persistable",
        ]
        grads.append(f"  %{p}@GRAD = scale(X=%t)")
    return parse_program("\n".join([HEADER, *decls, *grads, *lines, "}"]))


def sgd(p: str, lr: str = "lr", extra: str = "") -> str:
    return f"  (ParamOut=%{p}) = sgd(Param=%{p}, Grad=%{p}@GRAD, LearningRate=%{lr}) {{op_role=2}}{extra}"


def momentum(p: str, mu: float = 0.9) -> str:
    return (
        f"  (ParamOut=%{p}, VelocityOut=%{p}_v) = momentum(Param=%{p}, Grad=%{p}@GRAD, Velocity=%{p}_v, "
        f"LearningRate=%lr) {{mu={mu}, op_role=2}}"
    )


def fuse(p: Program) -> tuple[list[str], list[Fired], list[Refused]]:
    """The op types of the fused program (but the scale ops making the gradients), what fired and what was
    refused."""
    fused, report = run(p, "fuse-optimizer")
    record = report.record("fuse-optimizer")
    types = [op.type for op in fused.global_block().ops if op.type != "scale"]
    return types, record.details["fused"], record.details["refused"]


def reasons(refused: list[Refused]) -> dict[str, str]:
    return {r.anchor: r.reason for r in refused}


def test_updates_group_by_type_attributes_and_learning_rate() -> None:
    p = program(
        sgd("a"),
        momentum("b"),
        sgd("c", "lr2"),
        momentum("d", mu=0.5),
        sgd("e"),
        momentum("f"),
        sgd("g", "lr2"),
        momentum("h", mu=0.5),
        params="abcdefgh",
    )
    types, fired, refused = fuse(p)
    assert not refused
    assert [(f.pattern, f.replaced) for f in fired] == [
        ("sgd", ("sgd:a", "sgd:e")),
        ("momentum", ("momentum:b,b_v", "momentum:f,f_v")),
        ("sgd", ("sgd:c", "sgd:g")),
        ("momentum", ("momentum:d,d_v", "momentum:h,h_v")),
    ]
    # each group where its first update was: its parameters', its state's and its gradients' buffers, the update
    assert types == ["coalesce_tensor", "coalesce_tensor", "sgd", *["coalesce_tensor"] * 3, "momentum"] * 2


def test_the_fused_update_takes_the_groups_attributes_lineage_and_buffers() -> None:
    fused, report = run(program(momentum("a", mu=0.5), momentum("b", mu=0.5), params="ab"), "fuse-optimizer")
    coalesce_p, coalesce_v, coalesce_g, update = fused.global_block().ops[2:]  # after the gradients' scale ops
    assert coalesce_p.input("Input") == coalesce_p.output("Output") == ("a", "b")
    assert coalesce_p.output("FusedOutput") == ("a@FUSED",) and coalesce_v.output("FusedOutput") == ("a_v@FUSED",)
    assert coalesce_g.input("Input") == ("a@GRAD", "b@GRAD") and coalesce_g.output("FusedOutput") == ("a@GRAD@FUSED",)
    assert coalesce_p.attr("copy_data") and coalesce_p.attr("dtype") == 5
    assert (update.input("Param"), update.input("Velocity"), update.input("Grad")) == (
        ("a@FUSED",),
        ("a_v@FUSED",),
        ("a@GRAD@FUSED",),
    )
    assert (update.output("ParamOut"), update.output("VelocityOut")) == (("a@FUSED",), ("a_v@FUSED",))
    assert update.attr("mu") == 0.5 and update.attr("op_role") == 2
    for op in (coalesce_p, coalesce_v, coalesce_g, update):
        assert op.attr("op_pass") == "fuse-optimizer" and op.attr("op_origin") == ("momentum:a,a_v", "momentum:b,b_v")
    block = fused.global_block()
    assert block.var("a@FUSED").shape == (6,) and not block.var("a@FUSED").persistable  # saves hold each param once
    assert report.record("fuse-optimizer").notes == [
        "block 0: momentum: fused momentum:a,a_v, momentum:b,b_v into coalesce_tensor:a,b,a@FUSED, "
        "coalesce_tensor:a_v,b_v,a_v@FUSED, coalesce_tensor:a@GRAD,b@GRAD,a@GRAD@FUSED, momentum:a@FUSED,a_v@FUSED"
    ]


def test_a_second_run_changes_nothing() -> None:
    fused, _ = run(program(sgd("a"), sgd("b"), params="ab"), "fuse-optimizer")
    again, report = run(fused, "fuse-optimizer")
    assert str(again) == str(fused) and not report.record("fuse-optimizer").changed


@pytest.mark.parametrize(
    ("lines", "reason"),
    [
        ((sgd("c"), "  %t = scale(X=%c)"), "%t = scale(X=%c) uses 'c' after the fused update"),
        (("  %c = scale(X=%t)", sgd("c")), "%c = scale(X=%t) writes 'c' before its update"),
        ((sgd("c"), sgd("c")), "'c' is used by another update"),
        (
            ("  %c@GRAD = scale(X=%t)", sgd("c")),
            "%c@GRAD = scale(X=%t) writes 'c@GRAD' between the fused update and its own",
        ),
        (("  %lr = scale(X=%lr)", sgd("c")), "%lr = scale(X=%lr) writes 'lr' between the fused update and its own"),
    ],
    ids=["read-after", "written-before", "shared", "gradient-written-between", "learning-rate-written-between"],
)
def test_an_update_that_cannot_join_its_group_is_left_with_the_reason(lines: tuple[str, ...], reason: str) -> None:
    """a and b fuse, c (after them, or before them for written-before) is refused."""
    if lines[0].startswith("  %c = "):
        lines = (lines[0], *lines[1:], sgd("a"), sgd("b"))
    else:
        lines = (sgd("a"), sgd("b"), *lines)
    types, fired, refused = fuse(program(*lines, params="abc"))
    assert [f.replaced for f in fired] == [("sgd:a", "sgd:b")]
    assert reasons(refused)["sgd:c"] == reason


@pytest.mark.parametrize(
    ("edit", "reason"),
    [
        (
            ("%c@GRAD : lod_tensor<float32>[3]\n", "%c@GRAD : lod_tensor<float32>[3] persistable\n"),
            "'c@GRAD' is persistable",
        ),
        (
            ("%c : lod_tensor<float32>[3] persistable", "%c : lod_tensor<float32>[3] need_check_feed"),
            "'c' is not persistable",
        ),
        (
            ("%c : lod_tensor<float32>[3] persistable", "%c : lod_tensor<float32>[-1] persistable"),
            "'c' has no static shape and dtype",
        ),
        (
            ("%c : lod_tensor<float32>[3] persistable", "%c : lod_tensor<float32>[3] device=cpu:1 persistable"),
            "'c' is declared on cpu:1, its update on no device",
        ),
    ],
    ids=["persistable-gradient", "temporary-parameter", "dynamic-shape", "declared-on-another-device"],
)
def test_variables_that_cannot_be_coalesced_are_refused(edit: tuple[str, str], reason: str) -> None:
    text = str(program(sgd("a"), sgd("b"), sgd("c"), params="abc"))
    assert text.count(edit[0]) == 1
    types, fired, refused = fuse(parse_program(text.replace(*edit)))
    assert [f.replaced for f in fired] == [("sgd:a", "sgd:b")] and reasons(refused) == {"sgd:c": reason}


def test_a_sparse_gradient_is_not_fused() -> None:
    text = str(program(sgd("a"), sgd("b"), params="ab"))
    sparse = text.replace("%b@GRAD : lod_tensor<float32>[3]", "%b@GRAD : selected_rows<float32>[3] need_check_feed")
    types, fired, refused = fuse(parse_program(sparse.replace("  %b@GRAD = scale(X=%t)\n", "")))
    assert types == ["sgd", "sgd"] and not fired and not refused


def test_a_gradient_no_op_makes_is_not_fused() -> None:
    """A fed gradient is on the host, wherever the update runs: the coalesced gradients would be too."""
    text = str(program(sgd("a"), sgd("b"), sgd("c"), params="abc"))
    fed = text.replace("%c@GRAD : lod_tensor<float32>[3]\n", "%c@GRAD : lod_tensor<float32>[3] need_check_feed\n")
    types, fired, refused = fuse(parse_program(fed.replace("  %c@GRAD = scale(X=%t)\n", "")))
    assert [f.replaced for f in fired] == [("sgd:a", "sgd:b")]
    assert reasons(refused) == {"sgd:c": "'c@GRAD' is made by no op before the updates (it is fed, or the scope's)"}


def test_updates_on_different_devices_never_fuse() -> None:
    text = str(program(sgd("a", extra=" @cpu:1"), sgd("b"), sgd("c", extra=" @cpu:1"), params="abc"))
    for p in "ac":  # their gradients made on cpu:1 too
        text = text.replace(f"%{p}@GRAD = scale(X=%t)", f"%{p}@GRAD = scale(X=%t) @cpu:1")
    types, fired, refused = fuse(parse_program(text))
    assert [f.replaced for f in fired] == [("sgd:a", "sgd:c")] and not refused  # b alone on the host
    fused, _ = run(parse_program(text), "fuse-optimizer")
    assert {op.device for op in fused.global_block().ops if op.attr("op_pass", "") == "fuse-optimizer"} == {"cpu:1"}


def test_a_parameter_used_on_another_device_is_not_fused() -> None:
    """The place pass would keep the parameter where its reader runs and insert-copies put a copy between it and its
    view: the update stays as it is."""
    p = program("  %t = scale(X=%c) @cpu:1", sgd("a"), sgd("b"), sgd("c"), params="abc")
    types, fired, refused = fuse(p)
    assert [f.replaced for f in fired] == [("sgd:a", "sgd:b")]
    assert reasons(refused) == {"sgd:c": "%t = scale(X=%c) @cpu:1 uses 'c' on cpu:1, its update runs on no device"}


def test_fusion_stops_at_a_variable_the_program_has_already() -> None:
    p = program(sgd("a"), sgd("b"), params="ab")
    p.global_block().create_var("a@FUSED", shape=(1,), dtype="float32")
    fused, _ = run(p, "fuse-optimizer")
    (coalesce, *_) = [op for op in fused.global_block().ops if op.type == "coalesce_tensor"]
    assert coalesce.output("FusedOutput") == ("a@FUSED1",)


def test_updates_of_parameters_larger_than_max_size_stay_as_they_are() -> None:
    """Coalescing copies the gradients every run: for a large parameter that costs more than the dispatch of its
    update (docs/passes.md has the measurements)."""
    fused, report = run(program(sgd("a"), sgd("b"), sgd("c"), params="abc"), "fuse-optimizer{max_size=2}")
    assert [op.type for op in fused.global_block().ops] == ["scale"] * 3 + ["sgd"] * 3
    assert {r.anchor: r.reason for r in report.record("fuse-optimizer").details["refused"]} == {
        f"sgd:{p}": f"'{p}' has 3 elements, more than max_size=2" for p in "abc"
    }
    assert (
        run(program(sgd("a"), sgd("b"), params="ab"), "fuse-optimizer{max_size=0}")[1].record("fuse-optimizer").changed
    )


def test_blockir_opt_and_the_visualizer_show_the_fused_updates(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    p = program(sgd("a"), sgd("b"), params="ab")
    p.save(str(tmp_path / "p.pb"))
    assert main(["opt", str(tmp_path / "p.pb"), "-p", "fuse"]) == 0
    out = capsys.readouterr().out
    assert "(Output=[%a, %b], FusedOutput=%a@FUSED) = coalesce_tensor(Input=[%a, %b])" in out
    assert "(ParamOut=%a@FUSED) = sgd(Param=%a@FUSED, Grad=%a@GRAD@FUSED, LearningRate=%lr)" in out
    data, _ = bir.viz.page_data(p, "fuse")
    assert [s["label"] for s in data["states"][1:]][-1] == "fuse-optimizer"
    (update,) = [op for op in data["ops"] if op["type"] == "sgd" and op["pass"] == "fuse-optimizer"]
    assert update["origin"] == ["sgd:a", "sgd:b"] and None not in update["origin_ids"]  # linked to what it replaced
