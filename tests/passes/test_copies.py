"""The ``insert-copies`` pass: the MLP acceptance case, lineage, sub-blocks, errors, and properties over
random programs mixing devices (verified, device-clean, idempotent, same results as on one device)."""

from __future__ import annotations

import pytest
from hypothesis import given, settings

import blockir as bir
from blockir.cli import main
from blockir.errors import BlockirError
from blockir.ir import Program, VarKind, parse_program
from blockir.passes import InsertCopies, Place, run
from tests.passes.programs import RandomProgram, assert_same_results, runnable_programs


def mlp(hidden_device: str | None = "cpu:1") -> tuple[Program, Program, bir.ir.Variable]:
    """The README's MLP, 784-256-256-10, trained with SGD; its hidden layer under ``device_guard(hidden_device)``."""
    main, startup = Program(), Program()
    main.random_seed = startup.random_seed = 5
    with bir.unique_name.guard(), bir.program_guard(main, startup):
        x = bir.data("x", shape=[-1, 784], dtype="float32")
        label = bir.data("label", shape=[-1, 1], dtype="int64")
        h = bir.layers.fc(x, size=256, act="relu")
        with bir.device_guard(hidden_device):
            h = bir.layers.fc(h, size=256, act="relu")
        pred = bir.layers.fc(h, size=10, act="softmax")
        loss = bir.layers.mean(bir.layers.cross_entropy(pred, label))
        bir.optimizer.SGD(learning_rate=0.1).minimize(loss)
    return main, startup, loss


def copies(program: Program) -> list[tuple[str, str, str]]:
    """(source, copy, destination) of every memcpy, in program order."""
    return [
        (op.input("X")[0], op.output("Out")[0], op.attr("dst_device"))
        for op in program.global_block().ops
        if op.type == "memcpy"
    ]


def assert_reads_on_own_device(program: Program) -> None:
    """Every op but memcpy reads values on its own device (a value is where its last writer ran, else where
    its variable lives, else on the host); memcpy runs on its destination."""
    for block in program.blocks:
        where: dict[str, str] = {}
        for op in block.ops:
            if op.type == "memcpy":
                assert op.device == op.attr("dst_device"), str(op)
            else:
                for name in op.input_names():
                    var = block.find_var_recursive(name)
                    assert where.get(name, var.device or "cpu") == op.device, f"{name} read by {op}"
            where.update(dict.fromkeys(op.output_names(), op.device))


def test_mlp_with_the_hidden_layer_on_cpu1_gets_exactly_the_needed_copies() -> None:
    main, _, _ = mlp()
    result, report = run(main, "place,insert-copies")
    assert copies(result) == [
        ("fc_0.tmp_2", "fc_0.tmp_2@cpu:1", "cpu:1"),  # the first layer's activation, into the hidden layer
        ("fc_1.tmp_2", "fc_1.tmp_2@cpu", "cpu"),  # the hidden layer's activation, back
        ("fc_1.tmp_2@GRAD", "fc_1.tmp_2@GRAD@cpu:1", "cpu:1"),  # its gradient, into the hidden layer
        ("fc_0.tmp_2@GRAD", "fc_0.tmp_2@GRAD@cpu", "cpu"),  # the first layer's activation's gradient, back
        ("learning_rate_0", "learning_rate_0@cpu:1", "cpu:1"),  # read by the updates on cpu:1
    ]
    assert report.record("insert-copies").added == 5
    assert_reads_on_own_device(result)
    assert copies(run(mlp(None)[0], "place,insert-copies")[0]) == []  # one device: no copies


def test_blockir_opt_prints_the_copies_after_the_pass_that_added_them(tmp_path, capsys) -> None:
    mlp()[0].save(str(tmp_path / "mlp.pb"))
    out = tmp_path / "placed.pb"
    assert (
        main(["opt", str(tmp_path / "mlp.pb"), "-p", "place,insert-copies", "--print-after-change", "-o", str(out)])
        == 0
    )
    printed = capsys.readouterr().out
    after_copies = printed.split("# after pass 2 of 2: insert-copies (changed)\n")[1]
    assert after_copies.count(" = memcpy(") == 5 and printed.count(" = memcpy(") == 5
    assert copies(bir.load_program(str(out))) == copies(run(mlp()[0], "place,insert-copies")[0])


def test_copies_record_their_lineage_and_role_and_survive_save_load() -> None:
    result, _ = run(mlp()[0], "place,insert-copies")
    back = Program.parse(result.serialize())
    by_out = {op.output("Out")[0]: op for op in back.global_block().ops if op.type == "memcpy"}
    first = by_out["fc_0.tmp_2@cpu:1"]
    assert (first.attr("op_pass"), first.attr("op_origin"), first.attr("op_role")) == (
        "insert-copies",
        ("relu:fc_0.tmp_2", "mul:fc_1.tmp_0"),
        0,
    )
    assert by_out["fc_1.tmp_2@GRAD@cpu:1"].attr("op_role") == 1  # backward, with its reader
    assert by_out["learning_rate_0@cpu:1"].attr("op_origin") == ("sgd:fc_1.w_0",)  # from the scope: no writer
    assert str(back) == str(result)


def test_running_twice_changes_nothing() -> None:
    result, _ = run(mlp()[0], "place,insert-copies")
    text = str(result)
    assert not InsertCopies().run(result)
    assert not Place().run(result)
    assert str(result) == text


def test_sub_blocks_copy_what_they_read_and_carry_home_what_they_write() -> None:
    program = parse_program("""program version=0
block 0 parent=-1 {
  var %x : lod_tensor<float32>[2, 2] need_check_feed
  var %a : lod_tensor<float32>[2, 2]
  %a = relu(X=%x)
}
block 1 parent=0 device=cpu:3 {
  var %d : lod_tensor<float32>[2, 2]
  %d = sigmoid(X=%a)
  %a = tanh(X=%d)
}""")
    result, _ = run(program, "place,insert-copies")
    assert_reads_on_own_device(result)
    assert [str(op) for op in result.block(1).ops] == [
        '%a@cpu:3 = memcpy(X=%a) {dst_device="cpu:3", op_pass="insert-copies", op_origin=["sigmoid:d"]} @cpu:3',
        "%d = sigmoid(X=%a@cpu:3) @cpu:3",
        "%a@cpu:3 = tanh(X=%d) @cpu:3",
        '%a = memcpy(X=%a@cpu:3) {dst_device="cpu", op_pass="insert-copies", op_origin=["tanh:a@cpu:3"]} @cpu',
    ]


def test_a_value_that_cannot_be_copied_is_an_error_naming_the_op() -> None:
    program = Program()
    block = program.global_block()
    block.create_var("arr", kind=VarKind.LOD_TENSOR_ARRAY, dtype="float32", shape=(2,), persistable=True)
    block.create_var("y", shape=(2,))
    block.append_op("test_array_read", {"X": "arr"}, {"Out": "y"}, {"op_device": "cpu:1"}, infer=False)
    block.vars["arr"].device = "cpu:2"
    with pytest.raises(
        BlockirError,
        match=r"'arr' is a lod_tensor_array variable on cpu:2, which cannot be copied "
        r"to cpu:1: %y = test_array_read\(X=%arr\) @cpu:1",
    ):
        InsertCopies().run(program)


# -- properties over random programs ------------------------------------------------------------------

DEVICES = ("", "cpu", "cpu:1", "cpu:2")


def on_one_device(program: Program) -> Program:
    single = program.clone()
    for op in single.ops():
        op.remove_attr("op_device")
    return single


@settings(max_examples=150)
@given(runnable_programs(devices=DEVICES))
def test_placed_and_copied_programs_are_clean_idempotent_and_compute_the_same(rp: RandomProgram) -> None:
    result, _ = run(rp.program, "place,insert-copies")  # verified after each pass
    assert_reads_on_own_device(result)
    text = str(result)
    assert not InsertCopies().run(result)
    assert str(result) == text
    expected = rp.run(on_one_device(rp.program))
    assert_same_results(rp.run(result), expected)
    assert_same_results(rp.run(), expected)  # the executor applies the pipeline itself
