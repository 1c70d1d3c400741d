"""Parameters and their initializers: init ops in the startup program, pinned devices, seeds."""

import math

import pytest

import blockir as bir
from blockir.errors import BlockirError
from blockir.ir.dtypes import DTYPE_TO_PROTO


def _init_ops(startup):
    return {op.output("Out")[0]: op for op in startup.global_block().ops}


def test_fc_parameters_live_in_main_and_are_initialised_in_startup(progs):
    main, startup = progs
    x = bir.data("x", shape=[-1, 6])
    bir.layers.fc(x, size=4)
    params = main.all_parameters()
    assert [p.name for p in params] == ["fc_0.w_0", "fc_0.b_0"]
    w, b = params
    assert (w.shape, b.shape, w.dtype) == ((6, 4), (4,), "float32")
    assert w.persistable and w.is_parameter and not w.stop_gradient and w.trainable
    assert isinstance(w, bir.dsl.Parameter)
    init = _init_ops(startup)
    assert set(init) == {"fc_0.w_0", "fc_0.b_0"}
    for name in init:
        var = startup.global_block().var(name)
        assert var.persistable and var.is_parameter and var.shape == main.global_block().var(name).shape
    # default initializers, as in Fluid: Xavier (uniform) for weights, zeros for biases
    limit = math.sqrt(6.0 / (6 + 4))
    w_init = init["fc_0.w_0"]
    assert w_init.type == "uniform_random"
    assert w_init.attr("min") == pytest.approx(-limit) and w_init.attr("max") == pytest.approx(limit)
    assert w_init.attr("shape") == (6, 4) and w_init.attr("dtype") == DTYPE_TO_PROTO["float32"]
    b_init = init["fc_0.b_0"]
    assert b_init.type == "fill_constant" and b_init.attr("value") == 0.0 and b_init.attr("shape") == (4,)
    assert not any(op.type in ("uniform_random", "fill_constant") for op in main.global_block().ops)


@pytest.mark.parametrize(
    "init, op_type, attrs",
    [
        (bir.initializer.Constant(0.25), "fill_constant", {"value": 0.25}),
        (bir.initializer.Uniform(-0.5, 2.0), "uniform_random", {"min": -0.5, "max": 2.0}),
        (bir.initializer.Normal(1.0, 0.5), "gaussian_random", {"mean": 1.0, "std": 0.5}),
        (bir.initializer.Xavier(uniform=False), "gaussian_random", {"mean": 0.0, "std": math.sqrt(2.0 / (3 + 5))}),
        (bir.initializer.Xavier(fan_in=10, fan_out=20), "uniform_random", {"max": math.sqrt(6.0 / 30)}),
    ],
)
def test_initializers_emit_their_op(progs, init, op_type, attrs):
    _, startup = progs
    x = bir.data("x", shape=[-1, 3])
    bir.layers.fc(x, size=5, param_attr=bir.ParamAttr(name="w", initializer=init), bias_attr=False)
    op = _init_ops(startup)["w"]
    assert op.type == op_type
    for key, value in attrs.items():
        assert op.attr(key) == pytest.approx(value)


def test_initializer_aliases_are_the_fluid_classes():
    ini = bir.initializer
    assert ini.Constant is ini.ConstantInitializer and ini.Uniform is ini.UniformInitializer
    assert ini.Normal is ini.NormalInitializer and ini.Xavier is ini.XavierInitializer


def test_xavier_fans_follow_fluid():
    from blockir.dsl.initializer import compute_fans

    assert compute_fans(()) == (1, 1)
    assert compute_fans((7,)) == (7, 7)
    assert compute_fans((3, 5)) == (3, 5)
    assert compute_fans((8, 4, 3, 3)) == (4 * 9, 8 * 9)


def test_bad_initializer_arguments():
    with pytest.raises(BlockirError, match="low"):
        bir.initializer.Uniform(1.0, 0.0)
    with pytest.raises(BlockirError, match="scale"):
        bir.initializer.Normal(0.0, -1.0)


def test_pinned_parameter_puts_its_initializer_on_its_device(progs):
    main, startup = progs
    x = bir.data("x", shape=[-1, 3])
    with bir.device_guard("cuda:0"):
        bir.layers.fc(x, size=2, param_attr=bir.ParamAttr(name="w", device="cpu:1"), bias_attr="b")
    init = _init_ops(startup)
    assert init["w"].device == "cpu:1"  # pinned wins over the guard
    assert init["b"].device == "cuda:0"  # built inside the guard
    assert main.global_block().var("w").device == "cpu:1"
    assert all(op.device == "cuda:0" for op in main.global_block().ops)


def test_shared_parameter_by_name(progs):
    main, startup = progs
    a = bir.data("a", shape=[-1, 3])
    b = bir.data("b", shape=[-1, 3])
    bir.layers.fc(a, size=2, param_attr="shared_w", bias_attr=False)
    bir.layers.fc(b, size=2, param_attr="shared_w", bias_attr=False)
    assert [p.name for p in main.all_parameters()] == ["shared_w"]
    assert len(startup.global_block().ops) == 1
    c = bir.data("c", shape=[-1, 4])
    with pytest.raises(BlockirError, match=r"layers.fc: parameter 'shared_w' exists with shape \[3, 2\]"):
        bir.layers.fc(c, size=2, param_attr="shared_w", bias_attr=False)


def _build_seeds(seed):
    main, startup = bir.Program(), bir.Program()
    startup.random_seed = seed
    with bir.unique_name.guard(), bir.program_guard(main, startup):
        x = bir.data("x", shape=[-1, 4])
        h = bir.layers.fc(x, size=8)
        bir.layers.fc(h, size=3, param_attr=bir.initializer.Normal(0.0, 0.1))
        bir.layers.embedding(bir.data("ids", shape=[-1, 1], dtype="int64"), size=[10, 4])
    return {
        op.output("Out")[0]: op.attr("seed")
        for op in startup.global_block().ops
        if op.type in ("uniform_random", "gaussian_random")
    }


def test_random_ops_get_deterministic_distinct_seeds():
    seeds = _build_seeds(7)
    assert set(seeds) == {"fc_0.w_0", "fc_1.w_0", "embedding_0.w_0"}
    assert all(isinstance(s, int) and 0 < s < 2**31 for s in seeds.values())
    assert len(set(seeds.values())) == len(seeds)  # one stream per op
    assert _build_seeds(7) == seeds  # rebuilding gives the same seeds
    other = _build_seeds(8)
    assert all(other[name] != seeds[name] for name in seeds)  # the program seed changes them


def test_an_explicit_seed_is_kept(progs):
    _, startup = progs
    x = bir.data("x", shape=[-1, 4])
    bir.layers.fc(x, size=2, param_attr=bir.initializer.Uniform(seed=123), bias_attr=False)
    assert _init_ops(startup)["fc_0.w_0"].attr("seed") == 123
