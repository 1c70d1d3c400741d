"""The pattern-rewrite engine (blockir.passes.rewrite) and the fusion passes (blockir.passes.fuse).

Golden cases (tests/passes/golden/fuse*/) show what each pass makes of typical programs; these tests
show when a pattern must not fire (across devices, through a value another op reads, a value fetched or
persistable, a move that would change what an op reads), the dry run and its report, lineage, the
patterns' own checks, and a fused op failing at run time.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

import blockir as bir
from blockir.cli import main
from blockir.errors import BlockirError, ExecutionError
from blockir.ir import Program, parse_program
from blockir.passes import describe_passes, expand, parse_pipeline, run
from blockir.passes.fuse import FuseElementwiseAct, FuseSoftmaxCE
from blockir.passes.rewrite import Create, Fired, OpPattern, Pattern, Refused

# mul, elementwise_add, relu: an fc layer, written out; every case below edits it.
LAYER = """program version=0
block 0 parent=-1 {
  var %x : lod_tensor<float32>[-1, 4] need_check_feed
  var %w : lod_tensor<float32>[4, 3] persistable parameter
  var %b : lod_tensor<float32>[3] persistable parameter
  var %t : lod_tensor<float32>[-1, 3]
  var %s : lod_tensor<float32>[-1, 3]
  var %out : lod_tensor<float32>[-1, 3]
  %t = mul(X=%x, Y=%w)
  %s = elementwise_add(X=%t, Y=%b) {axis=1}
  %out = relu(X=%s)
}"""


def layer(*extra: str, devices: tuple[str, str, str] = ("", "", "")) -> Program:
    """LAYER with each op on its device ('' for none) and ``extra`` lines (ops, variables) appended."""
    lines = LAYER.splitlines()
    ops = [i for i, line in enumerate(lines) if line.startswith("  %")]
    for i, device in zip(ops, devices):
        lines[i] += f" @{device}" if device else ""
    return parse_program("\n".join([*lines[:-1], *extra, "}"]))


def types(program: Program) -> list[str]:
    return [op.type for op in program.global_block().ops]


def fuse_fc(program: Program, options: str = "") -> tuple[Program, bir.passes.PassRecord]:
    result, report = run(program, f"fuse-fc{options}")
    return result, report.record("fuse-fc")


def refusals(record: bir.passes.PassRecord) -> list[Refused]:
    return record.details["refused"]


def test_a_layer_fuses_into_fc_with_its_lineage() -> None:
    fused, record = fuse_fc(layer())
    (op,) = fused.global_block().ops
    assert (op.type, op.input("Input"), op.input("W"), op.input("Bias"), op.output("Out")) == (
        "fc",
        ("x",),
        ("w",),
        ("b",),
        ("out",),
    )
    assert op.attr("activation_type") == "relu" and op.attr("in_num_col_dims") == 1
    assert op.attr("op_pass") == "fuse-fc"
    assert op.attr("op_origin") == ("mul:t", "elementwise_add:s", "relu:out")
    assert not fused.global_block().has_var("t") and not fused.global_block().has_var("s")  # gone with their ops
    assert record.details["fused"] == [Fired("fc-act", 0, ("mul:t", "elementwise_add:s", "relu:out"), ("fc:out",))]
    assert record.notes == ["block 0: fc-act: fused mul:t, elementwise_add:s, relu:out into fc:out"]


def test_a_pattern_does_not_fire_across_devices() -> None:
    fused, record = fuse_fc(layer(devices=("cpu:1", "cpu", "cpu")))
    assert types(fused) == ["mul", "elementwise_add", "relu"]
    assert {r.reason for r in refusals(record)} == {"its ops run on different devices (cpu, cpu:1)"}
    fused, _ = fuse_fc(layer(devices=("cpu:1", "cpu:1", "cpu")))  # mul and add together, relu apart
    assert types(fused) == ["fc", "relu"] and fused.global_block().ops[0].device == "cpu:1"


def test_a_pattern_does_not_fire_across_streams() -> None:
    program = layer()
    for op, stream in zip(program.global_block().ops, ("cpu/compute0", "cpu/compute0", "cpu/compute1")):
        op.set_attr("op_stream", stream)
    fused, record = fuse_fc(program)
    assert types(fused) == ["fc", "relu"] and fused.global_block().ops[0].attr("op_stream") == "cpu/compute0"
    assert [(r.pattern, r.reason) for r in refusals(record)] == [
        ("fc-act", "its ops run on different streams (cpu/compute0, cpu/compute1)")
    ]


def test_a_pattern_does_not_fire_through_a_value_another_op_also_reads() -> None:
    program = layer("  var %m : lod_tensor<float32>[1]", "  %m = mean(X=%s)")
    fused, record = fuse_fc(program)
    # relu's input is read by the mean too: it must stay, so only mul and elementwise_add fuse.
    assert types(fused) == ["fc", "relu", "mean"]
    assert fused.global_block().ops[0].attr("activation_type") == ""
    (refused,) = refusals(record)
    assert (refused.pattern, refused.anchor) == ("fc-act", "mul:t")
    assert refused.reason == "'s' is also read by %m = mean(X=%s)"


@pytest.mark.parametrize(
    ("options", "edit", "reason"),
    [
        ("{keep=t}", "", "'t' is fetched or fed"),
        ("", "persistable", "'t' is persistable"),
    ],
    ids=["fetched", "persistable"],
)
def test_a_value_that_must_stay_is_never_fused_away(options: str, edit: str, reason: str) -> None:
    program = layer()
    program.global_block().var("t").persistable = edit == "persistable"
    fused, record = fuse_fc(program, options)
    assert types(fused) == ["mul", "elementwise_add", "relu"]
    assert {r.reason for r in refusals(record)} == {reason}


def test_a_value_used_in_another_block_is_never_fused_away() -> None:
    program = parse_program(
        f"{LAYER}\nblock 1 parent=0 {{\n  var %z : lod_tensor<float32>[-1, 3]\n  %z = tanh(X=%t)\n}}"
    )
    fused, record = fuse_fc(program)
    assert types(fused) == ["mul", "elementwise_add", "relu"]
    assert {r.reason for r in refusals(record)} == {"'t' is used in block 1"}


def test_a_pattern_does_not_fire_when_the_fused_op_would_read_another_value() -> None:
    # x is overwritten between mul and elementwise_add: an fc where the add was would read the new x.
    program = layer()
    block = program.global_block()
    block.insert_op(1, "scale", {"X": ["x"]}, {"Out": ["x"]}, {"scale": 2.0})
    fused, record = fuse_fc(program)
    assert types(fused) == ["mul", "scale", "elementwise_add", "relu"]
    assert {r.reason for r in refusals(record)} == {"the new fc would read another value of 'x'"}


def training() -> Program:
    """Two fc layers (relu, none) with their gradients and SGD: the golden case of fuse-fc."""
    return parse_program((Path(__file__).parent / "golden" / "fuse-fc" / "training.before.txt").read_text())


def index(program: Program, op_type: str, output: str) -> int:
    return next(
        i for i, op in enumerate(program.global_block().ops) if op.type == op_type and output in op.output_names()
    )


def test_a_pattern_does_not_fire_when_another_op_would_read_another_value() -> None:
    # fc_grad goes where mul_grad was: a reader of the bias gradient between the two would lose its value.
    program = training()
    block = program.global_block()
    block.create_var("copy", shape=(3,), dtype="float32")
    block.insert_op(
        index(program, "elementwise_add_grad", "fc_0.b_0@GRAD") + 1,
        "scale",
        {"X": ["fc_0.b_0@GRAD"]},
        {"Out": ["copy"]},
    )
    fused, record = fuse_fc(program)
    assert types(fused).count("fc_grad") == 1  # layer 1's; layer 0 stays as it is
    assert "mul_grad" in types(fused) and "relu" in types(fused)
    assert {r.reason for r in refusals(record)} >= {
        "%copy = scale(X=%fc_0.b_0@GRAD) would read another value of 'fc_0.b_0@GRAD'"
    }


def test_a_pattern_does_not_fire_when_a_variable_would_end_with_another_value() -> None:
    program = training()
    block = program.global_block()
    block.remove_op(index(program, "sgd", "fc_0.b_0"))  # nothing reads the bias gradient after the backward
    at = index(program, "elementwise_add_grad", "fc_0.b_0@GRAD") + 1
    block.insert_op(at, "fill_constant", {}, {"Out": ["fc_0.b_0@GRAD"]}, {"shape": [3]})  # it ends as this
    fused, record = fuse_fc(program)
    assert types(fused).count("fc_grad") == 1
    assert "'fc_0.b_0@GRAD' would end the block with another value" in {r.reason for r in refusals(record)}


def test_a_pattern_does_not_fire_when_a_matched_op_reads_a_value_another_op_wrote() -> None:
    # cross_entropy reads p written by scale, not the softmax: softmax_with_cross_entropy would compute another loss.
    program = parse_program(
        """program version=0
block 0 parent=-1 {
  var %x : lod_tensor<float32>[-1, 3] need_check_feed
  var %label : lod_tensor<int64>[-1, 1] need_check_feed
  var %p : lod_tensor<float32>[-1, 3]
  var %loss : lod_tensor<float32>[-1, 1]
  %p = softmax(X=%x)
  %p = scale(X=%x) {scale=0.5}
  (Y=%loss) = cross_entropy(X=%p, Label=%label)
}"""
    )
    fused, report = run(program, "fuse-softmax-ce")
    assert types(fused) == ["softmax", "scale", "cross_entropy"]
    assert {r.reason for r in refusals(report.record("fuse-softmax-ce"))} == {
        "(Y=%loss) = cross_entropy(X=%p, Label=%label) reads 'p' from an op outside the match"
    }


def test_a_dry_run_reports_what_would_fuse_and_changes_nothing() -> None:
    program = layer("  var %m : lod_tensor<float32>[1]", "  %m = mean(X=%s)")
    result, report = run(program, "fuse-fc{dry_run=true}")
    record = report.record("fuse-fc")
    assert str(result) == str(program) and not record.changed and not record.returned
    assert record.notes == [
        "block 0: fc: would fuse mul:t, elementwise_add:s into fc:s",
        "block 0: fc-act: not fused at mul:t: 's' is also read by %m = mean(X=%s)",
    ]
    assert [f.pattern for f in record.details["fused"]] == ["fc"]


def test_the_fused_ops_take_their_groups_common_attributes() -> None:
    program = parse_program((Path(__file__).parent / "golden" / "fuse-fc" / "training.before.txt").read_text())
    for op in program.global_block().ops:
        op.set_attr("op_stream", "cpu:1/compute0")
        op.set_attr("op_device", "cpu:1")
    fused, _ = fuse_fc(program)
    fc, grad = (op for op in fused.global_block().ops if op.type in ("fc", "fc_grad") and "relu" in str(op))
    assert fc.attr("op_role") == 0 and grad.attr("op_role") == 1
    assert grad.attr("op_role_var") == ("fc_0.b_0", "fc_0.b_0@GRAD", "fc_0.w_0", "fc_0.w_0@GRAD")
    assert {(op.device, op.attr("op_stream")) for op in (fc, grad)} == {("cpu:1", "cpu:1/compute0")}
    assert list(fc.attrs)[-1] == "op_device"  # last, as the text form prints it


def test_a_fused_op_failing_at_run_time_names_itself_and_the_ops_it_came_from() -> None:
    program = parse_program(LAYER.replace("%x : lod_tensor<float32>[-1, 4]", "%x : lod_tensor<float32>[-1, -1]"))
    scope = bir.Scope()
    scope.set("w", np.ones((4, 3), "float32"))
    scope.set("b", np.zeros(3, "float32"))
    with bir.Executor() as exe, pytest.raises(ExecutionError) as info:
        exe.run(program, feed={"x": np.ones((2, 5), "float32")}, fetch_list=["out"], scope=scope)
    message = str(info.value)
    assert "fc: Input of shape [2, 5] flattened at in_num_col_dims=1 has 5 columns but W of shape [4, 3]" in message
    assert 'in op: %out = fc(Input=%x, W=%w, Bias=%b) {in_num_col_dims=1, activation_type="relu"' in message
    assert 'op_pass="fuse-fc", op_origin=["mul:t", "elementwise_add:s", "relu:out"]' in message


def test_each_pass_fuses_its_own_family() -> None:
    program = layer()
    assert types(run(program, [FuseElementwiseAct()])[0]) == ["mul", "fused_elemwise_activation"]
    assert types(run(program, [FuseSoftmaxCE()])[0]) == ["mul", "elementwise_add", "relu"]
    assert types(run(program, "fuse")[0]) == ["fc"]  # fuse-fc runs first and takes the add with the mul


def test_the_fuse_pipeline_runs_the_passes_asked_for() -> None:
    assert [p.name for p in expand(parse_pipeline("fuse"))] == [
        "fold-conv-bn",
        "fuse-conv-add-act",
        "fuse-bn-act",
        "max-pool-with-index",
        "fuse-fc",
        "fuse-elementwise-act",
        "fuse-softmax-ce",
        "fuse-fc-sgd",
        "fuse-optimizer",
    ]
    off = "conv_bn=false conv_add_act=false bn_act=false fc=false softmax_ce=false optimizer=false max_pool_index=false"
    assert [p.name for p in expand(parse_pipeline(f"fuse{{{off} keep=a,b}}"))] == ["fuse-elementwise-act"]
    assert expand(parse_pipeline("fuse{keep=a,b}"))[5].keep == ("a", "b")
    assert "fuse-fc: mul + elementwise_add" in describe_passes()


def test_blockir_opt_runs_the_fuse_pipeline(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    layer().save(str(tmp_path / "layer.pb"))
    assert main(["opt", str(tmp_path / "layer.pb"), "-p", "fuse"]) == 0
    assert " = fc(Input=%x, W=%w, Bias=%b) " in capsys.readouterr().out


_MUL = OpPattern("mul", ("mul",), {"X": "x", "Y": "w"}, {"Out": "t"})


@pytest.mark.parametrize(
    ("ops", "creates", "message"),
    [
        (
            (_MUL, OpPattern("act", ("relu",), {"X": "other"}, {"Out": "out"})),
            (Create("fc", ("mul", "act"), {"Input": "x"}, {"Out": "out"}),),
            "op 'act' shares no variable with the ops before it",
        ),
        (
            (_MUL, OpPattern("act", ("relu",), {"X": "t"}, {"Out": "out"})),
            (Create("fc", ("mul",), {"Input": "x"}, {"Out": "out"}),),
            r"must replace each op once \(\['mul', 'act'\]\) by fewer ops, got \['mul'\]",
        ),
        (
            (_MUL, OpPattern("act", ("relu",), {"X": "t"}, {"Out": "out"})),
            (Create("fc", ("mul", "act"), {"Input": "x", "W": "t"}, {"Out": "out"}),),
            r"new ops read values that vanish: \['t'\]",
        ),
        (
            (_MUL, OpPattern("act", ("relu",), {"X": "t"}, {"Out": "out"})),
            (Create("fc", ("mul", "act"), {"Input": "x"}, {"Out": "new"}),),
            r"new ops may read only what the matched ops read and write only what they write; extra: \['new'\]",
        ),
        (
            (_MUL, _MUL),
            (Create("fc", ("mul", "mul"), {"Input": "x"}, {"Out": "t"}),),
            "its ops need distinct names",
        ),
    ],
    ids=["disconnected", "not-a-partition", "reads-an-intermediate", "invents-a-variable", "duplicate-names"],
)
def test_patterns_are_checked_when_declared(ops: tuple, creates: tuple, message: str) -> None:
    with pytest.raises(BlockirError, match=message):
        Pattern("bad", ops, creates)


def test_a_create_goes_at_its_groups_first_or_last_op() -> None:
    with pytest.raises(BlockirError, match="create 'fc': at must be 'first' or 'last', got 'middle'"):
        Create("fc", ("mul",), {"Input": "x"}, {"Out": "t"}, at="middle")


def fc_sgd_training() -> Program:
    """Two fc layers (fc_0 with a bias, fc_1 without) with fc_grad and SGD: the golden case of fuse-fc-sgd."""
    return parse_program((Path(__file__).parent / "golden" / "fuse-fc-sgd" / "training.before.txt").read_text())


@pytest.mark.parametrize(
    ("edit", "fused", "reasons"),
    [
        ("read", 1, ["%norm = reduce_sum(X=%fc_0.w_0) {reduce_all=true} would read another value of 'fc_0.w_0'"]),
        ("write", 1, ["%fc_0.w_0 = scale(X=%fc_0.w_0) {scale=0.5} would read another value of 'fc_0.w_0'"]),
        ("learning_rate", 0, ["the new fc_grad_sgd would read another value of 'learning_rate_0'"] * 2),
        ("scaled", 1, []),
    ],
)
def test_an_update_joins_its_gradient_op_only_where_nothing_in_between_sees_the_difference(
    edit: str, fused: int, reasons: list[str]
) -> None:
    """fc_grad_sgd writes W where fc_grad was: an op between fc_0's fc_grad and its update reading or writing W
    refuses that fusion; one writing the learning rate (after fc_1's fc_grad too) refuses both; a gradient
    scaled before its update (sgd reads the scale's output) does not match at all."""
    program = fc_sgd_training()
    block = program.global_block()
    at = index(program, "fc_grad", "fc_0.w_0@GRAD") + 1
    if edit == "read":
        block.create_var("norm", shape=(1,), dtype="float32")
        block.insert_op(at, "reduce_sum", {"X": ["fc_0.w_0"]}, {"Out": ["norm"]}, {"reduce_all": True})
    elif edit == "write":
        block.insert_op(at, "scale", {"X": ["fc_0.w_0"]}, {"Out": ["fc_0.w_0"]}, {"scale": 0.5})
    elif edit == "learning_rate":
        block.insert_op(at, "scale", {"X": ["learning_rate_0"]}, {"Out": ["learning_rate_0"]}, {"scale": 0.5})
    else:
        block.create_var("scaled", shape=(4, 3), dtype="float32")
        block.insert_op(at, "scale", {"X": ["fc_0.w_0@GRAD"]}, {"Out": ["scaled"]}, {"scale": 0.5})
        block.ops[index(program, "sgd", "fc_0.w_0")].set_input("Grad", ["scaled"])
    result, report = run(program, "fuse-fc-sgd")
    assert types(result).count("fc_grad_sgd") == fused and types(result).count("fc_grad") == 2 - fused
    assert [r.reason for r in refusals(report.record("fuse-fc-sgd"))] == reasons
