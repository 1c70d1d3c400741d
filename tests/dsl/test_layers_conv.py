"""Convolution and pooling layers (2-D and 3-D): the ops and parameters they build, their values on the CPU executor
against numpy, gradients against finite differences, small conv nets that learn, and bad arguments."""

import numpy as np
import pytest

import blockir as bir
from blockir.errors import BlockirError, ShapeError
from tests.dsl.test_backward_numeric import build, check_gradients
from tests.ops.cases_conv import ref_conv, ref_conv_transpose, ref_max_pool_with_index, ref_pool

RNG_X = np.random.default_rng(11)


def _types(main):
    return [op.type for op in main.global_block().ops]


def _run(main, startup, feed, fetch):
    scope = bir.Scope()
    exe = bir.Executor("cpu")
    exe.run(startup, scope=scope)
    return exe.run(main, feed=feed, fetch_list=fetch, scope=scope), scope


def test_conv2d_builds_the_filter_the_bias_and_the_activation(progs):
    main, startup = progs
    x = bir.data("img", shape=[-1, 3, 8, 8])
    y = bir.layers.conv2d(x, num_filters=4, filter_size=3, padding=1, act="relu")
    assert _types(main) == ["conv2d", "elementwise_add", "relu"]
    conv, add, _ = main.global_block().ops
    assert conv.input("Input") == ("img",) and conv.input("Filter") == ("conv2d_0.w_0",)
    assert conv.attr("strides") == (1, 1) and conv.attr("paddings") == (1, 1) and conv.attr("dilations") == (1, 1)
    assert conv.attr("groups") == 1 and conv.attr("padding_algorithm") == "EXPLICIT" and conv.attr("use_cudnn")
    assert add.input("Y") == ("conv2d_0.b_0",) and add.attr("axis") == 1
    assert y.shape == (-1, 4, 8, 8)
    block = main.global_block()
    assert block.var("conv2d_0.w_0").shape == (4, 3, 3, 3) and block.var("conv2d_0.b_0").shape == (4,)
    inits = {op.output("Out")[0]: op for op in startup.global_block().ops}
    normal = inits["conv2d_0.w_0"]
    assert normal.type == "gaussian_random" and normal.attr("mean") == 0.0
    assert normal.attr("std") == pytest.approx((2.0 / (3 * 3 * 3)) ** 0.5)  # Fluid: 2 / (kh * kw * C)
    assert inits["conv2d_0.b_0"].type == "fill_constant" and inits["conv2d_0.b_0"].attr("value") == 0.0
    bir.ir.verify(main)
    bir.ir.verify(startup)


def test_the_initial_filter_has_fluids_spread():
    main, startup = bir.Program(), bir.Program()
    with bir.unique_name.guard(), bir.program_guard(main, startup):
        bir.layers.conv2d(bir.data("img", shape=[-1, 8, 6, 6]), num_filters=64, filter_size=5, bias_attr=False)
    scope = bir.Scope()
    bir.Executor("cpu").run(startup, scope=scope)
    w = np.asarray(scope.get("conv2d_0.w_0"))
    assert w.shape == (64, 8, 5, 5) and abs(w.mean()) < 0.01
    assert w.std() == pytest.approx((2.0 / (5 * 5 * 8)) ** 0.5, rel=0.05)


def test_depthwise_conv2d_where_fluid_picks_it(progs):
    main, _ = progs
    x = bir.data("img", shape=[-1, 4, 6, 6])
    y = bir.layers.conv2d(x, num_filters=8, filter_size=3, groups=4, use_cudnn=False, bias_attr=False)
    bir.layers.conv2d(x, num_filters=8, filter_size=3, groups=4)  # cuDNN asked for: conv2d
    bir.layers.conv2d(x, num_filters=6, filter_size=3, groups=2, use_cudnn=False)
    assert _types(main) == ["depthwise_conv2d", "conv2d", "elementwise_add", "conv2d", "elementwise_add"]
    assert main.global_block().var("depthwise_conv2d_0.w_0").shape == (8, 1, 3, 3)
    assert y.shape == (-1, 8, 4, 4)


@pytest.mark.parametrize(
    ("padding", "paddings", "algorithm", "shape"),
    [
        ("same", (0, 0), "SAME", (-1, 2, 4, 5)),
        ("VALID", (0, 0), "VALID", (-1, 2, 3, 4)),
        (2, (2, 2), "EXPLICIT", (-1, 2, 5, 6)),
        ([1, 0], (1, 0), "EXPLICIT", (-1, 2, 4, 4)),
        ([1, 1, 2, 2], (1, 2), "EXPLICIT", (-1, 2, 4, 6)),
        ([0, 1, 2, 0], (0, 1, 2, 0), "EXPLICIT", (-1, 2, 3, 5)),
        ([[0, 0], [0, 0], [1, 0], [0, 2]], (1, 0, 0, 2), "EXPLICIT", (-1, 2, 3, 5)),
    ],
)
def test_conv2d_padding_forms(progs, padding, paddings, algorithm, shape):
    main, _ = progs
    y = bir.layers.conv2d(bir.data("img", shape=[-1, 3, 7, 9]), 2, [3, 3], stride=[2, 2], padding=padding)
    conv = main.global_block().ops[0]
    assert conv.attr("paddings") == paddings and conv.attr("padding_algorithm") == algorithm
    assert y.shape == shape


def test_conv2d_nhwc_adds_the_bias_on_the_last_dim(progs):
    main, _ = progs
    y = bir.layers.conv2d(
        bir.data("img", shape=[-1, 9, 7, 3]),
        2,
        3,
        padding=[[0, 0], [1, 1], [0, 0], [0, 0]],
        data_format="NHWC",
    )
    conv, add = main.global_block().ops
    assert conv.attr("data_format") == "NHWC" and conv.attr("paddings") == (1, 0) and add.attr("axis") == 3
    assert y.shape == (-1, 9, 5, 2)


def test_conv_and_pool_layers_compute_what_numpy_does(progs):
    main, startup = progs
    rng = np.random.default_rng(3)
    x = bir.data("img", shape=[-1, 2, 9, 8])
    conv = bir.layers.conv2d(x, 4, [3, 2], stride=[2, 1], padding=[1, 0, 1, 1], dilation=[1, 2], groups=2)
    pooled = bir.layers.pool2d(conv, pool_size=3, pool_type="avg", pool_stride=2, pool_padding=1, ceil_mode=True)
    glob = bir.layers.pool2d(conv, pool_type="max", global_pooling=True)
    nhwc = bir.layers.pool2d(
        bir.data("img_nhwc", shape=[-1, 9, 8, 2]), 2, "max", 2, "SAME", exclusive=False, data_format="NHWC"
    )
    adaptive = bir.layers.adaptive_pool2d(conv, [2, 3], pool_type="avg")
    amax, mask = bir.layers.adaptive_pool2d(conv, 2, require_index=True)
    img = rng.normal(size=(3, 2, 9, 8)).astype("float32")
    fetched, scope = _run(
        main,
        startup,
        {"img": img, "img_nhwc": img.transpose(0, 2, 3, 1)},
        [conv, pooled, glob, nhwc, adaptive, amax, mask],
    )
    w, b = np.asarray(scope.get("conv2d_0.w_0")), np.asarray(scope.get("conv2d_0.b_0"))
    expected_conv = ref_conv(img, w, [2, 1], [1, 0, 1, 1], [1, 2], groups=2) + b.reshape(1, -1, 1, 1)
    expected = [
        expected_conv,
        ref_pool(expected_conv, "avg", [3, 3], [2, 2], [1, 1], ceil_mode=True),
        ref_pool(expected_conv, "max", [1, 1], global_pooling=True),
        ref_pool(img.transpose(0, 2, 3, 1), "max", [2, 2], [2, 2], padding_algorithm="SAME", data_format="NHWC"),
        ref_pool(expected_conv, "avg", [2, 3], adaptive=True),
        *ref_max_pool_with_index(expected_conv, [2, 2], adaptive=True),
    ]
    for got, want, var in zip(fetched, expected, [conv, pooled, glob, nhwc, adaptive, amax, mask]):
        assert got.shape == want.shape and tuple(d for d in var.shape if d >= 0) == got.shape[1:]
        np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5)
    assert _types(main)[-2:] == ["pool2d", "max_pool2d_with_index"] and mask.dtype == "int32"


def test_a_small_conv_net_learns():
    main, startup = bir.Program(), bir.Program()
    main.random_seed = startup.random_seed = 5
    with bir.unique_name.guard(), bir.program_guard(main, startup):
        img = bir.data("img", shape=[-1, 1, 8, 8])
        label = bir.data("label", shape=[-1, 1], dtype="int64")
        h = bir.layers.conv2d(img, 4, 3, padding=1, act="relu")
        h = bir.layers.pool2d(h, 2, "max", 2)
        h = bir.layers.conv2d(h, 4, 3, groups=4, padding="SAME", use_cudnn=False, act="relu")  # depthwise
        h = bir.layers.adaptive_pool2d(h, 2, "avg")
        pred = bir.layers.fc(h, 2, act="softmax")
        loss = bir.layers.mean(bir.layers.cross_entropy(pred, label))
        bir.optimizer.SGD(learning_rate=0.5).minimize(loss)
    assert {"conv2d_grad", "depthwise_conv2d_grad", "pool2d_grad"} <= set(_types(main))
    rng = np.random.default_rng(0)
    images = rng.normal(scale=0.3, size=(32, 1, 8, 8)).astype("float32")
    labels = rng.integers(0, 2, size=(32, 1))
    images[labels[:, 0] == 1, :, 2:6, 2:6] += 1.0  # class 1: a bright square
    _learns(main, startup, {"img": images, "label": labels}, loss)


def _learns(main, startup, feed, loss):
    """25 training steps on ``feed`` from the startup program's values halve ``loss``."""
    scope = bir.Scope()
    exe = bir.Executor("cpu")
    exe.run(startup, scope=scope)
    losses = [float(exe.run(main, feed=feed, fetch_list=[loss], scope=scope)[0][0]) for _ in range(25)]
    assert all(np.isfinite(losses)) and losses[-1] < 0.5 * losses[0]


def test_pool2d_attributes(progs):
    main, _ = progs
    x = bir.data("img", shape=[-1, 3, -1, -1])
    y = bir.layers.pool2d(x, [2, 3], "avg", [1, 2], [1, 0, 0, 1], exclusive=False, use_cudnn=False)
    g = bir.layers.pool2d(x, pool_type="avg", global_pooling=True)
    op = main.global_block().ops[0]
    assert op.attr("ksize") == (2, 3) and op.attr("strides") == (1, 2) and op.attr("paddings") == (1, 0, 0, 1)
    assert op.attr("pooling_type") == "avg" and op.attr("exclusive") is False and op.attr("use_cudnn") is False
    assert y.shape == (-1, 3, -1, -1) and g.shape == (-1, 3, 1, 1)


@pytest.mark.parametrize(
    ("build", "error", "pattern"),
    [
        (lambda x: bir.layers.pool2d(x), ShapeError, r"layers.pool2d: pool_size must be given"),
        (lambda x: bir.layers.pool2d(x, 2, "min"), ShapeError, r"pool_type must be 'max' or 'avg'"),
        (lambda x: bir.layers.pool2d(x, 2, pool_padding="VALID", ceil_mode=True), ShapeError, r"'VALID' needs ceil"),
        (lambda x: bir.layers.pool2d(x, 6), ShapeError, r"layers.pool2d: pool2d: .*output H = 0"),
        (lambda x: bir.layers.pool2d(x, [2, 2, 2]), ShapeError, r"pool_size must be an int or a list of 2 ints"),
        (lambda x: bir.layers.conv2d(x, 4, 3, groups=2), ShapeError, r"3 channels, not divisible by groups=2"),
        (lambda x: bir.layers.conv2d(x, 0, 3), ShapeError, r"num_filters must be a positive int"),
        (lambda x: bir.layers.conv2d(x, 4, 3, padding="FULL"), ShapeError, r"'SAME' or 'VALID'"),
        (lambda x: bir.layers.conv2d(x, 4, 3, padding=[[1, 0], [0, 0], [0, 0], [0, 0]]), ShapeError, r"batch or chan"),
        (lambda x: bir.layers.conv2d(x, 4, 3, data_format="NCDHW"), ShapeError, r"'NCHW' or 'NHWC'"),
        (lambda x: bir.layers.conv2d(x, 4, 3, param_attr=False), ShapeError, r"filter cannot be omitted"),
        (lambda x: bir.layers.conv2d(x, 4, 7), ShapeError, r"layers.conv2d: conv2d: .*output H = -1"),
        (lambda x: bir.layers.conv2d("img", 4, 3), BlockirError, r"input must be a Variable"),
        (lambda x: bir.layers.adaptive_pool2d(x, 2, "avg", require_index=True), ShapeError, r"needs pool_type 'max'"),
    ],
)
def test_bad_arguments(progs, build, error, pattern):
    x = bir.data("img", shape=[-1, 3, 5, 5])
    with pytest.raises(error, match=pattern):
        build(x)


def test_conv2d_needs_a_known_channel_dim(progs):
    with pytest.raises(ShapeError, match=r"channel dim .* must be known"):
        bir.layers.conv2d(bir.data("img", shape=[-1, -1, 5, 5]), 4, 3)


# -- conv2d_transpose


def test_conv2d_transpose_builds_the_filter_the_bias_and_the_activation(progs):
    main, startup = progs
    x = bir.data("img", shape=[-1, 4, 5, 5])
    y = bir.layers.conv2d_transpose(x, num_filters=6, filter_size=3, stride=2, padding=1, act="relu")
    assert _types(main) == ["conv2d_transpose", "elementwise_add", "relu"]
    conv, add, _ = main.global_block().ops
    assert conv.input("Filter") == ("conv2d_transpose_0.w_0",) and conv.attr("output_size") == ()
    assert conv.attr("strides") == (2, 2) and conv.attr("paddings") == (1, 1) and conv.attr("groups") == 1
    assert add.input("Y") == ("conv2d_transpose_0.b_0",) and add.attr("axis") == 1
    assert main.global_block().var("conv2d_transpose_0.w_0").shape == (4, 6, 3, 3)  # [C, num_filters / groups, ...]
    assert y.shape == (-1, 6, 9, 9)  # (5 - 1) * 2 - 2 + 3
    inits = {op.output("Out")[0]: op for op in startup.global_block().ops}
    assert inits["conv2d_transpose_0.w_0"].type == "uniform_random"  # Xavier, Fluid's default
    bir.ir.verify(main)


def test_conv2d_transpose_filter_size_from_output_size_and_depthwise(progs):
    main, _ = progs
    x = bir.data("img", shape=[-1, 3, 4, 4])
    y = bir.layers.conv2d_transpose(x, 5, output_size=10, stride=2, padding=[1, 0], bias_attr=False)
    conv = main.global_block().ops[0]
    assert conv.attr("output_size") == (10, 10) and y.shape == (-1, 5, 10, 10)
    # Fluid: (10 - 3 * 2 + 2 * pad - 1) // 1 + 1
    assert main.global_block().var("conv2d_transpose_0.w_0").shape == (3, 5, 6, 4)
    d = bir.layers.conv2d_transpose(x, 3, filter_size=3, groups=3, use_cudnn=False, data_format="NCHW")
    assert _types(main)[-2:] == ["depthwise_conv2d_transpose", "elementwise_add"] and d.shape == (-1, 3, 6, 6)


def test_conv2d_transpose_layer_computes_what_the_reference_does_and_learns(progs):
    main, startup = progs
    x = bir.data("img", shape=[-1, 2, 3, 4], dtype="float64")
    target = bir.data("target", shape=[-1, 4, 6, 6], dtype="float64")
    y = bir.layers.conv2d_transpose(x, 4, filter_size=[2, 3], stride=[2, 1], groups=2, bias_attr=False)
    z = bir.layers.conv2d_transpose(x, 3, filter_size=3, padding="SAME", stride=2, data_format="NCHW")
    loss = bir.layers.mean(bir.layers.square_error_cost(y, target))
    bir.optimizer.SGD(0.5).minimize(loss)
    img = RNG_X.uniform(-1, 1, (2, 2, 3, 4))
    feed = {"img": img, "target": ref_conv_transpose(img, RNG_X.uniform(-1, 1, (2, 2, 2, 3)), (2, 1), groups=2)}
    exe, scope = bir.Executor("cpu"), bir.Scope()
    exe.run(startup, scope=scope)
    w = np.asarray(scope.get("conv2d_transpose_0.w_0")).copy()
    got_y, got_z, first = exe.run(main, feed=feed, fetch_list=[y, z, loss], scope=scope)
    np.testing.assert_allclose(got_y, ref_conv_transpose(img, w, strides=(2, 1), groups=2), rtol=1e-10)
    assert np.asarray(got_z).shape == (2, 3, 5, 8)  # SAME: paddings [1, 1], [0, 1] resolved on Input, as Paddle
    for _ in range(100):
        (last,) = exe.run(main, feed=feed, fetch_list=[loss], scope=scope)
    assert np.asarray(last).item() < 0.05 * np.asarray(first).item()


@pytest.mark.parametrize(
    ("build", "pattern"),
    [
        (lambda x: bir.layers.conv2d_transpose(x, 4), r"filter_size=None needs output_size"),
        (
            lambda x: bir.layers.conv2d_transpose(x, 4, filter_size=3, groups=2),
            r"3 channels and num_filters=4: both must be",
        ),
        (lambda x: bir.layers.conv2d_transpose(x, 4, filter_size=3, param_attr=False), r"filter cannot be omitted"),
        (lambda x: bir.layers.conv2d_transpose(x, 4, output_size=2, stride=2), r"the filter size \[-6, -6\] must be"),
        (lambda x: bir.layers.conv2d_transpose(x, 4, 20, 3), r"conv2d_transpose: .*output_size H = 20"),
        (lambda x: bir.layers.conv2d_transpose(x, 4, filter_size=3, data_format="NCDHW"), r"'NCHW' or 'NHWC'"),
    ],
)
def test_conv2d_transpose_bad_arguments(progs, build, pattern):
    x = bir.data("img", shape=[-1, 3, 5, 5])
    with pytest.raises(ShapeError, match=pattern):
        build(x)


# -- conv3d, conv3d_transpose, pool3d, adaptive_pool3d


def test_conv3d_and_conv3d_transpose_build_the_filter_the_bias_and_the_activation(progs):
    main, startup = progs
    x = bir.data("vol", shape=[-1, 2, 5, 6, 7])
    y = bir.layers.conv3d(x, num_filters=4, filter_size=3, padding=1, act="relu")
    t = bir.layers.conv3d_transpose(y, num_filters=6, filter_size=3, stride=2, padding=1, bias_attr=False)
    assert _types(main) == ["conv3d", "elementwise_add", "relu", "conv3d_transpose"]
    conv, add, _, transpose = main.global_block().ops
    assert conv.input("Filter") == ("conv3d_0.w_0",) and conv.attr("data_format") == "NCDHW"
    assert conv.attr("strides") == (1, 1, 1) and conv.attr("paddings") == (1, 1, 1) and conv.attr("groups") == 1
    assert conv.attr("dilations") == (1, 1, 1) and conv.attr("padding_algorithm") == "EXPLICIT"
    assert add.input("Y") == ("conv3d_0.b_0",) and add.attr("axis") == 1
    assert transpose.input("Filter") == ("conv3d_transpose_0.w_0",) and transpose.attr("output_size") == ()
    assert transpose.attr("strides") == (2, 2, 2) and transpose.attr("paddings") == (1, 1, 1)
    assert y.shape == (-1, 4, 5, 6, 7) and t.shape == (-1, 6, 9, 11, 13)  # (L - 1) * 2 - 2 + 3
    block = main.global_block()
    assert block.var("conv3d_0.w_0").shape == (4, 2, 3, 3, 3) and block.var("conv3d_0.b_0").shape == (4,)
    assert block.var("conv3d_transpose_0.w_0").shape == (4, 6, 3, 3, 3)  # [C, num_filters / groups, ...]
    inits = {op.output("Out")[0]: op for op in startup.global_block().ops}
    assert inits["conv3d_0.w_0"].type == "gaussian_random"
    assert inits["conv3d_0.w_0"].attr("std") == pytest.approx((2.0 / (3 * 3 * 3 * 2)) ** 0.5)  # 2 / (k^3 * C)
    assert inits["conv3d_transpose_0.w_0"].type == "uniform_random"  # Xavier, Fluid's default
    bir.ir.verify(main)
    bir.ir.verify(startup)


@pytest.mark.parametrize(
    ("padding", "data_format", "paddings", "algorithm", "shape"),
    [
        ("same", "NCDHW", (0, 0, 0), "SAME", (-1, 2, 4, 5, 4)),
        ("VALID", "NCDHW", (0, 0, 0), "VALID", (-1, 2, 3, 4, 3)),
        (1, "NCDHW", (1, 1, 1), "EXPLICIT", (-1, 2, 4, 5, 4)),
        ([1, 0, 2], "NCDHW", (1, 0, 2), "EXPLICIT", (-1, 2, 4, 4, 5)),
        ([1, 1, 0, 0, 2, 2], "NCDHW", (1, 0, 2), "EXPLICIT", (-1, 2, 4, 4, 5)),
        ([0, 1, 2, 0, 1, 1], "NCDHW", (0, 1, 2, 0, 1, 1), "EXPLICIT", (-1, 2, 3, 5, 4)),
        ([[0, 0], [0, 0], [1, 0], [0, 2], [1, 1]], "NCDHW", (1, 0, 0, 2, 1, 1), "EXPLICIT", (-1, 2, 3, 5, 4)),
        ([[0, 0], [1, 0], [0, 2], [1, 1], [0, 0]], "NDHWC", (1, 0, 0, 2, 1, 1), "EXPLICIT", (-1, 3, 5, 4, 2)),
    ],
)
def test_conv3d_padding_forms(progs, padding, data_format, paddings, algorithm, shape):
    main, _ = progs
    x = bir.data("vol", shape=[-1, 3, 7, 9, 8] if data_format == "NCDHW" else [-1, 7, 9, 8, 3])
    y = bir.layers.conv3d(x, 2, 3, stride=2, padding=padding, data_format=data_format)
    conv, add = main.global_block().ops
    assert conv.attr("paddings") == paddings and conv.attr("padding_algorithm") == algorithm
    assert add.attr("axis") == (1 if data_format == "NCDHW" else 4) and y.shape == shape


def test_3d_layers_compute_what_numpy_does(progs):
    main, startup = progs
    rng = np.random.default_rng(4)
    x = bir.data("vol", shape=[-1, 2, 5, 6, 4])
    x_last = bir.data("vol_ndhwc", shape=[-1, 5, 6, 4, 2])
    conv = bir.layers.conv3d(
        x, 4, [3, 2, 2], stride=[1, 2, 1], padding=[1, 0, 0, 1, 1, 1], dilation=[1, 1, 2], groups=2
    )
    transposed = bir.layers.conv3d_transpose(
        x, 4, filter_size=[2, 3, 2], padding=[0, 1, 0], stride=[2, 1, 2], dilation=[1, 1, 2], groups=2, bias_attr=False
    )
    transposed_last = bir.layers.conv3d_transpose(x_last, 3, output_size=[10, 12, 8], stride=2, data_format="NDHWC")
    pooled = bir.layers.pool3d(conv, 2, "avg", 2, 1, ceil_mode=True, exclusive=False)
    glob = bir.layers.pool3d(conv, pool_type="max", global_pooling=True)
    pooled_last = bir.layers.pool3d(x_last, 2, "max", 2, "SAME", data_format="NDHWC")
    adaptive = bir.layers.adaptive_pool3d(conv, [2, 3, 2], pool_type="avg")
    amax, mask = bir.layers.adaptive_pool3d(conv, 2, require_index=True)
    fetch = [conv, transposed, transposed_last, pooled, glob, pooled_last, adaptive, amax, mask]
    vol = rng.normal(size=(3, 2, 5, 6, 4)).astype("float32")
    vol_last = vol.transpose(0, 2, 3, 4, 1)
    fetched, scope = _run(main, startup, {"vol": vol, "vol_ndhwc": vol_last}, fetch)
    w, wt, wt_last, b, bt_last = (
        np.asarray(scope.get(name))
        for name in (
            "conv3d_0.w_0",
            "conv3d_transpose_0.w_0",
            "conv3d_transpose_1.w_0",
            "conv3d_0.b_0",
            "conv3d_transpose_1.b_0",
        )
    )
    assert wt_last.shape == (2, 3, 2, 2, 2)  # from output_size: (10 - 4 * 2 - 1) // 1 + 1, ...
    expected_conv = ref_conv(vol, w, [1, 2, 1], [1, 0, 0, 1, 1, 1], [1, 1, 2], groups=2)
    expected_conv += b.reshape(1, -1, 1, 1, 1)
    expected = [
        expected_conv,
        ref_conv_transpose(vol, wt, [2, 1, 2], [0, 1, 0], [1, 1, 2], groups=2),
        ref_conv_transpose(vol_last, wt_last, [2, 2, 2], output_size=[10, 12, 8], data_format="NDHWC") + bt_last,
        ref_pool(expected_conv, "avg", [2, 2, 2], [2, 2, 2], [1, 1, 1], exclusive=False, ceil_mode=True),
        ref_pool(expected_conv, "max", [1, 1, 1], global_pooling=True),
        ref_pool(vol_last, "max", [2, 2, 2], [2, 2, 2], padding_algorithm="SAME", data_format="NDHWC"),
        ref_pool(expected_conv, "avg", [2, 3, 2], adaptive=True),
        *ref_max_pool_with_index(expected_conv, [2, 2, 2], adaptive=True),
    ]
    for got, want, var in zip(fetched, expected, fetch):
        assert got.shape == want.shape and tuple(d for d in var.shape if d >= 0) == got.shape[1:], var.name
        np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5, err_msg=var.name)
    assert _types(main)[-2:] == ["pool3d", "max_pool3d_with_index"] and mask.dtype == "int32"


def test_3d_layers_gradients_match_finite_differences():
    def body():
        x = bir.data("vol", shape=[-1, 1, 4, 4, 3], dtype="float64")
        target = bir.data("target", shape=[-1, 2, 1, 2, 1], dtype="float64")
        h = bir.layers.conv3d(x, 2, 2, padding=[1, 0, 1, 0, 0, 1], act="tanh")  # [N, 2, 4, 4, 3]
        h = bir.layers.pool3d(h, 2, "avg", [2, 2, 1])  # [N, 2, 2, 2, 2]
        h = bir.layers.conv3d_transpose(h, 2, filter_size=2, stride=[2, 2, 1], groups=2, act="tanh")  # [N, 2, 4, 4, 3]
        h = bir.layers.adaptive_pool3d(h, [1, 2, 1], "max")
        return bir.layers.mean(bir.layers.square_error_cost(h, target))

    model = build(body)
    grad_types = {op.type for op in model.main.global_block().ops if op.type.endswith("_grad")}
    assert {"conv3d_grad", "pool3d_grad", "conv3d_transpose_grad", "max_pool3d_with_index_grad"} <= grad_types
    rng = np.random.default_rng(5)
    check_gradients(model, {"vol": rng.normal(size=(2, 1, 4, 4, 3)), "target": rng.normal(size=(2, 2, 1, 2, 1))})


def test_a_small_3d_conv_net_learns():
    main, startup = bir.Program(), bir.Program()
    main.random_seed = startup.random_seed = 5
    with bir.unique_name.guard(), bir.program_guard(main, startup):
        vol = bir.data("vol", shape=[-1, 1, 6, 6, 6])
        label = bir.data("label", shape=[-1, 1], dtype="int64")
        h = bir.layers.conv3d(vol, 4, 3, padding=1, act="relu")
        h = bir.layers.pool3d(h, 2, "max", 2)
        h = bir.layers.conv3d_transpose(h, 4, filter_size=2, stride=2, act="relu")
        h = bir.layers.adaptive_pool3d(h, 2, "avg")
        pred = bir.layers.fc(h, 2, act="softmax")
        loss = bir.layers.mean(bir.layers.cross_entropy(pred, label))
        bir.optimizer.SGD(learning_rate=0.5).minimize(loss)
    assert {"conv3d_grad", "pool3d_grad", "conv3d_transpose_grad"} <= set(_types(main))
    rng = np.random.default_rng(0)
    vols = rng.normal(scale=0.3, size=(32, 1, 6, 6, 6)).astype("float32")
    labels = rng.integers(0, 2, size=(32, 1))
    vols[labels[:, 0] == 1, :, 1:5, 1:5, 1:5] += 1.0  # class 1: a bright cube
    _learns(main, startup, {"vol": vols, "label": labels}, loss)


@pytest.mark.parametrize(
    ("build", "error", "pattern"),
    [
        (lambda x: bir.layers.pool3d(x), ShapeError, r"layers.pool3d: pool_size must be given"),
        (lambda x: bir.layers.pool3d(x, 2, "min"), ShapeError, r"pool_type must be 'max' or 'avg'"),
        (lambda x: bir.layers.pool3d(x, [2, 2]), ShapeError, r"pool_size must be an int or a list of 3 ints"),
        (lambda x: bir.layers.pool3d(x, 2, pool_padding="VALID", ceil_mode=True), ShapeError, r"'VALID' needs ceil"),
        (lambda x: bir.layers.pool3d(x, 5), ShapeError, r"layers.pool3d: pool3d: .*output D = 0"),
        (lambda x: bir.layers.pool3d(x, 2, data_format="NCHW"), ShapeError, r"'NCDHW' or 'NDHWC', got 'NCHW'"),
        (lambda x: bir.layers.conv3d(x, 4, 3, groups=2), ShapeError, r"3 channels, not divisible by groups=2"),
        (lambda x: bir.layers.conv3d(x, 4, [3, 3]), ShapeError, r"filter_size must be an int or a list of 3 ints"),
        (lambda x: bir.layers.conv3d(x, 4, 3, padding=[1, 1, 1, 1]), ShapeError, r"padding must be an int or a list"),
        (lambda x: bir.layers.conv3d(x, 4, 3, padding=[[1, 0], [0, 0], [0, 0], [0, 0], [0, 0]]), ShapeError, r"batch"),
        (lambda x: bir.layers.conv3d(x, 4, 5), ShapeError, r"layers.conv3d: conv3d: .*output D = 0"),
        (lambda x: bir.layers.conv3d(x, 4, 3, param_attr=False), ShapeError, r"filter cannot be omitted"),
        (lambda x: bir.layers.conv3d(x, 4, 3, use_cudnn=1), ShapeError, r"use_cudnn must be True or False"),
        (lambda x: bir.layers.conv3d("vol", 4, 3), BlockirError, r"input must be a Variable"),
        (lambda x: bir.layers.conv3d_transpose(x, 4), ShapeError, r"filter_size=None needs output_size"),
        (lambda x: bir.layers.conv3d_transpose(x, 4, 3, groups=2), ShapeError, r"3 channels and num_filters=4"),
        (lambda x: bir.layers.conv3d_transpose(x, 4, [9, 9], 3), ShapeError, r"output_size must be an int or a list"),
        (lambda x: bir.layers.conv3d_transpose(x, 4, 20, 3), ShapeError, r"conv3d_transpose: .*output_size D = 20"),
        (lambda x: bir.layers.adaptive_pool3d(x, 2, "avg", require_index=True), ShapeError, r"needs pool_type 'max'"),
        (lambda x: bir.layers.adaptive_pool3d(x, [2, 2]), ShapeError, r"pool_size must be an int or a list of 3"),
    ],
)
def test_3d_bad_arguments(progs, build, error, pattern):
    x = bir.data("vol", shape=[-1, 3, 4, 5, 5])
    with pytest.raises(error, match=pattern):
        build(x)


def test_3d_layers_need_5d_inputs(progs):
    image = bir.data("img", shape=[-1, 3, 5, 5])
    with pytest.raises(ShapeError, match=r"layers.conv3d: input 'img' of shape \[-1, 3, 5, 5\] must be 5-D \(NCDHW\)"):
        bir.layers.conv3d(image, 4, 3)
    with pytest.raises(ShapeError, match=r"layers.max_pool3d_with_index: input 'img' .* must be 5-D"):
        bir.layers.adaptive_pool3d(image, 2)
