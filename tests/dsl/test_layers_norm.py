"""bir.layers.batch_norm, layer_norm, group_norm, instance_norm and dropout: the programs they build, and those
programs run on the CPU executor against numpy (training updates the moving statistics, a test clone normalizes
with them; dropout's mask, seeds and scaling per implementation in training and in a test)."""

from __future__ import annotations

import numpy as np
import pytest

import blockir as bir
from blockir.errors import BlockirError, ShapeError
from tests.ops.cases_norm import ref_group_norm, ref_instance_norm

RNG = np.random.default_rng(7)


def _ops(program: bir.Program) -> list:
    return program.global_block().ops


def _run_startup(startup: bir.Program) -> tuple[bir.Executor, bir.Scope]:
    scope = bir.Scope()
    exe = bir.Executor("cpu")
    exe.run(startup, scope=scope)
    return exe, scope


def numpy_batch_norm(x: np.ndarray, scale, bias, mean, variance, axis: int = 1, eps: float = 1e-5) -> np.ndarray:
    shape = [1] * x.ndim
    shape[axis] = -1
    v = [np.reshape(a, shape).astype(np.float64) for a in (scale, bias, mean, variance)]
    return (x - v[2]) / np.sqrt(v[3] + eps) * v[0] + v[1]


def batch_stats(x: np.ndarray, axis: int = 1) -> tuple[np.ndarray, np.ndarray]:
    """The batch's mean and biased variance per channel (Paddle's)."""
    axes = tuple(i for i in range(x.ndim) if i != axis)
    mean = x.astype(np.float64).mean(axis=axes)
    return mean, ((x - np.reshape(mean, [-1 if i == axis else 1 for i in range(x.ndim)])) ** 2).mean(axis=axes)


# -- batch_norm ----------------------------------------------------------------------------------


def test_batch_norm_builds_fluids_op_and_parameters(progs):
    main, startup = progs
    x = bir.data("x", shape=[-1, 3, 4, 4])
    out = bir.layers.batch_norm(x, act="relu", momentum=0.8, epsilon=1e-3)
    bn, relu = _ops(main)
    assert (bn.type, relu.type) == ("batch_norm", "relu")
    assert bn.input("Mean") == bn.output("MeanOut") == ("batch_norm_0.w_1",)  # updated in place
    assert bn.input("Variance") == bn.output("VarianceOut") == ("batch_norm_0.w_2",)
    assert bn.input("Scale") == ("batch_norm_0.w_0",) and bn.input("Bias") == ("batch_norm_0.b_0",)
    assert (bn.attr("momentum"), bn.attr("is_test"), bn.attr("data_layout")) == (pytest.approx(0.8), False, "NCHW")
    assert out.shape == (-1, 3, 4, 4) and relu.output("Out") == (out.name,)
    params = {p.name: p for p in main.all_parameters()}
    assert [(n, p.trainable) for n, p in params.items()] == [
        ("batch_norm_0.w_0", True),
        ("batch_norm_0.b_0", True),
        ("batch_norm_0.w_1", False),
        ("batch_norm_0.w_2", False),
    ]
    assert all(p.persistable and p.shape == (3,) for p in params.values())
    assert params["batch_norm_0.w_1"].stop_gradient and params["batch_norm_0.w_2"].stop_gradient
    exe, scope = _run_startup(startup)
    for name, value in (("w_0", 1.0), ("b_0", 0.0), ("w_1", 0.0), ("w_2", 1.0)):
        np.testing.assert_array_equal(scope.get(f"batch_norm_0.{name}"), np.full(3, value, np.float32))
    bir.ir.verify(main)
    assert str(bir.ir.parse(str(main))) == str(main)


def test_batch_norm_names_and_layout(progs):
    main, _ = progs
    x = bir.data("x", shape=[-1, 5, 5, 4])
    bir.layers.batch_norm(
        x,
        data_layout="NHWC",
        param_attr="gamma",
        bias_attr=bir.ParamAttr(name="beta"),
        moving_mean_name="mu",
        moving_variance_name="sigma2",
    )
    (bn,) = _ops(main)
    assert [bn.input(s)[0] for s in ("Scale", "Bias", "Mean", "Variance")] == ["gamma", "beta", "mu", "sigma2"]
    assert all(main.global_block().var(n).shape == (4,) for n in ("gamma", "beta", "mu", "sigma2"))


def test_batch_norm_float16_input_keeps_float32_statistics(progs):
    main, _ = progs
    out = bir.layers.batch_norm(bir.data("x", shape=[-1, 2, 3], dtype="float16"))
    assert out.dtype == "float16"
    assert {main.global_block().var(f"batch_norm_0.{n}").dtype for n in ("w_0", "b_0", "w_1", "w_2")} == {"float32"}


def test_batch_norm_training_updates_the_moving_statistics_and_the_test_clone_uses_them():
    main, startup = bir.Program(), bir.Program()
    with bir.unique_name.guard(), bir.program_guard(main, startup):
        x = bir.data("x", shape=[-1, 3, 2, 2], dtype="float64")
        y = bir.layers.batch_norm(x, momentum=0.7)
        loss = bir.layers.mean(bir.layers.fc(y, 2, act="tanh"))
        test = main.clone(for_test=True)
        bir.optimizer.SGD(0.5).minimize(loss)
    assert [op.attr("is_test") for op in _ops(test) if op.type == "batch_norm"] == [True]
    exe, scope = _run_startup(startup)
    mean, variance = np.zeros(3), np.ones(3)
    for step in range(4):
        batch = RNG.normal(loc=step - 1.0, scale=1.0 + step, size=(5, 3, 2, 2))
        params = {n: np.array(scope.get(f"batch_norm_0.{n}")) for n in ("w_0", "b_0")}
        (got,) = exe.run(main, feed={"x": batch}, fetch_list=[y], scope=scope)
        batch_mean, batch_var = batch_stats(batch)
        np.testing.assert_allclose(got, numpy_batch_norm(batch, params["w_0"], params["b_0"], batch_mean, batch_var))
        mean, variance = 0.7 * mean + 0.3 * batch_mean, 0.7 * variance + 0.3 * batch_var
        np.testing.assert_allclose(scope.get("batch_norm_0.w_1"), mean)
        np.testing.assert_allclose(scope.get("batch_norm_0.w_2"), variance)
    assert not np.array_equal(scope.get("batch_norm_0.w_0"), np.ones(3))  # the scale trains
    params = {n: np.array(scope.get(f"batch_norm_0.{n}")) for n in ("w_0", "b_0", "w_1", "w_2")}
    batch = RNG.normal(size=(2, 3, 2, 2))
    (got,) = exe.run(test, feed={"x": batch}, fetch_list=[y], scope=scope)
    np.testing.assert_allclose(got, numpy_batch_norm(batch, *params.values()))
    for name, value in params.items():  # a test updates nothing
        np.testing.assert_array_equal(scope.get(f"batch_norm_0.{name}"), value)


@pytest.mark.parametrize("layout, axis", [("NHWC", 3), ("NCHW", 1)])
def test_batch_norm_use_global_stats_in_training(layout, axis):
    main, startup = bir.Program(), bir.Program()
    with bir.unique_name.guard(), bir.program_guard(main, startup):
        x = bir.data("x", shape=[-1, 2, 2, 3] if layout == "NHWC" else [-1, 3, 2, 2], dtype="float64")
        y = bir.layers.batch_norm(x, data_layout=layout, use_global_stats=True, act="sigmoid")
        bir.optimizer.SGD(0.1).minimize(bir.layers.mean(y))
    exe, scope = _run_startup(startup)
    scope.set("batch_norm_0.w_1", np.array([0.5, -1.0, 2.0]))
    scope.set("batch_norm_0.w_2", np.array([4.0, 0.25, 1.0]))
    batch = RNG.normal(size=(4, 2, 2, 3) if layout == "NHWC" else (4, 3, 2, 2))
    (got,) = exe.run(main, feed={"x": batch}, fetch_list=[y], scope=scope)
    normalized = numpy_batch_norm(batch, np.ones(3), np.zeros(3), [0.5, -1.0, 2.0], [4.0, 0.25, 1.0], axis)
    np.testing.assert_allclose(got, 1 / (1 + np.exp(-normalized)))
    np.testing.assert_array_equal(scope.get("batch_norm_0.w_1"), [0.5, -1.0, 2.0])  # not updated
    assert not np.array_equal(scope.get("batch_norm_0.b_0"), np.zeros(3))  # the gradient reached the bias


@pytest.mark.parametrize(
    "kwargs, shape, message",
    [
        ({"data_layout": "NCDHW"}, [-1, 3, 4], r"data_layout must be 'NCHW' or 'NHWC', got 'NCDHW'"),
        ({}, [-1], r"input 'x' of shape \[-1\] must have rank 2 or more"),
        ({"data_layout": "NHWC"}, [-1, 3, -1], r"the channel dim \(NHWC\) must be known"),
        ({"param_attr": False}, [-1, 3], r"batch_norm always has a scale and a bias"),
    ],
)
def test_batch_norm_rejects(progs, kwargs, shape, message):
    with pytest.raises(ShapeError, match=r"layers\.batch_norm: .*" + message):
        bir.layers.batch_norm(bir.data("x", shape=shape), **kwargs)


def test_batch_norm_rejects_an_integer_input(progs):
    with pytest.raises(ShapeError, match=r"layers\.batch_norm: input 'x' has dtype int64"):
        bir.layers.batch_norm(bir.data("x", shape=[-1, 3], dtype="int64"))


# -- layer_norm ----------------------------------------------------------------------------------


def numpy_layer_norm(x: np.ndarray, begin: int, scale=None, bias=None, eps: float = 1e-5) -> np.ndarray:
    rows = x.reshape(int(np.prod(x.shape[:begin])), -1)
    out = (rows - rows.mean(axis=1, keepdims=True)) / np.sqrt(rows.var(axis=1, keepdims=True) + eps)
    if scale is not None:
        out = out * scale
    if bias is not None:
        out = out + bias
    return out.reshape(x.shape)


def test_layer_norm_builds_and_runs(progs):
    main, startup = progs
    x = bir.data("x", shape=[-1, 3, 4], dtype="float64")
    out = bir.layers.layer_norm(x, begin_norm_axis=2, epsilon=1e-3, act="tanh")
    ln, act = _ops(main)
    assert ln.type == "layer_norm" and act.type == "tanh"
    assert ln.input("Scale") == ("layer_norm_0.w_0",) and ln.input("Bias") == ("layer_norm_0.b_0",)
    assert ln.attr("begin_norm_axis") == 2 and ln.attr("epsilon") == pytest.approx(1e-3)
    assert main.global_block().var("layer_norm_0.w_0").shape == (4,)
    assert main.global_block().var(ln.output("Mean")[0]).shape == (-1,)
    assert out.shape == (-1, 3, 4)
    exe, scope = _run_startup(startup)
    np.testing.assert_array_equal(scope.get("layer_norm_0.w_0"), np.ones(4))
    np.testing.assert_array_equal(scope.get("layer_norm_0.b_0"), np.zeros(4))
    scale, bias = RNG.normal(size=4), RNG.normal(size=4)
    scope.set("layer_norm_0.w_0", scale)
    scope.set("layer_norm_0.b_0", bias)
    batch = RNG.normal(size=(2, 3, 4))
    (got,) = exe.run(main, feed={"x": batch}, fetch_list=[out], scope=scope)
    np.testing.assert_allclose(got, np.tanh(numpy_layer_norm(batch, 2, scale, bias, 1e-3)))


def test_layer_norm_without_scale_and_shift_trains_the_layers_below(progs):
    main, startup = progs
    x = bir.data("x", shape=[-1, 4], dtype="float64")
    hidden = bir.layers.fc(x, 6)
    out = bir.layers.layer_norm(hidden, scale=False, shift=False)
    (ln,) = [op for op in _ops(main) if op.type == "layer_norm"]
    assert "Scale" not in ln.inputs and "Bias" not in ln.inputs
    assert not any(p.name.startswith("layer_norm") for p in main.all_parameters())
    loss = bir.layers.mean(bir.layers.elementwise_mul(out, out))
    bir.optimizer.SGD(0.1).minimize(loss)
    assert "layer_norm_grad" in [op.type for op in _ops(main)]
    exe, scope = _run_startup(startup)
    batch = RNG.normal(size=(3, 4))
    w = np.array(scope.get("fc_0.w_0"))
    (got,) = exe.run(main, feed={"x": batch}, fetch_list=[out], scope=scope)
    np.testing.assert_allclose(got, numpy_layer_norm(batch @ w, 1), atol=1e-12)
    assert not np.array_equal(scope.get("fc_0.w_0"), w)


@pytest.mark.parametrize(
    "kwargs, message",
    [
        ({"begin_norm_axis": 3}, r"begin_norm_axis must be an int in \[0, 3\), got 3"),
        ({"begin_norm_axis": True}, r"begin_norm_axis must be an int in \[0, 3\), got True"),
        ({"begin_norm_axis": 0}, r"the dims from begin_norm_axis=0 on make the scale and bias and must be known"),
        ({"param_attr": False}, r"param_attr=False: use scale=False for no scale"),
        ({"bias_attr": False}, r"bias_attr=False: use shift=False for no bias"),
    ],
)
def test_layer_norm_rejects(progs, kwargs, message):
    with pytest.raises(ShapeError, match=r"layers\.layer_norm: .*" + message):
        bir.layers.layer_norm(bir.data("x", shape=[-1, 3, 4]), **kwargs)


# -- dropout -----------------------------------------------------------------------------------------


def dropout_program(
    p: float, implementation: str, seed: int | None = None, random_seed: int = 0, shape: tuple = (-1, 50)
) -> tuple[bir.Program, bir.Program, bir.Program, bir.dsl.Variable, bir.dsl.Variable]:
    """x -> dropout; the main and startup programs, the test clone, Out and Mask."""
    main, startup = bir.Program(), bir.Program()
    main.random_seed = random_seed
    with bir.unique_name.guard(), bir.program_guard(main, startup):
        x = bir.data("x", shape=list(shape), dtype="float64")
        out = bir.layers.dropout(x, p, seed=seed, dropout_implementation=implementation)
    mask = main.global_block().var(_ops(main)[0].output("Mask")[0])
    return main, startup, main.clone(for_test=True), out, mask


def test_dropout_attributes_follow_fluid(progs):
    main, _ = progs
    x = bir.data("x", shape=[-1, 8])
    out = bir.layers.dropout(x, 0.25)
    bir.layers.dropout(x, 0.5, seed=5, dropout_implementation="upscale_in_train", is_test=True)
    first, second = _ops(main)
    assert first.attrs == {
        "dropout_prob": 0.25,
        "is_test": False,
        "fix_seed": False,
        "seed": 0,
        "dropout_implementation": "downgrade_in_infer",
        "op_role": 0,
    }
    assert (second.attr("fix_seed"), second.attr("seed"), second.attr("is_test")) == (True, 5, True)
    assert second.attr("dropout_implementation") == "upscale_in_train"
    mask = main.global_block().var(first.output("Mask")[0])
    assert (mask.dtype, mask.shape, mask.stop_gradient) == ("uint8", (-1, 8), True)
    assert out.shape == (-1, 8) and out.dtype == "float32"


def test_a_program_seed_fixes_each_dropout_mask_differently():
    main, startup = bir.Program(), bir.Program()
    main.random_seed = 11
    with bir.unique_name.guard(), bir.program_guard(main, startup):
        x = bir.data("x", shape=[-1, 8])
        bir.layers.dropout(bir.layers.dropout(x, 0.5), 0.5)
    seeds = [(op.attr("fix_seed"), op.attr("seed")) for op in _ops(main)]
    assert all(fixed and seed for fixed, seed in seeds) and seeds[0] != seeds[1]


@pytest.mark.parametrize("implementation", ["downgrade_in_infer", "upscale_in_train"])
def test_dropout_in_training_zeroes_about_p_and_scales_per_implementation(implementation):
    p = 0.3
    main, startup, _, out, mask = dropout_program(p, implementation)
    exe, scope = _run_startup(startup)
    batch = RNG.uniform(1.0, 2.0, size=(400, 50))
    got, kept = exe.run(main, feed={"x": batch}, fetch_list=[out, mask], scope=scope)
    assert kept.dtype == np.uint8 and set(np.unique(kept).tolist()) == {0, 1}
    # 20000 draws: standard error 0.0032; 6 of them (0.01 was 3.1, which a fresh mask missed once in CI)
    assert kept.mean() == pytest.approx(1 - p, abs=0.02)
    factor = 1 / (1 - p) if implementation == "upscale_in_train" else 1.0
    np.testing.assert_allclose(got, batch * kept * factor)
    assert got.mean() == pytest.approx(batch.mean() * (1 - p) * factor, rel=0.03)


@pytest.mark.parametrize(
    "implementation, factor", [("downgrade_in_infer", 1 - 0.3), ("upscale_in_train", 1.0)], ids=["downgrade", "upscale"]
)
def test_dropout_in_a_test_clone_scales_per_implementation(implementation, factor):
    _, startup, test, out, _ = dropout_program(0.3, implementation)
    assert _ops(test)[0].attr("is_test") is True
    exe, scope = _run_startup(startup)
    batch = RNG.normal(size=(6, 50))
    (got,) = exe.run(test, feed={"x": batch}, fetch_list=[out], scope=scope)
    np.testing.assert_allclose(got, batch * factor)


def test_dropout_masks_are_fresh_without_a_seed_and_repeat_with_one():
    batch = np.ones((8, 50))

    def masks(seed: int | None, random_seed: int = 0, runs: int = 2) -> list[np.ndarray]:
        main, startup, _, _, mask = dropout_program(0.5, "upscale_in_train", seed, random_seed)
        exe, scope = _run_startup(startup)
        return [exe.run(main, feed={"x": batch}, fetch_list=[mask], scope=scope)[0] for _ in range(runs)]

    fresh = masks(None)
    assert not np.array_equal(*fresh)
    seeded = masks(42)
    np.testing.assert_array_equal(*seeded)
    np.testing.assert_array_equal(seeded[0], masks(42, runs=1)[0])  # another program, the same mask
    assert not np.array_equal(seeded[0], masks(43, runs=1)[0])
    program_seeded = masks(None, random_seed=5)
    np.testing.assert_array_equal(*program_seeded)
    np.testing.assert_array_equal(program_seeded[0], masks(None, random_seed=5, runs=1)[0])


@pytest.mark.parametrize("implementation", ["downgrade_in_infer", "upscale_in_train"])
def test_dropout_gradient_flows_through_the_mask(implementation):
    p = 0.4
    main, startup = bir.Program(), bir.Program()
    with bir.unique_name.guard(), bir.program_guard(main, startup):
        x = bir.data("x", shape=[-1, 3], dtype="float64")
        hidden = bir.layers.fc(x, 10, bias_attr=False)
        out = bir.layers.dropout(hidden, p, seed=3, dropout_implementation=implementation)
        loss = bir.layers.reduce_sum(out, dim=[0, 1])
        ((w, w_grad),) = bir.append_backward(loss)
    mask = main.global_block().var(next(op for op in _ops(main) if op.type == "dropout").output("Mask")[0])
    exe, scope = _run_startup(startup)
    batch = RNG.normal(size=(4, 3))
    kept, grad = exe.run(main, feed={"x": batch}, fetch_list=[mask, w_grad], scope=scope)
    factor = 1 / (1 - p) if implementation == "upscale_in_train" else 1.0
    np.testing.assert_allclose(grad, batch.T @ (kept * factor))


def test_dropout_rejects(progs):
    x = bir.data("x", shape=[-1, 4])
    with pytest.raises(ShapeError, match=r"layers\.dropout: dropout: dropout_prob 1.5 must be in \[0, 1\]"):
        bir.layers.dropout(x, 1.5)
    with pytest.raises(ShapeError, match=r"layers\.dropout: dropout: dropout_implementation 'scale' is not one of"):
        bir.layers.dropout(x, 0.5, dropout_implementation="scale")
    with pytest.raises(ShapeError, match=r"layers\.dropout: dropout_prob must be a number in \[0, 1\], got '0.5'"):
        bir.layers.dropout(x, "0.5")  # type: ignore[arg-type]
    with pytest.raises(ShapeError, match=r"layers\.dropout: seed must be an int or None, got 1.5"):
        bir.layers.dropout(x, 0.5, seed=1.5)  # type: ignore[arg-type]
    with pytest.raises(BlockirError, match=r"layers\.dropout: x must be a Variable"):
        bir.layers.dropout(np.ones(3), 0.5)  # type: ignore[arg-type]


# -- group_norm and instance_norm ------------------------------------------------------------------------


def test_group_norm_builds_the_op_and_parameters_and_computes_the_reference(progs):
    main, startup = progs
    x = bir.data("x", shape=[-1, 4, 3, 3], dtype="float64")
    y = bir.layers.group_norm(x, groups=2, epsilon=1e-4, act="relu")
    norm, relu = _ops(main)
    assert (norm.type, relu.type) == ("group_norm", "relu")
    assert norm.input("Scale") == ("group_norm_0.w_0",) and norm.input("Bias") == ("group_norm_0.b_0",)
    assert norm.attr("groups") == 2 and norm.attr("epsilon") == pytest.approx(1e-4)
    assert norm.attr("data_layout") == "NCHW"
    assert y.shape == (-1, 4, 3, 3) and main.global_block().var(norm.output("Mean")[0]).shape == (-1, 2)
    exe, scope = _run_startup(startup)
    value = RNG.normal(size=(2, 4, 3, 3))
    (got,) = exe.run(main, feed={"x": value}, fetch_list=[y], scope=scope)
    expected = ref_group_norm(value, np.ones(4), np.zeros(4), 2, epsilon=1e-4)["Y"]
    np.testing.assert_allclose(got, np.maximum(expected, 0), rtol=1e-10, atol=1e-12)


def test_group_norm_nhwc_without_parameters_and_instance_norm_train(progs):
    main, startup = progs
    x = bir.data("x", shape=[-1, 3, 3, 4], dtype="float64")
    h = bir.layers.group_norm(x, 2, param_attr=False, bias_attr=False, data_layout="NHWC")
    norm = _ops(main)[0]
    assert "Scale" not in norm.inputs and "Bias" not in norm.inputs
    y = bir.layers.instance_norm(bir.layers.transpose(h, [0, 3, 1, 2]))
    inorm = _ops(main)[-1]
    assert inorm.type == "instance_norm" and inorm.input("Scale") == ("instance_norm_0.w_0",)
    assert main.global_block().var(inorm.output("SavedMean")[0]).shape == (-1,)
    loss = bir.layers.mean(bir.layers.square_error_cost(y, bir.data("t", shape=[-1, 4, 3, 3], dtype="float64")))
    bir.optimizer.SGD(0.5).minimize(loss)
    exe, scope = _run_startup(startup)
    feed = {"x": RNG.normal(size=(2, 3, 3, 4)), "t": RNG.normal(size=(2, 4, 3, 3))}
    (first,) = exe.run(main, feed=feed, fetch_list=[loss], scope=scope)
    for _ in range(20):
        (last,) = exe.run(main, feed=feed, fetch_list=[loss], scope=scope)
    assert np.asarray(last).item() < np.asarray(first).item()
    scale = np.asarray(scope.get("instance_norm_0.w_0"))
    assert not np.allclose(scale, 1.0)  # the scale learned


def test_instance_norm_computes_the_reference(progs):
    main, startup = progs
    x = bir.data("x", shape=[-1, 3, 2, 5], dtype="float32")
    y = bir.layers.instance_norm(x, epsilon=1e-3, param_attr=False, bias_attr=False)
    assert "Scale" not in _ops(main)[0].inputs
    exe, scope = _run_startup(startup)
    value = RNG.normal(size=(2, 3, 2, 5)).astype(np.float32)
    (got,) = exe.run(main, feed={"x": value}, fetch_list=[y], scope=scope)
    np.testing.assert_allclose(got, ref_instance_norm(value, None, None, 1e-3)["Y"], rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize(
    ("build", "message"),
    [
        (lambda x: bir.layers.group_norm(x, 0), r"layers.group_norm: groups must be a positive int"),
        (lambda x: bir.layers.group_norm(x, 3), r"layers.group_norm: group_norm: groups=3 must .* divide X's 4"),
        (lambda x: bir.layers.group_norm(x, 2, data_layout="NDHWC"), r"data_layout must be 'NCHW' or 'NHWC'"),
        (lambda x: bir.layers.instance_norm(x, param_attr=False), r"param_attr and bias_attr must be False together"),
        (lambda x: bir.layers.instance_norm(bir.layers.reshape(x, [-1])), r"must have rank 2 to 5"),
    ],
)
def test_group_norm_and_instance_norm_reject(progs, build, message):
    with pytest.raises(ShapeError, match=message):
        build(bir.data("x", shape=[-1, 4, 3, 3]))
