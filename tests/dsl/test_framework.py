"""Default programs, program_guard, device_guard, name_scope, unique names, ParamAttr; building from threads."""

import concurrent.futures
import threading
from collections.abc import Callable

import pytest

import blockir as bir
from blockir.dsl import framework
from blockir.errors import BlockirError


def test_program_guard_switches_and_restores_defaults():
    outer_main, outer_startup = bir.default_main_program(), bir.default_startup_program()
    main, startup = bir.Program(), bir.Program()
    with bir.program_guard(main, startup):
        assert bir.default_main_program() is main
        assert bir.default_startup_program() is startup
        inner = bir.Program()
        with bir.program_guard(inner):  # no startup given: keeps the current one
            assert bir.default_main_program() is inner
            assert bir.default_startup_program() is startup
        assert bir.default_main_program() is main
    assert bir.default_main_program() is outer_main
    assert bir.default_startup_program() is outer_startup


def test_program_guard_restores_after_an_error():
    outer = bir.default_main_program()
    with pytest.raises(RuntimeError), bir.program_guard(bir.Program(), bir.Program()):
        raise RuntimeError("boom")
    assert bir.default_main_program() is outer


def test_program_guard_rejects_non_programs():
    with pytest.raises(BlockirError, match="main_program must be a blockir Program"), bir.program_guard("main"):
        pass


def test_data_declares_a_fed_variable(progs):
    main, _ = progs
    x = bir.data("x", shape=[None, 3, 4], dtype="float64", lod_level=1)
    assert main.global_block().var("x") is x
    assert (x.dtype, x.shape, x.lod_level) == ("float64", (-1, 3, 4), 1)
    assert x.stop_gradient and x.need_check_feed and not x.persistable
    with pytest.raises(BlockirError, match="already exists"):
        bir.data("x", shape=[1])
    with pytest.raises(BlockirError, match="shape"):
        bir.data("y", shape=[-2, 3])
    with pytest.raises(BlockirError, match="unknown dtype"):
        bir.data("z", shape=[1], dtype="float7")


def test_device_guard_nests_and_innermost_wins(progs):
    main, _ = progs
    x = bir.data("x", shape=[-1, 4])
    a = bir.layers.fill_constant([1], "float32", 1.0)
    with bir.device_guard("cuda:0"):
        b = bir.layers.fill_constant([1], "float32", 2.0)
        with bir.device_guard("cpu:1"):
            c = bir.layers.fill_constant([1], "float32", 3.0)
            with bir.device_guard(None):
                d = bir.layers.fill_constant([1], "float32", 4.0)
        e = bir.layers.fill_constant([1], "float32", 5.0)
    devices = {op.output("Out")[0]: op.device for op in main.global_block().ops}
    assert devices == {a.name: "", b.name: "cuda:0", c.name: "cpu:1", d.name: "", e.name: "cuda:0"}
    op = main.global_block().ops[1]
    assert list(op.attrs)[-1] == "op_device"  # the text form prints it as the @ suffix
    assert str(op).endswith("@cuda:0")
    assert x.name == "x"


@pytest.mark.parametrize("device", ["gpu", "cuda:", "cpu:-1", "cuda:01", "tpu:0", "", "CPU"])
def test_device_guard_rejects_malformed_devices(device):
    error = r"is not a device \(expected cpu, cpu:N, cuda or cuda:N\): device_guard"
    with pytest.raises(BlockirError, match=error), bir.device_guard(device):
        pass


def test_name_scope_sets_op_namescope_and_numbers_repeats(progs):
    main, _ = progs
    bir.layers.fill_constant([1], "float32", 0.0)
    with bir.name_scope("encoder"):
        bir.layers.fill_constant([1], "float32", 1.0)
        with bir.name_scope("layer"):
            bir.layers.fill_constant([1], "float32", 2.0)
    with bir.name_scope("encoder"):
        bir.layers.fill_constant([1], "float32", 3.0)
    scopes = [op.attrs.get("op_namescope") for op in main.global_block().ops]
    assert scopes == [None, "/encoder/", "/encoder/layer/", "/encoder_1/"]
    with pytest.raises(BlockirError, match="name_scope prefix"), bir.name_scope("a/b"):
        pass


def test_unique_name_generate_and_guard():
    with bir.unique_name.guard():
        assert [bir.unique_name.generate("fc") for _ in range(3)] == ["fc_0", "fc_1", "fc_2"]
        assert bir.unique_name.generate("fc_0.w") == "fc_0.w_0"
        with bir.unique_name.guard("net/"):
            assert bir.unique_name.generate("fc") == "net/fc_0"
        assert bir.unique_name.generate("fc") == "fc_3"
    with bir.unique_name.guard():
        assert bir.unique_name.generate("fc") == "fc_0"


def test_param_attr_conversion_and_validation():
    to_attr = bir.ParamAttr.to_attr
    assert isinstance(to_attr(None), bir.ParamAttr) and to_attr(None).name is None
    assert to_attr("w").name == "w"
    init = bir.initializer.Constant(0.5)
    assert to_attr(init).initializer is init
    assert to_attr(False) is False
    attr = bir.ParamAttr(name="p", learning_rate=2, trainable=False, device="cuda:1")
    assert to_attr(attr) is attr
    assert (attr.learning_rate, attr.trainable, attr.device) == (2.0, False, "cuda:1")
    with pytest.raises(BlockirError, match="learning_rate"):
        bir.ParamAttr(learning_rate=-1)
    with pytest.raises(BlockirError, match="'gpu:0' is not a device .*: ParamAttr device"):
        bir.ParamAttr(device="gpu:0")
    with pytest.raises(BlockirError, match="initializer"):
        bir.ParamAttr(initializer=0.5)
    with pytest.raises(BlockirError, match="cannot use"):
        to_attr(3.0)


def _build(device: str, sync: Callable[[], object]) -> tuple[str, str]:
    """A small trained network on ``device``, built under its own guards; ``sync`` between the steps."""
    main, startup = bir.Program(), bir.Program()
    with bir.unique_name.guard(), bir.program_guard(main, startup), bir.device_guard(device):
        sync()
        x = bir.data("x", shape=[-1, 4])
        with bir.name_scope("encoder"):
            sync()
            h = bir.layers.fc(x, 8, act="relu")
            sync()
        with bir.name_scope("encoder"), bir.device_guard(None):
            y = bir.layers.fc(h, 1)
        sync()
        bir.optimizer.SGD(0.1).minimize(bir.layers.mean(y))
        sync()
    return str(main), str(startup)


def test_two_threads_build_programs_at_once_as_one_thread_builds_them_in_turn():
    devices = ["cpu:1", "cuda:0"]
    expected = [_build(device, lambda: None) for device in devices]
    assert expected[0] != expected[1] and "/encoder_1/" in expected[0][0]
    barrier = threading.Barrier(len(devices), timeout=30)  # every step of one build meets the other's
    with concurrent.futures.ThreadPoolExecutor(len(devices)) as pool:
        built = list(pool.map(lambda device: _build(device, barrier.wait), devices))
    assert built == expected
    # Neither thread's guards leaked into this one.
    assert framework.current_device() is None
    assert framework.current_name_scope() == "/"


def test_unique_name_guard_restarts_name_scope_numbering():
    def scopes() -> list[str]:
        main = bir.Program()
        with bir.unique_name.guard(), bir.program_guard(main):
            for _ in range(2):
                with bir.name_scope("block"):
                    bir.layers.fill_constant([1], "float32", 0.0)
        return [op.attr("op_namescope") for op in main.global_block().ops]

    assert scopes() == scopes() == ["/block/", "/block_1/"]


def test_program_guard_with_a_bad_startup_program_changes_nothing():
    outer = bir.default_main_program()
    with pytest.raises(BlockirError, match="startup_program must be a blockir Program"):
        bir.program_guard(bir.Program(), "startup").__enter__()  # type: ignore[arg-type]
    assert bir.default_main_program() is outer
