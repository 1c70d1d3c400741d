"""The ``place`` pass: the placement rules, fallbacks and notes, pins, the startup program, bad devices."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

import blockir as bir
from blockir.cli import main
from blockir.errors import BlockirError, PassError
from blockir.ir import Program, VarKind, parse_program
from blockir.ir.attrs import AttrType
from blockir.ir.schema import AttrDef, OpSchema, Slot
from blockir.passes import Place, place_startup, run
from tests.registries import ops_registered

# An op type with a CPU kernel only.
CPU_ONLY = OpSchema(
    "test_place_cpu_only",
    inputs=(Slot("X"),),
    outputs=(Slot("Out"),),
    attrs=(AttrDef("k", AttrType.INT, 0),),
    kernel=lambda ctx, x: x + 1,
    devices=frozenset({"cpu"}),
)


@pytest.fixture(scope="module", autouse=True)
def _ops() -> Iterator[None]:
    with ops_registered(CPU_ONLY):
        yield


def chain(*devices: str, program_device: str = "", block_device: str = "") -> Program:
    """x -> relu -> relu ... with one op per device given ('' for none)."""
    program = Program()
    program.device = program_device
    block = program.global_block()
    block.device = block_device
    block.create_var("x", shape=(2, 2), need_check_feed=True)
    prev = "x"
    for i, device in enumerate(devices):
        block.create_var(f"t{i}", shape=(2, 2))
        block.append_op("relu", {"X": prev}, {"Out": f"t{i}"}, {"op_device": device} if device else {})
        prev = f"t{i}"
    return program


def placed(program: Program, **options: object) -> list[str]:
    Place(**options).run(program)  # type: ignore[arg-type]
    return [op.device for op in program.global_block().ops]


@pytest.mark.parametrize(
    "kwargs, expected",
    [
        ({}, ["cpu:1", "cpu"]),  # nothing said: the host
        ({"default": "cpu:2"}, ["cpu:1", "cpu:2"]),  # the option when the program says nothing
        ({"default": "cpu:2", "program_device": "cpu:3"}, ["cpu:1", "cpu:3"]),  # the program's default is nearer
        ({"default": "cpu:2", "program_device": "cpu:3", "block_device": "cpu:4"}, ["cpu:1", "cpu:4"]),
    ],
)
def test_own_device_then_block_then_program_then_option_then_host(kwargs: dict, expected: list[str]) -> None:
    default = kwargs.pop("default", "")
    assert placed(chain("cpu:1", "", **kwargs), default=default) == expected


def test_cuda_defaults_need_no_gpu_and_devices_are_spelled_canonically() -> None:
    assert placed(chain("", "cpu:0", "cuda"), default="cuda:0") == ["cuda:0", "cpu", "cuda:0"]


def test_variables_live_where_their_first_writer_runs_and_feeds_on_the_host() -> None:
    program = chain("cpu:1", "cpu:2")
    Place().run(program)
    assert {v.name: v.device for v in program.list_vars()} == {"x": "cpu", "t0": "cpu:1", "t1": "cpu:2"}
    fed_on_gpu = chain("cuda:0", "cpu")
    fed_on_gpu.global_block().var("x").device = "cuda"  # as the executor marks a value fed on a GPU
    Place().run(fed_on_gpu)
    assert {v.name: v.device for v in fed_on_gpu.list_vars()} == {"x": "cuda:0", "t0": "cuda:0", "t1": "cpu"}


def test_placing_twice_changes_nothing() -> None:
    program = chain("cpu:1", "", "cpu:2")
    assert Place(default="cpu:3").run(program)
    text = str(program)
    assert not Place(default="cpu:3").run(program)
    assert not Place().run(program)  # every op has its device now: the option no longer matters
    assert str(program) == text


def test_an_op_without_a_kernel_for_its_device_falls_back_to_the_host_with_a_note() -> None:
    program = chain("")
    block = program.global_block()
    block.create_var("y", shape=(2, 2))
    block.append_op("test_place_cpu_only", {"X": "t0"}, {"Out": "y"})
    result, report = run(program, "place{default=cuda:0}")
    assert [op.device for op in result.global_block().ops] == ["cuda:0", "cpu"]
    [message] = report.record("place").notes
    assert message == (
        "test_place_cpu_only has no cuda kernel: runs on the host instead of cuda:0: %y = test_place_cpu_only(X=%t0)"
    )
    assert "notes:\n  1 place: test_place_cpu_only has no cuda kernel" in str(report)


def test_strict_makes_the_fallback_an_error_naming_the_op() -> None:
    program = chain("")
    block = program.global_block()
    block.create_var("y", shape=(2, 2))
    block.append_op("test_place_cpu_only", {"X": "t0"}, {"Out": "y"}, {"k": 3})
    with pytest.raises(
        BlockirError,
        match=r"no kernel for cuda:0 \(it has cpu\): %y = test_place_cpu_only"
        r"\(X=%t0\) \{k=3\}",
    ):
        Place(default="cuda:0", strict=True).run(program)
    with pytest.raises(PassError, match="pass 'place{default=cuda:0 strict=true}'"):
        run(program, "place{default=cuda:0 strict=true}")


def test_feed_and_fetch_stay_on_the_host_with_a_note_when_asked_elsewhere() -> None:
    program = parse_program("""program version=0
block 0 parent=-1 {
  var %feed : feed_minibatch persistable
  var %fetch : fetch_list persistable
  var %x : lod_tensor<float32>[2]
  var %y : lod_tensor<float32>[2]
  %x = feed(X=%feed) {col=0} @cpu:1
  %y = relu(X=%x)
  %fetch = fetch(X=%y) {col=0}
}""")
    result, report = run(program, "place{default=cpu:2}")
    assert [op.device for op in result.global_block().ops] == ["cpu", "cpu:2", "cpu"]
    assert report.record("place").notes == ["feed runs on the host, not on cpu:1: %x = feed(X=%feed) {col=0} @cpu:1"]


def test_gradient_ops_follow_their_forward_op_and_updates_their_parameter() -> None:
    main, startup = Program(), Program()
    with bir.unique_name.guard(), bir.program_guard(main, startup):
        x = bir.data("x", shape=[-1, 3], dtype="float32")
        with bir.device_guard("cpu:1"):
            h = bir.layers.fc(x, size=2)
        loss = bir.layers.mean(h)
        bir.optimizer.SGD(learning_rate=0.1).minimize(loss)
    for op in main.global_block().ops:  # keep the devices of the forward ops only
        if op.attr("op_role") & 3:
            op.remove_attr("op_device")
    Place().run(main)
    devices = {(op.type, op.output_names()[0]): op.device for op in main.global_block().ops}
    assert devices == {
        ("mul", "fc_0.tmp_0"): "cpu:1",
        ("elementwise_add", "fc_0.tmp_1"): "cpu:1",
        ("mean", "mean_0.tmp_0"): "cpu",
        ("fill_constant", "mean_0.tmp_0@GRAD"): "cpu",
        ("mean_grad", "fc_0.tmp_1@GRAD"): "cpu",
        ("elementwise_add_grad", "fc_0.tmp_0@GRAD"): "cpu:1",
        ("mul_grad", "fc_0.w_0@GRAD"): "cpu:1",
        ("sgd", "fc_0.w_0"): "cpu:1",
        ("sgd", "fc_0.b_0"): "cpu:1",
    }
    assert main.global_block().var("learning_rate_0").device == "cpu:1"  # where its first reader runs


def test_a_pinned_parameter_keeps_its_device_and_the_pin_is_saved(tmp_path) -> None:
    main, startup = Program(), Program()
    with bir.unique_name.guard(), bir.program_guard(main, startup):
        x = bir.data("x", shape=[-1, 3], dtype="float32")
        with bir.device_guard("cpu:1"):
            bir.layers.fc(x, size=2, param_attr=bir.ParamAttr(name="w", device="cpu:2"), bias_attr=False)
    assert main.global_block().var("w").device == "cpu:2"
    main.save(str(tmp_path / "main.pb"))
    loaded = bir.load_program(str(tmp_path / "main.pb"))
    assert loaded.global_block().var("w").device == "cpu:2"
    assert "var %w : lod_tensor<float32>[3, 2] device=cpu:2 persistable parameter" in str(loaded)
    Place().run(loaded)
    assert loaded.global_block().var("w").device == "cpu:2"
    assert [op.device for op in loaded.global_block().ops] == ["cpu:1"]


def test_place_startup_puts_initializers_where_main_keeps_the_variables() -> None:
    main, startup = Program(), Program()
    with bir.unique_name.guard(), bir.program_guard(main, startup):
        x = bir.data("x", shape=[-1, 3], dtype="float32")
        with bir.device_guard("cpu:2"):
            h = bir.layers.fc(x, size=2)
        bir.optimizer.SGD(learning_rate=0.1).minimize(bir.layers.mean(h))
    for op in main.global_block().ops:  # the model moves to cpu:1 after it was built
        if op.device == "cpu:2":
            op.set_attr("op_device", "cpu:1")
    main_text = str(main)
    assert {op.device for op in startup.global_block().ops} == {"cpu:2", ""}
    assert place_startup(startup, main)
    assert str(main) == main_text
    inits = {op.output_names()[0]: op.device for op in startup.global_block().ops}
    assert inits == {"fc_0.w_0": "cpu:1", "fc_0.b_0": "cpu:1", "learning_rate_0": "cpu:1"}
    assert {v.name: v.device for v in startup.list_vars()} == inits
    assert not place_startup(startup, main)


def test_channel_ops_run_on_their_channels_device() -> None:
    program = Program()
    block = program.global_block()
    block.create_var("ch", kind=VarKind.CHANNEL, dtype="float32", device="cpu:2")
    block.create_var("other", kind=VarKind.CHANNEL, dtype="float32")
    block.create_var("x", shape=(2,), need_check_feed=True)
    block.append_op("test_channel_send", {"Channel": "ch", "X": "x"}, {}, {"op_device": "cpu:1"}, infer=False)
    assert placed(program) == ["cpu:2"]
    block.append_op("test_channel_move", {"X": ["ch", "other"]}, {}, infer=False)
    with pytest.raises(BlockirError, match=r"channels on different devices \(cpu, cpu:2\): test_channel_move"):
        Place().run(program)


@pytest.mark.parametrize(
    "mutate, message",
    [
        (lambda p: p.global_block().ops[0].set_attr("op_device", "cuda:x"), "'cuda:x' is not a device .*: %t0 = relu"),
        (lambda p: setattr(p.global_block(), "device", "gpu:-1"), "'gpu:-1' is not a device .*: block 0"),
        (
            lambda p: (
                p.global_block().create_var("w", device="tpu", persistable=True)
                and p.global_block().ops[0].set_input("X", ["w"])
            ),
            "'tpu' is not a device .*: variable 'w'",
        ),
    ],
)
def test_bad_devices_are_errors_naming_them(mutate, message: str) -> None:
    program = chain("")
    mutate(program)
    with pytest.raises(BlockirError, match=message):
        Place().run(program)
    with pytest.raises(BlockirError, match=message.split(" .*")[0]):
        bir.Executor("cpu").run(program, feed={"x": [[1.0, 2.0], [3.0, 4.0]]})


def test_a_bad_default_option_is_an_error_when_the_pipeline_is_parsed(tmp_path, capsys) -> None:
    with pytest.raises(BlockirError, match="'gpu:-1' is not a device .*: the place option default"):
        Place(default="gpu:-1")
    chain("").save(str(tmp_path / "p.pb"))
    assert main(["opt", str(tmp_path / "p.pb"), "-p", "place{default=gpu:-1}", "-o", str(tmp_path / "o.pb")]) == 2
    assert capsys.readouterr().err == (
        "blockir: error: 'gpu:-1' is not a device (expected cpu, cpu:N, cuda or cuda:N): the place option default\n"
    )


def test_a_cycle_of_blocks_is_an_error_not_a_hang() -> None:
    program = chain()
    program.create_block(0)
    program.create_block(1)
    program.block(1).parent_idx = 2
    program.block(2).create_var("y", shape=(2, 2))
    program.block(2).append_op("relu", {"X": "y"}, {"Out": "y"}, infer=False)
    with pytest.raises(BlockirError, match="default device of block 2 depends on itself"):
        Place().run(program)
